//! Making a mount and undoing it: mount(2) as root (fuse.ubtrfs, or
//! fuseblk.ubtrfs over the image's block or loop device for the
//! read-write mount) or fusermount3 otherwise, the io_uring switch asked
//! of the kernel before INIT, the readahead window set after it, and the
//! unmounts: the session's own at a signal and `ubtrfs umount`'s, which
//! waits for the serving process's last commit. Apart from
//! [`super`] (serving), as the kernel keeps mounting (fs/fuse/inode.c)
//! apart from requests.

use super::MountRequest;
use crate::logging;
use crate::options::{MountOptions, Uring};
use crate::proto::Acl;
use std::ffi::CString;
use std::io::IsTerminal;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

/// Unmounts `mountpoint` (as umount(8), or fusermount3 -u when not root)
/// and waits until the process serving it has ended, its last commit
/// made: see [`crate::pidfile`]. A lazy unmount does not wait (the
/// process ends when the last user of the mount goes). Returns the pid
/// waited for.
pub fn unmount(mountpoint: &Path, lazy: bool) -> Result<Option<u32>, String> {
    let mp = mountpoint
        .canonicalize()
        .or_else(|_| std::path::absolute(mountpoint))
        .map_err(|e| format!("mount point {}: {e}", mountpoint.display()))?;
    let server = crate::pidfile::server_of(&mp);
    if is_root() {
        let c = CString::new(mp.as_os_str().as_bytes())
            .map_err(|_| format!("mount point {}: NUL in the path", mp.display()))?;
        let flags = if lazy { libc::MNT_DETACH } else { 0 };
        // SAFETY: NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
            return Err(format!(
                "umount {}: {}",
                mp.display(),
                std::io::Error::last_os_error()
            ));
        }
    } else {
        let mut last = String::new();
        let done = ["fusermount3", "fusermount"].iter().any(|bin| {
            let mut c = std::process::Command::new(bin);
            c.arg("-u");
            if lazy {
                c.arg("-z");
            }
            match c.arg("--").arg(&mp).output() {
                Ok(o) if o.status.success() => true,
                Ok(o) => {
                    last = String::from_utf8_lossy(&o.stderr).trim().to_string();
                    false
                }
                Err(e) => {
                    last = format!("{bin}: {e}");
                    false
                }
            }
        });
        if !done {
            return Err(format!("unmount {}: {last}", mp.display()));
        }
    }
    let Some(server) = server.filter(|_| !lazy) else {
        return Ok(None);
    };
    let t = std::time::Instant::now();
    let mut told = false;
    while server.alive() {
        if !told && t.elapsed() > Duration::from_secs(1) && std::io::stderr().is_terminal() {
            eprintln!(
                "waiting for process {} to make its last commit to the image",
                server.pid
            );
            told = true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(Some(server.pid))
}

/// The option string fusermount3 mounts with: what mount_syscall passes
/// as flags and data, in fusermount3's words (it adds fd=, rootmode=,
/// user_id= and group_id= itself).
fn fusermount_options(fsname: &str, o: &MountOptions, acl: Acl, rw: bool) -> String {
    // fusermount3 splits at commas: escape them (and backslashes) in the name.
    let mut name = String::new();
    for c in fsname.chars() {
        if c == ',' || c == '\\' {
            name.push('\\');
        }
        name.push(c);
    }
    let mut parts = vec![
        if rw { "rw" } else { "ro" }.to_string(),
        "default_permissions".to_string(),
        format!("fsname={name}"),
        "subtype=ubtrfs".to_string(),
    ];
    if acl != Acl::Owner {
        parts.push("allow_other".into());
    }
    // fusermount3 takes them by name (it adds nodev,nosuid itself).
    parts.extend(o.kernel_flags.iter().cloned());
    parts.join(",")
}

/// How the mount was made, and so how to unmount it.
#[derive(Clone)]
pub(super) enum Unmount {
    /// We called mount(2) ourselves (root).
    Syscall(CString),
    /// fusermount3 mounted it for us.
    Fusermount(CString),
}

impl Unmount {
    pub(super) fn unmount(&self) {
        match self {
            Unmount::Syscall(p) => {
                // SAFETY: NUL-terminated path.
                if unsafe { libc::umount(p.as_ptr()) } == 0 {
                    return;
                }
                let e = std::io::Error::last_os_error();
                logging::warn(&format!(
                    "unmount {}: {e}; detaching it lazily",
                    p.to_string_lossy()
                ));
                // SAFETY: as above.
                unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) };
            }
            Unmount::Fusermount(p) => {
                let path = std::ffi::OsStr::from_bytes(p.as_bytes());
                for args in [&["-u", "-q"][..], &["-u", "-q", "-z"][..]] {
                    for bin in ["fusermount3", "fusermount"] {
                        let ok = std::process::Command::new(bin)
                            .args(args)
                            .arg("--")
                            .arg(path)
                            .status()
                            .is_ok_and(|s| s.success());
                        if ok {
                            return;
                        }
                    }
                }
                logging::error(&format!("could not unmount {}", p.to_string_lossy()));
            }
        }
    }
}

