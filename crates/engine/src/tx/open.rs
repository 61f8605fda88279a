//! Starting a writer: on a committed image (every device opened
//! read-write, the state checked, block groups and their free space
//! loaded from the extent tree), or on blank devices for mkfs.

use super::delayed_ref::DelayedRefs;
use super::{Root, Trans};
use crate::alloc::{Allocator, BlockGroup};
use crate::disk_io::FsInfo;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::io::dev::{BlockDev, FileDev};
use crate::io::device::Device;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{BlockGroupItem, DevItem, RootItem};
use ubtrfs_format::{Key, Superblock};

/// compat_ro: block group items live in their own tree.
const COMPAT_RO_BLOCK_GROUP_TREE: u64 = 1 << 3;

/// Incompat features a writer must understand to change the image.
const WRITE_INCOMPAT: u64 = INCOMPAT_MIXED_BACKREF
    | INCOMPAT_DEFAULT_SUBVOL
    | INCOMPAT_MIXED_GROUPS
    | INCOMPAT_RAID56
    | INCOMPAT_COMPRESS_LZO
    | INCOMPAT_COMPRESS_ZSTD
    | INCOMPAT_BIG_METADATA
    | INCOMPAT_EXTENDED_IREF
    | INCOMPAT_SKINNY_METADATA
    | INCOMPAT_NO_HOLES
    | INCOMPAT_METADATA_UUID
    | INCOMPAT_RAID1C34;

fn root_of_super(id: u64, bytenr: u64, level: u8, generation: u64) -> Root {
    Root {
        id,
        bytenr,
        level,
        item: RootItem {
            generation,
            ..Default::default()
        },
        dirty: false,
        key_offset: 0,
    }
}

impl Trans {
    /// Opens the filesystem on `paths` (every device) for writing, and
    /// starts a transaction. Refuses, before anything is written, images
    /// with features this writer does not handle, missing devices, or an
    /// unreplayed log.
    pub fn open(paths: &[PathBuf], cache_bytes: u64) -> Result<Trans> {
        Self::open_with(paths, cache_bytes, &|_| {})
    }

    /// Like [`Trans::open`], `prepare` run on the filesystem's info before
    /// the transaction reads its trees (check's repair: blocks read
    /// mended, as the check read them).
    pub fn open_with(
        paths: &[PathBuf],
        cache_bytes: u64,
        prepare: &dyn Fn(&FsInfo),
    ) -> Result<Trans> {
        let mut devs = Vec::new();
        for p in paths {
            let dev = FileDev::open(p, true).map_err(|e| Error::Io {
                path: p.display().to_string(),
                op: "open for writing".into(),
                source: e,
            })?;
            devs.push(Device::from_dev(p, Arc::new(dev))?);
        }
        Self::open_devices(devs, cache_bytes, false, prepare)
    }

    /// Opens the filesystem on already opened devices (in memory, or
    /// wrapped to record or fail writes in tests) for writing.
    pub fn open_dev(devs: Vec<Arc<dyn BlockDev>>, cache_bytes: u64) -> Result<Trans> {
        Self::open_dev_with(devs, cache_bytes, &|_| {})
    }

    /// [`Trans::open_dev`] with [`Trans::open_with`]'s `prepare`.
    pub fn open_dev_with(
        devs: Vec<Arc<dyn BlockDev>>,
        cache_bytes: u64,
        prepare: &dyn Fn(&FsInfo),
    ) -> Result<Trans> {
        let devs = devs
            .into_iter()
            .enumerate()
            .map(|(i, d)| Device::from_dev(Path::new(&format!("dev{i}")), d))
            .collect::<Result<Vec<_>>>()?;
        Self::open_devices(devs, cache_bytes, false, prepare)
    }

    /// Like [`Trans::open_dev`] (each device named by its path in
    /// messages), but an unreplayed log tree is allowed: only for log
    /// replay and for dropping the log (`tree_log`). Writers that change
    /// the filesystem's trees must not use it before the log is gone.
    pub fn open_dev_with_log(
        devs: Vec<(PathBuf, Arc<dyn BlockDev>)>,
        cache_bytes: u64,
    ) -> Result<Trans> {
        let devs = devs
            .into_iter()
            .map(|(p, d)| Device::from_dev(&p, d))
            .collect::<Result<Vec<_>>>()?;
        Self::open_devices(devs, cache_bytes, true, &|_| {})
    }

    /// The superblock's log tree root (0 when there is none) and level.
    pub fn log_root(&self) -> (u64, u8) {
        (self.info.sb.log_root, self.info.sb.log_root_level)
    }

    /// Drops the superblock's pointer to the log tree: the next commit
    /// writes a superblock without one (btrfs rescue zero-log).
    pub fn clear_log_root(&mut self) {
        self.info.sb.log_root = 0;
        self.info.sb.log_root_level = 0;
    }

