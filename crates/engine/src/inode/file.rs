//! File data changed through a transaction, as the kernel changes it
//! (file.c btrfs_drop_extents, inode.c cow_file_range and
//! cow_file_range_inline, btrfs_truncate and btrfs_cont_expand, file.c
//! btrfs_punch_hole and btrfs_fallocate; clones are in
//! [`super::reflink`]): every write is copy-on-write to new extents,
//! whole sectors at a time (the partial sectors at its edges read back
//! and merged, as the page cache would); a file that fits in its first
//! sector up to the kernel's default max_inline (2048 bytes) is stored
//! inline; replaced extents lose this file's reference (and are freed,
//! with their checksums, when it was the last); explicit hole items are
//! kept on filesystems without no-holes.
//!
//! Callers (receive, the mount) keep inode times; these functions keep
//! `size`, `nbytes` and the item's transid.

use super::file_item::{NewPiece, MAX_EXTENT_SIZE};
use super::InodeMut;
use crate::ctree::Tree;
use crate::data::extent::{Extent, ExtentKind};
use crate::data::read::DataReader;
use crate::error::{Error, Result};
use crate::tx::delayed_ref::Backref;
use crate::tx::Trans;
use ubtrfs_format::compress::{compress, decompress};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::InodeItem;
use ubtrfs_format::Key;

/// How a file's new data is stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataPolicy {
    /// Checksums in the csum tree (not for NODATASUM inodes).
    pub csum: bool,
    /// Compression (algorithm, level), kept only where it saves a sector.
    pub compress: Option<(u8, i32)>,
    /// compress-force: compression tried on every piece, without the
    /// kernel's look at the data first.
    pub force: bool,
}

impl DataPolicy {
    /// What the inode's flags ask for: checksums unless NODATASUM;
    /// compression with `algo` when the inode has the COMPRESS flag (the
    /// btrfs.compression property) and neither NOCOMPRESS nor NODATACOW.
    pub fn of_inode(inode: &InodeItem, algo: Option<u8>) -> DataPolicy {
        let f = inode.flags;
        let csum = f & INODE_NODATASUM == 0;
        let compress = algo
            .filter(|_| f & INODE_COMPRESS != 0)
            .filter(|_| f & (INODE_NOCOMPRESS | INODE_NODATACOW) == 0 && csum)
            .map(|a| (a, 0));
        DataPolicy {
            csum,
            compress,
            force: false,
        }
    }

    /// The policy for a range of dirty data starting with `data`: without
    /// compression when its first 128 KiB does not look worth it (but
    /// under compress-force), so that it is written in large plain
    /// extents rather than in 128 KiB pieces, as the kernel's
    /// btrfs_run_delalloc_range sends such a range to cow_file_range.
    pub fn for_range(&self, data: &[u8]) -> DataPolicy {
        DataPolicy {
            compress: self.compression_for(data),
            ..*self
        }
    }

    /// The compression to try on `data`: none unless the policy
    /// compresses, and (but under compress-force) only if the data looks
    /// worth it, as the kernel's inode_need_compress decides.
    pub fn compression_for(&self, data: &[u8]) -> Option<(u8, i32)> {
        self.compress
            .filter(|_| self.force || ubtrfs_format::compress::worth_compressing(data))
    }
}

/// Inode flags: compress new data (the btrfs.compression property or
/// `chattr +c`), or do not.
pub use ubtrfs_format::consts::{INODE_COMPRESS, INODE_NOCOMPRESS};

pub(super) fn round_up(v: u64, ss: u64) -> u64 {
    v.div_ceil(ss) * ss
}

fn extent_tree(tree: u64) -> Tree {
    Tree {
        id: tree,
        bytenr: 0,
        level: 0,
        generation: 0,
    }
}

fn missing(tree: u64, ino: u64) -> Error {
    Error::NotFound(format!("tree {tree}: inode {ino}"))
}

impl Trans {
    fn no_holes(&self) -> bool {
        self.info.sb.incompat_flags & INCOMPAT_NO_HOLES != 0
    }

    /// The inode item of `ino`, NotFound when there is none.
    pub fn inode_of(&self, tree: u64, ino: u64) -> Result<InodeItem> {
        self.inode(tree, ino)?.ok_or_else(|| missing(tree, ino))
    }

