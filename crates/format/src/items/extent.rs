//! Extent tree items: the EXTENT_ITEM / METADATA_ITEM head, the tree block
//! info of non-skinny metadata extents, the back references packed inline
//! after them, and the keyed back reference items.
//!
//! Layout of an extent record (all little endian):
//!
//! ```text
//! btrfs_extent_item      refs u64, generation u64, flags u64      (24)
//! btrfs_tree_block_info  key (17), level u8                       (18)  only
//!                        for EXTENT_ITEM keys with FLAG_TREE_BLOCK
//! inline refs, each      type u8, then by type:
//!   TREE_BLOCK_REF       root u64                                 (1+8)
//!   SHARED_BLOCK_REF     parent u64                               (1+8)
//!   EXTENT_OWNER_REF     root u64                                 (1+8)
//!   SHARED_DATA_REF      parent u64, count u32                    (1+12)
//!   EXTENT_DATA_REF      root u64, objectid u64, offset u64,
//!                        count u32                                (1+28)
//! ```
//!
//! For EXTENT_DATA_REF the inline form has no separate offset field: the
//! btrfs_extent_data_ref structure sits where the other types keep their
//! u64, which is why its inline size is 29 rather than 9 + 28.

use crate::bytes::{le32, le64, put_u32, put_u64, slice, u8_at};
use crate::consts::*;
use crate::error::{invalid, Result};
use crate::fixed_item;
use crate::key::Key;
use std::cmp::Reverse;

pub const EXTENT_FLAG_DATA: u64 = 1;
pub const EXTENT_FLAG_TREE_BLOCK: u64 = 2;
/// Set on tree blocks whose back references are all by parent (shared):
/// the kernel uses it after relocation and for blocks of snapshots.
pub const BLOCK_FLAG_FULL_BACKREF: u64 = 1 << 8;

fixed_item! {
    /// The head of an EXTENT_ITEM / METADATA_ITEM.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct ExtentItem ("EXTENT_ITEM") {
        pub refs: u64,
        pub generation: u64,
        pub flags: u64,
    }
}

impl ExtentItem {
    pub fn is_tree_block(&self) -> bool {
        self.flags & EXTENT_FLAG_TREE_BLOCK != 0
    }
}

fixed_item! {
    /// `btrfs_tree_block_info`: first key and level of a tree block, kept only
    /// by non-skinny (EXTENT_ITEM keyed) metadata extents. Skinny METADATA_ITEMs
    /// carry the level in the key offset and no first key at all.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct TreeBlockInfo ("tree block info") {
        pub key: Key,
        pub level: u8,
    }
}

fixed_item! {
    /// `btrfs_extent_data_ref`: a data extent referenced from file `objectid`
    /// at file offset `offset` of tree `root`, `count` times. This is both the
    /// payload of a keyed EXTENT_DATA_REF item and the body of the inline form.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct ExtentDataRef ("EXTENT_DATA_REF") {
        pub root: u64,
        pub objectid: u64,
        pub offset: u64,
        pub count: u32,
    }
}

impl ExtentDataRef {
    /// The key offset of this reference's keyed EXTENT_DATA_REF item, and
    /// the order of inline EXTENT_DATA_REFs (descending).
    pub fn hash(&self) -> u64 {
        hash_extent_data_ref(self.root, self.objectid, self.offset)
    }
}

/// Payload of a keyed SHARED_DATA_REF item (key offset = parent block).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SharedDataRef {
    pub count: u32,
}

impl SharedDataRef {
    pub const ENCODED_LEN: usize = 4;

    pub fn parse(data: &[u8]) -> Result<Self> {
        let b = slice(data, 0, Self::ENCODED_LEN, "SHARED_DATA_REF")?;
        Ok(SharedDataRef { count: le32(b, 0) })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u32(out, self.count);
    }
}

/// The kernel's `hash_extent_data_ref`: the key offset of a keyed
/// EXTENT_DATA_REF. Two crc32c chains (the kernel's raw `crc32c(seed, ..)`,
/// seeded with all ones and not inverted at the end): one over the root,
/// one over objectid then offset, each as 8 little-endian bytes; the first
/// is shifted left by 31 (not 32: the kernel's choice, kept for format
/// compatibility) and XORed with the second.
pub fn hash_extent_data_ref(root: u64, objectid: u64, offset: u64) -> u64 {
    let high = raw_crc32c(!0, &root.to_le_bytes());
    let low = raw_crc32c(!0, &objectid.to_le_bytes());
    let low = raw_crc32c(low, &offset.to_le_bytes());
    ((high as u64) << 31) ^ low as u64
}

