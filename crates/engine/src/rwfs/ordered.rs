//! Writeback whose checksums and device writes run outside the mount's
//! lock: the kernel's ordered extents (inode.c cow_file_range, then
//! btrfs_finish_ordered_io once the bio completes), in three steps.
//!
//! 1. [`RwFs::writeback_begin`], under the lock: the dirty ranges of the
//!    inodes move to the in-flight ranges (reads still see them there),
//!    and each range's extents are planned: NOCOW and preallocated
//!    extents to overwrite in place (the checks of [`super::nocow`]),
//!    new data extents allocated for the rest; the devices' places are
//!    found (new extents of compressed files are allocated whole, one per
//!    128 KiB, as if they would not compress). What cannot wait is
//!    written now, as before: inline files, RAID5/6 block groups.
//! 2. [`Ordered::write`], with no lock held: data compressed (kept where
//!    it saves a sector), checksums computed, bytes written to every copy.
//!    Readers go on meanwhile.
//! 3. [`RwFs::writeback_end`], under the lock again: the new extents'
//!    items replace the old extents (a compressed one gives back the
//!    allocated space its compressed bytes did not take), preallocated
//!    extents written in place become written ones, the checksums go to
//!    the csum tree, the in-flight ranges go away. If step 2 failed, the new extents are
//!    freed and the bytes are dirty again (under anything written since),
//!    and the error is kept for the next fsync.
//!
//! What the flight relies on — the files' extents as step 1 saw them
//! (those overwritten in place unshared), no commit while allocated
//! extents have no items — holds while the mount lets only reads, direct
//! writes outside the flight's ranges and buffered writes in
//! ([`RwFs::in_flight`]; buffered writes add dirty ranges over the
//! flight's, which the end leaves dirty).
//! [`RwFs::writeback`] runs the three steps back to back.
//! `UBTRFS_NO_ORDERED=1` writes everything in step 1 (the benchmark's
//! switch).

use super::extent_io::InodeDirty;
use super::nocow::Piece;
use super::RwFs;
use crate::error::{Error, Result};
use crate::fs::InodeId;
use crate::inode::file::DataPolicy;
use crate::inode::file_item::MAX_EXTENT_SIZE;
use crate::tx::commit::DataTarget;
use std::collections::BTreeMap;
use std::sync::Arc;
use ubtrfs_format::checksum::CsumType;
use ubtrfs_format::consts::COMPRESS_NONE;
use ubtrfs_format::items::InodeItem;

/// Largest uncompressed piece of one compressed extent.
const COMPRESSED_CHUNK: usize = crate::inode::file_item::COMPRESSED_CHUNK as usize;

/// Everything written under the lock (benchmark only).
fn disabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| super::env_on("UBTRFS_NO_ORDERED"))
}

/// A writeback between [`RwFs::writeback_begin`] and
/// [`RwFs::writeback_end`].
pub struct Ordered {
    ranges: Vec<OrderedRange>,
    csum_type: CsumType,
    sectorsize: usize,
}

/// One dirty range on its way to new extents.
struct OrderedRange {
    id: InodeId,
    start: u64,
    /// The range's bytes (readers see them until the end).
    buf: Arc<Vec<u8>>,
    /// Bytes written: whole sectors up to the end of file.
    len: usize,
    /// Checksums, and compression of new extents.
    policy: DataPolicy,
    extents: Vec<OrderedExtent>,
}

/// Where part of a range goes.
enum Place {
    /// A data extent allocated for it.
    New,
    /// An extent of the file overwritten in place ([`super::nocow`]).
    InPlace(Piece),
}

/// Part of a range on its way to the disk.
struct OrderedExtent {
    /// Its bytes within the range's buffer.
    from: usize,
    len: usize,
    /// The logical address of its first byte.
    disk: u64,
    place: Place,
    /// Where its bytes go; None once written (under the lock).
    targets: Option<Vec<DataTarget>>,
    sums: Option<Vec<u8>>,
    /// Compressed (algorithm), its bytes on disk: set by the write.
    packed: Option<(u8, usize)>,
    /// Its file extent item is in the tree (the end got that far), or it
    /// was written in place (nothing of it is freed on failure).
    inserted: bool,
}

impl Ordered {
    /// Bytes to write outside the lock.
    pub fn bytes(&self) -> u64 {
        self.ranges
            .iter()
            .flat_map(|r| &r.extents)
            .filter(|e| e.targets.is_some())
            .map(|e| e.len as u64)
            .sum()
    }