    fn open_devices(
        devs: Vec<Device>,
        cache_bytes: u64,
        allow_log: bool,
        prepare: &dyn Fn(&FsInfo),
    ) -> Result<Trans> {
        let name = devs
            .first()
            .map(|d| d.path.display().to_string())
            .unwrap_or_default();
        // The kernel reads the primary superblock only: a bad one is a
        // filesystem it will not mount, whatever the mirrors hold. Reading
        // tools may fall back to a mirror; a writer refuses (rewriting
        // every copy from a mirror is `btrfs rescue super-recover`'s call).
        for d in &devs {
            if let Some((off, why)) = d
                .bad_supers
                .iter()
                .find(|(off, _)| *off == ubtrfs_format::consts::SUPER_OFFSETS[0])
            {
                return Err(Error::corrupt(
                    d.path.display().to_string(),
                    format!(
                        "the primary superblock (at {off}) is bad: {why}; not writing \
                         (`btrfs rescue super-recover` restores it from a mirror copy)"
                    ),
                ));
            }
        }
        let fs = Filesystem::from_devices(devs, cache_bytes)?;
        if !fs.missing_devices.is_empty() {
            return Err(Error::Invalid(format!(
                "{name}: devices {:?} are missing; writing needs every device",
                fs.missing_devices
            )));
        }
        let sb = fs.info.sb.clone();
        let unknown = sb.incompat_flags & !WRITE_INCOMPAT;
        if unknown != 0 {
            return Err(Error::Unsupported(format!(
                "{name}: writing images with incompat flags {unknown:#x} is not supported"
            )));
        }
        if sb.compat_ro_flags & COMPAT_RO_BLOCK_GROUP_TREE != 0 {
            return Err(Error::Unsupported(format!(
                "{name}: writing images with a block group tree is not supported"
            )));
        }
        if sb.compat_ro_flags & COMPAT_RO_FREE_SPACE_TREE != 0
            && sb.compat_ro_flags & COMPAT_RO_FREE_SPACE_TREE_VALID == 0
        {
            return Err(Error::Unsupported(format!(
                "{name}: the free-space tree is marked not valid; mount it once with the kernel first"
            )));
        }
        if sb.log_root != 0 && !allow_log {
            return Err(Error::Unsupported(format!(
                "{name}: the log tree at {} has not been replayed; run `ubtrfs rescue replay-log` (or mount with the kernel) or `ubtrfs rescue zero-log` first",
                sb.log_root
            )));
        }
        let info = fs.info;
        prepare(&info);
        let mut roots = BTreeMap::new();
        roots.insert(
            ROOT_TREE_OBJECTID,
            root_of_super(ROOT_TREE_OBJECTID, sb.root, sb.root_level, sb.generation),
        );
        roots.insert(
            CHUNK_TREE_OBJECTID,
            root_of_super(
                CHUNK_TREE_OBJECTID,
                sb.chunk_root,
                sb.chunk_root_level,
                sb.chunk_root_generation,
            ),
        );
        let mut t = Trans::fresh(info, sb.generation + 1, [0; 16], roots, BTreeMap::new());
        t.load_chunk_state()?;
        t.load_block_groups()?;
        t.load_dev_space()?;
        Ok(t)
    }

    /// A transaction over `info` with nothing changed yet: no dirty
    /// blocks, delayed refs, block groups or pending chunks (the openers
    /// load or make those).
    fn fresh(
        info: FsInfo,
        transid: u64,
        chunk_tree_uuid: [u8; 16],
        roots: BTreeMap<u64, Root>,
        dev_items: BTreeMap<u64, DevItem>,
    ) -> Trans {
        Trans {
            transid,
            fsid: info.sb.tree_fsid(),
            chunk_tree_uuid,
            bufs: Default::default(),
            roots,
            alloc: Allocator::default(),
            refs: DelayedRefs::default(),
            dev_items,
            dev_space: Default::default(),
            pending_chunks: Vec::new(),
            profiles: [0; 3],
            csum_run: Default::default(),
            data_kept: 0,
            mutations: 0,
            decoded: Default::default(),
            root_items: Default::default(),
            max_inline: crate::tx::MAX_INLINE,
            dir_index_next: HashMap::new(),
            next_subvol_id: 0,
            deferred: None,
            readahead: Default::default(),
            added_devices: Vec::new(),
            chunk_cap: None,
            dev_items_dirty: false,
            info,
        }
    }

