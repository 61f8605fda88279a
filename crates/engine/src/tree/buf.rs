//! Tree blocks being changed: a block decoded into its items (leaf, see
//! [`Leaf`]) or key pointers (node), so that inserting, deleting, resizing
//! and splitting are vector operations; encoded back into bytes, with the header and the
//! checksum, when the transaction writes it. The kernel's extent_buffer,
//! decoded once instead of edited with memmove.

use super::leaf::Leaf;
use ubtrfs_format::key::{Key, KEY_SIZE};
use ubtrfs_format::node::{Node, HEADER_SIZE, ITEM_SIZE, KEY_PTR_SIZE};
use ubtrfs_format::CsumType;

/// The header's flags: the block was written (always set on disk).
pub const HEADER_FLAG_WRITTEN: u64 = 1 << 0;
/// The block's references are by parent address (shared with snapshots).
pub const HEADER_FLAG_RELOC: u64 = 1 << 1;
/// Backref revision 1 ("mixed backrefs"), kept in the top byte of flags.
pub const MIXED_BACKREF_REV: u64 = 1 << 56;

/// One key pointer of an internal node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ptr {
    pub key: Key,
    pub blockptr: u64,
    pub generation: u64,
}

/// What a block holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Leaf(Leaf),
    Node(Vec<Ptr>),
}

/// A tree block held for change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtentBuffer {
    pub bytenr: u64,
    pub generation: u64,
    pub owner: u64,
    /// Header flags without the backref revision byte.
    pub flags: u64,
    pub level: u8,
    pub content: Content,
}

impl ExtentBuffer {
    /// An empty leaf.
    pub fn new_leaf(bytenr: u64, generation: u64, owner: u64) -> Self {
        ExtentBuffer {
            bytenr,
            generation,
            owner,
            flags: HEADER_FLAG_WRITTEN,
            level: 0,
            content: Content::Leaf(Leaf::default()),
        }
    }

    /// Decodes a verified block.
    pub fn decode(node: Node<'_>, bytenr: u64, generation: u64, owner: u64, flags: u64) -> Self {
        let n = node.nritems();
        let content = if node.is_leaf() {
            let bytes = (0..n).map(|i| node.item(i).data.len()).sum();
            let mut leaf = Leaf::with_capacity(n, bytes);
            for i in 0..n {
                let it = node.item(i);
                leaf.push(it.key, it.data);
            }
            Content::Leaf(leaf)
        } else {
            Content::Node(
                (0..n)
                    .map(|i| {
                        let p = node.key_ptr(i);
                        Ptr {
                            key: p.key,
                            blockptr: p.blockptr,
                            generation: p.generation,
                        }
                    })
                    .collect(),
            )
        };
        ExtentBuffer {
            bytenr,
            generation,
            owner,
            flags,
            level: node.level(),
            content,
        }
    }

    /// Makes room for a leaf's data to grow to a whole block without
    /// reallocating (a block about to be changed; decoded blocks that
    /// are only read keep their exact size).
    pub fn reserve_block(&mut self, nodesize: u32) {
        if let Content::Leaf(l) = &mut self.content {
            l.reserve_data(capacity(nodesize));
        }
    }

    pub fn is_leaf(&self) -> bool {
        matches!(self.content, Content::Leaf(_))
    }

    pub fn nritems(&self) -> usize {
        match &self.content {
            Content::Leaf(v) => v.len(),
            Content::Node(v) => v.len(),
        }
    }

    /// The first key, if any.
    pub fn first_key(&self) -> Option<Key> {
        match &self.content {
            Content::Leaf(v) => v.keys().first().copied(),
            Content::Node(v) => v.first().map(|p| p.key),
        }
    }

    pub fn items(&self) -> &Leaf {
        match &self.content {
            Content::Leaf(v) => v,
            Content::Node(_) => panic!("items() of a node"),
        }
    }

    pub fn items_mut(&mut self) -> &mut Leaf {
        match &mut self.content {
            Content::Leaf(v) => v,
            Content::Node(_) => panic!("items_mut() of a node"),
        }
    }

    pub fn ptrs(&self) -> &Vec<Ptr> {
        match &self.content {
            Content::Node(v) => v,
            Content::Leaf(_) => panic!("ptrs() of a leaf"),
        }
    }

    pub fn ptrs_mut(&mut self) -> &mut Vec<Ptr> {
        match &mut self.content {
            Content::Node(v) => v,
            Content::Leaf(_) => panic!("ptrs_mut() of a leaf"),
        }
    }

    /// Bytes used after the header: item headers and data (leaf) or key
    /// pointers (node).
    pub fn used(&self) -> usize {
        match &self.content {
            Content::Leaf(v) => v.used(),
            Content::Node(v) => v.len() * KEY_PTR_SIZE,
        }
    }

