//! Offline scrub: every tree block listed in the extent tree and every data
//! sector listed in the csum tree is read from every copy and verified.
//! Errors name the logical address, the device and physical offset of the
//! bad copy, and for data the file that uses it where it can be resolved.

use crate::ctree::{for_each_item, Tree};
use crate::disk_io::FsInfo;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::io::volumes::Placement;
use crate::tree::block::{verify_tree_block, BlockExpect};
use std::ops::ControlFlow;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{ExtentDataRef, ExtentItem, ExtentRecord, InlineRef};
use ubtrfs_format::key::Key;

/// Data read per verification step.
const DATA_CHUNK: u64 = 1 << 20;

#[derive(Debug, Default)]
pub struct ScrubReport {
    pub superblocks_checked: u64,
    /// Superblock copies that were bad (each also in `errors`).
    pub superblock_errors: u64,
    pub tree_blocks_checked: u64,
    pub tree_block_errors: u64,
    pub data_sectors_checked: u64,
    pub data_errors: u64,
    /// Copies that could not be read at all (missing device, I/O error).
    pub unreadable: u64,
    /// Copies not verified because this reader cannot rebuild them yet.
    pub skipped_copies: u64,
    pub errors: Vec<String>,
}

impl ScrubReport {
    pub fn summary(&self) -> String {
        format!(
            "scrub: {} superblocks, {} tree block copies ({} bad), {} data sector copies ({} bad), {} unreadable, {} not verifiable; {}",
            self.superblocks_checked,
            self.tree_blocks_checked,
            self.tree_block_errors,
            self.data_sectors_checked,
            self.data_errors,
            self.unreadable,
            self.skipped_copies,
            if self.clean() { "no errors found" } else { "ERRORS FOUND" }
        )
    }

    /// No error found: none listed, none counted (a mount's scrub answers
    /// counts; its list is in the mount's log).
    pub fn clean(&self) -> bool {
        self.errors.is_empty() && self.tree_block_errors + self.data_errors + self.unreadable == 0
    }

    pub fn to_json_fields(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("superblocks_checked", self.superblocks_checked),
            ("tree_blocks_checked", self.tree_blocks_checked),
            ("tree_block_errors", self.tree_block_errors),
            ("data_sectors_checked", self.data_sectors_checked),
            ("data_errors", self.data_errors),
            ("unreadable", self.unreadable),
            ("skipped_copies", self.skipped_copies),
        ]
    }
}

/// Where copy `mirror` of `logical` is, for messages.
fn copy_place(fs: &FsInfo, logical: u64, mirror: usize) -> String {
    let Ok(piece) = fs.chunks.map(logical, 1) else {
        return "unmapped".into();
    };
    let loc = match &piece.placement {
        Placement::Mirrors(m) => m.get(mirror).copied(),
        Placement::Parity { target, row, .. } if mirror == 0 => Some(row[*target]),
        Placement::Parity { .. } => return format!("rebuilt from parity {mirror}"),
    };
    match loc {
        Some(l) => match fs.devices.get(&l.devid) {
            Some(d) => format!("device {} physical {}", d.path.display(), l.physical),
            None => format!("missing devid {} physical {}", l.devid, l.physical),
        },
        None => "no such copy".into(),
    }
}

pub fn scrub(fs: &Filesystem, progress: &mut dyn FnMut(u64)) -> Result<ScrubReport> {
    let mut r = ScrubReport::default();
    let info = &fs.info;
    for d in info.devices.values() {
        r.superblocks_checked += 1;
        for (off, why) in &d.bad_supers {
            r.superblock_errors += 1;
            r.errors.push(format!(
                "superblock copy at {off} on {}: {why}",
                d.path.display()
            ));
        }
    }
    let mut s = Scrub {
        fs,
        r,
        done: 0,
        progress,
    };
    if let Some(extent_tree) = fs.tree_opt(EXTENT_TREE_OBJECTID)? {
        s.metadata(extent_tree)?;
    }
    if let Some(csum_tree) = fs.tree_opt(CSUM_TREE_OBJECTID)? {
        s.data(csum_tree)?;
    }
    Ok(s.r)
}

