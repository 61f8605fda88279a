//! Reads through the chunk map with mirror and parity fallback, and tree
//! block verification (checksum, bytenr, fsid, structure, and what the
//! parent pointer promised), with the verified blocks kept in the cache.

use crate::cache::{BlockCache, TreeBlock};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::volumes::{ChunkMap, Placement};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use ubtrfs_format::key::Key;
use ubtrfs_format::node::{Header, Node};
use ubtrfs_format::{CsumType, Superblock};

/// Most recovery reports kept; later ones are counted, not stored.
const MAX_REPORTS: usize = 1000;

/// What a parent pointer says about the block it points to.
#[derive(Debug, Clone, Copy, Default)]
pub struct BlockExpect {
    pub level: Option<u8>,
    pub generation: Option<u64>,
    pub first_key: Option<Key>,
}

/// Everything needed to read verified blocks of one filesystem.
pub struct FsInfo {
    pub sb: Superblock,
    pub devices: BTreeMap<u64, Device>,
    pub chunks: ChunkMap,
    pub cache: BlockCache,
    pub csum_type: CsumType,
    pub nodesize: u32,
    pub sectorsize: u32,
    reports: Mutex<(Vec<String>, usize)>,
}

impl FsInfo {
    pub fn new(sb: Superblock, devices: BTreeMap<u64, Device>, cache_bytes: u64) -> Self {
        FsInfo {
            csum_type: sb.csum_type,
            nodesize: sb.nodesize,
            sectorsize: sb.sectorsize,
            cache: BlockCache::new(cache_bytes, sb.nodesize),
            chunks: ChunkMap::default(),
            devices,
            sb,
            reports: Mutex::new((Vec::new(), 0)),
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

    /// Reads `buf.len()` bytes at `logical` from copy `mirror` (0-based;
    /// for RAID5/6, 0 is the data stripe, 1 a rebuild from P, 2 from Q).
    pub fn read_copy(&self, logical: u64, buf: &mut [u8], mirror: usize) -> Result<()> {
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
                    let ndata = row.len() - nparity;
                    match mirror {
                        0 => {
                            let loc = row[*target];
                            self.device(loc.devid)?.read_at(out, loc.physical)?;
                        }
                        1 => {
                            // P is the XOR of the row's data stripes.
                            out.fill(0);
                            let mut tmp = vec![0u8; out.len()];
                            for (j, loc) in row.iter().enumerate().take(ndata + 1) {
                                if j == *target {
                                    continue;
                                }
                                self.device(loc.devid)?.read_at(&mut tmp, loc.physical)?;
                                out.iter_mut().zip(&tmp).for_each(|(o, t)| *o ^= t);
                            }
                        }
                        _ => {
                            return Err(Error::Unsupported(format!(
                                "logical {at}: rebuilding from RAID6 Q parity"
                            )))
                        }
                    }
                }
            }
            done += piece.len as usize;
        }
        Ok(())
    }

    /// Reads and verifies the tree block at `bytenr`, trying every copy.
    pub fn read_tree_block(&self, bytenr: u64, expect: BlockExpect) -> Result<Arc<TreeBlock>> {
        if let Some(b) = self.cache.get(bytenr) {
            check_expectations(&b.header, b.node(), bytenr, &expect)?;
            return Ok(b);
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
        let here = || format!("tree block {bytenr}");
        self.csum_type
            .verify(&buf[32..], &buf[..32])
            .map_err(|e| Error::format(here(), e))?;
        let header = Header::parse(&buf).map_err(|e| Error::format(here(), e))?;
        if header.bytenr != bytenr {
            return Err(Error::corrupt(
                here(),
                format!("header says bytenr {}", header.bytenr),
            ));
        }
        if header.fsid != self.sb.tree_fsid() {
            return Err(Error::corrupt(here(), "fsid does not match the superblock"));
        }
        let node = Node::parse(&buf).map_err(|e| Error::format(here(), e))?;
        check_expectations(&header, node, bytenr, expect)?;
        Ok(TreeBlock::new(bytenr, header, buf))
    }

    /// Reads `len` bytes of data at `logical`, verifying each sector against
    /// `csums` (one entry per sector, None where the data has no checksum),
    /// and falling back to other copies when a sector does not match.
    pub fn read_data(
        &self,
        logical: u64,
        len: usize,
        csums: &[Option<[u8; 32]>],
    ) -> Result<Vec<u8>> {
        let copies = self.num_copies(logical)?;
        let mut failures = Vec::new();
        let mut buf = vec![0u8; len];
        for mirror in 0..copies {
            let res = self
                .read_copy(logical, &mut buf, mirror)
                .and_then(|_| self.verify_data(logical, &buf, csums));
            match res {
                Ok(()) => {
                    if !failures.is_empty() {
                        self.report(format!(
                            "data at logical {logical}: {}; read copy {mirror} instead",
                            failures.join("; ")
                        ));
                    }
                    return Ok(buf);
                }
                Err(e) => failures.push(format!("copy {mirror}: {e}")),
            }
        }
        Err(Error::corrupt(
            format!("data at logical {logical} length {len}"),
            failures.join("; "),
        ))
    }

    /// Checks each sector of `buf` (read from `logical`) against `csums`.
    pub fn verify_data(&self, logical: u64, buf: &[u8], csums: &[Option<[u8; 32]>]) -> Result<()> {
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

fn check_expectations(header: &Header, node: Node<'_>, bytenr: u64, e: &BlockExpect) -> Result<()> {
    let here = || format!("tree block {bytenr}");
    if let Some(l) = e.level {
        if header.level != l {
            return Err(Error::corrupt(
                here(),
                format!("level {} but parent expects {l}", header.level),
            ));
        }
    }
    if let Some(g) = e.generation {
        if header.generation != g {
            return Err(Error::corrupt(
                here(),
                format!("generation {} but parent expects {g}", header.generation),
            ));
        }
    }
    if let Some(k) = e.first_key {
        if node.nritems() > 0 && node.key(0) != k {
            return Err(Error::corrupt(
                here(),
                format!("first key {} but parent expects {k}", node.key(0)),
            ));
        }
    }
    Ok(())
}
