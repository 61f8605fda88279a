//! Chunks, device extents and device items (progs' `check_chunks_and_extents`
//! and `check_devices`): one device extent per chunk stripe and back,
//! stripes on known devices and inside them, each device's bytes_used the
//! sum of its device extents, and the superblock's total the devices' sum.

use super::extents::ExtentIndex;
use super::{Fix, Problems};
use crate::ctree::{for_each_item, Tree};
use crate::error::Result;
use crate::fs::Filesystem;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{ChunkItem, DevExtent, DevItem};
use ubtrfs_format::Key;

/// Checks the chunk and device trees; returns the chunks by logical start.
pub(crate) fn check(
    fs: &Filesystem,
    _ix: &ExtentIndex,
    p: &mut Problems,
) -> Result<BTreeMap<u64, ChunkItem>> {
    let info = &fs.info;
    let sb = &info.sb;
    let mut chunks: BTreeMap<u64, ChunkItem> = BTreeMap::new();
    let mut dev_items: BTreeMap<u64, DevItem> = BTreeMap::new();
    let r = for_each_item(info, Tree::chunk(sb), Key::MIN, Key::MAX, |k, d| {
        match k.item_type {
            CHUNK_ITEM => match ChunkItem::parse(d) {
                Ok(c) => {
                    chunks.insert(k.offset, c);
                }
                Err(e) => p.add(format!("chunk tree key {k}"), format!("CHUNK_ITEM: {e}")),
            },
            DEV_ITEM => match DevItem::parse(d) {
                Ok(di) => {
                    dev_items.insert(di.devid, di);
                }
                Err(e) => p.add(format!("chunk tree key {k}"), format!("DEV_ITEM: {e}")),
            },
            _ => {}
        }
        Ok(ControlFlow::Continue(()))
    });
    if let Err(e) = r {
        p.add("chunk tree", format!("not read whole: {e}"));
    }
    let ss = info.sectorsize as u64;
    let mut total = 0u64;
    for (devid, di) in &dev_items {
        total = total.saturating_add(di.total_bytes);
        let here = format!("device {devid}");
        if !di.total_bytes.is_multiple_of(ss) {
            p.add_fix(
                &here,
                format!(
                    "total_bytes {} not a multiple of the sector size",
                    di.total_bytes
                ),
                Fix::DeviceTotalBytes {
                    devid: *devid,
                    bytes: di.total_bytes / ss * ss,
                },
            );
        }
        if let Some(d) = info.devices.get(devid) {
            if di.total_bytes > d.size {
                p.add(
                    &here,
                    format!(
                        "total_bytes {} but {} holds {} bytes",
                        di.total_bytes,
                        d.path.display(),
                        d.size
                    ),
                );
            }
        }
    }
    if dev_items.len() as u64 != sb.num_devices {
        p.add_fix(
            "superblock",
            format!(
                "num_devices {} but the chunk tree has {} devices",
                sb.num_devices,
                dev_items.len()
            ),
            Fix::SuperNumDevices {
                n: dev_items.len() as u64,
            },
        );
    }
    if total != sb.total_bytes && !dev_items.is_empty() {
        p.add_fix(
            "superblock",
            format!(
                "total_bytes {} but the devices hold {total}",
                sb.total_bytes
            ),
            Fix::SuperTotalBytes,
        );
    }
    check_sys_array(fs, &chunks, p);
    check_dev_extents(fs, &chunks, &dev_items, p)?;
    Ok(chunks)
}

/// Every chunk of the superblock's sys_chunk_array is a SYSTEM chunk with
/// the same item in the chunk tree: readers map SYSTEM chunks from the
/// array alone, so a copy that disagrees goes unseen until the array is
/// rewritten from the tree.
fn check_sys_array(fs: &Filesystem, chunks: &BTreeMap<u64, ChunkItem>, p: &mut Problems) {
    let Ok(sys) = fs.info.sb.sys_chunks() else {
        return; // the open read it already, or failed on it
    };
    for (k, c) in sys {
        let here = format!("superblock sys_chunk_array CHUNK_ITEM {}", k.offset);
        if c.chunk_type & BG_SYSTEM == 0 {
            p.add(&here, format!("type 0x{:x} is not SYSTEM", c.chunk_type));
        }
        match chunks.get(&k.offset) {
            None => p.add(&here, "not in the chunk tree"),
            Some(t) if !t.same_mapping(&c) => {
                p.add(&here, "maps otherwise than the chunk tree's item")
            }
            Some(_) => {}
        }
    }
}

