//! Decoders for the item payloads the reader uses. Each takes the item's
//! data slice and checks its length before reading.

use crate::bytes::{le16, le32, le64, slice, u16_at, u64_at, uuid};
use crate::consts::*;
use crate::error::{invalid, Result};
use crate::key::{Key, KEY_SIZE};

mod extent;
pub use extent::*;

pub const DEV_ITEM_SIZE: usize = 98;
pub const INODE_ITEM_SIZE: usize = 160;
const CHUNK_HEADER_SIZE: usize = 48;
const STRIPE_SIZE: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    fn at(b: &[u8], off: usize) -> Self {
        Timespec {
            sec: le64(b, off) as i64,
            nsec: le32(b, off + 8),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevItem {
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

impl DevItem {
    pub fn parse(data: &[u8]) -> Result<Self> {
        let b = slice(data, 0, DEV_ITEM_SIZE, "DEV_ITEM")?;
        Ok(DevItem {
            devid: le64(b, 0),
            total_bytes: le64(b, 8),
            bytes_used: le64(b, 16),
            io_align: le32(b, 24),
            io_width: le32(b, 28),
            sector_size: le32(b, 32),
            dev_type: le64(b, 36),
            generation: le64(b, 44),
            start_offset: le64(b, 52),
            dev_group: le32(b, 60),
            seek_speed: b[64],
            bandwidth: b[65],
            uuid: uuid(b, 66),
            fsid: uuid(b, 82),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stripe {
    pub devid: u64,
    pub offset: u64,
    pub dev_uuid: [u8; 16],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkItem {
    pub length: u64,
    pub owner: u64,
    pub stripe_len: u64,
    pub chunk_type: u64,
    pub io_align: u32,
    pub io_width: u32,
    pub sector_size: u32,
    pub num_stripes: u16,
    pub sub_stripes: u16,
    pub stripes: Vec<Stripe>,
}

impl ChunkItem {
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
            .map(|i| {
                let s = CHUNK_HEADER_SIZE + i * STRIPE_SIZE;
                Stripe {
                    devid: le64(all, s),
                    offset: le64(all, s + 8),
                    dev_uuid: uuid(all, s + 16),
                }
            })
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InodeItem {
    pub generation: u64,
    pub transid: u64,
    pub size: u64,
    pub nbytes: u64,
    pub block_group: u64,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub rdev: u64,
    pub flags: u64,
    pub sequence: u64,
    pub atime: Timespec,
    pub ctime: Timespec,
    pub mtime: Timespec,
    pub otime: Timespec,
}

impl InodeItem {
    pub fn parse(data: &[u8]) -> Result<Self> {
        let b = slice(data, 0, INODE_ITEM_SIZE, "INODE_ITEM")?;
        Ok(InodeItem {
            generation: le64(b, 0),
            transid: le64(b, 8),
            size: le64(b, 16),
            nbytes: le64(b, 24),
            block_group: le64(b, 32),
            nlink: le32(b, 40),
            uid: le32(b, 44),
            gid: le32(b, 48),
            mode: le32(b, 52),
            rdev: le64(b, 56),
            flags: le64(b, 64),
            sequence: le64(b, 72),
            atime: Timespec::at(b, 112),
            ctime: Timespec::at(b, 124),
            mtime: Timespec::at(b, 136),
            otime: Timespec::at(b, 148),
        })
    }
}

/// A ROOT_ITEM: where a tree's root block is and, for subvolumes, their
/// identity and times. Old items lack everything after `level`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RootItem {
    pub inode: InodeItem,
    pub generation: u64,
    pub root_dirid: u64,
    pub bytenr: u64,
    pub byte_limit: u64,
    pub bytes_used: u64,
    pub last_snapshot: u64,
    pub flags: u64,
    pub refs: u32,
    pub drop_progress: Key,
    pub drop_level: u8,
    pub level: u8,
    pub generation_v2: u64,
    pub uuid: [u8; 16],
    pub parent_uuid: [u8; 16],
    pub received_uuid: [u8; 16],
    pub ctransid: u64,
    pub otransid: u64,
    pub stransid: u64,
    pub rtransid: u64,
    pub ctime: Timespec,
    pub otime: Timespec,
    pub stime: Timespec,
    pub rtime: Timespec,
}

const ROOT_ITEM_V1_SIZE: usize = 239;
const ROOT_ITEM_SIZE: usize = 439;

impl RootItem {
    pub fn parse(data: &[u8]) -> Result<Self> {
        let b = slice(data, 0, ROOT_ITEM_V1_SIZE, "ROOT_ITEM")?;
        let mut r = RootItem {
            inode: InodeItem::parse(b)?,
            generation: le64(b, 160),
            root_dirid: le64(b, 168),
            bytenr: le64(b, 176),
            byte_limit: le64(b, 184),
            bytes_used: le64(b, 192),
            last_snapshot: le64(b, 200),
            flags: le64(b, 208),
            refs: le32(b, 216),
            drop_progress: Key::parse(b, 220)?,
            drop_level: b[237],
            level: b[238],
            ..Default::default()
        };
        // The extended fields are trusted only when generation_v2 matches,
        // as the kernel does: an old kernel may have updated the item
        // without knowing about them.
        if data.len() >= ROOT_ITEM_SIZE {
            let b = &data[..ROOT_ITEM_SIZE];
            r.generation_v2 = le64(b, 239);
            if r.generation_v2 == r.generation {
                r.uuid = uuid(b, 247);
                r.parent_uuid = uuid(b, 263);
                r.received_uuid = uuid(b, 279);
                r.ctransid = le64(b, 295);
                r.otransid = le64(b, 303);
                r.stransid = le64(b, 311);
                r.rtransid = le64(b, 319);
                r.ctime = Timespec::at(b, 327);
                r.otime = Timespec::at(b, 339);
                r.stime = Timespec::at(b, 351);
                r.rtime = Timespec::at(b, 363);
            }
        }
        Ok(r)
    }

    pub fn is_readonly(&self) -> bool {
        self.flags & ROOT_SUBVOL_RDONLY != 0
    }
}

/// ROOT_REF / ROOT_BACKREF payload: where a subvolume is linked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootRef<'a> {
    pub dirid: u64,
    pub sequence: u64,
    pub name: &'a [u8],
}

impl<'a> RootRef<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        let b = slice(data, 0, 18, "ROOT_REF")?;
        let len = le16(b, 16) as usize;
        Ok(RootRef {
            dirid: le64(b, 0),
            sequence: le64(b, 8),
            name: slice(data, 18, len, "ROOT_REF name")?,
        })
    }
}

/// One name of an inode in a parent directory, from INODE_REF or
/// INODE_EXTREF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeRef<'a> {
    pub parent: u64,
    pub index: u64,
    pub name: &'a [u8],
}

/// Decodes all refs packed in an INODE_REF item (key offset = parent).
pub fn parse_inode_refs<'a>(key: &Key, data: &'a [u8]) -> Result<Vec<InodeRef<'a>>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < data.len() {
        let index = u64_at(data, off, "INODE_REF index")?;
        let len = u16_at(data, off + 8, "INODE_REF name_len")? as usize;
        let name = slice(data, off + 10, len, "INODE_REF name")?;
        out.push(InodeRef {
            parent: key.offset,
            index,
            name,
        });
        off += 10 + len;
    }
    Ok(out)
}

/// Decodes all refs packed in an INODE_EXTREF item.
pub fn parse_inode_extrefs(data: &[u8]) -> Result<Vec<InodeRef<'_>>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < data.len() {
        let parent = u64_at(data, off, "INODE_EXTREF parent")?;
        let index = u64_at(data, off + 8, "INODE_EXTREF index")?;
        let len = u16_at(data, off + 16, "INODE_EXTREF name_len")? as usize;
        let name = slice(data, off + 18, len, "INODE_EXTREF name")?;
        out.push(InodeRef {
            parent,
            index,
            name,
        });
        off += 18 + len;
    }
    Ok(out)
}

