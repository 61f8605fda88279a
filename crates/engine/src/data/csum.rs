//! Data checksums from the csum tree.

use crate::disk_io::FsInfo;
use crate::error::{Error, Result};
use crate::tree::ctree::{Cursor, Tree};
use ubtrfs_format::consts::{EXTENT_CSUM, EXTENT_CSUM_OBJECTID};
use ubtrfs_format::key::Key;

/// Checksums of the sectors of `[logical, logical + len)`, one per sector
/// (None where the csum tree has none). `logical` and `len` must be sector
/// aligned.
pub fn lookup_csums(
    fs: &FsInfo,
    csum_tree: Tree,
    logical: u64,
    len: u64,
) -> Result<Vec<Option<[u8; 32]>>> {
    let ss = fs.sectorsize as u64;
    let cs = fs.csum_type.size();
    let nsectors = len.div_ceil(ss) as usize;
    let mut out = vec![None; nsectors];
    let end = logical + len;
    let mut c = Cursor::new(fs, csum_tree);
    // The item covering `logical` starts at or before it.
    if !c.seek_floor(&Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, logical))? {
        return Ok(out);
    }
    while let Some((k, d)) = c.item() {
        if k.objectid == EXTENT_CSUM_OBJECTID && k.item_type == EXTENT_CSUM {
            if k.offset >= end {
                break;
            }
            if d.len() % cs != 0 {
                return Err(Error::corrupt(
                    format!("csum tree key {k}"),
                    format!("item size {} not a multiple of {cs}", d.len()),
                ));
            }
            let n = (d.len() / cs) as u64;
            let item_end = k.offset.saturating_add(n * ss);
            if item_end > logical {
                let first = logical.max(k.offset);
                let last = end.min(item_end);
                let mut s = first;
                while s < last {
                    let i = ((s - k.offset) / ss) as usize;
                    let mut v = [0u8; 32];
                    v[..cs].copy_from_slice(&d[i * cs..(i + 1) * cs]);
                    out[((s - logical) / ss) as usize] = Some(v);
                    s += ss;
                }
            }
        } else if k.objectid > EXTENT_CSUM_OBJECTID {
            break;
        }
        if !c.next()? {
            break;
        }
    }
    Ok(out)
}

/// Whether any sector of `[logical, logical + len)` has a checksum; stops
/// at the first one found (the NOCOW check's early exit).
pub fn any_csum(fs: &FsInfo, csum_tree: Tree, logical: u64, len: u64) -> Result<bool> {
    let ss = fs.sectorsize as u64;
    let cs = fs.csum_type.size() as u64;
    let end = logical + len;
    let mut c = Cursor::new(fs, csum_tree);
    if !c.seek_floor(&Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, logical))? {
        return Ok(false);
    }
    loop {
        let Some((k, d)) = c.item() else {
            return Ok(false);
        };
        if k.objectid == EXTENT_CSUM_OBJECTID && k.item_type == EXTENT_CSUM {
            if k.offset >= end {
                return Ok(false);
            }
            let item_end = k.offset.saturating_add(d.len() as u64 / cs * ss);
            if item_end > logical {
                return Ok(true);
            }
        } else if k.objectid > EXTENT_CSUM_OBJECTID {
            return Ok(false);
        }
        if !c.next()? {
            return Ok(false);
        }
    }
}
