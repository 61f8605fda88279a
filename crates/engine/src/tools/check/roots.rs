//! The root tree's links between subvolumes (progs' `check_root_refs`):
//! every ROOT_REF with its ROOT_BACKREF and both with the DIR_ITEM and
//! DIR_INDEX naming the subvolume in its parent, every live subvolume
//! linked somewhere, a
//! deleted one (refs 0) with its orphan item; and the UUID tree's
//! entries naming subvolumes that carry those UUIDs. Before every other
//! check, the root items naming an outdated root block.

use super::fs_tree::SubvolEntry;
use super::{is_fs_tree, Fix, Problems};
use crate::ctree::{for_each_item, Tree};
use crate::fs::Filesystem;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{
    key_uuid, parse_uuid_item, ExtentRecord, InlineRef, InodeItem, RootItem, RootRef,
    EXTENT_FLAG_TREE_BLOCK,
};
use ubtrfs_format::Key;

/// (parent, child) -> (dirid, sequence, name).
type Links = BTreeMap<(u64, u64), (u64, u64, Vec<u8>)>;

pub(crate) fn check(
    fs: &Filesystem,
    roots: &[(Tree, Option<RootItem>)],
    entries: &[SubvolEntry],
    p: &mut Problems,
) {
    let info = &fs.info;
    let mut refs = Links::new();
    let mut backrefs = Links::new();
    let mut orphans = BTreeSet::new();
    // The v1 free-space cache: (block group, inode), and the root tree's
    // inodes' modes.
    let mut cache_inodes = Vec::new();
    let mut root_inodes: BTreeMap<u64, u32> = BTreeMap::new();
    let r = for_each_item(info, fs.root_tree, Key::MIN, Key::MAX, |k, d| {
        match k.item_type {
            ROOT_REF | ROOT_BACKREF => match RootRef::parse(d) {
                Ok(r) => {
                    let v = (r.dirid, r.sequence, r.name.to_vec());
                    if k.item_type == ROOT_REF {
                        refs.insert((k.objectid, k.offset), v);
                    } else {
                        backrefs.insert((k.offset, k.objectid), v);
                    }
                }
                Err(e) => p.add(format!("root tree key {k}"), format!("{e}")),
            },
            ORPHAN_ITEM if k.objectid == ORPHAN_OBJECTID => {
                orphans.insert(k.offset);
            }
            0 if k.objectid == FREE_SPACE_OBJECTID => match FreeSpaceHeader::location(d) {
                Ok(loc) => cache_inodes.push((k.offset, loc.objectid)),
                Err(e) => p.add(
                    format!("root tree key {k}"),
                    format!("free space cache header: {e}"),
                ),
            },
            INODE_ITEM => {
                if let Ok(i) = InodeItem::parse(d) {
                    root_inodes.insert(k.objectid, i.mode);
                }
            }
            _ => {}
        }
        Ok(ControlFlow::Continue(()))
    });
    if let Err(e) = r {
        p.add("root tree", format!("not read whole: {e}"));
        return;
    }
    for (bg, ino) in cache_inodes {
        let here = format!("root tree free space cache of block group {bg}");
        match root_inodes.get(&ino) {
            Some(&m) if m & 0o170000 == 0o100000 => {}
            Some(&m) => p.add_fix(
                here,
                format!("inode {ino} has mode {m:o}, not a regular file"),
                // What the kernel makes them.
                Fix::InodeMode {
                    tree: ROOT_TREE_OBJECTID,
                    ino,
                    mode: 0o100600,
                },
            ),
            None => p.add(here, format!("inode {ino} does not exist")),
        }
    }
    let items: BTreeMap<u64, &RootItem> = roots
        .iter()
        .filter_map(|(t, r)| r.as_ref().map(|r| (t.id, r)))
        .collect();
    let live = |id: u64| items.get(&id).is_some_and(|r| r.refs > 0);
    for (&(parent, child), v) in &refs {
        let here = format!("root tree ROOT_REF {parent} -> {child}");
        match backrefs.get(&(parent, child)) {
            Some(b) if b == v => {}
            Some(b) => p.add(
                &here,
                format!(
                    "ROOT_BACKREF says directory {} index {} name {:?}",
                    b.0,
                    b.1,
                    lossy(&b.2)
                ),
            ),
            None => p.add(&here, "no ROOT_BACKREF"),
        }
        if !live(child) {
            p.add(&here, "the subvolume has no live ROOT_ITEM");
        }
        if live(parent) {
            let (dirid, seq, name) = v;
            let has = |idx: Option<u64>| {
                entries.iter().any(|e| {
                    e.0 == parent && e.1 == *dirid && e.2 == *name && e.3 == idx && e.4 == child
                })
            };
            if !has(None) {
                p.add(
                    &here,
                    format!("no DIR_ITEM {:?} in directory {dirid}", lossy(name)),
                );
            }
            if !has(Some(*seq)) {
                p.add(&here, format!("no DIR_INDEX {seq} in directory {dirid}"));
            }
        }
    }
    for &(parent, child) in backrefs.keys() {
        if !refs.contains_key(&(parent, child)) {
            p.add(
                format!("root tree ROOT_BACKREF {child} -> {parent}"),
                "no ROOT_REF",
            );
        }
    }
    // An entry naming a subvolume without a ROOT_REF is not a problem: a
    // snapshot keeps the entries of the subvolumes below its source, which
    // the kernel shows as empty directories.
    for (&id, r) in &items {
        if !is_fs_tree(id) || id == FS_TREE_OBJECTID || id == DATA_RELOC_TREE_OBJECTID {
            continue;
        }
        let here = format!("subvolume {id}");
        if r.refs > 0 {
            if !backrefs.keys().any(|&(_, c)| c == id) {
                p.add(here, "not linked anywhere (no ROOT_BACKREF)");
            }
        } else if !orphans.contains(&id) {
            p.add_fix(
                here,
                "deleted (refs 0) but no orphan item to finish it",
                Fix::RootOrphan { id },
            );
        }
    }
    check_uuid_tree(fs, &items, p);
}

