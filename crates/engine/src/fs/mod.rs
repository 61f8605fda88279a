//! The filesystem view: opening the devices, bootstrapping the chunk map,
//! the root tree, subvolumes, inodes, directories, xattrs and symlinks.

pub mod file;
pub mod seek;
pub mod space;
pub mod usage;
pub mod view;

use crate::ctree::{for_each_item, lookup, Cursor, Tree};
use crate::disk_io::FsInfo;
use crate::error::{Error, FormatContext, Result};
use crate::io::device::Device;
use crate::items::{dir_item, inode_item, ItemSource, Visitor};
use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use ubtrfs_format::bytes::format_uuid;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{ChunkItem, DevItem, DirEntry, InodeItem, RootItem, RootRef, Timespec};
use ubtrfs_format::key::Key;

/// Default block cache budget.
pub const DEFAULT_CACHE_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Further devices of a multi-device filesystem.
    pub devices: Vec<PathBuf>,
    /// Memory budget of the tree block cache.
    pub cache_bytes: u64,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            devices: Vec::new(),
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

pub use crate::items::{check_entry_name, InodeId};

/// What `stat` shows for an inode, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub id: InodeId,
    pub ino: u64,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    /// Device number in the userspace (glibc) encoding, as st_rdev.
    pub rdev: u64,
    pub size: u64,
    /// Bytes allocated (the inode's nbytes).
    pub nbytes: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub otime: Timespec,
    pub flags: u64,
    pub generation: u64,
    pub transid: u64,
}

impl Stat {
    /// What stat(2) shows of inode `id` with item `i` (the committed
    /// view's and the mount's, which adds its dirty bytes to `nbytes`).
    pub fn of_inode(id: InodeId, i: &InodeItem) -> Stat {
        Stat {
            id,
            ino: id.ino,
            mode: i.mode,
            nlink: i.nlink,
            uid: i.uid,
            gid: i.gid,
            rdev: kernel_rdev_to_user(i.rdev),
            size: i.size,
            nbytes: i.nbytes,
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
            otime: i.otime,
            flags: i.flags,
            generation: i.generation,
            transid: i.transid,
        }
    }

    /// The empty directory the kernel shows where a snapshot holds an
    /// entry for a subvolume it does not contain, stamped `time`.
    pub fn placeholder(id: InodeId, time: Timespec) -> Stat {
        Stat {
            ino: EMPTY_SUBVOL_DIR_OBJECTID,
            mode: 0o040755,
            nlink: 1,
            atime: time,
            mtime: time,
            ctime: time,
            otime: time,
            ..Stat::of_inode(id, &InodeItem::default())
        }
    }

    pub fn file_type(&self) -> u32 {
        self.mode & 0o170000
    }
    pub fn is_dir(&self) -> bool {
        self.file_type() == 0o040000
    }
    pub fn is_reg(&self) -> bool {
        self.file_type() == 0o100000
    }
    pub fn is_symlink(&self) -> bool {
        self.file_type() == 0o120000
    }
}

/// btrfs keeps the kernel's internal dev_t (major << 20 | minor); stat(2)
/// gives userspace the glibc encoding.
pub fn kernel_rdev_to_user(raw: u64) -> u64 {
    let major = (raw >> 20) & 0xfff;
    let minor = raw & 0xfffff;
    ((major & 0xfff) << 8) | (minor & 0xff) | ((minor & !0xff) << 12)
}

#[derive(Debug, Clone)]
pub struct DirEntryInfo {
    pub name: Vec<u8>,
    pub index: u64,
    pub file_type: u8,
    /// What the entry leads to (a subvolume's root dir, or a placeholder,
    /// for subvolume entries).
    pub target: InodeId,
}

#[derive(Debug, Clone)]
pub struct Subvolume {
    pub id: u64,
    pub parent_id: u64,
    /// Directory inode in the parent that holds the link.
    pub dirid: u64,
    pub name: Vec<u8>,
    /// Path from the top-level subvolume, without leading '/'.
    pub path: Vec<u8>,
    pub root: RootItem,
}

