//! The extent tree against what the trees refer to (progs'
//! `check_extent_refs`), and block groups against the extents in them.

use super::blocks::{RefKey, Walk};
use super::{CheckReport, Fix, Problems};
use crate::ctree::for_each_item;
use crate::error::Result;
use crate::fs::Filesystem;
use crate::tx::delayed_ref::Backref;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{
    BlockGroupItem, ChunkItem, ExtentRecord, InlineRef, EXTENT_FLAG_DATA, EXTENT_FLAG_TREE_BLOCK,
};
use ubtrfs_format::{Key, Superblock};

/// One extent item with its back references (inline and keyed).
#[derive(Debug, Clone)]
pub(crate) struct ExtentEntry {
    pub key: Key,
    pub len: u64,
    pub flags: u64,
    pub refs: u64,
    /// A tree block's level (from the key or the tree block info).
    pub level: Option<u8>,
    pub listed: BTreeMap<RefKey, u64>,
}

/// The extent tree read whole: extents and block groups.
#[derive(Default)]
pub(crate) struct ExtentIndex {
    pub extents: BTreeMap<u64, ExtentEntry>,
    /// Block groups: start -> (length, item).
    pub groups: BTreeMap<u64, (u64, BlockGroupItem)>,
    /// Extent items that do not parse: bytenr -> (key, why). Judged with
    /// the walk: a tree block's is made again from its references.
    pub unreadable: BTreeMap<u64, (Key, String)>,
    /// Tree blocks the repair gives an extent item: (bytenr, length),
    /// counted in their block groups' use and taken in the free space.
    pub made: Vec<(u64, u64)>,
    /// Data extents the repair gives an extent item, likewise; their
    /// checksums are no orphans.
    pub made_data: Vec<(u64, u64)>,
    /// Data addresses no extent item holds whose file extent items the
    /// repair points at an orphaned extent listing their references:
    /// from -> (to, length).
    pub repointed: BTreeMap<u64, (u64, u64)>,
}

impl ExtentIndex {
    pub(crate) fn get(&self, bytenr: u64) -> Option<&ExtentEntry> {
        self.extents.get(&bytenr)
    }
}

