//! The walk of every tree block, each once however many trees share it,
//! and the references the blocks make.
//!
//! A block's references to its children and to data extents are recorded
//! as the kernel records them (`btrfs_inc_ref`): by the block's owner
//! (TREE_BLOCK_REF root, EXTENT_DATA_REF root/inode/offset) or, when the
//! block's extent item has FULL_BACKREF, by the block's own bytenr
//! (SHARED_BLOCK_REF, SHARED_DATA_REF). So the references do not depend
//! on which tree the walk came from, and a block shared by snapshots is
//! read and counted once (btrfs-progs' original mode does the same).

use super::extents::ExtentIndex;
use super::{is_fs_tree, Fix, Problems};
use crate::ctree::Tree;
use crate::fs::Filesystem;
use crate::tree::block::BlockExpect;
use std::collections::{BTreeMap, HashMap, HashSet};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{
    FileExtent, FileExtentKind, InlineRef, RootItem, BLOCK_FLAG_FULL_BACKREF,
};
use ubtrfs_format::Key;

/// A reference to an extent, as its back reference names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum RefKey {
    /// TREE_BLOCK_REF: referenced by a block of tree `0`.
    Tree(u64),
    /// SHARED_BLOCK_REF: referenced by the node at `0`.
    SharedBlock(u64),
    /// EXTENT_DATA_REF: by file items of (tree, inode, file offset less
    /// the extent offset).
    Data(u64, u64, u64),
    /// SHARED_DATA_REF: by file items of the leaf at `0`.
    SharedData(u64),
}

impl RefKey {
    /// The reference an inline or keyed back reference names, and how
    /// many it counts; None for one that is not a reference (an owner).
    pub(crate) fn of(r: &InlineRef) -> Option<(RefKey, u64)> {
        Some(match *r {
            InlineRef::TreeBlock { root } => (RefKey::Tree(root), 1),
            InlineRef::SharedBlock { parent } => (RefKey::SharedBlock(parent), 1),
            InlineRef::ExtentData(d) => {
                (RefKey::Data(d.root, d.objectid, d.offset), d.count as u64)
            }
            InlineRef::SharedData { parent, count } => (RefKey::SharedData(parent), count as u64),
            InlineRef::ExtentOwner { .. } => return None,
        })
    }
}

impl std::fmt::Display for RefKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefKey::Tree(r) => write!(f, "tree block ref (root {r})"),
            RefKey::SharedBlock(p) => write!(f, "shared block ref (parent {p})"),
            RefKey::Data(r, o, off) => {
                write!(f, "data ref (root {r} inode {o} offset {off})")
            }
            RefKey::SharedData(p) => write!(f, "shared data ref (parent {p})"),
        }
    }
}

/// One reachable tree block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockInfo {
    pub owner: u64,
}

/// An extent as the trees refer to it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Found {
    /// A tree block's level; None for data.
    pub level: Option<u8>,
    /// Its length on disk (a data extent's disk_num_bytes).
    pub len: u64,
    pub refs: BTreeMap<RefKey, u64>,
    /// Where it was first referred to, for messages.
    pub first: Referrer,
}

/// What refers to an extent: a tree's root, a node, or an item of a
/// leaf (kept as numbers: named only in a message).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Referrer {
    pub tree: u64,
    /// The referring block; 0 for the tree's root pointer.
    pub block: u64,
    pub key: Option<Key>,
}

impl std::fmt::Display for Referrer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = crate::ctree::describe_tree(self.tree);
        match (self.block, self.key) {
            (0, _) => write!(f, "{t} root"),
            (b, Some(k)) => write!(f, "{t}: key {k} in leaf {b}"),
            (b, None) => write!(f, "{t}: block {b}"),
        }
    }
}

/// What the walk found.
#[derive(Default)]
pub(crate) struct Walk {
    pub blocks: HashMap<u64, BlockInfo>,
    pub found: HashMap<u64, Found>,
    /// File bytes referring to data extents (num_bytes summed).
    pub data_referenced: u64,
    /// Leaves of subvolume trees that do not read (below a root): address
    /// and why. The check runs again without them (see
    /// [`crate::disk_io::FsInfo::drop_leaves`]).
    pub unreadable_leaves: Vec<(u64, String)>,
}

