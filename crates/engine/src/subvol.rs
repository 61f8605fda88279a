//! Subvolumes on an unmounted image (the kernel's ioctl.c create_subvol,
//! transaction.c create_pending_snapshot, extent-tree.c
//! btrfs_drop_snapshot), through the transaction engine:
//!
//! * create: a new tree with its top directory, linked in a directory of
//!   another subvolume (DIR_ITEM/DIR_INDEX there, ROOT_REF/ROOT_BACKREF in
//!   the root tree, UUID tree entry);
//! * snapshot: the source's root block copied, every block and data
//!   extent it points to given a reference from the new tree, the
//!   source's last_snapshot advanced so that later changes to either copy
//!   it first;
//! * delete: the links removed and the tree dropped: blocks only it uses
//!   freed (with the data extents their leaves reference), blocks shared
//!   with another tree left with one reference less.

use crate::error::{Error, Result};
use crate::inode::NAME_MAX;
use crate::tree::block::BlockExpect;
use crate::tx::delayed_ref::Backref;
use crate::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{
    dir_index_key, dir_item_key, encode_uuid_item, parse_dir_entries, parse_uuid_item, uuid_key,
    ExtentRecord, RootItem, RootRef, Timespec, BLOCK_FLAG_FULL_BACKREF,
};
use ubtrfs_format::Key;

/// The root tree's ORPHAN_ITEM of subvolume `id`: deleted, its tree not
/// yet dropped.
fn orphan_root_key(id: u64) -> Key {
    Key::new(ORPHAN_OBJECTID, ORPHAN_ITEM, id)
}

/// Where a new subvolume or snapshot is linked: directory `dir` of
/// subvolume `tree`, under `name`.
#[derive(Debug, Clone)]
pub struct Place<'a> {
    pub tree: u64,
    pub dir: u64,
    pub name: &'a [u8],
}

impl Trans {
    /// Resolves an absolute path inside the image (from the top level,
    /// crossing into subvolumes) to (tree, inode).
    pub fn resolve_path(&mut self, path: &[u8]) -> Result<(u64, u64)> {
        let (mut tree, mut ino) = (FS_TREE_OBJECTID, FIRST_INODE);
        for comp in path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
        {
            let key = dir_item_key(ino, comp);
            let here = || format!("{}", String::from_utf8_lossy(path));
            let d = self
                .lookup(tree, &key)?
                .ok_or_else(|| Error::NotFound(format!("{}: no such file or directory", here())))?;
            let entries = parse_dir_entries(&d)
                .map_err(|e| Error::format(format!("tree {tree} key {key}"), e))?;
            let e = entries
                .iter()
                .find(|e| e.name == comp)
                .ok_or_else(|| Error::NotFound(format!("{}: no such file or directory", here())))?;
            if e.location.item_type == ROOT_ITEM {
                tree = e.location.objectid;
                ino = self.root(tree)?.item.root_dirid;
            } else {
                ino = e.location.objectid;
            }
        }
        Ok((tree, ino))
    }

    /// The next free subvolume id: above every tree in the root tree,
    /// and above every id this writer handed out before (a subvolume
    /// deleted and dropped leaves no item, and a mount must not give its
    /// id, and so its inode numbers, to another).
    fn new_subvol_id(&mut self) -> Result<u64> {
        let last = self.search_last_le(
            ROOT_TREE_OBJECTID,
            &Key::new(LAST_FREE_OBJECTID, u8::MAX, u64::MAX),
        )?;
        let next = last.map_or(FIRST_FREE_OBJECTID, |(k, _)| {
            k.objectid.max(FIRST_FREE_OBJECTID - 1) + 1
        });
        let id = next.max(self.next_subvol_id);
        if id > LAST_FREE_OBJECTID {
            return Err(Error::NoSpace("no subvolume id left".into()));
        }
        self.next_subvol_id = id + 1;
        Ok(id)
    }

    /// The next DIR_INDEX of directory `dir` in `tree`.
    pub fn next_dir_index(&mut self, tree: u64, dir: u64) -> Result<u64> {
        let next = self.after_last_dir_index(tree, dir)?;
        let floor = self.dir_index_next.entry((tree, dir)).or_insert(next);
        let index = next.max(*floor);
        *floor = index + 1;
        Ok(index)
    }

