//! NOCOW writeback: data of a NODATACOW file (`chattr +C`, the
//! nodatacow mount option) overwrites its extents in place when that is
//! safe, as the kernel's run_delalloc_nocow / can_nocow_file_extent
//! decide: the extent is a plain one (regular or preallocated, not
//! compressed), nothing else references it (no other file, no snapshot:
//! its generation is newer than the subvolume's last snapshot), its block
//! group is writable, and none of its sectors has a checksum. Otherwise
//! the range is written copy-on-write. A COW file's preallocated extents
//! (fallocate) are written in place the same way, with checksums, as the
//! kernel does for an inode with BTRFS_INODE_PREALLOC. Extent by extent,
//! as the kernel: what cannot go in place is written copy-on-write.
//!
//! The checks are done in two steps, as the third seed does: the file
//! extent items are first copied out of the leaf, then the slow checks
//! (the extent tree, the csum tree) run on the copies, with nothing of
//! the file's leaf held. "Any checksum in this range" stops at the first
//! it finds (the fourth seed; `UBTRFS_CSUM_FULL_SCAN=1` visits them all,
//! for the benchmark). `UBTRFS_NO_NOCOW=1` writes NOCOW files
//! copy-on-write, for the benchmark only.

use super::env_on;
use super::RwFs;
use crate::data::extent::ExtentKind;
use crate::error::Result;
use crate::fs::InodeId;
use crate::tx::delayed_ref::Backref;
use ubtrfs_format::consts::{INODE_NODATACOW, INODE_PREALLOC};

/// NOCOW overwrites switched off (benchmark only).
pub(crate) fn disabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| env_on("UBTRFS_NO_NOCOW"))
}

/// How writeback may write an inode with flags `flags` in place, as the
/// kernel's should_nocow: Some(false) a NOCOW file (any plain extent),
/// Some(true) a file fallocate gave preallocated extents (those only),
/// None copy-on-write (also with the benchmark's switch off).
pub(crate) fn in_place_mode(flags: u64) -> Option<bool> {
    if disabled() {
        None
    } else if flags & INODE_NODATACOW != 0 {
        Some(false)
    } else if flags & INODE_PREALLOC != 0 {
        Some(true)
    } else {
        None
    }
}

fn full_csum_scan() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| env_on("UBTRFS_CSUM_FULL_SCAN"))
}

/// A piece of the file over one extent, copied out of its item.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece {
    /// File range.
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// The item's file offset and its extent's offset, address, length.
    item_off: u64,
    ext_off: u64,
    disk: u64,
    disk_len: u64,
    ram_bytes: u64,
    pub(crate) prealloc: bool,
}

impl Piece {
    /// The logical address of the piece's first byte.
    pub(crate) fn addr(&self) -> u64 {
        self.disk + self.ext_off + (self.start - self.item_off)
    }
}

/// A stretch of a range being written back: in place over `piece`, or
/// copy-on-write (None).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stretch {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) piece: Option<Piece>,
}

impl RwFs {
    /// Writes `[start, start + data.len())` of file `id` back where its
    /// extents allow in place (NOCOW files; with `prealloc_only`, a COW
    /// file's preallocated extents, as the kernel's run_delalloc_nocow
    /// for an inode with BTRFS_INODE_PREALLOC: a write into fallocated
    /// space needs no new space), adding checksums when `csum`. Extent by
    /// extent, as the kernel: returns the stretches left to write
    /// copy-on-write.
    pub(crate) fn write_in_place(
        &mut self,
        id: InodeId,
        start: u64,
        data: &[u8],
        prealloc_only: bool,
        csum: bool,
    ) -> Result<Vec<Stretch>> {
        let ss = self.sectorsize();
        let end = start + (data.len() as u64).div_ceil(ss) * ss;
        let stretches = self.stretches(id, start, end, prealloc_only)?;
        if stretches.iter().all(|s| s.piece.is_none()) {
            return Ok(stretches);
        }
        // Step three: the writes, and preallocated pieces become written.
        let mut padded;
        let bytes = if (data.len() as u64) < end - start {
            padded = data.to_vec();
            padded.resize((end - start) as usize, 0);
            &padded[..]
        } else {
            data
        };
        let mut cow = Vec::new();
        for s in stretches {
            let Some(p) = s.piece else {
                cow.push(s);
                continue;
            };
            let src = &bytes[(p.start - start) as usize..(p.end - start) as usize];
            self.t.write_logical_data(p.addr(), src)?;
            if csum {
                self.t.add_data_csums(p.addr(), src)?;
            }
            if p.prealloc {
                self.mark_written(id, &p)?;
            }
        }
        Ok(cow)
    }