/// The kernel's `crc32c(seed, data)`: the bare CRC update, no inversion on
/// entry or exit. The crate's `crc32c_append` inverts both ways, so undo it.
fn raw_crc32c(seed: u32, data: &[u8]) -> u32 {
    !crc32c::crc32c_append(!seed, data)
}

/// One back reference, inline in an extent record or (except owner refs)
/// as its own keyed item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InlineRef {
    /// TREE_BLOCK_REF: a tree block referenced by the tree `root`.
    TreeBlock { root: u64 },
    /// SHARED_BLOCK_REF: a tree block referenced by the node at `parent`.
    SharedBlock { parent: u64 },
    /// EXTENT_DATA_REF: a data extent referenced by file items of a tree.
    ExtentData(ExtentDataRef),
    /// SHARED_DATA_REF: a data extent referenced `count` times from the
    /// leaf at `parent`.
    SharedData { parent: u64, count: u32 },
    /// EXTENT_OWNER_REF (simple quotas): the tree charged for the extent.
    /// Holds no reference: it does not add to the extent's refs.
    ExtentOwner { root: u64 },
}

impl InlineRef {
    /// The type byte (which is also the key type of the keyed form).
    pub fn ref_type(&self) -> u8 {
        match self {
            InlineRef::TreeBlock { .. } => TREE_BLOCK_REF,
            InlineRef::SharedBlock { .. } => SHARED_BLOCK_REF,
            InlineRef::ExtentData(_) => EXTENT_DATA_REF,
            InlineRef::SharedData { .. } => SHARED_DATA_REF,
            InlineRef::ExtentOwner { .. } => EXTENT_OWNER_REF,
        }
    }

    /// Bytes an inline ref of type `t` takes, type byte included; None for
    /// a type that cannot appear inline.
    pub fn inline_size_of(t: u8) -> Option<usize> {
        match t {
            TREE_BLOCK_REF | SHARED_BLOCK_REF | EXTENT_OWNER_REF => Some(1 + 8),
            SHARED_DATA_REF => Some(1 + 8 + SharedDataRef::ENCODED_LEN),
            EXTENT_DATA_REF => Some(1 + ExtentDataRef::ENCODED_LEN),
            _ => None,
        }
    }

    pub fn encoded_len(&self) -> usize {
        Self::inline_size_of(self.ref_type()).expect("every variant has an inline size")
    }

    /// How many references this contributes to the extent's `refs`.
    pub fn count(&self) -> u64 {
        match self {
            InlineRef::TreeBlock { .. } | InlineRef::SharedBlock { .. } => 1,
            InlineRef::ExtentData(d) => d.count as u64,
            InlineRef::SharedData { count, .. } => *count as u64,
            InlineRef::ExtentOwner { .. } => 0,
        }
    }

    /// Decodes the inline ref at the start of `data`; returns it and the
    /// bytes it took.
    pub fn parse(data: &[u8]) -> Result<(Self, usize)> {
        let t = u8_at(data, 0, "inline ref type")?;
        let size = Self::inline_size_of(t)
            .ok_or_else(|| invalid("inline ref", format!("unknown type {t}")))?;
        let b = slice(data, 0, size, "inline ref")?;
        let r = match t {
            TREE_BLOCK_REF => InlineRef::TreeBlock { root: le64(b, 1) },
            SHARED_BLOCK_REF => InlineRef::SharedBlock { parent: le64(b, 1) },
            EXTENT_OWNER_REF => InlineRef::ExtentOwner { root: le64(b, 1) },
            SHARED_DATA_REF => InlineRef::SharedData {
                parent: le64(b, 1),
                count: le32(b, 9),
            },
            _ => InlineRef::ExtentData(ExtentDataRef::parse(&b[1..])?),
        };
        Ok((r, size))
    }

