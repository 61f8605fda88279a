//! Compacting data block groups: their extents move to other block
//! groups, as the kernel's relocation.c moves data for balance's usage
//! filters. Chunks that only need another place on the devices move whole
//! instead ([`super::relocation`]); this is for block groups that are
//! half empty, whose space only frees when what they hold goes elsewhere.
//!
//! Each extent gets a new address in a block group that is not being
//! compacted (or a new chunk), its bytes and checksums are copied there,
//! and every file extent item that points to it, in every subvolume and
//! snapshot, is made to point to the new one, its reference moved along
//! (a leaf a snapshot shares is copied for each tree that changes it, as
//! any write to it would; data stays shared). Nothing is written over:
//! until the commit the image is the old one, and after it the emptied
//! groups are removed. A snapshot that shares a leaf with its source
//! sees the same item: each tree's is changed (the leaf copied for each),
//! each dropping the reference the copy gave it. Refused, changing
//! nothing: mixed block groups, a v1 space cache (its cache files hold
//! extents too), a subvolume whose deletion is not finished.

use super::delayed_ref::Backref;
use super::Trans;
use crate::error::{Error, Result};
use crate::tree::block::BlockExpect;
use std::collections::{BTreeMap, BTreeSet};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{ExtentRecord, FileExtent, FileExtentKind, InlineRef, RootItem};
use ubtrfs_format::node::MAX_LEVEL;
use ubtrfs_format::Key;

/// Bytes copied per read and write.
const COPY_UNIT: u64 = 4 << 20;

/// One file extent item pointing into a group being compacted.
#[derive(Debug, Clone, Copy)]
struct User {
    tree: u64,
    key: Key,
    /// Its offset into the extent (for the reference's key).
    offset: u64,
}

/// What a compaction did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Compacted {
    pub groups: usize,
    pub extents: u64,
    pub bytes: u64,
}

impl Trans {
    /// The block groups at `starts` as ranges, the emptiest first, one at
    /// a time as the kernel compacts them: each group's contents may go to
    /// the free space of the groups after it, and each group emptied frees
    /// device space for new chunks. Refused (`why`) for a group whose
    /// flags `kind` does not take.
    fn compaction_order(
        &self,
        starts: &[u64],
        kind: impl Fn(u64) -> bool,
        why: &str,
    ) -> Result<Vec<(u64, u64)>> {
        let mut ranges = Vec::new();
        for &s in starts {
            let g = self
                .alloc
                .groups
                .get(&s)
                .ok_or_else(|| Error::NotFound(format!("no block group at {s}")))?;
            if !kind(g.flags) {
                return Err(Error::Unsupported(format!("block group {s}: {why}")));
            }
            ranges.push((s, g.end(), g.used));
        }
        ranges.sort_by_key(|r| r.2);
        Ok(ranges.into_iter().map(|(s, e, _)| (s, e)).collect())
    }

    /// After the commit that emptied group `s` (its space free now that
    /// the commit is on disk): the group goes, or, not empty, takes
    /// allocations again.
    fn end_group_compaction(&mut self, s: u64) -> Result<()> {
        if self.chunk_is_empty(s) {
            self.remove_empty_chunk(s)?;
        } else if let Some(g) = self.alloc.groups.get_mut(&s) {
            g.ro = false;
        }
        Ok(())
    }

    /// Every tree holding files, by id. Refused when a subvolume's
    /// deletion is still under way (its tree is half dropped).
    fn file_trees(&self) -> Result<Vec<u64>> {
        let mut ids = Vec::new();
        let mut bad = None;
        self.scan(ROOT_TREE_OBJECTID, &Key::MIN, |k, d| {
            if k.item_type == ROOT_ITEM && is_fs_tree(k.objectid) && ids.last() != Some(&k.objectid)
            {
                match RootItem::parse(d) {
                    Ok(r) if r.refs == 0 || r.drop_progress != Key::MIN || r.drop_level != 0 => {
                        bad = Some(k.objectid)
                    }
                    Ok(_) => ids.push(k.objectid),
                    Err(_) => bad = Some(k.objectid),
                }
            }
            true
        })?;
        if let Some(id) = bad {
            return Err(Error::Unsupported(format!(
                "subvolume {id} is being deleted (or its root item does not read): let a \
                 mount finish the deletion before compacting block groups"
            )));
        }
        Ok(ids)
    }

