//! The csum tree's items for data written in this transaction (the
//! kernel's btrfs_csum_file_blocks): checksums of consecutive sectors are
//! gathered into one run and written as few, full EXTENT_CSUM items.

use super::Trans;
use crate::error::Result;
use ubtrfs_format::consts::*;
use ubtrfs_format::Key;

/// Checksums waiting to be written: a run of consecutive sectors.
#[derive(Debug, Default)]
pub struct CsumRun {
    start: u64,
    sums: Vec<u8>,
}

impl Trans {
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
}
