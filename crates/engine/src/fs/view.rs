//! What a mount reads, written once for both of its sources: the
//! committed trees ([`Filesystem`], the read-only mount) and the running
//! transaction with its dirty data (`rwfs::RwFs`, the read-write mount).
//! The kernel serves both from one set of inode operations; here the
//! FUSE front end answers lookup, getattr, readlink, listings, xattrs and
//! statfs through this trait, whichever source is behind it. The item
//! readers under it are shared as well ([`crate::items`]).

use super::seek::{cache_disabled, DataMap, SeekCache};
use super::{file, Filesystem, InodeId, Stat};
use crate::disk_io::FsInfo;
use crate::error::{Error, Result};
use crate::items::dir_item::{self, DirEnt};
use std::ops::ControlFlow;

/// statfs(2)'s answer, in sectors.
#[derive(Debug, Clone, Copy)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub bsize: u32,
}

/// Data ranges the committed filesystem maps for a file's first lseek:
/// a stretch costs one tree search and the leaves it spans, so the first
/// lseek of a large file waits for no walk of all its extents. Each
/// stretch after it is twice as long, up to 16 times this.
pub const STRETCH_MIN: u64 = 256;

/// What [`View::list`] calls on each entry: continue or break.
pub type ListVisitor<'a> = dyn FnMut(DirEnt) -> Result<ControlFlow<()>> + 'a;

/// The POSIX reads of a mounted filesystem.
pub trait View {
    /// The filesystem the trees belong to (sector size, recovery reports).
    fn info(&self) -> &FsInfo;
    /// stat(2) of `id`.
    fn stat(&self, id: InodeId) -> Result<Stat>;
    /// The inode `name` in directory `dir` names, if any.
    fn lookup(&self, dir: InodeId, name: &[u8]) -> Result<Option<InodeId>>;
    /// The directory `dir`'s ".." leads to.
    fn parent(&self, dir: InodeId) -> Result<InodeId>;
    /// The entries of `dir` after cookie `from`, until `f` breaks
    /// ([`dir_item::list`]).
    fn list(&self, dir: InodeId, from: u64, f: &mut ListVisitor<'_>) -> Result<()>;
    /// The cookie past which a listing of `dir` started now stops: names
    /// made during a listing are not listed (they would be without end).
    fn list_end(&self, dir: InodeId) -> Result<u64>;
    /// The target of symlink `id`.
    fn readlink(&self, id: InodeId) -> Result<Vec<u8>>;
    /// The value of xattr `name` of `id`, if it has one.
    fn getxattr(&self, id: InodeId, name: &[u8]) -> Result<Option<Vec<u8>>>;
    /// The names of `id`'s xattrs, each followed by a NUL, in key order.
    fn listxattr(&self, id: InodeId) -> Result<Vec<u8>>;
    /// What statfs(2) shows.
    fn statfs(&self) -> StatFs;
    /// The data change counter of `id` (0: unchanged since the mount).
    fn data_version(&self, id: InodeId) -> u64;
    /// Where data lies in regular file `id` now, from `off` on: the whole
    /// file, or a stretch that holds `off` of about `ranges` data ranges.
    fn data_map(&self, id: InodeId, off: u64, ranges: usize) -> Result<DataMap>;

    /// lseek(2) with SEEK_DATA (3) or SEEK_HOLE (4), answered from the
    /// open file's cached map while the file has not changed and the
    /// answer lies in the stretch mapped. None is ENXIO.
    fn seek(
        &self,
        id: InodeId,
        cache: &mut SeekCache,
        off: u64,
        whence: i32,
    ) -> Result<Option<u64>> {
        if whence != 3 && whence != 4 {
            return Err(Error::Invalid(format!("lseek whence {whence}")));
        }
        let v = self.data_version(id);
        if cache.version == Some(v) && !cache_disabled() {
            if let Some(found) = cache.map.seek(off, whence) {
                return Ok(found);
            }
        }
        // Changed, or outside the stretch mapped: map from `off` on, a
        // longer stretch each time, as readahead grows its window.
        let ranges = STRETCH_MIN << cache.builds.min(4);
        cache.map = self.data_map(id, off, ranges as usize)?;
        cache.version = Some(v);
        cache.builds += 1;
        cache.map.seek(off, whence).ok_or_else(|| {
            Error::corrupt(
                format!("subvolume {} inode {}", id.subvol, id.ino),
                format!("its data map from offset {off} does not hold it"),
            )
        })
    }
}

impl View for Filesystem {
    fn info(&self) -> &FsInfo {
        &self.info
    }

    fn stat(&self, id: InodeId) -> Result<Stat> {
        Filesystem::stat(self, id)
    }

    fn lookup(&self, dir: InodeId, name: &[u8]) -> Result<Option<InodeId>> {
        Ok(Filesystem::lookup(self, dir, name)?.map(|e| e.target))
    }

    fn parent(&self, dir: InodeId) -> Result<InodeId> {
        dir_item::parent(self, dir)
    }

    fn list(&self, dir: InodeId, from: u64, f: &mut ListVisitor<'_>) -> Result<()> {
        dir_item::list(self, dir, from, f)
    }

    /// The committed trees do not change under a listing.
    fn list_end(&self, _dir: InodeId) -> Result<u64> {
        Ok(u64::MAX)
    }

    fn readlink(&self, id: InodeId) -> Result<Vec<u8>> {
        file::readlink(self, id)
    }

    fn getxattr(&self, id: InodeId, name: &[u8]) -> Result<Option<Vec<u8>>> {
        self.xattr(id, name)
    }

    fn listxattr(&self, id: InodeId) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        if !id.is_placeholder() {
            dir_item::for_each_xattr(self, id.subvol, id.ino, |e| {
                out.extend_from_slice(e.name);
                out.push(0);
            })?;
        }
        Ok(out)
    }

    fn data_version(&self, _id: InodeId) -> u64 {
        0
    }

    /// A stretch of `want` data ranges from `off` (fewer at the end of
    /// the file), found as a walk with SEEK_DATA and SEEK_HOLE finds them.
    fn data_map(&self, id: InodeId, off: u64, want: usize) -> Result<DataMap> {
        let mut h = file::FileHandle::open(self, id)?;
        let size = h.size;
        let mut ranges = Vec::new();
        let mut pos = off;
        while ranges.len() < want {
            let Some(d) = h.seek_data(self, pos)? else {
                pos = size;
                break;
            };
            pos = h.seek_hole(self, d)?.unwrap_or(size);
            ranges.push((d, pos));
        }
        Ok(DataMap {
            ranges,
            size,
            start: off.min(size),
            end: pos.min(size),
        })
    }

    /// The devices' bytes, and those the superblock counts unused.
    fn statfs(&self) -> StatFs {
        let sb = &self.info.sb;
        let bs = self.info.sectorsize as u64;
        let free = sb.total_bytes.saturating_sub(sb.bytes_used) / bs;
        StatFs {
            blocks: sb.total_bytes / bs,
            bfree: free,
            bavail: free,
            bsize: bs as u32,
        }
    }
}