    /// The file extents of `ino` that overlap `[start, end)`, in order.
    pub fn file_extents(
        &self,
        tree: u64,
        ino: u64,
        start: u64,
        end: u64,
    ) -> Result<Vec<(Key, Extent)>> {
        Ok(self
            .file_extents_raw(tree, ino, start, end)?
            .into_iter()
            .map(|(k, e, _)| (k, e))
            .collect())
    }

    /// [`Trans::file_extents`] with each item's bytes.
    fn file_extents_raw(
        &self,
        tree: u64,
        ino: u64,
        start: u64,
        end: u64,
    ) -> Result<Vec<(Key, Extent, Vec<u8>)>> {
        let ss = self.sectorsize() as u64;
        let t = extent_tree(tree);
        let mut out = Vec::new();
        if end <= start {
            return Ok(out);
        }
        // An extent starting before `start` may reach into it.
        if start > 0 {
            if let Some((k, d)) = self.search_last_le(tree, &Key::new(ino, EXTENT_DATA, start))? {
                if k.objectid == ino && k.item_type == EXTENT_DATA && k.offset < start {
                    let e = Extent::decode(t, &k, &d, ss)?;
                    if e.end > start {
                        out.push((k, e, d));
                    }
                }
            }
        }
        let lo = Key::new(ino, EXTENT_DATA, start);
        let hi = Key::new(ino, EXTENT_DATA, end - 1);
        for (k, d) in self.items_in(tree, &lo, &hi)? {
            let e = Extent::decode(t, &k, &d, ss)?;
            out.push((k, e, d));
        }
        Ok(out)
    }

    /// The file's bytes `[off, off + len)` as they read now (zeros in holes
    /// and preallocated ranges; checksums are not verified).
    pub fn read_file(&self, tree: u64, ino: u64, off: u64, len: u64) -> Result<Vec<u8>> {
        if len == 0 {
            // Nothing to look up (a write at the start of a sector asks
            // for its empty prefix).
            return Ok(Vec::new());
        }
        let mut out = vec![0u8; len as usize];
        let end = off + len;
        let mut reader = DataReader::new(tree, ino, false);
        for (_, e) in self.file_extents(tree, ino, off, end)? {
            let (mut pos, en) = (e.start.max(off), e.end.min(end));
            while pos < en {
                let dst = &mut out[(pos - off) as usize..(en - off) as usize];
                pos += reader.read_extent(self, &e, pos, dst)? as u64;
            }
        }
        Ok(out)
    }

    /// Sets the incompat flag the kernel sets when it first writes an
    /// extent compressed with LZO or ZSTD.
    pub fn note_compression(&mut self, algo: u8) {
        self.info.sb.incompat_flags |= match algo {
            COMPRESS_LZO => INCOMPAT_COMPRESS_LZO,
            COMPRESS_ZSTD => INCOMPAT_COMPRESS_ZSTD,
            _ => 0,
        };
    }
}

