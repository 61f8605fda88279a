//! The incremental send (`-p PARENT`).
//!
//! 1. Compare the two trees (skipping shared subtrees) and collect, per
//!    inode, what changed: the inode item, its names, xattrs, extents.
//! 2. Remove every name that exists in the parent but not in the send
//!    snapshot, deepest directories first: unlink files, remove directories
//!    (empty by then), and move surviving inodes that lose their last name
//!    either straight to a new name (when it is free, its directory exists
//!    and no cycle forms) or to an orphan name in the top directory.
//! 3. Process the changed and new inodes in inode order: create new ones
//!    under orphan names, give each its new names (rename from the orphan
//!    name, or link), then xattrs, data, size, owner, mode, times.
//!
//! Names are compared with the parent directory's generation, so a
//! directory deleted and re-created with the same inode number counts as
//! a different directory.

use super::compare::{compare_trees, Change};
use super::full::feed_new_item;
use super::{Cur, Loc, RootInfo, Sender};
use crate::ctree::Cursor;
use crate::data::extent::Extent;
use crate::error::{Error, FormatContext, Result};
use std::collections::{BTreeMap, HashMap};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::InodeItem;
use ubtrfs_format::key::Key;

#[derive(Default, Debug)]
struct InodeDiff {
    left: Option<InodeItem>,
    right: Option<InodeItem>,
    left_known: bool,
    right_known: bool,
    item_changed: bool,
    refs_changed: bool,
    xattrs_changed: bool,
    /// Offsets of extent items new or changed in the send snapshot.
    ext_left: Vec<u64>,
    /// Offsets of extent items deleted or changed from the parent.
    ext_right: Vec<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Same inode in both (same generation).
    Changed,
    /// Only in the send snapshot.
    New,
    /// The parent's inode was deleted and the number reused.
    NewGen,
    /// Only in the parent.
    Deleted,
}

/// A name: directory inode, directory generation, entry name.
type Edge = (u64, u64, Vec<u8>);

pub(crate) fn incremental_send(s: &mut Sender) -> Result<()> {
    let parent = s.parent.clone().expect("parent");
    // ---------------------------------------------------------------- 1
    let mut diffs = collect_diffs(s, &parent)?;
    let kinds = classify(s, &parent, &mut diffs)?;
    // ---------------------------------------------------------------- 2
    let mut plan = plan_removals(s, &kinds, &diffs)?;
    remove_old_names(s, &mut plan)?;

    // ---------------------------------------------------------------- 3
    for (&ino, &k) in &kinds {
        let d = diffs.remove(&ino).unwrap_or_default();
        match k {
            Kind::Deleted => {}
            Kind::New | Kind::NewGen => process_new_inode(s, ino)?,
            Kind::Changed => process_changed_inode(s, ino, d, &plan)?,
        }
    }
    // Directories that could not be removed in step 2 (under their orphan
    // names in the top directory) are empty now.
    for (_, orphan) in std::mem::take(&mut plan.rmdir_later) {
        s.send_rmdir(&orphan)?;
        s.dirty_dir(FIRST_INODE)?;
    }
    Ok(())
}

/// Step 1, the compare: what differs, per inode, between the send tree
/// and the parent's (with both inode items of every inode that differs).
fn collect_diffs(s: &Sender, parent: &RootInfo) -> Result<BTreeMap<u64, InodeDiff>> {
    let fs = s.fs;
    let mut diffs: BTreeMap<u64, InodeDiff> = BTreeMap::new();
    let left_tree = s.send.tree;
    // An unchanged inode item, kept in case a later item of the inode
    // differs.
    let mut same_item: Option<(u64, InodeItem)> = None;
    compare_trees(
        &fs.info,
        left_tree,
        parent.tree,
        s.opts.readahead != crate::cache::reada::Readahead::None,
        |k, c, l, r| {
            let ino = k.objectid;
            if !(FIRST_INODE..=LAST_FREE_OBJECTID).contains(&ino) {
                return Ok(());
            }
            match k.item_type {
                INODE_ITEM if c == Change::Same => {
                    let l = l.expect("same item has both sides");
                    same_item = Some((
                        ino,
                        InodeItem::parse(l).at(|| format!("{} key {k}", left_tree.describe()))?,
                    ));
                }
                INODE_ITEM => {
                    let d = diffs.entry(ino).or_default();
                    if let Some(l) = l {
                        d.left = Some(
                            InodeItem::parse(l)
                                .at(|| format!("{} key {k}", left_tree.describe()))?,
                        );
                    }
                    if let Some(r) = r {
                        d.right = Some(
                            InodeItem::parse(r)
                                .at(|| format!("{} key {k}", parent.tree.describe()))?,
                        );
                    }
                    d.left_known = true;
                    d.right_known = true;
                    d.item_changed = true;
                }
                INODE_REF | INODE_EXTREF if c != Change::Same => {
                    diff_entry(&mut diffs, ino, same_item).refs_changed = true;
                }
                XATTR_ITEM if c != Change::Same => {
                    diff_entry(&mut diffs, ino, same_item).xattrs_changed = true;
                }
                EXTENT_DATA if c != Change::Same => {
                    let d = diff_entry(&mut diffs, ino, same_item);
                    if matches!(c, Change::New | Change::Changed) {
                        d.ext_left.push(k.offset);
                    }
                    if matches!(c, Change::Deleted | Change::Changed) {
                        d.ext_right.push(k.offset);
                    }
                }
                _ => {}
            }
            Ok(())
        },
    )?;
    for (&ino, d) in diffs.iter_mut() {
        if !d.left_known {
            d.left = fs.inode_item_in(s.send.tree, ino)?;
            d.left_known = true;
        }
        if !d.right_known {
            d.right = fs.inode_item_in(parent.tree, ino)?;
            d.right_known = true;
        }
    }
    Ok(diffs)
}

