//! Commit (the kernel's btrfs_commit_transaction, single-threaded): bring
//! the extent tree, block group items, free-space tree and root items up
//! to date until nothing changes any more; write every changed block to
//! every copy; flush; write the superblock, with a rotated backup root, to
//! every copy on every device; flush. A crash before the superblock write
//! leaves the previous commit whole; the superblock write is the commit
//! point.

use super::Trans;
use crate::error::{Error, Result};
use crate::io::volumes::Placement;
use ubtrfs_format::consts::*;
use ubtrfs_format::superblock::RootBackup;

/// Passes of the update loop before giving up: each pass changes fewer
/// blocks than the one before (blocks changed once are changed in place),
/// so a handful suffice; more means a bug, not a big transaction.
const MAX_PASSES: usize = 64;

impl Trans {
    /// Writes ROOT_ITEMs of the trees whose root moved.
    fn update_root_items(&mut self) -> Result<bool> {
        let mut changed = false;
        for id in self.dirty_roots() {
            if id == ROOT_TREE_OBJECTID || id == CHUNK_TREE_OBJECTID {
                continue;
            }
            let r = self.roots.get_mut(&id).unwrap();
            r.dirty = false;
            r.item.bytenr = r.bytenr;
            r.item.level = r.level;
            let bytes = r.item.to_bytes();
            let key_offset = r.key_offset;
            let key = ubtrfs_format::Key::new(id, ROOT_ITEM, key_offset);
            self.put_item(ROOT_TREE_OBJECTID, key, bytes)?;
            changed = true;
        }
        Ok(changed)
    }

    /// Brings the bookkeeping trees up to date with this transaction's
    /// changes.
    fn settle(&mut self) -> Result<()> {
        for _ in 0..MAX_PASSES {
            let mut changed = self.flush_csums()?;
            changed |= self.write_pending_chunks()?;
            changed |= self.run_delayed_refs()?;
            changed |= self.update_block_group_items()?;
            changed |= self.update_free_space_tree()?;
            changed |= self.update_root_items()?;
            if !changed && self.refs.is_empty() {
                return Ok(());
            }
        }
        Err(Error::corrupt(
            "commit",
            format!("extent and free-space bookkeeping did not settle in {MAX_PASSES} passes"),
        ))
    }

    /// Writes `data` at logical address `logical` on every copy.
    pub(crate) fn write_logical(&self, logical: u64, data: &[u8]) -> Result<()> {
        self.write_logical_to(logical, data, false)
    }

    /// As [`Trans::write_logical`] for file data, which nothing reads
    /// again in this transaction: the device sends it to the disk at once
    /// (O_DIRECT, or write-back started), so that the flush at commit does
    /// not find gigabytes waiting.
    pub(crate) fn write_logical_data(&self, logical: u64, data: &[u8]) -> Result<()> {
        self.write_logical_to(logical, data, true)
    }

