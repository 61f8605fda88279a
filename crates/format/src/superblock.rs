//! The superblock and the chunk items embedded in its system chunk array.

use crate::bytes::{le16, le32, le64, slice, uuid};
use crate::checksum::CsumType;
use crate::consts::*;
use crate::error::{invalid, FormatError, Result};
use crate::items::{ChunkItem, DevItem};
use crate::key::{Key, KEY_SIZE};

const SYS_CHUNK_ARRAY_OFF: usize = 0x32b;
const SYS_CHUNK_ARRAY_MAX: usize = 2048;
const ROOT_BACKUPS_OFF: usize = 0xb2b;
const ROOT_BACKUP_SIZE: usize = 168;

/// One of the four root backups the kernel keeps in the superblock.
#[derive(Debug, Clone, Copy)]
pub struct RootBackup {
    pub tree_root: u64,
    pub tree_root_gen: u64,
    pub chunk_root: u64,
    pub chunk_root_gen: u64,
    pub extent_root: u64,
    pub fs_root: u64,
    pub csum_root: u64,
    pub total_bytes: u64,
    pub bytes_used: u64,
    pub num_devices: u64,
    pub tree_root_level: u8,
    pub chunk_root_level: u8,
}

#[derive(Debug, Clone)]
pub struct Superblock {
    pub csum: [u8; 32],
    pub fsid: [u8; 16],
    pub bytenr: u64,
    pub flags: u64,
    pub generation: u64,
    pub root: u64,
    pub chunk_root: u64,
    pub log_root: u64,
    pub total_bytes: u64,
    pub bytes_used: u64,
    pub root_dir_objectid: u64,
    pub num_devices: u64,
    pub sectorsize: u32,
    pub nodesize: u32,
    pub stripesize: u32,
    pub sys_chunk_array_size: u32,
    pub chunk_root_generation: u64,
    pub compat_flags: u64,
    pub compat_ro_flags: u64,
    pub incompat_flags: u64,
    pub csum_type: CsumType,
    pub root_level: u8,
    pub chunk_root_level: u8,
    pub log_root_level: u8,
    pub dev_item: DevItem,
    pub label: Vec<u8>,
    pub cache_generation: u64,
    pub uuid_tree_generation: u64,
    pub metadata_uuid: [u8; 16],
    pub sys_chunk_array: Vec<u8>,
    pub backups: [RootBackup; 4],
}

impl Superblock {
    /// Parses and validates a 4096-byte superblock copy: magic, checksum,
    /// and the sizes the rest of the reader relies on.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let b = slice(buf, 0, SUPER_SIZE, "superblock")?;
        if &b[0x40..0x48] != SUPER_MAGIC {
            return Err(FormatError::BadMagic);
        }
        let csum_type = CsumType::from_raw(le16(b, 0xc4))?;
        csum_type.verify(&b[0x20..], &b[..32])?;
        let sys_chunk_array_size = le32(b, 0xa0);
        if sys_chunk_array_size as usize > SYS_CHUNK_ARRAY_MAX {
            return Err(invalid(
                "superblock",
                format!("sys_chunk_array_size {sys_chunk_array_size} > {SYS_CHUNK_ARRAY_MAX}"),
            ));
        }
        let sectorsize = le32(b, 0x90);
        let nodesize = le32(b, 0x94);
        if !sectorsize.is_power_of_two() || !(4096..=65536).contains(&sectorsize) {
            return Err(invalid("superblock", format!("sectorsize {sectorsize}")));
        }
        if !nodesize.is_power_of_two() || nodesize < sectorsize || nodesize > 65536 {
            return Err(invalid("superblock", format!("nodesize {nodesize}")));
        }
        let incompat_flags = le64(b, 0xbc);
        let fsid = uuid(b, 0x20);
        let metadata_uuid = if incompat_flags & INCOMPAT_METADATA_UUID != 0 {
            uuid(b, 0x23b)
        } else {
            fsid
        };
        let label_raw = &b[0x12b..0x22b];
        let label_len = label_raw
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(label_raw.len());
        let mut backups = [RootBackup::parse(&b[ROOT_BACKUPS_OFF..]); 4];
        for (i, bk) in backups.iter_mut().enumerate() {
            *bk = RootBackup::parse(&b[ROOT_BACKUPS_OFF + i * ROOT_BACKUP_SIZE..]);
        }
        let sb = Superblock {
            csum: b[0..32].try_into().unwrap(),
            fsid,
            bytenr: le64(b, 0x30),
            flags: le64(b, 0x38),
            generation: le64(b, 0x48),
            root: le64(b, 0x50),
            chunk_root: le64(b, 0x58),
            log_root: le64(b, 0x60),
            total_bytes: le64(b, 0x70),
            bytes_used: le64(b, 0x78),
            root_dir_objectid: le64(b, 0x80),
            num_devices: le64(b, 0x88),
            sectorsize,
            nodesize,
            stripesize: le32(b, 0x9c),
            sys_chunk_array_size,
            chunk_root_generation: le64(b, 0xa4),
            compat_flags: le64(b, 0xac),
            compat_ro_flags: le64(b, 0xb4),
            incompat_flags,
            csum_type,
            root_level: b[0xc6],
            chunk_root_level: b[0xc7],
            log_root_level: b[0xc8],
            dev_item: DevItem::parse(&b[0xc9..0xc9 + crate::items::DEV_ITEM_SIZE])?,
            label: label_raw[..label_len].to_vec(),
            cache_generation: le64(b, 0x22b),
            uuid_tree_generation: le64(b, 0x233),
            metadata_uuid,
            sys_chunk_array: b
                [SYS_CHUNK_ARRAY_OFF..SYS_CHUNK_ARRAY_OFF + sys_chunk_array_size as usize]
                .to_vec(),
            backups,
        };
        Ok(sb)
    }

    /// The fsid every tree block header carries (metadata_uuid if set).
    pub fn tree_fsid(&self) -> [u8; 16] {
        self.metadata_uuid
    }

    pub fn has_incompat(&self, flag: u64) -> bool {
        self.incompat_flags & flag != 0
    }

    /// Incompat flags set that this reader does not understand.
    pub fn unsupported_incompat(&self) -> u64 {
        self.incompat_flags & !INCOMPAT_SUPPORTED
    }

    /// The (key, chunk) pairs of the system chunk array.
    pub fn sys_chunks(&self) -> Result<Vec<(Key, ChunkItem)>> {
        let a = &self.sys_chunk_array;
        let mut out = Vec::new();
        let mut off = 0usize;
        while off < a.len() {
            let key = Key::parse(a, off)?;
            off += KEY_SIZE;
            if key.item_type != CHUNK_ITEM {
                return Err(invalid(
                    "sys_chunk_array",
                    format!("key {key} at offset {} is not a CHUNK_ITEM", off - KEY_SIZE),
                ));
            }
            let chunk = ChunkItem::parse(&a[off..])?;
            off += chunk.encoded_len();
            out.push((key, chunk));
        }
        Ok(out)
    }
}

impl RootBackup {
    fn parse(b: &[u8]) -> Self {
        RootBackup {
            tree_root: le64(b, 0),
            tree_root_gen: le64(b, 8),
            chunk_root: le64(b, 16),
            chunk_root_gen: le64(b, 24),
            extent_root: le64(b, 32),
            fs_root: le64(b, 48),
            csum_root: le64(b, 80),
            total_bytes: le64(b, 96),
            bytes_used: le64(b, 104),
            num_devices: le64(b, 112),
            tree_root_level: b[152],
            chunk_root_level: b[153],
        }
    }
}