impl InodeMut<'_> {
    /// Inserts an EXTENT_DATA item for `[file_off, file_off + num)` taken
    /// from extent `e` at `offset` into it (a piece of an existing item,
    /// or a reflink), with a reference from this file.
    pub(super) fn insert_extent_piece(
        &mut self,
        file_off: u64,
        e: &Extent,
        skip: u64,
        num: u64,
    ) -> Result<()> {
        let (tree, ino) = (self.tree, self.ino);
        // (disk_bytenr, disk_num_bytes, offset, ram_bytes, compression,
        // prealloc) of the extent the piece points into.
        let (bytenr, disk_len, offset, ram, compression, prealloc) = match e.kind {
            ExtentKind::Regular {
                disk_bytenr,
                disk_num_bytes,
                offset,
                ram_bytes,
                ..
            } => (
                disk_bytenr,
                disk_num_bytes,
                offset,
                ram_bytes,
                e.compression,
                false,
            ),
            ExtentKind::Prealloc {
                disk_bytenr,
                disk_num_bytes,
                offset,
                ..
            } => (
                disk_bytenr,
                disk_num_bytes,
                offset,
                disk_num_bytes,
                COMPRESS_NONE,
                true,
            ),
            ExtentKind::Hole => return self.insert_hole(file_off, num),
            ExtentKind::Inline { .. } => {
                return Err(Error::Invalid(format!(
                    "tree {tree} inode {ino}: an inline extent cannot be split"
                )))
            }
        };
        self.insert_file_extent(
            file_off,
            bytenr,
            disk_len,
            offset + skip,
            num,
            ram,
            compression,
            prealloc,
            false,
        )
    }

    /// Turns an inline extent into a regular one-sector extent (what the
    /// kernel's writeback does once the file outgrows inline).
    pub(super) fn uninline(&mut self, inode: &mut InodeItem, policy: DataPolicy) -> Result<()> {
        if !self.has_inline()? {
            return Ok(());
        }
        let (tree, ino) = (self.tree, self.ino);
        let ss = self.sectorsize() as u64;
        let data = self.read_file(tree, ino, 0, ss)?;
        let pieces = self.take_space(&data, policy)?;
        self.replace_with(inode, 0, &data, pieces, policy)
    }

    /// The part `[from, to)` of the EXTENT_DATA item `k` (`raw`, decoded
    /// as `e`) inserted as an item of its own: the same bytes, the
    /// extent offset and length changed, with a reference when it points
    /// to a disk extent.
    fn split_piece(&mut self, k: &Key, e: &Extent, raw: &[u8], from: u64, to: u64) -> Result<()> {
        let (tree, ino) = (self.tree, self.ino);
        // Offsets of `offset` and `num_bytes` in a regular EXTENT_DATA item.
        const OFFSET_AT: usize = 37;
        const NUM_BYTES_AT: usize = 45;
        if raw.len() < NUM_BYTES_AT + 8 {
            return Err(Error::corrupt(
                format!("tree {tree} key {k}"),
                "a split extent item is too short",
            ));
        }
        let old_offset = u64::from_le_bytes(raw[OFFSET_AT..OFFSET_AT + 8].try_into().unwrap());
        let offset = old_offset + (from - e.start);
        let mut v = raw.to_vec();
        v[OFFSET_AT..OFFSET_AT + 8].copy_from_slice(&offset.to_le_bytes());
        v[NUM_BYTES_AT..NUM_BYTES_AT + 8].copy_from_slice(&(to - from).to_le_bytes());
        self.insert_item(tree, Key::new(ino, EXTENT_DATA, from), v)?;
        if let Some((disk, disk_len, _)) = e.disk_extent() {
            let backref = Backref::file_extent(tree, ino, from, offset);
            self.add_data_ref(disk, disk_len, backref, false);
        }
        Ok(())
    }

    fn insert_hole(&mut self, file_off: u64, num: u64) -> Result<()> {
        self.insert_file_extent(file_off, 0, 0, 0, num, num, 0, false, false)
    }

    /// Removes the file's extents from `[start, end)` (sector aligned;
    /// `end` may be u64::MAX), keeping the parts of extents outside it
    /// (btrfs_drop_extents). Returns the bytes of data and preallocated
    /// extents removed (what leaves the inode's nbytes).
    pub fn drop_extents(&mut self, start: u64, end: u64) -> Result<u64> {
        let (tree, ino) = (self.tree, self.ino);
        let mut removed = 0;
        for (k, e, raw) in self.file_extents_raw(tree, ino, start, end)? {
            if e.end <= start || e.start >= end {
                continue;
            }
            if let ExtentKind::Inline { ram_bytes, .. } = e.kind {
                if start > e.start || end < e.start + ram_bytes {
                    return Err(Error::Unsupported(format!(
                        "tree {tree} inode {ino}: dropping [{start}, {end}) would cut into the inline extent of {ram_bytes} bytes"
                    )));
                }
            }
            self.delete_item(tree, &k)?;
            if let ExtentKind::Inline { ram_bytes, .. } = e.kind {
                // Inline extents are alone in the first sector: a
                // sector-aligned range drops them whole.
                removed += ram_bytes;
                continue;
            }
            if let Some((disk, disk_len, off)) = e.disk_extent() {
                let backref = Backref::file_extent(tree, ino, k.offset, off);
                self.drop_data_ref(disk, disk_len, backref);
                removed += e.end.min(end) - e.start.max(start);
            }
            // The parts outside the range keep their item (generation,
            // ram_bytes) with the offset and length cut, as the kernel's
            // btrfs_drop_extents leaves them.
            if e.start < start {
                self.split_piece(&k, &e, &raw, e.start, start)?;
            }
            if e.end > end {
                self.split_piece(&k, &e, &raw, end, e.end)?;
            }
        }
        Ok(removed)
    }

    /// On filesystems without no-holes: hole items for every gap between
    /// the extents in `[start, end)`.
    pub(crate) fn fill_holes(&mut self, start: u64, end: u64) -> Result<()> {
        let (tree, ino) = (self.tree, self.ino);
        if self.no_holes() || end <= start {
            return Ok(());
        }
        let mut at = start;
        for (_, e) in self.file_extents(tree, ino, start, end)? {
            if e.start > at {
                self.insert_hole(at, e.start - at)?;
            }
            at = at.max(e.end);
        }
        if at < end {
            self.insert_hole(at, end - at)?;
        }
        Ok(())
    }

    pub(crate) fn has_inline(&mut self) -> Result<bool> {
        let (tree, ino) = (self.tree, self.ino);
        let ss = self.sectorsize() as u64;
        Ok(self
            .file_extents(tree, ino, 0, ss)?
            .first()
            .is_some_and(|(_, e)| e.is_inline()))
    }

    /// Replaces the extents of `[at, at + buf.len())` with `buf` (whole
    /// sectors), whose space [`InodeMut::take_space`] took first, so that a
    /// full filesystem leaves the range as it was (ENOSPC), not a hole:
    /// the old extents dropped, the pieces written into their space with
    /// their checksums and mapped at `at` + their offset; nbytes follows.
    fn replace_with(
        &mut self,
        inode: &mut InodeItem,
        at: u64,
        buf: &[u8],
        pieces: Vec<NewPiece>,
        policy: DataPolicy,
    ) -> Result<()> {
        let removed = match self.drop_extents(at, at + buf.len() as u64) {
            Ok(r) => r,
            Err(e) => {
                self.give_back(&pieces);
                return Err(e);
            }
        };
        inode.nbytes = inode.nbytes.saturating_sub(removed);
        for p in pieces {
            let (data, algo) = match &p.packed {
                Some((c, algo)) => (&c[..], *algo),
                None => (&buf[p.off as usize..(p.off + p.n) as usize], COMPRESS_NONE),
            };
            self.write_data_into(p.disk, data, policy.csum)?;
            self.note_compression(algo);
            self.insert_file_extent(
                at + p.off,
                p.disk,
                p.stored_len,
                0,
                p.n,
                p.n,
                algo,
                false,
                true,
            )?;
            inode.nbytes += p.n;
        }
        Ok(())
    }

    /// Replaces `[at, at + buf.len())` (sector aligned) with `buf` for a
    /// file whose size will be `isize`: inline when the whole file fits
    /// in the first sector and in max_inline (cow_file_range_inline's
    /// rule), else new extents.
    pub(super) fn rewrite(
        &mut self,
        inode: &mut InodeItem,
        at: u64,
        buf: &[u8],
        isize: u64,
        policy: DataPolicy,
    ) -> Result<()> {
        let (tree, ino) = (self.tree, self.ino);
        let ss = self.sectorsize() as u64;
        let max_inline = self
            .max_inline
            .min(crate::tree::buf::max_item_data(self.nodesize()) as u64 - 21);
        let inline = at == 0
            && isize > 0
            && isize < ss
            && isize <= max_inline
            && isize <= buf.len() as u64
            && self.file_extents(tree, ino, ss, u64::MAX)?.is_empty();
        if inline {
            let removed = self.drop_extents(0, ss)?;
            inode.nbytes = inode.nbytes.saturating_sub(removed);
            let data = &buf[..isize as usize];
            let packed = match policy.compression_for(data) {
                Some((algo, level)) => compress(algo, level, data, ss as u32)
                    .map_err(|e| Error::format(format!("tree {tree} inode {ino}"), e))?
                    .filter(|c| c.len() < data.len())
                    .map(|c| (c, algo)),
                None => None,
            };
            match packed {
                Some((c, algo)) => {
                    self.note_compression(algo);
                    self.insert_inline_extent(&c, isize, algo)?;
                }
                None => self.insert_inline_extent(data, isize, COMPRESS_NONE)?,
            }
            inode.nbytes += isize;
            return Ok(());
        }
        // The space first, then the inline extent made regular: a full
        // filesystem leaves the file as it was.
        let pieces = self.take_space(buf, policy)?;
        if let Err(e) = self.uninline(inode, policy) {
            self.give_back(&pieces);
            return Err(e);
        }
        self.replace_with(inode, at, buf, pieces, policy)
    }

    /// The sector at `sector` merged for a change of the file: its bytes
    /// below `keep_below` (and below the file size) as they are, the
    /// rest zero.
    fn sector_prefix(&mut self, size: u64, sector: u64, keep_below: u64) -> Result<Vec<u8>> {
        let (tree, ino) = (self.tree, self.ino);
        let ss = self.sectorsize() as u64;
        let keep = keep_below.min(size).saturating_sub(sector).min(ss);
        let mut buf = self.read_file(tree, ino, sector, keep)?;
        buf.resize(ss as usize, 0);
        Ok(buf)
    }

    /// Whether an extent in the sector at `sector` is `what`.
    fn sector_any(&mut self, sector: u64, what: fn(&Extent) -> bool) -> Result<bool> {
        let (tree, ino) = (self.tree, self.ino);
        let ss = self.sectorsize() as u64;
        Ok(self
            .file_extents(tree, ino, sector, sector + ss)?
            .iter()
            .any(|(_, e)| what(e)))
    }

    /// Whether the sector at `sector` holds data or preallocated space.
    fn sector_allocated(&mut self, sector: u64) -> Result<bool> {
        self.sector_any(sector, |e| !matches!(e.kind, ExtentKind::Hole))
    }

    /// Whether the sector at `sector` reads stored data (inline or
    /// regular), which a partial zeroing must rewrite.
    fn sector_has_data(&mut self, sector: u64) -> Result<bool> {
        self.sector_any(sector, Extent::is_data)
    }

    /// Writes `data` at `off` (a pwrite through the page cache, then
    /// writeback): the file grows to cover it.
    pub fn write_file(&mut self, off: u64, data: &[u8], policy: DataPolicy) -> Result<InodeItem> {
        let (tree, ino) = (self.tree, self.ino);
        let mut inode = self.inode_of(tree, ino)?;
        if data.is_empty() {
            return Ok(inode);
        }
        let ss = self.sectorsize() as u64;
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| Error::Invalid(format!("write at {off}: past the largest file size")))?;
        let (a0, a1) = (off / ss * ss, round_up(end, ss));
        let size = inode.size;
        let mut buf = self.sector_prefix(size, a0, off)?;
        buf.truncate((off - a0) as usize);
        buf.extend_from_slice(data);
        if end < a1 && end < size {
            let tail = self.read_file(tree, ino, end, size.min(a1) - end)?;
            buf.extend_from_slice(&tail);
        }
        buf.resize((a1 - a0) as usize, 0);
        let isize = size.max(end);
        self.rewrite(&mut inode, a0, &buf, isize, policy)?;
        if a0 > size {
            self.fill_holes(round_up(size, ss), a0)?;
        }
        inode.size = isize;
        inode.transid = self.transid;
        Ok(inode)
    }

    /// Rewrites the sector at `sector` with `[from, to)` zeroed, `part`
    /// being `(sector, from, to)` (it becomes written data, whatever it
    /// was).
    fn zero_sector_part(
        &mut self,
        inode: &mut InodeItem,
        (sector, from, to): (u64, u64, u64),
        isize: u64,
        policy: DataPolicy,
    ) -> Result<()> {
        let (tree, ino) = (self.tree, self.ino);
        let ss = self.sectorsize() as u64;
        let mut buf = self.read_file(tree, ino, sector, ss)?;
        let valid = inode.size.saturating_sub(sector).min(ss) as usize;
        buf[valid..].fill(0);
        buf[(from - sector) as usize..(to - sector) as usize].fill(0);
        self.rewrite(inode, sector, &buf, isize, policy)
    }

    /// Sets the file's size (truncate(2)): extents past the new end are
    /// dropped, the partial last sector is zeroed past it, and a file
    /// that grows reads zeros in the new range.
    pub fn truncate_file(&mut self, new_size: u64, policy: DataPolicy) -> Result<InodeItem> {
        let (tree, ino) = (self.tree, self.ino);
        let mut inode = self.inode_of(tree, ino)?;
        let ss = self.sectorsize() as u64;
        let size = inode.size;
        if new_size > i64::MAX as u64 {
            return Err(Error::Invalid(format!(
                "truncate to {new_size}: past the largest file size"
            )));
        }
        if new_size < size {
            // The partial last sector first, as the kernel's
            // btrfs_truncate_block before btrfs_truncate: it may need
            // space, and on a full filesystem nothing is dropped yet.
            if !new_size.is_multiple_of(ss) {
                let s = new_size / ss * ss;
                // Only a sector that holds data (btrfs_truncate_block).
                if self.sector_has_data(s)? {
                    let part = (s, new_size, s + ss);
                    self.zero_sector_part(&mut inode, part, new_size, policy)?;
                }
            }
            let removed = self.drop_extents(round_up(new_size, ss), u64::MAX)?;
            inode.nbytes = inode.nbytes.saturating_sub(removed);
        } else if new_size > size && size % ss != 0 {
            let s = size / ss * ss;
            if self.sector_has_data(s)? {
                let part = (s, size, s + ss);
                self.zero_sector_part(&mut inode, part, new_size, policy)?;
            }
        } else if new_size > size && self.has_inline()? {
            self.uninline(&mut inode, policy)?;
        }
        self.fill_holes(0, round_up(new_size, ss))?;
        inode.size = new_size;
        inode.transid = self.transid;
        Ok(inode)
    }

    /// Punches `[off, off + len)` (fallocate PUNCH_HOLE | KEEP_SIZE):
    /// whole sectors become holes, partial ones are zeroed.
    pub fn punch_hole(&mut self, off: u64, len: u64, policy: DataPolicy) -> Result<InodeItem> {
        let (tree, ino) = (self.tree, self.ino);
        let mut inode = self.inode_of(tree, ino)?;
        let ss = self.sectorsize() as u64;
        let end = off
            .saturating_add(len)
            .min(round_up(inode.size, ss).max(off));
        if end <= off {
            return Ok(inode);
        }
        let (h, t) = (off / ss * ss, end / ss * ss);
        let isize = inode.size;
        // Partial sectors at the edges are zeroed where they hold data or
        // preallocated space (the kernel's btrfs_truncate_block makes the
        // block written data); holes stay holes.
        if !off.is_multiple_of(ss) && self.sector_allocated(h)? {
            let to = end.min(h + ss);
            self.zero_sector_part(&mut inode, (h, off, to), isize, policy)?;
        }
        if !end.is_multiple_of(ss)
            && (t != h || off.is_multiple_of(ss))
            && self.sector_allocated(t)?
        {
            let from = off.max(t);
            self.zero_sector_part(&mut inode, (t, from, end), isize, policy)?;
        }
        let (m0, m1) = (round_up(off, ss), t);
        if m0 < m1 {
            let removed = self.drop_extents(m0, m1)?;
            inode.nbytes = inode.nbytes.saturating_sub(removed);
            self.fill_holes(m0, m1)?;
        }
        inode.transid = self.transid;
        Ok(inode)
    }

    /// Preallocates `[off, off + len)` (fallocate, mode 0 or KEEP_SIZE):
    /// the holes in it get preallocated extents.
    pub fn prealloc(
        &mut self,
        off: u64,
        len: u64,
        keep_size: bool,
        policy: DataPolicy,
    ) -> Result<InodeItem> {
        let (tree, ino) = (self.tree, self.ino);
        let mut inode = self.inode_of(tree, ino)?;
        let ss = self.sectorsize() as u64;
        let end = off
            .checked_add(len)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| Error::Invalid(format!("fallocate at {off}+{len}: too large")))?;
        let (a0, a1) = (off / ss * ss, round_up(end, ss));
        // The holes: gaps between extents, and hole items.
        let mut gaps = Vec::new();
        let mut at = a0;
        for (_, e) in self.file_extents(tree, ino, a0, a1)? {
            if e.start > at {
                gaps.push((at, e.start));
            }
            if matches!(e.kind, ExtentKind::Hole) {
                gaps.push((e.start.max(a0), e.end.min(a1)));
            }
            at = at.max(e.end);
        }
        if at < a1 {
            gaps.push((at, a1));
        }
        // All the space first: a full filesystem (ENOSPC) changes nothing.
        let mut taken: Vec<NewPiece> = Vec::new();
        for &(s, e) in &gaps {
            let mut p = s;
            let mut step = MAX_EXTENT_SIZE;
            while p < e {
                let n = (e - p).min(step);
                match self.alloc_data(n) {
                    Ok(disk) => {
                        taken.push(NewPiece::unpacked(p, n, disk));
                        p += n;
                    }
                    Err(Error::NoSpace(_)) if n > ss => step = (n / 2).div_ceil(ss) * ss,
                    Err(err) => {
                        self.give_back(&taken);
                        return Err(err);
                    }
                }
            }
        }
        if a0 < a1 && a0 >= ss {
            if let Err(e) = self.uninline(&mut inode, policy) {
                self.give_back(&taken);
                return Err(e);
            }
        }
        for (s, e) in gaps {
            self.drop_extents(s, e)?;
        }
        for p in taken {
            let (at, n) = (p.off, p.n);
            self.insert_file_extent(at, p.disk, n, 0, n, n, 0, true, true)?;
            // As the kernel's __btrfs_prealloc_file_range: readers
            // (SEEK_DATA/SEEK_HOLE) look for preallocated extents only in
            // inodes that carry the flag.
            inode.flags |= INODE_PREALLOC;
            inode.nbytes += n;
        }
        if !keep_size && end > inode.size {
            inode.size = end;
        }
        self.fill_holes(0, round_up(inode.size, ss))?;
        inode.transid = self.transid;
        Ok(inode)
    }

    /// Stores already-compressed data as one extent (the kernel's
    /// encoded write): `data` decompresses (with btrfs compression type
    /// `compression`) to `ram_bytes`, of which `[offset, offset +
    /// num_bytes)` is the file's at `off`. The data is checked to
    /// decompress. Where the kernel would not store it encoded (not
    /// aligned, not smaller), it is written decompressed.
    #[allow(clippy::too_many_arguments)]
    pub fn encoded_write(
        &mut self,
        off: u64,
        num_bytes: u64,
        ram_bytes: u64,
        offset: u64,
        compression: u8,
        data: &[u8],
        policy: DataPolicy,
    ) -> Result<InodeItem> {
        let (tree, ino) = (self.tree, self.ino);
        let ss = self.sectorsize() as u64;
        let here = || format!("encoded write of tree {tree} inode {ino} at {off}");
        if ram_bytes > MAX_UNCOMPRESSED || data.len() as u64 > MAX_UNCOMPRESSED {
            return Err(Error::Invalid(format!(
                "{}: {ram_bytes} bytes unencoded, {} encoded (at most {MAX_UNCOMPRESSED})",
                here(),
                data.len()
            )));
        }
        if offset.checked_add(num_bytes).is_none_or(|e| e > ram_bytes) {
            return Err(Error::Invalid(format!(
                "{}: range {offset}+{num_bytes} past the unencoded length {ram_bytes}",
                here()
            )));
        }
        let plain = decompress(compression, data, ram_bytes as usize, ss as u32)
            .map_err(|e| Error::format(here(), e))?;
        let inode = self.inode_of(tree, ino)?;
        let end = off + num_bytes;
        let stored = round_up(data.len() as u64, ss);
        if !off.is_multiple_of(ss)
            || off == 0 && end < ss
            || stored >= round_up(ram_bytes, ss)
            || (!num_bytes.is_multiple_of(ss) && end < inode.size)
            || !policy.csum
        {
            let piece = &plain[offset as usize..(offset + num_bytes) as usize];
            return self.write_file(off, piece, policy);
        }
        let mut inode = inode;
        let num = round_up(num_bytes, ss);
        self.uninline(&mut inode, policy)?;
        let removed = self.drop_extents(off, off + num)?;
        inode.nbytes = inode.nbytes.saturating_sub(removed);
        let (disk, len) = self.write_data_extent(data, true)?;
        self.note_compression(compression);
        self.insert_file_extent(
            off,
            disk,
            len,
            offset,
            num,
            ram_bytes,
            compression,
            false,
            true,
        )?;
        inode.nbytes += num;
        if off > inode.size {
            self.fill_holes(round_up(inode.size, ss), off)?;
        }
        inode.size = inode.size.max(end);
        inode.transid = self.transid;
        Ok(inode)
    }
}