    /// Shares `len` bytes of `src` from `src_off` at logical address
    /// `logical` on every copy (the device clones them from the file).
    pub(crate) fn clone_logical(
        &self,
        logical: u64,
        src: &std::fs::File,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        let mut done = 0u64;
        while done < len {
            let at = logical + done;
            let piece = self.info.chunks.map(at, len - done)?;
            let Placement::Mirrors(copies) = &piece.placement else {
                return Err(Error::Unsupported(format!(
                    "cloning into RAID5/6 block groups (logical {at})"
                )));
            };
            for loc in copies {
                let dev = self.info.devices.get(&loc.devid).ok_or_else(|| {
                    Error::Invalid(format!(
                        "devid {} is missing: cannot write logical {at}",
                        loc.devid
                    ))
                })?;
                dev.dev()
                    .clone_range_from(src, src_off + done, piece.len, loc.physical)
                    .map_err(|e| Error::Io {
                        path: dev.path.display().to_string(),
                        op: format!(
                            "clone {} bytes into physical {} (logical {at}, FICLONERANGE{})",
                            piece.len,
                            loc.physical,
                            match e.raw_os_error() {
                                Some(libc::EXDEV) =>
                                    ": the source is on another filesystem than the image",
                                Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) =>
                                    ": the image's filesystem cannot clone these ranges",
                                _ => "",
                            }
                        ),
                        source: e,
                    })?;
            }
            done += piece.len;
        }
        Ok(())
    }

    fn write_logical_to(&self, logical: u64, data: &[u8], write_back: bool) -> Result<()> {
        let mut done = 0usize;
        while done < data.len() {
            let at = logical + done as u64;
            let piece = self.info.chunks.map(at, (data.len() - done) as u64)?;
            let n = piece.len as usize;
            let Placement::Mirrors(copies) = &piece.placement else {
                return Err(Error::Unsupported(format!(
                    "writing to RAID5/6 block groups (logical {at})"
                )));
            };
            for loc in copies {
                let dev = self.info.devices.get(&loc.devid).ok_or_else(|| {
                    Error::Invalid(format!(
                        "devid {} is missing: cannot write logical {at}",
                        loc.devid
                    ))
                })?;
                let buf = &data[done..done + n];
                if write_back {
                    dev.dev().write_data(buf, loc.physical)
                } else {
                    dev.dev().write_at(buf, loc.physical)
                }
                .map_err(|e| Error::Io {
                    path: dev.path.display().to_string(),
                    op: format!(
                        "write {n} bytes at physical {} (logical {at})",
                        loc.physical
                    ),
                    source: e,
                })?;
            }
            done += n;
        }
        Ok(())
    }

    /// Writes one tree block that is not part of this transaction's trees
    /// (a log tree's) at its address, on every copy.
    pub(crate) fn write_block(&self, eb: &crate::tree::buf::ExtentBuffer) -> Result<()> {
        let bytes = eb.encode(
            self.nodesize(),
            &self.fsid,
            &self.chunk_tree_uuid,
            self.info.csum_type,
        );
        self.write_logical(eb.bytenr, &bytes)
    }

    /// Whether this transaction made chunks or changed devices: a log tree
    /// cannot point into them (replay reads through the committed chunk
    /// tree), so fsync commits instead.
    pub fn has_new_chunks(&self) -> bool {
        !self.pending_chunks.is_empty() || self.dev_items_dirty || self.alloc.has_new_groups()
    }

    /// Makes a log tree written since the last commit the one a crash
    /// replays (the kernel's btrfs_sync_log): everything written so far
    /// (data, log blocks) is flushed, then the committed superblock is
    /// written again with the log root tree's root, and flushed. The
    /// commit after it writes a superblock without a log.
    pub(crate) fn write_log_super(&mut self, log_root: u64, level: u8) -> Result<()> {
        self.flush_all()?;
        let mut sb = self.info.sb.clone();
        sb.log_root = log_root;
        sb.log_root_level = level;
        self.write_superblocks(&sb)?;
        self.flush_all()
    }

    fn flush_all(&self) -> Result<()> {
        for d in self.info.devices.values() {
            d.dev().flush().map_err(|e| Error::Io {
                path: d.path.display().to_string(),
                op: "flush".into(),
                source: e,
            })?;
        }
        Ok(())
    }

    /// Commits: after this returns the image on disk is the new one, and
    /// the transaction goes on as the next one.
    pub fn commit(&mut self) -> Result<()> {
        // The superblock's generation is the root tree's: its root block
        // is copied even when nothing else changed (the kernel's
        // commit_cowonly_roots).
        let r = self.root(ROOT_TREE_OBJECTID)?;
        let (bytenr, level, gen) = (r.bytenr, r.level, r.item.generation);
        if gen != self.transid {
            let expect = crate::tree::block::BlockExpect {
                level: Some(level),
                generation: Some(gen),
                first_key: None,
            };
            self.cow(ROOT_TREE_OBJECTID, bytenr, expect, None)?;
        }
        self.settle()?;
        let ns = self.nodesize();
        let csum = self.info.csum_type;
        // Blocks in address order: sequential writes.
        let mut addrs: Vec<u64> = self.bufs.keys().copied().collect();
        addrs.sort_unstable();
        for &a in &addrs {
            let eb = &self.bufs[&a];
            let bytes = eb.encode(ns, &self.fsid, &self.chunk_tree_uuid, csum);
            self.write_logical(a, &bytes)?;
        }
        self.flush_all()?;
        let sb = self.new_superblock()?;
        self.write_superblocks(&sb)?;
        self.flush_all()?;
        // The new commit is on disk.
        for a in addrs {
            self.info.cache.remove(a);
        }
        self.bufs.clear();
        self.forget_decoded();
        self.alloc.unpin_all();
        self.info.sb = sb;
        self.transid += 1;
        Ok(())
    }

    /// The superblock of this commit.
    fn new_superblock(&mut self) -> Result<ubtrfs_format::Superblock> {
        let mut sb = self.info.sb.clone();
        let root = self.roots[&ROOT_TREE_OBJECTID].clone();
        let chunk = self.roots[&CHUNK_TREE_OBJECTID].clone();
        sb.generation = self.transid;
        // A commit makes any log tree of this transaction moot.
        sb.log_root = 0;
        sb.log_root_level = 0;
        sb.root = root.bytenr;
        sb.root_level = root.level;
        sb.chunk_root = chunk.bytenr;
        sb.chunk_root_level = chunk.level;
        sb.chunk_root_generation = chunk.item.generation;
        sb.bytes_used = self.alloc.used_bytes();
        if self.roots.contains_key(&UUID_TREE_OBJECTID) || sb.uuid_tree_generation != 0 {
            sb.uuid_tree_generation = self.transid;
        }
        let slot = (0..4)
            .max_by_key(|&i| (sb.backups[i].tree_root_gen, i))
            .map_or(0, |i| {
                if sb.backups[i].tree_root_gen == 0 {
                    0
                } else {
                    (i + 1) % 4
                }
            });
        let mut b = RootBackup {
            tree_root: root.bytenr,
            tree_root_gen: self.transid,
            tree_root_level: root.level,
            chunk_root: chunk.bytenr,
            chunk_root_gen: chunk.item.generation,
            chunk_root_level: chunk.level,
            total_bytes: sb.total_bytes,
            bytes_used: sb.bytes_used,
            num_devices: sb.num_devices,
            ..Default::default()
        };
        for (id, (bytenr, gen, level)) in [
            EXTENT_TREE_OBJECTID,
            FS_TREE_OBJECTID,
            DEV_TREE_OBJECTID,
            CSUM_TREE_OBJECTID,
        ]
        .into_iter()
        .map(|id| {
            let r = self
                .root(id)
                .ok()
                .map(|r| (r.bytenr, r.item.generation, r.level));
            (id, r.unwrap_or((0, 0, 0)))
        })
        .collect::<Vec<_>>()
        {
            match id {
                EXTENT_TREE_OBJECTID => {
                    (b.extent_root, b.extent_root_gen, b.extent_root_level) = (bytenr, gen, level)
                }
                FS_TREE_OBJECTID => {
                    (b.fs_root, b.fs_root_gen, b.fs_root_level) = (bytenr, gen, level)
                }
                DEV_TREE_OBJECTID => {
                    (b.dev_root, b.dev_root_gen, b.dev_root_level) = (bytenr, gen, level)
                }
                _ => (b.csum_root, b.csum_root_gen, b.csum_root_level) = (bytenr, gen, level),
            }
        }
        sb.backups[slot] = b;
        Ok(sb)
    }

    /// Writes `sb` to every superblock copy that fits on every device,
    /// each with its own device item.
    fn write_superblocks(&self, sb: &ubtrfs_format::Superblock) -> Result<()> {
        for d in self.info.devices.values() {
            let mut s = sb.clone();
            s.dev_item = self
                .dev_items
                .get(&d.devid)
                .copied()
                .unwrap_or(d.superblock.dev_item);
            for &off in SUPER_OFFSETS.iter() {
                if off + SUPER_SIZE as u64 > d.size {
                    break;
                }
                s.bytenr = off;
                let bytes = s.to_bytes();
                d.dev().write_at(&bytes, off).map_err(|e| Error::Io {
                    path: d.path.display().to_string(),
                    op: format!("write superblock at {off}"),
                    source: e,
                })?;
            }
        }
        Ok(())
    }
}
