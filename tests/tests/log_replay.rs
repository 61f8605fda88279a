//! Log trees: images the kernel left with an unreplayed log (fsyncs after
//! the last commit, then a crash: tests/fixtures/make-logtrees.sh).
//!
//! * Readers show what the kernel shows after its own replay (the
//!   fixture's manifest.jsonl, recorded from a read-write mount of a copy),
//!   without changing a byte of the image; `--no-log-replay` shows the last
//!   commit (committed.jsonl, recorded after `btrfs rescue zero-log`).
//! * `ubtrfs rescue replay-log` gives an image without a log that
//!   `btrfs check` passes and the kernel mounts (no replay needed) showing
//!   the same tree, and the kernel can write to.
//! * `ubtrfs rescue zero-log` gives an image `btrfs check` passes and the
//!   kernel shows as of the last commit.
//! * A corrupted log gives an error naming the log tree and block, never a
//!   panic, and a failed replay writes nothing.
//!
//! The committed small images (tests/fixtures/committed-log) run without
//! root; fresh kernel-made images (root) come from make-logtrees.sh with
//! seeds `UBTRFS_LOG_SEEDS` (default 1..8, the four layouts twice) and
//! `UBTRFS_LOG_OPS` ops each (default 40), or from
//! `UBTRFS_LOG_FIXTURES_DIR`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use ubtrfs_engine::ctree::Tree;
use ubtrfs_engine::fs::{Filesystem, OpenOptions};
use ubtrfs_engine::io::volumes::Placement;
use ubtrfs_engine::tree::block::TreeBlock;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{FileExtent, FileExtentKind, RootItem};
use ubtrfs_oracle::*;

fn committed_logs() -> &'static [Fixture] {
    static F: OnceLock<Vec<Fixture>> = OnceLock::new();
    F.get_or_init(|| {
        let out = scratch_dir("committed-log");
        run_ok(
            Command::new("bash")
                .env("FROM", "committed-log")
                .arg(repo_root().join("tests/fixtures/unpack.sh"))
                .arg(&out),
            "tests/fixtures/unpack.sh (committed-log)",
        );
        list_fixtures(&out)
    })
}

fn kernel_logs() -> &'static [Fixture] {
    static F: OnceLock<Vec<Fixture>> = OnceLock::new();
    F.get_or_init(|| {
        if let Ok(d) = std::env::var("UBTRFS_LOG_FIXTURES_DIR") {
            return list_fixtures(Path::new(&d));
        }
        let out = scratch_dir("kernel-log");
        let seeds = std::env::var("UBTRFS_LOG_SEEDS").unwrap_or_else(|_| "1 2 3 4 5 6 7 8".into());
        let ops = std::env::var("UBTRFS_LOG_OPS").unwrap_or_else(|_| "40".into());
        run_ok(
            Command::new("bash")
                .env("NOPS", ops)
                .arg(repo_root().join("tests/fixtures/make-logtrees.sh"))
                .arg(&out)
                .args(seeds.split_whitespace()),
            "tests/fixtures/make-logtrees.sh",
        );
        list_fixtures(&out)
    })
}

fn lines(p: &Path) -> Vec<String> {
    read_lines(p)
}

fn manifest_args(img: &Path, extra: &[&str]) -> Vec<String> {
    let mut a = vec!["inspect".into(), "manifest".into()];
    a.extend(extra.iter().map(|s| s.to_string()));
    a.push(img.display().to_string());
    a
}

fn log_root(img: &Path) -> u64 {
    let o = ubtrfs(&[
        "inspect",
        "dump-super",
        "--json",
        &img.display().to_string(),
    ]);
    assert!(o.status.success(), "dump-super {}", img.display());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("dump-super json");
    v["log_root"].as_u64().expect("log_root")
}

fn copy_image(f: &Fixture, dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    sparse_copy(&f.devices()[0], &to).unwrap_or_else(|e| panic!("copy an image: {e}"));
    to
}

