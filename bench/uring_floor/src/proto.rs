//! The slice of the FUSE wire protocol this server speaks, written from the
//! kernel's include/uapi/linux/fuse.h (protocol 7.42+; the system header on
//! this machine predates FUSE-over-io_uring, so the layouts are spelled out
//! here). Everything is little-endian, native layout, `#[repr(C)]`.

use std::mem::size_of;

/// Protocol major version; the kernel refuses any other.
pub const KERNEL_VERSION: u32 = 7;
/// The minor we speak. 7.42 added FUSE_OVER_IO_URING and the ring structs;
/// nothing later is used, so we answer min(kernel's minor, this).
pub const KERNEL_MINOR_VERSION: u32 = 42;

// Opcodes (enum fuse_opcode).
pub const FUSE_LOOKUP: u32 = 1;
pub const FUSE_FORGET: u32 = 2;
pub const FUSE_GETATTR: u32 = 3;
pub const FUSE_OPEN: u32 = 14;
pub const FUSE_READ: u32 = 15;
pub const FUSE_STATFS: u32 = 17;
pub const FUSE_RELEASE: u32 = 18;
pub const FUSE_FLUSH: u32 = 25;
pub const FUSE_INIT: u32 = 26;
pub const FUSE_OPENDIR: u32 = 27;
pub const FUSE_READDIR: u32 = 28;
pub const FUSE_RELEASEDIR: u32 = 29;
pub const FUSE_INTERRUPT: u32 = 36;
pub const FUSE_DESTROY: u32 = 38;
pub const FUSE_BATCH_FORGET: u32 = 42;
pub const FUSE_LSEEK: u32 = 46;

// INIT flags (the low 32 bits go in `flags`, the high ones in `flags2`).
pub const FUSE_ASYNC_READ: u64 = 1 << 0;
pub const FUSE_BIG_WRITES: u64 = 1 << 5;
pub const FUSE_PARALLEL_DIROPS: u64 = 1 << 18;
pub const FUSE_MAX_PAGES: u64 = 1 << 22;
/// Says `flags2` is meaningful, in both directions.
pub const FUSE_INIT_EXT: u64 = 1 << 30;
/// 7.42: the daemon will fetch requests with IORING_OP_URING_CMD. The kernel
/// offers it only while the fuse module parameter `enable_uring` is set.
pub const FUSE_OVER_IO_URING: u64 = 1 << 41;

/// fuse_open_out.open_flags: keep the page cache across opens, so that a
/// warm `cp` measures the lseek/read path and not a re-read of the file.
pub const FOPEN_KEEP_CACHE: u32 = 1 << 1;

// io_uring commands (enum fuse_uring_cmd), the `cmd_op` of the SQE.
pub const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
pub const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

/// Sizes of the two fixed areas of `fuse_uring_req_header`.
pub const FUSE_URING_IN_OUT_HEADER_SZ: usize = 128;
pub const FUSE_URING_OP_IN_OUT_SZ: usize = 128;

/// Plain old data: any byte pattern is a valid value and there is no padding
/// the compiler may leave uninitialised, so a struct can be read from and
/// written as raw bytes.
///
/// # Safety
/// Implement only for `#[repr(C)]` structs of integers with no implicit
/// padding.
pub unsafe trait Pod: Copy + Default {}

/// Reads a `T` from the front of `b`, or `None` when `b` is too short: the
/// kernel is trusted to be well formed, but a short message must not turn
/// into an out-of-bounds read or a panic.
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

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
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

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct OutHeader {
    pub len: u32,
    pub error: i32,
    pub unique: u64,
}

/// fuse_init_in as of 7.36+ (64 bytes). Older kernels send only the first
/// 16 bytes; `read` of the full struct then fails, so INIT is parsed from a
/// zero-padded copy.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct InitIn {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub flags2: u32,
    pub unused: [u32; 11],
}

