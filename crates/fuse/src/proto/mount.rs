//! Mounting a FUSE filesystem served with this layer: open /dev/fuse and
//! mount it, with mount(2) as root or through fusermount3 otherwise, and
//! hand back the descriptor for [`super::Session::new`].
//!
//! The bench daemons (bench/slowfile, bench/uring_floor) share it: each
//! had its own copy of the same mount(2) call. `ubtrfs mount` has more to
//! decide (fuseblk over a loop device, mount flags from its options) and
//! keeps its own (crates/fuse/src/session.rs).
//!
//! The mount(2) data is what the kernel's fuse_parse_param (fs/fuse/
//! inode.c) takes: `fd`, `rootmode` (octal: a file type), `user_id` and
//! `group_id` are required; `allow_other` and `default_permissions` are
//! flags.

use super::dispatch::Acl;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens /dev/fuse and mounts it on the directory `mountpoint` as a FUSE
/// filesystem of type `fuse.SUBTYPE` whose source (its name in
/// /proc/mounts) is `fsname`; read-only when `read_only`. Others than the
/// mounting user may enter it unless `acl` is [`Acl::Owner`]
/// (`allow_other`; [`Acl::RootAndOwner`] is then narrowed per request by
/// the session, which must be given the same `acl`). With
/// `default_permissions` the kernel checks file modes itself.
///
/// As root: mount(2), with nosuid and nodev. Otherwise: fusermount3 (or
/// fusermount), which adds nosuid and nodev itself and allows
/// `allow_other` only where /etc/fuse.conf has user_allow_other.
///
/// Returns the /dev/fuse descriptor of the new mount: the kernel sends
/// INIT on it next.
pub fn mount(
    mountpoint: &Path,
    fsname: &str,
    subtype: &str,
    read_only: bool,
    acl: Acl,
    default_permissions: bool,
) -> io::Result<OwnedFd> {
    let allow_other = acl != Acl::Owner;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // fusermount3 splits its options at commas: escape them (and
        // backslashes) in the name.
        let mut name = String::new();
        for c in fsname.chars() {
            if c == ',' || c == '\\' {
                name.push('\\');
            }
            name.push(c);
        }
        let mut opts = format!(
            "{},fsname={name},subtype={subtype}",
            if read_only { "ro" } else { "rw" }
        );
        if allow_other {
            opts.push_str(",allow_other");
        }
        if default_permissions {
            opts.push_str(",default_permissions");
        }
        return super::dev::fusermount(mountpoint, &opts);
    }

    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")
        .map_err(|e| io::Error::new(e.kind(), format!("/dev/fuse: {e}")))?;
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // The root is a directory (S_IFDIR, in octal as the kernel reads it).
    let mut data = format!(
        "fd={},rootmode=40000,user_id={uid},group_id={gid}",
        dev.as_raw_fd()
    );
    if allow_other {
        data.push_str(",allow_other");
    }
    if default_permissions {
        data.push_str(",default_permissions");
    }
    let c = |b: &[u8]| {
        CString::new(b).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte"))
    };
    let source = c(fsname.as_bytes())?;
    let target = c(mountpoint.as_os_str().as_bytes())?;
    let fstype = c(format!("fuse.{subtype}").as_bytes())?;
    let data = c(data.as_bytes())?;
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
    if read_only {
        flags |= libc::MS_RDONLY;
    }
    // SAFETY: NUL-terminated strings that outlive the call; the data names
    // our open /dev/fuse.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(OwnedFd::from(dev))
}