    /// Appends the inline form.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.ref_type());
        match *self {
            InlineRef::TreeBlock { root: v }
            | InlineRef::SharedBlock { parent: v }
            | InlineRef::ExtentOwner { root: v } => put_u64(out, v),
            InlineRef::SharedData { parent, count } => {
                put_u64(out, parent);
                put_u32(out, count);
            }
            InlineRef::ExtentData(d) => d.encode(out),
        }
    }

    /// The value the kernel orders refs of one type by (descending): the
    /// hash for EXTENT_DATA_REF, the root or parent for the others.
    pub fn seq(&self) -> u64 {
        match *self {
            InlineRef::TreeBlock { root: v }
            | InlineRef::SharedBlock { parent: v }
            | InlineRef::ExtentOwner { root: v }
            | InlineRef::SharedData { parent: v, .. } => v,
            InlineRef::ExtentData(d) => d.hash(),
        }
    }

    /// Sort key giving the order the kernel keeps inline refs in (and its
    /// tree-checker enforces): type ascending, then `seq` descending.
    pub fn order_key(&self) -> (u8, Reverse<u64>) {
        (self.ref_type(), Reverse(self.seq()))
    }

    /// The key offset of the keyed form: root or parent, or the hash for
    /// EXTENT_DATA_REF. None for an owner ref, which has no keyed form.
    pub fn keyed_offset(&self) -> Option<u64> {
        match self {
            InlineRef::ExtentOwner { .. } => None,
            _ => Some(self.seq()),
        }
    }

    /// The keyed item form of this ref for the extent at `bytenr`: its key
    /// and payload (empty for the block refs). None for owner refs.
    pub fn to_keyed(&self, bytenr: u64) -> Option<(Key, Vec<u8>)> {
        let key = Key::new(bytenr, self.ref_type(), self.keyed_offset()?);
        let mut data = Vec::new();
        match *self {
            InlineRef::ExtentData(d) => d.encode(&mut data),
            InlineRef::SharedData { count, .. } => SharedDataRef { count }.encode(&mut data),
            _ => {}
        }
        Some((key, data))
    }

    /// Decodes a keyed back reference item (TREE_BLOCK_REF, SHARED_BLOCK_REF,
    /// EXTENT_DATA_REF, SHARED_DATA_REF) into the common form.
    pub fn from_keyed(key: &Key, data: &[u8]) -> Result<Self> {
        Ok(match key.item_type {
            TREE_BLOCK_REF => InlineRef::TreeBlock { root: key.offset },
            SHARED_BLOCK_REF => InlineRef::SharedBlock { parent: key.offset },
            EXTENT_DATA_REF => InlineRef::ExtentData(ExtentDataRef::parse(data)?),
            SHARED_DATA_REF => InlineRef::SharedData {
                parent: key.offset,
                count: SharedDataRef::parse(data)?.count,
            },
            t => return Err(invalid("keyed back reference", format!("item type {t}"))),
        })
    }
}

/// Iterator over the inline refs of an extent record. Yields an error once
/// (and then stops) on a truncated or unknown ref.
#[derive(Debug, Clone)]
pub struct InlineRefs<'a> {
    data: &'a [u8],
    off: usize,
}

impl<'a> InlineRefs<'a> {
    /// Iterates over refs packed back to back in `data` (the bytes after
    /// the extent item head and any tree block info).
    pub fn new(data: &'a [u8]) -> Self {
        InlineRefs { data, off: 0 }
    }
}

impl Iterator for InlineRefs<'_> {
    type Item = Result<InlineRef>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.off >= self.data.len() {
            return None;
        }
        match InlineRef::parse(&self.data[self.off..]) {
            Ok((r, n)) => {
                self.off += n;
                Some(Ok(r))
            }
            Err(e) => {
                self.off = self.data.len();
                Some(Err(e))
            }
        }
    }
}

/// Whether an extent item under `key` with `flags` carries a tree block
/// info: only EXTENT_ITEM-keyed (non-skinny) tree blocks do.
fn has_tree_block_info(key: &Key, flags: u64) -> bool {
    key.item_type == EXTENT_ITEM && flags & EXTENT_FLAG_TREE_BLOCK != 0
}

/// A whole extent record: head, tree block info, and inline refs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExtentRecord {
    pub item: ExtentItem,
    /// Present exactly for EXTENT_ITEM-keyed tree blocks.
    pub tree_block: Option<TreeBlockInfo>,
    pub refs: Vec<InlineRef>,
}

