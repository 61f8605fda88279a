//! File data: extents written to data block groups, their EXTENT_DATA
//! items and back references, and inline extents (the kernel's
//! file-item.c); their checksums go to [`crate::tx::csum_tree`]. Space
//! for new data is taken before a file's old extents are dropped
//! ([`InodeMut::take_space`]), so that a full filesystem changes nothing.

use super::file::{round_up, DataPolicy};
use super::InodeMut;
use crate::alloc::SpaceKind;
use crate::error::{Error, Result};
use crate::tx::delayed_ref::Backref;
use crate::tx::Trans;
use ubtrfs_format::compress::compress;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{FileExtent, FileExtentKind};
use ubtrfs_format::Key;

/// Largest extent the kernel makes (BTRFS_MAX_EXTENT_SIZE).
pub const MAX_EXTENT_SIZE: u64 = 128 << 20;

/// Largest uncompressed piece of one compressed extent
/// (BTRFS_MAX_UNCOMPRESSED).
pub const COMPRESSED_CHUNK: u64 = 128 << 10;

/// New data given space and not yet written ([`InodeMut::take_space`]).
pub(super) struct NewPiece {
    /// Where it starts: in the data being written, or (a preallocation)
    /// in the file.
    pub(super) off: u64,
    /// Its bytes in the file.
    pub(super) n: u64,
    /// The space taken, and its length (whole sectors).
    pub(super) disk: u64,
    pub(super) stored_len: u64,
    /// The bytes compressed, and the algorithm, where compression saves
    /// a sector; else the data is stored as it is.
    pub(super) packed: Option<(Vec<u8>, u8)>,
}

impl NewPiece {
    /// `n` bytes of space at `disk`, stored as they are, for `off`.
    pub(super) fn unpacked(off: u64, n: u64, disk: u64) -> NewPiece {
        NewPiece {
            off,
            n,
            disk,
            stored_len: n,
            packed: None,
        }
    }
}

impl Trans {
    /// Allocates `len` bytes (a multiple of the sector size) of data space.
    /// With mixed block groups, data never takes the metadata reserve
    /// ([`Trans::mixed_meta_reserve`]): the commits to come need tree blocks
    /// from the same groups.
    pub fn alloc_data(&mut self, len: u64) -> Result<u64> {
        let ss = self.sectorsize() as u64;
        if self.mixed_groups() && !self.mixed_data_fits(len) {
            return Err(Error::NoSpace(format!(
                "no data space for an extent of {len} bytes (mixed block groups: {} bytes kept for metadata)",
                self.mixed_meta_reserve()
            )));
        }
        if let Some(a) = self.alloc.alloc(SpaceKind::Data, len, ss) {
            return Ok(a);
        }
        self.grow(SpaceKind::Data)?;
        self.alloc
            .alloc(SpaceKind::Data, len, ss)
            .ok_or_else(|| Error::NoSpace(format!("no data space for an extent of {len} bytes")))
    }

    /// Writes `data` to a new data extent (padded with zeros to the
    /// sector size); returns its address and on-disk length. With `csum`
    /// the sectors' checksums are queued for the csum tree.
    pub fn write_data_extent(&mut self, data: &[u8], csum: bool) -> Result<(u64, u64)> {
        let len = data.len().next_multiple_of(self.sectorsize() as usize) as u64;
        let at = self.alloc_data(len)?;
        self.write_data_into(at, data, csum)?;
        Ok((at, len))
    }

    /// Writes `data` (padded with zeros to the sector size) into data
    /// space already taken at `at`; with `csum` the sectors' checksums are
    /// queued for the csum tree.
    pub(crate) fn write_data_into(&mut self, at: u64, data: &[u8], csum: bool) -> Result<()> {
        let ss = self.sectorsize() as usize;
        let len = data.len().next_multiple_of(ss);
        let padded;
        let bytes = if data.len() == len {
            data
        } else {
            let mut v = data.to_vec();
            v.resize(len, 0);
            padded = v;
            &padded[..]
        };
        self.write_logical_data(at, bytes)?;
        if csum {
            let sums = self.info.csum_type.sector_sums(bytes, ss);
            self.add_csum_run(at, sums)?;
        }
        Ok(())
    }

    /// Writes `data` (whole sectors) to a new data extent whose sectors'
    /// checksums, when given, were computed by the caller (mkfs does it on
    /// worker threads); returns its address and length. The written range
    /// is handed to the device's write-back at once.
    pub fn write_data_extent_summed(
        &mut self,
        data: &[u8],
        sums: Option<Vec<u8>>,
    ) -> Result<(u64, u64)> {
        let ss = self.sectorsize() as usize;
        if !data.len().is_multiple_of(ss) {
            return Err(Error::Invalid(format!(
                "data extent of {} bytes is not whole sectors",
                data.len()
            )));
        }
        let at = self.alloc_data(data.len() as u64)?;
        self.write_logical_data(at, data)?;
        if let Some(sums) = sums {
            self.add_csum_run(at, sums)?;
        }
        Ok((at, data.len() as u64))
    }

