//! Volume management items: DEV_ITEM and CHUNK_ITEM (chunk tree), DEV_EXTENT
//! (device tree), BLOCK_GROUP_ITEM (extent or block group tree) and the
//! device statistics item.

use crate::bytes::{le16, le32, le64, put_u16, put_u32, put_u64, slice};
use crate::consts::*;
use crate::error::{invalid, Result};
use crate::fixed::Field;
use crate::fixed_item;

pub const DEV_ITEM_SIZE: usize = 98;
pub const CHUNK_HEADER_SIZE: usize = 48;
pub const STRIPE_SIZE: usize = 32;

fixed_item! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct DevItem ("DEV_ITEM") {
        pub devid: u64,
        pub total_bytes: u64,
        pub bytes_used: u64,
        pub io_align: u32,
        pub io_width: u32,
        pub sector_size: u32,
        pub dev_type: u64,
        pub generation: u64,
        pub start_offset: u64,
        pub dev_group: u32,
        pub seek_speed: u8,
        pub bandwidth: u8,
        pub uuid: [u8; 16],
        pub fsid: [u8; 16],
    }
}
const _: () = assert!(DevItem::ENCODED_LEN == DEV_ITEM_SIZE);

impl DevItem {
    /// A new device of `total_bytes` with nothing allocated on it, as mkfs
    /// describes it: I/O aligned to `sector_size`, the fields the kernel
    /// leaves unused at zero.
    pub fn new(
        devid: u64,
        total_bytes: u64,
        sector_size: u32,
        uuid: [u8; 16],
        fsid: [u8; 16],
    ) -> DevItem {
        DevItem {
            devid,
            total_bytes,
            bytes_used: 0,
            io_align: sector_size,
            io_width: sector_size,
            sector_size,
            dev_type: 0,
            generation: 0,
            start_offset: 0,
            dev_group: 0,
            seek_speed: 0,
            bandwidth: 0,
            uuid,
            fsid,
        }
    }
}

fixed_item! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Stripe ("stripe") {
        pub devid: u64,
        pub offset: u64,
        pub dev_uuid: [u8; 16],
    }
}
const _: () = assert!(Stripe::ENCODED_LEN == STRIPE_SIZE);

/// A CHUNK_ITEM: one logical range and the device stripes backing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkItem {
    pub length: u64,
    pub owner: u64,
    pub stripe_len: u64,
    pub chunk_type: u64,
    pub io_align: u32,
    pub io_width: u32,
    pub sector_size: u32,
    /// As read; equals `stripes.len()`, which is what [`ChunkItem::encode`]
    /// writes.
    pub num_stripes: u16,
    pub sub_stripes: u16,
    pub stripes: Vec<Stripe>,
}

impl ChunkItem {
    /// Whether `other` maps the same bytes to the same places: length,
    /// profile, stripe length and stripes (sub_stripes counts for RAID10
    /// alone, as the kernel's chunk checks read it; the alignment fields
    /// and the owner do not map anything).
    pub fn same_mapping(&self, other: &ChunkItem) -> bool {
        let places = |c: &ChunkItem| -> Vec<(u64, u64)> {
            c.stripes.iter().map(|s| (s.devid, s.offset)).collect()
        };
        self.length == other.length
            && self.chunk_type == other.chunk_type
            && self.stripe_len == other.stripe_len
            && places(self) == places(other)
            && (self.chunk_type & crate::consts::BG_RAID10 == 0
                || self.sub_stripes == other.sub_stripes)
    }

