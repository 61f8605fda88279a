//! Test support for every ubtrfs test outside the engine's own unit tests:
//! the kernel-oracle tests here (tests/tests/*.rs), and, through `#[path]`,
//! the fuzz crate's stable tests (which use [`rng`] only).
//!
//! * [`paths`]: the repository, scratch directories;
//! * [`mod@run`]: the `ubtrfs` binary, running commands (with a timeout and an
//!   address-space limit when asked) and judging how they ended;
//! * [`require`]: whether root/kernel/FUSE tests can run (they fail, never
//!   skip, under UBTRFS_REQUIRE_KERNEL=1);
//! * [`fixtures`]: committed and kernel-made fixtures, private copies;
//! * [`manifest`]: manifest.py, and comparing manifests;
//! * [`mod@check`]: `btrfs check --readonly` of a device or image, and
//!   `ubtrfs check` beside it (the engine's tests include it by path);
//! * [`corrupt`]: seeded damage to one tree block, its checksum redone;
//! * [`check_fuzz`]: the fuzz harness of `ubtrfs check` (fuzz/ includes
//!   it by path);
//! * [`mkfs_support`]: the `ubtrfs mkfs` tests' source tree, loop devices
//!   and mounts (not re-exported: its names are its own);
//! * [`loops`], [`mounts`]: loop devices, kernel and FUSE mounts, released
//!   on drop (unmount with a lazy fallback);
//! * [`rng`]: the seeded PRNG and the seed list (the engine's and the
//!   fuzz crate's tests include it by path);
//! * [`trees`]: the engine's view of a fixture (trees, every block);
//! * [`send_support`]: send streams, `btrfs receive`;
//! * [`rw_mount`]: the read-write mount's tests: ubtrfs's rw mount as a
//!   child process, the kernel's as the reference, rw_ops.py, pjdfstest
//!   and fsx with structured results.
//!
//! Everything is re-exported at the top, so tests `use ubtrfs_oracle::*`.

pub mod check;
pub mod check_fuzz;
pub mod corrupt;
pub mod fixtures;
pub mod loops;
pub mod manifest;
pub mod mkfs_support;
pub mod mounts;
pub mod paths;
pub mod require;
pub mod rng;
pub mod run;
pub mod rw_mount;
pub mod send_support;
pub mod suites;
pub mod trees;

pub use check::*;

/// The `ubtrfs` binary that [`check::btrfs_check`] runs `ubtrfs check`
/// with, beside btrfs-progs.
fn ubtrfs_checker() -> Option<std::path::PathBuf> {
    Some(run::ubtrfs_bin().to_path_buf())
}
pub use fixtures::*;
pub use loops::*;
pub use manifest::*;
pub use mounts::*;
pub use paths::*;
pub use require::*;
pub use rng::*;
pub use run::*;
pub use rw_mount::*;
pub use suites::*;
pub use trees::*;
