//! File data: the extent map of one inode, reads of every extent kind, and
//! SEEK_DATA / SEEK_HOLE.
//!
//! A [`FileHandle`] remembers the leaf and slot of the last extent item it
//! used. A caller walking a file with increasing offsets (cp, tar --sparse,
//! sequential reads) continues from there instead of searching the tree
//! from the root each call: amortized O(1) per call, one tree search per
//! leaf of extent items. This is the userspace form of the kernel patch that
//! caches extent state across lseek calls of one open file.

use crate::data::csum::lookup_csums;
use crate::error::{Error, FormatContext, Result};
use crate::fs::{Filesystem, InodeId};
use crate::tree::block::TreeBlock;
use crate::tree::ctree::{Cursor, Tree};
use std::sync::Arc;
use ubtrfs_format::compress::decompress;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{FileExtent, FileExtentKind};
use ubtrfs_format::key::Key;

/// Most bytes one read of a regular extent fetches at once.
const READ_CHUNK: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtentKind {
    /// Data inside the tree item (`data` as stored, maybe compressed).
    Inline {
        compression: u8,
        ram_bytes: u64,
        data: Vec<u8>,
    },
    Regular {
        disk_bytenr: u64,
        disk_num_bytes: u64,
        offset: u64,
        compression: u8,
        ram_bytes: u64,
    },
    Prealloc {
        disk_bytenr: u64,
        disk_num_bytes: u64,
        offset: u64,
    },
    /// An explicit hole item (filesystems without no-holes).
    Hole,
}

/// One EXTENT_DATA item: the file range `[start, end)` it maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    pub start: u64,
    pub end: u64,
    pub generation: u64,
    pub kind: ExtentKind,
}

impl Extent {
    /// Whether SEEK_DATA counts this range as data.
    pub fn is_data(&self) -> bool {
        matches!(
            self.kind,
            ExtentKind::Inline { .. } | ExtentKind::Regular { .. }
        )
    }
}

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
    csum_tree: Option<Tree>,
    nodatasum: bool,
    sectorsize: u64,
    leaf: Option<CachedSlot>,
    decompressed: Option<(u64, u64, Arc<Vec<u8>>)>,
    pub stats: HandleStats,
}

impl FileHandle {
    pub fn open(fs: &Filesystem, id: InodeId) -> Result<FileHandle> {
        let inode = fs.inode_item(id)?;
        Ok(FileHandle {
            id,
            size: inode.size,
            tree: fs.tree(id.subvol)?,
            csum_tree: fs.tree_opt(CSUM_TREE_OBJECTID)?,
            nodatasum: inode.flags & INODE_NODATASUM != 0,
            sectorsize: fs.info.sectorsize as u64,
            leaf: None,
            decompressed: None,
            stats: HandleStats::default(),
        })
    }

    fn here(&self, key: &Key) -> String {
        format!("{} key {key}", self.tree.describe())
    }

