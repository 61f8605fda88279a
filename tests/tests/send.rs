//! `ubtrfs send` judged by the kernel.
//!
//! * Committed fixtures (no root): every read-only snapshot gives a stream
//!   that parses (crc32c, TLVs) in v1, v2 and v2 with compressed data;
//!   writable subvolumes are refused; a corrupted block fails the send with
//!   its location and leaves no output file.
//! * Kernel fixtures and kernel-made snapshot scenarios (root): every
//!   read-only snapshot is sent by ubtrfs (from the unmounted image) and by
//!   the kernel; `btrfs receive --dump` parses both; the streams have the
//!   same commands and data ranges (most are byte-identical); both are
//!   received into a fresh kernel btrfs and the manifests must equal the
//!   source snapshot's (content, modes, owners, times, xattrs, links) and
//!   each other's (hole layout and directory sizes included).
//! * Incremental (root): seeded random changes made by the kernel between
//!   snapshots (see tests/fixtures/send_scenarios.py); the full stream and
//!   then each incremental stream are received and every received snapshot
//!   must equal its source. The seeds of failures are printed.
//!
//! UBTRFS_SEND_SEEDS=N sets the number of random scenarios (default 200),
//! UBTRFS_SEND_SEED=S runs only seed S.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use ubtrfs_oracle::send_support::*;
use ubtrfs_oracle::*;

