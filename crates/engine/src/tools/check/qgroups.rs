//! Quota groups (progs' qgroup verify): for each subvolume, the bytes of
//! every extent it reaches (its tree blocks, and the data extents its
//! files refer to, whole) and of those only it reaches, against its
//! level-0 QGROUP_INFO. Not compared while a rescan runs; when the status
//! says the counts are inconsistent (the kernel knows them wrong until a
//! rescan), a difference is a warning. Simple quotas count differently
//! (by owner) and are not compared. Higher-level groups are not checked.

use super::{is_fs_tree, Problems};
use crate::ctree::{for_each_item, Tree};
use crate::fs::Filesystem;
use crate::tree::block::BlockExpect;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::ControlFlow;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{
    FileExtent, FileExtentKind, QgroupInfo, QgroupStatus, RootItem, QGROUP_STATUS_INCONSISTENT,
    QGROUP_STATUS_ON, QGROUP_STATUS_RESCAN, QGROUP_STATUS_SIMPLE_MODE,
};
use ubtrfs_format::Key;

pub(crate) fn check(fs: &Filesystem, roots: &[(Tree, Option<RootItem>)], p: &mut Problems) {
    let Ok(Some(qt)) = fs.tree_opt(QUOTA_TREE_OBJECTID) else {
        return;
    };
    let mut status: Option<QgroupStatus> = None;
    let mut infos: BTreeMap<u64, QgroupInfo> = BTreeMap::new();
    let r = for_each_item(&fs.info, qt, Key::MIN, Key::MAX, |k, d| {
        match k.item_type {
            QGROUP_STATUS => match QgroupStatus::parse(d) {
                Ok(s) => status = Some(s),
                Err(e) => p.add(format!("quota tree key {k}"), format!("{e}")),
            },
            QGROUP_INFO if k.offset >> 48 == 0 => match QgroupInfo::parse(d) {
                Ok(i) => {
                    infos.insert(k.offset, i);
                }
                Err(e) => p.add(format!("quota tree key {k}"), format!("{e}")),
            },
            _ => {}
        }
        Ok(ControlFlow::Continue(()))
    });
    if let Err(e) = r {
        p.add("quota tree", format!("not read whole: {e}"));
        return;
    }
    let Some(status) = status else {
        p.add("quota tree", "no QGROUP_STATUS item");
        return;
    };
    if status.flags & QGROUP_STATUS_ON == 0 {
        return;
    }
    if status.flags & QGROUP_STATUS_RESCAN != 0 {
        p.warn("quota groups", "a rescan is under way: counts not compared");
        return;
    }
    if status.flags & QGROUP_STATUS_SIMPLE_MODE != 0
        || fs.info.sb.has_incompat(INCOMPAT_SIMPLE_QUOTA)
    {
        p.warn("quota groups", "simple quotas: counts not compared");
        return;
    }
    let inconsistent = status.flags & QGROUP_STATUS_INCONSISTENT != 0;
    // Extent -> (bytes, the subvolumes reaching it).
    let mut reach: HashMap<u64, (u64, Vec<u64>)> = HashMap::new();
    let ns = fs.info.nodesize as u64;
    for (t, item) in roots {
        let live = item.as_ref().is_some_and(|r| r.refs > 0);
        if !is_fs_tree(t.id) || t.id == DATA_RELOC_TREE_OBJECTID || !live {
            continue;
        }
        let mut seen: HashSet<u64> = HashSet::new();
        let mut stack = vec![(t.bytenr, t.root_expect())];
        while let Some((b, expect)) = stack.pop() {
            if !seen.insert(b) {
                continue;
            }
            let Ok(tb) = fs.info.read_tree_block(b, expect) else {
                continue; // the walk reports it
            };
            let e = reach.entry(b).or_insert((ns, Vec::new()));
            e.1.push(t.id);
            let node = tb.node();
            if tb.header.level > 0 {
                for i in 0..node.nritems() {
                    let kp = node.key_ptr(i);
                    stack.push((
                        kp.blockptr,
                        BlockExpect {
                            level: Some(tb.header.level - 1),
                            generation: Some(kp.generation),
                            first_key: Some(kp.key),
                        },
                    ));
                }
                continue;
            }
            for i in 0..node.nritems() {
                let it = node.item(i);
                if it.key.item_type != EXTENT_DATA {
                    continue;
                }
                if let Ok(FileExtent {
                    kind:
                        FileExtentKind::Extent {
                            disk_bytenr,
                            disk_num_bytes,
                            ..
                        },
                    ..
                }) = FileExtent::parse(it.data)
                {
                    if disk_bytenr != 0 && seen.insert(disk_bytenr) {
                        let e = reach
                            .entry(disk_bytenr)
                            .or_insert((disk_num_bytes, Vec::new()));
                        e.1.push(t.id);
                    }
                }
            }
        }
    }
    let mut rfer: BTreeMap<u64, u64> = BTreeMap::new();
    let mut excl: BTreeMap<u64, u64> = BTreeMap::new();
    for (bytes, ids) in reach.values() {
        for id in ids {
            *rfer.entry(*id).or_default() += bytes;
        }
        if let [only] = ids.as_slice() {
            *excl.entry(*only).or_default() += bytes;
        }
    }
    for (&id, info) in &infos {
        let exists = roots
            .iter()
            .any(|(t, r)| t.id == id && r.as_ref().is_some_and(|r| r.refs > 0));
        if !exists {
            continue; // a deleted subvolume's group
        }
        let (r, e) = (
            rfer.get(&id).copied().unwrap_or(0),
            excl.get(&id).copied().unwrap_or(0),
        );
        if info.rfer != r || info.excl != e {
            let place = format!("quota group 0/{id}");
            let what = format!(
                "referenced {} exclusive {} but the trees make {r} and {e}",
                info.rfer, info.excl
            );
            if inconsistent {
                p.warn(
                    place,
                    format!("{what} (marked inconsistent: a rescan recounts it)"),
                );
            } else {
                p.add(place, what);
            }
        }
    }
}
