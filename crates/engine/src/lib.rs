//! The ubtrfs engine, in layers that depend downward only (named as the
//! kernel's fs/btrfs names them):
//!
//! * [`io`]: block devices behind a trait (files, memory), the devices of a
//!   filesystem, chunk mapping for every profile, RAID5/6 parity;
//! * [`tree::block`]: verified tree blocks;
//! * [`cache`]: the shared block cache and readahead into it;
//! * [`disk_io`]: opening a filesystem, verified reads with mirror and
//!   parity fallback;
//! * [`tree::ctree`]: B-tree search and iteration;
//! * [`data`]: the one validated EXTENT_DATA decoder, data checksums,
//!   and reads of extent data (checksummed, decompressed, inline);
//! * [`fs`]: subvolumes, inodes, directories, xattrs (by inode, or by
//!   tree and inode number for send), and file data ([`fs::file`]: extent
//!   maps, reads, SEEK_DATA/SEEK_HOLE);
//! * [`send`]: send streams, full and incremental;
//! * [`tools`]: walk, extract, scrub.
//!
//! The write side lands beside these as it is built: `tx` (transactions
//! and commit), `alloc` (extent allocation, block groups, free-space tree),
//! a modifying B-tree beside the cursor in `tree`, then `mkfs` and
//! `receive` on top, [`vfs`] (the read-write mount's operations, with
//! delayed allocation), and [`tree_log`] (log tree replay, for writers and,
//! onto in-memory overlays, for readers).

pub mod alloc;
pub mod cache;
pub mod data;
pub mod disk_io;
pub mod error;
pub mod fs;
pub mod inode;
pub mod io;
pub mod mkfs;
pub mod receive;
pub mod send;
pub mod subvol;
pub mod tools;
pub mod tree;
pub mod tree_log;
pub mod tx;
pub mod vfs;

pub use error::{Error, ErrorKind, Result, ResultExt};
pub use fs::file::{FileHandle, MapRange, RangeKind};
pub use fs::{DirEntryInfo, Filesystem, InodeId, OpenOptions, Stat, Subvolume};