    /// Moves every extent out of the data block groups `starts` (see the
    /// module header), a commit per group, each emptied group removed.
    /// `progress` is told the bytes moved so far. Checked before anything
    /// changes: every extent's references are all file extent items.
    pub fn compact_data_groups(
        &mut self,
        starts: &[u64],
        progress: &mut dyn FnMut(u64),
    ) -> Result<Compacted> {
        if !self.has_free_space_tree() {
            return Err(Error::Unsupported(
                "compacting block groups of a filesystem with a v1 space cache (its cache \
                 files hold extents too): mount it once with -o space_cache=v2"
                    .into(),
            ));
        }
        let ranges = self.compaction_order(
            starts,
            |f| f & BG_DATA != 0 && f & BG_METADATA == 0,
            "only data block groups (not mixed ones) are compacted",
        )?;
        let trees = self.file_trees()?;
        let mut done = Compacted::default();
        let mut buf = vec![0u8; COPY_UNIT as usize];
        for (s, e) in ranges {
            // The extents, and who points at them, now.
            let mut extents: BTreeMap<u64, u64> = BTreeMap::new();
            self.scan(EXTENT_TREE_OBJECTID, &Key::new(s, 0, 0), |k, _| {
                if k.objectid >= e {
                    return false;
                }
                if k.item_type == EXTENT_ITEM {
                    extents.insert(k.objectid, k.offset);
                }
                true
            })?;
            let mut users: BTreeMap<u64, Vec<User>> = BTreeMap::new();
            for &tree in &trees {
                self.scan(tree, &Key::MIN, |k, d| {
                    if k.item_type == EXTENT_DATA {
                        if let Ok(FileExtent {
                            kind:
                                FileExtentKind::Extent {
                                    disk_bytenr,
                                    offset,
                                    ..
                                },
                            ..
                        }) = FileExtent::parse(d)
                        {
                            if disk_bytenr >= s && disk_bytenr < e {
                                users.entry(disk_bytenr).or_default().push(User {
                                    tree,
                                    key: *k,
                                    offset,
                                });
                            }
                        }
                    }
                    true
                })?;
            }
            // An extent no file extent item was found for (its referrer
            // is in no tree listed) stays where it is, and so does its
            // group: only references that are moved are dropped.
            extents.retain(|b, _| users.contains_key(b));
            if let Some(g) = self.alloc.groups.get_mut(&s) {
                g.ro = true;
            }
            for (&old, &len) in &extents {
                let new = self.alloc_data(len)?;
                let mut at = 0;
                while at < len {
                    let n = (len - at).min(COPY_UNIT);
                    let b = &mut buf[..n as usize];
                    self.read_logical_any(old + at, b)?;
                    self.write_logical_data(new + at, b)?;
                    at += n;
                }
                let sums = self.csums_in(old, old + len)?;
                self.delete_csums(old, len)?;
                for (a, sum) in sums {
                    self.add_csum_run(new + (a - old), sum)?;
                }
                for (i, u) in users[&old].iter().enumerate() {
                    let bytes = new.to_le_bytes();
                    self.update_item(u.tree, &u.key, |d| d[21..29].copy_from_slice(&bytes))?;
                    let r = Backref::file_extent(u.tree, u.key.objectid, u.key.offset, u.offset);
                    self.drop_data_ref(old, len, r);
                    self.add_data_ref(new, len, r, i == 0);
                }
                done.extents += 1;
                done.bytes += len;
                progress(done.bytes);
            }
            self.commit()?;
            self.end_group_compaction(s)?;
            done.groups += 1;
        }
        self.commit()?;
        Ok(done)
    }
}

/// Passes over a metadata group before giving up: one moves every block a
/// root reaches; a second finds none left unless references were missed.
const TREE_PASSES: usize = 3;

