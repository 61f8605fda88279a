//! Loop devices over image files, detached (and forgotten by btrfs) on
//! drop.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::run::run_ok;

/// One loop device.
pub struct LoopDev {
    pub dev: String,
    pub image: PathBuf,
}

impl LoopDev {
    pub fn attach(image: &Path, readonly: bool) -> LoopDev {
        let mut c = Command::new("losetup");
        c.args(["-f", "--show"]);
        if readonly {
            c.arg("-r");
        }
        let o = run_ok(c.arg(image), "losetup");
        LoopDev {
            dev: String::from_utf8_lossy(&o.stdout).trim().to_string(),
            image: image.to_path_buf(),
        }
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("btrfs")
            .args(["device", "scan", "--forget", &self.dev])
            .output();
        // The device can stay busy for a moment after an unmount. Retry
        // only while it is still ours: once free, another process may have
        // taken the same loop device, and detaching it would pull the
        // device from under that process's mount or check.
        for _ in 0..20 {
            if !bound_to(&self.dev, &self.image) {
                return;
            }
            if Command::new("losetup")
                .args(["-d", &self.dev])
                .output()
                .is_ok_and(|o| o.status.success())
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Whether loop device `dev` is attached to `image` (its backing file in
/// sysfs).
pub fn bound_to(dev: &str, image: &Path) -> bool {
    let name = dev.trim_start_matches("/dev/");
    let Ok(b) = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")) else {
        return false;
    };
    let back = PathBuf::from(b.trim());
    back == image || std::fs::canonicalize(image).is_ok_and(|c| c == back)
}

/// The loop devices of one filesystem's images, made known to btrfs
/// (`btrfs device scan`) so that it can be mounted by its first device.
pub struct Loops(pub Vec<LoopDev>);

impl Loops {
    pub fn attach<P: AsRef<Path>>(images: &[P], readonly: bool) -> Loops {
        let v: Vec<LoopDev> = images
            .iter()
            .map(|i| LoopDev::attach(i.as_ref(), readonly))
            .collect();
        let _ = Command::new("btrfs")
            .args(["device", "scan"])
            .args(v.iter().map(|l| &l.dev))
            .output();
        Loops(v)
    }

    /// The first device.
    pub fn first(&self) -> &str {
        &self.0[0].dev
    }

    pub fn devs(&self) -> Vec<&str> {
        self.0.iter().map(|l| l.dev.as_str()).collect()
    }

    /// The image file behind loop device `dev`.
    pub fn image_of(&self, dev: &str) -> &Path {
        &self
            .0
            .iter()
            .find(|l| l.dev == dev)
            .unwrap_or_else(|| panic!("unknown device {dev}"))
            .image
    }
}
