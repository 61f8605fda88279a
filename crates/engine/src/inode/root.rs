//! A tree's ROOT_ITEM and its top directory, as the kernel makes them
//! for a new tree, and fresh UUIDs: mkfs makes the first trees with them,
//! and subvolume creation (receive's too) each new one.

use crate::error::{Error, Result};
use crate::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{InodeItem, InodeRef, RootItem, Timespec};

/// A new tree's ROOT_ITEM as the kernel makes one: the embedded inode of a
/// directory, one reference, one block used.
pub fn new_root_item(nodesize: u32, transid: u64, root_dirid: u64) -> RootItem {
    RootItem {
        inode: InodeItem {
            generation: 1,
            size: 3,
            nbytes: nodesize as u64,
            nlink: 1,
            mode: 0o40755,
            flags: INODE_ROOT_ITEM_INIT,
            ..Default::default()
        },
        generation: transid,
        root_dirid,
        bytes_used: nodesize as u64,
        refs: 1,
        ..Default::default()
    }
}

/// A directory inode made at `transid`.
pub fn dir_inode(transid: u64, time: Timespec, mode: u32) -> InodeItem {
    InodeItem {
        generation: transid,
        transid,
        nlink: 1,
        mode,
        atime: time,
        ctime: time,
        mtime: time,
        otime: time,
        ..Default::default()
    }
}

/// The "..": the INODE_REF of a tree's top directory.
pub fn top_dir_items(t: &mut Trans, tree: u64, dir: u64, inode: &InodeItem) -> Result<()> {
    t.insert_item(tree, InodeItem::key(dir), inode.to_bytes())?;
    let r = InodeRef {
        parent: dir,
        index: 0,
        name: b"..",
    };
    let mut v = Vec::new();
    r.encode_ref(&mut v);
    t.insert_item(tree, r.ref_key(dir), v)
}

/// 16 random bytes shaped as a version-4 UUID.
pub fn random_uuid() -> Result<[u8; 16]> {
    let mut u = [0u8; 16];
    let f = std::fs::File::open("/dev/urandom").map_err(|e| Error::Io {
        path: "/dev/urandom".into(),
        op: "open".into(),
        source: e,
    })?;
    std::io::Read::read_exact(&mut &f, &mut u).map_err(|e| Error::Io {
        path: "/dev/urandom".into(),
        op: "read".into(),
        source: e,
    })?;
    Ok(as_v4(u))
}

pub(crate) fn as_v4(mut u: [u8; 16]) -> [u8; 16] {
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}