/// What an inode that differs is: changed, new, re-created (a new
/// generation) or deleted; None for one in neither tree.
fn kind_of(ino: u64, d: &InodeDiff) -> Option<Kind> {
    let l = d.left.filter(|i| i.nlink > 0);
    let r = d.right.filter(|i| i.nlink > 0);
    match (l, r) {
        (Some(l), Some(r)) if l.generation == r.generation || ino == FIRST_INODE => {
            Some(Kind::Changed)
        }
        (Some(_), Some(_)) => Some(Kind::NewGen),
        (Some(_), None) => Some(Kind::New),
        (None, Some(_)) => Some(Kind::Deleted),
        (None, None) => None,
    }
}

/// Step 1, the classification of the inodes that differ (and of the
/// children of re-created directories), noted in the sender's sets.
fn classify(
    s: &mut Sender,
    parent: &RootInfo,
    diffs: &mut BTreeMap<u64, InodeDiff>,
) -> Result<BTreeMap<u64, Kind>> {
    let fs = s.fs;
    let mut kinds: BTreeMap<u64, Kind> = BTreeMap::new();
    for (&ino, d) in diffs.iter() {
        if let Some(k) = kind_of(ino, d) {
            kinds.insert(ino, k);
        }
    }
    // Children of re-created directories keep byte-identical refs but live
    // in a different directory: their names change too.
    let regen_dirs: Vec<u64> = kinds
        .iter()
        .filter(|(ino, k)| **k == Kind::NewGen && is_dir(diffs[ino].left.as_ref()))
        .map(|(i, _)| *i)
        .collect();
    for dir in regen_dirs {
        for (_, loc) in fs.dir_entries_in(s.send.tree, dir)? {
            if loc.item_type != INODE_ITEM {
                continue;
            }
            let child = loc.objectid;
            if kinds.contains_key(&child) {
                diffs.get_mut(&child).unwrap().refs_changed = true;
                continue;
            }
            let left = fs.inode_item_in(s.send.tree, child)?;
            let right = fs.inode_item_in(parent.tree, child)?;
            let d = InodeDiff {
                left,
                right,
                left_known: true,
                right_known: true,
                refs_changed: true,
                ..Default::default()
            };
            if let Some(k) = kind_of(child, &d) {
                kinds.insert(child, k);
                diffs.insert(child, d);
            }
        }
    }
    s.n_changed = kinds.len() as u64;
    for (&ino, &k) in &kinds {
        match k {
            Kind::Changed => {
                if diffs[&ino].refs_changed {
                    s.ref_changed.insert(ino);
                }
                s.to_process.insert(ino);
            }
            Kind::New | Kind::NewGen => {
                s.ref_changed.insert(ino);
                s.new_inodes.insert(ino);
                s.to_process.insert(ino);
            }
            Kind::Deleted => {
                s.ref_changed.insert(ino);
            }
        }
    }
    Ok(kinds)
}

