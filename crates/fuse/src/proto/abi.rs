//! The FUSE kernel ABI (include/uapi/linux/fuse.h, protocol 7.42): opcodes,
//! flags and the argument and reply structs, as `#[repr(C)]` plain data
//! read from and written as bytes. Native endian, as the kernel sends them.

use std::mem::size_of;

/// The protocol we speak: 7.42 is the first with FUSE_OVER_IO_URING.
pub const KERNEL_VERSION: u32 = 7;
pub const KERNEL_MINOR_VERSION: u32 = 42;

// Opcodes.
pub const FUSE_LOOKUP: u32 = 1;
pub const FUSE_FORGET: u32 = 2;
pub const FUSE_GETATTR: u32 = 3;
pub const FUSE_SETATTR: u32 = 4;
pub const FUSE_READLINK: u32 = 5;
pub const FUSE_SYMLINK: u32 = 6;
pub const FUSE_MKNOD: u32 = 8;
pub const FUSE_MKDIR: u32 = 9;
pub const FUSE_UNLINK: u32 = 10;
pub const FUSE_RMDIR: u32 = 11;
pub const FUSE_RENAME: u32 = 12;
pub const FUSE_LINK: u32 = 13;
pub const FUSE_OPEN: u32 = 14;
pub const FUSE_READ: u32 = 15;
pub const FUSE_WRITE: u32 = 16;
pub const FUSE_STATFS: u32 = 17;
pub const FUSE_RELEASE: u32 = 18;
pub const FUSE_FSYNC: u32 = 20;
pub const FUSE_SETXATTR: u32 = 21;
pub const FUSE_GETXATTR: u32 = 22;
pub const FUSE_LISTXATTR: u32 = 23;
pub const FUSE_REMOVEXATTR: u32 = 24;
pub const FUSE_FLUSH: u32 = 25;
pub const FUSE_INIT: u32 = 26;
pub const FUSE_OPENDIR: u32 = 27;
pub const FUSE_READDIR: u32 = 28;
pub const FUSE_RELEASEDIR: u32 = 29;
pub const FUSE_FSYNCDIR: u32 = 30;
pub const FUSE_ACCESS: u32 = 34;
pub const FUSE_CREATE: u32 = 35;
pub const FUSE_INTERRUPT: u32 = 36;
pub const FUSE_BMAP: u32 = 37;
pub const FUSE_DESTROY: u32 = 38;
pub const FUSE_IOCTL: u32 = 39;
pub const FUSE_BATCH_FORGET: u32 = 42;
pub const FUSE_FALLOCATE: u32 = 43;
pub const FUSE_READDIRPLUS: u32 = 44;
pub const FUSE_RENAME2: u32 = 45;
pub const FUSE_LSEEK: u32 = 46;
pub const FUSE_COPY_FILE_RANGE: u32 = 47;
/// Protocol 7.34: syncfs(2); the kernel sends it to fuseblk (and
/// virtio-fs) servers only.
pub const FUSE_SYNCFS: u32 = 50;
/// Protocol 7.37: open(O_TMPFILE), a CREATE without a name.
pub const FUSE_TMPFILE: u32 = 51;
/// Protocol 7.39: attributes with the birth time.
pub const FUSE_STATX: u32 = 52;
/// Protocol 7.45 (Linux 6.18): copy_file_range with a 64-bit count.
pub const FUSE_COPY_FILE_RANGE_64: u32 = 53;

// Notification codes (the `error` field of an unsolicited message).
pub const FUSE_NOTIFY_INVAL_INODE: i32 = 2;
pub const FUSE_NOTIFY_INVAL_ENTRY: i32 = 3;
pub const FUSE_NOTIFY_STORE: i32 = 4;

// INIT flags (flags | flags2 << 32).
pub const FUSE_SETXATTR_EXT: u64 = 1 << 29;
pub const FUSE_INIT_EXT: u64 = 1 << 30;
/// Idmapped mounts: creating requests carry the caller's ids mapped by
/// the mount's idmap, every other request FUSE_INVALID_UIDGID.
pub const FUSE_ALLOW_IDMAP: u64 = 1 << 40;
pub const FUSE_OVER_IO_URING: u64 = 1 << 41;

