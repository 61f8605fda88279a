//! `ubtrfs check --repair`: the repairs [`super::Fix`] names, written in
//! one transaction (copy-on-write, the superblock last), so a kill leaves
//! the image as it was or repaired. Counters the check recounted from what
//! the trees hold, and fields past what they can be, are set; a lost
//! orphan item is added. What needs items made or removed otherwise is
//! not repaired yet, and a check with any such problem repairs nothing
//! ([`super::CheckReport::fixes`]).

use super::Fix;
use crate::error::{Error, Result};
use crate::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::Key;

/// Applies `fixes` in `t` (the caller commits).
pub fn apply(t: &mut Trans, fixes: &[Fix]) -> Result<()> {
    // The superblock's totals last: they sum what the others set.
    let (last, first): (Vec<&Fix>, Vec<&Fix>) = fixes
        .iter()
        .partition(|f| matches!(f, Fix::SuperTotalBytes));
    for f in first.into_iter().chain(last) {
        match *f {
            Fix::BlockGroupUsed { start, used } => {
                let g = t.alloc.groups.get_mut(&start).ok_or_else(|| {
                    Error::NotFound(format!("repair: block group {start} is not there"))
                })?;
                g.used = used;
                g.item_dirty = true;
            }
            Fix::DeviceBytesUsed { devid, used } => t.set_device_bytes_used(devid, used)?,
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
            Fix::ExtentGeneration { key, generation } => {
                // The extent item's head: refs, then generation.
                let found = t.update_item(EXTENT_TREE_OBJECTID, &key, |d| {
                    if d.len() >= 16 {
                        d[8..16].copy_from_slice(&generation.to_le_bytes());
                    }
                })?;
                if !found {
                    return Err(Error::NotFound(format!(
                        "repair: extent item {key} is not there"
                    )));
                }
            }
            Fix::DeviceTotalBytes { devid, bytes } => t.set_device_total_bytes(devid, bytes)?,
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
            Fix::RootOrphan { id } => t.insert_item(
                ROOT_TREE_OBJECTID,
                Key::new(ORPHAN_OBJECTID, ORPHAN_ITEM, id),
                Vec::new(),
            )?,
        }
    }
    Ok(())
}

fn inode(t: &Trans, tree: u64, ino: u64) -> Result<ubtrfs_format::items::InodeItem> {
    t.inode(tree, ino)?
        .ok_or_else(|| Error::NotFound(format!("repair: inode {ino} of tree {tree} is not there")))
}