fn have_btrfs_progs() -> bool {
    Command::new("btrfs")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

const VARIANTS: [(&str, &[&str]); 3] = [
    ("v1", &[]),
    ("v2", &["--proto", "2"]),
    ("c", &["--compressed-data"]),
];

#[test]
fn send_committed_snapshots_give_valid_streams() {
    let dir = scratch_dir("send-committed");
    let mut n = 0;
    for f in committed_fixtures() {
        let ia = f.image_args(None);
        let snaps = readonly_snapshots(&ia);
        assert!(!snaps.is_empty(), "{}: no read-only snapshot", f.name);
        for s in &snaps {
            for (v, args) in VARIANTS {
                let out = dir.join(format!("{}-{s}-{v}", f.name));
                ubtrfs_send(&ia, args, s, &out).unwrap_or_else(|e| panic!("{}: {e}", f.name));
                let bytes = std::fs::read(&out).unwrap();
                let (ver, cmds) =
                    parse_stream(&bytes).unwrap_or_else(|e| panic!("{} {s} {v}: {e}", f.name));
                assert_eq!(ver, if v == "v1" { 1 } else { 2 });
                assert_eq!(cmds.first().map(|c| c.cmd), Some(1), "starts with SUBVOL");
                assert_eq!(cmds.last().map(|c| c.cmd), Some(21), "ends with END");
                if have_btrfs_progs() {
                    receive_dump(&out).unwrap_or_else(|e| panic!("{} {s} {v}: {e}", f.name));
                }
                n += 1;
            }
        }
        // Writable subvolumes are refused, as the kernel refuses them.
        let writable: Vec<String> = subvolumes(&ia)
            .iter()
            .filter(|s| s["readonly"] == false)
            .map(|s| s["path"].as_str().unwrap().to_string())
            .collect();
        for w in writable {
            let out = dir.join("refused");
            let err = ubtrfs_send(&ia, &[], &w, &out).expect_err("writable subvolume sent");
            assert!(err.contains("not read-only"), "{}: {err}", f.name);
            assert!(!out.exists(), "refused send left {}", out.display());
        }
    }
    eprintln!("{n} streams parsed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn send_corrupt_block_fails_with_location() {
    let dir = scratch_dir("send-corrupt");
    let img = committed_fixture_copy("small-crc32c", &dir).devices()[0].clone();
    // The root block of snap1's tree, on every copy.
    let fs = ubtrfs_engine::Filesystem::open(&img, &Default::default()).unwrap();
    let sub = ubtrfs_engine::send::subvolume_by_path(&fs, b"snap1").unwrap();
    let tree = fs.tree(sub.id).unwrap();
    let piece = fs
        .info
        .chunks
        .map(tree.bytenr, fs.info.nodesize as u64)
        .unwrap();
    let locs = match piece.placement {
        ubtrfs_engine::io::volumes::Placement::Mirrors(m) => m,
        other => panic!("unexpected placement {other:?}"),
    };
    drop(fs);
    let file = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    for l in &locs {
        file.write_all_at(&[0xde, 0xad, 0xbe, 0xef], l.physical + 200)
            .unwrap();
    }
    drop(file);
    let out = dir.join("stream");
    let err = ubtrfs_send(&[img.display().to_string()], &[], "snap1", &out)
        .expect_err("send of a corrupt tree");
    assert!(
        err.contains(&format!("{}", tree.bytenr)) && err.contains("corrupt"),
        "error does not name the block: {err}"
    );
    assert!(!out.exists(), "failed send left its output file");
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------ full

/// Sends one snapshot with ubtrfs and the kernel in every variant,
/// compares the streams, receives both and compares the manifests.
struct FullCheck<'a> {
    name: String,
    image_args: Vec<String>,
    /// Where the source is mounted (for the kernel's send).
    mount: &'a Mount,
    /// The source snapshot's manifest, rooted at the snapshot.
    source: Vec<String>,
    work: PathBuf,
    recv: &'a Path,
}

#[derive(Default)]
struct Tally {
    streams: usize,
    identical: usize,
    clone_vs_write: usize,
    received: usize,
    failures: Vec<String>,
}

impl FullCheck<'_> {
    fn run(&self, snap: &str, t: &mut Tally) {
        for (v, args) in VARIANTS {
            let tag = format!("{} {snap} {v}", self.name);
            let ours = self.work.join(format!("u-{v}"));
            let theirs = self.work.join(format!("k-{v}"));
            if let Err(e) = ubtrfs_send(&self.image_args, args, snap, &ours) {
                t.failures.push(format!("{tag}: ubtrfs send: {e}"));
                continue;
            }
            if let Err(e) = receive_dump(&ours) {
                t.failures.push(format!("{tag}: receive --dump: {e}"));
                continue;
            }
            kernel_send(&self.mount.path(snap), args, &theirs)
                .unwrap_or_else(|e| panic!("{tag}: {e}"));
            t.streams += 1;
            match compare_streams(
                &std::fs::read(&theirs).unwrap(),
                &std::fs::read(&ours).unwrap(),
            ) {
                Ok(m) => {
                    if m.identical {
                        t.identical += 1;
                    }
                    t.clone_vs_write += m.clone_vs_write;
                }
                Err(e) => t.failures.push(format!("{tag}: streams differ:\n  {e}")),
            }
            // Receive both and compare.
            let base = self
                .recv
                .join(format!("{}-{}-{v}", self.name, snap.replace('/', "_")));
            let (ud, kd) = (base.join("u"), base.join("k"));
            if let Err(e) = receive(&ours, &ud) {
                t.failures
                    .push(format!("{tag}: receive of our stream: {e}"));
                continue;
            }
            receive(&theirs, &kd).unwrap_or_else(|e| panic!("{tag}: kernel stream: {e}"));
            let leaf = snap.rsplit('/').next().unwrap();
            let got = manifest_of(&ud.join(leaf));
            let kernel_got = manifest_of(&kd.join(leaf));
            let vs_source = Ignore {
                fields: vec!["ino", "data"],
                dir_size: true,
            };
            if let Err(d) = compare_manifests(&self.source, &got, &vs_source) {
                t.failures.push(format!("{tag}: received != source: {d}"));
            }
            let vs_kernel = Ignore {
                fields: vec!["ino"],
                dir_size: false,
            };
            if let Err(d) = compare_manifests(&kernel_got, &got, &vs_kernel) {
                t.failures
                    .push(format!("{tag}: received != kernel's stream received: {d}"));
            }
            t.received += 1;
            for d in [&ud, &kd] {
                let _ = Command::new("btrfs")
                    .args(["subvolume", "delete", "-c"])
                    .arg(d.join(leaf))
                    .output();
            }
        }
    }
}

fn report(what: &str, t: &Tally) {
    eprintln!(
        "{what}: {} stream pairs, {} byte-identical to the kernel's, {} data commands clone-vs-write, {} received and compared",
        t.streams, t.identical, t.clone_vs_write, t.received
    );
    assert!(
        t.failures.is_empty(),
        "{} failures:\n{}",
        t.failures.len(),
        t.failures.join("\n")
    );
}

/// A scratch directory `what`, and the kernel's read-write mount of a new
/// 4 GiB image in it (recv.img) to receive streams into.
fn receiving(what: &str) -> (PathBuf, Mount) {
    let work = scratch_dir(what);
    let rimg = work.join("recv.img");
    mkfs(&rimg, "4G", &[]);
    let recv = Mount::images(std::slice::from_ref(&rimg), "", false);
    (work, recv)
}

#[test]
fn send_full_kernel_fixture_snapshots_round_trip() {
    skip_unless!(kernel_available);
    let (work, recv) = receiving("send-full");
    let mut t = Tally::default();
    for f in kernel_fixtures() {
        let ia = f.image_args(None);
        let snaps = readonly_snapshots(&ia);
        let m = Mount::images(&f.devices(), "", true);
        for s in &snaps {
            let source =
                without_placeholders(&sub_manifest(&f.kernel_manifest(), &format!("/{s}")));
            let c = FullCheck {
                name: f.name.clone(),
                image_args: ia.clone(),
                mount: &m,
                source,
                work: work.clone(),
                recv: &recv.dir,
            };
            c.run(s, &mut t);
        }
        m.unmount();
    }
    recv.unmount();
    let _ = std::fs::remove_dir_all(&work);
    report("kernel fixtures", &t);
}

/// A kernel-made image with the send scenarios (populate.py's sets in a
/// subvolume, snapshots vol-ro and vol-ro2), built once per configuration.
fn rich_image(
    work: &Path,
    name: &str,
    mkfs_opts: &[&str],
    mount_opts: &str,
    sets: &[&str],
) -> PathBuf {
    let img = work.join(format!("{name}.img"));
    mkfs(&img, "2G", mkfs_opts);
    let m = Mount::images(std::slice::from_ref(&img), mount_opts, false);
    run(Command::new("python3")
        .arg(repo_root().join("tests/fixtures/send_scenarios.py"))
        .arg("rich")
        .arg(&m.dir)
        .arg("vol")
        .args(sets))
    .unwrap_or_else(|e| panic!("{e}"));
    m.unmount();
    img
}

#[test]
fn send_full_and_incremental_rich_scenarios() {
    skip_unless!(kernel_available);
    let (work, recv) = receiving("send-rich");
    let configs: [(&str, &[&str], &str, &[&str]); 4] = [
        ("plain", &[], "", &["rich"]),
        ("zstd", &[], "compress=zstd", &["rich", "compress"]),
        (
            "holes-4k",
            &["-O", "^no-holes", "-n", "4096"],
            "",
            &["rich"],
        ),
        (
            "lzo-force",
            &[],
            "compress-force=lzo",
            &["rich-small", "compress-small"],
        ),
    ];
    let mut t = Tally::default();
    let mut incr_fail = Vec::new();
    for (name, mk, mo, sets) in configs {
        let img = rich_image(&work, name, mk, mo, sets);
        let ia = vec![img.display().to_string()];
        let m = Mount::images(std::slice::from_ref(&img), "", true);
        let mut sources = Vec::new();
        for s in ["vol-ro", "vol-ro2"] {
            let source = without_placeholders(&manifest_of(&m.path(s)));
            let c = FullCheck {
                name: name.to_string(),
                image_args: ia.clone(),
                mount: &m,
                source: source.clone(),
                work: work.clone(),
                recv: &recv.dir,
            };
            c.run(s, &mut t);
            sources.push(source);
        }
        m.unmount();
        // Incremental vol-ro -> vol-ro2 in both protocols.
        for (v, args) in [("v1", &[][..]), ("v2", &["--proto", "2"][..])] {
            let tag = format!("{name} incremental {v}");
            let dest = recv.dir.join(format!("{name}-incr-{v}"));
            let full = work.join("full");
            let inc = work.join("inc");
            let mut a = args.to_vec();
            let res = ubtrfs_send(&ia, &a, "vol-ro", &full)
                .and_then(|_| {
                    a.extend(["-p", "vol-ro"]);
                    ubtrfs_send(&ia, &a, "vol-ro2", &inc)
                })
                .and_then(|_| receive_dump(&inc).map(|_| ()))
                .and_then(|_| receive(&full, &dest))
                .and_then(|_| receive(&inc, &dest));
            if let Err(e) = res {
                incr_fail.push(format!("{tag}: {e}"));
                continue;
            }
            let got = manifest_of(&dest.join("vol-ro2"));
            let ig = Ignore {
                fields: vec!["ino", "data"],
                dir_size: true,
            };
            if let Err(d) = compare_manifests(&sources[1], &got, &ig) {
                incr_fail.push(format!("{tag}: received != source: {d}"));
            }
        }
        let _ = std::fs::remove_file(&img);
    }
    recv.unmount();
    let _ = std::fs::remove_dir_all(&work);
    t.failures.extend(incr_fail);
    report("rich scenarios", &t);
}

// ------------------------------------------------------------------ incremental

const STEPS: usize = 4;
const BATCH: usize = 50;

#[test]
fn send_incremental_random_scenarios() {
    skip_unless!(kernel_available);
    let work = scratch_dir("send-incr");
    let seeds = seeds("UBTRFS_SEND_SEED", Some("UBTRFS_SEND_SEEDS"), 200);
    let mut failed: Vec<(u64, String)> = Vec::new();
    let mut streams = 0;
    for (bi, batch) in seeds.chunks(BATCH).enumerate() {
        // Every fourth batch on a compressed filesystem (encoded writes).
        let t_start = std::time::Instant::now();
        let compress = bi % 4 == 3;
        let mount_opts = if compress { "compress=zstd" } else { "" };
        let img = work.join("src.img");
        let names: Vec<String> = batch.iter().map(|s| s.to_string()).collect();
        scenario_image(&img, &names, STEPS, mount_opts);
        let t_built = std::time::Instant::now();
        let source = {
            let m = Mount::images(std::slice::from_ref(&img), "", true);
            let l = manifest_of(&m.dir);
            m.unmount();
            split_manifest(&l, 1)
        };
        let ia = vec![img.display().to_string()];
        let rimg = work.join("recv.img");
        mkfs(&rimg, "2G", &[]);
        let recv = Mount::images(std::slice::from_ref(&rimg), "", false);
        // Send and receive everything, then compare with one manifest.
        let mut b = ScenarioBatch::default();
        for &seed in batch {
            let proto = if seed % 2 == 0 { "1" } else { "2" };
            let mut base: Vec<&str> = vec!["--proto", proto];
            if compress && seed % 2 == 1 {
                base.push("--compressed-data");
            }
            let dest = recv.dir.join(format!("r{seed}"));
            b.send_steps(seed, STEPS, &base, str::to_string, |snap, args| {
                let out = work.join(format!("stream-{snap}"));
                let r = ubtrfs_send(&ia, args, snap, &out)
                    .and_then(|_| receive_dump(&out).map(|_| ()))
                    .and_then(|_| receive(&out, &dest));
                let _ = std::fs::remove_file(&out);
                r
            });
        }
        let t_sent = std::time::Instant::now();
        let got = split_manifest(&manifest_of(&recv.dir), 2);
        b.compare(&source, |seed, snap, want| {
            let have = got
                .get(&format!("/r{seed}/{snap}"))
                .cloned()
                .unwrap_or_default();
            let ig = Ignore {
                fields: vec!["ino", "data"],
                dir_size: false,
            };
            compare_manifests(want, &have, &ig).map(|_| ())
        });
        b.finish(&mut failed, &mut streams);
        eprintln!(
            "  batch {bi}: built in {:.1?}, sent and received in {:.1?}, compared in {:.1?}",
            t_built - t_start,
            t_sent - t_built,
            t_sent.elapsed()
        );
        recv.unmount();
        let _ = std::fs::remove_file(&rimg);
        let _ = std::fs::remove_file(&img);
        eprintln!(
            "incremental scenarios: {} of {} seeds done, {} failed",
            (bi * BATCH + batch.len()).min(seeds.len()),
            seeds.len(),
            failed.len()
        );
    }
    let _ = std::fs::remove_dir_all(&work);
    assert_scenarios(seeds.len(), streams, &failed, "UBTRFS_SEND_SEED");
}
