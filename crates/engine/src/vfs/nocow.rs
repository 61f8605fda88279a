//! NOCOW writeback: data of a NODATACOW file (`chattr +C`, the
//! nodatacow mount option) overwrites its extents in place when that is
//! safe, as the kernel's run_delalloc_nocow / can_nocow_file_extent
//! decide: the extent is a plain one (regular or preallocated, not
//! compressed), nothing else references it (no other file, no snapshot:
//! its generation is newer than the subvolume's last snapshot), its block
//! group is writable, and none of its sectors has a checksum. Otherwise
//! the range is written copy-on-write.
//!
//! The checks are done in two steps, as the third seed does: the file
//! extent items are first copied out of the leaf, then the slow checks
//! (the extent tree, the csum tree) run on the copies, with nothing of
//! the file's leaf held. "Any checksum in this range" stops at the first
//! it finds (the fourth seed; `UBTRFS_CSUM_FULL_SCAN=1` visits them all,
//! for the benchmark). `UBTRFS_NO_NOCOW=1` writes NOCOW files
//! copy-on-write, for the benchmark only.

use super::RwFs;
use crate::data::extent::ExtentKind;
use crate::error::Result;
use crate::fs::InodeId;
use crate::tx::delayed_ref::Backref;

fn env_on(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v != "0")
}

/// NOCOW overwrites switched off (benchmark only).
pub(crate) fn disabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| env_on("UBTRFS_NO_NOCOW"))
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

impl RwFs {
    /// Overwrites `[start, start + data.len())` of NOCOW file `id` in
    /// place if its extents allow; false (nothing written) when the range
    /// must be written copy-on-write.
    pub(crate) fn nocow_write(&mut self, id: InodeId, start: u64, data: &[u8]) -> Result<bool> {
        let ss = self.sectorsize();
        let end = start + (data.len() as u64).div_ceil(ss) * ss;
        let Some(pieces) = self.nocow_pieces(id, start, end)? else {
            return Ok(false);
        };
        // Step three: the writes, and preallocated pieces become written.
        let mut padded;
        let bytes = if (data.len() as u64) < end - start {
            padded = data.to_vec();
            padded.resize((end - start) as usize, 0);
            &padded[..]
        } else {
            data
        };
        for p in &pieces {
            let src = &bytes[(p.start - start) as usize..(p.end - start) as usize];
            self.t.write_logical_data(p.addr(), src)?;
            if p.prealloc {
                self.mark_written(id, p)?;
            }
        }
        Ok(true)
    }

    /// The pieces of NOCOW file `id` over the sector-aligned range
    /// `[start, end)` if every one may be overwritten in place (steps one
    /// and two of [`RwFs::nocow_write`]); None if the range must be
    /// written copy-on-write.
    pub(crate) fn nocow_pieces(
        &mut self,
        id: InodeId,
        start: u64,
        end: u64,
    ) -> Result<Option<Vec<Piece>>> {
        // Step one: the items, copied; the range must be covered whole.
        let mut pieces = Vec::new();
        let mut at = start;
        for (k, e) in self.t.file_extents(id.subvol, id.ino, start, end)? {
            if e.start > at || e.compression != 0 {
                return Ok(None);
            }
            let (disk, disk_len, ext_off, ram_bytes, prealloc) = match e.kind {
                ExtentKind::Regular {
                    disk_bytenr,
                    disk_num_bytes,
                    offset,
                    ram_bytes,
                    ..
                } => (disk_bytenr, disk_num_bytes, offset, ram_bytes, false),
                ExtentKind::Prealloc {
                    disk_bytenr,
                    disk_num_bytes,
                    offset,
                    ..
                } => (disk_bytenr, disk_num_bytes, offset, disk_num_bytes, true),
                _ => return Ok(None),
            };
            if disk == 0 {
                return Ok(None);
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
            at = e.end;
            if at >= end {
                break;
            }
        }
        if at < end {
            return Ok(None);
        }
        // Step two: the slow checks, on the copies.
        let last_snapshot = self.t.root(id.subvol)?.item.last_snapshot;
        for p in &pieces {
            if !self.extent_exclusive(id, p, last_snapshot)? {
                return Ok(None);
            }
            if !self.group_writable(p.disk) {
                return Ok(None);
            }
            let lo = p.addr();
            let hi = lo + (p.end - p.start);
            if self.t.csum_in_range(lo, hi, full_csum_scan())? {
                return Ok(None);
            }
        }
        Ok(Some(pieces))
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
        let mine = Backref::Data {
            root: id.subvol,
            objectid: id.ino,
            offset: p.item_off.wrapping_sub(p.ext_off),
        };
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
        self.t.drop_extents(tree, ino, p.start, p.end)?;
        self.t.insert_file_extent(
            tree,
            ino,
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
