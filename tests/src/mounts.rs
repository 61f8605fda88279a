//! Mounts released on drop: the kernel's btrfs over loop devices, and
//! ubtrfs' FUSE mount. Both unmount with a lazy fallback.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::fixtures::Fixture;
use crate::loops::Loops;
use crate::paths::tempdir;
use crate::run::{run, ubtrfs_bin};

/// Whether `dir` is a mount point (of this mount namespace).
pub fn is_mounted(dir: &Path) -> bool {
    let want = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

/// Runs an unmount command (`umount DIR`, `fusermount3 -u DIR`), again
/// for up to 2 s while it fails with EBUSY. A process that looks through
/// the mount for a moment makes a plain umount fail, on any filesystem:
/// xfs_io, for one, statfs()s every mount when it starts, and fstests
/// starts thousands of them. On a FUSE mount that moment is a round trip
/// to the daemon, so a suite run beside fstests meets it often; the
/// unmount the test checks is still a plain one.
pub fn unmount_cmd(cmd: &mut Command) -> Result<std::process::Output, String> {
    let mut tries = 0;
    loop {
        match run(cmd) {
            Err(e)
                if tries < 20 && (e.contains("busy") || e.contains("Device or resource busy")) =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

/// Unmounts `dir`; lazily (`umount -l`) when a plain umount fails. Returns
/// whether the plain umount worked.
pub fn unmount(dir: &Path) -> bool {
    let ok = unmount_cmd(Command::new("umount").arg(dir)).is_ok();
    if !ok {
        let _ = Command::new("umount").arg("-l").arg(dir).output();
    }
    ok
}

/// Polls `f` every 50 ms until it holds; panics after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Checks RAID5/6 parity through the kernel: mounts `images` read-only
/// and degraded without each device in turn (and each pair when `pairs`),
/// so that what lived there is rebuilt from the others and the parity,
/// and runs `check` on each mount. Err names the devices left out.
pub fn degraded_mounts(
    images: &[PathBuf],
    pairs: bool,
    mut check: impl FnMut(&Path) -> Result<(), String>,
) -> Result<(), String> {
    let n = images.len();
    let mut lost: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
    if pairs {
        lost.extend((0..n).flat_map(|i| (i + 1..n).map(move |j| vec![i, j])));
    }
    for gone in lost {
        // Forget every registered device, so that the kernel cannot find
        // the left-out one by an earlier scan.
        let _ = Command::new("btrfs")
            .args(["device", "scan", "--forget"])
            .output();
        let kept: Vec<PathBuf> = (0..n)
            .filter(|i| !gone.contains(i))
            .map(|i| images[i].clone())
            .collect();
        let m = Mount::images(&kept, "degraded", true);
        let r = check(&m.dir);
        m.unmount();
        r.map_err(|e| format!("degraded mount without devices {gone:?}: {e}"))?;
    }
    Ok(())
}

/// A btrfs mounted by the kernel from image files through loop devices;
/// unmounted and detached on drop.
pub struct Mount {
    pub dir: PathBuf,
    mounted: bool,
    /// Remove `dir` after unmounting (it was made for the mount).
    own_dir: bool,
    // Dropped after the unmount in `drop`.
    loops: Loops,
}

impl Mount {
    /// Mounts `images` (the first is mounted, every one given as device=)
    /// with `opts` on a fresh directory under /tmp.
    pub fn images(images: &[PathBuf], opts: &str, readonly: bool) -> Mount {
        let dir = tempdir("ubtrfs-mnt");
        let mut m = Mount::images_at(images, opts, readonly, &dir);
        m.own_dir = true;
        m
    }

    /// As [`Mount::images`], on `dir` (created if missing).
    pub fn images_at(images: &[PathBuf], opts: &str, readonly: bool, dir: &Path) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        let loops = Loops::attach(images, readonly);
        let mut o: Vec<String> = Vec::new();
        if readonly {
            o.push("ro".into());
        }
        if loops.0.len() > 1 {
            for l in &loops.0 {
                o.push(format!("device={}", l.dev));
            }
        }
        if !opts.is_empty() {
            o.push(opts.into());
        }
        let mut c = Command::new("mount");
        c.args(["-t", "btrfs"]);
        if !o.is_empty() {
            c.arg("-o").arg(o.join(","));
        }
        c.arg(loops.first()).arg(dir);
        run(&mut c).unwrap_or_else(|e| panic!("{e}"));
        Mount {
            dir: dir.to_path_buf(),
            mounted: true,
            own_dir: false,
            loops,
        }
    }

    /// The kernel's read-only mount of a fixture on `dir`.
    pub fn fixture(f: &Fixture, dir: &Path) -> Mount {
        Mount::images_at(&f.devices(), "", true, dir)
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// The loop devices under the mount.
    pub fn loops(&self) -> &Loops {
        &self.loops
    }

    /// Unmounts now (the loop devices go with the value).
    pub fn unmount(mut self) {
        self.do_unmount();
    }

    /// Unmounts now with a plain umount (after sync); Err with its output
    /// when that fails (busy), after a lazy unmount.
    pub fn try_unmount(mut self) -> Result<(), String> {
        let _ = Command::new("sync").output();
        let r = unmount_cmd(Command::new("umount").arg(&self.dir)).map(|_| ());
        if r.is_err() {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).output();
        }
        self.mounted = false;
        if self.own_dir {
            let _ = std::fs::remove_dir(&self.dir);
        }
        r
    }

    fn do_unmount(&mut self) {
        if self.mounted {
            let _ = Command::new("sync").output();
            unmount(&self.dir);
            self.mounted = false;
            if self.own_dir {
                let _ = std::fs::remove_dir(&self.dir);
            }
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.do_unmount();
    }
}

/// Processes (other than this one) whose command line mentions "ubtrfs"
/// and `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains("ubtrfs") && c.contains(needle) {
                out.push(pid);
            }
        }
    }
    out
}