impl Subvolume {
    pub fn uuid(&self) -> String {
        format_uuid(&self.root.uuid)
    }
}

pub struct Filesystem {
    pub info: FsInfo,
    pub root_tree: Tree,
    /// Devices the chunk tree lists that were not given.
    pub missing_devices: Vec<u64>,
    /// The chunk tree's DEV_ITEMs, by devid.
    pub dev_items: Vec<DevItem>,
    /// Trees already looked up in the root tree (read-only: never stale).
    trees: Mutex<HashMap<u64, Option<Tree>>>,
}

impl Filesystem {
    /// Opens the filesystem on `image` (and `opts.devices`) read-only.
    pub fn open(image: &Path, opts: &OpenOptions) -> Result<Filesystem> {
        let mut devs = vec![Device::open(image)?];
        for p in &opts.devices {
            devs.push(Device::open(p)?);
        }
        Self::from_devices(devs, opts.cache_bytes)
    }

    /// The filesystem on opened devices (the first one names it in
    /// messages): read-only or writable, as the devices were opened.
    pub fn from_devices(devs: Vec<Device>, cache_bytes: u64) -> Result<Filesystem> {
        let mut devs = devs.into_iter();
        let first = devs
            .next()
            .ok_or_else(|| Error::Invalid("no device given".into()))?;
        let image = first.path.clone();
        let sb = first.superblock.clone();
        let unknown = sb.unsupported_incompat();
        if unknown != 0 {
            return Err(Error::Unsupported(format!(
                "{}: incompat feature flags {} are not supported",
                image.display(),
                flag_names(unknown, INCOMPAT_NAMES).join(",")
            )));
        }
        let mut devices = BTreeMap::new();
        devices.insert(first.devid, first);
        for d in devs {
            let p = d.path.clone();
            if d.superblock.fsid != sb.fsid {
                return Err(Error::Invalid(format!(
                    "{}: belongs to filesystem {}, not {}",
                    p.display(),
                    format_uuid(&d.superblock.fsid),
                    format_uuid(&sb.fsid)
                )));
            }
            if devices.contains_key(&d.devid) {
                return Err(Error::Invalid(format!(
                    "{}: devid {} given twice",
                    p.display(),
                    d.devid
                )));
            }
            devices.insert(d.devid, d);
        }
        // Use the newest superblock among the devices.
        let sb = devices
            .values()
            .map(|d| &d.superblock)
            .max_by_key(|s| s.generation)
            .cloned()
            .unwrap_or(sb);
        let mut info = FsInfo::new(sb, devices, cache_bytes);
        let mut sys_starts = Vec::new();
        for (key, chunk) in info
            .sb
            .sys_chunks()
            .at(|| "superblock sys_chunk_array".into())?
        {
            info.chunks.insert(key.offset, chunk)?;
            sys_starts.push(key.offset);
        }
        let chunk_tree = Tree::chunk(&info.sb);
        let mut chunks = Vec::new();
        let mut dev_items = Vec::new();
        for_each_item(&info, chunk_tree, Key::MIN, Key::MAX, |k, d| {
            match k.item_type {
                CHUNK_ITEM => chunks.push((
                    k.offset,
                    ChunkItem::parse(d).at(|| format!("chunk tree key {k}"))?,
                )),
                DEV_ITEM => dev_items.push(DevItem::parse(d).at(|| format!("chunk tree key {k}"))?),
                _ => {}
            }
            Ok(ControlFlow::Continue(()))
        })?;
        for (logical, c) in chunks {
            // As the kernel's read_one_chunk: a chunk whose start is already
            // mapped (by the superblock's sys_chunk_array, read first) keeps
            // that mapping. `ubtrfs check` reports the disagreement.
            if let Some((s, _)) = info.chunks.lookup(logical) {
                if sys_starts.contains(&s) {
                    continue;
                }
            }
            info.chunks.insert(logical, c)?;
        }
        let missing_devices: Vec<u64> = dev_items
            .iter()
            .map(|d| d.devid)
            .filter(|id| !info.devices.contains_key(id))
            .collect();
        for id in &missing_devices {
            info.report(format!(
                "device devid {id} is missing; reading from other copies"
            ));
        }
        let root_tree = Tree::root(&info.sb);
        Ok(Filesystem {
            info,
            root_tree,
            missing_devices,
            dev_items,
            trees: Mutex::new(HashMap::new()),
        })
    }

