//! Paths of the stream resolved to inodes of the subvolume being received
//! (cmds/receive.c opens them through the mount; here they are looked up
//! in the tree, and remembered until a rename or removal), and the inode
//! numbers new files get.

use super::stream::Command;
use super::{lossy, Receiver, Subvol};
use crate::error::{Error, Result};
use ubtrfs_format::consts::FIRST_INODE;
use ubtrfs_format::send_stream::attr;

impl Receiver<'_> {
    pub(super) fn cur(&self) -> Result<&Subvol> {
        self.cur
            .as_ref()
            .ok_or_else(|| Error::Invalid("a command before the subvol or snapshot command".into()))
    }

    pub(super) fn tree(&self) -> Result<u64> {
        Ok(self.cur()?.tree)
    }

    /// The inode at `path` in the current subvolume.
    pub(super) fn resolve(&mut self, path: &[u8]) -> Result<u64> {
        if let Some(&ino) = self.resolved.get(path) {
            return Ok(ino);
        }
        let tree = self.tree()?;
        let ino = self.lookup_path(tree, path)?;
        self.remember(path, ino);
        Ok(ino)
    }

    /// Notes that `path` is inode `ino` now.
    pub(super) fn remember(&mut self, path: &[u8], ino: u64) {
        if self.resolved.len() >= 1 << 16 {
            self.resolved.clear();
        }
        self.resolved.insert(path.to_vec(), ino);
    }

    /// Forgets resolved paths after `path` was renamed or removed: the
    /// path alone for a non-directory, everything for a directory.
    pub(super) fn forget_path(&mut self, path: &[u8], is_dir: bool) {
        if is_dir {
            self.resolved.clear();
        } else {
            self.resolved.remove(path);
        }
    }

    /// The inode at `path` from the top directory of subvolume `tree`,
    /// walked name by name (not remembered: see [`Self::resolve`]).
    pub(super) fn lookup_path(&mut self, tree: u64, path: &[u8]) -> Result<u64> {
        let mut ino = FIRST_INODE;
        for comp in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            let e = self.t.lookup_name(tree, ino, comp)?.ok_or_else(|| {
                Error::NotFound(format!(
                    "{}: no such file or directory in subvolume {tree}",
                    lossy(path)
                ))
            })?;
            ino = e.ino().ok_or_else(|| {
                Error::Unsupported(format!("{}: crosses into another subvolume", lossy(path)))
            })?;
        }
        Ok(ino)
    }

    /// The current subvolume and the inode at the command's path.
    pub(super) fn target(&mut self, c: &Command) -> Result<(u64, u64)> {
        let path = c.path(attr::PATH)?;
        let tree = self.tree()?;
        Ok((tree, self.resolve(path)?))
    }

    /// The directory holding `path` and its last component.
    pub(super) fn resolve_parent<'p>(&mut self, path: &'p [u8]) -> Result<(u64, &'p [u8])> {
        if path.is_empty() {
            return Err(Error::Invalid(
                "the subvolume's top directory cannot be made, moved or removed".into(),
            ));
        }
        let (dir, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => (self.resolve(&path[..i])?, &path[i + 1..]),
            None => (FIRST_INODE, path),
        };
        Ok((dir, name))
    }

    pub(super) fn alloc_ino(&mut self, tree: u64) -> Result<u64> {
        self.next_ino.take(self.t, tree)
    }
}