    /// One past the highest DIR_INDEX `dir` has now (2 when none).
    pub(crate) fn after_last_dir_index(&self, tree: u64, dir: u64) -> Result<u64> {
        let last = self.last_key_le(tree, &dir_index_key(dir, u64::MAX))?;
        Ok(match last {
            Some(k) if k.objectid == dir && k.item_type == DIR_INDEX => k.offset + 1,
            _ => 2,
        })
    }

    /// Before a name of `dir` goes: the indexes it has now are never
    /// handed out again by this writer (see `dir_index_next`).
    pub(crate) fn keep_dir_indexes(&mut self, tree: u64, dir: u64) -> Result<()> {
        if !self.dir_index_next.contains_key(&(tree, dir)) {
            let next = self.after_last_dir_index(tree, dir)?;
            self.dir_index_next.insert((tree, dir), next);
        }
        Ok(())
    }

    pub(crate) fn add_uuid_entry(&mut self, uuid: &[u8; 16], kind: u8, id: u64) -> Result<()> {
        if uuid == &[0; 16] || !self.has_tree(UUID_TREE_OBJECTID)? {
            return Ok(());
        }
        let key = uuid_key(uuid, kind);
        let mut ids = match self.lookup(UUID_TREE_OBJECTID, &key)? {
            Some(d) => {
                parse_uuid_item(&d).map_err(|e| Error::format(format!("uuid tree key {key}"), e))?
            }
            None => Vec::new(),
        };
        if !ids.contains(&id) {
            ids.push(id);
        }
        let mut v = Vec::new();
        encode_uuid_item(&ids, &mut v);
        self.put_item(UUID_TREE_OBJECTID, key, v)
    }

    pub(crate) fn remove_uuid_entry(&mut self, uuid: &[u8; 16], kind: u8, id: u64) -> Result<()> {
        if uuid == &[0; 16] || !self.has_tree(UUID_TREE_OBJECTID)? {
            return Ok(());
        }
        let key = uuid_key(uuid, kind);
        let Some(d) = self.lookup(UUID_TREE_OBJECTID, &key)? else {
            return Ok(());
        };
        let mut ids =
            parse_uuid_item(&d).map_err(|e| Error::format(format!("uuid tree key {key}"), e))?;
        ids.retain(|&i| i != id);
        if ids.is_empty() {
            self.delete_item(UUID_TREE_OBJECTID, &key)?;
        } else {
            let mut v = Vec::new();
            encode_uuid_item(&ids, &mut v);
            self.put_item(UUID_TREE_OBJECTID, key, v)?;
        }
        Ok(())
    }

