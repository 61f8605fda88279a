//! The directory-times cache, as send.c's dir_utimes_cache: a directory
//! whose entries changed gets its times sent after the last change, not
//! after each; the cache is an LRU trimmed to 64 entries after each inode
//! and flushed at the end.

use super::{Sender, MAX_DIRTY_DIRS};
use crate::error::{Error, Result};
use ubtrfs_format::consts::FIRST_INODE;

impl Sender<'_, '_> {
    /// Records that directory `dir` needs its times sent after the last
    /// change to its entries: an LRU like the kernel's (a hit moves the
    /// entry to the most recent end), trimmed to 64 entries after each
    /// inode, flushed most recent first at the end.
    pub fn dirty_dir(&mut self, dir: u64) -> Result<()> {
        if let Some(i) = self.dirty.iter().position(|&d| d == dir) {
            self.dirty.remove(i);
        }
        self.dirty.push(dir);
        if dir == FIRST_INODE {
            self.root_stale = false;
        }
        Ok(())
    }

    pub fn forget_dirty(&mut self, dir: u64) {
        self.dirty.retain(|&d| d != dir);
    }

    /// Notes a change to the top directory's entries (orphan names) that
    /// the kernel does not queue its times for: if it is not queued
    /// anyway, its times are sent once more at the end.
    pub fn touch_root(&mut self) {
        if !self.dirty.contains(&FIRST_INODE) {
            self.root_stale = true;
        }
    }

    pub fn trim_dirty(&mut self) -> Result<()> {
        while self.dirty.len() > MAX_DIRTY_DIRS {
            let d = self.dirty.remove(0);
            if d == FIRST_INODE {
                self.root_stale = false;
            }
            self.send_dir_utimes(d)?;
        }
        Ok(())
    }

    fn send_dir_utimes(&mut self, dir: u64) -> Result<()> {
        let ii = self.fs.inode_item_in(self.send.tree, dir)?.ok_or_else(|| {
            Error::corrupt(
                format!("{} inode {dir}", self.send.tree.describe()),
                "directory has no inode item",
            )
        })?;
        let p = self.path(dir)?;
        self.send_utimes_of(&p, &ii)
    }

    /// Sends the times of every directory still queued, most recently
    /// used first (the kernel's order).
    pub(super) fn flush_dirty_all(&mut self) -> Result<()> {
        while let Some(d) = self.dirty.pop() {
            self.send_dir_utimes(d)?;
        }
        if self.root_stale {
            self.root_stale = false;
            self.send_dir_utimes(FIRST_INODE)?;
        }
        Ok(())
    }
}
