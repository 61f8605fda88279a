//! Names on the mount: lookup, listings, create, link, unlink, rmdir,
//! rename (with RENAME_NOREPLACE and RENAME_EXCHANGE), as the kernel's
//! inode.c does them, with POSIX's errors decided before anything
//! changes.

use super::RwFs;
use crate::error::{Error, Result};
use crate::fs::InodeId;
use crate::inode::namei::Entry;
use crate::inode::{now, user_rdev_to_kernel};
use crate::items::dir_item;
use std::ops::ControlFlow;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::InodeItem;
use ubtrfs_format::Key;

/// Longest name (bytes).
pub const NAME_MAX: usize = 255;
/// Inode flags that forbid changing names (chattr +i, +a).
pub(crate) const INODE_IMMUTABLE_FLAGS: u64 = INODE_IMMUTABLE | INODE_APPEND;

/// rename(2) flags.
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;
pub const RENAME_WHITEOUT: u32 = 4;

pub use crate::items::dir_item::DirEnt;

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong(format!(
            "{} bytes (at most {NAME_MAX})",
            name.len()
        )));
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Invalid(format!("bad name {:?}", show(name))));
    }
    Ok(())
}

fn is_dir(mode: u32) -> bool {
    mode & 0o170000 == 0o040000
}

impl RwFs {
    /// What entry `e` (called `name`) of directory `dir` leads to: an
    /// inode, a subvolume's root, or the placeholder of a subvolume this
    /// snapshot lacks.
    fn target(&self, dir: InodeId, e: &Entry, name: &[u8]) -> Result<InodeId> {
        dir_item::entry_target(&self.t, dir, &e.location, name)
    }

    /// The inode `name` in `dir` names, if any.
    pub fn lookup(&self, dir: InodeId, name: &[u8]) -> Result<Option<InodeId>> {
        if name.len() > NAME_MAX {
            check_name(name)?;
        }
        if dir.is_placeholder() {
            return Ok(None);
        }
        match self.t.lookup_name(dir.subvol, dir.ino, name)? {
            Some(e) => self.target(dir, &e, name).map(Some),
            None => Ok(None),
        }
    }

