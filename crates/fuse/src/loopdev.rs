//! A loop device over the image, attached by the mount itself (as `mount
//! -o loop` does), so that root's read-write mount is a block-device FUSE
//! mount (fuseblk).
//!
//! Why: the kernel sends FUSE_DESTROY at unmount, and waits for its
//! answer, only to fuseblk mounts (fs/fuse/inode.c, fc->destroy), and only
//! they get FUSE_SYNCFS (fc->sync_fs). With them a plain umount(2) returns
//! after the last commit, and sync(1)/syncfs(2) commit. The kernel also
//! claims the loop device exclusively for the mount's life, so `mount -o
//! loop IMAGE` by the kernel (which reuses or claims that device) fails
//! instead of writing the image beneath us.
//!
//! The mount reads and writes the image through its own descriptors, not
//! through the loop device: the device only carries the kernel's claim.
//! It is attached with autoclear: the kernel detaches it when the mount
//! lets it go (after DESTROY) and nobody else has it open.
//!
//! The ioctls and structs are the kernel's uapi linux/loop.h (libc does
//! not carry them).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;
const LO_NAME_SIZE: usize = 64;

/// struct loop_info64.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; LO_NAME_SIZE],
    lo_crypt_name: [u8; LO_NAME_SIZE],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// struct loop_config.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const _: () = assert!(std::mem::size_of::<LoopInfo64>() == 232);
const _: () = assert!(std::mem::size_of::<LoopConfig>() == 304);

/// An attached loop device, open until dropped (then detached by the
/// kernel once nobody else holds it).
pub struct LoopDev {
    pub path: PathBuf,
    _dev: File,
}

/// Attaches a free loop device to `backing` (read-only if `read_only`),
/// with autoclear.
pub fn attach(backing: &Path, read_only: bool) -> io::Result<LoopDev> {
    let ctl = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")?;
    let file = OpenOptions::new()
        .read(true)
        .write(!read_only)
        .open(backing)?;
    let mut name = [0u8; LO_NAME_SIZE];
    {
        use std::os::unix::ffi::OsStrExt;
        let b = backing.as_os_str().as_bytes();
        let n = b.len().min(LO_NAME_SIZE - 1);
        name[..n].copy_from_slice(&b[..n]);
    }
    // Another process may take the free device first: ask again.
    for _ in 0..16 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument.
        let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let path = PathBuf::from(format!("/dev/loop{n}"));
        let dev = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .open(&path)?;
        let cfg = LoopConfig {
            fd: file.as_raw_fd() as u32,
            block_size: 0,
            info: LoopInfo64 {
                lo_device: 0,
                lo_inode: 0,
                lo_rdevice: 0,
                lo_offset: 0,
                lo_sizelimit: 0,
                lo_number: 0,
                lo_encrypt_type: 0,
                lo_encrypt_key_size: 0,
                lo_flags: LO_FLAGS_AUTOCLEAR | if read_only { LO_FLAGS_READ_ONLY } else { 0 },
                lo_file_name: name,
                lo_crypt_name: [0; LO_NAME_SIZE],
                lo_encrypt_key: [0; 32],
                lo_init: [0; 2],
            },
            reserved: [0; 8],
        };
        // SAFETY: LOOP_CONFIGURE reads the struct passed, which lives for
        // the call; both descriptors are open.
        if unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CONFIGURE, &cfg) } == 0 {
            return Ok(LoopDev { path, _dev: dev });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(io::Error::new(
                e.kind(),
                format!("{}: LOOP_CONFIGURE: {e}", path.display()),
            ));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::ResourceBusy,
        "no free loop device after 16 tries",
    ))
}
