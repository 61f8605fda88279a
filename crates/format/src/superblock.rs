//! The superblock and the chunk items embedded in its system chunk array.
//!
//! [`Superblock::parse`] decodes every field and also keeps the raw 4096
//! bytes; [`Superblock::to_bytes`] starts from those bytes, writes every
//! field back and recomputes the checksum, so reserved and unknown bytes
//! (and anything a newer kernel put there) survive a read-modify-write.

use crate::bytes::{le16, le32, le64, slice, uuid};
use crate::checksum::CsumType;
use crate::consts::*;
use crate::error::{invalid, FormatError, Result};
use crate::items::{ChunkItem, DevItem, DEV_ITEM_SIZE};
use crate::key::{Key, KEY_SIZE};
use std::fmt;

// Field offsets (btrfs_super_block, packed).
const CSUM_OFF: usize = 0x00;
const FSID_OFF: usize = 0x20;
const CSUMMED_OFF: usize = 0x20;
const MAGIC_OFF: usize = 0x40;
const LABEL_OFF: usize = 0x12b;
const LABEL_SIZE: usize = 256;
const DEV_ITEM_OFF: usize = 0xc9;
const METADATA_UUID_OFF: usize = 0x23b;
const SYS_CHUNK_ARRAY_OFF: usize = 0x32b;
pub const SYS_CHUNK_ARRAY_MAX: usize = 2048;
const ROOT_BACKUPS_OFF: usize = 0xb2b;
const ROOT_BACKUP_SIZE: usize = 168;
pub const NUM_BACKUP_ROOTS: usize = 4;

/// One of the four root backups the kernel keeps in the superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RootBackup {
    pub tree_root: u64,
    pub tree_root_gen: u64,
    pub chunk_root: u64,
    pub chunk_root_gen: u64,
    pub extent_root: u64,
    pub extent_root_gen: u64,
    pub fs_root: u64,
    pub fs_root_gen: u64,
    pub dev_root: u64,
    pub dev_root_gen: u64,
    pub csum_root: u64,
    pub csum_root_gen: u64,
    pub total_bytes: u64,
    pub bytes_used: u64,
    pub num_devices: u64,
    pub tree_root_level: u8,
    pub chunk_root_level: u8,
    pub extent_root_level: u8,
    pub fs_root_level: u8,
    pub dev_root_level: u8,
    pub csum_root_level: u8,
}

/// The superblock's 4096 bytes as read (zeroes for a new one): the base
/// [`Superblock::to_bytes`] writes the fields onto.
#[derive(Clone, PartialEq, Eq)]
pub struct RawSuperblock(pub Box<[u8; SUPER_SIZE]>);

impl Default for RawSuperblock {
    fn default() -> Self {
        RawSuperblock(Box::new([0u8; SUPER_SIZE]))
    }
}

impl fmt::Debug for RawSuperblock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RawSuperblock({SUPER_SIZE} bytes)")
    }
}

#[derive(Debug, Clone)]
pub struct Superblock {
    /// As read; [`Superblock::to_bytes`] computes a fresh one.
    pub csum: [u8; 32],
    pub fsid: [u8; 16],
    pub bytenr: u64,
    pub flags: u64,
    pub generation: u64,
    pub root: u64,
    pub chunk_root: u64,
    pub log_root: u64,
    /// Unused by current kernels (written as 0), kept for old images.
    pub log_root_transid: u64,
    pub total_bytes: u64,
    pub bytes_used: u64,
    pub root_dir_objectid: u64,
    pub num_devices: u64,
    pub sectorsize: u32,
    pub nodesize: u32,
    /// Unused; must equal nodesize.
    pub leafsize: u32,
    pub stripesize: u32,
    /// As read; [`Superblock::to_bytes`] writes `sys_chunk_array.len()`.
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
    /// The label up to its first NUL.
    pub label: Vec<u8>,
    pub cache_generation: u64,
    pub uuid_tree_generation: u64,
    /// The fsid tree blocks carry: the stored metadata_uuid when
    /// INCOMPAT_METADATA_UUID is set, else `fsid` (the stored field is then
    /// unused and left as it was).
    pub metadata_uuid: [u8; 16],
    /// Extent tree v2 (experimental) only.
    pub nr_global_roots: u64,
    /// Extent tree v2 (experimental) only; a block group tree of the
    /// released format is a ROOT_ITEM in the root tree instead.
    pub block_group_root: u64,
    pub block_group_root_generation: u64,
    pub block_group_root_level: u8,
    pub sys_chunk_array: Vec<u8>,
    pub backups: [RootBackup; NUM_BACKUP_ROOTS],
    pub raw: RawSuperblock,
}

