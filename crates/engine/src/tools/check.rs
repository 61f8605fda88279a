//! A small `btrfs check` for images the write engine made (tests and
//! crash tests): every tree reachable from the superblock is walked and
//! its structure checked, and the extent tree, block group usage, chunks,
//! device extents and the free-space tree are checked against what the
//! walk found.
//!
//! Checked:
//!
//! * every block: checksum, bytenr, fsid (on every copy, and the copies
//!   equal), owner, generation not after the superblock's, keys strictly
//!   sorted, not empty unless a root leaf, levels one less per step down,
//!   parent keys and generations equal to the children's;
//! * no block reached twice (images without snapshots);
//! * the extent tree: exactly one skinny METADATA_ITEM, with one tree
//!   block reference from its owner, for every reachable block, and no
//!   other metadata extent; extents inside a block group of their kind and
//!   not overlapping;
//! * block groups: `used` equals the extents in them, the superblock's
//!   bytes_used their sum, one chunk per block group and back;
//! * device extents: one per chunk stripe, and DEV_ITEM bytes_used;
//! * the free-space tree (when enabled): per block group, exactly the
//!   complement of the extents, and the right extent_count;
//! * data checksums: every sector a written extent of a file with data
//!   checksums refers to has one in the csum tree (what the kernel's
//!   reads need: it answers EIO where one is missing, and btrfs check
//!   says "some csum missing").

use crate::ctree::{for_each_item, Tree};
use crate::disk_io::FsInfo;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::io::dev::{BlockDev, MemDev};
use crate::io::device::Device;
use crate::tree::block::BlockExpect;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{
    BlockGroupItem, ChunkItem, DevExtent, DevItem, ExtentRecord, FileExtent, FileExtentKind,
    FreeSpaceInfo, InlineRef, InodeItem,
};
use ubtrfs_format::{Key, Superblock};

/// Most problems listed in the error.
const MAX_PROBLEMS: usize = 40;

/// What a clean check saw.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub generation: u64,
    /// Trees walked: id -> (root bytenr, level).
    pub trees: BTreeMap<u64, (u64, u8)>,
    /// Tree blocks reachable.
    pub blocks: usize,
}

/// Checks the filesystem in `image` (one device's bytes).
pub fn check_consistency(image: &[u8]) -> Result<CheckReport> {
    check_dev(Arc::new(MemDev::from_bytes(image.to_vec())))
}

/// Checks the filesystem on one device.
pub fn check_dev(dev: Arc<dyn BlockDev>) -> Result<CheckReport> {
    let d = Device::from_dev(Path::new("image"), dev)?;
    let fs = Filesystem::from_devices(vec![d], 16 << 20)?;
    check_filesystem(&fs)
}

struct Problems(Vec<String>, usize);

impl Problems {
    fn add(&mut self, s: String) {
        if self.0.len() < MAX_PROBLEMS {
            self.0.push(s);
        }
        self.1 += 1;
    }
}

/// One reachable tree block.
#[derive(Debug, Clone, Copy)]
struct Block {
    level: u8,
    owner: u64,
}

/// Checks an opened filesystem; Corrupt listing the problems found.
pub fn check_filesystem(fs: &Filesystem) -> Result<CheckReport> {
    let info = &fs.info;
    let sb = &info.sb;
    let mut p = Problems(Vec::new(), 0);
    let mut report = CheckReport {
        generation: sb.generation,
        ..Default::default()
    };
    let trees = all_trees(fs)?;
    let mut blocks: BTreeMap<u64, Block> = BTreeMap::new();
    for t in &trees {
        report.trees.insert(t.id, (t.bytenr, t.level));
        walk_tree(info, t, &mut blocks, &mut p)?;
    }
    report.blocks = blocks.len();
    let (chunks, dev_items) = read_chunk_tree(info, trees[1])?;
    let (groups, extents) = check_extent_tree(fs, &blocks, &mut p)?;
    check_block_groups(sb, &groups, &extents, &chunks, &mut p);
    check_dev_extents(fs, &chunks, &dev_items, &mut p)?;
    if sb.compat_ro_flags & COMPAT_RO_FREE_SPACE_TREE != 0 {
        check_free_space_tree(fs, &groups, &extents, &mut p)?;
    }
    check_data_csums(fs, &trees, &mut p)?;
    let (reports, _) = info.take_reports();
    for r in reports {
        p.add(format!("read: {r}"));
    }
    if p.1 > 0 {
        let more = if p.1 > p.0.len() {
            format!("\n... and {} more", p.1 - p.0.len())
        } else {
            String::new()
        };
        return Err(Error::corrupt(
            format!("check (generation {})", sb.generation),
            format!("{} problems:\n{}{more}", p.1, p.0.join("\n")),
        ));
    }
    Ok(report)
}

