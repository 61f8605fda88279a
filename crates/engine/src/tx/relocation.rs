//! Relocation for shrink, balance's profile conversion and device
//! remove (the kernel's volumes.c btrfs_relocate_chunk, reached from
//! btrfs_shrink_device, btrfs_balance and btrfs_rm_device).
//!
//! The kernel relocates a block group's extents to other block groups,
//! giving each a new logical address, and then fixes every tree pointer,
//! extent item, back reference and checksum that named the old one
//! (relocation.c, with its reloc trees to keep snapshots sharing). Offline,
//! with nothing else using the image, a simpler move does what these three
//! users need: a chunk keeps its logical range and its stripes move on the
//! devices. The bytes are copied to device space no chunk has, then one
//! transaction rewrites only the CHUNK_ITEM, its DEV_EXTENTs, the devices'
//! bytes_used, the block group's profile bits and, for a system chunk, the
//! superblock's system chunk array. Nothing that names a logical address
//! changes, so sharing between snapshots and reflinks, checksums,
//! compression, inline and prealloc extents and NOCOW files stay exactly
//! as they were.
//!
//! Crash safety: the old stripes stay reserved ([`DevSpace`]'s pinned
//! extents) until the commit that names the new ones is on disk, so a
//! kill before it leaves the old chunk whole, and after it the new one.
//!
//! What this does not do is move extents between block groups: compacting
//! half-empty block groups (balance's usage filters) needs the kernel's
//! kind of relocation.

use super::volumes::{without_ranges, DevSpace};
use super::Trans;
use crate::error::{Error, Result};
use crate::io::volumes::{
    is_mirror, layout, stripe_len, ChunkMap, PhysLoc, DEV_RESERVED, STRIPE_LEN,
};
use std::collections::BTreeMap;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{profile_name, ChunkItem, Stripe};
use ubtrfs_format::Key;

/// Bytes copied per read and write.
const COPY_UNIT: usize = 4 << 20;

/// Where a relocated chunk may go.
#[derive(Debug, Clone, Default)]
pub struct RelocTarget {
    /// Profile bits (of `BG_PROFILE_MASK`) the chunk is to have; None
    /// keeps its profile.
    pub profile: Option<u64>,
    /// For each device stripes may use, the byte its stripes must end by.
    /// A device not here takes none, and its stripes all move (device
    /// remove).
    pub room: BTreeMap<u64, u64>,
}

/// A chunk's new stripes and how to fill them.
#[derive(Debug, Clone)]
pub struct ChunkMove {
    pub logical: u64,
    /// What it was planned for.
    pub target: RelocTarget,
    pub old: ChunkItem,
    pub new: ChunkItem,
    /// Device bytes of each stripe (the DEV_EXTENT length), old and new.
    pub old_stripe_len: u64,
    pub new_stripe_len: u64,
    /// Indexes into `new.stripes` of the stripes to write.
    pub fresh: Vec<usize>,
    /// Each fresh stripe is a copy of the same-index old stripe's bytes
    /// (same layout); else the chunk is written through its new mapping.
    pub by_stripe: bool,
}

impl ChunkMove {
    /// Device bytes this move writes, at most.
    pub fn bytes(&self) -> u64 {
        self.fresh.len() as u64 * self.new_stripe_len
    }
}

impl DevSpace {
    /// Holes of device `devid` below `end`, from 1 MiB-aligned starts,
    /// with the MiB around each superblock copy left out: a moved stripe
    /// carries allocated bytes wherever it lands, and there they would
    /// meet the superblock's.
    fn reloc_holes(&self, devid: u64, end: u64) -> Vec<(u64, u64)> {
        let around = SUPER_OFFSETS.iter().map(|&off| {
            (
                off / DEV_RESERVED * DEV_RESERVED,
                (off + 1).next_multiple_of(DEV_RESERVED),
            )
        });
        without_ranges(self.usable(devid, end), around)
    }

    /// Largest hole `reloc_holes` gives.
    fn reloc_largest(&self, devid: u64, end: u64) -> u64 {
        self.reloc_holes(devid, end)
            .iter()
            .map(|h| h.1)
            .max()
            .unwrap_or(0)
    }

