//! Delayed allocation: the dirty ranges of each inode, held in memory
//! until writeback (the kernel's extent-io tree with EXTENT_DELALLOC bits,
//! and the page cache behind it).
//!
//! Ranges are whole sectors, like pages: a write that starts or ends
//! inside a sector first reads the rest of that sector (from the disk or
//! from a dirty range), so writeback never has to merge partial sectors.
//! Ranges that touch are merged; an append grows the last range in place,
//! so a file written sequentially costs its length, not its length
//! squared.

use std::collections::BTreeMap;
use std::sync::Arc;

/// A range's bytes: owned while dirty, shared once its writeback is in
/// flight ([`super::ordered`]: readers and the device writes both hold
/// them).
pub trait RangeBytes {
    fn bytes(&self) -> &[u8];
}

impl RangeBytes for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl RangeBytes for Arc<Vec<u8>> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// The dirty sectors of one inode (or, with shared bytes, its sectors
/// whose writeback is in flight).
#[derive(Debug)]
pub struct InodeDirty<B = Vec<u8>> {
    /// Start (sector aligned) to bytes (a whole number of sectors).
    ranges: BTreeMap<u64, B>,
    bytes: u64,
}

impl<B> Default for InodeDirty<B> {
    fn default() -> Self {
        InodeDirty {
            ranges: BTreeMap::new(),
            bytes: 0,
        }
    }
}

impl<B: RangeBytes> InodeDirty<B> {
    /// Ranges given whole (a writeback's, now in flight).
    pub fn from_ranges(ranges: BTreeMap<u64, B>) -> Self {
        let bytes = ranges.values().map(|v| v.bytes().len() as u64).sum();
        InodeDirty { ranges, bytes }
    }

    /// Dirty bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The dirty ranges as `(start, end)`, in order.
    pub fn spans(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges
            .iter()
            .map(|(&s, v)| (s, s + v.bytes().len() as u64))
    }

    /// Whether any dirty range overlaps `[start, end)`.
    pub fn overlaps(&self, start: u64, end: u64) -> bool {
        self.ranges
            .range(..end)
            .next_back()
            .is_some_and(|(&s, v)| s + v.bytes().len() as u64 > start)
    }

    /// Dirty bytes of the sector at `sector`, if it is dirty.
    pub fn sector(&self, sector: u64, ss: u64) -> Option<&[u8]> {
        let (&s, v) = self.ranges.range(..=sector).next_back()?;
        let v = v.bytes();
        let rel = (sector - s) as usize;
        (rel < v.len()).then(|| &v[rel..rel + ss as usize])
    }

    /// Copies the dirty bytes that overlap `[off, off + out.len())` into
    /// `out`.
    pub fn overlay(&self, off: u64, out: &mut [u8]) {
        let end = off + out.len() as u64;
        let first = self
            .ranges
            .range(..=off)
            .next_back()
            .map_or(off, |(&s, _)| s);
        for (&s, v) in self.ranges.range(first..end) {
            let v = v.bytes();
            let vend = s + v.len() as u64;
            let (a, b) = (s.max(off), vend.min(end));
            if a < b {
                out[(a - off) as usize..(b - off) as usize]
                    .copy_from_slice(&v[(a - s) as usize..(b - s) as usize]);
            }
        }
    }
}

impl InodeDirty<Vec<u8>> {
    /// Stores `data` (whole sectors) at `start` (sector aligned), over
    /// whatever was dirty there, merging with ranges it touches.
    pub fn insert(&mut self, start: u64, data: &[u8]) {
        let end = start + data.len() as u64;
        // The range that reaches `start` (or ends exactly there) grows.
        let (base, mut buf) = match self.ranges.range(..=start).next_back() {
            Some((&s, v)) if s + v.len() as u64 >= start => {
                let v = self.ranges.remove(&s).unwrap_or_default();
                self.bytes -= v.len() as u64;
                (s, v)
            }
            _ => (start, Vec::new()),
        };
        let rel = (start - base) as usize;
        let overlap = buf.len().saturating_sub(rel).min(data.len());
        buf[rel..rel + overlap].copy_from_slice(&data[..overlap]);
        buf.extend_from_slice(&data[overlap..]);
        // Later ranges that start inside or right after it are absorbed.
        let later: Vec<u64> = self.ranges.range(start..=end).map(|(&s, _)| s).collect();
        for s in later {
            let v = self.ranges.remove(&s).unwrap_or_default();
            self.bytes -= v.len() as u64;
            let vend = s + v.len() as u64;
            if vend > end {
                let keep = (end - s) as usize;
                buf.extend_from_slice(&v[keep..]);
            }
        }
        self.bytes += buf.len() as u64;
        self.ranges.insert(base, buf);
    }

    /// Like [`InodeDirty::insert`], taking the bytes: a range that
    /// touches no other is kept as it is, with no copy.
    pub fn insert_owned(&mut self, start: u64, data: Vec<u8>) {
        let end = start + data.len() as u64;
        let touches = self
            .ranges
            .range(..=end)
            .next_back()
            .is_some_and(|(&s, v)| s + v.len() as u64 >= start);
        if touches {
            self.insert(start, &data);
        } else {
            self.bytes += data.len() as u64;
            self.ranges.insert(start, data);
        }
    }

