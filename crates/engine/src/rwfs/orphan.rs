//! Open handles and orphans: an inode whose last name goes while it is
//! open lives on with an ORPHAN_ITEM until its last close (the kernel's
//! orphan.c and btrfs_orphan_add), and a mount deletes the orphans a
//! crashed mount left (btrfs_orphan_cleanup).

use super::RwFs;
use crate::error::Result;
use crate::fs::InodeId;
use std::collections::HashMap;
use ubtrfs_format::consts::*;
use ubtrfs_format::Key;

impl RwFs {
    pub(super) fn open_counts(&self) -> std::sync::MutexGuard<'_, HashMap<InodeId, u32>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes an open handle of `id`.
    pub fn opened(&self, id: InodeId) {
        *self.open_counts().entry(id).or_insert(0) += 1;
    }

    /// Notes the close of a handle of `id`, for a caller that shares the
    /// filesystem: true when that was the last handle of an orphan, which
    /// [`RwFs::drop_orphan_if_closed`] must then delete (holding the
    /// filesystem alone).
    pub fn release_shared(&self, id: InodeId) -> bool {
        let mut open = self.open_counts();
        let n = match open.get_mut(&id) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n
            }
            None => 0,
        };
        if n == 0 {
            open.remove(&id);
        }
        n == 0 && self.orphans.contains(&id)
    }

    /// Notes the close of a handle of `id`; the last close of an orphan
    /// deletes it.
    pub fn released(&mut self, id: InodeId) -> Result<()> {
        self.release_shared(id);
        self.drop_orphan_if_closed(id)
    }

    /// Deletes orphan `id` if no handle has it open (after
    /// [`RwFs::release_shared`] said its last one closed: a handle opened
    /// since, through /proc/PID/fd, keeps it).
    pub fn drop_orphan_if_closed(&mut self, id: InodeId) -> Result<()> {
        if !self.is_open(id)
            && self.orphans.remove(&id)
            && self.aborted.is_none()
            && !self.unmounted
        {
            self.drop_orphan(id)?;
        }
        Ok(())
    }

    pub(crate) fn is_open(&self, id: InodeId) -> bool {
        self.open_counts().contains_key(&id)
    }

    /// Keeps `id` (no names left) until its last close: an ORPHAN_ITEM, as
    /// the kernel's btrfs_orphan_add, so that a crash before then has
    /// the next mount delete it.
    pub(crate) fn make_orphan(&mut self, id: InodeId) -> Result<()> {
        self.t.put_item(
            id.subvol,
            Key::new(ORPHAN_OBJECTID, ORPHAN_ITEM, id.ino),
            Vec::new(),
        )?;
        self.orphans.insert(id);
        Ok(())
    }

    /// Deletes an orphan: its dirty data, its items, its extents.
    pub(super) fn drop_orphan(&mut self, id: InodeId) -> Result<()> {
        self.forget_dirty(id);
        self.inode_mut(id).evict()?;
        self.t
            .delete_item(id.subvol, &Key::new(ORPHAN_OBJECTID, ORPHAN_ITEM, id.ino))?;
        Ok(())
    }

    /// Deletes the orphans an earlier mount left (crashed while files
    /// without names were open), as the kernel's btrfs_orphan_cleanup.
    /// Returns whether anything changed.
    pub(super) fn cleanup_orphans(&mut self) -> Result<bool> {
        let mut trees = vec![FS_TREE_OBJECTID];
        let lo = Key::new(FIRST_FREE_OBJECTID, ROOT_ITEM, 0);
        let hi = Key::new(LAST_FREE_OBJECTID, ROOT_ITEM, u64::MAX);
        for (k, _) in self.t.items_in(ROOT_TREE_OBJECTID, &lo, &hi)? {
            if k.item_type == ROOT_ITEM && trees.last() != Some(&k.objectid) {
                trees.push(k.objectid);
            }
        }
        let mut changed = false;
        for tree in trees {
            let lo = Key::new(ORPHAN_OBJECTID, ORPHAN_ITEM, 0);
            let hi = Key::new(ORPHAN_OBJECTID, ORPHAN_ITEM, u64::MAX);
            let found = self.t.items_in(tree, &lo, &hi)?;
            if found.is_empty() {
                continue;
            }
            if self.t.root(tree)?.item.flags & ROOT_SUBVOL_RDONLY != 0 {
                continue;
            }
            for (k, _) in found {
                let ino = k.offset;
                if self.t.inode(tree, ino)?.is_some_and(|i| i.nlink == 0) {
                    self.t.inode_mut(tree, ino).evict()?;
                }
                self.t.delete_item(tree, &k)?;
                changed = true;
            }
        }
        Ok(changed)
    }
}
