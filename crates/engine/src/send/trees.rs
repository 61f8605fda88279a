//! Reads the send code needs from one subvolume tree: inode items, refs,
//! directory entries and xattrs, addressed by tree rather than by
//! filesystem path.

use crate::error::{Error, FormatContext, Result};
use crate::fs::Filesystem;
use crate::tree::ctree::{for_each_item, lookup, Cursor, Tree};
use std::ops::ControlFlow;
use ubtrfs_format::checksum::name_hash;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{
    parse_dir_entries, parse_inode_extrefs, parse_inode_refs, InodeItem, RootItem, RootRef,
};
use ubtrfs_format::key::Key;

/// A subvolume taking part in a send: the one sent, the parent, or a clone
/// source.
#[derive(Debug, Clone)]
pub struct RootInfo {
    pub id: u64,
    pub tree: Tree,
    pub item: RootItem,
    /// Its name in its parent directory (ROOT_BACKREF), as SUBVOL carries it.
    pub name: Vec<u8>,
}

impl RootInfo {
    pub fn load(fs: &Filesystem, id: u64) -> Result<RootInfo> {
        let item = fs
            .root_item(id)?
            .ok_or_else(|| Error::NotFound(format!("subvolume {id} does not exist")))?;
        let tree = fs.tree(id)?;
        let mut name = Vec::new();
        for_each_item(
            &fs.info,
            fs.root_tree,
            Key::new(id, ROOT_BACKREF, 0),
            Key::new(id, ROOT_BACKREF, u64::MAX),
            |k, d| {
                let r = RootRef::parse(d).at(|| format!("root tree key {k}"))?;
                name = r.name.to_vec();
                Ok(ControlFlow::Break(()))
            },
        )?;
        Ok(RootInfo {
            id,
            tree,
            item,
            name,
        })
    }

    /// The UUID a stream names this subvolume by: the received UUID when it
    /// was itself received, else its own (what `btrfs receive` looks up).
    pub fn stream_uuid(&self) -> [u8; 16] {
        if self.item.received_uuid != [0u8; 16] {
            self.item.received_uuid
        } else {
            self.item.uuid
        }
    }
}

pub fn inode_item(fs: &Filesystem, tree: Tree, ino: u64) -> Result<Option<InodeItem>> {
    let key = Key::new(ino, INODE_ITEM, 0);
    match lookup(&fs.info, tree, &key)? {
        Some(d) => Ok(Some(
            InodeItem::parse(&d).at(|| format!("{} key {key}", tree.describe()))?,
        )),
        None => Ok(None),
    }
}

/// Every (parent, name) of `ino` in key order: INODE_REF items by parent,
/// then INODE_EXTREF items.
pub fn refs(fs: &Filesystem, tree: Tree, ino: u64) -> Result<Vec<(u64, Vec<u8>)>> {
    let mut out = Vec::new();
    for_each_item(
        &fs.info,
        tree,
        Key::new(ino, INODE_REF, 0),
        Key::new(ino, INODE_EXTREF, u64::MAX),
        |k, d| {
            parse_ref_item(tree, &k, d, &mut out)?;
            Ok(ControlFlow::Continue(()))
        },
    )?;
    Ok(out)
}

/// Decodes an INODE_REF or INODE_EXTREF item into `out`.
pub fn parse_ref_item(tree: Tree, k: &Key, d: &[u8], out: &mut Vec<(u64, Vec<u8>)>) -> Result<()> {
    let refs = if k.item_type == INODE_REF {
        parse_inode_refs(k, d)
    } else {
        parse_inode_extrefs(d)
    }
    .at(|| format!("{} key {k}", tree.describe()))?;
    out.extend(refs.iter().map(|r| (r.parent, r.name.to_vec())));
    Ok(())
}