    /// Up to `max` entries of `dir` after cookie `from`
    /// ([`dir_item::list`]).
    pub fn readdir(&self, dir: InodeId, from: u64, max: usize) -> Result<Vec<DirEnt>> {
        let mut out = Vec::new();
        dir_item::list(&self.t, dir, from, |e| {
            out.push(e);
            Ok(if out.len() >= max {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        })?;
        Ok(out)
    }

    /// The readdir cookie past which a listing of `dir` started now
    /// stops: names made (or renamed) during the listing get higher
    /// indexes and would be listed without end otherwise, as the
    /// kernel's btrfs_get_dir_last_index keeps it at opendir and rewind.
    pub fn readdir_end(&self, dir: InodeId) -> Result<u64> {
        if dir.is_placeholder() {
            return Ok(2);
        }
        Ok(self.t.after_last_dir_index(dir.subvol, dir.ino)?.max(2))
    }

    /// The directory holding `dir` (itself for a subvolume's root at the
    /// top, or the directory holding the subvolume).
    pub fn parent(&self, dir: InodeId) -> Result<InodeId> {
        dir_item::parent(&self.t, dir)
    }

    /// The inode item of a directory that is to change, refusing what
    /// POSIX refuses. An append-only directory takes new names but gives
    /// none up (`removes`: a name goes or is replaced), as the kernel's
    /// may_delete; an immutable one takes no change.
    pub(super) fn dir_for_change(&mut self, dir: InodeId, removes: bool) -> Result<InodeItem> {
        self.check_writable(dir)?;
        self.reserve_change(removes)?;
        let di = self.t.inode_of(dir.subvol, dir.ino)?;
        if !is_dir(di.mode) {
            return Err(Error::NotDir(format!(
                "subvolume {} inode {}",
                dir.subvol, dir.ino
            )));
        }
        if di.nlink == 0 {
            return Err(Error::NotFound(format!(
                "subvolume {} directory {} was removed",
                dir.subvol, dir.ino
            )));
        }
        let refused = if removes {
            INODE_IMMUTABLE_FLAGS
        } else {
            INODE_IMMUTABLE
        };
        if di.flags & refused != 0 {
            return Err(Error::Permission(format!(
                "subvolume {} directory {} is immutable or append-only",
                dir.subvol, dir.ino
            )));
        }
        Ok(di)
    }

    /// Makes `name` in `dir`: a file, directory, device, fifo or socket
    /// (`mode` with its type bits), owned by `uid` and `gid` (or the
    /// directory's group when it is set-group-ID, as the kernel's
    /// inode_init_owner), with the flags the directory and the mount
    /// options give it. With `umask` (POSIX ACLs on), the directory's
    /// default ACL is inherited, or else the umask applied
    /// ([`super::acl::inherit`]); without, `mode` is final.
    pub fn create(
        &mut self,
        dir: InodeId,
        name: &[u8],
        mode: u32,
        rdev: u64,
        owner: (u32, u32),
        umask: Option<u32>,
    ) -> Result<InodeId> {
        check_name(name)?;
        self.dir_for_change(dir, false)?;
        if self.t.lookup_name(dir.subvol, dir.ino, name)?.is_some() {
            return Err(Error::Exists(format!("{:?}", show(name))));
        }
        let id = self.make_inode(dir, Some(name), mode, rdev, owner, umask)?;
        self.bump(dir);
        Ok(id)
    }

    /// open(O_TMPFILE): a regular file in `dir`'s subvolume without a
    /// name (nlink 0), an orphan until linkat(2) names it or its last
    /// close deletes it, as the kernel's btrfs_tmpfile. The directory
    /// does not change. The caller notes it open ([`RwFs::opened`]).
    pub fn tmpfile(
        &mut self,
        dir: InodeId,
        mode: u32,
        owner: (u32, u32),
        umask: Option<u32>,
    ) -> Result<InodeId> {
        self.dir_for_change(dir, false)?;
        let mode = (mode & 0o7777) | 0o100000;
        let id = self.make_inode(dir, None, mode, 0, owner, umask)?;
        self.make_orphan(id)?;
        // A file that gains its name later: fsync commits (see `renamed`).
        self.renamed.insert(id);
        Ok(id)
    }

    /// A new inode inheriting from `dir` (mode, ACLs, set-group-ID, the
    /// mount's NODATACOW), named `name` there or nameless.
    fn make_inode(
        &mut self,
        dir: InodeId,
        name: Option<&[u8]>,
        mode: u32,
        rdev: u64,
        (uid, gid): (u32, u32),
        umask: Option<u32>,
    ) -> Result<InodeId> {
        let di = self.t.inode_of(dir.subvol, dir.ino)?;
        let (mut mode, acl_xattrs) = match umask {
            Some(umask) => {
                let default = self.t.get_xattr(dir.subvol, dir.ino, super::acl::DEFAULT)?;
                super::acl::inherit(mode, umask, default.as_deref())
            }
            None => (mode, Vec::new()),
        };
        let mut gid = gid;
        if di.mode & 0o2000 != 0 {
            gid = di.gid;
            if is_dir(mode) {
                mode |= 0o2000;
            }
        }
        let ino = self.alloc_ino(dir.subvol)?;
        let time = now();
        let kind = mode & 0o170000;
        let rdev = if kind == 0o020000 || kind == 0o060000 {
            user_rdev_to_kernel(rdev)
        } else {
            0
        };
        let mut inode = match name {
            Some(name) => self.t.inode_mut(dir.subvol, dir.ino).create_inode(
                name,
                ino,
                mode,
                rdev,
                (uid, gid),
                time,
            )?,
            None => self
                .t
                .new_inode(dir.subvol, dir.ino, ino, mode, rdev, (uid, gid), time, 0)?,
        };
        if kind == 0o100000 && (self.opts.nodatacow || self.opts.nodatasum) {
            if self.opts.nodatacow {
                inode.flags |= INODE_NODATACOW;
            }
            inode.flags |= INODE_NODATASUM;
            self.t.inode_mut(dir.subvol, ino).put(&inode)?;
        }
        for (name, value) in acl_xattrs {
            self.t.inode_mut(dir.subvol, ino).set_xattr(name, &value)?;
        }
        Ok(InodeId {
            subvol: dir.subvol,
            ino,
        })
    }

    /// symlink(2): `name` in `dir` pointing at `target`, stored inline.
    pub fn symlink(
        &mut self,
        dir: InodeId,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<InodeId> {
        let limit = (self.sectorsize() as usize).min(4095);
        if target.is_empty() || target.len() > limit {
            return Err(Error::NameTooLong(format!(
                "symlink target of {} bytes",
                target.len()
            )));
        }
        let id = self.create(dir, name, 0o120777, 0, (uid, gid), None)?;
        self.inode_mut(id)
            .insert_inline_extent(target, target.len() as u64, 0)?;
        let mut inode = self.t.inode_of(id.subvol, id.ino)?;
        inode.size = target.len() as u64;
        inode.nbytes = target.len() as u64;
        self.inode_mut(id).put(&inode)?;
        Ok(id)
    }

    /// link(2): a new name `name` in `dir` for `id`.
    pub fn link(&mut self, id: InodeId, dir: InodeId, name: &[u8]) -> Result<()> {
        check_name(name)?;
        if id.subvol != dir.subvol {
            return Err(Error::CrossDevice(
                "hard links across subvolumes".to_string(),
            ));
        }
        self.dir_for_change(dir, false)?;
        self.check_writable(id)?;
        let inode = self.t.inode_of(id.subvol, id.ino)?;
        if is_dir(inode.mode) {
            return Err(Error::Permission("hard link to a directory".into()));
        }
        if inode.flags & INODE_IMMUTABLE_FLAGS != 0 {
            return Err(Error::Permission(format!(
                "inode {} is immutable or append-only",
                id.ino
            )));
        }
        // An O_TMPFILE file (the kernel lets only those through,
        // I_LINKABLE) may get its first name.
        if inode.nlink == 0 && !self.orphans.contains(&id) {
            return Err(Error::NotFound(format!("inode {} has no names", id.ino)));
        }
        if inode.nlink >= 65535 {
            return Err(Error::TooManyLinks(format!("inode {}", id.ino)));
        }
        if self.t.lookup_name(dir.subvol, dir.ino, name)?.is_some() {
            return Err(Error::Exists(format!("{:?}", show(name))));
        }
        if inode.nlink == 0 {
            // Named: an orphan no more.
            self.orphans.remove(&id);
            self.t
                .delete_item(id.subvol, &Key::new(ORPHAN_OBJECTID, ORPHAN_ITEM, id.ino))?;
        }
        self.t.link(dir.subvol, id.ino, dir.ino, name, now())?;
        self.renamed.insert(id);
        self.bump(dir);
        Ok(())
    }

    /// The entry `name` of `dir` that is to go away, refusing subvolumes,
    /// and the inode it names.
    fn entry_to_remove(&mut self, dir: InodeId, name: &[u8]) -> Result<(InodeId, InodeItem)> {
        let e = self
            .t
            .lookup_name(dir.subvol, dir.ino, name)?
            .ok_or_else(|| Error::NotFound(format!("{:?}", show(name))))?;
        let Some(ino) = e.ino() else {
            return Err(Error::Permission(format!(
                "{:?} is a subvolume (delete it with `ubtrfs subvolume delete`)",
                show(name)
            )));
        };
        let id = InodeId {
            subvol: dir.subvol,
            ino,
        };
        let inode = self.t.inode_of(id.subvol, ino)?;
        if inode.flags & INODE_IMMUTABLE_FLAGS != 0 {
            return Err(Error::Permission(format!(
                "{:?} is immutable or append-only",
                show(name)
            )));
        }
        Ok((id, inode))
    }

    /// Removes name `name` of `id` from `dir`; the last name of a file
    /// takes it (or makes it an orphan while it is open).
    fn remove_name(&mut self, dir: InodeId, name: &[u8], id: InodeId, dir_too: bool) -> Result<()> {
        self.t
            .unlink_inode(dir.subvol, dir.ino, id.ino, name, Some(now()))?;
        self.renamed.insert(id);
        let left = self.t.inode_of(id.subvol, id.ino)?.nlink;
        if left == 0 || dir_too {
            if dir_too && left > 0 {
                let mut i = self.t.inode_of(id.subvol, id.ino)?;
                i.nlink = 0;
                self.inode_mut(id).put(&i)?;
            }
            if self.is_open(id) {
                self.make_orphan(id)?;
            } else {
                self.forget_dirty(id);
                self.inode_mut(id).evict()?;
            }
        }
        self.bump(dir);
        self.bump(id);
        Ok(())
    }

    /// unlink(2).
    pub fn unlink(&mut self, dir: InodeId, name: &[u8]) -> Result<()> {
        self.dir_for_change(dir, true)?;
        let (id, inode) = self.entry_to_remove(dir, name)?;
        if is_dir(inode.mode) {
            return Err(Error::IsDir(format!("{:?}", show(name))));
        }
        self.remove_name(dir, name, id, false)
    }

    /// rmdir(2).
    pub fn rmdir(&mut self, dir: InodeId, name: &[u8]) -> Result<()> {
        if name == b"." {
            return Err(Error::Invalid("rmdir of \".\"".into()));
        }
        if name == b".." {
            return Err(Error::NotEmpty("rmdir of \"..\"".into()));
        }
        self.dir_for_change(dir, true)?;
        if let Some(e) = self.t.lookup_name(dir.subvol, dir.ino, name)? {
            if e.location.item_type == ROOT_ITEM {
                // An empty subvolume goes as a directory would (the
                // kernel's btrfs_rmdir of a subvolume's root).
                let sub = e.location.objectid;
                let linked_here = self.t.has_tree(sub)?
                    && self.t.subvol_parents(sub)?.contains(&dir)
                    && self.t.root(sub)?.item.refs != 0;
                if !linked_here {
                    // The placeholder a snapshot holds for a subvolume
                    // it does not contain: only the name goes.
                    return self.remove_placeholder(dir, name);
                }
                if self.t.inode_of(sub, FIRST_INODE)?.size != 0 {
                    return Err(Error::NotEmpty(format!("{:?}", show(name))));
                }
                return self.delete_subvolume(dir, name).map(|_| ());
            }
        }
        let (id, inode) = self.entry_to_remove(dir, name)?;
        if !is_dir(inode.mode) {
            return Err(Error::NotDir(format!("{:?}", show(name))));
        }
        if inode.size != 0 {
            return Err(Error::NotEmpty(format!("{:?}", show(name))));
        }
        self.remove_name(dir, name, id, true)
    }

    /// rename(2) / renameat2(2) by `caller` (uid, gid), with
    /// RENAME_NOREPLACE, RENAME_EXCHANGE or RENAME_WHITEOUT (overlayfs's):
    /// the old name becomes a whiteout the caller owns, a character device
    /// 0:0, as the kernel's btrfs_whiteout_for_rename.
    pub fn rename(
        &mut self,
        from_dir: InodeId,
        from: &[u8],
        to_dir: InodeId,
        to: &[u8],
        flags: u32,
        caller: (u32, u32),
    ) -> Result<()> {
        check_name(to)?;
        let known = RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT;
        if flags & !known != 0
            || flags & RENAME_EXCHANGE != 0 && flags & (RENAME_NOREPLACE | RENAME_WHITEOUT) != 0
        {
            return Err(Error::Invalid(format!("rename flags {flags:#x}")));
        }
        self.rename_names(from_dir, from, to_dir, to, flags)?;
        if flags & RENAME_WHITEOUT != 0 {
            self.create(from_dir, from, 0o020000, 0, caller, None)?;
        }
        Ok(())
    }

    /// The renames of [`RwFs::rename`], its flags checked.
    fn rename_names(
        &mut self,
        from_dir: InodeId,
        from: &[u8],
        to_dir: InodeId,
        to: &[u8],
        flags: u32,
    ) -> Result<()> {
        if from_dir.subvol != to_dir.subvol {
            return Err(Error::CrossDevice("rename across subvolumes".into()));
        }
        self.dir_for_change(from_dir, true)?;
        let replaces = self.t.lookup_name(to_dir.subvol, to_dir.ino, to)?.is_some();
        self.dir_for_change(to_dir, replaces)?;
        let (src, src_inode) = self.entry_to_remove(from_dir, from)?;
        let dst = match replaces {
            true => Some(self.entry_to_remove(to_dir, to)?),
            false => None,
        };
        let tree = from_dir.subvol;
        let time = now();
        if flags & RENAME_EXCHANGE != 0 {
            let Some((dst, dst_inode)) = dst else {
                return Err(Error::NotFound(format!("{:?}", show(to))));
            };
            if src == dst {
                return Ok(());
            }
            for (moved, inode, into) in [(src, &src_inode, to_dir), (dst, &dst_inode, from_dir)] {
                if is_dir(inode.mode) {
                    self.check_not_below(moved, into)?;
                }
            }
            self.t
                .exchange(tree, from_dir.ino, from, to_dir.ino, to, time)?;
            self.renamed.insert(src);
            self.renamed.insert(dst);
            for id in [src, dst, from_dir, to_dir] {
                self.bump(id);
            }
            return Ok(());
        }
        if let Some((dst, dst_inode)) = &dst {
            if flags & RENAME_NOREPLACE != 0 {
                return Err(Error::Exists(format!("{:?}", show(to))));
            }
            if *dst == src {
                return Ok(());
            }
            match (is_dir(src_inode.mode), is_dir(dst_inode.mode)) {
                (true, false) => return Err(Error::NotDir(format!("{:?}", show(to)))),
                (false, true) => return Err(Error::IsDir(format!("{:?}", show(to)))),
                (true, true) if dst_inode.size != 0 => {
                    return Err(Error::NotEmpty(format!("{:?}", show(to))))
                }
                _ => {}
            }
        }
        if is_dir(src_inode.mode) {
            self.check_not_below(src, to_dir)?;
        }
        if let Some((dst, dst_inode)) = dst {
            self.remove_name(to_dir, to, dst, is_dir(dst_inode.mode))?;
        }
        self.t
            .rename(tree, from_dir.ino, from, to_dir.ino, to, time)?;
        self.renamed.insert(src);
        for id in [src, from_dir, to_dir] {
            self.bump(id);
        }
        Ok(())
    }

    /// Refuses moving directory `moved` into `into` when `into` is
    /// `moved` or below it.
    fn check_not_below(&mut self, moved: InodeId, into: InodeId) -> Result<()> {
        let mut d = into;
        loop {
            if d == moved {
                return Err(Error::Invalid(
                    "a directory cannot move below itself".into(),
                ));
            }
            if d.ino == FIRST_INODE {
                return Ok(());
            }
            d = self.parent(d)?;
        }
    }
}