    /// Device items and the chunk tree's uuid (stamped in every block).
    fn load_chunk_state(&mut self) -> Result<()> {
        let lo = Key::new(DEV_ITEMS_OBJECTID, DEV_ITEM, 0);
        let hi = Key::new(DEV_ITEMS_OBJECTID, DEV_ITEM, u64::MAX);
        for (k, d) in self.items_in(CHUNK_TREE_OBJECTID, &lo, &hi)? {
            let di =
                DevItem::parse(&d).map_err(|e| Error::format(format!("chunk tree key {k}"), e))?;
            self.dev_items.insert(di.devid, di);
        }
        let root = self.roots[&CHUNK_TREE_OBJECTID].bytenr;
        let tb = self.info.read_tree_block(root, Default::default())?;
        self.chunk_tree_uuid = tb.header.chunk_tree_uuid;
        Ok(())
    }

    /// Block groups from their items, and their free space: everything
    /// not covered by an extent item (the kernel's caching by extent tree
    /// scan; always right, whatever the state of the free-space tree).
    fn load_block_groups(&mut self) -> Result<()> {
        let ns = self.nodesize() as u64;
        let mut groups = BTreeMap::new();
        let mut used_ranges: Vec<(u64, u64)> = Vec::new();
        self.scan(EXTENT_TREE_OBJECTID, &Key::MIN, |k, d| {
            match k.item_type {
                BLOCK_GROUP_ITEM => {
                    if let Ok(bg) = BlockGroupItem::parse(d) {
                        groups.insert(
                            k.objectid,
                            BlockGroup::committed(k.objectid, k.offset, bg.flags, bg.used),
                        );
                    }
                }
                EXTENT_ITEM => used_ranges.push((k.objectid, k.offset)),
                METADATA_ITEM => used_ranges.push((k.objectid, ns)),
                _ => {}
            }
            true
        })?;
        if let Some(start) = groups
            .keys()
            .find(|&&s| self.info.chunks.lookup(s).is_none())
        {
            return Err(Error::corrupt(
                format!("extent tree block group {start}"),
                "no chunk maps this block group",
            ));
        }
        // Free = the complement of the used ranges in each group.
        let mut cursor: BTreeMap<u64, u64> = groups.keys().map(|&s| (s, s)).collect();
        used_ranges.sort_unstable();
        for (s, l) in used_ranges {
            let Some((&gs, g)) = groups.range_mut(..=s).next_back() else {
                continue;
            };
            if s >= g.end() {
                continue;
            }
            let c = cursor.get_mut(&gs).unwrap();
            if s > *c {
                g.add_free(*c, s - *c);
            }
            *c = (*c).max(s + l);
        }
        for (gs, g) in groups.iter_mut() {
            let c = cursor[gs];
            if c < g.end() {
                g.add_free(c, g.end() - c);
            }
            if let Some((cs, chunk)) = self.info.chunks.lookup(*gs) {
                for (s, l) in crate::io::volumes::super_stripes(cs, chunk) {
                    g.exclude(s, l);
                }
            }
            g.fst_dirty = false;
        }
        self.alloc.groups = groups;
        Ok(())
    }

    /// Starts a writer on blank devices (mkfs): `sb` describes the new
    /// filesystem (root pointers, sizes and the system chunk array are
    /// filled in as it is built and committed). There are no chunks yet:
    /// add them with [`Trans::add_chunk`], then [`Trans::init_roots`].
    pub fn create(
        devices: Vec<(PathBuf, Arc<dyn BlockDev>, DevItem)>,
        sb: Superblock,
        chunk_tree_uuid: [u8; 16],
        transid: u64,
    ) -> Result<Trans> {
        let mut devs = BTreeMap::new();
        let mut dev_items = BTreeMap::new();
        for (path, dev, item) in devices {
            let mut dsb = sb.clone();
            dsb.dev_item = item;
            dev_items.insert(item.devid, item);
            devs.insert(item.devid, Device::blank(&path, dev, dsb));
        }
        let info = FsInfo::new(sb, devs, 64 << 20);
        Ok(Trans::fresh(
            info,
            transid,
            chunk_tree_uuid,
            BTreeMap::new(),
            dev_items,
        ))
    }

    /// Makes the root tree and the chunk tree, empty (mkfs, after the
    /// first chunks).
    pub fn init_roots(&mut self) -> Result<()> {
        for id in [ROOT_TREE_OBJECTID, CHUNK_TREE_OBJECTID] {
            let bytenr = self.alloc_tree_block(id, 0, None)?;
            self.roots
                .insert(id, root_of_super(id, bytenr, 0, self.transid));
        }
        Ok(())
    }

    /// The device items as this transaction has them.
    pub fn dev_items(&self) -> &BTreeMap<u64, DevItem> {
        &self.dev_items
    }
}

/// Opens one image file for writing (for tools that take one path).
pub fn open_image(path: &Path) -> Result<Trans> {
    Trans::open(&[path.to_path_buf()], 64 << 20)
}
