//! The ubtrfs engine, in layers that depend downward only (named as the
//! kernel's fs/btrfs names them), from the bottom:
//!
//! * [`io`]: block devices behind a trait (files, memory), claims on
//!   them, the devices of a filesystem, chunk mapping for every profile,
//!   RAID5/6 parity;
//! * [`tree`]: tree blocks: verified blocks, extent buffers, leaf layout;
//! * [`cache`]: the shared block cache and readahead into it;
//! * [`disk_io`]: opening a filesystem, verified reads with mirror and
//!   parity fallback;
//! * [`ctree`]: B-tree search and iteration;
//! * [`items`]: the item readers (inode items, back references, names,
//!   listings, xattrs), written once over where the trees come from: the
//!   committed roots ([`fs`]) or a running transaction's ([`tx`]);
//! * [`data`]: the one validated EXTENT_DATA decoder, data checksums,
//!   and reads of extent data (checksummed, decompressed, inline);
//! * [`fs`]: the committed view: subvolumes, inodes, directories, xattrs
//!   and file data ([`fs::file`]: extent maps, reads, SEEK_DATA/SEEK_HOLE);
//! * [`alloc`]: extent allocation and block groups;
//! * [`tx`]: transactions: copy-on-write B-tree changes, delayed refs,
//!   chunks, the free-space tree, commit;
//! * [`inode`]: items written through a transaction (inodes, names,
//!   xattrs, file extents, checksums, a new tree's root item);
//! * [`subvol`], [`mkfs`]: subvolumes and snapshots; new filesystems;
//! * [`send`], [`receive`]: send streams, full and incremental, and
//!   applying them;
//! * [`tree_log`]: log trees, written at fsync and replayed (by writers,
//!   and onto in-memory overlays by readers);
//! * [`rwfs`]: the read-write filesystem a mount serves ([`rwfs::RwFs`]:
//!   the top half of the kernel's inode.c and file.c), with delayed
//!   allocation;
//! * [`tools`]: walk, extract, scrub, check.

// The docs are written for those who work on the code and link private
// items: `cargo doc --document-private-items` renders them whole.
#![allow(rustdoc::private_intra_doc_links)]

pub mod alloc;
pub mod cache;
pub mod ctree;
pub mod data;
pub mod disk_io;
pub mod error;
pub mod fs;
pub mod inode;
pub mod io;
pub mod items;
pub mod mkfs;
pub mod receive;
pub mod rwfs;
pub mod send;
pub mod subvol;
pub mod tools;
pub mod tree;
pub mod tree_log;
pub mod tx;

pub use error::{Error, ErrorKind, Result, ResultExt};
pub use fs::file::{FileHandle, MapRange, RangeKind};
pub use fs::{DirEntryInfo, Filesystem, InodeId, OpenOptions, Stat, Subvolume};