    /// Takes `len` bytes of device `devid` below `end` for a moved stripe.
    fn reloc_take(&mut self, devid: u64, end: u64, len: u64) -> Option<u64> {
        let at = self
            .reloc_holes(devid, end)
            .into_iter()
            .find_map(|(a, l)| (len <= l).then_some(a))?;
        self.extents.insert((devid, at), len);
        Some(at)
    }
}

/// Plans the move of chunk `logical` (`old`) to `target` in `space`,
/// taking the new stripes' device space there and pinning the old ones'.
/// None when the chunk already is as the target asks.
fn plan(
    space: &mut DevSpace,
    uuids: &BTreeMap<u64, [u8; 16]>,
    logical: u64,
    old: &ChunkItem,
    target: &RelocTarget,
) -> Result<Option<ChunkMove>> {
    let old_profile = old.chunk_type & BG_PROFILE_MASK;
    let profile = target.profile.unwrap_or(old_profile) & BG_PROFILE_MASK;
    let lay = layout(profile)?;
    let old_stripe_len = stripe_len(old);
    let fits = |s: &Stripe, len: u64| {
        target
            .room
            .get(&s.devid)
            .is_some_and(|&end| s.offset + len <= end)
    };
    if profile == old_profile && old.stripes.iter().all(|s| fits(s, old_stripe_len)) {
        return Ok(None);
    }
    let name = || profile_name(profile | (old.chunk_type & (BG_DATA | BG_METADATA | BG_SYSTEM)));
    let no_room = |why: String| {
        Error::NoSpace(format!(
            "chunk at logical {logical} ({} bytes, {}): {why}",
            old.length,
            name()
        ))
    };
    let mut stripes: Vec<Option<Stripe>> = Vec::new();
    let mut fresh = Vec::new();
    let (new_stripe_len, by_stripe);
    let take = |space: &mut DevSpace, devid: u64, len: u64| -> Option<Stripe> {
        // A device without an item (a damaged image) takes nothing.
        let dev_uuid = *uuids.get(&devid)?;
        let at = space.reloc_take(devid, *target.room.get(&devid)?, len)?;
        Some(Stripe {
            devid,
            offset: at,
            dev_uuid,
        })
    };
    // Devices by their largest usable hole, most first.
    let by_room = |space: &DevSpace, skip: &[u64]| -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = target
            .room
            .iter()
            .filter(|(d, _)| !skip.contains(d))
            .map(|(&d, &end)| (space.reloc_largest(d, end), d))
            .collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        v.into_iter().map(|(r, d)| (d, r)).collect()
    };
    if profile == old_profile && !is_mirror(profile) {
        // Same striped layout: each stripe that must move is copied whole
        // to another place, on a device no other stripe of the chunk uses.
        new_stripe_len = old_stripe_len;
        by_stripe = true;
        for (i, s) in old.stripes.iter().enumerate() {
            if fits(s, old_stripe_len) {
                stripes.push(Some(*s));
                continue;
            }
            // Not on a device another stripe of the chunk has, old or new
            // (its own device may take it, below its limit).
            let mut used: Vec<u64> = old
                .stripes
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, s)| s.devid)
                .collect();
            used.extend(stripes.iter().flatten().map(|s| s.devid));
            let cand = by_room(space, &used);
            let Some(&(devid, room)) = cand.first() else {
                return Err(no_room("no other device for a stripe".into()));
            };
            if room < old_stripe_len {
                return Err(no_room(format!(
                    "no device has {old_stripe_len} contiguous free bytes for a stripe"
                )));
            }
            stripes.push(take(space, devid, old_stripe_len));
            fresh.push(i);
        }
    } else if is_mirror(profile) {
        new_stripe_len = old.length;
        // Old stripes holding the whole chunk that may stay.
        let mut keep: Vec<Stripe> = if is_mirror(old_profile) {
            old.stripes
                .iter()
                .filter(|s| fits(s, old.length))
                .copied()
                .collect()
        } else {
            Vec::new()
        };
        let copies = lay.copies as usize;
        if lay.dup {
            // Both on one device: the one keeping most, or with most room.
            let mut per: BTreeMap<u64, usize> = BTreeMap::new();
            for s in &keep {
                *per.entry(s.devid).or_default() += 1;
            }
            let dev = match per
                .iter()
                .max_by_key(|(d, n)| (**n, std::cmp::Reverse(**d)))
            {
                Some((&d, _)) => d,
                None => by_room(space, &[])
                    .first()
                    .map(|c| c.0)
                    .ok_or_else(|| no_room("no device".into()))?,
            };
            keep.retain(|s| s.devid == dev);
            keep.truncate(2);
            stripes.extend(keep.iter().map(|s| Some(*s)));
            while stripes.len() < 2 {
                let s = take(space, dev, old.length).ok_or_else(|| {
                    no_room(format!(
                        "devid {dev} has no {} contiguous free bytes for a copy",
                        old.length
                    ))
                })?;
                fresh.push(stripes.len());
                stripes.push(Some(s));
            }
        } else {
            // One copy per device.
            let mut seen = Vec::new();
            keep.retain(|s| {
                let first = !seen.contains(&s.devid);
                seen.push(s.devid);
                first
            });
            keep.truncate(copies);
            stripes.extend(keep.iter().map(|s| Some(*s)));
            while stripes.len() < copies {
                let used: Vec<u64> = stripes.iter().flatten().map(|s| s.devid).collect();
                let cand = by_room(space, &used);
                let Some(&(devid, room)) = cand.first().filter(|c| c.1 >= old.length) else {
                    let have = stripes.len() + cand.iter().filter(|c| c.1 >= old.length).count();
                    return Err(no_room(if copies == 1 {
                        format!(
                            "no device has {} contiguous free bytes where it may go",
                            old.length
                        )
                    } else {
                        format!(
                            "{copies} copies need {copies} devices with {} contiguous free bytes each, {have} have",
                            old.length
                        )
                    }));
                };
                let _ = room;
                fresh.push(stripes.len());
                stripes.push(take(space, devid, old.length));
            }
        }
        // Whole copies are copied stripe to stripe when the old chunk
        // has them; a striped chunk is read through its mapping.
        by_stripe = is_mirror(old_profile);
    } else {
        // A striped profile, new or with other devices: as many devices
        // as have room and give stripes of whole stripe units.
        by_stripe = false;
        let cand = by_room(space, &[]);
        let mut n = cand.len();
        if lay.sub_stripes == 2 {
            n -= n % 2;
        }
        let mut chosen = None;
        while n >= lay.min_devs.max(1) {
            let ds = lay.data_stripes(n as u64);
            let len = old.length / ds;
            if old.length.is_multiple_of(ds)
                && len.is_multiple_of(STRIPE_LEN)
                && cand[..n].iter().all(|c| c.1 >= len)
            {
                chosen = Some((n, len));
                break;
            }
            n -= if lay.sub_stripes == 2 { 2 } else { 1 };
        }
        let Some((n, len)) = chosen else {
            return Err(no_room(format!(
                "no set of at least {} devices takes its stripes ({} devices have room)",
                lay.min_devs,
                cand.len()
            )));
        };
        new_stripe_len = len;
        for &(devid, _) in &cand[..n] {
            fresh.push(stripes.len());
            stripes.push(take(space, devid, len));
        }
    }
    let stripes: Vec<Stripe> = stripes
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| no_room("device space taken meanwhile".into()))?;
    // The old stripes no longer used stay reserved until the commit.
    for s in &old.stripes {
        if !stripes.contains(s) {
            space.pinned.push((s.devid, s.offset));
        }
    }
    let new = ChunkItem {
        chunk_type: (old.chunk_type & !BG_PROFILE_MASK) | profile,
        num_stripes: stripes.len() as u16,
        sub_stripes: lay.sub_stripes,
        stripes,
        ..old.clone()
    };
    Ok(Some(ChunkMove {
        logical,
        target: target.clone(),
        old: old.clone(),
        new,
        old_stripe_len,
        new_stripe_len,
        fresh,
        by_stripe,
    }))
}

