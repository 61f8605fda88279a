//! Delayed references (the kernel's delayed-ref.c) and their application
//! to the extent tree (extent-tree.c): every change to an extent's
//! references in a transaction is added up per extent and back reference,
//! and applied once at commit: new extents get their EXTENT_ITEM or skinny
//! METADATA_ITEM with inline references (keyed ones past the inline size
//! limit), changed ones are updated, extents left with no reference are
//! deleted and their space pinned until the commit is on disk.

use super::Trans;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{
    ExtentDataRef, ExtentItem, ExtentRecord, InlineRef, TreeBlockInfo, BLOCK_FLAG_FULL_BACKREF,
    EXTENT_FLAG_DATA, EXTENT_FLAG_TREE_BLOCK,
};
use ubtrfs_format::node::{HEADER_SIZE, ITEM_SIZE};
use ubtrfs_format::Key;

/// One back reference of an extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Backref {
    /// A tree block referenced by a tree's root (TREE_BLOCK_REF).
    Tree { root: u64 },
    /// A tree block referenced by its parent block (SHARED_BLOCK_REF).
    SharedBlock { parent: u64 },
    /// Data referenced by a file extent of `root`'s inode `objectid` at
    /// file offset `offset` (minus the extent's offset) (EXTENT_DATA_REF).
    Data {
        root: u64,
        objectid: u64,
        offset: u64,
    },
    /// Data referenced by a file extent in block `parent` (SHARED_DATA_REF).
    SharedData { parent: u64 },
}

impl Backref {
    /// The EXTENT_DATA_REF of the file extent item at file offset
    /// `item_off` of `root`'s inode `ino` whose data starts `extent_off`
    /// into its disk extent. The kernel keys the reference by the file
    /// offset the disk extent's start would have, so every piece of one
    /// extent, split or cloned, shares one reference (wrapping, as the
    /// kernel's u64 arithmetic does, for a piece cloned to a lower offset).
    pub fn file_extent(root: u64, ino: u64, item_off: u64, extent_off: u64) -> Backref {
        Backref::Data {
            root,
            objectid: ino,
            offset: item_off.wrapping_sub(extent_off),
        }
    }

    fn to_inline(self, count: u64) -> InlineRef {
        match self {
            Backref::Tree { root } => InlineRef::TreeBlock { root },
            Backref::SharedBlock { parent } => InlineRef::SharedBlock { parent },
            Backref::Data {
                root,
                objectid,
                offset,
            } => InlineRef::ExtentData(ExtentDataRef {
                root,
                objectid,
                offset,
                count: count as u32,
            }),
            Backref::SharedData { parent } => InlineRef::SharedData {
                parent,
                count: count as u32,
            },
        }
    }

    fn from_inline(r: &InlineRef) -> Option<(Backref, u64)> {
        Some(match *r {
            InlineRef::TreeBlock { root } => (Backref::Tree { root }, 1),
            InlineRef::SharedBlock { parent } => (Backref::SharedBlock { parent }, 1),
            InlineRef::ExtentData(d) => (
                Backref::Data {
                    root: d.root,
                    objectid: d.objectid,
                    offset: d.offset,
                },
                d.count as u64,
            ),
            InlineRef::SharedData { parent, count } => {
                (Backref::SharedData { parent }, count as u64)
            }
            InlineRef::ExtentOwner { .. } => return None,
        })
    }
}

/// The reference changes of one extent in this transaction.
#[derive(Debug, Clone)]
pub struct Head {
    pub num_bytes: u64,
    pub is_data: bool,
    /// Tree level (tree blocks).
    pub level: u8,
    /// Allocated in this transaction: no extent item exists yet.
    pub new: bool,
    pub deltas: BTreeMap<Backref, i64>,
    /// Extent flags to set (FULL_BACKREF).
    pub set_flags: u64,
    /// A new extent item's generation when not this transaction's (check's
    /// repair remaking the item of a block written before).
    pub generation: Option<u64>,
}

/// Reference changes not yet in the extent tree, by extent address.
#[derive(Debug, Default)]
pub struct DelayedRefs {
    heads: BTreeMap<u64, Head>,
}