/// The switch under which the kernel offers FUSE over io_uring (Linux
/// 6.14+; absent before).
pub(super) const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Before INIT asks for io_uring: the kernel offers it only while
/// `enable_uring` is Y, and it is N by default. The parameter lets FUSE
/// servers that ask for io_uring use it and changes nothing for the
/// others, so root's mount sets it (and says so); a user's mount says what
/// it would take (bench/everyday.sh measures both transports).
fn offer_uring(is_root: bool) {
    let Ok(v) = std::fs::read_to_string(ENABLE_URING) else {
        return;
    };
    if v.trim() == "Y" {
        return;
    }
    if !is_root {
        logging::info(&format!(
            "FUSE over io_uring is off on this machine ({ENABLE_URING} is {}): \
             serving /dev/fuse, which is slower; root can turn it on with \
             `echo Y > {ENABLE_URING}`",
            v.trim()
        ));
        return;
    }
    match std::fs::write(ENABLE_URING, "Y") {
        Ok(()) => logging::info(&format!(
            "set {ENABLE_URING} to Y so that this mount can use FUSE over io_uring \
             (-o nouring keeps /dev/fuse and leaves it alone)"
        )),
        Err(e) => logging::warn(&format!("{ENABLE_URING}: {e}: serving /dev/fuse")),
    }
}

/// Whether this process runs as root (mounts with mount(2) itself).
pub(super) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A FUSE mount made and not yet served: the /dev/fuse descriptor, how
/// to undo it, and who may use it.
pub(super) struct Mounted {
    pub(super) fd: OwnedFd,
    pub(super) unmount: Unmount,
    pub(super) acl: Acl,
}

impl Mounted {
    /// Undoes a mount never served: the connection goes first (closing
    /// /dev/fuse aborts it), else a fuseblk unmount would wait for an
    /// answer to DESTROY that no one gives.
    pub(super) fn abandon(self) {
        drop(self.fd);
        self.unmount.unmount();
    }
}

/// Mounts as the request says (read-write or not): mount(2) as root (for
/// a read-write mount with `blkdev`, fuseblk on the device or on a loop
/// device over the image file), fusermount3 otherwise.
pub(super) fn mount_fuse(req: &MountRequest, rw: bool) -> Result<Mounted, String> {
    let o = &req.options;
    // The kernel decides whether to offer io_uring when the mount sends
    // INIT: before the mount.
    if o.uring != Uring::Off {
        offer_uring(is_root());
    }
    // The image's full path by default: other ubtrfs processes find the
    // mount of an image by it (io::claim).
    let fsname = o.fsname.clone().unwrap_or_else(|| {
        req.image
            .canonicalize()
            .unwrap_or_else(|_| req.image.clone())
            .display()
            .to_string()
    });
    // Root's mount serves every user, as a kernel filesystem (and
    // ntfs-3g) does; default_permissions has the kernel check modes and
    // ACLs. A user's own mount stays theirs unless asked.
    let acl = if o.allow_other || is_root() {
        Acl::All
    } else if o.allow_root {
        Acl::RootAndOwner
    } else {
        Acl::Owner
    };
    let mnt_c = CString::new(req.mountpoint.as_os_str().as_bytes())
        .map_err(|_| "mount point has a NUL byte".to_string())?;
    if is_root() {
        let blkdev = (rw && o.blkdev).then_some(req.image.as_path());
        let fd = mount_syscall(&req.mountpoint, &fsname, o, acl, rw, blkdev)?;
        Ok(Mounted {
            fd,
            unmount: Unmount::Syscall(mnt_c),
            acl,
        })
    } else {
        let opts = fusermount_options(&fsname, o, acl, rw);
        let fd = crate::proto::dev::fusermount(&req.mountpoint, &opts)
            .map_err(|e| format!("mount {}: {e}", req.mountpoint.display()))?;
        Ok(Mounted {
            fd,
            unmount: Unmount::Fusermount(mnt_c),
            acl,
        })
    }
}

