//! B-tree search and iteration over verified blocks. A [`Cursor`] holds the
//! path from the root to a leaf slot; moving it reads siblings through the
//! shared block cache, reading ahead as its [`Readahead`] mode says (see
//! [`crate::cache::reada`]).

use crate::cache::reada::Readahead;
use crate::disk_io::FsInfo;
use crate::error::{Error, Result};
use crate::tree::block::BlockExpect;
use crate::tree::block::TreeBlock;
use std::ops::ControlFlow;
use std::sync::Arc;
use ubtrfs_format::consts::{
    tree_name, CHUNK_TREE_OBJECTID, ROOT_TREE_OBJECTID, TREE_LOG_OBJECTID,
};
use ubtrfs_format::items::RootItem;
use ubtrfs_format::key::Key;
use ubtrfs_format::node::MAX_LEVEL;
use ubtrfs_format::superblock::Superblock;

/// "subvolume 257 tree", "fs tree": where an item was, for errors.
pub fn describe_tree(id: u64) -> String {
    match tree_name(id) {
        Some(n) => format!("{n} tree"),
        None => format!("subvolume {id} tree"),
    }
}

/// A tree: its id (owner) and where its root block is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tree {
    pub id: u64,
    pub bytenr: u64,
    pub level: u8,
    pub generation: u64,
}

impl Tree {
    /// The chunk tree, whose root the superblock holds.
    pub fn chunk(sb: &Superblock) -> Tree {
        Tree {
            id: CHUNK_TREE_OBJECTID,
            bytenr: sb.chunk_root,
            level: sb.chunk_root_level,
            generation: sb.chunk_root_generation,
        }
    }

    /// The root tree, whose root the superblock holds.
    pub fn root(sb: &Superblock) -> Tree {
        Tree {
            id: ROOT_TREE_OBJECTID,
            bytenr: sb.root,
            level: sb.root_level,
            generation: sb.generation,
        }
    }

    /// The log root tree of an unreplayed log (`sb.log_root` not 0). The
    /// log was written by the transaction after the last commit, so its
    /// blocks carry that generation.
    pub fn log_root(sb: &Superblock) -> Tree {
        Tree {
            id: TREE_LOG_OBJECTID,
            bytenr: sb.log_root,
            level: sb.log_root_level,
            generation: sb.generation + 1,
        }
    }

    /// The tree `id` whose ROOT_ITEM is `r`.
    pub fn of_root_item(id: u64, r: &RootItem) -> Tree {
        Tree {
            id,
            bytenr: r.bytenr,
            level: r.level,
            generation: r.generation,
        }
    }

    /// A human name for errors: "fs tree 5", "subvolume 257".
    pub fn describe(&self) -> String {
        describe_tree(self.id)
    }

    /// Adds the tree's name to the location of a corruption error.
    pub fn context(&self, e: Error) -> Error {
        e.context(|| self.describe())
    }

    /// Reads and verifies the tree's root block.
    pub fn read_root(&self, fs: &FsInfo) -> Result<Arc<TreeBlock>> {
        if self.level > MAX_LEVEL {
            return Err(Error::corrupt(
                self.describe(),
                format!("root level {}", self.level),
            ));
        }
        fs.read_tree_block(self.bytenr, self.root_expect())
            .map_err(|e| self.context(e))
    }

    /// What the root block must be: the level, and the generation (unless
    /// the root item records none).
    pub fn root_expect(&self) -> BlockExpect {
        BlockExpect {
            level: Some(self.level),
            generation: Some(self.generation).filter(|&g| g != 0),
            first_key: None,
        }
    }

    /// Reads and verifies child `slot` of node `parent` of this tree: what
    /// the parent's pointer promises must hold, and only a root may be
    /// empty (an empty child would also let iteration spin over nothing).
    pub fn read_child(
        &self,
        fs: &FsInfo,
        parent: &TreeBlock,
        slot: usize,
    ) -> Result<Arc<TreeBlock>> {
        let (bytenr, expect) = child_ptr(parent, slot);
        let child = fs
            .read_tree_block(bytenr, expect)
            .map_err(|e| self.context(e))?;
        if child.node().nritems() == 0 {
            return Err(self.context(Error::corrupt(
                format!("tree block {bytenr}"),
                "empty non-root block",
            )));
        }
        Ok(child)
    }
}

/// Where child `slot` of node `parent` is and what its pointer promises.
pub fn child_ptr(parent: &TreeBlock, slot: usize) -> (u64, BlockExpect) {
    let p = parent.node().key_ptr(slot);
    (
        p.blockptr,
        BlockExpect {
            level: Some(parent.header.level - 1),
            generation: Some(p.generation),
            first_key: Some(p.key),
        },
    )
}

