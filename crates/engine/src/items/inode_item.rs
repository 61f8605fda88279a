//! Inode items and their back references (the kernel's inode-item.c and
//! backref.c btrfs_ref_to_path): the inode item, every (parent, name)
//! from INODE_REF and INODE_EXTREF items, and an inode's path.

use super::{check_entry_name, describe_tree, ItemSource};
use crate::error::{Error, FormatContext, Result};
use std::ops::ControlFlow;
use ubtrfs_format::consts::{FIRST_INODE, INODE_EXTREF, INODE_REF};
use ubtrfs_format::items::{parse_inode_extrefs, parse_inode_refs, InodeItem, InodeRef};
use ubtrfs_format::key::Key;

/// The inode item of inode `ino` in tree `tree`, if it has one.
pub fn inode_item<S: ItemSource + ?Sized>(
    src: &S,
    tree: u64,
    ino: u64,
) -> Result<Option<InodeItem>> {
    let key = InodeItem::key(ino);
    match src.item(tree, &key)? {
        Some(d) => Ok(Some(
            InodeItem::parse(&d).at(|| format!("{} key {key}", describe_tree(tree)))?,
        )),
        None => Ok(None),
    }
}

/// The (parent, name) pairs of an INODE_REF or INODE_EXTREF item `k` of
/// tree `tree`; a name that is not one path component (but for the ".."
/// a subvolume's root directory is its own parent by) is an error naming
/// the tree, inode and key.
pub fn decode_refs<'a>(tree: u64, k: &Key, d: &'a [u8]) -> Result<Vec<InodeRef<'a>>> {
    let here = || format!("{} inode {} key {k}", describe_tree(tree), k.objectid);
    let refs = if k.item_type == INODE_REF {
        parse_inode_refs(k, d)
    } else {
        parse_inode_extrefs(d)
    }
    .at(here)?;
    for r in &refs {
        // A subvolume's root directory names itself "..".
        if r.parent == k.objectid && r.name == b".." {
            continue;
        }
        check_entry_name(r.name).map_err(|why| Error::corrupt(here(), why))?;
    }
    Ok(refs)
}

/// Calls `f` with each back reference of inode `ino` in tree `tree`, from
/// INODE_REF then INODE_EXTREF items, until it breaks.
pub fn for_each_ref<S, F>(src: &S, tree: u64, ino: u64, mut f: F) -> Result<()>
where
    S: ItemSource + ?Sized,
    F: FnMut(&InodeRef<'_>) -> ControlFlow<()>,
{
    src.visit(
        tree,
        &Key::new(ino, INODE_REF, 0),
        &Key::new(ino, INODE_EXTREF, u64::MAX),
        &mut |k, d| {
            for r in decode_refs(tree, k, d)? {
                if f(&r).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        },
    )
}

/// The first (parent, name) of inode `ino` (the kernel's get_first_ref).
pub fn first_ref<S: ItemSource + ?Sized>(
    src: &S,
    tree: u64,
    ino: u64,
) -> Result<Option<(u64, Vec<u8>)>> {
    let mut out = None;
    for_each_ref(src, tree, ino, |r| {
        out = Some((r.parent, r.name.to_vec()));
        ControlFlow::Break(())
    })?;
    Ok(out)
}

/// Every (parent, name, dir index) of inode `ino`, in key order.
pub fn refs<S: ItemSource + ?Sized>(
    src: &S,
    tree: u64,
    ino: u64,
) -> Result<Vec<(u64, Vec<u8>, u64)>> {
    let mut out = Vec::new();
    for_each_ref(src, tree, ino, |r| {
        out.push((r.parent, r.name.to_vec(), r.index));
        ControlFlow::Continue(())
    })?;
    Ok(out)
}

/// The path of `ino` inside tree `tree` (relative, no leading '/'),
/// following the first name of each inode up to the root directory, as
/// the kernel's btrfs_ref_to_path. Every name is one path component.
pub fn path<S: ItemSource + ?Sized>(src: &S, tree: u64, ino: u64) -> Result<Vec<u8>> {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    let mut cur = ino;
    // A directory has one parent; a loop in a corrupt image is cut off.
    for _ in 0..4096 {
        if cur == FIRST_INODE {
            parts.reverse();
            return Ok(parts.join(&b'/'));
        }
        let (parent, name) = first_ref(src, tree, cur)?.ok_or_else(|| {
            Error::corrupt(
                format!("{} inode {cur}", describe_tree(tree)),
                "inode has no INODE_REF",
            )
        })?;
        parts.push(name);
        cur = parent;
    }
    Err(Error::corrupt(
        format!("{} inode {ino}", describe_tree(tree)),
        "parent chain does not reach the root directory",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ubtrfs_format::items::InodeRef;

    fn tree() -> u64 {
        257
    }

    /// An INODE_REF item of inode 300 in directory 256 holding `names`,
    /// or the INODE_EXTREF item when `ext`.
    fn item(ext: bool, names: &[&[u8]]) -> (Key, Vec<u8>) {
        let mut d = Vec::new();
        let mut key = Key::new(300, INODE_REF, 256);
        for (i, name) in names.iter().enumerate() {
            let r = InodeRef {
                parent: 256,
                index: 2 + i as u64,
                name,
            };
            if ext {
                r.encode_extref(&mut d);
                key = r.extref_key(300);
            } else {
                r.encode_ref(&mut d);
            }
        }
        (key, d)
    }

    #[test]
    fn ref_names_must_be_one_path_component() {
        for ext in [false, true] {
            let (k, d) = item(ext, &[b"a", b"b.txt"]);
            let refs = decode_refs(tree(), &k, &d).unwrap();
            assert_eq!(
                refs.iter().map(|r| r.name).collect::<Vec<_>>(),
                [b"a" as &[u8], b"b.txt"]
            );
            for bad in [&b""[..], b".", b"..", b"../x", b"a/b", b"a\0b"] {
                let (k, d) = item(ext, &[b"ok", bad]);
                let e = decode_refs(tree(), &k, &d).expect_err("bad name accepted");
                let msg = e.to_string();
                assert!(
                    msg.contains("subvolume 257 tree inode 300 key (300 INODE_")
                        && msg.contains("invalid directory entry name"),
                    "{msg}"
                );
            }
        }
        // A subvolume's root directory is its own parent, named "..".
        let d = {
            let mut d = Vec::new();
            InodeRef {
                parent: 256,
                index: 0,
                name: b"..",
            }
            .encode_ref(&mut d);
            d
        };
        let k = Key::new(256, INODE_REF, 256);
        assert_eq!(decode_refs(tree(), &k, &d).unwrap()[0].name, b"..");
    }
}
