//! Block group bookkeeping at commit: the free-space tree (the kernel's
//! free-space-tree.c) and BLOCK_GROUP_ITEMs of the groups whose space
//! changed in this transaction.
//!
//! The free-space tree records, per block group, a FREE_SPACE_INFO and the
//! free ranges as of this commit (space pinned by this transaction counts
//! as free: it is, once the commit is on disk). Ranges are written as
//! FREE_SPACE_EXTENT items; a group kept in bitmaps is converted (the
//! kernel reads both and converts again when it wants to).

use super::Trans;
use crate::error::{Error, Result};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{BlockGroupItem, FreeSpaceInfo};
use ubtrfs_format::Key;

impl Trans {
    /// Whether the filesystem keeps a free-space tree.
    pub fn has_free_space_tree(&self) -> bool {
        self.info.sb.compat_ro_flags & COMPAT_RO_FREE_SPACE_TREE != 0
    }

    /// Free ranges of group `start` as the free-space tree must record
    /// them: free and pinned space, merged.
    fn fst_ranges(&self, start: u64) -> Vec<(u64, u64)> {
        let g = &self.alloc.groups[&start];
        let mut all: Vec<(u64, u64)> = g.free_ranges().collect();
        all.extend(self.alloc.pinned_in(g.start, g.end()));
        all.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(all.len());
        for (s, l) in all {
            match out.last_mut() {
                Some((ps, pl)) if *ps + *pl == s => *pl += l,
                _ => out.push((s, l)),
            }
        }
        out
    }

    /// Rewrites the free-space tree of every group whose space changed;
    /// returns whether it changed anything.
    pub(crate) fn update_free_space_tree(&mut self) -> Result<bool> {
        if !self.has_free_space_tree() {
            return Ok(false);
        }
        let dirty = self.alloc.group_starts(|g| g.fst_dirty);
        let mut changed = false;
        for start in dirty {
            self.alloc.groups.get_mut(&start).unwrap().fst_dirty = false;
            changed |= self.sync_group_free_space(start)?;
        }
        Ok(changed)
    }

    fn sync_group_free_space(&mut self, start: u64) -> Result<bool> {
        let len = self.alloc.groups[&start].len;
        let want = self.fst_ranges(start);
        let tree = FREE_SPACE_TREE_OBJECTID;
        let info_key = Key::new(start, FREE_SPACE_INFO, len);
        let lo = Key::new(start, FREE_SPACE_INFO + 1, 0);
        let hi = Key::new(start + len - 1, u8::MAX, u64::MAX);
        let have = self.items_in(tree, &lo, &hi)?;
        let info = FreeSpaceInfo {
            extent_count: u32::try_from(want.len()).map_err(|_| {
                Error::Invalid(format!("block group {start}: too many free extents"))
            })?,
            flags: 0,
        };
        let mut changed = false;
        match self.lookup(tree, &info_key)? {
            Some(d) if d == info.to_bytes() => {}
            _ => {
                self.put_item(tree, info_key, info.to_bytes())?;
                changed = true;
            }
        }
        let want_keys: Vec<Key> = want
            .iter()
            .map(|&(s, l)| Key::new(s, FREE_SPACE_EXTENT, l))
            .collect();
        for (k, _) in &have {
            if k.item_type != FREE_SPACE_EXTENT || want_keys.binary_search(k).is_err() {
                self.delete_item(tree, k)?;
                changed = true;
            }
        }
        for k in want_keys {
            if have.binary_search_by(|(hk, _)| hk.cmp(&k)).is_err() {
                self.insert_item(tree, k, Vec::new())?;
                changed = true;
            }
        }
        Ok(changed)
    }

    /// Writes the BLOCK_GROUP_ITEM of every group whose usage changed.
    ///
    /// Each item is made from its group as it is when written, not as it
    /// was when the loop began: writing one group's item can split an
    /// extent tree leaf and so allocate a block in another group (the
    /// system group's item, say, allocating in the metadata group); that
    /// group's usage then changes before its turn. A group changed after
    /// its own turn is dirty again and written in the next pass.
    pub(crate) fn update_block_group_items(&mut self) -> Result<bool> {
        let dirty = self.alloc.group_starts(|g| g.item_dirty);
        let mut changed = false;
        for start in dirty {
            let g = self.alloc.groups.get_mut(&start).unwrap();
            g.item_dirty = false;
            let key = Key::new(start, BLOCK_GROUP_ITEM, g.len);
            let bytes = BlockGroupItem {
                used: g.used,
                chunk_objectid: FIRST_CHUNK_TREE_OBJECTID,
                flags: g.flags,
            }
            .to_bytes();
            if self.lookup(EXTENT_TREE_OBJECTID, &key)?.as_deref() != Some(&bytes[..]) {
                self.put_item(EXTENT_TREE_OBJECTID, key, bytes)?;
                changed = true;
            }
        }
        Ok(changed)
    }
}