fn check_uuid_tree(fs: &Filesystem, items: &BTreeMap<u64, &RootItem>, p: &mut Problems) {
    let Ok(Some(t)) = fs.tree_opt(UUID_TREE_OBJECTID) else {
        return;
    };
    let r = for_each_item(&fs.info, t, Key::MIN, Key::MAX, |k, d| {
        let here = || format!("uuid tree key {k}");
        let received = match k.item_type {
            UUID_KEY_SUBVOL => false,
            UUID_KEY_RECEIVED_SUBVOL => true,
            _ => return Ok(ControlFlow::Continue(())),
        };
        let ids = match parse_uuid_item(d) {
            Ok(v) => v,
            Err(e) => {
                p.add(here(), format!("{e}"));
                return Ok(ControlFlow::Continue(()));
            }
        };
        let uuid = key_uuid(&k);
        for id in ids {
            match items.get(&id) {
                Some(r) if r.refs == 0 => {}
                Some(r) => {
                    let have = if received { r.received_uuid } else { r.uuid };
                    if have != uuid {
                        p.add(here(), format!("names subvolume {id}, whose UUID differs"));
                    }
                }
                None => p.add(
                    here(),
                    format!("names subvolume {id}, which does not exist"),
                ),
            }
        }
        Ok(ControlFlow::Continue(()))
    });
    if let Err(e) = r {
        p.add("uuid tree", format!("not read whole: {e}"));
    }
}

/// The v1 free-space cache's header item (key FREE_SPACE_OBJECTID, 0,
/// block group): the location key of its inode comes first.
struct FreeSpaceHeader;