impl Walk {
    fn add_ref(
        &mut self,
        p: &mut Problems,
        bytenr: u64,
        level: Option<u8>,
        len: u64,
        r: RefKey,
        at: Referrer,
    ) {
        let f = self.found.entry(bytenr).or_insert_with(|| Found {
            level,
            len,
            refs: BTreeMap::new(),
            first: at,
        });
        if f.level != level || f.len != len {
            let what = |l: Option<u8>, n: u64| match l {
                Some(l) => format!("a tree block at level {l}"),
                None => format!("a data extent of {n} bytes"),
            };
            p.add(
                at.to_string(),
                format!(
                    "refers to {bytenr} as {}, but {} refers to it as {}",
                    what(level, len),
                    f.first,
                    what(f.level, f.len)
                ),
            );
        }
        *f.refs.entry(r).or_default() += 1;
    }
}

/// Walks every tree in `roots` (each with its ROOT_ITEM, if it has one).
pub(crate) fn walk(
    fs: &Filesystem,
    roots: &[(Tree, Option<RootItem>)],
    index: &ExtentIndex,
    p: &mut Problems,
) -> Walk {
    let info = &fs.info;
    let mut w = Walk::default();
    let ns = info.nodesize as u64;
    let mut bad: HashSet<u64> = HashSet::new();
    let mut visited = 0u64;
    for (t, item) in roots {
        let name = t.describe();
        if t.bytenr == 0 {
            p.add(name, "root block at bytenr 0");
            continue;
        }
        // A subvolume being deleted: blocks left of drop_progress (at
        // drop_level) are already freed.
        let drop = item
            .as_ref()
            .filter(|r| r.drop_progress.objectid != 0 || r.drop_level != 0)
            .map(|r| (r.drop_progress, r.drop_level));
        // A relocation tree's blocks are all referred to by parent, its
        // root by itself.
        let root_ref = if t.id == TREE_RELOC_OBJECTID {
            RefKey::SharedBlock(t.bytenr)
        } else {
            RefKey::Tree(t.id)
        };
        let at = Referrer {
            tree: t.id,
            ..Default::default()
        };
        w.add_ref(p, t.bytenr, Some(t.level), ns, root_ref, at);
        let mut stack = vec![(t.bytenr, t.root_expect(), true)];
        while let Some((bytenr, expect, is_root)) = stack.pop() {
            if w.blocks.contains_key(&bytenr) || bad.contains(&bytenr) {
                continue;
            }
            // A block whose only fault is its generation (its parent's
            // pointer wants another) is read as it is, as btrfs check
            // ignores a transid failure, and its repair copies it on write.
            let mut wrong_gen = None;
            let tb = match info.read_tree_block(bytenr, expect) {
                Ok(b) => b,
                Err(e) => {
                    let loose = BlockExpect {
                        generation: None,
                        ..expect
                    };
                    match info.read_tree_block(bytenr, loose) {
                        Ok(b) if expect.generation.is_some_and(|g| g != b.header.generation) => {
                            wrong_gen = expect.generation;
                            b
                        }
                        _ => {
                            p.add(
                                format!("{name}: block {bytenr}"),
                                format!("unreadable: {e}"),
                            );
                            if is_fs_tree(t.id) && !is_root && expect.level == Some(0) {
                                w.unreadable_leaves.push((bytenr, e.to_string()));
                            }
                            bad.insert(bytenr);
                            continue;
                        }
                    }
                }
            };
            visited += 1;
            if visited.is_multiple_of(1024) {
                p.progress("tree blocks", visited);
            }
            let h = tb.header;
            let here = || format!("{name}: block {bytenr} (level {})", h.level);
            w.blocks.insert(bytenr, BlockInfo { owner: h.owner });
            if let Some((what, drops)) = info.mended(bytenr) {
                let n = tb.node().nritems();
                let key = if n > 0 { tb.node().key(0) } else { Key::MIN };
                p.add_fix(here(), what, Fix::MendBlock { bytenr, key, drops });
            }
            let owner_ok = if is_fs_tree(t.id) && !is_root {
                is_fs_tree(h.owner)
            } else {
                h.owner == t.id || (t.id == TREE_RELOC_OBJECTID)
            };
            if !owner_ok {
                p.add(here(), format!("owner {} in {name}", h.owner));
            }
            let node = tb.node();
            let n = node.nritems();
            let cowable = |relax| {
                (h.generation != 0
                    && t.id != TREE_LOG_OBJECTID
                    && t.id != TREE_RELOC_OBJECTID
                    && drop.is_none())
                .then(|| Fix::CowBlock {
                    tree: t.id,
                    key: if n > 0 { node.key(0) } else { Key::MIN },
                    relax,
                })
            };
            if let Some(want) = wrong_gen {
                let what = format!("generation {} but its parent expects {want}", h.generation);
                match cowable(Some((bytenr, h.level))) {
                    Some(fix) => p.add_fix(here(), what, fix),
                    None => p.add(here(), what),
                }
            } else if h.generation == 0 || h.generation > info.sb.generation {
                let what = format!(
                    "generation {} (superblock {})",
                    h.generation, info.sb.generation
                );
                // A block from the future (its parent agreeing) is copied
                // on write: the copy has this commit's generation. Not in
                // a log or relocation tree, or a tree being deleted.
                match cowable(None) {
                    Some(fix) => p.add_fix(here(), what, fix),
                    None => p.add(here(), what),
                }
            }
            if n == 0 && !(is_root && h.level == 0) {
                p.add(here(), "empty");
            }
            for i in 1..n {
                if node.key(i - 1) >= node.key(i) {
                    p.add(
                        here(),
                        format!(
                            "key {} at slot {i} not above {}",
                            node.key(i),
                            node.key(i - 1)
                        ),
                    );
                }
            }
            let full = index
                .get(bytenr)
                .is_some_and(|e| e.flags & BLOCK_FLAG_FULL_BACKREF != 0)
                || h.flags & HEADER_FLAG_RELOC != 0
                || t.id == TREE_RELOC_OBJECTID;
            if h.level > 0 {
                let refkey = if full {
                    RefKey::SharedBlock(bytenr)
                } else {
                    RefKey::Tree(h.owner)
                };
                for i in (0..n).rev() {
                    let kp = node.key_ptr(i);
                    if let Some((progress, dl)) = drop {
                        if dropped(&node, i, h.level, progress, dl) {
                            continue;
                        }
                    }
                    let at = Referrer {
                        tree: t.id,
                        block: bytenr,
                        key: None,
                    };
                    w.add_ref(p, kp.blockptr, Some(h.level - 1), ns, refkey, at);
                    stack.push((
                        kp.blockptr,
                        BlockExpect {
                            level: Some(h.level - 1),
                            generation: Some(kp.generation),
                            first_key: Some(kp.key),
                        },
                        false,
                    ));
                }
            } else {
                // File extents in any tree: subvolumes, relocation trees,
                // and the root tree's free-space cache inodes.
                for i in 0..n {
                    let it = node.item(i);
                    if it.key.item_type != EXTENT_DATA {
                        continue;
                    }
                    let Ok(fe) = FileExtent::parse(it.data) else {
                        continue; // the inode check names it
                    };
                    let FileExtentKind::Extent {
                        disk_bytenr,
                        disk_num_bytes,
                        offset,
                        num_bytes,
                        ..
                    } = fe.kind
                    else {
                        continue;
                    };
                    if disk_bytenr == 0 {
                        continue;
                    }
                    w.data_referenced += num_bytes;
                    let refkey = if full {
                        RefKey::SharedData(bytenr)
                    } else {
                        RefKey::Data(h.owner, it.key.objectid, it.key.offset.wrapping_sub(offset))
                    };
                    let at = Referrer {
                        tree: t.id,
                        block: bytenr,
                        key: Some(it.key),
                    };
                    w.add_ref(p, disk_bytenr, None, disk_num_bytes, refkey, at);
                }
            }
        }
    }
    w
}

/// Whether slot `i` of a node at `level` of a tree being deleted leads
/// only to blocks already dropped (as btrfs-progs reads drop_progress):
/// at `drop_level`, the children whose key is before `progress`; above
/// it, the slots before the one whose range holds `progress`.
fn dropped(
    node: &ubtrfs_format::node::Node<'_>,
    i: usize,
    level: u8,
    progress: Key,
    drop_level: u8,
) -> bool {
    if level < drop_level || drop_level == 0 {
        return false;
    }
    if level == drop_level {
        return node.key(i) < progress;
    }
    i + 1 < node.nritems() && node.key(i + 1) <= progress
}
