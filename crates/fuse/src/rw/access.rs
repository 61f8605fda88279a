//! What a read and a change of a file's data do beyond the data: atime
//! (the kernel leaves it to a FUSE filesystem; the mount's `relatime`,
//! `strictatime`, `noatime`, `nodiratime`) and the set-ID bits a change by
//! a caller without CAP_FSETID drops.

use super::RwInner;
use crate::logging;
use crate::proto::INodeNo;
use crate::proto::Request;
use std::sync::atomic::Ordering;
use ubtrfs_engine::rwfs::attr::AtimePolicy;
use ubtrfs_engine::InodeId;

/// The mount's atime options: `noatime`, `relatime` (the default) or
/// `strictatime`, and `nodiratime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Atime {
    pub files: AtimePolicy,
    /// `nodiratime` clears it: listings leave directories' atime.
    pub dirs: bool,
}

impl Default for Atime {
    fn default() -> Self {
        Atime {
            files: AtimePolicy::Relative,
            dirs: true,
        }
    }
}

impl Atime {
    pub(super) fn policy(self, dir: bool) -> AtimePolicy {
        if dir && !self.dirs {
            AtimePolicy::Never
        } else {
            self.files
        }
    }
}

impl RwInner {
    /// An access of `id` (a READ of a file, a READDIR of a directory):
    /// atime as the mount's options say. Checked shared; the filesystem
    /// is taken alone only when atime moves (under relatime, the first
    /// access after a change, or a day after the last).
    pub(super) fn accessed(&self, id: InodeId, dir: bool) {
        if self.atime_due(id, dir) {
            self.move_atime(id, dir);
        }
    }

    /// Moves `id`'s atime now, as the mount's options say (the caller has
    /// found it due).
    pub(super) fn move_atime(&self, id: InodeId, dir: bool) {
        if let Err(e) = self.fs().touch_atime(id, self.atime_policy(dir)) {
            logging::warn(&format!("atime of inode {}: {e}", id.ino));
        }
    }

    /// What a WRITE through handle `fh` needs of it, in one look: whether
    /// its file had set-ID bits at open, and whether it was opened to read
    /// through the page cache (without O_DIRECT). None for a handle not
    /// (or no longer) open.
    pub(super) fn handle_write_flags(&self, fh: crate::proto::FileHandle) -> Option<(bool, bool)> {
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh.0)
            .map(|h| (h.setid, h.buffered))
    }

    /// For a change the kernel says drops `id`'s set-ID bits
    /// (FATTR_KILL_SUIDGID; `kill`): whether `req`'s caller is in the
    /// file's group or has CAP_FSETID, as
    /// [`ubtrfs_engine::rwfs::attr::SetAttr::kill_set_ids`] takes it. None
    /// when there is nothing to drop (the file has no set-ID bits).
    pub(super) fn kill_set_ids(&self, id: InodeId, req: &Request, kill: bool) -> Option<bool> {
        if !kill {
            return None;
        }
        let st = self.fs_read().inode_stat(id).ok()?;
        if st.mode & (libc::S_ISUID | libc::S_ISGID) == 0 {
            return None;
        }
        let (gid, pid) = (st.gid, req.pid());
        Some(crate::caps::in_group(pid, gid) || !crate::caps::lacks(pid, crate::caps::CAP_FSETID))
    }

    /// A change of `id`'s data by `req`'s caller, who lacks CAP_FSETID:
    /// its set-ID bits go as the VFS drops them
    /// ([`ubtrfs_engine::rwfs::RwFs::drop_suid_sgid`]), and the kernel's
    /// cached mode with them.
    pub(super) fn drop_set_ids(&self, id: InodeId, req: &Request) {
        let Some(in_group) = self.kill_set_ids(id, req, true) else {
            return;
        };
        match self.fs().drop_suid_sgid(id, in_group) {
            Ok(()) => {
                if let Ok(node) = self.node_of(id) {
                    self.inval_attr(INodeNo(node));
                }
            }
            Err(e) => logging::warn(&format!("set-ID bits of inode {}: {e}", id.ino)),
        }
    }

    /// Whether an access of `id` now would move its atime.
    pub(super) fn atime_due(&self, id: InodeId, dir: bool) -> bool {
        let policy = self.atime_policy(dir);
        policy != AtimePolicy::Never && self.fs_read().atime_due(id, policy)
    }

    /// How accesses move atime now: never once remounted read-only, else
    /// as the mount's options say.
    pub(super) fn atime_policy(&self, dir: bool) -> AtimePolicy {
        if self.remounted_ro.load(Ordering::Relaxed) {
            AtimePolicy::Never
        } else {
            self.atime.policy(dir)
        }
    }
}