/// SETXATTR's fixed argument without FUSE_SETXATTR_EXT.
pub const FUSE_COMPAT_SETXATTR_IN_SIZE: usize = 8;
/// setxattr_flags: the caller of a set of system.posix_acl_access is
/// neither in the file's group nor CAP_FSETID, so S_ISGID goes.
pub const FUSE_SETXATTR_ACL_KILL_SGID: u32 = 1 << 0;

// FOPEN_* reply flags.
pub const FOPEN_DIRECT_IO: u32 = 1 << 0;

// SETATTR valid bits.
pub const FATTR_MODE: u32 = 1 << 0;
pub const FATTR_UID: u32 = 1 << 1;
pub const FATTR_GID: u32 = 1 << 2;
pub const FATTR_SIZE: u32 = 1 << 3;
pub const FATTR_ATIME: u32 = 1 << 4;
pub const FATTR_MTIME: u32 = 1 << 5;
pub const FATTR_FH: u32 = 1 << 6;
pub const FATTR_ATIME_NOW: u32 = 1 << 7;
pub const FATTR_MTIME_NOW: u32 = 1 << 8;
pub const FATTR_LOCKOWNER: u32 = 1 << 9;
pub const FATTR_CTIME: u32 = 1 << 10;
/// Drop the set-ID bits (FUSE_HANDLE_KILLPRIV_V2: a chown, or a truncate
/// by a caller without CAP_FSETID).
pub const FATTR_KILL_SUIDGID: u32 = 1 << 11;

pub const FUSE_GETATTR_FH: u32 = 1 << 0;
pub const FUSE_READ_LOCKOWNER: u32 = 1 << 1;
/// A delayed write from the page cache (the file handle guessed).
pub const FUSE_WRITE_CACHE: u32 = 1 << 0;
pub const FUSE_WRITE_LOCKOWNER: u32 = 1 << 1;
/// The writer lacks CAP_FSETID: set-ID bits go (the kernel sends it on
/// direct writes whatever was negotiated).
pub const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;
pub const FUSE_RELEASE_FLUSH: u32 = 1 << 0;
pub const FUSE_RELEASE_FLOCK_UNLOCK: u32 = 1 << 1;
pub const FUSE_FSYNC_FDATASYNC: u32 = 1 << 0;

// The io_uring transport.
pub const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
pub const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;
pub const FUSE_URING_IN_OUT_HEADER_SZ: usize = 128;
pub const FUSE_URING_OP_IN_OUT_SZ: usize = 128;

/// Plain old data: any byte pattern is a valid value and there is no
/// padding the compiler may leave uninitialised, so a struct can be read
/// from and written as raw bytes.
///
/// # Safety
/// Implement only for `#[repr(C)]` structs of integers with no implicit
/// padding.
pub unsafe trait Pod: Copy + Default {}

/// Reads a `T` from the front of `b`, or `None` when `b` is too short: a
/// short message must not turn into an out-of-bounds read or a panic.
pub fn read<T: Pod>(b: &[u8]) -> Option<T> {
    if b.len() < size_of::<T>() {
        return None;
    }
    // SAFETY: the length is checked above and T is Pod (any bytes are a
    // valid T); read_unaligned because message buffers carry no alignment
    // promise for T.
    Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}

/// The bytes of a Pod value, to copy into a reply.
pub fn bytes<T: Pod>(t: &T) -> &[u8] {
    // SAFETY: T is Pod, so all size_of::<T>() bytes are initialised.
    unsafe { std::slice::from_raw_parts((t as *const T).cast::<u8>(), size_of::<T>()) }
}