/// One entry of a DIR_ITEM, DIR_INDEX or XATTR_ITEM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntry<'a> {
    pub location: Key,
    pub transid: u64,
    pub file_type: u8,
    pub name: &'a [u8],
    pub data: &'a [u8],
}

const DIR_ITEM_HEADER: usize = KEY_SIZE + 8 + 2 + 2 + 1;

/// Decodes every entry packed in a DIR_ITEM / DIR_INDEX / XATTR_ITEM (several
/// share an item when their name hashes collide).
pub fn parse_dir_entries(data: &[u8]) -> Result<Vec<DirEntry<'_>>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < data.len() {
        let h = slice(data, off, DIR_ITEM_HEADER, "DIR_ITEM header")?;
        let location = Key::parse(h, 0)?;
        let transid = le64(h, KEY_SIZE);
        let data_len = le16(h, KEY_SIZE + 8) as usize;
        let name_len = le16(h, KEY_SIZE + 10) as usize;
        let file_type = h[KEY_SIZE + 12];
        let name = slice(data, off + DIR_ITEM_HEADER, name_len, "DIR_ITEM name")?;
        let value = slice(
            data,
            off + DIR_ITEM_HEADER + name_len,
            data_len,
            "DIR_ITEM data",
        )?;
        out.push(DirEntry {
            location,
            transid,
            file_type,
            name,
            data: value,
        });
        off += DIR_ITEM_HEADER + name_len + data_len;
    }
    Ok(out)
}