impl DelayedRefs {
    fn add(&mut self, bytenr: u64, head: Head, backref: Backref, delta: i64) {
        let h = self.heads.entry(bytenr).or_insert(head);
        *h.deltas.entry(backref).or_insert(0) += delta;
    }

    /// A reference change on tree block `bytenr`; `new` when it was just
    /// allocated.
    pub fn add_tree_block(
        &mut self,
        bytenr: u64,
        num_bytes: u64,
        level: u8,
        backref: Backref,
        delta: i64,
        new: bool,
    ) {
        let head = Head {
            num_bytes,
            is_data: false,
            level,
            new,
            deltas: BTreeMap::new(),
            set_flags: 0,
            generation: None,
        };
        self.add(bytenr, head, backref, delta);
    }

    /// A reference change on data extent `bytenr`.
    pub fn add_data(
        &mut self,
        bytenr: u64,
        num_bytes: u64,
        backref: Backref,
        delta: i64,
        new: bool,
    ) {
        let head = Head {
            num_bytes,
            is_data: true,
            level: 0,
            new,
            deltas: BTreeMap::new(),
            set_flags: 0,
            generation: None,
        };
        self.add(bytenr, head, backref, delta);
    }

    /// The generation new extent item `bytenr` gets (else the
    /// transaction's), when it has reference changes queued.
    pub fn set_generation(&mut self, bytenr: u64, generation: u64) {
        if let Some(h) = self.heads.get_mut(&bytenr) {
            h.generation = Some(generation);
        }
    }

    /// Marks tree block `bytenr` as referencing its children by address.
    pub fn set_full_backref(&mut self, bytenr: u64, num_bytes: u64, level: u8) {
        let h = self.heads.entry(bytenr).or_insert(Head {
            num_bytes,
            is_data: false,
            level,
            new: false,
            deltas: BTreeMap::new(),
            set_flags: 0,
            generation: None,
        });
        h.set_flags |= BLOCK_FLAG_FULL_BACKREF;
    }

    /// The pending change of `bytenr`'s reference count, and flags to set.
    pub fn pending(&self, bytenr: u64) -> (i64, u64) {
        self.heads
            .get(&bytenr)
            .map_or((0, 0), |h| (h.deltas.values().sum(), h.set_flags))
    }

    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    /// Extents with reference changes waiting for the commit.
    pub fn len(&self) -> usize {
        self.heads.len()
    }

    fn take(&mut self) -> BTreeMap<u64, Head> {
        std::mem::take(&mut self.heads)
    }
}

/// Largest extent item kept inline (the kernel's BTRFS_MAX_EXTENT_ITEM_SIZE:
/// a sixteenth of a leaf's data, less an item header).
fn max_extent_item_size(nodesize: u32) -> usize {
    ((nodesize as usize - HEADER_SIZE) >> 4) - ITEM_SIZE
}

impl Trans {
    /// Records a new reference to data extent `bytenr`.
    pub fn add_data_ref(&mut self, bytenr: u64, num_bytes: u64, backref: Backref, new: bool) {
        self.refs.add_data(bytenr, num_bytes, backref, 1, new);
    }

    /// Every back reference of data extent `bytenr` (`num_bytes` long) with
    /// its count, committed ones and this transaction's changes added up;
    /// None when a reference is keyed (not inline: more owners than fit
    /// the extent item) and so not listed here.
    pub fn data_extent_owners(
        &mut self,
        bytenr: u64,
        num_bytes: u64,
    ) -> Result<Option<(u64, BTreeMap<Backref, i64>)>> {
        let mut owners: BTreeMap<Backref, i64> = BTreeMap::new();
        let mut generation = self.transid;
        let key = Key::new(bytenr, EXTENT_ITEM, num_bytes);
        if let Some(d) = self.lookup(EXTENT_TREE_OBJECTID, &key)? {
            let rec = ExtentRecord::parse(&key, &d)
                .map_err(|e| Error::format(format!("extent tree key {key}"), e))?;
            generation = rec.item.generation;
            let mut inline = 0u64;
            for r in &rec.refs {
                let Some((b, n)) = Backref::from_inline(r) else {
                    return Ok(None);
                };
                inline += n;
                *owners.entry(b).or_insert(0) += n as i64;
            }
            if inline != rec.item.refs {
                return Ok(None);
            }
        }
        if let Some(h) = self.refs.heads.get(&bytenr) {
            for (b, n) in &h.deltas {
                *owners.entry(*b).or_insert(0) += n;
            }
        }
        owners.retain(|_, n| *n != 0);
        Ok(Some((generation, owners)))
    }

