//! File data: extents written to data block groups, their EXTENT_DATA
//! items and back references, inline extents, and data checksums in the
//! csum tree (the kernel's file-item.c). Checksums of consecutive extents
//! are gathered into one run and written as few, full items.

use crate::alloc::SpaceKind;
use crate::error::{Error, Result};
use crate::tx::delayed_ref::Backref;
use crate::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{FileExtent, FileExtentKind};
use ubtrfs_format::Key;

/// Largest extent the kernel makes (BTRFS_MAX_EXTENT_SIZE).
pub const MAX_EXTENT_SIZE: u64 = 128 << 20;

/// Checksums waiting to be written: a run of consecutive sectors.
#[derive(Debug, Default)]
pub struct CsumRun {
    start: u64,
    sums: Vec<u8>,
}

impl Trans {
    /// Allocates `len` bytes (a multiple of the sector size) of data space.
    pub fn alloc_data(&mut self, len: u64) -> Result<u64> {
        let ss = self.sectorsize() as u64;
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
        let at = self.alloc_data(len as u64)?;
        let padded;
        let bytes = if data.len() == len {
            data
        } else {
            let mut v = data.to_vec();
            v.resize(len, 0);
            padded = v;
            &padded[..]
        };
        self.write_logical(at, bytes)?;
        if csum {
            self.add_data_csums(at, bytes)?;
        }
        Ok((at, len as u64))
    }

    /// Queues the checksums of `data` written at `logical` (whole sectors).
    pub fn add_data_csums(&mut self, logical: u64, data: &[u8]) -> Result<()> {
        let ss = self.sectorsize() as usize;
        let ct = self.info.csum_type;
        let mut sums = Vec::with_capacity(data.len() / ss * ct.size());
        for sector in data.chunks(ss) {
            sums.extend_from_slice(&ct.compute(sector)[..ct.size()]);
        }
        self.add_csum_run(logical, sums)
    }

    /// Queues precomputed checksums of the sectors from `logical` on.
    pub fn add_csum_run(&mut self, logical: u64, sums: Vec<u8>) -> Result<()> {
        let ss = self.sectorsize() as u64;
        let cs = self.info.csum_type.size() as u64;
        let run = &mut self.csum_run;
        if !run.sums.is_empty() && run.start + run.sums.len() as u64 / cs * ss == logical {
            run.sums.extend_from_slice(&sums);
            return Ok(());
        }
        self.flush_csums()?;
        self.csum_run = CsumRun {
            start: logical,
            sums,
        };
        Ok(())
    }

    /// Writes the queued checksums as EXTENT_CSUM items, each as full as a
    /// leaf allows.
    pub fn flush_csums(&mut self) -> Result<bool> {
        let run = std::mem::take(&mut self.csum_run);
        if run.sums.is_empty() {
            return Ok(false);
        }
        let ss = self.sectorsize() as u64;
        let cs = self.info.csum_type.size();
        let per_item = (crate::tree::buf::max_item_data(self.nodesize()) - 2 * 25) / cs;
        for (i, chunk) in run.sums.chunks(per_item * cs).enumerate() {
            let at = run.start + (i * per_item) as u64 * ss;
            self.insert_item(
                CSUM_TREE_OBJECTID,
                Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, at),
                chunk.to_vec(),
            )?;
        }
        Ok(true)
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
        let fe = FileExtent {
            generation: self.transid,
            ram_bytes,
            compression,
            encryption: 0,
            other_encoding: 0,
            kind: FileExtentKind::Extent {
                prealloc,
                disk_bytenr,
                disk_num_bytes: if disk_bytenr == 0 { 0 } else { disk_len },
                offset,
                num_bytes,
            },
        };
        self.insert_item(tree, Key::new(ino, EXTENT_DATA, file_off), fe.to_bytes())?;
        if disk_bytenr != 0 {
            let backref = Backref::Data {
                root: tree,
                objectid: ino,
                offset: file_off - offset,
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
        let fe = FileExtent {
            generation: self.transid,
            ram_bytes,
            compression,
            encryption: 0,
            other_encoding: 0,
            kind: FileExtentKind::Inline { data },
        };
        self.insert_item(tree, Key::new(ino, EXTENT_DATA, 0), fe.to_bytes())
    }
}
