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
//!     checksums): a file preallocated over 240 MiB of a 512 MiB image
//!     (more than is left after it) is rewritten whole in random order,
//!     in MiBs and unaligned pieces,
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
//! (p) Subvolumes on a live mount (rw_mount/subvols.rs): one script with
//!     btrfs-progs on the kernel's mount and `ubtrfs subvolume` on
//!     ubtrfs's (create, snapshot of dirty data, `-r`, a snapshot of a
//!     snapshot, EROFS, `property` ro both ways, list, get-default and
//!     set-default, the new root's mode under a umask, a deleted
//!     subvolume's open file, rmdir of an empty subvolume, ENOTEMPTY, a
//!     user's EPERM), answers equal; then the kernel lists the same
//!     subvolumes and files on both images; `btrfs check` clean.
//! (q) A backup loop on a live mount (rw_mount/subvols.rs): while a
//!     writer copies and removes trees in another subvolume, five rounds
//!     of write, `snapshot -r`, `ubtrfs send` (incremental from the round
//!     before) from the mount into the kernel's `btrfs receive`, and
//!     delete of the oldest snapshot; the kept snapshots equal what was
//!     received (paths, types, modes, sizes, times, owners, content); the
//!     full stream sent from the mount equals an offline send of the same
//!     snapshot; `btrfs check` clean on both; the kernel lists the
//!     subvolumes left.
//! (r) rw_ops (4 workers) in a subvolume while `ubtrfs subvolume
//!     snapshot -r` of it is taken every second (rw_mount/subvols.rs):
//!     the workload's reads all match its model, `btrfs check` clean, the
//!     kernel reads every snapshot whole (bench/snapshot_stress.sh: the
//!     same with fstests' fsstress for 60 s).
//! (s) SIGKILL of ubtrfs's mount at seeded moments while a loop creates
//!     subvolumes, snapshots them and the top level and deletes snapshots
//!     (one with a file open in it): `btrfs check` clean; the kernel
//!     mounts it (its cleaner drops what a delete left unlinked), lists
//!     and writes; ubtrfs's mount does the same; check clean after each.
//! (t) `ubtrfs filesystem df` on the live mount (after `filesystem
//!     sync`), on the image and on the kernel's mount of it (SPACE_INFO)
//!     prints `btrfs filesystem df`'s lines but the global reserve; a
//!     label set on the live mount is the kernel's.
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

mod io;
mod semantics;
mod space;
mod subvols;
mod tools;
mod unmount;
mod workload;

use io::*;
use space::*;
use unmount::*;
use workload::*;

/// A dirty limit of 1 MiB for ubtrfs's mount in (a), (d) and (f): writes
/// write everything back often, with the bytes written outside the lock
/// while other processes' reads go on (rwfs/ordered.rs).
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
    // (q)
    once send_from_a_live_mount_to_the_kernels_receive(Ubtrfs) = subvols::live_send_case;
    // (r)
    once snapshot_every_second_beside_a_workload(Ubtrfs) = subvols::snapshot_every_second_case;
    // (s)
    seeded kill9_during_subvolume_work(Ubtrfs, "subkill") = subvols::kill9_subvol_work_case;
    // (t)
    once filesystem_df_as_the_kernels(Ubtrfs) = subvols::filesystem_df_case;
}
