//! Quota tree items (the quota tree is tree 8): QGROUP_STATUS (key
//! 0, QGROUP_STATUS, 0) and QGROUP_INFO (key 0, QGROUP_INFO, qgroup id,
//! which is level << 48 | subvolume id for level 0).

use crate::fixed_item;

/// QGROUP_STATUS flags.
pub const QGROUP_STATUS_ON: u64 = 1;
pub const QGROUP_STATUS_RESCAN: u64 = 2;
pub const QGROUP_STATUS_INCONSISTENT: u64 = 4;
pub const QGROUP_STATUS_SIMPLE_MODE: u64 = 8;

fixed_item! {
    /// `btrfs_qgroup_status_item`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct QgroupStatus ("QGROUP_STATUS") {
        pub version: u64,
        pub generation: u64,
        pub flags: u64,
        /// Where a rescan has got to (the next bytenr).
        pub rescan: u64,
    }
}

fixed_item! {
    /// `btrfs_qgroup_info_item`: what the group's subvolumes refer to,
    /// and what only they refer to, in bytes on disk.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct QgroupInfo ("QGROUP_INFO") {
        pub generation: u64,
        pub rfer: u64,
        pub rfer_cmpr: u64,
        pub excl: u64,
        pub excl_cmpr: u64,
    }
}
