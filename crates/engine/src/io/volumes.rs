//! Chunk mapping: from logical addresses to physical places on devices, for
//! every block group profile. Pure arithmetic, no I/O; `disk_io` reads.

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{profile_name, ChunkItem};

/// Stripe length of every chunk (BTRFS_STRIPE_LEN).
pub const STRIPE_LEN: u64 = 64 << 10;
/// Device space below this is never allocated (superblock, boot loaders).
pub const DEV_RESERVED: u64 = 1 << 20;

/// How a profile lays out stripes: (copies, minimum devices, stripes per
/// device for DUP, sub-stripes).
pub(crate) struct Layout {
    /// Devices used (0: all that have room).
    pub(crate) devs: usize,
    pub(crate) min_devs: usize,
    pub(crate) dup: bool,
    pub(crate) sub_stripes: u16,
    /// Copies of each byte.
    pub(crate) copies: u64,
    /// Parity strips of each row (RAID5: 1, RAID6: 2).
    pub(crate) nparity: u64,
}

impl Layout {
    /// Stripes holding distinct data, of `num_stripes`.
    pub(crate) fn data_stripes(&self, num_stripes: u64) -> u64 {
        (num_stripes.saturating_sub(self.nparity) / self.copies).max(1)
    }
}

pub(crate) fn layout(profile: u64) -> Result<Layout> {
    let l = |devs, min_devs, dup, sub_stripes, copies| Layout {
        devs,
        min_devs,
        dup,
        sub_stripes,
        copies,
        nparity: 0,
    };
    Ok(match profile & BG_PROFILE_MASK {
        0 => l(1, 1, false, 1, 1),
        BG_DUP => l(1, 1, true, 1, 2),
        BG_RAID0 => l(0, 1, false, 1, 1),
        BG_RAID1 => l(2, 2, false, 1, 2),
        BG_RAID1C3 => l(3, 3, false, 1, 3),
        BG_RAID1C4 => l(4, 4, false, 1, 4),
        BG_RAID10 => l(0, 2, false, 2, 2),
        // The kernel's btrfs_raid_array: every device with room, at least
        // two (RAID5) or three (RAID6).
        BG_RAID5 => Layout {
            nparity: 1,
            ..l(0, 2, false, 1, 1)
        },
        BG_RAID6 => Layout {
            nparity: 2,
            ..l(0, 3, false, 1, 1)
        },
        _ => {
            return Err(Error::Unsupported(format!(
                "writing {} block groups",
                ubtrfs_format::items::profile_name(profile)
            )))
        }
    })
}

/// Device bytes of each stripe of chunk `c` (its DEV_EXTENT length): the
/// length over the stripes that hold distinct data.
pub fn stripe_len(c: &ChunkItem) -> u64 {
    c.length / layout(c.chunk_type).map_or(1, |l| l.data_stripes(c.num_stripes as u64))
}

/// Whether a profile keeps the whole chunk in every stripe (single, DUP,
/// RAID1, RAID1C3, RAID1C4).
pub fn is_mirror(profile: u64) -> bool {
    matches!(
        profile & BG_PROFILE_MASK,
        0 | BG_DUP | BG_RAID1 | BG_RAID1C3 | BG_RAID1C4
    )
}

/// A physical place: device id and byte offset on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhysLoc {
    pub devid: u64,
    pub physical: u64,
}

/// Where one piece of a logical range lives. A piece never crosses a stripe
/// unit, so each copy is one contiguous physical range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Full copies (single, DUP, RAID0, RAID1*, RAID10): any one will do.
    Mirrors(Vec<PhysLoc>),
    /// RAID5/6: the data stripe, and the same range of every stripe of its
    /// row so it can be rebuilt from parity. As in the kernel's
    /// `btrfs_map_block`, data stripe `j` of full-stripe row `r` is on chunk
    /// stripe `(r + j) % n`, P on `(r + ndata) % n` and Q on
    /// `(r + ndata + 1) % n`, each at `r * stripe_len` into its stripe.
    Parity {
        /// Index in `row` of the data we want.
        target: usize,
        /// The row's stripes, indexed by data stripe number, then P, then Q.
        row: Vec<PhysLoc>,
        nparity: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub len: u64,
    pub placement: Placement,
}

