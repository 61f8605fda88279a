//! Names changed through a transaction (the kernel's inode.c
//! btrfs_create_new_inode, btrfs_unlink_inode, btrfs_rmdir, btrfs_rename,
//! btrfs_link, btrfs_evict_inode; xattr.c removal): lookups by name,
//! new inodes with the flags and properties they inherit, and removal of
//! names, back references and, with the last link, the inode and its
//! extents.

use super::file::{INODE_COMPRESS, INODE_NOCOMPRESS};
use super::InodeMut;
use crate::error::{Error, Result};
use crate::items::dir_item;
use crate::tx::delayed_ref::Backref;
use crate::tx::Trans;
use std::collections::HashMap;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{dir_index_key, dir_item_key, xattr_item_key, InodeItem, Timespec};
use ubtrfs_format::Key;

/// The property xattr that sets a file's compression.
pub const XATTR_COMPRESSION: &[u8] = b"btrfs.compression";

/// A directory entry found by name: where it points and its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub location: Key,
    pub file_type: u8,
}

impl Entry {
    /// The inode it names (None for a subvolume's entry).
    pub fn ino(&self) -> Option<u64> {
        (self.location.item_type == INODE_ITEM).then_some(self.location.objectid)
    }
}

fn name_str(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// The next free inode number of each subvolume a writer makes inodes
/// in, as the kernel's root->free_objectid: found from the tree's highest
/// inode the first time, then counted up.
#[derive(Debug, Default)]
pub struct FreeObjectids(HashMap<u64, u64>);

impl FreeObjectids {
    /// A new inode number in subvolume `tree`; ENOSPC when none is left.
    pub fn take(&mut self, t: &mut Trans, tree: u64) -> Result<u64> {
        let next = match self.0.get(&tree) {
            Some(&n) => n,
            None => t.highest_ino(tree)? + 1,
        };
        if next > LAST_FREE_OBJECTID {
            return Err(Error::NoSpace(format!(
                "subvolume {tree}: no inode numbers left"
            )));
        }
        self.0.insert(tree, next + 1);
        Ok(next)
    }
}

impl Trans {
    /// The entry `name` in directory `dir`, if any.
    pub fn lookup_name(&self, tree: u64, dir: u64, name: &[u8]) -> Result<Option<Entry>> {
        Ok(
            dir_item::hashed_entry(self, tree, dir, DIR_ITEM, name)?.map(|e| Entry {
                location: e.location,
                file_type: e.file_type,
            }),
        )
    }

    /// The highest inode number in use in `tree` (at least 256, the top
    /// directory): new inodes take the numbers above it, as the kernel's
    /// free_objectid.
    pub fn highest_ino(&mut self, tree: u64) -> Result<u64> {
        let last = self.last_key_le(tree, &Key::new(LAST_FREE_OBJECTID, u8::MAX, u64::MAX))?;
        Ok(last.map_or(FIRST_INODE, |k| k.objectid.max(FIRST_INODE)))
    }

    /// Makes inode `ino` as [`InodeMut::create_inode`] does, inheriting from
    /// directory `dir`, with `nlink` and no name (an O_TMPFILE file has
    /// none: nlink 0).
    #[allow(clippy::too_many_arguments)]
    pub fn new_inode(
        &mut self,
        tree: u64,
        dir: u64,
        ino: u64,
        mode: u32,
        rdev: u64,
        owner: (u32, u32),
        time: Timespec,
        nlink: u32,
    ) -> Result<InodeItem> {
        let parent = self.inode_of(tree, dir)?;
        if parent.mode & 0o170000 != 0o040000 {
            return Err(Error::Invalid(format!(
                "tree {tree} inode {dir} is not a directory"
            )));
        }
        let is_reg = mode & 0o170000 == 0o100000;
        let is_dir = mode & 0o170000 == 0o040000;
        let mut flags = 0;
        if parent.flags & INODE_NOCOMPRESS != 0 {
            flags |= INODE_NOCOMPRESS;
        } else if parent.flags & INODE_COMPRESS != 0 {
            flags |= INODE_COMPRESS;
        }
        if parent.flags & INODE_NODATACOW != 0 {
            flags |= INODE_NODATACOW;
            if is_reg {
                flags |= INODE_NODATASUM;
            }
        }
        let inode = InodeItem {
            generation: self.transid,
            transid: self.transid,
            size: 0,
            nbytes: 0,
            block_group: 0,
            nlink,
            uid: owner.0,
            gid: owner.1,
            mode,
            rdev,
            flags,
            sequence: 0,
            atime: time,
            ctime: time,
            mtime: time,
            otime: time,
        };
        self.inode_mut(tree, ino).put(&inode)?;
        // The compression property is inherited with the flag it sets.
        let prop = parent.flags & (INODE_COMPRESS | INODE_NOCOMPRESS) != 0;
        if prop && (is_reg || is_dir) && flags & INODE_NODATACOW == 0 {
            if let Some(v) = self.get_xattr(tree, dir, XATTR_COMPRESSION)? {
                self.inode_mut(tree, ino).set_xattr(XATTR_COMPRESSION, &v)?;
            }
        }
        Ok(inode)
    }

    /// The value of xattr `name` of `ino`.
    pub fn get_xattr(&self, tree: u64, ino: u64, name: &[u8]) -> Result<Option<Vec<u8>>> {
        dir_item::xattr(self, tree, ino, name)
    }

    /// Removes the back reference of `ino` named `name` in `parent`
    /// ([`Trans::del_inode_ref`]); returns its dir index, a corruption
    /// error when the name has none.
    fn remove_inode_ref(&mut self, tree: u64, ino: u64, parent: u64, name: &[u8]) -> Result<u64> {
        self.del_inode_ref(tree, ino, parent, name)?.ok_or_else(|| {
            Error::corrupt(
                format!("tree {tree} inode {ino}"),
                format!(
                    "no back reference for name {:?} in directory {parent}",
                    name_str(name)
                ),
            )
        })
    }

    /// The entry `name` of `dir`, NotFound when missing; subvolume
    /// entries are refused (receive and the mount do not move them).
    fn entry_ino(&mut self, tree: u64, dir: u64, name: &[u8]) -> Result<(u64, Entry)> {
        let e = self.lookup_name(tree, dir, name)?.ok_or_else(|| {
            Error::NotFound(format!(
                "tree {tree} directory {dir}: no entry {:?}",
                name_str(name)
            ))
        })?;
        let ino = e.ino().ok_or_else(|| {
            Error::Unsupported(format!(
                "tree {tree} directory {dir}: {:?} is a subvolume",
                name_str(name)
            ))
        })?;
        Ok((ino, e))
    }

    /// Adds name `name` in `dir` for the existing inode `ino` (link(2)).
    pub fn link(
        &mut self,
        tree: u64,
        ino: u64,
        dir: u64,
        name: &[u8],
        time: Timespec,
    ) -> Result<()> {
        let mut inode = self.inode_of(tree, ino)?;
        if inode.mode & 0o170000 == 0o040000 {
            return Err(Error::Invalid(format!(
                "tree {tree}: inode {ino} is a directory: no hard links"
            )));
        }
        if self.lookup_name(tree, dir, name)?.is_some() {
            return Err(Error::Exists(format!(
                "tree {tree} directory {dir}: {:?} exists",
                name_str(name)
            )));
        }
        let index = self.next_dir_index(tree, dir)?;
        let ftype = super::file_type(inode.mode);
        self.inode_mut(tree, dir)
            .link_inode(name, ino, ftype, index, Some(time))?;
        inode.nlink += 1;
        self.inode_mut(tree, ino)
            .put_changed(&mut inode, Some(time))
    }

    /// Moves `from_name` in `from_dir` to `to_name` in `to_dir`
    /// (rename(2)): a file there is replaced, a directory there only when
    /// empty and when the moved one is a directory too.
    pub fn rename(
        &mut self,
        tree: u64,
        from_dir: u64,
        from_name: &[u8],
        to_dir: u64,
        to_name: &[u8],
        time: Timespec,
    ) -> Result<()> {
        let (ino, e) = self.entry_ino(tree, from_dir, from_name)?;
        if from_dir == to_dir && from_name == to_name {
            return Ok(());
        }
        if let Some(old) = self.lookup_name(tree, to_dir, to_name)? {
            if old.location == e.location {
                // Two names of one inode: rename(2) does nothing.
                return Ok(());
            }
            let is_dir = e.file_type == FT_DIR;
            if (old.file_type == FT_DIR) != is_dir {
                return Err(Error::Invalid(format!(
                    "rename {:?} over {:?}: one is a directory, the other is not",
                    name_str(from_name),
                    name_str(to_name)
                )));
            }
            self.inode_mut(tree, to_dir).unlink(to_name, time)?;
        }
        if e.file_type == FT_DIR && to_dir != from_dir {
            // A directory may not move below itself.
            let mut d = to_dir;
            while d != FIRST_INODE {
                if d == ino {
                    return Err(Error::Invalid(format!(
                        "rename {:?}: a directory cannot move below itself",
                        name_str(from_name)
                    )));
                }
                d = self.parent_of(tree, d)?;
            }
        }
        let index = self.remove_inode_ref(tree, ino, from_dir, from_name)?;
        self.inode_mut(tree, from_dir)
            .remove_dir_entry(from_name, index, time)?;
        let new_index = self.next_dir_index(tree, to_dir)?;
        self.inode_mut(tree, to_dir).link_inode(
            to_name,
            ino,
            e.file_type,
            new_index,
            Some(time),
        )?;
        let mut inode = self.inode_of(tree, ino)?;
        self.inode_mut(tree, ino)
            .put_changed(&mut inode, Some(time))
    }

    /// Swaps what `name_a` in `dir_a` and `name_b` in `dir_b` name
    /// (renameat2 with RENAME_EXCHANGE): both stay, each naming the
    /// other's inode; both inodes and directories take `time` as ctime
    /// (the directories as mtime too).
    pub fn exchange(
        &mut self,
        tree: u64,
        dir_a: u64,
        name_a: &[u8],
        dir_b: u64,
        name_b: &[u8],
        time: Timespec,
    ) -> Result<()> {
        let (ino_a, ea) = self.entry_ino(tree, dir_a, name_a)?;
        let (ino_b, eb) = self.entry_ino(tree, dir_b, name_b)?;
        let ia = self.remove_inode_ref(tree, ino_a, dir_a, name_a)?;
        self.inode_mut(tree, dir_a)
            .remove_dir_entry(name_a, ia, time)?;
        let ib = self.remove_inode_ref(tree, ino_b, dir_b, name_b)?;
        self.inode_mut(tree, dir_b)
            .remove_dir_entry(name_b, ib, time)?;
        let na = self.next_dir_index(tree, dir_a)?;
        self.inode_mut(tree, dir_a)
            .link_inode(name_a, ino_b, eb.file_type, na, Some(time))?;
        let nb = self.next_dir_index(tree, dir_b)?;
        self.inode_mut(tree, dir_b)
            .link_inode(name_b, ino_a, ea.file_type, nb, Some(time))?;
        for ino in [ino_a, ino_b] {
            let mut inode = self.inode_of(tree, ino)?;
            self.inode_mut(tree, ino)
                .put_changed(&mut inode, Some(time))?;
        }
        Ok(())
    }

    /// The parent directory of directory `dir` (its one INODE_REF).
    fn parent_of(&mut self, tree: u64, dir: u64) -> Result<u64> {
        let lo = Key::new(dir, INODE_REF, 0);
        let hi = Key::new(dir, INODE_REF, u64::MAX);
        match self.search_first(tree, &lo)? {
            Some((k, _)) if k <= hi && k.objectid == dir && k.item_type == INODE_REF => {
                Ok(k.offset)
            }
            _ => Err(Error::corrupt(
                format!("tree {tree} directory {dir}"),
                "no INODE_REF to its parent",
            )),
        }
    }
}

impl InodeMut<'_> {
    /// Makes inode `ino` (mode with its type bits) linked as `name` in
    /// this directory, owned by `uid`:`gid`, all times `time`; it
    /// inherits the directory's NODATACOW (and for files NODATASUM),
    /// COMPRESS / NOCOMPRESS flags and its compression property, as the
    /// kernel's btrfs_inherit_iflags and btrfs_inode_inherit_props.
    pub fn create_inode(
        &mut self,
        name: &[u8],
        ino: u64,
        mode: u32,
        rdev: u64,
        owner: (u32, u32),
        time: Timespec,
    ) -> Result<InodeItem> {
        let (tree, dir) = (self.tree, self.ino);
        if self.lookup_name(tree, dir, name)?.is_some() {
            return Err(Error::Exists(format!(
                "tree {tree} directory {dir}: {:?} exists",
                name_str(name)
            )));
        }
        let inode = self.new_inode(tree, dir, ino, mode, rdev, owner, time, 1)?;
        let index = self.next_dir_index(tree, dir)?;
        self.link_inode(name, ino, super::file_type(mode), index, Some(time))?;
        Ok(inode)
    }

    /// Removes xattr `name` of this inode; NotFound (ENODATA) when it has none.
    pub fn remove_xattr(&mut self, name: &[u8]) -> Result<()> {
        let (tree, ino) = (self.tree, self.ino);
        let key = xattr_item_key(ino, name);
        let removed = self.del_dir_name(tree, &key, name)?;
        if !removed {
            return Err(Error::NotFound(format!(
                "tree {tree} inode {ino}: no xattr {:?}",
                name_str(name)
            )));
        }
        Ok(())
    }

    /// Removes the DIR_ITEM / DIR_INDEX `name` (index `index`) from this
    /// directory and shrinks the directory; its times become `time`.
    pub fn remove_dir_entry(&mut self, name: &[u8], index: u64, time: Timespec) -> Result<()> {
        let (tree, dir) = (self.tree, self.ino);
        self.keep_dir_indexes(tree, dir)?;
        self.del_dir_name(tree, &dir_item_key(dir, name), name)?;
        self.delete_item(tree, &dir_index_key(dir, index))?;
        if let Some(mut di) = self.inode(tree, dir)? {
            di.size = di.size.saturating_sub(2 * name.len() as u64);
            di.mtime = time;
            self.put_changed(&mut di, Some(time))?;
        }
        Ok(())
    }

    /// Removes name `name` from this directory (unlink(2), or rmdir(2) of an empty
    /// directory): the entry, the back reference and one link; the last
    /// link takes the inode, its xattrs and its extents.
    pub fn unlink(&mut self, name: &[u8], time: Timespec) -> Result<()> {
        let (tree, dir) = (self.tree, self.ino);
        let (ino, e) = self.entry_ino(tree, dir, name)?;
        let mut inode = self.inode_of(tree, ino)?;
        if e.file_type == FT_DIR && inode.size != 0 {
            return Err(Error::Invalid(format!(
                "tree {tree}: directory {:?} (inode {ino}) is not empty",
                name_str(name)
            )));
        }
        let index = self.remove_inode_ref(tree, ino, dir, name)?;
        self.remove_dir_entry(name, index, time)?;
        inode.nlink = inode.nlink.saturating_sub(1);
        if inode.nlink == 0 || e.file_type == FT_DIR {
            return self.inode_mut(tree, ino).evict();
        }
        self.inode_mut(tree, ino)
            .put_changed(&mut inode, Some(time))
    }

    /// Deletes every item of this inode (its last link is gone): data
    /// extents lose this file's references.
    pub(crate) fn evict(&mut self) -> Result<()> {
        let (tree, ino) = (self.tree, self.ino);
        let ss = self.sectorsize() as u64;
        let t = crate::ctree::Tree {
            id: tree,
            bytenr: 0,
            level: 0,
            generation: 0,
        };
        let lo = Key::new(ino, EXTENT_DATA, 0);
        let hi = Key::new(ino, EXTENT_DATA, u64::MAX);
        for (k, d) in self.items_in(tree, &lo, &hi)? {
            let e = crate::data::extent::Extent::decode(t, &k, &d, ss)?;
            if let Some((disk, disk_len, offset)) = e.disk_extent() {
                let backref = Backref::file_extent(tree, ino, k.offset, offset);
                self.drop_data_ref(disk, disk_len, backref);
            }
        }
        self.delete_range(
            tree,
            &Key::new(ino, 0, 0),
            &Key::new(ino, u8::MAX, u64::MAX),
        )?;
        Ok(())
    }
}