impl Superblock {
    /// Parses and validates a 4096-byte superblock copy: magic, checksum,
    /// and the sizes the rest of the reader relies on.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let b = slice(buf, 0, SUPER_SIZE, "superblock")?;
        if &b[MAGIC_OFF..MAGIC_OFF + 8] != SUPER_MAGIC {
            return Err(FormatError::BadMagic);
        }
        let csum_type = CsumType::from_raw(le16(b, 0xc4))?;
        csum_type.verify(&b[CSUMMED_OFF..], &b[..32])?;
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
        let fsid = uuid(b, FSID_OFF);
        let metadata_uuid = if incompat_flags & INCOMPAT_METADATA_UUID != 0 {
            uuid(b, METADATA_UUID_OFF)
        } else {
            fsid
        };
        let label_raw = &b[LABEL_OFF..LABEL_OFF + LABEL_SIZE];
        let label_len = label_raw
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(label_raw.len());
        let backups =
            std::array::from_fn(|i| RootBackup::at(b, ROOT_BACKUPS_OFF + i * ROOT_BACKUP_SIZE));
        Ok(Superblock {
            csum: b[CSUM_OFF..CSUM_OFF + 32].try_into().unwrap(),
            fsid,
            bytenr: le64(b, 0x30),
            flags: le64(b, 0x38),
            generation: le64(b, 0x48),
            root: le64(b, 0x50),
            chunk_root: le64(b, 0x58),
            log_root: le64(b, 0x60),
            log_root_transid: le64(b, 0x68),
            total_bytes: le64(b, 0x70),
            bytes_used: le64(b, 0x78),
            root_dir_objectid: le64(b, 0x80),
            num_devices: le64(b, 0x88),
            sectorsize,
            nodesize,
            leafsize: le32(b, 0x98),
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
            dev_item: DevItem::parse(&b[DEV_ITEM_OFF..DEV_ITEM_OFF + DEV_ITEM_SIZE])?,
            label: label_raw[..label_len].to_vec(),
            cache_generation: le64(b, 0x22b),
            uuid_tree_generation: le64(b, 0x233),
            metadata_uuid,
            nr_global_roots: le64(b, 0x24b),
            block_group_root: le64(b, 0x253),
            block_group_root_generation: le64(b, 0x25b),
            block_group_root_level: b[0x263],
            sys_chunk_array: b
                [SYS_CHUNK_ARRAY_OFF..SYS_CHUNK_ARRAY_OFF + sys_chunk_array_size as usize]
                .to_vec(),
            backups,
            raw: RawSuperblock(Box::new(b.try_into().unwrap())),
        })
    }

    /// The 4096 bytes of this superblock: `raw` with every field written
    /// over it and a fresh checksum of type `csum_type`. Parsing the result
    /// gives this superblock back (with `csum` updated).
    ///
    /// Bytes no field covers (reserved space, the label after its NUL, the
    /// system chunk array after its size) keep their `raw` value: the
    /// kernel itself leaves stale bytes there, and rewriting them would
    /// make a read-modify-write differ from what the kernel would write.
    pub fn to_bytes(&self) -> [u8; SUPER_SIZE] {
        let mut b = *self.raw.0;
        let mut w = Writer(&mut b);
        w.bytes(FSID_OFF, &self.fsid);
        w.u64(0x30, self.bytenr);
        w.u64(0x38, self.flags);
        w.bytes(MAGIC_OFF, SUPER_MAGIC);
        w.u64(0x48, self.generation);
        w.u64(0x50, self.root);
        w.u64(0x58, self.chunk_root);
        w.u64(0x60, self.log_root);
        w.u64(0x68, self.log_root_transid);
        w.u64(0x70, self.total_bytes);
        w.u64(0x78, self.bytes_used);
        w.u64(0x80, self.root_dir_objectid);
        w.u64(0x88, self.num_devices);
        w.u32(0x90, self.sectorsize);
        w.u32(0x94, self.nodesize);
        w.u32(0x98, self.leafsize);
        w.u32(0x9c, self.stripesize);
        w.u32(
            0xa0,
            self.sys_chunk_array.len().min(SYS_CHUNK_ARRAY_MAX) as u32,
        );
        w.u64(0xa4, self.chunk_root_generation);
        w.u64(0xac, self.compat_flags);
        w.u64(0xb4, self.compat_ro_flags);
        w.u64(0xbc, self.incompat_flags);
        w.bytes(0xc4, &self.csum_type.to_raw().to_le_bytes());
        w.bytes(
            0xc6,
            &[self.root_level, self.chunk_root_level, self.log_root_level],
        );
        w.bytes(DEV_ITEM_OFF, &self.dev_item.to_bytes());
        self.write_label(&mut w);
        w.u64(0x22b, self.cache_generation);
        w.u64(0x233, self.uuid_tree_generation);
        if self.incompat_flags & INCOMPAT_METADATA_UUID != 0 {
            w.bytes(METADATA_UUID_OFF, &self.metadata_uuid);
        }
        w.u64(0x24b, self.nr_global_roots);
        w.u64(0x253, self.block_group_root);
        w.u64(0x25b, self.block_group_root_generation);
        w.bytes(0x263, &[self.block_group_root_level]);
        let n = self.sys_chunk_array.len().min(SYS_CHUNK_ARRAY_MAX);
        w.bytes(SYS_CHUNK_ARRAY_OFF, &self.sys_chunk_array[..n]);
        for (i, bk) in self.backups.iter().enumerate() {
            bk.write(&mut w, ROOT_BACKUPS_OFF + i * ROOT_BACKUP_SIZE);
        }
        let csum = self.csum_type.compute(&b[CSUMMED_OFF..]);
        b[CSUM_OFF..CSUM_OFF + 32].copy_from_slice(&csum);
        b
    }

    /// The label and, when it is shorter than the field, its NUL.
    fn write_label(&self, w: &mut Writer) {
        let n = self.label.len().min(LABEL_SIZE);
        w.bytes(LABEL_OFF, &self.label[..n]);
        if n < LABEL_SIZE {
            w.bytes(LABEL_OFF + n, &[0]);
        }
    }

    /// The fsid every tree block header carries (metadata_uuid if set).
    pub fn tree_fsid(&self) -> [u8; 16] {
        self.metadata_uuid
    }

    /// The fsid tree blocks must carry; None while an fsid change is
    /// under way (SUPER_FLAG_CHANGING_FSID: some carry the old one).
    pub fn block_fsid(&self) -> Option<[u8; 16]> {
        (self.flags & crate::consts::SUPER_FLAG_CHANGING_FSID == 0).then_some(self.metadata_uuid)
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

    /// Replaces the system chunk array with `chunks` (key then chunk item,
    /// back to back, as the kernel packs them). Errors if they do not fit.
    pub fn set_sys_chunks(&mut self, chunks: &[(Key, ChunkItem)]) -> Result<()> {
        let mut a = Vec::new();
        for (key, chunk) in chunks {
            key.encode(&mut a);
            chunk.encode(&mut a);
        }
        if a.len() > SYS_CHUNK_ARRAY_MAX {
            return Err(invalid(
                "sys_chunk_array",
                format!("{} bytes > {SYS_CHUNK_ARRAY_MAX}", a.len()),
            ));
        }
        self.sys_chunk_array_size = a.len() as u32;
        self.sys_chunk_array = a;
        Ok(())
    }
}

