//! Reads through the chunk map with mirror and parity fallback, and tree
//! block verification (checksum, bytenr, fsid, structure, and what the
//! parent pointer promised), with the verified blocks kept in the cache.

use crate::cache::block_cache::BlockCache;
use crate::cache::reada::{self, Prefetcher};
use crate::error::{Error, Result};
use crate::io::device::Device;
use crate::io::pending::PendingWrites;
use crate::io::raid56;
use crate::io::volumes::{ChunkMap, PhysLoc, Placement};
use crate::tree::block::{check_expectations, verify_tree_block, BlockExpect, TreeBlock};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use ubtrfs_format::consts::CSUM_SIZE_MAX;
use ubtrfs_format::{CsumType, Superblock};

/// Largest data read [`FsInfo::read_data`] takes: callers read at most a
/// megabyte or two at once, so a larger length comes from an unchecked
/// on-disk value and must not size a buffer.
pub const MAX_DATA_READ: usize = 16 << 20;

/// Most recovery reports kept; later ones are counted, not stored.
const MAX_REPORTS: usize = 1000;

/// Everything needed to read verified blocks of one filesystem.
pub struct FsInfo {
    pub sb: Superblock,
    pub devices: BTreeMap<u64, Device>,
    pub chunks: ChunkMap,
    pub cache: Arc<BlockCache>,
    /// Tree block readahead into `cache` (see [`crate::cache::reada`]).
    pub reada: Prefetcher,
    /// Blocks a commit's thread is writing: reads of them wait.
    pub pending: Arc<PendingWrites>,
    pub csum_type: CsumType,
    pub nodesize: u32,
    pub sectorsize: u32,
    reports: Mutex<(Vec<String>, usize)>,
    /// Blocks read as `check --repair` will write them
    /// ([`FsInfo::mend_leaves`], [`FsInfo::drop_leaves`]).
    mend: Mend,
}

/// Blocks taken as `ubtrfs check` and its repair see them, each
/// remembered with what was done: leaves whose only fault is the layout of
/// their item data, mended on read (see [`ubtrfs_format::node::mend_leaf`]),
/// and nodes read without their pointers to unreadable leaves (see
/// [`ubtrfs_format::node::drop_pointers`]).
#[derive(Default)]
struct Mend {
    on: std::sync::atomic::AtomicBool,
    mended: Mutex<BTreeMap<u64, (String, Vec<u64>)>>,
    /// Unreadable leaves taken out of their parents, with why they do not
    /// read ([`FsInfo::drop_leaves`]).
    dropped: Mutex<BTreeMap<u64, String>>,
    any_dropped: std::sync::atomic::AtomicBool,
}

impl FsInfo {
    pub fn new(sb: Superblock, devices: BTreeMap<u64, Device>, cache_bytes: u64) -> Self {
        let cache = Arc::new(BlockCache::new(cache_bytes, sb.nodesize));
        FsInfo {
            csum_type: sb.csum_type,
            nodesize: sb.nodesize,
            sectorsize: sb.sectorsize,
            reada: Prefetcher::new(cache.clone()),
            pending: Arc::default(),
            cache,
            chunks: ChunkMap::default(),
            devices,
            sb,
            reports: Mutex::new((Vec::new(), 0)),
            mend: Mend::default(),
        }
    }

