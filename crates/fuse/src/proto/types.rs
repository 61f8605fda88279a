//! The value types requests and replies carry: node ids, handles, flag
//! sets, attributes and errnos, named as the kernel's fuse.h names them.
//!
//! Ours, not the `fuser` crate's: the protocol layer around them is ours
//! (fuser cannot speak FUSE over io_uring), and these were all we took
//! from it. The flag values are the kernel's ABI (include/uapi/linux/
//! fuse.h), checked against libc where libc has them.

use std::time::SystemTime;

/// A node id: what the kernel calls an inode of ours by (FUSE_ROOT_ID
/// is 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct INodeNo(pub u64);

/// A file handle given at OPEN, OPENDIR or CREATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileHandle(pub u64);

/// The owner of POSIX locks, as the kernel names it to us.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockOwner(pub u64);

/// A node's generation: with its id, what names it for ever (file
/// handles built from it survive a remount).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Generation(pub u64);

/// The open(2) flags of a request (O_RDONLY, O_DIRECT, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFlags(pub i32);

/// An error answered to the kernel: a positive errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(i32);

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const ENXIO: Errno = Errno(libc::ENXIO);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const ENOTTY: Errno = Errno(libc::ENOTTY);
    pub const EROFS: Errno = Errno(libc::EROFS);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const ESTALE: Errno = Errno(libc::ESTALE);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const EOVERFLOW: Errno = Errno(libc::EOVERFLOW);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const ESRCH: Errno = Errno(libc::ESRCH);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const ENODEV: Errno = Errno(libc::ENODEV);

    /// The errno `code` (a value the kernel would refuse is made EIO when
    /// it is answered).
    pub fn from_i32(code: i32) -> Errno {
        Errno(code)
    }

    pub fn code(self) -> i32 {
        self.0
    }
}

/// A time SETATTR sets: a given one, or the server's now (FATTR_ATIME_NOW,
/// FATTR_MTIME_NOW).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeOrNow {
    SpecificTime(SystemTime),
    Now,
}

/// The type of a node, as its mode's S_IFMT bits say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    NamedPipe,
    CharDevice,
    BlockDevice,
    Directory,
    RegularFile,
    Symlink,
    Socket,
}

impl FileType {
    /// The type a mode's S_IFMT bits say (a regular file when they name
    /// none).
    pub fn from_mode(mode: u32) -> FileType {
        match mode & libc::S_IFMT {
            libc::S_IFDIR => FileType::Directory,
            libc::S_IFLNK => FileType::Symlink,
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFBLK => FileType::BlockDevice,
            libc::S_IFIFO => FileType::NamedPipe,
            libc::S_IFSOCK => FileType::Socket,
            _ => FileType::RegularFile,
        }
    }

    /// The type of a file the standard library describes.
    pub fn from_std(t: std::fs::FileType) -> Option<FileType> {
        use std::os::unix::fs::FileTypeExt;
        Some(if t.is_file() {
            FileType::RegularFile
        } else if t.is_dir() {
            FileType::Directory
        } else if t.is_symlink() {
            FileType::Symlink
        } else if t.is_char_device() {
            FileType::CharDevice
        } else if t.is_block_device() {
            FileType::BlockDevice
        } else if t.is_fifo() {
            FileType::NamedPipe
        } else if t.is_socket() {
            FileType::Socket
        } else {
            return None;
        })
    }

    /// The S_IFMT bits of this type.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::NamedPipe => libc::S_IFIFO,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::Directory => libc::S_IFDIR,
            FileType::RegularFile => libc::S_IFREG,
            FileType::Symlink => libc::S_IFLNK,
            FileType::Socket => libc::S_IFSOCK,
        }
    }
}

/// A node's attributes, as an ATTR or ENTRY reply gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileAttr {
    pub ino: INodeNo,
    pub size: u64,
    /// 512-byte blocks.
    pub blocks: u64,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    pub crtime: SystemTime,
    pub kind: FileType,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
    pub flags: u32,
}

/// A flag set: the bits as the wire has them, with the named ones as
/// constants.
macro_rules! flag_set {
    ($(#[$m:meta])* $name:ident: $t:ty { $($(#[$fm:meta])* $flag:ident = $v:expr;)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name($t);

        #[allow(dead_code)]
        impl $name {
            $($(#[$fm])* pub const $flag: $name = $name($v);)*

            pub const fn empty() -> $name {
                $name(0)
            }
            /// All bits as given, named or not.
            pub const fn from_bits_retain(bits: $t) -> $name {
                $name(bits)
            }
            pub const fn bits(self) -> $t {
                self.0
            }
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }
            pub const fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }
            pub const fn intersects(self, other: $name) -> bool {
                self.0 & other.0 != 0
            }
            pub fn insert(&mut self, other: $name) {
                self.0 |= other.0;
            }
            pub fn remove(&mut self, other: $name) {
                self.0 &= !other.0;
            }
        }

        impl std::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, o: $name) -> $name {
                $name(self.0 | o.0)
            }
        }
        impl std::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, o: $name) {
                self.0 |= o.0;
            }
        }
        impl std::ops::BitAnd for $name {
            type Output = $name;
            fn bitand(self, o: $name) -> $name {
                $name(self.0 & o.0)
            }
        }
        /// The bits of the left set that the right one lacks.
        impl std::ops::Sub for $name {
            type Output = $name;
            fn sub(self, o: $name) -> $name {
                $name(self.0 & !o.0)
            }
        }
        impl std::ops::Not for $name {
            type Output = $name;
            fn not(self) -> $name {
                $name(!self.0)
            }
        }
    };
}

