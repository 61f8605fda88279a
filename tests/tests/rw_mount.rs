//! The read-write mount (`ubtrfs mount -o rw`) judged by the kernel. Each
//! scenario runs twice, with the same code: `*_reference_on_kernel` with
//! the kernel's own read-write btrfs mount as the writer (proving the
//! harness: it must pass today), and `*_ubtrfs*` with ubtrfs's mount as
//! the writer (the subject: it fails until the read-write mount exists).
//! Run only the references with `cargo test --test rw_mount reference`.
//!
//! (a) rw_ops.py (seeded fsx/fsstress-like workload, every read checked
//!     against its model; even seeds with compress=zstd) on a fresh
//!     `ubtrfs mkfs` image; unmount (ubtrfs
//!     must exit 0: everything committed); `btrfs check --readonly` clean;
//!     the kernel mounts it and `rw_ops.py --verify-only` finds the tree
//!     the model expects; the kernel then writes (cp -a, rm -r) and
//!     `btrfs check` stays clean.
//! (b) The same seed through two mounts: the trees' manifests equal, but
//!     for inode numbers and the times the clock set, both live through
//!     each mount and read back by the kernel after unmounting.
//! (c) A read-only snapshot of the top level taken before the mount
//!     (`ubtrfs subvolume snapshot -r`) is unchanged, manifest for
//!     manifest, after the mount rewrote, truncated and deleted the files
//!     it shares and ran rw_ops beside it; writing into it fails (EROFS).
//! (d) SIGKILL in the middle of a workload, at seeded moments (for the
//!     kernel, which cannot be killed, the workload is killed and the
//!     mount unmounted): `btrfs check` clean, the kernel mounts it, reads
//!     everything, writes, and `btrfs check` stays clean.
//! (e) pjdfstest (tests/oracle/pjdfstest.toml): on ubtrfs's mount, every
//!     case that passes on the kernel's mount of the same kind of image
//!     must pass; the counts are printed.
//! (f) fsx (tests/oracle/fsx.toml) on the mount; `btrfs check` clean after.
//! (g) `ubtrfs umount` returns only once the mount's process has made its
//!     last commit and ended (a plain umount of a FUSE mount returns
//!     before): 200 MiB left dirty, then at once `btrfs check` and the
//!     kernel's read. A plain umount of root's fuseblk mount leaves the
//!     device free when it returns (no descriptor of the process has it).
//! (h) O_DIRECT writers (tests/oracle/direct_io.py: 4 processes, direct
//!     and buffered writes, direct and buffered reads checked against a
//!     model) on a fallocated NOCOW file and a COW file; unmount; `btrfs
//!     check`; the kernel reads both files equal to the model, writes to
//!     them with O_DIRECT, and `btrfs check` stays clean. On ubtrfs's
//!     mount the direct writes must have been written in place outside
//!     the lock (the daemon's count, in its log).
//! (i) `btrfs filesystem sync` (btrfs-progs; BTRFS_IOC_SYNC, forwarded by
//!     FUSE) makes what was written durable: mounted with commit=300 (no
//!     interval commit), 64 MiB and 100 small files written, the tool
//!     run, the daemon SIGKILLed: `btrfs check` clean and the kernel
//!     reads every byte. A file written after the sync is not required.
//! (j) Read-ahead pushed into the page cache vs writers
//!     (tests/oracle/push_race.py: a writer rewrites a file generation by
//!     generation while readers drop the page cache and walk it with
//!     small reads, every block at least as new as the last complete
//!     generation): the mount's log must show pushes made and writers
//!     that waited for one to land (the race was run), then `btrfs
//!     check` clean.
//! (k) A SIGKILL while a read-ahead push waits in the kernel for a page a
//!     READ holds (UBTRFS_TEST_READ_DELAY holds the daemon's answer to
//!     the READ of the page at 128 KiB; a READ at 0 pushes [4 KiB, 260
//!     KiB)): the process must end within seconds, as the mount's
//!     watchdog aborts the connection (crates/fuse/src/watchdog.rs); the
//!     held read ends with the page's bytes or ENOTCONN; `btrfs check`
//!     clean.
//! (l) Overwriting fallocated space of a COW file needs no new space (the
//!     kernel writes an inode's preallocated extents in place, with
//!     checksums): a file preallocated over 240 MiB of a 512 MiB image (more than
//!     is left after it) is
//!     rewritten whole in random order, in MiBs and unaligned pieces,
//!     with fsyncs, after the rest of the space was taken by another
//!     file; every write succeeds; unmount; `btrfs check
//!     --check-data-csum` clean; the kernel reads the file equal to the
//!     model (its checksums verified); df's used space grew by less
//!     than 16 MiB.
//! (m) The first copy_file_range calls of a mount, 16 threads at once,
//!     then a copy of a sparse file: a clone that keeps the hole (Linux
//!     6.18 asks for FUSE_COPY_FILE_RANGE_64 first; an ENOSYS to it, seen
//!     by two racing first copies, turned every later copy of the mount
//!     into a byte copy); `btrfs check` clean.
//! (o) What root's mount allows, as the kernel's btrfs: a shell script's
//!     answers (ok/fail of each step) on both mounts must be equal:
//!     inside an append-only directory, names are made (files, dirs,
//!     links, symlinks, fifos) but none removed or renamed away; an
//!     append-only file takes appends and times set to now, not times
//!     set to a value, chmod, truncate or a write without O_APPEND; a
//!     device node works (no nodev); another user sees the mount (no
//!     private mount); a directory removed while open (fstat: nlink 0);
//!     the largest xattr; an ACL clearing S_ISGID; atime after reads and
//!     listings; a file's pages just written still cached at its next
//!     open (mincore); ctime after chattr; xflags btrfs does not keep;
//!     remount ro (refused with a writer) and rw; a listing while its
//!     names are renamed ends; O_TMPFILE and linkat; a file handle after
//!     drop_caches; renameat2's flags (WHITEOUT); the label; set-ID bits
//!     after fallocate, punch, zero range, buffered and direct writes by
//!     a user and by root, after an O_TRUNC open, a truncate and a chown;
//!     security.capability after a write, a truncate and a chown. Then
//!     `btrfs check`.
//!
//! Environment: UBTRFS_RW_SEEDS (comma list, default 1,2,3),
//! UBTRFS_RW_OPS (operations per worker, default 2000), UBTRFS_RW_PROCS
//! (workers, default 4), UBTRFS_RW_KILLS (kills in (d), default 3),
//! UBTRFS_FSX_OPS (default 5000), UBTRFS_RW_IMAGE_SIZE (default 1G),
//! UBTRFS_PJDFSTEST / UBTRFS_FSX (the tools, else PATH or ~/.cargo/bin;
//! `bash scripts/setup.sh` installs them).
//!
//! Needs root, the kernel's btrfs, loop devices, /dev/fuse; pjdfstest and
//! fsx for (e) and (f), and the user `tests` for pjdfstest. Under
//! UBTRFS_REQUIRE_KERNEL=1 a missing prerequisite fails the test.

use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use ubtrfs_oracle::*;

/// A dirty limit of 1 MiB for ubtrfs's mount in (a), (d) and (f): writes
/// write everything back often, with the bytes written outside the lock
/// while other processes' reads go on (vfs/ordered.rs).
const SMALL_DIRTY_LIMIT: &[(&str, &str)] = &[("UBTRFS_DIRTY_LIMIT_KB", "1024")];

/// UBTRFS_RW_SEEDS (a comma list), else 1, 2 and 3.
fn rw_seeds() -> Vec<u64> {
    seeds("UBTRFS_RW_SEEDS", None, 3)
}

fn ops() -> u64 {
    env_u64("UBTRFS_RW_OPS").unwrap_or(2000)
}

fn procs() -> u32 {
    env_u64("UBTRFS_RW_PROCS").unwrap_or(4) as u32
}

fn image_size() -> String {
    std::env::var("UBTRFS_RW_IMAGE_SIZE").unwrap_or_else(|_| "1G".into())
}

/// `dir` (made) with a fresh image of `size` in it (fs.img), and a mount
/// point beside it (mnt, not mounted yet): (the image, the mount point).
fn fresh_image(dir: &Path, size: &str) -> Result<(PathBuf, PathBuf), String> {
    std::fs::create_dir_all(dir).unwrap();
    let image = dir.join("fs.img");
    mkfs_image(&image, size)?;
    Ok((image, dir.join("mnt")))
}

