//! One inode at a time: begun (created under an orphan name when new),
//! placed at its names (send.c's process_recorded_refs), its xattrs, and
//! finished with truncate, owner, mode, flags, capabilities and times
//! (send.c's finish_inode_if_needed).

use super::{Cur, Loc, Sender};
use crate::error::{Error, Result};
use ubtrfs_format::consts::FIRST_INODE;
use ubtrfs_format::items::InodeItem;
use ubtrfs_format::send_stream::{attr, cmd};

impl Sender<'_, '_> {
    /// Whether `p` exists at the receiver while inode `self.cur.ino` is
    /// being processed.
    fn exists_now(&self, p: u64) -> bool {
        p == FIRST_INODE
            || self.loc.contains_key(&p)
            || p < self.cur.ino
            || (self.parent.is_some() && !self.new_inodes.contains(&p))
    }

    /// Whether `dir` will be finished later (and send its own times then).
    fn finished_later(&self, dir: u64) -> bool {
        dir > self.cur.ino && (self.parent.is_none() || self.to_process.contains(&dir))
    }

    /// Makes sure directory `p` exists, creating it early under its orphan
    /// name when it is a new directory not processed yet.
    fn ensure_dir(&mut self, p: u64) -> Result<()> {
        if self.exists_now(p) {
            return Ok(());
        }
        let ii = self.fs.inode_item_in(self.send.tree, p)?.ok_or_else(|| {
            Error::corrupt(
                format!("{} inode {p}", self.send.tree.describe()),
                "parent directory has no inode item",
            )
        })?;
        self.create_inode(p, &ii)?;
        Ok(())
    }

    /// Gives the current inode the names `refs` at the receiver: renames it
    /// from where it is for the first when it has no name yet, links the
    /// others.
    pub fn place_refs(&mut self, refs: &[(u64, Vec<u8>)], mut has_name: bool) -> Result<()> {
        let ino = self.cur.ino;
        for (p, name) in refs {
            self.ensure_dir(*p)?;
            let dir = self.path(*p)?;
            let target = Self::join(&dir, name);
            if !has_name {
                let from = self.cur_path()?;
                self.send_rename(&from, &target)?;
                let was_orphan = self.loc.get(&ino).is_some_and(|l| l.orphan);
                self.loc.insert(ino, Loc::named(*p, name.clone()));
                self.cur.path = Some(target);
                has_name = true;
                if was_orphan {
                    self.touch_root();
                }
            } else {
                let cur = self.cur_path()?;
                self.send_link(&target, &cur)?;
            }
            if !self.finished_later(*p) {
                self.dirty_dir(*p)?;
            }
        }
        Ok(())
    }

    /// Marks the current inode's names done: from now on it is found under
    /// its send-tree names.
    pub fn refs_processed(&mut self) {
        self.cur.refs_done = true;
        self.loc.remove(&self.cur.ino);
        self.progress = self.cur.ino + 1;
        // A cached path stays valid: it is one of the inode's names now.
    }

    /// Begins a new inode (created by this stream).
    pub fn begin_new(&mut self, ino: u64, ii: InodeItem) -> Result<()> {
        self.cur = Cur {
            active: true,
            ino,
            ii,
            new: true,
            ..Default::default()
        };
        self.progress = ino;
        if ii.nlink == 0 {
            self.cur.ignore = true;
            return Ok(());
        }
        self.n_inodes += 1;
        if ino != FIRST_INODE && !self.loc.contains_key(&ino) {
            self.create_inode(ino, &ii)?;
        }
        if ino == FIRST_INODE {
            self.cur.refs_done = true;
            self.progress = ino + 1;
        }
        Ok(())
    }

    /// Places a new inode's recorded refs (at its first item after them).
    pub fn process_new_refs(&mut self) -> Result<()> {
        if self.cur.refs_done {
            return Ok(());
        }
        let refs = std::mem::take(&mut self.cur.refs);
        self.place_refs(&refs, false)?;
        self.refs_processed();
        // The kernel trims its directory-times cache after every item.
        self.trim_dirty()
    }

    /// An xattr of a new inode.
    pub fn new_xattr(&mut self, name: &[u8], data: &[u8]) -> Result<()> {
        if name == b"security.capability" {
            self.cur.caps = Some(Some(data.to_vec()));
            return Ok(());
        }
        let p = self.cur_path()?;
        self.send_set_xattr(&p, name, data)
    }

    /// Ends the current inode: truncate, owner, mode, capabilities, times.
    pub fn finish_cur(&mut self) -> Result<()> {
        if !self.cur.active {
            return Ok(());
        }
        if self.cur.ignore {
            self.cur.active = false;
            return Ok(());
        }
        if !self.cur.refs_done {
            self.process_new_refs()?;
        }
        let ii = self.cur.ii;
        let (need_chown, need_chmod, need_truncate) = match &self.cur.old {
            Some(old) if !self.cur.new => {
                let grew_fully = ii.size > old.size && self.cur.next_write_offset == ii.size;
                (
                    old.uid != ii.uid || old.gid != ii.gid,
                    !self.cur.is_symlink() && old.mode != ii.mode,
                    !(old.size == ii.size || grew_fully),
                )
            }
            _ => (
                true,
                !self.cur.is_symlink(),
                self.cur.next_write_offset != ii.size,
            ),
        };
        if self.cur.is_reg() && need_truncate {
            self.send_truncate(ii.size)?;
        }
        if need_chown {
            let p = self.cur_path()?;
            self.w.begin(cmd::CHOWN);
            self.w.put(attr::PATH, &p);
            self.w.put_u64(attr::UID, ii.uid as u64);
            self.w.put_u64(attr::GID, ii.gid as u64);
            self.w.finish()?;
        }
        if need_chmod {
            let p = self.cur_path()?;
            self.w.begin(cmd::CHMOD);
            self.w.put(attr::PATH, &p);
            self.w.put_u64(attr::MODE, (ii.mode & 0o7777) as u64);
            self.w.finish()?;
        }
        // v2: changed inode flags (the kernel sends them only for inodes
        // that exist in the parent; receive may ignore them).
        let need_fileattr = match &self.cur.old {
            Some(old) if !self.cur.new => {
                self.w.proto() >= 2 && !self.cur.is_symlink() && old.flags != ii.flags
            }
            _ => false,
        };
        if need_fileattr {
            let p = self.cur_path()?;
            self.w.begin(cmd::FILEATTR);
            self.w.put(attr::PATH, &p);
            self.w.put_u64(attr::FILEATTR, ii.flags);
            self.w.finish()?;
        }
        // A new inode was read item by item: its capabilities, if any,
        // were seen among its xattrs.
        let caps = if self.cur.new {
            self.cur.caps.take().flatten()
        } else {
            self.fs
                .xattr_in(self.send.tree, self.cur.ino, b"security.capability")?
        };
        if let Some(caps) = caps {
            let p = self.cur_path()?;
            self.send_set_xattr(&p, b"security.capability", &caps)?;
        }
        // A directory with entries gets its times once its last entry is
        // in place; others now.
        if self.cur.is_dir() && ii.size > 0 {
            self.dirty_dir(self.cur.ino)?;
        } else {
            let p = self.cur_path()?;
            self.send_utimes_of(&p, &ii)?;
            if self.cur.is_dir() {
                self.forget_dirty(self.cur.ino);
            }
        }
        self.cur.active = false;
        self.cur.fh = None;
        self.trim_dirty()
    }
}
