//! The free-space tree against the extent tree: per block group, the
//! free ranges exactly the complement of the extents (and of superblock
//! copies), and each FREE_SPACE_INFO's extent_count.

use super::extents::ExtentIndex;
use super::{Fix, Problems};
use crate::ctree::for_each_item;
use crate::error::Result;
use crate::fs::Filesystem;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::FreeSpaceInfo;
use ubtrfs_format::Key;

/// What entries below the first block group are: mkfs.btrfs 6.2 leaves
/// those of its temporary chunks (1 MiB and 5 MiB), which btrfs check
/// 6.2 passes and later versions flag and remove. A warning here (this
/// machine's mkfs.btrfs leaves them on every image), which `--repair`
/// removes as newer btrfs check --repair does.
const MKFS_LEFTOVER: &str = "below every block group: left by mkfs.btrfs from its temporary \
     chunks (the kernel never reads it; --repair removes it)";

pub(crate) fn check(fs: &Filesystem, ix: &ExtentIndex, p: &mut Problems) -> Result<()> {
    let groups = &ix.groups;
    let first_group = groups.keys().next().copied().unwrap_or(u64::MAX);
    let Some(fst) = fs.tree_opt(FREE_SPACE_TREE_OBJECTID)? else {
        p.add("root tree", "free-space tree enabled but missing");
        return Ok(());
    };
    let ss = fs.info.sectorsize as u64;
    let mut infos: BTreeMap<u64, (u64, FreeSpaceInfo)> = BTreeMap::new();
    // Free sectors as runs, per group start.
    let mut free: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    let group_of = |s: u64| {
        groups
            .range(..=s)
            .next_back()
            .filter(|(&gs, (gl, _))| s < gs + gl)
            .map(|(&gs, _)| gs)
    };
    let r = for_each_item(&fs.info, fst, Key::MIN, Key::MAX, |k, d| {
        match k.item_type {
            FREE_SPACE_INFO => match FreeSpaceInfo::parse(d) {
                Ok(fi) => {
                    infos.insert(k.objectid, (k.offset, fi));
                }
                Err(e) => p.add(
                    format!("free-space tree key {k}"),
                    format!("FREE_SPACE_INFO: {e}"),
                ),
            },
            FREE_SPACE_EXTENT | FREE_SPACE_BITMAP => {
                let Some(g) = group_of(k.objectid) else {
                    let fix = Fix::DeleteItem {
                        tree: FREE_SPACE_TREE_OBJECTID,
                        key: k,
                    };
                    let place = format!("free-space tree key {k}");
                    if k.objectid.saturating_add(k.offset) <= first_group {
                        p.warn_fix(place, MKFS_LEFTOVER, fix);
                    } else {
                        p.add_fix(place, "in no block group", fix);
                    }
                    return Ok(ControlFlow::Continue(()));
                };
                let runs = free.entry(g).or_default();
                let mut push = |s: u64, l: u64| match runs.last_mut() {
                    Some((ps, pl)) if *ps + *pl == s => *pl += l,
                    _ => runs.push((s, l)),
                };
                if k.item_type == FREE_SPACE_EXTENT {
                    push(k.objectid, k.offset);
                } else {
                    for i in 0..k.offset / ss {
                        let byte = d.get((i / 8) as usize).copied().unwrap_or(0);
                        if byte & (1 << (i % 8)) != 0 {
                            push(k.objectid + i * ss, ss);
                        }
                    }
                }
            }
            _ => p.add(format!("free-space tree key {k}"), "unexpected item"),
        }
        Ok(ControlFlow::Continue(()))
    });
    if let Err(e) = r {
        p.add("free-space tree", format!("not read whole: {e}"));
        return Ok(());
    }
    // Superblock copies inside chunks are neither used nor free: the
    // kernel's tree may list them as free (it builds the tree from the
    // extent tree's gaps and leaves them out when it loads it) or not
    // (ubtrfs's writers), so they are left out of both sides.
    // Extents the repair makes again are taken too.
    let mut taken: BTreeMap<u64, (u64, u64)> = ix
        .extents
        .iter()
        .map(|(&s, e)| (s, (e.len, 0)))
        .chain(
            ix.made
                .iter()
                .chain(&ix.made_data)
                .map(|&(s, l)| (s, (l, 0))),
        )
        .collect();
    let mut supers: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for &gs in groups.keys() {
        if let Some((logical, chunk)) = fs.info.chunks.lookup(gs) {
            for (s, l) in crate::io::volumes::super_stripes(logical, chunk) {
                taken.insert(s, (l, 0));
                supers.insert(s, (l, 0));
            }
        }
    }
    for (&gs, (glen, _)) in groups {
        let want = complement(gs, gs + glen, &taken);
        let listed = free.remove(&gs).unwrap_or_default();
        let have: Vec<(u64, u64)> = listed
            .iter()
            .flat_map(|&(s, l)| complement(s, s + l, &supers))
            .collect();
        match infos.remove(&gs) {
            Some((l, fi)) => {
                if l != *glen {
                    p.add(
                        format!("block group {gs}"),
                        format!("FREE_SPACE_INFO length {l}"),
                    );
                }
                if fi.extent_count as usize != listed.len() {
                    p.add(
                        format!("block group {gs}"),
                        format!(
                            "free-space extent_count {} but it lists {} free extents",
                            fi.extent_count,
                            listed.len()
                        ),
                    );
                }
            }
            None => p.add(format!("block group {gs}"), "no FREE_SPACE_INFO"),
        }
        if have != want {
            let show = |v: &[(u64, u64)]| {
                let s: Vec<String> = v.iter().take(8).map(|(a, b)| format!("{a}+{b}")).collect();
                format!("{} ranges [{}]", v.len(), s.join(" "))
            };
            p.add(
                format!("block group {gs}"),
                format!(
                    "free-space tree has {} but the extent tree leaves {}",
                    show(&have),
                    show(&want)
                ),
            );
        }
    }
    for (gs, (l, _)) in &infos {
        let fix = Fix::DeleteItem {
            tree: FREE_SPACE_TREE_OBJECTID,
            key: Key::new(*gs, FREE_SPACE_INFO, *l),
        };
        let place = format!("FREE_SPACE_INFO {gs}");
        if gs.saturating_add(*l) <= first_group {
            p.warn_fix(place, MKFS_LEFTOVER, fix);
        } else {
            p.add_fix(place, "no block group", fix);
        }
    }
    Ok(())
}

/// Free ranges of `[start, end)` given the extents (sorted) in it.
fn complement(start: u64, end: u64, extents: &BTreeMap<u64, (u64, u64)>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut c = start;
    for (&s, &(l, _)) in extents.range(start..end) {
        if s > c {
            out.push((c, s - c));
        }
        c = c.max(s + l);
    }
    if c < end {
        out.push((c, end - c));
    }
    out
}