    pub fn parse(data: &[u8]) -> Result<Self> {
        let b = slice(data, 0, CHUNK_HEADER_SIZE, "CHUNK_ITEM")?;
        let num_stripes = le16(b, 44);
        if num_stripes == 0 {
            return Err(invalid("CHUNK_ITEM", "zero stripes"));
        }
        let all = slice(
            data,
            0,
            CHUNK_HEADER_SIZE + num_stripes as usize * STRIPE_SIZE,
            "CHUNK_ITEM stripes",
        )?;
        let stripes = (0..num_stripes as usize)
            .map(|i| <Stripe as Field>::get(all, CHUNK_HEADER_SIZE + i * STRIPE_SIZE))
            .collect();
        let c = ChunkItem {
            length: le64(b, 0),
            owner: le64(b, 8),
            stripe_len: le64(b, 16),
            chunk_type: le64(b, 24),
            io_align: le32(b, 32),
            io_width: le32(b, 36),
            sector_size: le32(b, 40),
            num_stripes,
            sub_stripes: le16(b, 46),
            stripes,
        };
        if c.length == 0 || c.stripe_len == 0 || !c.stripe_len.is_power_of_two() {
            return Err(invalid(
                "CHUNK_ITEM",
                format!("length {} stripe_len {}", c.length, c.stripe_len),
            ));
        }
        Ok(c)
    }

    pub fn encoded_len(&self) -> usize {
        CHUNK_HEADER_SIZE + self.stripes.len() * STRIPE_SIZE
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.length);
        put_u64(out, self.owner);
        put_u64(out, self.stripe_len);
        put_u64(out, self.chunk_type);
        put_u32(out, self.io_align);
        put_u32(out, self.io_width);
        put_u32(out, self.sector_size);
        put_u16(
            out,
            u16::try_from(self.stripes.len()).expect("more than 65535 stripes"),
        );
        put_u16(out, self.sub_stripes);
        for s in &self.stripes {
            s.encode(out);
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        self.encode(&mut v);
        v
    }
}

/// Names a block group profile (from chunk or block group type flags).
pub fn profile_name(flags: u64) -> &'static str {
    match flags & BG_PROFILE_MASK {
        0 => "single",
        BG_RAID0 => "RAID0",
        BG_RAID1 => "RAID1",
        BG_DUP => "DUP",
        BG_RAID10 => "RAID10",
        BG_RAID5 => "RAID5",
        BG_RAID6 => "RAID6",
        BG_RAID1C3 => "RAID1C3",
        BG_RAID1C4 => "RAID1C4",
        _ => "invalid",
    }
}

/// Names the kind of block group: Data, Metadata, System, or mixed.
pub fn block_group_kind(flags: u64) -> &'static str {
    match flags & (BG_DATA | BG_METADATA | BG_SYSTEM) {
        BG_DATA => "Data",
        BG_METADATA => "Metadata",
        BG_SYSTEM => "System",
        x if x == BG_DATA | BG_METADATA => "Data+Metadata",
        _ => "unknown",
    }
}

fixed_item! {
    /// BLOCK_GROUP_ITEM, keyed (logical start, BLOCK_GROUP_ITEM, length).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct BlockGroupItem ("BLOCK_GROUP_ITEM") {
        pub used: u64,
        /// Always FIRST_CHUNK_TREE_OBJECTID (256).
        pub chunk_objectid: u64,
        pub flags: u64,
    }
}

fixed_item! {
    /// DEV_EXTENT, keyed (devid, DEV_EXTENT, physical offset): which chunk a
    /// device range belongs to.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct DevExtent ("DEV_EXTENT") {
        /// Always CHUNK_TREE_OBJECTID (3).
        pub chunk_tree: u64,
        /// Always FIRST_CHUNK_TREE_OBJECTID (256).
        pub chunk_objectid: u64,
        /// Logical start of the chunk.
        pub chunk_offset: u64,
        pub length: u64,
        /// The chunk tree's uuid (as in every tree block header).
        pub chunk_tree_uuid: [u8; 16],
    }
}

/// Object id of device statistics items: keyed (0, PERSISTENT_ITEM, devid).
pub const DEV_STATS_OBJECTID: u64 = 0;
/// Counters in a device statistics item, in order: write errors, read
/// errors, flush errors, corruption errors, generation errors.
pub const DEV_STAT_VALUES: usize = 5;

