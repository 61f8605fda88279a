//! Names (the kernel's dir-item.c and xattr.c readers, and inode.c's
//! btrfs_inode_by_name with fixup_tree_root_location): entries found by
//! name hash (DIR_ITEM, XATTR_ITEM), directory listings in index order
//! (DIR_INDEX), where an entry leads when it names a subvolume, and the
//! parent a directory's ".." leads to.

use super::{check_entry_name, describe_tree, inode_item, InodeId, ItemSource};
use crate::error::{Error, FormatContext, Result};
use std::ops::ControlFlow;
use ubtrfs_format::checksum::name_hash;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{parse_dir_entries, DirEntry, RootRef};
use ubtrfs_format::key::Key;

/// A name found in a directory (or an xattr of an inode): where it points,
/// its type, and its data (an xattr's value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub location: Key,
    pub file_type: u8,
    pub data: Vec<u8>,
}

/// The entry called `name` among the items of `ino` keyed by its name
/// hash: DIR_ITEM in a directory, XATTR_ITEM of an inode.
pub fn hashed_entry<S: ItemSource + ?Sized>(
    src: &S,
    tree: u64,
    ino: u64,
    item_type: u8,
    name: &[u8],
) -> Result<Option<Named>> {
    let key = Key::new(ino, item_type, name_hash(name));
    let Some(d) = src.item(tree, &key)? else {
        return Ok(None);
    };
    let entries = parse_dir_entries(&d).at(|| format!("{} key {key}", describe_tree(tree)))?;
    Ok(entries.into_iter().find(|e| e.name == name).map(|e| Named {
        location: e.location,
        file_type: e.file_type,
        data: e.data.to_vec(),
    }))
}

/// The entry `name` of directory `dir` (None for a name that cannot be
/// one: not a single path component).
pub fn lookup<S: ItemSource + ?Sized>(
    src: &S,
    tree: u64,
    dir: u64,
    name: &[u8],
) -> Result<Option<Named>> {
    if check_entry_name(name).is_err() {
        return Ok(None);
    }
    hashed_entry(src, tree, dir, DIR_ITEM, name)
}

/// The subvolume mounted by default: the root tree directory's "default"
/// entry (the top level when it has none), for an image's reader and a
/// running transaction alike.
pub fn default_subvol<S: ItemSource + ?Sized>(src: &S) -> Result<u64> {
    Ok(
        lookup(src, ROOT_TREE_OBJECTID, ROOT_TREE_DIR_OBJECTID, b"default")?
            .map_or(FS_TREE_OBJECTID, |e| e.location.objectid),
    )
}