/// mount(2) of a FUSE filesystem of type fuse.ubtrfs on `mnt` (root only),
/// or fuseblk.ubtrfs over a loop device of `blkdev` (the image).
fn mount_syscall(
    mnt: &Path,
    fsname: &str,
    o: &MountOptions,
    acl: Acl,
    rw: bool,
    blkdev: Option<&Path>,
) -> Result<OwnedFd, String> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")
        .map_err(|e| format!("/dev/fuse: {e}"))?;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    let root_mode = std::fs::metadata(mnt)
        .map_err(|e| format!("{}: {e}", mnt.display()))?
        .mode()
        & libc::S_IFMT;
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode={:o},user_id={uid},group_id={gid},default_permissions",
        dev.as_raw_fd(),
        root_mode
    );
    if acl != Acl::Owner {
        data.push_str(",allow_other");
    }
    // Root mounts as the kernel's filesystems do: device files and setuid
    // bits work unless `nodev` / `nosuid` (fusermount3 always sets both).
    let flags = o.ms_flags() | if rw { 0 } else { libc::MS_RDONLY };
    let c = |s: &[u8]| CString::new(s).map_err(|_| "NUL byte in a mount argument".to_string());
    // Root's read-write mount is fuseblk (see loopdev.rs): a block device
    // is mounted itself, an image file through a loop device attached
    // here and held until mount(2) has it.
    let (blk, attached) = match blkdev {
        Some(dev) if is_block_device(dev) => (Some(dev.to_path_buf()), None),
        Some(image) => match crate::loopdev::attach(image, false) {
            Ok(l) => (Some(l.path.clone()), Some(l)),
            // No loop devices here (a container without them): a plain
            // FUSE mount, whose unmount `ubtrfs umount` waits for.
            Err(e) => {
                logging::warn(&format!(
                    "no loop device for {} ({e}): a plain FUSE mount; its umount returns \
                     before the last commit (`ubtrfs umount` waits for it)",
                    image.display()
                ));
                (None, None)
            }
        },
        None => (None, None),
    };
    let (source, fstype) = match &blk {
        Some(dev) => {
            data.push_str(",blksize=4096");
            // The writer opened next is this mount's: its claim on the
            // device is the kernel's, made by mount(2) below.
            if let Ok(m) = std::fs::metadata(dev) {
                ubtrfs_engine::io::claim::own_mount(m.rdev());
            }
            (c(dev.as_os_str().as_bytes())?, c(b"fuseblk.ubtrfs")?)
        }
        None => (c(fsname.as_bytes())?, c(b"fuse.ubtrfs")?),
    };
    let target = c(mnt.as_os_str().as_bytes())?;
    let data_c = c(data.as_bytes())?;
    // SAFETY: NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data_c.as_ptr().cast(),
        )
    };
    let err = std::io::Error::last_os_error();
    drop(attached);
    if rc != 0 {
        let held = if err.raw_os_error() == Some(libc::EBUSY) {
            " (the device is in use: mounted or claimed)"
        } else {
            ""
        };
        return Err(format!("mount {}: {err}{held}", mnt.display()));
    }
    Ok(OwnedFd::from(dev))
}

fn is_block_device(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device())
}

/// Sets the readahead window of the mount's backing device info (the
/// kernel's btrfs uses 4 MiB; FUSE starts at 128 KiB). The device number
/// comes from mountinfo: a stat of the mount point would be a request to
/// this very process, which is not serving yet.
pub(super) fn set_readahead(mnt: &Path, kb: u32) -> Result<(), String> {
    let dev = mount_dev(mnt).ok_or("mount not found in mountinfo")?;
    // A fuseblk mount's own bdi is named after its block device so.
    let blk = format!("/sys/class/bdi/{dev}-fuseblk/read_ahead_kb");
    let p = if Path::new(&blk).exists() {
        blk
    } else {
        format!("/sys/class/bdi/{dev}/read_ahead_kb")
    };
    std::fs::write(&p, format!("{kb}\n")).map_err(|e| format!("{p}: {e}"))
}

/// The device field ("MAJOR:MINOR") of the last mount on `mnt` in
/// mountinfo (read without a request to the mount).
pub(crate) fn mount_dev(mnt: &Path) -> Option<String> {
    ubtrfs_engine::io::claim::mounts()
        .into_iter()
        .rfind(|m| m.point == mnt)
        .map(|m| m.st_dev)
}
