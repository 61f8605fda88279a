//! `ubtrfs check --repair`: the repairs [`super::Fix`] names, written in
//! one transaction (copy-on-write, the superblock last), so a kill leaves
//! the image as it was or repaired. Counters the check recounted from what
//! the trees hold, and fields past what they can be, are set; a lost
//! orphan item is added; the items a name lacks are made from those that
//! agree on it, entries in the wrong place removed, a missing inode item
//! made, an inode no name reaches linked into lost+found, a file's gaps
//! filled with holes, a data reference nothing makes dropped, a block
//! from the future copied on write, a tree block's missing extent item
//! made, file extents pointed back at their orphaned extent, a leaf whose
//! item data was out of place copied on write from every tree reaching
//! it (read mended), a node without its pointers to unreadable leaves
//! copied on write the same way and their extents freed, an inode that
//! only entries still name made again, a root item pointed at its tree's
//! newer root. What
//! else needs items made or removed is not repaired yet, and a check with
//! any such problem repairs nothing ([`super::CheckReport::fixes`]).
//!
//! Order matters, as the check counted each figure from the trees as they
//! were, with the names it adds: misplaced entries go first, then the
//! names and inode items are made, then the counters are set (a
//! directory's size includes the names added), then lost+found gets what
//! no name reaches (its links count on top), and the superblock's totals
//! last.

use super::{Fix, NamePart};
use crate::disk_io::FsInfo;
use crate::error::{Error, Result};
use crate::inode::now;
use crate::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{dir_index_key, dir_item_key, DirEntry, InodeItem};
use ubtrfs_format::Key;

/// When each kind of repair is made (lowest first).
fn stage(f: &Fix) -> u8 {
    match f {
        // Space first: nothing may be allocated (a copy on write of a
        // mended block, say) over an extent that only now gets its item.
        Fix::NewTreeExtent { .. } | Fix::NewDataExtent { .. } => 0,
        Fix::RootBlock { .. } | Fix::MendBlock { .. } => 1,
        Fix::DeleteDirName { .. } | Fix::CowBlock { .. } => 2,
        Fix::RewriteDirIndex { .. } | Fix::AddName { .. } | Fix::NewInodeItem { .. } => 3,
        Fix::LostFound { .. } => 5,
        Fix::SuperTotalBytes => 6,
        _ => 4,
    }
}

/// Makes `info` read blocks as the check read them when `fixes` mend
/// blocks: leaves with their item data put back in place, nodes without
/// their pointers to unreadable leaves. For [`Trans::open_with`], so that
/// opening the transaction (which reads the extent tree) reads them so
/// too.
pub fn prepare(info: &FsInfo, fixes: &[Fix]) {
    if fixes.iter().any(|f| matches!(f, Fix::MendBlock { .. })) {
        info.mend_leaves();
        info.drop_leaves(
            fixes
                .iter()
                .flat_map(|f| match f {
                    Fix::MendBlock { drops, .. } => drops.clone(),
                    _ => Vec::new(),
                })
                .map(|b| (b, "unreadable".to_string())),
        );
    }
}

