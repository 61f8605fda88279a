//! File data: the extent map of one inode, reads of every extent kind, and
//! SEEK_DATA / SEEK_HOLE.
//!
//! A [`FileHandle`] remembers the leaf and slot of the last extent item it
//! used. A caller walking a file with increasing offsets (cp, tar --sparse,
//! sequential reads) continues from there instead of searching the tree
//! from the root each call: amortized O(1) per call, one tree search per
//! leaf of extent items. This is the userspace form of the kernel patch that
//! caches extent state across lseek calls of one open file.

use crate::ctree::{Cursor, Tree};
use crate::data::extent::{Extent, ExtentKind};
use crate::data::read::DataReader;
use crate::error::{Error, Result};
use crate::fs::{Filesystem, InodeId};
use crate::tree::block::TreeBlock;
use std::sync::Arc;
use ubtrfs_format::consts::*;
use ubtrfs_format::key::Key;

/// What a range of a file is, for the extent-map listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeKind {
    /// Regular extent data (possibly compressed, possibly shared).
    Data,
    /// Data stored inline in the tree.
    Inline,
    /// Allocated but unwritten: reads as zeros, a hole for SEEK_HOLE.
    Prealloc,
    /// No extent (implicit, with no-holes) or an explicit hole item.
    Hole,
}

/// One range of a file's extent map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapRange {
    pub start: u64,
    pub end: u64,
    pub kind: RangeKind,
    /// For Data and Prealloc: (disk_bytenr, offset into the extent,
    /// compression).
    pub disk: Option<(u64, u64, u8)>,
}

/// Counters of how a handle found its extents (for tests and benchmarks).
#[derive(Debug, Clone, Copy, Default)]
pub struct HandleStats {
    /// Searches from the tree root.
    pub tree_searches: u64,
    /// Extent lookups answered from the cached leaf.
    pub cached_lookups: u64,
}

/// Where the last extent lookup ended: a leaf, the slot of the extent item
/// returned, and where the file's item before that slot ended (None when
/// unknown).
#[derive(Clone)]
struct CachedSlot {
    leaf: Arc<TreeBlock>,
    slot: usize,
    prev_end: Option<u64>,
}

/// An open file: its size, where its extents are, and the cursor state kept
/// between calls.
pub struct FileHandle {
    pub id: InodeId,
    pub size: u64,
    tree: Tree,
    sectorsize: u64,
    leaf: Option<CachedSlot>,
    /// A search found no extent item ending after this offset: lookups
    /// at or past it are answered without searching again (a walk that
    /// reaches the file's last extent asks twice: SEEK_HOLE after it, then
    /// SEEK_DATA from there).
    no_extent_from: Option<u64>,
    reader: DataReader,
    pub stats: HandleStats,
}

impl FileHandle {
    pub fn open(fs: &Filesystem, id: InodeId) -> Result<FileHandle> {
        let inode = fs.inode_item(id)?;
        let tree = fs.tree(id.subvol)?;
        Ok(FileHandle {
            id,
            size: inode.size,
            tree,
            sectorsize: fs.info.sectorsize as u64,
            leaf: None,
            no_extent_from: None,
            reader: DataReader::new(tree.id, id.ino, inode.flags & INODE_NODATASUM != 0),
            stats: HandleStats::default(),
        })
    }

    fn decode(&self, key: Key, data: &[u8]) -> Result<Extent> {
        Extent::decode(self.tree, &key, data, self.sectorsize)
    }

