//! A picture of where the space of each device goes, in the spirit of
//! btrfs-heatmap: every device a band of pixels in address order (left to
//! right, top to bottom), each pixel a run of device bytes coloured by
//! what holds them (a data, metadata or system block group, or nothing)
//! and lit by how much of that run its block group uses. Pure: an RGB
//! buffer; the front end encodes it.

use crate::ctree::for_each_item;
use crate::error::Result;
use crate::fs::Filesystem;
use crate::io::volumes::{is_mirror, stripe_len};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use ubtrfs_format::consts::*;
use ubtrfs_format::Key;

/// Rows of background between two devices' bands.
const GAP: u32 = 4;

/// Colours (full use) by block group type, and of unallocated space.
pub const DATA_RGB: [u8; 3] = [66, 133, 244];
pub const METADATA_RGB: [u8; 3] = [52, 168, 83];
pub const SYSTEM_RGB: [u8; 3] = [234, 67, 53];
pub const MIXED_RGB: [u8; 3] = [160, 90, 200];
pub const UNALLOCATED_RGB: [u8; 3] = [24, 24, 24];
/// The gap between bands, and device bytes past the filesystem's size.
pub const GAP_RGB: [u8; 3] = [255, 255, 255];

/// The picture and where each device's band lies in it.
pub struct SpaceMap {
    pub width: u32,
    pub height: u32,
    /// Row-major RGB, 3 bytes a pixel.
    pub rgb: Vec<u8>,
    /// (devid, first row, rows, device bytes a pixel stands for).
    pub bands: Vec<(u64, u32, u32, u64)>,
}

/// Draws `fs`'s devices, `width` pixels wide, each band about
/// `width * width / 2` pixels (at least 4 KiB of device a pixel).
pub fn space_map(fs: &Filesystem, width: u32) -> Result<SpaceMap> {
    let width = width.clamp(16, 8192);
    // Used logical ranges, from the extent tree.
    let ns = fs.info.nodesize as u64;
    let mut used: BTreeMap<u64, u64> = BTreeMap::new();
    let mut groups: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let extent = fs.tree(EXTENT_TREE_OBJECTID)?;
    for_each_item(&fs.info, extent, Key::MIN, Key::MAX, |k, d| {
        match k.item_type {
            EXTENT_ITEM => {
                used.insert(k.objectid, k.offset);
            }
            METADATA_ITEM => {
                used.insert(k.objectid, ns);
            }
            BLOCK_GROUP_ITEM if d.len() >= 24 => {
                let flags = u64::from_le_bytes(d[16..24].try_into().unwrap());
                groups.insert(k.objectid, (k.offset, flags));
            }
            _ => {}
        }
        Ok(ControlFlow::Continue(()))
    })?;
    // Bytes used in [a, b) of logical space.
    let used_in = |a: u64, b: u64| -> u64 {
        let mut n = 0;
        if let Some((&s, &l)) = used.range(..a).next_back() {
            n += (s + l).min(b).saturating_sub(a);
        }
        for (&s, &l) in used.range(a..b) {
            n += (s + l).min(b) - s;
        }
        n
    };
    let mut bands = Vec::new();
    let mut rows: Vec<Vec<[u8; 3]>> = Vec::new();
    for d in fs.info.devices.values() {
        let size = d.superblock.dev_item.total_bytes.max(1);
        let target = width as u64 * (width as u64 / 2).max(1);
        let per = size.div_ceil(target).max(4096);
        let npix = size.div_ceil(per);
        let nrows = npix.div_ceil(width as u64) as u32;
        let mut px = vec![UNALLOCATED_RGB; (nrows * width) as usize];
        for p in px.iter_mut().skip(npix as usize) {
            *p = GAP_RGB;
        }
        for (logical, c) in fs.info.chunks.iter() {
            let mirror = is_mirror(c.chunk_type);
            let stripe_len = stripe_len(c);
            let (glen, flags) = groups
                .get(&logical)
                .copied()
                .unwrap_or((c.length, c.chunk_type));
            let base = match flags & (BG_DATA | BG_METADATA | BG_SYSTEM) {
                x if x == BG_DATA | BG_METADATA => MIXED_RGB,
                BG_DATA => DATA_RGB,
                BG_METADATA => METADATA_RGB,
                _ => SYSTEM_RGB,
            };
            let avg = used_in(logical, logical + glen) as f64 / glen.max(1) as f64;
            for s in c.stripes.iter().filter(|s| s.devid == d.devid) {
                let first = s.offset / per;
                let last = (s.offset + stripe_len).div_ceil(per).min(npix);
                for p in first..last {
                    let (a, b) = (
                        (p * per).max(s.offset),
                        ((p + 1) * per).min(s.offset + stripe_len),
                    );
                    let fill = if mirror {
                        let la = logical + (a - s.offset);
                        used_in(la, la + (b - a)) as f64 / (b - a).max(1) as f64
                    } else {
                        avg
                    };
                    // Dim (a fifth of the colour) when empty, full when used.
                    let k = 0.2 + 0.8 * fill.clamp(0.0, 1.0);
                    px[p as usize] = base.map(|v| (v as f64 * k) as u8);
                }
            }
        }
        if !rows.is_empty() {
            for _ in 0..GAP {
                rows.push(vec![GAP_RGB; width as usize]);
            }
        }
        let y0 = rows.len() as u32;
        for r in px.chunks(width as usize) {
            rows.push(r.to_vec());
        }
        bands.push((d.devid, y0, nrows, per));
    }
    let height = rows.len() as u32;
    let rgb = rows.into_iter().flatten().flatten().collect();
    Ok(SpaceMap {
        width,
        height,
        rgb,
        bands,
    })
}
