//! The arguments of the requests that carry more than a node, a name and
//! one value, decoded from their fuse_*_in ([`super::abi`]) into the
//! types of [`super::types`]: one struct a request, named after it. A
//! method of [`super::FuseFs`] then takes (request, node, \[name,\]
//! arguments, reply), and an implementation names only the fields it
//! uses; the bit tests that turn the wire's flags into options are made
//! here, once, rather than at every call.

use super::abi;
use super::types::{
    CopyFileRangeFlags, FileHandle, INodeNo, IoctlFlags, LockOwner, OpenFlags, RenameFlags,
    TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::time::SystemTime;
use ubtrfs_format::items::Timespec;

/// A time as the kernel sends it (seconds, negative before the epoch, and
/// nanoseconds forward from them), read as the mount reads stored times.
pub(crate) fn at(secs: u64, nsec: u32) -> SystemTime {
    crate::attr::system_time(&Timespec {
        sec: secs as i64,
        nsec,
    })
}

/// OPEN: the open(2) flags.
#[derive(Debug, Clone, Copy)]
pub struct Open {
    pub flags: OpenFlags,
}

impl From<&abi::OpenIn> for Open {
    fn from(a: &abi::OpenIn) -> Open {
        Open {
            flags: OpenFlags(a.flags as i32),
        }
    }
}

/// SETATTR: what to change; None leaves it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Setattr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub ctime: Option<SystemTime>,
    /// The open file it came through (ftruncate, futimens).
    pub fh: Option<FileHandle>,
    /// The change drops the set-ID bits (FATTR_KILL_SUIDGID).
    pub kill_suidgid: bool,
}

impl From<&abi::SetattrIn> for Setattr {
    fn from(a: &abi::SetattrIn) -> Setattr {
        let has = |bit: u32| a.valid & bit != 0;
        let time = |bit: u32, now: u32, secs: u64, nsec: u32| {
            has(bit).then(|| {
                if has(now) {
                    TimeOrNow::Now
                } else {
                    TimeOrNow::SpecificTime(at(secs, nsec))
                }
            })
        };
        Setattr {
            mode: has(abi::FATTR_MODE).then_some(a.mode),
            uid: has(abi::FATTR_UID).then_some(a.uid),
            gid: has(abi::FATTR_GID).then_some(a.gid),
            size: has(abi::FATTR_SIZE).then_some(a.size),
            atime: time(abi::FATTR_ATIME, abi::FATTR_ATIME_NOW, a.atime, a.atimensec),
            mtime: time(abi::FATTR_MTIME, abi::FATTR_MTIME_NOW, a.mtime, a.mtimensec),
            ctime: has(abi::FATTR_CTIME).then(|| at(a.ctime, a.ctimensec)),
            fh: has(abi::FATTR_FH).then_some(FileHandle(a.fh)),
            kill_suidgid: has(abi::FATTR_KILL_SUIDGID),
        }
    }
}

/// MKNOD: the new entry's name, its mode (the type included), the
/// caller's umask (applied by the file system under FUSE_DONT_MASK) and
/// the device number.
#[derive(Debug, Clone, Copy)]
pub struct Mknod<'a> {
    pub name: &'a OsStr,
    pub mode: u32,
    pub umask: u32,
    pub rdev: u32,
}

impl<'a> Mknod<'a> {
    pub(crate) fn new(a: &abi::MknodIn, name: &'a OsStr) -> Mknod<'a> {
        Mknod {
            name,
            mode: a.mode,
            umask: a.umask,
            rdev: a.rdev,
        }
    }
}

/// MKDIR: the new directory's name, permission bits and the caller's
/// umask.
#[derive(Debug, Clone, Copy)]
pub struct Mkdir<'a> {
    pub name: &'a OsStr,
    pub mode: u32,
    pub umask: u32,
}

impl<'a> Mkdir<'a> {
    pub(crate) fn new(a: &abi::MkdirIn, name: &'a OsStr) -> Mkdir<'a> {
        Mkdir {
            name,
            mode: a.mode,
            umask: a.umask,
        }
    }
}

/// CREATE and TMPFILE: the new file's name (empty for TMPFILE's file,
/// which has none), mode, the caller's umask and the flags it is opened
/// with.
#[derive(Debug, Clone, Copy)]
pub struct Create<'a> {
    pub name: &'a OsStr,
    pub mode: u32,
    pub umask: u32,
    pub flags: i32,
}

