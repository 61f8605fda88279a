//! SEEK_DATA / SEEK_HOLE over what a file holds now: its extents in the
//! transaction and its dirty (not yet written) ranges, which read as data
//! as the kernel's find_desired_extent counts delalloc ranges.
//!
//! Each open file keeps the data map it last built ([`SeekCache`]), tagged
//! with the inode's change counter: a walk of alternating SEEK_DATA and
//! SEEK_HOLE calls (cp, tar --sparse) builds the map once and then answers
//! each call by a binary search, whether the file is clean or still dirty
//! (the mechanism of the first seed: the cached extent state per open
//! file). `UBTRFS_NO_SEEK_CACHE=1` rebuilds the map on every call, for
//! the benchmark only.
//!
//! The change counters live apart from the filesystem ([`Versions`]), so
//! that a cache still current answers without the filesystem's lock
//! ([`SeekCache::cached`]): a walk goes on while a commit, a writeback or
//! another file's write holds it.

use crate::InodeId;
use std::collections::HashMap;
use std::sync::Mutex;

/// Where data lies in a file: sorted, disjoint, non-touching `[start, end)`
/// ranges below its size.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DataMap {
    pub ranges: Vec<(u64, u64)>,
    pub size: u64,
}

impl DataMap {
    /// Builds the map from data ranges in any order, overlapping or not,
    /// clipped to `size`.
    pub fn build(parts: Vec<(u64, u64)>, size: u64) -> DataMap {
        let clipped = parts.into_iter().map(|(s, e)| (s, e.min(size))).collect();
        let ranges = crate::data::ranges::merged(clipped);
        DataMap { ranges, size }
    }

    /// lseek(SEEK_DATA): the first data offset at or after `off`, None
    /// (ENXIO) when there is none.
    pub fn seek_data(&self, off: u64) -> Option<u64> {
        if off >= self.size {
            return None;
        }
        let i = self.ranges.partition_point(|&(_, e)| e <= off);
        self.ranges.get(i).map(|&(s, _)| s.max(off))
    }

    /// lseek(SEEK_HOLE): the first hole offset at or after `off` (the end
    /// of file counts as a hole), None (ENXIO) past the end.
    pub fn seek_hole(&self, off: u64) -> Option<u64> {
        if off >= self.size {
            return None;
        }
        let i = self.ranges.partition_point(|&(_, e)| e <= off);
        match self.ranges.get(i) {
            Some(&(s, e)) if s <= off => Some(e),
            _ => Some(off),
        }
    }
}

/// The data map an open file built last, and the inode change it saw.
#[derive(Debug, Default)]
pub struct SeekCache {
    pub(crate) version: Option<u64>,
    pub(crate) map: DataMap,
    /// Maps built (for tests and the benchmark: one per change, not per
    /// call).
    pub builds: u64,
}

/// The data change counter of every inode whose data changed since the
/// mount: moved under the filesystem's lock, together with the change and
/// before the change is answered, so a reader that finds its cache's
/// counter current may answer from the cache at any time.
#[derive(Debug, Default)]
pub struct Versions(Mutex<(u64, HashMap<InodeId, u64>)>);

impl Versions {
    fn inner(&self) -> std::sync::MutexGuard<'_, (u64, HashMap<InodeId, u64>)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves the counter of `id`.
    pub(crate) fn bump(&self, id: InodeId) {
        let mut g = self.inner();
        g.0 += 1;
        let v = g.0;
        g.1.insert(id, v);
    }

    /// The counter of `id` (0: unchanged since the mount).
    pub fn get(&self, id: InodeId) -> u64 {
        self.inner().1.get(&id).copied().unwrap_or(0)
    }
}

impl SeekCache {
    /// The answer to lseek(`off`, `whence`) from the map as it is, when
    /// it is still `id`'s (no data change since it was built): Some(None)
    /// is ENXIO; None means the map must be rebuilt
    /// ([`crate::vfs::RwFs::seek`]). Needs no filesystem lock.
    pub fn cached(
        &self,
        versions: &Versions,
        id: InodeId,
        off: u64,
        whence: i32,
    ) -> Option<Option<u64>> {
        if cache_disabled() || self.version != Some(versions.get(id)) {
            return None;
        }
        match whence {
            3 => Some(self.map.seek_data(off)),
            4 => Some(self.map.seek_hole(off)),
            _ => None,
        }
    }
}

/// Whether the cache is switched off (benchmark only).
pub(crate) fn cache_disabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| super::env_on("UBTRFS_NO_SEEK_CACHE"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeks_follow_the_map() {
        let m = DataMap::build(
            vec![(8192, 12288), (0, 4096), (4096, 5000), (20000, 90000)],
            30000,
        );
        assert_eq!(m.ranges, vec![(0, 5000), (8192, 12288), (20000, 30000)]);
        assert_eq!(m.seek_data(0), Some(0));
        assert_eq!(m.seek_data(5000), Some(8192));
        assert_eq!(m.seek_hole(0), Some(5000));
        assert_eq!(m.seek_hole(6000), Some(6000));
        assert_eq!(m.seek_hole(25000), Some(30000));
        assert_eq!(m.seek_data(12288), Some(20000));
        assert_eq!(m.seek_data(30000), None);
        let empty = DataMap::build(vec![], 100);
        assert_eq!(empty.seek_data(0), None);
        assert_eq!(empty.seek_hole(3), Some(3));
    }
}