/// fuse_init_out as of 7.36+ (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
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

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
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

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct EntryOut {
    pub nodeid: u64,
    pub generation: u64,
    pub entry_valid: u64,
    pub attr_valid: u64,
    pub entry_valid_nsec: u32,
    pub attr_valid_nsec: u32,
    pub attr: Attr,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct AttrOut {
    pub attr_valid: u64,
    pub attr_valid_nsec: u32,
    pub dummy: u32,
    pub attr: Attr,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct OpenOut {
    pub fh: u64,
    pub open_flags: u32,
    pub backing_id: i32,
}

/// fuse_read_in, also the argument of READDIR.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct ReadIn {
    pub fh: u64,
    pub offset: u64,
    pub size: u32,
    pub read_flags: u32,
    pub lock_owner: u64,
    pub flags: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct LseekIn {
    pub fh: u64,
    pub offset: u64,
    pub whence: u32,
    pub padding: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct LseekOut {
    pub offset: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
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

/// The fixed part of a directory entry in a READDIR reply; the name
/// follows, padded to 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct Dirent {
    pub ino: u64,
    pub off: u64,
    pub namelen: u32,
    pub typ: u32,
}

/// fuse_uring_ent_in_out: the trailer of a ring entry's header buffer.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct UringEntInOut {
    pub flags: u64,
    /// The request's `unique`; echoed back in `UringCmdReq::commit_id`.
    pub commit_id: u64,
    /// Bytes valid in the payload buffer: the request's on fetch, ours on
    /// commit.
    pub payload_sz: u32,
    pub padding: u32,
    pub reserved: u64,
}

/// fuse_uring_req_header: iov[0] of a REGISTER. `in_out` holds the
/// fuse_in_header on fetch and our fuse_out_header on commit; `op_in` holds
/// the opcode's fixed argument struct (in_args[0] in the kernel); anything
/// else (names, write data) lands in the separate payload buffer.
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

/// fuse_uring_cmd_req: the first bytes of the SQE128's 80-byte command
/// area; the rest must be zero.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct UringCmdReq {
    pub flags: u64,
    /// 0 for REGISTER; the request's unique for COMMIT_AND_FETCH.
    pub commit_id: u64,
    pub qid: u16,
    pub padding: [u8; 6],
}

// SAFETY: all of the above are #[repr(C)] structs of integers (and integer
// arrays) laid out without implicit padding, as in the uapi header.
unsafe impl Pod for InHeader {}
unsafe impl Pod for OutHeader {}
unsafe impl Pod for InitIn {}
unsafe impl Pod for InitOut {}
unsafe impl Pod for Attr {}
unsafe impl Pod for EntryOut {}
unsafe impl Pod for AttrOut {}
unsafe impl Pod for OpenOut {}
unsafe impl Pod for ReadIn {}
unsafe impl Pod for LseekIn {}
unsafe impl Pod for LseekOut {}
unsafe impl Pod for Kstatfs {}
unsafe impl Pod for Dirent {}
unsafe impl Pod for UringEntInOut {}
unsafe impl Pod for UringReqHeader {}
unsafe impl Pod for UringCmdReq {}

// The sizes the kernel expects; a mistake here would garble every message.
const _: () = {
    assert!(size_of::<InHeader>() == 40);
    assert!(size_of::<OutHeader>() == 16);
    assert!(size_of::<InitIn>() == 64);
    assert!(size_of::<InitOut>() == 64);
    assert!(size_of::<Attr>() == 88);
    assert!(size_of::<EntryOut>() == 128);
    assert!(size_of::<AttrOut>() == 104);
    assert!(size_of::<OpenOut>() == 16);
    assert!(size_of::<ReadIn>() == 40);
    assert!(size_of::<LseekIn>() == 24);
    assert!(size_of::<Kstatfs>() == 80);
    assert!(size_of::<Dirent>() == 24);
    assert!(size_of::<UringEntInOut>() == 32);
    assert!(size_of::<UringReqHeader>() == 288);
    assert!(size_of::<UringCmdReq>() == 24);
};

/// The size of the fixed argument struct that precedes any variable data in
/// a /dev/fuse request body (the kernel's in_args[0]). Over io_uring this
/// part arrives in `op_in` and the rest in the payload; over /dev/fuse both
/// are in one buffer, and this is where we split it so that the file system
/// code sees the same (arg, data) pair from either transport. 0 for opcodes
/// whose only argument is variable (LOOKUP's name) or absent.
pub fn op_arg_size(opcode: u32) -> usize {
    match opcode {
        FUSE_GETATTR => 16,                   // fuse_getattr_in
        FUSE_OPEN | FUSE_OPENDIR => 8,        // fuse_open_in
        FUSE_READ | FUSE_READDIR => 40,       // fuse_read_in
        FUSE_LSEEK => 24,                     // fuse_lseek_in
        FUSE_FLUSH => 24,                     // fuse_flush_in
        FUSE_RELEASE | FUSE_RELEASEDIR => 24, // fuse_release_in
        FUSE_FORGET | FUSE_INTERRUPT => 8,    // fuse_forget_in / fuse_interrupt_in
        FUSE_BATCH_FORGET => 8,               // fuse_batch_forget_in, then entries
        FUSE_INIT => 64,                      // fuse_init_in (may be shorter)
        _ => 0,
    }
}
