//! New chunks (the kernel's volumes.c, btrfs_create_chunk): device space
//! for the stripes of a profile, a logical range after the last chunk, a
//! new block group. The chunk is usable at once; its items (CHUNK_ITEM,
//! DEV_EXTENTs, the devices' bytes_used, the superblock's system chunk
//! array) are written at commit, as the kernel does in its second phase,
//! so that a chunk made while a tree is being changed never changes that
//! tree under the change.

use super::Trans;
use crate::alloc::{BlockGroup, SpaceKind};
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{ChunkItem, DevExtent, Stripe};
use ubtrfs_format::Key;

use crate::io::volumes::layout;
pub use crate::io::volumes::{DEV_RESERVED, STRIPE_LEN};

/// Device space already given to chunks: (devid, physical) -> length.
#[derive(Debug, Default, Clone)]
pub struct DevSpace {
    pub extents: BTreeMap<(u64, u64), u64>,
    /// Stripes a relocation moved away from, by (devid, physical): the
    /// committed chunk still has them until the next commit.
    pub(crate) pinned: Vec<(u64, u64)>,
    /// Where new chunks must end on a device, below its size (a shrink
    /// or removal in progress: [`Trans::limit_device`]).
    pub(crate) limits: BTreeMap<u64, u64>,
}

impl DevSpace {
    /// Frees the pinned stripes' space (their chunk's new stripes are
    /// committed).
    pub(crate) fn release_pinned(&mut self) {
        for k in std::mem::take(&mut self.pinned) {
            self.extents.remove(&k);
        }
    }

    /// Holes on device `devid` of `size` bytes, in address order.
    fn holes(&self, devid: u64, size: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = DEV_RESERVED;
        for (&(_, start), &len) in self.extents.range((devid, 0)..=(devid, u64::MAX)) {
            // Holes end at `size` (a device limited below where its
            // chunks lie: a shrink in progress).
            if start.min(size) > at {
                out.push((at, start.min(size) - at));
            }
            at = at.max(start + len);
        }
        if size > at {
            out.push((at, size - at));
        }
        out
    }

    /// Holes of a device as stripes can use them: (start, length) from
    /// each hole's first 1 MiB-aligned byte, as the kernel's allocator
    /// aligns stripes.
    pub(crate) fn usable(&self, devid: u64, size: u64) -> impl Iterator<Item = (u64, u64)> {
        self.holes(devid, size).into_iter().map(|(s, l)| {
            let a = s.next_multiple_of(DEV_RESERVED);
            (a, (s + l).saturating_sub(a))
        })
    }

    /// Largest usable hole of a device.
    fn largest(&self, devid: u64, size: u64) -> u64 {
        self.usable(devid, size).map(|(_, l)| l).max().unwrap_or(0)
    }

    /// Unallocated bytes of a device that stripes can use.
    fn unallocated(&self, devid: u64, size: u64) -> u64 {
        self.usable(devid, size).map(|(_, l)| l).sum()
    }

    /// First usable hole of `len` bytes.
    fn find(&self, devid: u64, size: u64, len: u64) -> Option<u64> {
        self.usable(devid, size)
            .find_map(|(a, l)| (len <= l).then_some(a))
    }
}

/// `(start, length)` ranges less what lies in each `[a, b)` of `cut`
/// (superblock copies, or the space around them).
pub(crate) fn without_ranges(
    ranges: impl IntoIterator<Item = (u64, u64)>,
    cut: impl Iterator<Item = (u64, u64)> + Clone,
) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for (s, l) in ranges {
        let mut pieces = vec![(s, s + l)];
        for (a, b) in cut.clone() {
            pieces = pieces
                .into_iter()
                .flat_map(|(x, y)| {
                    if b <= x || a >= y {
                        vec![(x, y)]
                    } else {
                        [(x, a.max(x)), (b.min(y), y)]
                            .into_iter()
                            .filter(|(p, q)| p < q)
                            .collect()
                    }
                })
                .collect();
        }
        out.extend(pieces.into_iter().map(|(x, y)| (x, y - x)));
    }
    out
}

