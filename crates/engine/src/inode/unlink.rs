//! Removing names (the kernel's btrfs_unlink_inode, btrfs_del_inode_ref,
//! btrfs_delete_one_dir_name): one entry out of a DIR_ITEM / XATTR_ITEM
//! item shared by colliding names, one name out of an INODE_REF or
//! INODE_EXTREF item, and a whole unlink (both directory entries, the back
//! reference, the directory's size, the inode's link count).

use crate::error::{Error, Result};
use crate::tx::Trans;
use ubtrfs_format::checksum::extref_hash;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{
    dir_index_key, dir_item_key, parse_dir_entries, parse_inode_extrefs, parse_inode_refs,
    InodeItem, Timespec,
};
use ubtrfs_format::Key;

impl Trans {
    /// Removes the entry named `name` from the DIR_ITEM, DIR_INDEX or
    /// XATTR_ITEM item at `key` (the item goes when it was the last);
    /// false when there is no such entry.
    pub fn del_dir_name(&mut self, tree: u64, key: &Key, name: &[u8]) -> Result<bool> {
        let Some(d) = self.lookup(tree, key)? else {
            return Ok(false);
        };
        let entries = parse_dir_entries(&d)
            .map_err(|e| Error::format(format!("tree {tree} key {key}"), e))?;
        if !entries.iter().any(|e| e.name == name) {
            return Ok(false);
        }
        let mut rest = Vec::new();
        for e in entries.iter().filter(|e| e.name != name) {
            e.encode(&mut rest);
        }
        if rest.is_empty() {
            self.delete_item(tree, key)?;
        } else {
            self.put_item(tree, *key, rest)?;
        }
        Ok(true)
    }

    /// Removes the back reference of inode `ino` named `name` in `parent`
    /// (from its INODE_REF item, else its INODE_EXTREF item); returns the
    /// dir index it recorded, None when there is none.
    pub fn del_inode_ref(
        &mut self,
        tree: u64,
        ino: u64,
        parent: u64,
        name: &[u8],
    ) -> Result<Option<u64>> {
        let key = Key::new(ino, INODE_REF, parent);
        if let Some(d) = self.lookup(tree, &key)? {
            let refs = parse_inode_refs(&key, &d)
                .map_err(|e| Error::format(format!("tree {tree} key {key}"), e))?;
            if let Some(r) = refs.iter().find(|r| r.name == name) {
                let index = r.index;
                let mut rest = Vec::new();
                for o in refs.iter().filter(|o| o.name != name) {
                    o.encode_ref(&mut rest);
                }
                self.replace_or_delete(tree, key, rest)?;
                return Ok(Some(index));
            }
        }
        let key = Key::new(ino, INODE_EXTREF, extref_hash(parent, name));
        if let Some(d) = self.lookup(tree, &key)? {
            let refs = parse_inode_extrefs(&d)
                .map_err(|e| Error::format(format!("tree {tree} key {key}"), e))?;
            if let Some(r) = refs.iter().find(|r| r.parent == parent && r.name == name) {
                let index = r.index;
                let mut rest = Vec::new();
                for o in refs
                    .iter()
                    .filter(|o| !(o.parent == parent && o.name == name))
                {
                    o.encode_extref(&mut rest);
                }
                self.replace_or_delete(tree, key, rest)?;
                return Ok(Some(index));
            }
        }
        Ok(None)
    }

    fn replace_or_delete(&mut self, tree: u64, key: Key, rest: Vec<u8>) -> Result<()> {
        if rest.is_empty() {
            self.delete_item(tree, &key)?;
        } else {
            self.put_item(tree, key, rest)?;
        }
        Ok(())
    }

    /// Whether inode `ino` has a back reference named `name` in `parent`
    /// (INODE_REF, or INODE_EXTREF when `extref`).
    pub fn inode_ref_exists(
        &mut self,
        tree: u64,
        ino: u64,
        parent: u64,
        name: &[u8],
        extref: bool,
    ) -> Result<bool> {
        if extref {
            let key = Key::new(ino, INODE_EXTREF, extref_hash(parent, name));
            let Some(d) = self.lookup(tree, &key)? else {
                return Ok(false);
            };
            let refs = parse_inode_extrefs(&d)
                .map_err(|e| Error::format(format!("tree {tree} key {key}"), e))?;
            Ok(refs.iter().any(|r| r.parent == parent && r.name == name))
        } else {
            let key = Key::new(ino, INODE_REF, parent);
            let Some(d) = self.lookup(tree, &key)? else {
                return Ok(false);
            };
            let refs = parse_inode_refs(&key, &d)
                .map_err(|e| Error::format(format!("tree {tree} key {key}"), e))?;
            Ok(refs.iter().any(|r| r.name == name))
        }
    }

    /// Unlinks `name` of inode `ino` from directory `dir` (the kernel's
    /// btrfs_unlink_inode): the DIR_ITEM entry, the back reference and the
    /// DIR_INDEX it names; the directory shrinks by twice the name, the
    /// inode loses a link. With `time`, the directory takes it as mtime
    /// and ctime and the inode as ctime (log replay leaves times as the
    /// log has them, as the kernel's replay does).
    pub fn unlink_inode(
        &mut self,
        tree: u64,
        dir: u64,
        ino: u64,
        name: &[u8],
        time: Option<Timespec>,
    ) -> Result<()> {
        let here = || {
            format!(
                "tree {tree}: unlink {:?} (inode {ino}) from directory {dir}",
                String::from_utf8_lossy(name)
            )
        };
        self.keep_dir_indexes(tree, dir)?;
        if !self.del_dir_name(tree, &dir_item_key(dir, name), name)? {
            return Err(Error::corrupt(here(), "no DIR_ITEM for the name"));
        }
        let index = self
            .del_inode_ref(tree, ino, dir, name)?
            .ok_or_else(|| Error::corrupt(here(), "no INODE_REF or INODE_EXTREF for the name"))?;
        self.del_dir_name(tree, &dir_index_key(dir, index), name)?;
        let mut di = self
            .inode(tree, dir)?
            .ok_or_else(|| Error::corrupt(here(), "the directory has no inode item"))?;
        di.size = di.size.saturating_sub(2 * name.len() as u64);
        if let Some(time) = time {
            di.mtime = time;
        }
        self.inode_mut(tree, dir).put_changed(&mut di, time)?;
        let mut ii = self
            .inode(tree, ino)?
            .ok_or_else(|| Error::corrupt(here(), "the inode has no inode item"))?;
        ii.nlink = ii.nlink.saturating_sub(1);
        self.inode_mut(tree, ino).put_changed(&mut ii, time)
    }

    /// Every back reference of inode `ino`: (parent, name, index), from
    /// its INODE_REF and INODE_EXTREF items.
    pub fn inode_refs(&self, tree: u64, ino: u64) -> Result<Vec<(u64, Vec<u8>, u64)>> {
        crate::items::inode_item::refs(self, tree, ino)
    }

    /// The inode item of `ino`, or a corruption error saying who needed it.
    pub fn inode_or(&self, tree: u64, ino: u64, what: &str) -> Result<InodeItem> {
        self.inode(tree, ino)?.ok_or_else(|| {
            Error::corrupt(
                format!("tree {tree} inode {ino}"),
                format!("no inode item ({what})"),
            )
        })
    }
}