    /// Computes the checksums and writes the bytes to every copy. Called
    /// without the mount's lock.
    pub fn write(&mut self) -> Result<()> {
        let (ct, ss) = (self.csum_type, self.sectorsize);
        for r in &mut self.ranges {
            for e in &mut r.extents {
                // Those written under the lock (RAID5/6 rows) were sealed
                // then.
                let Some(targets) = e.targets.take() else {
                    continue;
                };
                let data = &r.buf[e.from..e.from + e.len];
                let packed = e.seal(data, &r.policy, ct, ss, r.id.ino)?;
                let data = packed.as_deref().unwrap_or(data);
                for t in &targets {
                    t.write_prefix(data)?;
                }
                e.targets = Some(targets);
            }
        }
        Ok(())
    }
}

impl OrderedExtent {
    /// Compresses `data`, this extent's bytes, if the policy asks, the
    /// data looks worth it ([`DataPolicy::compression_for`]) and it saves
    /// a sector (new extents only), and computes the checksums of what
    /// goes to disk when the policy asks; returns the compressed bytes
    /// (zero-padded to whole sectors), None when `data` goes as it is.
    fn seal(
        &mut self,
        data: &[u8],
        policy: &DataPolicy,
        ct: CsumType,
        ss: usize,
        ino: u64,
    ) -> Result<Option<Vec<u8>>> {
        let packed = match (policy.compression_for(data), &self.place) {
            (Some((algo, level)), Place::New) => {
                ubtrfs_format::compress::compress(algo, level, data, ss as u32)
                    .map_err(|err| Error::format(format!("inode {ino}"), err))?
                    .filter(|c| c.len().next_multiple_of(ss) < data.len())
                    .map(|mut c| {
                        c.resize(c.len().next_multiple_of(ss), 0);
                        self.packed = Some((algo, c.len()));
                        c
                    })
            }
            _ => None,
        };
        if policy.csum {
            self.sums = Some(ct.sector_sums(packed.as_deref().unwrap_or(data), ss));
        }
        Ok(packed)
    }
}

impl RwFs {
    /// Begins the writeback of every dirty inode (see the module); a
    /// failure is kept for the next fsync, as [`RwFs::writeback_all_end`]
    /// keeps it.
    pub fn writeback_all_begin(&mut self) -> Result<Ordered> {
        let ids: Vec<InodeId> = self.dirty.keys().copied().collect();
        self.writeback_begin(&ids)
            .inspect_err(|e| self.note_wb_error(e))
    }

    /// Begins the writeback of the dirty ranges of `ids` (see the
    /// module). On error nothing is in flight: what was begun went back.
    pub fn writeback_begin(&mut self, ids: &[InodeId]) -> Result<Ordered> {
        if self.ordered_in_flight > 0 {
            return Err(Error::Invalid(
                "a writeback while another is in flight".into(),
            ));
        }
        let mut o = Ordered {
            ranges: Vec::new(),
            csum_type: self.t.info.csum_type,
            sectorsize: self.sectorsize() as usize,
        };
        self.ordered_in_flight += 1;
        for &id in ids {
            if let Err(e) = self.begin_inode(id, &mut o) {
                return Err(self.writeback_end(o, Err(e)).unwrap_err());
            }
        }
        if !o.ranges.is_empty() {
            self.stats.ordered_writebacks += 1;
            self.stats.ordered_bytes += o.bytes();
        }
        Ok(o)
    }

    fn begin_inode(&mut self, id: InodeId, o: &mut Ordered) -> Result<()> {
        if !self.dirty.contains_key(&id) {
            return Ok(());
        }
        // Read before the ranges are taken: a failed read keeps them.
        let inode = self.t.inode(id.subvol, id.ino)?;
        let Some(mut d) = self.dirty.remove(&id) else {
            return Ok(());
        };
        self.dirty_bytes -= d.bytes();
        let ranges = d.take();
        self.stats.writebacks += 1;
        let Some(inode) = inode else {
            return Ok(());
        };
        let ss = self.sectorsize();
        let (policy, deferred) = match self.how_to_write_back(id, &inode) {
            Ok(how) => how,
            Err(e) => {
                self.redirty(id, ranges);
                return Err(e);
            }
        };
        if !deferred {
            return self.write_back_ranges(id, &inode, policy, ranges);
        }
        let in_place = super::nocow::in_place_mode(inode.flags);
        let size = inode.size;
        let mut flying = BTreeMap::new();
        let mut res = Ok(());
        let mut rest = BTreeMap::new();
        for (start, mut buf) in ranges {
            if start >= size {
                continue;
            }
            if res.is_err() {
                rest.insert(start, buf);
                continue;
            }
            let n = (buf.len() as u64).min(size - start) as usize;
            let len = n.next_multiple_of(ss as usize);
            // The last sector's bytes past the end of file are zeros on
            // disk, as the page cache writes them.
            buf[n..len].fill(0);
            let buf = Arc::new(buf);
            flying.insert(start, buf.clone());
            let mut r = OrderedRange {
                id,
                start,
                // Data that does not look compressible goes in large
                // plain extents (a look at its first 128 KiB, here).
                policy: policy.for_range(&buf[..len]),
                buf,
                len,
                extents: Vec::new(),
            };
            res = self.plan(&mut r, in_place);
            o.ranges.push(r);
        }
        if !flying.is_empty() {
            self.ordered.insert(id, InodeDirty::from_ranges(flying));
        }
        if !rest.is_empty() {
            self.redirty(id, rest);
        }
        res
    }

