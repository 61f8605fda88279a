//! The inode layer's removals that log replay is built on, in process on
//! an in-memory filesystem: drop_extents (every way a range meets an
//! extent: inside, over the head, over the tail, over all of it; holes and
//! inline extents) with the data references and nbytes it implies, and
//! unlink_inode (both directory entries, the back reference, sizes, link
//! counts), each committed and checked by the engine's check.

use std::sync::Arc;
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::mkfs::{make, MkfsOptions};
use ubtrfs_engine::tools::check::check_dev;
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{FileExtent, FileExtentKind, InodeItem, Timespec};
use ubtrfs_format::Key;

fn fresh() -> (Arc<MemDev>, Trans) {
    let m = Arc::new(MemDev::new(128 << 20));
    let o = MkfsOptions {
        nodesize: 4096,
        fsid: Some([9; 16]),
        ..Default::default()
    };
    make(vec![("m".into(), m.clone())], &o).unwrap();
    let dev: Arc<dyn BlockDev> = m.clone();
    let t = Trans::open_dev(vec![dev], 16 << 20).unwrap();
    (m, t)
}

const DIR: u64 = 256;

/// Changes inode `ino`'s item with `change`.
fn change_inode(t: &mut Trans, ino: u64, change: impl FnOnce(&mut InodeItem)) {
    let mut ii = t.inode(FS_TREE_OBJECTID, ino).unwrap().unwrap();
    change(&mut ii);
    t.inode_mut(FS_TREE_OBJECTID, ino).put(&ii).unwrap();
}

/// Commits and checks the image.
fn commit_check(m: &Arc<MemDev>, t: &mut Trans) {
    t.commit().unwrap();
    check_dev(m.clone()).unwrap();
}

/// A regular file `ino` named `name` in the top directory, no data.
fn new_file(t: &mut Trans, ino: u64, name: &[u8], index: u64) {
    let ii = InodeItem {
        generation: t.transid,
        transid: t.transid,
        nlink: 1,
        mode: 0o100644,
        ..Default::default()
    };
    t.inode_mut(FS_TREE_OBJECTID, ino).put(&ii).unwrap();
    t.inode_mut(FS_TREE_OBJECTID, DIR)
        .link_inode(name, ino, FT_REG_FILE, index, None)
        .unwrap();
}

/// File extents of `ino`: (file offset, disk bytenr, extent offset, length).
fn extents(t: &mut Trans, ino: u64) -> Vec<(u64, u64, u64, u64)> {
    let lo = Key::new(ino, EXTENT_DATA, 0);
    let hi = Key::new(ino, EXTENT_DATA, u64::MAX);
    t.items_in(FS_TREE_OBJECTID, &lo, &hi)
        .unwrap()
        .into_iter()
        .map(|(k, d)| match FileExtent::parse(&d).unwrap().kind {
            FileExtentKind::Extent {
                disk_bytenr,
                offset,
                num_bytes,
                ..
            } => (k.offset, disk_bytenr, offset, num_bytes),
            FileExtentKind::Inline { data } => (k.offset, 0, 0, data.len() as u64),
        })
        .collect()
}

fn refs_of(t: &mut Trans, bytenr: u64, len: u64) -> Option<u64> {
    t.lookup(EXTENT_TREE_OBJECTID, &Key::new(bytenr, EXTENT_ITEM, len))
        .unwrap()
        .map(|d| u64::from_le_bytes(d[..8].try_into().unwrap()))
}

#[test]
fn drop_extents_every_overlap() {
    let (m, mut t) = fresh();
    new_file(&mut t, 300, b"f", 2);
    // One 64 KiB extent at file offset 0, a hole item, one 16 KiB extent.
    let (a, alen) = t.write_data_extent(&[1u8; 65536], true).unwrap();
    t.inode_mut(FS_TREE_OBJECTID, 300)
        .insert_file_extent(0, a, alen, 0, 65536, 65536, 0, false, true)
        .unwrap();
    t.inode_mut(FS_TREE_OBJECTID, 300)
        .insert_file_extent(65536, 0, 0, 0, 8192, 8192, 0, false, false)
        .unwrap();
    let (b, blen) = t.write_data_extent(&[2u8; 16384], true).unwrap();
    t.inode_mut(FS_TREE_OBJECTID, 300)
        .insert_file_extent(73728, b, blen, 0, 16384, 16384, 0, false, true)
        .unwrap();
    change_inode(&mut t, 300, |ii| {
        ii.size = 90112;
        ii.nbytes = 65536 + 16384;
    });
    commit_check(&m, &mut t);

    // Inside the first extent: split in two, one more reference.
    let found = t
        .inode_mut(FS_TREE_OBJECTID, 300)
        .drop_extents(8192, 16384)
        .unwrap();
    assert_eq!(found, 8192);
    // Over the tail of the first extent, the hole, and the head of the last.
    let found2 = t
        .inode_mut(FS_TREE_OBJECTID, 300)
        .drop_extents(57344, 77824)
        .unwrap();
    assert_eq!(found2, 8192 + 4096, "hole bytes are not data");
    assert_eq!(
        extents(&mut t, 300),
        vec![
            (0, a, 0, 8192),
            (16384, a, 16384, 40960),
            (77824, b, 4096, 12288),
        ]
    );
    change_inode(&mut t, 300, |ii| {
        ii.nbytes -= found + found2;
    });
    commit_check(&m, &mut t);
    assert_eq!(refs_of(&mut t, a, alen), Some(2));
    assert_eq!(refs_of(&mut t, b, blen), Some(1));

    // Everything: the extents lose their last references and go.
    let all = t
        .inode_mut(FS_TREE_OBJECTID, 300)
        .drop_extents(0, u64::MAX)
        .unwrap();
    assert_eq!(all, 8192 + 40960 + 12288);
    assert!(extents(&mut t, 300).is_empty());
    change_inode(&mut t, 300, |ii| {
        ii.nbytes = 0;
        ii.size = 0;
    });
    commit_check(&m, &mut t);
    assert_eq!(refs_of(&mut t, a, alen), None);
    assert_eq!(refs_of(&mut t, b, blen), None);
}

