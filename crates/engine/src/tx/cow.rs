//! Copy-on-write of one tree block (the kernel's __btrfs_cow_block and
//! update_ref_for_cow), snapshots included: a block reached from more
//! than one tree is copied, never changed; the references of what it
//! points to are moved so that the extent tree stays exact:
//!
//! * shared, owned by this tree, children referenced by tree: the old
//!   block switches to full back references (its children gain a
//!   reference by its address), the copy keeps the tree's references;
//! * shared otherwise: the copy gives its children this tree's reference;
//! * not shared but with full back references: the copy's children get
//!   the tree's reference, the old block's by-address ones go;
//! * not shared: the old block is simply freed.

use super::delayed_ref::Backref;
use super::Trans;
use crate::error::{Error, Result};
use crate::tree::block::BlockExpect;
use crate::tree::buf::{ExtentBuffer, HEADER_FLAG_RELOC};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{ExtentRecord, FileExtent, FileExtentKind, BLOCK_FLAG_FULL_BACKREF};

impl Trans {
    /// Makes the block at `bytenr` (child `slot` of `parent`, or the root
    /// of `tree` when `parent` is None) writable in this transaction,
    /// copying it to a new address if it was committed. Returns its
    /// address now.
    pub(crate) fn cow(
        &mut self,
        tree: u64,
        bytenr: u64,
        expect: BlockExpect,
        parent: Option<(u64, usize)>,
    ) -> Result<u64> {
        if self.bufs.contains_key(&bytenr) {
            return Ok(bytenr);
        }
        let old = self.take_committed(bytenr, expect)?;
        if old.flags & HEADER_FLAG_RELOC != 0 {
            return Err(Error::Unsupported(format!(
                "tree {tree}: block {bytenr} belongs to an unfinished relocation"
            )));
        }
        let level = old.level;
        let new = self.alloc_tree_block(tree, level, Some(bytenr))?;
        let (refs, flags) =
            if old.owner != tree || (parent.is_some() && self.may_be_shared(tree, &old)?) {
                self.extent_info(bytenr, level)?
            } else {
                (1, 0)
            };
        let ns = self.nodesize() as u64;
        let full = flags & BLOCK_FLAG_FULL_BACKREF != 0;
        let old_owner = old.owner;
        // References move while `old` still has its address: by-address
        // references name it, and the copy's references by tree do not
        // depend on where the copy is (so no copy of the content is made
        // for them).
        if refs > 1 {
            // The block stays for its other users.
            if old_owner == tree && !full {
                self.mod_refs_of(&old, tree, true, 1)?;
                self.refs.set_full_backref(bytenr, ns, level);
            } else {
                self.mod_refs_of(&old, tree, false, 1)?;
            }
            self.add_tree_ref(bytenr, level, Backref::Tree { root: tree }, -1);
        } else {
            if full {
                self.mod_refs_of(&old, tree, false, 1)?;
                self.mod_refs_of(&old, tree, true, -1)?;
            }
            self.free_tree_block(bytenr, tree, level);
        }
        let mut eb = old;
        eb.reserve_block(self.nodesize());
        eb.bytenr = new;
        eb.generation = self.transid;
        eb.owner = tree;
        self.bufs.insert(new, eb);
        match parent {
            Some((p, slot)) => {
                let gen = self.transid;
                let ptr = &mut self.buf_mut(p).ptrs_mut()[slot];
                ptr.blockptr = new;
                ptr.generation = gen;
            }
            None => self.set_root(tree, new, level, self.transid),
        }
        Ok(new)
    }

    /// Whether a committed block of a subvolume tree may also be reached
    /// from a snapshot (the kernel's btrfs_block_can_be_shared; a root
    /// block never is: snapshots copy it).
    fn may_be_shared(&mut self, tree: u64, b: &ExtentBuffer) -> Result<bool> {
        let subvol = tree == FS_TREE_OBJECTID
            || (FIRST_FREE_OBJECTID..=LAST_FREE_OBJECTID).contains(&tree)
            || tree == DATA_RELOC_TREE_OBJECTID;
        if !subvol {
            return Ok(false);
        }
        let last_snapshot = self.root(tree)?.item.last_snapshot;
        Ok(b.generation <= last_snapshot)
    }

    /// References and flags of tree block `bytenr` as of now: the extent
    /// item with this transaction's pending changes.
    fn extent_info(&mut self, bytenr: u64, level: u8) -> Result<(u64, u64)> {
        let key = self.tree_block_key(bytenr, level);
        let (mut refs, mut flags) = match self.lookup(EXTENT_TREE_OBJECTID, &key)? {
            Some(d) => {
                let r = ExtentRecord::parse(&key, &d)
                    .map_err(|e| Error::format(format!("extent tree key {key}"), e))?;
                (r.item.refs as i64, r.item.flags)
            }
            None => (0, 0),
        };
        let (delta, set) = self.refs.pending(bytenr);
        refs += delta;
        flags |= set;
        if refs <= 0 {
            return Err(Error::corrupt(
                format!("extent tree key {key}"),
                "tree block in use has no references",
            ));
        }
        Ok((refs as u64, flags))
    }

    /// Adds (`delta` 1) or drops (-1) the references block `b` holds on
    /// its children or data extents: by its address (`full`) or as tree
    /// `tree`.
    pub(crate) fn mod_refs_of(
        &mut self,
        b: &ExtentBuffer,
        tree: u64,
        full: bool,
        delta: i64,
    ) -> Result<()> {
        if b.is_leaf() {
            for (k, d) in b.items().iter() {
                if k.item_type != EXTENT_DATA {
                    continue;
                }
                let fe = FileExtent::parse(d)
                    .map_err(|e| Error::format(format!("tree {tree} key {k}"), e))?;
                let FileExtentKind::Extent {
                    disk_bytenr,
                    disk_num_bytes,
                    offset,
                    ..
                } = fe.kind
                else {
                    continue;
                };
                if disk_bytenr == 0 {
                    continue;
                }
                let backref = if full {
                    Backref::SharedData { parent: b.bytenr }
                } else {
                    Backref::file_extent(tree, k.objectid, k.offset, offset)
                };
                self.refs
                    .add_data(disk_bytenr, disk_num_bytes, backref, delta, false);
            }
        } else {
            let backref = if full {
                Backref::SharedBlock { parent: b.bytenr }
            } else {
                Backref::Tree { root: tree }
            };
            for p in b.ptrs() {
                self.add_tree_ref(p.blockptr, b.level - 1, backref, delta);
            }
        }
        Ok(())
    }
}