fn check_dev_extents(
    fs: &Filesystem,
    chunks: &BTreeMap<u64, ChunkItem>,
    dev_items: &BTreeMap<u64, DevItem>,
    p: &mut Problems,
) -> Result<()> {
    let Some(dev_tree) = fs.tree_opt(DEV_TREE_OBJECTID)? else {
        p.add("root tree", "no device tree");
        return Ok(());
    };
    // (devid, physical) -> (chunk, length)
    let mut have: BTreeMap<(u64, u64), (u64, u64)> = BTreeMap::new();
    let r = for_each_item(&fs.info, dev_tree, Key::MIN, Key::MAX, |k, d| {
        if k.item_type == DEV_EXTENT {
            match DevExtent::parse(d) {
                Ok(de) => {
                    have.insert((k.objectid, k.offset), (de.chunk_offset, de.length));
                }
                Err(e) => p.add(format!("device tree key {k}"), format!("DEV_EXTENT: {e}")),
            }
        }
        Ok(ControlFlow::Continue(()))
    });
    if let Err(e) = r {
        p.add("device tree", format!("not read whole: {e}"));
    }
    let mut per_dev: BTreeMap<u64, u64> = BTreeMap::new();
    let mut last: Option<(u64, u64)> = None;
    for (&(devid, phys), &(_, len)) in &have {
        let here = format!("device extent {devid}:{phys}");
        if let Some((ld, lend)) = last {
            if ld == devid && phys < lend {
                p.add(
                    &here,
                    format!("overlaps the one before, which ends at {lend}"),
                );
            }
        }
        last = Some((devid, phys.saturating_add(len)));
        match dev_items.get(&devid) {
            Some(di) if phys.saturating_add(len) > di.total_bytes => p.add(
                &here,
                format!(
                    "{len} bytes end past the device's total_bytes {}",
                    di.total_bytes
                ),
            ),
            Some(_) => {}
            None => p.add(&here, "on a device the chunk tree does not list"),
        }
    }
    let mut want = BTreeSet::new();
    for (&logical, c) in chunks {
        let mirrored = c.chunk_type & (BG_RAID0 | BG_RAID10 | BG_RAID5 | BG_RAID6) == 0;
        for s in &c.stripes {
            want.insert((s.devid, s.offset));
            match have.get(&(s.devid, s.offset)) {
                Some(&(co, len)) if co == logical && (!mirrored || len == c.length) => {}
                Some(&(co, len)) => p.add(
                    format!("chunk {logical}"),
                    format!(
                        "device extent {}:{} is for chunk {co}, {len} bytes",
                        s.devid, s.offset
                    ),
                ),
                None => p.add(
                    format!("chunk {logical}"),
                    format!("no device extent at {}:{}", s.devid, s.offset),
                ),
            }
        }
    }
    for (k, &(_, len)) in &have {
        if want.contains(k) {
            *per_dev.entry(k.0).or_default() += len;
        } else {
            // Not counted in its device's bytes_used: it goes.
            p.add_fix(
                format!("device extent {}:{}", k.0, k.1),
                "no chunk stripe",
                Fix::DeleteItem {
                    tree: DEV_TREE_OBJECTID,
                    key: Key::new(k.0, DEV_EXTENT, k.1),
                },
            );
        }
    }
    for (devid, di) in dev_items {
        let u = per_dev.get(devid).copied().unwrap_or(0);
        if di.bytes_used != u {
            p.add_fix(
                format!("device {devid}"),
                format!(
                    "bytes_used {} but its device extents make {u}",
                    di.bytes_used
                ),
                Fix::DeviceBytesUsed {
                    devid: *devid,
                    used: u,
                },
            );
        }
    }
    Ok(())
}