/// Reads the extent tree (and the block group tree, when the filesystem
/// has one).
pub(crate) fn read_extent_tree(fs: &Filesystem, p: &mut Problems) -> Result<ExtentIndex> {
    let info = &fs.info;
    let mut ix = ExtentIndex::default();
    let Some(extent_tree) = fs.tree_opt(EXTENT_TREE_OBJECTID)? else {
        p.add("root tree", "no extent tree");
        return Ok(ix);
    };
    let ns = info.nodesize as u64;
    let sb_gen = info.sb.generation;
    let mut n = 0u64;
    let mut read =
        |k: Key, d: &[u8], ix: &mut ExtentIndex, p: &mut Problems| {
            let here = || format!("extent tree key {k}");
            n += 1;
            if n.is_multiple_of(16384) {
                p.progress("extent items", n);
            }
            match k.item_type {
                BLOCK_GROUP_ITEM => match BlockGroupItem::parse(d) {
                    Ok(bg) => {
                        ix.groups.insert(k.objectid, (k.offset, bg));
                    }
                    Err(e) => p.add(here(), format!("BLOCK_GROUP_ITEM: {e}")),
                },
                EXTENT_ITEM | METADATA_ITEM => {
                    let rec = match ExtentRecord::parse(&k, d) {
                        Ok(r) => r,
                        Err(e) => {
                            ix.unreadable
                                .insert(k.objectid, (k, format!("extent item: {e}")));
                            return;
                        }
                    };
                    let tree = rec.item.flags & EXTENT_FLAG_TREE_BLOCK != 0;
                    if rec.item.generation == 0 || rec.item.generation > sb_gen {
                        p.add_fix(
                            here(),
                            format!("generation {} not in (0, {sb_gen}]", rec.item.generation),
                            Fix::ExtentGeneration {
                                key: k,
                                generation: sb_gen,
                            },
                        );
                    }
                    if tree == (rec.item.flags & EXTENT_FLAG_DATA != 0) {
                        p.add(
                            here(),
                            format!(
                                "flags {:#x}: neither data nor tree block, or both",
                                rec.item.flags
                            ),
                        );
                    }
                    let (len, level) = if k.item_type == METADATA_ITEM {
                        if !tree {
                            p.add(here(), "METADATA_ITEM of a data extent");
                        }
                        (ns, Some(k.offset.min(255) as u8))
                    } else {
                        (
                            k.offset,
                            rec.tree_block.map(|t| t.level).or(tree.then_some(0)),
                        )
                    };
                    // The kernel's tree-checker order: type ascending, then
                    // seq descending (an owner ref first, outside the order).
                    let ordered: Vec<_> = rec
                        .refs
                        .iter()
                        .filter(|r| !matches!(r, InlineRef::ExtentOwner { .. }))
                        .map(InlineRef::order_key)
                        .collect();
                    if let Some(w) = ordered.windows(2).find(|w| w[0] > w[1]) {
                        p.add(
                            here(),
                            format!(
                            "inline refs out of order: type {} seq {:#x} after type {} seq {:#x}",
                            w[1].0, (w[1].1).0, w[0].0, (w[0].1).0
                        ),
                        );
                    }
                    let mut listed = BTreeMap::new();
                    for r in &rec.refs {
                        if let Some((rk, c)) = RefKey::of(r) {
                            *listed.entry(rk).or_default() += c;
                        }
                    }
                    let e = ExtentEntry {
                        key: k,
                        len,
                        flags: rec.item.flags,
                        refs: rec.item.refs,
                        level,
                        listed,
                    };
                    if let Some(old) = ix.extents.insert(k.objectid, e) {
                        p.add(
                            here(),
                            format!("a second extent item at {} (first {})", k.objectid, old.key),
                        );
                    }
                }
                TREE_BLOCK_REF | SHARED_BLOCK_REF | EXTENT_DATA_REF | SHARED_DATA_REF => {
                    let r = match InlineRef::from_keyed(&k, d) {
                        Ok(r) => r,
                        Err(e) => {
                            p.add(here(), format!("back reference: {e}"));
                            return;
                        }
                    };
                    match (ix.extents.get_mut(&k.objectid), RefKey::of(&r)) {
                        (Some(e), Some((rk, c))) => *e.listed.entry(rk).or_default() += c,
                        _ => p.add(here(), "back reference without an extent item"),
                    }
                }
                _ => {}
            }
        };
    let r = for_each_item(info, extent_tree, Key::MIN, Key::MAX, |k, d| {
        read(k, d, &mut ix, p);
        Ok(ControlFlow::Continue(()))
    });
    if let Err(e) = r {
        p.add("extent tree", format!("not read whole: {e}"));
    }
    if fs.info.sb.compat_ro_flags & COMPAT_RO_BLOCK_GROUP_TREE != 0 {
        match fs.tree_opt(BLOCK_GROUP_TREE_OBJECTID)? {
            Some(t) => {
                let r = for_each_item(info, t, Key::MIN, Key::MAX, |k, d| {
                    read(k, d, &mut ix, p);
                    Ok(ControlFlow::Continue(()))
                });
                if let Err(e) = r {
                    p.add("block group tree", format!("not read whole: {e}"));
                }
            }
            None => p.add(
                "root tree",
                "block-group-tree feature but no block group tree",
            ),
        }
    }
    Ok(ix)
}

