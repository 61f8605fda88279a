//! Tree blocks (nodes and leaves): the header, key pointers and leaf items,
//! borrowed from the block's bytes, with the structural validation the
//! kernel's tree-checker applies before a block is trusted.

use crate::bytes::{le32, le64, slice, uuid};
use crate::error::{invalid, Result};
use crate::key::{Key, KEY_SIZE};

pub const HEADER_SIZE: usize = 101;
pub const ITEM_SIZE: usize = KEY_SIZE + 8;
pub const KEY_PTR_SIZE: usize = KEY_SIZE + 16;
pub const MAX_LEVEL: u8 = 7;

/// The fixed header of every tree block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub csum: [u8; 32],
    pub fsid: [u8; 16],
    pub bytenr: u64,
    pub flags: u64,
    pub chunk_tree_uuid: [u8; 16],
    pub generation: u64,
    pub owner: u64,
    pub nritems: u32,
    pub level: u8,
}

impl Header {
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let b = slice(buf, 0, HEADER_SIZE, "tree block header")?;
        Ok(Header {
            csum: b[0..32].try_into().unwrap(),
            fsid: uuid(b, 0x20),
            bytenr: le64(b, 0x30),
            flags: le64(b, 0x38) & ((1u64 << 56) - 1),
            chunk_tree_uuid: uuid(b, 0x40),
            generation: le64(b, 0x50),
            owner: le64(b, 0x58),
            nritems: le32(b, 0x60),
            level: b[0x64],
        })
    }

    /// The backref revision kept in the top byte of the flags field.
    pub fn backref_rev(buf: &[u8]) -> u8 {
        buf.get(0x3f).copied().unwrap_or(0)
    }
}

/// A leaf whose item data was moved back into place by [`mend_leaf`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MendedLeaf {
    /// The leaf's bytes with its items packed as the kernel packs them
    /// (the checksum left as it was: the caller seals the block).
    pub bytes: Vec<u8>,
    /// Items whose data was moved: (slot, key, bytes moved up).
    pub moved: Vec<(usize, Key, u32)>,
    /// Items dropped, their data overlapping the item before: (slot as
    /// found, key).
    pub dropped: Vec<(usize, Key)>,
}

/// A pointer [`drop_pointers`] took out: (slot, key, block).
pub type Dropped = (usize, Key, u64);

/// A node without its pointers to the blocks `gone` says are gone (a
/// repair drops unreadable leaves from their parents): the bytes (checksum
/// left as it was) and the pointers dropped, (slot, key, block). None when
/// no pointer goes, or when the first would (the parent's key for this
/// node would change) or every one.
pub fn drop_pointers(buf: &[u8], gone: impl Fn(u64) -> bool) -> Option<(Vec<u8>, Vec<Dropped>)> {
    let node = Node::parse(buf).ok()?;
    let n = node.nritems();
    if node.is_leaf() || n == 0 {
        return None;
    }
    let dropped: Vec<Dropped> = (0..n)
        .map(|i| (i, node.key_ptr(i)))
        .filter(|(_, p)| gone(p.blockptr))
        .map(|(i, p)| (i, p.key, p.blockptr))
        .collect();
    if dropped.is_empty() || dropped[0].0 == 0 || dropped.len() == n {
        return None;
    }
    let mut out = buf.to_vec();
    let mut to = HEADER_SIZE;
    for i in (0..n).filter(|i| !dropped.iter().any(|d| d.0 == *i)) {
        let at = HEADER_SIZE + i * KEY_PTR_SIZE;
        out.copy_within(at..at + KEY_PTR_SIZE, to);
        to += KEY_PTR_SIZE;
    }
    out[to..HEADER_SIZE + n * KEY_PTR_SIZE].fill(0);
    out[0x60..0x64].copy_from_slice(&((n - dropped.len()) as u32).to_le_bytes());
    Some((out, dropped))
}

/// Item types a leaf mend may drop when their data cannot be placed:
/// those the rest of a repair rebuilds from other items (a directory's
/// index from its DIR_ITEM and INODE_REF, extent items and their back
/// references from the trees), as btrfs-progs' fix_item_offset drops.
fn rebuildable(item_type: u8) -> bool {
    use crate::consts::*;
    matches!(
        item_type,
        DIR_INDEX | EXTENT_ITEM | METADATA_ITEM | TREE_BLOCK_REF | EXTENT_DATA_REF
    )
}

