//! What `btrfs filesystem usage` and `show` are made of, beyond the space
//! per kind and profile ([`super::space`]) and the devices' items: the
//! chunks per device as btrfs-progs counts them, the kernel's global
//! block reserve, and the free space the kernel's statfs(2) reports. One
//! reader over [`ItemSource`] serves an image and a live mount's running
//! transaction alike; the figures are the kernel's formulas (fs/btrfs
//! block-rsv.c btrfs_update_global_block_rsv, super.c btrfs_statfs and
//! btrfs_calc_avail_data_space), so an image reads as the kernel would
//! show it mounted.

use super::space::SpaceInfo;
use crate::error::{Error, Result};
use crate::io::volumes::{layout, DEV_RESERVED, STRIPE_LEN};
use crate::items::ItemSource;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{ChunkItem, RootItem};
use ubtrfs_format::Key;

/// BTRFS_MAX_LEVEL: the tree height a reservation plans for.
const MAX_LEVEL: u64 = 8;
/// BTRFS_UNLINK_METADATA_UNITS: the items an unlink changes.
const UNLINK_UNITS: u64 = 6;

/// The kernel's global block reserve for a filesystem of `nodesize`
/// whose global trees (extent, checksum, free space, block group) hold
/// `used` bytes in `trees` trees: their size, but at least room to
/// insert into each of them and to unlink a file with its delayed
/// references, and at most 512 MiB. `fst`: the free space tree is on
/// (its delayed references count twice).
pub fn global_reserve_of(nodesize: u32, used: u64, trees: u64, fst: bool) -> u64 {
    let insert = |items: u64| nodesize as u64 * MAX_LEVEL * 2 * items;
    let delayed_refs = insert(UNLINK_UNITS) * if fst { 2 } else { 1 };
    // The root tree counts as one item; what it uses is counted from 0
    // at mount (the kernel keeps no ROOT_ITEM of it).
    let least = insert(1 + trees + UNLINK_UNITS) + delayed_refs;
    used.max(least).min(512 << 20)
}

/// [`global_reserve_of`] for the filesystem `src` reads: the bytes its
/// global trees' ROOT_ITEMs say they use.
pub fn global_reserve<S: ItemSource + ?Sized>(src: &S) -> Result<u64> {
    let sb = &src.fs_info().sb;
    let fst = sb.compat_ro_flags & COMPAT_RO_FREE_SPACE_TREE != 0;
    let mut ids = vec![EXTENT_TREE_OBJECTID, CSUM_TREE_OBJECTID];
    if fst {
        ids.push(FREE_SPACE_TREE_OBJECTID);
    }
    if sb.compat_ro_flags & COMPAT_RO_BLOCK_GROUP_TREE != 0 {
        ids.push(BLOCK_GROUP_TREE_OBJECTID);
    }
    let (mut used, mut trees) = (0, 0);
    for id in ids {
        let key = Key::new(id, ROOT_ITEM, u64::MAX);
        if let Some((k, d)) = src.item_le(ROOT_TREE_OBJECTID, &key)? {
            if k.objectid == id && k.item_type == ROOT_ITEM {
                let r = RootItem::parse(&d)
                    .map_err(|e| Error::format(format!("root tree key {k}"), e))?;
                used += r.bytes_used;
                trees += 1;
            }
        }
    }
    Ok(global_reserve_of(sb.nodesize, used, trees, fst))
}

/// Chunk bytes of one type and profile on one device, as btrfs-progs
/// sums them (cmds/filesystem-usage.c): each stripe of a chunk adds the
/// chunk's length to its device's entry for (type, stripe count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkUse {
    pub flags: u64,
    pub devid: u64,
    pub num_stripes: u16,
    /// The chunk lengths summed, once per stripe on the device.
    pub size: u64,
}

impl ChunkUse {
    /// Bytes the device holds of these chunks: a full copy for DUP and
    /// the RAID1 profiles, a stripe's share for the striped ones.
    pub fn on_device(&self) -> u64 {
        if self.flags & (BG_DUP | BG_RAID1 | BG_RAID1C3 | BG_RAID1C4) != 0 {
            return self.size;
        }
        let Ok(l) = layout(self.flags) else {
            return self.size;
        };
        let div = (self.num_stripes as u64).saturating_sub(l.nparity) / l.sub_stripes.max(1) as u64;
        self.size / div.max(1)
    }
}

/// The [`ChunkUse`]s of `chunks`, in progs' order: data, then metadata,
/// then system; by profile within a type.
pub fn chunk_uses<'a>(chunks: impl IntoIterator<Item = &'a ChunkItem>) -> Vec<ChunkUse> {
    let mut out: Vec<ChunkUse> = Vec::new();
    for c in chunks {
        for s in &c.stripes {
            match out.iter_mut().find(|u| {
                u.flags == c.chunk_type && u.devid == s.devid && u.num_stripes == c.num_stripes
            }) {
                Some(u) => u.size += c.length,
                None => out.push(ChunkUse {
                    flags: c.chunk_type,
                    devid: s.devid,
                    num_stripes: c.num_stripes,
                    size: c.length,
                }),
            }
        }
    }
    out.sort_by_key(|u| progs_order(u.flags));
    out
}