/// A scrub under way: its report so far, and the bytes read for progress.
struct Scrub<'a> {
    fs: &'a Filesystem,
    r: ScrubReport,
    done: u64,
    progress: &'a mut dyn FnMut(u64),
}

impl Scrub<'_> {
    /// A copy that could not be read: counted as skipped when reading it
    /// is unsupported (`Error::Unsupported`), as unreadable with the error
    /// otherwise.
    fn unread(&mut self, what: String, e: Error) {
        match e {
            Error::Unsupported(_) => self.r.skipped_copies += 1,
            e => {
                self.r.unreadable += 1;
                self.r.errors.push(format!("{what}: {e}"));
            }
        }
    }

    fn advance(&mut self, bytes: u64) {
        self.done += bytes;
        (self.progress)(self.done);
    }

    /// Every copy of every tree block the extent tree lists, verified.
    fn metadata(&mut self, extent_tree: Tree) -> Result<()> {
        let fs = self.fs;
        let info = &fs.info;
        let mut blocks = Vec::new();
        for_each_item(info, extent_tree, Key::MIN, Key::MAX, |k, d| {
            let is_tree = match k.item_type {
                METADATA_ITEM => true,
                EXTENT_ITEM => ExtentItem::parse(d).is_ok_and(|e| e.is_tree_block()),
                _ => false,
            };
            if is_tree {
                blocks.push(k.objectid);
            }
            Ok(ControlFlow::Continue(()))
        })?;
        let fsid = info.sb.block_fsid();
        for bytenr in blocks {
            let copies = info.num_copies(bytenr)?;
            for m in 0..copies {
                let mut buf = vec![0u8; info.nodesize as usize].into_boxed_slice();
                match info.read_copy(bytenr, &mut buf, m) {
                    Ok(()) => {
                        self.r.tree_blocks_checked += 1;
                        // The verification demand reads use, without a parent
                        // pointer's expectations.
                        let expect = BlockExpect::default();
                        if let Err(why) =
                            verify_tree_block(buf, bytenr, info.csum_type, fsid.as_ref(), &expect)
                        {
                            self.r.tree_block_errors += 1;
                            self.r.errors.push(format!(
                                "tree block at logical {bytenr} copy {m} ({}): {why}",
                                copy_place(info, bytenr, m)
                            ));
                        }
                    }
                    Err(e) => self.unread(format!("tree block at logical {bytenr} copy {m}"), e),
                }
            }
            self.advance(info.nodesize as u64);
        }
        Ok(())
    }

    /// Every copy of every data sector the csum tree covers, verified.
    fn data(&mut self, csum_tree: Tree) -> Result<()> {
        let fs = self.fs;
        let info = &fs.info;
        let ss = info.sectorsize as u64;
        let cs = info.csum_type.size();
        // Gather (start, csums) runs first: the csum tree is small next to data.
        let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
        for_each_item(
            info,
            csum_tree,
            Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, 0),
            Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, u64::MAX),
            |k, d| {
                if d.len() % cs != 0 {
                    return Err(Error::corrupt(
                        format!("csum tree key {k}"),
                        format!("item size {} not a multiple of {cs}", d.len()),
                    ));
                }
                // The sector addresses computed below must not overflow.
                if k.offset.checked_add((d.len() / cs) as u64 * ss).is_none() {
                    return Err(Error::corrupt(
                        format!("csum tree key {k}"),
                        format!(
                            "{} checksums from logical {} overflow",
                            d.len() / cs,
                            k.offset
                        ),
                    ));
                }
                runs.push((k.offset, d.to_vec()));
                Ok(ControlFlow::Continue(()))
            },
        )?;
        let per_chunk = (DATA_CHUNK / ss) as usize;
        for (start, sums) in runs {
            let nsectors = sums.len() / cs;
            let mut i = 0;
            while i < nsectors {
                let n = per_chunk.min(nsectors - i);
                let logical = start + i as u64 * ss;
                let len = n as u64 * ss;
                let mut buf = vec![0u8; len as usize];
                let copies = info.num_copies(logical)?;
                for m in 0..copies {
                    match info.read_copy(logical, &mut buf, m) {
                        Ok(()) => {
                            for j in 0..n {
                                self.r.data_sectors_checked += 1;
                                let sector = &buf[j * ss as usize..(j + 1) * ss as usize];
                                let want = &sums[(i + j) * cs..(i + j + 1) * cs];
                                if info.csum_type.verify(sector, want).is_err() {
                                    let at = logical + j as u64 * ss;
                                    self.r.data_errors += 1;
                                    self.r.errors.push(format!(
                                        "data at logical {at} copy {m} ({}): checksum mismatch{}",
                                        copy_place(info, at, m),
                                        owner_path(fs, at)
                                            .map(|p| format!(", file {p}"))
                                            .unwrap_or_default()
                                    ));
                                }
                            }
                        }
                        Err(e) => self.unread(format!("data at logical {logical} copy {m}"), e),
                    }
                }
                i += n;
                self.advance(len);
            }
        }
        Ok(())
    }
}

