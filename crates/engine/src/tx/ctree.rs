//! Changing B-trees (the kernel's ctree.c): every block on the path from
//! the root to the leaf is copied on write into the transaction; a block
//! that outgrows its size is split (a new root above a split root), one
//! that empties is removed, one that falls below a quarter full is merged
//! into a sibling, and a root node left with one child gives way to it.
//! Parent keys follow their children's first keys.

use super::{BlockRef, Trans};
use crate::cache::reada::{self, Readahead};
use crate::error::{Error, Result};
use crate::items::{ItemSource, Visitor};
use crate::tree::block::BlockExpect;
use crate::tree::buf::{self, Content, Ptr};
use crate::tree::leaf::Leaf;
use ubtrfs_format::consts::{Csum, CSUM_SIZE_MAX, ROOT_ITEM, ROOT_TREE_OBJECTID};
use ubtrfs_format::items::RootItem;
use ubtrfs_format::node::MAX_LEVEL;
use ubtrfs_format::Key;

/// Most levels a path holds: a tree's levels, and a new root above.
const PATH_LEVELS: usize = MAX_LEVEL as usize + 2;

/// (block, slot) per level, leaf first; the last entry is the root. Held
/// inline: every change of a tree makes one, and a tree is shallow.
#[derive(Clone, Copy)]
pub struct Path {
    at: [(u64, usize); PATH_LEVELS],
    len: usize,
}

impl Path {
    fn new(len: usize) -> Self {
        assert!(len <= PATH_LEVELS, "tree deeper than {PATH_LEVELS} levels");
        Path {
            at: [(0, 0); PATH_LEVELS],
            len,
        }
    }

    fn push(&mut self, e: (u64, usize)) {
        assert!(
            self.len < PATH_LEVELS,
            "tree deeper than {PATH_LEVELS} levels"
        );
        self.at[self.len] = e;
        self.len += 1;
    }

    fn pop(&mut self) {
        self.len -= 1;
    }
}

impl std::ops::Deref for Path {
    type Target = [(u64, usize)];
    fn deref(&self) -> &[(u64, usize)] {
        &self.at[..self.len]
    }
}

impl std::ops::DerefMut for Path {
    fn deref_mut(&mut self) -> &mut [(u64, usize)] {
        &mut self.at[..self.len]
    }
}

/// Position of `key` in a leaf: (slot, found); slot is where it would go.
fn leaf_slot(items: &Leaf, key: &Key) -> (usize, bool) {
    match items.search(key) {
        Ok(i) => (i, true),
        Err(i) => (i, false),
    }
}

/// The child of a node whose range holds `key`: the last pointer whose
/// key is not above it (the first when all are).
fn node_slot(ptrs: &[Ptr], key: &Key) -> usize {
    match ptrs.binary_search_by(|p| p.key.cmp(key)) {
        Ok(i) => i,
        Err(0) => 0,
        Err(i) => i - 1,
    }
}

fn expect_child(p: &Ptr, parent_level: u8) -> BlockExpect {
    BlockExpect {
        level: Some(parent_level - 1),
        generation: Some(p.generation),
        first_key: Some(p.key),
    }
}

impl Trans {
    /// Where tree `tree`'s root block is and what it must be.
    fn root_expect(&self, tree: u64) -> Result<(u64, BlockExpect)> {
        let r = self.root_view(tree)?;
        Ok((
            r.bytenr,
            BlockExpect {
                level: Some(r.level),
                generation: Some(r.item.generation),
                first_key: None,
            },
        ))
    }