    /// Drops what lies past `size` (a truncate): the sectors after the
    /// one holding `size` go, and that sector's bytes past `size` become
    /// zeros, as the kernel's truncate_pagecache drops and zeroes pages.
    pub fn truncate(&mut self, size: u64, ss: u64) {
        let keep_end = size.div_ceil(ss) * ss;
        let gone: Vec<u64> = self.ranges.range(keep_end..).map(|(&s, _)| s).collect();
        for s in gone {
            let v = self.ranges.remove(&s).unwrap_or_default();
            self.bytes -= v.len() as u64;
        }
        if let Some((&s, v)) = self.ranges.range_mut(..keep_end).next_back() {
            let end = s + v.len() as u64;
            if end > keep_end {
                v.truncate((keep_end - s) as usize);
                self.bytes -= end - keep_end;
                // A range grown by appends holds spare room: what was cut
                // must not stay allocated unaccounted (the dirty limit
                // counts lengths).
                if v.capacity() > 2 * v.len() {
                    v.shrink_to_fit();
                }
            }
            if s + (v.len() as u64) > size {
                let from = size.saturating_sub(s) as usize;
                v[from..].fill(0);
            }
        }
    }

    /// Takes every dirty range out (for writeback).
    pub fn take(&mut self) -> BTreeMap<u64, Vec<u8>> {
        self.bytes = 0;
        std::mem::take(&mut self.ranges)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap as Model;

    fn check(d: &InodeDirty, model: &Model<u64, u8>) {
        let total: u64 = d.spans().map(|(s, e)| e - s).sum();
        assert_eq!(total, d.bytes());
        assert_eq!(total as usize, model.len());
        let mut prev_end = None;
        for (s, e) in d.spans() {
            if let Some(p) = prev_end {
                assert!(s > p, "ranges touch or overlap: {p} {s}");
            }
            prev_end = Some(e);
            let mut buf = vec![0u8; (e - s) as usize];
            d.overlay(s, &mut buf);
            for (i, b) in buf.iter().enumerate() {
                assert_eq!(model.get(&(s + i as u64)), Some(b));
            }
        }
    }

    /// A seeded xorshift64 generator.
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    #[test]
    fn inserts_merge_and_read_back_like_a_byte_map() {
        let mut next = xorshift(0x9e3779b97f4a7c15u64);
        for _ in 0..50 {
            let mut d = InodeDirty::default();
            let mut model = Model::new();
            for op in 0..60u64 {
                let start = (next() % 40) * 16;
                let len = (next() % 6 + 1) * 16;
                let data: Vec<u8> = (0..len).map(|i| (op * 7 + i) as u8).collect();
                match next() % 2 {
                    0 => d.insert(start, &data),
                    _ => d.insert_owned(start, data.clone()),
                }
                for (i, b) in data.iter().enumerate() {
                    model.insert(start + i as u64, *b);
                }
                check(&d, &model);
                let probe = next() % 700;
                assert_eq!(
                    d.overlaps(probe, probe + 5),
                    (probe..probe + 5).any(|o| model.contains_key(&o))
                );
            }
            let taken = d.take();
            assert!(d.is_empty() && d.bytes() == 0);
            assert_eq!(taken.values().map(|v| v.len()).sum::<usize>(), model.len());
        }
    }

    #[test]
    fn truncates_drop_and_zero_like_a_byte_map() {
        let mut next = xorshift(0x51f0_aa11_77d3_e045u64);
        for _ in 0..50 {
            let mut d = InodeDirty::default();
            let mut model = Model::new();
            for op in 0..40u64 {
                if op % 4 == 3 {
                    let size = next() % 700;
                    d.truncate(size, 16);
                    let keep_end = size.div_ceil(16) * 16;
                    model.retain(|&o, _| o < keep_end);
                    for (&o, b) in model.range_mut(size..) {
                        assert!(o < keep_end);
                        *b = 0;
                    }
                } else {
                    let start = (next() % 40) * 16;
                    let len = (next() % 6 + 1) * 16;
                    let data: Vec<u8> = (0..len).map(|i| (op * 7 + i) as u8 | 1).collect();
                    d.insert(start, &data);
                    for (i, b) in data.iter().enumerate() {
                        model.insert(start + i as u64, *b);
                    }
                }
                check(&d, &model);
            }
        }
    }

    #[test]
    fn appends_grow_one_range() {
        let mut d = InodeDirty::default();
        for i in 0..100u64 {
            d.insert(i * 4096, &[i as u8; 4096]);
        }
        assert_eq!(d.spans().collect::<Vec<_>>(), vec![(0, 409600)]);
        assert_eq!(d.sector(4096 * 7, 4096).unwrap()[0], 7);
        assert!(d.sector(409600, 4096).is_none());
    }
}