/// Runs `f` for each seed; panics listing every failure.
fn each_seed(test: &str, f: impl Fn(u64) -> Result<String, String>) {
    let mut failures = Vec::new();
    for seed in rw_seeds() {
        let t = Instant::now();
        match f(seed) {
            Ok(note) => eprintln!("{test}: seed {seed}: {note} ({:.1?} in all)", t.elapsed()),
            Err(e) => failures.push(format!("seed {seed}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{test}:\n{}", failures.join("\n"));
}

/// The scenarios' tests, one line each: `#[test] fn NAME` with the writer
/// W (`Kernel`, the reference, or `Ubtrfs`, the subject) under test,
/// skipped (failed under UBTRFS_REQUIRE_KERNEL=1) when W's mount cannot
/// run here.
///
/// - `seeded NAME(W, "what") = CASE;`: CASE(W, seed, base) for each seed
///   ([`each_seed`]), base a scratch directory rw-WHAT-WRITER;
/// - `once NAME(W) = CASE;`: CASE(W, base) once in a fresh directory
///   ([`one_case`]).
macro_rules! scenarios {
    () => {};
    (seeded $name:ident($w:ident, $what:literal) = $case:expr; $($rest:tt)*) => {
        #[test]
        fn $name() {
            let test = stringify!($name);
            if !ready(test, Writer::$w) {
                return;
            }
            let case: fn(Writer, u64, &Path) -> Result<String, String> = $case;
            let base = Workdir::new(&format!("rw-{}-{}", $what, Writer::$w.name()));
            each_seed(test, |s| case(Writer::$w, s, &base));
        }
        scenarios! { $($rest)* }
    };
    (once $name:ident($w:ident) = $case:expr; $($rest:tt)*) => {
        #[test]
        fn $name() {
            let case: fn(Writer, &Path) -> Result<String, String> = $case;
            one_case(stringify!($name), Writer::$w, |base| case(Writer::$w, base));
        }
        scenarios! { $($rest)* }
    };
}

// The scenarios but (e), (f) and (o), which are plain tests below.
scenarios! {
    // (a)
    seeded rw_ops_reference_on_kernel(Kernel, "ops") = rw_ops_then_kernel;
    seeded rw_ops_on_ubtrfs_mount(Ubtrfs, "ops") = rw_ops_then_kernel;
    // (b)
    seeded same_seed_reference_on_kernel_twice(Kernel, "same") =
        |w, s, base| same_seed_trees(Writer::Kernel, w, s, base);
    seeded same_seed_ubtrfs_mount_as_kernel(Ubtrfs, "same") =
        |w, s, base| same_seed_trees(Writer::Kernel, w, s, base);
    // (c)
    seeded snapshot_reference_on_kernel(Kernel, "snap") = snapshot_kept;
    seeded snapshot_unchanged_by_ubtrfs_mount(Ubtrfs, "snap") = snapshot_kept;
    // (d)
    seeded kill_reference_on_kernel(Kernel, "kill") = kill_mid_run;
    seeded kill9_ubtrfs_mount_mid_run(Ubtrfs, "kill") = kill_mid_run;
    // (g)
    once umount_waits_for_the_last_commit(Ubtrfs) =
        |_, base| umount_case(base, 1).map(|()| String::new());
    once plain_umount_leaves_the_device_free(Ubtrfs) =
        |_, base| device_free_case(base).map(|()| String::new());
    // (i)
    once filesystem_sync_is_durable(Ubtrfs) =
        |_, base| filesystem_sync_case(base, 2).map(|()| String::new());
    // (j)
    once push_race_reference_on_kernel(Kernel) = push_race_case;
    once push_race_on_ubtrfs_mount(Ubtrfs) = push_race_case;
    // (h)
    seeded direct_io_reference_on_kernel(Kernel, "direct") = direct_io_case;
    seeded direct_io_on_ubtrfs_mount(Ubtrfs, "direct") = direct_io_case;
    // (k)
    once kill9_while_a_push_waits_for_a_read(Ubtrfs) = |_, base| kill9_push_case(base);
    // fstrim; root's mount and FUSE over io_uring
    once fstrim_shrinks_the_image_and_keeps_the_tree(Ubtrfs) = |_, base| fstrim_case(base);
    once root_mount_turns_fuse_io_uring_on(Ubtrfs) = |_, base| root_mount_io_uring_case(base);
    // (l)
    once prealloc_overwrite_reference_on_kernel(Kernel) = prealloc_overwrite_case;
    once prealloc_overwrite_on_ubtrfs_mount(Ubtrfs) = prealloc_overwrite_case;
    // (m)
    once first_copies_reference_on_kernel(Kernel) = first_copies_case;
    once first_copies_on_ubtrfs_mount(Ubtrfs) = first_copies_case;
    // (n); metadata ENOSPC
    once space_after_unlink_reference_on_kernel(Kernel) = space_after_unlink_case;
    once space_after_unlink_on_ubtrfs_mount(Ubtrfs) = space_after_unlink_case;
    once metadata_enospc_loses_nothing_on_ubtrfs_mount(Ubtrfs) = metadata_enospc_case;
}

// ------------------------------------------------------------------ (a)

fn rw_ops_then_kernel(w: Writer, seed: u64, base: &Path) -> Result<String, String> {
    let dir = base.join(format!("{}-{seed}", w.name()));
    let (image, mnt) = fresh_image(&dir, &image_size())?;
    // Even seeds write compressed (zstd), on both mounts.
    let opts = if seed.is_multiple_of(2) {
        "compress=zstd"
    } else {
        ""
    };
    let m = RwMount::start_env(w, &image, &mnt, opts, SMALL_DIRTY_LIMIT)?;
    let log = match &m {
        RwMount::Ubtrfs(u) => Some(u.log.clone()),
        RwMount::Kernel(_) => None,
    };
    let t = mnt.join("t");
    std::fs::create_dir(&t).map_err(|e| format!("mkdir {}: {e}", t.display()))?;
    let ops = RwOps::new(seed, ops(), procs());
    let r = ops.run(&t, &dir);
    let m = m.check_run(&r, &format!("rw_ops through the {} mount", w.name()))?;
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    let mut note = String::new();
    if let Some(log) = log {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let what = " writebacks written outside the lock";
        match daemon_count(&text, what) {
            Some(n) if n > 0 => note = format!(", {n}{what}"),
            n => return Err(format!("{n:?}{what}: {}", tail(&text, 800))),
        }
    }
    check(&image, &format!("after the {} mount", w.name()))?;

    let k = RwMount::start(Writer::Kernel, &image, &mnt, "")?;
    let v = ops.verify(&t, &r, &dir);
    let k = k.check_run(
        &v,
        &format!("the kernel's view after the {} mount", w.name()),
    )?;
    kernel_writes_on_top(k, &t, &mnt)?;
    check(&image, "after the kernel wrote on top")?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!("rw_ops {}{note}", r.brief()))
}

// ------------------------------------------------------------------ (b)

/// The same rw_ops run through `a`'s and `b`'s mounts of two fresh
/// images: their manifests, live and read back by the kernel.
fn same_seed_trees(a: Writer, b: Writer, seed: u64, base: &Path) -> Result<String, String> {
    let mut live = Vec::new();
    let mut ro = Vec::new();
    let mut runs = Vec::new();
    for (i, w) in [a, b].into_iter().enumerate() {
        let dir = base.join(format!("{seed}-{i}-{}", w.name()));
        let (image, mnt) = fresh_image(&dir, &image_size())?;
        let m = RwMount::start(w, &image, &mnt, "")?;
        let t = mnt.join("t");
        std::fs::create_dir(&t).map_err(|e| e.to_string())?;
        let r = RwOps::new(seed, ops(), procs()).run(&t, &dir);
        let m = m.check_run(&r, &format!("rw_ops through the {} mount", w.name()))?;
        live.push(manifest_of(&mnt));
        m.finish()
            .map_err(|e| format!("{} unmount: {e}", w.name()))?;
        check(&image, &format!("after the {} mount", w.name()))?;
        let k = kernel_ro(&image, &mnt);
        ro.push(manifest_of(&mnt));
        drop(k);
        runs.push(r);
        let _ = std::fs::remove_dir_all(&dir);
    }
    let refused: Vec<&serde_json::Value> = runs.iter().map(|r| &r.summary["eopnotsupp"]).collect();
    if refused[0] != refused[1] {
        return Err(format!(
            "the mounts refused different fallocate modes ({}: {}, {}: {}): the trees cannot match",
            a.name(),
            refused[0],
            b.name(),
            refused[1]
        ));
    }
    let explicit = runs[0].explicit_mtimes();
    let n = compare_rw_manifests(&live[0], &live[1], &explicit, "/t").map_err(|d| {
        format!(
            "live through the mounts, {} (expected) vs {}: {d}",
            a.name(),
            b.name()
        )
    })?;
    compare_rw_manifests(&ro[0], &ro[1], &explicit, "/t").map_err(|d| {
        format!(
            "read back by the kernel, {} (expected) vs {}: {d}",
            a.name(),
            b.name()
        )
    })?;
    Ok(format!(
        "{n} paths equal ({} mtimes compared); {} then {}",
        explicit.len(),
        runs[0].brief(),
        runs[1].brief()
    ))
}

// ------------------------------------------------------------------ (c)

/// Changes every regular file below `dir` (seeded): overwrite, truncate,
/// delete, append or chmod. Returns how many it changed.
fn scribble(dir: &Path, seed: u64) -> Result<usize, String> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))? {
            let p = e.map_err(|e| e.to_string())?.path();
            let md = std::fs::symlink_metadata(&p).map_err(|e| e.to_string())?;
            if md.is_dir() {
                stack.push(p);
            } else if md.is_file() {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut rng = Rng::new(seed);
    let err = |p: &Path, e: std::io::Error| format!("scribble {}: {e}", p.display());
    for p in &files {
        let len = std::fs::metadata(p).map_err(|e| err(p, e))?.len();
        let data: Vec<u8> = (0..1 + rng.below(8192)).map(|_| rng.next() as u8).collect();
        match rng.below(5) {
            0 => {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(p)
                    .map_err(|e| err(p, e))?;
                f.seek(SeekFrom::Start(rng.below(len + 1)))
                    .and_then(|_| f.write_all(&data))
                    .map_err(|e| err(p, e))?;
            }
            1 => std::fs::OpenOptions::new()
                .write(true)
                .open(p)
                .and_then(|f| f.set_len(len / 2))
                .map_err(|e| err(p, e))?,
            2 => std::fs::remove_file(p).map_err(|e| err(p, e))?,
            3 => std::fs::OpenOptions::new()
                .append(true)
                .open(p)
                .and_then(|mut f| f.write_all(&data))
                .map_err(|e| err(p, e))?,
            _ => std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| err(p, e))?,
        }
    }
    Ok(files.len())
}

