//! The per-handle extent cursor: a SEEK_DATA/SEEK_HOLE walk with increasing
//! offsets (what cp and tar --sparse do) must search the tree about once per
//! leaf of extent items, not once per call, and give the kernel's answers.
//! And the mounts' lseek over the committed filesystem ([`View::seek`]),
//! which maps a file a stretch at a time: the kernel's answers, from a
//! handful of stretches. Counts, not timings: the benchmark in bench/
//! measures time.

use std::path::Path;
use ubtrfs_engine::fs::seek::SeekCache;
use ubtrfs_engine::fs::view::View;
use ubtrfs_engine::{FileHandle, Filesystem, OpenOptions};
use ubtrfs_oracle::*;

/// The kernel's SEEK_DATA/SEEK_HOLE map of /big/striped-64m (8192 data
/// ranges), from the fixture's manifest.
fn kernel_map(f: &Fixture) -> Vec<(u64, u64)> {
    let kernel = f
        .kernel_manifest()
        .into_iter()
        .find(|l| l.contains("\"path\":\"/big/striped-64m\""))
        .expect("manifest line");
    let v: serde_json::Value = serde_json::from_str(&kernel).unwrap();
    record_data(&v)
}

/// The big fixture, opened, and its file of 8,192 data ranges.
fn striped() -> (&'static Fixture, Filesystem, ubtrfs_engine::InodeId) {
    let f = kernel_fixture("big");
    let fs = Filesystem::open(&f.devices()[0], &OpenOptions::default()).expect("open");
    let id = fs.resolve(b"/big/striped-64m").expect("resolve");
    (f, fs, id)
}

/// The data ranges a walk with `seek(offset, whence)` finds from 0, as
/// cp and tar --sparse walk.
fn walk(mut seek: impl FnMut(u64, i32) -> Option<u64>) -> Vec<(u64, u64)> {
    let mut ranges = Vec::new();
    let mut pos = 0;
    while let Some(d) = seek(pos, libc::SEEK_DATA) {
        let e = seek(d, libc::SEEK_HOLE).expect("a hole after data");
        ranges.push((d, e));
        pos = e;
    }
    ranges
}

#[test]
fn mount_lseek_maps_stretches_as_the_walk_moves() {
    skip_unless!(kernel_available);
    let (f, fs, id) = striped();
    let mut cache = SeekCache::default();
    let (data, hole) = (libc::SEEK_DATA, libc::SEEK_HOLE);
    let ranges = walk(|off, whence| fs.seek(id, &mut cache, off, whence).unwrap());
    assert_eq!(ranges, kernel_map(f), "the map differs from the kernel's");
    // Stretches of 256, 512, 1024, 2048, then 4096 ranges: 6 for 8192,
    // not one per call (16,385) nor a whole map before the first answer.
    assert_eq!(cache.builds, 6, "stretches mapped");
    // A jump back maps anew from there, and answers as the kernel.
    let (s, e) = ranges[100];
    assert_eq!(fs.seek(id, &mut cache, s + 1, hole).unwrap(), Some(e));
    assert_eq!(
        fs.seek(id, &mut cache, e, data).unwrap(),
        Some(ranges[101].0)
    );
    assert_eq!(cache.builds, 7);
}

#[test]
fn sequential_lseek_walk_is_amortized_constant() {
    skip_unless!(kernel_available);
    let (f, fs, id) = striped();
    let mut h = FileHandle::open(&fs, id).unwrap();
    let ranges = walk(|off, whence| {
        if whence == libc::SEEK_DATA {
            h.seek_data(&fs, off).unwrap()
        } else {
            h.seek_hole(&fs, off).unwrap()
        }
    });
    // The calls that found something (the last SEEK_DATA finds none).
    let calls = 2 * ranges.len() as u64;
    assert_eq!(
        ranges,
        kernel_map(f),
        "SEEK_DATA/SEEK_HOLE map differs from the kernel's"
    );
    assert_eq!(ranges.len(), 8192);
    let s = h.stats;
    eprintln!(
        "{calls} lseek calls: {} tree searches, {} cached lookups",
        s.tree_searches, s.cached_lookups
    );
    // 8192 extent items fill dozens of leaves; one search per leaf (plus
    // the first) is the bound. A search per call would be 16384.
    let leaves = leaves_of_extents(&fs, id);
    assert!(
        s.tree_searches <= leaves + 1,
        "{} tree searches for {calls} calls over {leaves} leaves",
        s.tree_searches
    );
    assert!(s.cached_lookups >= calls - s.tree_searches);
}

/// Number of distinct leaves holding the file's EXTENT_DATA items.
fn leaves_of_extents(fs: &Filesystem, id: ubtrfs_engine::InodeId) -> u64 {
    use ubtrfs_engine::ctree::Cursor;
    use ubtrfs_format::consts::EXTENT_DATA;
    use ubtrfs_format::key::Key;
    let tree = fs.tree(id.subvol).unwrap();
    let mut c = Cursor::new(&fs.info, tree);
    c.seek(&Key::new(id.ino, EXTENT_DATA, 0)).unwrap();
    let mut leaves = std::collections::BTreeSet::new();
    while let Some(k) = c.key() {
        if k.objectid != id.ino || k.item_type != EXTENT_DATA {
            break;
        }
        leaves.insert(c.leaf().unwrap().0.bytenr);
        if !c.next().unwrap() {
            break;
        }
    }
    leaves.len() as u64
}

#[test]
fn fresh_handles_each_search_the_tree() {
    // The contrast that makes the bound above meaningful: without the
    // cursor every call searches from the root. Checked on a committed
    // fixture so it runs without root.
    let f = committed_fixture("small-crc32c");
    let fs = Filesystem::open(Path::new(&f.devices()[0]), &OpenOptions::default()).unwrap();
    let id = fs.resolve(b"/holes/sparse").unwrap();
    let mut searches = 0;
    let mut pos = 0;
    loop {
        let mut h = FileHandle::open(&fs, id).unwrap();
        let Some(d) = h.seek_data(&fs, pos).unwrap() else {
            break;
        };
        let mut h2 = FileHandle::open(&fs, id).unwrap();
        pos = h2.seek_hole(&fs, d).unwrap().unwrap();
        searches += h.stats.tree_searches + h2.stats.tree_searches;
    }
    let mut h = FileHandle::open(&fs, id).unwrap();
    let ranges = h.data_ranges(&fs).unwrap();
    assert_eq!(ranges.len(), 4);
    assert!(
        searches >= 8,
        "fresh handles searched only {searches} times"
    );
    assert!(
        h.stats.tree_searches <= 2,
        "one handle searched {} times",
        h.stats.tree_searches
    );
}