impl<'a> Create<'a> {
    pub(crate) fn new(a: &abi::CreateIn, name: &'a OsStr) -> Create<'a> {
        Create {
            name,
            mode: a.mode,
            umask: a.umask,
            flags: a.flags as i32,
        }
    }
}

/// RENAME and RENAME2: the entry `name` goes to `newname` in
/// `newparent`, with renameat2(2)'s flags.
#[derive(Debug, Clone, Copy)]
pub struct Rename<'a> {
    pub name: &'a OsStr,
    pub newparent: INodeNo,
    pub newname: &'a OsStr,
    pub flags: RenameFlags,
}

/// READ.
#[derive(Debug, Clone, Copy)]
pub struct Read {
    pub fh: FileHandle,
    pub offset: u64,
    pub size: u32,
    pub flags: OpenFlags,
    pub lock_owner: Option<LockOwner>,
}

impl From<&abi::ReadIn> for Read {
    fn from(a: &abi::ReadIn) -> Read {
        Read {
            fh: FileHandle(a.fh),
            offset: a.offset,
            size: a.size,
            flags: OpenFlags(a.flags as i32),
            lock_owner: (a.read_flags & abi::FUSE_READ_LOCKOWNER != 0)
                .then_some(LockOwner(a.lock_owner)),
        }
    }
}

/// WRITE: `data` is the request's `size` bytes.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    pub fh: FileHandle,
    pub offset: u64,
    pub data: &'a [u8],
    pub write_flags: WriteFlags,
    pub flags: OpenFlags,
    pub lock_owner: Option<LockOwner>,
}

impl<'a> Write<'a> {
    /// None when fewer than `size` bytes came.
    pub(crate) fn new(a: &abi::WriteIn, data: &'a [u8]) -> Option<Write<'a>> {
        Some(Write {
            fh: FileHandle(a.fh),
            offset: a.offset,
            data: data.get(..a.size as usize)?,
            write_flags: WriteFlags::from_bits_retain(a.write_flags),
            flags: OpenFlags(a.flags as i32),
            lock_owner: (a.write_flags & abi::FUSE_WRITE_LOCKOWNER != 0)
                .then_some(LockOwner(a.lock_owner)),
        })
    }
}

/// FLUSH: a close(2) of a descriptor of the open file.
#[derive(Debug, Clone, Copy)]
pub struct Flush {
    pub fh: FileHandle,
    pub lock_owner: LockOwner,
}

impl From<&abi::FlushIn> for Flush {
    fn from(a: &abi::FlushIn) -> Flush {
        Flush {
            fh: FileHandle(a.fh),
            lock_owner: LockOwner(a.lock_owner),
        }
    }
}

/// RELEASE and RELEASEDIR: the open file's last close.
#[derive(Debug, Clone, Copy)]
pub struct Release {
    pub fh: FileHandle,
    pub flags: OpenFlags,
    /// Set when flock locks are to be dropped (FUSE_RELEASE_FLOCK_UNLOCK).
    pub lock_owner: Option<LockOwner>,
    pub flush: bool,
}

impl From<&abi::ReleaseIn> for Release {
    fn from(a: &abi::ReleaseIn) -> Release {
        Release {
            fh: FileHandle(a.fh),
            flags: OpenFlags(a.flags as i32),
            lock_owner: (a.release_flags & abi::FUSE_RELEASE_FLOCK_UNLOCK != 0)
                .then_some(LockOwner(a.lock_owner)),
            flush: a.release_flags & abi::FUSE_RELEASE_FLUSH != 0,
        }
    }
}

/// FSYNC and FSYNCDIR.
#[derive(Debug, Clone, Copy)]
pub struct Fsync {
    pub fh: FileHandle,
    /// fdatasync(2): the data and what finding it needs, not every
    /// attribute.
    pub datasync: bool,
}

impl From<&abi::FsyncIn> for Fsync {
    fn from(a: &abi::FsyncIn) -> Fsync {
        Fsync {
            fh: FileHandle(a.fh),
            datasync: a.fsync_flags & abi::FUSE_FSYNC_FDATASYNC != 0,
        }
    }
}

/// READDIR and READDIRPLUS: the open directory and the cookie to go on
/// from (0 at the start); the size is the reply's.
#[derive(Debug, Clone, Copy)]
pub struct Readdir {
    pub fh: FileHandle,
    pub offset: u64,
}

impl From<&abi::ReadIn> for Readdir {
    fn from(a: &abi::ReadIn) -> Readdir {
        Readdir {
            fh: FileHandle(a.fh),
            offset: a.offset,
        }
    }
}

/// SETXATTR: the attribute's name and value, setxattr(2)'s flags
/// (XATTR_CREATE, XATTR_REPLACE) and FUSE_SETXATTR_EXT's
/// (FUSE_SETXATTR_ACL_KILL_SGID).
#[derive(Debug, Clone, Copy)]
pub struct Setxattr<'a> {
    pub name: &'a OsStr,
    pub value: &'a [u8],
    pub flags: i32,
    pub setxattr_flags: u32,
}