impl Trans {
    /// The room each device has for relocated stripes: its size in the
    /// filesystem, or less where [`Trans::limit_device`] says.
    pub fn reloc_room(&self) -> BTreeMap<u64, u64> {
        self.dev_sizes().collect()
    }

    /// Keeps new chunks and relocated stripes on device `devid` below
    /// byte `end` (None: its size again), for the rest of this writer
    /// (a shrink in progress), or off it with `Some(0)` (a removal).
    pub fn limit_device(&mut self, devid: u64, end: Option<u64>) {
        match end {
            Some(e) => self.dev_space.limits.insert(devid, e),
            None => self.dev_space.limits.remove(&devid),
        };
    }

    /// The moves `target` takes, for the chunks `pick` picks, in logical
    /// order, each planned after the ones before (as they will run, one
    /// commit each: each frees its old stripes for the next). An error
    /// when one of them has no room.
    pub fn plan_relocation(
        &self,
        mut pick: impl FnMut(u64, &ChunkItem) -> Option<RelocTarget>,
    ) -> Result<Vec<ChunkMove>> {
        // As after the next commit: what is pinned now is free then.
        let mut space = self.dev_space.clone();
        space.release_pinned();
        let uuids = self.dev_uuids();
        let mut out = Vec::new();
        for (logical, c) in self.info.chunks.iter() {
            let Some(target) = pick(logical, c) else {
                continue;
            };
            if let Some(m) = plan(&mut space, &uuids, logical, c, &target)? {
                out.push(m);
            }
            space.release_pinned();
        }
        Ok(out)
    }