fn snapshot_kept(w: Writer, seed: u64, base: &Path) -> Result<String, String> {
    let dir = base.join(format!("{}-{seed}", w.name()));
    let (image, mnt) = fresh_image(&dir, &image_size())?;
    // The origin's files, written by the kernel.
    let k = RwMount::start(Writer::Kernel, &image, &mnt, "")?;
    std::fs::create_dir(mnt.join("t")).map_err(|e| e.to_string())?;
    let fill = RwOps::new(seed, ops() / 2, 2).run(&mnt.join("t"), &dir);
    k.finish()?;
    if !fill.ok() {
        return Err(format!("filling the origin: {}", fill.describe()));
    }
    run(Command::new(ubtrfs_bin())
        .args(["subvolume", "snapshot", "-r"])
        .arg(&image)
        .args(["/", "/snap"]))?;
    let k = kernel_ro(&image, &mnt);
    let before = manifest_of(&mnt.join("snap"));
    let origin_before = manifest_of(&mnt.join("t"));
    drop(k);

    let m = RwMount::start(w, &image, &mnt, "")?;
    let snap_write = std::fs::write(mnt.join("snap/new-file"), b"x");
    let changed = scribble(&mnt.join("t"), seed);
    std::fs::create_dir(mnt.join("t2")).map_err(|e| e.to_string())?;
    let beside = RwOps::new(seed + 1000, ops() / 2, 2).run(&mnt.join("t2"), &dir);
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    match snap_write {
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => {}
        other => {
            return Err(format!(
                "writing into the read-only snapshot: {other:?}, expected EROFS"
            ))
        }
    }
    let changed = changed?;
    if !beside.ok() {
        return Err(format!("rw_ops beside the snapshot: {}", beside.describe()));
    }
    check(&image, &format!("after the {} mount", w.name()))?;
    let k = kernel_ro(&image, &mnt);
    let after = manifest_of(&mnt.join("snap"));
    let origin_after = manifest_of(&mnt.join("t"));
    drop(k);
    let n = compare_manifests(&before, &after, &Ignore::default())
        .map_err(|d| format!("the snapshot changed: {d}"))?;
    if origin_after == origin_before || changed == 0 {
        return Err("the origin did not change: the test shows nothing".into());
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!(
        "{n} snapshot paths unchanged after {changed} shared files were changed; {}",
        beside.brief()
    ))
}

// ------------------------------------------------------------------ (d)

fn kills() -> u64 {
    env_u64("UBTRFS_RW_KILLS").unwrap_or(3)
}

/// Kills in the middle of workloads on one image, at seeded moments, with
/// a commit every second; after each: check, kernel mount, read all,
/// write, check.
fn kill_mid_run(w: Writer, seed: u64, base: &Path) -> Result<String, String> {
    let dir = base.join(format!("{}-{seed}", w.name()));
    let (image, mnt) = fresh_image(&dir, &image_size())?;
    let mut rng = Rng::new(seed);
    let mut notes = Vec::new();
    for k in 0..kills() {
        let delay = Duration::from_millis(300 + rng.below(2700));
        let when = format!("kill {k} after {delay:?}");
        let m = RwMount::start_env(w, &image, &mnt, "commit=1", SMALL_DIRTY_LIMIT)?;
        let t = mnt.join(format!("t{k}"));
        std::fs::create_dir(&t).map_err(|e| e.to_string())?;
        let work = RwOps::new(seed * 1000 + k, 1_000_000, procs()).spawn(&t, &dir);
        std::thread::sleep(delay);
        match m {
            RwMount::Ubtrfs(mut u) => {
                let killed = u.kill9();
                kill_group(work);
                killed.map_err(|e| format!("{when}: {e}"))?;
            }
            RwMount::Kernel(km) => {
                kill_group(work);
                km.try_unmount()
                    .map_err(|e| format!("{when}: unmount: {e}"))?;
            }
        }
        check(&image, &format!("after {when}"))?;
        let km = RwMount::start(Writer::Kernel, &image, &mnt, "")
            .map_err(|e| format!("{when}: the kernel cannot mount it: {e}"))?;
        let lines = manifest_of(&mnt);
        let wrote = std::fs::write(mnt.join(format!("kernel-{k}")), vec![k as u8; 100_000]);
        km.finish()
            .map_err(|e| format!("{when}: kernel unmount: {e}"))?;
        wrote.map_err(|e| format!("{when}: kernel write: {e}"))?;
        check(&image, &format!("after {when} and a kernel mount"))?;
        notes.push(format!("{delay:?}: {} paths", lines.len()));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(notes.join(", "))
}

// ------------------------------------------------------------------ (e)

/// Cases the kernel's btrfs fails with tests/oracle/pjdfstest.toml:
/// directories keep one link on btrfs, so rename::updates_link_parent
/// (the parent's link count after moving a directory in) fails.
const KERNEL_PJDFSTEST_FAILURES: &[&str] = &["rename::updates_link_parent"];

/// The case that fails now and then on ubtrfs's mount alone (see
/// `pjdfstest_on_ubtrfs_mount`).
const FLAKY_ON_UBTRFS: &str = "open::etxtbsy";

/// pjdfstest on `w`'s mount of a fresh image, in a directory every user
/// can reach (under /tmp, mode 755). ubtrfs mounts with allow_other:
/// pjdfstest runs cases as nobody and tests. Returns the result and, for
/// ubtrfs, the daemon's error and warning lines (its log goes with the
/// mount's directory).
fn pjdfstest_on(
    w: Writer,
    bin: &Path,
    tmp: &Path,
    patterns: &[&str],
) -> Result<(PjdResult, String), String> {
    // Removed on return (after the mount, declared later, is dropped).
    let top = Workdir(tempdir("ubtrfs-pjd"));
    std::fs::set_permissions(&*top, std::fs::Permissions::from_mode(0o755)).unwrap();
    let image = tmp.join(format!("{}.img", w.name()));
    mkfs_image(&image, &image_size())?;
    let mnt = top.join("mnt");
    let extra = if w == Writer::Ubtrfs {
        "allow_other"
    } else {
        ""
    };
    let m = RwMount::start(w, &image, &mnt, extra)?;
    let dir = mnt.join("pjd");
    std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let secondary = top.join("secondary");
    std::fs::create_dir(&secondary).unwrap();
    let r = run_pjdfstest(bin, &dir, &secondary, tmp, patterns);
    let log = match &m {
        RwMount::Ubtrfs(u) => u.log.clone(),
        RwMount::Kernel(_) => PathBuf::new(),
    };
    let fin = m.finish();
    let notes: String = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("error") || l.contains("warn"))
        .take(40)
        .map(|l| format!("{l}\n"))
        .collect();
    let r = r?;
    fin.map_err(|e| format!("unmount after pjdfstest: {e}"))?;
    check(
        &image,
        &format!("after pjdfstest on the {} mount", w.name()),
    )?;
    let _ = std::fs::remove_file(&image);
    Ok((r, notes))
}

/// For `test` through `w`'s mount (None when that mount, pjdfstest or
/// its users are missing here): pjdfstest, a scratch directory, and the
/// results on the kernel's mount (the reference), printed.
fn pjdfstest_on_kernel(test: &str, w: Writer) -> Option<(PathBuf, Workdir, PjdResult)> {
    if !ready(test, w) || !user_available(test, "tests") || !user_available(test, "nobody") {
        return None;
    }
    let bin = cargo_tool(test, "pjdfstest")?;
    let tmp = Workdir::new(&format!("rw-pjd-{}", w.name()));
    let (r, _) = pjdfstest_on(Writer::Kernel, &bin, &tmp, &[]).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{test}: kernel: {} ({:.1?})", r.counts(), r.elapsed);
    Some((bin, tmp, r))
}

#[test]
fn pjdfstest_reference_on_kernel() {
    let test = "pjdfstest_reference_on_kernel";
    let Some((_, _, r)) = pjdfstest_on_kernel(test, Writer::Kernel) else {
        return;
    };
    let failed = r.with(PjdStatus::Failed);
    let unknown: Vec<&&str> = failed
        .iter()
        .filter(|n| !KERNEL_PJDFSTEST_FAILURES.contains(n))
        .collect();
    assert!(
        unknown.is_empty(),
        "{test}: the kernel's btrfs fails cases it did not: {unknown:?} ({})",
        r.counts()
    );
    assert!(
        r.passed >= 300,
        "{test}: only {} cases passed: is the configuration read? ({})",
        r.passed,
        r.counts()
    );
}

