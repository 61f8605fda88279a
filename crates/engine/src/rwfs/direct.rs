//! Direct (O_DIRECT) overwrites of NOCOW files, written outside the
//! mount's lock: the kernel's btrfs_direct_write into a NOCOW extent
//! (btrfs_dio_iomap_begin, can_nocow_extent) in three steps.
//!
//! 1. [`RwFs::direct_write_begin`], under the lock: the range must be
//!    whole sectors inside the file, with nothing dirty in it, over
//!    extents a NOCOW writeback could overwrite in place (the checks of
//!    [`super::nocow`]) and in mirrored or single block groups; it gives
//!    the device places the bytes go to, and the file's times change.
//! 2. [`DirectWrite::write`], with no lock held: the bytes go to those
//!    places; other direct writes run beside it.
//! 3. [`RwFs::direct_write_end`], under the lock again: preallocated
//!    pieces become written extents (the kernel's ordered-extent
//!    completion, btrfs_mark_extent_written).
//!
//! What a write in flight relies on — its extents stay this file's,
//! unshared and allocated — holds while the mount lets no other change
//! in: the mount waits for [`RwFs::direct_in_flight`] to drop to zero
//! before any request other than reads and direct writes. Anything else
//! (COW files, a write past the end, a RAID5/6 block group, dirty data in
//! the range, an extent that is shared or has checksums) is written as a
//! buffered write is. `UBTRFS_NO_DIRECT_IO=1` sends every write that way
//! (the benchmark's switch).

use super::nocow::Piece;
use super::RwFs;
use crate::error::Result;
use crate::fs::InodeId;
use crate::tx::commit::DataTarget;
use ubtrfs_format::consts::*;

/// Direct writes written as buffered ones (benchmark only).
fn disabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| super::env_on("UBTRFS_NO_DIRECT_IO"))
}

/// A direct write between [`RwFs::direct_write_begin`] and
/// [`RwFs::direct_write_end`].
pub struct DirectWrite {
    id: InodeId,
    len: usize,
    targets: Vec<DataTarget>,
    /// Preallocated pieces, to be marked written at the end.
    prealloc: Vec<Piece>,
}

impl DirectWrite {
    /// Writes `data` (the length given at the beginning) to every copy.
    /// Called without the mount's lock.
    pub fn write(&self, data: &[u8]) -> Result<()> {
        debug_assert_eq!(data.len(), self.len);
        for t in &self.targets {
            t.write(data)?;
        }
        Ok(())
    }
}

impl RwFs {
    /// Starts a direct write of `len` bytes at `off` of `id`, if it can be
    /// one (see the module); None if it must be written as buffered.
    pub fn direct_write_begin(
        &mut self,
        id: InodeId,
        off: u64,
        len: usize,
    ) -> Result<Option<DirectWrite>> {
        if disabled() || super::nocow::disabled() {
            return Ok(None);
        }
        let ss = self.sectorsize();
        let end = off.saturating_add(len as u64);
        if len == 0 || !off.is_multiple_of(ss) || !end.is_multiple_of(ss) {
            return Ok(None);
        }
        // Flags that refuse or restrict writes are the buffered path's to
        // report.
        self.check_writable(id)?;
        let Some(mut i) = self.t.inode(id.subvol, id.ino)? else {
            return Ok(None);
        };
        let refused = INODE_IMMUTABLE | INODE_APPEND;
        if i.mode & 0o170000 != 0o100000
            || i.flags & INODE_NODATACOW == 0
            || i.flags & refused != 0
            || end > i.size
            || self.dirty.get(&id).is_some_and(|d| d.overlaps(off, end))
            || self.ordered.get(&id).is_some_and(|d| d.overlaps(off, end))
        {
            return Ok(None);
        }
        let Some(pieces) = self.nocow_pieces(id, off, end)? else {
            return Ok(None);
        };
        let mut targets = Vec::new();
        for p in &pieces {
            let Some(ts) = self.t.data_targets(p.addr(), p.end - p.start)? else {
                return Ok(None);
            };
            let shift = (p.start - off) as usize;
            targets.extend(ts.into_iter().map(|t| t.shifted(shift)));
        }
        let t = crate::inode::now();
        i.mtime = t;
        self.inode_mut(id).put_changed(&mut i, Some(t))?;
        self.direct_in_flight += 1;
        self.stats.direct_writes += 1;
        self.stats.direct_max_in_flight =
            self.stats.direct_max_in_flight.max(self.direct_in_flight);
        Ok(Some(DirectWrite {
            id,
            len,
            targets,
            prealloc: pieces.into_iter().filter(|p| p.prealloc).collect(),
        }))
    }

    /// Ends a direct write begun by [`RwFs::direct_write_begin`], whether
    /// its bytes were written (`written`) or not: preallocated pieces it
    /// wrote become written extents.
    pub fn direct_write_end(&mut self, w: DirectWrite, written: bool) -> Result<()> {
        self.direct_in_flight -= 1;
        if written {
            for p in &w.prealloc {
                self.mark_written(w.id, p)?;
            }
        }
        self.bump(w.id);
        Ok(())
    }

    /// Direct writes begun and not yet ended: while any is, nothing may
    /// change the extents they write to.
    pub fn direct_in_flight(&self) -> u64 {
        self.direct_in_flight
    }
}