/// Little-endian writes at fixed offsets of the superblock buffer.
struct Writer<'a>(&'a mut [u8; SUPER_SIZE]);

impl Writer<'_> {
    fn bytes(&mut self, off: usize, v: &[u8]) {
        self.0[off..off + v.len()].copy_from_slice(v);
    }
    fn u64(&mut self, off: usize, v: u64) {
        self.bytes(off, &v.to_le_bytes());
    }
    fn u32(&mut self, off: usize, v: u32) {
        self.bytes(off, &v.to_le_bytes());
    }
}

impl RootBackup {
    /// Reads the backup at `off` of a buffer known to hold it.
    fn at(b: &[u8], off: usize) -> Self {
        let u = |i: usize| le64(b, off + 8 * i);
        let lv = |i: usize| b[off + 152 + i];
        RootBackup {
            tree_root: u(0),
            tree_root_gen: u(1),
            chunk_root: u(2),
            chunk_root_gen: u(3),
            extent_root: u(4),
            extent_root_gen: u(5),
            fs_root: u(6),
            fs_root_gen: u(7),
            dev_root: u(8),
            dev_root_gen: u(9),
            csum_root: u(10),
            csum_root_gen: u(11),
            total_bytes: u(12),
            bytes_used: u(13),
            num_devices: u(14),
            // 4 unused u64s, then the levels, then 10 unused bytes.
            tree_root_level: lv(0),
            chunk_root_level: lv(1),
            extent_root_level: lv(2),
            fs_root_level: lv(3),
            dev_root_level: lv(4),
            csum_root_level: lv(5),
        }
    }

