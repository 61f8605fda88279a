//! A seeded corruptor of single-device images, for the checker's tests:
//! one change to one tree block (a field of an item, an item dropped, a
//! bit flipped, a reference changed), written to every copy of the block
//! with its checksum recomputed, so that only a checker's logic (not a
//! checksum) can find it. What btrfs-progs' btrfs-corrupt-block does, for
//! the kinds of damage the fsck tests hold.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use ubtrfs_engine::ctree::{Cursor, Tree};
use ubtrfs_engine::io::volumes::Placement;
use ubtrfs_engine::{Filesystem, OpenOptions as FsOpen};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{FileExtent, FileExtentKind};
use ubtrfs_format::node::{HEADER_SIZE, ITEM_SIZE};
use ubtrfs_format::Key;

use crate::rng::Rng;

/// The kinds of damage, each a field or a structure a checker must
/// compare with something else.
pub const KINDS: &[&str] = &[
    "nlink",
    "file-isize",
    "dir-isize",
    "nbytes",
    "extent-refs",
    "bg-used",
    "drop-fs-item",
    "drop-extent-item",
    "bit-flip",
    "dup-extent",
    "data-ref",
    "dev-bytes-used",
    "qgroup-rfer",
];

/// A change to a leaf's bytes (given the node size).
type Edit = Box<dyn Fn(&mut [u8], usize)>;

/// One item found: its leaf, slot and key.
struct Found {
    leaf: u64,
    slot: usize,
    key: Key,
    data: Vec<u8>,
}

/// Every item of `tree` that `want` accepts.
fn items(fs: &Filesystem, tree: Tree, want: impl Fn(&Key, &[u8]) -> bool) -> Vec<Found> {
    let mut out = Vec::new();
    let mut c = Cursor::new(&fs.info, tree);
    if !c.seek(&Key::MIN).unwrap_or(false) {
        return out;
    }
    loop {
        if let (Some((k, d)), Some((leaf, slot))) = (c.item(), c.leaf()) {
            if want(&k, d) {
                out.push(Found {
                    leaf: leaf.bytenr,
                    slot,
                    key: k,
                    data: d.to_vec(),
                });
            }
        }
        if !c.next().unwrap_or(false) {
            return out;
        }
    }
}

