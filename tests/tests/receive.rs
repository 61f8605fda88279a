//! `ubtrfs receive` judged by the kernel.
//!
//! * Dump (btrfs-progs, no root): `ubtrfs receive --dump` prints every
//!   committed fixture's streams (full and incremental, v1, v2, v2 with
//!   compressed data) exactly as `btrfs receive --dump`.
//! * Bad streams (btrfs-progs, no root): truncated, corrupted, unknown
//!   commands, escaping paths, clones from a missing subvolume and a full
//!   filesystem stop with an error naming the stream offset; the image
//!   passes `btrfs check`, and the partial subvolume is writable and not
//!   marked received.
//! * Kernel fixtures (root): the kernel's `btrfs send` of every read-only
//!   snapshot, full, incremental (-p) and with a clone source (-c), v1 and
//!   v2 with compressed data, received by `ubtrfs receive` into an image
//!   made by `ubtrfs mkfs` and into a copy of the kernel-made fixture:
//!   `btrfs check` clean, and the kernel mount shows each received
//!   subvolume as the kernel's own `btrfs receive` makes it from the same
//!   streams (manifests with SEEK_DATA/HOLE maps and directory sizes),
//!   read-only with the same received UUID, the same shared and exclusive
//!   bytes (`btrfs fi du`: clones share) and compressed extents where the
//!   kernel's have them. Then the kernel's receive
//!   applies the incremental streams on top of a snapshot ubtrfs received,
//!   and `ubtrfs send` of a received snapshot is received by the kernel.
//!   UBTRFS_RECEIVE_FIXTURES=all runs every fixture (default: a few).
//! * Seeded scenarios (root): tests/fixtures/send_scenarios.py changes a
//!   tree between snapshots; the kernel sends the full and incremental
//!   streams and ubtrfs receives them; every received snapshot must equal
//!   its source (directories whose times the stream does not send keep
//!   the time of receipt, as they do on the kernel's receive of the same
//!   streams). UBTRFS_RECEIVE_SEEDS=N (default 40), UBTRFS_RECEIVE_SEED=S.

use std::path::{Path, PathBuf};
use std::process::Command;
use ubtrfs_oracle::send_support::*;
use ubtrfs_oracle::*;

/// `ubtrfs receive [-e] -f STREAM IMAGE [-d DEV]... DEST`.
fn ubtrfs_receive(image_args: &[String], stream: &Path, dest: &str) -> Result<String, String> {
    let mut args: Vec<String> = vec!["receive".into(), "-f".into()];
    args.push(stream.display().to_string());
    args.extend(image_args.iter().cloned());
    args.push(dest.into());
    let out = ubtrfs(&args);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stderr).into_owned())
    } else {
        Err(out_text(&out))
    }
}

fn ubtrfs_ok(args: &[&str]) {
    let out = ubtrfs(args);
    assert!(out.status.success(), "ubtrfs {args:?}: {}", out_text(&out));
}

/// A fresh image made by `ubtrfs mkfs`.
fn ubtrfs_mkfs(img: &Path, size: &str) {
    let _ = std::fs::remove_file(img);
    run_ok(
        Command::new("truncate").args(["-s", size]).arg(img),
        "truncate",
    );
    ubtrfs_ok(&["mkfs", "-q", "-f", &img.display().to_string()]);
}

/// `btrfs check --readonly` of a filesystem's device images: through
/// loop devices when there are several (btrfs check finds the others
/// among block devices only).
fn check_devices(devs: &[PathBuf]) -> Result<(), String> {
    let loops = (devs.len() > 1).then(|| Loops::attach(devs, true));
    let first = match &loops {
        Some(l) => PathBuf::from(l.first()),
        None => devs[0].clone(),
    };
    btrfs_check(&first, &[])
}