flag_set! {
    /// INIT's flags: what the kernel offers and what we ask for
    /// (flags2 in the high 32 bits).
    InitFlags: u64 {
        FUSE_ASYNC_READ = 1 << 0;
        FUSE_POSIX_LOCKS = 1 << 1;
        FUSE_FILE_OPS = 1 << 2;
        FUSE_ATOMIC_O_TRUNC = 1 << 3;
        FUSE_EXPORT_SUPPORT = 1 << 4;
        FUSE_BIG_WRITES = 1 << 5;
        FUSE_DONT_MASK = 1 << 6;
        FUSE_SPLICE_WRITE = 1 << 7;
        FUSE_SPLICE_MOVE = 1 << 8;
        FUSE_SPLICE_READ = 1 << 9;
        FUSE_FLOCK_LOCKS = 1 << 10;
        FUSE_HAS_IOCTL_DIR = 1 << 11;
        FUSE_AUTO_INVAL_DATA = 1 << 12;
        FUSE_DO_READDIRPLUS = 1 << 13;
        FUSE_READDIRPLUS_AUTO = 1 << 14;
        FUSE_ASYNC_DIO = 1 << 15;
        FUSE_WRITEBACK_CACHE = 1 << 16;
        FUSE_NO_OPEN_SUPPORT = 1 << 17;
        FUSE_PARALLEL_DIROPS = 1 << 18;
        FUSE_HANDLE_KILLPRIV = 1 << 19;
        FUSE_POSIX_ACL = 1 << 20;
        FUSE_ABORT_ERROR = 1 << 21;
        FUSE_MAX_PAGES = 1 << 22;
        FUSE_CACHE_SYMLINKS = 1 << 23;
        FUSE_NO_OPENDIR_SUPPORT = 1 << 24;
        FUSE_EXPLICIT_INVAL_DATA = 1 << 25;
        FUSE_MAP_ALIGNMENT = 1 << 26;
        FUSE_SUBMOUNTS = 1 << 27;
        FUSE_HANDLE_KILLPRIV_V2 = 1 << 28;
        FUSE_SETXATTR_EXT = 1 << 29;
        FUSE_INIT_EXT = 1 << 30;
        FUSE_INIT_RESERVED = 1 << 31;
        FUSE_SECURITY_CTX = 1 << 32;
        FUSE_HAS_INODE_DAX = 1 << 33;
        FUSE_CREATE_SUPP_GROUP = 1 << 34;
        FUSE_HAS_EXPIRE_ONLY = 1 << 35;
        FUSE_DIRECT_IO_ALLOW_MMAP = 1 << 36;
        FUSE_PASSTHROUGH = 1 << 37;
        FUSE_NO_EXPORT_SUPPORT = 1 << 38;
        FUSE_HAS_RESEND = 1 << 39;
        FUSE_ALLOW_IDMAP = 1 << 40;
        FUSE_OVER_IO_URING = 1 << 41;
        FUSE_REQUEST_TIMEOUT = 1 << 42;
    }
}

flag_set! {
    /// What an OPEN, OPENDIR or CREATE reply asks of the kernel.
    FopenFlags: u32 {
        FOPEN_DIRECT_IO = 1 << 0;
        FOPEN_KEEP_CACHE = 1 << 1;
        FOPEN_NONSEEKABLE = 1 << 2;
        FOPEN_CACHE_DIR = 1 << 3;
        FOPEN_STREAM = 1 << 4;
        FOPEN_NOFLUSH = 1 << 5;
        FOPEN_PARALLEL_DIRECT_WRITES = 1 << 6;
        FOPEN_PASSTHROUGH = 1 << 7;
    }
}

flag_set! {
    /// access(2)'s mask.
    AccessFlags: i32 {
        F_OK = libc::F_OK;
        R_OK = libc::R_OK;
        W_OK = libc::W_OK;
        X_OK = libc::X_OK;
    }
}

flag_set! {
    /// renameat2(2)'s flags.
    RenameFlags: u32 {
        RENAME_NOREPLACE = libc::RENAME_NOREPLACE;
        RENAME_EXCHANGE = libc::RENAME_EXCHANGE;
        RENAME_WHITEOUT = libc::RENAME_WHITEOUT;
    }
}

flag_set! {
    /// A WRITE's write_flags.
    WriteFlags: u32 {
        /// Written back from the page cache, not by the caller.
        FUSE_WRITE_CACHE = 1 << 0;
        FUSE_WRITE_LOCKOWNER = 1 << 1;
        FUSE_WRITE_KILL_SUIDGID = 1 << 2;
    }
}

flag_set! {
    /// An IOCTL's flags.
    IoctlFlags: u32 {
        FUSE_IOCTL_COMPAT = 1 << 0;
        FUSE_IOCTL_UNRESTRICTED = 1 << 1;
        FUSE_IOCTL_RETRY = 1 << 2;
        FUSE_IOCTL_32BIT = 1 << 3;
        FUSE_IOCTL_DIR = 1 << 4;
        FUSE_IOCTL_COMPAT_X32 = 1 << 5;
    }
}

flag_set! {
    /// copy_file_range(2)'s flags (none are defined yet).
    CopyFileRangeFlags: u64 {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_sets_combine_as_bits() {
        let f = InitFlags::FUSE_ASYNC_READ | InitFlags::FUSE_OVER_IO_URING;
        assert_eq!(f.bits(), 1 | 1 << 41);
        assert!(f.contains(InitFlags::FUSE_OVER_IO_URING));
        assert!(!f.contains(InitFlags::FUSE_ASYNC_READ | InitFlags::FUSE_MAX_PAGES));
        assert_eq!((f & InitFlags::FUSE_ASYNC_READ).bits(), 1);
        assert!(AccessFlags::from_bits_retain(libc::W_OK | libc::R_OK).contains(AccessFlags::W_OK));
    }
}