impl FreeSpaceHeader {
    fn location(d: &[u8]) -> Result<Key, String> {
        if d.len() < 17 {
            return Err(format!("{} bytes", d.len()));
        }
        Key::parse(d, 0).map_err(|e| e.to_string())
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The newest root block the extent tree knows of one tree.
#[derive(Clone, Copy)]
struct RootBlock {
    bytenr: u64,
    level: u8,
    generation: u64,
    /// Blocks at this level whose first back reference names the tree.
    count: u32,
}

/// Root items naming an older copy of their tree's root than the extent
/// tree holds (btrfs-progs' repair_root_items: a 3.17 kernel left
/// read-only snapshots' items naming the root from before orphan
/// cleanup). A tree's root block, by the extent tree, is its highest
/// block whose extent item's first inline reference is a TREE_BLOCK_REF
/// of that tree, when it is the only one at that level; as progs, for the
/// subvolumes and the data relocation tree (ids from 256), relocation
/// trees aside.
///
/// The root item is mended in place in `roots` when the repair can be
/// trusted (the newer block is at least as high and as new, and the block
/// the item names has no extent item: nothing accounts for it), so that
/// every later check sees the tree as the repair leaves it; the problem
/// carries that repair. Otherwise it is reported without one.
pub(crate) fn outdated_root_items(
    fs: &Filesystem,
    roots: &mut [(Tree, Option<RootItem>)],
    p: &mut Problems,
) {
    let watched = |id: u64| id >= FIRST_FREE_OBJECTID && id != TREE_RELOC_OBJECTID;
    if !roots.iter().any(|(t, r)| r.is_some() && watched(t.id)) {
        return;
    }
    let Ok(Some(extent_tree)) = fs.tree_opt(EXTENT_TREE_OBJECTID) else {
        return;
    };
    let current: BTreeSet<u64> = roots
        .iter()
        .filter(|(t, r)| r.is_some() && watched(t.id))
        .map(|(t, _)| t.bytenr)
        .collect();
    let mut accounted = BTreeSet::new();
    let mut newest: BTreeMap<u64, RootBlock> = BTreeMap::new();
    // An unreadable extent tree is the extent check's to report.
    let _ = for_each_item(&fs.info, extent_tree, Key::MIN, Key::MAX, |k, d| {
        if k.item_type != EXTENT_ITEM && k.item_type != METADATA_ITEM {
            return Ok(ControlFlow::Continue(()));
        }
        if current.contains(&k.objectid) {
            accounted.insert(k.objectid);
        }
        let Ok((item, info, mut refs)) = ExtentRecord::split(&k, d) else {
            return Ok(ControlFlow::Continue(()));
        };
        if item.flags & EXTENT_FLAG_TREE_BLOCK == 0 {
            return Ok(ControlFlow::Continue(()));
        }
        let level = match info {
            Some(i) => i.level,
            None => k.offset.min(255) as u8,
        };
        let Some(Ok(InlineRef::TreeBlock { root })) = refs.next() else {
            return Ok(ControlFlow::Continue(()));
        };
        let b = RootBlock {
            bytenr: k.objectid,
            level,
            generation: item.generation,
            count: 1,
        };
        newest
            .entry(root)
            .and_modify(|n| {
                if level > n.level {
                    *n = b;
                } else if level == n.level {
                    n.count += 1;
                }
            })
            .or_insert(b);
        Ok(ControlFlow::Continue(()))
    });
    for (t, item) in roots.iter_mut() {
        let Some(ri) = item.as_mut().filter(|_| watched(t.id)) else {
            continue;
        };
        let Some(n) = newest.get(&t.id).filter(|n| n.count == 1) else {
            continue;
        };
        if (n.bytenr, n.level, n.generation) == (ri.bytenr, ri.level, ri.generation) {
            continue;
        }
        let here = format!("root tree ROOT_ITEM {}", t.id);
        let what = format!(
            "names root block {} (generation {}, level {}) but the extent tree's is {} \
             (generation {}, level {})",
            ri.bytenr, ri.generation, ri.level, n.bytenr, n.generation, n.level
        );
        if n.generation < ri.generation || n.level < ri.level || accounted.contains(&ri.bytenr) {
            p.add(here, what);
            continue;
        }
        p.add_fix(
            here,
            what,
            Fix::RootBlock {
                id: t.id,
                bytenr: n.bytenr,
                level: n.level,
                generation: n.generation,
            },
        );
        ri.bytenr = n.bytenr;
        ri.level = n.level;
        ri.generation = n.generation;
        *t = Tree::of_root_item(t.id, ri);
    }
}
