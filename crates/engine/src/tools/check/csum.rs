//! Data checksums (progs' `check_csums` and the csum part of
//! `process_file_extent`): every written sector of a file with checksums
//! has one (a read of it gets EIO otherwise), no file without checksums
//! has any, every checksum lies in a data extent (of the extent tree, or
//! of an unreplayed log), the written extents a log holds have checksums
//! for after its replay (in the log or the csum tree), and with
//! `check_data_csum` every sector's data matches its checksum on every
//! copy.

use super::extents::ExtentIndex;
use super::{CheckOptions, Problems};
use crate::ctree::{for_each_item, Tree};
use crate::fs::Filesystem;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{FileExtent, FileExtentKind, InodeItem, RootItem};
use ubtrfs_format::Key;

/// The data sectors files want checksums for, and those they want none
/// for, from the inode checks: start -> (end, where).
#[derive(Default)]
pub(crate) struct CsumWant {
    pub with: BTreeMap<u64, (u64, String)>,
    pub without: BTreeMap<u64, (u64, String)>,
}

impl CsumWant {
    /// Adds what another subvolume's files want.
    pub(crate) fn merge(&mut self, other: CsumWant) {
        for (s, (e, here)) in other.with {
            self.add(s, e, true, || here);
        }
        for (s, (e, here)) in other.without {
            self.add(s, e, false, || here);
        }
    }

    pub(crate) fn add(&mut self, start: u64, end: u64, sums: bool, here: impl FnOnce() -> String) {
        let m = if sums {
            &mut self.with
        } else {
            &mut self.without
        };
        let w = m.entry(start).or_insert_with(|| (end, here()));
        w.0 = w.0.max(end);
    }
}

/// Most data read at once when verifying (one csum item covers less).
const VERIFY_CHUNK: u64 = 16 << 20;

/// Checks the csum tree against what files want; returns the bytes of
/// checksums. Verified data bytes are added to `verified`.
pub(crate) fn check(
    fs: &Filesystem,
    ix: &ExtentIndex,
    want: &CsumWant,
    opts: &CheckOptions,
    p: &mut Problems,
    verified: &mut u64,
) -> u64 {
    let info = &fs.info;
    let ss = info.sectorsize as u64;
    let cs = info.csum_type.size() as u64;
    let Ok(Some(t)) = fs.tree_opt(CSUM_TREE_OBJECTID) else {
        if !want.with.is_empty() {
            p.add(
                "root tree",
                "no csum tree, but files have data with checksums",
            );
        }
        return 0;
    };
    // Runs of sectors with checksums, merged: start -> end.
    let mut have: BTreeMap<u64, u64> = BTreeMap::new();
    let mut run: Option<(u64, u64)> = None;
    let mut bytes = 0u64;
    let lo = Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, 0);
    let hi = Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, u64::MAX);
    let mut done = 0u64;
    let r = for_each_item(info, t, lo, hi, |k, d| {
        let here = || format!("csum tree key {k}");
        if !(d.len() as u64).is_multiple_of(cs) {
            p.add(
                here(),
                format!("{} bytes, not a whole number of checksums", d.len()),
            );
        }
        if k.offset % ss != 0 {
            p.add(here(), "not at a sector boundary");
        }
        bytes += d.len() as u64;
        let end = k.offset.saturating_add(d.len() as u64 / cs * ss);
        run = match run {
            Some((s, e)) if k.offset < e => {
                p.add(
                    here(),
                    format!("overlaps the item before, which ends at {e}"),
                );
                Some((s, e.max(end)))
            }
            Some((s, e)) if k.offset == e => Some((s, end)),
            Some((s, e)) => {
                have.insert(s, e);
                Some((k.offset, end))
            }
            None => Some((k.offset, end)),
        };
        if opts.check_data_csum {
            *verified += verify_item(fs, k.offset, d, p);
            done += d.len() as u64 / cs * ss;
            p.progress("data verified (bytes)", done);
        }
        Ok(ControlFlow::Continue(()))
    });
    if let Some((s, e)) = run {
        have.insert(s, e);
    }
    if let Err(e) = r {
        p.add("csum tree", format!("not read whole: {e}"));
        return bytes;
    }
    let covered = |s: u64, e: u64| have.range(..=s).next_back().is_some_and(|(_, &he)| he >= e);
    // Data the repair points at another extent is judged there.
    let moved = |s: u64, e: u64| match ix.repointed.range(..=s).next_back() {
        Some((&from, &(to, len))) if e <= from + len => (s - from + to, e - from + to),
        _ => (s, e),
    };
    for (&s, (e, here)) in &want.with {
        let (s, e) = moved(s, *e);
        if !covered(s, e) {
            p.add(
                here,
                format!("data [{s}, {e}) lacks checksums (some csum missing)"),
            );
        }
    }
    for (&s, (e, here)) in &want.without {
        let any = have.range(..*e).next_back().is_some_and(|(_, &he)| he > s);
        if any {
            p.add(
                here,
                format!("a file without checksums has checksums in [{s}, {e})"),
            );
        }
    }
    // Every run of checksums lies in data extents: those of the extent
    // tree, and those an unreplayed log refers to (replay adds them).
    let mut extents: BTreeMap<u64, u64> = ix
        .extents
        .iter()
        .filter(|(_, x)| x.level.is_none())
        .map(|(&s, x)| (s, x.len))
        .chain(ix.made_data.iter().copied())
        .collect();
    let log = log_data(fs, p);
    extents.extend(log.extents.iter().copied());
    // What the log's files want: after replay their data must have
    // checksums, from the log's own items or the csum tree's.
    let log_covered = |s: u64, e: u64| {
        let mut at = s;
        while at < e {
            let run = [&have, &log.sums]
                .iter()
                .filter_map(|m| {
                    m.range(..=at)
                        .next_back()
                        .filter(|(_, &he)| he > at)
                        .map(|(_, &he)| he)
                })
                .max();
            match run {
                Some(he) => at = he,
                None => return false,
            }
        }
        true
    };
    for (s, e, here) in &log.wanted {
        if !log_covered(*s, *e) {
            p.add(
                here,
                format!("data [{s}, {e}) has no checksums in the log or the csum tree (replay would leave it unreadable)"),
            );
        }
    }
    for (&s, &e) in &have {
        let mut at = s;
        while at < e {
            let ext = extents
                .range(..=at)
                .next_back()
                .filter(|(&es, &len)| es.saturating_add(len) > at);
            match ext {
                Some((&es, &len)) => at = es + len,
                None => {
                    let next = extents.range(at..).next().map_or(e, |(&n, _)| n.min(e));
                    p.add(
                        "csum tree",
                        format!("checksums for [{at}, {next}) with no data extent there"),
                    );
                    at = next.max(at + ss);
                }
            }
        }
    }
    bytes
}