/// Applies `fixes` in `t` (the caller commits; it opens `t` with
/// [`prepare`]).
pub fn apply(t: &mut Trans, fixes: &[Fix]) -> Result<()> {
    prepare(&t.info, fixes);
    let mut order: Vec<&Fix> = fixes.iter().collect();
    order.sort_by_key(|f| stage(f));
    for f in order {
        match *f {
            Fix::BlockGroupUsed { start, used } => {
                let g = t.alloc.groups.get_mut(&start).ok_or_else(|| {
                    Error::NotFound(format!("repair: block group {start} is not there"))
                })?;
                g.used = used;
                g.item_dirty = true;
            }
            Fix::DeviceBytesUsed { devid, used } => t.dev_item_mut(devid)?.bytes_used = used,
            // The commit writes the block groups' sum.
            Fix::SuperBytesUsed => {}
            Fix::InodeNbytes { tree, ino, nbytes } => {
                let mut i = inode(t, tree, ino)?;
                i.nbytes = nbytes;
                t.inode_mut(tree, ino).put(&i)?;
            }
            Fix::DirSize { tree, ino, size } => {
                let mut i = inode(t, tree, ino)?;
                i.size = size;
                t.inode_mut(tree, ino).put(&i)?;
            }
            Fix::Nlink { tree, ino, nlink } => {
                let mut i = inode(t, tree, ino)?;
                i.nlink = nlink;
                t.inode_mut(tree, ino).put(&i)?;
            }
            Fix::InodeGenerations {
                tree,
                ino,
                generation,
                transid,
            } => {
                let mut i = inode(t, tree, ino)?;
                i.generation = generation;
                i.transid = transid;
                t.inode_mut(tree, ino).put(&i)?;
            }
            // The extent item's head: refs, then generation.
            Fix::ExtentGeneration { key, generation } => set_extent_head(t, &key, 8, generation)?,
            Fix::ExtentRefs { key, refs } => set_extent_head(t, &key, 0, refs)?,
            Fix::DeviceTotalBytes { devid, bytes } => t.dev_item_mut(devid)?.total_bytes = bytes,
            Fix::SuperNumDevices { n } => t.info.sb.num_devices = n,
            Fix::SuperTotalBytes => t.recount_total_bytes(),
            Fix::DeleteItem { tree, key } => {
                t.delete_item(tree, &key)?;
            }
            Fix::InlineRamBytes { tree, key, ram } => {
                // The file extent item's head: generation, then ram_bytes.
                t.update_item(tree, &key, |d| {
                    if d.len() >= 16 {
                        d[8..16].copy_from_slice(&ram.to_le_bytes());
                    }
                })?;
            }
            Fix::InodeMode { tree, ino, mode } => {
                let mut i = inode(t, tree, ino)?;
                i.mode = mode;
                t.inode_mut(tree, ino).put(&i)?;
            }
            Fix::RootBlock {
                id,
                bytenr,
                level,
                generation,
            } => t.repoint_root(id, bytenr, level, generation)?,
            Fix::DropTreeRef {
                bytenr,
                level,
                backref,
            } => t.drop_tree_ref(bytenr, level, backref),
            Fix::MendBlock {
                bytenr, ref key, ..
            } => {
                for tree in t.trees_through(bytenr, key)? {
                    t.cow_path(tree, key)?;
                }
            }
            Fix::RootOrphan { id } => t.insert_item(
                ROOT_TREE_OBJECTID,
                Key::new(ORPHAN_OBJECTID, ORPHAN_ITEM, id),
                Vec::new(),
            )?,
            Fix::AddName {
                tree,
                dir,
                ino,
                ref name,
                index,
                ftype,
                part,
            } => add_name(t, tree, dir, ino, name, index, ftype, part)?,
            Fix::DeleteDirName {
                tree,
                ref key,
                ref name,
            } => {
                t.del_dir_name(tree, key, name)?;
            }
            Fix::RewriteDirIndex {
                tree,
                dir,
                index,
                ino,
                ref name,
                ftype,
            } => {
                let e = entry(t, ino, ftype, name);
                t.put_item(tree, dir_index_key(dir, index), e)?;
            }
            Fix::NewInodeItem {
                tree,
                ino,
                mode,
                size,
                nbytes,
                nlink,
            } => {
                let time = now();
                let i = InodeItem {
                    generation: t.transid,
                    transid: t.transid,
                    size,
                    nbytes,
                    block_group: 0,
                    nlink,
                    uid: 0,
                    gid: 0,
                    mode,
                    rdev: 0,
                    flags: 0,
                    sequence: 0,
                    atime: time,
                    ctime: time,
                    mtime: time,
                    otime: time,
                };
                t.inode_mut(tree, ino).put(&i)?;
            }
            Fix::LostFound { tree, ino, ftype } => lost_found(t, tree, ino, ftype)?,
            Fix::CowBlock {
                tree,
                ref key,
                relax,
            } => {
                if let Some((bytenr, level)) = relax {
                    t.accept_block(bytenr, level)?;
                }
                t.cow_path(tree, key)?;
            }
            Fix::DataRefCount {
                bytenr,
                len,
                backref,
                delta,
            } => t.change_data_ref(bytenr, len, backref, delta),
            Fix::NewTreeExtent {
                bytenr,
                level,
                ref refs,
                replaces,
            } => {
                if let Some(k) = replaces {
                    t.delete_item(EXTENT_TREE_OBJECTID, &k)?;
                }
                t.claim_tree_block(bytenr, level, refs)?;
            }
            // The commit marks the quota status inconsistent.
            Fix::QuotaStale => {}
            Fix::NewDataExtent {
                bytenr,
                len,
                ref refs,
            } => t.claim_data_extent(bytenr, len, refs)?,
            Fix::RepointData {
                from,
                to,
                len,
                ref inodes,
            } => {
                for &(tree, ino) in inodes {
                    let lo = Key::new(ino, EXTENT_DATA, 0);
                    let hi = Key::new(ino, EXTENT_DATA, u64::MAX);
                    for (k, d) in t.items_in(tree, &lo, &hi)? {
                        if d.len() >= 37 && d[20] != 0 && d[21..29] == from.to_le_bytes() {
                            t.update_item(tree, &k, |d| {
                                d[21..29].copy_from_slice(&to.to_le_bytes());
                                d[29..37].copy_from_slice(&len.to_le_bytes());
                            })?;
                        }
                    }
                }
            }
            Fix::FillHoles { tree, ino, size } => {
                let ss = t.sectorsize() as u64;
                t.inode_mut(tree, ino)
                    .fill_holes(0, size.div_ceil(ss) * ss)?;
            }
        }
    }
    Ok(())
}