    /// As [`Trans::write_data_extent_summed`], the first `cloned` bytes
    /// shared from `src` at `src_off` (FICLONERANGE, `--reflink`) and
    /// `tail` (whole sectors: the file's partial last sector, padded)
    /// written after them. `sums` cover both, computed from the data.
    pub fn write_data_extent_cloned(
        &mut self,
        src: &std::fs::File,
        src_off: u64,
        cloned: u64,
        tail: &[u8],
        sums: Option<Vec<u8>>,
    ) -> Result<(u64, u64)> {
        let ss = self.sectorsize() as u64;
        if !cloned.is_multiple_of(ss) || !(tail.len() as u64).is_multiple_of(ss) {
            return Err(Error::Invalid(format!(
                "cloned data extent of {cloned} + {} bytes is not whole sectors",
                tail.len()
            )));
        }
        let len = cloned + tail.len() as u64;
        let at = self.alloc_data(len)?;
        if cloned > 0 {
            self.clone_logical(at, src, src_off, cloned)?;
        }
        if !tail.is_empty() {
            self.write_logical_data(at + cloned, tail)?;
        }
        if let Some(sums) = sums {
            self.add_csum_run(at, sums)?;
        }
        Ok((at, len))
    }

    /// An EXTENT_DATA item of this transaction (neither encrypted nor
    /// otherwise encoded, as the kernel writes them).
    fn file_extent<'a>(
        &self,
        ram_bytes: u64,
        compression: u8,
        kind: FileExtentKind<'a>,
    ) -> FileExtent<'a> {
        FileExtent {
            generation: self.transid,
            ram_bytes,
            compression,
            encryption: 0,
            other_encoding: 0,
            kind,
        }
    }

    /// Returns the space of pieces [`InodeMut::take_space`] took and that were
    /// never written.
    pub(super) fn give_back(&mut self, pieces: &[NewPiece]) {
        for p in pieces {
            self.alloc.free_now(p.disk, p.stored_len);
        }
    }
}

impl InodeMut<'_> {
    /// Maps `[file_off, file_off + num_bytes)` of inode `ino` to `num_bytes`
    /// of the extent at `disk_bytenr` (made in this transaction, `disk_len`
    /// bytes on disk, `ram_bytes` uncompressed), from `offset` into it.
    #[allow(clippy::too_many_arguments)]
    pub fn insert_file_extent(
        &mut self,
        file_off: u64,
        disk_bytenr: u64,
        disk_len: u64,
        offset: u64,
        num_bytes: u64,
        ram_bytes: u64,
        compression: u8,
        prealloc: bool,
        new_extent: bool,
    ) -> Result<()> {
        let (tree, ino) = (self.tree, self.ino);
        let kind = FileExtentKind::Extent {
            prealloc,
            disk_bytenr,
            disk_num_bytes: if disk_bytenr == 0 { 0 } else { disk_len },
            offset,
            num_bytes,
        };
        let fe = self.file_extent(ram_bytes, compression, kind);
        self.insert_item(tree, Key::new(ino, EXTENT_DATA, file_off), fe.to_bytes())?;
        if disk_bytenr != 0 {
            let backref = Backref::file_extent(tree, ino, file_off, offset);
            self.add_data_ref(disk_bytenr, disk_len, backref, new_extent);
        }
        Ok(())
    }

    /// Stores `data` in the EXTENT_DATA item itself at file offset 0
    /// (`ram_bytes` is the uncompressed length).
    pub fn insert_inline_extent(
        &mut self,
        data: &[u8],
        ram_bytes: u64,
        compression: u8,
    ) -> Result<()> {
        let (tree, ino) = (self.tree, self.ino);
        let fe = self.file_extent(ram_bytes, compression, FileExtentKind::Inline { data });
        self.insert_item(tree, Key::new(ino, EXTENT_DATA, 0), fe.to_bytes())
    }

    /// Takes data space for `buf` (whole sectors) in pieces of at most the
    /// largest extent (halved where no block group has room for a whole
    /// one), compressed where the policy says and it saves a sector.
    /// Nothing is written yet; on failure nothing is taken. The space
    /// the mount's dirty data was counted against stays free
    /// ([`Trans::data_kept`]).
    pub(super) fn take_space(&mut self, buf: &[u8], policy: DataPolicy) -> Result<Vec<NewPiece>> {
        let (tree, ino) = (self.tree, self.ino);
        let kept = self.data_kept;
        if kept > 0 {
            self.hold_data_space(kept + buf.len() as u64)?;
        }
        let ss = self.sectorsize() as u64;
        let policy = policy.for_range(buf);
        let mut step = if policy.compress.is_some() {
            COMPRESSED_CHUNK
        } else {
            MAX_EXTENT_SIZE
        } as usize;
        let mut pieces: Vec<NewPiece> = Vec::new();
        let mut off = 0usize;
        while off < buf.len() {
            let piece = &buf[off..buf.len().min(off + step)];
            let n = piece.len() as u64;
            let packed = match policy.compression_for(piece) {
                Some((algo, level)) => match compress(algo, level, piece, ss as u32) {
                    Ok(c) => c
                        .filter(|c| round_up(c.len() as u64, ss) < n)
                        .map(|c| (c, algo)),
                    Err(e) => {
                        self.give_back(&pieces);
                        return Err(Error::format(format!("tree {tree} inode {ino}"), e));
                    }
                },
                None => None,
            };
            let stored_len = match &packed {
                Some((c, _)) => round_up(c.len() as u64, ss),
                None => n,
            };
            let disk = match self.alloc_data(stored_len) {
                Ok(d) => d,
                Err(Error::NoSpace(_)) if n > ss => {
                    step = (piece.len() / 2).div_ceil(ss as usize) * ss as usize;
                    continue;
                }
                Err(e) => {
                    self.give_back(&pieces);
                    return Err(e);
                }
            };
            pieces.push(NewPiece {
                packed,
                stored_len,
                ..NewPiece::unpacked(off as u64, n, disk)
            });
            off += piece.len();
        }
        Ok(pieces)
    }
}