    fn write(&self, w: &mut Writer, off: usize) {
        let words = [
            self.tree_root,
            self.tree_root_gen,
            self.chunk_root,
            self.chunk_root_gen,
            self.extent_root,
            self.extent_root_gen,
            self.fs_root,
            self.fs_root_gen,
            self.dev_root,
            self.dev_root_gen,
            self.csum_root,
            self.csum_root_gen,
            self.total_bytes,
            self.bytes_used,
            self.num_devices,
        ];
        for (i, v) in words.into_iter().enumerate() {
            w.u64(off + 8 * i, v);
        }
        w.bytes(
            off + 152,
            &[
                self.tree_root_level,
                self.chunk_root_level,
                self.extent_root_level,
                self.fs_root_level,
                self.dev_root_level,
                self.csum_root_level,
            ],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid superblock built from zeroes through the field API only.
    fn fresh(csum_type: CsumType) -> Superblock {
        let mut raw = RawSuperblock::default();
        raw.0[MAGIC_OFF..MAGIC_OFF + 8].copy_from_slice(SUPER_MAGIC);
        raw.0[0x90..0x94].copy_from_slice(&4096u32.to_le_bytes());
        raw.0[0x94..0x98].copy_from_slice(&16384u32.to_le_bytes());
        raw.0[0xc4..0xc6].copy_from_slice(&csum_type.to_raw().to_le_bytes());
        let csum = csum_type.compute(&raw.0[CSUMMED_OFF..]);
        raw.0[..32].copy_from_slice(&csum);
        Superblock::parse(&raw.0[..]).unwrap()
    }

    #[test]
    fn every_field_round_trips() {
        for ct in [
            CsumType::Crc32c,
            CsumType::Xxhash64,
            CsumType::Sha256,
            CsumType::Blake2b,
        ] {
            let mut sb = fresh(ct);
            sb.fsid = [1; 16];
            sb.bytenr = SUPER_OFFSETS[0];
            sb.generation = 77;
            sb.log_root_transid = 5;
            sb.leafsize = 16384;
            sb.incompat_flags = INCOMPAT_METADATA_UUID | INCOMPAT_SKINNY_METADATA;
            sb.metadata_uuid = [2; 16];
            sb.label = b"hello".to_vec();
            sb.nr_global_roots = 3;
            sb.block_group_root = 1 << 20;
            sb.block_group_root_generation = 76;
            sb.block_group_root_level = 1;
            sb.dev_item.devid = 1;
            sb.dev_item.uuid = [3; 16];
            sb.backups[2] = RootBackup {
                tree_root: 1,
                tree_root_gen: 2,
                chunk_root: 3,
                chunk_root_gen: 4,
                extent_root: 5,
                extent_root_gen: 6,
                fs_root: 7,
                fs_root_gen: 8,
                dev_root: 9,
                dev_root_gen: 10,
                csum_root: 11,
                csum_root_gen: 12,
                total_bytes: 13,
                bytes_used: 14,
                num_devices: 15,
                tree_root_level: 16,
                chunk_root_level: 17,
                extent_root_level: 18,
                fs_root_level: 19,
                dev_root_level: 20,
                csum_root_level: 21,
            };
            let chunk = ChunkItem {
                length: 8 << 20,
                owner: 2,
                stripe_len: 65536,
                chunk_type: BG_SYSTEM,
                io_align: 65536,
                io_width: 65536,
                sector_size: 4096,
                num_stripes: 1,
                sub_stripes: 1,
                stripes: vec![crate::items::Stripe {
                    devid: 1,
                    offset: 1 << 20,
                    dev_uuid: [3; 16],
                }],
            };
            let key = Key::new(FIRST_CHUNK_TREE_OBJECTID, CHUNK_ITEM, 1 << 20);
            sb.set_sys_chunks(&[(key, chunk.clone())]).unwrap();
            let b = sb.to_bytes();
            let back = Superblock::parse(&b).unwrap();
            assert_eq!(back.csum, b[..32]);
            assert_eq!(back.sys_chunks().unwrap(), [(key, chunk)]);
            assert_eq!(back.backups, sb.backups);
            assert_eq!(back.label, b"hello");
            assert_eq!(back.metadata_uuid, [2; 16]);
            assert_eq!((back.nr_global_roots, back.block_group_root_level), (3, 1));
            assert_eq!(back.to_bytes(), b);
            // Nothing else changed from the zeroed base but fields.
            assert_eq!(back.log_root_transid, 5);
            assert_eq!(back.leafsize, 16384);
        }
    }

    #[test]
    fn label_of_full_length_has_no_nul() {
        let mut sb = fresh(CsumType::Crc32c);
        sb.label = vec![b'x'; 256];
        let b = sb.to_bytes();
        assert_eq!(Superblock::parse(&b).unwrap().label.len(), 256);
        sb.label = b"ab".to_vec();
        assert_eq!(Superblock::parse(&sb.to_bytes()).unwrap().label, b"ab");
    }

    #[test]
    fn sys_chunk_array_overflow_is_an_error() {
        let mut sb = fresh(CsumType::Crc32c);
        let chunk = ChunkItem {
            length: 1 << 20,
            owner: 2,
            stripe_len: 65536,
            chunk_type: BG_SYSTEM,
            io_align: 0,
            io_width: 0,
            sector_size: 4096,
            num_stripes: 1,
            sub_stripes: 0,
            stripes: vec![crate::items::Stripe {
                devid: 1,
                offset: 0,
                dev_uuid: [0; 16],
            }],
        };
        let many: Vec<_> = (0..30)
            .map(|i| (Key::new(256, CHUNK_ITEM, i << 20), chunk.clone()))
            .collect();
        assert!(sb.set_sys_chunks(&many).is_err());
        assert!(sb.set_sys_chunks(&many[..20]).is_ok());
    }
}