/// A directory entry of inode `ino` named `name`, as this transaction
/// writes it.
/// Sets the u64 at `off` of extent item `key`'s head (refs at 0,
/// generation at 8).
fn set_extent_head(t: &mut Trans, key: &Key, off: usize, value: u64) -> Result<()> {
    let found = t.update_item(EXTENT_TREE_OBJECTID, key, |d| {
        if let Some(field) = d.get_mut(off..off + 8) {
            field.copy_from_slice(&value.to_le_bytes());
        }
    })?;
    if !found {
        return Err(Error::NotFound(format!(
            "repair: extent item {key} is not there"
        )));
    }
    Ok(())
}

fn entry(t: &Trans, ino: u64, ftype: u8, name: &[u8]) -> Vec<u8> {
    DirEntry {
        location: Key::new(ino, INODE_ITEM, 0),
        transid: t.transid,
        file_type: ftype,
        name,
        data: &[],
    }
    .to_bytes()
}

#[allow(clippy::too_many_arguments)]
fn add_name(
    t: &mut Trans,
    tree: u64,
    dir: u64,
    ino: u64,
    name: &[u8],
    index: u64,
    ftype: u8,
    part: NamePart,
) -> Result<()> {
    match part {
        NamePart::DirItem => {
            let e = entry(t, ino, ftype, name);
            // Names whose hashes collide share one DIR_ITEM.
            t.append_item(tree, dir_item_key(dir, name), &e)
        }
        NamePart::DirIndex => {
            let e = entry(t, ino, ftype, name);
            t.insert_item(tree, dir_index_key(dir, index), e)
        }
        NamePart::InodeRef => t.inode_mut(tree, ino).add_inode_ref(dir, name, index),
    }
}

/// Links inode `ino` into the lost+found directory of `tree`'s top
/// directory (made, mode 0700, when it is not there) as its number, with
/// ".N" added while that name is taken; its nlink becomes 1.
fn lost_found(t: &mut Trans, tree: u64, ino: u64, ftype: u8) -> Result<()> {
    const LOST: &[u8] = b"lost+found";
    let top = t.root(tree)?.item.root_dirid;
    let lf = match t.lookup_name(tree, top, LOST)? {
        Some(e) if e.location.item_type == INODE_ITEM => e.location.objectid,
        Some(_) => {
            return Err(Error::Exists(format!(
                "repair: tree {tree}: lost+found names a subvolume"
            )))
        }
        None => {
            let n = t.highest_ino(tree)? + 1;
            t.inode_mut(tree, top)
                .create_inode(LOST, n, 0o40700, 0, (0, 0), now())?;
            n
        }
    };
    let mut name = ino.to_string().into_bytes();
    while t.lookup_name(tree, lf, &name)?.is_some() {
        name.extend_from_slice(format!(".{ino}").as_bytes());
        if name.len() > 255 {
            return Err(Error::Exists(format!(
                "repair: tree {tree}: no free name for inode {ino} in lost+found"
            )));
        }
    }
    let index = t.next_dir_index(tree, lf)?;
    t.inode_mut(tree, lf)
        .link_inode(&name, ino, ftype, index, Some(now()))?;
    let mut i = inode(t, tree, ino)?;
    i.nlink = 1;
    t.inode_mut(tree, ino).put(&i)
}

fn inode(t: &Trans, tree: u64, ino: u64) -> Result<ubtrfs_format::items::InodeItem> {
    t.inode(tree, ino)?
        .ok_or_else(|| Error::NotFound(format!("repair: inode {ino} of tree {tree} is not there")))
}
