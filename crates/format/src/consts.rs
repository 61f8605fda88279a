//! Numeric constants of the on-disk format: item types, well-known object
//! ids, feature flags, block group profiles.

/// Offset of the primary superblock and its mirrors on every device.
pub const SUPER_OFFSETS: [u64; 3] = [0x1_0000, 0x400_0000, 0x40_0000_0000];
pub const SUPER_SIZE: usize = 4096;
pub const SUPER_MAGIC: &[u8; 8] = b"_BHRfS_M";
pub const CSUM_SIZE_MAX: usize = 32;
/// One checksum, in the first `csum_size` bytes.
pub type Csum = [u8; CSUM_SIZE_MAX];

// Item types (key.type).
pub const INODE_ITEM: u8 = 1;
pub const INODE_REF: u8 = 12;
pub const INODE_EXTREF: u8 = 13;
pub const XATTR_ITEM: u8 = 24;
pub const VERITY_DESC_ITEM: u8 = 36;
pub const VERITY_MERKLE_ITEM: u8 = 37;
pub const ORPHAN_ITEM: u8 = 48;
pub const DIR_LOG_ITEM: u8 = 60;
pub const DIR_LOG_INDEX: u8 = 72;
pub const DIR_ITEM: u8 = 84;
pub const DIR_INDEX: u8 = 96;
pub const EXTENT_DATA: u8 = 108;
pub const EXTENT_CSUM: u8 = 128;
pub const ROOT_ITEM: u8 = 132;
pub const ROOT_BACKREF: u8 = 144;
pub const ROOT_REF: u8 = 156;
pub const EXTENT_ITEM: u8 = 168;
pub const METADATA_ITEM: u8 = 169;
pub const EXTENT_OWNER_REF: u8 = 172;
pub const TREE_BLOCK_REF: u8 = 176;
pub const EXTENT_DATA_REF: u8 = 178;
pub const SHARED_BLOCK_REF: u8 = 182;
pub const SHARED_DATA_REF: u8 = 184;
pub const BLOCK_GROUP_ITEM: u8 = 192;
pub const FREE_SPACE_INFO: u8 = 198;
pub const FREE_SPACE_EXTENT: u8 = 199;
pub const FREE_SPACE_BITMAP: u8 = 200;
pub const DEV_EXTENT: u8 = 204;
pub const DEV_ITEM: u8 = 216;
pub const CHUNK_ITEM: u8 = 228;
pub const QGROUP_STATUS: u8 = 240;
pub const QGROUP_INFO: u8 = 242;
pub const QGROUP_LIMIT: u8 = 244;
pub const QGROUP_RELATION: u8 = 246;
pub const TEMPORARY_ITEM: u8 = 248;
pub const PERSISTENT_ITEM: u8 = 249;
pub const DEV_REPLACE: u8 = 250;
pub const UUID_KEY_SUBVOL: u8 = 251;
pub const UUID_KEY_RECEIVED_SUBVOL: u8 = 252;
pub const STRING_ITEM: u8 = 253;

