//! Subvolumes on the mount (the kernel's ioctl.c subvolume ioctls, and
//! inode.c btrfs_delete_subvolume), carried out in the mount's running
//! transaction by the same [`Trans`](crate::tx::Trans) operations the
//! offline commands use ([`crate::subvol`]). What this adds is the mount's
//! part:
//!
//! - every error is decided before anything changes (the running
//!   transaction cannot be rolled back);
//! - a snapshot holds every write that returned before it: dirty data is
//!   written back and committed first, as the kernel flushes delalloc and
//!   snapshots in the commit;
//! - a new or deleted subvolume and its parent directory cannot be logged
//!   (replay only adds names, and the new tree has no committed root):
//!   an fsync under them commits;
//! - a deleted subvolume is unlinked at once and its tree dropped after
//!   the next commit, once nothing in it is open (its ROOT_ITEM with 0
//!   references and an ORPHAN_ITEM meanwhile, as the kernel leaves it for
//!   its cleaner); a mount drops what an earlier one left.

use super::namei::check_name;
use super::RwFs;
use crate::error::{Error, Result};
use crate::fs::InodeId;
use crate::inode::now;
use crate::items::ItemSource;
use crate::subvol::Place;
use std::ops::ControlFlow;
use ubtrfs_format::consts::*;
use ubtrfs_format::ioctl::SUBVOL_RDONLY;
use ubtrfs_format::items::RootRef;
use ubtrfs_format::Key;

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// The root directory of subvolume `subvol`.
fn top(subvol: u64) -> InodeId {
    InodeId {
        subvol,
        ino: FIRST_INODE,
    }
}

impl RwFs {
    /// Names the subvolume the mount shows as its root (the top level
    /// unless `subvol=` or the default chose another).
    pub fn set_shown_subvol(&mut self, id: u64) {
        self.shown_subvol = id;
    }