impl Trans {
    /// Inserts the DEV_EXTENT of a stripe of the chunk at `chunk_offset`:
    /// `length` bytes of device `devid` from `offset`.
    pub(crate) fn insert_dev_extent(
        &mut self,
        devid: u64,
        offset: u64,
        chunk_offset: u64,
        length: u64,
    ) -> Result<()> {
        let de = DevExtent {
            chunk_tree: CHUNK_TREE_OBJECTID,
            chunk_objectid: FIRST_CHUNK_TREE_OBJECTID,
            chunk_offset,
            length,
            chunk_tree_uuid: self.chunk_tree_uuid,
        };
        self.insert_item(
            DEV_TREE_OBJECTID,
            Key::new(devid, DEV_EXTENT, offset),
            de.to_bytes(),
        )
    }

    /// About how many bytes of file data can still be given extents, as
    /// the kernel's btrfs_statfs counts f_bavail: free space in data block
    /// groups and the unallocated device space new data chunks can take
    /// (divided by the data profile's copies); none once metadata can
    /// neither grow nor hold more than a few MiB. Data chunks may take
    /// all unallocated space ([`Trans::alloc_data`] keeps none back), so
    /// the figure is the same before a file fills the filesystem and
    /// after it is removed (fstests generic/015). With mixed block
    /// groups, the space both kinds share less the metadata reserve that
    /// data allocations leave alone.
    pub fn data_space_estimate(&self) -> u64 {
        if self.mixed_groups() {
            return self.mixed_room().saturating_sub(self.mixed_meta_reserve());
        }
        let (mut data_free, mut meta_free) = (0u64, 0u64);
        for g in self.alloc.groups.values() {
            if g.flags & BG_DATA != 0 {
                data_free += g.free_bytes();
            } else if g.flags & BG_METADATA != 0 {
                meta_free += g.free_bytes();
            }
        }
        let unalloc = self.unallocated();
        let (mr, ml) = self.raw_per_logical(SpaceKind::Metadata);
        let meta_can_grow = unalloc >= DEV_RESERVED * mr.div_ceil(ml);
        if !meta_can_grow && meta_free < 4 << 20 {
            return 0;
        }
        let (dr, dl) = self.raw_per_logical(SpaceKind::Data);
        data_free + unalloc / dr * dl
    }

    /// Makes the data block groups hold `bytes` of free space, adding
    /// data chunks now where they do not, as the kernel's data reservation
    /// allocates a data chunk at write(2) time
    /// (btrfs_alloc_data_chunk_ondemand): the unallocated space that dirty
    /// data was counted against ([`Trans::data_space_estimate`]) becomes
    /// data's before a metadata chunk can take it, which would leave the
    /// next writeback, and the commit after it, no room. NoSpace when the
    /// devices have no room for another chunk. (Mixed block groups share
    /// their space and are left alone.)
    pub fn hold_data_space(&mut self, bytes: u64) -> Result<()> {
        if self.mixed_groups() {
            return Ok(());
        }
        while self.alloc.free_bytes_in(|g| g.flags & BG_DATA != 0) < bytes {
            self.grow(SpaceKind::Data)?;
        }
        Ok(())
    }

    /// Logical bytes of metadata that can still be given tree blocks: free
    /// in metadata block groups (pinned space is not free until a
    /// commit), and what new metadata chunks can take of the unallocated
    /// space; on a mixed filesystem, the room data and metadata share.
    pub fn metadata_room(&self) -> u64 {
        if self.mixed_groups() {
            return self.mixed_room();
        }
        let free = self
            .alloc
            .free_bytes_in(|g| g.flags & BG_METADATA != 0 && g.flags & BG_DATA == 0);
        let (raw, logical) = self.raw_per_logical(SpaceKind::Metadata);
        free + self.unallocated() / raw * logical
    }

    /// Device bytes per logical byte of `kind`'s new chunks, as a fraction
    /// (raw, logical): RAID5/6 over the devices there are.
    fn raw_per_logical(&self, kind: SpaceKind) -> (u64, u64) {
        let ndevs = self.info.devices.len() as u64;
        layout(self.profiles[kind as usize]).map_or((2, 1), |l| {
            let mut n = if l.devs == 0 { ndevs } else { l.devs as u64 };
            if l.sub_stripes == 2 {
                n -= n % 2;
            }
            let n = n.max(l.min_devs as u64) * if l.dup { 2 } else { 1 };
            (n, l.data_stripes(n))
        })
    }

