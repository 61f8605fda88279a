//! Cursor readahead on the committed kernel-made fixtures: every mode
//! returns exactly the items of a plain walk, read-ahead blocks are used,
//! and a block whose read ahead fails is still read (from another copy)
//! and reported, or its error reported, as without readahead.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use ubtrfs_engine::cache::reada::plan;
use ubtrfs_engine::cache::reada::Readahead;
use ubtrfs_engine::ctree::{Cursor, Tree};
use ubtrfs_engine::io::volumes::Placement;
use ubtrfs_engine::tree::block::BlockExpect;
use ubtrfs_engine::{Filesystem, OpenOptions};
use ubtrfs_format::key::Key;
use ubtrfs_oracle::{all_trees, committed_fixture, committed_fixture_copy, Workdir};

const MODES: [Readahead; 4] = [
    Readahead::None,
    Readahead::Forward,
    Readahead::ForwardAlways,
    Readahead::Back,
];

/// A private copy of committed fixture `name`'s first device (to
/// corrupt), removed when dropped.
struct Image {
    _dir: Workdir,
    path: PathBuf,
}

impl std::ops::Deref for Image {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

fn private_copy(name: &str, tag: &str) -> Image {
    let dir = Workdir::new(&format!("readahead-{name}-{tag}"));
    let img = committed_fixture_copy(name, &dir).devices()[0].clone();
    Image {
        _dir: dir,
        path: img,
    }
}

/// The shared (never written) copy of committed fixture `name`'s first
/// device.
fn shared(name: &str) -> PathBuf {
    committed_fixture(name).devices()[0].clone()
}

fn open(img: &Path) -> Filesystem {
    Filesystem::open(img, &OpenOptions::default()).unwrap()
}

/// The root tree and every tree it has a ROOT_ITEM for.
type Items = Vec<(Key, Vec<u8>)>;

/// Every item of `tree` in key order, walking forward (or, in Back mode,
/// backward from the last item). With `settle`, waits for the reads
/// queued by the first positioning before walking on.
fn walk(
    fs: &Filesystem,
    tree: Tree,
    mode: Readahead,
    settle: bool,
) -> ubtrfs_engine::Result<Items> {
    let mut c = Cursor::new(&fs.info, tree);
    c.set_readahead(mode);
    let back = mode == Readahead::Back;
    let mut ok = if back {
        c.seek_last()?
    } else {
        c.seek(&Key::MIN)?
    };
    if settle {
        fs.info.reada.wait_idle();
    }
    let mut out = Vec::new();
    while ok {
        let (k, d) = c.item().unwrap();
        out.push((k, d.to_vec()));
        ok = if back { c.prev()? } else { c.next()? };
    }
    if back {
        out.reverse();
    }
    Ok(out)
}

#[test]
fn every_mode_walks_the_same_items() {
    for name in ["small-crc32c", "small-sha256-dup", "small-xxhash-zstd"] {
        let img = shared(name);
        let plain = open(&img);
        let trees = all_trees(&plain);
        assert!(
            trees.iter().any(|t| t.level >= 1),
            "{name}: no tree with nodes"
        );
        for &mode in &MODES {
            // A fresh filesystem (and cache) per mode: cold reads.
            let fs = open(&img);
            for &t in &trees {
                let want = walk(&plain, t, Readahead::None, false).unwrap();
                let got = walk(&fs, t, mode, false).unwrap();
                assert_eq!(got.len(), want.len(), "{name} tree {} {mode:?}", t.id);
                assert!(got == want, "{name} tree {} {mode:?}: items differ", t.id);
            }
            fs.info.reada.wait_idle();
            let s = fs.info.reada.stats();
            assert_eq!(s.failed, 0, "{name} {mode:?}: {s:?}");
            if mode == Readahead::None {
                assert_eq!(s, Default::default(), "{name}: None read ahead: {s:?}");
            }
            assert!(s.hits <= s.prefetched, "{name} {mode:?}: {s:?}");
            assert!(
                s.prefetched + s.claimed <= s.scheduled,
                "{name} {mode:?}: {s:?}"
            );
        }
    }
}

#[test]
fn forward_always_reads_ahead_and_the_blocks_are_used() {
    let img = shared("small-crc32c");
    let fs = open(&img);
    let tree = fs.tree(5).unwrap();
    assert_eq!(
        tree.level, 1,
        "fixture changed: fs tree should have one node level"
    );
    let root = fs
        .info
        .read_tree_block(tree.bytenr, BlockExpect::default())
        .unwrap();
    let n = root.node().nritems();
    assert!(n >= 3, "fs tree has only {n} leaves");
    // What the cursor's first descent must queue: the kernel's choice for
    // child 0 of the root with nothing cached.
    let want = plan(
        Readahead::ForwardAlways,
        1,
        0,
        n,
        fs.info.nodesize,
        false,
        0,
        |i| {
            let p = root.node().key_ptr(i);
            (p.key.objectid, p.blockptr)
        },
    );
    assert_eq!(want, (1..n.min(10)).collect::<Vec<_>>());

    let plain = walk(&open(&img), tree, Readahead::None, false).unwrap();
    let mut c = Cursor::new(&fs.info, tree);
    c.set_readahead(Readahead::ForwardAlways);
    assert!(c.seek(&Key::MIN).unwrap());
    fs.info.reada.wait_idle();
    let s = fs.info.reada.stats();
    assert_eq!(s.scheduled as usize, want.len(), "{s:?}");
    assert_eq!(s.prefetched as usize, want.len(), "{s:?}");
    assert_eq!(s.hits, 0, "{s:?}");
    for (i, p) in (0..n).map(|i| (i, root.node().key_ptr(i))) {
        assert_eq!(
            fs.info.cache.contains(p.blockptr),
            i == 0 || want.contains(&i),
            "leaf {i} cached?"
        );
    }
    // Walk on: every leaf read ahead is used, and the walk is the plain one.
    let mut got = Vec::new();
    loop {
        let (k, d) = c.item().unwrap();
        got.push((k, d.to_vec()));
        if !c.next().unwrap() {
            break;
        }
    }
    assert!(got == plain, "items differ from a plain walk");
    fs.info.reada.wait_idle();
    let s = fs.info.reada.stats();
    assert!(s.hits >= want.len() as u64, "{s:?}");
    // Every leaf but the first was either read ahead and used, or taken
    // back by the demand read before a thread got to it.
    assert_eq!(s.hits + s.claimed, n as u64 - 1, "{s:?}");
}

#[test]
fn forward_modes_read_ahead_on_moves_too() {
    // Forward and Back read ahead only around uncached targets, so a walk
    // without settling still gets some hits on a tree laid out closely.
    let img = shared("small-crc32c");
    let tree = open(&img).tree(5).unwrap();
    for mode in [Readahead::Forward, Readahead::Back] {
        let fs = open(&img);
        walk(&fs, tree, mode, true).unwrap();
        fs.info.reada.wait_idle();
        let s = fs.info.reada.stats();
        assert!(s.scheduled > 0 && s.hits > 0, "{mode:?}: {s:?}");
    }
}

/// Leaf `i` of the fs tree (a one-node-level tree) and where its two
/// metadata copies are in the image.
fn leaf_copies(fs: &Filesystem, i: usize) -> (u64, Vec<u64>) {
    let tree = fs.tree(5).unwrap();
    let root = fs
        .info
        .read_tree_block(tree.bytenr, BlockExpect::default())
        .unwrap();
    let bytenr = root.node().key_ptr(i).blockptr;
    let piece = fs.info.chunks.map(bytenr, fs.info.nodesize as u64).unwrap();
    let Placement::Mirrors(m) = piece.placement else {
        panic!("metadata not mirrored")
    };
    assert_eq!(m.len(), 2, "metadata should be DUP");
    (bytenr, m.iter().map(|l| l.physical).collect())
}

fn smash(img: &Path, physical: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    // Inside the block, past the header: the checksum no longer matches.
    f.write_all_at(&[0xa5; 64], physical + 1000).unwrap();
}

#[test]
fn failed_read_ahead_is_left_to_the_demand_read() {
    let pristine = shared("small-crc32c");
    let img = private_copy("small-crc32c", "bad-copy");
    let (bytenr, copies) = leaf_copies(&open(&img), 2);
    smash(&img, copies[0]);
    let tree = open(&img).tree(5).unwrap();
    let want = walk(&open(&pristine), tree, Readahead::None, false).unwrap();
    for mode in MODES {
        let fs = open(&img);
        let got = walk(&fs, tree, mode, true).unwrap();
        assert!(got == want, "{mode:?}: items differ");
        // The demand read found copy 0 bad and said so, as without readahead.
        let (reports, _) = fs.info.take_reports();
        assert!(
            reports
                .iter()
                .any(|r| r.starts_with(&format!("tree block {bytenr}:"))
                    && r.contains("read copy 1")),
            "{mode:?}: {reports:?}"
        );
        let s = fs.info.reada.stats();
        if mode == Readahead::ForwardAlways {
            // Leaf 2 is in the first window: its read ahead failed.
            assert_eq!(s.failed, 1, "{s:?}");
        }
    }
}

#[test]
fn unreadable_block_errors_the_same_with_readahead() {
    let img = private_copy("small-crc32c", "bad-both");
    let (bytenr, copies) = leaf_copies(&open(&img), 3);
    for c in copies {
        smash(&img, c);
    }
    let tree = open(&img).tree(5).unwrap();
    let plain = walk(&open(&img), tree, Readahead::None, false)
        .unwrap_err()
        .to_string();
    assert!(
        plain.contains(&format!("tree block at bytenr {bytenr}")) && plain.contains("fs tree"),
        "{plain}"
    );
    for mode in MODES {
        let fs = open(&img);
        let e = walk(&fs, tree, mode, true).unwrap_err().to_string();
        assert_eq!(e, plain, "{mode:?}");
    }
}
