//! Regression tests for bugs the model and crash tests found in the write
//! engine (tx/, alloc/): each is the smallest case that failed.

mod memcheck;

use std::sync::Arc;
use ubtrfs_engine::inode::file::DataPolicy;
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::mkfs::{build, make, MkfsOptions};
use ubtrfs_engine::tools::check::check_dev;
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::Timespec;
use ubtrfs_format::Key;

fn mkfs_options(nodesize: u32) -> MkfsOptions {
    MkfsOptions {
        nodesize,
        fsid: Some([7; 16]),
        ..Default::default()
    }
}

fn mkfs(nodesize: u32) -> Arc<MemDev> {
    let m = Arc::new(MemDev::new(128 << 20));
    make(vec![("m".into(), m.clone())], &mkfs_options(nodesize)).unwrap();
    m
}

/// The objectid of the items of no meaning these tests put in the fs
/// tree: below the first inode, where the checker looks for no inodes.
const FILLER: u64 = 10;

/// A new filesystem and a transaction on it.
fn mkfs_open(nodesize: u32) -> (Arc<MemDev>, Trans) {
    let m = mkfs(nodesize);
    let dev: Arc<dyn BlockDev> = m.clone();
    let t = Trans::open_dev(vec![dev], 16 << 20).unwrap();
    (m, t)
}

/// A second transaction changing a committed tree block: freeing the old
/// copy read the block's own skinny METADATA_ITEM as a keyed back
/// reference ("keyed back reference: item type 169") and the commit failed.
#[test]
fn second_transaction_cows_committed_blocks() {
    let (m, mut t) = mkfs_open(4096);
    t.insert_item(FS_TREE_OBJECTID, Key::new(FILLER, 250, 1000), vec![1; 10])
        .unwrap();
    t.commit().unwrap();
    t.insert_item(FS_TREE_OBJECTID, Key::new(FILLER, 250, 1001), vec![2; 10])
        .unwrap();
    t.commit().unwrap();
    check_dev(m.clone()).unwrap();
}