    /// Where a new subvolume `name` goes in `dir`: a writable directory
    /// without that name.
    fn new_place<'n>(&mut self, dir: InodeId, name: &'n [u8]) -> Result<Place<'n>> {
        check_name(name)?;
        if name == b"." || name == b".." {
            return Err(Error::Exists(show(name)));
        }
        self.dir_for_change(dir, false)?;
        if self.t.lookup_name(dir.subvol, dir.ino, name)?.is_some() {
            return Err(Error::Exists(show(name)));
        }
        Ok(Place {
            tree: dir.subvol,
            dir: dir.ino,
            name,
        })
    }

    /// What a new subvolume at `dir` changed: neither can be logged until
    /// the next commit, and listings of `dir` changed.
    fn linked_subvol(&mut self, dir: InodeId, id: u64) {
        self.renamed.insert(dir);
        self.renamed.insert(top(id));
        self.readonly.remove(&id);
        self.bump(dir);
    }

    /// BTRFS_IOC_SUBVOL_CREATE(_V2): an empty subvolume `name` in `dir`,
    /// its top directory owned by `owner` (uid, gid) with `mode`'s
    /// permission bits (the caller's umask applied). Returns its id.
    pub fn create_subvolume(
        &mut self,
        dir: InodeId,
        name: &[u8],
        owner: (u32, u32),
        mode: u32,
    ) -> Result<u64> {
        let place = self.new_place(dir, name)?;
        let parent = self.t.inode_of(dir.subvol, dir.ino)?;
        let uuid = crate::inode::root::random_uuid()?;
        let id = self.t.create_subvolume(&place, uuid, false, now())?;
        let mut i = self.t.inode_of(id, FIRST_INODE)?;
        (i.uid, i.gid) = owner;
        i.mode = 0o040000 | (mode & 0o7777);
        // A set-group-ID directory passes its group and the bit on, as
        // the kernel's inode_init_owner.
        if parent.mode & 0o2000 != 0 {
            i.gid = parent.gid;
            i.mode |= 0o2000;
        }
        self.inode_mut(top(id)).put(&i)?;
        self.linked_subvol(dir, id);
        Ok(id)
    }

    /// BTRFS_IOC_SNAP_CREATE_V2: a snapshot of subvolume `src` as `name`
    /// in `dir`, read-only when asked. Everything written before it is
    /// in it: dirty data is written back and the transaction committed
    /// first (the caller holds the filesystem as a commit needs). Returns
    /// the new id.
    pub fn snapshot(&mut self, src: u64, dir: InodeId, name: &[u8], readonly: bool) -> Result<u64> {
        self.new_place(dir, name)?;
        if !self.t.has_tree(src)? || self.t.root(src)?.item.refs == 0 && src != FS_TREE_OBJECTID {
            return Err(Error::NotFound(format!("subvolume {src}")));
        }
        self.commit()?;
        let place = Place {
            tree: dir.subvol,
            dir: dir.ino,
            name,
        };
        let uuid = crate::inode::root::random_uuid()?;
        let id = self.t.snapshot(src, &place, uuid, readonly, now())?;
        self.linked_subvol(dir, id);
        Ok(id)
    }

    /// BTRFS_IOC_SNAP_DESTROY(_V2): deletes subvolume `name` of `dir`.
    /// Refused before anything changes: a name that is not a subvolume
    /// (EINVAL), the default subvolume (EPERM, as the kernel's
    /// may_destroy_subvol), the subvolume the mount shows as its root
    /// (EBUSY), one with subvolumes inside (ENOTEMPTY). Returns the
    /// deleted id.
    pub fn delete_subvolume(&mut self, dir: InodeId, name: &[u8]) -> Result<u64> {
        self.dir_for_change(dir, true)?;
        let e = self
            .t
            .lookup_name(dir.subvol, dir.ino, name)?
            .ok_or_else(|| Error::NotFound(show(name)))?;
        if e.location.item_type != ROOT_ITEM {
            return Err(Error::Invalid(format!("{:?}: not a subvolume", show(name))));
        }
        let id = e.location.objectid;
        self.delete_subvolume_id(id)?;
        self.renamed.insert(dir);
        self.bump(dir);
        Ok(id)
    }

    /// [`RwFs::delete_subvolume`] by id (SNAP_DESTROY_V2 with
    /// BTRFS_SUBVOL_SPEC_BY_ID). Returns the directories its names went
    /// from.
    pub fn delete_subvolume_id(&mut self, id: u64) -> Result<Vec<InodeId>> {
        self.t.check_deletable(id)?;
        if self.t.root(id)?.item.refs == 0 {
            return Err(Error::NotFound(format!("subvolume {id} is deleted")));
        }
        if id == self.shown_subvol {
            return Err(Error::Busy(format!("subvolume {id} is the mount's root")));
        }
        if self.is_sending(id) {
            return Err(Error::Permission(format!("subvolume {id} is being sent")));
        }
        if id == self.t.default_subvol()? {
            return Err(Error::Permission(format!(
                "subvolume {id} is the default subvolume"
            )));
        }
        // Its names go from these directories, which cannot be logged
        // until the commit.
        let parents = self.t.subvol_parents(id)?;
        for &p in &parents {
            self.dir_for_change(p, true)?;
        }
        self.t.unlink_subvolume(id, now())?;
        for &p in &parents {
            self.renamed.insert(p);
        }
        self.renamed.insert(top(id));
        self.readonly.remove(&id);
        self.dead_subvols.insert(id);
        Ok(parents)
    }

    /// rmdir of the placeholder a snapshot holds where its source had a
    /// subvolume (the kernel's btrfs_unlink_subvol for
    /// BTRFS_EMPTY_SUBVOL_DIR_OBJECTID): its DIR_ITEM and DIR_INDEX go.
    pub(super) fn remove_placeholder(&mut self, dir: InodeId, name: &[u8]) -> Result<()> {
        let mut index = None;
        crate::items::dir_item::for_each_dir_index(&self.t, dir.subvol, dir.ino, 0, |i, e| {
            Ok(if e.name == name {
                index = Some(i);
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            })
        })?;
        let index = index.ok_or_else(|| {
            Error::corrupt(
                format!("tree {} directory {}", dir.subvol, dir.ino),
                format!("{:?} has a DIR_ITEM and no DIR_INDEX", show(name)),
            )
        })?;
        self.inode_mut(dir).remove_dir_entry(name, index, now())?;
        self.renamed.insert(dir);
        self.bump(dir);
        Ok(())
    }

    /// Whether a handle is open on an inode of subvolume `id`.
    fn open_in(&self, id: u64) -> bool {
        self.open_counts().keys().any(|i| i.subvol == id)
    }

    /// Drops the trees of deleted subvolumes that have nothing open
    /// (after a commit: a subvolume made in the transaction that deleted
    /// it has no extent items before). One whose files are still open
    /// waits for a commit after their last close; at unmount it is left,
    /// unlinked, for the next mount (or the kernel's cleaner) to drop.
    pub(super) fn drop_dead_subvols(&mut self) -> Result<()> {
        let ready: Vec<u64> = self
            .dead_subvols
            .iter()
            .copied()
            .filter(|&id| !self.open_in(id))
            .collect();
        for id in ready {
            self.dead_subvols.remove(&id);
            self.drop_dead_subvol(id)?;
        }
        Ok(())
    }

    /// Drops deleted subvolume `id`'s tree and what the mount holds of
    /// it (dirty data, orphans).
    fn drop_dead_subvol(&mut self, id: u64) -> Result<()> {
        let dirty: Vec<InodeId> = self
            .dirty
            .keys()
            .chain(self.disk_i_size.keys())
            .filter(|i| i.subvol == id)
            .copied()
            .collect();
        for i in dirty {
            self.forget_dirty(i);
        }
        self.orphans.retain(|i| i.subvol != id);
        self.t.drop_subvolume(id)
    }

    /// Drops the subvolumes an earlier mount deleted and did not drop
    /// (the kernel's cleaner, at mount). Returns whether any was.
    pub(super) fn cleanup_dead_subvols(&mut self) -> Result<bool> {
        let dead = self.t.unlinked_subvolumes()?;
        for &id in &dead {
            self.t.drop_subvolume(id)?;
        }
        Ok(!dead.is_empty())
    }

    /// BTRFS_IOC_SUBVOL_GETFLAGS: BTRFS_SUBVOL_RDONLY when subvolume
    /// `id` is read-only.
    pub fn subvol_flags(&self, id: u64) -> Result<u64> {
        let ro = self.t.root_view(id)?.item.flags & ROOT_SUBVOL_RDONLY != 0;
        Ok(if ro { SUBVOL_RDONLY } else { 0 })
    }

    /// BTRFS_IOC_SUBVOL_SETFLAGS: read-only or writable (the only flag).
    /// Dirty data goes in before a subvolume turns read-only; the change
    /// is committed, as the kernel's btrfs_ioctl_subvol_setflags does.
    pub fn set_subvol_flags(&mut self, id: u64, flags: u64) -> Result<()> {
        if flags & !SUBVOL_RDONLY != 0 {
            return Err(Error::Unsupported(format!("subvolume flags {flags:#x}")));
        }
        self.check_mounted()?;
        let ro = flags & SUBVOL_RDONLY != 0;
        if (self.t.root(id)?.item.flags & ROOT_SUBVOL_RDONLY != 0) == ro {
            return Ok(());
        }
        if ro {
            self.commit()?;
        }
        let r = self.t.root_item_mut(id)?;
        if ro {
            r.flags |= ROOT_SUBVOL_RDONLY;
        } else {
            r.flags &= !ROOT_SUBVOL_RDONLY;
        }
        self.readonly.insert(id, ro);
        self.t.mutations += 1;
        self.commit()
    }

    /// BTRFS_IOC_DEFAULT_SUBVOL: subvolume `id` (0: the top level) is
    /// mounted by default from now on.
    pub fn set_default_subvol(&mut self, id: u64) -> Result<()> {
        self.check_mounted()?;
        let id = if id == 0 { FS_TREE_OBJECTID } else { id };
        if id != FS_TREE_OBJECTID
            && (!(FIRST_FREE_OBJECTID..=LAST_FREE_OBJECTID).contains(&id)
                || !self.t.has_tree(id)?
                || self.t.root(id)?.item.refs == 0)
        {
            return Err(Error::NotFound(format!("subvolume {id}")));
        }
        self.t.set_default_subvol(id)
    }

    /// The path of inode `ino` of tree `tree` from the tree's top
    /// (BTRFS_IOC_INO_LOOKUP), by its first name at each level
    /// ([`crate::items::inode_item::path`]); empty for the top directory.
    /// An inode that is not there is NotFound (ENOENT), as the kernel's.
    pub fn path_in_tree(&self, tree: u64, ino: u64) -> Result<Vec<u8>> {
        if self.t.inode(tree, ino)?.is_none() {
            return Err(Error::NotFound(format!("tree {tree} inode {ino}")));
        }
        crate::items::inode_item::path(&self.t, tree, ino)
    }

    /// The superblock as the running transaction holds it.
    pub fn superblock(&self) -> &ubtrfs_format::Superblock {
        &self.t.info.sb
    }

    /// BTRFS_IOC_TREE_SEARCH over the running transaction's trees: the
    /// items of tree `key.tree_id` in its key range (whole keys compared)
    /// whose leaf generation is in its transid range, at most
    /// `key.nr_items` of them and as many as fit in `room` bytes, encoded
    /// as the ioctl answers. Returns the result area and the count.
    pub fn tree_search(
        &self,
        key: &ubtrfs_format::ioctl::SearchKey,
        room: usize,
    ) -> Result<(Vec<u8>, u32)> {
        let (lo, hi) = key.range();
        let mut out = Vec::new();
        let mut n = 0u32;
        let mut too_big = false;
        if lo > hi || key.nr_items == 0 {
            return Ok((out, 0));
        }
        // The root tree's ROOT_ITEMs of trees changed in this transaction
        // are written at its commit: the newer copies held in memory are
        // answered in their place.
        let mut pending: std::collections::BTreeMap<Key, Vec<u8>> =
            if key.tree_id == ROOT_TREE_OBJECTID {
                self.t
                    .pending_root_items()
                    .into_iter()
                    .filter(|(k, _)| *k >= lo && *k <= hi)
                    .collect()
            } else {
                Default::default()
            };
        let transid = self.t.transid;
        let mut emit = |generation: u64, k: &Key, d: &[u8]| -> bool {
            if n >= key.nr_items {
                return false;
            }
            if generation < key.min_transid || generation > key.max_transid {
                return true;
            }
            if !ubtrfs_format::ioctl::push_search_result(&mut out, room, generation, k, d) {
                too_big = n == 0;
                return false;
            }
            n += 1;
            true
        };
        let mut stopped = false;
        self.t.scan_leaves(key.tree_id, &lo, |generation, k, d| {
            if *k > hi {
                return false;
            }
            // Pending items that sort before this one go first.
            while let Some((pk, _)) = pending.first_key_value() {
                if pk > k {
                    break;
                }
                let (pk, pd) = pending.pop_first().expect("a first entry");
                if !emit(transid, &pk, &pd) {
                    stopped = true;
                    return false;
                }
                if pk == *k {
                    return true;
                }
            }
            if !emit(generation, k, d) {
                stopped = true;
                return false;
            }
            true
        })?;
        if !stopped {
            for (pk, pd) in pending {
                if !emit(transid, &pk, &pd) {
                    break;
                }
            }
        }
        if too_big {
            // As the kernel: an item larger than the whole result area.
            return Err(Error::TooLarge(format!(
                "tree {} item {lo}: larger than the search's {room} bytes",
                key.tree_id
            )));
        }
        Ok((out, n))
    }

    /// BTRFS_IOC_GET_SUBVOL_INFO: subvolume `id`'s root item as this
    /// transaction has it, and its back reference (parent, directory,
    /// name; none for the top level), with no path. A subvolume without
    /// one is NotFound, as the kernel's ENOENT.
    pub fn subvol_info(&self, id: u64) -> Result<crate::fs::Subvolume> {
        let mut s = crate::fs::Subvolume {
            id,
            parent_id: 0,
            dirid: 0,
            name: Vec::new(),
            path: Vec::new(),
            root: self.t.root_view(id)?.item.clone(),
        };
        if id == FS_TREE_OBJECTID {
            return Ok(s);
        }
        let mut found = false;
        self.t.visit(
            ROOT_TREE_OBJECTID,
            &Key::new(id, ROOT_BACKREF, 0),
            &Key::new(id, ROOT_BACKREF, u64::MAX),
            &mut |k, d| {
                let r = RootRef::parse(d)
                    .map_err(|e| Error::format(format!("root tree key {k}"), e))?;
                (s.parent_id, s.dirid, s.name) = (k.offset, r.dirid, r.name.to_vec());
                found = true;
                Ok(ControlFlow::Break(()))
            },
        )?;
        if !found {
            return Err(Error::NotFound(format!("subvolume {id}'s back reference")));
        }
        Ok(s)
    }

    /// BTRFS_IOC_GET_SUBVOL_ROOTREF: the subvolumes directly inside
    /// subvolume `id` from id `min` on, (id, directory), at most `max`.
    pub fn root_refs(&self, id: u64, min: u64, max: usize) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        self.t.visit(
            ROOT_TREE_OBJECTID,
            &Key::new(id, ROOT_REF, min),
            &Key::new(id, ROOT_REF, u64::MAX),
            &mut |k, d| {
                if out.len() == max {
                    return Ok(ControlFlow::Break(()));
                }
                let r = RootRef::parse(d)
                    .map_err(|e| Error::format(format!("root tree key {k}"), e))?;
                out.push((k.offset, r.dirid));
                Ok(ControlFlow::Continue(()))
            },
        )?;
        Ok(out)
    }

    /// BTRFS_IOC_INO_LOOKUP_USER in subvolume `tree`, asked on its
    /// directory `from`: the path from `from` to directory `dirid` (each
    /// name and '/'; empty when they are one), the directories on the way
    /// (from `dirid` up, each of which the caller must be able to read
    /// and search), and the name subvolume `child` has in `dirid`. A path
    /// that reaches the top without passing `from` is Permission (the
    /// kernel's EACCES); a `child` whose entry is in another directory,
    /// Invalid.
    pub fn lookup_user(
        &self,
        tree: u64,
        from: u64,
        dirid: u64,
        child: u64,
    ) -> Result<(Vec<u8>, Vec<InodeId>, Vec<u8>)> {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let mut dirs = Vec::new();
        let mut cur = dirid;
        // A directory has one parent; a loop in a corrupt image is cut off.
        for _ in 0..4096 {
            if cur == from {
                break;
            }
            if cur == FIRST_INODE {
                return Err(Error::Permission(format!(
                    "directory {dirid} is not under directory {from}"
                )));
            }
            let (parent, name) = crate::items::inode_item::first_ref(&self.t, tree, cur)?
                .ok_or_else(|| Error::NotFound(format!("tree {tree} inode {cur}")))?;
            dirs.push(InodeId {
                subvol: tree,
                ino: cur,
            });
            parts.push(name);
            cur = parent;
        }
        if cur != from {
            return Err(Error::corrupt(
                format!("tree {tree} inode {dirid}"),
                "parent chain does not reach the root directory",
            ));
        }
        let mut path = Vec::new();
        for p in parts.iter().rev() {
            path.extend_from_slice(p);
            path.push(b'/');
        }
        let mut name = None;
        self.t.visit(
            ROOT_TREE_OBJECTID,
            &Key::new(tree, ROOT_REF, child),
            &Key::new(tree, ROOT_REF, child),
            &mut |k, d| {
                let r = RootRef::parse(d)
                    .map_err(|e| Error::format(format!("root tree key {k}"), e))?;
                name = Some((r.dirid, r.name.to_vec()));
                Ok(ControlFlow::Break(()))
            },
        )?;
        let (in_dir, name) =
            name.ok_or_else(|| Error::NotFound(format!("subvolume {child} in tree {tree}")))?;
        if in_dir != dirid {
            return Err(Error::Invalid(format!(
                "subvolume {child} is in directory {in_dir}, not {dirid}"
            )));
        }
        Ok((path, dirs, name))
    }

    /// The kernel's global block reserve for this filesystem now
    /// ([`crate::fs::usage::global_reserve`]): SPACE_INFO's last slot.
    pub fn global_reserve(&self) -> Result<u64> {
        crate::fs::usage::global_reserve(&self.t)
    }

    /// BTRFS_IOC_DEV_INFO: the device `devid` (or, when `uuid` is not all
    /// zero, the one with that UUID): its item as this transaction has it,
    /// and the path it was opened by (None: missing).
    pub fn dev_info(
        &self,
        devid: u64,
        uuid: &[u8; 16],
    ) -> Option<(ubtrfs_format::items::DevItem, Option<std::path::PathBuf>)> {
        let item = self.t.dev_items().values().find(|d| {
            if *uuid == [0; 16] {
                d.devid == devid
            } else {
                d.uuid == *uuid
            }
        })?;
        let path = self.t.info.devices.get(&item.devid).map(|d| d.path.clone());
        Some((*item, path))
    }

    /// BTRFS_IOC_SPACE_INFO: the allocator's block groups now (what the
    /// next commit writes in their items).
    pub fn space_info(&self) -> Vec<crate::fs::space::SpaceInfo> {
        crate::fs::space::sum_space(
            self.t
                .alloc
                .groups
                .values()
                .map(|g| (g.flags, g.len, g.used)),
        )
    }
}
