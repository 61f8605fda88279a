//! The root tree's links between subvolumes (progs' `check_root_refs`):
//! every ROOT_REF with its ROOT_BACKREF and both with the DIR_ITEM and
//! DIR_INDEX naming the subvolume in its parent, every live subvolume
//! linked somewhere, a
//! deleted one (refs 0) with its orphan item; and the UUID tree's
//! entries naming subvolumes that carry those UUIDs.

use super::fs_tree::SubvolEntry;
use super::{is_fs_tree, Fix, Problems};
use crate::ctree::{for_each_item, Tree};
use crate::fs::Filesystem;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{key_uuid, parse_uuid_item, InodeItem, RootItem, RootRef};
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