/// Block groups: start -> (length, item).
type Groups = BTreeMap<u64, (u64, BlockGroupItem)>;
/// Extents: start -> (length, block group flag wanted).
type Extents = BTreeMap<u64, (u64, u64)>;

/// Every tree: root and chunk from the superblock (in that order), the
/// rest from ROOT_ITEMs.
fn all_trees(fs: &Filesystem) -> Result<Vec<Tree>> {
    let sb = &fs.info.sb;
    let mut trees = vec![fs.root_tree, Tree::chunk(sb)];
    for_each_item(&fs.info, fs.root_tree, Key::MIN, Key::MAX, |k, _| {
        if k.item_type == ROOT_ITEM {
            if let Some(t) = fs.tree_opt(k.objectid)? {
                trees.push(t);
            }
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(trees)
}

/// The chunks and device items of the chunk tree.
fn read_chunk_tree(
    info: &FsInfo,
    chunk_tree: Tree,
) -> Result<(BTreeMap<u64, ChunkItem>, BTreeMap<u64, DevItem>)> {
    let mut chunks: BTreeMap<u64, ChunkItem> = BTreeMap::new();
    let mut dev_items: BTreeMap<u64, DevItem> = BTreeMap::new();
    for_each_item(info, chunk_tree, Key::MIN, Key::MAX, |k, d| {
        match k.item_type {
            CHUNK_ITEM => {
                chunks.insert(
                    k.offset,
                    ChunkItem::parse(d).map_err(|e| Error::format(format!("chunk {k}"), e))?,
                );
            }
            DEV_ITEM => {
                let di = DevItem::parse(d).map_err(|e| Error::format(format!("dev {k}"), e))?;
                dev_items.insert(di.devid, di);
            }
            _ => {}
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok((chunks, dev_items))
}

/// The extent tree: block groups and extents read, and every tree block
/// (`blocks`, from the tree walks) with one METADATA_ITEM referenced by
/// its owner.
fn check_extent_tree(
    fs: &Filesystem,
    blocks: &BTreeMap<u64, Block>,
    p: &mut Problems,
) -> Result<(Groups, Extents)> {
    let info = &fs.info;
    let extent_tree = fs.tree(EXTENT_TREE_OBJECTID)?;
    let ns = info.nodesize as u64;
    let mut groups = Groups::new();
    let mut extents = Extents::new();
    let mut meta_refs: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut seen_meta: BTreeSet<u64> = BTreeSet::new();
    for_each_item(info, extent_tree, Key::MIN, Key::MAX, |k, d| {
        match k.item_type {
            BLOCK_GROUP_ITEM => match BlockGroupItem::parse(d) {
                Ok(bg) => {
                    groups.insert(k.objectid, (k.offset, bg));
                }
                Err(e) => p.add(format!("block group {k}: {e}")),
            },
            METADATA_ITEM => {
                let rec = match ExtentRecord::parse(&k, d) {
                    Ok(r) => r,
                    Err(e) => {
                        p.add(format!("extent item {k}: {e}"));
                        return Ok(ControlFlow::Continue(()));
                    }
                };
                seen_meta.insert(k.objectid);
                let want = match blocks.get(&k.objectid) {
                    Some(b) => {
                        if b.level as u64 != k.offset {
                            p.add(format!(
                                "extent item {k}: the block is at level {}",
                                b.level
                            ));
                        }
                        if b.owner == CHUNK_TREE_OBJECTID {
                            BG_SYSTEM
                        } else {
                            BG_METADATA
                        }
                    }
                    None => {
                        p.add(format!("extent item {k}: no tree reaches this block"));
                        BG_METADATA
                    }
                };
                if !rec.item.is_tree_block() {
                    p.add(format!("extent item {k}: flags {:#x}", rec.item.flags));
                }
                if rec.item.refs != 1 {
                    p.add(format!("extent item {k}: refs {}", rec.item.refs));
                }
                for r in rec.refs {
                    match r {
                        InlineRef::TreeBlock { root } => {
                            meta_refs.entry(k.objectid).or_default().push(root)
                        }
                        other => p.add(format!("extent item {k}: unexpected ref {other:?}")),
                    }
                }
                if extents.insert(k.objectid, (ns, want)).is_some() {
                    p.add(format!("extent {}: two extent items", k.objectid));
                }
            }
            EXTENT_ITEM => {
                match ExtentRecord::parse(&k, d) {
                    Ok(r) if r.item.is_tree_block() => {
                        p.add(format!("extent item {k}: not skinny"));
                    }
                    Ok(_) => {}
                    Err(e) => p.add(format!("extent item {k}: {e}")),
                }
                if extents.insert(k.objectid, (k.offset, BG_DATA)).is_some() {
                    p.add(format!("extent {}: two extent items", k.objectid));
                }
            }
            TREE_BLOCK_REF => meta_refs.entry(k.objectid).or_default().push(k.offset),
            _ => {}
        }
        Ok(ControlFlow::Continue(()))
    })?;
    for (&b, blk) in blocks {
        if !seen_meta.contains(&b) {
            p.add(format!(
                "tree block {b} (tree {}, level {}): no METADATA_ITEM",
                blk.owner, blk.level
            ));
        }
        let refs = meta_refs.get(&b).map(Vec::as_slice).unwrap_or(&[]);
        if seen_meta.contains(&b) && refs != [blk.owner] {
            p.add(format!(
                "tree block {b} of tree {}: references from {refs:?}",
                blk.owner
            ));
        }
    }
    Ok((groups, extents))
}

/// Extents within block groups of their kind, not overlapping; each
/// group's used bytes, its chunk, and the superblock's bytes_used.
fn check_block_groups(
    sb: &Superblock,
    groups: &Groups,
    extents: &Extents,
    chunks: &BTreeMap<u64, ChunkItem>,
    p: &mut Problems,
) {
    let mut used: BTreeMap<u64, u64> = groups.keys().map(|&s| (s, 0)).collect();
    let mut last_end = 0u64;
    for (&s, &(len, kind)) in extents {
        if s < last_end {
            p.add(format!("extent {s}+{len} overlaps the one before"));
        }
        last_end = last_end.max(s + len);
        match groups.range(..=s).next_back() {
            Some((&gs, (glen, bg))) if s + len <= gs + glen => {
                if bg.flags & kind == 0 {
                    p.add(format!(
                        "extent {s}+{len} in block group {gs} of type {:#x}",
                        bg.flags
                    ));
                }
                *used.get_mut(&gs).unwrap() += len;
            }
            _ => p.add(format!("extent {s}+{len} is in no block group")),
        }
    }
    let mut total = 0;
    for (&gs, (glen, bg)) in groups {
        total += bg.used;
        if used[&gs] != bg.used {
            p.add(format!(
                "block group {gs}: used {} but its extents make {}",
                bg.used, used[&gs]
            ));
        }
        match chunks.get(&gs) {
            Some(c) if c.length == *glen && c.chunk_type == bg.flags => {}
            Some(c) => p.add(format!(
                "block group {gs}+{glen} {:#x}: chunk of {} bytes, type {:#x}",
                bg.flags, c.length, c.chunk_type
            )),
            None => p.add(format!("block group {gs}: no chunk")),
        }
    }
    for &cs in chunks.keys() {
        if !groups.contains_key(&cs) {
            p.add(format!("chunk {cs}: no block group"));
        }
    }
    if total != sb.bytes_used {
        p.add(format!(
            "superblock bytes_used {} but block groups use {total}",
            sb.bytes_used
        ));
    }
}

fn walk_tree(
    info: &FsInfo,
    t: &Tree,
    blocks: &mut BTreeMap<u64, Block>,
    p: &mut Problems,
) -> Result<()> {
    let name = t.describe();
    let mut stack = vec![(
        t.bytenr,
        BlockExpect {
            level: Some(t.level),
            generation: Some(t.generation),
            first_key: None,
        },
        true,
    )];
    let mut buf = vec![0u8; info.nodesize as usize];
    while let Some((bytenr, expect, is_root)) = stack.pop() {
        let tb = info.read_tree_block(bytenr, expect)?;
        let h = tb.header;
        let here = format!("{name}: block {bytenr} (level {})", h.level);
        for m in 0..info.num_copies(bytenr)? {
            match info.read_copy(bytenr, &mut buf, m) {
                Ok(()) if buf[..] == *tb.bytes() => {}
                Ok(()) => p.add(format!("{here}: copy {m} differs")),
                Err(e) => p.add(format!("{here}: copy {m}: {e}")),
            }
        }
        if blocks
            .insert(
                bytenr,
                Block {
                    level: h.level,
                    owner: h.owner,
                },
            )
            .is_some()
        {
            p.add(format!("{here}: reached twice"));
            continue;
        }
        if h.owner != t.id {
            p.add(format!("{here}: owner {}", h.owner));
        }
        if h.generation == 0 || h.generation > info.sb.generation {
            p.add(format!(
                "{here}: generation {} (superblock {})",
                h.generation, info.sb.generation
            ));
        }
        let node = tb.node();
        let n = node.nritems();
        if n == 0 && !(is_root && h.level == 0) {
            p.add(format!("{here}: empty"));
        }
        for i in 1..n {
            if node.key(i - 1) >= node.key(i) {
                p.add(format!(
                    "{here}: key {} at slot {i} not above {}",
                    node.key(i),
                    node.key(i - 1)
                ));
            }
        }
        if h.level > 0 {
            for i in (0..n).rev() {
                let kp = node.key_ptr(i);
                stack.push((
                    kp.blockptr,
                    BlockExpect {
                        level: Some(h.level - 1),
                        generation: Some(kp.generation),
                        first_key: Some(kp.key),
                    },
                    false,
                ));
            }
        }
    }
    Ok(())
}

fn check_dev_extents(
    fs: &Filesystem,
    chunks: &BTreeMap<u64, ChunkItem>,
    dev_items: &BTreeMap<u64, DevItem>,
    p: &mut Problems,
) -> Result<()> {
    let Some(dev_tree) = fs.tree_opt(DEV_TREE_OBJECTID)? else {
        p.add("no dev tree".into());
        return Ok(());
    };
    // (devid, physical) -> (chunk, length)
    let mut have: BTreeMap<(u64, u64), (u64, u64)> = BTreeMap::new();
    for_each_item(&fs.info, dev_tree, Key::MIN, Key::MAX, |k, d| {
        if k.item_type == DEV_EXTENT {
            match DevExtent::parse(d) {
                Ok(de) => {
                    have.insert((k.objectid, k.offset), (de.chunk_offset, de.length));
                }
                Err(e) => p.add(format!("dev extent {k}: {e}")),
            }
        }
        Ok(ControlFlow::Continue(()))
    })?;
    let mut per_dev: BTreeMap<u64, u64> = BTreeMap::new();
    for (&(devid, _), &(_, len)) in &have {
        *per_dev.entry(devid).or_default() += len;
    }
    let mut want = BTreeSet::new();
    for (&logical, c) in chunks {
        let mirrored = c.chunk_type & (BG_RAID0 | BG_RAID10 | BG_RAID5 | BG_RAID6) == 0;
        for s in &c.stripes {
            want.insert((s.devid, s.offset));
            match have.get(&(s.devid, s.offset)) {
                Some(&(co, len)) if co == logical && (!mirrored || len == c.length) => {}
                Some(&(co, len)) => p.add(format!(
                    "chunk {logical}: dev extent {}:{} is for chunk {co}, {len} bytes",
                    s.devid, s.offset
                )),
                None => p.add(format!(
                    "chunk {logical}: no dev extent at {}:{}",
                    s.devid, s.offset
                )),
            }
        }
    }
    for k in have.keys() {
        if !want.contains(k) {
            p.add(format!("dev extent {}:{}: no chunk stripe", k.0, k.1));
        }
    }
    for (devid, di) in dev_items {
        let u = per_dev.get(devid).copied().unwrap_or(0);
        if di.bytes_used != u {
            p.add(format!(
                "device {devid}: bytes_used {} but dev extents make {u}",
                di.bytes_used
            ));
        }
    }
    Ok(())
}

/// Free ranges of `[start, end)` given the extents (sorted) in it.
fn complement(start: u64, end: u64, extents: &BTreeMap<u64, (u64, u64)>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut c = start;
    for (&s, &(l, _)) in extents.range(start..end) {
        if s > c {
            out.push((c, s - c));
        }
        c = c.max(s + l);
    }
    if c < end {
        out.push((c, end - c));
    }
    out
}

/// Every data sector that a written extent of a file with checksums
/// refers to has a checksum in the csum tree (a compressed extent's
/// sectors on disk all do).
fn check_data_csums(fs: &Filesystem, trees: &[Tree], p: &mut Problems) -> Result<()> {
    let info = &fs.info;
    let ss = info.sectorsize as u64;
    let cs = info.csum_type.size() as u64;
    let all = (Key::new(0, 0, 0), Key::new(u64::MAX, u8::MAX, u64::MAX));
    // Sectors wanted: start -> (end, where).
    let mut wanted: BTreeMap<u64, (u64, String)> = BTreeMap::new();
    for t in trees {
        if t.id != FS_TREE_OBJECTID && !(FIRST_FREE_OBJECTID..=LAST_FREE_OBJECTID).contains(&t.id) {
            continue;
        }
        let mut nodatasum = (0u64, false);
        for_each_item(info, *t, all.0, all.1, |k, d| {
            match k.item_type {
                INODE_ITEM => {
                    let flags = InodeItem::parse(d).map_or(0, |i| i.flags);
                    nodatasum = (k.objectid, flags & INODE_NODATASUM != 0);
                }
                EXTENT_DATA if nodatasum != (k.objectid, true) => {
                    let Ok(fe) = FileExtent::parse(d) else {
                        return Ok(ControlFlow::Continue(()));
                    };
                    let written = matches!(
                        fe.kind,
                        FileExtentKind::Extent {
                            prealloc: false,
                            ..
                        }
                    );
                    if let (true, Ok(Some((s, e)))) = (written, fe.csum_range()) {
                        let here =
                            format!("{} inode {} offset {}", t.describe(), k.objectid, k.offset);
                        let w = wanted.entry(s).or_insert((e, here));
                        w.0 = w.0.max(e);
                    }
                }
                _ => {}
            }
            Ok(ControlFlow::Continue(()))
        })?;
    }
    if wanted.is_empty() {
        return Ok(());
    }
    // Sectors with checksums, merged: start -> end.
    let mut have: BTreeMap<u64, u64> = BTreeMap::new();
    let csum_root = trees.iter().find(|t| t.id == CSUM_TREE_OBJECTID);
    if let Some(t) = csum_root {
        let lo = Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, 0);
        let hi = Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, u64::MAX);
        let mut run: Option<(u64, u64)> = None;
        for_each_item(info, *t, lo, hi, |k, d| {
            let end = k.offset.saturating_add(d.len() as u64 / cs * ss);
            run = match run {
                Some((s, e)) if k.offset <= e => Some((s, e.max(end))),
                Some((s, e)) => {
                    have.insert(s, e);
                    Some((k.offset, end))
                }
                None => Some((k.offset, end)),
            };
            Ok(ControlFlow::Continue(()))
        })?;
        if let Some((s, e)) = run {
            have.insert(s, e);
        }
    }
    for (s, (e, here)) in wanted {
        // The run at or before `s` must reach `e`.
        let covered = have.range(..=s).next_back().is_some_and(|(_, &he)| he >= e);
        if !covered {
            p.add(format!(
                "{here}: data [{s}, {e}) lacks checksums (btrfs check: some csum missing)"
            ));
        }
    }
    Ok(())
}

fn check_free_space_tree(
    fs: &Filesystem,
    groups: &BTreeMap<u64, (u64, BlockGroupItem)>,
    extents: &BTreeMap<u64, (u64, u64)>,
    p: &mut Problems,
) -> Result<()> {
    let Some(fst) = fs.tree_opt(FREE_SPACE_TREE_OBJECTID)? else {
        p.add("free-space tree enabled but missing".into());
        return Ok(());
    };
    let ss = fs.info.sectorsize as u64;
    let mut infos: BTreeMap<u64, (u64, FreeSpaceInfo)> = BTreeMap::new();
    // Free sectors as runs, per group start.
    let mut free: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    let group_of = |s: u64| {
        groups
            .range(..=s)
            .next_back()
            .filter(|(&gs, (gl, _))| s < gs + gl)
            .map(|(&gs, _)| gs)
    };
    for_each_item(&fs.info, fst, Key::MIN, Key::MAX, |k, d| {
        match k.item_type {
            FREE_SPACE_INFO => match FreeSpaceInfo::parse(d) {
                Ok(fi) => {
                    infos.insert(k.objectid, (k.offset, fi));
                }
                Err(e) => p.add(format!("free space {k}: {e}")),
            },
            FREE_SPACE_EXTENT | FREE_SPACE_BITMAP => {
                let Some(g) = group_of(k.objectid) else {
                    p.add(format!("free space {k}: in no block group"));
                    return Ok(ControlFlow::Continue(()));
                };
                let runs = free.entry(g).or_default();
                let mut push = |s: u64, l: u64| match runs.last_mut() {
                    Some((ps, pl)) if *ps + *pl == s => *pl += l,
                    _ => runs.push((s, l)),
                };
                if k.item_type == FREE_SPACE_EXTENT {
                    push(k.objectid, k.offset);
                } else {
                    for i in 0..k.offset / ss {
                        let byte = d.get((i / 8) as usize).copied().unwrap_or(0);
                        if byte & (1 << (i % 8)) != 0 {
                            push(k.objectid + i * ss, ss);
                        }
                    }
                }
            }
            _ => p.add(format!("free-space tree: unexpected item {k}")),
        }
        Ok(ControlFlow::Continue(()))
    })?;
    // Superblock copies inside chunks are neither used nor free.
    let mut taken = extents.clone();
    for &gs in groups.keys() {
        if let Some((logical, chunk)) = fs.info.chunks.lookup(gs) {
            for (s, l) in crate::io::volumes::super_stripes(logical, chunk) {
                taken.insert(s, (l, 0));
            }
        }
    }
    for (&gs, (glen, _)) in groups {
        let want = complement(gs, gs + glen, &taken);
        let have = free.remove(&gs).unwrap_or_default();
        match infos.remove(&gs) {
            Some((l, fi)) => {
                if l != *glen {
                    p.add(format!("block group {gs}: FREE_SPACE_INFO length {l}"));
                }
                if fi.extent_count as usize != want.len() {
                    p.add(format!(
                        "block group {gs}: extent_count {} but {} free extents",
                        fi.extent_count,
                        want.len()
                    ));
                }
            }
            None => p.add(format!("block group {gs}: no FREE_SPACE_INFO")),
        }
        if have != want {
            let show = |v: &[(u64, u64)]| {
                let s: Vec<String> = v.iter().take(8).map(|(a, b)| format!("{a}+{b}")).collect();
                format!("{} ranges [{}]", v.len(), s.join(" "))
            };
            p.add(format!(
                "block group {gs}: free-space tree has {} but the extent tree leaves {}",
                show(&have),
                show(&want)
            ));
        }
    }
    for gs in infos.keys() {
        p.add(format!("FREE_SPACE_INFO {gs}: no block group"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mkfs::{make, MkfsOptions};

    #[test]
    fn fresh_mkfs_is_clean_and_damage_is_found() {
        let m = Arc::new(MemDev::new(128 << 20));
        let o = MkfsOptions {
            fsid: Some([3; 16]),
            ..Default::default()
        };
        let t = make(vec![("m".into(), m.clone())], &o).unwrap();
        drop(t);
        let img = m.snapshot();
        let r = check_consistency(&img).unwrap();
        assert!(r.blocks >= 9, "{r:?}");
        // A block group item claiming one more block used.
        let bad = {
            let dev: Arc<dyn BlockDev> = m.clone();
            let mut t = crate::tx::Trans::open_dev(vec![dev], 16 << 20).unwrap();
            let (k, mut d) = t
                .items_in(EXTENT_TREE_OBJECTID, &Key::MIN, &Key::MAX)
                .unwrap()
                .into_iter()
                .find(|(k, _)| k.item_type == BLOCK_GROUP_ITEM)
                .unwrap();
            let mut bg = BlockGroupItem::parse(&d).unwrap();
            bg.used += 4096;
            d = bg.to_bytes();
            // Written directly so that commit does not fix it again.
            t.put_item(EXTENT_TREE_OBJECTID, k, d).unwrap();
            t.alloc.groups.get_mut(&k.objectid).unwrap().used += 4096;
            t.commit().unwrap();
            m.snapshot()
        };
        let e = check_consistency(&bad).unwrap_err().to_string();
        assert!(e.contains("used"), "{e}");
    }
}
