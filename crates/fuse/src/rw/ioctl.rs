//! The ioctls the read-write mount answers (FUSE forwards those whose
//! argument size the command encodes): inode flags (`chattr`, the
//! fileattr xflags), the filesystem label, btrfs's sync ioctls, FITRIM,
//! the subvolume ioctls ([`super::subvol`]), send ([`super::send`]) and
//! scrub ([`super::scrub`]).

use super::{errno, RwInner};
use crate::proto::{Errno, INodeNo};
use crate::proto::{ReplyIoctl, Request};
use ubtrfs_engine::tx::trim::TrimRange;

/// FS_IOC_GETFLAGS / FS_IOC_SETFLAGS as FUSE forwards them (the kernel's
/// fileattr code sends them with a 4-byte argument).
const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
/// FS_IOC_FSGETXATTR / FS_IOC_FSSETXATTR (struct fsxattr, 28 bytes): the
/// kernel reads these before it sets flags (vfs_fileattr_set).
const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
/// btrfs's own sync ioctls, which FUSE forwards on a file or directory
/// (restricted ioctls: the argument's size from the command): the way to
/// make everything durable on a mount without root, since the kernel
/// sends syncfs(2) (FUSE_SYNCFS) only to fuseblk and virtiofs daemons
/// (fs/fuse/inode.c fuse_sync_fs): root's read-write mount is fuseblk. BTRFS_IOC_SYNC = _IO(0x94, 8) (`btrfs filesystem sync`),
/// BTRFS_IOC_START_SYNC = _IOR(0x94, 24, u64) (the transaction id out),
/// BTRFS_IOC_WAIT_SYNC = _IOW(0x94, 22, u64) (a transaction id in).
const BTRFS_IOC_SYNC: u32 = ubtrfs_format::ioctl::SYNC;
/// FS_IOC_GETFSLABEL = `_IOR(0x94, 49, char[256])`, FS_IOC_SETFSLABEL =
/// `_IOW(0x94, 50, char[256])`.
const FS_IOC_GETFSLABEL: u32 = ubtrfs_format::ioctl::GET_FSLABEL;
const FS_IOC_SETFSLABEL: u32 = ubtrfs_format::ioctl::SET_FSLABEL;
const BTRFS_IOC_START_SYNC: u32 = 0x8008_9418;
/// FITRIM = _IOWR('X', 121, struct fstrim_range): start, len, minlen (u64
/// each) in; len out, the bytes trimmed. fstrim(8) sends it to the mount's
/// root directory, and FUSE forwards it as a directory ioctl.
const FITRIM: u32 = 0xc018_5879;
const BTRFS_IOC_WAIT_SYNC: u32 = 0x4008_9416;
/// FS_XFLAG_* bits and the FS_*_FL bits they stand for.
const XFLAGS: [(u32, u32); 5] = [
    (0x08, 0x10), // immutable
    (0x10, 0x20), // append
    (0x20, 0x08), // sync
    (0x40, 0x80), // noatime
    (0x80, 0x40), // nodump
];