    /// Descends to the leaf where `key` is or would be, copying every
    /// block on the way into the transaction.
    pub(crate) fn search_mut(&mut self, tree: u64, key: &Key) -> Result<(Path, bool)> {
        self.mutations += 1;
        if tree == ROOT_TREE_OBJECTID {
            self.root_tree_changing();
        }
        // Loaded and kept: the copy below moves the root.
        self.root(tree)?;
        let (root, expect) = self.root_expect(tree)?;
        let mut b = self.cow(tree, root, expect, None)?;
        let mut path = Path::new(self.buf(b).level as usize + 1);
        loop {
            let eb = self.buf(b);
            if eb.is_leaf() {
                let (slot, found) = leaf_slot(eb.items(), key);
                path[0] = (b, slot);
                return Ok((path, found));
            }
            let level = eb.level;
            let slot = node_slot(eb.ptrs(), key);
            let p = eb.ptrs()[slot];
            path[level as usize] = (b, slot);
            self.read_ahead_leaves(self.buf(b), slot);
            b = self.cow(tree, p.blockptr, expect_child(&p, level), Some((b, slot)))?;
        }
    }

    /// Copies on write every block of `tree` from its root to the leaf
    /// where `key` is or would be, changing nothing in them (a repair of
    /// blocks whose generation is wrong, a move of tree blocks out of a
    /// block group).
    pub fn cow_path(&mut self, tree: u64, key: &Key) -> Result<()> {
        self.search_mut(tree, key).map(|_| ())
    }

