//! btrfs-progs' `btrfs check --readonly`: the one runner for every test
//! that asks whether what was written is a consistent filesystem (of a
//! device, or of an image file).
//!
//! Self-contained (no `crate::` paths, std only): the engine's integration
//! tests include this file with `#[path]` (crates/engine/tests/memcheck),
//! as they include rng.rs.

use std::path::Path;
use std::process::Command;

/// Whether btrfs-progs' `btrfs` runs here.
pub fn btrfs_progs_here() -> bool {
    Command::new("btrfs")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `btrfs check --readonly` of `dev` (a block device or an image file),
/// with `extra` options (`--mode=lowmem`, `--check-data-csum`); Err holds
/// the command, how it ended and its output.
pub fn btrfs_check(dev: &Path, extra: &[&str]) -> Result<(), String> {
    let mut cmd = Command::new("btrfs");
    cmd.args(["check", "--readonly"]).args(extra).arg(dev);
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