    /// Whether the filesystem has mixed block groups (INCOMPAT_MIXED_GROUPS):
    /// data and metadata share DATA|METADATA block groups, and new chunks
    /// for either are such groups.
    pub fn mixed_groups(&self) -> bool {
        self.info.sb.incompat_flags & INCOMPAT_MIXED_GROUPS != 0
    }

    /// Device `devid`'s space no chunk has (of its `size` bytes), past
    /// the first MiB, in address order.
    pub(crate) fn dev_space_holes(&self, devid: u64, size: u64) -> Vec<(u64, u64)> {
        self.dev_space.holes(devid, size)
    }

    /// Unallocated device space, in bytes of devices (holes from their
    /// first 1 MiB-aligned byte, where stripes can start).
    fn unallocated(&self) -> u64 {
        self.dev_sizes()
            .map(|(devid, size)| self.dev_space.unallocated(devid, size))
            .sum()
    }

    /// Each device's id and the bytes of it the filesystem may use: its
    /// DEV_ITEM's total_bytes (mkfs -b, or a shrink, makes that less
    /// than the device), as the kernel allocates within
    /// device->total_bytes.
    pub(crate) fn dev_sizes(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.info.devices.values().map(|d| {
            let size = self
                .dev_items
                .get(&d.devid)
                .map_or(d.size, |di| di.total_bytes.min(d.size));
            let limit = self.dev_space.limits.get(&d.devid).copied();
            (d.devid, limit.map_or(size, |l| l.min(size)))
        })
    }

    /// Logical bytes new mixed chunks can still take: the unallocated
    /// device space by the profile's device bytes per logical byte.
    fn mixed_unallocated(&self) -> u64 {
        let (raw, logical) = self.raw_per_logical(SpaceKind::Data);
        self.unallocated() / raw * logical
    }

    /// Space data and metadata of a mixed filesystem share: free in the
    /// mixed block groups, and what new chunks can take.
    fn mixed_room(&self) -> u64 {
        let free = self.alloc.free_bytes_in(|g| g.flags & BG_DATA != 0);
        free + self.mixed_unallocated()
    }

    /// Bytes of a mixed filesystem that file data never takes: room for
    /// the tree blocks of the commits to come (the kernel reserves
    /// metadata space before it writes data): 1/32 of the filesystem's
    /// logical capacity, at least 4 MiB and at most 64 MiB.
    pub fn mixed_meta_reserve(&self) -> u64 {
        let (raw, logical) = self.raw_per_logical(SpaceKind::Data);
        let total: u64 = self.dev_sizes().map(|(_, size)| size).sum();
        (total / raw * logical / 32).clamp(4 << 20, 64 << 20)
    }

    /// Whether `len` bytes of file data fit a mixed filesystem with the
    /// metadata reserve left over. Cheap while unallocated space alone
    /// holds both.
    pub(crate) fn mixed_data_fits(&self, len: u64) -> bool {
        let need = len + self.mixed_meta_reserve();
        self.mixed_unallocated() >= need || self.mixed_room() >= need
    }

    /// Profile bits for new chunks of `kind`.
    pub fn set_profile(&mut self, kind: SpaceKind, profile: u64) {
        self.profiles[kind as usize] = profile & BG_PROFILE_MASK;
    }