    /// The ROOT_ITEM of tree `id`, if it exists.
    pub fn root_item(&self, id: u64) -> Result<Option<RootItem>> {
        let mut c = Cursor::new(&self.info, self.root_tree);
        if !c.seek_le(&Key::new(id, ROOT_ITEM, u64::MAX))? {
            return Ok(None);
        }
        match c.item() {
            Some((k, d)) if k.objectid == id && k.item_type == ROOT_ITEM => Ok(Some(
                RootItem::parse(d).at(|| format!("root tree key {k}"))?,
            )),
            _ => Ok(None),
        }
    }

    /// The first ROOT_BACKREF of subvolume `id`: (parent subvolume,
    /// directory in it, name). The name must be one path component.
    pub fn root_backref(&self, id: u64) -> Result<Option<(u64, u64, Vec<u8>)>> {
        dir_item::root_backref(self, id)
    }

    /// The tree with id `id` (a well-known tree or a subvolume).
    pub fn tree(&self, id: u64) -> Result<Tree> {
        self.tree_opt(id)?
            .ok_or_else(|| Error::NotFound(format!("tree {id} does not exist")))
    }

    /// The tree `id` if it exists (csum tree, extent tree, ...).
    pub fn tree_opt(&self, id: u64) -> Result<Option<Tree>> {
        if let Some(t) = self.trees.lock().unwrap().get(&id) {
            return Ok(*t);
        }
        let t = self.root_item(id)?.map(|r| Tree::of_root_item(id, &r));
        self.trees.lock().unwrap().insert(id, t);
        Ok(t)
    }
}

/// The committed trees, as item readers see them.
impl ItemSource for Filesystem {
    fn fs_info(&self) -> &FsInfo {
        &self.info
    }

    fn item(&self, tree: u64, key: &Key) -> Result<Option<Vec<u8>>> {
        lookup(&self.info, self.source_tree(tree)?, key)
    }

    fn item_le(&self, tree: u64, key: &Key) -> Result<Option<(Key, Vec<u8>)>> {
        let mut c = Cursor::new(&self.info, self.source_tree(tree)?);
        if !c.seek_le(key)? {
            return Ok(None);
        }
        Ok(c.item().map(|(k, d)| (k, d.to_vec())))
    }

    fn visit(&self, tree: u64, lo: &Key, hi: &Key, f: &mut Visitor<'_>) -> Result<()> {
        for_each_item(&self.info, self.source_tree(tree)?, *lo, *hi, |k, d| {
            f(&k, d)
        })
    }

    fn data_csums(&self, logical: u64, len: u64) -> Result<Vec<Option<Csum>>> {
        match self.tree_opt(CSUM_TREE_OBJECTID)? {
            Some(t) => crate::data::csum::lookup_csums(&self.info, t, logical, len),
            None => Ok(Vec::new()),
        }
    }

    fn has_tree(&self, tree: u64) -> Result<bool> {
        Ok(tree == ROOT_TREE_OBJECTID || self.tree_opt(tree)?.is_some())
    }
}

impl Filesystem {
    /// Tree `id` for an item reader: the root tree too, which has no
    /// ROOT_ITEM of its own.
    fn source_tree(&self, id: u64) -> Result<Tree> {
        if id == ROOT_TREE_OBJECTID {
            return Ok(self.root_tree);
        }
        self.tree(id)
    }

    /// The subvolume mounted by default: the root tree directory's
    /// "default" entry (the top level when it has none).
    pub fn default_subvol(&self) -> Result<u64> {
        crate::items::dir_item::default_subvol(self)
    }

