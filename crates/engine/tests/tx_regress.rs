//! Regression tests for bugs the model and crash tests found in the write
//! engine (tx/, alloc/): each is the smallest case that failed.

use std::sync::Arc;
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::mkfs::{make, MkfsOptions};
use ubtrfs_engine::tools::check::check_dev;
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::Key;

fn mkfs(nodesize: u32) -> Arc<MemDev> {
    let m = Arc::new(MemDev::new(128 << 20));
    let o = MkfsOptions {
        nodesize,
        fsid: Some([7; 16]),
        ..Default::default()
    };
    make(vec![("m".into(), m.clone())], &o).unwrap();
    m
}

/// A second transaction changing a committed tree block: freeing the old
/// copy read the block's own skinny METADATA_ITEM as a keyed back
/// reference ("keyed back reference: item type 169") and the commit failed.
#[test]
fn second_transaction_cows_committed_blocks() {
    let m = mkfs(4096);
    let dev: Arc<dyn BlockDev> = m.clone();
    let mut t = Trans::open_dev(vec![dev], 16 << 20).unwrap();
    t.insert_item(FS_TREE_OBJECTID, Key::new(1000, 250, 0), vec![1; 10])
        .unwrap();
    t.commit().unwrap();
    t.insert_item(FS_TREE_OBJECTID, Key::new(1001, 250, 0), vec![2; 10])
        .unwrap();
    t.commit().unwrap();
    check_dev(m.clone()).unwrap();
}

/// A commit with nothing changed left the root tree's root block at the
/// previous generation under a superblock of the new one: the image did
/// not open ("generation 2 but parent expects 3").
#[test]
fn empty_commit_still_opens() {
    let m = mkfs(4096);
    let dev: Arc<dyn BlockDev> = m.clone();
    let mut t = Trans::open_dev(vec![dev], 16 << 20).unwrap();
    t.commit().unwrap();
    check_dev(m.clone()).unwrap();
    t.commit().unwrap();
    check_dev(m.clone()).unwrap();
}

/// update_item growing an item past what a leaf holds returned an error
/// but left the oversized data in the leaf: the transaction could not be
/// committed any more (and later reads saw the refused data).
#[test]
fn refused_update_leaves_the_item_alone() {
    let m = mkfs(4096);
    let dev: Arc<dyn BlockDev> = m.clone();
    let mut t = Trans::open_dev(vec![dev], 16 << 20).unwrap();
    let key = Key::new(1000, 250, 0);
    t.insert_item(FS_TREE_OBJECTID, key, vec![1; 10]).unwrap();
    let too_big = ubtrfs_engine::tree::buf::max_item_data(4096) + 1;
    assert!(t
        .update_item(FS_TREE_OBJECTID, &key, |d| *d = vec![2; too_big])
        .is_err());
    let now = t.lookup(FS_TREE_OBJECTID, &key).unwrap().unwrap();
    assert!(now == vec![1; 10], "item now {} bytes", now.len());
    t.commit().unwrap();
    check_dev(m.clone()).unwrap();
}