    /// Adds a chunk of `kind` with about `size` bytes of logical space
    /// (less when the devices have less room). Returns its logical start.
    pub fn add_chunk(&mut self, kind: SpaceKind, size: u64) -> Result<u64> {
        let profile = self.profiles[kind as usize];
        let lay = layout(profile)?;
        let sizes: Vec<(u64, u64)> = self.dev_sizes().collect();
        // Devices by free room, most first (the kernel sorts likewise).
        let mut cands: Vec<(u64, u64, u64)> = sizes
            .iter()
            .map(|&(id, sz)| (self.dev_space.largest(id, sz), id, sz))
            .filter(|&(room, _, _)| room >= DEV_RESERVED)
            .collect();
        cands.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut ndevs = if lay.devs == 0 { cands.len() } else { lay.devs };
        if lay.sub_stripes == 2 {
            ndevs -= ndevs % 2;
        }
        if ndevs < lay.min_devs || cands.len() < ndevs {
            return Err(Error::NoSpace(format!(
                "no device room for a new {kind:?} chunk ({} needs {} devices with free space, {} have)",
                ubtrfs_format::items::profile_name(profile | self.chunk_type(kind)),
                lay.min_devs.max(ndevs),
                cands.len()
            )));
        }
        let cands = &cands[..ndevs];
        let per_dev_stripes: u64 = if lay.dup { 2 } else { 1 };
        let num_stripes = ndevs as u64 * per_dev_stripes;
        let data_stripes = lay.data_stripes(num_stripes);
        // Stripe size: what the logical size asks, bounded by the room.
        let room = cands.iter().map(|c| c.0).min().unwrap() / per_dev_stripes;
        // Stripes are whole MiBs, so that two on one device (DUP) and the
        // next chunk's pack against each other at aligned starts.
        let want = size.div_ceil(data_stripes).next_multiple_of(DEV_RESERVED);
        let stripe_size = want.min(room / DEV_RESERVED * DEV_RESERVED);
        if stripe_size < DEV_RESERVED {
            return Err(Error::NoSpace(format!(
                "no device room for a new {kind:?} chunk"
            )));
        }
        let mut stripes = Vec::new();
        for &(_, devid, dsz) in cands {
            for _ in 0..per_dev_stripes {
                let at = self
                    .dev_space
                    .find(devid, dsz, stripe_size)
                    .ok_or_else(|| {
                        Error::NoSpace(format!("devid {devid}: no hole of {stripe_size} bytes"))
                    })?;
                self.dev_space.extents.insert((devid, at), stripe_size);
                let uuid = self.dev_items[&devid].uuid;
                stripes.push(Stripe {
                    devid,
                    offset: at,
                    dev_uuid: uuid,
                });
                self.dev_items.get_mut(&devid).unwrap().bytes_used += stripe_size;
            }
        }
        let length = stripe_size * data_stripes;
        let logical = self
            .alloc
            .groups_end()
            .max(DEV_RESERVED)
            .next_multiple_of(DEV_RESERVED);
        let flags = self.chunk_type(kind) | profile;
        let chunk = ChunkItem {
            length,
            owner: EXTENT_TREE_OBJECTID,
            stripe_len: STRIPE_LEN,
            chunk_type: flags,
            io_align: STRIPE_LEN as u32,
            io_width: STRIPE_LEN as u32,
            sector_size: self.sectorsize(),
            num_stripes: stripes.len() as u16,
            sub_stripes: lay.sub_stripes,
            stripes,
        };
        self.info.chunks.insert(logical, chunk.clone())?;
        let mut bg = BlockGroup::new(logical, length, flags);
        for (s, l) in crate::io::volumes::super_stripes(logical, &chunk) {
            bg.exclude(s, l);
        }
        self.alloc.groups.insert(logical, bg);
        self.pending_chunks.push((logical, chunk));
        Ok(logical)
    }

    /// Type bits of a new chunk for `kind`: DATA|METADATA for data and
    /// metadata with mixed block groups.
    fn chunk_type(&self, kind: SpaceKind) -> u64 {
        match kind {
            SpaceKind::Data | SpaceKind::Metadata if self.mixed_groups() => BG_DATA | BG_METADATA,
            _ => kind.bg_flag(),
        }
    }