/// What an unreplayed log holds of data: the extents its file items
/// refer to (start -> length), the sectors its written extents of files
/// with checksums want them for (start, end, where), and the runs its own
/// checksum items cover (start -> end).
#[derive(Default)]
struct LogData {
    extents: Vec<(u64, u64)>,
    wanted: Vec<(u64, u64, String)>,
    sums: BTreeMap<u64, u64>,
}

fn log_data(fs: &Filesystem, p: &mut Problems) -> LogData {
    let sb = &fs.info.sb;
    let mut out = LogData::default();
    if sb.log_root == 0 {
        return out;
    }
    let cs = fs.info.csum_type.size() as u64;
    let ss = fs.info.sectorsize as u64;
    let mut logs = Vec::new();
    let r = for_each_item(&fs.info, Tree::log_root(sb), Key::MIN, Key::MAX, |k, d| {
        if k.item_type == ROOT_ITEM {
            match RootItem::parse(d) {
                Ok(r) => logs.push((k.offset, Tree::of_root_item(TREE_LOG_OBJECTID, &r))),
                Err(e) => p.add(format!("log root tree key {k}"), format!("ROOT_ITEM: {e}")),
            }
        }
        Ok(ControlFlow::Continue(()))
    });
    if let Err(e) = r {
        p.add("log root tree", format!("not read whole: {e}"));
    }
    for (subvol, t) in logs {
        let mut nodatasum = (0u64, false);
        let r = for_each_item(&fs.info, t, Key::MIN, Key::MAX, |k, d| {
            match k.item_type {
                INODE_ITEM => {
                    let flags = InodeItem::parse(d).map_or(0, |i| i.flags);
                    nodatasum = (k.objectid, flags & INODE_NODATASUM != 0);
                }
                EXTENT_CSUM if k.objectid == EXTENT_CSUM_OBJECTID => {
                    let end = k.offset.saturating_add(d.len() as u64 / cs * ss);
                    let e = out.sums.entry(k.offset).or_insert(end);
                    *e = (*e).max(end);
                }
                EXTENT_DATA => {
                    let Ok(fe) = FileExtent::parse(d) else {
                        return Ok(ControlFlow::Continue(()));
                    };
                    if let FileExtentKind::Extent {
                        prealloc,
                        disk_bytenr,
                        disk_num_bytes,
                        ..
                    } = fe.kind
                    {
                        if disk_bytenr != 0 {
                            out.extents.push((disk_bytenr, disk_num_bytes));
                        }
                        let sums = nodatasum != (k.objectid, true);
                        if let (false, true, Ok(Some((s, e)))) = (prealloc, sums, fe.csum_range()) {
                            let here = format!("log tree of subvolume {subvol} key {k}");
                            out.wanted.push((s, e, here));
                        }
                    }
                }
                _ => {}
            }
            Ok(ControlFlow::Continue(()))
        });
        if let Err(e) = r {
            p.add(
                format!("log tree of subvolume {subvol}"),
                format!("not read whole: {e}"),
            );
        }
    }
    out
}

/// Reads every copy of the sectors a csum item covers and compares;
/// returns the bytes read.
fn verify_item(fs: &Filesystem, logical: u64, sums: &[u8], p: &mut Problems) -> u64 {
    let info = &fs.info;
    let ss = info.sectorsize as u64;
    let cs = info.csum_type.size();
    let n = (sums.len() / cs) as u64;
    let mut read = 0u64;
    let mut first = 0u64;
    while first < n {
        let count = (n - first).min(VERIFY_CHUNK / ss);
        let at = logical + first * ss;
        let mut buf = vec![0u8; (count * ss) as usize];
        let copies = info.num_copies(at).unwrap_or(1);
        for m in 0..copies {
            if let Err(e) = info.read_copy(at, &mut buf, m) {
                p.add(format!("data at {at}"), format!("copy {m}: {e}"));
                continue;
            }
            read += buf.len() as u64;
            for i in 0..count {
                let sector = &buf[(i * ss) as usize..((i + 1) * ss) as usize];
                let want = &sums[((first + i) as usize) * cs..((first + i + 1) as usize) * cs];
                if info.csum_type.compute(sector)[..cs] != *want {
                    p.add(
                        format!("data sector {}", at + i * ss),
                        format!("copy {m}: checksum does not match"),
                    );
                }
            }
        }
        first += count;
    }
    read
}
