//! A second mount of an image or device that ubtrfs already serves.
//!
//! The kernel's btrfs mounts a device a second time by sharing the first
//! mount's superblock: both show the same files, and writes through one
//! are seen through the other. Here one process serves each image (the
//! one writer), so a second mount by root becomes a bind mount of the
//! first, which is the same thing to the kernel: one FUSE connection, one
//! superblock, two mount points. Its own per-mount flags (`ro`, `nodev`,
//! `noatime`, ...) are set on the bind. The filesystem lives until the
//! last of them is unmounted.
//!
//! A second mount of another root (`subvol=`) than the first serves is
//! refused: the first mount's root is all a bind can show. So is a
//! read-write one of an image served read-only.

use crate::options::MountOptions;
use crate::session::MountRequest;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The root a mount asks for, as [`crate::pidfile::Record`] keeps it.
pub fn root_spec(o: &MountOptions) -> String {
    let mut parts = Vec::new();
    if let Some(p) = &o.subvol {
        parts.push(format!("subvol={}", String::from_utf8_lossy(p)));
    }
    if let Some(id) = o.subvolid {
        parts.push(format!("subvolid={id}"));
    }
    parts.join(",")
}

fn c(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{}: NUL in the path", p.display()))
}

/// Mounts `req` as a bind of the ubtrfs mount already serving its image,
/// when there is one (root only): Ok(true). Ok(false): none, mount it.
pub fn share(req: &MountRequest) -> Result<bool, String> {
    let Ok(meta) = std::fs::metadata(&req.image) else {
        return Ok(false);
    };
    let firsts = ubtrfs_engine::io::claim::ubtrfs_mounts_of(&meta);
    let Some((first, served)) = firsts
        .iter()
        .find_map(|m| Some((m, crate::pidfile::serving(&m.point)?)))
    else {
        return Ok(false);
    };
    let o = &req.options;
    let root = root_spec(o);
    if served.root != root {
        return Err(format!(
            "{} is mounted at {} with root {:?}: a second mount shares that mount, so it \
             must ask for the same root, not {:?}",
            req.image.display(),
            first.point.display(),
            served.root,
            root
        ));
    }
    let ro = o.rw == Some(false);
    if !ro && (!served.rw || first.ro) {
        return Err(format!(
            "{} is mounted read-only at {}: a second mount shares it, so mount it `-o ro` \
             (or remount the first read-write)",
            req.image.display(),
            first.point.display()
        ));
    }
    let (from, to) = (c(&first.point)?, c(&req.mountpoint)?);
    // SAFETY: NUL-terminated paths; no type or data for a bind.
    let r = unsafe {
        libc::mount(
            from.as_ptr(),
            to.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(format!(
            "bind mount of {} on {}: {}",
            first.point.display(),
            req.mountpoint.display(),
            std::io::Error::last_os_error()
        ));
    }
    // A bind joins its source's peer group; a mount of its own does not
    // (mount_namespaces(7)): out of it, and shared in a group of its own
    // where the mount it sits on is shared, as a new mount would be.
    let parent_shared = req.mountpoint.parent().is_some_and(|dir| {
        ubtrfs_engine::io::claim::mounts()
            .into_iter()
            .filter(|m| dir.starts_with(&m.point))
            .max_by_key(|m| m.point.as_os_str().len())
            .is_some_and(|m| m.shared)
    });
    // A change of the bind just made; on failure the bind goes again.
    let change = |flags: libc::c_ulong, what: &str| {
        crate::remount::mount_change(&to, flags).map_err(|e| {
            // SAFETY: the bind just made.
            unsafe { libc::umount2(to.as_ptr(), libc::MNT_DETACH) };
            format!(
                "{what} of the bind mount on {}: {e}",
                req.mountpoint.display()
            )
        })
    };
    for (bit, wanted) in [(libc::MS_PRIVATE, true), (libc::MS_SHARED, parent_shared)] {
        if wanted {
            change(bit, "propagation")?;
        }
    }
    // The bind's own flags.
    let flags = o.ms_flags() | if ro { libc::MS_RDONLY } else { 0 };
    if flags != 0 {
        change(libc::MS_REMOUNT | libc::MS_BIND | flags, "flags")?;
    }
    Ok(true)
}
