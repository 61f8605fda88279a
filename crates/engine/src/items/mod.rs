//! The item readers, written once over where the trees come from.
//!
//! A reader of inode items, names, back references or xattrs does not care
//! whether it reads the committed trees (the read-only mount, send, the
//! tools: [`crate::fs::Filesystem`]) or a running transaction's (the
//! read-write mount, receive, log replay: [`crate::tx::Trans`]). The kernel
//! makes the same split with one flag on its search path
//! (search_commit_root); here it is the [`ItemSource`] trait, and the
//! readers in [`inode_item`] and [`dir_item`] take any source.

pub mod dir_item;
pub mod inode_item;

pub use crate::ctree::describe_tree;
use crate::disk_io::FsInfo;
use crate::error::Result;
use std::ops::ControlFlow;
use ubtrfs_format::consts::{Csum, EMPTY_SUBVOL_DIR_OBJECTID};
use ubtrfs_format::key::Key;

/// What [`ItemSource::visit`] calls on each item: continue or break.
pub type Visitor<'a> = dyn FnMut(&Key, &[u8]) -> Result<ControlFlow<()>> + 'a;

/// The trees item readers search, by tree id.
pub trait ItemSource {
    /// The filesystem the trees belong to (sector size, checksums).
    fn fs_info(&self) -> &FsInfo;

    /// A copy of the item at exactly `key` in tree `tree`.
    fn item(&self, tree: u64, key: &Key) -> Result<Option<Vec<u8>>>;

    /// The last item at or before `key` in tree `tree`.
    fn item_le(&self, tree: u64, key: &Key) -> Result<Option<(Key, Vec<u8>)>>;

    /// Calls `f` on every item of tree `tree` with `lo <= key <= hi`, in
    /// key order, until it breaks or fails.
    fn visit(&self, tree: u64, lo: &Key, hi: &Key, f: &mut Visitor<'_>) -> Result<()>;

    /// The data checksum of each sector of `[logical, logical + len)`
    /// (None where the csum tree has none), as the csum tree has them.
    fn data_csums(&self, logical: u64, len: u64) -> Result<Vec<Option<Csum>>>;

    /// Whether tree `tree` exists (a subvolume may be deleted while an
    /// entry in a snapshot still names it).
    fn has_tree(&self, tree: u64) -> Result<bool>;
}

/// An inode: the subvolume (tree) it lives in and its number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InodeId {
    pub subvol: u64,
    pub ino: u64,
}

impl InodeId {
    /// The empty directory the kernel shows where a snapshot holds an
    /// entry for a subvolume it does not contain.
    pub fn is_placeholder(&self) -> bool {
        self.ino == EMPTY_SUBVOL_DIR_OBJECTID
    }
}

/// A directory entry name must be a single path component: a hostile image
/// with "..", "/" or NUL in a name must not steer `extract` (or anything
/// that joins names into host paths) outside its destination. The kernel's
/// tree-checker refuses such names too.
pub fn check_entry_name(name: &[u8]) -> std::result::Result<(), String> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(format!(
            "invalid directory entry name {:?}",
            String::from_utf8_lossy(name)
        ));
    }
    Ok(())
}
