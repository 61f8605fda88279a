//! The FUSE wire protocol: the mount's own ABI definitions
//! (crates/fuse/src/proto/abi.rs, protocol 7.42), plus the few INIT and
//! open flags the floor sets by number.

pub use ubtrfs_fuse::proto::abi::*;

pub const FUSE_ASYNC_READ: u64 = 1 << 0;
pub const FUSE_BIG_WRITES: u64 = 1 << 5;
pub const FUSE_PARALLEL_DIROPS: u64 = 1 << 18;
pub const FUSE_MAX_PAGES: u64 = 1 << 22;
pub const FOPEN_KEEP_CACHE: u32 = 1 << 1;