/// Every extent referred to has its item with exactly those references,
/// and every extent item is referred to.
pub(crate) fn check_refs(
    fs: &Filesystem,
    ix: &mut ExtentIndex,
    w: &Walk,
    p: &mut Problems,
    report: &mut CheckReport,
) {
    let ns = fs.info.nodesize as u64;
    // Tree blocks without an extent item (or with one that does not
    // parse) get one from the references found, where nothing else can
    // be: at a node-aligned address inside a metadata or system block
    // group, overlapping no extent item. Their block groups count them.
    let mut made = Vec::new();
    for (&b, f) in &w.found {
        if ix.extents.contains_key(&b) {
            continue;
        }
        let Some(level) = f.level else { continue };
        let in_group = ix
            .groups
            .range(..=b)
            .next_back()
            .is_some_and(|(&gs, (gl, bg))| {
                b + ns <= gs + gl && bg.flags & (BG_METADATA | BG_SYSTEM) != 0
            });
        let before = ix.extents.range(..b).next_back();
        let after = ix.extents.range(b..).next();
        let clear =
            before.is_none_or(|(&s, e)| s + e.len <= b) && after.is_none_or(|(&s, _)| s >= b + ns);
        // References by tree only: one by address would leave its
        // FULL_BACKREF flag a guess.
        let refs: Vec<(Backref, u64)> = f
            .refs
            .iter()
            .filter_map(|(rk, &c)| match *rk {
                RefKey::Tree(root) => Some((Backref::Tree { root }, c)),
                _ => None,
            })
            .collect();
        if b % ns == 0
            && f.len == ns
            && in_group
            && clear
            && !refs.is_empty()
            && refs.len() == f.refs.len()
        {
            made.push((b, level, refs));
        }
    }
    for (b, level, refs) in made {
        let f = &w.found[&b];
        let what = match ix.unreadable.remove(&b) {
            Some((k, why)) => {
                p.add_fix(
                    format!("extent tree key {k}"),
                    format!("{why}; made again from the references found"),
                    Fix::NewTreeExtent {
                        bytenr: b,
                        level,
                        refs,
                        replaces: Some(k),
                    },
                );
                ix.made.push((b, ns));
                continue;
            }
            None => format!("tree block referred to by {} has no extent item", f.first),
        };
        p.add_fix(
            format!("extent {b}"),
            what,
            Fix::NewTreeExtent {
                bytenr: b,
                level,
                refs,
                replaces: None,
            },
        );
        ix.made.push((b, ns));
    }
    for (k, why) in ix.unreadable.values() {
        p.add(format!("extent tree key {k}"), why.clone());
    }
    // Data that file extent items put at an address no extent item holds,
    // where one extent item that nothing refers to lists exactly their
    // references (a file extent's disk_bytenr damaged): the items are
    // pointed back at it.
    let orphans: Vec<(u64, &ExtentEntry)> = ix
        .extents
        .iter()
        .filter(|(b, e)| e.level.is_none() && !w.found.contains_key(b))
        .map(|(&b, e)| (b, e))
        .collect();
    let mut repoint = Vec::new();
    for (&b, f) in &w.found {
        if f.level.is_some() || ix.extents.contains_key(&b) {
            continue;
        }
        let same: Vec<&(u64, &ExtentEntry)> = orphans
            .iter()
            .filter(|(_, e)| {
                e.listed.len() == f.refs.len()
                    && e.listed.iter().all(|(k, c)| f.refs.get(k) == Some(c))
            })
            .collect();
        let inodes: Vec<(u64, u64)> = f
            .refs
            .keys()
            .filter_map(|k| match *k {
                RefKey::Data(root, ino, _) => Some((root, ino)),
                _ => None,
            })
            .collect();
        if let [(to, e)] = same[..] {
            if inodes.len() == f.refs.len() && f.len <= e.len {
                repoint.push((b, *to, e.len, inodes));
            }
        }
    }
    for (from, to, len, inodes) in repoint {
        if ix.repointed.values().any(|r| r.0 == to) {
            continue; // claimed by another
        }
        let f = &w.found[&from];
        p.add_fix(
            format!("extent {from}"),
            format!(
                "data extent referred to by {} has no extent item; extent {to}, which \
                 nothing refers to, lists those references: pointed there",
                f.first
            ),
            Fix::RepointData {
                from,
                to,
                len,
                inodes,
            },
        );
        ix.repointed.insert(from, (to, len));
    }
    made_data_extents(fs, ix, w, p);
    let ix = &*ix;
    let mut found: Vec<_> = w.found.iter().collect();
    found.sort_by_key(|(b, _)| **b);
    for (&b, f) in found {
        let kind = |l: Option<u8>| {
            if l.is_some() {
                "tree block"
            } else {
                "data extent"
            }
        };
        let Some(e) = ix.get(b) else {
            if ix.made.iter().chain(&ix.made_data).any(|m| m.0 == b)
                || ix.repointed.contains_key(&b)
            {
                continue;
            }
            let refs: Vec<String> = f.refs.keys().take(3).map(|r| r.to_string()).collect();
            p.add(
                format!("extent {b}"),
                format!(
                    "{} referred to by {} ({}) has no extent item",
                    kind(f.level),
                    f.first,
                    refs.join(", ")
                ),
            );
            continue;
        };
        let here = || format!("extent item {}", e.key);
        if e.level.is_some() != f.level.is_some() {
            p.add(
                here(),
                format!(
                    "is a {} but {} refers to it as a {}",
                    kind(e.level),
                    f.first,
                    kind(f.level)
                ),
            );
            continue;
        }
        if e.level != f.level {
            p.add(
                here(),
                format!(
                    "level {:?} but the block is at level {:?}",
                    e.level, f.level
                ),
            );
        }
        if e.len != f.len {
            p.add(
                here(),
                format!("{} bytes but {} refers to {} bytes", e.len, f.first, f.len),
            );
        }
        for (rk, &have) in &f.refs {
            let listed = e.listed.get(rk).copied().unwrap_or(0);
            if listed != have {
                let what = format!("{rk}: {listed} listed but {have} found");
                // A data reference's count is set to what the file extent
                // items make; one not listed at all is not made (a file
                // extent pointed at another's data, say).
                match data_ref_count(b, e, rk, listed, have).filter(|_| listed > 0) {
                    Some(fix) => p.add_fix(here(), what, fix),
                    None => p.add(here(), what),
                }
            }
        }
        for (rk, &listed) in &e.listed {
            if !f.refs.contains_key(rk) {
                let what = format!("{rk}: {listed} listed but none found");
                // A data reference nothing makes is dropped (a repair runs
                // only when every tree was read whole: an unreadable one
                // is a problem it cannot repair).
                if let Some(fix) = data_ref_count(b, e, rk, listed, 0) {
                    p.add_fix(here(), what, fix);
                    continue;
                }
                let tree_backref = match *rk {
                    RefKey::Tree(root) => Some(Backref::Tree { root }),
                    RefKey::SharedBlock(parent) => Some(Backref::SharedBlock { parent }),
                    _ => None,
                };
                match (tree_backref, e.level) {
                    // A tree block no tree reaches (a leaf a repair takes
                    // out of its parent, a leaked block): its reference
                    // goes, and the block with its last.
                    (Some(backref), Some(level)) if listed == 1 => p.add_fix(
                        here(),
                        what,
                        Fix::DropTreeRef {
                            bytenr: b,
                            level,
                            backref,
                        },
                    ),
                    _ => p.add(here(), what),
                }
            }
        }
        // The item's refs are set to its references' sum; any count fix
        // above then changes both.
        let sum = e.listed.values().try_fold(0u64, |a, &c| a.checked_add(c));
        if sum != Some(e.refs) {
            let what = format!(
                "refs {} but its back references count {}",
                e.refs,
                sum.map_or("past 2^64".to_string(), |s| s.to_string())
            );
            match sum {
                Some(refs) => p.add_fix(here(), what, Fix::ExtentRefs { key: e.key, refs }),
                None => p.add(here(), what),
            }
        }
    }
    for (b, e) in &ix.extents {
        if e.level.is_none() {
            report.data_bytes_allocated += e.len;
        }
        if !w.found.contains_key(b) && !ix.repointed.values().any(|r| r.0 == *b) {
            let here = format!("extent item {}", e.key);
            // A tree block with one reference that no tree reaches (a
            // leaf a repair takes out of its parent, a leaked block) is
            // freed by dropping that reference.
            let only = (e.refs == 1 && e.listed.len() == 1)
                .then(|| e.listed.keys().next())
                .flatten();
            let backref = match (only, e.level) {
                (Some(&RefKey::Tree(root)), Some(_)) => Some(Backref::Tree { root }),
                (Some(&RefKey::SharedBlock(parent)), Some(_)) => {
                    Some(Backref::SharedBlock { parent })
                }
                _ => None,
            };
            match (backref, e.level) {
                (Some(backref), Some(level)) => p.add_fix(
                    here,
                    "nothing refers to it",
                    Fix::DropTreeRef {
                        bytenr: *b,
                        level,
                        backref,
                    },
                ),
                _ => p.add(here, "nothing refers to it"),
            }
        }
    }
}

