//! `tune -U UUID` / `tune -u`: a new fsid written into every tree block,
//! as btrfstune's change_uuid (btrfs-progs tune/change-uuid.c). Not a
//! transaction, by design (as btrfstune): copying every tree block would
//! need free space for all the metadata and would unshare snapshots. The
//! change is made resumable instead:
//!
//! 1. the superblocks get the new fsid and SUPER_FLAG_CHANGING_FSID;
//! 2. every tree block (each one the extent tree lists) is rewritten in
//!    place with the new fsid and its checksum, every copy, and the
//!    DEV_ITEMs in the chunk tree's leaves with it;
//! 3. after a flush, the superblocks without the flag.
//!
//! While the flag is set, readers accept blocks with either fsid
//! ([`ubtrfs_format::Superblock::block_fsid`]); a kill anywhere leaves an
//! image that the same command, run again, finishes (the kernel refuses
//! to mount it meanwhile). Rewriting a block in place is one write per
//! copy of a block whose content is otherwise the same, so a kill between
//! copies leaves each copy whole.

use crate::error::{Error, Result};
use crate::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::EXTENT_FLAG_TREE_BLOCK;
use ubtrfs_format::node::Node;
use ubtrfs_format::Key;

/// Where the fsid lies in a tree block header and in a DEV_ITEM.
const HEADER_FSID: std::ops::Range<usize> = 0x20..0x30;
const DEV_ITEM_FSID: std::ops::Range<usize> = 82..98;

/// What a change did.
#[derive(Debug, Clone)]
pub struct FsidChange {
    /// The fsid before (None when resuming: the superblock has the new
    /// one already).
    pub old: Option<[u8; 16]>,
    pub new: [u8; 16],
    /// Tree blocks rewritten (those already carrying the new fsid are
    /// left alone).
    pub blocks: u64,
    pub resumed: bool,
}

/// Gives the filesystem of `t` the fsid `want` (a random one when None),
/// or finishes a change that was interrupted (then `want`, if given, must
/// be the fsid it was changing to). `progress` is told (blocks done,
/// blocks). Needs no free space.
pub fn change_fsid(
    t: &mut Trans,
    want: Option<[u8; 16]>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<FsidChange> {
    let sb = &t.info.sb;
    if sb.incompat_flags & INCOMPAT_METADATA_UUID != 0 {
        return Err(Error::Unsupported(
            "the filesystem has a metadata_uuid (tune -M/-m): give the tree blocks' UUID \
             back with -M first, then change it with -U/-u"
                .into(),
        ));
    }
    let resumed = sb.flags & SUPER_FLAG_CHANGING_FSID != 0;
    let (old, new) = if resumed {
        if let Some(w) = want.filter(|w| *w != sb.fsid) {
            return Err(Error::Invalid(format!(
                "an interrupted change to fsid {} is under way, not to {}: run it again with \
                 that UUID, or with -u",
                ubtrfs_format::bytes::format_uuid(&sb.fsid),
                ubtrfs_format::bytes::format_uuid(&w)
            )));
        }
        (None, sb.fsid)
    } else {
        let new = match want {
            Some(w) => w,
            None => crate::inode::root::random_uuid()?,
        };
        (Some(sb.fsid), new)
    };
    if new == [0; 16] {
        return Err(Error::Invalid("a filesystem UUID of zeros".into()));
    }
    if old == Some(new) {
        return Ok(FsidChange {
            old,
            new,
            blocks: 0,
            resumed,
        });
    }
    if !resumed {
        let sb = &mut t.info.sb;
        sb.fsid = new;
        sb.metadata_uuid = new;
        sb.flags |= SUPER_FLAG_CHANGING_FSID;
        t.write_superblock_now()?;
    }
    // Every tree block, from its extent item.
    let mut blocks = Vec::new();
    t.scan(EXTENT_TREE_OBJECTID, &Key::MIN, |k, d| {
        let tree = match k.item_type {
            METADATA_ITEM => true,
            EXTENT_ITEM => d.get(16..24).is_some_and(|f| {
                u64::from_le_bytes(f.try_into().unwrap()) & EXTENT_FLAG_TREE_BLOCK != 0
            }),
            _ => false,
        };
        if tree {
            blocks.push(k.objectid);
        }
        true
    })?;
    let ns = t.nodesize() as usize;
    let csum = t.info.csum_type;
    let total = blocks.len() as u64;
    let mut done = 0u64;
    let mut changed = 0u64;
    let mut buf = vec![0u8; ns];
    for bytenr in blocks {
        read_good_copy(t, bytenr, &mut buf)?;
        let mut dirty = false;
        if buf[HEADER_FSID] != new {
            buf[HEADER_FSID].copy_from_slice(&new);
            dirty = true;
        }
        dirty |= patch_dev_items(&mut buf, &new, bytenr)?;
        if dirty {
            let sum = csum.compute(&buf[32..]);
            buf[..32].copy_from_slice(&sum);
            t.write_logical(bytenr, &buf)?;
            changed += 1;
        }
        done += 1;
        progress(done, total);
    }
    t.set_dev_items_fsid(new);
    t.info.sb.flags &= !SUPER_FLAG_CHANGING_FSID;
    // Flushes the blocks, then writes the superblocks.
    t.write_superblock_now()?;
    Ok(FsidChange {
        old,
        new,
        blocks: changed,
        resumed,
    })
}

/// Reads the first copy of tree block `bytenr` whose checksum holds.
fn read_good_copy(t: &Trans, bytenr: u64, buf: &mut [u8]) -> Result<()> {
    let copies = t.info.num_copies(bytenr)?;
    let mut why = String::new();
    for m in 0..copies {
        match t.info.read_copy(bytenr, buf, m) {
            Ok(()) => match t.info.csum_type.verify(&buf[32..], &buf[..32]) {
                Ok(()) => return Ok(()),
                Err(e) => why = format!("copy {m}: {e}"),
            },
            Err(e) => why = format!("copy {m}: {e}"),
        }
    }
    Err(Error::corrupt(
        format!("tree block {bytenr}"),
        format!("no copy reads whole ({why}); nothing of it was changed"),
    ))
}

/// Sets the fsid of every DEV_ITEM in `buf` when it is a chunk tree
/// leaf; whether anything changed.
fn patch_dev_items(buf: &mut [u8], new: &[u8; 16], bytenr: u64) -> Result<bool> {
    let node = Node::parse(buf).map_err(|e| Error::format(format!("tree block {bytenr}"), e))?;
    let owner = u64::from_le_bytes(buf[0x58..0x60].try_into().unwrap());
    if owner != CHUNK_TREE_OBJECTID || !node.is_leaf() {
        return Ok(false);
    }
    let mut at = Vec::new();
    for i in 0..node.nritems() {
        let it = node.item(i);
        if it.key.item_type == DEV_ITEM && it.data.len() >= DEV_ITEM_FSID.end {
            let off = it.data.as_ptr() as usize - buf.as_ptr() as usize;
            at.push(off);
        }
    }
    let mut changed = false;
    for off in at {
        let r = off + DEV_ITEM_FSID.start..off + DEV_ITEM_FSID.end;
        if buf[r.clone()] != new[..] {
            buf[r].copy_from_slice(new);
            changed = true;
        }
    }
    Ok(changed)
}