    /// Looks in the cached leaf, from the cached slot on, for the first
    /// extent ending after `off`. `Ok(None)` means the leaf cannot answer.
    fn lookup_cached_leaf(&mut self, off: u64) -> Result<Option<Option<Extent>>> {
        let Some(cached) = self.leaf.clone() else {
            return Ok(None);
        };
        let node = cached.leaf.node();
        let ours = |k: Key| k.objectid == self.id.ino && k.item_type == EXTENT_DATA;
        let mut s = cached.slot;
        if s >= node.nritems() || !ours(node.key(s)) {
            return Ok(None);
        }
        // The cached item answers for any `off` from the end of the item
        // before it on: a walk that stopped at the next extent and now asks
        // about the gap before it (SEEK_DATA after SEEK_HOLE) needs no
        // search, even across a leaf boundary. Earlier offsets do.
        if node.key(s).offset > off && cached.prev_end.is_none_or(|p| p > off) {
            return Ok(None);
        }
        let mut prev_end = cached.prev_end;
        while s < node.nritems() {
            let it = node.item(s);
            if !ours(it.key) {
                self.stats.cached_lookups += 1;
                return Ok(Some(None));
            }
            let e = self.decode(it.key, it.data)?;
            if e.end > off {
                self.leaf = Some(CachedSlot {
                    leaf: cached.leaf.clone(),
                    slot: s,
                    prev_end,
                });
                self.stats.cached_lookups += 1;
                return Ok(Some(Some(e)));
            }
            prev_end = Some(e.end);
            s += 1;
        }
        Ok(None)
    }

    /// The first extent item of this file that ends after `off` (it covers
    /// `off` if its start is <= `off`), or None past the last one.
    pub fn extent_from(&mut self, fs: &Filesystem, off: u64) -> Result<Option<Extent>> {
        if let Some(r) = self.lookup_cached_leaf(off)? {
            return Ok(r);
        }
        if self.no_extent_from.is_some_and(|n| off >= n) {
            self.stats.cached_lookups += 1;
            return Ok(None);
        }
        let found = self.search_extent(fs, off)?;
        if found.is_none() {
            self.no_extent_from = Some(self.no_extent_from.map_or(off, |n| n.min(off)));
        }
        Ok(found)
    }

    /// The tree search behind [`FileHandle::extent_from`]; caches the leaf
    /// it finds the extent in.
    fn search_extent(&mut self, fs: &Filesystem, off: u64) -> Result<Option<Extent>> {
        self.stats.tree_searches += 1;
        let mut c = Cursor::new(&fs.info, self.tree);
        let key = Key::new(self.id.ino, EXTENT_DATA, off);
        // From the last item at or before `off` (which may end before it).
        let mut prev_end = None;
        if !c.seek_le(&key)?
            || c.key()
                .is_some_and(|k| k.objectid != self.id.ino || k.item_type != EXTENT_DATA)
        {
            // Nothing of this file at or before `off`: the first item after
            // it comes first in the file.
            prev_end = Some(0);
            if !c.seek(&key)? {
                return Ok(None);
            }
        }
        loop {
            let Some((k, d)) = c.item() else {
                return Ok(None);
            };
            if k > Key::new(self.id.ino, EXTENT_DATA, u64::MAX) {
                return Ok(None);
            }
            if k.objectid == self.id.ino && k.item_type == EXTENT_DATA {
                let e = self.decode(k, d)?;
                if e.end > off {
                    let (leaf, slot) = c.leaf().expect("positioned");
                    self.leaf = Some(CachedSlot {
                        leaf: leaf.clone(),
                        slot,
                        prev_end,
                    });
                    return Ok(Some(e));
                }
                prev_end = Some(e.end);
            }
            if !c.next()? {
                return Ok(None);
            }
        }
    }

    /// SEEK_DATA: the first offset >= `off` holding data, None (ENXIO) if
    /// there is none before the end of the file.
    pub fn seek_data(&mut self, fs: &Filesystem, off: u64) -> Result<Option<u64>> {
        let mut pos = off;
        while pos < self.size {
            let Some(e) = self.extent_from(fs, pos)? else {
                return Ok(None);
            };
            if e.start > pos {
                pos = e.start;
                continue;
            }
            if e.is_data() {
                return Ok(Some(pos));
            }
            pos = e.end;
        }
        Ok(None)
    }