/// Data extents that file extent items refer to but that have no extent
/// item (lost from the extent tree), where nothing else lies: inside a
/// data block group, sector-aligned, overlapping no extent item. The
/// repair makes their item from the references found, as btrfs check
/// rebuilds it. The later checks judge the range as taken: where the
/// free-space tree lists it free, or the data lacks the checksums its
/// files want, those problems have no fix and nothing is written.
fn made_data_extents(fs: &Filesystem, ix: &mut ExtentIndex, w: &Walk, p: &mut Problems) {
    let ss = fs.info.sectorsize as u64;
    let mut end_of_last = 0u64;
    // Only the few without an item, in address order.
    let mut lost: Vec<_> = w
        .found
        .iter()
        .filter(|(b, f)| {
            f.level.is_none() && !ix.extents.contains_key(b) && !ix.repointed.contains_key(b)
        })
        .collect();
    lost.sort_by_key(|(b, _)| **b);
    for (&b, f) in lost {
        let end = b.saturating_add(f.len);
        let in_group = ix
            .groups
            .range(..=b)
            .next_back()
            .is_some_and(|(&gs, (gl, bg))| end <= gs + gl && bg.flags & BG_DATA != 0);
        let before = ix.extents.range(..b).next_back();
        let after = ix.extents.range(b..).next();
        let clear = before.is_none_or(|(&s, e)| s + e.len <= b)
            && after.is_none_or(|(&s, _)| s >= end)
            && b >= end_of_last;
        let refs: Vec<(Backref, u64)> = f
            .refs
            .iter()
            .filter_map(|(rk, &c)| data_backref(rk).map(|r| (r, c)))
            .collect();
        if !(in_group
            && clear
            && b % ss == 0
            && f.len % ss == 0
            && f.len > 0
            && refs.len() == f.refs.len())
        {
            continue;
        }
        end_of_last = end;
        p.add_fix(
            format!("extent {b}"),
            format!(
                "data extent referred to by {} has no extent item; made again from the \
                 {} references found",
                f.first,
                refs.len()
            ),
            Fix::NewDataExtent {
                bytenr: b,
                len: f.len,
                refs,
            },
        );
        ix.made_data.push((b, f.len));
    }
}