fn dump_with(cmd: &mut Command) -> Result<String, String> {
    run(cmd.env("TZ", "UTC")).map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn receive_dump_prints_as_btrfs_receive() {
    skip_unless!(btrfs_progs_available);
    let dir = scratch_dir("receive-dump");
    let mut n = 0;
    for f in committed_fixtures() {
        let ia = f.image_args(None);
        let snaps = readonly_snapshots(&ia);
        for (i, s) in snaps.iter().enumerate() {
            for args in [&[][..], &["--proto", "2"], &["--compressed-data"]] {
                let mut a = args.to_vec();
                if i > 0 {
                    a.extend(["-p", snaps[i - 1].as_str()]);
                }
                let out = dir.join("stream");
                ubtrfs_send(&ia, &a, s, &out).unwrap_or_else(|e| panic!("{e}"));
                let theirs = dump_with(
                    Command::new("btrfs")
                        .args(["receive", "--dump", "-f"])
                        .arg(&out),
                )
                .unwrap_or_else(|e| panic!("{e}"));
                let ours = dump_with(
                    Command::new(ubtrfs_bin())
                        .args(["receive", "--dump", "-f"])
                        .arg(&out),
                )
                .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(ours, theirs, "{} {s} {a:?}: dumps differ", f.name);
                n += 1;
            }
        }
    }
    assert!(n > 0);
    eprintln!("{n} dumps equal to btrfs receive --dump");
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------ bad streams

fn attr_u64(t: u16, v: u64) -> (u16, Vec<u8>) {
    (t, v.to_le_bytes().to_vec())
}

fn attr_bytes(t: u16, v: &[u8]) -> (u16, Vec<u8>) {
    (t, v.to_vec())
}

const C_SUBVOL: u16 = 1;
const C_MKFILE: u16 = 3;
const C_END: u16 = 21;
const A_UUID: u16 = 1;
const A_CTRANSID: u16 = 2;
const A_CLONE_UUID: u16 = 20;
const A_CLONE_CTRANSID: u16 = 21;
const A_CLONE_PATH: u16 = 22;
const A_CLONE_OFFSET: u16 = 23;

/// A stream that makes subvolume `name` with one file, then `more`.
fn small_stream(name: &str, more: Vec<StreamCmd>) -> Vec<u8> {
    let mut cmds = vec![
        (
            C_SUBVOL,
            vec![
                attr_bytes(A_PATH, name.as_bytes()),
                attr_bytes(A_UUID, &[7; 16]),
                attr_u64(A_CTRANSID, 9),
            ],
        ),
        (C_MKFILE, vec![attr_bytes(A_PATH, b"f")]),
        (
            C_WRITE,
            vec![
                attr_bytes(A_PATH, b"f"),
                attr_u64(A_FILE_OFFSET, 0),
                attr_bytes(A_DATA, &[0x5a; 9000]),
            ],
        ),
    ];
    cmds.extend(more);
    cmds.push((C_END, vec![]));
    build_stream(1, &cmds)
}

/// The subvolume at `path` in the image: (exists, readonly, received).
fn subvol_state(image: &Path, path: &str) -> (bool, bool, bool) {
    let ia = vec![image.display().to_string()];
    for s in subvolumes(&ia) {
        if s["path"] == path {
            let received = s["received_uuid"]
                .as_str()
                .is_some_and(|u| !u.is_empty() && u != "-" && !u.starts_with("00000000"));
            return (true, s["readonly"] == true, received);
        }
    }
    (false, false, false)
}

#[test]
fn receive_bad_streams_fail_with_offsets_and_leave_a_valid_image() {
    skip_unless!(btrfs_progs_available);
    let dir = scratch_dir("receive-bad");
    let img = dir.join("img");
    let ia = vec![img.display().to_string()];
    let stream = dir.join("stream");
    // A good one first: received, read-only.
    ubtrfs_mkfs(&img, "256M");
    std::fs::write(&stream, small_stream("good", vec![])).unwrap();
    ubtrfs_receive(&ia, &stream, "/").unwrap_or_else(|e| panic!("good stream: {e}"));
    assert_eq!(subvol_state(&img, "good"), (true, true, true));
    let good = std::fs::read(&stream).unwrap();

    let clone_missing = small_stream(
        "s",
        vec![(
            C_CLONE,
            vec![
                attr_bytes(A_PATH, b"f"),
                attr_u64(A_FILE_OFFSET, 0),
                attr_u64(A_CLONE_LEN, 4096),
                attr_bytes(A_CLONE_UUID, &[0xee; 16]),
                attr_u64(A_CLONE_CTRANSID, 5),
                attr_bytes(A_CLONE_PATH, b"f"),
                attr_u64(A_CLONE_OFFSET, 0),
            ],
        )],
    );
    let escape = small_stream("s", vec![(C_MKFILE, vec![attr_bytes(A_PATH, b"../x")])]);
    let slash = small_stream("s", vec![(C_MKFILE, vec![attr_bytes(A_PATH, b"/etc/x")])]);
    let unknown = small_stream("s", vec![(99, vec![attr_bytes(A_PATH, b"f")])]);
    let mut crc = small_stream("s", vec![]);
    let n = crc.len();
    crc[n - 20] ^= 0x40;
    let truncated = small_stream("s", vec![])[..200].to_vec();
    let no_end = {
        let s = small_stream("s", vec![]);
        s[..s.len() - 10].to_vec()
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "clone from a missing subvolume",
            clone_missing,
            "did not find source",
        ),
        ("path escaping the subvolume", escape, "'..'"),
        ("absolute path", slash, "absolute"),
        ("unknown command", unknown, "unknown command 99"),
        ("bad crc", crc, "crc"),
        ("truncated", truncated, "stream ends inside"),
        ("no end command", no_end, "without an end command"),
        (
            "not a stream",
            b"hello world, not a stream".to_vec(),
            "not a send stream",
        ),
        ("subvolume exists", good.clone(), "exists"),
    ];
    for (what, bytes, want) in cases {
        let name = if what == "subvolume exists" {
            "good"
        } else {
            "s"
        };
        std::fs::write(&stream, &bytes).unwrap();
        let before = subvol_state(&img, name);
        let err = ubtrfs_receive(&ia, &stream, "/").expect_err(what);
        assert!(err.contains(want), "{what}: {err}");
        if !what.starts_with("not a stream") && what != "subvolume exists" {
            assert!(err.contains("offset"), "{what}: no stream offset in {err}");
        }
        btrfs_check(&img, &[]).unwrap_or_else(|e| panic!("{what}: btrfs check: {e}"));
        let (exists, ro, received) = subvol_state(&img, name);
        if what == "subvolume exists" {
            assert_eq!(
                (exists, ro, received),
                before,
                "{what}: the old one changed"
            );
        } else if exists {
            assert!(
                !ro && !received,
                "{what}: partial subvolume marked received"
            );
            ubtrfs_ok(&["subvolume", "delete", &ia[0], "/s"]);
        }
    }
    // Into a read-only subvolume: refused, nothing written.
    let before = sha256_file(&img);
    std::fs::write(&stream, small_stream("s", vec![])).unwrap();
    let err = ubtrfs_receive(&ia, &stream, "/good").expect_err("into a read-only subvolume");
    assert!(err.contains("read-only"), "{err}");
    assert_eq!(
        sha256_file(&img),
        before,
        "a refused receive changed the image"
    );
    // A full filesystem: ENOSPC, not corruption.
    let small = dir.join("small");
    ubtrfs_mkfs(&small, "128M");
    let sa = vec![small.display().to_string()];
    let mut cmds = vec![
        (
            C_SUBVOL,
            vec![
                attr_bytes(A_PATH, b"big"),
                attr_bytes(A_UUID, &[8; 16]),
                attr_u64(A_CTRANSID, 9),
            ],
        ),
        (C_MKFILE, vec![attr_bytes(A_PATH, b"f")]),
    ];
    let chunk: Vec<u8> = (0..48 * 1024u32)
        .map(|i| (i.wrapping_mul(2654435761u32) >> 24) as u8)
        .collect();
    for i in 0..4000u64 {
        cmds.push((
            C_WRITE,
            vec![
                attr_bytes(A_PATH, b"f"),
                attr_u64(A_FILE_OFFSET, i * chunk.len() as u64),
                attr_bytes(A_DATA, &chunk),
            ],
        ));
    }
    cmds.push((C_END, vec![]));
    std::fs::write(&stream, build_stream(1, &cmds)).unwrap();
    let err = ubtrfs_receive(&sa, &stream, "/").expect_err("190 MB into 128 MB");
    assert!(err.contains("no space"), "full filesystem: {err}");
    btrfs_check(&small, &[]).unwrap_or_else(|e| panic!("after ENOSPC: btrfs check: {e}"));
    let (_, ro, received) = subvol_state(&small, "big");
    assert!(!ro && !received, "a partial subvolume was marked received");
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------ kernel fixtures

/// The fixtures the fixture test runs on by default (UBTRFS_RECEIVE_FIXTURES:
/// `all`, or a comma-separated list of names).
fn fixture_set() -> Vec<&'static Fixture> {
    let which = std::env::var("UBTRFS_RECEIVE_FIXTURES").unwrap_or_default();
    kernel_fixtures()
        .iter()
        .filter(|f| match which.as_str() {
            "" => [
                "zstd",
                "noholes-off",
                "big",
                "lzo",
                "raid1",
                "raid6",
                "sha256-64k",
            ]
            .contains(&f.name.as_str()),
            "all" => true,
            l => l.split(',').any(|n| n == f.name),
        })
        .collect()
}

/// `btrfs subvolume show` fields of a mounted subvolume: (received UUID,
/// read-only).
fn show(path: &Path) -> (String, bool) {
    let o = run(Command::new("btrfs").args(["subvolume", "show"]).arg(path))
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_string()))
            .unwrap_or_default()
    };
    (
        field("Received UUID:"),
        field("Flags:").contains("readonly"),
    )
}

