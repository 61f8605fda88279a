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
use std::collections::BTreeMap;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{FileExtent, FileExtentKind, RootItem};
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
        let mut ranges = Vec::new();
        for &s in starts {
            let g = self
                .alloc
                .groups
                .get(&s)
                .ok_or_else(|| Error::NotFound(format!("no block group at {s}")))?;
            if g.flags & BG_DATA == 0 || g.flags & BG_METADATA != 0 {
                return Err(Error::Unsupported(format!(
                    "block group {s}: only data block groups (not mixed ones) are compacted"
                )));
            }
            ranges.push((s, g.end()));
        }
        // The emptiest first, one at a time as the kernel does: each
        // group's extents may go to the free space of the groups after
        // it, and each group emptied frees device space for new chunks.
        ranges.sort_by_key(|&(s, _)| self.alloc.groups.get(&s).map_or(0, |g| g.used));
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
            // Emptied: its space is free now that the commit is on disk.
            if self.chunk_is_empty(s) {
                self.remove_empty_chunk(s)?;
            } else if let Some(g) = self.alloc.groups.get_mut(&s) {
                g.ro = false;
            }
            done.groups += 1;
        }
        self.commit()?;
        Ok(done)
    }
}