    /// Logical size of the chunks [`Trans::grow`] makes for `kind` (when
    /// the devices have room for them).
    pub fn new_chunk_size(&self, kind: SpaceKind) -> u64 {
        let total: u64 = self.dev_sizes().map(|(_, size)| size).sum();
        // A mixed chunk is sized as a data chunk (the kernel's
        // calc_chunk_size: the DATA bit decides).
        let kind_size = match kind {
            SpaceKind::Metadata if self.mixed_groups() => SpaceKind::Data,
            k => k,
        };
        match kind_size {
            SpaceKind::Data => (1 << 30).min(total / 10),
            SpaceKind::Metadata => (256 << 20).min(total / 10),
            SpaceKind::System => (32 << 20).min(total / 10),
        }
        .max(16 << 20)
        .min(self.chunk_cap.unwrap_or(u64::MAX))
    }

    /// Makes room for `kind` when its block groups are full.
    pub(crate) fn grow(&mut self, kind: SpaceKind) -> Result<()> {
        let size = self.new_chunk_size(kind);
        self.add_chunk(kind, size).map(|_| ())
    }

    /// Writes the items of chunks made in this transaction; returns
    /// whether there were any.
    pub(crate) fn write_pending_chunks(&mut self) -> Result<bool> {
        let pending = std::mem::take(&mut self.pending_chunks);
        if pending.is_empty() && !self.dev_items_dirty {
            return Ok(false);
        }
        self.dev_items_dirty = false;
        let mut sys_changed = false;
        for (logical, chunk) in &pending {
            let key = Key::new(FIRST_CHUNK_TREE_OBJECTID, CHUNK_ITEM, *logical);
            self.insert_item(CHUNK_TREE_OBJECTID, key, chunk.to_bytes())?;
            for s in &chunk.stripes {
                let length = self.dev_space.extents[&(s.devid, s.offset)];
                self.insert_dev_extent(s.devid, s.offset, *logical, length)?;
            }
            sys_changed |= chunk.chunk_type & BG_SYSTEM != 0;
        }
        for di in self.dev_items.values().cloned().collect::<Vec<_>>() {
            self.put_item(
                CHUNK_TREE_OBJECTID,
                Key::new(DEV_ITEMS_OBJECTID, DEV_ITEM, di.devid),
                di.to_bytes(),
            )?;
        }
        if sys_changed {
            let mut sys = self
                .info
                .sb
                .sys_chunks()
                .map_err(|e| Error::format("superblock sys_chunk_array", e))?;
            for (logical, chunk) in pending
                .iter()
                .filter(|(_, c)| c.chunk_type & BG_SYSTEM != 0)
            {
                sys.push((
                    Key::new(FIRST_CHUNK_TREE_OBJECTID, CHUNK_ITEM, *logical),
                    chunk.clone(),
                ));
            }
            sys.sort_by_key(|(k, _)| *k);
            self.info
                .sb
                .set_sys_chunks(&sys)
                .map_err(|e| Error::NoSpace(format!("system chunk array full: {e}")))?;
        }
        Ok(true)
    }

    /// Shrinks device `devid` to the end of its last chunk (mkfs
    /// --shrink); returns the new size. Written at the next commit.
    pub fn shrink_device(&mut self, devid: u64) -> Result<u64> {
        let end = self.device_in_use(devid);
        let di = self
            .dev_items
            .get_mut(&devid)
            .ok_or_else(|| Error::NotFound(format!("devid {devid}")))?;
        let old = di.total_bytes;
        if end < old {
            di.total_bytes = end;
            self.info.sb.total_bytes -= old - end;
            self.dev_items_dirty = true;
        }
        Ok(end.min(old))
    }

    /// The end of the last device extent on device `devid` (the first
    /// MiB when it has none): the least size it can have without moving
    /// a chunk.
    pub fn device_in_use(&self, devid: u64) -> u64 {
        self.dev_space
            .extents
            .range((devid, 0)..=(devid, u64::MAX))
            .map(|(&(_, s), &l)| s + l)
            .max()
            .unwrap_or(DEV_RESERVED)
    }

