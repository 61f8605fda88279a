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

/// The name of the function it stands in (a test's, for its messages).
#[macro_export]
macro_rules! fn_name {
    () => {{
        fn here() {}
        let path = std::any::type_name_of_val(&here);
        let path = path.strip_suffix("::here").unwrap_or(path);
        path.rsplit("::").next().unwrap_or(path)
    }};
}

/// Returns from the test it stands in unless `check` ([`kernel_available`],
/// [`fuse_available`], [`btrfs_progs_available`], [`user_available`] with
/// its further arguments) passes for it, by the test function's name:
/// `skip_unless!(kernel_available);`, `skip_unless!(user_available, "tests");`.
#[macro_export]
macro_rules! skip_unless {
    ($check:path $(, $arg:expr)*) => {
        if !$check($crate::fn_name!() $(, $arg)*) {
            return;
        }
    };
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
    if crate::check::btrfs_progs_here() {
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

/// A test tool scripts/setup.sh installs with `cargo install` (pjdfstest,
/// fsx): `$UBTRFS_<NAME>` (upper case), else on PATH, else in
/// $CARGO_HOME/bin or ~/.cargo/bin. None (after failing under
/// UBTRFS_REQUIRE_KERNEL=1, or saying the test is skipped) when missing.
pub fn cargo_tool(test: &str, name: &str) -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let var = format!("UBTRFS_{}", name.to_uppercase());
    if let Ok(p) = std::env::var(&var) {
        return Some(PathBuf::from(p));
    }
    if let Ok(o) = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
    {
        let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if o.status.success() && !p.is_empty() {
            return Some(PathBuf::from(p));
        }
    }
    let homes = [
        std::env::var("CARGO_HOME").ok().map(PathBuf::from),
        std::env::var("HOME")
            .ok()
            .map(|h| PathBuf::from(h).join(".cargo")),
    ];
    for h in homes.into_iter().flatten() {
        let p = h.join("bin").join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    unavailable(
        test,
        name,
        &format!(
            "not on PATH, not in ~/.cargo/bin, ${var} unset (bash scripts/setup.sh installs it)"
        ),
    );
    None
}

/// Whether user `name` exists (pjdfstest switches to `nobody` and `tests`).
pub fn user_available(test: &str, name: &str) -> bool {
    let ok = std::fs::read_to_string("/etc/passwd")
        .is_ok_and(|s| s.lines().any(|l| l.split(':').next() == Some(name)));
    ok || unavailable(
        test,
        &format!("user {name}"),
        "no such user (bash scripts/setup.sh adds it)",
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn fn_name_is_the_enclosing_function() {
        assert_eq!(crate::fn_name!(), "fn_name_is_the_enclosing_function");
    }
}
