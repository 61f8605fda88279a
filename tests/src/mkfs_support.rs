//! Helpers for the `ubtrfs mkfs` tests (tests/tests/mkfs/): the rich
//! source tree, loop devices and mounts that clean up after themselves,
//! and manifests of a source tree and of a mount.

use crate::{repo_root, scratch_dir};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Runs a command; Ok(stdout) on success, Err(a report) otherwise.
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(report(cmd, &out))
    }
}

/// A command with its status and output, for an assertion message.
pub fn report(cmd: &Command, out: &Output) -> String {
    format!(
        "{cmd:?}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs a command and panics with its output when it fails.
pub fn must(cmd: &mut Command) -> String {
    run(cmd).unwrap_or_else(|e| panic!("{e}"))
}

/// The rich source tree (tests/oracle/mkfs_source.py), built once per test
/// process, with its manifest.
pub fn source_tree() -> &'static (PathBuf, Vec<String>) {
    static S: OnceLock<(PathBuf, Vec<String>)> = OnceLock::new();
    S.get_or_init(|| {
        let dir = scratch_dir("mkfs-src").join("src");
        must(
            Command::new("python3")
                .arg(repo_root().join("tests/oracle/mkfs_source.py"))
                .arg(&dir),
        );
        let m = crate::manifest::manifest_of(&dir);
        (dir, m)
    })
}

/// How many kills the crash tests of the source tree's writers make
/// (crash_kill.rs, subvol_safety.rs): UBTRFS_CRASH_KILLS, default 8.
pub fn crash_kills() -> u64 {
    crate::rng::env_u64("UBTRFS_CRASH_KILLS").unwrap_or(8)
}

/// A loop device over an image file, detached (and forgotten by btrfs's
/// device list) on drop.
pub struct Loop(pub PathBuf);

impl Loop {
    /// `losetup -f` can lose a race for the free device to another process
    /// (other tests, other users of loop devices): a few tries.
    pub fn new(image: &Path) -> Loop {
        let mut last = String::new();
        for _ in 0..5 {
            match run(Command::new("losetup").args(["-f", "--show"]).arg(image)) {
                Ok(dev) => return Loop(PathBuf::from(dev.trim())),
                Err(e) => last = e,
            }
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        panic!("{last}");
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("btrfs")
            .args(["device", "scan", "--forget"])
            .arg(&self.0)
            .output();
        let _ = Command::new("losetup").arg("-d").arg(&self.0).output();
    }
}

/// A mounted btrfs (all its devices named with -o device=), unmounted on
/// drop if still mounted.
pub struct Mount {
    pub dir: PathBuf,
    mounted: bool,
}

impl Mount {
    pub fn new(devs: &[Loop], dir: &Path) -> Result<Mount, String> {
        std::fs::create_dir_all(dir).unwrap();
        let opts: Vec<String> = devs
            .iter()
            .map(|d| format!("device={}", d.0.display()))
            .collect();
        let mut cmd = Command::new("mount");
        cmd.args(["-t", "btrfs", "-o", &opts.join(",")])
            .arg(&devs[0].0)
            .arg(dir);
        run(&mut cmd).map_err(|e| format!("{e}\ndmesg:\n{}", dmesg_tail()))?;
        Ok(Mount {
            dir: dir.to_path_buf(),
            mounted: true,
        })
    }

    pub fn umount(mut self) -> Result<(), String> {
        self.mounted = false;
        crate::mounts::unmount_cmd(Command::new("umount").arg(&self.dir)).map(|_| ())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.dir).output();
        }
    }
}

/// The kernel log's last lines (for a refused mount).
pub fn dmesg_tail() -> String {
    let out = Command::new("dmesg").output().map(|o| o.stdout);
    let s = String::from_utf8_lossy(&out.unwrap_or_default()).into_owned();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(25)..].join("\n")
}

/// Image files `n` of them in `dir`, each `size` bytes (sparse).
pub fn image_files(dir: &Path, name: &str, n: usize, size: u64) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("{name}.{i}.img"));
            let _ = std::fs::remove_file(&p);
            let f = std::fs::File::create(&p).unwrap();
            f.set_len(size).unwrap();
            p
        })
        .collect()
}

/// Removes a scratch path's images (the matrix would otherwise leave
/// gigabytes of sparse files behind).
pub fn remove_all(paths: &[PathBuf]) {
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
}