    /// Resizes device `devid` to `size` bytes (rounded down to a sector),
    /// as the kernel's btrfs_ioctl_resize: its item and the superblock's
    /// total, written at the next commit. Refused: a size under 256 MiB
    /// (the kernel's least), past the end of the device, or below its
    /// last chunk (those move first: [`Trans::plan_shrink`]). Returns the
    /// old size.
    pub fn resize_device(&mut self, devid: u64, size: u64) -> Result<u64> {
        let ss = self.info.sectorsize as u64;
        let size = size / ss * ss;
        self.check_device_size(devid, size)?;
        let in_use = self.device_in_use(devid);
        let di = self
            .dev_items
            .get_mut(&devid)
            .ok_or_else(|| Error::NotFound(format!("devid {devid}: no such device")))?;
        let old = di.total_bytes;
        if size < in_use {
            return Err(Error::NoSpace(format!(
                "devid {devid}: chunks lie up to byte {in_use}; they move first \
                 (relocation): without moves the least size is {} MiB",
                in_use.div_ceil(1 << 20).max(256)
            )));
        }
        if size != old {
            di.total_bytes = size;
            self.info.sb.total_bytes = self.info.sb.total_bytes - old + size;
            self.dev_items_dirty = true;
        }
        Ok(old)
    }

    /// Whether device `devid` may have `size` bytes: at least 256 MiB
    /// (the kernel's least) and no more than the device has.
    pub fn check_device_size(&self, devid: u64, size: u64) -> Result<()> {
        let dev_size = self
            .info
            .devices
            .get(&devid)
            .map(|d| d.size)
            .ok_or_else(|| Error::NotFound(format!("devid {devid}: no such device")))?;
        if !self.dev_items.contains_key(&devid) {
            return Err(Error::NotFound(format!("devid {devid}: no such device")));
        }
        if size < 256 << 20 {
            return Err(Error::Invalid(format!(
                "devid {devid}: {size} bytes is below the least size of a device (256 MiB)"
            )));
        }
        if size > dev_size {
            return Err(Error::NoSpace(format!(
                "devid {devid}: {size} bytes is past the end of the device ({dev_size} bytes)"
            )));
        }
        Ok(())
    }

    /// Device `devid`'s item, to be changed as it is (`check --repair`
    /// setting its bytes_used from its device extents, or an unaligned
    /// total_bytes rounded down, without resize's limits); marked to be
    /// written at commit.
    pub fn dev_item_mut(&mut self, devid: u64) -> Result<&mut ubtrfs_format::items::DevItem> {
        let di = self
            .dev_items
            .get_mut(&devid)
            .ok_or_else(|| Error::NotFound(format!("devid {devid}: no such device")))?;
        self.dev_items_dirty = true;
        Ok(di)
    }

    /// The superblock's total_bytes made the device items' sum.
    pub fn recount_total_bytes(&mut self) {
        self.info.sb.total_bytes = self.dev_items.values().map(|d| d.total_bytes).sum();
    }

    /// Device extents from the dev tree (opening a committed image).
    pub(crate) fn load_dev_space(&mut self) -> Result<()> {
        let mut ds = DevSpace {
            limits: std::mem::take(&mut self.dev_space.limits),
            ..Default::default()
        };
        self.scan(DEV_TREE_OBJECTID, &Key::MIN, |k, d| {
            if k.item_type == DEV_EXTENT {
                if let Ok(de) = DevExtent::parse(d) {
                    ds.extents.insert((k.objectid, k.offset), de.length);
                }
            }
            true
        })?;
        // A chunk stripe without its DEV_EXTENT (a damaged image) is not
        // free space either.
        for (_, c) in self.info.chunks.iter() {
            let len = crate::io::volumes::stripe_len(c);
            for s in &c.stripes {
                let overlaps = ds
                    .extents
                    .range((s.devid, 0)..(s.devid, s.offset.saturating_add(len)))
                    .any(|(&(_, o), &l)| o.saturating_add(l) > s.offset);
                if !overlaps {
                    ds.extents.insert((s.devid, s.offset), len);
                }
            }
        }
        self.dev_space = ds;
        // New chunks follow the profiles already in use.
        for g in self.alloc.groups.values() {
            for kind in [SpaceKind::Data, SpaceKind::Metadata, SpaceKind::System] {
                if g.flags & kind.bg_flag() != 0 {
                    self.profiles[kind as usize] = g.flags & BG_PROFILE_MASK;
                }
            }
        }
        Ok(())
    }
}
