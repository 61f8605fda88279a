//! FITRIM (the kernel's btrfs_trim_fs): free space given back to what
//! holds the devices, so that a sparse image file shrinks and an SSD or a
//! thin volume learns what is unused.
//!
//! Two kinds of space are free. Inside block groups, the allocator's free
//! ranges: never the space pinned since the last commit (the committed
//! trees may still reach it), nor space held by a log tree, nor the
//! superblock stripes, which the allocator never hands out. Each range is
//! mapped to its copies on the devices. RAID5/6 groups are left alone, as
//! the kernel leaves them: a free range shares its rows' parity with
//! used ones. Outside block groups, the device space no chunk has, but
//! the first MiB and the superblock copies (btrfs_issue_discard skips
//! them too).

use super::Trans;
use crate::error::{Error, Result};
use crate::io::volumes::Placement;
use std::collections::BTreeMap;
use ubtrfs_format::consts::{BG_RAID5, BG_RAID6, SUPER_OFFSETS, SUPER_SIZE};

/// What FITRIM asks: `[start, start + len)` of the logical address space
/// for block groups, free extents of at least `minlen` bytes.
#[derive(Debug, Clone, Copy)]
pub struct TrimRange {
    pub start: u64,
    pub len: u64,
    pub minlen: u64,
}

impl Trans {
    /// Discards free space as [`TrimRange`] says: block group free ranges
    /// in the range, and every device's unallocated space. Returns the
    /// bytes given back (logical bytes of block groups plus device bytes
    /// outside them, as the kernel counts). Unsupported when no device
    /// can discard.
    pub fn trim(&mut self, r: TrimRange) -> Result<u64> {
        let end = r.start.saturating_add(r.len);
        // Device ranges to discard, merged per device.
        let mut work: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
        let mut trimmed = 0u64;
        for g in self.alloc.groups.values() {
            if g.end() <= r.start || g.start >= end || g.flags & (BG_RAID5 | BG_RAID6) != 0 {
                continue;
            }
            for (s, l) in g.free_ranges() {
                let (s, e) = (s.max(r.start), (s + l).min(end));
                if e <= s || e - s < r.minlen.max(1) {
                    continue;
                }
                let mut at = s;
                while at < e {
                    let piece = self.info.chunks.map(at, e - at)?;
                    let Placement::Mirrors(copies) = &piece.placement else {
                        break;
                    };
                    for c in copies {
                        work.entry(c.devid)
                            .or_default()
                            .push((c.physical, piece.len));
                    }
                    at += piece.len;
                }
                trimmed += e - s;
            }
        }
        let sizes: Vec<(u64, u64)> = self.dev_sizes().collect();
        for (devid, size) in sizes {
            for (s, l) in self.dev_space_holes(devid, size) {
                if l >= r.minlen.max(1) {
                    work.entry(devid).or_default().push((s, l));
                    trimmed += l;
                }
            }
        }
        let mut supported = false;
        let mut last_unsupported = None;
        for (devid, ranges) in work {
            let Some(d) = self.info.devices.get(&devid) else {
                continue;
            };
            for (s, l) in without_supers(ranges) {
                match d.dev().discard(s, l) {
                    Ok(()) => supported = true,
                    Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                        last_unsupported = Some(e.to_string());
                        break;
                    }
                    Err(e) => {
                        return Err(Error::Io {
                            path: d.path.display().to_string(),
                            op: format!("discard of {l} bytes at {s}"),
                            source: e,
                        })
                    }
                }
            }
        }
        match last_unsupported {
            Some(why) if !supported => Err(Error::Unsupported(format!("FITRIM: {why}"))),
            _ => Ok(trimmed),
        }
    }
}

/// `ranges` (device offset, length) sorted and merged, less the
/// superblock copies.
fn without_supers(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (s, l) in ranges {
        match merged.last_mut() {
            Some((ms, ml)) if s <= *ms + *ml => *ml = (*ml).max(s + l - *ms),
            _ => merged.push((s, l)),
        }
    }
    let supers = SUPER_OFFSETS.iter().map(|&sb| (sb, sb + SUPER_SIZE as u64));
    super::volumes::without_ranges(merged, supers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_skip_superblock_copies() {
        let sb1 = SUPER_OFFSETS[1];
        let got = without_supers(vec![(sb1 - 8192, 4096), (sb1 - 4096, 16384), (0, 4096)]);
        assert_eq!(got, vec![(0, 4096), (sb1 - 8192, 8192), (sb1 + 4096, 8192)]);
    }
}
