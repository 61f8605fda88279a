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
    /// Whether any data sector in `[start, end)` has a checksum (in the
    /// csum tree or queued): the kernel's btrfs_lookup_csums_list asked
    /// for any, which stops at the first one found. With `full_scan`
    /// every checksum item of the range is visited first (what a lookup
    /// of the whole list costs; for the benchmark of seed 004).
    pub fn csum_in_range(&mut self, start: u64, end: u64, full_scan: bool) -> Result<bool> {
        let ss = self.sectorsize() as u64;
        let cs = self.info.csum_type.size() as u64;
        let run = &self.csum_run;
        let run_end = run.start + run.sums.len() as u64 / cs * ss;
        let queued = !run.sums.is_empty() && run.start < end && start < run_end;
        if queued && !full_scan {
            return Ok(true);
        }
        let mut found = 0u64;
        // The item before `start` may reach into the range.
        let from = match self.csum_item_at_or_before(start)? {
            Some((k, d)) => {
                if k.offset + d.len() as u64 / cs * ss > start {
                    found += 1;
                }
                k.offset + 1
            }
            _ => start,
        };
        if found > 0 && !full_scan {
            return Ok(true);
        }
        self.scan_csum_items(from, end, |_, _| {
            found += 1;
            full_scan
        })?;
        Ok(found > 0 || queued)
    }

    /// The checksums of data sectors in `[start, end)` (queued ones
    /// written first): runs of consecutive sectors, (first sector, sums),
    /// in order.
    pub fn csums_in(&mut self, start: u64, end: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        self.flush_csums()?;
        self.csums_view(start, end)
    }

    /// [`Trans::csums_in`] for a reader sharing the transaction: the csum
    /// tree's runs in order, then the queued run's part of the range, not
    /// necessarily in order (the queued sectors are new data, which no
    /// item in the tree covers).
    pub fn csums_view(&self, start: u64, end: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        let ss = self.sectorsize() as u64;
        let cs = self.info.csum_type.size() as u64;
        let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut take = |k: &Key, d: &[u8]| {
            let item_end = k.offset + d.len() as u64 / cs * ss;
            let (from, to) = (k.offset.max(start), item_end.min(end));
            if from < to {
                let a = ((from - k.offset) / ss * cs) as usize;
                let b = ((to - k.offset) / ss * cs) as usize;
                match out.last_mut() {
                    Some((s, v)) if *s + v.len() as u64 / cs * ss == from => {
                        v.extend_from_slice(&d[a..b])
                    }
                    _ => out.push((from, d[a..b].to_vec())),
                }
            }
        };
        let from = match self.csum_item_at_or_before(start)? {
            Some((k, d)) => {
                take(&k, &d);
                k.offset + 1
            }
            _ => start,
        };
        let mut rest = Vec::new();
        self.scan_csum_items(from, end, |k, d| {
            rest.push((*k, d.to_vec()));
            true
        })?;
        for (k, d) in rest {
            take(&k, &d);
        }
        let run = &self.csum_run;
        if !run.sums.is_empty() {
            take(
                &Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, run.start),
                &run.sums,
            );
        }
        Ok(out)
    }

    /// The EXTENT_CSUM item at or before sector `at`, when the item there
    /// is one: it may cover `at`.
    fn csum_item_at_or_before(&self, at: u64) -> Result<Option<(Key, Vec<u8>)>> {
        let key = Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, at);
        Ok(self
            .search_last_le(CSUM_TREE_OBJECTID, &key)?
            .filter(|(k, _)| k.objectid == EXTENT_CSUM_OBJECTID && k.item_type == EXTENT_CSUM))
    }

    /// Calls `f` on the EXTENT_CSUM items from sector `from` on that start
    /// before `end`, in order, while it returns true.
    fn scan_csum_items(
        &self,
        from: u64,
        end: u64,
        mut f: impl FnMut(&Key, &[u8]) -> bool,
    ) -> Result<()> {
        let key = Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, from);
        self.scan(CSUM_TREE_OBJECTID, &key, |k, d| {
            k.objectid == EXTENT_CSUM_OBJECTID
                && k.item_type == EXTENT_CSUM
                && k.offset < end
                && f(k, d)
        })
    }

    /// Queues the checksums of `data` written at `logical` (whole sectors).
    pub fn add_data_csums(&mut self, logical: u64, data: &[u8]) -> Result<()> {
        let sums = self
            .info
            .csum_type
            .sector_sums(data, self.sectorsize() as usize);
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