impl Trans {
    /// Moves every tree block out of the metadata or system block groups
    /// `starts`, a commit per group, each emptied group removed. A block
    /// moves by being copied on write from every tree that reaches it
    /// (its path from each such root copied, as any change to the tree
    /// would copy it): the copies go to groups not being compacted, and
    /// the old block is freed when the last tree lets go of it. A block a
    /// snapshot shares with its source is copied once for each (metadata
    /// sharing is lost, data sharing stays). `progress` is told the bytes
    /// of tree blocks moved so far. Refused, changing nothing: mixed
    /// groups, a log tree not yet replayed (its blocks have no extent
    /// items), a subvolume whose deletion is not finished.
    pub fn compact_tree_groups(
        &mut self,
        starts: &[u64],
        progress: &mut dyn FnMut(u64),
    ) -> Result<Compacted> {
        if self.info.sb.log_root != 0 {
            return Err(Error::Unsupported(
                "compacting metadata block groups with a log tree not replayed: run `ubtrfs \
                 rescue replay-log` (or mount the image once) first"
                    .into(),
            ));
        }
        let ranges = self.compaction_order(
            starts,
            |f| f & BG_DATA == 0,
            "only metadata and system block groups (not mixed ones) have their tree \
             blocks moved",
        )?;
        self.file_trees()?;
        let ns = self.nodesize() as u64;
        let mut done = Compacted::default();
        for (s, e) in ranges {
            if let Some(g) = self.alloc.groups.get_mut(&s) {
                g.ro = true;
            }
            let mut left = 0;
            for _ in 0..TREE_PASSES {
                let blocks = self.tree_blocks_in(s, e)?;
                left = blocks.len();
                if blocks.is_empty() {
                    break;
                }
                for (&bytenr, &level) in &blocks {
                    let b = self.load_block(
                        bytenr,
                        BlockExpect {
                            level: Some(level),
                            generation: None,
                            first_key: None,
                        },
                    )?;
                    let first = if b.is_leaf() {
                        b.items().keys().first().copied().unwrap_or(Key::MIN)
                    } else {
                        b.ptrs().first().map_or(Key::MIN, |p| p.key)
                    };
                    for root in self.roots_reaching(bytenr, 0)? {
                        self.cow_path(root, &first)?;
                    }
                    done.extents += 1;
                    done.bytes += ns;
                    progress(done.bytes);
                }
                // The old blocks' references go with the commit.
                self.commit()?;
            }
            if left > 0 && !self.tree_blocks_in(s, e)?.is_empty() {
                return Err(Error::corrupt(
                    format!("block group {s}"),
                    "tree blocks still in it after every tree reaching them was copied: \
                     their back references name no tree that holds them",
                ));
            }
            self.end_group_compaction(s)?;
            done.groups += 1;
        }
        self.commit()?;
        Ok(done)
    }

    /// The tree blocks in `[s, e)` by address, with their levels.
    fn tree_blocks_in(&self, s: u64, e: u64) -> Result<BTreeMap<u64, u8>> {
        let mut out = BTreeMap::new();
        let mut bad = None;
        self.scan(EXTENT_TREE_OBJECTID, &Key::new(s, 0, 0), |k, d| {
            if k.objectid >= e {
                return false;
            }
            match k.item_type {
                METADATA_ITEM => {
                    out.insert(k.objectid, k.offset.min(u8::MAX as u64) as u8);
                }
                EXTENT_ITEM => match ExtentRecord::parse(k, d) {
                    Ok(r) => {
                        if let Some(tb) = r.tree_block {
                            out.insert(k.objectid, tb.level);
                        }
                    }
                    Err(err) => bad = Some(Error::format(format!("extent tree key {k}"), err)),
                },
                _ => {}
            }
            bad.is_none()
        })?;
        match bad {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// The trees whose roots reach tree block `bytenr`: its references by
    /// tree, and those of every node that refers to it by address, up.
    fn roots_reaching(&self, bytenr: u64, depth: usize) -> Result<BTreeSet<u64>> {
        if depth > MAX_LEVEL as usize {
            return Err(Error::corrupt(
                format!("tree block {bytenr}"),
                "its chain of parent back references is deeper than a tree",
            ));
        }
        let mut roots = BTreeSet::new();
        let mut parents = Vec::new();
        let mut bad = None;
        self.scan(EXTENT_TREE_OBJECTID, &Key::new(bytenr, 0, 0), |k, d| {
            if k.objectid != bytenr {
                return false;
            }
            match k.item_type {
                METADATA_ITEM | EXTENT_ITEM => match ExtentRecord::parse(k, d) {
                    Ok(r) => {
                        for r in r.refs {
                            match r {
                                InlineRef::TreeBlock { root } => {
                                    roots.insert(root);
                                }
                                InlineRef::SharedBlock { parent } => parents.push(parent),
                                _ => {}
                            }
                        }
                    }
                    Err(err) => bad = Some(Error::format(format!("extent tree key {k}"), err)),
                },
                TREE_BLOCK_REF => {
                    roots.insert(k.offset);
                }
                SHARED_BLOCK_REF => parents.push(k.offset),
                _ => {}
            }
            bad.is_none()
        })?;
        if let Some(e) = bad {
            return Err(e);
        }
        for p in parents {
            roots.extend(self.roots_reaching(p, depth + 1)?);
        }
        if let Some(r) = roots.iter().find(|&&r| r == TREE_RELOC_OBJECTID) {
            return Err(Error::Unsupported(format!(
                "tree block {bytenr} belongs to an unfinished relocation (tree {r})"
            )));
        }
        Ok(roots)
    }
}
