//! Quota groups (progs' qgroup verify): for each subvolume, the bytes of
//! every extent it reaches (its tree blocks, and the data extents its
//! files refer to, whole) and of those only it reaches, against its
//! level-0 QGROUP_INFO; and for each higher-level group, the bytes of
//! every extent a subvolume below it reaches and of those that only such
//! subvolumes reach (the kernel's counting through QGROUP_RELATIONs). Not
//! compared while a rescan runs; when the status says the counts are
//! inconsistent (the kernel knows them wrong until a rescan), a
//! difference is a warning. Simple quotas count differently (by owner)
//! and are not compared.

use super::{is_fs_tree, Fix, Problems};
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
    let mut relations: Vec<(u64, u64)> = Vec::new();
    let r = for_each_item(&fs.info, qt, Key::MIN, Key::MAX, |k, d| {
        match k.item_type {
            QGROUP_STATUS => match QgroupStatus::parse(d) {
                Ok(s) => status = Some(s),
                Err(e) => p.add(format!("quota tree key {k}"), format!("{e}")),
            },
            QGROUP_INFO => match QgroupInfo::parse(d) {
                Ok(i) => {
                    infos.insert(k.offset, i);
                }
                Err(e) => p.add(format!("quota tree key {k}"), format!("{e}")),
            },
            // Each relation is kept both ways; the member's id is the lower.
            QGROUP_RELATION if k.objectid < k.offset => relations.push((k.objectid, k.offset)),
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
    // Higher-level groups: the subvolumes below each (through groups of
    // groups), and what they reach together and alone.
    let below = subvolumes_below(&infos, &relations);
    for (bytes, ids) in reach.values() {
        for (&g, members) in &below {
            if ids.iter().any(|id| members.contains(id)) {
                *rfer.entry(g).or_default() += bytes;
                if ids.iter().all(|id| members.contains(id)) {
                    *excl.entry(g).or_default() += bytes;
                }
            }
        }
    }
    for (&id, info) in &infos {
        let level = id >> 48;
        let place = format!("quota group {level}/{}", id & ((1 << 48) - 1));
        if level > 0 {
            let (r, e) = (
                rfer.get(&id).copied().unwrap_or(0),
                excl.get(&id).copied().unwrap_or(0),
            );
            if info.rfer != r || info.excl != e {
                let what = format!(
                    "referenced {} exclusive {} but its subvolumes' extents make {r} and {e}",
                    info.rfer, info.excl
                );
                mismatch(p, place, what, inconsistent);
            }
            continue;
        }
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
            let what = format!(
                "referenced {} exclusive {} but the trees make {r} and {e}",
                info.rfer, info.excl
            );
            mismatch(p, place, what, inconsistent);
        }
    }
}

/// A quota group whose counts differ from the trees': a warning when the
/// status already says they are inconsistent (the kernel and btrfs check
/// expect it then), else a problem that `--repair` mends by marking them
/// so, for a `btrfs quota rescan`, as the kernel does when it cannot
/// account.
fn mismatch(p: &mut Problems, place: String, what: String, inconsistent: bool) {
    if inconsistent {
        p.warn(
            place,
            format!("{what} (marked inconsistent: a rescan recounts it)"),
        );
    } else {
        p.add_fix(place, what, Fix::QuotaStale);
    }
}

/// For each quota group above level 0, the subvolumes (level-0 groups)
/// below it through `relations` (member, parent), however deep; a cycle
/// (damage) ends where it closes.
fn subvolumes_below(
    infos: &BTreeMap<u64, QgroupInfo>,
    relations: &[(u64, u64)],
) -> BTreeMap<u64, HashSet<u64>> {
    let mut members: HashMap<u64, Vec<u64>> = HashMap::new();
    for &(m, g) in relations {
        members.entry(g).or_default().push(m);
    }
    let mut out = BTreeMap::new();
    for &g in infos.keys().filter(|&&g| g >> 48 > 0) {
        let mut leaves = HashSet::new();
        let mut seen = HashSet::new();
        let mut stack = vec![g];
        while let Some(x) = stack.pop() {
            if !seen.insert(x) {
                continue;
            }
            for &m in members.get(&x).map_or(&[][..], |v| v.as_slice()) {
                if m >> 48 == 0 {
                    leaves.insert(m);
                } else {
                    stack.push(m);
                }
            }
        }
        out.insert(g, leaves);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_of_groups_reach_their_subvolumes_and_cycles_end() {
        let g = |level: u64, id: u64| (level << 48) | id;
        let infos: BTreeMap<u64, QgroupInfo> = [g(0, 256), g(1, 100), g(2, 200), g(1, 101)]
            .into_iter()
            .map(|id| (id, QgroupInfo::default()))
            .collect();
        let rel = [
            (g(0, 256), g(1, 100)),
            (g(0, 257), g(1, 100)),
            (g(1, 100), g(2, 200)),
            (g(0, 258), g(2, 200)),
            // Damage: 1/101 and 2/200 each a member of the other.
            (g(1, 101), g(2, 200)),
            (g(2, 200), g(1, 101)),
        ];
        let below = subvolumes_below(&infos, &rel);
        let set = |v: &[u64]| v.iter().copied().collect::<HashSet<u64>>();
        assert_eq!(below[&g(1, 100)], set(&[256, 257]));
        assert_eq!(below[&g(2, 200)], set(&[256, 257, 258]));
        assert_eq!(below[&g(1, 101)], set(&[256, 257, 258]));
        assert!(!below.contains_key(&g(0, 256)));
    }
}