/// A position in a tree: one (block, slot) per level, leaf first.
pub struct Cursor<'f> {
    fs: &'f FsInfo,
    tree: Tree,
    readahead: Readahead,
    /// `path[0]` is the leaf; `path[level]` the node at that level.
    path: Vec<(Arc<TreeBlock>, usize)>,
    /// False once the cursor has moved past the last (or before the first) item.
    valid: bool,
}

impl<'f> Cursor<'f> {
    pub fn new(fs: &'f FsInfo, tree: Tree) -> Self {
        Cursor {
            fs,
            tree,
            readahead: Readahead::None,
            path: Vec::new(),
            valid: false,
        }
    }

    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// Sets the readahead policy for moves from here on.
    pub fn set_readahead(&mut self, mode: Readahead) {
        self.readahead = mode;
    }

    fn read_root(&self) -> Result<Arc<TreeBlock>> {
        self.tree.read_root(self.fs)
    }

    /// Reads child `slot` of `parent`, first reading ahead its siblings as
    /// the readahead mode says. `objectid` is that of the key the move is
    /// looking for (it bounds [`Readahead::Back`]; 0 for no bound).
    fn read_child(&self, parent: &TreeBlock, slot: usize, objectid: u64) -> Result<Arc<TreeBlock>> {
        if self.readahead != Readahead::None {
            self.read_ahead(parent, slot, objectid);
        }
        self.tree.read_child(self.fs, parent, slot)
    }

    /// Queues the siblings of child `slot` of `parent` that the kernel's
    /// `reada_for_search` would read ahead.
    fn read_ahead(&self, parent: &TreeBlock, slot: usize, objectid: u64) {
        let node = parent.node();
        let target = node.key_ptr(slot).blockptr;
        let picked = crate::cache::reada::plan(
            self.readahead,
            parent.header.level,
            slot,
            node.nritems(),
            self.fs.nodesize,
            self.fs.reada.is_present(target),
            objectid,
            |i| {
                let p = node.key_ptr(i);
                (p.key.objectid, p.blockptr)
            },
        );
        if picked.is_empty() {
            return;
        }
        let blocks: Vec<(u64, BlockExpect)> =
            picked.into_iter().map(|i| child_ptr(parent, i)).collect();
        self.fs.reada.schedule(&self.fs.reada_source(), &blocks);
    }

    /// Positions the cursor at the first item with key >= `key`. Returns
    /// whether such an item exists.
    pub fn seek(&mut self, key: &Key) -> Result<bool> {
        self.path.clear();
        let mut block = self.read_root()?;
        loop {
            let node = block.node();
            let level = node.level();
            if level == 0 {
                let (slot, exact) = node.search(key);
                let slot = match (slot, exact) {
                    (Some(s), true) => s,
                    (Some(s), false) => s + 1,
                    (None, _) => 0,
                };
                self.path.insert(0, (block, slot));
                break;
            }
            // Descend into the last child whose first key <= key.
            let slot = node.search(key).0.unwrap_or(0);
            let child = self.read_child(&block, slot, key.objectid)?;
            self.path.insert(0, (block, slot));
            block = child;
        }
        self.valid = true;
        let (leaf, slot) = &self.path[0];
        if *slot >= leaf.node().nritems() {
            return self.advance_leaf();
        }
        Ok(true)
    }

    /// Positions at the last item with key <= `key`.
    pub fn seek_le(&mut self, key: &Key) -> Result<bool> {
        let found = self.seek(key)?;
        if found && self.key() == Some(*key) {
            return Ok(true);
        }
        if !found {
            // Past the end: the last item of the tree, if any.
            return self.seek_last();
        }
        self.prev()
    }

    /// Positions at the last item with key <= `key`, or at the first item of
    /// the tree when there is none: where a scan for ranges covering `key`
    /// starts.
    pub fn seek_floor(&mut self, key: &Key) -> Result<bool> {
        if self.seek_le(key)? {
            return Ok(true);
        }
        self.seek(&Key::MIN)
    }

    /// Positions at the last item of the tree.
    pub fn seek_last(&mut self) -> Result<bool> {
        self.path.clear();
        let mut block = self.read_root()?;
        loop {
            let n = block.node().nritems();
            if block.header.level == 0 {
                self.path.insert(0, (block, n.saturating_sub(1)));
                self.valid = n > 0;
                return Ok(n > 0);
            }
            let child = self.read_child(&block, n - 1, 0)?;
            self.path.insert(0, (block, n - 1));
            block = child;
        }
    }