/// Applies damage `kind` (one of [`KINDS`]) to the image, choosing where
/// by `seed`; returns what was done, or None when the image has nothing
/// of that kind.
pub fn corrupt(image: &Path, kind: &str, seed: u64) -> Option<String> {
    let mut rng = Rng::new(seed);
    let fs = Filesystem::open(image, &FsOpen::default()).expect("open the image to corrupt");
    let fs_tree = fs.tree(FS_TREE_OBJECTID).unwrap();
    let extent_tree = fs.tree(EXTENT_TREE_OBJECTID).unwrap();
    let inode_with = |mode: u32| {
        items(&fs, fs_tree, move |k, d| {
            k.item_type == INODE_ITEM
                && k.objectid >= FIRST_FREE_OBJECTID
                && ubtrfs_format::items::InodeItem::parse(d)
                    .is_ok_and(|i| i.mode & 0o170000 == mode)
        })
    };
    let pick = |v: &mut Vec<Found>, rng: &mut Rng| -> Option<Found> {
        if v.is_empty() {
            None
        } else {
            Some(v.swap_remove(rng.below(v.len() as u64) as usize))
        }
    };
    // (leaf, slot, byte offset in the item, bytes to add as little-endian)
    let add_at = |f: &Found, off: usize, width: usize, delta: u64| -> (u64, Edit) {
        let slot = f.slot;
        (
            f.leaf,
            Box::new(move |leaf: &mut [u8], _ns: usize| {
                let (start, _) = item_range(leaf, slot);
                let at = start + off;
                let mut v = [0u8; 8];
                v[..width].copy_from_slice(&leaf[at..at + width]);
                let n = u64::from_le_bytes(v).wrapping_add(delta);
                leaf[at..at + width].copy_from_slice(&n.to_le_bytes()[..width]);
            }),
        )
    };
    let (leaf, what, edit): (u64, String, Edit) = match kind {
        "nlink" => {
            let f = pick(&mut inode_with(0o100000), &mut rng)?;
            let (l, e) = add_at(&f, 40, 4, 1);
            (l, format!("fs tree inode {}: nlink + 1", f.key.objectid), e)
        }
        "file-isize" => {
            let f = pick(&mut inode_with(0o100000), &mut rng)?;
            let (l, e) = add_at(&f, 16, 8, 8192);
            (
                l,
                format!("fs tree inode {}: size + 8192", f.key.objectid),
                e,
            )
        }
        "dir-isize" => {
            let f = pick(&mut inode_with(0o040000), &mut rng)?;
            let (l, e) = add_at(&f, 16, 8, 2);
            (
                l,
                format!("fs tree directory {}: size + 2", f.key.objectid),
                e,
            )
        }
        "nbytes" => {
            let f = pick(&mut inode_with(0o100000), &mut rng)?;
            let (l, e) = add_at(&f, 24, 8, 4096);
            (
                l,
                format!("fs tree inode {}: nbytes + 4096", f.key.objectid),
                e,
            )
        }
        "extent-refs" => {
            let mut v = items(&fs, extent_tree, |k, _| {
                k.item_type == EXTENT_ITEM || k.item_type == METADATA_ITEM
            });
            let f = pick(&mut v, &mut rng)?;
            let (l, e) = add_at(&f, 0, 8, 1);
            (l, format!("extent item {}: refs + 1", f.key), e)
        }
        "bg-used" => {
            let mut v = items(&fs, extent_tree, |k, _| k.item_type == BLOCK_GROUP_ITEM);
            let f = pick(&mut v, &mut rng)?;
            let (l, e) = add_at(&f, 0, 8, fs.info.nodesize as u64);
            (
                l,
                format!("block group {}: used + nodesize", f.key.objectid),
                e,
            )
        }
        "drop-fs-item" | "drop-extent-item" => {
            let tree = if kind == "drop-fs-item" {
                fs_tree
            } else {
                extent_tree
            };
            // Not a leaf's first item (its parent's key names it).
            let mut v = items(&fs, tree, |k, _| {
                k.objectid >= FIRST_FREE_OBJECTID || tree.id == EXTENT_TREE_OBJECTID
            });
            v.retain(|f| f.slot > 0);
            let f = pick(&mut v, &mut rng)?;
            let slot = f.slot;
            (
                f.leaf,
                format!("{} item {} dropped", tree.describe(), f.key),
                Box::new(move |leaf: &mut [u8], _| drop_item(leaf, slot)),
            )
        }
        "bit-flip" => {
            let mut v = items(&fs, fs_tree, |k, d| {
                k.objectid >= FIRST_FREE_OBJECTID && !d.is_empty()
            });
            let f = pick(&mut v, &mut rng)?;
            let byte = rng.below(f.data.len() as u64) as usize;
            let bit = rng.below(8) as u8;
            let slot = f.slot;
            (
                f.leaf,
                format!("fs tree item {}: bit {bit} of byte {byte} flipped", f.key),
                Box::new(move |leaf: &mut [u8], _| {
                    let (start, _) = item_range(leaf, slot);
                    leaf[start + byte] ^= 1 << bit;
                }),
            )
        }
        "dup-extent" => {
            let mut v = items(&fs, fs_tree, |k, d| {
                k.item_type == EXTENT_DATA
                    && matches!(
                        FileExtent::parse(d).map(|f| f.kind),
                        Ok(FileExtentKind::Extent { disk_bytenr, .. }) if disk_bytenr != 0
                    )
            });
            if v.len() < 2 {
                return None;
            }
            let a = pick(&mut v, &mut rng)?;
            let b = v.into_iter().find(|b| b.data[21..29] != a.data[21..29])?;
            let (bytenr, disk_len) = (b.data[21..29].to_vec(), b.data[29..37].to_vec());
            let slot = a.slot;
            (
                a.leaf,
                format!("fs tree {}: points at the extent of {}", a.key, b.key),
                Box::new(move |leaf: &mut [u8], _| {
                    let (start, _) = item_range(leaf, slot);
                    leaf[start + 21..start + 29].copy_from_slice(&bytenr);
                    leaf[start + 29..start + 37].copy_from_slice(&disk_len);
                }),
            )
        }
        "data-ref" => {
            // An inline EXTENT_DATA_REF's count, right after the 24-byte
            // head: type at 24, root 25, objectid 33, offset 41, count 49.
            let mut v = items(&fs, extent_tree, |k, d| {
                k.item_type == EXTENT_ITEM && d.len() >= 53 && d[24] == EXTENT_DATA_REF
            });
            let f = pick(&mut v, &mut rng)?;
            let (l, e) = add_at(&f, 49, 4, 1);
            (
                l,
                format!("extent item {}: inline data ref count + 1", f.key),
                e,
            )
        }
        "dev-bytes-used" => {
            let chunk = Tree::chunk(&fs.info.sb);
            let mut v = items(&fs, chunk, |k, _| k.item_type == DEV_ITEM);
            let f = pick(&mut v, &mut rng)?;
            let (l, e) = add_at(&f, 16, 8, 1 << 20);
            (
                l,
                format!("device item {}: bytes_used + 1 MiB", f.key.offset),
                e,
            )
        }
        "qgroup-rfer" => {
            // A QGROUP_INFO's referenced bytes: generation at 0, rfer at 8.
            let quota = fs.tree(QUOTA_TREE_OBJECTID).ok()?;
            let mut v = items(&fs, quota, |k, _| k.item_type == QGROUP_INFO);
            let f = pick(&mut v, &mut rng)?;
            let (l, e) = add_at(&f, 8, 8, 4096);
            (
                l,
                format!(
                    "quota group {}/{}: referenced + 4096",
                    f.key.offset >> 48,
                    f.key.offset & ((1 << 48) - 1)
                ),
                e,
            )
        }
        other => panic!("unknown damage {other}"),
    };
    write_block(&fs, image, leaf, &*edit);
    Some(what)
}