    /// Every subvolume and snapshot, with paths from the top level.
    pub fn subvolumes(&self) -> Result<Vec<Subvolume>> {
        let mut items = Vec::new();
        for_each_item(
            &self.info,
            self.root_tree,
            Key::new(FS_TREE_OBJECTID, 0, 0),
            Key::new(LAST_FREE_OBJECTID, u8::MAX, u64::MAX),
            |k, d| {
                if matches!(k.item_type, ROOT_ITEM | ROOT_BACKREF) {
                    items.push((k, d.to_vec()));
                }
                Ok(ControlFlow::Continue(()))
            },
        )?;
        subvolumes_of(&items, |subvol, dir| self.dir_path(subvol, dir))
    }

    /// Path of directory `dir` inside subvolume `subvol` (relative, no
    /// leading '/'), following the first INODE_REF of each directory.
    pub fn dir_path(&self, subvol: u64, dir: u64) -> Result<Vec<u8>> {
        self.path_in(self.tree(subvol)?, dir)
    }

    /// The path of `ino` inside `tree` (relative, no leading '/'),
    /// following the first name of each inode up to the root directory, as
    /// the kernel's btrfs_ref_to_path. Every name is one path component.
    pub fn path_in(&self, tree: Tree, ino: u64) -> Result<Vec<u8>> {
        inode_item::path(self, tree.id, ino)
    }

    /// Calls `f` with each (parent dir, name) of inode `ino` in `tree`, from
    /// INODE_REF then INODE_EXTREF items, until it breaks.
    pub fn for_each_ref<F>(&self, tree: Tree, ino: u64, mut f: F) -> Result<()>
    where
        F: FnMut(u64, &[u8]) -> ControlFlow<()>,
    {
        inode_item::for_each_ref(self, tree.id, ino, |r| f(r.parent, r.name))
    }

    /// The first (parent, name) of inode `ino` in `tree`, from INODE_REF or
    /// INODE_EXTREF (the kernel's get_first_ref).
    pub fn first_ref(&self, tree: Tree, ino: u64) -> Result<Option<(u64, Vec<u8>)>> {
        inode_item::first_ref(self, tree.id, ino)
    }

    /// Every (parent dir, name) of inode `ino` in `tree`, in key order.
    pub fn refs_in(&self, tree: Tree, ino: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        Ok(inode_item::refs(self, tree.id, ino)?
            .into_iter()
            .map(|(parent, name, _)| (parent, name))
            .collect())
    }

    /// Every (parent dir, name) of an inode, for hardlink-aware tools.
    pub fn inode_refs(&self, id: InodeId) -> Result<Vec<(u64, Vec<u8>)>> {
        self.refs_in(self.tree(id.subvol)?, id.ino)
    }

    /// The top-level subvolume's root directory.
    pub fn top(&self) -> InodeId {
        InodeId {
            subvol: FS_TREE_OBJECTID,
            ino: FIRST_INODE,
        }
    }

    /// The inode item of `id`.
    pub fn inode_item(&self, id: InodeId) -> Result<InodeItem> {
        let tree = self.tree(id.subvol)?;
        self.inode_item_in(tree, id.ino)?.ok_or_else(|| {
            Error::NotFound(format!("inode {} not found in {}", id.ino, tree.describe()))
        })
    }

    /// The inode item of inode `ino` in `tree`, if it has one.
    pub fn inode_item_in(&self, tree: Tree, ino: u64) -> Result<Option<InodeItem>> {
        inode_item::inode_item(self, tree.id, ino)
    }

    pub fn stat(&self, id: InodeId) -> Result<Stat> {
        if id.is_placeholder() {
            return self.placeholder_stat(id);
        }
        Ok(Stat::of_inode(id, &self.inode_item(id)?))
    }

    /// The empty directory the kernel shows where a snapshot holds an entry
    /// for a subvolume it does not contain. The kernel stamps it with the
    /// current time; we use the containing subvolume's creation time so the
    /// answer is stable.
    fn placeholder_stat(&self, id: InodeId) -> Result<Stat> {
        let t = self
            .root_item(id.subvol)?
            .map(|r| r.otime)
            .unwrap_or_default();
        Ok(Stat::placeholder(id, t))
    }

