//! The image's layout, from `btrfs inspect-internal dump-tree` and the
//! superblock: its chunks and where the tree blocks are.

use super::*;

#[derive(Debug, Clone)]
pub(super) struct Chunk {
    pub(super) logical: u64,
    pub(super) length: u64,
    pub(super) kind: String,
    pub(super) profile: String,
    /// (devid, physical offset) of each stripe.
    pub(super) stripes: Vec<(u64, u64)>,
}

impl Chunk {
    /// Whether every stripe is a complete copy (the only layouts the
    /// mapping below handles, and all the committed fixtures use).
    pub(super) fn mirrored(&self) -> bool {
        matches!(
            self.profile.as_str(),
            "single" | "DUP" | "RAID1" | "RAID1C3" | "RAID1C4"
        )
    }
}

/// What the pristine image holds, from `ubtrfs inspect dump-tree`.
#[derive(Debug, Default)]
pub(super) struct Layout {
    pub(super) nodesize: u64,
    pub(super) sectorsize: u64,
    pub(super) csum_type: u16,
    pub(super) chunks: Vec<Chunk>,
    /// Logical addresses of the live tree blocks.
    pub(super) tree_blocks: Vec<u64>,
    /// Logical (start, length) of on-disk data extents.
    pub(super) data_extents: Vec<(u64, u64)>,
    /// Logical ranges covered by data checksums.
    pub(super) csum_ranges: Vec<(u64, u64)>,
}

pub(super) fn num_after(line: &str, word: &str) -> Option<u64> {
    let mut it = line.split_whitespace();
    while let Some(w) = it.next() {
        if w == word {
            return it.next()?.trim_end_matches(',').parse().ok();
        }
    }
    None
}

pub(super) fn parse_layout(dump: &str, sb: &[u8]) -> Layout {
    let le32 = |o: usize| u32::from_le_bytes(sb[o..o + 4].try_into().unwrap()) as u64;
    let mut l = Layout {
        nodesize: le32(0x94),
        sectorsize: le32(0x90),
        csum_type: u16::from_le_bytes([sb[0xc4], sb[0xc5]]),
        ..Default::default()
    };
    let mut blocks = BTreeSet::new();
    let mut extents = BTreeSet::new();
    let mut cur_chunk: Option<Chunk> = None;
    let mut seen_chunks = BTreeSet::new();
    for line in dump.lines() {
        let t = line.trim_start();
        if line.starts_with("leaf ") || line.starts_with("node ") {
            if let Some(b) = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()) {
                blocks.insert(b);
            }
        }
        if t.starts_with("item ") {
            if let Some(c) = cur_chunk.take() {
                if seen_chunks.insert(c.logical) {
                    l.chunks.push(c);
                }
            }
            if t.contains(" CHUNK_ITEM ") {
                // item N key (256 CHUNK_ITEM LOGICAL) itemsize S
                let logical = t
                    .split("CHUNK_ITEM ")
                    .nth(1)
                    .and_then(|s| s.split(')').next())
                    .and_then(|s| s.parse().ok());
                if let Some(logical) = logical {
                    cur_chunk = Some(Chunk {
                        logical,
                        length: 0,
                        kind: String::new(),
                        profile: String::new(),
                        stripes: Vec::new(),
                    });
                }
            }
            continue;
        }
        if let Some(c) = cur_chunk.as_mut() {
            if t.starts_with("length ") {
                c.length = num_after(t, "length").unwrap_or(0);
                if let Some(ty) = t.split("type ").nth(1) {
                    let mut p = ty.trim().split('|');
                    c.kind = p.next().unwrap_or("").to_string();
                    c.profile = p.next().unwrap_or("").to_string();
                }
            } else if t.starts_with("stripe ") {
                if let (Some(d), Some(o)) = (num_after(t, "devid"), num_after(t, "offset")) {
                    c.stripes.push((d, o));
                }
            }
        }
        if t.starts_with("extent data disk byte ") {
            if let (Some(b), Some(n)) = (num_after(t, "byte"), num_after(t, "nr")) {
                if b != 0 && n != 0 {
                    extents.insert((b, n));
                }
            }
        }
        if t.starts_with("range start ") {
            if let (Some(s), Some(e)) = (num_after(t, "start"), num_after(t, "end")) {
                if e > s {
                    l.csum_ranges.push((s, e));
                }
            }
        }
    }
    if let Some(c) = cur_chunk.take() {
        if seen_chunks.insert(c.logical) {
            l.chunks.push(c);
        }
    }
    l.tree_blocks = blocks.into_iter().collect();
    l.data_extents = extents.into_iter().collect();
    l
}

impl Layout {
    pub(super) fn chunk_of(&self, logical: u64) -> Option<&Chunk> {
        self.chunks
            .iter()
            .find(|c| logical >= c.logical && logical < c.logical + c.length)
    }
    pub(super) fn in_data_extent(&self, logical: u64) -> bool {
        self.data_extents
            .iter()
            .any(|&(s, n)| logical >= s && logical < s + n)
    }
    pub(super) fn has_csum(&self, logical: u64) -> bool {
        self.csum_ranges
            .iter()
            .any(|&(s, e)| logical >= s && logical < e)
    }
}
