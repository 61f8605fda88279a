//! Making a filesystem (mkfs): the first chunks, the trees every btrfs
//! has (root, chunk, extent, dev, fs, csum, uuid, free-space, data
//! relocation), the top-level directory, and the first commit, all through
//! the transaction engine. [`rootdir`] fills it from a directory.
//!
//! With a fixed UUID and time the result is reproducible: every other
//! identifier is derived from the fsid, allocation is in address order,
//! and nothing depends on the clock or on randomness.

pub mod data;
pub mod probe;
pub mod rootdir;

use crate::alloc::SpaceKind;
use crate::error::{Error, Result};
use crate::inode::root::{as_v4, dir_inode, new_root_item, random_uuid, top_dir_items};
use crate::io::dev::BlockDev;
use crate::tx::Trans;
use std::path::PathBuf;
use std::sync::Arc;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{encode_uuid_item, uuid_key, DevItem, DirEntry, InodeItem, Timespec};
use ubtrfs_format::{CsumType, Key, Superblock};

/// compat_ro flags: the free-space tree, and that it is valid.
const FST_FLAGS: u64 = COMPAT_RO_FREE_SPACE_TREE | COMPAT_RO_FREE_SPACE_TREE_VALID;

/// The smallest device mkfs accepts (as mkfs.btrfs's minimum, roughly).
pub const MIN_DEVICE_SIZE: u64 = 114 << 20;

/// The smallest device mkfs accepts with mixed block groups (mkfs.btrfs
/// takes 16 MiB for single; this leaves room for DUP system and mixed
/// chunks and the metadata reserve).
pub const MIN_DEVICE_SIZE_MIXED: u64 = 32 << 20;

/// What to make.
#[derive(Debug, Clone)]
pub struct MkfsOptions {
    pub nodesize: u32,
    pub sectorsize: u32,
    pub csum: CsumType,
    pub label: String,
    /// Filesystem UUID; random when None.
    pub fsid: Option<[u8; 16]>,
    /// UUID of the first device; derived when None.
    pub dev_uuid: Option<[u8; 16]>,
    /// Profile bits (BG_DUP, BG_RAID1, ... or 0 for single).
    pub metadata_profile: u64,
    pub data_profile: u64,
    pub no_holes: bool,
    pub free_space_tree: bool,
    /// Time stamped on the top directory and the trees.
    pub time: Timespec,
    /// Small chunks, for an image shrunk to its contents afterwards.
    pub small_chunks: bool,
    /// Mixed block groups (mkfs.btrfs -M): data and metadata share
    /// DATA|METADATA block groups. Needs nodesize == sectorsize and equal
    /// data and metadata profiles.
    pub mixed: bool,
    /// Owner (uid, gid) of the top directory (mke2fs's root_owner).
    pub root_owner: (u32, u32),
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            nodesize: 16384,
            sectorsize: 4096,
            csum: CsumType::Crc32c,
            label: String::new(),
            fsid: None,
            dev_uuid: None,
            metadata_profile: BG_DUP,
            data_profile: 0,
            no_holes: true,
            free_space_tree: true,
            time: Timespec::default(),
            small_chunks: false,
            mixed: false,
            root_owner: (0, 0),
        }
    }
}

/// A UUID derived from the fsid and a purpose, so that one fixed fsid
/// fixes every identifier of the image.
pub fn derived_uuid(fsid: &[u8; 16], what: &str) -> [u8; 16] {
    let mut input = fsid.to_vec();
    input.extend_from_slice(what.as_bytes());
    let h = CsumType::Sha256.compute(&input);
    as_v4(h[..16].try_into().unwrap())
}

/// A superblock with the given geometry and nothing else set.
fn blank_superblock(o: &MkfsOptions) -> Result<Superblock> {
    let mut b = [0u8; SUPER_SIZE];
    b[0x40..0x48].copy_from_slice(SUPER_MAGIC);
    b[0x90..0x94].copy_from_slice(&o.sectorsize.to_le_bytes());
    b[0x94..0x98].copy_from_slice(&o.nodesize.to_le_bytes());
    b[0x98..0x9c].copy_from_slice(&o.nodesize.to_le_bytes());
    b[0x9c..0xa0].copy_from_slice(&o.sectorsize.to_le_bytes());
    b[0xc4..0xc6].copy_from_slice(&o.csum.to_raw().to_le_bytes());
    let sum = o.csum.compute(&b[0x20..]);
    b[..o.csum.size()].copy_from_slice(&sum[..o.csum.size()]);
    Superblock::parse(&b).map_err(|e| Error::Invalid(format!("mkfs options: {e}")))
}