/// Name of an item type as btrfs-progs prints it.
pub fn item_type_name(t: u8) -> &'static str {
    match t {
        INODE_ITEM => "INODE_ITEM",
        INODE_REF => "INODE_REF",
        INODE_EXTREF => "INODE_EXTREF",
        XATTR_ITEM => "XATTR_ITEM",
        VERITY_DESC_ITEM => "VERITY_DESC_ITEM",
        VERITY_MERKLE_ITEM => "VERITY_MERKLE_ITEM",
        ORPHAN_ITEM => "ORPHAN_ITEM",
        DIR_LOG_ITEM => "DIR_LOG_ITEM",
        DIR_LOG_INDEX => "DIR_LOG_INDEX",
        DIR_ITEM => "DIR_ITEM",
        DIR_INDEX => "DIR_INDEX",
        EXTENT_DATA => "EXTENT_DATA",
        EXTENT_CSUM => "EXTENT_CSUM",
        ROOT_ITEM => "ROOT_ITEM",
        ROOT_BACKREF => "ROOT_BACKREF",
        ROOT_REF => "ROOT_REF",
        EXTENT_ITEM => "EXTENT_ITEM",
        METADATA_ITEM => "METADATA_ITEM",
        EXTENT_OWNER_REF => "EXTENT_OWNER_REF",
        TREE_BLOCK_REF => "TREE_BLOCK_REF",
        EXTENT_DATA_REF => "EXTENT_DATA_REF",
        SHARED_BLOCK_REF => "SHARED_BLOCK_REF",
        SHARED_DATA_REF => "SHARED_DATA_REF",
        BLOCK_GROUP_ITEM => "BLOCK_GROUP_ITEM",
        FREE_SPACE_INFO => "FREE_SPACE_INFO",
        FREE_SPACE_EXTENT => "FREE_SPACE_EXTENT",
        FREE_SPACE_BITMAP => "FREE_SPACE_BITMAP",
        DEV_EXTENT => "DEV_EXTENT",
        DEV_ITEM => "DEV_ITEM",
        CHUNK_ITEM => "CHUNK_ITEM",
        QGROUP_STATUS => "QGROUP_STATUS",
        QGROUP_INFO => "QGROUP_INFO",
        QGROUP_LIMIT => "QGROUP_LIMIT",
        QGROUP_RELATION => "QGROUP_RELATION",
        TEMPORARY_ITEM => "TEMPORARY_ITEM",
        PERSISTENT_ITEM => "PERSISTENT_ITEM",
        DEV_REPLACE => "DEV_REPLACE",
        UUID_KEY_SUBVOL => "UUID_KEY_SUBVOL",
        UUID_KEY_RECEIVED_SUBVOL => "UUID_KEY_RECEIVED_SUBVOL",
        STRING_ITEM => "STRING_ITEM",
        _ => "UNKNOWN",
    }
}

// Well-known object ids.
pub const ROOT_TREE_OBJECTID: u64 = 1;
pub const EXTENT_TREE_OBJECTID: u64 = 2;
pub const CHUNK_TREE_OBJECTID: u64 = 3;
pub const DEV_TREE_OBJECTID: u64 = 4;
pub const FS_TREE_OBJECTID: u64 = 5;
pub const ROOT_TREE_DIR_OBJECTID: u64 = 6;
pub const CSUM_TREE_OBJECTID: u64 = 7;
pub const QUOTA_TREE_OBJECTID: u64 = 8;
pub const UUID_TREE_OBJECTID: u64 = 9;
pub const FREE_SPACE_TREE_OBJECTID: u64 = 10;
pub const BLOCK_GROUP_TREE_OBJECTID: u64 = 11;
pub const RAID_STRIPE_TREE_OBJECTID: u64 = 12;
pub const DEV_ITEMS_OBJECTID: u64 = 1;
pub const FIRST_CHUNK_TREE_OBJECTID: u64 = 256;
pub const FIRST_FREE_OBJECTID: u64 = 256;
pub const LAST_FREE_OBJECTID: u64 = -256i64 as u64;
pub const EXTENT_CSUM_OBJECTID: u64 = -10i64 as u64;
pub const TREE_LOG_OBJECTID: u64 = -6i64 as u64;
pub const TREE_RELOC_OBJECTID: u64 = -8i64 as u64;
pub const DATA_RELOC_TREE_OBJECTID: u64 = -9i64 as u64;

/// Whether tree `id` holds inodes and files: the top subvolume, the
/// subvolumes and snapshots, and the data relocation tree.
pub fn is_fs_tree(id: u64) -> bool {
    id == FS_TREE_OBJECTID
        || id == DATA_RELOC_TREE_OBJECTID
        || (FIRST_FREE_OBJECTID..=LAST_FREE_OBJECTID).contains(&id)
}
pub const ORPHAN_OBJECTID: u64 = -5i64 as u64;
pub const FREE_SPACE_OBJECTID: u64 = -11i64 as u64;
/// The inode of the inode number cache (mount option inode_cache, removed
/// from the kernel in 5.11), kept in each subvolume tree.
pub const FREE_INO_OBJECTID: u64 = -12i64 as u64;
/// The inode number the kernel gives the empty directory standing in for a
/// subvolume that a snapshot does not contain.
pub const EMPTY_SUBVOL_DIR_OBJECTID: u64 = 2;
/// Root directory inode of every subvolume.
pub const FIRST_INODE: u64 = 256;

