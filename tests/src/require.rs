//! Whether the root-only tests can run here. When they cannot: with
//! UBTRFS_REQUIRE_KERNEL=1 (CI) the test panics, so the run fails;
//! otherwise it says loudly on stderr that the test is skipped.

use std::path::Path;
use std::process::Command;

fn required() -> bool {
    std::env::var("UBTRFS_REQUIRE_KERNEL").is_ok_and(|v| v == "1")
}

fn unavailable(test: &str, what: &str, why: &str) -> bool {
    if required() {
        panic!("{test}: {what} test cannot run ({why}) and UBTRFS_REQUIRE_KERNEL=1");
    }
    eprintln!("SKIPPED {test}: needs {what} ({why})");
    false
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Root, the kernel's btrfs, loop devices and btrfs-progs.
pub fn kernel_available(test: &str) -> bool {
    let root = geteuid() == 0;
    let btrfs = std::fs::read_to_string("/proc/filesystems").is_ok_and(|s| s.contains("btrfs"));
    let tools = Command::new("mkfs.btrfs")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if root && btrfs && tools {
        return true;
    }
    let why = format!("root={root} kernel btrfs={btrfs} mkfs.btrfs={tools}");
    unavailable(test, "root, the kernel's btrfs and btrfs-progs", &why)
}

/// btrfs-progs (`btrfs receive --dump`, `btrfs check` on image files:
/// no root needed).
pub fn btrfs_progs_available(test: &str) -> bool {
    if have("btrfs") {
        return true;
    }
    unavailable(test, "btrfs-progs", "no btrfs command")
}

/// [`kernel_available`], /dev/fuse, and the tools of
/// tests/fixtures/APT_PACKAGES the FUSE tests use.
pub fn fuse_available(test: &str) -> bool {
    if !kernel_available(test) {
        return false;
    }
    let tools = ["fusermount3", "rsync", "tar", "cp"]
        .iter()
        .all(|t| have(t));
    let dev = Path::new("/dev/fuse").exists();
    if dev && tools {
        return true;
    }
    let why = format!("/dev/fuse={dev} tools(fusermount3, rsync, tar)={tools}");
    unavailable(test, "FUSE", &why)
}

/// The effective uid, from /proc/self/status.
pub fn geteuid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| {
                l.split_whitespace()
                    .nth(2)
                    .map(|x| x.parse().unwrap_or(u32::MAX))
            })
        })
        .unwrap_or(u32::MAX)
}