/// The repair that takes data reference `rk` of extent `b` from `listed`
/// to `have` references; None for a tree block's, or for counts past
/// what one change holds (an image's count can be any u64).
fn data_ref_count(b: u64, e: &ExtentEntry, rk: &RefKey, listed: u64, have: u64) -> Option<Fix> {
    let backref = data_backref(rk).filter(|_| e.level.is_none())?;
    let delta = i64::try_from(have)
        .ok()?
        .checked_sub(i64::try_from(listed).ok()?)?;
    Some(Fix::DataRefCount {
        bytenr: b,
        len: e.len,
        backref,
        delta,
    })
}

/// The delayed-ref form of a data back reference.
fn data_backref(rk: &RefKey) -> Option<Backref> {
    match *rk {
        RefKey::Data(root, objectid, offset) => Some(Backref::Data {
            root,
            objectid,
            offset,
        }),
        RefKey::SharedData(parent) => Some(Backref::SharedData { parent }),
        _ => None,
    }
}

/// Extents within block groups of their kind, not overlapping; each
/// group's used bytes, its chunk, and the superblock's bytes_used.
pub(crate) fn check_block_groups(
    sb: &Superblock,
    ix: &ExtentIndex,
    chunks: &BTreeMap<u64, ChunkItem>,
    p: &mut Problems,
) {
    let groups = &ix.groups;
    let mut used: BTreeMap<u64, u64> = groups.keys().map(|&s| (s, 0)).collect();
    let mut last_end = 0u64;
    for (&s, e) in &ix.extents {
        let len = e.len;
        let kind = if e.level.is_none() {
            BG_DATA
        } else if e.listed.contains_key(&RefKey::Tree(CHUNK_TREE_OBJECTID)) {
            BG_SYSTEM
        } else {
            BG_METADATA | BG_SYSTEM
        };
        if s < last_end {
            p.add(
                format!("extent item {}", e.key),
                format!("overlaps the extent before, which ends at {last_end}"),
            );
        }
        last_end = last_end.max(s.saturating_add(len));
        match groups.range(..=s).next_back() {
            Some((&gs, (glen, bg))) if s.saturating_add(len) <= gs.saturating_add(*glen) => {
                if bg.flags & kind == 0 {
                    p.add(
                        format!("extent item {}", e.key),
                        format!("in block group {gs} of type {:#x}", bg.flags),
                    );
                }
                if let Some(u) = used.get_mut(&gs) {
                    *u += len;
                }
            }
            _ => p.add(format!("extent item {}", e.key), "in no block group"),
        }
    }
    for &(s, len) in ix.made.iter().chain(&ix.made_data) {
        if let Some((&gs, _)) = groups.range(..=s).next_back() {
            if let Some(u) = used.get_mut(&gs) {
                *u += len;
            }
        }
    }
    let mut total = 0u64;
    for (&gs, (glen, bg)) in groups {
        total = total.saturating_add(bg.used);
        if used[&gs] != bg.used {
            p.add_fix(
                format!("block group {gs}"),
                format!("used {} but its extents make {}", bg.used, used[&gs]),
                Fix::BlockGroupUsed {
                    start: gs,
                    used: used[&gs],
                },
            );
        }
        match chunks.get(&gs) {
            Some(c) if c.length == *glen && c.chunk_type == bg.flags => {}
            Some(c) => p.add(
                format!("block group {gs}"),
                format!(
                    "{glen} bytes of type {:#x} but its chunk has {} bytes of type {:#x}",
                    bg.flags, c.length, c.chunk_type
                ),
            ),
            None => p.add(format!("block group {gs}"), "no chunk"),
        }
    }
    for &cs in chunks.keys() {
        if !groups.contains_key(&cs) {
            p.add(format!("chunk {cs}"), "no block group");
        }
    }
    if total != sb.bytes_used {
        p.add_fix(
            "superblock",
            format!("bytes_used {} but block groups use {total}", sb.bytes_used),
            Fix::SuperBytesUsed,
        );
    }
}