/// What every reader must show for `f`, checked without changing it.
fn check_readers(f: &Fixture) -> Result<(), String> {
    let img = &f.devices()[0];
    let before = sha256_file(img);
    if log_root(img) == 0 {
        return Err(format!("{}: the fixture has no log", f.name));
    }
    let replayed = ubtrfs_lines(&manifest_args(img, &[]))?;
    let n = compare_manifests(&f.kernel_manifest(), &replayed, &Ignore::default())
        .map_err(|d| format!("{}: replayed view differs from the kernel's: {d}", f.name))?;
    let committed = ubtrfs_lines(&manifest_args(img, &["--no-log-replay"]))?;
    let m = compare_manifests(
        &lines(&f.dir.join("committed.jsonl")),
        &committed,
        &Ignore::default(),
    )
    .map_err(|d| {
        format!(
            "{}: --no-log-replay differs from the last commit: {d}",
            f.name
        )
    })?;
    // ls, stat and cat open the image the same way: a file the log made.
    let recs = records(&replayed);
    let newest = recs
        .values()
        .filter(|r| r["type"] == "file")
        .max_by_key(|r| r["mtime_ns"].as_u64().unwrap_or(0))
        .ok_or_else(|| format!("{}: no files", f.name))?;
    let path = newest["path"].as_str().unwrap().to_string();
    let raw = percent_decode(&path);
    let i = img.display().to_string();
    for args in [
        vec!["ls".to_string(), "-l".into(), i.clone(), "/".into()],
        vec!["stat".to_string(), i.clone(), raw.clone()],
    ] {
        ubtrfs_lines(&args)?;
    }
    let o = ubtrfs(&["cat".to_string(), i.clone(), raw.clone()]);
    let got = sha256_bytes(&o.stdout);
    if !o.status.success() || Some(got.as_str()) != newest["sha256"].as_str() {
        return Err(format!("{}: cat {raw} gave other content", f.name));
    }
    let after = sha256_file(img);
    if before != after {
        return Err(format!("{}: reading changed the image", f.name));
    }
    eprintln!(
        "{}: {n} paths as the kernel replays them, {m} at the last commit",
        f.name
    );
    Ok(())
}