/// `btrfs filesystem du -s --raw`: (total, exclusive, set shared) bytes
/// of the file extents under `path` (clones and snapshots share).
fn du(path: &Path) -> String {
    let _ = Command::new("sync").output();
    let o = run(Command::new("btrfs")
        .args(["filesystem", "du", "-s", "--raw"])
        .arg(path))
    .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let last = text.lines().last().unwrap_or("").to_string();
    last.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// How many compressed EXTENT_DATA items the subvolume mounted at
/// `path` has, read from its device `dev`.
fn compressed_extents(dev: &Path, path: &Path) -> usize {
    let _ = Command::new("sync").output();
    let id = run(Command::new("btrfs")
        .args(["inspect-internal", "rootid"])
        .arg(path))
    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    .unwrap_or_else(|e| panic!("{e}"));
    let o = run(Command::new("btrfs")
        .args(["inspect-internal", "dump-tree", "-t", &id])
        .arg(dev))
    .unwrap_or_else(|e| panic!("{e}"));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| {
            l.trim()
                .strip_prefix("extent compression ")
                .is_some_and(|v| !v.starts_with('0'))
        })
        .count()
}

/// Sharing and compression as the kernel's receive made them: the same
/// `btrfs fi du` figures, and compressed extents where it has some.
fn compare_extents(
    tag: &str,
    kernel: (&Path, &Path),
    ours: (&Path, &Path),
    failures: &mut Vec<String>,
) {
    let (kd, ud) = (du(kernel.1), du(ours.1));
    if kd != ud {
        failures.push(format!(
            "{tag}: fi du (total exclusive shared) {ud}, kernel's receive {kd}"
        ));
    }
    let (kc, uc) = (
        compressed_extents(kernel.0, kernel.1),
        compressed_extents(ours.0, ours.1),
    );
    if (kc > 0) != (uc > 0) {
        failures.push(format!(
            "{tag}: {uc} compressed extents, the kernel's receive {kc}"
        ));
    }
}