/// A commit with nothing changed left the root tree's root block at the
/// previous generation under a superblock of the new one: the image did
/// not open ("generation 2 but parent expects 3").
#[test]
fn empty_commit_still_opens() {
    let (m, mut t) = mkfs_open(4096);
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
    let (m, mut t) = mkfs_open(4096);
    let key = Key::new(FILLER, 250, 1000);
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

/// A tree the transaction has not loaded is read through the ROOT_ITEM
/// its readers keep; a change of that item in the root tree must be seen
/// at once, not the kept copy.
#[test]
fn kept_root_items_follow_the_root_tree() {
    let (m, mut t) = mkfs_open(4096);
    let before = t.root_view(FS_TREE_OBJECTID).unwrap().item.flags;
    let key = Key::new(FS_TREE_OBJECTID, ROOT_ITEM, 0);
    let changed = t
        .update_item(ROOT_TREE_OBJECTID, &key, |d| {
            let mut item = ubtrfs_format::items::RootItem::parse(d).unwrap();
            item.flags ^= ROOT_SUBVOL_RDONLY;
            *d = item.to_bytes();
        })
        .unwrap();
    assert!(changed);
    let after = t.root_view(FS_TREE_OBJECTID).unwrap().item.flags;
    assert_eq!(after, before ^ ROOT_SUBVOL_RDONLY);
    t.commit().unwrap();
    check_dev(m.clone()).unwrap();
}

/// Tree blocks reachable from tree `id`'s root, and its ROOT_ITEM's
/// bytes_used, as committed on `m`.
fn blocks_and_bytes_used(m: &Arc<MemDev>, id: u64) -> (u64, u64) {
    use ubtrfs_engine::fs::Filesystem;
    use ubtrfs_engine::io::device::Device;
    let d = Device::from_dev(std::path::Path::new("m"), m.clone() as Arc<dyn BlockDev>).unwrap();
    let fs = Filesystem::from_devices(vec![d], 16 << 20).unwrap();
    let tree = fs.tree(id).unwrap();
    let mut n = 0;
    let mut stack = vec![tree.read_root(&fs.info).unwrap()];
    while let Some(b) = stack.pop() {
        n += 1;
        let node = b.node();
        if !node.is_leaf() {
            for i in 0..node.nritems() {
                stack.push(tree.read_child(&fs.info, &b, i).unwrap());
            }
        }
    }
    (n, fs.root_item(id).unwrap().unwrap().bytes_used)
}

/// ROOT_ITEM bytes_used counts the tree's blocks as it grows and shrinks
/// (the kernel adds and subtracts one node per block it adds or removes;
/// left at mkfs's one block, it wrapped below zero in the kernel, whose
/// global reserve then took 512 MiB and a 1 GiB image ran out of space).
#[test]
fn root_items_count_their_blocks() {
    for ns in [4096u32, 16384] {
        let (m, mut t) = mkfs_open(ns);
        for i in 0..3000u64 {
            t.insert_item(
                FS_TREE_OBJECTID,
                Key::new(FILLER, 250, 1000 + i),
                vec![i as u8; 200],
            )
            .unwrap();
        }
        t.commit().unwrap();
        let (n, used) = blocks_and_bytes_used(&m, FS_TREE_OBJECTID);
        assert!(n > 10, "nodesize {ns}: {n} blocks");
        assert_eq!(used, n * ns as u64, "nodesize {ns}, after growing");
        for i in 0..2900u64 {
            t.delete_item(FS_TREE_OBJECTID, &Key::new(FILLER, 250, 1000 + i))
                .unwrap();
        }
        t.commit().unwrap();
        let (n2, used2) = blocks_and_bytes_used(&m, FS_TREE_OBJECTID);
        assert!(n2 < n, "nodesize {ns}: {n2} blocks after deleting");
        assert_eq!(used2, n2 * ns as u64, "nodesize {ns}, after shrinking");
        check_dev(m.clone()).unwrap();
    }
}

/// A filesystem whose first commit holds `files` one-block files (as
/// mkfs --rootdir makes it: one transaction from the empty trees on).
fn first_commit_with_files(nodesize: u32, files: u64) -> Arc<MemDev> {
    let m = Arc::new(MemDev::new(128 << 20));
    let dev: Arc<dyn BlockDev> = m.clone();
    let mut t = build(vec![("m".into(), dev)], &mkfs_options(nodesize)).unwrap();
    let policy = DataPolicy {
        csum: true,
        ..Default::default()
    };
    for i in 0..files {
        let ino = FIRST_INODE + 1 + i;
        let name = format!("f{i}");
        t.inode_mut(FS_TREE_OBJECTID, FIRST_INODE)
            .create_inode(
                name.as_bytes(),
                ino,
                0o100644,
                0,
                (0, 0),
                Timespec::default(),
            )
            .unwrap();
        let inode = t
            .inode_mut(FS_TREE_OBJECTID, ino)
            .write_file(0, &[i as u8; 4096], policy)
            .unwrap();
        t.inode_mut(FS_TREE_OBJECTID, ino).put(&inode).unwrap();
    }
    t.commit().unwrap();
    m
}

/// Each BLOCK_GROUP_ITEM holds its group's usage as of the commit. Commit
/// wrote the items from usages read before the first was written; writing
/// the system group's (inserting it, in a first commit) split an extent
/// tree leaf, which allocated a metadata block, and the metadata group's
/// item was then written one block short and marked clean (mkfs --rootdir
/// with 4K nodes and a few dozen files: "block group [9437184 108003328]
/// used 90112 but extent items used 94208"; 16K nodes from about 200).
/// The counts swept cover several leaf layouts of each node size.
#[test]
fn block_group_items_see_allocations_made_while_writing_them() {
    for (ns, counts) in [
        (4096u32, (0..120).step_by(2)),
        (16384, (150..300).step_by(5)),
    ] {
        for files in counts {
            let m = first_commit_with_files(ns, files);
            if let Err(e) = check_dev(m.clone()) {
                panic!("nodesize {ns}, {files} files: {e}");
            }
        }
    }
    let m = first_commit_with_files(4096, 50);
    memcheck::btrfs_check(&m, "tx_regress").unwrap();
}