/// Calls `f(index, entry)` for each DIR_INDEX entry of directory `dir`
/// with index >= `from_index`, in index order, until it breaks; a name
/// that is not one path component is an error naming the tree, inode and
/// key.
pub fn for_each_dir_index<S, F>(
    src: &S,
    tree: u64,
    dir: u64,
    from_index: u64,
    mut f: F,
) -> Result<()>
where
    S: ItemSource + ?Sized,
    F: FnMut(u64, &DirEntry<'_>) -> Result<ControlFlow<()>>,
{
    src.visit(
        tree,
        &Key::new(dir, DIR_INDEX, from_index),
        &Key::new(dir, DIR_INDEX, u64::MAX),
        &mut |k, d| {
            let here = || format!("{} inode {} key {k}", describe_tree(tree), k.objectid);
            for e in parse_dir_entries(d).at(here)? {
                check_entry_name(e.name).map_err(|why| Error::corrupt(here(), why))?;
                if f(k.offset, &e)?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        },
    )
}

/// One entry of a directory listing.
#[derive(Debug, Clone)]
pub struct DirEnt {
    /// Where the next listing call goes on from (after this entry).
    pub cookie: u64,
    pub name: Vec<u8>,
    pub id: InodeId,
    pub file_type: u8,
}

/// Calls `f` on the entries of directory `dir` after cookie `from`, in
/// order, until it breaks: "." (cookie 1), ".." (2, the directory
/// [`parent`] gives), then each name with its dir index + 1 (indexes
/// start at 2), so names added during a listing come after those
/// already listed.
pub fn list<S, F>(src: &S, dir: InodeId, from: u64, mut f: F) -> Result<()>
where
    S: ItemSource + ?Sized,
    F: FnMut(DirEnt) -> Result<ControlFlow<()>>,
{
    let dots = [(1, b".".as_slice()), (2, b"..".as_slice())];
    for (cookie, name) in dots {
        if from < cookie {
            // A parent the back references cannot give (damage) leaves
            // ".." the directory itself: it only numbers the entry, and
            // the names after it are still listed, as the kernel lists
            // them without reading the parent.
            let id = if cookie == 1 {
                dir
            } else {
                parent(src, dir).unwrap_or(dir)
            };
            let e = DirEnt {
                cookie,
                name: name.to_vec(),
                id,
                file_type: FT_DIR,
            };
            if f(e)?.is_break() {
                return Ok(());
            }
        }
    }
    if dir.is_placeholder() {
        return Ok(());
    }
    for_each_dir_index(src, dir.subvol, dir.ino, from.max(2), |index, e| {
        f(DirEnt {
            cookie: index + 1,
            name: e.name.to_vec(),
            id: entry_target(src, dir, &e.location, e.name)?,
            file_type: e.file_type,
        })
    })
}

/// Calls `f` on every extended attribute of inode `ino` in key (name
/// hash) order, as the kernel's listxattr visits them.
pub fn for_each_xattr<S, F>(src: &S, tree: u64, ino: u64, mut f: F) -> Result<()>
where
    S: ItemSource + ?Sized,
    F: FnMut(&DirEntry<'_>),
{
    src.visit(
        tree,
        &Key::new(ino, XATTR_ITEM, 0),
        &Key::new(ino, XATTR_ITEM, u64::MAX),
        &mut |k, d| {
            for e in parse_dir_entries(d).at(|| format!("{} key {k}", describe_tree(tree)))? {
                f(&e);
            }
            Ok(ControlFlow::Continue(()))
        },
    )
}

/// Every extended attribute of inode `ino`: (name, value) in key order.
pub fn xattrs<S: ItemSource + ?Sized>(
    src: &S,
    tree: u64,
    ino: u64,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    for_each_xattr(src, tree, ino, |e| {
        out.push((e.name.to_vec(), e.data.to_vec()))
    })?;
    Ok(out)
}

/// The value of extended attribute `name` of inode `ino`.
pub fn xattr<S: ItemSource + ?Sized>(
    src: &S,
    tree: u64,
    ino: u64,
    name: &[u8],
) -> Result<Option<Vec<u8>>> {
    Ok(hashed_entry(src, tree, ino, XATTR_ITEM, name)?.map(|e| e.data))
}

/// The first ROOT_BACKREF of subvolume `id`: (parent subvolume, directory
/// in it, name). The name must be one path component.
pub fn root_backref<S: ItemSource + ?Sized>(
    src: &S,
    id: u64,
) -> Result<Option<(u64, u64, Vec<u8>)>> {
    let mut out = None;
    src.visit(
        ROOT_TREE_OBJECTID,
        &Key::new(id, ROOT_BACKREF, 0),
        &Key::new(id, ROOT_BACKREF, u64::MAX),
        &mut |k, d| {
            let here = || format!("root tree key {k}");
            let r = RootRef::parse(d).at(here)?;
            check_entry_name(r.name).map_err(|why| Error::corrupt(here(), why))?;
            out = Some((k.offset, r.dirid, r.name.to_vec()));
            Ok(ControlFlow::Break(()))
        },
    )?;
    Ok(out)
}

/// Where the entry `name` of directory `dir` with location `location`
/// leads: the inode it names; for a subvolume's entry, the subvolume's root
/// directory when this subvolume really holds its link (a ROOT_REF from
/// this directory by this name) and the subvolume exists, else the empty
/// placeholder directory the kernel shows for a stale copy in a snapshot.
pub fn entry_target<S: ItemSource + ?Sized>(
    src: &S,
    dir: InodeId,
    location: &Key,
    name: &[u8],
) -> Result<InodeId> {
    if location.item_type != ROOT_ITEM {
        return Ok(InodeId {
            subvol: dir.subvol,
            ino: location.objectid,
        });
    }
    let child = location.objectid;
    let key = Key::new(dir.subvol, ROOT_REF, child);
    if let Some(d) = src.item(ROOT_TREE_OBJECTID, &key)? {
        let r = RootRef::parse(&d).at(|| format!("root tree key {key}"))?;
        if r.dirid == dir.ino && r.name == name && src.has_tree(child)? {
            return Ok(InodeId {
                subvol: child,
                ino: FIRST_INODE,
            });
        }
    }
    Ok(InodeId {
        subvol: dir.subvol,
        ino: EMPTY_SUBVOL_DIR_OBJECTID,
    })
}

/// The directory `dir`'s ".." leads to: its first back reference's
/// parent; for a subvolume's root directory, the directory holding the
/// subvolume's link (itself at the top, or when the link is gone).
pub fn parent<S: ItemSource + ?Sized>(src: &S, dir: InodeId) -> Result<InodeId> {
    if dir.is_placeholder() {
        return Ok(dir);
    }
    if dir.ino == FIRST_INODE {
        if dir.subvol == FS_TREE_OBJECTID {
            return Ok(dir);
        }
        return Ok(match root_backref(src, dir.subvol)? {
            Some((subvol, ino, _)) => InodeId { subvol, ino },
            None => dir,
        });
    }
    let first = inode_item::first_ref(src, dir.subvol, dir.ino)?;
    Ok(InodeId {
        subvol: dir.subvol,
        ino: first.map_or(FIRST_INODE, |(p, _)| p),
    })
}