#[test]
fn drop_extents_inline() {
    let (m, mut t) = fresh();
    new_file(&mut t, 300, b"small", 2);
    t.inode_mut(FS_TREE_OBJECTID, 300)
        .insert_inline_extent(b"hello", 5, 0)
        .unwrap();
    change_inode(&mut t, 300, |ii| {
        ii.size = 5;
        ii.nbytes = 5;
    });
    // Past it: nothing; cutting into it: refused, not mangled; all of it.
    assert_eq!(
        t.inode_mut(FS_TREE_OBJECTID, 300)
            .drop_extents(4096, u64::MAX)
            .unwrap(),
        0
    );
    let e = t
        .inode_mut(FS_TREE_OBJECTID, 300)
        .drop_extents(2, 4096)
        .unwrap_err();
    assert!(e.to_string().contains("inline"), "{e}");
    assert_eq!(extents(&mut t, 300), vec![(0, 0, 0, 5)]);
    assert_eq!(
        t.inode_mut(FS_TREE_OBJECTID, 300)
            .drop_extents(0, 4096)
            .unwrap(),
        5
    );
    change_inode(&mut t, 300, |ii| {
        ii.nbytes = 0;
        ii.size = 0;
    });
    commit_check(&m, &mut t);
}

#[test]
fn unlink_removes_names_and_counts() {
    let (m, mut t) = fresh();
    new_file(&mut t, 300, b"a", 2);
    // A second name for the same inode.
    t.inode_mut(FS_TREE_OBJECTID, DIR)
        .link_inode(b"b", 300, FT_REG_FILE, 3, None)
        .unwrap();
    change_inode(&mut t, 300, |ii| {
        ii.nlink = 2;
    });
    commit_check(&m, &mut t);
    let size0 = t.inode(FS_TREE_OBJECTID, DIR).unwrap().unwrap().size;
    let mtime0 = t.inode(FS_TREE_OBJECTID, DIR).unwrap().unwrap().mtime;

    // Without a time (log replay): the directory keeps its times.
    t.unlink_inode(FS_TREE_OBJECTID, DIR, 300, b"a", None)
        .unwrap();
    let d = t.inode(FS_TREE_OBJECTID, DIR).unwrap().unwrap();
    assert_eq!((d.size, d.mtime), (size0 - 2, mtime0));
    assert_eq!(t.inode(FS_TREE_OBJECTID, 300).unwrap().unwrap().nlink, 1);
    assert_eq!(
        t.inode_refs(FS_TREE_OBJECTID, 300).unwrap(),
        vec![(DIR, b"b".to_vec(), 3)]
    );
    // A name that is not there: an error naming it, nothing changed.
    let e = t
        .unlink_inode(FS_TREE_OBJECTID, DIR, 300, b"a", None)
        .unwrap_err();
    assert!(e.to_string().contains("\"a\""), "{e}");
    commit_check(&m, &mut t);

    // With a time: it is the directory's mtime and ctime.
    let when = Timespec {
        sec: 1_700_000_000,
        nsec: 5,
    };
    t.unlink_inode(FS_TREE_OBJECTID, DIR, 300, b"b", Some(when))
        .unwrap();
    let d = t.inode(FS_TREE_OBJECTID, DIR).unwrap().unwrap();
    assert_eq!((d.size, d.mtime, d.ctime), (size0 - 4, when, when));
    assert!(t.inode_refs(FS_TREE_OBJECTID, 300).unwrap().is_empty());
    // The inode itself, now without a name, goes as replay's eviction does.
    t.delete_range(
        FS_TREE_OBJECTID,
        &Key::new(300, 0, 0),
        &Key::new(300, u8::MAX, u64::MAX),
    )
    .unwrap();
    commit_check(&m, &mut t);
}