impl<'a> Setxattr<'a> {
    /// From the fixed argument `arg` (without FUSE_SETXATTR_EXT only its
    /// first 8 bytes come), the name and what follows it; None when
    /// short.
    pub(crate) fn new(arg: &[u8], name: &'a OsStr, rest: &'a [u8]) -> Option<Setxattr<'a>> {
        if arg.len() < abi::FUSE_COMPAT_SETXATTR_IN_SIZE {
            return None;
        }
        let mut full = [0u8; std::mem::size_of::<abi::SetxattrIn>()];
        let k = arg.len().min(full.len());
        full[..k].copy_from_slice(&arg[..k]);
        let a = abi::read::<abi::SetxattrIn>(&full)?;
        Some(Setxattr {
            name,
            value: rest.get(..a.size as usize)?,
            flags: a.flags as i32,
            setxattr_flags: a.setxattr_flags,
        })
    }
}

/// IOCTL: the command, its input (`in_size` bytes) and room for output.
#[derive(Debug, Clone, Copy)]
pub struct Ioctl<'a> {
    pub fh: FileHandle,
    pub flags: IoctlFlags,
    pub cmd: u32,
    pub in_data: &'a [u8],
    pub out_size: u32,
}

impl<'a> Ioctl<'a> {
    /// None when fewer than `in_size` bytes came.
    pub(crate) fn new(a: &abi::IoctlIn, data: &'a [u8]) -> Option<Ioctl<'a>> {
        Some(Ioctl {
            fh: FileHandle(a.fh),
            flags: IoctlFlags::from_bits_retain(a.flags),
            cmd: a.cmd,
            in_data: data.get(..a.in_size as usize)?,
            out_size: a.out_size,
        })
    }
}

/// FALLOCATE: fallocate(2)'s range and mode.
#[derive(Debug, Clone, Copy)]
pub struct Fallocate {
    pub fh: FileHandle,
    pub offset: u64,
    pub length: u64,
    pub mode: i32,
}

impl From<&abi::FallocateIn> for Fallocate {
    fn from(a: &abi::FallocateIn) -> Fallocate {
        Fallocate {
            fh: FileHandle(a.fh),
            offset: a.offset,
            length: a.length,
            mode: a.mode as i32,
        }
    }
}

/// LSEEK: lseek(2)'s offset and whence (the kernel asks only for
/// SEEK_DATA and SEEK_HOLE).
#[derive(Debug, Clone, Copy)]
pub struct Lseek {
    pub fh: FileHandle,
    pub offset: i64,
    pub whence: i32,
}

impl From<&abi::LseekIn> for Lseek {
    fn from(a: &abi::LseekIn) -> Lseek {
        Lseek {
            fh: FileHandle(a.fh),
            offset: a.offset as i64,
            whence: a.whence as i32,
        }
    }
}

/// COPY_FILE_RANGE (and its 64-bit twin): from the request's node at
/// `offset_in` to `ino_out` at `offset_out`.
#[derive(Debug, Clone, Copy)]
pub struct CopyFileRange {
    pub fh_in: FileHandle,
    pub offset_in: u64,
    pub ino_out: INodeNo,
    pub fh_out: FileHandle,
    pub offset_out: u64,
    pub len: u64,
    pub flags: CopyFileRangeFlags,
}

impl From<&abi::CopyFileRangeIn> for CopyFileRange {
    fn from(a: &abi::CopyFileRangeIn) -> CopyFileRange {
        CopyFileRange {
            fh_in: FileHandle(a.fh_in),
            offset_in: a.off_in,
            ino_out: INodeNo(a.nodeid_out),
            fh_out: FileHandle(a.fh_out),
            offset_out: a.off_out,
            len: a.len,
            flags: CopyFileRangeFlags::from_bits_retain(a.flags),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::at;
    use crate::proto::reply::time;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn times_decode_as_replies_encode_them() {
        // Before the epoch the kernel sends floor seconds and forward
        // nanoseconds: -1.25 s is (-2, 750000000).
        for t in [
            UNIX_EPOCH,
            UNIX_EPOCH + Duration::new(5, 7),
            UNIX_EPOCH - Duration::new(1, 250_000_000),
            UNIX_EPOCH - Duration::new(150_889_292, 791_803_855),
            UNIX_EPOCH - Duration::new(3, 0),
        ] {
            let (s, n) = time(t);
            assert!(n < 1_000_000_000);
            assert_eq!(at(s, n), t, "{t:?} as ({}, {n})", s as i64);
        }
        assert_eq!(
            time(UNIX_EPOCH - Duration::new(1, 250_000_000)),
            ((-2i64) as u64, 750_000_000)
        );
    }
}