/// Packs the item data of a leaf whose items' offsets leave gaps or
/// overlaps (a leaf that fails [`Node::parse`] only for its layout), as
/// btrfs-progs' fix_item_offset does: in slot order, an item ending below
/// where the one before begins (the block's end for the first) has its
/// data moved up to meet it; one ending above it is dropped when its
/// type is rebuildable. None when the leaf cannot be mended that way
/// (keys out of order, an item that cannot be dropped, data outside the
/// block) or needs no mending.
pub fn mend_leaf(buf: &[u8]) -> Option<MendedLeaf> {
    let header = Header::parse(buf).ok()?;
    if header.level != 0 || Node::parse(buf).is_ok() {
        return None;
    }
    let body = buf.len().checked_sub(HEADER_SIZE)?;
    let n = header.nritems as usize;
    if n.checked_mul(ITEM_SIZE)? > body {
        return None;
    }
    let data = &buf[HEADER_SIZE..];
    // (key, data) of the items kept, in slot order.
    let mut kept: Vec<(Key, &[u8])> = Vec::with_capacity(n);
    let mut moved = Vec::new();
    let mut dropped = Vec::new();
    let mut expected_end = body;
    for i in 0..n {
        let at = HEADER_SIZE + i * ITEM_SIZE;
        let key = Key::parse(buf, at).ok()?;
        let off = le32(buf, at + KEY_SIZE) as usize;
        let size = le32(buf, at + KEY_SIZE + 4) as usize;
        let end = off.checked_add(size)?;
        if end > expected_end {
            if !rebuildable(key.item_type) {
                return None;
            }
            dropped.push((i, key));
            continue;
        }
        if end < expected_end {
            moved.push((i, key, (expected_end - end) as u32));
        }
        kept.push((key, &data[off..end]));
        expected_end -= size;
    }
    if kept.windows(2).any(|w| w[0].0 >= w[1].0) || expected_end < kept.len() * ITEM_SIZE {
        return None;
    }
    let mut out = buf.to_vec();
    let nr = kept.len() as u32;
    out[0x60..0x64].copy_from_slice(&nr.to_le_bytes());
    let mut end = body;
    for (i, (key, d)) in kept.iter().enumerate() {
        let at = HEADER_SIZE + i * ITEM_SIZE;
        end -= d.len();
        out[at..at + KEY_SIZE].copy_from_slice(&key.to_bytes());
        out[at + KEY_SIZE..at + KEY_SIZE + 4].copy_from_slice(&(end as u32).to_le_bytes());
        out[at + KEY_SIZE + 4..at + ITEM_SIZE].copy_from_slice(&(d.len() as u32).to_le_bytes());
        out[HEADER_SIZE + end..HEADER_SIZE + end + d.len()].copy_from_slice(d);
    }
    // Nothing of the old layout is left between the item headers and the
    // data (the kernel does not read it; zeroed as the kernel leaves it).
    out[HEADER_SIZE + kept.len() * ITEM_SIZE..HEADER_SIZE + end].fill(0);
    Node::parse(&out).ok()?;
    Some(MendedLeaf {
        bytes: out,
        moved,
        dropped,
    })
}

/// One item of a leaf: its key and the bytes of its data.
#[derive(Debug, Clone, Copy)]
pub struct LeafItem<'a> {
    pub key: Key,
    pub data: &'a [u8],
}

/// One key pointer of an internal node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPtr {
    pub key: Key,
    pub blockptr: u64,
    pub generation: u64,
}

/// A validated tree block. Construct with [`Node::parse`], which checks the
/// structure so the accessors can index without failing.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    pub header: Header,
    buf: &'a [u8],
}

