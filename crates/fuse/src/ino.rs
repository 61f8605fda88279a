//! Inode numbers on the mount.
//!
//! The kernel gives each btrfs subvolume its own st_dev, so the same inode
//! number (256 for every subvolume root, 257, ...) appears in several
//! subvolumes. A FUSE mount has one st_dev, so tools that find hardlinks by
//! (st_dev, st_ino) need numbers unique across subvolumes. The mapping is a
//! pure function of (subvolume, inode), so numbers are stable from mount to
//! mount and no table is kept:
//!
//! - the top-level subvolume (id 5) keeps the kernel's numbers as they are;
//! - subvolume `S` (ids from 256 on) puts `S - 255` above bit 40:
//!   `((S - 255) << 40) | ino`, so the low 40 bits are the kernel's number.
//!
//! The same number is the FUSE node id, except for the mount's root, which
//! FUSE requires to be node 1 (stat still shows its own number).

use ubtrfs_engine::InodeId;
use ubtrfs_format::consts::FS_TREE_OBJECTID;

/// Bits of the btrfs inode number kept.
pub const INO_BITS: u32 = 40;
const INO_MASK: u64 = (1 << INO_BITS) - 1;
/// First subvolume id after the top level.
const FIRST_SUBVOL: u64 = 256;
/// Subvolume ids that fit above the inode bits.
const MAX_SUBVOL_INDEX: u64 = (1 << (64 - INO_BITS)) - 1;

/// FUSE's fixed node id of the mount's root.
pub const ROOT_NODE: u64 = 1;

/// The mount-wide inode number of `id`, or None when the subvolume id or
/// inode number is too large for the mapping (not seen in practice: both
/// are allocated sequentially).
pub fn encode(id: InodeId) -> Option<u64> {
    if id.ino > INO_MASK {
        return None;
    }
    if id.subvol == FS_TREE_OBJECTID {
        return Some(id.ino);
    }
    let index = id.subvol.checked_sub(FIRST_SUBVOL - 1)?;
    if id.subvol < FIRST_SUBVOL || index > MAX_SUBVOL_INDEX {
        return None;
    }
    Some((index << INO_BITS) | id.ino)
}

/// The inverse of [`encode`].
pub fn decode(n: u64) -> InodeId {
    let index = n >> INO_BITS;
    let ino = n & INO_MASK;
    if index == 0 {
        InodeId {
            subvol: FS_TREE_OBJECTID,
            ino,
        }
    } else {
        InodeId {
            subvol: index + FIRST_SUBVOL - 1,
            ino,
        }
    }
}

/// Node ids of one mount: [`encode`] of each inode, and [`ROOT_NODE`] for
/// the inode at its root (both mounts).
#[derive(Debug, Clone, Copy)]
pub struct Nodes {
    pub root: InodeId,
}

impl Nodes {
    /// The inode behind a node id.
    pub fn inode(&self, node: u64) -> InodeId {
        if node == ROOT_NODE {
            self.root
        } else {
            decode(node)
        }
    }

    /// The node id of an inode.
    pub fn node_of(&self, id: InodeId) -> Result<u64, crate::proto::Errno> {
        if id == self.root {
            return Ok(ROOT_NODE);
        }
        Self::ino_of(id)
    }

    /// The st_ino of an inode on the mount; EOVERFLOW, logged, when the
    /// mapping cannot hold it.
    pub fn ino_of(id: InodeId) -> Result<u64, crate::proto::Errno> {
        encode(id).ok_or_else(|| {
            crate::logging::error(&format!(
                "subvolume {} inode {}: number too large for the mount's inode mapping",
                id.subvol, id.ino
            ));
            crate::proto::Errno::EOVERFLOW
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_level_keeps_kernel_numbers() {
        let id = InodeId {
            subvol: 5,
            ino: 257,
        };
        assert_eq!(encode(id), Some(257));
        assert_eq!(decode(257), id);
    }

    #[test]
    fn subvolumes_are_distinct_and_round_trip() {
        for subvol in [256u64, 257, 300, 1 << 20] {
            for ino in [2u64, 256, 257, 123456] {
                let id = InodeId { subvol, ino };
                let n = encode(id).unwrap();
                assert_eq!(n & INO_MASK, ino);
                assert_ne!(n, ino);
                assert_eq!(decode(n), id);
            }
        }
        let a = encode(InodeId {
            subvol: 256,
            ino: 257,
        })
        .unwrap();
        let b = encode(InodeId {
            subvol: 257,
            ino: 257,
        })
        .unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn out_of_range_is_refused() {
        assert_eq!(
            encode(InodeId {
                subvol: 5,
                ino: 1 << 41
            }),
            None
        );
        assert_eq!(
            encode(InodeId {
                subvol: 7,
                ino: 300
            }),
            None
        );
        assert_eq!(
            encode(InodeId {
                subvol: u64::MAX,
                ino: 300
            }),
            None
        );
    }
}