impl Piece {
    /// How many ways this piece can be read, as the kernel's
    /// `btrfs_num_copies` counts them: RAID5 has the data and a rebuild;
    /// RAID6 has one copy per stripe of the row (the data, a rebuild from
    /// P, one from Q, and one from P and Q for each other data stripe that
    /// may be bad too). See `FsInfo::read_copy` for what each one is.
    pub fn num_copies(&self) -> usize {
        match &self.placement {
            Placement::Mirrors(m) => m.len(),
            Placement::Parity { nparity: 1, .. } => 2,
            Placement::Parity { row, .. } => row.len(),
        }
    }
}

/// One full-stripe row of a RAID5/6 chunk: `stripe_len` bytes of each
/// data strip, in logical order, then P (and Q) over them. Laid out as
/// [`Placement::Parity`] describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParityRow {
    /// Logical address of the row's first byte.
    pub logical: u64,
    pub stripe_len: u64,
    /// Where each strip of the row starts: data strips, then P, then Q.
    pub strips: Vec<PhysLoc>,
    pub nparity: usize,
}

impl ParityRow {
    pub fn ndata(&self) -> usize {
        self.strips.len() - self.nparity
    }

    /// Logical bytes the row holds.
    pub fn data_len(&self) -> u64 {
        self.stripe_len * self.ndata() as u64
    }
}

/// All chunks of the filesystem, by logical start.
#[derive(Debug, Default, Clone)]
pub struct ChunkMap {
    chunks: BTreeMap<u64, ChunkItem>,
}

impl ChunkMap {
    /// Adds a chunk after checking its stripe count fits its profile.
    pub fn insert(&mut self, logical: u64, chunk: ChunkItem) -> Result<()> {
        let n = chunk.num_stripes as usize;
        let p = chunk.chunk_type & BG_PROFILE_MASK;
        let ok = match p {
            0 => n >= 1,
            BG_DUP => n == 2,
            BG_RAID1 => n >= 2,
            BG_RAID1C3 => n >= 3,
            BG_RAID1C4 => n >= 4,
            BG_RAID0 => n >= 1,
            BG_RAID10 => {
                chunk.sub_stripes >= 2
                    && n >= 2
                    && n.checked_rem(chunk.sub_stripes as usize) == Some(0)
            }
            BG_RAID5 => n >= 2,
            BG_RAID6 => n >= 3,
            _ => false,
        };
        if !ok {
            return Err(Error::corrupt(
                format!("chunk at logical {logical}"),
                format!(
                    "profile {} (type 0x{:x}) with {n} stripes, sub_stripes {}",
                    profile_name(chunk.chunk_type),
                    chunk.chunk_type,
                    chunk.sub_stripes
                ),
            ));
        }
        if logical.checked_add(chunk.length).is_none() {
            return Err(Error::corrupt(
                format!("chunk at logical {logical}"),
                format!("length {} overflows", chunk.length),
            ));
        }
        // `map` adds an offset below `length` to a stripe's physical start;
        // a hostile stripe offset near u64::MAX would overflow there. No
        // stripe holds more than the chunk's length, so this bound is safe.
        if let Some(s) = chunk
            .stripes
            .iter()
            .find(|s| s.offset.checked_add(chunk.length).is_none())
        {
            return Err(Error::corrupt(
                format!("chunk at logical {logical}"),
                format!(
                    "stripe on devid {} at physical {} + length {} overflows",
                    s.devid, s.offset, chunk.length
                ),
            ));
        }
        if let Some((s, c)) = self.lookup(logical) {
            if s != logical || c != &chunk {
                return Err(Error::corrupt(
                    format!("chunk at logical {logical}"),
                    format!("overlaps chunk at {s}"),
                ));
            }
        }
        self.chunks.insert(logical, chunk);
        Ok(())
    }

