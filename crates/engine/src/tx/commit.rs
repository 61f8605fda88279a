//! Commit (the kernel's btrfs_commit_transaction, single-threaded): bring
//! the extent tree, block group items, free-space tree and root items up
//! to date until nothing changes any more; write every changed block to
//! every copy; flush; write the superblock, with a rotated backup root, to
//! every copy on every device; flush. A crash before the superblock write
//! leaves the previous commit whole; the superblock write is the commit
//! point.

use super::{durable, Trans};
use crate::error::{Error, Result};
use crate::io::raid56;
use crate::io::volumes::{PhysLoc, Placement};
use crate::tree::buf::ExtentBuffer;
use std::sync::Arc;
use ubtrfs_format::consts::*;
use ubtrfs_format::superblock::RootBackup;

/// Most bytes of adjacent tree blocks a commit writes in one go.
const MAX_BLOCK_RUN: usize = 1 << 20;

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

    /// The ROOT_ITEMs this transaction holds in memory and writes at its
    /// commit (new trees, moved roots, changed items), as they would be
    /// written now: a reader of the running root tree (TREE_SEARCH on the
    /// mount) sees them in place of the root tree's older copies.
    pub fn pending_root_items(&self) -> Vec<(ubtrfs_format::Key, Vec<u8>)> {
        self.roots
            .values()
            .filter(|r| r.dirty && r.id != ROOT_TREE_OBJECTID && r.id != CHUNK_TREE_OBJECTID)
            .map(|r| {
                let mut item = r.item.clone();
                item.bytenr = r.bytenr;
                item.level = r.level;
                (
                    ubtrfs_format::Key::new(r.id, ROOT_ITEM, r.key_offset),
                    item.to_bytes(),
                )
            })
            .collect()
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

    /// Lets the devices start writing what was just written at `logical`
    /// (mirrored copies; RAID5/6 rows are left to the flush): the disk
    /// works while the rest of the commit is encoded, and the flush waits
    /// for less.
    fn start_writeback(&self, logical: u64, len: u64) {
        let Ok(None) = self.info.chunks.parity_row(logical) else {
            return;
        };
        let mut done = 0;
        while done < len {
            let Ok(piece) = self.info.chunks.map(logical + done, len - done) else {
                return;
            };
            if let Placement::Mirrors(copies) = &piece.placement {
                for loc in copies {
                    if let Some(d) = self.info.devices.get(&loc.devid) {
                        d.dev().start_writeback(loc.physical, piece.len);
                    }
                }
            }
            done += piece.len;
        }
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
                let dev = self.writer_dev(loc.devid, at)?;
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
        self.write_mapped(&self.info.chunks, logical, data, write_back)
    }

    /// Writes `data` at `logical` as `map` places it (a relocated chunk's
    /// new stripes before the chunk map has them).
    pub(crate) fn write_mapped(
        &self,
        map: &crate::io::volumes::ChunkMap,
        logical: u64,
        data: &[u8],
        write_back: bool,
    ) -> Result<()> {
        let mut done = 0usize;
        while done < data.len() {
            let at = logical + done as u64;
            if let Some(row) = map.parity_row(at)? {
                let n = ((row.logical + row.data_len() - at) as usize).min(data.len() - done);
                self.write_parity_row(&row, at, &data[done..done + n], write_back)?;
                done += n;
                continue;
            }
            let piece = map.map(at, (data.len() - done) as u64)?;
            let n = piece.len as usize;
            let Placement::Mirrors(copies) = &piece.placement else {
                unreachable!("parity placements are written by rows");
            };
            for &loc in copies {
                self.write_phys(loc, &data[done..done + n], write_back, at)?;
            }
            done += n;
        }
        Ok(())
    }

    /// Writes `data` at logical `at`, all inside the RAID5/6 `row`, with
    /// the row's parity. The columns written (the union over data strips
    /// of the bytes changed) get P and Q computed afresh from every data
    /// strip: the bytes not written are read from the devices, so parity
    /// comes out right whatever it was before (a new chunk's stripes hold
    /// what the devices held). A full row reads nothing. As in the
    /// kernel, a crash between the data and the parity writes leaves that
    /// column's parity stale (the RAID5/6 write hole): only a rebuild
    /// from it, with a device lost, would see it.
    fn write_parity_row(
        &self,
        row: &crate::io::volumes::ParityRow,
        at: u64,
        data: &[u8],
        write_back: bool,
    ) -> Result<()> {
        let sl = row.stripe_len;
        let ndata = row.ndata();
        let end = at + data.len() as u64;
        // The columns [a, b) of each data strip the write covers.
        let cover: Vec<Option<(u64, u64)>> = (0..ndata as u64)
            .map(|j| {
                let s = row.logical + j * sl;
                let (a, b) = (at.max(s), end.min(s + sl));
                (a < b).then_some((a - s, b - s))
            })
            .collect();
        let lo = cover.iter().flatten().map(|c| c.0).min().unwrap_or(0);
        let hi = cover.iter().flatten().map(|c| c.1).max().unwrap_or(0);
        let width = (hi - lo) as usize;
        let mut strips = Vec::with_capacity(ndata);
        for (j, c) in cover.iter().enumerate() {
            let mut buf = vec![0u8; width];
            match *c {
                Some((a, b)) if a == lo && b == hi => {}
                _ => self.read_phys(row.strips[j], lo, &mut buf, at)?,
            }
            if let Some((a, b)) = *c {
                let from = (row.logical + j as u64 * sl + a - at) as usize;
                buf[(a - lo) as usize..(b - lo) as usize]
                    .copy_from_slice(&data[from..from + (b - a) as usize]);
            }
            strips.push(buf);
        }
        let mut p = vec![0u8; width];
        let mut q = vec![0u8; if row.nparity == 2 { width } else { 0 }];
        let refs: Vec<&[u8]> = strips.iter().map(|s| s.as_slice()).collect();
        raid56::gen_parity(&refs, &mut p, (row.nparity == 2).then_some(&mut q[..]));
        for (j, c) in cover.iter().enumerate() {
            if let Some((a, b)) = *c {
                let mut loc = row.strips[j];
                loc.physical += a;
                let buf = &strips[j][(a - lo) as usize..(b - lo) as usize];
                self.write_phys(loc, buf, write_back, row.logical + j as u64 * sl + a)?;
            }
        }
        for (k, par) in [p, q].iter().enumerate().take(row.nparity) {
            let mut loc = row.strips[ndata + k];
            loc.physical += lo;
            self.write_phys(loc, par, false, at)?;
        }
        Ok(())
    }

    /// The device of `devid`, which a writer always has.
    fn writer_dev(&self, devid: u64, at: u64) -> Result<&crate::io::device::Device> {
        self.info.devices.get(&devid).ok_or_else(|| {
            Error::Invalid(format!(
                "devid {devid} is missing: cannot write logical {at}"
            ))
        })
    }

    /// Writes `buf` at a physical place (for logical `at`, named in errors).
    /// Writes file-data-like bytes (sent to the disk at once) at one
    /// physical place; `at` names the logical address in errors.
    pub(crate) fn write_phys_to(&self, loc: PhysLoc, buf: &[u8], at: u64) -> Result<()> {
        self.write_phys(loc, buf, true, at)
    }

    fn write_phys(&self, loc: PhysLoc, buf: &[u8], write_back: bool, at: u64) -> Result<()> {
        let dev = self.writer_dev(loc.devid, at)?;
        if write_back {
            dev.dev().write_data(buf, loc.physical)
        } else {
            dev.dev().write_at(buf, loc.physical)
        }
        .map_err(|e| phys_write_error(&dev.path, buf.len(), loc.physical, at, e))
    }

    /// Where `len` bytes of file data at `logical` go: one target per
    /// copy of each piece, for a writer that writes them without the
    /// transaction (a direct write, outside the mount's lock). None for
    /// RAID5/6 block groups, whose parity rows are read, computed and
    /// written under the transaction only.
    pub(crate) fn data_targets(&self, logical: u64, len: u64) -> Result<Option<Vec<DataTarget>>> {
        let mut out = Vec::new();
        let mut done = 0u64;
        while done < len {
            let at = logical + done;
            let piece = self.info.chunks.map(at, len - done)?;
            let Placement::Mirrors(copies) = &piece.placement else {
                return Ok(None);
            };
            for loc in copies {
                let dev = self.writer_dev(loc.devid, at)?;
                out.push(DataTarget {
                    dev: dev.dev().clone(),
                    path: dev.path.clone(),
                    physical: loc.physical,
                    logical: at,
                    from: done as usize,
                    len: piece.len as usize,
                });
            }
            done += piece.len;
        }
        Ok(Some(out))
    }

    /// Where each run of `blocks` goes ([`Trans::data_targets`]); None
    /// when one is in a RAID5/6 block group.
    fn run_targets(
        &self,
        blocks: &[(u64, Arc<ExtentBuffer>)],
        runs: &[std::ops::Range<usize>],
        ns: usize,
    ) -> Result<Option<Vec<Vec<DataTarget>>>> {
        let mut out = Vec::with_capacity(runs.len());
        for r in runs {
            match self.data_targets(blocks[r.start].0, (r.len() * ns) as u64)? {
                Some(t) => out.push(t),
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// Reads `buf.len()` bytes `off` bytes into the strip at `loc` (the
    /// rest of a RAID5/6 column, for its parity).
    fn read_phys(&self, loc: PhysLoc, off: u64, buf: &mut [u8], at: u64) -> Result<()> {
        let dev = self.writer_dev(loc.devid, at)?;
        dev.dev()
            .read_at(buf, loc.physical + off)
            .map_err(|e| Error::Io {
                path: dev.path.display().to_string(),
                op: format!(
                    "read {} bytes at physical {} (parity of logical {at})",
                    buf.len(),
                    loc.physical + off
                ),
                source: e,
            })
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

    /// The superblock writes that make a log tree written since the last
    /// commit the one a crash replays (the kernel's btrfs_sync_log): the
    /// committed superblock again with the log root tree's root, for
    /// [`durable::make_durable`] (a flush of everything written so far,
    /// data and log blocks, then these, then a flush). The commit after it
    /// writes a superblock without a log.
    pub(crate) fn log_super_writes(
        &mut self,
        log_root: u64,
        level: u8,
    ) -> Result<Vec<durable::DevSupers>> {
        // A deferred commit's superblock goes first: written after this
        // one, it would drop the log root.
        self.finish_deferred()?;
        let mut sb = self.info.sb.clone();
        sb.log_root = log_root;
        sb.log_root_level = level;
        Ok(self.super_writes(&sb, &self.dev_items))
    }

    /// Writes the superblock as it is (the same generation and roots) on
    /// every copy of every device, after a flush of what was written
    /// before: for a tool that changes blocks in place and then the
    /// superblock (tune -U).
    pub(crate) fn write_superblock_now(&mut self) -> Result<()> {
        self.finish_deferred()?;
        let sb = self.info.sb.clone();
        let supers = self.super_writes(&sb, &self.dev_items);
        durable::make_durable(&supers)
    }

    /// Commits: after this returns the image on disk is the new one, and
    /// the transaction goes on as the next one.
    pub fn commit(&mut self) -> Result<()> {
        self.finish_deferred()?;
        self.commit_blocks(true)
    }

    /// Commits without waiting for the disk: the blocks are written (and
    /// sent to the disk), the superblock waits for the next commit, or for
    /// [`Trans::finish_deferred`], which writes it after a flush, as
    /// [`Trans::commit`] does at once. Until then the image on disk is the
    /// one before, whole: what that one reaches and this commit freed stays
    /// pinned, so that nothing written meanwhile lands on it. For writers
    /// that commit as they go (receive): the disk writes one commit while
    /// the next is built. A transaction whose log tree holds items
    /// commits at once (the log's space is only held until a commit).
    pub fn commit_deferred(&mut self) -> Result<()> {
        self.finish_deferred()?;
        let sync = self.alloc.log_holds_items;
        self.commit_blocks(sync)
    }

    /// Writes the superblock of a deferred commit, if any: after this the
    /// image on disk is as of the last commit.
    pub fn finish_deferred(&mut self) -> Result<()> {
        let Some(d) = self.deferred.take() else {
            return Ok(());
        };
        d.writer.wait()?;
        self.alloc.unpin(d.pinned);
        Ok(())
    }

    /// The commit: the bookkeeping settled, the blocks written, then with
    /// `sync` the flush, the superblock and the flush again (else the
    /// superblock is kept for [`Trans::finish_deferred`]).
    fn commit_blocks(&mut self, sync: bool) -> Result<()> {
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
        self.mark_quotas_stale()?;
        self.settle()?;
        // The superblock first: it may look up root items, in the blocks
        // about to leave `bufs`.
        let sb = self.new_superblock()?;
        let supers = self.super_writes(&sb, &self.dev_items);
        // Blocks in address order, adjacent ones in one write: sequential
        // writes, and on RAID5/6 whole rows, whose parity needs no reads.
        let mut blocks: Vec<(u64, Arc<ExtentBuffer>)> =
            self.bufs.drain().map(|(a, b)| (a, Arc::new(b))).collect();
        blocks.sort_unstable_by_key(|b| b.0);
        if let Err(e) = self.write_commit(&blocks, sync, supers) {
            // A failed commit leaves the transaction's blocks as they were
            // (the caller aborts; reads go on from them).
            self.bufs = blocks
                .into_iter()
                .map(|(a, b)| (a, Arc::try_unwrap(b).unwrap_or_else(|b| (*b).clone())))
                .collect();
            return Err(e);
        }
        // The blocks at these addresses are the new ones now (written,
        // durable or not, or being written: reads wait for those). No
        // readahead of an older block at one of them may land in the
        // cache after it is dropped from there.
        self.info.reada.wait_idle();
        for (a, _) in &blocks {
            self.info.cache.remove(*a);
        }
        self.keep_written_decoded(blocks);
        self.info.sb = sb;
        self.transid += 1;
        Ok(())
    }

    /// On a filesystem with quota groups: this engine keeps no quota
    /// counts, so the quota status says they are inconsistent, as the
    /// kernel marks them when it cannot account for a change (the kernel
    /// and btrfs check then expect differences; `btrfs quota rescan`
    /// recounts them). Once set, the flag stays until such a rescan.
    fn mark_quotas_stale(&mut self) -> Result<()> {
        use ubtrfs_format::items::{QgroupStatus, QGROUP_STATUS_INCONSISTENT, QGROUP_STATUS_ON};
        if !self.has_tree(QUOTA_TREE_OBJECTID)? {
            return Ok(());
        }
        let key = ubtrfs_format::Key::new(0, QGROUP_STATUS, 0);
        let Some(d) = self.lookup(QUOTA_TREE_OBJECTID, &key)? else {
            return Ok(());
        };
        let Ok(mut st) = QgroupStatus::parse(&d) else {
            return Ok(());
        };
        if st.flags & QGROUP_STATUS_ON == 0 || st.flags & QGROUP_STATUS_INCONSISTENT != 0 {
            return Ok(());
        }
        st.flags |= QGROUP_STATUS_INCONSISTENT;
        let bytes = st.to_bytes();
        self.update_item(QUOTA_TREE_OBJECTID, &key, |d| {
            d[..bytes.len()].copy_from_slice(&bytes)
        })?;
        Ok(())
    }

    /// Writes a commit's `blocks` (in address order) and its superblock
    /// copies `supers`: with `sync`, here, after a flush, then flushes
    /// again; else the commit is deferred to its thread
    /// ([`Trans::commit_deferred`]).
    fn write_commit(
        &mut self,
        blocks: &[(u64, Arc<ExtentBuffer>)],
        sync: bool,
        supers: Vec<durable::DevSupers>,
    ) -> Result<()> {
        let ns = self.nodesize() as usize;
        let csum = self.info.csum_type;
        let runs = block_runs(blocks, ns);
        // A deferred commit's thread writes its blocks, unless one is in a
        // RAID5/6 group (parity rows are written under the transaction).
        let targets = if sync {
            None
        } else {
            self.run_targets(blocks, &runs, ns)?
        };
        if targets.is_none() {
            // One buffer for every run: a fresh megabyte each time is
            // pages mapped and zeroed by the kernel again.
            let mut buf = Vec::with_capacity(MAX_BLOCK_RUN + ns);
            for r in &runs {
                buf.clear();
                buf.resize(r.len() * ns, 0);
                for ((_, b), out) in blocks[r.clone()].iter().zip(buf.chunks_exact_mut(ns)) {
                    b.encode_into(out, &self.fsid, &self.chunk_tree_uuid, csum);
                }
                let at = blocks[r.start].0;
                self.write_logical(at, &buf)?;
                self.start_writeback(at, buf.len() as u64);
            }
        }
        if sync {
            durable::make_durable(&supers)?;
            // The new commit is on disk.
            self.alloc.unpin_all();
            self.dev_space.release_pinned();
        } else {
            // The thread's blocks: pending until written, and read from
            // memory by the next transaction meanwhile.
            let (writes, written) = match targets {
                None => (None, Default::default()),
                Some(targets) => {
                    let ranges = runs
                        .iter()
                        .map(|r| (blocks[r.start].0, blocks[r.start].0 + (r.len() * ns) as u64))
                        .collect();
                    self.info.pending.start(ranges);
                    let writes = durable::BlockWrites {
                        runs: runs
                            .iter()
                            .zip(targets)
                            .map(|(r, targets)| durable::BlockRun {
                                blocks: blocks[r.clone()].iter().map(|b| b.1.clone()).collect(),
                                targets,
                            })
                            .collect(),
                        nodesize: ns,
                        fsid: self.fsid,
                        chunk_tree_uuid: self.chunk_tree_uuid,
                        csum,
                        pending: self.info.pending.clone(),
                    };
                    (Some(writes), blocks.iter().cloned().collect())
                }
            };
            // What this commit freed stays pinned until its superblock is
            // on disk; the next transaction allocates around it.
            let pinned = self.alloc.committed();
            self.deferred = Some(super::DeferredSuper {
                writer: durable::Background::start(writes, supers)?,
                written,
                pinned,
            });
        }
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

    /// `sb`'s copies for every device, each copy with its own device
    /// item, encoded to write.
    fn super_writes(
        &self,
        sb: &ubtrfs_format::Superblock,
        dev_items: &std::collections::BTreeMap<u64, ubtrfs_format::items::DevItem>,
    ) -> Vec<durable::DevSupers> {
        let mut out = Vec::with_capacity(self.info.devices.len());
        // Added devices first (see `added_devices`).
        let mut devs: Vec<&crate::io::device::Device> = self.info.devices.values().collect();
        devs.sort_by_key(|d| !self.added_devices.contains(&d.devid));
        for d in devs {
            let mut s = sb.clone();
            s.dev_item = dev_items
                .get(&d.devid)
                .copied()
                .unwrap_or(d.superblock.dev_item);
            let mut copies = Vec::new();
            // Copies within the bytes the filesystem has of the device
            // (its DEV_ITEM), as the kernel's write_dev_supers.
            let size = s.dev_item.total_bytes.min(d.size);
            for &off in SUPER_OFFSETS.iter() {
                if off + SUPER_SIZE as u64 > size {
                    break;
                }
                s.bytenr = off;
                copies.push((off, s.to_bytes().to_vec()));
            }
            out.push(durable::DevSupers::new(
                d.dev().clone(),
                d.path.clone(),
                copies,
            ));
        }
        out
    }
}

/// One copy of a run of file data and the device place it goes to
/// ([`Trans::data_targets`]): written without the transaction.
pub struct DataTarget {
    dev: std::sync::Arc<dyn crate::io::dev::BlockDev>,
    path: std::path::PathBuf,
    physical: u64,
    logical: u64,
    /// The run's bytes within the caller's buffer.
    from: usize,
    len: usize,
}

impl DataTarget {
    /// The same target for a buffer whose run starts `by` bytes later.
    pub(crate) fn shifted(mut self, by: usize) -> DataTarget {
        self.from += by;
        self
    }

    /// As [`DataTarget::write`] for tree blocks, which are read again:
    /// through the page cache, with write-back started.
    pub(crate) fn write_cached(&self, data: &[u8]) -> Result<()> {
        let buf = self.bytes(data)?;
        self.dev
            .write_at(buf, self.physical)
            .map_err(|e| phys_write_error(&self.path, buf.len(), self.physical, self.logical, e))?;
        self.dev.start_writeback(self.physical, buf.len() as u64);
        Ok(())
    }

    fn bytes<'a>(&self, data: &'a [u8]) -> Result<&'a [u8]> {
        data.get(self.from..self.from + self.len).ok_or_else(|| {
            Error::Invalid(format!(
                "data target at logical {} past the {} bytes given",
                self.logical,
                data.len()
            ))
        })
    }

    /// Writes the part of this target's bytes that `data`, a prefix of
    /// the buffer the targets were made for, covers (a compressed extent
    /// written into the start of the space allocated for it whole).
    pub fn write_prefix(&self, data: &[u8]) -> Result<()> {
        if self.from >= data.len() {
            return Ok(());
        }
        let buf = &data[self.from..(self.from + self.len).min(data.len())];
        self.dev
            .write_data(buf, self.physical)
            .map_err(|e| phys_write_error(&self.path, buf.len(), self.physical, self.logical, e))
    }

    /// Writes this target's bytes of `data` (the whole buffer the targets
    /// were made for).
    pub fn write(&self, data: &[u8]) -> Result<()> {
        let buf = self.bytes(data)?;
        self.dev
            .write_data(buf, self.physical)
            .map_err(|e| phys_write_error(&self.path, buf.len(), self.physical, self.logical, e))
    }
}

/// Runs of adjacent blocks (index ranges into `blocks`, in address
/// order), each at most [`MAX_BLOCK_RUN`] bytes.
fn block_runs(blocks: &[(u64, Arc<ExtentBuffer>)], ns: usize) -> Vec<std::ops::Range<usize>> {
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, (a, _)) in blocks.iter().enumerate() {
        match runs.last_mut() {
            Some(r)
                if blocks[r.start].0 + (r.len() * ns) as u64 == *a
                    && r.len() * ns < MAX_BLOCK_RUN =>
            {
                r.end = i + 1
            }
            _ => runs.push(i..i + 1),
        }
    }
    runs
}

/// The error of a failed write of `len` bytes at `physical` on `path`
/// (for logical `at`).
fn phys_write_error(
    path: &std::path::Path,
    len: usize,
    physical: u64,
    at: u64,
    e: std::io::Error,
) -> Error {
    Error::Io {
        path: path.display().to_string(),
        op: format!("write {len} bytes at physical {physical} (logical {at})"),
        source: e,
    }
}