fn percent_decode(p: &str) -> String {
    let b = p.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&p[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn sha256_bytes(b: &[u8]) -> String {
    use std::io::Write;
    let mut c = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum");
    c.stdin.take().unwrap().write_all(b).unwrap();
    let o = c.wait_with_output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

/// `ubtrfs rescue replay-log` on a copy: no log left, ubtrfs reads the
/// kernel's view from it; with `kernel`, btrfs check and the kernel too.
fn check_replay_log(f: &Fixture, dir: &Path, kernel: bool) -> Result<(), String> {
    let img = copy_image(f, dir, &format!("{}-replayed.img", f.name));
    let t0 = std::time::Instant::now();
    let o = ubtrfs(&["rescue", "replay-log", &img.display().to_string()]);
    let secs = t0.elapsed().as_secs_f64();
    if !o.status.success() {
        return Err(format!(
            "{}: rescue replay-log failed: {}",
            f.name,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    eprintln!(
        "{}: {} ({secs:.3}s with the process)",
        f.name,
        String::from_utf8_lossy(&o.stdout).trim()
    );
    if log_root(&img) != 0 {
        return Err(format!("{}: log_root still set after replay-log", f.name));
    }
    let mine = ubtrfs_lines(&manifest_args(&img, &[]))?;
    compare_manifests(&f.kernel_manifest(), &mine, &Ignore::default())
        .map_err(|d| format!("{}: replayed image read by ubtrfs: {d}", f.name))?;
    check_after(f, &img, "replay-log", &f.kernel_manifest(), kernel)?;
    if kernel {
        // The kernel writes on top of it, and check stays clean.
        let m = Mount::images(std::slice::from_ref(&img), "", false);
        std::fs::write(m.path("t/after-replay"), vec![7u8; 10000]).unwrap();
        let _ = std::fs::remove_dir_all(m.path("sv"));
        m.unmount();
        btrfs_check(&img, &[])
            .map_err(|e| format!("{}: btrfs check after kernel writes: {e}", f.name))?;
    }
    let _ = std::fs::remove_file(&img);
    Ok(())
}

/// After `step` (replay-log, zero-log) on `img`: `btrfs check` (where
/// btrfs-progs is here) and, with `kernel`, the kernel's read-only mount
/// of it against `want`.
fn check_after(
    f: &Fixture,
    img: &Path,
    step: &str,
    want: &[String],
    kernel: bool,
) -> Result<(), String> {
    if btrfs_progs_here() {
        btrfs_check(img, &[]).map_err(|e| format!("{}: btrfs check after {step}: {e}", f.name))?;
    }
    if kernel {
        let m = Mount::images(&[img.to_path_buf()], "", true);
        let seen = manifest_of(&m.dir);
        m.unmount();
        compare_manifests(want, &seen, &Ignore::default())
            .map_err(|d| format!("{}: kernel mount after {step}: {d}", f.name))?;
    }
    Ok(())
}

/// `ubtrfs rescue zero-log` on a copy: the last commit, for ubtrfs and,
/// with `kernel`, for btrfs check and the kernel.
fn check_zero_log(f: &Fixture, dir: &Path, kernel: bool) -> Result<(), String> {
    let img = copy_image(f, dir, &format!("{}-zero.img", f.name));
    let o = ubtrfs(&["rescue", "zero-log", &img.display().to_string()]);
    if !o.status.success() {
        return Err(format!(
            "{}: rescue zero-log failed: {}",
            f.name,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    if log_root(&img) != 0 {
        return Err(format!("{}: log_root still set after zero-log", f.name));
    }
    let committed = lines(&f.dir.join("committed.jsonl"));
    let mine = ubtrfs_lines(&manifest_args(&img, &[]))?;
    compare_manifests(&committed, &mine, &Ignore::default())
        .map_err(|d| format!("{}: zero-log image read by ubtrfs: {d}", f.name))?;
    check_after(f, &img, "zero-log", &committed, kernel)?;
    let _ = std::fs::remove_file(&img);
    Ok(())
}

fn all(fixtures: &[Fixture], f: impl Fn(&Fixture) -> Result<(), String>) {
    assert!(!fixtures.is_empty(), "no log fixtures");
    let failures: Vec<String> = fixtures.iter().filter_map(|x| f(x).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} images:\n{}",
        failures.len(),
        fixtures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------- no root

#[test]
fn committed_log_images_read_as_the_kernel_replays_them() {
    all(committed_logs(), check_readers);
}

#[test]
fn committed_log_images_rescue_replay_log() {
    let w = Workdir::new("log-replay-committed");
    all(committed_logs(), |f| check_replay_log(f, &w.0, false));
}

#[test]
fn committed_log_images_rescue_zero_log() {
    let w = Workdir::new("log-zero-committed");
    all(committed_logs(), |f| check_zero_log(f, &w.0, false));
}

/// The engine in process: replay onto memory, the engine's own check.
#[test]
fn committed_log_replay_in_memory_is_consistent() {
    use std::sync::Arc;
    use ubtrfs_engine::io::dev::{BlockDev, MemDev};
    // Problems the engine's check reports, one a line (kernel-made images
    // may have some before replay: only new ones count).
    fn problems(r: ubtrfs_engine::Result<ubtrfs_engine::tools::check::CheckReport>) -> Vec<String> {
        match r {
            Ok(_) => Vec::new(),
            Err(e) => e.to_string().lines().skip(1).map(String::from).collect(),
        }
    }
    for f in committed_logs() {
        let bytes = std::fs::read(&f.devices()[0]).unwrap();
        let before = problems(ubtrfs_engine::tools::check::check_consistency(&bytes));
        let dev = Arc::new(MemDev::from_bytes(bytes));
        let stats = ubtrfs_engine::tree_log::replay_on(
            vec![(PathBuf::from("mem"), dev.clone() as Arc<dyn BlockDev>)],
            16 << 20,
        )
        .unwrap_or_else(|e| panic!("{}: replay: {e}", f.name));
        assert!(
            stats.log_trees > 0 && stats.log_items > 0,
            "{}: {stats:?}",
            f.name
        );
        let after = problems(ubtrfs_engine::tools::check::check_dev(dev.clone()));
        let new: Vec<&String> = after.iter().filter(|p| !before.contains(p)).collect();
        assert!(new.is_empty(), "{}: check after replay: {new:?}", f.name);
        eprintln!(
            "{}: {stats:?}; check: {} problems before and after (kernel-made)",
            f.name,
            before.len()
        );
        // Replaying again finds no log and writes nothing.
        let snap = dev.snapshot();
        let again = ubtrfs_engine::tree_log::replay_on(
            vec![(PathBuf::from("mem"), dev.clone() as Arc<dyn BlockDev>)],
            16 << 20,
        )
        .unwrap();
        assert_eq!(again.log_trees, 0);
        assert!(dev.snapshot() == snap, "{}: a second replay wrote", f.name);
    }
}

// ------------------------------------------------------- corrupted logs

/// Every block of a tree, and its items' data.
fn blocks_of(fs: &Filesystem, tree: Tree) -> Vec<std::sync::Arc<TreeBlock>> {
    let mut out = Vec::new();
    let mut stack = vec![tree.read_root(&fs.info).unwrap()];
    while let Some(b) = stack.pop() {
        let n = b.node();
        if !n.is_leaf() {
            for i in 0..n.nritems() {
                stack.push(tree.read_child(&fs.info, &b, i).unwrap());
            }
        }
        out.push(b);
    }
    out
}

/// (log root tree, log trees) of an image.
fn log_trees(fs: &Filesystem) -> (Tree, Vec<Tree>) {
    let root = Tree::log_root(&fs.info.sb);
    let mut logs = Vec::new();
    for b in blocks_of(fs, root) {
        let n = b.node();
        if !n.is_leaf() {
            continue;
        }
        for i in 0..n.nritems() {
            let it = n.item(i);
            if it.key.item_type == ROOT_ITEM {
                let ri = RootItem::parse(it.data).unwrap();
                logs.push(Tree::of_root_item(TREE_LOG_OBJECTID, &ri));
            }
        }
    }
    (root, logs)
}

/// Rewrites every copy of tree block `bytenr` of `img` through `change`
/// (on its raw bytes), with its checksum recomputed when `fix_csum`.
fn patch_block(img: &Path, bytenr: u64, fix_csum: bool, change: impl Fn(&mut Vec<u8>)) {
    use std::os::unix::fs::FileExt;
    let fs = Filesystem::open(img, &OpenOptions::default()).unwrap();
    let ns = fs.info.nodesize as u64;
    let piece = fs.info.chunks.map(bytenr, ns).unwrap();
    let Placement::Mirrors(copies) = &piece.placement else {
        panic!("not a mirrored block group")
    };
    let csum = fs.info.csum_type;
    drop(fs);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(img)
        .unwrap();
    for c in copies {
        let mut buf = vec![0u8; ns as usize];
        file.read_exact_at(&mut buf, c.physical).unwrap();
        change(&mut buf);
        if fix_csum {
            let sum = csum.compute(&buf[32..]);
            buf[..csum.size()].copy_from_slice(&sum[..csum.size()]);
        }
        file.write_all_at(&buf, c.physical).unwrap();
    }
}

/// Runs the readers and replay-log on a corrupted image: each must fail
/// with an error mentioning every word of `want`, never panic, and a
/// failed replay-log must not change the image; zero-log still works.
fn expect_clean_failure(f: &Fixture, img: &Path, what: &str, want: &[&str]) {
    let i = img.display().to_string();
    // `ubtrfs ARGS` fails without a panic, its error naming every word of
    // `words`: that error.
    let fails = |args: &[String], words: &[&str]| {
        let o = ubtrfs(args);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(
            !o.status.success(),
            "{}: {what}: {args:?} succeeded",
            f.name
        );
        assert!(
            !err.contains("panicked"),
            "{}: {what}: panic: {err}",
            f.name
        );
        for w in words {
            assert!(
                err.contains(w),
                "{}: {what}: error lacks {w:?}: {err}",
                f.name
            );
        }
        err
    };
    fails(&manifest_args(img, &[]), want);
    fails(&["ls".into(), i.clone(), "/".into()], want);
    let before = sha256_file(img);
    let err = fails(&["rescue".into(), "replay-log".into(), i.clone()], &[]);
    assert_eq!(
        before,
        sha256_file(img),
        "{}: {what}: a failed replay-log wrote",
        f.name
    );
    eprintln!("{}: {what}: {}", f.name, err.trim());
    // Reading the last commit, and dropping the log, still work.
    let committed = lines(&f.dir.join("committed.jsonl"));
    let got = ubtrfs_lines(&manifest_args(img, &["--no-log-replay"])).unwrap();
    compare_manifests(&committed, &got, &Ignore::default()).unwrap();
    let o = ubtrfs(&["rescue", "zero-log", &i]);
    assert!(o.status.success(), "{}: {what}: zero-log failed", f.name);
    let got = ubtrfs_lines(&manifest_args(img, &[])).unwrap();
    compare_manifests(&committed, &got, &Ignore::default()).unwrap();
}

#[test]
fn corrupted_log_trees_give_clear_errors() {
    let w = Workdir::new("log-corrupt");
    for f in committed_logs() {
        let base = &f.devices()[0];
        let fs = Filesystem::open(base, &OpenOptions::default()).unwrap();
        let (root, logs) = log_trees(&fs);
        drop(fs);

        // A bad checksum in the log root tree.
        let img = copy_image(f, &w.0, "root.img");
        patch_block(&img, root.bytenr, false, |b| b[200] ^= 0x55);
        let at = root.bytenr.to_string();
        expect_clean_failure(f, &img, "log root tree checksum", &["log root tree", &at]);

        // A bad checksum in a log tree's root block.
        let img = copy_image(f, &w.0, "log.img");
        let l = logs[0];
        patch_block(&img, l.bytenr, false, |b| b[300] ^= 0x55);
        let at = l.bytenr.to_string();
        expect_clean_failure(
            f,
            &img,
            "log tree checksum",
            &["log tree of subvolume", &at],
        );

        // A valid block whose file extent points at nothing real.
        let fs = Filesystem::open(base, &OpenOptions::default()).unwrap();
        let mut target = None;
        'find: for t in &logs {
            for b in blocks_of(&fs, *t) {
                let n = b.node();
                if !n.is_leaf() {
                    continue;
                }
                for i in 0..n.nritems() {
                    let it = n.item(i);
                    if it.key.item_type != EXTENT_DATA {
                        continue;
                    }
                    if let Ok(FileExtent {
                        kind: FileExtentKind::Extent { disk_bytenr, .. },
                        ..
                    }) = FileExtent::parse(it.data)
                    {
                        if disk_bytenr != 0 {
                            let off = it.data.as_ptr() as usize - b.bytes().as_ptr() as usize;
                            target = Some((b.bytenr, off + 21));
                            break 'find;
                        }
                    }
                }
            }
        }
        drop(fs);
        let (bytenr, field) = target.expect("a logged regular extent");
        let img = copy_image(f, &w.0, "extent.img");
        patch_block(&img, bytenr, true, |b| {
            b[field..field + 8].copy_from_slice(&(1u64 << 40).to_le_bytes())
        });
        expect_clean_failure(
            f,
            &img,
            "logged extent at a bogus address",
            &["log tree of subvolume", "1099511627776"],
        );
    }
}

// ------------------------------------------------------------ root: kernel

#[test]
fn kernel_log_images_read_as_the_kernel_replays_them() {
    skip_unless!(kernel_available);
    all(kernel_logs(), check_readers);
}

#[test]
fn kernel_log_images_rescue_replay_log() {
    skip_unless!(kernel_available);
    let w = Workdir::new("log-replay-kernel");
    all(kernel_logs(), |f| check_replay_log(f, &w.0, true));
}

#[test]
fn kernel_log_images_rescue_zero_log() {
    skip_unless!(kernel_available);
    let w = Workdir::new("log-zero-kernel");
    all(kernel_logs(), |f| check_zero_log(f, &w.0, true));
}

/// The committed images through the kernel as well (check, mounts).
#[test]
fn committed_log_images_through_the_kernel() {
    skip_unless!(kernel_available);
    let w = Workdir::new("log-committed-kernel");
    all(committed_logs(), |f| {
        check_replay_log(f, &w.0, true)?;
        check_zero_log(f, &w.0, true)
    });
}

/// The read-only FUSE mount of an image with a log shows the kernel's
/// replayed view (inode numbers aside: subvolumes other than the top level
/// are renumbered on the mount) and leaves the image as it was.
#[test]
fn fuse_mount_of_log_images_shows_the_replayed_tree() {
    skip_unless!(fuse_available);
    let w = Workdir::new("log-fuse");
    all(committed_logs(), |f| {
        let before = sha256_file(&f.devices()[0]);
        let dir = w.0.join(&f.name);
        let m = FuseMount::of(f, &[], &dir);
        let seen = manifest_of(&dir);
        drop(m);
        let ignore = Ignore {
            fields: vec!["ino"],
            dir_size: false,
        };
        compare_manifests(&f.kernel_manifest(), &seen, &ignore)
            .map_err(|d| format!("{}: through the FUSE mount: {d}", f.name))?;
        if sha256_file(&f.devices()[0]) != before {
            return Err(format!("{}: the mount changed the image", f.name));
        }
        Ok(())
    });
}

// ------------------------------------------------- root: item for item

/// What a replay leaves, item by item, normalized to what both replays
/// must agree on: every subvolume's items (inode `sequence` and `ctime`
/// aside: the kernel counts changes and stamps re-linked inodes with the
/// time of its replay), the data checksum of every sector, and every data
/// extent's length and reference count. Inodes that were orphans at the
/// last commit are left out (the kernel's mount cleans them up; ubtrfs
/// leaves that to the kernel).
#[derive(Debug, PartialEq)]
struct Replayed {
    items: std::collections::BTreeMap<(u64, ubtrfs_format::Key), Vec<u8>>,
    csums: std::collections::BTreeMap<u64, Vec<u8>>,
    extents: std::collections::BTreeMap<u64, (u64, u64)>,
}

fn orphans_of(img: &Path) -> std::collections::BTreeSet<(u64, u64)> {
    let fs = Filesystem::open(img, &OpenOptions::default()).unwrap();
    let mut out = std::collections::BTreeSet::new();
    for v in fs.subvolumes().unwrap() {
        let tree = fs.tree(v.id).unwrap();
        let lo = ubtrfs_format::Key::new(ORPHAN_OBJECTID, ORPHAN_ITEM, 0);
        let hi = ubtrfs_format::Key::new(ORPHAN_OBJECTID, ORPHAN_ITEM, u64::MAX);
        ubtrfs_engine::ctree::for_each_item(&fs.info, tree, lo, hi, |k, _| {
            out.insert((v.id, k.offset));
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .unwrap();
    }
    out
}

fn replayed(img: &Path, skip: &std::collections::BTreeSet<(u64, u64)>) -> Replayed {
    use std::collections::BTreeMap;
    use std::ops::ControlFlow;
    use ubtrfs_engine::ctree::for_each_item;
    use ubtrfs_format::items::{ExtentRecord, InodeItem, Timespec};
    use ubtrfs_format::Key;
    let fs = Filesystem::open(img, &OpenOptions::default()).unwrap();
    let mut r = Replayed {
        items: BTreeMap::new(),
        csums: BTreeMap::new(),
        extents: BTreeMap::new(),
    };
    for v in fs.subvolumes().unwrap() {
        let tree = fs.tree(v.id).unwrap();
        for_each_item(&fs.info, tree, Key::MIN, Key::MAX, |k, d| {
            let ino = if k.objectid == ORPHAN_OBJECTID {
                k.offset
            } else {
                k.objectid
            };
            if skip.contains(&(v.id, ino)) {
                return Ok(ControlFlow::Continue(()));
            }
            let mut d = d.to_vec();
            if k.item_type == INODE_ITEM {
                let mut ii = InodeItem::parse(&d).unwrap();
                ii.sequence = 0;
                ii.ctime = Timespec { sec: 0, nsec: 0 };
                d = ii.to_bytes();
            }
            r.items.insert((v.id, k), d);
            Ok(ControlFlow::Continue(()))
        })
        .unwrap();
    }
    let ss = fs.info.sectorsize as u64;
    let cs = fs.info.csum_type.size();
    let csum_tree = fs.tree(CSUM_TREE_OBJECTID).unwrap();
    for_each_item(&fs.info, csum_tree, Key::MIN, Key::MAX, |k, d| {
        for (i, c) in d.chunks(cs).enumerate() {
            r.csums.insert(k.offset + i as u64 * ss, c.to_vec());
        }
        Ok(ControlFlow::Continue(()))
    })
    .unwrap();
    let extent_tree = fs.tree(EXTENT_TREE_OBJECTID).unwrap();
    for_each_item(&fs.info, extent_tree, Key::MIN, Key::MAX, |k, d| {
        if k.item_type == EXTENT_ITEM {
            let rec = ExtentRecord::parse(&k, d).unwrap();
            if rec.item.flags & ubtrfs_format::items::EXTENT_FLAG_DATA != 0 {
                r.extents.insert(k.objectid, (k.offset, rec.item.refs));
            }
        }
        Ok(ControlFlow::Continue(()))
    })
    .unwrap();
    r
}

/// The first differences between two replays, for a message.
fn differences(k: &Replayed, u: &Replayed) -> String {
    let mut out = Vec::new();
    for (key, v) in &k.items {
        match u.items.get(key) {
            None => out.push(format!("kernel only: tree {} {}", key.0, key.1)),
            Some(w) if w != v => out.push(format!("differs: tree {} {}", key.0, key.1)),
            _ => {}
        }
    }
    for key in u.items.keys().filter(|x| !k.items.contains_key(x)) {
        out.push(format!("ubtrfs only: tree {} {}", key.0, key.1));
    }
    for (a, c) in &k.csums {
        if u.csums.get(a) != Some(c) {
            out.push(format!("csum of sector {a} differs or missing"));
        }
    }
    for a in u.csums.keys().filter(|a| !k.csums.contains_key(a)) {
        out.push(format!("csum of sector {a} only in ubtrfs"));
    }
    if k.extents != u.extents {
        for (a, e) in &k.extents {
            if u.extents.get(a) != Some(e) {
                out.push(format!(
                    "data extent {a}: kernel {e:?} ubtrfs {:?}",
                    u.extents.get(a)
                ));
            }
        }
        for a in u.extents.keys().filter(|a| !k.extents.contains_key(a)) {
            out.push(format!("data extent {a} only in ubtrfs"));
        }
    }
    out.truncate(20);
    out.join("\n  ")
}

/// `rescue replay-log` leaves the same subvolume items, checksums and
/// data extent references as the kernel's own replay (a read-write mount
/// of a copy).
#[test]
fn kernel_log_images_replay_item_for_item_as_the_kernel() {
    skip_unless!(kernel_available);
    let w = Workdir::new("log-items");
    let mut fixtures: Vec<&Fixture> = kernel_logs().iter().collect();
    fixtures.extend(committed_logs());
    let mut failures = Vec::new();
    for f in fixtures {
        let skip = orphans_of(&f.devices()[0]);
        let k = copy_image(f, &w.0, "kernel.img");
        let m = Mount::images(std::slice::from_ref(&k), "", false);
        m.unmount();
        let u = copy_image(f, &w.0, "ubtrfs.img");
        let o = ubtrfs(&["rescue", "replay-log", &u.display().to_string()]);
        assert!(o.status.success(), "{}: replay-log failed", f.name);
        let (kr, ur) = (replayed(&k, &skip), replayed(&u, &skip));
        if kr != ur {
            failures.push(format!("{}:\n  {}", f.name, differences(&kr, &ur)));
        } else {
            eprintln!(
                "{}: {} items, {} checksums, {} data extents as the kernel's replay",
                f.name,
                kr.items.len(),
                kr.csums.len(),
                kr.extents.len()
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Seeded changes to log tree leaves (item payload bytes, large u64s, key
/// offsets), with the block checksum recomputed so that
/// replay reads them: readers and replay-log end with a result or an
/// error, never a panic, a signal or a hang, and a failed replay-log
/// leaves the image as it was. `UBTRFS_LOG_FLIPS` (default 25 per image).
#[test]
fn changed_log_items_never_panic() {
    use ubtrfs_format::node::{HEADER_SIZE, ITEM_SIZE};
    let flips = env_u64("UBTRFS_LOG_FLIPS").unwrap_or(25);
    let w = Workdir::new("log-flips");
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    for f in committed_logs() {
        let base = &f.devices()[0];
        let fs = Filesystem::open(base, &OpenOptions::default()).unwrap();
        let (root, logs) = log_trees(&fs);
        let mut leaves = Vec::new();
        for t in std::iter::once(root).chain(logs) {
            for b in blocks_of(&fs, t) {
                if b.node().is_leaf() && b.node().nritems() > 0 {
                    leaves.push((b.bytenr, b.node().nritems()));
                }
            }
        }
        drop(fs);
        let mut rng = Rng::for_name(0x109, &f.name);
        for i in 0..flips {
            let img = copy_image(f, &w.0, "flip.img");
            let &(bytenr, n) = rng.pick(&leaves);
            let slot = rng.index(n);
            let what = rng.below(4);
            let noise = rng.next();
            let at_payload = rng.below(64) as usize;
            patch_block(&img, bytenr, true, |b| {
                let h = HEADER_SIZE + slot * ITEM_SIZE;
                let off = u32::from_le_bytes(b[h + 17..h + 21].try_into().unwrap()) as usize;
                let size = u32::from_le_bytes(b[h + 21..h + 25].try_into().unwrap()) as usize;
                match what {
                    // A payload byte (names, lengths, extent fields, ...).
                    0 | 1 if size > 0 => {
                        let p = HEADER_SIZE + off + at_payload % size;
                        if p < b.len() {
                            b[p] ^= (noise as u8) | 1;
                        }
                    }
                    // A payload u64 set to something large.
                    2 if size >= 8 => {
                        let p = HEADER_SIZE + off + (at_payload % (size - 7));
                        if p + 8 <= b.len() {
                            b[p..p + 8].copy_from_slice(&(noise | (1 << 62)).to_le_bytes());
                        }
                    }
                    // The key's offset.
                    _ => b[h + 9..h + 17].copy_from_slice(&noise.to_le_bytes()),
                }
            });
            let before = sha256_file(&img);
            let i_s = img.display().to_string();
            // `ls` replays in memory (every reader does, at open) without
            // reading file data: a replayed size of petabytes is the
            // image's business, not a replay bug.
            for args in [
                vec!["ls".into(), "-l".into(), i_s.clone(), "/".into()],
                vec!["rescue".into(), "replay-log".into(), i_s.clone()],
            ] {
                let r = run_limited(
                    {
                        let mut c = Command::new(ubtrfs_bin());
                        c.args(&args);
                        c
                    },
                    &w.0,
                    Limits {
                        timeout: std::time::Duration::from_secs(60),
                        address_space: Some(2 << 30),
                        file_size: None,
                    },
                );
                if let Err(e) = r.judge(&format!(
                    "{} flip {i} ({what} at {bytenr} slot {slot}): {args:?}",
                    f.name
                )) {
                    // Kept for a look: the image as changed.
                    let keep = w.0.parent().unwrap().join("log-flip-failure.img");
                    let _ = std::fs::copy(&img, &keep);
                    panic!("{e} (image kept as {})", keep.display());
                }
                let ok = r.code == Some(0);
                let key = format!("{} {}", args[0], if ok { "ok" } else { "error" });
                *outcomes.entry(key).or_default() += 1;
                if args[0] == "rescue" && !ok {
                    assert_eq!(
                        before,
                        sha256_file(&img),
                        "{}: flip {i}: a failed replay-log wrote",
                        f.name
                    );
                }
            }
        }
    }
    eprintln!("outcomes: {outcomes:?}");
}
