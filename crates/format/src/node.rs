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