/// Compares what ubtrfs received (at `ours`) with the kernel's receive of
/// the same stream (at `kernel`).
fn compare_received(tag: &str, kernel: &Path, ours: &Path, failures: &mut Vec<String>) {
    let want = manifest_of(kernel);
    let got = manifest_of(ours);
    assert!(
        want.len() > 1,
        "{tag}: the kernel received nothing at {}",
        kernel.display()
    );
    let ig = Ignore {
        fields: vec!["ino"],
        dir_size: false,
    };
    if let Err(d) = compare_manifests(&want, &got, &ig) {
        failures.push(format!("{tag}: received != kernel's receive: {d}"));
    }
    let (ku, kro) = show(kernel);
    let (uu, uro) = show(ours);
    if ku != uu || kro != uro {
        failures.push(format!(
            "{tag}: received UUID / read-only {uu} {uro}, kernel's {ku} {kro}"
        ));
    }
}

struct Streams {
    /// (snapshot leaf name, stream): the full stream of the first
    /// snapshot, then each next one incremental from the one before.
    chain: Vec<(String, PathBuf)>,
    /// The last snapshot sent incremental from the first, with the first
    /// as a clone source (-c); received after the first's full stream.
    with_clone: Option<(String, PathBuf)>,
}

fn kernel_streams(m: &Mount, snaps: &[String], args: &[&str], work: &Path) -> Streams {
    let leaf = |s: &str| s.rsplit('/').next().unwrap().to_string();
    let mut chain = Vec::new();
    for (i, s) in snaps.iter().enumerate() {
        let out = work.join(format!("chain-{i}"));
        let mut a = args.to_vec();
        let parent = if i > 0 {
            m.path(&snaps[i - 1])
        } else {
            PathBuf::new()
        };
        let ps = parent.display().to_string();
        if i > 0 {
            a.extend(["-p", ps.as_str()]);
        }
        kernel_send(&m.path(s), &a, &out).unwrap_or_else(|e| panic!("{e}"));
        chain.push((leaf(s), out));
    }
    let with_clone = (snaps.len() >= 2).then(|| {
        let out = work.join("clone");
        let first = m.path(&snaps[0]).display().to_string();
        let mut a = args.to_vec();
        // -c alone needs the sent snapshot's parent among the clone
        // sources; with -p the first snapshot is both.
        a.extend(["-p", first.as_str(), "-c", first.as_str()]);
        kernel_send(&m.path(snaps.last().unwrap()), &a, &out).unwrap_or_else(|e| panic!("{e}"));
        (leaf(snaps.last().unwrap()), out)
    });
    Streams { chain, with_clone }
}