impl ExtentRecord {
    /// Splits the data of an EXTENT_ITEM / METADATA_ITEM under `key` into
    /// head, tree block info, and an iterator over the inline refs.
    pub fn split<'a>(
        key: &Key,
        data: &'a [u8],
    ) -> Result<(ExtentItem, Option<TreeBlockInfo>, InlineRefs<'a>)> {
        if key.item_type != EXTENT_ITEM && key.item_type != METADATA_ITEM {
            return Err(invalid(
                "extent record",
                format!("key type {}", key.item_type),
            ));
        }
        let item = ExtentItem::parse(data)?;
        let mut off = ExtentItem::ENCODED_LEN;
        let tree_block = if has_tree_block_info(key, item.flags) {
            let info = TreeBlockInfo::parse(&data[off..])?;
            off += TreeBlockInfo::ENCODED_LEN;
            Some(info)
        } else {
            None
        };
        Ok((item, tree_block, InlineRefs::new(&data[off..])))
    }

    /// Decodes the whole record, all inline refs included.
    pub fn parse(key: &Key, data: &[u8]) -> Result<Self> {
        let (item, tree_block, refs) = Self::split(key, data)?;
        Ok(ExtentRecord {
            item,
            tree_block,
            refs: refs.collect::<Result<_>>()?,
        })
    }

    pub fn encoded_len(&self) -> usize {
        ExtentItem::ENCODED_LEN
            + self.tree_block.map_or(0, |_| TreeBlockInfo::ENCODED_LEN)
            + self.refs.iter().map(InlineRef::encoded_len).sum::<usize>()
    }

    /// Appends the record as stored, refs in the order given (use
    /// [`ExtentRecord::sort_refs`] first for the kernel's order). The caller
    /// keeps `tree_block` consistent with the key type and flags.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.item.encode(out);
        if let Some(info) = &self.tree_block {
            info.encode(out);
        }
        for r in &self.refs {
            r.encode(out);
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        self.encode(&mut v);
        v
    }

    /// Puts the inline refs in the order the kernel keeps them.
    pub fn sort_refs(&mut self) {
        self.refs.sort_by_key(InlineRef::order_key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_ref(root: u64, objectid: u64, offset: u64, count: u32) -> InlineRef {
        InlineRef::ExtentData(ExtentDataRef {
            root,
            objectid,
            offset,
            count,
        })
    }

    #[test]
    fn hash_matches_kernel_made_keys() {
        // Key offsets of keyed EXTENT_DATA_REF items in the committed
        // small-xxhash-zstd image, as the kernel wrote them.
        assert_eq!(hash_extent_data_ref(260, 263, 131072), 2118083707069920463);
        assert_eq!(hash_extent_data_ref(260, 263, 0), 2118083703773942796);
        assert_eq!(hash_extent_data_ref(259, 263, 0), 6937922125336237068);
    }

    #[test]
    fn skinny_metadata_round_trip() {
        let key = Key::new(30408704, METADATA_ITEM, 0);
        let rec = ExtentRecord {
            item: ExtentItem {
                refs: 1,
                generation: 7,
                flags: EXTENT_FLAG_TREE_BLOCK,
            },
            tree_block: None,
            refs: vec![InlineRef::TreeBlock { root: 5 }],
        };
        let b = rec.to_bytes();
        assert_eq!(b.len(), 33);
        assert_eq!(b.len(), rec.encoded_len());
        assert_eq!(b[24], TREE_BLOCK_REF);
        assert_eq!(ExtentRecord::parse(&key, &b).unwrap(), rec);
    }

    #[test]
    fn non_skinny_tree_block_has_info() {
        let key = Key::new(30408704, EXTENT_ITEM, 16384);
        let rec = ExtentRecord {
            item: ExtentItem {
                refs: 2,
                generation: 9,
                flags: EXTENT_FLAG_TREE_BLOCK | BLOCK_FLAG_FULL_BACKREF,
            },
            tree_block: Some(TreeBlockInfo {
                key: Key::new(256, INODE_ITEM, 0),
                level: 1,
            }),
            refs: vec![
                InlineRef::SharedBlock { parent: 1 << 30 },
                InlineRef::SharedBlock { parent: 1 << 20 },
            ],
        };
        let b = rec.to_bytes();
        assert_eq!(b.len(), 24 + 18 + 9 + 9);
        assert_eq!(ExtentRecord::parse(&key, &b).unwrap(), rec);
        // The same bytes under a METADATA_ITEM key would misread the info
        // as refs: the key type decides, and here it yields an error.
        assert!(ExtentRecord::parse(&Key::new(30408704, METADATA_ITEM, 1), &b).is_err());
    }

    #[test]
    fn data_extent_all_ref_kinds() {
        let key = Key::new(1 << 20, EXTENT_ITEM, 4096);
        let mut rec = ExtentRecord {
            item: ExtentItem {
                refs: 6,
                generation: 3,
                flags: EXTENT_FLAG_DATA,
            },
            tree_block: None,
            refs: vec![
                InlineRef::SharedData {
                    parent: 1 << 22,
                    count: 2,
                },
                data_ref(5, 257, 0, 1),
                data_ref(256, 258, 8192, 2),
                InlineRef::ExtentOwner { root: 5 },
                InlineRef::SharedData {
                    parent: 1 << 23,
                    count: 1,
                },
            ],
        };
        rec.sort_refs();
        let types: Vec<u8> = rec.refs.iter().map(InlineRef::ref_type).collect();
        assert_eq!(
            types,
            [
                EXTENT_OWNER_REF,
                EXTENT_DATA_REF,
                EXTENT_DATA_REF,
                SHARED_DATA_REF,
                SHARED_DATA_REF
            ]
        );
        assert!(rec.refs[1].seq() >= rec.refs[2].seq());
        assert_eq!(rec.refs[3].seq(), 1 << 23);
        let total: u64 = rec.refs.iter().map(InlineRef::count).sum();
        assert_eq!(total, rec.item.refs);
        let b = rec.to_bytes();
        assert_eq!(b.len(), 24 + 9 + 29 + 29 + 13 + 13);
        assert_eq!(ExtentRecord::parse(&key, &b).unwrap(), rec);
    }

    #[test]
    fn keyed_forms_round_trip() {
        let refs = [
            InlineRef::TreeBlock { root: 7 },
            InlineRef::SharedBlock { parent: 1 << 30 },
            data_ref(260, 263, 131072, 1),
            InlineRef::SharedData {
                parent: 1 << 30,
                count: 3,
            },
        ];
        for r in refs {
            let (key, data) = r.to_keyed(5259264).unwrap();
            assert_eq!(key.objectid, 5259264);
            assert_eq!(InlineRef::from_keyed(&key, &data).unwrap(), r);
        }
        let (key, data) = data_ref(260, 263, 131072, 1).to_keyed(5259264).unwrap();
        assert_eq!(key.offset, 2118083707069920463);
        assert_eq!(data.len(), ExtentDataRef::ENCODED_LEN);
        assert!(InlineRef::ExtentOwner { root: 5 }.to_keyed(1).is_none());
    }

    #[test]
    fn hostile_inputs_are_errors() {
        let key = Key::new(1 << 20, EXTENT_ITEM, 4096);
        // Too short for the head.
        assert!(ExtentRecord::parse(&key, &[0u8; 23]).is_err());
        let mut head = Vec::new();
        ExtentItem {
            refs: 1,
            generation: 1,
            flags: EXTENT_FLAG_DATA,
        }
        .encode(&mut head);
        // Unknown ref type.
        let mut b = head.clone();
        b.push(99);
        b.extend_from_slice(&[0; 8]);
        assert!(ExtentRecord::parse(&key, &b).is_err());
        // Every truncation of a valid record with refs fails cleanly.
        let rec = ExtentRecord {
            item: ExtentItem::parse(&head).unwrap(),
            tree_block: None,
            refs: vec![
                data_ref(5, 257, 0, 1),
                InlineRef::SharedData {
                    parent: 4096,
                    count: 1,
                },
            ],
        };
        let full = rec.to_bytes();
        for n in 0..full.len() {
            let r = ExtentRecord::parse(&key, &full[..n]);
            // Cutting exactly between refs is a shorter valid record.
            if n == 24 || n == 24 + 29 {
                assert!(r.is_ok());
            } else {
                assert!(r.is_err(), "truncated to {n}");
            }
        }
        // Tree block flag without room for the info.
        let mut tb = Vec::new();
        ExtentItem {
            refs: 1,
            generation: 1,
            flags: EXTENT_FLAG_TREE_BLOCK,
        }
        .encode(&mut tb);
        assert!(ExtentRecord::parse(&key, &tb).is_err());
        // The iterator stops after its error.
        let mut it = InlineRefs::new(&[TREE_BLOCK_REF, 1, 2]);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
        // Wrong key types.
        assert!(ExtentRecord::parse(&Key::new(1, DIR_ITEM, 0), &full).is_err());
        assert!(InlineRef::from_keyed(&Key::new(1, EXTENT_DATA_REF, 0), &[0; 27]).is_err());
        assert!(InlineRef::from_keyed(&Key::new(1, INODE_ITEM, 0), &[]).is_err());
    }
}
