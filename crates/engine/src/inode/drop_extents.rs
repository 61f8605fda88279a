//! Dropping a file range's extents (the kernel's btrfs_drop_extents):
//! file extent items inside the range go, items that straddle an end are
//! trimmed (split when the range is inside one), and data references
//! follow.

use crate::error::{Error, Result};
use crate::tx::delayed_ref::Backref;
use crate::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{FileExtent, FileExtentKind};
use ubtrfs_format::Key;

/// Offsets of fields in a regular EXTENT_DATA item.
const OFFSET_AT: usize = 37;
const NUM_BYTES_AT: usize = 45;

fn with_range(d: &[u8], offset: u64, num_bytes: u64) -> Vec<u8> {
    let mut v = d.to_vec();
    v[OFFSET_AT..OFFSET_AT + 8].copy_from_slice(&offset.to_le_bytes());
    v[NUM_BYTES_AT..NUM_BYTES_AT + 8].copy_from_slice(&num_bytes.to_le_bytes());
    v
}

impl Trans {
    /// Removes the file extents of inode `ino` in `[start, end)` and
    /// returns how many bytes of data (real extents and inline data) they
    /// covered there: what the inode's nbytes loses.
    pub fn drop_extents(&mut self, tree: u64, ino: u64, start: u64, end: u64) -> Result<u64> {
        if end <= start {
            return Ok(0);
        }
        let from = match self.search_last_le(tree, &Key::new(ino, EXTENT_DATA, start))? {
            Some((k, _)) if k.objectid == ino && k.item_type == EXTENT_DATA => k.offset,
            _ => start,
        };
        let items = self.items_in(
            tree,
            &Key::new(ino, EXTENT_DATA, from),
            &Key::new(ino, EXTENT_DATA, end - 1),
        )?;
        let mut found = 0;
        for (k, d) in items {
            let here = || format!("tree {tree} inode {ino} key {k}");
            let fe = FileExtent::parse(&d).map_err(|e| Error::format(here(), e))?;
            let pos = k.offset;
            let end_of = |len: u64| {
                pos.checked_add(len)
                    .ok_or_else(|| Error::corrupt(here(), "extent end past 2^64"))
            };
            let (extent_end, real) = match fe.kind {
                FileExtentKind::Inline { .. } => (end_of(fe.ram_bytes)?, None),
                FileExtentKind::Extent {
                    disk_bytenr,
                    disk_num_bytes,
                    offset,
                    num_bytes,
                    ..
                } => (
                    end_of(num_bytes)?,
                    Some((disk_bytenr, disk_num_bytes, offset)),
                ),
            };
            if extent_end <= start {
                continue;
            }
            let inline_cut = || {
                Err(Error::Unsupported(format!(
                    "{}: cutting an inline extent at {start}..{end}",
                    here()
                )))
            };
            let backref = |off: u64| Backref::Data {
                root: tree,
                objectid: ino,
                offset: pos.wrapping_sub(off),
            };
            match real {
                None if start > pos || end < extent_end => return inline_cut(),
                None => {
                    self.delete_item(tree, &k)?;
                    found += extent_end - pos;
                }
                Some((disk, dlen, off)) => {
                    let data_ref = disk != 0;
                    if start > pos && end < extent_end {
                        // The range is inside: keep both ends.
                        self.put_item(tree, k, with_range(&d, off, start - pos))?;
                        self.insert_item(
                            tree,
                            Key::new(ino, EXTENT_DATA, end),
                            with_range(&d, off.wrapping_add(end - pos), extent_end - end),
                        )?;
                        if data_ref {
                            self.add_data_ref(disk, dlen, backref(off), false);
                            found += end - start;
                        }
                        break;
                    }
                    if start <= pos && end < extent_end {
                        // The range covers the head.
                        self.delete_item(tree, &k)?;
                        self.insert_item(
                            tree,
                            Key::new(ino, EXTENT_DATA, end),
                            with_range(&d, off.wrapping_add(end - pos), extent_end - end),
                        )?;
                        if data_ref {
                            found += end - pos;
                        }
                        break;
                    }
                    if start > pos {
                        // The range covers the tail.
                        self.put_item(tree, k, with_range(&d, off, start - pos))?;
                        if data_ref {
                            found += extent_end - start;
                        }
                        continue;
                    }
                    self.delete_item(tree, &k)?;
                    if data_ref {
                        self.drop_data_ref(disk, dlen, backref(off));
                        found += extent_end - pos;
                    }
                }
            }
        }
        Ok(found)
    }
}