    /// SEEK_HOLE: the first offset >= `off` in a hole (the file size counts
    /// as one), None (ENXIO) if `off` is at or past the end.
    pub fn seek_hole(&mut self, fs: &Filesystem, off: u64) -> Result<Option<u64>> {
        if off >= self.size {
            return Ok(None);
        }
        let mut pos = off;
        while pos < self.size {
            let Some(e) = self.extent_from(fs, pos)? else {
                return Ok(Some(pos));
            };
            if e.start > pos || !e.is_data() {
                return Ok(Some(pos));
            }
            pos = e.end;
        }
        Ok(Some(self.size))
    }

    /// The extent map of `[0, size)`: every range with its kind, gaps
    /// (implicit holes) included, clipped to the file size.
    pub fn map(&mut self, fs: &Filesystem) -> Result<Vec<MapRange>> {
        let mut out: Vec<MapRange> = Vec::new();
        let mut pos = 0;
        while pos < self.size {
            let (end, kind, disk) = match self.extent_from(fs, pos)? {
                None => (self.size, RangeKind::Hole, None),
                Some(e) if e.start > pos => (e.start.min(self.size), RangeKind::Hole, None),
                Some(e) => {
                    let disk = e
                        .disk()
                        .map(|(db, off)| (db, off + (pos - e.start), e.compression));
                    let kind = match e.kind {
                        ExtentKind::Inline { .. } => RangeKind::Inline,
                        ExtentKind::Regular { .. } => RangeKind::Data,
                        ExtentKind::Prealloc { .. } => RangeKind::Prealloc,
                        ExtentKind::Hole => RangeKind::Hole,
                    };
                    (e.end.min(self.size), kind, disk)
                }
            };
            // Merge adjacent holes (an explicit hole item next to a gap).
            match out.last_mut() {
                Some(last)
                    if kind == RangeKind::Hole
                        && last.kind == RangeKind::Hole
                        && last.end == pos =>
                {
                    last.end = end
                }
                _ => out.push(MapRange {
                    start: pos,
                    end,
                    kind,
                    disk,
                }),
            }
            pos = end;
        }
        Ok(out)
    }

    /// The data ranges of the file, as a walk with SEEK_DATA/SEEK_HOLE
    /// from 0 finds them.
    pub fn data_ranges(&mut self, fs: &Filesystem) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        let mut pos = 0;
        while let Some(d) = self.seek_data(fs, pos)? {
            let h = self.seek_hole(fs, d)?.unwrap_or(self.size);
            out.push((d, h));
            pos = h;
        }
        Ok(out)
    }

    /// Reads `start..end` through `buf`, a buffer at a time, and hands
    /// each piece to `each` with its file offset. Stops early at end of
    /// file.
    pub fn read_range(
        &mut self,
        fs: &Filesystem,
        (start, end): (u64, u64),
        buf: &mut [u8],
        mut each: impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let mut p = start;
        while p < end {
            let want = ((end - p) as usize).min(buf.len());
            let n = self.read_at(fs, p, &mut buf[..want])?;
            if n == 0 {
                break;
            }
            each(p, &buf[..n])?;
            p += n as u64;
        }
        Ok(())
    }

    /// Reads up to `buf.len()` bytes at `off`; returns how many (short only
    /// at end of file).
    pub fn read_at(&mut self, fs: &Filesystem, off: u64, buf: &mut [u8]) -> Result<usize> {
        if off >= self.size {
            return Ok(0);
        }
        let end = self.size.min(off + buf.len() as u64);
        let mut pos = off;
        while pos < end {
            let out = &mut buf[(pos - off) as usize..(end - off) as usize];
            let ext = self.extent_from(fs, pos)?;
            let n = match ext {
                None => {
                    out.fill(0);
                    out.len()
                }
                Some(e) if e.start > pos => {
                    let n = out.len().min((e.start - pos) as usize);
                    out[..n].fill(0);
                    n
                }
                Some(e) => self.reader.read_extent(fs, &e, pos, out)?,
            };
            pos += n as u64;
        }
        Ok((end - off) as usize)
    }
}