/// Name of a well-known tree, as btrfs-progs names it.
pub fn tree_name(id: u64) -> Option<&'static str> {
    Some(match id {
        ROOT_TREE_OBJECTID => "root",
        EXTENT_TREE_OBJECTID => "extent",
        CHUNK_TREE_OBJECTID => "chunk",
        DEV_TREE_OBJECTID => "dev",
        FS_TREE_OBJECTID => "fs",
        CSUM_TREE_OBJECTID => "csum",
        QUOTA_TREE_OBJECTID => "quota",
        UUID_TREE_OBJECTID => "uuid",
        FREE_SPACE_TREE_OBJECTID => "free-space",
        BLOCK_GROUP_TREE_OBJECTID => "block-group",
        RAID_STRIPE_TREE_OBJECTID => "raid-stripe",
        TREE_LOG_OBJECTID => "tree-log",
        DATA_RELOC_TREE_OBJECTID => "data-reloc",
        _ => return None,
    })
}

// Block group / chunk type flags.
pub const BG_DATA: u64 = 1 << 0;
pub const BG_SYSTEM: u64 = 1 << 1;
pub const BG_METADATA: u64 = 1 << 2;
pub const BG_RAID0: u64 = 1 << 3;
pub const BG_RAID1: u64 = 1 << 4;
pub const BG_DUP: u64 = 1 << 5;
pub const BG_RAID10: u64 = 1 << 6;
pub const BG_RAID5: u64 = 1 << 7;
pub const BG_RAID6: u64 = 1 << 8;
pub const BG_RAID1C3: u64 = 1 << 9;
pub const BG_RAID1C4: u64 = 1 << 10;
pub const BG_PROFILE_MASK: u64 =
    BG_RAID0 | BG_RAID1 | BG_DUP | BG_RAID10 | BG_RAID5 | BG_RAID6 | BG_RAID1C3 | BG_RAID1C4;

// Incompatible feature flags.
/// Superblock flag: btrfstune -U/-u is rewriting the fsid of every tree
/// block; the superblock's fsid is the new one, blocks carry the old or
/// the new until it is done.
pub const SUPER_FLAG_CHANGING_FSID: u64 = 1 << 35;

pub const INCOMPAT_MIXED_BACKREF: u64 = 1 << 0;
pub const INCOMPAT_DEFAULT_SUBVOL: u64 = 1 << 1;
pub const INCOMPAT_MIXED_GROUPS: u64 = 1 << 2;
pub const INCOMPAT_COMPRESS_LZO: u64 = 1 << 3;
pub const INCOMPAT_COMPRESS_ZSTD: u64 = 1 << 4;
pub const INCOMPAT_BIG_METADATA: u64 = 1 << 5;
pub const INCOMPAT_EXTENDED_IREF: u64 = 1 << 6;
pub const INCOMPAT_RAID56: u64 = 1 << 7;
pub const INCOMPAT_SKINNY_METADATA: u64 = 1 << 8;
pub const INCOMPAT_NO_HOLES: u64 = 1 << 9;
pub const INCOMPAT_METADATA_UUID: u64 = 1 << 10;
pub const INCOMPAT_RAID1C34: u64 = 1 << 11;
pub const INCOMPAT_ZONED: u64 = 1 << 12;
pub const INCOMPAT_EXTENT_TREE_V2: u64 = 1 << 13;
pub const INCOMPAT_RAID_STRIPE_TREE: u64 = 1 << 14;
pub const INCOMPAT_SIMPLE_QUOTA: u64 = 1 << 16;

/// Incompat flags this reader understands. Anything else is refused.
pub const INCOMPAT_SUPPORTED: u64 = INCOMPAT_MIXED_BACKREF
    | INCOMPAT_DEFAULT_SUBVOL
    | INCOMPAT_MIXED_GROUPS
    | INCOMPAT_COMPRESS_LZO
    | INCOMPAT_COMPRESS_ZSTD
    | INCOMPAT_BIG_METADATA
    | INCOMPAT_EXTENDED_IREF
    | INCOMPAT_RAID56
    | INCOMPAT_SKINNY_METADATA
    | INCOMPAT_NO_HOLES
    | INCOMPAT_METADATA_UUID
    | INCOMPAT_RAID1C34
    | INCOMPAT_SIMPLE_QUOTA;