    /// The moves that shrinking device `devid` to `size` bytes takes
    /// (every chunk with a stripe past it), or NoSpace naming the least
    /// size that needs only moves that fit.
    pub fn plan_shrink(&self, devid: u64, size: u64) -> Result<Vec<ChunkMove>> {
        let plan_at = |size: u64| {
            let mut room = self.reloc_room();
            room.insert(devid, size.min(room.get(&devid).copied().unwrap_or(0)));
            self.plan_relocation(|_, c| {
                let len = stripe_len(c);
                c.stripes
                    .iter()
                    .any(|s| s.devid == devid && s.offset + len > size)
                    .then(|| RelocTarget {
                        profile: None,
                        room: room.clone(),
                    })
            })
        };
        match plan_at(size) {
            Ok(m) => Ok(m),
            Err(Error::NoSpace(why)) => {
                // The least size that works: between the device's chunk
                // bytes and where its chunks end now (which needs no move).
                let used = self.dev_items.get(&devid).map_or(0, |d| d.bytes_used);
                let mut lo = (used + DEV_RESERVED).div_ceil(DEV_RESERVED);
                let mut hi = self.device_in_use(devid).div_ceil(DEV_RESERVED);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if plan_at(mid * DEV_RESERVED).is_ok() {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                Err(Error::NoSpace(format!(
                    "devid {devid}: {size} bytes do not hold its chunks ({why}); the least size \
                     that does now is {} MiB",
                    hi.max(256)
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// Runs `moves` (from a plan), each chunk in a transaction of its own
    /// that is committed before the next: a kill leaves every chunk moved
    /// or not, and the same plan made again finds what is left.
    /// `progress` is told the device bytes written so far.
    pub fn run_relocation(
        &mut self,
        moves: &[ChunkMove],
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        let mut base = 0;
        for m in moves {
            self.relocate_chunk(m.logical, &m.target, &mut |n| progress(base + n))?;
            self.commit()?;
            base += m.bytes();
            progress(base);
        }
        Ok(())
    }

    /// Whether the chunk at `logical` may be removed rather than moved:
    /// its block group holds nothing, nothing of it is pinned, it is
    /// committed, another block group of its kind remains, and free space
    /// is kept in the free-space tree (a v1 space cache keeps a cache file
    /// per group, which is not removed here).
    pub fn chunk_is_empty(&self, logical: u64) -> bool {
        let Some(g) = self.alloc.groups.get(&logical) else {
            return false;
        };
        let kind = g.flags & (BG_DATA | BG_METADATA | BG_SYSTEM);
        g.used == 0
            && !g.new
            && self.has_free_space_tree()
            && self.alloc.pinned_in(g.start, g.end()).is_empty()
            && self.alloc.groups.values().any(|o| {
                o.start != logical && o.flags & (BG_DATA | BG_METADATA | BG_SYSTEM) == kind
            })
    }

    /// Removes the chunk at `logical`, whose block group holds nothing
    /// ([`Trans::chunk_is_empty`]), as the kernel's btrfs_remove_chunk:
    /// its CHUNK_ITEM, DEV_EXTENTs, BLOCK_GROUP_ITEM and free-space tree
    /// items go, the devices' bytes_used drop. Its device space is free
    /// after the commit.
    pub fn remove_empty_chunk(&mut self, logical: u64) -> Result<()> {
        if !self.chunk_is_empty(logical) {
            return Err(Error::Invalid(format!(
                "chunk at logical {logical} is not an empty block group that can go"
            )));
        }
        let g = self.alloc.groups.remove(&logical).unwrap();
        let c = self
            .info
            .chunks
            .remove(logical)
            .ok_or_else(|| Error::NotFound(format!("no chunk at logical {logical}")))?;
        let stripe_len = stripe_len(&c);
        self.delete_item(
            CHUNK_TREE_OBJECTID,
            &Key::new(FIRST_CHUNK_TREE_OBJECTID, CHUNK_ITEM, logical),
        )?;
        for s in &c.stripes {
            self.delete_item(DEV_TREE_OBJECTID, &Key::new(s.devid, DEV_EXTENT, s.offset))?;
            self.dev_space.pinned.push((s.devid, s.offset));
            if let Some(di) = self.dev_items.get_mut(&s.devid) {
                di.bytes_used = di.bytes_used.saturating_sub(stripe_len);
            }
        }
        self.dev_items_dirty = true;
        self.delete_item(
            EXTENT_TREE_OBJECTID,
            &Key::new(logical, BLOCK_GROUP_ITEM, g.len),
        )?;
        self.delete_range(
            FREE_SPACE_TREE_OBJECTID,
            &Key::new(logical, 0, 0),
            &Key::new(logical + g.len - 1, u8::MAX, u64::MAX),
        )?;
        if c.chunk_type & BG_SYSTEM != 0 {
            let mut sys = self
                .info
                .sb
                .sys_chunks()
                .map_err(|e| Error::format("superblock sys_chunk_array", e))?;
            sys.retain(|(k, _)| k.offset != logical);
            self.info
                .sb
                .set_sys_chunks(&sys)
                .map_err(|e| Error::Invalid(format!("system chunk array: {e}")))?;
        }
        Ok(())
    }

    /// Removes every empty chunk `pick` picks ([`Trans::chunk_is_empty`],
    /// checked one after the other, so one of each kind stays); returns
    /// how many went. The caller commits.
    pub fn remove_empty_chunks(&mut self, pick: impl Fn(u64, &ChunkItem) -> bool) -> Result<usize> {
        let cands: Vec<u64> = self
            .info
            .chunks
            .iter()
            .filter(|(l, c)| pick(*l, c))
            .map(|(l, _)| l)
            .collect();
        let mut n = 0;
        for l in cands {
            if self.chunk_is_empty(l) {
                self.remove_empty_chunk(l)?;
                n += 1;
            }
        }
        Ok(n)
    }

    fn dev_uuids(&self) -> BTreeMap<u64, [u8; 16]> {
        self.dev_items.iter().map(|(&d, di)| (d, di.uuid)).collect()
    }

    /// Moves chunk `logical` as `target` asks (see the module header);
    /// `progress` is told the device bytes written so far. The caller
    /// commits; the old stripes' device space is free after that commit.
    /// False when the chunk already is as asked.
    pub fn relocate_chunk(
        &mut self,
        logical: u64,
        target: &RelocTarget,
        progress: &mut dyn FnMut(u64),
    ) -> Result<bool> {
        let (start, old) = self
            .info
            .chunks
            .lookup(logical)
            .map(|(s, c)| (s, c.clone()))
            .ok_or_else(|| Error::NotFound(format!("no chunk at logical {logical}")))?;
        if start != logical {
            return Err(Error::Invalid(format!(
                "logical {logical} is inside the chunk at {start}, not its start"
            )));
        }
        if self.pending_chunks.iter().any(|(l, _)| *l == logical) {
            return Err(Error::Invalid(format!(
                "chunk at logical {logical} was made in this transaction"
            )));
        }
        let uuids = self.dev_uuids();
        let mut space = self.dev_space.clone();
        let Some(m) = plan(&mut space, &uuids, logical, &old, target)? else {
            return Ok(false);
        };
        self.copy_chunk(&m, progress)?;
        self.dev_space = space;
        self.switch_chunk(&m)?;
        Ok(true)
    }

    /// The logical ranges of the move's chunk that hold something: all
    /// but its block group's free space (space pinned in this
    /// transaction is not free, and the committed trees still use it).
    fn held_ranges(&self, m: &ChunkMove) -> Vec<(u64, u64)> {
        let end = m.logical + m.old.length;
        let Some(g) = self
            .alloc
            .groups
            .get(&m.logical)
            .filter(|g| g.len == m.old.length)
        else {
            // No group of the chunk's length (a damaged image): all of it.
            return vec![(m.logical, m.old.length)];
        };
        let mut out = Vec::new();
        let mut at = m.logical;
        for (s, l) in g.free_ranges() {
            let s = s.min(end);
            if s > at {
                out.push((at, s - at));
            }
            at = at.max((s + l).min(end));
        }
        if at < end {
            out.push((at, end - at));
        }
        out
    }

    /// Writes the new stripes of `m`: stripe to stripe where the layout
    /// allows (only the held ranges of whole copies), else the chunk read
    /// through its old mapping and written through its new one.
    fn copy_chunk(&self, m: &ChunkMove, progress: &mut dyn FnMut(u64)) -> Result<()> {
        let mut buf = vec![0u8; COPY_UNIT];
        let mut done = 0u64;
        if m.by_stripe {
            let mirror = is_mirror(m.old.chunk_type);
            let ranges: Vec<(u64, u64)> = if mirror {
                self.held_ranges(m)
                    .into_iter()
                    .map(|(s, l)| (s - m.logical, l))
                    .collect()
            } else {
                vec![(0, m.old_stripe_len)]
            };
            for &i in &m.fresh {
                let to = m.new.stripes[i];
                // Sources: for whole copies any old stripe, the one moved
                // first; for striped layouts only the same-index stripe.
                let mut sources: Vec<Stripe> = if mirror {
                    m.old.stripes.clone()
                } else {
                    vec![m.old.stripes[i]]
                };
                if let Some(p) = sources.iter().position(|s| !m.new.stripes.contains(s)) {
                    sources.swap(0, p);
                }
                for &(off, len) in &ranges {
                    let mut o = 0;
                    while o < len {
                        let n = (len - o).min(COPY_UNIT as u64) as usize;
                        let b = &mut buf[..n];
                        self.read_any(&sources, off + o, b, m.logical + off + o)?;
                        self.write_phys_to(
                            PhysLoc {
                                devid: to.devid,
                                physical: to.offset + off + o,
                            },
                            b,
                            m.logical + off + o,
                        )?;
                        o += n as u64;
                        done += n as u64;
                        progress(done);
                    }
                }
            }
        } else {
            let mut map = ChunkMap::default();
            map.insert(m.logical, m.new.clone())?;
            let mut at = m.logical;
            let end = m.logical + m.old.length;
            while at < end {
                let n = (end - at).min(COPY_UNIT as u64) as usize;
                let b = &mut buf[..n];
                self.read_logical_any(at, b)?;
                self.write_mapped(&map, at, b, true)?;
                at += n as u64;
                done += n as u64 * m.fresh.len() as u64 / m.new.stripes.len().max(1) as u64;
                progress(done);
            }
        }
        Ok(())
    }

    /// Reads `buf` at `off` into the first of `stripes` that reads.
    fn read_any(&self, stripes: &[Stripe], off: u64, buf: &mut [u8], at: u64) -> Result<()> {
        let mut last = None;
        for s in stripes {
            let Some(d) = self.info.devices.get(&s.devid) else {
                continue;
            };
            match d.read_at(buf, s.offset + off) {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            Error::NotFound(format!("logical {at}: no device of its chunk is present"))
        }))
    }

    /// Reads `buf` at `logical` from the first copy that reads.
    pub(crate) fn read_logical_any(&self, logical: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.info.num_copies(logical)?;
        let mut last = None;
        for mirror in 0..n {
            match self.info.read_copy(logical, buf, mirror) {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::NotFound(format!("logical {logical}: no copy"))))
    }

    /// Makes `m`'s new stripes the chunk's: the chunk map, its items,
    /// the devices' bytes_used, the block group (profile bits, and the
    /// superblock copies' ranges that are no longer excluded), the
    /// superblock's system chunk array.
    fn switch_chunk(&mut self, m: &ChunkMove) -> Result<()> {
        let logical = m.logical;
        self.info.chunks.replace(logical, m.new.clone())?;
        let key = Key::new(FIRST_CHUNK_TREE_OBJECTID, CHUNK_ITEM, logical);
        self.put_item(CHUNK_TREE_OBJECTID, key, m.new.to_bytes())?;
        for s in &m.old.stripes {
            if m.new.stripes.contains(s) {
                continue;
            }
            self.delete_item(DEV_TREE_OBJECTID, &Key::new(s.devid, DEV_EXTENT, s.offset))?;
            if let Some(di) = self.dev_items.get_mut(&s.devid) {
                di.bytes_used = di.bytes_used.saturating_sub(m.old_stripe_len);
            }
        }
        for &i in &m.fresh {
            let s = m.new.stripes[i];
            self.insert_dev_extent(s.devid, s.offset, logical, m.new_stripe_len)?;
            if let Some(di) = self.dev_items.get_mut(&s.devid) {
                di.bytes_used += m.new_stripe_len;
            }
        }
        self.dev_items_dirty = true;
        let old_ex = crate::io::volumes::super_stripes(logical, &m.old);
        let new_ex = crate::io::volumes::super_stripes(logical, &m.new);
        if let Some(g) = self.alloc.groups.get_mut(&logical) {
            g.flags = m.new.chunk_type;
            g.item_dirty = true;
            for r in &new_ex {
                if !old_ex.contains(r) {
                    g.exclude(r.0, r.1);
                }
            }
            for r in disjoint(old_ex.iter().filter(|r| !new_ex.contains(r)).copied()) {
                g.add_free(r.0, r.1);
            }
        }
        if m.new.chunk_type & BG_SYSTEM != 0 {
            let mut sys = self
                .info
                .sb
                .sys_chunks()
                .map_err(|e| Error::format("superblock sys_chunk_array", e))?;
            for (k, c) in sys.iter_mut() {
                if k.offset == logical {
                    *c = m.new.clone();
                }
            }
            self.info
                .sb
                .set_sys_chunks(&sys)
                .map_err(|e| Error::NoSpace(format!("system chunk array full: {e}")))?;
        }
        // Profiles that need a feature flag set it, as the kernel does
        // when it first makes such a chunk.
        match m.new.chunk_type & BG_PROFILE_MASK {
            BG_RAID5 | BG_RAID6 => self.info.sb.incompat_flags |= INCOMPAT_RAID56,
            BG_RAID1C3 | BG_RAID1C4 => self.info.sb.incompat_flags |= INCOMPAT_RAID1C34,
            _ => {}
        }
        // New chunks of this kind follow the new profile.
        for kind in [
            crate::alloc::SpaceKind::Data,
            crate::alloc::SpaceKind::Metadata,
            crate::alloc::SpaceKind::System,
        ] {
            if m.new.chunk_type & kind.bg_flag() != 0 {
                self.set_profile(kind, m.new.chunk_type);
            }
        }
        Ok(())
    }
}

/// Ranges merged where they overlap or touch.
fn disjoint(ranges: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = ranges.collect();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, l) in v {
        match out.last_mut() {
            Some(last) if s <= last.0 + last.1 => {
                let end = (last.0 + last.1).max(s + l);
                last.1 = end - last.0;
            }
            _ => out.push((s, l)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disjoint_merges() {
        assert_eq!(
            disjoint([(10, 5), (0, 4), (12, 10), (4, 1)].into_iter()),
            vec![(0, 5), (10, 12)]
        );
    }

    #[test]
    fn reloc_holes_skip_superblock_copies() {
        let mut ds = DevSpace::default();
        ds.extents.insert((1, DEV_RESERVED), 10 << 20);
        let holes = ds.reloc_holes(1, 128 << 20);
        assert_eq!(holes, vec![(11 << 20, 53 << 20), (65 << 20, 63 << 20)]);
    }
}