impl<'a> Node<'a> {
    /// Validates `buf` as a tree block: level in range, item headers and item
    /// data inside the block, item data not overlapping the item headers, and
    /// keys strictly ascending. Checksum, bytenr and fsid are checked by the
    /// caller, which knows what to expect.
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        let header = Header::parse(buf)?;
        if header.level > MAX_LEVEL {
            return Err(invalid(
                "tree block",
                format!("level {} > {MAX_LEVEL}", header.level),
            ));
        }
        let n = header.nritems as usize;
        let body = buf.len() - HEADER_SIZE;
        let node = Node { header, buf };
        if header.level == 0 {
            if n.checked_mul(ITEM_SIZE).is_none_or(|s| s > body) {
                return Err(invalid(
                    "leaf",
                    format!("{n} items do not fit in {} bytes", buf.len()),
                ));
            }
            let mut prev: Option<Key> = None;
            // Item data is packed from the end of the block downward, in
            // item order; the kernel requires exactly that layout.
            let mut expected_end = body;
            let headers_end = n * ITEM_SIZE;
            for i in 0..n {
                let at = HEADER_SIZE + i * ITEM_SIZE;
                let key = Key::parse(buf, at)?;
                let off = le32(buf, at + KEY_SIZE) as usize;
                let size = le32(buf, at + KEY_SIZE + 4) as usize;
                let end = off.checked_add(size);
                if end != Some(expected_end) || off < headers_end {
                    return Err(invalid(
                        "leaf",
                        format!(
                            "item {i} key {key} data at {off}+{size} (expected end {expected_end}, item headers end at {headers_end})"
                        ),
                    ));
                }
                expected_end = off;
                if let Some(p) = prev {
                    if p >= key {
                        return Err(invalid(
                            "leaf",
                            format!("item {i} key {key} not above previous {p}"),
                        ));
                    }
                }
                prev = Some(key);
            }
        } else {
            if n == 0 {
                return Err(invalid("node", "internal node with no pointers"));
            }
            if n.checked_mul(KEY_PTR_SIZE).is_none_or(|s| s > body) {
                return Err(invalid(
                    "node",
                    format!("{n} pointers do not fit in {} bytes", buf.len()),
                ));
            }
            let mut prev: Option<Key> = None;
            for i in 0..n {
                let k = node.key_ptr(i);
                if let Some(p) = prev {
                    if p >= k.key {
                        return Err(invalid(
                            "node",
                            format!("pointer {i} key {} not above previous {p}", k.key),
                        ));
                    }
                }
                prev = Some(k.key);
            }
        }
        Ok(node)
    }

    /// Rebuilds the view of a block that already passed [`Node::parse`]
    /// (the engine's cache keeps validated blocks and their headers).
    pub fn from_validated(header: Header, buf: &'a [u8]) -> Self {
        Node { header, buf }
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.buf
    }
    pub fn level(&self) -> u8 {
        self.header.level
    }
    pub fn is_leaf(&self) -> bool {
        self.header.level == 0
    }
    pub fn nritems(&self) -> usize {
        self.header.nritems as usize
    }

    /// Key of slot `i` (item key in a leaf, pointer key in a node).
    /// Panics if `i >= nritems()`.
    pub fn key(&self, i: usize) -> Key {
        let at = if self.is_leaf() {
            HEADER_SIZE + i * ITEM_SIZE
        } else {
            HEADER_SIZE + i * KEY_PTR_SIZE
        };
        Key::parse(self.buf, at).expect("validated by Node::parse")
    }

    /// Item `i` of a leaf. Panics if `i >= nritems()` or this is not a leaf.
    pub fn item(&self, i: usize) -> LeafItem<'a> {
        debug_assert!(self.is_leaf());
        let at = HEADER_SIZE + i * ITEM_SIZE;
        let key = Key::parse(self.buf, at).expect("validated");
        let off = le32(self.buf, at + KEY_SIZE) as usize + HEADER_SIZE;
        let size = le32(self.buf, at + KEY_SIZE + 4) as usize;
        LeafItem {
            key,
            data: &self.buf[off..off + size],
        }
    }

    /// Key pointer `i` of an internal node. Panics if out of range.
    pub fn key_ptr(&self, i: usize) -> KeyPtr {
        let at = HEADER_SIZE + i * KEY_PTR_SIZE;
        KeyPtr {
            key: Key::parse(self.buf, at).expect("validated"),
            blockptr: le64(self.buf, at + KEY_SIZE),
            generation: le64(self.buf, at + KEY_SIZE + 8),
        }
    }

    /// Index of the last slot whose key is <= `key` (None if all are greater),
    /// and whether it is an exact match. Binary search.
    pub fn search(&self, key: &Key) -> (Option<usize>, bool) {
        let (mut lo, mut hi) = (0usize, self.nritems());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.key(mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Equal => return (Some(mid), true),
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        (lo.checked_sub(1), false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::{DIR_INDEX, INODE_ITEM, INODE_REF};

    /// A leaf of `items` (key, offset, data) as given, the data written at
    /// those offsets (which may be wrong on purpose).
    fn leaf(items: &[(Key, usize, &[u8])]) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[0x60..0x64].copy_from_slice(&(items.len() as u32).to_le_bytes());
        for (i, (k, off, d)) in items.iter().enumerate() {
            let at = HEADER_SIZE + i * ITEM_SIZE;
            b[at..at + KEY_SIZE].copy_from_slice(&k.to_bytes());
            b[at + KEY_SIZE..at + KEY_SIZE + 4].copy_from_slice(&(*off as u32).to_le_bytes());
            b[at + KEY_SIZE + 4..at + ITEM_SIZE].copy_from_slice(&(d.len() as u32).to_le_bytes());
            b[HEADER_SIZE + off..HEADER_SIZE + off + d.len()].copy_from_slice(d);
        }
        b
    }

    #[test]
    fn mend_leaf_moves_data_up_and_drops_what_overlaps() {
        let body = 4096 - HEADER_SIZE;
        let k = |o, t, off| Key::new(o, t, off);
        let good = leaf(&[
            (k(256, INODE_ITEM, 0), body - 4, b"aaaa"),
            (k(256, INODE_REF, 256), body - 7, b"bbb"),
        ]);
        assert!(Node::parse(&good).is_ok());
        assert_eq!(mend_leaf(&good), None, "a good leaf needs no mending");
        // The second item's data 10 bytes below where it belongs.
        let shifted = leaf(&[
            (k(256, INODE_ITEM, 0), body - 4, b"aaaa"),
            (k(256, INODE_REF, 256), body - 17, b"bbb"),
        ]);
        let m = mend_leaf(&shifted).unwrap();
        assert_eq!(m.moved, vec![(1, k(256, INODE_REF, 256), 10)]);
        assert_eq!(&m.bytes[HEADER_SIZE..], &good[HEADER_SIZE..]);
        // A DIR_INDEX whose data runs into the item before is dropped; an
        // INODE_REF in its place is not, and the leaf is not mended.
        let bogus = |t| {
            leaf(&[
                (k(256, INODE_ITEM, 0), body - 4, b"aaaa"),
                (k(256, t, 2), body - 2, b"cc"),
                (k(257, INODE_REF, 256), body - 7, b"bbb"),
            ])
        };
        let m = mend_leaf(&bogus(DIR_INDEX)).unwrap();
        assert_eq!(m.dropped, vec![(1, k(256, DIR_INDEX, 2))]);
        let n = Node::parse(&m.bytes).unwrap();
        assert_eq!(n.nritems(), 2);
        assert_eq!(n.item(1).data, b"bbb");
        assert_eq!(mend_leaf(&bogus(INODE_REF)), None);
    }

    #[test]
    fn drop_pointers_keeps_the_first_and_the_order() {
        let mut b = vec![0u8; 4096];
        b[0x64] = 1;
        b[0x60..0x64].copy_from_slice(&3u32.to_le_bytes());
        for (i, block) in [100u64, 200, 300].iter().enumerate() {
            let at = HEADER_SIZE + i * KEY_PTR_SIZE;
            b[at..at + KEY_SIZE].copy_from_slice(&Key::new(256 + i as u64, 1, 0).to_bytes());
            b[at + KEY_SIZE..at + KEY_SIZE + 8].copy_from_slice(&block.to_le_bytes());
            b[at + KEY_SIZE + 8..at + KEY_PTR_SIZE].copy_from_slice(&7u64.to_le_bytes());
        }
        let (out, gone) = drop_pointers(&b, |x| x == 200).unwrap();
        assert_eq!(gone, vec![(1, Key::new(257, 1, 0), 200)]);
        let n = Node::parse(&out).unwrap();
        let ptrs: Vec<u64> = (0..n.nritems()).map(|i| n.key_ptr(i).blockptr).collect();
        assert_eq!(ptrs, vec![100, 300]);
        assert_eq!(n.key_ptr(1).key, Key::new(258, 1, 0));
        // The first pointer, every pointer, or none: not dropped.
        assert!(drop_pointers(&b, |x| x == 100).is_none());
        assert!(drop_pointers(&b, |_| true).is_none());
        assert!(drop_pointers(&b, |_| false).is_none());
    }
}
