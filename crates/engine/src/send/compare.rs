//! Lockstep comparison of two trees (the send snapshot, "left", and the
//! parent, "right"), as the kernel's btrfs_compare_trees: both walks move
//! by key; where both sit on a node pointer with the same key, block
//! pointer and generation, the whole subtree is shared and skipped. In
//! leaves, equal keys are compared bytewise.

use crate::ctree::{child_ptr, Tree};
use crate::disk_io::FsInfo;
use crate::error::Result;
use crate::tree::block::TreeBlock;
use std::sync::Arc;
use ubtrfs_format::key::Key;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    New,
    Deleted,
    Changed,
    Same,
}

/// One walk: a block and slot per level, from the root down to `level`.
struct Walk<'f> {
    fs: &'f FsInfo,
    tree: Tree,
    nodes: Vec<Option<Arc<TreeBlock>>>,
    slots: Vec<usize>,
    level: usize,
    root_level: usize,
    ended: bool,
}

enum Advance {
    Ok,
    End,
}

impl<'f> Walk<'f> {
    fn new(fs: &'f FsInfo, tree: Tree) -> Result<Self> {
        let root = tree.read_root(fs)?;
        let rl = tree.level as usize;
        let mut nodes = vec![None; rl + 1];
        let empty = root.node().nritems() == 0;
        nodes[rl] = Some(root);
        Ok(Walk {
            fs,
            tree,
            nodes,
            slots: vec![0; rl + 1],
            level: rl,
            root_level: rl,
            ended: empty,
        })
    }

    fn node(&self) -> &Arc<TreeBlock> {
        self.nodes[self.level].as_ref().expect("node at level")
    }

    fn key(&self) -> Key {
        self.node().node().key(self.slots[self.level])
    }

    fn ptr(&self) -> (u64, u64) {
        let p = self.node().node().key_ptr(self.slots[self.level]);
        (p.blockptr, p.generation)
    }

    fn item(&self) -> &[u8] {
        self.node().node().item(self.slots[0]).data
    }

    fn advance(&mut self, allow_down: bool, reada: bool, reada_min_gen: u64) -> Result<Advance> {
        if self.level == 0 || !allow_down {
            self.next_or_up()
        } else {
            self.down(reada, reada_min_gen)?;
            Ok(Advance::Ok)
        }
    }

    fn next_or_up(&mut self) -> Result<Advance> {
        self.slots[self.level] += 1;
        loop {
            let n = self.node().node().nritems();
            if self.slots[self.level] < n {
                return Ok(Advance::Ok);
            }
            if self.level == self.root_level {
                self.slots[self.level] = n.saturating_sub(1);
                return Ok(Advance::End);
            }
            self.slots[self.level] = 0;
            self.nodes[self.level] = None;
            self.level += 1;
            self.slots[self.level] += 1;
        }
    }

    fn down(&mut self, reada: bool, reada_min_gen: u64) -> Result<()> {
        let parent = self.node().clone();
        let slot = self.slots[self.level];
        if reada {
            let node = parent.node();
            let picked = crate::cache::reada::plan_compare(
                parent.header.level,
                slot,
                node.nritems(),
                self.fs.nodesize,
                reada_min_gen,
                |i| node.key_ptr(i).generation,
            );
            if !picked.is_empty() {
                let blocks: Vec<_> = picked.into_iter().map(|i| child_ptr(&parent, i)).collect();
                self.fs.reada.schedule(&self.fs.reada_source(), &blocks);
            }
        }
        let child = self.tree.read_child(self.fs, &parent, slot)?;
        self.level -= 1;
        self.nodes[self.level] = Some(child);
        self.slots[self.level] = 0;
        Ok(())
    }
}

/// Calls `f(key, change, left item, right item)` for every item that
/// differs between `left` and `right`, in key order (and `Same` for equal
/// items met in blocks that are not shared).
pub(crate) fn compare_trees<F>(
    fs: &FsInfo,
    left: Tree,
    right: Tree,
    reada: bool,
    mut f: F,
) -> Result<()>
where
    F: FnMut(&Key, Change, Option<&[u8]>, Option<&[u8]>) -> Result<()>,
{
    let mut l = Walk::new(fs, left)?;
    let mut r = Walk::new(fs, right)?;
    let reada_min_gen = right.generation;
    #[derive(Clone, Copy, PartialEq)]
    enum Adv {
        No,
        Yes,
        OnlyNext,
    }
    let mut adv_l = Adv::No;
    let mut adv_r = Adv::No;
    loop {
        if adv_l != Adv::No && !l.ended {
            if let Advance::End = l.advance(adv_l == Adv::Yes, reada, reada_min_gen)? {
                l.ended = true;
            }
            adv_l = Adv::No;
        }
        if adv_r != Adv::No && !r.ended {
            if let Advance::End = r.advance(adv_r == Adv::Yes, false, reada_min_gen)? {
                r.ended = true;
            }
            adv_r = Adv::No;
        }
        if l.ended && r.ended {
            return Ok(());
        }
        if l.ended {
            if r.level == 0 {
                f(&r.key(), Change::Deleted, None, Some(r.item()))?;
            }
            adv_r = Adv::Yes;
            continue;
        }
        if r.ended {
            if l.level == 0 {
                f(&l.key(), Change::New, Some(l.item()), None)?;
            }
            adv_l = Adv::Yes;
            continue;
        }
        if l.level == 0 && r.level == 0 {
            let (lk, rk) = (l.key(), r.key());
            match lk.cmp(&rk) {
                std::cmp::Ordering::Less => {
                    f(&lk, Change::New, Some(l.item()), None)?;
                    adv_l = Adv::Yes;
                }
                std::cmp::Ordering::Greater => {
                    f(&rk, Change::Deleted, None, Some(r.item()))?;
                    adv_r = Adv::Yes;
                }
                std::cmp::Ordering::Equal => {
                    let (li, ri) = (l.item(), r.item());
                    let c = if li == ri {
                        Change::Same
                    } else {
                        Change::Changed
                    };
                    f(&lk, c, Some(li), Some(ri))?;
                    adv_l = Adv::Yes;
                    adv_r = Adv::Yes;
                }
            }
        } else if l.level == r.level {
            let (lk, rk) = (l.key(), r.key());
            match lk.cmp(&rk) {
                std::cmp::Ordering::Less => adv_l = Adv::Yes,
                std::cmp::Ordering::Greater => adv_r = Adv::Yes,
                std::cmp::Ordering::Equal => {
                    if l.ptr() == r.ptr() {
                        // Shared subtree: skip it on both sides.
                        adv_l = Adv::OnlyNext;
                        adv_r = Adv::OnlyNext;
                    } else {
                        adv_l = Adv::Yes;
                        adv_r = Adv::Yes;
                    }
                }
            }
        } else if l.level < r.level {
            adv_r = Adv::Yes;
        } else {
            adv_l = Adv::Yes;
        }
    }
}