/// One fixture's streams of one variant, received by the kernel (the
/// reference, in `kdir` on the image `kimg`) and by ubtrfs.
struct Case<'a> {
    f: &'a Fixture,
    /// The fixture and variant, for messages.
    tag: String,
    st: &'a Streams,
    kimg: &'a Path,
    kdir: PathBuf,
}

/// What the fixtures' runs found.
#[derive(Default)]
struct Tally {
    failures: Vec<String>,
    /// Streams ubtrfs received.
    received: usize,
}

impl Case<'_> {
    /// The kernel's receive of the chain into `kdir`, and of the first
    /// stream then the clone one into `kdir/c`.
    fn kernel_receives(&self) {
        let tag = &self.tag;
        for (_, s) in &self.st.chain {
            receive(s, &self.kdir).unwrap_or_else(|e| panic!("{tag}: kernel receive: {e}"));
        }
        if let Some((_, s)) = &self.st.with_clone {
            let c = self.kdir.join("c");
            receive(&self.st.chain[0].1, &c)
                .unwrap_or_else(|e| panic!("{tag}: kernel receive: {e}"));
            receive(s, &c).unwrap_or_else(|e| panic!("{tag}: kernel receive -c: {e}"));
        }
    }

    /// ubtrfs receives the same streams into subvolume /recv of `devs`,
    /// which must pass btrfs check and show what the kernel received
    /// (with its extents; after losing any device, for RAID5/6).
    fn ours_into(&self, what: &str, devs: &[PathBuf], t: &mut Tally) {
        let tag = format!("{} into {what}", self.tag);
        let ta = image_args(devs);
        let create = |path: &str| {
            let mut a: Vec<&str> = vec!["subvolume", "create"];
            a.extend(ta.iter().map(|s| s.as_str()));
            a.push(path);
            ubtrfs_ok(&a);
        };
        create("/recv");
        let mut ok = true;
        for (name, s) in &self.st.chain {
            if let Err(e) = ubtrfs_receive(&ta, s, "/recv") {
                t.failures.push(format!("{tag}: receive of {name}: {e}"));
                ok = false;
                break;
            }
            t.received += 1;
        }
        if let Some((name, s)) = &self.st.with_clone {
            create("/recv/c");
            if let Err(e) = ubtrfs_receive(&ta, &self.st.chain[0].1, "/recv/c")
                .and_then(|_| ubtrfs_receive(&ta, s, "/recv/c"))
            {
                t.failures.push(format!("{tag}: receive -c of {name}: {e}"));
                ok = false;
            }
            t.received += 1;
        }
        if let Err(e) = check_devices(devs) {
            t.failures.push(format!("{tag}: btrfs check: {e}"));
            return;
        }
        if !ok {
            return;
        }
        let um = Mount::images(devs, "", true);
        for (name, _) in &self.st.chain {
            let (k, u) = (self.kdir.join(name), um.path(&format!("recv/{name}")));
            compare_received(&format!("{tag} {name}"), &k, &u, &mut t.failures);
            compare_extents(
                &format!("{tag} {name}"),
                (self.kimg, &k),
                (&devs[0], &u),
                &mut t.failures,
            );
        }
        if let Some((name, _)) = &self.st.with_clone {
            compare_received(
                &format!("{tag} -c {name}"),
                &self.kdir.join("c").join(name),
                &um.path(&format!("recv/c/{name}")),
                &mut t.failures,
            );
        }
        let whole = manifest_of(&um.path("recv"));
        um.unmount();
        // RAID5/6: the parity of what we wrote rebuilds any device.
        let raid56 = ["data", "metadata"]
            .iter()
            .any(|k| ["raid5", "raid6"].contains(&self.f.profile(k).as_str()));
        if raid56 && devs.len() > 1 {
            let r = degraded_mounts(devs, false, |d| {
                compare_manifests(&whole, &manifest_of(&d.join("recv")), &Ignore::default())
                    .map(|_| ())
            });
            if let Err(e) = r {
                t.failures.push(format!("{tag}: {e}"));
            }
        }
    }

    /// The kernel on top of ours: ubtrfs receives the full stream into
    /// `uimg`, the kernel's receive the incremental ones (finding their
    /// parent by the received UUID ubtrfs set), then writes; btrfs check
    /// passes. Then ubtrfs sends the snapshot it received, and the
    /// kernel's receive of that (into `resend`) equals its own.
    fn kernel_on_ours(&self, uimg: &Path, resend: (&Path, PathBuf), failures: &mut Vec<String>) {
        let (tag, chain) = (&self.tag, &self.st.chain);
        ubtrfs_mkfs(uimg, "1G");
        let ua = vec![uimg.display().to_string()];
        ubtrfs_receive(&ua, &chain[0].1, "/").unwrap_or_else(|e| panic!("{tag}: {e}"));
        let um = Mount::images(&[uimg.to_path_buf()], "", false);
        for (name, s) in &chain[1..] {
            if let Err(e) = receive(s, &um.dir) {
                failures.push(format!(
                    "{tag}: kernel receive of {name} on ubtrfs-received parent: {e}"
                ));
            }
        }
        let (last, _) = chain.last().unwrap();
        compare_received(
            &format!("{tag} kernel-on-ubtrfs {last}"),
            &self.kdir.join(last),
            &um.path(last),
            failures,
        );
        std::fs::write(um.path("after.txt"), b"kernel writes").unwrap();
        um.unmount();
        if let Err(e) = btrfs_check(uimg, &[]) {
            failures.push(format!("{tag}: kernel-on-ubtrfs btrfs check: {e}"));
        }
        let (out, dest) = resend;
        let first = &chain[0].0;
        let res = ubtrfs_send(&ua, &[], first, out)
            .map_err(|e| format!("ubtrfs send of received: {e}"))
            .and_then(|()| receive(out, &dest).map_err(|e| format!("resend: {e}")))
            .and_then(|()| {
                let want = manifest_of(&self.kdir.join(first));
                let got = manifest_of(&dest.join(first));
                let ig = Ignore {
                    fields: vec!["ino"],
                    dir_size: false,
                };
                compare_manifests(&want, &got, &ig)
                    .map(|_| ())
                    .map_err(|d| format!("resent != received: {d}"))
            });
        if let Err(e) = res {
            failures.push(format!("{tag}: {e}"));
        }
    }
}