    /// How `id`'s new data is stored, and whether its bytes can be written
    /// in the flight (not for inline files, which are written whole under
    /// the lock, nor with the benchmark's switch).
    fn how_to_write_back(&mut self, id: InodeId, inode: &InodeItem) -> Result<(DataPolicy, bool)> {
        let policy = self.policy(id, inode)?;
        let deferred =
            inode.size >= self.sectorsize() && !disabled() && !self.inode_mut(id).has_inline()?;
        Ok((policy, deferred))
    }

    /// Plans where `r` goes: in place where `in_place` allows
    /// (Some(prealloc_only), see [`RwFs::write_in_place`]), new extents
    /// for the rest.
    fn plan(&mut self, r: &mut OrderedRange, in_place: Option<bool>) -> Result<()> {
        let Some(prealloc_only) = in_place else {
            return self.allocate(r, 0, r.len);
        };
        let start = r.start;
        let stretches = self.stretches(r.id, start, start + r.len as u64, prealloc_only)?;
        if stretches.iter().all(|s| s.piece.is_some()) {
            self.stats.nocow_in_place += 1;
        } else if !prealloc_only {
            self.stats.nocow_cow += 1;
        }
        for st in stretches {
            let (from, to) = ((st.start - start) as usize, (st.end - start) as usize);
            match st.piece {
                Some(p) => self.add_extent(r, from, to - from, p.addr(), Place::InPlace(p))?,
                None => self.allocate(r, from, to)?,
            }
        }
        Ok(())
    }