macro_rules! pod {
    ($($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident: $t:ty,)* })*) => {
        $(
            $(#[$m])*
            #[repr(C)]
            #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
            pub struct $name { $($(#[$fm])* pub $f: $t,)* }
            // SAFETY: a #[repr(C)] struct of integers (and arrays and
            // structs of them); the size assertions below show it has no
            // implicit padding.
            unsafe impl Pod for $name {}
        )*
    };
}

pod! {
    pub struct InHeader {
        pub len: u32,
        pub opcode: u32,
        pub unique: u64,
        pub nodeid: u64,
        pub uid: u32,
        pub gid: u32,
        pub pid: u32,
        pub total_extlen: u16,
        pub padding: u16,
    }
    pub struct OutHeader {
        pub len: u32,
        pub error: i32,
        pub unique: u64,
    }
    /// fuse_init_in as of 7.36 (64 bytes); older kernels send 16.
    pub struct InitIn {
        pub major: u32,
        pub minor: u32,
        pub max_readahead: u32,
        pub flags: u32,
        pub flags2: u32,
        pub unused: [u32; 11],
    }
    pub struct InitOut {
        pub major: u32,
        pub minor: u32,
        pub max_readahead: u32,
        pub flags: u32,
        pub max_background: u16,
        pub congestion_threshold: u16,
        pub max_write: u32,
        pub time_gran: u32,
        pub max_pages: u16,
        pub map_alignment: u16,
        pub flags2: u32,
        pub max_stack_depth: u32,
        pub request_timeout: u16,
        pub unused: [u16; 11],
    }
    pub struct Attr {
        pub ino: u64,
        pub size: u64,
        pub blocks: u64,
        pub atime: u64,
        pub mtime: u64,
        pub ctime: u64,
        pub atimensec: u32,
        pub mtimensec: u32,
        pub ctimensec: u32,
        pub mode: u32,
        pub nlink: u32,
        pub uid: u32,
        pub gid: u32,
        pub rdev: u32,
        pub blksize: u32,
        pub flags: u32,
    }
    pub struct EntryOut {
        pub nodeid: u64,
        pub generation: u64,
        pub entry_valid: u64,
        pub attr_valid: u64,
        pub entry_valid_nsec: u32,
        pub attr_valid_nsec: u32,
        pub attr: Attr,
    }
    pub struct AttrOut {
        pub attr_valid: u64,
        pub attr_valid_nsec: u32,
        pub dummy: u32,
        pub attr: Attr,
    }
    pub struct GetattrIn {
        pub getattr_flags: u32,
        pub dummy: u32,
        pub fh: u64,
    }
    pub struct SetattrIn {
        pub valid: u32,
        pub padding: u32,
        pub fh: u64,
        pub size: u64,
        pub lock_owner: u64,
        pub atime: u64,
        pub mtime: u64,
        pub ctime: u64,
        pub atimensec: u32,
        pub mtimensec: u32,
        pub ctimensec: u32,
        pub mode: u32,
        pub unused4: u32,
        pub uid: u32,
        pub gid: u32,
        pub unused5: u32,
    }
    pub struct MknodIn {
        pub mode: u32,
        pub rdev: u32,
        pub umask: u32,
        pub padding: u32,
    }
    pub struct MkdirIn {
        pub mode: u32,
        pub umask: u32,
    }
    pub struct Rename2In {
        pub newdir: u64,
        pub flags: u32,
        pub padding: u32,
    }
    /// fuse_rename_in and fuse_link_in: one node id.
    pub struct NodeIn {
        pub nodeid: u64,
    }
    pub struct OpenIn {
        pub flags: u32,
        pub open_flags: u32,
    }
    pub struct OpenOut {
        pub fh: u64,
        pub open_flags: u32,
        pub backing_id: i32,
    }
    pub struct CreateIn {
        pub flags: u32,
        pub mode: u32,
        pub umask: u32,
        pub open_flags: u32,
    }
    /// fuse_read_in, also the argument of READDIR and READDIRPLUS.
    pub struct ReadIn {
        pub fh: u64,
        pub offset: u64,
        pub size: u32,
        pub read_flags: u32,
        pub lock_owner: u64,
        pub flags: u32,
        pub padding: u32,
    }
    pub struct WriteIn {
        pub fh: u64,
        pub offset: u64,
        pub size: u32,
        pub write_flags: u32,
        pub lock_owner: u64,
        pub flags: u32,
        pub padding: u32,
    }
    pub struct WriteOut {
        pub size: u32,
        pub padding: u32,
    }
    pub struct ReleaseIn {
        pub fh: u64,
        pub flags: u32,
        pub release_flags: u32,
        pub lock_owner: u64,
    }
    pub struct FlushIn {
        pub fh: u64,
        pub unused: u32,
        pub padding: u32,
        pub lock_owner: u64,
    }
    pub struct FsyncIn {
        pub fh: u64,
        pub fsync_flags: u32,
        pub padding: u32,
    }
    /// fuse_setxattr_in; without FUSE_SETXATTR_EXT the kernel sends only
    /// its first 8 bytes (FUSE_COMPAT_SETXATTR_IN_SIZE).
    pub struct SetxattrIn {
        pub size: u32,
        pub flags: u32,
        pub setxattr_flags: u32,
        pub padding: u32,
    }
    /// fuse_getxattr_in (GETXATTR, LISTXATTR) and fuse_getxattr_out.
    pub struct XattrSize {
        pub size: u32,
        pub padding: u32,
    }
    pub struct AccessIn {
        pub mask: u32,
        pub padding: u32,
    }
    /// fuse_forget_in (also fuse_interrupt_in's size).
    pub struct ForgetIn {
        pub nlookup: u64,
    }
    pub struct BatchForgetIn {
        pub count: u32,
        pub dummy: u32,
    }
    pub struct IoctlIn {
        pub fh: u64,
        pub flags: u32,
        pub cmd: u32,
        pub arg: u64,
        pub in_size: u32,
        pub out_size: u32,
    }
    pub struct IoctlOut {
        pub result: i32,
        pub flags: u32,
        pub in_iovs: u32,
        pub out_iovs: u32,
    }
    pub struct FallocateIn {
        pub fh: u64,
        pub offset: u64,
        pub length: u64,
        pub mode: u32,
        pub padding: u32,
    }
    pub struct LseekIn {
        pub fh: u64,
        pub offset: u64,
        pub whence: u32,
        pub padding: u32,
    }
    pub struct StatxIn {
        pub getattr_flags: u32,
        pub reserved: u32,
        pub fh: u64,
        pub sx_flags: u32,
        pub sx_mask: u32,
    }
    /// fuse_sx_time: seconds (signed, as two's complement) and
    /// nanoseconds.
    pub struct SxTime {
        pub tv_sec: u64,
        pub tv_nsec: u32,
        pub reserved: i32,
    }
    /// fuse_statx.
    pub struct Statx {
        pub mask: u32,
        pub blksize: u32,
        pub attributes: u64,
        pub nlink: u32,
        pub uid: u32,
        pub gid: u32,
        pub mode: u16,
        pub spare0: u16,
        pub ino: u64,
        pub size: u64,
        pub blocks: u64,
        pub attributes_mask: u64,
        pub atime: SxTime,
        pub btime: SxTime,
        pub ctime: SxTime,
        pub mtime: SxTime,
        pub rdev_major: u32,
        pub rdev_minor: u32,
        pub dev_major: u32,
        pub dev_minor: u32,
        pub spare2: [u64; 14],
    }
    pub struct StatxOut {
        pub attr_valid: u64,
        pub attr_valid_nsec: u32,
        pub flags: u32,
        pub spare: [u64; 2],
        pub stat: Statx,
    }
    pub struct LseekOut {
        pub offset: u64,
    }
    pub struct CopyFileRangeIn {
        pub fh_in: u64,
        pub off_in: u64,
        pub nodeid_out: u64,
        pub fh_out: u64,
        pub off_out: u64,
        pub len: u64,
        pub flags: u64,
    }
    /// FUSE_COPY_FILE_RANGE_64's answer (FUSE_COPY_FILE_RANGE's is a
    /// WriteOut).
    pub struct CopyFileRangeOut {
        pub bytes_copied: u64,
    }
    pub struct Kstatfs {
        pub blocks: u64,
        pub bfree: u64,
        pub bavail: u64,
        pub files: u64,
        pub ffree: u64,
        pub bsize: u32,
        pub namelen: u32,
        pub frsize: u32,
        pub padding: u32,
        pub spare: [u32; 6],
    }
    /// The fixed part of a READDIR entry; the name follows, padded to 8.
    pub struct Dirent {
        pub ino: u64,
        pub off: u64,
        pub namelen: u32,
        pub typ: u32,
    }
    /// fuse_notify_inval_inode_out: a negative `off` drops only the
    /// cached attributes.
    pub struct NotifyInvalInodeOut {
        pub ino: u64,
        pub off: i64,
        pub len: i64,
    }
    /// fuse_notify_inval_entry_out; the name and a NUL follow.
    pub struct NotifyInvalEntryOut {
        pub parent: u64,
        pub namelen: u32,
        pub flags: u32,
    }
    pub struct NotifyStoreOut {
        pub nodeid: u64,
        pub offset: u64,
        pub size: u32,
        pub padding: u32,
    }
    /// fuse_uring_ent_in_out: the trailer of a ring entry's header buffer.
    pub struct UringEntInOut {
        pub flags: u64,
        /// The request's `unique`; echoed back in `UringCmdReq::commit_id`.
        pub commit_id: u64,
        /// Bytes valid in the payload buffer: the request's on fetch, the
        /// reply's on commit.
        pub payload_sz: u32,
        pub padding: u32,
        pub reserved: u64,
    }
    /// fuse_uring_cmd_req: the front of the SQE128's 80-byte command area.
    pub struct UringCmdReq {
        pub flags: u64,
        /// 0 for REGISTER; the request's unique for COMMIT_AND_FETCH.
        pub commit_id: u64,
        pub qid: u16,
        pub padding: [u8; 6],
    }
}

/// fuse_uring_req_header: `iov[0]` of a REGISTER. `in_out` holds the
/// fuse_in_header on fetch and our fuse_out_header on commit; `op_in` the
/// opcode's fixed argument struct (the kernel's `in_args[0]`); anything else
/// (names, write data) lands in the separate payload buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct UringReqHeader {
    pub in_out: [u8; FUSE_URING_IN_OUT_HEADER_SZ],
    pub op_in: [u8; FUSE_URING_OP_IN_OUT_SZ],
    pub ring_ent_in_out: UringEntInOut,
}

impl Default for UringReqHeader {
    fn default() -> Self {
        UringReqHeader {
            in_out: [0; FUSE_URING_IN_OUT_HEADER_SZ],
            op_in: [0; FUSE_URING_OP_IN_OUT_SZ],
            ring_ent_in_out: UringEntInOut::default(),
        }
    }
}

// SAFETY: #[repr(C)], byte arrays and a Pod struct, no implicit padding
// (size asserted below).
unsafe impl Pod for UringReqHeader {}

// The sizes the kernel expects; a mistake here would garble every message.
const _: () = {
    assert!(size_of::<InHeader>() == 40);
    assert!(size_of::<OutHeader>() == 16);
    assert!(size_of::<InitIn>() == 64);
    assert!(size_of::<InitOut>() == 64);
    assert!(size_of::<Attr>() == 88);
    assert!(size_of::<EntryOut>() == 128);
    assert!(size_of::<AttrOut>() == 104);
    assert!(size_of::<GetattrIn>() == 16);
    assert!(size_of::<SetattrIn>() == 88);
    assert!(size_of::<MknodIn>() == 16);
    assert!(size_of::<MkdirIn>() == 8);
    assert!(size_of::<Rename2In>() == 16);
    assert!(size_of::<NodeIn>() == 8);
    assert!(size_of::<OpenIn>() == 8);
    assert!(size_of::<OpenOut>() == 16);
    assert!(size_of::<CreateIn>() == 16);
    assert!(size_of::<ReadIn>() == 40);
    assert!(size_of::<WriteIn>() == 40);
    assert!(size_of::<WriteOut>() == 8);
    assert!(size_of::<ReleaseIn>() == 24);
    assert!(size_of::<FlushIn>() == 24);
    assert!(size_of::<FsyncIn>() == 16);
    assert!(size_of::<SetxattrIn>() == 16);
    assert!(size_of::<XattrSize>() == 8);
    assert!(size_of::<AccessIn>() == 8);
    assert!(size_of::<ForgetIn>() == 8);
    assert!(size_of::<BatchForgetIn>() == 8);
    assert!(size_of::<IoctlIn>() == 32);
    assert!(size_of::<IoctlOut>() == 16);
    assert!(size_of::<FallocateIn>() == 32);
    assert!(size_of::<LseekIn>() == 24);
    assert!(size_of::<LseekOut>() == 8);
    assert!(size_of::<StatxIn>() == 24);
    assert!(size_of::<SxTime>() == 16);
    assert!(size_of::<Statx>() == 256);
    assert!(size_of::<StatxOut>() == 288);
    assert!(size_of::<CopyFileRangeIn>() == 56);
    assert!(size_of::<CopyFileRangeOut>() == 8);
    assert!(size_of::<Kstatfs>() == 80);
    assert!(size_of::<Dirent>() == 24);
    assert!(size_of::<NotifyStoreOut>() == 24);
    assert!(size_of::<NotifyInvalInodeOut>() == 24);
    assert!(size_of::<UringEntInOut>() == 32);
    assert!(size_of::<UringReqHeader>() == 288);
    assert!(size_of::<UringCmdReq>() == 24);
};

/// The size of the opcode's fixed argument struct, the kernel's
/// `in_args[0]`, which precedes any variable data in a /dev/fuse request
/// and arrives separately (in `op_in`) over io_uring. Splitting a /dev/fuse
/// body here gives the dispatcher the same (arg, data) pair from either
/// transport. 0 where the kernel sends a zero-size `in_args[0]`
/// (fuse_set_zero_arg0: LOOKUP, SYMLINK, UNLINK, RMDIR, REMOVEXATTR) or no
/// argument at all (READLINK, STATFS, DESTROY).
pub fn op_arg_size(opcode: u32) -> usize {
    match opcode {
        FUSE_GETATTR => size_of::<GetattrIn>(),
        FUSE_STATX => size_of::<StatxIn>(),
        FUSE_SETATTR => size_of::<SetattrIn>(),
        FUSE_MKNOD => size_of::<MknodIn>(),
        FUSE_MKDIR => size_of::<MkdirIn>(),
        FUSE_RENAME | FUSE_LINK => size_of::<NodeIn>(),
        FUSE_RENAME2 => size_of::<Rename2In>(),
        FUSE_OPEN | FUSE_OPENDIR => size_of::<OpenIn>(),
        FUSE_CREATE | FUSE_TMPFILE => size_of::<CreateIn>(),
        FUSE_READ | FUSE_READDIR | FUSE_READDIRPLUS => size_of::<ReadIn>(),
        FUSE_WRITE => size_of::<WriteIn>(),
        FUSE_RELEASE | FUSE_RELEASEDIR => size_of::<ReleaseIn>(),
        FUSE_FLUSH => size_of::<FlushIn>(),
        FUSE_FSYNC | FUSE_FSYNCDIR => size_of::<FsyncIn>(),
        FUSE_SETXATTR => size_of::<SetxattrIn>(),
        FUSE_GETXATTR | FUSE_LISTXATTR => size_of::<XattrSize>(),
        FUSE_ACCESS => size_of::<AccessIn>(),
        FUSE_FORGET | FUSE_INTERRUPT => size_of::<ForgetIn>(),
        FUSE_BATCH_FORGET => size_of::<BatchForgetIn>(),
        FUSE_IOCTL => size_of::<IoctlIn>(),
        FUSE_FALLOCATE => size_of::<FallocateIn>(),
        FUSE_LSEEK => size_of::<LseekIn>(),
        FUSE_COPY_FILE_RANGE | FUSE_COPY_FILE_RANGE_64 => size_of::<CopyFileRangeIn>(),
        FUSE_BMAP => 16,
        // struct fuse_syncfs_in: one padding u64.
        FUSE_SYNCFS => 8,
        FUSE_INIT => size_of::<InitIn>(),
        _ => 0,
    }
}
