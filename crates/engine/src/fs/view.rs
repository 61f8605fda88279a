//! What a mount reads, written once for both of its sources: the
//! committed trees ([`Filesystem`], the read-only mount) and the running
//! transaction with its dirty data (`vfs::RwFs`, the read-write mount).
//! The kernel serves both from one set of inode operations; here the
//! FUSE front end answers lookup, getattr, readlink, listings, xattrs and
//! statfs through this trait, whichever source is behind it. The item
//! readers under it are shared as well ([`crate::items`]).

use super::{file, Filesystem, InodeId, Stat};
use crate::disk_io::FsInfo;
use crate::error::Result;
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