    /// Gives `[from, to)` of `r` new data extents (halved where no block
    /// group has room for a whole one, as [`crate::tx::Trans`]'s writes
    /// do).
    fn allocate(&mut self, r: &mut OrderedRange, from: usize, to: usize) -> Result<()> {
        let ss = self.sectorsize() as usize;
        let mut step = if r.policy.compress.is_some() {
            COMPRESSED_CHUNK
        } else {
            MAX_EXTENT_SIZE as usize
        };
        let mut at = from;
        while at < to {
            let len = step.min(to - at);
            let disk = match self.t.alloc_data(len as u64) {
                Ok(d) => d,
                Err(Error::NoSpace(_)) if len > ss => {
                    step = (len / 2).div_ceil(ss) * ss;
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.add_extent(r, at, len, disk, Place::New)?;
            at += len;
        }
        Ok(())
    }

    /// Adds `len` bytes of `r` from `from`, going to logical `disk`, with
    /// the devices' places (RAID5/6 rows, written with their parity, are
    /// written now).
    fn add_extent(
        &mut self,
        r: &mut OrderedRange,
        from: usize,
        len: usize,
        disk: u64,
        place: Place,
    ) -> Result<()> {
        let mut e = OrderedExtent {
            from,
            len,
            disk,
            place,
            targets: None,
            sums: None,
            packed: None,
            inserted: false,
        };
        let res = match self.t.data_targets(disk, len as u64) {
            Ok(Some(ts)) => {
                e.targets = Some(ts);
                Ok(())
            }
            // Parity rows are written with their parity, here: sealed
            // (compressed, summed) now.
            Ok(None) => {
                let data = &r.buf[from..from + len];
                let (ct, ss) = (self.t.info.csum_type, self.sectorsize() as usize);
                e.seal(data, &r.policy, ct, ss, r.id.ino)
                    .and_then(|packed| {
                        self.t
                            .write_logical_data(disk, packed.as_deref().unwrap_or(data))
                    })
            }
            Err(err) => Err(err),
        };
        r.extents.push(e);
        res
    }

    /// Ends a writeback begun by [`RwFs::writeback_begin`], whose bytes
    /// were written (`res` Ok) or not. Returns the first error.
    /// [`RwFs::writeback_all_end`] also keeps it for the next fsync.
    pub fn writeback_end(&mut self, mut o: Ordered, res: Result<()>) -> Result<()> {
        self.ordered_in_flight -= 1;
        for r in &o.ranges {
            self.ordered.remove(&r.id);
        }
        let res = res.and_then(|()| self.finish_ranges(&mut o.ranges));
        let Err(e) = res else {
            return Ok(());
        };
        // What has no item yet is freed; its bytes are dirty again.
        for r in o.ranges {
            for x in &r.extents {
                if let (Place::New, false) = (&x.place, x.inserted) {
                    self.t.alloc.free_now(x.disk, x.len as u64);
                }
            }
            let buf = Arc::try_unwrap(r.buf).unwrap_or_else(|b| (*b).clone());
            self.redirty(r.id, BTreeMap::from([(r.start, buf)]));
        }
        Err(e)
    }

    /// Step 3 for every range, inode by inode; the ranges whose items
    /// are all in are taken out of `ranges`.
    fn finish_ranges(&mut self, ranges: &mut Vec<OrderedRange>) -> Result<()> {
        while let Some(first) = ranges.first() {
            let id = first.id;
            let n = ranges.iter().take_while(|r| r.id == id).count();
            let mut inode = self.t.inode_of(id.subvol, id.ino)?;
            let res = self.finish_inode(id, &mut inode, &mut ranges[..n]);
            // The inode item keeps what went in (nbytes), even when not
            // all did: a failed range is dirty again, and its next
            // writeback drops what this one inserted.
            inode.transid = self.t.transid;
            let put = self.inode_mut(id).put(&inode);
            self.bump(id);
            res?;
            put?;
            // Its items (holes too) reach its size now.
            self.disk_i_size.remove(&id);
            ranges.drain(..n);
        }
        Ok(())
    }

    /// Step 3 for the ranges of one inode (`inode`, its item, changed).
    fn finish_inode(
        &mut self,
        id: InodeId,
        inode: &mut InodeItem,
        ranges: &mut [OrderedRange],
    ) -> Result<()> {
        let (tree, ino) = (id.subvol, id.ino);
        for r in ranges {
            for x in &mut r.extents {
                let (pos, len) = (r.start + x.from as u64, x.len as u64);
                match &x.place {
                    Place::New => {
                        let removed = self.t.inode_mut(tree, ino).drop_extents(pos, pos + len)?;
                        inode.nbytes = inode.nbytes.saturating_sub(removed);
                        let (algo, on_disk) = x
                            .packed
                            .map_or((COMPRESS_NONE, len), |(a, n)| (a, n as u64));
                        self.t.inode_mut(tree, ino).insert_file_extent(
                            pos, x.disk, on_disk, 0, len, len, algo, false, true,
                        )?;
                        if on_disk < len {
                            // What was allocated for the data whole and
                            // its compressed bytes did not take.
                            self.t.alloc.free_now(x.disk + on_disk, len - on_disk);
                            self.t.note_compression(algo);
                        }
                        inode.nbytes += len;
                    }
                    Place::InPlace(p) if p.prealloc => self.mark_written(id, p)?,
                    Place::InPlace(_) => {}
                }
                x.inserted = true;
                if let Some(sums) = x.sums.take() {
                    self.t.add_csum_run(x.disk, sums)?;
                }
            }
        }
        // Without no-holes every gap needs its hole item: the size grew
        // at write(2) time, before these extents existed.
        let ss = self.sectorsize();
        self.t
            .inode_mut(tree, ino)
            .fill_holes(0, inode.size.div_ceil(ss) * ss)
    }

    /// Ends a writeback of every dirty inode: as [`RwFs::writeback_end`],
    /// and a failure is reported at the next fsync too (no write(2) is
    /// left to report it to).
    pub fn writeback_all_end(&mut self, o: Ordered, res: Result<()>) -> Result<()> {
        self.writeback_end(o, res)
            .inspect_err(|e| self.note_wb_error(e))
    }

    /// Keeps a writeback failure for the next fsync: ENOSPC stays ENOSPC
    /// (the kernel's AS_ENOSPC), anything else is EIO.
    pub(crate) fn note_wb_error(&mut self, e: &Error) {
        self.wb_error = Some(match e {
            Error::NoSpace(why) => Error::NoSpace(format!("dirty data writeback: {why}")),
            e => Error::Io {
                path: "dirty data".into(),
                op: "writeback".into(),
                source: std::io::Error::other(e.to_string()),
            },
        });
    }

    /// Puts `ranges` of `id` back among its dirty ranges, under what was
    /// written since.
    pub(crate) fn redirty(&mut self, id: InodeId, ranges: BTreeMap<u64, Vec<u8>>) {
        let d = self.dirty.entry(id).or_default();
        let before = d.bytes();
        let newer = d.take();
        for (s, b) in ranges.into_iter().chain(newer) {
            d.insert(s, &b);
        }
        self.dirty_bytes = self.dirty_bytes + d.bytes() - before;
    }

    /// Writebacks begun and not ended, and direct writes in flight: while
    /// any is, only reads and direct writes may run.
    pub fn in_flight(&self) -> u64 {
        self.direct_in_flight + self.ordered_in_flight
    }
}