/// Step 2's plan: the old and new names of every inode whose parent-tree
/// names go away or change.
fn plan_removals(
    s: &mut Sender,
    kinds: &BTreeMap<u64, Kind>,
    diffs: &BTreeMap<u64, InodeDiff>,
) -> Result<Plan> {
    let mut plan = Plan::default();
    for (&ino, &k) in kinds {
        let d = &diffs[&ino];
        let old_relevant =
            matches!(k, Kind::Deleted | Kind::NewGen) || (k == Kind::Changed && d.refs_changed);
        if old_relevant {
            let old_edges = edges(s, ino, true)?;
            let new_edges = if k == Kind::Changed {
                edges(s, ino, false)?
            } else {
                Vec::new()
            };
            let deleted = k != Kind::Changed;
            let old_ii = d.right.unwrap();
            plan.add(ino, old_ii, deleted, old_edges, new_edges);
        }
    }
    Ok(plan)
}

/// The record of `ino`, created with the inode item seen unchanged just
/// before if it was this inode's.
fn diff_entry(
    diffs: &mut BTreeMap<u64, InodeDiff>,
    ino: u64,
    same_item: Option<(u64, InodeItem)>,
) -> &mut InodeDiff {
    let d = diffs.entry(ino).or_default();
    if let Some((i, ii)) = same_item {
        if i == ino && !d.left_known {
            d.left = Some(ii);
            d.right = Some(ii);
            d.left_known = true;
            d.right_known = true;
        }
    }
    d
}

fn is_dir(ii: Option<&InodeItem>) -> bool {
    ii.is_some_and(|i| i.mode & 0o170000 == 0o040000)
}

/// The names of `ino` in the parent (`old`) or the send snapshot, each with
/// its directory's generation in that snapshot.
fn edges(s: &mut Sender, ino: u64, old: bool) -> Result<Vec<Edge>> {
    let tree = if old {
        s.parent.as_ref().unwrap().tree
    } else {
        s.send.tree
    };
    let refs = s.fs.refs_in(tree, ino)?;
    let mut out = Vec::with_capacity(refs.len());
    for (p, name) in refs {
        let g = dir_gen(s, p, old)?;
        out.push((p, g, name));
    }
    Ok(out)
}

fn dir_gen(s: &mut Sender, dir: u64, old: bool) -> Result<u64> {
    let tree = if old {
        s.parent.as_ref().unwrap().tree
    } else {
        s.send.tree
    };
    Ok(s.fs
        .inode_item_in(tree, dir)?
        .map(|i| i.generation)
        .unwrap_or(0))
}

#[derive(Default)]
struct Plan {
    /// (depth of the directory in the parent, ino, edge) to remove.
    removals: Vec<(u64, u64, Edge)>,
    info: HashMap<u64, OldInode>,
    /// Deleted directories moved aside because they were not empty yet,
    /// with their orphan names.
    rmdir_later: Vec<(u64, Vec<u8>)>,
}

struct OldInode {
    ii: InodeItem,
    deleted: bool,
    /// Names the inode has at the receiver now.
    current: Vec<Edge>,
    new_edges: Vec<Edge>,
}

impl Plan {
    fn add(&mut self, ino: u64, ii: InodeItem, deleted: bool, old: Vec<Edge>, new: Vec<Edge>) {
        for e in &old {
            if deleted || !new.contains(e) {
                self.removals.push((0, ino, e.clone()));
            }
        }
        self.info.insert(
            ino,
            OldInode {
                ii,
                deleted,
                current: old,
                new_edges: new,
            },
        );
    }
}

/// Depth of directory `dir` in the parent snapshot (the top is 0).
fn old_depth(s: &mut Sender, dir: u64, cache: &mut HashMap<u64, u64>) -> Result<u64> {
    let mut chain = Vec::new();
    let mut cur = dir;
    let mut base = 0;
    for _ in 0..4096 {
        if cur == FIRST_INODE {
            break;
        }
        if let Some(&d) = cache.get(&cur) {
            base = d;
            break;
        }
        chain.push(cur);
        let tree = s.parent.as_ref().unwrap().tree;
        match s.fs.first_ref(tree, cur)? {
            Some((p, _)) => cur = p,
            None => break,
        }
    }
    let mut d = base;
    for &c in chain.iter().rev() {
        d += 1;
        cache.insert(c, d);
    }
    Ok(cache.get(&dir).copied().unwrap_or(0))
}

/// Unlinks name `edge` of `ino` (at `path`): the receiver finds the inode
/// under its first remaining name from then on.
fn unlink_name(s: &mut Sender, plan: &mut Plan, ino: u64, edge: &Edge, path: &[u8]) -> Result<()> {
    s.send_unlink(path)?;
    let info = plan.info.get_mut(&ino).unwrap();
    info.current.retain(|e| e != edge);
    match info.current.first() {
        Some(e) => s.loc.insert(ino, Loc::named(e.0, e.2.clone())),
        None => s.loc.remove(&ino),
    };
    Ok(())
}