/// The path of a file using the data extent containing `logical`, found
/// through the extent's first data back reference.
pub fn owner_path(fs: &Filesystem, logical: u64) -> Option<String> {
    let extent_tree = fs.tree_opt(EXTENT_TREE_OBJECTID).ok()??;
    let mut found: Option<(u64, u64)>;
    let mut c = crate::ctree::Cursor::new(&fs.info, extent_tree);
    if !c.seek_le(&Key::new(logical, EXTENT_ITEM, u64::MAX)).ok()? {
        return None;
    }
    // Walk back to the EXTENT_ITEM that contains `logical`.
    loop {
        let (k, d) = c.item()?;
        if k.item_type == EXTENT_ITEM {
            // Saturating: a hostile key must not overflow the extent's end.
            if k.objectid.saturating_add(k.offset) <= logical {
                return None;
            }
            found = first_data_ref(&k, d);
            if found.is_none() {
                // Keyed EXTENT_DATA_REF items follow the extent item.
                let start = k.objectid;
                while c.next().ok()? {
                    let (k2, d2) = c.item()?;
                    if k2.objectid != start {
                        break;
                    }
                    if k2.item_type == EXTENT_DATA_REF {
                        if let Ok(r) = ExtentDataRef::parse(d2) {
                            found = Some((r.root, r.objectid));
                            break;
                        }
                    }
                }
            }
            break;
        }
        if !c.prev().ok()? {
            return None;
        }
    }
    let (root, ino) = found?;
    let subs = fs.subvolumes().ok()?;
    let sub = subs.iter().find(|s| s.id == root)?;
    let (parent, name) = fs
        .inode_refs(crate::fs::InodeId { subvol: root, ino })
        .ok()?
        .into_iter()
        .next()?;
    let dir = fs.dir_path(root, parent).ok()?;
    let mut p = b"/".to_vec();
    for part in [&sub.path, &dir, &name] {
        if !part.is_empty() {
            if p.len() > 1 {
                p.push(b'/');
            }
            p.extend_from_slice(part);
        }
    }
    Some(String::from_utf8_lossy(&p).into_owned())
}

/// (root, inode) of the first inline EXTENT_DATA_REF of the data extent
/// record `k`.
fn first_data_ref(k: &Key, d: &[u8]) -> Option<(u64, u64)> {
    let (item, _, refs) = ExtentRecord::split(k, d).ok()?;
    if item.is_tree_block() {
        return None;
    }
    refs.map_while(|r| r.ok()).find_map(|r| match r {
        InlineRef::ExtentData(d) => Some((d.root, d.objectid)),
        _ => None,
    })
}