/// The byte range of item `slot`'s data in a leaf's bytes.
fn item_range(leaf: &[u8], slot: usize) -> (usize, usize) {
    let at = HEADER_SIZE + slot * ITEM_SIZE + 17;
    let off = u32::from_le_bytes(leaf[at..at + 4].try_into().unwrap()) as usize;
    let size = u32::from_le_bytes(leaf[at + 4..at + 8].try_into().unwrap()) as usize;
    (HEADER_SIZE + off, size)
}

/// Removes item `slot` from a leaf, moving the data of the items after it
/// (which lie below it) up, as the kernel's btrfs_del_items does.
fn drop_item(leaf: &mut [u8], slot: usize) {
    let n = u32::from_le_bytes(leaf[0x60..0x64].try_into().unwrap()) as usize;
    let (start, size) = item_range(leaf, slot);
    let low = if n > slot + 1 {
        item_range(leaf, n - 1).0
    } else {
        start
    };
    leaf.copy_within(low..start, low + size);
    for i in slot + 1..n {
        let at = HEADER_SIZE + i * ITEM_SIZE + 17;
        let off = u32::from_le_bytes(leaf[at..at + 4].try_into().unwrap()) + size as u32;
        leaf[at..at + 4].copy_from_slice(&off.to_le_bytes());
    }
    let from = HEADER_SIZE + (slot + 1) * ITEM_SIZE;
    let to = HEADER_SIZE + n * ITEM_SIZE;
    leaf.copy_within(from..to, from - ITEM_SIZE);
    leaf[0x60..0x64].copy_from_slice(&((n - 1) as u32).to_le_bytes());
}

/// Reads the block at `logical`, applies `edit`, recomputes its checksum
/// and writes it to every copy.
fn write_block(fs: &Filesystem, image: &Path, logical: u64, edit: &dyn Fn(&mut [u8], usize)) {
    let ns = fs.info.nodesize as usize;
    let mut buf = vec![0u8; ns];
    fs.info.read_copy(logical, &mut buf, 0).unwrap();
    edit(&mut buf, ns);
    let sum = fs.info.csum_type.compute(&buf[32..]);
    buf[..32].copy_from_slice(&sum);
    let piece = fs.info.chunks.map(logical, ns as u64).unwrap();
    let Placement::Mirrors(copies) = piece.placement else {
        panic!("corrupt: block {logical} is in a parity chunk");
    };
    let f = OpenOptions::new().write(true).open(image).unwrap();
    for c in copies {
        assert_eq!(
            c.devid, fs.info.sb.dev_item.devid,
            "corrupt: single-device images only"
        );
        f.write_all_at(&buf, c.physical).unwrap();
    }
    f.sync_all().unwrap();
}
