//! `ubtrfs check --repair`: the repairs [`super::Fix`] names, written in
//! one transaction (copy-on-write, the superblock last), so a kill leaves
//! the image as it was or repaired. Only counters the check recounted from
//! what the trees hold are set; what needs items made or removed is not
//! repaired yet, and a check with any such problem repairs nothing
//! ([`super::CheckReport::fixes`]).

use super::Fix;
use crate::error::{Error, Result};
use crate::tx::Trans;

/// Applies `fixes` in `t` (the caller commits).
pub fn apply(t: &mut Trans, fixes: &[Fix]) -> Result<()> {
    for f in fixes {
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
        }
    }
    Ok(())
}

fn inode(t: &Trans, tree: u64, ino: u64) -> Result<ubtrfs_format::items::InodeItem> {
    t.inode(tree, ino)?
        .ok_or_else(|| Error::NotFound(format!("repair: inode {ino} of tree {tree} is not there")))
}