/// Makes an empty filesystem on `devices` (path, device) and commits it.
/// Returns the writer, ready for the next transaction.
pub fn make(devices: Vec<(PathBuf, Arc<dyn BlockDev>)>, o: &MkfsOptions) -> Result<Trans> {
    let mut t = build(devices, o)?;
    t.commit()?;
    Ok(t)
}

/// Zeroes every superblock copy on every device before anything else is
/// written (as mkfs.btrfs does): when mkfs fails before its first commit
/// (ENOSPC in --rootdir, say) after overwriting blocks, the device must not
/// still carry an old filesystem's superblock pointing at those blocks.
fn wipe_superblocks(devices: &[(PathBuf, Arc<dyn BlockDev>)]) -> Result<()> {
    let zero = [0u8; SUPER_SIZE];
    for (p, d) in devices {
        let err = |op: &str, e: std::io::Error| Error::Io {
            path: p.display().to_string(),
            op: op.into(),
            source: e,
        };
        for off in SUPER_OFFSETS {
            if off + SUPER_SIZE as u64 <= d.size() {
                d.write_at(&zero, off)
                    .map_err(|e| err("wipe superblock", e))?;
            }
        }
        d.flush().map_err(|e| err("flush", e))?;
    }
    Ok(())
}

/// Lays out an empty filesystem on `devices` in an open transaction, not
/// yet committed (mkfs --rootdir fills it in the same transaction).
pub fn build(devices: Vec<(PathBuf, Arc<dyn BlockDev>)>, o: &MkfsOptions) -> Result<Trans> {
    if devices.is_empty() {
        return Err(Error::Invalid("no device given".into()));
    }
    check_options(&devices, o)?;
    wipe_superblocks(&devices)?;
    let fsid = match o.fsid {
        Some(u) => u,
        None => random_uuid()?,
    };
    let transid = 1;
    let mut sb = new_superblock(&devices, o, fsid)?;
    let mut devs = Vec::new();
    for (i, (path, dev)) in devices.into_iter().enumerate() {
        let devid = i as u64 + 1;
        let uuid = match (i, o.dev_uuid) {
            (0, Some(u)) => u,
            _ if o.fsid.is_some() => derived_uuid(&fsid, &format!("device {devid}")),
            _ => random_uuid()?,
        };
        let total = dev.size() / o.sectorsize as u64 * o.sectorsize as u64;
        let item = DevItem::new(devid, total, o.sectorsize, uuid, fsid);
        if devid == 1 {
            sb.dev_item = item;
        }
        devs.push((path, dev, item));
    }
    let chunk_tree_uuid = match o.fsid {
        Some(_) => derived_uuid(&fsid, "chunk tree"),
        None => random_uuid()?,
    };
    let total = sb.total_bytes;
    let mut t = Trans::create(devs, sb, chunk_tree_uuid, transid)?;
    first_chunks(&mut t, o, total)?;
    first_trees(&mut t, o, fsid, transid)?;
    Ok(t)
}

/// Refuses options that do not go together, and devices too small.
fn check_options(devices: &[(PathBuf, Arc<dyn BlockDev>)], o: &MkfsOptions) -> Result<()> {
    if o.mixed {
        if o.nodesize != o.sectorsize {
            return Err(Error::Invalid(format!(
                "illegal nodesize {} (not equal to sectorsize {} for mixed block groups)",
                o.nodesize, o.sectorsize
            )));
        }
        if o.metadata_profile != o.data_profile {
            return Err(Error::Invalid(
                "with mixed block groups data and metadata profiles must be the same".into(),
            ));
        }
    }
    let min_size = if o.mixed {
        MIN_DEVICE_SIZE_MIXED
    } else {
        MIN_DEVICE_SIZE
    };
    for (p, d) in devices {
        if d.size() < min_size {
            return Err(Error::Invalid(format!(
                "{}: device of {} bytes is too small (at least {min_size})",
                p.display(),
                d.size()
            )));
        }
    }
    Ok(())
}

/// The superblock of the new filesystem, before its devices and trees.
fn new_superblock(
    devices: &[(PathBuf, Arc<dyn BlockDev>)],
    o: &MkfsOptions,
    fsid: [u8; 16],
) -> Result<Superblock> {
    let mut sb = blank_superblock(o)?;
    sb.fsid = fsid;
    sb.metadata_uuid = fsid;
    sb.flags = 1;
    sb.root_dir_objectid = ROOT_TREE_DIR_OBJECTID;
    sb.num_devices = devices.len() as u64;
    sb.total_bytes = devices
        .iter()
        .map(|(_, d)| d.size() / o.sectorsize as u64 * o.sectorsize as u64)
        .sum();
    sb.label = o.label.as_bytes().to_vec();
    sb.incompat_flags = INCOMPAT_MIXED_BACKREF | INCOMPAT_EXTENDED_IREF | INCOMPAT_SKINNY_METADATA;
    if o.no_holes {
        sb.incompat_flags |= INCOMPAT_NO_HOLES;
    }
    if (o.metadata_profile | o.data_profile) & (BG_RAID1C3 | BG_RAID1C4) != 0 {
        sb.incompat_flags |= INCOMPAT_RAID1C34;
    }
    if (o.metadata_profile | o.data_profile) & (BG_RAID5 | BG_RAID6) != 0 {
        sb.incompat_flags |= INCOMPAT_RAID56;
    }
    if o.free_space_tree {
        sb.compat_ro_flags |= FST_FLAGS;
    }
    if o.mixed {
        sb.incompat_flags |= INCOMPAT_MIXED_GROUPS;
    }
    Ok(sb)
}

