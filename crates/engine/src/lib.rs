//! The ubtrfs engine: devices and chunk mapping, the block cache, B-tree
//! search and iteration, and the filesystem view (subvolumes, inodes,
//! directories, file extents). Layers depend downward only:
//!
//! `device` → `volumes` → `disk_io` (block cache, verified reads) → `ctree`
//! (search, iteration) → `fs` (subvolumes, inodes, dirs) → `file` (extent
//! maps, data, SEEK_DATA/SEEK_HOLE) → `extract`, `scrub`.

pub mod cache;
pub mod csum;
pub mod ctree;
pub mod device;
pub mod disk_io;
pub mod error;
pub mod extract;
pub mod file;
pub mod fs;
pub mod raid56;
pub mod reada;
pub mod scrub;
pub mod send;
pub mod volumes;
pub mod walk;

pub use error::{Error, Result};
pub use file::{FileHandle, MapRange, RangeKind};
pub use fs::{DirEntryInfo, Filesystem, InodeId, OpenOptions, Stat, Subvolume};