/// `btrfs_dev_stats_item`: the persistent per-device error counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DevStats {
    pub values: [u64; DEV_STAT_VALUES],
}

impl DevStats {
    pub const ENCODED_LEN: usize = 8 * DEV_STAT_VALUES;

    /// Decodes the counters; a shorter item (from a kernel with fewer
    /// counters) leaves the missing ones zero, as the kernel reads it.
    pub fn parse(data: &[u8]) -> Result<Self> {
        let mut values = [0u64; DEV_STAT_VALUES];
        for (i, v) in values.iter_mut().enumerate() {
            if let Ok(b) = slice(data, i * 8, 8, "DEV_STATS") {
                *v = le64(b, 0);
            }
        }
        Ok(DevStats { values })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        for v in self.values {
            put_u64(out, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_item_round_trip() {
        let d = DevItem {
            bytes_used: 1 << 25,
            ..DevItem::new(1, 1 << 30, 4096, [7; 16], [8; 16])
        };
        let b = d.to_bytes();
        assert_eq!(b.len(), DEV_ITEM_SIZE);
        assert_eq!(DevItem::parse(&b).unwrap(), d);
    }

    #[test]
    fn chunk_round_trip() {
        let c = ChunkItem {
            length: 1 << 30,
            owner: EXTENT_TREE_OBJECTID,
            stripe_len: 1 << 16,
            chunk_type: BG_DATA | BG_RAID1,
            io_align: 1 << 16,
            io_width: 1 << 16,
            sector_size: 4096,
            num_stripes: 2,
            sub_stripes: 1,
            stripes: vec![
                Stripe {
                    devid: 1,
                    offset: 1 << 20,
                    dev_uuid: [1; 16],
                },
                Stripe {
                    devid: 2,
                    offset: 1 << 21,
                    dev_uuid: [2; 16],
                },
            ],
        };
        let b = c.to_bytes();
        assert_eq!(b.len(), 48 + 64);
        assert_eq!(b.len(), c.encoded_len());
        assert_eq!(ChunkItem::parse(&b).unwrap(), c);
        assert!(ChunkItem::parse(&b[..b.len() - 1]).is_err());
        // sub_stripes 0 (as a btrfs-image restore sometimes writes it) maps
        // a RAID1 chunk the same; another stripe offset does not.
        let loose = ChunkItem {
            sub_stripes: 0,
            ..c.clone()
        };
        assert!(loose.same_mapping(&c));
        let mut moved = c.clone();
        moved.stripes[1].offset += 1 << 20;
        assert!(!moved.same_mapping(&c));
        let raid10 = |sub| ChunkItem {
            chunk_type: BG_DATA | BG_RAID10,
            sub_stripes: sub,
            ..c.clone()
        };
        assert!(!raid10(0).same_mapping(&raid10(2)));
    }

    #[test]
    fn small_items_round_trip() {
        let bg = BlockGroupItem {
            used: 12345,
            chunk_objectid: FIRST_CHUNK_TREE_OBJECTID,
            flags: BG_METADATA | BG_DUP,
        };
        assert_eq!(BlockGroupItem::parse(&bg.to_bytes()).unwrap(), bg);
        let de = DevExtent {
            chunk_tree: CHUNK_TREE_OBJECTID,
            chunk_objectid: FIRST_CHUNK_TREE_OBJECTID,
            chunk_offset: 1 << 30,
            length: 1 << 28,
            chunk_tree_uuid: [9; 16],
        };
        let b = de.to_bytes();
        assert_eq!(b.len(), 48);
        assert_eq!(DevExtent::parse(&b).unwrap(), de);
        let st = DevStats {
            values: [1, 2, 3, 4, 5],
        };
        let mut b = Vec::new();
        st.encode(&mut b);
        assert_eq!(b.len(), DevStats::ENCODED_LEN);
        assert_eq!(DevStats::parse(&b).unwrap(), st);
        assert_eq!(DevStats::parse(&b[..16]).unwrap().values, [1, 2, 0, 0, 0]);
    }
}