pub const INCOMPAT_NAMES: &[(u64, &str)] = &[
    (INCOMPAT_MIXED_BACKREF, "mixed_backref"),
    (INCOMPAT_DEFAULT_SUBVOL, "default_subvol"),
    (INCOMPAT_MIXED_GROUPS, "mixed_groups"),
    (INCOMPAT_COMPRESS_LZO, "compress_lzo"),
    (INCOMPAT_COMPRESS_ZSTD, "compress_zstd"),
    (INCOMPAT_BIG_METADATA, "big_metadata"),
    (INCOMPAT_EXTENDED_IREF, "extended_iref"),
    (INCOMPAT_RAID56, "raid56"),
    (INCOMPAT_SKINNY_METADATA, "skinny_metadata"),
    (INCOMPAT_NO_HOLES, "no_holes"),
    (INCOMPAT_METADATA_UUID, "metadata_uuid"),
    (INCOMPAT_RAID1C34, "raid1c34"),
    (INCOMPAT_ZONED, "zoned"),
    (INCOMPAT_EXTENT_TREE_V2, "extent_tree_v2"),
    (INCOMPAT_RAID_STRIPE_TREE, "raid_stripe_tree"),
    (INCOMPAT_SIMPLE_QUOTA, "simple_quota"),
];

// Read-only compatible feature flags.
pub const COMPAT_RO_FREE_SPACE_TREE: u64 = 1 << 0;
pub const COMPAT_RO_FREE_SPACE_TREE_VALID: u64 = 1 << 1;
pub const COMPAT_RO_VERITY: u64 = 1 << 2;
pub const COMPAT_RO_BLOCK_GROUP_TREE: u64 = 1 << 3;

pub const COMPAT_RO_NAMES: &[(u64, &str)] = &[
    (COMPAT_RO_FREE_SPACE_TREE, "free_space_tree"),
    (COMPAT_RO_FREE_SPACE_TREE_VALID, "free_space_tree_valid"),
    (COMPAT_RO_VERITY, "verity"),
    (COMPAT_RO_BLOCK_GROUP_TREE, "block_group_tree"),
];

/// Names of the set bits of `flags` per `table`, unknown bits in hex.
pub fn flag_names(flags: u64, table: &[(u64, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = flags;
    for &(bit, name) in table {
        if flags & bit != 0 {
            out.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        out.push(format!("unknown(0x{rest:x})"));
    }
    out
}

// Root item flags.
pub const ROOT_SUBVOL_RDONLY: u64 = 1 << 0;

// Inode flags.
pub const INODE_NODATASUM: u64 = 1 << 0;
pub const INODE_NODATACOW: u64 = 1 << 1;
pub const INODE_READONLY: u64 = 1 << 2;
pub const INODE_NOCOMPRESS: u64 = 1 << 3;
pub const INODE_PREALLOC: u64 = 1 << 4;
pub const INODE_SYNC: u64 = 1 << 5;
pub const INODE_IMMUTABLE: u64 = 1 << 6;
pub const INODE_APPEND: u64 = 1 << 7;
pub const INODE_NODUMP: u64 = 1 << 8;
pub const INODE_NOATIME: u64 = 1 << 9;
pub const INODE_DIRSYNC: u64 = 1 << 10;
pub const INODE_COMPRESS: u64 = 1 << 11;
/// On a root item's embedded inode only (BTRFS_INODE_ROOT_ITEM_INIT):
/// without it the kernel clears the root item's flags when it loads the
/// root, and a read-only subvolume reads as writable.
pub const INODE_ROOT_ITEM_INIT: u64 = 1 << 31;

// File extent types and compression.
pub const FILE_EXTENT_INLINE: u8 = 0;
pub const FILE_EXTENT_REG: u8 = 1;
pub const FILE_EXTENT_PREALLOC: u8 = 2;
pub const COMPRESS_NONE: u8 = 0;
pub const COMPRESS_ZLIB: u8 = 1;
pub const COMPRESS_LZO: u8 = 2;
pub const COMPRESS_ZSTD: u8 = 3;

/// Largest uncompressed size of one compressed extent (the kernel's limit).
pub const MAX_UNCOMPRESSED: u64 = 128 * 1024;

// Directory entry types.
pub const FT_UNKNOWN: u8 = 0;
pub const FT_REG_FILE: u8 = 1;
pub const FT_DIR: u8 = 2;
pub const FT_CHRDEV: u8 = 3;
pub const FT_BLKDEV: u8 = 4;
pub const FT_FIFO: u8 = 5;
pub const FT_SOCK: u8 = 6;
pub const FT_SYMLINK: u8 = 7;
pub const FT_XATTR: u8 = 8;

// Tree block header flags.
pub const HEADER_FLAG_WRITTEN: u64 = 1 << 0;
pub const HEADER_FLAG_RELOC: u64 = 1 << 1;