    /// What the entry `name` of directory `dir` in `tree` points to (its
    /// location key), from the DIR_ITEM.
    pub fn dir_lookup_in(&self, tree: Tree, dir: u64, name: &[u8]) -> Result<Option<Key>> {
        Ok(dir_item::lookup(self, tree.id, dir, name)?.map(|e| e.location))
    }

    /// Looks `name` up in directory `dir`.
    pub fn lookup(&self, dir: InodeId, name: &[u8]) -> Result<Option<DirEntryInfo>> {
        if dir.is_placeholder() {
            return Ok(None);
        }
        let Some(e) = dir_item::lookup(self, dir.subvol, dir.ino, name)? else {
            return Ok(None);
        };
        Ok(Some(DirEntryInfo {
            name: name.to_vec(),
            index: 0,
            file_type: e.file_type,
            target: dir_item::entry_target(self, dir, &e.location, name)?,
        }))
    }

    /// Entries of directory `dir` in DIR_INDEX order ("." and ".." excluded).
    pub fn read_dir(&self, dir: InodeId) -> Result<Vec<DirEntryInfo>> {
        let mut out = Vec::new();
        self.for_each_dir_entry(dir, 0, |e| {
            out.push(e);
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(out)
    }

    /// Calls `f` for each entry of `dir` with index >= `from_index`.
    pub fn for_each_dir_entry<F>(&self, dir: InodeId, from_index: u64, mut f: F) -> Result<()>
    where
        F: FnMut(DirEntryInfo) -> Result<ControlFlow<()>>,
    {
        if dir.is_placeholder() {
            return Ok(());
        }
        let tree = self.tree(dir.subvol)?;
        self.for_each_dir_index_in(tree, dir.ino, from_index, |index, e| {
            f(DirEntryInfo {
                name: e.name.to_vec(),
                index,
                file_type: e.file_type,
                target: dir_item::entry_target(self, dir, &e.location, e.name)?,
            })
        })
    }

    /// Calls `f(index, entry)` for each DIR_INDEX entry of directory `dir`
    /// in `tree` with index >= `from_index`, in index order; a name that is
    /// not one path component is an error naming the tree, inode and key.
    pub fn for_each_dir_index_in<F>(
        &self,
        tree: Tree,
        dir: u64,
        from_index: u64,
        f: F,
    ) -> Result<()>
    where
        F: FnMut(u64, &DirEntry<'_>) -> Result<ControlFlow<()>>,
    {
        dir_item::for_each_dir_index(self, tree.id, dir, from_index, f)
    }

    /// The entries of directory `dir` in `tree` in index order: (name,
    /// location key).
    pub fn dir_entries_in(&self, tree: Tree, dir: u64) -> Result<Vec<(Vec<u8>, Key)>> {
        let mut out = Vec::new();
        self.for_each_dir_index_in(tree, dir, 0, |_, e| {
            out.push((e.name.to_vec(), e.location));
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(out)
    }

    /// All extended attributes of `id`, sorted by name.
    pub fn xattrs(&self, id: InodeId) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if id.is_placeholder() {
            return Ok(Vec::new());
        }
        let mut out = self.xattrs_in(self.tree(id.subvol)?, id.ino)?;
        out.sort();
        Ok(out)
    }

    /// All extended attributes of inode `ino` in `tree`, in key (name
    /// hash) order, as the kernel visits them.
    pub fn xattrs_in(&self, tree: Tree, ino: u64) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        dir_item::xattrs(self, tree.id, ino)
    }

    /// One extended attribute of `id`.
    pub fn xattr(&self, id: InodeId, name: &[u8]) -> Result<Option<Vec<u8>>> {
        if id.is_placeholder() {
            return Ok(None);
        }
        dir_item::xattr(self, id.subvol, id.ino, name)
    }

    /// One extended attribute of inode `ino` in `tree`.
    pub fn xattr_in(&self, tree: Tree, ino: u64, name: &[u8]) -> Result<Option<Vec<u8>>> {
        dir_item::xattr(self, tree.id, ino, name)
    }

    /// Resolves an absolute path from the top-level subvolume. Symlinks are
    /// not followed; "." and empty components are skipped, ".." goes up.
    pub fn resolve(&self, path: &[u8]) -> Result<InodeId> {
        let mut stack = vec![self.top()];
        for comp in path.split(|&c| c == b'/') {
            match comp {
                b"" | b"." => continue,
                b".." => {
                    if stack.len() > 1 {
                        stack.pop();
                    }
                    continue;
                }
                _ => {}
            }
            let cur = *stack.last().unwrap();
            let st = self.stat(cur)?;
            if !st.is_dir() {
                return Err(Error::NotFound(format!(
                    "{}: not a directory",
                    String::from_utf8_lossy(path)
                )));
            }
            let e = self.lookup(cur, comp)?.ok_or_else(|| {
                Error::NotFound(format!(
                    "{}: no such file or directory",
                    String::from_utf8_lossy(path)
                ))
            })?;
            stack.push(e.target);
        }
        Ok(*stack.last().unwrap())
    }
}

/// The subvolumes the root tree's ROOT_ITEM and ROOT_BACKREF `items`
/// describe (in key order), with paths from the top level; `dir_path`
/// gives the path of a directory inside a subvolume (relative). One
/// builder for an image's reader and for a client of a mount, which
/// reads the same items through TREE_SEARCH.
pub fn subvolumes_of(
    items: &[(Key, Vec<u8>)],
    dir_path: impl Fn(u64, u64) -> Result<Vec<u8>>,
) -> Result<Vec<Subvolume>> {
    let mut roots = Vec::new();
    let mut backrefs: BTreeMap<u64, (u64, u64, Vec<u8>)> = BTreeMap::new();
    for (k, d) in items {
        let is_subvol = k.objectid == FS_TREE_OBJECTID || k.objectid >= FIRST_FREE_OBJECTID;
        if !is_subvol || k.objectid > LAST_FREE_OBJECTID {
            continue;
        }
        match k.item_type {
            ROOT_ITEM => roots.push((
                k.objectid,
                RootItem::parse(d).at(|| format!("root tree key {k}"))?,
            )),
            ROOT_BACKREF => {
                let r = RootRef::parse(d).at(|| format!("root tree key {k}"))?;
                backrefs
                    .entry(k.objectid)
                    .or_insert((k.offset, r.dirid, r.name.to_vec()));
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    let mut paths: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    paths.insert(FS_TREE_OBJECTID, Vec::new());
    for (id, root) in roots {
        // Deleted subvolumes keep a ROOT_ITEM with refs 0 until cleaned.
        if id != FS_TREE_OBJECTID && root.refs == 0 {
            continue;
        }
        let (parent_id, dirid, name) = backrefs.get(&id).cloned().unwrap_or((0, 0, Vec::new()));
        out.push(Subvolume {
            id,
            parent_id,
            dirid,
            name,
            path: Vec::new(),
            root,
        });
    }
    // Resolve paths; parents may have higher ids than children (moved
    // subvolumes), so iterate until stable, bounded by the count.
    for _ in 0..=out.len() {
        let mut progress = false;
        for s in out.iter_mut() {
            if paths.contains_key(&s.id) || s.parent_id == 0 {
                continue;
            }
            if let Some(pp) = paths.get(&s.parent_id).cloned() {
                let dir = dir_path(s.parent_id, s.dirid)?;
                let mut p = pp;
                for part in [dir, s.name.clone()] {
                    if part.is_empty() {
                        continue;
                    }
                    if !p.is_empty() {
                        p.push(b'/');
                    }
                    p.extend_from_slice(&part);
                }
                paths.insert(s.id, p);
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    for s in out.iter_mut() {
        s.path = paths.get(&s.id).cloned().unwrap_or_default();
    }
    Ok(out)
}