/// Step 2: every name of the parent that the send snapshot does not have
/// goes away, children before their directories.
fn remove_old_names(s: &mut Sender, plan: &mut Plan) -> Result<()> {
    let mut depth_cache = HashMap::new();
    let mut removals = std::mem::take(&mut plan.removals);
    for r in removals.iter_mut() {
        r.0 = old_depth(s, r.2 .0, &mut depth_cache)?;
    }
    // Deepest directories first; in one directory the names that go away
    // with their inode first, so that moves find their new names free.
    let survives = |ino: &u64| !plan.info.get(ino).is_some_and(|i| i.deleted);
    removals.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(survives(&a.1).cmp(&survives(&b.1)))
            .then(a.1.cmp(&b.1))
            .then(a.2.cmp(&b.2))
    });
    // Entries of the parent's directories at the receiver still to go.
    let mut children_left: HashMap<u64, usize> = HashMap::new();
    // Names freed or taken at the receiver during this step.
    let mut occ: HashMap<(u64, Vec<u8>), Option<u64>> = HashMap::new();
    let ptree = s.parent.as_ref().unwrap().tree;
    for (_, ino, edge) in removals {
        let (dir, _dgen, name) = edge.clone();
        let info = plan.info.get(&ino).expect("planned inode");
        let deleted = info.deleted;
        let gen = info.ii.generation;
        let dir_inode = info.ii.mode & 0o170000 == 0o040000;
        let dpath = s.path(dir)?;
        let path = Sender::join(&dpath, &name);
        occ.insert((dir, name.clone()), None);
        let surviving_dir =
            !s.new_inodes.contains(&dir) && !plan.info.get(&dir).is_some_and(|i| i.deleted);
        if deleted {
            if dir_inode {
                let left = match children_left.get(&ino) {
                    Some(&n) => n,
                    None => count_children(s, ino)?,
                };
                if left == 0 {
                    s.send_rmdir(&path)?;
                    s.forget_dirty(ino);
                    s.loc.remove(&ino);
                } else {
                    let o = s.orphan_name(ino, gen)?;
                    s.send_rename(&path, &o)?;
                    s.loc.remove(&ino);
                    s.forget_dirty(ino);
                    plan.rmdir_later.push((ino, o));
                    s.dirty_dir(FIRST_INODE)?;
                }
            } else {
                unlink_name(s, plan, ino, &edge, &path)?;
            }
        } else {
            let info = plan.info.get(&ino).unwrap();
            let kept = info
                .current
                .iter()
                .any(|e| info.new_edges.contains(e) && *e != edge);
            let last = info.current.len() <= 1;
            if dir_inode || (last && !kept) {
                // It needs a name: a new one now if possible, else an orphan.
                let target = info
                    .new_edges
                    .iter()
                    .find(|e| !info.current.contains(e))
                    .cloned();
                let direct = match &target {
                    Some(t) => can_move_now(s, ino, dir_inode, t, &occ, plan, ptree)?,
                    None => false,
                };
                if let (true, Some(t)) = (direct, target) {
                    let tdir = s.path(t.0)?;
                    let to = Sender::join(&tdir, &t.2);
                    s.send_rename(&path, &to)?;
                    occ.insert((t.0, t.2.clone()), Some(ino));
                    s.loc.insert(ino, Loc::named(t.0, t.2.clone()));
                    let info = plan.info.get_mut(&ino).unwrap();
                    info.current = vec![t.clone()];
                    s.dirty_dir(t.0)?;
                } else {
                    let o = s.orphan_name(ino, gen)?;
                    s.send_rename(&path, &o)?;
                    occ.insert((FIRST_INODE, o.clone()), Some(ino));
                    s.loc.insert(ino, Loc::orphan(o));
                    plan.info.get_mut(&ino).unwrap().current.clear();
                    s.dirty_dir(FIRST_INODE)?;
                }
            } else {
                unlink_name(s, plan, ino, &edge, &path)?;
            }
        }
        if surviving_dir {
            s.dirty_dir(dir)?;
        }
        let n = match children_left.get(&dir) {
            Some(&n) => n,
            None => count_children(s, dir)?,
        };
        children_left.insert(dir, n.saturating_sub(1));
        s.trim_dirty()?;
    }
    s.cur.path = None;
    Ok(())
}

