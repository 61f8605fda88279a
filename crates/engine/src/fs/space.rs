//! Space by kind and profile (BTRFS_IOC_SPACE_INFO, `filesystem df`):
//! each block group's length and bytes used, summed per (type, profile),
//! in the kernel's order (data, system, metadata, mixed). The block groups
//! come from the chunk tree and their BLOCK_GROUP_ITEMs (an image, a
//! committed tree) or from the allocator (a live mount's figures).

use crate::error::{Error, Result};
use crate::items::ItemSource;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::BlockGroupItem;
use ubtrfs_format::Key;

/// One (type, profile): its block groups' bytes, and those used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceInfo {
    /// BG_DATA / BG_SYSTEM / BG_METADATA and the profile bit.
    pub flags: u64,
    pub total_bytes: u64,
    pub used_bytes: u64,
}

/// The kernel's order of block group types (btrfs_ioctl_space_info).
const TYPE_ORDER: [u64; 4] = [BG_DATA, BG_SYSTEM, BG_METADATA, BG_DATA | BG_METADATA];

/// Sums `groups` (flags, length, used) per (type, profile).
pub fn sum_space(groups: impl IntoIterator<Item = (u64, u64, u64)>) -> Vec<SpaceInfo> {
    let mut out: Vec<SpaceInfo> = Vec::new();
    for (flags, len, used) in groups {
        let key = flags & (BG_DATA | BG_SYSTEM | BG_METADATA | BG_PROFILE_MASK);
        match out.iter_mut().find(|s| s.flags == key) {
            Some(s) => {
                s.total_bytes += len;
                s.used_bytes += used;
            }
            None => out.push(SpaceInfo {
                flags: key,
                total_bytes: len,
                used_bytes: used,
            }),
        }
    }
    let kind = |f: u64| {
        TYPE_ORDER
            .iter()
            .position(|&t| f & (BG_DATA | BG_SYSTEM | BG_METADATA) == t)
            .unwrap_or(TYPE_ORDER.len())
    };
    out.sort_by_key(|s| (kind(s.flags), s.flags & BG_PROFILE_MASK));
    out
}

/// The space of the filesystem `src` reads: every chunk's BLOCK_GROUP_ITEM
/// (in the block group tree when the image has one, else the extent tree).
pub fn space_info<S: ItemSource + ?Sized>(src: &S) -> Result<Vec<SpaceInfo>> {
    let info = src.fs_info();
    let tree = if info.sb.compat_ro_flags & COMPAT_RO_BLOCK_GROUP_TREE != 0 {
        BLOCK_GROUP_TREE_OBJECTID
    } else {
        EXTENT_TREE_OBJECTID
    };
    let mut groups = Vec::new();
    for (start, c) in info.chunks.iter() {
        let key = Key::new(start, BLOCK_GROUP_ITEM, c.length);
        let d = src.item(tree, &key)?.ok_or_else(|| {
            Error::corrupt(
                format!("tree {tree} key {key}"),
                "a chunk without its block group item",
            )
        })?;
        let bg = BlockGroupItem::parse(&d)
            .map_err(|e| Error::format(format!("tree {tree} key {key}"), e))?;
        groups.push((c.chunk_type, c.length, bg.used));
    }
    Ok(sum_space(groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_per_kind_and_profile_in_the_kernels_order() {
        let s = sum_space([
            (BG_METADATA | BG_DUP, 100, 10),
            (BG_DATA, 50, 5),
            (BG_SYSTEM | BG_DUP, 8, 1),
            (BG_DATA, 50, 7),
            (BG_DATA | BG_RAID1, 30, 3),
        ]);
        let flags: Vec<u64> = s.iter().map(|x| x.flags).collect();
        assert_eq!(
            flags,
            [
                BG_DATA,
                BG_DATA | BG_RAID1,
                BG_SYSTEM | BG_DUP,
                BG_METADATA | BG_DUP
            ]
        );
        assert_eq!((s[0].total_bytes, s[0].used_bytes), (100, 12));
    }
}