    /// Puts `chunk` in place of the chunk at `logical` (the same range,
    /// moved stripes: relocation), after the checks [`ChunkMap::insert`]
    /// makes.
    pub fn replace(&mut self, logical: u64, chunk: ChunkItem) -> Result<()> {
        let old = self.chunks.remove(&logical);
        let res = self.insert(logical, chunk);
        if res.is_err() {
            if let Some(o) = old {
                self.chunks.insert(logical, o);
            }
        }
        res
    }

    /// Forgets the chunk at `logical` (removed with its block group).
    pub fn remove(&mut self, logical: u64) -> Option<ChunkItem> {
        self.chunks.remove(&logical)
    }

    /// Every chunk, by logical start.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &ChunkItem)> {
        self.chunks.iter().map(|(&s, c)| (s, c))
    }

    /// The chunk containing `logical`, with its start.
    pub fn lookup(&self, logical: u64) -> Option<(u64, &ChunkItem)> {
        let (&start, c) = self.chunks.range(..=logical).next_back()?;
        (logical < start + c.length).then_some((start, c))
    }

    /// Maps the start of `[logical, logical + len)`: returns the first piece,
    /// at most `len` long, that lies in one stripe unit.
    pub fn map(&self, logical: u64, len: u64) -> Result<Piece> {
        let (start, c) = self.lookup(logical).ok_or_else(|| {
            Error::corrupt(
                format!("logical {logical}"),
                "address is not in any chunk".to_string(),
            )
        })?;
        let off = logical - start;
        let len = len.min(c.length - off);
        let n = c.num_stripes as usize;
        let sl = c.stripe_len;
        let profile = c.chunk_type & BG_PROFILE_MASK;
        let loc = |i: usize, phys_off: u64| PhysLoc {
            devid: c.stripes[i].devid,
            physical: c.stripes[i].offset + phys_off,
        };
        let in_stripe = off % sl;
        let piece_len = len.min(sl - in_stripe);
        let piece = match profile {
            0 | BG_DUP | BG_RAID1 | BG_RAID1C3 | BG_RAID1C4 => Piece {
                // Every stripe is a whole copy; no need to split at units.
                len,
                placement: Placement::Mirrors((0..n).map(|i| loc(i, off)).collect()),
            },
            BG_RAID0 => {
                let nr = off / sl;
                Piece {
                    len: piece_len,
                    placement: Placement::Mirrors(vec![loc(
                        (nr % n as u64) as usize,
                        (nr / n as u64) * sl + in_stripe,
                    )]),
                }
            }
            BG_RAID10 => {
                let sub = c.sub_stripes as usize;
                let factor = (n / sub) as u64;
                let nr = off / sl;
                let first = (nr % factor) as usize * sub;
                let phys = (nr / factor) * sl + in_stripe;
                Piece {
                    len: piece_len,
                    placement: Placement::Mirrors(
                        (first..first + sub).map(|i| loc(i, phys)).collect(),
                    ),
                }
            }
            BG_RAID5 | BG_RAID6 => {
                let nparity = if profile == BG_RAID5 { 1 } else { 2 };
                let ndata = n - nparity;
                let nr = off / sl;
                let rownr = nr / ndata as u64;
                let d = (nr % ndata as u64) as usize;
                let phys = rownr * sl + in_stripe;
                // Parity rotates one device per row: data stripe j of row r
                // is on device (r + j) mod n; P and Q follow the data.
                let row = (0..n)
                    .map(|j| loc(((rownr + j as u64) % n as u64) as usize, phys))
                    .collect();
                Piece {
                    len: piece_len,
                    placement: Placement::Parity {
                        target: d,
                        row,
                        nparity,
                    },
                }
            }
            _ => {
                return Err(Error::corrupt(
                    format!("chunk at logical {start}"),
                    format!("unknown profile bits 0x{:x}", c.chunk_type),
                ))
            }
        };
        Ok(piece)
    }

    /// The RAID5/6 full-stripe row holding `logical`, or None when its
    /// chunk has full copies. Writes go by rows: parity covers one column
    /// of every data strip of a row.
    pub fn parity_row(&self, logical: u64) -> Result<Option<ParityRow>> {
        let Some((start, c)) = self.lookup(logical) else {
            return Err(Error::corrupt(
                format!("logical {logical}"),
                "address is not in any chunk".to_string(),
            ));
        };
        let nparity = match c.chunk_type & BG_PROFILE_MASK {
            BG_RAID5 => 1,
            BG_RAID6 => 2,
            _ => return Ok(None),
        };
        let n = c.stripes.len();
        let sl = c.stripe_len;
        let row_len = sl * (n - nparity) as u64;
        let rownr = (logical - start) / row_len;
        Ok(Some(ParityRow {
            logical: start + rownr * row_len,
            stripe_len: sl,
            strips: (0..n)
                .map(|j| {
                    let s = &c.stripes[((rownr + j as u64) % n as u64) as usize];
                    PhysLoc {
                        devid: s.devid,
                        physical: s.offset + rownr * sl,
                    }
                })
                .collect(),
            nparity,
        }))
    }

    /// How many copies of `logical` can be read independently.
    pub fn num_copies(&self, logical: u64) -> Result<usize> {
        Ok(self.map(logical, 1)?.num_copies())
    }
}