    /// From now on a leaf whose checksum is good but whose item data is
    /// out of place is read mended, as `check --repair` will write it
    /// (check and its repair turn this on; every other reader refuses
    /// such a leaf).
    pub fn mend_leaves(&self) {
        self.mend
            .on
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// From now on nodes are read without their pointers to the leaves
    /// `leaves` (address -> why it does not read), as `check --repair`
    /// will write them: the check judges the trees without them, and what
    /// they held that other items name is found missing. A node keeps a
    /// pointer it cannot lose (its first: its parent's key for it would
    /// change; or its only one). Returns whether any of them was not
    /// dropped already.
    pub fn drop_leaves(&self, leaves: impl IntoIterator<Item = (u64, String)>) -> bool {
        let mut d = self.mend.dropped.lock().unwrap();
        let before = d.len();
        d.extend(leaves);
        self.mend
            .any_dropped
            .store(!d.is_empty(), std::sync::atomic::Ordering::Relaxed);
        d.len() > before
    }

    /// The node `b` without its pointers to dropped leaves.
    fn without_dropped(&self, b: Arc<TreeBlock>) -> Arc<TreeBlock> {
        if !self
            .mend
            .any_dropped
            .load(std::sync::atomic::Ordering::Relaxed)
            || b.header.level == 0
        {
            return b;
        }
        let dropped = self.mend.dropped.lock().unwrap().clone();
        let Some((mut bytes, gone)) =
            ubtrfs_format::node::drop_pointers(b.bytes(), |x| dropped.contains_key(&x))
        else {
            return b;
        };
        let sum = self.csum_type.compute(&bytes[32..]);
        bytes[..32].copy_from_slice(&sum);
        let Ok(nb) = verify_tree_block(
            bytes.into_boxed_slice(),
            b.bytenr,
            self.csum_type,
            None,
            &BlockExpect::default(),
        ) else {
            return b;
        };
        let what: Vec<String> = gone
            .iter()
            .map(|(i, k, x)| format!("slot {i} {k} -> leaf {x} ({})", dropped[x]))
            .collect();
        self.mend.mended.lock().unwrap().insert(
            b.bytenr,
            (
                format!("pointers to unreadable leaves dropped: {}", what.join("; ")),
                gone.iter().map(|g| g.2).collect(),
            ),
        );
        let nb = Arc::new(nb);
        self.cache.remove(b.bytenr);
        self.cache.insert(nb.clone());
        nb
    }

    /// What was mended in the block at `bytenr` (a leaf's item data put
    /// in place, a node's pointers to dropped leaves taken out), if it was
    /// read mended, with the leaves dropped from it.
    pub fn mended(&self, bytenr: u64) -> Option<(String, Vec<u64>)> {
        self.mend.mended.lock().unwrap().get(&bytenr).cloned()
    }

    /// The leaf at `bytenr` (raw bytes `raw`, which failed verification)
    /// mended and verified, when it can be.
    fn read_mended(&self, bytenr: u64, raw: &[u8], expect: &BlockExpect) -> Option<TreeBlock> {
        self.csum_type.verify(&raw[32..], &raw[..32]).ok()?;
        let m = ubtrfs_format::node::mend_leaf(raw)?;
        let mut bytes = m.bytes.into_boxed_slice();
        let sum = self.csum_type.compute(&bytes[32..]);
        bytes[..32].copy_from_slice(&sum);
        let b = verify_tree_block(
            bytes,
            bytenr,
            self.csum_type,
            self.sb.block_fsid().as_ref(),
            expect,
        )
        .ok()?;
        let mut what = Vec::new();
        if let Some((i, k, by)) = m.moved.first() {
            what.push(format!(
                "item data out of place: {} items moved, from slot {i} {k} (by {by} bytes)",
                m.moved.len()
            ));
        }
        if !m.dropped.is_empty() {
            let some: Vec<String> = m
                .dropped
                .iter()
                .take(4)
                .map(|(i, k)| format!("slot {i} {k}"))
                .collect();
            let more = m.dropped.len().saturating_sub(some.len());
            what.push(format!(
                "{} items dropped, their data overlapping the item before: {}{}",
                m.dropped.len(),
                some.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        self.mend
            .mended
            .lock()
            .unwrap()
            .insert(bytenr, (what.join("; "), Vec::new()));
        Some(b)
    }

    /// What the readahead threads need to read and verify blocks.
    pub fn reada_source(&self) -> reada::Source<'_> {
        reada::Source {
            chunks: &self.chunks,
            devices: &self.devices,
            nodesize: self.nodesize,
            csum_type: self.csum_type,
            fsid: self.sb.block_fsid(),
        }
    }

    /// Records that a bad copy or missing device was worked around.
    pub fn report(&self, msg: String) {
        let mut r = self.reports.lock().unwrap();
        if r.0.len() < MAX_REPORTS {
            r.0.push(msg);
        } else {
            r.1 += 1;
        }
    }

    /// Takes the recovery reports gathered so far (and how many were dropped).
    pub fn take_reports(&self) -> (Vec<String>, usize) {
        std::mem::take(&mut *self.reports.lock().unwrap())
    }

    fn device(&self, devid: u64) -> Result<&Device> {
        self.devices.get(&devid).ok_or_else(|| {
            Error::NotFound(format!(
                "device devid {devid} is missing (pass it with --device)"
            ))
        })
    }

    /// Number of independent copies at `logical`.
    pub fn num_copies(&self, logical: u64) -> Result<usize> {
        self.chunks.num_copies(logical)
    }

    /// Reads `buf.len()` bytes at `logical` from copy `mirror` (0-based).
    ///
    /// For mirrored profiles copy `m` is stripe `m` of the piece. For
    /// RAID5/6 the copies follow the kernel's retry order (its mirror
    /// numbers are ours plus one):
    ///
    /// * 0: the data stripe itself;
    /// * 1: rebuilt from P and the other data stripes;
    /// * 2 (RAID6): rebuilt from Q and the other data stripes, not using P;
    /// * 3.. (RAID6): rebuilt from P and Q, taking one more data stripe as
    ///   bad too (the kernel's choice: stripe `n - mirror`, stepping over the
    ///   target), so that any two bad stripes are worked around by some copy.
    ///
    /// A rebuild never reads the target. When a stripe it needs cannot be
    /// read (its device was not given, or an I/O error), the stripe is taken
    /// as lost too and the rebuild uses whatever combination is left, failing
    /// only when more stripes are lost than the parity covers.
    pub fn read_copy(&self, logical: u64, buf: &mut [u8], mirror: usize) -> Result<()> {
        self.pending.wait_for(logical, buf.len() as u64);
        let mut done = 0usize;
        while done < buf.len() {
            let at = logical + done as u64;
            let piece = self.chunks.map(at, (buf.len() - done) as u64)?;
            let out = &mut buf[done..done + piece.len as usize];
            match &piece.placement {
                Placement::Mirrors(m) => {
                    let loc = m.get(mirror).ok_or_else(|| {
                        Error::NotFound(format!("logical {at}: no copy {mirror}"))
                    })?;
                    self.device(loc.devid)?.read_at(out, loc.physical)?;
                }
                Placement::Parity {
                    target,
                    row,
                    nparity,
                } => {
                    if mirror >= piece.num_copies() {
                        return Err(Error::NotFound(format!("logical {at}: no copy {mirror}")));
                    }
                    self.read_parity_copy(at, out, *target, row, *nparity, mirror)?;
                }
            }
            done += piece.len as usize;
        }
        Ok(())
    }

    /// Copy `mirror` of one RAID5/6 piece; see [`FsInfo::read_copy`].
    fn read_parity_copy(
        &self,
        at: u64,
        out: &mut [u8],
        target: usize,
        row: &[PhysLoc],
        nparity: usize,
        mirror: usize,
    ) -> Result<()> {
        let n = row.len();
        let ndata = n - nparity;
        let read = |j: usize, buf: &mut [u8]| -> Result<()> {
            self.device(row[j].devid)?.read_at(buf, row[j].physical)
        };
        if mirror == 0 {
            return read(target, out);
        }
        // Stripes taken as lost: the target, plus for mirror >= 2 the one
        // the kernel fails on that retry (P for mirror 2, then data stripes
        // from the last one down, skipping the target).
        let mut lost = vec![false; n];
        lost[target] = true;
        if mirror >= 2 {
            let mut extra = n - mirror;
            if extra <= target {
                extra -= 1;
            }
            lost[extra] = true;
        }
        let mut bufs: Vec<Option<Vec<u8>>> = vec![None; n];
        let mut errors: Vec<Error> = Vec::new();
        loop {
            let lost_data = (0..ndata).filter(|&j| lost[j]).count();
            let use_p = !lost[ndata];
            let use_q = nparity == 2 && !lost[ndata + 1];
            let parity_ok = match lost_data {
                1 => use_p || use_q,
                2 => use_p && use_q,
                _ => false,
            };
            if !parity_ok {
                let why = if errors.is_empty() {
                    "too many stripes lost".to_string()
                } else {
                    errors
                        .iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join("; ")
                };
                let msg = format!("logical {at}: cannot rebuild copy {mirror} from parity: {why}");
                // Missing devices stay "not found"; anything else is damage.
                return Err(if errors.iter().all(Error::is_not_found) {
                    Error::NotFound(msg)
                } else {
                    Error::corrupt(format!("logical {at}"), msg)
                });
            }
            // One lost data stripe needs P, or Q when P is lost; two need both.
            let needed = (0..n).filter(|&j| {
                !lost[j]
                    && (j < ndata
                        || (j == ndata && use_p)
                        || (j == ndata + 1 && (lost_data == 2 || !use_p)))
            });
            let mut failed = None;
            for j in needed {
                if bufs[j].is_some() {
                    continue;
                }
                let mut b = vec![0u8; out.len()];
                match read(j, &mut b) {
                    Ok(()) => bufs[j] = Some(b),
                    Err(e) => {
                        errors.push(e);
                        failed = Some(j);
                        break;
                    }
                }
            }
            match failed {
                Some(j) => lost[j] = true,
                None => break,
            }
        }
        let stripes: Vec<Option<&[u8]>> = (0..n)
            .map(|j| if lost[j] { None } else { bufs[j].as_deref() })
            .collect();
        raid56::rebuild_data(&stripes, nparity, target, out)
            .map_err(|e| Error::corrupt(format!("logical {at}"), e.to_string()))
    }

    /// Reads and verifies the tree block at `bytenr`, trying every copy.
    /// A block that readahead is reading is waited for rather than read
    /// again; if that read failed, the block is read here as usual (and
    /// any error reported from here).
    pub fn read_tree_block(&self, bytenr: u64, expect: BlockExpect) -> Result<Arc<TreeBlock>> {
        self.read_tree_block_as_stored(bytenr, expect)
            .map(|b| self.without_dropped(b))
    }

    fn read_tree_block_as_stored(
        &self,
        bytenr: u64,
        expect: BlockExpect,
    ) -> Result<Arc<TreeBlock>> {
        if let Some(b) = self.cache.get(bytenr) {
            check_expectations(&b.header, b.node(), bytenr, &expect)?;
            return Ok(b);
        }
        if self.reada.claim_or_wait(bytenr) {
            if let Some(b) = self.cache.get_again(bytenr) {
                check_expectations(&b.header, b.node(), bytenr, &expect)?;
                return Ok(b);
            }
        }
        let copies = self.num_copies(bytenr)?;
        let mut failures = Vec::new();
        for mirror in 0..copies {
            match self.read_tree_block_copy(bytenr, mirror, &expect) {
                Ok(block) => {
                    if !failures.is_empty() {
                        self.report(format!(
                            "tree block {bytenr}: {}; read copy {mirror} instead",
                            failures.join("; ")
                        ));
                    }
                    let block = Arc::new(block);
                    self.cache.insert(block.clone());
                    return Ok(block);
                }
                Err(e) => failures.push(format!("copy {mirror}: {e}")),
            }
        }
        Err(Error::corrupt(
            format!("tree block at bytenr {bytenr}"),
            failures.join("; "),
        ))
    }

    fn read_tree_block_copy(
        &self,
        bytenr: u64,
        mirror: usize,
        expect: &BlockExpect,
    ) -> Result<TreeBlock> {
        let mut buf = vec![0u8; self.nodesize as usize].into_boxed_slice();
        self.read_copy(bytenr, &mut buf, mirror)?;
        verify_tree_block(
            buf,
            bytenr,
            self.csum_type,
            self.sb.block_fsid().as_ref(),
            expect,
        )
        .or_else(|e| {
            // Read again for mending: rare, and no copy of every good
            // block kept meanwhile.
            if !self.mend.on.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(e);
            }
            let mut raw = vec![0u8; self.nodesize as usize];
            self.read_copy(bytenr, &mut raw, mirror)?;
            self.read_mended(bytenr, &raw, expect).ok_or(e)
        })
    }

    /// Reads `len` bytes of data at `logical`, verifying each sector against
    /// `csums` (one entry per sector, None where the data has no checksum),
    /// and falling back to other copies when a sector does not match.
    ///
    /// Copies are chosen per piece of the chunk mapping and then per sector,
    /// like the kernel's read repair: on RAID5/6 which copy is good changes
    /// from row to row (a bad device holds data in one row and parity in the
    /// next), so one copy number for the whole range would not do.
    pub fn read_data(
        &self,
        logical: u64,
        len: usize,
        csums: &[Option<[u8; CSUM_SIZE_MAX]>],
    ) -> Result<Vec<u8>> {
        if len > MAX_DATA_READ {
            return Err(Error::corrupt(
                format!("data at logical {logical}"),
                format!("read of {len} bytes is larger than {MAX_DATA_READ}"),
            ));
        }
        let ss = self.sectorsize as usize;
        let mut buf = vec![0u8; len];
        let mut done = 0usize;
        while done < len {
            let at = logical + done as u64;
            let piece = self.chunks.map(at, (len - done) as u64)?;
            let plen = piece.len as usize;
            // Sector i of the piece is csums[first + i] (pieces start on
            // sector boundaries when `logical` does).
            let first = done / ss;
            let nsec = plen.div_ceil(ss);
            let mut pending: Vec<usize> = (0..nsec).collect();
            let mut failures: Vec<String> = Vec::new();
            let mut tmp = vec![0u8; plen];
            for mirror in 0..piece.num_copies() {
                if let Err(e) = self.read_copy(at, &mut tmp, mirror) {
                    failures.push(format!("copy {mirror}: {e}"));
                    continue;
                }
                let (mut nbad, mut first_err) = (0usize, None);
                pending.retain(|&i| {
                    let r = i * ss..((i + 1) * ss).min(plen);
                    let sector_at = at + r.start as u64;
                    let csum = csums.get(first + i).copied().flatten();
                    match self.verify_data(sector_at, &tmp[r.clone()], &[csum]) {
                        Ok(()) => {
                            buf[done + r.start..done + r.end].copy_from_slice(&tmp[r]);
                            false
                        }
                        Err(e) => {
                            nbad += 1;
                            first_err.get_or_insert(e);
                            true
                        }
                    }
                });
                if let Some(e) = first_err {
                    let more = if nbad > 1 {
                        format!(" (and {} more sectors)", nbad - 1)
                    } else {
                        String::new()
                    };
                    failures.push(format!("copy {mirror}: {e}{more}"));
                }
                if pending.is_empty() {
                    if !failures.is_empty() {
                        self.report(format!(
                            "data at logical {at} length {plen}: {}; read copy {mirror} instead",
                            failures.join("; ")
                        ));
                    }
                    break;
                }
            }
            if !pending.is_empty() {
                return Err(Error::corrupt(
                    format!("data at logical {logical} length {len}"),
                    failures.join("; "),
                ));
            }
            done += plen;
        }
        Ok(buf)
    }

    /// Checks each sector of `buf` (read from `logical`) against `csums`.
    pub fn verify_data(
        &self,
        logical: u64,
        buf: &[u8],
        csums: &[Option<[u8; CSUM_SIZE_MAX]>],
    ) -> Result<()> {
        let ss = self.sectorsize as usize;
        for (i, sector) in buf.chunks(ss).enumerate() {
            if let Some(Some(c)) = csums.get(i) {
                if sector.len() == ss {
                    self.csum_type.verify(sector, c).map_err(|e| {
                        Error::format(
                            format!("data sector at logical {}", logical + (i * ss) as u64),
                            e,
                        )
                    })?;
                }
            }
        }
        Ok(())
    }
}