impl RwInner {
    /// FUSE_IOCTL `cmd` on `node` with argument `in_data`.
    pub(super) fn ioctl_request(
        &self,
        req: &Request,
        node: INodeNo,
        cmd: u32,
        in_data: &[u8],
        reply: ReplyIoctl,
    ) {
        let id = self.inode(node);
        match cmd {
            FS_IOC_GETFLAGS => match self.fs_read().get_flags(id) {
                Ok(f) => reply.ioctl(0, &f.to_le_bytes()),
                Err(e) => reply.error(errno("ioctl", e)),
            },
            FS_IOC_SETFLAGS => {
                let Some(b) = in_data.get(..4) else {
                    return reply.error(Errno::EINVAL);
                };
                let f = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                match self.fs().set_flags(id, f) {
                    Ok(()) => {
                        self.inval_attr(node);
                        reply.ioctl(0, &[])
                    }
                    Err(e) => reply.error(errno("ioctl", e)),
                }
            }
            FS_IOC_FSGETXATTR => match self.fs_read().get_flags(id) {
                Ok(f) => {
                    let x = XFLAGS
                        .iter()
                        .filter(|(_, fl)| f & fl != 0)
                        .fold(0u32, |a, (x, _)| a | x);
                    let mut out = [0u8; 28];
                    out[..4].copy_from_slice(&x.to_le_bytes());
                    reply.ioctl(0, &out)
                }
                Err(e) => reply.error(errno("ioctl", e)),
            },
            FS_IOC_FSSETXATTR => {
                let Some(b) = in_data.get(..4) else {
                    return reply.error(Errno::EINVAL);
                };
                let x = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                let known = XFLAGS.iter().fold(0, |a, (xbit, _)| a | xbit);
                if x & !known != 0 {
                    // As btrfs_fileattr_set: DAX, project inheritance and
                    // the rest are not btrfs's.
                    return reply.error(Errno::EOPNOTSUPP);
                }
                let mut fs = self.fs();
                let res = fs.get_flags(id).and_then(|cur| {
                    let mut f = cur;
                    for (xbit, fl) in XFLAGS {
                        if x & xbit != 0 {
                            f |= fl;
                        } else {
                            f &= !fl;
                        }
                    }
                    if f == cur {
                        Ok(())
                    } else {
                        fs.set_flags(id, f)
                    }
                });
                drop(fs);
                match res {
                    Ok(()) => {
                        self.inval_attr(node);
                        reply.ioctl(0, &[])
                    }
                    Err(e) => reply.error(errno("ioctl", e)),
                }
            }
            FS_IOC_GETFSLABEL => {
                let mut out = [0u8; 256];
                let l = self.fs_read().label();
                let n = l.len().min(255);
                out[..n].copy_from_slice(&l[..n]);
                reply.ioctl(0, &out)
            }
            FS_IOC_SETFSLABEL => {
                // CAP_SYS_ADMIN, as the kernel's btrfs asks.
                if !crate::caps::capable(req.pid(), crate::caps::CAP_SYS_ADMIN) {
                    return reply.error(Errno::EPERM);
                }
                let b = in_data.get(..256).unwrap_or(in_data);
                let label = &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())];
                if label.len() >= 256 {
                    return reply.error(Errno::EINVAL);
                }
                match self.fs.lock_commit().set_label(label) {
                    Ok(()) => reply.ioctl(0, &[]),
                    Err(e) => reply.error(errno("ioctl FS_IOC_SETFSLABEL", e)),
                }
            }
            FITRIM => {
                // CAP_SYS_ADMIN, as the kernel's btrfs_ioctl_fitrim asks.
                if !crate::caps::capable(req.pid(), crate::caps::CAP_SYS_ADMIN) {
                    return reply.error(Errno::EPERM);
                }
                let Some(b) = in_data.get(..24) else {
                    return reply.error(Errno::EINVAL);
                };
                let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
                let r = TrimRange {
                    start: word(0),
                    len: word(1),
                    minlen: word(2),
                };
                match self.fs().trim(r) {
                    Ok(trimmed) => {
                        let mut out = [0u8; 24];
                        out[..8].copy_from_slice(&r.start.to_le_bytes());
                        out[8..16].copy_from_slice(&trimmed.to_le_bytes());
                        out[16..].copy_from_slice(&r.minlen.to_le_bytes());
                        reply.ioctl(0, &out)
                    }
                    Err(e) => reply.error(errno("ioctl FITRIM", e)),
                }
            }
            BTRFS_IOC_SYNC => match self.fs.lock_commit().sync_fs() {
                Ok(_) => reply.ioctl(0, &[]),
                Err(e) => reply.error(errno("ioctl BTRFS_IOC_SYNC", e)),
            },
            // The kernel starts a commit and returns at once; this one is
            // done when it returns (WAIT_SYNC then has nothing to wait for).
            BTRFS_IOC_START_SYNC => match self.fs.lock_commit().sync_fs() {
                Ok(transid) => reply.ioctl(0, &transid.to_le_bytes()),
                Err(e) => reply.error(errno("ioctl BTRFS_IOC_START_SYNC", e)),
            },
            BTRFS_IOC_WAIT_SYNC => {
                let transid = in_data
                    .get(..8)
                    .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
                match self.fs.lock_commit().wait_sync(transid) {
                    Ok(()) => reply.ioctl(0, &[]),
                    Err(e) => reply.error(errno("ioctl BTRFS_IOC_WAIT_SYNC", e)),
                }
            }
            ubtrfs_format::ioctl::SCRUB => self.scrub_ioctl(req, in_data, reply),
            ubtrfs_format::ioctl::SEND | ubtrfs_format::ioctl::SEND_CLONES => {
                self.send_ioctl(req, node, in_data, reply)
            }
            c if super::subvol::handles(c) => self.subvol_ioctl(req, node, c, in_data, reply),
            _ => reply.error(Errno::ENOTTY),
        }
    }
}