    /// The current item's key, if positioned on one.
    pub fn key(&self) -> Option<Key> {
        let (leaf, slot) = self.path.first()?;
        (self.valid && *slot < leaf.node().nritems()).then(|| leaf.node().key(*slot))
    }

    /// The current item (key and data), if positioned on one.
    pub fn item(&self) -> Option<(Key, &[u8])> {
        let (leaf, slot) = self.path.first()?;
        if !self.valid || *slot >= leaf.node().nritems() {
            return None;
        }
        let it = leaf.node().item(*slot);
        Some((it.key, it.data))
    }

    /// The leaf block the cursor is on and its slot.
    pub fn leaf(&self) -> Option<(&Arc<TreeBlock>, usize)> {
        self.path.first().map(|(b, s)| (b, *s))
    }

    /// Moves to the next item. Returns false at the end of the tree.
    // Not `Iterator::next`: moving can fail, and items borrow the cursor.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<bool> {
        if !self.valid || self.path.is_empty() {
            return Ok(false);
        }
        self.path[0].1 += 1;
        if self.path[0].1 < self.path[0].0.node().nritems() {
            return Ok(true);
        }
        self.advance_leaf()
    }

    /// Moves from the end of the current leaf to the first item of the next
    /// non-empty leaf.
    fn advance_leaf(&mut self) -> Result<bool> {
        // As the kernel's next_leaf: the search key is the leaf's last key.
        let objectid = {
            let leaf = self.path[0].0.node();
            leaf.nritems()
                .checked_sub(1)
                .map_or(0, |i| leaf.key(i).objectid)
        };
        let mut level = 1;
        loop {
            if level >= self.path.len() {
                self.valid = false;
                return Ok(false);
            }
            let (node, slot) = &self.path[level];
            if slot + 1 < node.node().nritems() {
                self.path[level].1 += 1;
                break;
            }
            level += 1;
        }
        // Descend along first children.
        while level > 0 {
            let (node, slot) = &self.path[level];
            let child = self.read_child(node, *slot, objectid)?;
            self.path[level - 1] = (child, 0);
            level -= 1;
        }
        Ok(true)
    }

    /// Moves to the previous item. Returns false before the start.
    pub fn prev(&mut self) -> Result<bool> {
        if self.path.is_empty() {
            return Ok(false);
        }
        if self.path[0].1 > 0 {
            self.path[0].1 -= 1;
            self.valid = true;
            return Ok(true);
        }
        // As the kernel's prev_leaf: the search is for keys before the
        // leaf's first key.
        let objectid = {
            let leaf = self.path[0].0.node();
            if leaf.nritems() > 0 {
                leaf.key(0).objectid
            } else {
                0
            }
        };
        let mut level = 1;
        loop {
            if level >= self.path.len() {
                self.valid = false;
                return Ok(false);
            }
            if self.path[level].1 > 0 {
                self.path[level].1 -= 1;
                break;
            }
            level += 1;
        }
        while level > 0 {
            let (node, slot) = &self.path[level];
            let child = self.read_child(node, *slot, objectid)?;
            let n = child.node().nritems();
            self.path[level - 1] = (child, n.saturating_sub(1));
            level -= 1;
        }
        self.valid = true;
        Ok(true)
    }
}

/// Calls `f` for every item with `start <= key <= end`, in key order, until
/// `f` breaks.
pub fn for_each_item<F>(fs: &FsInfo, tree: Tree, start: Key, end: Key, mut f: F) -> Result<()>
where
    F: FnMut(Key, &[u8]) -> Result<ControlFlow<()>>,
{
    let mut c = Cursor::new(fs, tree);
    if !c.seek(&start)? {
        return Ok(());
    }
    loop {
        let Some((k, data)) = c.item() else {
            return Ok(());
        };
        if k > end {
            return Ok(());
        }
        if f(k, data)?.is_break() {
            return Ok(());
        }
        if !c.next()? {
            return Ok(());
        }
    }
}

/// Looks up the item with exactly `key` and returns a copy of its data.
pub fn lookup(fs: &FsInfo, tree: Tree, key: &Key) -> Result<Option<Vec<u8>>> {
    let mut c = Cursor::new(fs, tree);
    if c.seek(key)? {
        if let Some((k, d)) = c.item() {
            if k == *key {
                return Ok(Some(d.to_vec()));
            }
        }
    }
    Ok(None)
}