    /// The subvolume (still present) that the UUID tree lists under
    /// `uuid` with key type `kind` (UUID_KEY_SUBVOL or
    /// UUID_KEY_RECEIVED_SUBVOL).
    pub fn uuid_lookup(&mut self, uuid: &[u8; 16], kind: u8) -> Result<Option<u64>> {
        if !self.has_tree(UUID_TREE_OBJECTID)? {
            return Ok(None);
        }
        let key = uuid_key(uuid, kind);
        let Some(d) = self.lookup(UUID_TREE_OBJECTID, &key)? else {
            return Ok(None);
        };
        let ids =
            parse_uuid_item(&d).map_err(|e| Error::format(format!("uuid tree key {key}"), e))?;
        for id in ids {
            if self.has_tree(id)? {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// The subvolume mounted by default: the root tree directory's
    /// "default" entry (the top level when it has none).
    pub fn default_subvol(&self) -> Result<u64> {
        crate::items::dir_item::default_subvol(self)
    }

    /// Makes subvolume `id` the one mounted by default
    /// (BTRFS_IOC_DEFAULT_SUBVOL, `subvolume set-default`).
    pub fn set_default_subvol(&mut self, id: u64) -> Result<()> {
        let key = dir_item_key(ROOT_TREE_DIR_OBJECTID, b"default");
        let entry = ubtrfs_format::items::DirEntry {
            location: Key::new(id, ROOT_ITEM, u64::MAX),
            transid: self.transid,
            file_type: FT_DIR,
            name: b"default",
            data: &[],
        };
        self.put_item(ROOT_TREE_OBJECTID, key, entry.to_bytes())?;
        self.info.sb.incompat_flags |= INCOMPAT_DEFAULT_SUBVOL;
        Ok(())
    }

    /// Refuses a place inside a read-only subvolume (before anything is
    /// changed).
    fn check_writable(&mut self, place: &Place<'_>) -> Result<()> {
        if self.root(place.tree)?.item.flags & ROOT_SUBVOL_RDONLY != 0 {
            return Err(Error::ReadOnly(format!(
                "subvolume {} (where {:?} would go)",
                place.tree,
                String::from_utf8_lossy(place.name)
            )));
        }
        Ok(())
    }

    /// Links subvolume `id` at `place`: dir entries, root ref and backref,
    /// the directory's times.
    fn link_subvol(&mut self, id: u64, place: &Place<'_>, time: Timespec) -> Result<()> {
        if place.name.is_empty() || place.name.len() > NAME_MAX || place.name.contains(&b'/') {
            return Err(Error::Invalid(format!(
                "subvolume name {:?}: 1 to {NAME_MAX} bytes, no '/'",
                String::from_utf8_lossy(place.name)
            )));
        }
        let index = self.next_dir_index(place.tree, place.dir)?;
        self.inode_mut(place.tree, place.dir).add_dir_entry(
            place.name,
            Key::new(id, ROOT_ITEM, u64::MAX),
            FT_DIR,
            index,
            None,
        )?;
        let r = RootRef {
            dirid: place.dir,
            sequence: index,
            name: place.name,
        }
        .to_bytes();
        self.insert_item(
            ROOT_TREE_OBJECTID,
            Key::new(place.tree, ROOT_REF, id),
            r.clone(),
        )?;
        self.insert_item(
            ROOT_TREE_OBJECTID,
            Key::new(id, ROOT_BACKREF, place.tree),
            r,
        )?;
        let mut d = self.inode(place.tree, place.dir)?.ok_or_else(|| {
            Error::NotFound(format!("tree {}: directory {}", place.tree, place.dir))
        })?;
        d.mtime = time;
        d.ctime = time;
        self.inode_mut(place.tree, place.dir).put(&d)
    }

    /// Makes an empty subvolume at `place`; returns its id.
    pub fn create_subvolume(
        &mut self,
        place: &Place<'_>,
        uuid: [u8; 16],
        readonly: bool,
        time: Timespec,
    ) -> Result<u64> {
        self.check_writable(place)?;
        let id = self.new_subvol_id()?;
        let transid = self.transid;
        let item = RootItem {
            flags: if readonly { ROOT_SUBVOL_RDONLY } else { 0 },
            uuid,
            ctransid: transid,
            otransid: transid,
            ctime: time,
            otime: time,
            ..crate::inode::root::new_root_item(self.nodesize(), transid, FIRST_INODE)
        };
        self.create_tree(id, item)?;
        let top = crate::inode::root::dir_inode(transid, time, 0o40755);
        crate::inode::root::top_dir_items(self, id, FIRST_INODE, &top)?;
        self.link_subvol(id, place, time)?;
        self.add_uuid_entry(&uuid, UUID_KEY_SUBVOL, id)?;
        Ok(id)
    }

    /// Snapshots subvolume `src` at `place`; returns the new id. The
    /// source's pending changes are committed first, as the kernel
    /// snapshots a tree as of a commit.
    pub fn snapshot(
        &mut self,
        src: u64,
        place: &Place<'_>,
        uuid: [u8; 16],
        readonly: bool,
        time: Timespec,
    ) -> Result<u64> {
        self.check_writable(place)?;
        let src_item = self.root(src)?.item.clone();
        if self.root(src)?.dirty {
            self.commit()?;
        }
        let id = self.new_subvol_id()?;
        let transid = self.transid;
        let src_root = self.root(src)?.clone();
        let block = self.load_block(
            src_root.bytenr,
            BlockExpect {
                level: Some(src_root.level),
                generation: Some(src_root.item.generation),
                first_key: None,
            },
        )?;
        if block.flags & BLOCK_FLAG_FULL_BACKREF != 0 {
            return Err(Error::Unsupported(format!(
                "snapshot of tree {src}: its root block has shared (full) back references"
            )));
        }
        // The new tree's root: a copy of the source's root block.
        let mut item = src_item.clone();
        item.flags = if readonly {
            item.flags | ROOT_SUBVOL_RDONLY
        } else {
            item.flags & !ROOT_SUBVOL_RDONLY
        };
        item.uuid = uuid;
        item.parent_uuid = src_item.uuid;
        if !readonly {
            item.received_uuid = [0; 16];
            item.stime = Timespec::default();
            item.rtime = Timespec::default();
            item.stransid = 0;
            item.rtransid = 0;
        }
        item.otime = time;
        item.otransid = transid;
        item.inode.flags |= INODE_ROOT_ITEM_INIT;
        item.refs = 1;
        item.last_snapshot = transid;
        item.drop_progress = Key::new(0, 0, 0);
        item.drop_level = 0;
        self.create_tree_from(id, item, transid, block.level, block.content.clone())?;
        // The copy gives the new tree a reference to everything it
        // points to: child blocks, or a leaf's data extents.
        self.mod_refs_of(&block, id, false, 1)?;
        self.root_item_mut(src)?.last_snapshot = transid;
        self.link_subvol(id, place, time)?;
        self.add_uuid_entry(&uuid, UUID_KEY_SUBVOL, id)?;
        if readonly {
            let r = self.root(id)?.item.received_uuid;
            self.add_uuid_entry(&r, UUID_KEY_RECEIVED_SUBVOL, id)?;
        }
        Ok(id)
    }

    /// The directories that link subvolume `id` (its ROOT_BACKREFs).
    pub fn subvol_parents(&mut self, id: u64) -> Result<Vec<crate::fs::InodeId>> {
        let lo = Key::new(id, ROOT_BACKREF, 0);
        let hi = Key::new(id, ROOT_BACKREF, u64::MAX);
        let mut out = Vec::new();
        for (k, d) in self.items_in(ROOT_TREE_OBJECTID, &lo, &hi)? {
            let r =
                RootRef::parse(&d).map_err(|e| Error::format(format!("root tree key {k}"), e))?;
            out.push(crate::fs::InodeId {
                subvol: k.offset,
                ino: r.dirid,
            });
        }
        Ok(out)
    }

    /// Refuses to delete subvolume `id` before anything changes: the top
    /// level and trees that are not subvolumes (EINVAL), a subvolume with
    /// subvolumes linked inside it (ENOTEMPTY, as the kernel's
    /// may_destroy_subvol).
    pub fn check_deletable(&mut self, id: u64) -> Result<()> {
        if id == FS_TREE_OBJECTID || !(FIRST_FREE_OBJECTID..=LAST_FREE_OBJECTID).contains(&id) {
            return Err(Error::Invalid(format!(
                "tree {id} is not a deletable subvolume"
            )));
        }
        self.root(id)?;
        let lo = Key::new(id, ROOT_REF, 0);
        let hi = Key::new(id, ROOT_REF, u64::MAX);
        if !self.items_in(ROOT_TREE_OBJECTID, &lo, &hi)?.is_empty() {
            return Err(Error::NotEmpty(format!(
                "subvolume {id} has subvolumes inside it; delete them first"
            )));
        }
        Ok(())
    }

    /// Deletes subvolume `id` (not the top level): unlinks it and drops
    /// its tree.
    pub fn delete_subvolume(&mut self, id: u64, time: Timespec) -> Result<()> {
        self.unlink_subvolume(id, time)?;
        self.drop_subvolume(id)
    }

    /// The first half of a delete (the kernel's btrfs_delete_subvolume):
    /// the subvolume's names and UUID entries go, its ROOT_ITEM keeps 0
    /// references and an ORPHAN_ITEM in the root tree says it is to be
    /// dropped. The tree itself stays readable (files open in it on a
    /// mount) until [`Trans::drop_subvolume`]; a crash in between leaves
    /// what the kernel's cleaner finishes at its next mount.
    pub fn unlink_subvolume(&mut self, id: u64, time: Timespec) -> Result<()> {
        self.check_deletable(id)?;
        let item = self.root(id)?.item.clone();
        // Its links: the ROOT_BACKREF names the parent tree and directory.
        let lo = Key::new(id, ROOT_BACKREF, 0);
        let hi = Key::new(id, ROOT_BACKREF, u64::MAX);
        for (k, d) in self.items_in(ROOT_TREE_OBJECTID, &lo, &hi)? {
            let r =
                RootRef::parse(&d).map_err(|e| Error::format(format!("root tree key {k}"), e))?;
            let (parent, dir, name, seq) = (k.offset, r.dirid, r.name.to_vec(), r.sequence);
            self.inode_mut(parent, dir)
                .remove_dir_entry(&name, seq, time)?;
            self.delete_item(ROOT_TREE_OBJECTID, &k)?;
            self.delete_item(ROOT_TREE_OBJECTID, &Key::new(parent, ROOT_REF, id))?;
        }
        self.remove_uuid_entry(&item.uuid, UUID_KEY_SUBVOL, id)?;
        self.remove_uuid_entry(&item.received_uuid, UUID_KEY_RECEIVED_SUBVOL, id)?;
        self.root_item_mut(id)?.refs = 0;
        self.put_item(ROOT_TREE_OBJECTID, orphan_root_key(id), Vec::new())
    }

    /// The second half of a delete (the kernel's cleaner): drops the tree
    /// of subvolume `id`, unlinked by [`Trans::unlink_subvolume`], and
    /// its ORPHAN_ITEM.
    pub fn drop_subvolume(&mut self, id: u64) -> Result<()> {
        if self.root(id)?.item.refs != 0 {
            return Err(Error::Invalid(format!(
                "subvolume {id} is still linked; unlink it first"
            )));
        }
        self.drop_tree(id)?;
        if self
            .lookup(ROOT_TREE_OBJECTID, &orphan_root_key(id))?
            .is_some()
        {
            self.delete_item(ROOT_TREE_OBJECTID, &orphan_root_key(id))?;
        }
        Ok(())
    }

    /// Subvolumes unlinked and not yet dropped (an ORPHAN_ITEM in the
    /// root tree names each, and its ROOT_ITEM has 0 references): what a
    /// delete left for the cleaner, or a crash left half done.
    pub fn unlinked_subvolumes(&mut self) -> Result<Vec<u64>> {
        let lo = orphan_root_key(FIRST_FREE_OBJECTID);
        let hi = orphan_root_key(LAST_FREE_OBJECTID);
        let mut out = Vec::new();
        for (k, _) in self.items_in(ROOT_TREE_OBJECTID, &lo, &hi)? {
            if self.has_tree(k.offset)? && self.root(k.offset)?.item.refs == 0 {
                out.push(k.offset);
            }
        }
        Ok(out)
    }

    /// Drops tree `id` (btrfs_drop_snapshot, in one transaction): walks
    /// it from the root; a block only this tree references is freed after
    /// its children (a leaf's data extents lose this tree's references);
    /// a block also referenced elsewhere only loses this tree's reference.
    fn drop_tree(&mut self, id: u64) -> Result<()> {
        let r = self.root(id)?.clone();
        let expect = BlockExpect {
            level: Some(r.level),
            generation: Some(r.item.generation),
            first_key: None,
        };
        self.drop_block(id, r.bytenr, expect, Backref::Tree { root: id })?;
        self.forget_tree(id)
    }

    /// Drops this tree's reference `mine` to block `bytenr`, and, when it
    /// was the only one, the block's own references first. A block whose
    /// extent item has FULL_BACKREF references its children by its own
    /// address; otherwise by the tree.
    fn drop_block(
        &mut self,
        tree: u64,
        bytenr: u64,
        expect: BlockExpect,
        mine: Backref,
    ) -> Result<()> {
        let b = self.load_block(bytenr, expect)?;
        let level = b.level;
        let key = self.tree_block_key(bytenr, level);
        let data = self.lookup(EXTENT_TREE_OBJECTID, &key)?.ok_or_else(|| {
            Error::corrupt(
                format!("extent tree key {key}"),
                format!("tree {tree} block has no extent item"),
            )
        })?;
        let rec = ExtentRecord::parse(&key, &data)
            .map_err(|e| Error::format(format!("extent tree key {key}"), e))?;
        if rec.item.refs > 1 {
            self.add_tree_ref(bytenr, level, mine, -1);
            return Ok(());
        }
        let full = rec.item.flags & BLOCK_FLAG_FULL_BACKREF != 0;
        if b.is_leaf() {
            self.mod_refs_of(&b, tree, full, -1)?;
        } else {
            let child_ref = if full {
                Backref::SharedBlock { parent: bytenr }
            } else {
                Backref::Tree { root: tree }
            };
            for p in b.ptrs().clone() {
                let e = BlockExpect {
                    level: Some(level - 1),
                    generation: Some(p.generation),
                    first_key: Some(p.key),
                };
                self.drop_block(tree, p.blockptr, e, child_ref)?;
            }
        }
        self.add_tree_ref(bytenr, level, mine, -1);
        Ok(())
    }
}