/// The logical ranges of a chunk that lie on a superblock copy: one stripe
/// unit (64 KiB) each, as the kernel's exclude_super_stripes and btrfs
/// check count them. They are neither allocated nor free space; a tree
/// block or data extent there would be overwritten by the next commit's
/// superblocks.
pub fn super_stripes(logical: u64, c: &ChunkItem) -> Vec<(u64, u64)> {
    let n = c.stripes.len() as u64;
    let sub = (c.sub_stripes as u64).max(1);
    let raid0 = c.chunk_type & BG_RAID0 != 0;
    let raid10 = c.chunk_type & BG_RAID10 != 0;
    let nparity = match c.chunk_type & BG_PROFILE_MASK {
        BG_RAID5 => 1,
        BG_RAID6 => 2,
        _ => 0,
    };
    let data_stripes = if raid0 {
        n
    } else if raid10 {
        n / sub
    } else if nparity > 0 {
        n.saturating_sub(nparity)
    } else {
        1
    };
    // RAID5/6 lose the whole row a superblock copy is in (the kernel's
    // btrfs_rmap_block: one full stripe of logical space).
    let unit = if nparity > 0 {
        c.stripe_len * data_stripes
    } else {
        c.stripe_len
    };
    let per_dev = c.length / data_stripes.max(1);
    let mut v = Vec::new();
    for (i, st) in c.stripes.iter().enumerate() {
        let i = i as u64;
        for off in SUPER_OFFSETS {
            if off < st.offset || off >= st.offset + per_dev {
                continue;
            }
            let nr = (off - st.offset) / c.stripe_len;
            let l = if raid0 {
                nr * n + i
            } else if raid10 {
                (nr * n + i) / sub
            } else {
                nr
            };
            let start = logical + l * unit;
            v.push((start, unit.min(logical + c.length - start)));
        }
    }
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use ubtrfs_format::items::Stripe;

    fn at(devid: u64, physical: u64) -> PhysLoc {
        PhysLoc { devid, physical }
    }

    fn chunk(t: u64, n: u16, sub: u16) -> ChunkItem {
        ChunkItem {
            length: 1 << 30,
            owner: 2,
            stripe_len: 65536,
            chunk_type: BG_DATA | t,
            io_align: 65536,
            io_width: 65536,
            sector_size: 4096,
            num_stripes: n,
            sub_stripes: sub,
            stripes: (0..n as u64)
                .map(|i| Stripe {
                    devid: i + 1,
                    offset: 1_000_000 * (i + 1),
                    dev_uuid: [0; 16],
                })
                .collect(),
        }
    }

    #[test]
    fn raid0_rotates_stripes() {
        let mut m = ChunkMap::default();
        m.insert(1 << 20, chunk(BG_RAID0, 2, 0)).unwrap();
        let p = m.map((1 << 20) + 65536 + 10, 1 << 20).unwrap();
        assert_eq!(p.len, 65536 - 10);
        assert_eq!(p.placement, Placement::Mirrors(vec![at(2, 2_000_010)]));
        let p = m.map((1 << 20) + 2 * 65536, 4096).unwrap();
        assert_eq!(p.placement, Placement::Mirrors(vec![at(1, 1_065_536)]));
    }

    #[test]
    fn raid10_pairs() {
        let mut m = ChunkMap::default();
        m.insert(0, chunk(BG_RAID10, 4, 2)).unwrap();
        let p = m.map(65536, 4096).unwrap();
        assert_eq!(p.num_copies(), 2);
        assert_eq!(
            p.placement,
            Placement::Mirrors(vec![at(3, 3_000_000), at(4, 4_000_000)])
        );
    }

    #[test]
    fn raid5_rotation() {
        let mut m = ChunkMap::default();
        m.insert(0, chunk(BG_RAID5, 3, 0)).unwrap();
        // Row 1 holds data stripes 2 and 3; data 0 of row 1 is on device index 1.
        let p = m.map(2 * 65536, 4096).unwrap();
        match p.placement {
            Placement::Parity {
                target,
                row,
                nparity,
            } => {
                assert_eq!((target, nparity), (0, 1));
                assert_eq!(row[0], at(2, 2_065_536));
                assert_eq!(row[2].devid, 1);
            }
            _ => panic!(),
        }
    }

    /// Checks every row of a RAID5/6 chunk against the kernel's layout:
    /// data stripe d of row r on chunk stripe (r + d) % n, then P, then Q.
    fn check_parity_layout(profile: u64, n: u16, nparity: usize) {
        let mut m = ChunkMap::default();
        let c = chunk(profile, n, 0);
        m.insert(1 << 20, c.clone()).unwrap();
        let n = n as usize;
        let ndata = n - nparity;
        for r in 0..(2 * n as u64 + 1) {
            for d in 0..ndata {
                let off = (r * ndata as u64 + d as u64) * 65536 + 100;
                let p = m.map((1 << 20) + off, 1 << 20).unwrap();
                assert_eq!(p.len, 65536 - 100);
                assert_eq!(p.num_copies(), if nparity == 1 { 2 } else { n });
                let Placement::Parity {
                    target,
                    row,
                    nparity: np,
                } = p.placement
                else {
                    panic!("not parity")
                };
                assert_eq!((target, np, row.len()), (d, nparity, n));
                for (j, loc) in row.iter().enumerate() {
                    let idx = (r as usize + j) % n;
                    assert_eq!(
                        *loc,
                        at(
                            c.stripes[idx].devid,
                            c.stripes[idx].offset + r * 65536 + 100
                        ),
                        "row {r} data {d} stripe {j}"
                    );
                }
            }
        }
    }

    #[test]
    fn raid5_layout() {
        check_parity_layout(BG_RAID5, 2, 1);
        check_parity_layout(BG_RAID5, 3, 1);
        check_parity_layout(BG_RAID5, 5, 1);
    }

    #[test]
    fn raid6_layout() {
        check_parity_layout(BG_RAID6, 3, 2);
        check_parity_layout(BG_RAID6, 4, 2);
        check_parity_layout(BG_RAID6, 6, 2);
    }

    #[test]
    fn raid10_rows() {
        // 6 stripes, sub_stripes 2: 3 pairs; unit k goes to pair k % 3, at
        // row k / 3 of the pair's stripes.
        let mut m = ChunkMap::default();
        m.insert(0, chunk(BG_RAID10, 6, 2)).unwrap();
        for k in 0..10u64 {
            let p = m.map(k * 65536 + 5, 1 << 20).unwrap();
            assert_eq!(p.len, 65536 - 5);
            let first = (k % 3) as usize * 2;
            let phys = (k / 3) * 65536 + 5;
            assert_eq!(
                p.placement,
                Placement::Mirrors(
                    (first..first + 2)
                        .map(|i| at(i as u64 + 1, 1_000_000 * (i as u64 + 1) + phys))
                        .collect()
                )
            );
        }
    }

    #[test]
    fn outside_chunks_is_error() {
        let m = ChunkMap::default();
        assert!(m.map(0, 1).is_err());
    }
}