    fn decode(&self, key: Key, data: &[u8]) -> Result<Extent> {
        let fe = FileExtent::parse(data).at(|| self.here(&key))?;
        let bad = |d: String| Error::corrupt(self.here(&key), d);
        if fe.encryption != 0 || fe.other_encoding != 0 {
            return Err(Error::Unsupported(format!(
                "{}: encrypted or encoded extent",
                self.here(&key)
            )));
        }
        if fe.compression > COMPRESS_ZSTD {
            return Err(bad(format!("unknown compression {}", fe.compression)));
        }
        let (kind, len) = match fe.kind {
            FileExtentKind::Inline { data } => {
                let ram = if fe.compression == COMPRESS_NONE {
                    data.len() as u64
                } else {
                    fe.ram_bytes
                };
                // A hostile ram_bytes near u64::MAX would overflow the
                // rounding up to a sector.
                let len = ram
                    .div_ceil(self.sectorsize)
                    .checked_mul(self.sectorsize)
                    .ok_or_else(|| bad(format!("inline extent ram_bytes {ram} overflows")))?;
                (
                    ExtentKind::Inline {
                        compression: fe.compression,
                        ram_bytes: ram,
                        data: data.to_vec(),
                    },
                    len,
                )
            }
            FileExtentKind::Extent {
                prealloc,
                disk_bytenr,
                disk_num_bytes,
                offset,
                num_bytes,
            } => {
                // The kernel's tree-checker requires sector-aligned disk
                // ranges; with that and no overflow, every address `read_extent`
                // computes (rounded out to sectors) stays inside the range.
                let ss = self.sectorsize;
                if disk_bytenr != 0
                    && (!disk_bytenr.is_multiple_of(ss)
                        || !disk_num_bytes.is_multiple_of(ss)
                        || disk_bytenr.checked_add(disk_num_bytes).is_none())
                {
                    return Err(bad(format!(
                        "extent disk range {disk_bytenr}+{disk_num_bytes} is not sector aligned or overflows"
                    )));
                }
                let kind = if disk_bytenr == 0 {
                    ExtentKind::Hole
                } else if prealloc {
                    ExtentKind::Prealloc {
                        disk_bytenr,
                        disk_num_bytes,
                        offset,
                    }
                } else {
                    if fe.compression != COMPRESS_NONE
                        && (offset
                            .checked_add(num_bytes)
                            .is_none_or(|e| e > fe.ram_bytes)
                            || fe.ram_bytes > MAX_UNCOMPRESSED
                            || disk_num_bytes > MAX_UNCOMPRESSED)
                    {
                        return Err(bad(format!(
                            "compressed extent offset {offset} num_bytes {num_bytes} ram_bytes {} disk_num_bytes {disk_num_bytes}",
                            fe.ram_bytes
                        )));
                    }
                    if fe.compression == COMPRESS_NONE
                        && offset
                            .checked_add(num_bytes)
                            .is_none_or(|e| e > disk_num_bytes)
                    {
                        return Err(bad(format!(
                            "extent offset {offset} + num_bytes {num_bytes} beyond disk_num_bytes {disk_num_bytes}"
                        )));
                    }
                    ExtentKind::Regular {
                        disk_bytenr,
                        disk_num_bytes,
                        offset,
                        compression: fe.compression,
                        ram_bytes: fe.ram_bytes,
                    }
                };
                (kind, num_bytes)
            }
        };
        let end = key
            .offset
            .checked_add(len)
            .ok_or_else(|| bad(format!("extent length {len} overflows")))?;
        Ok(Extent {
            start: key.offset,
            end,
            generation: fe.generation,
            kind,
        })
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
                    let (kind, disk) = match e.kind {
                        ExtentKind::Inline { .. } => (RangeKind::Inline, None),
                        ExtentKind::Regular {
                            disk_bytenr,
                            offset,
                            compression,
                            ..
                        } => (
                            RangeKind::Data,
                            Some((disk_bytenr, offset + (pos - e.start), compression)),
                        ),
                        ExtentKind::Prealloc {
                            disk_bytenr,
                            offset,
                            ..
                        } => (
                            RangeKind::Prealloc,
                            Some((disk_bytenr, offset + (pos - e.start), 0)),
                        ),
                        ExtentKind::Hole => (RangeKind::Hole, None),
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
                Some(e) => self.read_extent(fs, &e, pos, out)?,
            };
            pos += n as u64;
        }
        Ok((end - off) as usize)
    }

    /// Fills the start of `out` from extent `e` at file offset `pos` (inside
    /// `e`); returns how many bytes.
    fn read_extent(
        &mut self,
        fs: &Filesystem,
        e: &Extent,
        pos: u64,
        out: &mut [u8],
    ) -> Result<usize> {
        let n = out.len().min((e.end - pos) as usize);
        let rel = pos - e.start;
        match &e.kind {
            ExtentKind::Hole | ExtentKind::Prealloc { .. } => out[..n].fill(0),
            ExtentKind::Inline {
                compression,
                ram_bytes,
                data,
            } => {
                let plain;
                let src: &[u8] = if *compression == COMPRESS_NONE {
                    data
                } else {
                    plain = decompress(*compression, data, *ram_bytes as usize, fs.info.sectorsize)
                        .at(|| {
                            format!(
                                "{} inode {} inline extent",
                                self.tree.describe(),
                                self.id.ino
                            )
                        })?;
                    &plain
                };
                copy_or_zero(&mut out[..n], src, rel);
            }
            ExtentKind::Regular {
                disk_bytenr,
                disk_num_bytes,
                offset,
                compression,
                ram_bytes,
            } => {
                if *compression == COMPRESS_NONE {
                    let ss = self.sectorsize;
                    let n = (n as u64).min(READ_CHUNK) as usize;
                    let logical = disk_bytenr + offset + rel;
                    let a0 = logical / ss * ss;
                    let a1 = (logical + n as u64).div_ceil(ss) * ss;
                    let data = self.read_verified(fs, a0, a1 - a0)?;
                    let skip = (logical - a0) as usize;
                    out[..n].copy_from_slice(&data[skip..skip + n]);
                    return Ok(n);
                }
                let plain = self.decompressed_extent(
                    fs,
                    *disk_bytenr,
                    *disk_num_bytes,
                    *compression,
                    *ram_bytes,
                )?;
                copy_or_zero(&mut out[..n], &plain, offset + rel);
            }
        }
        Ok(n)
    }

    fn read_verified(&self, fs: &Filesystem, logical: u64, len: u64) -> Result<Vec<u8>> {
        let csums = match self.csum_tree {
            Some(t) if !self.nodatasum => lookup_csums(&fs.info, t, logical, len)?,
            _ => Vec::new(),
        };
        fs.info
            .read_data(logical, len as usize, &csums)
            .map_err(|e| match e {
                Error::Corrupt { at, detail } => Error::Corrupt {
                    at: format!("{at} ({} inode {})", self.tree.describe(), self.id.ino),
                    detail,
                },
                other => other,
            })
    }

    fn decompressed_extent(
        &mut self,
        fs: &Filesystem,
        disk_bytenr: u64,
        disk_num_bytes: u64,
        compression: u8,
        ram_bytes: u64,
    ) -> Result<Arc<Vec<u8>>> {
        if let Some((b, r, d)) = &self.decompressed {
            if *b == disk_bytenr && *r == ram_bytes {
                return Ok(d.clone());
            }
        }
        let raw = self.read_verified(fs, disk_bytenr, disk_num_bytes)?;
        let plain =
            decompress(compression, &raw, ram_bytes as usize, fs.info.sectorsize).at(|| {
                format!(
                    "compressed extent at logical {disk_bytenr} ({} inode {})",
                    self.tree.describe(),
                    self.id.ino
                )
            })?;
        let plain = Arc::new(plain);
        self.decompressed = Some((disk_bytenr, ram_bytes, plain.clone()));
        Ok(plain)
    }
}

/// Copies `src[from..]` into `out`, zero-filling what `src` does not have.
fn copy_or_zero(out: &mut [u8], src: &[u8], from: u64) {
    let avail = src
        .len()
        .saturating_sub(from.min(src.len() as u64) as usize);
    let k = avail.min(out.len());
    if k > 0 {
        out[..k].copy_from_slice(&src[from as usize..from as usize + k]);
    }
    out[k..].fill(0);
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
                    compression: COMPRESS_NONE,
                    ..
                } => {
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
                    n = self.read_extent(fs, &e, pos, out)?;
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
        let data = self.read_verified(fs, a0, a1 - a0)?;
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