    /// Encodes the block as it goes to disk, checksum included.
    pub fn encode(
        &self,
        nodesize: u32,
        fsid: &[u8; 16],
        chunk_tree_uuid: &[u8; 16],
        csum: CsumType,
    ) -> Vec<u8> {
        let mut b = vec![0u8; nodesize as usize];
        self.encode_into(&mut b, fsid, chunk_tree_uuid, csum);
        b
    }

    /// [`ExtentBuffer::encode`] into `b`, one zeroed block (a commit
    /// encodes runs of adjacent blocks into one buffer).
    pub fn encode_into(
        &self,
        b: &mut [u8],
        fsid: &[u8; 16],
        chunk_tree_uuid: &[u8; 16],
        csum: CsumType,
    ) {
        let nodesize = b.len();
        b[0x20..0x30].copy_from_slice(fsid);
        set_u64(b, 0x30, self.bytenr);
        set_u64(b, 0x38, self.flags | MIXED_BACKREF_REV);
        b[0x40..0x50].copy_from_slice(chunk_tree_uuid);
        set_u64(b, 0x50, self.generation);
        set_u64(b, 0x58, self.owner);
        set_u32(b, 0x60, self.nritems() as u32);
        b[0x64] = self.level;
        match &self.content {
            Content::Leaf(items) => {
                // Data grows down from the end of the block; offsets are
                // relative to the end of the header.
                let mut end = nodesize - HEADER_SIZE;
                for (i, (key, data)) in items.iter().enumerate() {
                    end -= data.len();
                    let h = HEADER_SIZE + i * ITEM_SIZE;
                    b[h..h + KEY_SIZE].copy_from_slice(&key.to_bytes());
                    set_u32(b, h + KEY_SIZE, end as u32);
                    set_u32(b, h + KEY_SIZE + 4, data.len() as u32);
                    b[HEADER_SIZE + end..HEADER_SIZE + end + data.len()].copy_from_slice(data);
                }
            }
            Content::Node(ptrs) => {
                for (i, p) in ptrs.iter().enumerate() {
                    let h = HEADER_SIZE + i * KEY_PTR_SIZE;
                    b[h..h + KEY_SIZE].copy_from_slice(&p.key.to_bytes());
                    set_u64(b, h + KEY_SIZE, p.blockptr);
                    set_u64(b, h + KEY_SIZE + 8, p.generation);
                }
            }
        }
        let sum = csum.compute(&b[32..]);
        b[..csum.size()].copy_from_slice(&sum[..csum.size()]);
    }
}

fn set_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn set_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Room after the header of a block.
pub fn capacity(nodesize: u32) -> usize {
    nodesize as usize - HEADER_SIZE
}

/// Most key pointers in a node.
pub fn max_ptrs(nodesize: u32) -> usize {
    capacity(nodesize) / KEY_PTR_SIZE
}

/// Largest item data that fits a leaf alone.
pub fn max_item_data(nodesize: u32) -> usize {
    capacity(nodesize) - ITEM_SIZE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(eb: &ExtentBuffer, ns: u32) {
        let fsid = [7u8; 16];
        let bytes = eb.encode(ns, &fsid, &[9u8; 16], CsumType::Crc32c);
        CsumType::Crc32c.verify(&bytes[32..], &bytes[..32]).unwrap();
        let node = Node::parse(&bytes).unwrap();
        let h = ubtrfs_format::node::Header::parse(&bytes).unwrap();
        assert_eq!(h.fsid, fsid);
        assert_eq!(ubtrfs_format::node::Header::backref_rev(&bytes), 1);
        let back = ExtentBuffer::decode(node, h.bytenr, h.generation, h.owner, h.flags);
        assert_eq!(&back, eb);
    }

    #[test]
    fn leaf_and_node_encode_and_decode_back() {
        let mut leaf = ExtentBuffer::new_leaf(1 << 20, 7, 5);
        for i in 0..50u64 {
            leaf.items_mut()
                .push(Key::new(256 + i, 1, i), &vec![i as u8; (i * 3) as usize]);
        }
        roundtrip(&leaf, 4096 * 4);
        let mut node = ExtentBuffer::new_leaf(2 << 20, 7, 5);
        node.level = 1;
        node.content = Content::Node(
            (0..30u64)
                .map(|i| Ptr {
                    key: Key::new(i, 1, 0),
                    blockptr: (i + 10) << 14,
                    generation: 3,
                })
                .collect(),
        );
        roundtrip(&node, 4096);
        assert_eq!(max_ptrs(16384), 493);
    }
}
