//! Filesystem items written through a transaction (the kernel's inode.c,
//! dir-item.c, inode-item.c, xattr.c, file-item.c, reflink.c): inodes,
//! names (DIR_ITEM, DIR_INDEX, INODE_REF / INODE_EXTREF), xattrs, file
//! extents (shared by clones) and data checksums. Callers (mkfs, receive,
//! the mount) decide what to make; this module makes the items exactly
//! as the kernel lays them out.
//!
//! The changes of one inode go through its handle, [`InodeMut`]
//! (`t.inode_mut(tree, ino)`); what involves two inodes (link, rename,
//! exchange, clone, a new inode under its directory) and every read are
//! [`Trans`] methods with the tree and inode numbers as arguments.

pub mod file;
pub mod file_item;
pub mod namei;
pub mod reflink;
pub mod root;
pub mod unlink;

use crate::error::{Error, Result};
use crate::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{
    dir_index_key, dir_item_key, xattr_item_key, DirEntry, InodeItem, InodeRef, Timespec,
};
use ubtrfs_format::Key;

/// Largest name of a directory entry or xattr (BTRFS_NAME_LEN).
pub const NAME_MAX: usize = 255;

/// The current time, as inode times hold it.
pub fn now() -> Timespec {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timespec {
        sec: d.as_secs() as i64,
        nsec: d.subsec_nanos(),
    }
}

/// The dir item type of a file mode.
pub fn file_type(mode: u32) -> u8 {
    match mode & 0o170000 {
        0o100000 => FT_REG_FILE,
        0o040000 => FT_DIR,
        0o020000 => FT_CHRDEV,
        0o060000 => FT_BLKDEV,
        0o010000 => FT_FIFO,
        0o140000 => FT_SOCK,
        0o120000 => FT_SYMLINK,
        _ => FT_UNKNOWN,
    }
}

/// A device number as btrfs stores it (the kernel's internal dev_t:
/// major << 20 | minor), from a user-space st_rdev.
pub fn user_rdev_to_kernel(rdev: u64) -> u64 {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    ((major & 0xfff) << 20) | (minor & 0xfffff)
}

fn check_name(what: &str, name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(Error::Invalid(format!(
            "{what} {:?}: names are 1 to {NAME_MAX} bytes",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(())
}

/// The changes of one inode of one tree in a transaction: its item, its
/// xattrs, the names in it (a directory) and its data (the kernel's
/// inode.c, dir-item.c and file.c functions on a `struct btrfs_inode`).
/// What involves two inodes at once (link, rename, exchange, clone) and
/// the reads stay on [`Trans`] itself, which is at hand through the
/// handle (`Deref`).
pub struct InodeMut<'t> {
    t: &'t mut Trans,
    pub tree: u64,
    pub ino: u64,
}

impl std::ops::Deref for InodeMut<'_> {
    type Target = Trans;
    fn deref(&self) -> &Trans {
        self.t
    }
}

impl std::ops::DerefMut for InodeMut<'_> {
    fn deref_mut(&mut self) -> &mut Trans {
        self.t
    }
}

impl Trans {
    /// Inode `ino` of tree `tree` (a directory's number for the changes of
    /// names in it), to change.
    pub fn inode_mut(&mut self, tree: u64, ino: u64) -> InodeMut<'_> {
        InodeMut { t: self, tree, ino }
    }
}

impl Trans {
    /// The inode item of `ino`, if any.
    pub fn inode(&self, tree: u64, ino: u64) -> Result<Option<InodeItem>> {
        crate::items::inode_item::inode_item(self, tree, ino)
    }
}

