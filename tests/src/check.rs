//! btrfs-progs' `btrfs check --readonly`, and `ubtrfs check` beside it:
//! the one runner for every test that asks whether what was written is a
//! consistent filesystem (of a device, or of an image file). Both must
//! pass: a problem only one of them sees fails the test either way.
//!
//! Std only, with one hook in the module that includes it,
//! `super::ubtrfs_checker()`: the `ubtrfs` binary to run, or None. The
//! engine's integration tests include this file with `#[path]`
//! (crates/engine/tests/memcheck, which runs the checker in-process), as
//! they include rng.rs.

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
/// with `extra` options (`--mode=lowmem`, `--check-data-csum`), then
/// `ubtrfs check` (with `--check-data-csum` when asked); Err holds the
/// command, how it ended and its output.
pub fn btrfs_check(dev: &Path, extra: &[&str]) -> Result<(), String> {
    let mut cmd = Command::new("btrfs");
    cmd.args(["check", "--readonly"]).args(extra).arg(dev);
    run_check(cmd)?;
    if let Some(bin) = super::ubtrfs_checker() {
        let mut cmd = Command::new(bin);
        cmd.arg("check");
        if extra.contains(&"--check-data-csum") {
            cmd.arg("--check-data-csum");
        }
        cmd.arg(dev);
        run_check(cmd)?;
    }
    Ok(())
}

fn run_check(mut cmd: Command) -> Result<(), String> {
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