/// Entries (inodes, not subvolume links) of directory `dir` in the parent.
fn count_children(s: &Sender, dir: u64) -> Result<usize> {
    let tree = s.parent.as_ref().unwrap().tree;
    Ok(s.fs
        .dir_entries_in(tree, dir)?
        .iter()
        .filter(|(_, l)| l.item_type == INODE_ITEM)
        .count())
}

/// Whether `ino` can be renamed to its new name `t` right now.
fn can_move_now(
    s: &mut Sender,
    ino: u64,
    is_dir: bool,
    t: &Edge,
    occ: &HashMap<(u64, Vec<u8>), Option<u64>>,
    plan: &Plan,
    ptree: crate::ctree::Tree,
) -> Result<bool> {
    let (tdir, tgen, tname) = t;
    // The directory must exist at the receiver: the top, or a directory of
    // the parent that survives with the same generation.
    if *tdir != FIRST_INODE {
        if s.new_inodes.contains(tdir) || plan.info.get(tdir).is_some_and(|i| i.deleted) {
            return Ok(false);
        }
        let g = dir_gen(s, *tdir, true)?;
        if g != *tgen {
            return Ok(false);
        }
    }
    // The name must be free now.
    match occ.get(&(*tdir, tname.clone())) {
        Some(Some(_)) => return Ok(false),
        Some(None) => {}
        None => {
            if let Some(l) = s.fs.dir_lookup_in(ptree, *tdir, tname)? {
                if l.item_type == INODE_ITEM {
                    return Ok(false);
                }
            }
        }
    }
    // A directory must not move below itself.
    if is_dir {
        let mut cur = *tdir;
        for _ in 0..4096 {
            if cur == ino {
                return Ok(false);
            }
            if cur == FIRST_INODE {
                break;
            }
            cur = s.location(cur)?.0;
        }
    }
    Ok(true)
}

/// Step 3 for an inode new in the send snapshot: all its items, as in a
/// full send.
fn process_new_inode(s: &mut Sender, ino: u64) -> Result<()> {
    let fs = s.fs;
    // No readahead here: the compare has just read these leaves.
    let mut c = Cursor::new(&fs.info, s.send.tree);
    if c.seek(&Key::new(ino, INODE_ITEM, 0))? {
        while let Some((k, d)) = c.item() {
            if k.objectid != ino {
                break;
            }
            feed_new_item(s, &k, d)?;
            if !c.next()? {
                break;
            }
        }
    }
    s.finish_cur()
}

/// Step 3 for an inode in both snapshots.
fn process_changed_inode(s: &mut Sender, ino: u64, d: InodeDiff, plan: &Plan) -> Result<()> {
    let left = d.left.expect("changed inode in the send snapshot");
    s.cur = Cur {
        active: true,
        ino,
        ii: left,
        new: false,
        old: d.right,
        ..Default::default()
    };
    s.progress = ino;
    s.n_inodes += 1;
    // Names.
    if let Some(info) = plan.info.get(&ino) {
        let has_name = !info.current.is_empty();
        let todo: Vec<(u64, Vec<u8>)> = info
            .new_edges
            .iter()
            .filter(|e| !info.current.contains(e))
            .map(|e| (e.0, e.2.clone()))
            .collect();
        s.place_refs(&todo, has_name)?;
    }
    s.refs_processed();
    // Xattrs.
    if d.xattrs_changed {
        let ptree = s.parent.as_ref().unwrap().tree;
        let new = s.fs.xattrs_in(s.send.tree, ino)?;
        let old = s.fs.xattrs_in(ptree, ino)?;
        for (name, data) in &new {
            if name == b"security.capability" {
                continue;
            }
            let same = old.iter().any(|(n, v)| n == name && v == data);
            if !same {
                let p = s.cur_path()?;
                s.send_set_xattr(&p, name, data)?;
            }
        }
        for (name, _) in &old {
            if !new.iter().any(|(n, _)| n == name) {
                let p = s.cur_path()?;
                s.send_remove_xattr(&p, name)?;
            }
        }
    }
    // Data.
    if s.cur.is_reg() && (!d.ext_left.is_empty() || !d.ext_right.is_empty()) {
        changed_extents(s, &d)?;
    }
    s.finish_cur()
}