/// btrfs-progs' order of block group types (cmp_chunk_block_group):
/// system last, the others by type bits, profiles by their bits.
pub fn progs_order(flags: u64) -> (bool, u64, u64) {
    (
        flags & BG_SYSTEM != 0,
        flags & (BG_DATA | BG_METADATA | BG_SYSTEM),
        flags & BG_PROFILE_MASK,
    )
}

/// The profile new data chunks get: the one of the data block groups,
/// the most redundant when there are several (btrfs_reduce_alloc_profile).
fn data_profile(spaces: &[SpaceInfo]) -> u64 {
    const PRIORITY: [u64; 8] = [
        BG_RAID1C4, BG_RAID6, BG_RAID1C3, BG_RAID5, BG_RAID10, BG_RAID1, BG_DUP, BG_RAID0,
    ];
    let have = spaces
        .iter()
        .filter(|s| s.flags & BG_DATA != 0)
        .fold(0, |a, s| a | s.flags & BG_PROFILE_MASK);
    PRIORITY.into_iter().find(|p| have & p != 0).unwrap_or(0)
}

/// Copies of each byte of a block group of `flags` (the kernel's
/// btrfs_bg_type_to_factor, progs' btrfs_bg_type_to_ncopies: 1 for
/// RAID5/6 and for no profile known).
pub fn ncopies(flags: u64) -> u64 {
    layout(flags).map_or(1, |l| l.copies)
}

/// The bytes statfs(2) reports available (f_bavail times f_bsize) on the
/// kernel's mount of a filesystem with `spaces`, whose devices have
/// `free` bytes each outside chunks (total_bytes less bytes_used):
/// what the data block groups have free, and what new data chunks could
/// take of the devices (past their first MiB, in whole stripes), divided
/// by the data profile's copies; in sectors of `sectorsize`.
pub fn statfs_avail(spaces: &[SpaceInfo], free: &[u64], sectorsize: u32) -> u64 {
    let profile = data_profile(spaces);
    let Ok(l) = layout(profile) else {
        return 0;
    };
    let f = ncopies(profile);
    let data_free: u64 = spaces
        .iter()
        .filter(|s| s.flags & BG_DATA != 0)
        .map(|s| (s.total_bytes - s.used_bytes.min(s.total_bytes)) * f)
        .sum();
    let min_stripe = if l.dup { 2 } else { 1 } * STRIPE_LEN;
    let mut avail: Vec<u64> = free
        .iter()
        .map(|&b| b / STRIPE_LEN * STRIPE_LEN)
        .filter(|&b| b > DEV_RESERVED + min_stripe)
        .map(|b| b - DEV_RESERVED)
        .collect();
    avail.sort_unstable_by(|a, b| b.cmp(a));
    let mut stripes = match profile {
        BG_RAID0 => avail.len(),
        BG_RAID1 | BG_RAID1C3 | BG_RAID1C4 => l.copies as usize,
        BG_RAID10 => 4,
        _ => 1,
    };
    let mut room = 0u64;
    let mut n = avail.len();
    while n >= l.min_devs.max(1) {
        stripes = stripes.min(n);
        let i = n - 1;
        let a = avail[i];
        if a >= min_stripe {
            room += a * stripes as u64;
            for x in &mut avail[i + 1 - stripes..=i] {
                *x -= a;
            }
        }
        n -= 1;
    }
    let bytes = data_free / f + room / f;
    bytes / sectorsize as u64 * sectorsize as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_reserve_as_the_kernels() {
        // 16 KiB nodes, free space tree, three global trees nearly empty:
        // 5.50 MiB, as the kernel (6.18) showed for such an image.
        assert_eq!(global_reserve_of(16384, 3 * 16384, 3, true), 5767168);
        // Large trees: their size, up to 512 MiB.
        assert_eq!(global_reserve_of(16384, 100 << 20, 3, true), 100 << 20);
        assert_eq!(global_reserve_of(16384, 1 << 40, 3, true), 512 << 20);
    }

    #[test]
    fn statfs_avail_of_one_device() {
        // 8 MiB of data chunks unused, 897.62 MiB outside chunks: the
        // kernel's df showed 904.62 MiB (one MiB of the device is kept).
        let spaces = [SpaceInfo {
            flags: BG_DATA,
            total_bytes: 8 << 20,
            used_bytes: 0,
        }];
        let free = (1u64 << 30) - 132513792;
        assert_eq!(statfs_avail(&spaces, &[free], 4096), 948568064);
    }
}