#[test]
fn pjdfstest_on_ubtrfs_mount() {
    let test = "pjdfstest_on_ubtrfs_mount";
    let Some((bin, tmp, kernel)) = pjdfstest_on_kernel(test, Writer::Ubtrfs) else {
        return;
    };
    let (ours, notes) =
        pjdfstest_on(Writer::Ubtrfs, &bin, &tmp, &[]).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{test}: ubtrfs: {} ({:.1?})", ours.counts(), ours.elapsed);
    let mut worse = ours.regressions_from(&kernel);
    // open::etxtbsy fails in about one pjdfstest run in seven on our mount
    // (an open for writing right after the spawn of the copied binary
    // succeeds), never on the kernel's; cause not found yet
    // (docs/rw-tests.md). It must pass when run alone, within 3 tries.
    let flaky = |w: &String| w.starts_with(&format!("{FLAKY_ON_UBTRFS} "));
    let mut recovered = 0;
    if worse.iter().any(flaky) {
        let mut tries = Vec::new();
        for _ in 0..3 {
            let (again, _) = pjdfstest_on(Writer::Ubtrfs, &bin, &tmp, &[FLAKY_ON_UBTRFS])
                .unwrap_or_else(|e| panic!("{e}"));
            let ok = again.with(PjdStatus::Passed).contains(&FLAKY_ON_UBTRFS);
            tries.push(ok);
            if ok {
                worse.retain(|w| !flaky(w));
                recovered = 1;
                break;
            }
        }
        eprintln!("{test}: FLAKY: {FLAKY_ON_UBTRFS} failed in the full run; run alone: {tries:?}");
    }
    assert!(
        worse.is_empty() && ours.passed + recovered >= kernel.passed,
        "{test}: {} cases pass on the kernel's mount and not on ubtrfs's (kernel: {}; ubtrfs: {}):\n  {}\nthe daemon's errors and warnings:\n{notes}",
        worse.len(),
        kernel.counts(),
        ours.counts(),
        worse.join("\n  ")
    );
}

#[test]
fn pjdfstest_output_parses() {
    let out = "\
unlink::remove_type::fifo                                                     ok
rename::updates_link_parent                                               FAILED
\tassertion `left == right` failed
  left: 1
 right: 3
Backtrace:
   0: std::backtrace::Backtrace::create
rename::exdev_target                                                     skipped
\trequires features: secondary_fs
utimensat::y2038                                             failed as expected
chmod::eperm                                                 PASSED UNEXPECTEDLY

Summary: 2 failed, 1 skipped, 1 passed, 1 expected failures, 5 total
";
    let r = parse_pjdfstest(out).unwrap();
    assert_eq!(
        (r.passed, r.failed, r.skipped, r.expected_failures, r.total),
        (1, 2, 1, 1, 5)
    );
    assert_eq!(
        r.with(PjdStatus::Failed),
        vec!["rename::updates_link_parent"]
    );
    assert_eq!(r.with(PjdStatus::UnexpectedPass), vec!["chmod::eperm"]);
    assert!(r.messages["rename::updates_link_parent"].contains("left == right"));
    // A summary that does not match the cases is an error, as is none.
    let bad = out.replace("1 passed", "2 passed");
    assert!(parse_pjdfstest(&bad).is_err());
    assert!(parse_pjdfstest("chmod::eperm ok\n").is_err());
    // Colours are stripped.
    let coloured = "\u{1b}[34mchmod::x\u{1b}[0m \u{1b}[32mok\u{1b}[0m\n\
                    Summary: 0 failed, 0 skipped, 1 passed, 0 expected failures, 1 total\n";
    assert_eq!(
        parse_pjdfstest(coloured).unwrap().with(PjdStatus::Passed),
        vec!["chmod::x"]
    );
    // Regressions: passes on the reference, not here.
    let mut reference = PjdResult::default();
    reference.cases.insert("a::b".into(), PjdStatus::Passed);
    reference.cases.insert("a::c".into(), PjdStatus::Failed);
    let mut ours = PjdResult::default();
    ours.cases.insert("a::b".into(), PjdStatus::Failed);
    ours.cases.insert("a::c".into(), PjdStatus::Passed);
    assert_eq!(
        ours.regressions_from(&reference),
        vec!["a::b (Some(Failed))"]
    );
}

#[test]
fn rw_manifests_are_masked() {
    let rec = |path: &str, ino: u64, mtime: u64, sha: &str| {
        format!(
            r#"{{"path":"{path}","type":"file","ino":{ino},"mode":420,"uid":0,"gid":0,"size":1,"rdev":0,"mtime_ns":{mtime},"target":null,"xattrs":{{}},"link":null,"sha256":"{sha}","data":[[0,1]]}}"#
        )
    };
    let a = vec![rec("/t/x", 1, 5, "a"), rec("/t/y", 2, 5, "a")];
    let explicit = vec!["/x".to_string()];
    let same = vec![rec("/t/x", 9, 5, "a"), rec("/t/y", 8, 6, "a")];
    assert_eq!(compare_rw_manifests(&a, &same, &explicit, "/t"), Ok(2));
    let mtime = vec![rec("/t/x", 1, 6, "a"), rec("/t/y", 2, 5, "a")];
    assert!(compare_rw_manifests(&a, &mtime, &explicit, "/t").is_err());
    let content = vec![rec("/t/x", 1, 5, "a"), rec("/t/y", 2, 5, "b")];
    assert!(compare_rw_manifests(&a, &content, &explicit, "/t").is_err());
}

// ------------------------------------------------------------------ (f)