#[test]
fn receive_kernel_fixture_streams_as_the_kernel_does() {
    skip_unless!(kernel_available);
    let work = scratch_dir("receive-fixtures");
    let kimg = work.join("kernel-recv.img");
    let mut t = Tally::default();
    for f in fixture_set() {
        let ia = f.image_args(None);
        let snaps = readonly_snapshots(&ia);
        if snaps.is_empty() {
            continue;
        }
        // The streams first: the fixture's copies share its fsid, so it
        // is not mounted while they are.
        let variants = [("v1", &[][..]), ("c", &["--compressed-data"][..])];
        let m = Mount::images(&f.devices(), "", true);
        let all: Vec<Streams> = variants
            .iter()
            .map(|(v, args)| {
                let sdir = work.join(format!("streams-{}-{v}", f.name));
                std::fs::create_dir_all(&sdir).unwrap();
                kernel_streams(&m, &snaps, args, &sdir)
            })
            .collect();
        m.unmount();
        let _ = Command::new("btrfs")
            .args(["device", "scan", "--forget"])
            .output();
        for ((v, _), st) in variants.iter().zip(all) {
            let sdir = work.join(format!("streams-{}-{v}", f.name));
            // A kernel image per fixture and variant: receive finds a
            // parent by received UUID, the first subvolume that has it.
            mkfs(&kimg, "1G", &[]);
            let krecv = Mount::images(std::slice::from_ref(&kimg), "", false);
            let case = Case {
                f,
                tag: format!("{} {v}", f.name),
                st: &st,
                kimg: &kimg,
                kdir: krecv.dir.join(format!("{}-{v}", f.name)),
            };
            case.kernel_receives();
            // Ours, into a fresh ubtrfs image, and into a copy of the
            // kernel-made fixture (its snapshots kept).
            let uimg = work.join("ours.img");
            ubtrfs_mkfs(&uimg, "1G");
            case.ours_into("mkfs", std::slice::from_ref(&uimg), &mut t);
            let copy = f.copy_to(&work.join("copy"));
            case.ours_into("fixture copy", &copy.devices(), &mut t);
            if st.chain.len() >= 2 {
                let dest = krecv.dir.join(format!("{}-{v}-resend", f.name));
                case.kernel_on_ours(&uimg, (&sdir.join("resend"), dest), &mut t.failures);
            }
            krecv.unmount();
            let _ = std::fs::remove_dir_all(&sdir);
            let _ = std::fs::remove_dir_all(work.join("copy"));
            let _ = Command::new("btrfs")
                .args(["device", "scan", "--forget"])
                .output();
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    eprintln!("{} streams received by ubtrfs", t.received);
    assert!(t.received > 0);
    assert!(
        t.failures.is_empty(),
        "{} failures:\n{}",
        t.failures.len(),
        t.failures.join("\n")
    );
}

// ------------------------------------------------------------ seeded

/// Compares a received snapshot with its source (inode numbers and
/// hole layout aside), allowing a directory's mtime to differ where the
/// kernel's receive of the same stream differs from the source too (the
/// time of receipt).
fn compare_as_kernel(source: &[String], ours: &[String], kernel: &[String]) -> Result<(), String> {
    let (want, got, k) = (records(source), records(ours), records(kernel));
    let mut diffs = Vec::new();
    for p in want.keys().chain(got.keys()) {
        let (Some(w), Some(g)) = (want.get(p), got.get(p)) else {
            diffs.push(format!(
                "{p}: only in {}",
                if want.contains_key(p) {
                    "source"
                } else {
                    "received"
                }
            ));
            continue;
        };
        for (field, wv) in w.as_object().unwrap() {
            if field == "ino" || field == "data" || g.get(field) == Some(wv) {
                continue;
            }
            let kernel_too = field == "mtime_ns"
                && w["type"] == "dir"
                && k.get(p).is_some_and(|kv| kv.get(field) != Some(wv));
            if !kernel_too {
                diffs.push(format!(
                    "{p}: {field}: expected {wv}, got {:?}",
                    g.get(field)
                ));
            }
        }
    }
    diffs.dedup();
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(diffs.join("\n  "))
    }
}

const STEPS: usize = 4;
const BATCH: usize = 20;

#[test]
fn receive_incremental_random_scenarios() {
    skip_unless!(kernel_available);
    let work = scratch_dir("receive-incr");
    let seeds = seeds("UBTRFS_RECEIVE_SEED", Some("UBTRFS_RECEIVE_SEEDS"), 40);
    let mut failed: Vec<(u64, String)> = Vec::new();
    let mut streams = 0;
    for (bi, batch) in seeds.chunks(BATCH).enumerate() {
        let compress = bi % 2 == 1;
        let mount_opts = if compress { "compress=zstd" } else { "" };
        let img = work.join("src.img");
        let names: Vec<String> = batch.iter().map(|s| s.to_string()).collect();
        scenario_image(&img, &names, STEPS, mount_opts);
        let rimg = work.join("recv.img");
        ubtrfs_mkfs(&rimg, "4G");
        // The kernel's receive of the same streams: directories that a
        // stream changes through temporary names without sending their
        // times keep the time of receipt, there as here.
        let kimg = work.join("krecv.img");
        mkfs(&kimg, "4G", &[]);
        let km = Mount::images(std::slice::from_ref(&kimg), "", false);
        let ra = vec![rimg.display().to_string()];
        let m = Mount::images(std::slice::from_ref(&img), "", true);
        let source = split_manifest(&manifest_of(&m.dir), 1);
        let mut b = ScenarioBatch::default();
        for &seed in batch {
            let mut base: Vec<&str> = if seed % 2 == 0 {
                vec![]
            } else {
                vec!["--proto", "2"]
            };
            if compress && seed % 2 == 1 {
                base.push("--compressed-data");
            }
            let dest = format!("/r{seed}");
            ubtrfs_ok(&["subvolume", "create", &ra[0], &dest]);
            let out = work.join("stream");
            let parent = |name: &str| m.path(name).display().to_string();
            b.send_steps(seed, STEPS, &base, parent, |snap, args| {
                kernel_send(&m.path(snap), args, &out)
                    .and_then(|_| receive(&out, &km.dir.join(&dest[1..])))
                    .and_then(|_| ubtrfs_receive(&ra, &out, &dest).map(|_| ()))
            });
        }
        m.unmount();
        if let Err(e) = btrfs_check(&rimg, &[]) {
            panic!("seeds {names:?}: btrfs check after receiving: {e}");
        }
        let um = Mount::images(std::slice::from_ref(&rimg), "", true);
        let got = split_manifest(&manifest_of(&um.dir), 2);
        um.unmount();
        let kgot = split_manifest(&manifest_of(&km.dir), 2);
        km.unmount();
        b.compare(&source, |seed, snap, want| {
            let at = format!("/r{seed}/{snap}");
            let have = got.get(&at).cloned().unwrap_or_default();
            let kernel = kgot.get(&at).cloned().unwrap_or_default();
            compare_as_kernel(want, &have, &kernel)
        });
        b.finish(&mut failed, &mut streams);
        let _ = std::fs::remove_file(&rimg);
        let _ = std::fs::remove_file(&img);
    }
    let _ = std::fs::remove_dir_all(&work);
    assert_scenarios(seeds.len(), streams, &failed, "UBTRFS_RECEIVE_SEED");
}
