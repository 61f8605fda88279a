//! File data on the mount: buffered writes into the dirty ranges, reads
//! through them, writeback, truncate, fallocate, copy ranges (as clones
//! where aligned) and SEEK_DATA/SEEK_HOLE, as the kernel's file.c and
//! inode.c do them over the page cache (fsync: [`super::fsync`]).

use super::attr::AtimePolicy;
use super::extent_io::InodeDirty;
use super::RwFs;
use crate::data::extent::ExtentKind;
use crate::error::{Error, Result};
use crate::fs::seek::DataMap;
use crate::fs::{InodeId, Stat};
use crate::inode::file::DataPolicy;
use crate::inode::namei::XATTR_COMPRESSION;
use crate::inode::now;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::InodeItem;

/// fallocate(2) modes.
pub const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
pub const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
pub const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

/// Largest file offset (the kernel's MAX_LFS_FILESIZE).
const MAX_FILE_SIZE: u64 = i64::MAX as u64;

fn round_up(v: u64, ss: u64) -> u64 {
    v.div_ceil(ss) * ss
}

impl RwFs {
    fn regular(&self, id: InodeId) -> Result<InodeItem> {
        let i = self.t.inode_of(id.subvol, id.ino)?;
        match i.mode & 0o170000 {
            0o100000 => Ok(i),
            0o040000 => Err(Error::IsDir(format!("inode {}", id.ino))),
            _ => Err(Error::Invalid(format!(
                "inode {} is not a regular file",
                id.ino
            ))),
        }
    }

    /// The file's bytes `[off, off + len)` as they read now: the extents,
    /// under the dirty ranges.
    fn read_view(&self, id: InodeId, off: u64, len: u64) -> Result<Vec<u8>> {
        let mut buf = self.t.read_file(id.subvol, id.ino, off, len)?;
        if let Some(d) = self.ordered.get(&id) {
            d.overlay(off, &mut buf);
        }
        if let Some(d) = self.dirty.get(&id) {
            d.overlay(off, &mut buf);
        }
        Ok(buf)
    }

    /// read(2): up to `len` bytes at `off`, fewer at the end of file.
    pub fn read(&self, id: InodeId, off: u64, len: u32) -> Result<Vec<u8>> {
        Ok(self.read_noting_atime(id, off, len, AtimePolicy::Never)?.0)
    }

    /// [`RwFs::read`], and whether the read moves atime under `atime`
    /// ([`RwFs::atime_due`]), from the same look at the inode item.
    pub fn read_noting_atime(
        &self,
        id: InodeId,
        off: u64,
        len: u32,
        atime: AtimePolicy,
    ) -> Result<(Vec<u8>, bool)> {
        let i = self.regular(id)?;
        let due = atime.needs_update(&Stat::of_inode(id, &i), now());
        if off >= i.size {
            return Ok((Vec::new(), due));
        }
        let n = (len as u64).min(i.size - off);
        Ok((self.read_view(id, off, n)?, due))
    }

    /// Refuses writes the inode's flags forbid.
    fn check_data_writable(&mut self, id: InodeId, append_ok: bool) -> Result<InodeItem> {
        self.check_writable(id)?;
        // The extent and checksum items its writeback adds (the kernel's
        // btrfs_delalloc_reserve_metadata).
        self.reserve_change(false)?;
        let i = self.regular(id)?;
        if i.flags & INODE_IMMUTABLE != 0 {
            return Err(Error::Permission(format!("inode {} is immutable", id.ino)));
        }
        if i.flags & INODE_APPEND != 0 && !append_ok {
            return Err(Error::Permission(format!(
                "inode {} is append-only",
                id.ino
            )));
        }
        Ok(i)
    }

    /// Whether `id` may be opened for writing (not immutable; append-only
    /// files only with O_APPEND).
    pub fn check_open_write(&self, id: InodeId, append: bool) -> Result<()> {
        self.writable(id)?;
        let i = self.t.inode_of(id.subvol, id.ino)?;
        if i.flags & INODE_IMMUTABLE != 0 || (i.flags & INODE_APPEND != 0 && !append) {
            return Err(Error::Permission(format!(
                "inode {} is immutable or append-only",
                id.ino
            )));
        }
        Ok(())
    }