    /// The trees whose path to `key` passes through the block at `bytenr`
    /// (every tree sharing it: a copy on write from each of them frees
    /// it). Trees being deleted are left out: their blocks go as the
    /// deletion goes on.
    pub fn trees_through(&self, bytenr: u64, key: &Key) -> Result<Vec<u64>> {
        let mut ids = vec![ROOT_TREE_OBJECTID];
        self.scan(ROOT_TREE_OBJECTID, &Key::MIN, |k, d| {
            if k.item_type == ROOT_ITEM && ids.last() != Some(&k.objectid) {
                let live = RootItem::parse(d).is_ok_and(|r| {
                    r.refs > 0 || (r.drop_progress == Key::MIN && r.drop_level == 0)
                });
                if live {
                    ids.push(k.objectid);
                }
            }
            true
        })?;
        let mut out = Vec::new();
        for id in ids {
            let (root, expect) = self.root_expect(id)?;
            let mut cur = self.load(root, expect)?;
            let mut on = cur.bytenr == bytenr;
            while !on && !cur.is_leaf() {
                let p = cur.ptrs()[node_slot(cur.ptrs(), key)];
                on = p.blockptr == bytenr;
                if !on {
                    cur = self.load(p.blockptr, expect_child(&p, cur.level))?;
                }
            }
            if on {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// Inserts an item; Exists when the key is there already.
    pub fn insert_item(&mut self, tree: u64, key: Key, data: Vec<u8>) -> Result<()> {
        self.check_item_size(tree, &key, data.len())?;
        let (mut path, found) = self.search_mut(tree, &key)?;
        if found {
            return Err(Error::Exists(format!("tree {tree}: key {key} exists")));
        }
        self.insert_at(tree, &mut path, key, &data)
    }

    /// Puts a new item where `path` (from [`Trans::search_mut`], not
    /// found) says it goes: the parents' keys follow a new first item,
    /// and the leaf splits if it overflows. The size is the caller's to
    /// check.
    fn insert_at(&mut self, tree: u64, path: &mut Path, key: Key, data: &[u8]) -> Result<()> {
        let (leaf, slot) = path[0];
        self.buf_mut(leaf).items_mut().insert(slot, key, data);
        if slot == 0 {
            self.fixup_keys(path, 0);
        }
        self.split_if_needed(tree, path, 0)
    }

    /// Inserts the item or replaces its data.
    pub fn put_item(&mut self, tree: u64, key: Key, data: Vec<u8>) -> Result<()> {
        self.check_item_size(tree, &key, data.len())?;
        self.upsert_item(tree, key, |old| match old {
            Some(d) if d.len() == data.len() => {
                d.copy_from_slice(&data);
                None
            }
            _ => Some(data),
        })
    }

    /// Changes the item at `key` in one descent: `f` gets its data to
    /// change in place (None when there is no item) and returns the data
    /// to store instead, if any (the item is made when there was none;
    /// it must return some then).
    pub(crate) fn upsert_item(
        &mut self,
        tree: u64,
        key: Key,
        f: impl FnOnce(Option<&mut [u8]>) -> Option<Vec<u8>>,
    ) -> Result<()> {
        let (mut path, found) = self.search_mut(tree, &key)?;
        let (leaf, slot) = path[0];
        if found {
            let Some(new) = f(Some(self.buf_mut(leaf).items_mut().data_mut(slot))) else {
                return Ok(());
            };
            // Refused sizes leave the item as it was.
            self.check_item_size(tree, &key, new.len())?;
            self.buf_mut(leaf).items_mut().set_data(slot, &new);
            return self.split_if_needed(tree, &mut path, 0);
        }
        let new = f(None).expect("upsert_item: data for a new item");
        self.check_item_size(tree, &key, new.len())?;
        self.insert_at(tree, &mut path, key, &new)
    }

    /// Appends `bytes` to the data of the item at `key` in place (one more
    /// name in a DIR_ITEM or INODE_REF), or makes the item of `bytes` when
    /// there is none.
    pub(crate) fn append_item(&mut self, tree: u64, key: Key, bytes: &[u8]) -> Result<()> {
        let (mut path, found) = self.search_mut(tree, &key)?;
        let (leaf, slot) = path[0];
        if found {
            let len = self.buf(leaf).items().data(slot).len() + bytes.len();
            self.check_item_size(tree, &key, len)?;
            self.buf_mut(leaf).items_mut().append_data(slot, bytes);
            return self.split_if_needed(tree, &mut path, 0);
        }
        self.check_item_size(tree, &key, bytes.len())?;
        self.insert_at(tree, &mut path, key, bytes)
    }

    /// Changes an item's data in place (it may grow or shrink); false when
    /// there is no such item.
    pub fn update_item(
        &mut self,
        tree: u64,
        key: &Key,
        f: impl FnOnce(&mut Vec<u8>),
    ) -> Result<bool> {
        let (mut path, found) = self.search_mut(tree, key)?;
        if !found {
            return Ok(false);
        }
        let (leaf, slot) = path[0];
        let mut new = self.buf(leaf).items().data(slot).to_vec();
        f(&mut new);
        // Refused sizes leave the item as it was.
        self.check_item_size(tree, key, new.len())?;
        self.buf_mut(leaf).items_mut().set_data(slot, &new);
        self.split_if_needed(tree, &mut path, 0)?;
        Ok(true)
    }

    /// Deletes an item; false when there is none.
    pub fn delete_item(&mut self, tree: u64, key: &Key) -> Result<bool> {
        let (mut path, found) = self.search_mut(tree, key)?;
        if !found {
            return Ok(false);
        }
        let (leaf, slot) = path[0];
        self.buf_mut(leaf).items_mut().remove(slot);
        self.after_shrink(tree, &mut path, 0)?;
        Ok(true)
    }

    /// Deletes every item with a key in `[lo, hi]`; returns how many.
    pub fn delete_range(&mut self, tree: u64, lo: &Key, hi: &Key) -> Result<usize> {
        let keys: Vec<Key> = self
            .items_in(tree, lo, hi)?
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        for k in &keys {
            self.delete_item(tree, k)?;
        }
        Ok(keys.len())
    }

    fn check_item_size(&self, tree: u64, key: &Key, len: usize) -> Result<()> {
        if len > buf::max_item_data(self.nodesize()) {
            return Err(Error::Invalid(format!(
                "tree {tree}: item {key} of {len} bytes does not fit a leaf"
            )));
        }
        Ok(())
    }

    /// The item at `key`, if any.
    pub fn lookup(&self, tree: u64, key: &Key) -> Result<Option<Vec<u8>>> {
        let leaf = self.leaf_for(tree, key)?;
        Ok(match leaf_slot(leaf.items(), key) {
            (slot, true) => Some(leaf.items().data(slot).to_vec()),
            _ => None,
        })
    }

    /// The leaf where `key` is or would be. Parent keys are their
    /// children's first keys, so it holds `key` if the tree does, and the
    /// last item at or before `key` unless `key` is below every key.
    fn leaf_for(&self, tree: u64, key: &Key) -> Result<BlockRef<'_>> {
        let (root, expect) = self.root_expect(tree)?;
        let this = self;
        let mut cur = this.load(root, expect)?;
        while !cur.is_leaf() {
            let slot = node_slot(cur.ptrs(), key);
            let p = cur.ptrs()[slot];
            this.read_ahead_leaves(&cur, slot);
            cur = this.load(p.blockptr, expect_child(&p, cur.level))?;
        }
        Ok(cur)
    }

    /// Before a descent reads leaf `slot` of `node` (a level-1 node), the
    /// leaves after it are queued for the readahead threads as the
    /// transaction's mode says ([`Trans::set_readahead`]), when that leaf
    /// is not at hand already: a writer walking a committed tree in key
    /// order (receive updating files in inode order) finds the leaves it
    /// goes to next read, not waits for each. Leaves of this transaction,
    /// or of a deferred commit still being written, may not be on disk
    /// yet and are never read ahead.
    fn read_ahead_leaves(&self, node: &crate::tree::buf::ExtentBuffer, slot: usize) {
        if self.readahead == Readahead::None || node.level != 1 {
            return;
        }
        let ptrs = node.ptrs();
        let target = ptrs[slot].blockptr;
        if self.in_memory(target) {
            return;
        }
        let reada = &self.info.reada;
        let picked = reada::plan(
            self.readahead,
            1,
            slot,
            ptrs.len(),
            self.info.nodesize,
            reada.is_present(target),
            0,
            |i| (ptrs[i].key.objectid, ptrs[i].blockptr),
        );
        let blocks: Vec<(u64, BlockExpect)> = picked
            .into_iter()
            .map(|i| ptrs[i])
            .filter(|p| !self.in_memory(p.blockptr))
            .map(|p| (p.blockptr, expect_child(&p, 1)))
            .collect();
        if !blocks.is_empty() {
            reada.schedule(&self.info.reada_source(), &blocks);
        }
    }

    /// Whether the block at `bytenr` is held decoded: this transaction's,
    /// a deferred commit's, or a committed one read before.
    fn in_memory(&self, bytenr: u64) -> bool {
        self.bufs.contains_key(&bytenr)
            || self.decoded().contains_key(&bytenr)
            || self.deferred_block(bytenr).is_some()
    }

    /// Sets how descents read ahead leaves of committed trees (default
    /// none: a mount's lookups are not in key order).
    pub fn set_readahead(&mut self, mode: Readahead) {
        self.readahead = mode;
    }

    /// The key of the last item at or before `key`.
    pub fn last_key_le(&self, tree: u64, key: &Key) -> Result<Option<Key>> {
        let leaf = self.leaf_for(tree, key)?;
        Ok(match leaf_slot(leaf.items(), key) {
            (slot, true) => Some(leaf.items().key(slot)),
            (0, false) => None,
            (slot, false) => Some(leaf.items().key(slot - 1)),
        })
    }

    /// The first item at or after `key`.
    pub fn search_first(&self, tree: u64, key: &Key) -> Result<Option<(Key, Vec<u8>)>> {
        let mut out = None;
        self.scan(tree, key, |k, d| {
            out = Some((*k, d.to_vec()));
            false
        })?;
        Ok(out)
    }

    /// Every item with a key in `[lo, hi]`, in order.
    pub fn items_in(&self, tree: u64, lo: &Key, hi: &Key) -> Result<Vec<(Key, Vec<u8>)>> {
        let mut out = Vec::new();
        self.scan(tree, lo, |k, d| {
            if k > hi {
                return false;
            }
            out.push((*k, d.to_vec()));
            true
        })?;
        Ok(out)
    }

    /// The last item at or before `key`. Parent keys are their children's
    /// first keys, so the leaf the search lands in holds it unless `key`
    /// is below every key.
    pub fn search_last_le(&self, tree: u64, key: &Key) -> Result<Option<(Key, Vec<u8>)>> {
        let cur = self.leaf_for(tree, key)?;
        let (slot, found) = leaf_slot(cur.items(), key);
        let i = if found {
            slot
        } else if slot > 0 {
            slot - 1
        } else {
            return Ok(None);
        };
        let (k, d) = cur.items().item(i);
        Ok(Some((k, d.to_vec())))
    }

    /// Calls `f` on the items from `from` on, in order, while it returns
    /// true. Reads only: nothing is copied into the transaction.
    pub fn scan(
        &self,
        tree: u64,
        from: &Key,
        mut f: impl FnMut(&Key, &[u8]) -> bool,
    ) -> Result<()> {
        self.scan_leaves(tree, from, |_, k, d| f(k, d))
    }

    /// [`Trans::scan`], with the generation of the leaf each item is in
    /// (TREE_SEARCH reports it).
    pub fn scan_leaves(
        &self,
        tree: u64,
        from: &Key,
        mut f: impl FnMut(u64, &Key, &[u8]) -> bool,
    ) -> Result<()> {
        let (root, expect) = self.root_expect(tree)?;
        let this = self;
        // Stack of (node, next slot to visit) above the current block.
        let mut stack: Vec<(BlockRef<'_>, usize)> = Vec::new();
        let mut cur = this.load(root, expect)?;
        let mut first = true;
        loop {
            if cur.is_leaf() {
                let start = if first {
                    leaf_slot(cur.items(), from).0
                } else {
                    0
                };
                first = false;
                let generation = cur.generation;
                for (k, d) in cur.items().iter_from(start) {
                    if !f(generation, &k, d) {
                        return Ok(());
                    }
                }
                // Up to the first node with a child left, then down it.
                loop {
                    let Some((node, slot)) = stack.last_mut() else {
                        return Ok(());
                    };
                    if *slot < node.nritems() {
                        let p = node.ptrs()[*slot];
                        let level = node.level;
                        *slot += 1;
                        cur = this.load(p.blockptr, expect_child(&p, level))?;
                        break;
                    }
                    stack.pop();
                }
                continue;
            }
            let slot = if first {
                node_slot(cur.ptrs(), from)
            } else {
                0
            };
            let p = cur.ptrs()[slot];
            let level = cur.level;
            let child = this.load(p.blockptr, expect_child(&p, level))?;
            stack.push((cur, slot + 1));
            cur = child;
        }
    }

    /// Sets the keys above level `level` of `path` to the first key of
    /// the block there, as far up as it is a first child.
    fn fixup_keys(&mut self, path: &Path, level: usize) {
        let Some(first) = self.buf(path[level].0).first_key() else {
            return;
        };
        for &(b, slot) in &path[level + 1..] {
            self.buf_mut(b).ptrs_mut()[slot].key = first;
            if slot != 0 {
                break;
            }
        }
    }

    fn overfull(&self, b: u64) -> bool {
        let eb = self.buf(b);
        match eb.content {
            Content::Leaf(_) => eb.used() > buf::capacity(self.nodesize()),
            Content::Node(ref p) => p.len() > buf::max_ptrs(self.nodesize()),
        }
    }

    /// Splits the block at `level` of `path` while it is too big, then its
    /// parent, up to a new root.
    fn split_if_needed(&mut self, tree: u64, path: &mut Path, level: usize) -> Result<()> {
        let (b, _) = path[level];
        if !self.overfull(b) {
            return Ok(());
        }
        if level + 1 == path.len() {
            // Splitting the root: a new root above it first.
            let first = self.buf(b).first_key().unwrap_or(Key::MIN);
            let root = self.alloc_tree_block(tree, level as u8 + 1, None)?;
            self.tree_blocks_changed(tree, true);
            let gen = self.transid;
            self.buf_mut(root).ptrs_mut().push(Ptr {
                key: first,
                blockptr: b,
                generation: gen,
            });
            path.push((root, 0));
            self.set_root(tree, root, level as u8 + 1, gen);
        }
        // Appending at the end (sequential inserts) leaves the block full
        // and starts a new one, as the kernel's split does, instead of
        // leaving every block half empty.
        let n = self.buf(b).nritems();
        let at_end = path[level].1 + usize::from(level > 0) + 1 >= n;
        let pieces = self.split_content(b, at_end);
        let (parent, pslot) = path[level + 1];
        for (at, content) in (pslot + 1..).zip(pieces) {
            let nb = self.alloc_tree_block(tree, level as u8, Some(b))?;
            self.tree_blocks_changed(tree, true);
            let eb = self.buf_mut(nb);
            eb.content = content;
            let key = eb.first_key().expect("split piece is not empty");
            let gen = self.transid;
            self.buf_mut(parent).ptrs_mut().insert(
                at,
                Ptr {
                    key,
                    blockptr: nb,
                    generation: gen,
                },
            );
        }
        self.split_if_needed(tree, path, level + 1)
    }

    /// Cuts the content of `b` so that the part left in `b` and each
    /// returned piece fit a block: in two as even as possible, or in as
    /// many as needed (a big item between full neighbours).
    fn split_content(&mut self, b: u64, at_end: bool) -> Vec<Content> {
        let cap = buf::capacity(self.nodesize());
        let eb = self.buf_mut(b);
        match &mut eb.content {
            Content::Node(ptrs) => {
                let at = if at_end {
                    ptrs.len() - 1
                } else {
                    ptrs.len() / 2
                };
                let tail = ptrs.split_off(at);
                vec![Content::Node(tail)]
            }
            Content::Leaf(items) => {
                let sizes: Vec<usize> = (0..items.len()).map(|i| items.item_size(i)).collect();
                let total: usize = sizes.iter().sum();
                let last = sizes.len() - 1;
                if at_end && total - sizes[last] <= cap {
                    return vec![Content::Leaf(items.split_off(last))];
                }
                let mut left = 0;
                let mut best: Option<(usize, usize)> = None;
                for (k, s) in sizes.iter().enumerate().take(sizes.len() - 1) {
                    left += s;
                    let right = total - left;
                    if left <= cap && right <= cap {
                        let worst = left.max(right);
                        if best.is_none_or(|(_, w)| worst < w) {
                            best = Some((k + 1, worst));
                        }
                    }
                }
                if let Some((k, _)) = best {
                    return vec![Content::Leaf(items.split_off(k))];
                }
                // Greedy: as many leaves as it takes.
                let all = std::mem::take(items);
                let mut groups: Vec<Leaf> = vec![Leaf::default()];
                let mut used = 0;
                for ((k, d), s) in all.iter().zip(sizes) {
                    if used + s > cap && !groups.last().unwrap().is_empty() {
                        groups.push(Leaf::default());
                        used = 0;
                    }
                    used += s;
                    groups.last_mut().unwrap().push(k, d);
                }
                let mut rest = groups.into_iter();
                *items = rest.next().unwrap();
                rest.map(Content::Leaf).collect()
            }
        }
    }

    /// After the block at `level` of `path` lost items: removes it when
    /// empty, merges it with a sibling when under a quarter full, keeps
    /// parent keys right, and lets a root node with one child go.
    fn after_shrink(&mut self, tree: u64, path: &mut Path, level: usize) -> Result<()> {
        let (b, _) = path[level];
        let is_root = level + 1 == path.len();
        let n = self.buf(b).nritems();
        if is_root {
            if level > 0 && n == 1 {
                let child = self.buf(b).ptrs()[0];
                self.free_tree_block(b, tree, level as u8);
                self.tree_blocks_changed(tree, false);
                path.pop();
                self.set_root(tree, child.blockptr, level as u8 - 1, child.generation);
            }
            return Ok(());
        }
        let (parent, pslot) = path[level + 1];
        if n == 0 {
            self.free_tree_block(b, tree, level as u8);
            self.tree_blocks_changed(tree, false);
            self.buf_mut(parent).ptrs_mut().remove(pslot);
            if pslot == 0 && self.buf(parent).nritems() > 0 {
                self.fixup_keys(path, level + 1);
            }
            return self.after_shrink(tree, path, level + 1);
        }
        self.fixup_keys(path, level);
        if !self.underfull(b) {
            return Ok(());
        }
        let np = self.buf(parent).nritems();
        // Merge with the left sibling (this block's content appended to
        // it), else pull the right sibling into this block.
        let (into, from, from_slot) = if pslot > 0 {
            let left = self.cow_child(tree, parent, pslot - 1)?;
            (left, b, pslot)
        } else if pslot + 1 < np {
            let right = self.cow_child(tree, parent, pslot + 1)?;
            (b, right, pslot + 1)
        } else {
            return Ok(());
        };
        if self.buf(into).used() + self.buf(from).used() > buf::capacity(self.nodesize()) {
            return Ok(());
        }
        let moved = std::mem::replace(
            &mut self.buf_mut(from).content,
            Content::Leaf(Leaf::default()),
        );
        match (&mut self.buf_mut(into).content, moved) {
            (Content::Leaf(a), Content::Leaf(m)) => a.append(m),
            (Content::Node(a), Content::Node(m)) => a.extend(m),
            _ => unreachable!("siblings at one level"),
        }
        self.free_tree_block(from, tree, level as u8);
        self.tree_blocks_changed(tree, false);
        self.buf_mut(parent).ptrs_mut().remove(from_slot);
        path[level + 1].1 = from_slot - 1;
        self.after_shrink(tree, path, level + 1)
    }

    fn underfull(&self, b: u64) -> bool {
        let eb = self.buf(b);
        eb.used() < buf::capacity(self.nodesize()) / 4
    }

    /// Copies child `slot` of the (changed) node `parent` into the
    /// transaction; returns its address.
    fn cow_child(&mut self, tree: u64, parent: u64, slot: usize) -> Result<u64> {
        let eb = self.buf(parent);
        let p = eb.ptrs()[slot];
        let level = eb.level;
        self.cow(
            tree,
            p.blockptr,
            expect_child(&p, level),
            Some((parent, slot)),
        )
    }
}

/// The running transaction's trees, as item readers see them: what it has
/// changed, and the committed blocks under that.
impl ItemSource for Trans {
    fn fs_info(&self) -> &crate::disk_io::FsInfo {
        &self.info
    }

    fn item(&self, tree: u64, key: &Key) -> Result<Option<Vec<u8>>> {
        self.lookup(tree, key)
    }

    fn item_le(&self, tree: u64, key: &Key) -> Result<Option<(Key, Vec<u8>)>> {
        self.search_last_le(tree, key)
    }

    fn visit(&self, tree: u64, lo: &Key, hi: &Key, f: &mut Visitor<'_>) -> Result<()> {
        let mut failed = None;
        self.scan(tree, lo, |k, d| {
            if k > hi {
                return false;
            }
            match f(k, d) {
                Ok(flow) => flow.is_continue(),
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        })?;
        failed.map_or(Ok(()), Err)
    }

    fn data_csums(&self, logical: u64, len: u64) -> Result<Vec<Option<Csum>>> {
        let ss = self.sectorsize() as u64;
        let cs = self.info.csum_type.size();
        let mut sums = vec![None; len.div_ceil(ss) as usize];
        for (first, run) in self.csums_view(logical, logical + len)? {
            for (i, c) in run.chunks(cs).enumerate() {
                let at = (first - logical) / ss + i as u64;
                if let Some(slot) = sums.get_mut(at as usize) {
                    let mut v: Csum = [0; CSUM_SIZE_MAX];
                    v[..cs].copy_from_slice(c);
                    *slot = Some(v);
                }
            }
        }
        Ok(sums)
    }

    fn has_tree(&self, tree: u64) -> Result<bool> {
        Trans::has_tree(self, tree)
    }
}