/// An EXTENT_DATA item: one mapping of a file range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileExtent<'a> {
    pub generation: u64,
    pub ram_bytes: u64,
    pub compression: u8,
    pub encryption: u8,
    pub other_encoding: u16,
    pub kind: FileExtentKind<'a>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileExtentKind<'a> {
    /// Data stored in the item itself (possibly compressed).
    Inline { data: &'a [u8] },
    /// Regular (type 1) or preallocated (type 2) extent. `disk_bytenr` 0
    /// is an explicit hole.
    Extent {
        prealloc: bool,
        disk_bytenr: u64,
        disk_num_bytes: u64,
        offset: u64,
        num_bytes: u64,
    },
}

const FILE_EXTENT_INLINE_HEADER: usize = 21;
const FILE_EXTENT_SIZE: usize = 53;

impl<'a> FileExtent<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        let b = slice(data, 0, FILE_EXTENT_INLINE_HEADER, "EXTENT_DATA")?;
        let t = b[20];
        let kind = match t {
            FILE_EXTENT_INLINE => FileExtentKind::Inline {
                data: &data[FILE_EXTENT_INLINE_HEADER..],
            },
            FILE_EXTENT_REG | FILE_EXTENT_PREALLOC => {
                let e = slice(data, 0, FILE_EXTENT_SIZE, "EXTENT_DATA (regular)")?;
                FileExtentKind::Extent {
                    prealloc: t == FILE_EXTENT_PREALLOC,
                    disk_bytenr: le64(e, 21),
                    disk_num_bytes: le64(e, 29),
                    offset: le64(e, 37),
                    num_bytes: le64(e, 45),
                }
            }
            other => return Err(invalid("EXTENT_DATA", format!("unknown type {other}"))),
        };
        Ok(FileExtent {
            generation: le64(b, 0),
            ram_bytes: le64(b, 8),
            compression: b[16],
            encryption: b[17],
            other_encoding: le16(b, 18),
            kind,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockGroupItem {
    pub used: u64,
    pub chunk_objectid: u64,
    pub flags: u64,
}

impl BlockGroupItem {
    pub fn parse(data: &[u8]) -> Result<Self> {
        let b = slice(data, 0, 24, "BLOCK_GROUP_ITEM")?;
        Ok(BlockGroupItem {
            used: le64(b, 0),
            chunk_objectid: le64(b, 8),
            flags: le64(b, 16),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevExtent {
    pub chunk_tree: u64,
    pub chunk_objectid: u64,
    pub chunk_offset: u64,
    pub length: u64,
}

impl DevExtent {
    pub fn parse(data: &[u8]) -> Result<Self> {
        let b = slice(data, 0, 48, "DEV_EXTENT")?;
        Ok(DevExtent {
            chunk_tree: le64(b, 0),
            chunk_objectid: le64(b, 8),
            chunk_offset: le64(b, 16),
            length: le64(b, 24),
        })
    }
}