/// Most bytes [`FileHandle::read_at_merged`] reads from the devices at once.
const MERGED_READ_MAX: u64 = 4 << 20;

impl FileHandle {
    /// Like [`FileHandle::read_at`], but the data of consecutive
    /// uncompressed extents that lie back to back on disk is read (and its
    /// checksums looked up) with one verified read, as the kernel merges
    /// their bios. A file written 4 KiB at a time with holes between (one
    /// extent per 4 KiB, the extents adjacent on disk) costs one device
    /// read per run of extents instead of one per extent; cold, that is the
    /// difference between one large read and hundreds of small ones.
    pub fn read_at_merged(&mut self, fs: &Filesystem, off: u64, buf: &mut [u8]) -> Result<usize> {
        if off >= self.size {
            return Ok(0);
        }
        let end = self.size.min(off + buf.len() as u64);
        let len = (end - off) as usize;
        // Holes, prealloc and the tail after the last extent read as zeros.
        buf[..len].fill(0);
        // Pieces of the current run: (file offset, logical address, bytes).
        let mut run: Vec<(u64, u64, usize)> = Vec::new();
        let mut pos = off;
        while pos < end {
            let Some(e) = self.extent_from(fs, pos)? else {
                break;
            };
            if e.start >= end {
                break;
            }
            pos = pos.max(e.start);
            let mut n = (e.end.min(end) - pos) as usize;
            match e.kind {
                ExtentKind::Regular {
                    disk_bytenr,
                    offset,
                    ..
                } if e.compression == COMPRESS_NONE => {
                    n = n.min(MERGED_READ_MAX as usize);
                    let logical = disk_bytenr + offset + (pos - e.start);
                    if let (Some(&(_, first, _)), Some(&(_, last, k))) = (run.first(), run.last()) {
                        let adjacent = last + k as u64 == logical;
                        if !adjacent || logical + n as u64 - first > MERGED_READ_MAX {
                            self.read_run(fs, off, &run, buf)?;
                            run.clear();
                        }
                    }
                    run.push((pos, logical, n));
                }
                ExtentKind::Hole | ExtentKind::Prealloc { .. } => {}
                _ => {
                    let out = &mut buf[(pos - off) as usize..len];
                    n = self.reader.read_extent(fs, &e, pos, out)?;
                }
            }
            pos += n as u64;
        }
        if !run.is_empty() {
            self.read_run(fs, off, &run, buf)?;
        }
        Ok(len)
    }

    /// One verified read of a run of adjacent extent pieces, copied to
    /// their places in `buf` (which starts at file offset `off`).
    fn read_run(
        &self,
        fs: &Filesystem,
        off: u64,
        run: &[(u64, u64, usize)],
        buf: &mut [u8],
    ) -> Result<()> {
        let ss = self.sectorsize;
        let (first, (_, last, k)) = (run[0].1, run[run.len() - 1]);
        let a0 = first / ss * ss;
        let a1 = (last + k as u64).div_ceil(ss) * ss;
        let data = self.reader.read_verified(fs, a0, a1 - a0)?;
        for &(p, l, n) in run {
            let s = (l - a0) as usize;
            let d = (p - off) as usize;
            buf[d..d + n].copy_from_slice(&data[s..s + n]);
        }
        Ok(())
    }
}

/// Target of a symlink.
pub fn readlink(fs: &Filesystem, id: InodeId) -> Result<Vec<u8>> {
    let st = fs.stat(id)?;
    if !st.is_symlink() {
        return Err(Error::Invalid(format!("inode {} is not a symlink", id.ino)));
    }
    let mut h = FileHandle::open(fs, id)?;
    let mut buf = vec![0u8; st.size.min(1 << 16) as usize];
    let n = h.read_at(fs, 0, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}