    /// The pieces of NOCOW file `id` over the sector-aligned range
    /// `[start, end)` if every one may be overwritten in place (steps one
    /// and two of [`RwFs::write_in_place`]); None if the range must be
    /// written copy-on-write.
    pub(crate) fn nocow_pieces(
        &mut self,
        id: InodeId,
        start: u64,
        end: u64,
    ) -> Result<Option<Vec<Piece>>> {
        let stretches = self.stretches(id, start, end, false)?;
        Ok(stretches.iter().map(|s| s.piece).collect())
    }

    /// `[start, end)` of `id` (sector-aligned) in stretches: each extent
    /// that may be overwritten in place is one with its piece, what lies
    /// between them copy-on-write stretches.
    ///
    /// Step one copies the file extent items out of the leaf; step two
    /// runs the slow checks (the extent tree, the csum tree) on the
    /// copies, with nothing of the file's leaf held (seed 003).
    pub(crate) fn stretches(
        &mut self,
        id: InodeId,
        start: u64,
        end: u64,
        prealloc_only: bool,
    ) -> Result<Vec<Stretch>> {
        // Step one: the items, copied.
        let mut pieces = Vec::new();
        for (k, e) in self.t.file_extents(id.subvol, id.ino, start, end)? {
            if e.end <= start || e.start >= end || e.compression != 0 {
                continue;
            }
            let (disk, disk_len, ext_off, ram_bytes, prealloc) = match e.kind {
                ExtentKind::Regular {
                    disk_bytenr,
                    disk_num_bytes,
                    offset,
                    ram_bytes,
                    ..
                } if !prealloc_only => (disk_bytenr, disk_num_bytes, offset, ram_bytes, false),
                ExtentKind::Prealloc {
                    disk_bytenr,
                    disk_num_bytes,
                    offset,
                    ..
                } => (disk_bytenr, disk_num_bytes, offset, disk_num_bytes, true),
                _ => continue,
            };
            if disk == 0 {
                continue;
            }
            pieces.push(Piece {
                start: e.start.max(start),
                end: e.end.min(end),
                item_off: k.offset,
                ext_off,
                disk,
                disk_len,
                ram_bytes,
                prealloc,
            });
        }
        // Step two: the slow checks, on the copies.
        let last_snapshot = self.t.root(id.subvol)?.item.last_snapshot;
        let mut ok = Vec::new();
        for p in pieces {
            if !self.extent_exclusive(id, &p, last_snapshot)? || !self.group_writable(p.disk) {
                continue;
            }
            let lo = p.addr();
            let hi = lo + (p.end - p.start);
            if self.t.csum_in_range(lo, hi, full_csum_scan())? {
                continue;
            }
            ok.push(p);
        }
        let mut out = Vec::new();
        let mut at = start;
        for p in ok {
            if p.start > at {
                out.push(Stretch {
                    start: at,
                    end: p.start,
                    piece: None,
                });
            }
            at = p.end;
            out.push(Stretch {
                start: p.start,
                end: p.end,
                piece: Some(p),
            });
        }
        if at < end {
            out.push(Stretch {
                start: at,
                end,
                piece: None,
            });
        }
        Ok(out)
    }

    /// Whether `p`'s extent is referenced by this file's extent items
    /// alone, and not through a snapshot (the kernel's
    /// btrfs_cross_ref_exist).
    fn extent_exclusive(&mut self, id: InodeId, p: &Piece, last_snapshot: u64) -> Result<bool> {
        let Some((generation, owners)) = self.t.data_extent_owners(p.disk, p.disk_len)? else {
            return Ok(false);
        };
        if generation <= last_snapshot {
            return Ok(false);
        }
        let mine = Backref::file_extent(id.subvol, id.ino, p.item_off, p.ext_off);
        Ok(owners.len() == 1 && owners.contains_key(&mine))
    }

    /// Whether the block group of `addr` takes writes (the kernel refuses
    /// NOCOW into read-only groups, which balance and scrub make).
    fn group_writable(&mut self, addr: u64) -> bool {
        self.t.alloc.group_of(addr).is_some()
    }

    /// Turns the preallocated piece `p` into written data (the kernel's
    /// btrfs_mark_extent_written): its item is replaced by a regular one
    /// over the same extent; the parts around it stay preallocated.
    pub(crate) fn mark_written(&mut self, id: InodeId, p: &Piece) -> Result<()> {
        let (tree, ino) = (id.subvol, id.ino);
        self.t.inode_mut(tree, ino).drop_extents(p.start, p.end)?;
        self.t.inode_mut(tree, ino).insert_file_extent(
            p.start,
            p.disk,
            p.disk_len,
            p.ext_off + (p.start - p.item_off),
            p.end - p.start,
            p.ram_bytes,
            0,
            false,
            false,
        )
    }
}