    /// write(2) of `data` at `off`: held as dirty sectors until writeback;
    /// the size and times change now.
    pub fn write(&mut self, id: InodeId, off: u64, data: &[u8]) -> Result<usize> {
        let n = self.write_buffered(id, off, data)?;
        if self.over_dirty_limit() {
            self.writeback_all()?;
        }
        Ok(n)
    }

    /// Dirty bytes held (not yet written back).
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_bytes
    }

    /// Whether more dirty data is held than the mount's limit: the caller
    /// of [`RwFs::write_buffered`] writes everything back.
    pub fn over_dirty_limit(&self) -> bool {
        self.dirty_bytes > self.opts.dirty_limit
    }

    /// write(2) into the dirty ranges, leaving the writeback that passing
    /// the dirty limit calls for ([`RwFs::over_dirty_limit`]) to the
    /// caller (the mount runs it outside its lock, [`super::ordered`]).
    pub fn write_buffered(&mut self, id: InodeId, off: u64, data: &[u8]) -> Result<usize> {
        let mut i = self.check_data_writable(id, true)?;
        if i.flags & INODE_APPEND != 0 && off < i.size {
            return Err(Error::Permission(format!(
                "inode {} is append-only",
                id.ino
            )));
        }
        if data.is_empty() {
            return Ok(0);
        }
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or_else(|| Error::TooLarge(format!("write at {off}")))?;
        let ss = self.sectorsize();
        let (a0, a1) = (off / ss * ss, round_up(end, ss));
        if let Err(e) = self.reserve(a1 - a0) {
            // As the kernel's btrfs_check_nocow_lock: a write its extents
            // take in place needs no data space.
            // The sector of the old end of file, dirtied below for a write
            // past it, must go in place too (the kernel reserves for it in
            // btrfs_truncate_block, or requires its nocow check).
            let eof = i.size / ss * ss;
            let eof_too = off <= i.size
                || i.size.is_multiple_of(ss)
                || self.fits_in_place(id, i.flags, eof, eof + ss)?;
            if !eof_too || !self.fits_in_place(id, i.flags, a0, a1)? {
                return Err(e);
            }
        }
        if off > i.size {
            self.dirty_eof_block(id, i.size)?;
        }
        // A write of whole sectors goes into the dirty range as it is.
        // Other writes are made whole sectors in one buffer, built once
        // and handed over: no zeroed staging copy, no second copy (each a
        // fresh allocation whose pages are faulted in, for every small
        // file a copy writes).
        let sectors = if off == a0 && end == a1 {
            None
        } else {
            Some(self.whole_sectors(id, i.size, off, data)?)
        };
        let d = self.dirty.entry(id).or_default();
        let before = d.bytes();
        match sectors {
            None => d.insert(a0, data),
            Some(buf) => d.insert_owned(a0, buf),
        }
        let after = d.bytes();
        self.dirty_bytes = self.dirty_bytes + after - before;
        if end > i.size {
            // The items back the old size until a writeback.
            self.disk_i_size.entry(id).or_insert(i.size);
        }
        let t = now();
        i.size = i.size.max(end);
        i.mtime = t;
        self.inode_mut(id).put_changed(&mut i, Some(t))?;
        self.bump(id);
        Ok(data.len())
    }

    /// `data` written at `off` into a file of `size` bytes, widened to
    /// whole sectors: partial sectors at the edges read what they hold
    /// now, as the page cache reads a page before a partial write to it
    /// (zeros past the end of file).
    fn whole_sectors(&self, id: InodeId, size: u64, off: u64, data: &[u8]) -> Result<Vec<u8>> {
        let ss = self.sectorsize();
        let end = off + data.len() as u64;
        let (a0, a1) = (off / ss * ss, round_up(end, ss));
        let last = a1 - ss;
        let head = match off > a0 && a0 < size {
            true => Some(self.read_view(id, a0, ss)?),
            false => None,
        };
        let mut buf = Vec::with_capacity((a1 - a0) as usize);
        match &head {
            Some(h) => buf.extend_from_slice(&h[..(off - a0) as usize]),
            None => buf.resize((off - a0) as usize, 0),
        }
        buf.extend_from_slice(data);
        if end < a1 {
            let read;
            let tail = if last == a0 && off > a0 {
                // One sector partial at both edges: the head's read has it.
                head.as_deref()
            } else if last < size {
                read = self.read_view(id, last, ss)?;
                Some(&read[..])
            } else {
                None
            };
            match tail {
                Some(t) => buf.extend_from_slice(&t[(end - last) as usize..]),
                None => buf.resize((a1 - a0) as usize, 0),
            }
        }
        Ok(buf)
    }

    /// Whether writeback would write `[a0, a1)` of `id` (inode flags
    /// `flags`) in place whole (see [`RwFs::write_in_place`]).
    fn fits_in_place(&mut self, id: InodeId, flags: u64, a0: u64, a1: u64) -> Result<bool> {
        let Some(prealloc_only) = super::nocow::in_place_mode(flags) else {
            return Ok(false);
        };
        // Preallocated pieces a writeback in flight writes become written
        // extents at its end, which only a NOCOW file overwrites in place.
        if prealloc_only && self.ordered.get(&id).is_some_and(|d| d.overlaps(a0, a1)) {
            return Ok(false);
        }
        Ok(self
            .stretches(id, a0, a1, prealloc_only)?
            .iter()
            .all(|s| s.piece.is_some()))
    }

    /// Runs `change`, which may take data space at once (a partial
    /// sector rewritten, an inline extent moved out), leaving free the
    /// space the dirty data was counted against
    /// ([`crate::tx::Trans::hold_data_space`]): else the writeback after
    /// it would find no room.
    fn keeping_dirty_space<T>(&mut self, change: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.t.data_kept = self.dirty_bytes;
        let res = change(self);
        self.t.data_kept = 0;
        res
    }

    /// Refuses a write of `len` bytes that could not be given extents
    /// (ENOSPC now rather than a lost writeback later); data chunks are
    /// added now for what is dirty
    /// ([`crate::tx::Trans::hold_data_space`]).
    fn reserve(&mut self, len: u64) -> Result<()> {
        let free = self.statfs().bavail * self.sectorsize();
        if len > free {
            return Err(Error::NoSpace(format!("{len} bytes to write, {free} free")));
        }
        self.t.hold_data_space(self.dirty_bytes + len)
    }

    /// Before the file grows past an end of file inside a sector, that
    /// sector is dirtied with zeros after the end (the kernel's
    /// btrfs_cont_expand / btrfs_truncate_block on a write, truncate,
    /// fallocate or clone past EOF): it becomes data even where it was a
    /// hole or preallocated, as on the kernel's btrfs.
    fn dirty_eof_block(&mut self, id: InodeId, size: u64) -> Result<()> {
        let ss = self.sectorsize();
        if size.is_multiple_of(ss) {
            return Ok(());
        }
        let s = size / ss * ss;
        if let Err(e) = self.reserve(ss) {
            let flags = self.t.inode_of(id.subvol, id.ino)?.flags;
            if !self.fits_in_place(id, flags, s, s + ss)? {
                return Err(e);
            }
        }
        let mut buf = self.read_view(id, s, ss)?;
        buf[(size - s) as usize..].fill(0);
        let d = self.dirty.entry(id).or_default();
        let before = d.bytes();
        d.insert(s, &buf);
        self.dirty_bytes = self.dirty_bytes + d.bytes() - before;
        self.bump(id);
        Ok(())
    }

    /// Drops the dirty bytes of `id` past `size` (zeroing the rest of
    /// the sector that holds it).
    fn truncate_dirty(&mut self, id: InodeId, size: u64) {
        let ss = self.sectorsize();
        if let Some(d) = self.dirty.get_mut(&id) {
            let before = d.bytes();
            d.truncate(size, ss);
            self.dirty_bytes -= before - d.bytes();
            if d.is_empty() {
                self.dirty.remove(&id);
            }
        }
    }

    /// Drops the dirty ranges of `id` (its data is gone).
    pub(crate) fn forget_dirty(&mut self, id: InodeId) {
        self.disk_i_size.remove(&id);
        if let Some(d) = self.dirty.remove(&id) {
            self.dirty_bytes -= d.bytes();
        }
    }

    /// How new data of `inode` is stored: its flags, its compression
    /// property and the mount's compress options.
    pub(crate) fn policy(&mut self, id: InodeId, inode: &InodeItem) -> Result<DataPolicy> {
        let prop = if inode.flags & INODE_COMPRESS != 0 {
            self.t
                .get_xattr(id.subvol, id.ino, XATTR_COMPRESSION)?
                .and_then(|v| match v.split(|&b| b == b':').next() {
                    Some(b"zlib") => Some(COMPRESS_ZLIB),
                    Some(b"lzo") => Some(COMPRESS_LZO),
                    Some(b"zstd") => Some(COMPRESS_ZSTD),
                    _ => None,
                })
        } else {
            None
        };
        let mut p = DataPolicy::of_inode(inode, prop.or(self.opts.compress.map(|c| c.0)));
        let f = inode.flags;
        let cow_summed = f & (INODE_NODATACOW | INODE_NODATASUM) == 0;
        if let Some((algo, level)) = self.opts.compress {
            if cow_summed && (f & INODE_NOCOMPRESS == 0 || self.opts.compress_force) {
                p.compress = Some((prop.unwrap_or(algo), level));
                p.force = self.opts.compress_force;
            }
        }
        Ok(p)
    }

    /// Writes back the dirty ranges of `id`: NOCOW files in place where
    /// their extents allow, everything else copy-on-write to new extents
    /// ([`super::ordered`]'s three steps, back to back).
    pub fn writeback(&mut self, id: InodeId) -> Result<()> {
        let mut o = self.writeback_begin(&[id])?;
        let res = o.write();
        self.writeback_end(o, res)
    }

    /// Writes back `ranges` of `id` (item `inode`, data stored as
    /// `policy` says) now, under the lock: what [`super::ordered`] does not
    /// defer (inline files, or everything with `UBTRFS_NO_ORDERED=1`).
    pub(crate) fn write_back_ranges(
        &mut self,
        id: InodeId,
        inode: &InodeItem,
        policy: DataPolicy,
        ranges: std::collections::BTreeMap<u64, Vec<u8>>,
    ) -> Result<()> {
        let nocow = super::nocow::in_place_mode(inode.flags);
        let mut ranges = ranges.into_iter();
        while let Some((start, buf)) = ranges.next() {
            if let Err(e) = self.write_back_range(id, start, &buf, nocow, policy) {
                // What was not written stays dirty (and readable): the
                // error goes to the caller, and to the next fsync.
                self.redirty(id, std::iter::once((start, buf)).chain(ranges).collect());
                return Err(e);
            }
        }
        // Without no-holes every gap needs its hole item: the size grew
        // at write(2) time, before these extents existed.
        let size = self.t.inode_of(id.subvol, id.ino)?.size;
        let end = round_up(size, self.sectorsize());
        self.inode_mut(id).fill_holes(0, end)?;
        self.disk_i_size.remove(&id);
        Ok(())
    }

    /// Gives one dirty range of `id` its extents: in place where
    /// `in_place` allows (Some(prealloc_only): see
    /// [`RwFs::write_in_place`]), the rest copy-on-write.
    fn write_back_range(
        &mut self,
        id: InodeId,
        start: u64,
        buf: &[u8],
        in_place: Option<bool>,
        policy: DataPolicy,
    ) -> Result<()> {
        let size = self.t.inode_of(id.subvol, id.ino)?.size;
        if start >= size {
            return Ok(());
        }
        let n = (buf.len() as u64).min(size - start) as usize;
        let Some(prealloc_only) = in_place else {
            return self.write_cow(id, start, &buf[..n], policy);
        };
        let cow = self.write_in_place(id, start, &buf[..n], prealloc_only, policy.csum)?;
        if cow.is_empty() {
            self.stats.nocow_in_place += 1;
        } else if !prealloc_only {
            self.stats.nocow_cow += 1;
        }
        for c in cow {
            let lo = (c.start - start) as usize;
            let hi = ((c.end - start) as usize).min(n);
            if lo < hi {
                self.write_cow(id, c.start, &buf[lo..hi], policy)?;
            }
        }
        Ok(())
    }

    /// Writes `data` at `start` of `id` to new extents.
    pub(crate) fn write_cow(
        &mut self,
        id: InodeId,
        start: u64,
        data: &[u8],
        policy: DataPolicy,
    ) -> Result<()> {
        let inode = self.inode_mut(id).write_file(start, data, policy)?;
        self.inode_mut(id).put(&inode)
    }

    /// Writes back every dirty inode.
    pub fn writeback_all(&mut self) -> Result<()> {
        let mut o = self.writeback_all_begin()?;
        let res = o.write();
        self.writeback_all_end(o, res)
    }

    /// truncate(2) / ftruncate(2) to `size` (times are the caller's).
    /// Nothing is written back: dirty data past a smaller size is
    /// dropped, the rest stays dirty.
    pub(crate) fn truncate(&mut self, id: InodeId, size: u64) -> Result<()> {
        let i = self.check_data_writable(id, false)?;
        if size > MAX_FILE_SIZE {
            return Err(Error::TooLarge(format!("truncate to {size}")));
        }
        if size == i.size {
            return Ok(());
        }
        if self.ordered_in_flight > 0 {
            return Err(Error::Invalid(
                "a truncate while a writeback is in flight".into(),
            ));
        }
        if size > i.size {
            self.dirty_eof_block(id, i.size)?;
        }
        let policy = self.policy(id, &i)?;
        let inode = self.keeping_dirty_space(|fs| fs.inode_mut(id).truncate_file(size, policy))?;
        self.inode_mut(id).put(&inode)?;
        if size < i.size {
            // What is dirty past the new size is dropped, never written
            // (the kernel's truncate_pagecache); what is below stays
            // dirty. Only now: had the truncate failed, the old size
            // would still show those bytes.
            self.truncate_dirty(id, size);
            // Its items back no more than the new size.
            if let Some(disk) = self.disk_i_size.get_mut(&id) {
                *disk = (*disk).min(size);
            }
        }
        self.bump(id);
        Ok(())
    }

    /// fallocate(2): mode 0 and KEEP_SIZE preallocate, PUNCH_HOLE (with
    /// KEEP_SIZE) makes holes, ZERO_RANGE zeroes (whole sectors become
    /// preallocated, as the kernel's btrfs_zero_range).
    pub fn fallocate(&mut self, id: InodeId, off: u64, len: u64, mode: i32) -> Result<()> {
        let keep = mode & FALLOC_FL_KEEP_SIZE != 0;
        let known = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0
            || (mode & FALLOC_FL_PUNCH_HOLE != 0 && (!keep || mode & FALLOC_FL_ZERO_RANGE != 0))
        {
            return Err(Error::Unsupported(format!("fallocate mode {mode:#x}")));
        }
        if len == 0 {
            return Err(Error::Invalid("fallocate of 0 bytes".into()));
        }
        let end = off
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or_else(|| Error::TooLarge(format!("fallocate at {off}+{len}")))?;
        let i = self.check_data_writable(id, false)?;
        if mode & FALLOC_FL_PUNCH_HOLE == 0 && end > i.size {
            self.dirty_eof_block(id, i.size)?;
        }
        self.writeback(id)?;
        let policy = self.policy(id, &i)?;
        let (tree, ino) = (id.subvol, id.ino);
        // Partial sectors rewritten leave the dirty data its space.
        let mut inode = self.keeping_dirty_space(|fs| {
            if mode & FALLOC_FL_PUNCH_HOLE != 0 {
                fs.t.inode_mut(tree, ino).punch_hole(off, len, policy)
            } else if mode & FALLOC_FL_ZERO_RANGE != 0 {
                fs.zero_range(id, off, len, keep, policy)
            } else {
                fs.reserve(len)
                    .and_then(|()| fs.t.inode_mut(tree, ino).prealloc(off, len, keep, policy))
            }
        })?;
        let t = now();
        if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 || !keep {
            inode.mtime = t;
        }
        self.t
            .inode_mut(tree, ino)
            .put_changed(&mut inode, Some(t))?;
        self.bump(id);
        Ok(())
    }

    /// What the sector at `at` holds: 0 a hole, 1 preallocated space, 2
    /// written data (btrfs_zero_range_check_range_boundary).
    fn sector_kind(&mut self, id: InodeId, at: u64) -> Result<u8> {
        let ss = self.sectorsize();
        let s = at / ss * ss;
        let exts = self.t.file_extents(id.subvol, id.ino, s, s + ss)?;
        Ok(match exts.iter().find(|(_, e)| e.start <= s && e.end > s) {
            Some((_, e)) if e.is_data() => 2,
            Some((_, e)) if matches!(e.kind, ExtentKind::Prealloc { .. }) => 1,
            _ => 0,
        })
    }

    /// fallocate ZERO_RANGE as the kernel's btrfs_zero_range: a range a
    /// preallocated extent already covers stays as it is; partial edge
    /// sectors holding data are zeroed in place, edge sectors in holes
    /// join the allocation; every extent in the allocated range is
    /// replaced by preallocated space. Growing the file, the gap between
    /// the old end of file and the allocation gets hole items on
    /// filesystems without no-holes (the kernel's btrfs_cont_expand).
    fn zero_range(
        &mut self,
        id: InodeId,
        off: u64,
        len: u64,
        keep: bool,
        policy: DataPolicy,
    ) -> Result<InodeItem> {
        let old = self.t.inode_of(id.subvol, id.ino)?.size;
        let i = self.zero_range_extents(id, off..off + len, keep, policy)?;
        if i.size > old {
            let ss = self.sectorsize();
            self.inode_mut(id)
                .fill_holes(round_up(old, ss), round_up(i.size, ss))?;
        }
        Ok(i)
    }

    fn zero_range_extents(
        &mut self,
        id: InodeId,
        range: std::ops::Range<u64>,
        keep: bool,
        policy: DataPolicy,
    ) -> Result<InodeItem> {
        let (tree, ino) = (id.subvol, id.ino);
        let ss = self.sectorsize();
        let (mut off, end) = (range.start, range.end);
        let size_after = |i: &mut InodeItem| {
            if !keep && end > i.size {
                i.size = end;
            }
        };
        // A preallocated extent at the start: only what lies past it.
        let a0 = off / ss * ss;
        let first = self.t.file_extents(tree, ino, a0, a0 + ss)?;
        if let Some((_, e)) = first.iter().find(|(_, e)| {
            e.start <= a0 && e.end > a0 && matches!(e.kind, ExtentKind::Prealloc { .. })
        }) {
            if e.end >= end {
                let mut i = self.t.inode_of(tree, ino)?;
                size_after(&mut i);
                return Ok(i);
            }
            off = e.end;
        }
        let (mut alloc_start, mut alloc_end);
        if off / ss == (end - 1) / ss {
            let k = self.sector_kind(id, off)?;
            if k == 1 {
                let mut i = self.t.inode_of(tree, ino)?;
                size_after(&mut i);
                return Ok(i);
            }
            if end - off < ss && k == 2 {
                let mut i = self
                    .t
                    .inode_mut(tree, ino)
                    .punch_hole(off, end - off, policy)?;
                size_after(&mut i);
                return Ok(i);
            }
            alloc_start = off / ss * ss;
            alloc_end = alloc_start + ss;
        } else {
            alloc_start = round_up(off, ss);
            alloc_end = end / ss * ss;
            if !off.is_multiple_of(ss) {
                match self.sector_kind(id, off)? {
                    0 => alloc_start = off / ss * ss,
                    2 => {
                        let zeroed = self.t.inode_mut(tree, ino).punch_hole(
                            off,
                            round_up(off, ss) - off,
                            policy,
                        )?;
                        self.t.inode_mut(tree, ino).put(&zeroed)?;
                    }
                    _ => {}
                }
            }
            if !end.is_multiple_of(ss) {
                match self.sector_kind(id, end)? {
                    0 => alloc_end = round_up(end, ss),
                    2 => {
                        let s = end / ss * ss;
                        let zeroed = self.t.inode_mut(tree, ino).punch_hole(s, end - s, policy)?;
                        self.t.inode_mut(tree, ino).put(&zeroed)?;
                    }
                    _ => {}
                }
            }
        }
        let mut i = self.t.inode_of(tree, ino)?;
        if alloc_start < alloc_end {
            self.reserve(alloc_end - alloc_start)?;
            let removed = self
                .t
                .inode_mut(tree, ino)
                .drop_extents(alloc_start, alloc_end)?;
            i.nbytes = i.nbytes.saturating_sub(removed);
            self.t.inode_mut(tree, ino).put(&i)?;
            i = self.t.inode_mut(tree, ino).prealloc(
                alloc_start,
                alloc_end - alloc_start,
                true,
                policy,
            )?;
        }
        size_after(&mut i);
        Ok(i)
    }

    /// copy_file_range(2): shares extents (a clone) where the offsets are
    /// sector aligned (whole sectors, or to the source's end of file: a
    /// shorter count, as the kernel's), else copies through the dirty
    /// ranges. Returns the bytes copied (fewer at the source's end of
    /// file, or the clone's whole sectors).
    pub fn copy_range(
        &mut self,
        src: InodeId,
        src_off: u64,
        dst: InodeId,
        dst_off: u64,
        len: u64,
    ) -> Result<u64> {
        let si = self.regular(src)?;
        let di = self.check_data_writable(dst, false)?;
        if src_off >= si.size {
            return Ok(0);
        }
        let len = len.min(si.size - src_off);
        if dst_off.checked_add(len).is_none_or(|e| e > MAX_FILE_SIZE) {
            return Err(Error::TooLarge(format!("copy to {dst_off}+{len}")));
        }
        let ss = self.sectorsize();
        let overlap = src == dst && src_off < dst_off + len && dst_off < src_off + len;
        // As the kernel's copy_file_range: a clone first, shortened to
        // whole sectors (REMAP_FILE_CAN_SHORTEN) unless it reaches the
        // source's end of file; the caller copies the rest.
        let to_eof = src_off + len == si.size && dst_off + len >= di.size;
        let clone_len = if to_eof { len } else { len / ss * ss };
        let aligned = src_off.is_multiple_of(ss) && dst_off.is_multiple_of(ss) && clone_len > 0;
        // The kernel does not clone between files with and without data
        // checksums (a file partly checksummed fails btrfs check).
        let same_sums = (si.flags ^ di.flags) & INODE_NODATASUM == 0;
        if aligned && !overlap && same_sums {
            if dst_off > di.size {
                self.dirty_eof_block(dst, di.size)?;
            }
            self.writeback(src)?;
            self.writeback(dst)?;
            let policy = self.policy(dst, &di)?;
            let mut inode = self.keeping_dirty_space(|fs| {
                fs.t.clone_range(
                    src.subvol, src.ino, src_off, clone_len, dst.subvol, dst.ino, dst_off, policy,
                )
            })?;
            let t = now();
            inode.mtime = t;
            self.t
                .inode_mut(dst.subvol, dst.ino)
                .put_changed(&mut inode, Some(t))?;
            self.bump(dst);
            return Ok(clone_len);
        }
        // A copy, in pieces that keep memory bounded.
        let mut done = 0;
        while done < len {
            let n = (len - done).min(8 << 20);
            let data = self.read_view(src, src_off + done, n)?;
            self.write(dst, dst_off + done, &data)?;
            done += n;
        }
        Ok(len)
    }

    /// The data map of `id` now: data extents (inline and regular, not
    /// preallocated) and dirty ranges, below the size.
    pub(crate) fn data_map(&self, id: InodeId) -> Result<DataMap> {
        let i = self.regular(id)?;
        let mut parts = Vec::new();
        for (_, e) in self.t.file_extents(id.subvol, id.ino, 0, i.size.max(1))? {
            if matches!(
                e.kind,
                ExtentKind::Regular { .. } | ExtentKind::Inline { .. }
            ) {
                parts.push((e.start, e.end));
            }
        }
        if let Some(d) = self.dirty.get(&id) {
            parts.extend(d.spans());
        }
        if let Some(d) = self.ordered.get(&id) {
            parts.extend(d.spans());
        }
        Ok(DataMap::build(parts, i.size))
    }

    /// The dirty ranges of `id` (tests).
    pub fn dirty_of(&self, id: InodeId) -> Option<&InodeDirty> {
        self.dirty.get(&id)
    }
}
