//! SEEK_DATA / SEEK_HOLE from a map of where a file's data lies, kept per
//! open file: both mounts answer lseek through it ([`super::view::View::seek`]).
//! On the read-write mount the map holds the file's extents in the
//! transaction and its dirty (not yet written) ranges, which read as data
//! as the kernel's find_desired_extent counts delalloc ranges; on the
//! read-only mount, the committed extents.
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
//! another file's write holds it. The committed filesystem never changes:
//! its counters stay 0.

use crate::InodeId;
use std::collections::HashMap;
use std::sync::Mutex;

/// Where data lies in a stretch of a file, `[start, end)`: sorted,
/// disjoint, non-touching `[start, end)` data ranges there, each ending
/// where a hole (or the end of the file) begins. A whole map covers the
/// file from 0 to its size; the committed filesystem maps a file a
/// stretch at a time as a walk moves on ([`super::view::View::seek`]),
/// so the first lseek of a large file waits for no walk of all its
/// extents.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DataMap {
    pub ranges: Vec<(u64, u64)>,
    pub size: u64,
    pub start: u64,
    pub end: u64,
}

impl DataMap {
    /// The whole map, from data ranges in any order, overlapping or not,
    /// clipped to `size`.
    pub fn build(parts: Vec<(u64, u64)>, size: u64) -> DataMap {
        let clipped = parts.into_iter().map(|(s, e)| (s, e.min(size))).collect();
        let ranges = crate::data::ranges::merged(clipped);
        DataMap {
            ranges,
            size,
            start: 0,
            end: size,
        }
    }

    /// lseek(`off`, `whence`): SEEK_DATA (3), the first data offset at or
    /// after `off`; SEEK_HOLE (4), the first hole offset at or after it
    /// (the end of file counts as a hole). Some(None) is ENXIO (`off` at
    /// or past the end of the file, or no data after it); None when the
    /// answer lies outside the stretch mapped.
    pub fn seek(&self, off: u64, whence: i32) -> Option<Option<u64>> {
        if off >= self.size {
            return Some(None);
        }
        if off < self.start || off >= self.end {
            return None;
        }
        let i = self.ranges.partition_point(|&(_, e)| e <= off);
        let range = self.ranges.get(i).copied();
        match whence {
            3 => match range {
                Some((s, _)) => Some(Some(s.max(off))),
                None if self.end >= self.size => Some(None),
                None => None,
            },
            4 => match range {
                Some((s, e)) if s <= off => Some(Some(e)),
                _ => Some(Some(off)),
            },
            _ => None,
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
    /// ([`super::view::View::seek`]). Needs no filesystem lock.
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
        self.map.seek(off, whence)
    }
}

/// Whether the cache is switched off (benchmark only).
pub(crate) fn cache_disabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| std::env::var_os("UBTRFS_NO_SEEK_CACHE").is_some_and(|v| v != "0"))
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
        let (data, hole) = (3, 4);
        assert_eq!(m.seek(0, data), Some(Some(0)));
        assert_eq!(m.seek(5000, data), Some(Some(8192)));
        assert_eq!(m.seek(0, hole), Some(Some(5000)));
        assert_eq!(m.seek(6000, hole), Some(Some(6000)));
        assert_eq!(m.seek(25000, hole), Some(Some(30000)));
        assert_eq!(m.seek(12288, data), Some(Some(20000)));
        assert_eq!(m.seek(30000, data), Some(None));
        let empty = DataMap::build(vec![], 100);
        assert_eq!(empty.seek(0, data), Some(None));
        assert_eq!(empty.seek(3, hole), Some(Some(3)));
    }

    /// A stretch answers what lies in it, and leaves the rest unknown.
    #[test]
    fn a_stretch_answers_within_it() {
        let m = DataMap {
            ranges: vec![(4096, 8192), (12288, 16384)],
            size: 1 << 20,
            start: 4096,
            end: 16384,
        };
        let (data, hole) = (3, 4);
        assert_eq!(m.seek(4096, data), Some(Some(4096)));
        assert_eq!(m.seek(8192, data), Some(Some(12288)));
        assert_eq!(m.seek(12288, hole), Some(Some(16384)));
        assert_eq!(m.seek(9000, hole), Some(Some(9000)));
        // Before and after the stretch, and data after its last range.
        assert_eq!(m.seek(0, data), None);
        assert_eq!(m.seek(16384, hole), None);
        assert_eq!(m.seek(16384, data), None);
        assert_eq!(m.seek(1 << 20, data), Some(None));
        let last = DataMap {
            ranges: vec![(0, 4096)],
            size: 8192,
            start: 0,
            end: 8192,
        };
        assert_eq!(last.seek(4096, data), Some(None));
    }
}