fn fsx_on(w: Writer, bin: &Path, base: &Path) -> Result<String, String> {
    let dir = base.join(w.name());
    let (image, mnt) = fresh_image(&dir, &image_size())?;
    let m = RwMount::start_env(w, &image, &mnt, "", SMALL_DIRTY_LIMIT)?;
    let n = env_u64("UBTRFS_FSX_OPS").unwrap_or(5000);
    let mut notes = Vec::new();
    for seed in rw_seeds() {
        let r = run_fsx(
            bin,
            &mnt.join(format!("fsx-{seed}")),
            seed,
            n,
            &dir.join(format!("fsx-artifacts-{seed}")),
            &dir,
        );
        if !r.ok {
            let _ = m.finish();
            return Err(format!(
                "fsx -S {seed} -N {n} on the {} mount: exit {:?}; output ends: {}",
                w.name(),
                r.code,
                tail(&r.output, 3000)
            ));
        }
        notes.push(format!("seed {seed}: {n} ops in {:.1?}", r.elapsed));
    }
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    check(&image, &format!("after fsx on the {} mount", w.name()))?;
    let k = kernel_ro(&image, &mnt);
    let lines = manifest_of(&mnt);
    drop(k);
    if lines.len() != rw_seeds().len() + 1 {
        return Err(format!("the kernel sees {} paths after fsx", lines.len()));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(notes.join(", "))
}

/// (f) through `w`'s mount, when fsx is here.
fn fsx_test(test: &str, w: Writer) {
    if !ready(test, w) {
        return;
    }
    let Some(bin) = cargo_tool(test, "fsx") else {
        return;
    };
    let base = Workdir::new(&format!("rw-fsx-{}", w.name()));
    let r = fsx_on(w, &bin, &base).unwrap_or_else(|e| panic!("{test}: {e}"));
    eprintln!("{test}: {r}");
}

#[test]
fn fsx_reference_on_kernel() {
    fsx_test("fsx_reference_on_kernel", Writer::Kernel);
}

#[test]
fn fsx_on_ubtrfs_mount() {
    fsx_test("fsx_on_ubtrfs_mount", Writer::Ubtrfs);
}

// ------------------------------------------------------------------ (g)

/// 1 MiB blocks of seeded bytes: block `i` of file seed `seed`.
fn pseudo_block(seed: u64, i: u64) -> Vec<u8> {
    Rng::new(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).bytes(1 << 20)
}

/// Writes 200 MiB (left dirty: under the mount's 256 MiB writeback
/// limit), runs `ubtrfs umount`, and requires the process gone at once,
/// the image clean and the file whole in the kernel's mount.
fn umount_case(base: &Path, seed: u64) -> Result<(), String> {
    let how = "ubtrfs umount";
    let dir = base.join("umount");
    let (image, mnt) = fresh_image(&dir, "1G")?;
    let m = UbtrfsMount::start(&image, &mnt, "")?;
    let mib = 200;
    {
        let mut f = std::fs::File::create(mnt.join("big")).map_err(|e| e.to_string())?;
        for i in 0..mib {
            f.write_all(&pseudo_block(seed, i))
                .map_err(|e| e.to_string())?;
        }
    }
    let t = Instant::now();
    let out = Command::new(ubtrfs_bin())
        .arg("umount")
        .arg(&mnt)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{how}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let took = t.elapsed();
    let status = m
        .ended()
        .map_err(|e| format!("{how} returned after {took:?}: {e}"))?;
    if !status.success() {
        return Err(format!("{how}: the mount's process exited with {status}"));
    }
    check(&image, &format!("right after {how}"))?;
    let k = kernel_ro(&image, &dir.join("kmnt"));
    let mut f = std::fs::File::open(k.path("big")).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..mib {
        std::io::Read::read_exact(&mut f, &mut buf)
            .map_err(|e| format!("{how}: kernel read of MiB {i}: {e}"))?;
        if buf != pseudo_block(seed, i) {
            return Err(format!(
                "{how}: MiB {i} of the file differs in the kernel's mount"
            ));
        }
    }
    k.unmount();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Root's read-write mount of a loop device (a fuseblk mount), a file
/// written, a plain `umount`: as on the kernel's btrfs, the device is let
/// go the moment umount returns. The daemon may still be ending, but none
/// of its descriptors is the device (it held it until it exited, 1-2 s
/// later, and `losetup -d` waited for that: fstests generic/361 found the
/// filesystem under the loop's file busy).
fn device_free_case(base: &Path) -> Result<(), String> {
    let dir = base.join("device-free");
    let (image, mnt) = fresh_image(&dir, "1G")?;
    let lo = LoopDev::attach(&image, false);
    let m = UbtrfsMount::start(Path::new(&lo.dev), &mnt, "")?;
    let pid = m.pid().ok_or("the mount has no process")?;
    std::fs::write(mnt.join("f"), vec![7u8; 8 << 20]).map_err(|e| e.to_string())?;
    unmount_cmd(Command::new("umount").arg(&mnt))?;
    let held: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == Path::new(&lo.dev)))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    m.exit_within(Duration::from_secs(30))?;
    if !held.is_empty() {
        return Err(format!(
            "right after a plain umount, the mount's process still has {} open (fd {})",
            lo.dev,
            held.join(", ")
        ));
    }
    drop(lo);
    check(&image, "after a plain umount")?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

// ------------------------------------------------------------------ (i)

fn filesystem_sync_case(base: &Path, seed: u64) -> Result<(), String> {
    let dir = base.join("fs-sync");
    let (image, mnt) = fresh_image(&dir, "1G")?;
    let mut m = UbtrfsMount::start(&image, &mnt, "commit=300")?;
    let write = |name: &str, data: &[u8]| {
        std::fs::write(mnt.join(name), data).map_err(|e| format!("write {name}: {e}"))
    };
    let mib = 64;
    let big: Vec<u8> = (0..mib).flat_map(|i| pseudo_block(seed, i)).collect();
    write("big", &big)?;
    std::fs::create_dir(mnt.join("d")).map_err(|e| e.to_string())?;
    for i in 0..100 {
        write(&format!("d/{i}"), format!("small file {i}\n").as_bytes())?;
    }
    let out = Command::new("btrfs")
        .args(["filesystem", "sync"])
        .arg(&mnt)
        .output()
        .map_err(|e| format!("btrfs filesystem sync: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "btrfs filesystem sync: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    write("after", b"written after the sync")?;
    m.kill9()?;
    check(&image, "after btrfs filesystem sync and SIGKILL")?;
    let k = kernel_ro(&image, &dir.join("kmnt"));
    let got = std::fs::read(k.path("big")).map_err(|e| format!("kernel read of big: {e}"));
    let small: Result<Vec<_>, String> = (0..100)
        .map(|i| {
            std::fs::read(k.path(&format!("d/{i}")))
                .map_err(|e| format!("kernel read of d/{i}: {e}"))
                .and_then(|b| {
                    (b == format!("small file {i}\n").as_bytes())
                        .then_some(())
                        .ok_or(format!("d/{i} differs in the kernel's mount"))
                })
        })
        .collect();
    k.unmount();
    if got? != big {
        return Err("big differs in the kernel's mount".into());
    }
    small?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

// ------------------------------------------------------------------ (j)

/// A fresh 512 MiB image in `base`/WRITER, mounted read-write by `w` on
/// its `mnt`: (the directory, the image, the mount point, the mount).
fn fresh_512m(w: Writer, base: &Path) -> Result<(PathBuf, PathBuf, PathBuf, RwMount), String> {
    let dir = base.join(w.name());
    let (image, mnt) = fresh_image(&dir, "512M")?;
    let m = RwMount::start(w, &image, &mnt, "")?;
    Ok((dir, image, mnt, m))
}

fn push_race_case(w: Writer, base: &Path) -> Result<String, String> {
    let (dir, image, mnt, m) = fresh_512m(w, base)?;
    let log = match &m {
        RwMount::Ubtrfs(u) => Some(u.log.clone()),
        RwMount::Kernel(_) => None,
    };
    let r = run(Command::new("python3")
        .arg(repo_root().join("tests/oracle/push_race.py"))
        .arg(mnt.join("f"))
        .args(["20", "2"]));
    let fin = m.finish();
    r.map_err(|e| format!("push_race.py through the {} mount: {e}", w.name()))?;
    fin.map_err(|e| format!("unmount: {e}"))?;
    let mut note = String::from("push_race.py passed");
    if let Some(log) = log {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // "read-ahead pushed: N windows, M MiB; K writers waited ..."
        let line = text
            .lines()
            .rev()
            .find_map(|l| {
                l.split_once("read-ahead pushed: ")
                    .map(|(_, r)| r.to_string())
            })
            .ok_or_else(|| format!("no push count in the mount's log: {}", tail(&text, 800)))?;
        let num = |after: &str| -> u64 {
            line.split_once(after)
                .map_or("", |(a, _)| a)
                .rsplit(|c: char| !c.is_ascii_digit())
                .find(|t| !t.is_empty())
                .and_then(|t| t.parse().ok())
                .unwrap_or(0)
        };
        let (pushed, waited) = (num(" windows"), num(" writers waited"));
        if pushed == 0 || waited == 0 {
            return Err(format!(
                "the race did not run ({pushed} pushes, {waited} writers waited): {line}"
            ));
        }
        note = format!("{note}; {line}");
    }
    check(
        &image,
        &format!("after push_race.py on the {} mount", w.name()),
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(note)
}

// ------------------------------------------------------------------ (h)

fn direct_io_script() -> PathBuf {
    repo_root().join("tests/oracle/direct_io.py")
}

fn direct_io_case(w: Writer, seed: u64, base: &Path) -> Result<String, String> {
    let dir = base.join(format!("{}-{seed}", w.name()));
    let (image, mnt) = fresh_image(&dir, "512M")?;
    let (procs, ops) = ("4", "400");
    let m = RwMount::start(w, &image, &mnt, "")?;
    let log = match &m {
        RwMount::Ubtrfs(u) => Some(u.log.clone()),
        RwMount::Kernel(_) => None,
    };
    let seed_s = seed.to_string();
    let r = run(Command::new("python3")
        .arg(direct_io_script())
        .arg(&mnt)
        .args([seed_s.as_str(), procs, ops]));
    if let Err(e) = r {
        let _ = m.finish();
        return Err(format!("direct_io.py through the {} mount: {e}", w.name()));
    }
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    let mut note = String::from("direct_io.py passed");
    if let Some(log) = log {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // "N direct writes in place, at most M at once"
        let (n, most): (u64, String) = text
            .lines()
            .rev()
            .find_map(|l| {
                l.split("; ").find_map(|p| {
                    let (n, rest) = p.split_once(" direct writes in place")?;
                    let most = rest.strip_prefix(", at most ")?.split(' ').next()?;
                    Some((n.trim().parse().ok()?, most.to_string()))
                })
            })
            .ok_or_else(|| {
                format!(
                    "no direct write count in the mount's log: {}",
                    tail(&text, 800)
                )
            })?;
        if n == 0 {
            return Err("no write was a direct write in place".into());
        }
        note = format!("{note}, {n} direct writes in place, at most {most} at once");
    }
    check(&image, &format!("after the {} mount", w.name()))?;
    let k = RwMount::start(Writer::Kernel, &image, &mnt, "")?;
    let v = run(Command::new("python3")
        .arg(direct_io_script())
        .arg("--verify")
        .arg(&mnt)
        .args([seed_s.as_str(), procs, ops]));
    let dd = run(Command::new("dd")
        .arg("if=/dev/urandom")
        .arg(format!("of={}", mnt.join("nocow").display()))
        .args([
            "bs=64K",
            "seek=7",
            "count=9",
            "oflag=direct",
            "conv=notrunc",
            "status=none",
        ]));
    k.finish().map_err(|e| format!("kernel unmount: {e}"))?;
    v.map_err(|e| format!("the kernel's view after the {} mount: {e}", w.name()))?;
    dd.map_err(|e| format!("kernel O_DIRECT write: {e}"))?;
    check(&image, "after the kernel wrote on top")?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(note)
}

// ------------------------------------------------------------------ (k)

/// The daemon's threads whose name starts with `prefix`: their states
/// (field 3 of /proc/PID/task/TID/stat).
fn thread_states(pid: u32, prefix: &str) -> Vec<char> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            // "TID (COMM) S ...": COMM may hold spaces, not ')'.
            let (head, rest) = stat.rsplit_once(") ")?;
            let comm = head.split_once(" (")?.1;
            comm.starts_with(prefix)
                .then(|| rest.chars().next())
                .flatten()
        })
        .collect()
}

/// Reads `len` bytes at `off` of `path` with read-ahead off
/// (POSIX_FADV_RANDOM), so that the kernel asks the daemon for just that.
fn read_random(path: &Path, off: u64, len: usize) -> std::io::Result<Vec<u8>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path)?;
    // SAFETY: an advice call on our own open descriptor.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    let mut buf = vec![0u8; len];
    let n = f.read_at(&mut buf, off)?;
    buf.truncate(n);
    Ok(buf)
}