impl InodeMut<'_> {
    /// Writes (or rewrites) an inode item.
    pub fn put(&mut self, inode: &InodeItem) -> Result<()> {
        let (tree, ino) = (self.tree, self.ino);
        self.put_item(tree, InodeItem::key(ino), inode.to_bytes())
    }

    /// Writes `inode` as changed by this transaction: `ctime` (when given)
    /// its ctime, this transaction its transid, and one more change in its
    /// sequence (the kernel's i_version, which NFS and IMA watch).
    pub fn put_changed(&mut self, inode: &mut InodeItem, ctime: Option<Timespec>) -> Result<()> {
        if let Some(t) = ctime {
            inode.ctime = t;
        }
        inode.transid = self.transid;
        inode.sequence += 1;
        self.put(inode)
    }

    /// Links `name` in this directory to `location` (an inode's
    /// INODE_ITEM key, or a subvolume's ROOT_ITEM key) at dir index
    /// `index`: DIR_ITEM and DIR_INDEX, and the directory's size. The
    /// target's back reference (INODE_REF, or ROOT_REF for subvolumes) is
    /// the caller's: see [`InodeMut::add_inode_ref`]. The directory's mtime
    /// and ctime become `time` when given (in the same update of its
    /// inode).
    pub fn add_dir_entry(
        &mut self,
        name: &[u8],
        location: Key,
        ftype: u8,
        index: u64,
        time: Option<Timespec>,
    ) -> Result<()> {
        let (tree, dir) = (self.tree, self.ino);
        check_name("name", name)?;
        let transid = self.transid;
        let entry = DirEntry {
            location,
            transid,
            file_type: ftype,
            name,
            data: &[],
        };
        let bytes = entry.to_bytes();
        let item_key = dir_item_key(dir, name);
        if let Some(d) = self.lookup(tree, &item_key)? {
            let have = ubtrfs_format::items::parse_dir_entries(&d)
                .map_err(|e| Error::format(format!("tree {tree} key {item_key}"), e))?;
            if have.iter().any(|e| e.name == name) {
                return Err(Error::Exists(format!(
                    "tree {tree} directory {dir}: {:?} exists",
                    String::from_utf8_lossy(name)
                )));
            }
        }
        // Names whose hashes collide share one DIR_ITEM.
        self.append_item(tree, item_key, &bytes)?;
        self.insert_item(tree, dir_index_key(dir, index), bytes)?;
        let mut di = self
            .inode(tree, dir)?
            .ok_or_else(|| Error::NotFound(format!("tree {tree}: directory inode {dir}")))?;
        di.size += 2 * name.len() as u64;
        di.transid = transid;
        if let Some(t) = time {
            di.mtime = t;
            di.ctime = t;
            di.sequence += 1;
        }
        self.put(&di)
    }

    /// Adds the back reference of this inode named `name` in `parent` at
    /// `index`: appended to the INODE_REF item for that parent, or an
    /// INODE_EXTREF when that item would not fit a leaf.
    pub fn add_inode_ref(&mut self, parent: u64, name: &[u8], index: u64) -> Result<()> {
        let (tree, ino) = (self.tree, self.ino);
        check_name("name", name)?;
        let r = InodeRef {
            parent,
            index,
            name,
        };
        let key = r.ref_key(ino);
        let mut v = Vec::new();
        r.encode_ref(&mut v);
        let cur = self.lookup(tree, &key)?.map_or(0, |d| d.len());
        if cur + v.len() <= crate::tree::buf::max_item_data(self.nodesize()) / 2 || cur == 0 {
            return self.append_item(tree, key, &v);
        }
        if self.info.sb.incompat_flags & INCOMPAT_EXTENDED_IREF == 0 {
            return Err(Error::NoSpace(format!(
                "tree {tree} inode {ino}: too many links in one directory without extended inode refs"
            )));
        }
        let mut v = Vec::new();
        r.encode_extref(&mut v);
        self.append_item(tree, r.extref_key(ino), &v)
    }

    /// Links inode `ino` (of type `ftype`) as `name` in this directory
    /// at dir index `index`: the directory's entries and the inode's back
    /// reference (the kernel's btrfs_add_link). The inode's nlink is the
    /// caller's; the directory's times become `time` when given.
    pub fn link_inode(
        &mut self,
        name: &[u8],
        ino: u64,
        ftype: u8,
        index: u64,
        time: Option<Timespec>,
    ) -> Result<()> {
        self.add_dir_entry(name, Key::new(ino, INODE_ITEM, 0), ftype, index, time)?;
        let (tree, dir) = (self.tree, self.ino);
        self.inode_mut(tree, ino).add_inode_ref(dir, name, index)
    }

    /// Sets xattr `name` of this inode to `value` (replacing it).
    pub fn set_xattr(&mut self, name: &[u8], value: &[u8]) -> Result<()> {
        let (tree, ino) = (self.tree, self.ino);
        check_name("xattr", name)?;
        // BTRFS_MAX_XATTR_SIZE: one item holds the entry and its header.
        let max = crate::tree::buf::max_item_data(self.nodesize())
            - ubtrfs_format::items::DIR_ITEM_HEADER;
        if name.len() + value.len() > max {
            return Err(Error::NoSpace(format!(
                "tree {tree} inode {ino}: xattr {:?} of {} bytes: at most {} bytes of name and value fit a leaf",
                String::from_utf8_lossy(name),
                value.len(),
                max
            )));
        }
        let key = xattr_item_key(ino, name);
        let entry = DirEntry {
            location: Key::new(0, 0, 0),
            transid: self.transid,
            file_type: FT_XATTR,
            name,
            data: value,
        }
        .to_bytes();
        // Keep the other names that share this hash.
        let mut others = Vec::new();
        if let Some(d) = self.lookup(tree, &key)? {
            for e in ubtrfs_format::items::parse_dir_entries(&d)
                .map_err(|e| Error::format(format!("tree {tree} key {key}"), e))?
            {
                if e.name != name {
                    others.extend_from_slice(&e.to_bytes());
                }
            }
        }
        others.extend_from_slice(&entry);
        if others.len() > crate::tree::buf::max_item_data(self.nodesize()) {
            return Err(Error::NoSpace(format!(
                "tree {tree} inode {ino}: xattr {:?} of {} bytes does not fit a leaf",
                String::from_utf8_lossy(name),
                value.len()
            )));
        }
        self.put_item(tree, key, others)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdev_round_trips_with_the_reader() {
        for (maj, min) in [(8u64, 1u64), (259, 70000), (4095, 1048575), (1, 3)] {
            let user = libc::makedev(maj as u32, min as u32);
            let k = user_rdev_to_kernel(user);
            assert_eq!(k, (maj << 20) | min);
            assert_eq!(crate::fs::kernel_rdev_to_user(k), user);
        }
    }
}
