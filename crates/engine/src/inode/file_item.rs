//! File data: extents written to data block groups, their EXTENT_DATA
//! items and back references, and inline extents (the kernel's
//! file-item.c); their checksums go to [`crate::tx::csum_tree`].

use crate::alloc::SpaceKind;
use crate::error::{Error, Result};
use crate::tx::delayed_ref::Backref;
use crate::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{FileExtent, FileExtentKind};
use ubtrfs_format::Key;

/// Largest extent the kernel makes (BTRFS_MAX_EXTENT_SIZE).
pub const MAX_EXTENT_SIZE: u64 = 128 << 20;

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
        let sums = csum.then(|| self.info.csum_type.sector_sums(bytes, ss));
        self.write_data_extent_summed(bytes, sums)
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

    /// Maps `[file_off, file_off + num_bytes)` of inode `ino` to `num_bytes`
    /// of the extent at `disk_bytenr` (made in this transaction, `disk_len`
    /// bytes on disk, `ram_bytes` uncompressed), from `offset` into it.
    #[allow(clippy::too_many_arguments)]
    pub fn insert_file_extent(
        &mut self,
        tree: u64,
        ino: u64,
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
            let backref = Backref::Data {
                root: tree,
                objectid: ino,
                offset: file_off.wrapping_sub(offset),
            };
            self.add_data_ref(disk_bytenr, disk_len, backref, new_extent);
        }
        Ok(())
    }

    /// Stores `data` in the EXTENT_DATA item itself at file offset 0
    /// (`ram_bytes` is the uncompressed length).
    pub fn insert_inline_extent(
        &mut self,
        tree: u64,
        ino: u64,
        data: &[u8],
        ram_bytes: u64,
        compression: u8,
    ) -> Result<()> {
        let fe = self.file_extent(ram_bytes, compression, FileExtentKind::Inline { data });
        self.insert_item(tree, Key::new(ino, EXTENT_DATA, 0), fe.to_bytes())
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
}
