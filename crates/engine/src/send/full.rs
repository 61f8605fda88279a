//! The full send: one walk of the snapshot's tree in key order, every item
//! new, with forward-always readahead (the kernel's full_send_tree).

use super::Sender;
use crate::ctree::Cursor;
use crate::error::{FormatContext, Result};
use crate::items::inode_item::decode_refs;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{parse_dir_entries, InodeItem};
use ubtrfs_format::key::Key;

pub(crate) fn full_send(s: &mut Sender) -> Result<()> {
    let fs = s.fs;
    let tree = s.send.tree;
    let mut c = Cursor::new(&fs.info, tree);
    c.set_readahead(s.opts.readahead);
    if c.seek(&Key::new(FIRST_INODE, INODE_ITEM, 0))? {
        while let Some((k, d)) = c.item() {
            feed_new_item(s, &k, d)?;
            if !c.next()? {
                break;
            }
        }
    }
    s.finish_cur()
}

/// Feeds one item of a new inode (or the start of the next inode) to the
/// per-inode state machine.
pub(crate) fn feed_new_item(s: &mut Sender, k: &Key, d: &[u8]) -> Result<()> {
    if s.cur.active && k.objectid != s.cur.ino {
        s.finish_cur()?;
    }
    if k.objectid < FIRST_INODE || k.objectid > LAST_FREE_OBJECTID {
        return Ok(());
    }
    if !s.cur.active {
        if k.item_type != INODE_ITEM {
            return Ok(());
        }
        let ii = InodeItem::parse(d).at(|| format!("{} key {k}", s.send.tree.describe()))?;
        return s.begin_new(k.objectid, ii);
    }
    if s.cur.ignore {
        return Ok(());
    }
    match k.item_type {
        INODE_REF | INODE_EXTREF => {
            let mut refs = std::mem::take(&mut s.cur.refs);
            for r in decode_refs(s.send.tree.id, k, d)? {
                refs.push((r.parent, r.name.to_vec()));
            }
            s.cur.refs = refs;
        }
        XATTR_ITEM => {
            s.process_new_refs()?;
            let entries =
                parse_dir_entries(d).at(|| format!("{} key {k}", s.send.tree.describe()))?;
            for e in entries {
                s.new_xattr(e.name, e.data)?;
            }
        }
        EXTENT_DATA => {
            s.process_new_refs()?;
            s.process_extent_new(k, d)?;
        }
        _ => {
            if k.item_type > INODE_EXTREF {
                s.process_new_refs()?;
            }
        }
    }
    Ok(())
}