    /// Drops a reference to data extent `bytenr`.
    /// Drops one back reference of tree block `bytenr` at `level` (check's
    /// repair of a leaf taken out of its parent); the block is freed with
    /// its last, not read.
    pub fn drop_tree_ref(&mut self, bytenr: u64, level: u8, backref: Backref) {
        let ns = self.nodesize() as u64;
        self.refs
            .add_tree_block(bytenr, ns, level, backref, -1, false);
    }

    pub fn drop_data_ref(&mut self, bytenr: u64, num_bytes: u64, backref: Backref) {
        self.refs.add_data(bytenr, num_bytes, backref, -1, false);
    }

    /// `delta` references of data extent `bytenr` added (or dropped, when
    /// negative) at once: check's repair setting a count.
    pub fn change_data_ref(&mut self, bytenr: u64, num_bytes: u64, backref: Backref, delta: i64) {
        self.refs.add_data(bytenr, num_bytes, backref, delta, false);
    }

    /// Applies every delayed reference to the extent tree. Returns whether
    /// there was anything to apply (changing the extent tree can make new
    /// references: the caller runs this until it returns false).
    pub(crate) fn run_delayed_refs(&mut self) -> Result<bool> {
        let heads = self.refs.take();
        if heads.is_empty() {
            return Ok(false);
        }
        for (bytenr, head) in heads {
            self.run_head(bytenr, head)?;
        }
        Ok(true)
    }

    fn extent_key(&self, bytenr: u64, head: &Head) -> Key {
        if head.is_data {
            Key::new(bytenr, EXTENT_ITEM, head.num_bytes)
        } else {
            self.tree_block_key(bytenr, head.level)
        }
    }