/// An ubtrfs FUSE mount, unmounted (and its process reaped) on drop.
pub struct FuseMount {
    pub dir: PathBuf,
    pub child: Option<Child>,
}

impl FuseMount {
    /// `ubtrfs mount [-o opts] IMAGE [-d DEV].. DIR`, in the background (the
    /// default) or with -f as a child of this process.
    pub fn new(image_args: &[String], opts: &[&str], dir: &Path, foreground: bool) -> FuseMount {
        std::fs::create_dir_all(dir).unwrap();
        let mut cmd = Command::new(ubtrfs_bin());
        cmd.arg("mount");
        // Read-only unless the test asks for rw: fixtures are shared.
        let rw = opts.iter().any(|o| o.split(',').any(|x| x == "rw"));
        if !rw {
            cmd.args(["-o", "ro"]);
        }
        for o in opts {
            cmd.args(["-o", o]);
        }
        if let Some(t) = crate::run::transport_option() {
            cmd.args(["-o", t]);
        }
        if foreground {
            cmd.arg("-f");
        }
        cmd.args(image_args).arg(dir);
        if foreground {
            let child = cmd
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn ubtrfs mount -f");
            let m = FuseMount {
                dir: dir.to_path_buf(),
                child: Some(child),
            };
            wait_until("the foreground mount", Duration::from_secs(30), || {
                is_mounted(dir)
            });
            m
        } else {
            let out = cmd.output().expect("run ubtrfs mount");
            assert!(
                out.status.success(),
                "ubtrfs mount {}: {}",
                image_args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                is_mounted(dir),
                "ubtrfs mount returned but {} is not mounted",
                dir.display()
            );
            FuseMount {
                dir: dir.to_path_buf(),
                child: None,
            }
        }
    }

    /// A mount of fixture `f`.
    pub fn of(f: &Fixture, opts: &[&str], dir: &Path) -> FuseMount {
        FuseMount::new(&f.image_args(None), opts, dir, false)
    }

    /// Unmounts and waits for the serving process to be gone; returns the
    /// foreground child's exit status.
    pub fn unmount(&mut self) -> Option<std::process::ExitStatus> {
        if is_mounted(&self.dir) {
            unmount(&self.dir);
        }
        let dir = self.dir.display().to_string();
        let status = self.child.take().map(|mut c| {
            let t = Instant::now();
            loop {
                if let Some(s) = c.try_wait().unwrap() {
                    break s;
                }
                if t.elapsed() > Duration::from_secs(20) {
                    let _ = c.kill();
                    break c.wait().unwrap();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let t = Instant::now();
        while !processes_with(&dir).is_empty() && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(50));
        }
        status
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        self.unmount();
    }
}
