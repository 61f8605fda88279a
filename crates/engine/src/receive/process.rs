//! The commands applied, as cmds/receive.c's process_* callbacks apply
//! them through a mount: [`Receiver::apply`] takes each command of a
//! stream to the transaction's operations (the subvolume's in
//! [`super::subvol`], data in [`super::write`]).

use super::stream::{self, Command};
use super::write::compression_prop;
use super::{holds_inode, lossy, Receiver, S_IFMT};
use crate::error::{Error, Result};
use crate::inode::file::{INODE_COMPRESS, INODE_NOCOMPRESS};
use crate::inode::namei::XATTR_COMPRESSION;
use ubtrfs_format::consts::*;
use ubtrfs_format::send_stream::{attr, cmd, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE};

impl Receiver<'_> {
    /// Applies one command (END is the caller's: it finishes the
    /// subvolume).
    pub(super) fn apply(&mut self, c: &Command) -> Result<()> {
        let now = self.opts.now;
        if c.cmd != cmd::WRITE {
            self.flush()?;
        }
        if !holds_inode(c.cmd) {
            // The flush may have left the written file's inode held: the
            // command's own changes read it from the tree.
            self.write_held()?;
        }
        match c.cmd {
            cmd::SUBVOL => self.subvol_cmd(c)?,
            cmd::SNAPSHOT => self.snapshot_cmd(c)?,
            cmd::MKFILE | cmd::MKDIR | cmd::MKNOD | cmd::MKFIFO | cmd::MKSOCK | cmd::SYMLINK => {
                self.make(c)?
            }
            cmd::RENAME => self.rename(c)?,
            cmd::LINK => {
                let path = c.path(attr::PATH)?;
                let target = c.path(attr::PATH_LINK)?;
                let tree = self.tree()?;
                let ino = self.resolve(target)?;
                let (dir, name) = self.resolve_parent(path)?;
                self.t.link(tree, ino, dir, name, now)?;
            }
            cmd::UNLINK | cmd::RMDIR => self.unlink(c)?,
            cmd::SET_XATTR => {
                let name = c.bytes(attr::XATTR_NAME)?;
                let value = c.bytes(attr::XATTR_DATA)?;
                let (tree, ino) = self.target(c)?;
                if name == b"security.capability" {
                    self.cached_caps = Some(value.to_vec());
                }
                self.set_xattr(tree, ino, name, value)?;
            }
            cmd::REMOVE_XATTR => {
                let name = c.bytes(attr::XATTR_NAME)?;
                let (tree, ino) = self.target(c)?;
                self.t.inode_mut(tree, ino).remove_xattr(name)?;
                let mut i = self.inode(tree, ino)?;
                if name == XATTR_COMPRESSION {
                    i.flags &= !(INODE_COMPRESS | INODE_NOCOMPRESS);
                }
                self.put_changed(tree, ino, i, false)?;
            }
            cmd::WRITE => {
                let off = c.u64(attr::FILE_OFFSET)?;
                let data = c.bytes(attr::DATA)?;
                let (tree, ino) = self.target(c)?;
                self.buffer_write(tree, ino, off, data)?;
            }
            cmd::CLONE => self.clone_cmd(c)?,
            cmd::TRUNCATE => {
                let size = c.u64(attr::SIZE)?;
                let (tree, ino) = self.target(c)?;
                let policy = self.policy(tree, ino)?;
                let i = self.t.inode_mut(tree, ino).truncate_file(size, policy)?;
                self.put_changed(tree, ino, i, true)?;
            }
            cmd::CHMOD => {
                let mode = c.u64(attr::MODE)?;
                let (tree, ino) = self.target(c)?;
                let mut i = self.inode(tree, ino)?;
                i.mode = (i.mode & S_IFMT) | (mode as u32 & 0o7777);
                self.put_changed(tree, ino, i, false)?;
            }
            cmd::CHOWN => self.chown(c)?,
            cmd::UTIMES => {
                let atime = c.timespec(attr::ATIME)?;
                let mtime = c.timespec(attr::MTIME)?;
                let (tree, ino) = self.target(c)?;
                let mut i = self.inode(tree, ino)?;
                i.atime = atime;
                i.mtime = mtime;
                self.put_changed(tree, ino, i, false)?;
                // put_changed set mtime only for data changes.
            }
            cmd::UPDATE_EXTENT => {
                // A stream sent without file data: nothing to write.
                c.path(attr::PATH)?;
            }
            cmd::FALLOCATE => self.fallocate(c)?,
            cmd::FILEATTR => {
                // btrfs receive does not apply file attributes either.
                c.path(attr::PATH)?;
            }
            cmd::ENCODED_WRITE => self.encoded_write(c)?,
            stream::ENABLE_VERITY => {
                return Err(Error::Unsupported(
                    "fs-verity: ubtrfs does not write verity items".into(),
                ))
            }
            other => {
                return Err(Error::Invalid(format!("unknown command {other}")));
            }
        }
        Ok(())
    }

    /// A rename: the paths resolved before and after it follow.
    fn rename(&mut self, c: &Command) -> Result<()> {
        let now = self.opts.now;
        let from = c.path(attr::PATH)?;
        let to = c.path(attr::PATH_TO)?;
        let tree = self.tree()?;
        let (fd, fname) = self.resolve_parent(from)?;
        let (td, tname) = self.resolve_parent(to)?;
        let moved = self.t.lookup_name(tree, fd, fname)?;
        let is_dir = moved.is_none_or(|e| e.file_type == FT_DIR);
        let over_dir = self
            .t
            .lookup_name(tree, td, tname)?
            .is_some_and(|e| e.file_type == FT_DIR);
        self.forget_path(from, is_dir);
        self.forget_path(to, over_dir);
        self.t.rename(tree, fd, fname, td, tname, now)?;
        // The commands after a rename name the file by its new
        // path (send renames every new file from its temporary
        // name).
        if let Some(ino) = moved.and_then(|e| e.ino()) {
            self.remember(to, ino);
        }
        Ok(())
    }

    /// An unlink or rmdir: the command must fit the file type.
    fn unlink(&mut self, c: &Command) -> Result<()> {
        let now = self.opts.now;
        let path = c.path(attr::PATH)?;
        let tree = self.tree()?;
        let (dir, name) = self.resolve_parent(path)?;
        let e = self.t.lookup_name(tree, dir, name)?.ok_or_else(|| {
            Error::NotFound(format!("{}: no such file or directory", lossy(path)))
        })?;
        let is_dir = e.file_type == FT_DIR;
        if c.cmd == cmd::UNLINK && is_dir {
            return Err(Error::IsDir(lossy(path)));
        }
        if c.cmd == cmd::RMDIR && !is_dir {
            return Err(Error::NotDir(lossy(path)));
        }
        self.forget_path(path, is_dir);
        self.t.inode_mut(tree, dir).unlink(name, now)?;
        Ok(())
    }

    /// A chown, dropping what the kernel's chown drops (receive restores the
    /// capability set before it).
    fn chown(&mut self, c: &Command) -> Result<()> {
        let uid = c.u64(attr::UID)?;
        let gid = c.u64(attr::GID)?;
        let (tree, ino) = self.target(c)?;
        let (Ok(uid), Ok(gid)) = (u32::try_from(uid), u32::try_from(gid)) else {
            return Err(Error::Invalid(format!(
                "uid {uid} / gid {gid} out of range"
            )));
        };
        let mut i = self.inode(tree, ino)?;
        i.uid = uid;
        i.gid = gid;
        if i.mode & S_IFMT != 0o040000 {
            // The kernel's chown of a non-directory drops
            // set-user-ID, set-group-ID with group execute, and
            // file capabilities.
            i.mode &= !0o4000;
            if i.mode & 0o010 != 0 {
                i.mode &= !0o2000;
            }
            if self
                .t
                .get_xattr(tree, ino, b"security.capability")?
                .is_some()
            {
                self.t
                    .inode_mut(tree, ino)
                    .remove_xattr(b"security.capability")?;
            }
        }
        self.put_changed(tree, ino, i, false)?;
        if let Some(caps) = self.cached_caps.take() {
            self.t
                .inode_mut(tree, ino)
                .set_xattr(b"security.capability", &caps)?;
        }
        Ok(())
    }

    /// A fallocate: preallocation, or a hole punched.
    fn fallocate(&mut self, c: &Command) -> Result<()> {
        let mode = c.u32(attr::FALLOCATE_MODE)?;
        let off = c.u64(attr::FILE_OFFSET)?;
        let len = c.u64(attr::SIZE)?;
        let (tree, ino) = self.target(c)?;
        let i = if mode == FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE {
            let policy = self.policy(tree, ino)?;
            self.t.inode_mut(tree, ino).punch_hole(off, len, policy)?
        } else if mode & !FALLOC_FL_KEEP_SIZE == 0 {
            let policy = self.policy(tree, ino)?;
            let keep = mode & FALLOC_FL_KEEP_SIZE != 0;
            self.t
                .inode_mut(tree, ino)
                .prealloc(off, len, keep, policy)?
        } else {
            return Err(Error::Unsupported(format!("fallocate mode {mode:#x}")));
        };
        self.put_changed(tree, ino, i, true)?;
        Ok(())
    }

    /// The mkfile, mkdir, mknod, mkfifo, mksock and symlink commands: a new
    /// inode as the kernel's creat, mkdir, mknod and symlink make it.
    fn make(&mut self, c: &Command) -> Result<()> {
        let path = c.path(attr::PATH)?;
        let tree = self.tree()?;
        let (dir, name) = self.resolve_parent(path)?;
        let (mode, rdev) = match c.cmd {
            cmd::MKFILE => (0o100600, 0),
            cmd::MKDIR => (0o040700, 0),
            cmd::MKNOD => {
                let mode = c.u64(attr::MODE)? as u32 & S_IFMT;
                if !matches!(mode, 0o020000 | 0o060000 | 0o010000 | 0o140000 | 0o100000) {
                    return Err(Error::Invalid(format!("mknod of file type {mode:o}")));
                }
                let rdev = c.u64(attr::RDEV)?;
                (mode, crate::inode::user_rdev_to_kernel(rdev))
            }
            cmd::MKFIFO => (0o010600, 0),
            cmd::MKSOCK => (0o140600, 0),
            _ => (0o120777, 0),
        };
        let target = if c.cmd == cmd::SYMLINK {
            let t = c.bytes(attr::PATH_LINK)?;
            let max = crate::tree::buf::max_item_data(self.t.nodesize()) - 21;
            if t.is_empty() || t.len() > max.min(4095) || t.contains(&0) {
                return Err(Error::NameTooLong(format!(
                    "symlink target of {} bytes",
                    t.len()
                )));
            }
            Some(t)
        } else {
            None
        };
        let ino = self.alloc_ino(tree)?;
        let now = self.opts.now;
        let mut i = self
            .t
            .inode_mut(tree, dir)
            .create_inode(name, ino, mode, rdev, (0, 0), now)?;
        if let Some(t) = target {
            self.t
                .inode_mut(tree, ino)
                .insert_inline_extent(t, t.len() as u64, COMPRESS_NONE)?;
            i.size = t.len() as u64;
            i.nbytes = t.len() as u64;
            self.t.inode_mut(tree, ino).put(&i)?;
        }
        Ok(())
    }

    /// A set_xattr; `btrfs.compression` is the kernel's property, setting
    /// the inode's compression flags.
    fn set_xattr(&mut self, tree: u64, ino: u64, name: &[u8], value: &[u8]) -> Result<()> {
        let mut i = self.inode(tree, ino)?;
        if name.starts_with(b"btrfs.") {
            if name != XATTR_COMPRESSION {
                return Err(Error::Invalid(format!(
                    "unknown btrfs property {:?}",
                    lossy(name)
                )));
            }
            if value.is_empty() {
                i.flags &= !(INODE_COMPRESS | INODE_NOCOMPRESS);
                if self.t.get_xattr(tree, ino, name)?.is_some() {
                    self.t.inode_mut(tree, ino).remove_xattr(name)?;
                }
                return self.put_changed(tree, ino, i, false);
            }
            match compression_prop(value) {
                Some(Some(_)) => {
                    i.flags = (i.flags & !INODE_NOCOMPRESS) | INODE_COMPRESS;
                }
                Some(None) => {
                    i.flags = (i.flags & !INODE_COMPRESS) | INODE_NOCOMPRESS;
                }
                None => {
                    return Err(Error::Invalid(format!(
                        "btrfs.compression value {:?}",
                        lossy(value)
                    )))
                }
            }
        }
        self.t.inode_mut(tree, ino).set_xattr(name, value)?;
        self.put_changed(tree, ino, i, false)
    }
}