/// The first (parent, name) of `ino`, as the kernel's get_first_ref.
pub fn first_ref(fs: &Filesystem, tree: Tree, ino: u64) -> Result<Option<(u64, Vec<u8>)>> {
    let mut c = Cursor::new(&fs.info, tree);
    if !c.seek(&Key::new(ino, INODE_REF, 0))? {
        return Ok(None);
    }
    let Some((k, d)) = c.item() else {
        return Ok(None);
    };
    if k.objectid != ino || (k.item_type != INODE_REF && k.item_type != INODE_EXTREF) {
        return Ok(None);
    }
    let mut v = Vec::new();
    parse_ref_item(tree, &k, d, &mut v)?;
    Ok(v.into_iter().next())
}

/// What the entry `name` in directory `dir` points to (its location key).
pub fn dir_lookup(fs: &Filesystem, tree: Tree, dir: u64, name: &[u8]) -> Result<Option<Key>> {
    let key = Key::new(dir, DIR_ITEM, name_hash(name));
    let Some(d) = lookup(&fs.info, tree, &key)? else {
        return Ok(None);
    };
    for e in parse_dir_entries(&d).at(|| format!("{} key {key}", tree.describe()))? {
        if e.name == name {
            return Ok(Some(e.location));
        }
    }
    Ok(None)
}

/// The entries of `dir` in index order: (name, location).
pub fn dir_entries(fs: &Filesystem, tree: Tree, dir: u64) -> Result<Vec<(Vec<u8>, Key)>> {
    let mut out = Vec::new();
    for_each_item(
        &fs.info,
        tree,
        Key::new(dir, DIR_INDEX, 0),
        Key::new(dir, DIR_INDEX, u64::MAX),
        |k, d| {
            for e in parse_dir_entries(d).at(|| format!("{} key {k}", tree.describe()))? {
                out.push((e.name.to_vec(), e.location));
            }
            Ok(ControlFlow::Continue(()))
        },
    )?;
    Ok(out)
}

/// All xattrs of `ino` in key (name hash) order, as the kernel visits them.
pub fn xattrs(fs: &Filesystem, tree: Tree, ino: u64) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    for_each_item(
        &fs.info,
        tree,
        Key::new(ino, XATTR_ITEM, 0),
        Key::new(ino, XATTR_ITEM, u64::MAX),
        |k, d| {
            for e in parse_dir_entries(d).at(|| format!("{} key {k}", tree.describe()))? {
                out.push((e.name.to_vec(), e.data.to_vec()));
            }
            Ok(ControlFlow::Continue(()))
        },
    )?;
    Ok(out)
}

pub fn xattr(fs: &Filesystem, tree: Tree, ino: u64, name: &[u8]) -> Result<Option<Vec<u8>>> {
    let key = Key::new(ino, XATTR_ITEM, name_hash(name));
    let Some(d) = lookup(&fs.info, tree, &key)? else {
        return Ok(None);
    };
    Ok(parse_dir_entries(&d)
        .at(|| format!("{} key {key}", tree.describe()))?
        .into_iter()
        .find(|e| e.name == name)
        .map(|e| e.data.to_vec()))
}

/// The full path of `ino` inside `tree` (no leading '/'), following first
/// refs, as the kernel's get_inode_path / btrfs_ref_to_path.
pub fn path_in_tree(fs: &Filesystem, tree: Tree, ino: u64) -> Result<Vec<u8>> {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    let mut cur = ino;
    for _ in 0..4096 {
        if cur == FIRST_INODE {
            parts.reverse();
            return Ok(parts.join(&b'/'));
        }
        let (p, name) = first_ref(fs, tree, cur)?.ok_or_else(|| {
            Error::corrupt(
                format!("{} inode {cur}", tree.describe()),
                "inode has no INODE_REF",
            )
        })?;
        parts.push(name);
        cur = p;
    }
    Err(Error::corrupt(
        format!("{} inode {ino}", tree.describe()),
        "parent chain does not reach the root directory",
    ))
}