/// Extent items of `ino` in `tree` overlapping `[start, end)`.
fn extents_in(
    s: &Sender,
    tree: crate::ctree::Tree,
    ino: u64,
    start: u64,
    end: u64,
) -> Result<Vec<Extent>> {
    let mut out = Vec::new();
    let mut c = Cursor::new(&s.fs.info, tree);
    let mut ok = c.seek_le(&Key::new(ino, EXTENT_DATA, start))?;
    if !ok
        || c.key()
            .is_some_and(|k| k.objectid != ino || k.item_type != EXTENT_DATA)
    {
        ok = c.seek(&Key::new(ino, EXTENT_DATA, start))?;
    }
    while ok {
        let Some((k, d)) = c.item() else { break };
        if k.objectid != ino || k.item_type != EXTENT_DATA || k.offset >= end {
            break;
        }
        let e = s.decode_extent(tree, &k, d)?;
        if e.end > start {
            out.push(e);
        }
        ok = c.next()?;
    }
    Ok(out)
}

/// Data changes of a regular file in both snapshots: changed extents are
/// sent (clones from the parent where the data is shared), ranges that
/// became holes where the receiver has data are punched.
fn changed_extents(s: &mut Sender, d: &InodeDiff) -> Result<()> {
    let ino = s.cur.ino;
    let ptree = s.parent.as_ref().unwrap().tree;
    let stree = s.send.tree;
    let new_size = s.cur.ii.size;
    let old_size = s.cur.old.map(|o| o.size).unwrap_or(0);
    // Ranges touched by changed items on either side.
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut left_exts: Vec<Extent> = Vec::new();
    for &off in &d.ext_left {
        let e = extents_in(s, stree, ino, off, off + 1)?
            .into_iter()
            .find(|e| e.start == off)
            .ok_or_else(|| {
                Error::corrupt(
                    format!("{} inode {ino}", stree.describe()),
                    "extent item vanished",
                )
            })?;
        ranges.push((e.start, e.end));
        left_exts.push(e);
    }
    for &off in &d.ext_right {
        if let Some(e) = extents_in(s, ptree, ino, off, off + 1)?
            .into_iter()
            .find(|e| e.start == off)
        {
            ranges.push((e.start, e.end));
        }
    }
    let merged = crate::data::ranges::merged(ranges);
    // Changed data.
    for e in &left_exts {
        if !e.is_data() {
            continue;
        }
        if e.start >= new_size {
            continue;
        }
        if !e.is_inline() && extent_unchanged(s, e, ptree, old_size)? {
            continue;
        }
        s.send_extent(e)?;
    }
    // Holes where the receiver has data.
    let limit = new_size.min(old_size);
    for (a, b) in merged {
        let (a, b) = (a.min(limit), b.min(limit));
        if a >= b {
            continue;
        }
        let news = extents_in(s, stree, ino, a, b)?;
        let olds = extents_in(s, ptree, ino, a, b)?;
        let mut holes = Vec::new();
        let mut pos = a;
        for e in news.iter().filter(|e| e.is_data()) {
            if e.start > pos {
                holes.push((pos, e.start.min(b)));
            }
            pos = pos.max(e.end);
            if pos >= b {
                break;
            }
        }
        if pos < b {
            holes.push((pos, b));
        }
        for (h0, h1) in holes {
            for o in olds.iter().filter(|o| o.is_data()) {
                let (x0, x1) = (h0.max(o.start), h1.min(o.end));
                if x0 < x1 {
                    s.send_hole(x0, x1)?;
                }
            }
        }
    }
    Ok(())
}

/// Whether the parent maps the range of regular extent `e` to the same
/// bytes of the same extent (same generation), within its old size.
fn extent_unchanged(
    s: &Sender,
    e: &Extent,
    ptree: crate::ctree::Tree,
    old_size: u64,
) -> Result<bool> {
    let Some((db, _, eoff, _)) = e.regular() else {
        return Ok(false);
    };
    let end = e.end.min(s.cur.ii.size);
    if end > old_size {
        return Ok(false);
    }
    let olds = extents_in(s, ptree, s.cur.ino, e.start, end)?;
    let mut pos = e.start;
    for o in olds {
        if o.start > pos {
            return Ok(false);
        }
        let same = match o.regular() {
            Some((odb, _, ooff, _)) => {
                odb == db
                    && o.compression == e.compression
                    && o.generation == e.generation
                    && o.start.wrapping_sub(ooff) == e.start.wrapping_sub(eoff)
            }
            _ => false,
        };
        if !same {
            return Ok(false);
        }
        pos = o.end;
        if pos >= end {
            return Ok(true);
        }
    }
    Ok(pos >= end)
}
