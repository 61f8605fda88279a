//! The commands that name paths (send.c's send_rename, send_link,
//! send_unlink, send_rmdir, send_set_xattr, send_truncate, send_utimes,
//! send_create_inode, ...): one function each, built on the stream
//! writer. Data commands are in `data.rs`.

use super::{Loc, Sender};
use crate::error::{Error, Result};
use crate::fs::file::FileHandle;
use crate::fs::{kernel_rdev_to_user, InodeId};
use ubtrfs_format::items::InodeItem;
use ubtrfs_format::send_stream::{attr, cmd};

impl Sender<'_, '_> {
    pub(super) fn send_subvol_begin(&mut self) -> Result<()> {
        let uuid = self.send.stream_uuid();
        let ctransid = self.send.item.ctransid;
        let name = self.send.name.clone();
        match &self.parent {
            Some(p) => {
                let puuid = p.stream_uuid();
                let pct = p.item.ctransid;
                self.w.begin(cmd::SNAPSHOT);
                self.w.put(attr::PATH, &name);
                self.w.put_uuid(attr::UUID, &uuid);
                self.w.put_u64(attr::CTRANSID, ctransid);
                self.w.put_uuid(attr::CLONE_UUID, &puuid);
                self.w.put_u64(attr::CLONE_CTRANSID, pct);
            }
            None => {
                self.w.begin(cmd::SUBVOL);
                self.w.put(attr::PATH, &name);
                self.w.put_uuid(attr::UUID, &uuid);
                self.w.put_u64(attr::CTRANSID, ctransid);
            }
        }
        self.w.finish()
    }

    /// Command `c` with byte-string attributes only, in this order.
    fn send_bytes(&mut self, c: u16, attrs: &[(u16, &[u8])]) -> Result<()> {
        self.w.begin(c);
        for &(a, v) in attrs {
            self.w.put(a, v);
        }
        self.w.finish()
    }

    pub fn send_rename(&mut self, from: &[u8], to: &[u8]) -> Result<()> {
        self.send_bytes(cmd::RENAME, &[(attr::PATH, from), (attr::PATH_TO, to)])
    }

    pub fn send_link(&mut self, path: &[u8], target: &[u8]) -> Result<()> {
        self.send_bytes(cmd::LINK, &[(attr::PATH, path), (attr::PATH_LINK, target)])
    }

    pub fn send_unlink(&mut self, path: &[u8]) -> Result<()> {
        self.send_bytes(cmd::UNLINK, &[(attr::PATH, path)])
    }

    pub fn send_rmdir(&mut self, path: &[u8]) -> Result<()> {
        self.send_bytes(cmd::RMDIR, &[(attr::PATH, path)])
    }

    pub fn send_set_xattr(&mut self, path: &[u8], name: &[u8], data: &[u8]) -> Result<()> {
        // Empty ACLs are stored as zero-length xattrs, which setxattr on the
        // receiving side refuses; send an ACL header with no entries.
        let dummy = 2u32.to_le_bytes();
        let data = if data.is_empty()
            && (name == b"system.posix_acl_access" || name == b"system.posix_acl_default")
        {
            &dummy[..]
        } else {
            data
        };
        self.send_bytes(
            cmd::SET_XATTR,
            &[
                (attr::PATH, path),
                (attr::XATTR_NAME, name),
                (attr::XATTR_DATA, data),
            ],
        )
    }

    pub fn send_remove_xattr(&mut self, path: &[u8], name: &[u8]) -> Result<()> {
        self.send_bytes(
            cmd::REMOVE_XATTR,
            &[(attr::PATH, path), (attr::XATTR_NAME, name)],
        )
    }

    pub fn send_truncate(&mut self, size: u64) -> Result<()> {
        let p = self.cur_path()?;
        self.w.begin(cmd::TRUNCATE);
        self.w.put(attr::PATH, &p);
        self.w.put_u64(attr::SIZE, size);
        self.w.finish()
    }

    pub(super) fn send_utimes_of(&mut self, path: &[u8], ii: &InodeItem) -> Result<()> {
        self.w.begin(cmd::UTIMES);
        self.w.put(attr::PATH, path);
        self.w
            .put_timespec(attr::ATIME, ii.atime.sec, ii.atime.nsec);
        self.w
            .put_timespec(attr::MTIME, ii.mtime.sec, ii.mtime.nsec);
        self.w
            .put_timespec(attr::CTIME, ii.ctime.sec, ii.ctime.nsec);
        if self.w.proto() >= 2 {
            self.w
                .put_timespec(attr::OTIME, ii.otime.sec, ii.otime.nsec);
        }
        self.w.finish()
    }

    /// Creates inode `ino` under its orphan name.
    pub fn create_inode(&mut self, ino: u64, ii: &InodeItem) -> Result<()> {
        let name = self.orphan_name(ino, ii.generation)?;
        let ft = ii.mode & 0o170000;
        let c = match ft {
            0o100000 => cmd::MKFILE,
            0o040000 => cmd::MKDIR,
            0o120000 => cmd::SYMLINK,
            0o020000 | 0o060000 => cmd::MKNOD,
            0o010000 => cmd::MKFIFO,
            0o140000 => cmd::MKSOCK,
            _ => {
                return Err(Error::Unsupported(format!(
                    "{} inode {ino}: unexpected file type {:o}",
                    self.send.tree.describe(),
                    ft
                )))
            }
        };
        let target = if c == cmd::SYMLINK {
            Some(self.read_symlink(ino)?)
        } else {
            None
        };
        self.w.begin(c);
        self.w.put(attr::PATH, &name);
        self.w.put_u64(attr::INO, ino);
        if let Some(t) = target {
            self.w.put(attr::PATH_LINK, &t);
        } else if c == cmd::MKNOD || c == cmd::MKFIFO || c == cmd::MKSOCK {
            self.w.put_u64(attr::RDEV, kernel_rdev_to_user(ii.rdev));
            self.w.put_u64(attr::MODE, ii.mode as u64);
        }
        self.w.finish()?;
        self.loc.insert(ino, Loc::orphan(name));
        self.touch_root();
        Ok(())
    }

    fn read_symlink(&mut self, ino: u64) -> Result<Vec<u8>> {
        let id = InodeId {
            subvol: self.send.id,
            ino,
        };
        let mut h = FileHandle::open(self.fs, id)?;
        let mut buf = vec![0u8; h.size.min(1 << 16) as usize];
        let n = h.read_at(self.fs, 0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }
}