    fn run_head(&mut self, bytenr: u64, head: Head) -> Result<()> {
        let key = self.extent_key(bytenr, &head);
        let mut refs: BTreeMap<Backref, u64> = BTreeMap::new();
        let mut record = if head.new {
            if head.deltas.values().all(|&d| d == 0) {
                // Allocated and freed again before commit: never on disk,
                // and neither are its checksums (log replay copies a logged
                // extent's checksums before later log items drop it).
                if head.is_data {
                    self.flush_csums()?;
                    self.delete_csums(bytenr, head.num_bytes)?;
                }
                self.alloc.free_now(bytenr, head.num_bytes);
                return Ok(());
            }
            ExtentRecord {
                item: ExtentItem {
                    refs: 0,
                    generation: head.generation.unwrap_or(self.transid),
                    flags: if head.is_data {
                        EXTENT_FLAG_DATA
                    } else {
                        EXTENT_FLAG_TREE_BLOCK
                    },
                },
                // Without skinny metadata a tree block's EXTENT_ITEM holds
                // its level and a key (its first, as the kernel records
                // it when the block is made).
                tree_block: (!head.is_data && key.item_type == EXTENT_ITEM).then(|| {
                    TreeBlockInfo {
                        key: self
                            .bufs
                            .get(&bytenr)
                            .and_then(|b| b.first_key())
                            .unwrap_or(Key::MIN),
                        level: head.level,
                    }
                }),
                refs: Vec::new(),
            }
        } else {
            let data = self.lookup(EXTENT_TREE_OBJECTID, &key)?.ok_or_else(|| {
                Error::corrupt(
                    format!("extent tree key {key}"),
                    "reference change on an extent that has no extent item",
                )
            })?;
            let rec = ExtentRecord::parse(&key, &data)
                .map_err(|e| Error::format(format!("extent tree key {key}"), e))?;
            for r in &rec.refs {
                if let Some((b, c)) = Backref::from_inline(r) {
                    refs.insert(b, c);
                }
            }
            // Keyed references: only back reference types (the extent's
            // own METADATA_ITEM and a BLOCK_GROUP_ITEM at the same address
            // share the objectid).
            let lo = Key::new(bytenr, EXTENT_OWNER_REF, 0);
            let hi = Key::new(bytenr, SHARED_DATA_REF, u64::MAX);
            for (k, d) in self.items_in(EXTENT_TREE_OBJECTID, &lo, &hi)? {
                if InlineRef::inline_size_of(k.item_type).is_none() {
                    continue;
                }
                let r = InlineRef::from_keyed(&k, &d)
                    .map_err(|e| Error::format(format!("extent tree key {k}"), e))?;
                if let Some((b, c)) = Backref::from_inline(&r) {
                    refs.insert(b, c);
                }
                self.delete_item(EXTENT_TREE_OBJECTID, &k)?;
            }
            rec
        };
        for (b, d) in &head.deltas {
            let c = refs.entry(*b).or_insert(0);
            let n = *c as i64 + d;
            if n < 0 {
                return Err(Error::corrupt(
                    format!("extent {bytenr}"),
                    format!("reference {b:?} dropped below zero"),
                ));
            }
            *c = n as u64;
        }
        refs.retain(|_, c| *c > 0);
        let count: u64 = refs.values().sum();
        if count == 0 {
            self.delete_item(EXTENT_TREE_OBJECTID, &key)?;
            if head.is_data {
                self.delete_csums(bytenr, head.num_bytes)?;
            }
            self.alloc.pin(bytenr, head.num_bytes);
            return Ok(());
        }
        record.item.refs = count;
        record.item.flags |= head.set_flags;
        record.refs = refs.iter().map(|(b, &c)| b.to_inline(c)).collect();
        record.sort_refs();
        // Inline while the item stays under the limit; the rest keyed.
        let max = max_extent_item_size(self.nodesize());
        let mut keyed = Vec::new();
        while record.encoded_len() > max && record.refs.len() > 1 {
            keyed.push(record.refs.pop().unwrap());
        }
        self.put_item(EXTENT_TREE_OBJECTID, key, record.to_bytes())?;
        for r in keyed {
            let (k, d) = r
                .to_keyed(bytenr)
                .expect("every kind of backref has a keyed form");
            self.insert_item(EXTENT_TREE_OBJECTID, k, d)?;
        }
        Ok(())
    }

    /// Deletes the data checksums of `[bytenr, bytenr+len)`, splitting
    /// items that straddle the range.
    pub fn delete_csums(&mut self, bytenr: u64, len: u64) -> Result<()> {
        let cs = self.info.csum_type.size() as u64;
        let ss = self.sectorsize() as u64;
        let end = bytenr + len;
        // An item starting before the range may cover part of it: items
        // span at most a leaf's worth of checksums.
        let span = (crate::tree::buf::max_item_data(self.nodesize()) as u64 / cs) * ss;
        let start_key = Key::new(
            EXTENT_CSUM_OBJECTID,
            EXTENT_CSUM,
            bytenr.saturating_sub(span),
        );
        let hi = Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, end - 1);
        for (k, d) in self.items_in(CSUM_TREE_OBJECTID, &start_key, &hi)? {
            let istart = k.offset;
            let iend = istart + d.len() as u64 / cs * ss;
            if iend <= bytenr || istart >= end {
                continue;
            }
            self.delete_item(CSUM_TREE_OBJECTID, &k)?;
            if istart < bytenr {
                let keep = ((bytenr - istart) / ss * cs) as usize;
                self.insert_item(CSUM_TREE_OBJECTID, k, d[..keep].to_vec())?;
            }
            if iend > end {
                let from = ((end - istart) / ss * cs) as usize;
                self.insert_item(
                    CSUM_TREE_OBJECTID,
                    Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, end),
                    d[from..].to_vec(),
                )?;
            }
        }
        Ok(())
    }
}