fn kill9_push_case(base: &Path) -> Result<String, String> {
    let dir = base.join("kill9-push");
    let (image, mnt) = fresh_image(&dir, "256M")?;
    let data = pseudo_block(11, 0);
    // Written through one mount and read through the next: no page of the
    // file is cached when the reads come.
    let m = UbtrfsMount::start(&image, &mnt, "")?;
    std::fs::write(mnt.join("f"), &data).map_err(|e| format!("write f: {e}"))?;
    m.unmount()?;
    let held = 128u64 << 10;
    // noatime: with atime due, the second open would move atime, taking
    // the filesystem's lock alone, and the reads are to race the push
    // alone.
    let mut m = UbtrfsMount::start_env(
        &image,
        &mnt,
        "noatime",
        &[("UBTRFS_TEST_READ_DELAY", &format!("{held}:60000"))],
    )?;
    let pid = m.pid().ok_or("no mount process")?;
    let f = mnt.join("f");
    let reader = {
        let f = f.clone();
        std::thread::spawn(move || read_random(&f, held, 4096))
    };
    // Waits up to 20 s for `done`; on a timeout kills the mount and says
    // what never happened.
    let wait = |m: &mut UbtrfsMount, done: &dyn Fn() -> bool, never: &str| {
        let t = Instant::now();
        while !done() {
            if t.elapsed() > Duration::from_secs(20) {
                let _ = m.kill9();
                return Err(format!("{never}; log: {}", m.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    };
    // The held READ is in the daemon once its answering thread exists.
    wait(
        &mut m,
        &|| !thread_states(pid, "ubtrfs-test-del").is_empty(),
        &format!("the READ at {held} never reached the daemon"),
    )?;
    let first = read_random(&f, 0, 4096).map_err(|e| format!("read at 0: {e}"))?;
    if first != data[..4096] {
        return Err("the read at 0 differs from what was written".into());
    }
    // The push of [4 KiB, 260 KiB) reaches the held page and waits.
    wait(
        &mut m,
        &|| thread_states(pid, "ubtrfs-store").contains(&'D'),
        "the push never waited in the kernel",
    )?;
    let t = Instant::now();
    m.kill9()?;
    let ended = t.elapsed();
    let got = reader.join().map_err(|_| "the held reader panicked")?;
    let outcome = match got {
        Ok(b) if b == data[held as usize..held as usize + 4096] => "read the page's bytes",
        Ok(_) => return Err("the held read returned other bytes than written".into()),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => "failed ENOTCONN",
        Err(e) => return Err(format!("the held read failed: {e}")),
    };
    check(&image, "after SIGKILL with a push waiting")?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!(
        "the process ended {ended:?} after SIGKILL; the held read {outcome}"
    ))
}

/// Bytes the file at `p` has allocated (st_blocks).
fn allocated(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).map_or(0, |m| m.blocks() * 512)
}

/// fstrim through the mount gives the image file's free space back (a
/// sparse image shrinks) and nothing else: the tree reads back the same
/// through the mount, `btrfs check` passes, and the kernel's mount shows
/// the same tree.
fn fstrim_case(base: &Path) -> Result<String, String> {
    let image = base.join("fs.img");
    mkfs_image(&image, "1G")?;
    let mnt = base.join("mnt");
    let m = UbtrfsMount::start(&image, &mnt, "")?;
    run(Command::new("cp")
        .arg("-a")
        .arg("/usr/include/linux")
        .arg(mnt.join("tree")))?;
    let big = vec![0x5au8; 64 << 20];
    for i in 0..4 {
        std::fs::write(mnt.join(format!("big{i}")), &big).map_err(|e| format!("big{i}: {e}"))?;
    }
    run(Command::new("btrfs").args(["filesystem", "sync"]).arg(&mnt))?;
    for i in 0..4 {
        std::fs::remove_file(mnt.join(format!("big{i}"))).map_err(|e| format!("rm big{i}: {e}"))?;
    }
    // The space the files had is pinned until a commit.
    run(Command::new("btrfs").args(["filesystem", "sync"]).arg(&mnt))?;
    let before = allocated(&image);
    let live = manifest_of(&mnt);
    let out = run(Command::new("fstrim").arg("-v").arg(&mnt))?;
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let after = allocated(&image);
    if manifest_of(&mnt) != live {
        return Err("the tree reads back otherwise after fstrim".into());
    }
    m.unmount()?;
    check(&image, "after fstrim")?;
    let k = kernel_ro(&image, &mnt);
    let seen = manifest_of(&mnt);
    drop(k);
    // The top directory is inode 1 through FUSE, 256 on the kernel's.
    let top = |l: &String| !l.contains("\"path\":\"/\"");
    let (live, seen): (Vec<String>, Vec<String>) = (
        live.into_iter().filter(top).collect(),
        seen.into_iter().filter(top).collect(),
    );
    if let Some((a, b)) = live.iter().zip(&seen).find(|(a, b)| a != b) {
        return Err(format!(
            "the kernel's mount shows another tree after fstrim: {b}, the mount showed {a}"
        ));
    }
    if seen.len() != live.len() {
        return Err(format!(
            "the kernel's mount shows {} paths after fstrim, the mount {}",
            seen.len(),
            live.len()
        ));
    }
    if after + (200 << 20) > before {
        return Err(format!(
            "the image kept {after} of {before} allocated bytes after fstrim ({})",
            out.trim()
        ));
    }
    Ok(format!(
        "{}; the image's allocated bytes went from {} MiB to {} MiB",
        out.trim(),
        before >> 20,
        after >> 20
    ))
}

/// Puts a kernel module parameter back as it was when dropped.
struct ParamBack {
    path: &'static str,
    was: String,
}

impl Drop for ParamBack {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path, self.was.trim());
    }
}

/// The kernel offers FUSE over io_uring only while fuse's `enable_uring`
/// is Y, N by default: a mount by root that may use io_uring sets it
/// before it mounts, and then serves over io_uring.
fn root_mount_io_uring_case(base: &Path) -> Result<String, String> {
    const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";
    let was = std::fs::read_to_string(PARAM)
        .map_err(|e| format!("{PARAM}: {e} (FUSE over io_uring needs Linux 6.14+)"))?;
    let _back = ParamBack { path: PARAM, was };
    std::fs::write(PARAM, "N").map_err(|e| format!("{PARAM}: {e}"))?;
    let image = base.join("fs.img");
    mkfs_image(&image, "256M")?;
    let mnt = base.join("mnt");
    let m = UbtrfsMount::start(&image, &mnt, "uring")?;
    let log = m.log_tail();
    let now = std::fs::read_to_string(PARAM).map_err(|e| format!("{PARAM}: {e}"))?;
    std::fs::write(mnt.join("f"), b"over io_uring").map_err(|e| format!("write f: {e}"))?;
    m.unmount()?;
    if now.trim() != "Y" {
        return Err(format!(
            "{PARAM} is {} after the mount; log: {log}",
            now.trim()
        ));
    }
    if !log.contains("FUSE transport: io_uring") {
        return Err(format!("the mount did not serve io_uring; log: {log}"));
    }
    check(&image, "after the io_uring mount")?;
    Ok(String::new())
}

// ------------------------------------------------------------------ (l)

/// Used bytes of the filesystem mounted on `dir` (statvfs).
fn used_bytes(dir: &Path) -> Result<u64, String> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a zeroed statvfs filled by the call; NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!(
            "statvfs {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok((st.f_blocks - st.f_bfree) * st.f_frsize)
}

