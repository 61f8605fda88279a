//! BTRFS_IOC_SEND on the read-write mount, and ubtrfs's SEND_CLONES (the
//! same with its clone sources inline): the caller's descriptor takes
//! the stream of the read-only snapshot the ioctl was sent to
//! ([`ubtrfs_engine::rwfs::send`] holds what the sender reads while the
//! mount goes on). The request's thread makes the whole stream, as the
//! kernel's ioctl returns when the stream is written; no lock of the
//! mount is held meanwhile.

use super::{errno, RwInner};
use crate::caps;
use crate::proto::{Errno, INodeNo, ReplyIoctl, Request};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use ubtrfs_engine::cache::reada::Readahead;
use ubtrfs_engine::send::{send, SendOptions};
use ubtrfs_format::ioctl::{self as abi, SendArgs};

/// The caller's descriptor `fd`, the same open file description
/// (pidfd_getfd: its mode and position are the caller's, so nothing is
/// opened with the daemon's rights), open for writing. A daemon that may
/// not take it (pidfd_getfd wants ptrace rights over the caller) answers
/// EPERM.
fn caller_writer(req: &Request, fd: i64) -> Result<File, Errno> {
    let fd = i32::try_from(fd).map_err(|_| Errno::EBADF)?;
    // SAFETY: plain system calls on integers; each descriptor returned is
    // owned by exactly one OwnedFd below.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, req.pid() as libc::pid_t, 0) };
    if pidfd < 0 {
        return Err(Errno::ESRCH);
    }
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    let got = unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            std::os::fd::AsRawFd::as_raw_fd(&pidfd),
            fd,
            0,
        )
    };
    if got < 0 {
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EPERM);
        return Err(if e == libc::EBADF {
            Errno::EBADF
        } else {
            Errno::EPERM
        });
    }
    // SAFETY: `got` is a new descriptor this process owns.
    let file = unsafe { File::from_raw_fd(got as i32) };
    let mode = unsafe { libc::fcntl(got as i32, libc::F_GETFL) } & libc::O_ACCMODE;
    if mode != libc::O_WRONLY && mode != libc::O_RDWR {
        return Err(Errno::EBADF);
    }
    Ok(file)
}

impl RwInner {
    /// BTRFS_IOC_SEND of the subvolume `node` is in.
    pub(super) fn send_ioctl(&self, req: &Request, node: INodeNo, arg: &[u8], reply: ReplyIoctl) {
        match self.send_to_caller(req, node, arg) {
            Ok(()) => reply.ioctl(0, &[]),
            Err(e) => reply.error(e),
        }
    }

    fn send_to_caller(&self, req: &Request, node: INodeNo, arg: &[u8]) -> Result<(), Errno> {
        let a = SendArgs::parse(arg).ok_or(Errno::EINVAL)?;
        // As the kernel: CAP_SYS_ADMIN.
        if !caps::capable(req.pid(), caps::CAP_SYS_ADMIN) {
            return Err(Errno::EPERM);
        }
        let known = abi::SEND_FLAG_NO_FILE_DATA
            | abi::SEND_FLAG_OMIT_STREAM_HEADER
            | abi::SEND_FLAG_OMIT_END_CMD
            | abi::SEND_FLAG_VERSION
            | abi::SEND_FLAG_COMPRESSED;
        if a.flags & !known != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.clone_sources_count != a.clone_sources.len() as u64 {
            // SEND's list is a pointer into the caller's memory, which
            // FUSE does not pass: SEND_CLONES carries it.
            return Err(Errno::EOPNOTSUPP);
        }
        let proto = if a.flags & abi::SEND_FLAG_VERSION != 0 {
            a.version
        } else {
            1
        };
        let compressed = a.flags & abi::SEND_FLAG_COMPRESSED != 0;
        if !(1..=2).contains(&proto) || compressed && proto < 2 {
            return Err(Errno::EINVAL);
        }
        let out = caller_writer(req, a.send_fd)?;
        let id = self.inode(node).subvol;
        let parent = (a.parent_root != 0).then_some(a.parent_root);
        let subvols: Vec<u64> = std::iter::once(id)
            .chain(parent)
            .chain(a.clone_sources.iter().copied())
            .collect();
        let fs = self
            .fs
            .lock_commit()
            .begin_send(&subvols)
            .map_err(|e| errno("ioctl SEND", e))?;
        let opts = SendOptions {
            proto,
            compressed_data: compressed,
            no_data: a.flags & abi::SEND_FLAG_NO_FILE_DATA != 0,
            readahead: Readahead::ForwardAlways,
            parent,
            clone_sources: a.clone_sources.clone(),
            omit_header: a.flags & abi::SEND_FLAG_OMIT_STREAM_HEADER != 0,
            omit_end: a.flags & abi::SEND_FLAG_OMIT_END_CMD != 0,
        };
        let mut w = BufWriter::with_capacity(1 << 20, &out);
        let res = send(&fs, id, &opts, Box::new(&mut w))
            .map(|_| ())
            .and_then(|()| {
                w.flush()
                    .map_err(|e| ubtrfs_engine::Error::io("send stream", "write", e))
            });
        drop(w);
        drop(fs);
        self.fs.lock().end_send(&subvols);
        res.map_err(|e| errno("ioctl SEND", e))
    }
}
