//! `mount -o remount,...`: changing the flags of a mounted ubtrfs (`ro`,
//! `rw`, `noatime`, `nodev`, ...) as the kernel's filesystems take them.
//!
//! mount(8) runs the helper with `remount` among the options. The helper
//! asks the kernel (mount(2) with MS_REMOUNT). The kernel syncs the
//! filesystem first (fuse_reconfigure: FUSE_SYNCFS, on which the daemon
//! commits), refuses a change to read-only while files are open for
//! writing (EBUSY), and from then on refuses writes itself (EROFS). The
//! daemon follows its mount's read-only flag in mountinfo
//! ([`follow_ro`]), so that it writes nothing of its own accord either
//! (atime).
//!
//! A mount served read-only (the image opened read-only) cannot become
//! read-write: the daemon has no writer. The helper says so rather than
//! giving a read-write mount on which every write fails.

use crate::logging;
use crate::options::{MountOptions, MS_FLAGS};
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use ubtrfs_engine::io::claim::{mounts, MountLine};

/// The ubtrfs mount on `mnt` (the topmost one there).
fn ours(mnt: &Path) -> Option<MountLine> {
    mounts()
        .into_iter()
        .rfind(|m| m.point == mnt)
        .filter(|m| m.fstype.ends_with(".ubtrfs"))
}

/// The mount(2) flags of a remount of `current` with options `opts`
/// (the raw `-o` strings): the per-mount flags it has, changed by those
/// named (`nodev` sets, `dev` clears, ...); read-only as the last `ro` or
/// `rw` says, else as it is.
fn remount_flags(current: &MountLine, opts: &[String]) -> libc::c_ulong {
    let has = |name: &str| current.options.split(',').any(|o| o == name);
    let mut flags = MS_FLAGS
        .iter()
        .filter(|(name, _)| has(name))
        .fold(0, |a, (_, bit)| a | bit);
    // mountinfo shows relatime or noatime; neither is strictatime.
    if !has("relatime") && !has("noatime") {
        flags |= libc::MS_STRICTATIME;
    }
    let mut ro = current.ro;
    const ATIME: libc::c_ulong = libc::MS_NOATIME | libc::MS_STRICTATIME;
    for o in opts.iter().flat_map(|s| s.split(',')).map(str::trim) {
        match o {
            "ro" => ro = true,
            "rw" => ro = false,
            "dev" => flags &= !libc::MS_NODEV,
            "suid" => flags &= !libc::MS_NOSUID,
            "exec" => flags &= !libc::MS_NOEXEC,
            "diratime" => flags &= !libc::MS_NODIRATIME,
            "atime" | "relatime" => flags &= !ATIME,
            "noatime" | "strictatime" | "norelatime" => {
                flags &= !ATIME;
                flags |= if o == "noatime" {
                    libc::MS_NOATIME
                } else {
                    libc::MS_STRICTATIME
                };
            }
            _ => {
                if let Some((_, bit)) = MS_FLAGS.iter().find(|(name, _)| *name == o) {
                    flags |= bit;
                }
            }
        }
    }
    libc::MS_REMOUNT | flags | if ro { libc::MS_RDONLY } else { 0 }
}

/// Remounts the ubtrfs mount on `mountpoint` with `opts` (which hold
/// `remount`).
pub fn remount(mountpoint: &Path, opts: &[String]) -> Result<(), String> {
    MountOptions::parse(opts)?;
    let mp = mountpoint
        .canonicalize()
        .map_err(|e| format!("mount point {}: {e}", mountpoint.display()))?;
    let current = ours(&mp).ok_or_else(|| format!("{}: no ubtrfs mount there", mp.display()))?;
    let flags = remount_flags(&current, opts);
    let to_rw = flags & libc::MS_RDONLY == 0;
    if to_rw && current.ro && !crate::pidfile::writable(&mp) {
        return Err(format!(
            "{}: mounted read-only (the image was opened read-only): unmount it and mount \
             it read-write",
            mp.display()
        ));
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(format!(
            "{}: only root can remount (fusermount3 cannot)",
            mp.display()
        ));
    }
    let target = CString::new(mp.as_os_str().as_bytes())
        .map_err(|_| format!("mount point {}: NUL in the path", mp.display()))?;
    // No mount data: the kernel's FUSE ignores it on a remount through
    // mount(2).
    if let Err(e) = mount_change(&target, flags) {
        let why = if e.raw_os_error() == Some(libc::EBUSY) && !to_rw {
            " (files are open for writing)"
        } else {
            ""
        };
        return Err(format!("remount {}: {e}{why}", mp.display()));
    }
    Ok(())
}

/// mount(2) on the existing mount at `target`, changing what `flags` say
/// (MS_REMOUNT and its flags, or a propagation type): no source, type or
/// data.
pub(crate) fn mount_change(target: &CStr, flags: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: a NUL-terminated target; null source, type and data.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Follows the read-only flag of the mount on `mountpoint` into `ro`
/// until `stop`: a thread waiting on mountinfo, which the kernel marks
/// (POLLPRI) whenever a mount of the namespace changes.
pub fn follow_ro(mountpoint: PathBuf, ro: Arc<AtomicBool>, stop: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new()
        .name("ubtrfs-remount".into())
        .spawn(move || {
            use std::io::{Read, Seek};
            use std::os::fd::AsRawFd;
            let Ok(mut f) = std::fs::File::open("/proc/self/mountinfo") else {
                return;
            };
            let mut buf = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // Reading it through resets the mark.
                buf.clear();
                let _ = f.rewind().and_then(|_| f.read_to_end(&mut buf));
                if let Some(m) = ours(&mountpoint) {
                    if ro.swap(m.ro, Ordering::Relaxed) != m.ro {
                        logging::info(&format!(
                            "{} remounted {}",
                            mountpoint.display(),
                            if m.ro { "read-only" } else { "read-write" }
                        ));
                    }
                }
                let mut p = libc::pollfd {
                    fd: f.as_raw_fd(),
                    events: libc::POLLPRI,
                    revents: 0,
                };
                // SAFETY: one pollfd of ours; a timeout to look at `stop`.
                unsafe { libc::poll(&mut p, 1, 1000) };
            }
        });
    if let Err(e) = spawned {
        logging::warn(&format!("following remounts: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(options: &str, ro: bool) -> MountLine {
        MountLine {
            dev: 0,
            st_dev: "0:50".into(),
            source: "/dev/loop0".into(),
            point: "/mnt".into(),
            fstype: "fuseblk.ubtrfs".into(),
            ro,
            options: options.into(),
            shared: false,
        }
    }

    #[test]
    fn remount_keeps_what_it_is_not_told_to_change() {
        let cur = line("rw,nosuid,nodev,relatime", false);
        let f = remount_flags(&cur, &["remount,ro".into()]);
        assert_eq!(
            f,
            libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV
        );
        let f = remount_flags(&cur, &["remount,dev,noatime".into()]);
        assert_eq!(f, libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NOATIME);
        let cur = line("ro,noatime", true);
        let f = remount_flags(&cur, &["remount,rw,relatime".into()]);
        assert_eq!(f, libc::MS_REMOUNT);
        let f = remount_flags(&line("rw", false), &["remount".into()]);
        assert_eq!(f, libc::MS_REMOUNT | libc::MS_STRICTATIME);
    }
}