fn prealloc_overwrite_case(w: Writer, base: &Path) -> Result<String, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let (dir, image, mnt, m) = fresh_512m(w, base)?;
    let size: u64 = 240 << 20;
    let path = mnt.join("f");
    let f = std::fs::File::create(&path).map_err(|e| format!("create f: {e}"))?;
    // SAFETY: fallocate(2) on our own descriptor.
    if unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, size as i64) } != 0 {
        return Err(format!("fallocate: {}", std::io::Error::last_os_error()));
    }
    f.sync_all().map_err(|e| format!("fsync: {e}"))?;
    // The rest of the space taken by another file: a write into fallocated
    // space needs none (the kernel's btrfs_check_nocow_lock).
    let filler = std::fs::File::create(mnt.join("filler")).map_err(|e| format!("filler: {e}"))?;
    let mut at = 0u64;
    for chunk in [1usize << 20, 64 << 10] {
        let block = vec![0x77u8; chunk];
        while filler.write_all_at(&block, at).is_ok() {
            at += chunk as u64;
        }
        // Space a failed write held may come back at the fsync.
        let _ = filler.sync_all();
    }
    drop(filler);
    let before = used_bytes(&mnt)?;
    let mut rng = Rng::new(0x9e11);
    let mut model = vec![0u8; size as usize];
    let mut order: Vec<u64> = (0..size >> 20).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for (n, c) in order.into_iter().enumerate() {
        let (off, len) = if n % 5 == 4 {
            ((c << 20) + 1000, 70_000usize)
        } else {
            (c << 20, 1usize << 20)
        };
        let block = pseudo_block(n as u64, 0);
        let data = &block[..len];
        f.write_all_at(data, off)
            .map_err(|e| format!("write {n} at {off}: {e}"))?;
        model[off as usize..off as usize + len].copy_from_slice(data);
        if n % 32 == 31 {
            f.sync_all()
                .map_err(|e| format!("fsync after write {n}: {e}"))?;
        }
    }
    f.sync_all().map_err(|e| format!("fsync: {e}"))?;
    drop(f);
    let after = used_bytes(&mnt)?;
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    btrfs_check(&image, &["--check-data-csum"])
        .map_err(|e| format!("btrfs check --check-data-csum: {}", tail(&e, 2000)))?;
    let k = kernel_ro(&image, &dir.join("kmnt"));
    let got = std::fs::read(k.path("f")).map_err(|e| format!("kernel read of f: {e}"));
    k.unmount();
    if got? != model {
        return Err("the file differs from the model in the kernel's mount".into());
    }
    let grew = after.saturating_sub(before);
    if grew >= 16 << 20 {
        return Err(format!(
            "the overwrite of fallocated space took {} MiB more",
            grew >> 20
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!(
        "{} MiB of filler; used space grew by {} KiB",
        at >> 20,
        grew >> 10
    ))
}

// ------------------------------------------------------------------ (m)

/// copy_file_range(2) of `len` bytes, to the end; the count copied.
fn copy_range(
    src: &std::fs::File,
    soff: u64,
    dst: &std::fs::File,
    doff: u64,
    len: usize,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let (mut so, mut dso) = (soff as i64, doff as i64);
    let mut done = 0;
    while done < len {
        // SAFETY: both descriptors are ours; the offsets are locals.
        let r = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut so,
                dst.as_raw_fd(),
                &mut dso,
                len - done,
                0,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if r == 0 {
            break;
        }
        done += r as usize;
    }
    Ok(done)
}

/// The first copy_file_range calls of a mount, made by 16 threads at
/// once, then a whole-file copy of a sparse file: the copy must be a
/// clone that keeps the hole, as the kernel's btrfs makes it. Linux 6.18
/// asks FUSE for COPY_FILE_RANGE_64 first; a mount that answered ENOSYS
/// to it lost copy_file_range for good when two first copies raced (the
/// kernel then falls back to a byte copy, holes written as zeros): the
/// cause of a flaky (b).
fn first_copies_case(w: Writer, base: &Path) -> Result<String, String> {
    use std::os::unix::fs::FileExt;
    let (dir, image, mnt, m) = fresh_512m(w, base)?;
    let src_path = mnt.join("sparse");
    let src = std::fs::File::create(&src_path).map_err(|e| format!("create: {e}"))?;
    let block = pseudo_block(7, 0);
    src.write_all_at(&block[..4096], 0)
        .and_then(|_| src.write_all_at(&block[4096..8192], 1 << 20))
        .and_then(|_| src.sync_all())
        .map_err(|e| format!("write the source: {e}"))?;
    drop(src);
    let src = std::fs::File::open(&src_path).map_err(|e| format!("open: {e}"))?;
    let barrier = std::sync::Barrier::new(16);
    let firsts: Vec<Result<usize, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..16)
            .map(|i| {
                let (src, barrier, mnt) = (&src, &barrier, &mnt);
                s.spawn(move || {
                    let d = std::fs::File::create(mnt.join(format!("first{i}")))
                        .map_err(|e| e.to_string())?;
                    barrier.wait();
                    copy_range(src, 0, &d, 0, 4096).map_err(|e| format!("first copy {i}: {e}"))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in firsts {
        if r? != 4096 {
            return Err("a first copy was short".into());
        }
    }
    let dst = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(mnt.join("copy"))
        .map_err(|e| format!("create copy: {e}"))?;
    let size = (1 << 20) + 4096;
    let n = copy_range(&src, 0, &dst, 0, size).map_err(|e| format!("whole copy: {e}"))?;
    let map = data_ranges(&dst)?;
    let mut got = vec![0u8; size];
    dst.read_exact_at(&mut got, 0)
        .map_err(|e| format!("read copy: {e}"))?;
    drop((src, dst));
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    let mut want = vec![0u8; size];
    want[..4096].copy_from_slice(&block[..4096]);
    want[1 << 20..].copy_from_slice(&block[4096..8192]);
    if n != size || got != want {
        return Err(format!(
            "the copy differs from its source ({n} of {size} bytes copied)"
        ));
    }
    if map != [(0, 4096), (1 << 20, size as u64)] {
        return Err(format!(
            "the copy's data map is {map:?}: its hole was written as zeros (a byte copy, not a clone)"
        ));
    }
    check(&image, &format!("after copies on the {} mount", w.name()))?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(String::new())
}

// ------------------------------------------------------------------ (n)

/// Space freed by an unlink is free to write at once: a file fills the
/// image to ENOSPC and is fsynced, removed, and a file almost as large is
/// written right after, with no sync between. The freed extents stay
/// pinned until a commit (the superblock on disk still reaches them); the
/// kernel's flush_space commits before it answers ENOSPC, and so must
/// ours. Then `btrfs check`, and the kernel reads the new file whole.
fn space_after_unlink_case(w: Writer, base: &Path) -> Result<String, String> {
    use std::io::Write;
    let (dir, image, mnt, m) = fresh_512m(w, base)?;
    let block = pseudo_block(0x5ace, 0);
    let mut a = std::fs::File::create(mnt.join("a")).map_err(|e| format!("create a: {e}"))?;
    let mut filled = 0u64;
    while a.write_all(&block).is_ok() {
        filled += block.len() as u64;
    }
    a.sync_all().map_err(|e| format!("fsync a: {e}"))?;
    drop(a);
    if filled < 256 << 20 {
        return Err(format!("only {} MiB written before ENOSPC", filled >> 20));
    }
    std::fs::remove_file(mnt.join("a")).map_err(|e| format!("unlink a: {e}"))?;
    let want = filled - (32 << 20);
    let mut b = std::fs::File::create(mnt.join("b")).map_err(|e| format!("create b: {e}"))?;
    let mut at = 0u64;
    while at < want {
        b.write_all(&block)
            .map_err(|e| format!("write b at {} MiB of {} MiB: {e}", at >> 20, want >> 20))?;
        at += block.len() as u64;
    }
    b.sync_all().map_err(|e| format!("fsync b: {e}"))?;
    drop(b);
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    check(&image, "after the writes")?;
    let k = kernel_ro(&image, &dir.join("kmnt"));
    let got = std::fs::read(k.path("b")).map_err(|e| format!("kernel read of b: {e}"));
    k.unmount();
    let got = got?;
    if got.len() as u64 != at || got.chunks(block.len()).any(|c| c != &block[..c.len()]) {
        return Err(format!(
            "b reads back {} bytes, not the {at} written",
            got.len()
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!(
        "{} MiB filled, {} MiB written after the unlink",
        filled >> 20,
        at >> 20
    ))
}

/// Metadata runs out: data fills the image, then 1 KiB xattrs go on one
/// file until ENOSPC, and 2,000 more must all fail too (a change that
/// ran out of tree blocks midway once left a transaction no commit could
/// write: later changes succeeded in memory and every one since the last
/// commit was lost). Then `btrfs check`, and the kernel reads the first
/// and the last xattr acknowledged, and not the next.
///
/// The filesystem is 512 MiB (mkfs -b) of a 2 GiB image file: new
/// chunks stay within the filesystem's size, not the file's (they once
/// went past it, and `btrfs check` found device extents beyond the
/// device's boundary; fstests generic/449 ran on for hours).
fn metadata_enospc_case(w: Writer, base: &Path) -> Result<String, String> {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    let dir = base.join(w.name());
    std::fs::create_dir_all(&dir).unwrap();
    let image = dir.join("fs.img");
    let _ = std::fs::remove_file(&image);
    std::fs::File::create(&image)
        .and_then(|f| f.set_len(2 << 30))
        .map_err(|e| format!("{}: {e}", image.display()))?;
    run(Command::new(ubtrfs_bin())
        .args(["mkfs", "-q", "-f", "-b", "512M"])
        .arg(&image))?;
    let mnt = dir.join("mnt");
    let m = RwMount::start(w, &image, &mnt, "")?;
    let block = pseudo_block(0x3e7a, 0);
    let f = mnt.join("f");
    let mut a = std::fs::File::create(&f).map_err(|e| format!("create f: {e}"))?;
    while a.write_all(&block).is_ok() {}
    drop(a);
    let path = std::ffi::CString::new(f.as_os_str().as_bytes()).unwrap();
    let value = [0x61u8; 1024];
    let set = |i: u32| {
        let name = std::ffi::CString::new(format!("trusted.{i}")).unwrap();
        // SAFETY: NUL-terminated path and name; value of its length.
        let r = unsafe {
            libc::setxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        (r == 0)
            .then_some(())
            .ok_or_else(std::io::Error::last_os_error)
    };
    let mut last = 0;
    let first_err = loop {
        match set(last + 1) {
            Ok(()) => last += 1,
            Err(e) => break e,
        }
        if last > 2_000_000 {
            return Err("2,000,000 xattrs and no ENOSPC".into());
        }
    };
    if first_err.raw_os_error() != Some(libc::ENOSPC) || last < 1000 {
        return Err(format!("after {last} xattrs: {first_err}"));
    }
    if let Some(i) = (last + 2..last + 2002).find(|&i| set(i).is_ok()) {
        return Err(format!("xattr {i} set after ENOSPC at {}", last + 1));
    }
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    check(&image, "after metadata ran out")?;
    let k = kernel_ro(&image, &dir.join("kmnt"));
    let get = |i: u32| {
        Command::new("getfattr")
            .args(["--only-values", "-n", &format!("trusted.{i}")])
            .arg(k.path("f"))
            .output()
            .map(|o| o.stdout.len())
            .unwrap_or(0)
    };
    let seen = [get(1), get(last), get(last + 1)];
    k.unmount();
    if seen != [1024, 1024, 0] {
        return Err(format!(
            "the kernel reads xattrs 1, {last} and {} as {seen:?} bytes",
            last + 1
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!("{last} xattrs of 1 KiB before ENOSPC"))
}

// ------------------------------------------------------------------ (o)

/// The steps of (o), run with the mount as the working directory; one
/// line per step: "ok: STEP" or "fail: STEP".
const KERNEL_SEMANTICS: &str = r#"
r() { if "$@" >/dev/null 2>&1; then echo "ok: $*"; else echo "fail: $*"; fi; }
mkdir d && touch d/f0 && chattr +a d
r touch d/f
r mkdir d/sub
r ln -s f d/l
r ln d/f d/h
r mknod d/p p
r rm d/f0
r mv d/l d/l2
r mv d/f ../f
r rmdir d/sub
touch g && chattr +a g
r touch g
r touch -d @0 g
r chmod 600 g
r truncate -s 0 g
r sh -c 'echo x >> g'
r sh -c 'echo x > g'
chattr -a g d
r mknod nulldev c 1 3
r head -c 1 nulldev
chmod 755 .
r setpriv --reuid=tests --regid=tests --clear-groups ls .
py() { python3 -c "import errno, os, sys
try:
    $1
except OSError as e: print(errno.errorcode[e.errno])"; }
mkdir d1 d2
py 'fd = os.open("d2", os.O_RDONLY); os.rename("d1", "d2"); print("nlink", os.fstat(fd).st_nlink)'
touch x
py 'os.setxattr("x", "user.big", b"a" * 16220); print("16220 ok")'
py 'os.setxattr("x", "user.big", b"a" * 16221)'
py 'os.setxattr("x", "user.big", b"a" * 65536)'
touch s && chown tests:root s && chmod 2755 s
setpriv --reuid=tests --regid=tests --clear-groups setfacl -m u::rwx,g::rwx,o::rwx s
stat -c %A s
py 'import time; open("at", "w").write("a"); a = [os.stat("at").st_atime_ns]; time.sleep(0.05); open("at").read(); a.append(os.stat("at").st_atime_ns); time.sleep(0.05); open("at").read(); a.append(os.stat("at").st_atime_ns); print("atime after reads", a[1] > a[0], a[2] > a[1])'
py 'import ctypes, mmap; open("rr", "wb").write(os.urandom(1 << 20)); f = open("rr", "rb"); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY); v = (ctypes.c_ubyte * 256)(); ctypes.CDLL(None).mincore(ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(m))), ctypes.c_size_t(1 << 20), v); print("pages just written cached at the next open", all(b & 1 for b in v))'
py 'import time; os.mkdir("ad"); open("ad/x", "w").close(); a = os.stat("ad").st_atime_ns; time.sleep(0.05); os.listdir("ad"); print("atime after listing", os.stat("ad").st_atime_ns > a)'
py 'import time; open("c", "w").close(); a = os.stat("c").st_ctime_ns; time.sleep(0.05); os.system("chattr +A c"); print("ctime after chattr", os.stat("c").st_ctime_ns > a)'
xfs_io -c 'chattr +x' c 2>&1 | sed 's/.*: //'
remount() { mount -o remount,"$1" "$PWD"; }
exec 3>>c
r remount ro
exec 3>&-
r remount ro
r touch rm
r cat c
r remount rw
r touch rm
mkdir rd && for i in $(seq 3000); do : > rd/$i; done
python3 -c 'import os
n = 0
for e in os.scandir("rd"):
    n += 1
    if n > 9000: break
    os.rename("rd/" + e.name, "rd/" + e.name + "_")
print("readdir while renaming ends", n <= 9000)'
python3 -c 'import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def linkat(fd, name):
    r = libc.linkat(-100, f"/proc/self/fd/{fd}".encode(), -100, name.encode(), 0x400)
    return "ok" if r == 0 else os.strerror(ctypes.get_errno())
fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
os.write(fd, b"tmp")
print("tmpfile nlink", os.fstat(fd).st_nlink)
print("link", linkat(fd, "named"), "nlink", os.fstat(fd).st_nlink, open("named").read())
fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600)
os.write(fd, b"gone")
os.fsync(fd)
os.close(fd)
fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_EXCL, 0o600)
print("O_EXCL link", linkat(fd, "excl"))'
python3 -c 'import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
open("fh", "w").write("handle")
h = ctypes.create_string_buffer(8 + 128)
ctypes.memmove(h, (128).to_bytes(4, "little"), 4)
mnt = ctypes.c_int()
print("handle", libc.name_to_handle_at(-100, b"fh", h, ctypes.byref(mnt), 0))
def by_handle():
    open("/proc/sys/vm/drop_caches", "w").write("3")
    fd = libc.open_by_handle_at(os.open(".", os.O_RDONLY), h, os.O_RDONLY)
    return os.read(fd, 10) if fd >= 0 else os.strerror(ctypes.get_errno())
print("open by handle", by_handle())'
mkdir w && touch w/foo w/bar
python3 -c 'import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for a, b, f in [("foo", "bar", 4), ("bar", "baz", 1), ("foo", "baz", 2), ("foo", "baz", 6)]:
    r = libc.renameat2(-100, ("w/" + a).encode(), -100, ("w/" + b).encode(), f)
    print("renameat2", a, b, f, "ok" if r == 0 else os.strerror(ctypes.get_errno()))'
stat -c '%n %F %t:%T %a' w/*
xfs_io -c 'label -s semantics' . && xfs_io -c label .
setpriv --reuid=tests --regid=tests --clear-groups xfs_io -c 'label -s no' . 2>&1 | sed 's/.*: //'
as_tests() { setpriv --reuid=tests --regid=tests --clear-groups "$@" >/dev/null 2>&1; }
for m in 6666 6676 6766; do
  for cmd in 'falloc 0 64k' 'fpunch 0 4k' 'fzero 0 4k' 'pwrite 0 4k'; do
    rm -f k && xfs_io -f -c 'pwrite 0 64k' k >/dev/null && chmod $m k
    as_tests xfs_io -c "$cmd" k
    echo "$m $cmd: $(stat -c %a k)"
  done
  rm -f k2 && touch k2 && chmod $m k2 && as_tests xfs_io -d -c 'pwrite 0 4k' k2
  echo "$m direct write: $(stat -c %a k2)"
  rm -f k2 && touch k2 && chmod $m k2 && xfs_io -d -c 'pwrite 0 4k' k2 >/dev/null
  echo "$m direct write by root: $(stat -c %a k2)"
done
for m in 6777 6767; do
  rm -f t && echo a > t && chmod $m t && as_tests sh -c ': > t'
  echo "$m O_TRUNC open by a user: $(stat -c %a t)"
  rm -f t && echo a > t && chmod $m t && as_tests truncate -s 1 t
  echo "$m truncate by a user: $(stat -c %a t)"
  rm -f t && echo a > t && chmod $m t && chown tests t
  echo "$m chown by root: $(stat -c %a t)"
done
caps() { getcap "$1" | awk '{print $2}'; }
rm -f c1 && echo a > c1 && echo b >> c1 && setcap cap_net_raw+ep c1 && echo c >> c1
echo "capabilities after a write: $(caps c1)"
rm -f c1 && echo a > c1 && setcap cap_net_raw+ep c1 && truncate -s 0 c1
echo "capabilities after a truncate: $(caps c1)"
rm -f c1 && echo a > c1 && setcap cap_net_raw+ep c1 && chown tests c1
echo "capabilities after a chown: $(caps c1)"
"#;

fn kernel_semantics_case(w: Writer, base: &Path) -> Result<String, String> {
    let (_dir, image, mnt, m) = fresh_512m(w, base)?;
    let out = run(Command::new("sh")
        .args(["-c", KERNEL_SEMANTICS])
        .current_dir(&mnt));
    let fin = m.finish();
    let out = out.map_err(|e| format!("the script on the {} mount: {e}", w.name()))?;
    fin.map_err(|e| format!("unmount: {e}"))?;
    check(
        &image,
        &format!("after the script on the {} mount", w.name()),
    )?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn root_mount_allows_what_the_kernels_does() {
    let test = fn_name!();
    skip_unless!(user_available, "tests");
    one_case(test, Writer::Ubtrfs, |base| {
        if !ready(test, Writer::Kernel) {
            return Ok(String::new());
        }
        let kernel = kernel_semantics_case(Writer::Kernel, base)?;
        let ours = kernel_semantics_case(Writer::Ubtrfs, base)?;
        if kernel != ours {
            return Err(format!(
                "the kernel's answers:\n{kernel}\nubtrfs's:\n{ours}"
            ));
        }
        Ok(format!(
            "{} steps answered as the kernel's",
            kernel.lines().count()
        ))
    });
}