/// The first chunks, as mkfs.btrfs sizes them (more are made on demand).
fn first_chunks(t: &mut Trans, o: &MkfsOptions, total: u64) -> Result<()> {
    t.set_profile(SpaceKind::System, o.metadata_profile);
    t.set_profile(SpaceKind::Metadata, o.metadata_profile);
    t.set_profile(SpaceKind::Data, o.data_profile);
    let (meta, data) = if o.small_chunks {
        t.chunk_cap = Some(32 << 20);
        (16 << 20, 16 << 20)
    } else {
        (
            (total / 10).clamp(32 << 20, 256 << 20),
            (total / 10).clamp(64 << 20, 1 << 30),
        )
    };
    t.add_chunk(SpaceKind::System, 8 << 20)?;
    if o.mixed {
        // One DATA|METADATA chunk, sized as a data chunk (at least 16 MiB:
        // small mixed filesystems are what the mode is for).
        let mixed = if o.small_chunks {
            16 << 20
        } else {
            (total / 10).clamp(16 << 20, 1 << 30)
        };
        t.add_chunk(SpaceKind::Data, mixed)?;
    } else {
        t.add_chunk(SpaceKind::Metadata, meta)?;
        t.add_chunk(SpaceKind::Data, data)?;
    }
    Ok(())
}

/// The trees of an empty filesystem: their roots, the top directories of
/// the FS and data relocation trees, the root tree's directory naming
/// the default subvolume, and the FS tree's UUID tree entry.
fn first_trees(t: &mut Trans, o: &MkfsOptions, fsid: [u8; 16], transid: u64) -> Result<()> {
    t.init_roots()?;
    let mut trees = vec![
        (EXTENT_TREE_OBJECTID, 0),
        (DEV_TREE_OBJECTID, 0),
        (FS_TREE_OBJECTID, FIRST_INODE),
        (CSUM_TREE_OBJECTID, 0),
        (UUID_TREE_OBJECTID, 0),
        (DATA_RELOC_TREE_OBJECTID, FIRST_INODE),
    ];
    if o.free_space_tree {
        trees.push((FREE_SPACE_TREE_OBJECTID, 0));
    }
    for (id, dirid) in trees {
        t.create_tree(id, new_root_item(o.nodesize, transid, dirid))?;
    }
    let fs_uuid = match o.fsid {
        Some(_) => derived_uuid(&fsid, "fs tree"),
        None => random_uuid()?,
    };
    {
        let item = t.root_item_mut(FS_TREE_OBJECTID)?;
        item.uuid = fs_uuid;
        item.ctime = o.time;
        item.otime = o.time;
    }
    let top = dir_inode(transid, o.time, 0o40755);
    let (uid, gid) = o.root_owner;
    top_dir_items(
        t,
        FS_TREE_OBJECTID,
        FIRST_INODE,
        &InodeItem { uid, gid, ..top },
    )?;
    top_dir_items(t, DATA_RELOC_TREE_OBJECTID, FIRST_INODE, &top)?;
    // The root tree's directory, with "default" naming the default
    // subvolume (the top level).
    let mut rdir = dir_inode(transid, o.time, 0o40755);
    rdir.transid = 0;
    rdir.nbytes = o.nodesize as u64;
    top_dir_items(t, ROOT_TREE_OBJECTID, ROOT_TREE_DIR_OBJECTID, &rdir)?;
    let default = DirEntry {
        location: Key::new(FS_TREE_OBJECTID, ROOT_ITEM, u64::MAX),
        transid: 0,
        data: &[],
        name: b"default",
        file_type: FT_DIR,
    };
    t.insert_item(
        ROOT_TREE_OBJECTID,
        ubtrfs_format::items::dir_item_key(ROOT_TREE_DIR_OBJECTID, b"default"),
        default.to_bytes(),
    )?;
    let mut v = Vec::new();
    encode_uuid_item(&[FS_TREE_OBJECTID], &mut v);
    t.insert_item(UUID_TREE_OBJECTID, uuid_key(&fs_uuid, UUID_KEY_SUBVOL), v)?;
    Ok(())
}
