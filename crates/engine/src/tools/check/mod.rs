//! `ubtrfs check`: the checks of `btrfs check`'s original mode
//! (btrfs-progs check/main.c), read-only, over any image: ours, the
//! kernel's, mkfs.btrfs's, with snapshots and reflinks.
//!
//! One pass per concern, each in its own file:
//!
//! * [`superblock`]: every superblock copy, against the one in use;
//! * [`blocks`]: every tree block reachable from the root tree, walked
//!   once however many trees share it: checksum, bytenr, fsid, level,
//!   keys, generations (one good copy is read, as btrfs check reads it: a
//!   bad first copy is a problem; comparing every copy is `scrub`'s job);
//!   and the references each block makes
//!   (to child blocks, to data extents), as the kernel records them: by
//!   the block's owner, or by its bytenr when it has FULL_BACKREF;
//! * [`extents`]: the extent tree against those references (every kind,
//!   inline and keyed, with counts), lengths and levels, block groups'
//!   `used` and the superblock's `bytes_used`;
//! * [`volumes`]: chunks, block groups, device extents and device items;
//! * [`free_space`]: the free-space tree against the extent tree;
//! * [`fs_tree`]: each subvolume's inodes: items present, nlink against
//!   the names, DIR_ITEM / DIR_INDEX / INODE_REF agreeing both ways,
//!   directory and file sizes, nbytes, file extents, orphans, xattrs;
//! * [`roots`]: ROOT_REF / ROOT_BACKREF and the entries naming each
//!   subvolume, orphaned subvolumes, the UUID tree;
//! * [`qgroups`]: each subvolume's quota group counts, when quotas are on;
//! * [`csum`]: every written data sector has a checksum, and with
//!   `check_data_csum` the data matches it; an unreplayed log's extents
//!   and the checksums their replay needs;
//! * [`repair`]: `--repair`, for the problems whose [`Fix`] the checks
//!   above gave.
//!
//! A problem is one line naming the tree, the key or block, and what is
//! wrong; the check goes on past it. Nothing is written.

mod blocks;
mod csum;
mod extents;
mod free_space;
mod fs_tree;
mod qgroups;
pub mod repair;
mod roots;
mod superblock;
mod volumes;

use crate::ctree::{for_each_item, Tree};
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::io::dev::{BlockDev, MemDev};
use crate::io::device::Device;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::RootItem;
use ubtrfs_format::Key;

/// Problems kept in full in a report; more are counted.
const MAX_KEPT: usize = 10_000;

/// What to check beyond the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// Read every data extent and verify it against its checksums
    /// (`--check-data-csum`).
    pub check_data_csum: bool,
}

/// One problem: where (a tree, a key, a block) and what; and how
/// `--repair` mends it, when it can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub place: String,
    pub what: String,
    pub fix: Option<Fix>,
}

/// A repair: the value a counter must take, as the check counted it from
/// what the trees hold, or an item a name lacks, made from the items that
/// agree on it ([`repair::apply`] writes them in a transaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fix {
    /// A block group item's `used`.
    BlockGroupUsed { start: u64, used: u64 },
    /// A device item's `bytes_used`.
    DeviceBytesUsed { devid: u64, used: u64 },
    /// The superblock's `bytes_used` (the commit sums the block groups).
    SuperBytesUsed,
    /// An inode's `nbytes`.
    InodeNbytes { tree: u64, ino: u64, nbytes: u64 },
    /// A directory's size.
    DirSize { tree: u64, ino: u64, size: u64 },
    /// An inode's link count.
    Nlink { tree: u64, ino: u64, nlink: u32 },
    /// An inode's generation and transid (those past the superblock's
    /// made the superblock's, as btrfs check repairs them).
    InodeGenerations {
        tree: u64,
        ino: u64,
        generation: u64,
        transid: u64,
    },
    /// An extent item's generation (the superblock's, for one past it).
    ExtentGeneration {
        key: ubtrfs_format::Key,
        generation: u64,
    },
    /// An extent item's refs: the sum of its back references' counts
    /// (before any [`Fix::DataRefCount`] of the same extent changes both).
    ExtentRefs { key: ubtrfs_format::Key, refs: u64 },
    /// A device item's total_bytes (rounded down to the sector size).
    DeviceTotalBytes { devid: u64, bytes: u64 },
    /// The superblock's num_devices: the chunk tree's device items.
    SuperNumDevices { n: u64 },
    /// The superblock's total_bytes: the device items' sum.
    SuperTotalBytes,
    /// A deleted subvolume's orphan item, so that the kernel's cleaner
    /// finishes deleting it.
    RootOrphan { id: u64 },
    /// An item nothing may hold: a free-space entry of no block group, a
    /// device extent of no chunk.
    DeleteItem { tree: u64, key: ubtrfs_format::Key },
    /// An uncompressed inline extent's ram_bytes: the bytes it holds.
    InlineRamBytes {
        tree: u64,
        key: ubtrfs_format::Key,
        ram: u64,
    },
    /// An inode's mode (the v1 space cache's inodes: a regular file; an
    /// invalid mode: the type its entries give, or its items show).
    InodeMode { tree: u64, ino: u64, mode: u32 },
    /// One item of a name that the others agree on: the DIR_ITEM or
    /// DIR_INDEX entry in `dir`, or the inode's INODE_REF.
    AddName {
        tree: u64,
        dir: u64,
        ino: u64,
        name: Vec<u8>,
        index: u64,
        ftype: u8,
        part: NamePart,
    },
    /// An entry removed from a DIR_ITEM (its name hashes elsewhere: the
    /// name's own DIR_ITEM is added where it belongs).
    DeleteDirName {
        tree: u64,
        key: ubtrfs_format::Key,
        name: Vec<u8>,
    },
    /// A DIR_INDEX of an inode whose name differs from its INODE_REF and
    /// DIR_ITEM: rewritten with that name.
    RewriteDirIndex {
        tree: u64,
        dir: u64,
        index: u64,
        ino: u64,
        name: Vec<u8>,
        ftype: u8,
    },
    /// A missing INODE_ITEM, made from what the inode's items show (as
    /// progs' repair_inode_item_missing: the mode from its entries or
    /// items, times now).
    NewInodeItem {
        tree: u64,
        ino: u64,
        mode: u32,
        size: u64,
        nbytes: u64,
        nlink: u32,
    },
    /// An inode no name reaches, linked into the subvolume's lost+found
    /// (made when missing) under its number, as progs'
    /// link_inode_to_lostfound.
    LostFound { tree: u64, ino: u64, ftype: u8 },
    /// The path of `tree` from its root to the leaf of `key` copied on
    /// write: a block on it with a generation past the superblock's gets
    /// this commit's (as do its extent item and the root item). `relax`:
    /// a block (address, level) read whatever generation its header has,
    /// the one its parent's pointer wants being wrong.
    CowBlock {
        tree: u64,
        key: ubtrfs_format::Key,
        relax: Option<(u64, u8)>,
    },
    /// A data extent's back reference counted as the file extent items
    /// make it: `delta` references added or dropped, the extent item's
    /// refs with them (the extent goes with its last).
    DataRefCount {
        bytenr: u64,
        len: u64,
        backref: crate::tx::delayed_ref::Backref,
        delta: i64,
    },
    /// Hole items where a file's extents leave gaps below its size, on a
    /// filesystem without no-holes.
    FillHoles { tree: u64, ino: u64, size: u64 },
    /// The file extent items of `inodes` (tree, inode) that point at
    /// `from`, where no extent item is, pointed at extent `to` of `len`
    /// bytes, whose item lists their references.
    RepointData {
        from: u64,
        to: u64,
        len: u64,
        inodes: Vec<(u64, u64)>,
    },
    /// An extent item for a tree block that has none (or one that does not
    /// parse, `replaces`), with the references the walk found; its space
    /// taken out of the free space first.
    NewTreeExtent {
        bytenr: u64,
        level: u8,
        refs: Vec<(crate::tx::delayed_ref::Backref, u64)>,
        replaces: Option<ubtrfs_format::Key>,
    },
    /// A block the check read mended (a leaf whose item data was out of
    /// place, [`crate::disk_io::FsInfo::mend_leaves`]; a node without its
    /// pointers to unreadable leaves, `drops`,
    /// [`crate::disk_io::FsInfo::drop_leaves`]): copied on write from every
    /// tree reaching it, so the mended copy replaces it.
    MendBlock {
        bytenr: u64,
        key: ubtrfs_format::Key,
        drops: Vec<u64>,
    },
    /// An extent item for a data extent that file extent items refer to
    /// but that has none, with the references found; its space taken out
    /// of the free space first.
    NewDataExtent {
        bytenr: u64,
        len: u64,
        refs: Vec<(crate::tx::delayed_ref::Backref, u64)>,
    },
    /// Tree block `bytenr`'s back reference that nothing makes (a leaf
    /// dropped from its parent), dropped: the extent goes with its last.
    DropTreeRef {
        bytenr: u64,
        level: u8,
        backref: crate::tx::delayed_ref::Backref,
    },
    /// Quota group counts that differ from the trees': the status marked
    /// inconsistent (every commit on a filesystem with quotas marks it:
    /// [`crate::tx::Trans::commit`]), for `btrfs quota rescan` to recount.
    QuotaStale,
    /// A root item pointed at the newer root block of its tree that the
    /// extent tree accounts for (progs' repair_root_items).
    RootBlock {
        id: u64,
        bytenr: u64,
        level: u8,
        generation: u64,
    },
}

/// Which item of a name [`Fix::AddName`] adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamePart {
    DirItem,
    DirIndex,
    InodeRef,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.place, self.what)
    }
}

/// What a check saw.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub generation: u64,
    /// Trees walked: id -> (root bytenr, level).
    pub trees: BTreeMap<u64, (u64, u8)>,
    /// Distinct tree blocks reachable.
    pub blocks: usize,
    /// Bytes of tree blocks reachable, and of them in subvolume trees and
    /// in the extent tree.
    pub tree_bytes: u64,
    pub fs_tree_bytes: u64,
    pub extent_tree_bytes: u64,
    /// Data bytes in extents, and referenced by files.
    pub data_bytes_allocated: u64,
    pub data_bytes_referenced: u64,
    /// Sectors of data with checksums, in bytes of checksums.
    pub csum_bytes: u64,
    /// Inodes checked, over all subvolumes.
    pub inodes: u64,
    /// Data bytes read and verified (`check_data_csum`).
    pub data_verified: u64,
    pub problems: Vec<Problem>,
    /// Problems found, with those not kept in `problems`.
    pub problem_count: usize,
    /// What is unusual but not wrong (the kernel mounts and reads it as
    /// it is): a stale superblock copy. Some have a fix that `--repair`
    /// makes too (mkfs.btrfs's leftover free-space entries).
    pub warnings: Vec<Problem>,
}

impl CheckReport {
    pub fn clean(&self) -> bool {
        self.problem_count == 0
    }

    /// Whether `--repair` has anything to write: a problem, or a warning
    /// with a fix.
    pub fn repairable(&self) -> bool {
        !self.clean() || self.warnings.iter().any(|w| w.fix.is_some())
    }

    /// The repairs of every problem and of the warnings that have one, or
    /// the problems `--repair` cannot mend (then nothing may be written).
    pub fn fixes(&self) -> std::result::Result<Vec<Fix>, Vec<&Problem>> {
        let cannot: Vec<&Problem> = self.problems.iter().filter(|p| p.fix.is_none()).collect();
        if !cannot.is_empty() || self.problem_count > self.problems.len() {
            return Err(cannot);
        }
        Ok(self
            .problems
            .iter()
            .chain(&self.warnings)
            .filter_map(|p| p.fix.clone())
            .collect())
    }
}

/// The problems of one check, and the progress callback.
pub(crate) struct Problems<'p> {
    kept: Vec<Problem>,
    warnings: Vec<Problem>,
    count: usize,
    progress: &'p mut dyn FnMut(&str, u64),
}

impl Problems<'_> {
    pub(crate) fn add(&mut self, place: impl Into<String>, what: impl Into<String>) {
        self.push(place.into(), what.into(), None);
    }

    /// A problem `--repair` mends with `fix`.
    pub(crate) fn add_fix(&mut self, place: impl Into<String>, what: impl Into<String>, fix: Fix) {
        self.push(place.into(), what.into(), Some(fix));
    }

    fn push(&mut self, place: String, what: String, fix: Option<Fix>) {
        // Past the list's size nothing is repaired: [`CheckReport::fixes`]
        // refuses when problems were not kept.
        if self.kept.len() < MAX_KEPT {
            self.kept.push(Problem { place, what, fix });
        }
        self.count += 1;
    }

    pub(crate) fn warn(&mut self, place: impl Into<String>, what: impl Into<String>) {
        self.push_warning(place.into(), what.into(), None);
    }

    /// A warning that `--repair` also mends, with `fix` (the check still
    /// passes without it).
    pub(crate) fn warn_fix(&mut self, place: impl Into<String>, what: impl Into<String>, fix: Fix) {
        self.push_warning(place.into(), what.into(), Some(fix));
    }

    fn push_warning(&mut self, place: String, what: String, fix: Option<Fix>) {
        // Past the list's size a warning is not shown, nor mended: the
        // next repair mends the rest.
        if self.warnings.len() < MAX_KEPT {
            self.warnings.push(Problem { place, what, fix });
        }
    }

    /// Reports `done` units of the current phase.
    pub(crate) fn progress(&mut self, phase: &str, done: u64) {
        (self.progress)(phase, done)
    }
}

/// Checks the filesystem in `image` (one device's bytes).
pub fn check_consistency(image: &[u8]) -> Result<CheckReport> {
    check_dev(Arc::new(MemDev::from_bytes(image.to_vec())))
}

/// Checks the filesystem on one device; Corrupt listing the problems.
pub fn check_dev(dev: Arc<dyn BlockDev>) -> Result<CheckReport> {
    let d = Device::from_dev(Path::new("image"), dev)?;
    let fs = Filesystem::from_devices(vec![d], 64 << 20)?;
    check_filesystem(&fs)
}

/// Checks an opened filesystem; Corrupt listing the problems found (the
/// form the engine's tests use).
pub fn check_filesystem(fs: &Filesystem) -> Result<CheckReport> {
    let r = check(fs, &CheckOptions::default(), &mut |_, _| {})?;
    if r.clean() {
        return Ok(r);
    }
    let lines: Vec<String> = r.problems.iter().take(40).map(|p| p.to_string()).collect();
    let more = if r.problem_count > lines.len() {
        format!("\n... and {} more", r.problem_count - lines.len())
    } else {
        String::new()
    };
    Err(Error::corrupt(
        format!("check (generation {})", r.generation),
        format!("{} problems:\n{}{more}", r.problem_count, lines.join("\n")),
    ))
}

/// Runs every check on `fs`. Problems are in the report; an error is only
/// for what stops the check as a whole (the root tree unreadable). When a
/// subvolume leaf does not read, the check runs once more with it taken
/// out of its parent (as the repair takes it out), so that what its loss
/// leaves is judged and mended.
/// `progress` is called with the phase's name and a count of what it has
/// done (blocks, items, inodes).
pub fn check(
    fs: &Filesystem,
    opts: &CheckOptions,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<CheckReport> {
    let sb = &fs.info.sb;
    // A leaf whose item data is out of place is read as the repair will
    // write it, so that what its mending loses (an index dropped) is found.
    fs.info.mend_leaves();
    let mut p = Problems {
        kept: Vec::new(),
        warnings: Vec::new(),
        count: 0,
        progress,
    };
    let mut report = CheckReport {
        generation: sb.generation,
        ..Default::default()
    };
    superblock::check(fs, &mut p);
    let mut roots = all_trees(fs, &mut p)?;
    roots::outdated_root_items(fs, &mut roots, &mut p);
    for (t, _) in &roots {
        report.trees.insert(t.id, (t.bytenr, t.level));
    }
    // The subvolumes' inodes are checked on other threads meanwhile, one
    // per core beside this one (measured on 2 cores and 250,000 files in
    // three trees: 1.24 s, against 1.46 s with one thread fewer): each
    // subvolume is a walk of its own, in key order, and on many files the
    // larger part of the work.
    let no_holes = sb.has_incompat(INCOMPAT_NO_HOLES);
    let mut again = false;
    let subvols: Vec<Tree> = roots
        .iter()
        .filter(|(t, item)| is_fs_tree(t.id) && item.as_ref().is_none_or(|r| r.refs > 0))
        .map(|(t, _)| *t)
        .collect();
    let results: Mutex<Vec<Option<TreeResult>>> =
        Mutex::new(subvols.iter().map(|_| None).collect());
    let next = AtomicUsize::new(0);
    let inodes_done = AtomicU64::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, subvols.len().max(1));
    let (index, walk) = std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&t) = subvols.get(i) else { break };
                let r = check_subvolume(fs, t, no_holes, &inodes_done);
                results.lock().unwrap()[i] = Some(r);
            });
        }
        let r = check_extents(fs, sb, &roots, &mut p, &mut report);
        // Leaves of subvolumes that do not read: the check runs again
        // without them (below), and sees what their loss leaves.
        if let Ok((_, w)) = &r {
            if fs.info.drop_leaves(w.unreadable_leaves.iter().cloned()) {
                again = true;
            }
        }
        // Wait for the inode checks, showing their progress.
        while next.load(Ordering::Relaxed) < subvols.len()
            || results.lock().unwrap().iter().any(Option::is_none)
        {
            p.progress("inodes", inodes_done.load(Ordering::Relaxed));
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        r
    })?;
    if again {
        return check(fs, opts, p.progress);
    }
    report.blocks = walk.blocks.len();
    let ns = fs.info.nodesize as u64;
    for b in walk.blocks.values() {
        report.tree_bytes += ns;
        if is_fs_tree(b.owner) {
            report.fs_tree_bytes += ns;
        }
        if b.owner == EXTENT_TREE_OBJECTID {
            report.extent_tree_bytes += ns;
        }
    }
    report.data_bytes_referenced = walk.data_referenced;
    let mut subvol_entries = Vec::new();
    let mut want = csum::CsumWant::default();
    for r in results.into_inner().unwrap().into_iter().flatten() {
        p.kept.extend(r.problems.kept);
        p.warnings.extend(r.problems.warnings);
        p.count += r.problems.count;
        report.inodes += r.inodes;
        subvol_entries.extend(r.entries);
        want.merge(r.want);
    }
    roots::check(fs, &roots, &subvol_entries, &mut p);
    qgroups::check(fs, &roots, &mut p);
    report.csum_bytes = csum::check(fs, &index, &want, opts, &mut p, &mut report.data_verified);
    let (reads, dropped) = fs.info.take_reports();
    for r in reads {
        p.add("read", r);
    }
    p.count += dropped;
    report.problems = p.kept;
    report.warnings = p.warnings;
    report.problem_count = p.count;
    Ok(report)
}

/// The extent tree, the walk of every block and what hangs off it:
/// extent references, chunks and devices, block groups, free space.
fn check_extents(
    fs: &Filesystem,
    sb: &ubtrfs_format::Superblock,
    roots: &[(Tree, Option<RootItem>)],
    p: &mut Problems,
    report: &mut CheckReport,
) -> Result<(extents::ExtentIndex, blocks::Walk)> {
    let index = extents::read_extent_tree(fs, p)?;
    let walk = blocks::walk(fs, roots, &index, p);
    let mut index = index;
    extents::check_refs(fs, &mut index, &walk, p, report);
    let chunks = volumes::check(fs, &index, p)?;
    extents::check_block_groups(sb, &index, &chunks, p);
    if sb.compat_ro_flags & COMPAT_RO_FREE_SPACE_TREE != 0 {
        free_space::check(fs, &index, p)?;
    }
    Ok((index, walk))
}

/// What the check of one subvolume's inodes found.
struct TreeResult {
    problems: Kept,
    inodes: u64,
    entries: Vec<fs_tree::SubvolEntry>,
    want: csum::CsumWant,
}

/// Problems of a check on another thread.
#[derive(Default)]
struct Kept {
    kept: Vec<Problem>,
    warnings: Vec<Problem>,
    count: usize,
}

/// Checks the inodes of subvolume `t` (a thread's share of the check).
fn check_subvolume(fs: &Filesystem, t: Tree, no_holes: bool, done: &AtomicU64) -> TreeResult {
    let mut last = 0u64;
    let mut progress = |_: &str, n: u64| {
        done.fetch_add(n - last, Ordering::Relaxed);
        last = n;
    };
    let mut p = Problems {
        kept: Vec::new(),
        warnings: Vec::new(),
        count: 0,
        progress: &mut progress,
    };
    let mut entries = Vec::new();
    let mut want = csum::CsumWant::default();
    // An unreadable root is the walk's to report.
    let inodes = if t.read_root(&fs.info).is_ok() {
        fs_tree::check(fs, t, no_holes, &mut entries, &mut want, &mut p)
    } else {
        0
    };
    TreeResult {
        problems: Kept {
            kept: p.kept,
            warnings: p.warnings,
            count: p.count,
        },
        inodes,
        entries,
        want,
    }
}

pub(crate) use ubtrfs_format::consts::is_fs_tree;

/// Every tree with its ROOT_ITEM: the root and chunk trees from the
/// superblock (first, without one), then one per ROOT_ITEM of the root
/// tree. A ROOT_ITEM that does not parse is a problem and no tree.
fn all_trees(fs: &Filesystem, p: &mut Problems) -> Result<Vec<(Tree, Option<RootItem>)>> {
    let sb = &fs.info.sb;
    let mut trees = vec![(fs.root_tree, None), (Tree::chunk(sb), None)];
    let r = for_each_item(&fs.info, fs.root_tree, Key::MIN, Key::MAX, |k, d| {
        if k.item_type == ROOT_ITEM {
            match RootItem::parse(d) {
                Ok(ri) => {
                    // Tree ids are unique; a relocation tree (TREE_RELOC,
                    // offset = the tree it relocates) is kept as its own.
                    trees.push((Tree::of_root_item(k.objectid, &ri), Some(ri)));
                }
                Err(e) => p.add(format!("root tree key {k}"), format!("ROOT_ITEM: {e}")),
            }
        }
        Ok(ControlFlow::Continue(()))
    });
    if let Err(e) = r {
        p.add("root tree", format!("cannot be read whole: {e}"));
    }
    Ok(trees)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mkfs::{make, MkfsOptions};
    use ubtrfs_format::items::BlockGroupItem;

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
        repair_is_all_or_nothing(&bad);
    }

    /// A leaf whose item data is out of place (the top directory's
    /// INODE_REF data 8 bytes below where it belongs, checksum redone on
    /// every copy) is read mended, and its repair, a copy on write, is all
    /// or nothing too.
    #[test]
    fn misplaced_leaf_data_is_mended() {
        use crate::io::volumes::Placement;
        use ubtrfs_format::node::{HEADER_SIZE, ITEM_SIZE};
        let m = Arc::new(MemDev::new(128 << 20));
        let o = MkfsOptions {
            fsid: Some([4; 16]),
            ..Default::default()
        };
        drop(make(vec![("m".into(), m.clone())], &o).unwrap());
        let mut img = m.snapshot();
        let (places, ns, csum) = {
            let d = Device::from_dev(Path::new("image"), m.clone()).unwrap();
            let fs = Filesystem::from_devices(vec![d], 16 << 20).unwrap();
            let t = fs.tree(FS_TREE_OBJECTID).unwrap();
            assert_eq!(t.level, 0);
            let ns = fs.info.nodesize as usize;
            let Placement::Mirrors(v) = fs.info.chunks.map(t.bytenr, ns as u64).unwrap().placement
            else {
                panic!("metadata on parity")
            };
            (v, ns, fs.info.csum_type)
        };
        for at in places.iter().map(|p| p.physical as usize) {
            let b = &mut img[at..at + ns];
            let h = HEADER_SIZE + ITEM_SIZE + 17;
            let off = u32::from_le_bytes(b[h..h + 4].try_into().unwrap()) as usize;
            let size = u32::from_le_bytes(b[h + 4..h + 8].try_into().unwrap()) as usize;
            let d = HEADER_SIZE + off;
            b.copy_within(d..d + size, d - 8);
            b[h..h + 4].copy_from_slice(&((off - 8) as u32).to_le_bytes());
            let sum = csum.compute(&b[32..]);
            b[..32].copy_from_slice(&sum);
        }
        let found = problems(&img);
        assert!(
            found.len() == 1 && matches!(found[0].fix, Some(Fix::MendBlock { .. })),
            "{found:?}"
        );
        repair_is_all_or_nothing(&img);
    }

    /// A data extent item lost from the extent tree (its space still
    /// used in the free-space tree and its block group, its checksums
    /// there) is made again from the file extent that refers to it, and
    /// another extent item's refs one too many are set to its references'
    /// sum: all or nothing under failing writes.
    #[test]
    fn data_extent_items_are_made_again() {
        use crate::inode::file::DataPolicy;
        let m = Arc::new(MemDev::new(128 << 20));
        let o = MkfsOptions {
            fsid: Some([5; 16]),
            ..Default::default()
        };
        drop(make(vec![("m".into(), m.clone())], &o).unwrap());
        let dev: Arc<dyn BlockDev> = m.clone();
        let mut t = crate::tx::Trans::open_dev(vec![dev], 16 << 20).unwrap();
        let time = ubtrfs_format::items::Timespec::default();
        let policy = DataPolicy {
            csum: true,
            compress: None,
            force: false,
        };
        for (i, name) in [b"a", b"b"].iter().enumerate() {
            let ino = FIRST_FREE_OBJECTID + 1 + i as u64;
            let mut root = t.inode_mut(FS_TREE_OBJECTID, FIRST_FREE_OBJECTID);
            root.create_inode(&name[..], ino, 0o100644, 0, (0, 0), time)
                .unwrap();
            let written = t
                .inode_mut(FS_TREE_OBJECTID, ino)
                .write_file(0, &[i as u8 + 1; 8192], policy)
                .unwrap();
            t.inode_mut(FS_TREE_OBJECTID, ino).put(&written).unwrap();
        }
        t.commit().unwrap();
        let data_items: Vec<(Key, Vec<u8>)> = t
            .items_in(EXTENT_TREE_OBJECTID, &Key::MIN, &Key::MAX)
            .unwrap()
            .into_iter()
            .filter(|(k, d)| {
                k.item_type == EXTENT_ITEM
                    && ubtrfs_format::items::ExtentRecord::parse(k, d)
                        .is_ok_and(|r| r.item.flags & ubtrfs_format::items::EXTENT_FLAG_DATA != 0)
            })
            .collect();
        assert_eq!(data_items.len(), 2, "{data_items:?}");
        // Written directly: the allocator and the free space keep the
        // extent as used, as damage to the extent tree alone leaves them.
        t.delete_item(EXTENT_TREE_OBJECTID, &data_items[0].0)
            .unwrap();
        let (k, mut d) = data_items[1].clone();
        let refs = u64::from_le_bytes(d[..8].try_into().unwrap());
        d[..8].copy_from_slice(&(refs + 1).to_le_bytes());
        t.put_item(EXTENT_TREE_OBJECTID, k, d).unwrap();
        t.commit().unwrap();
        drop(t);
        let bad = m.snapshot();
        let found = problems(&bad);
        assert!(
            found.len() == 2
                && found
                    .iter()
                    .any(|p| matches!(p.fix, Some(Fix::NewDataExtent { .. })))
                && found
                    .iter()
                    .any(|p| matches!(p.fix, Some(Fix::ExtentRefs { .. }))),
            "{found:?}"
        );
        repair_is_all_or_nothing(&bad);
    }

    /// The problems a check of `image` finds.
    fn problems(image: &[u8]) -> Vec<Problem> {
        let d = Device::from_dev(
            Path::new("image"),
            Arc::new(MemDev::from_bytes(image.to_vec())),
        )
        .unwrap();
        let fs = Filesystem::from_devices(vec![d], 16 << 20).unwrap();
        check(&fs, &CheckOptions::default(), &mut |_, _| {})
            .unwrap()
            .problems
    }

    /// A repair whose writes fail from any one of them on (as a crash or
    /// a dying device cuts it) leaves the image as it was, with the same
    /// problems, or repaired: never a third state.
    fn repair_is_all_or_nothing(bad: &[u8]) {
        use crate::io::fault::FaultDev;
        let before = problems(bad);
        let fixes: Vec<Fix> = before.iter().map(|p| p.fix.clone().unwrap()).collect();
        let run = |fail_at: Option<u64>| {
            let m = Arc::new(MemDev::from_bytes(bad.to_vec()));
            let f = Arc::new(FaultDev::new(m.clone(), fail_at));
            let dev: Arc<dyn BlockDev> = f.clone();
            let prepare = |i: &crate::disk_io::FsInfo| repair::prepare(i, &fixes);
            let r =
                crate::tx::Trans::open_dev_with(vec![dev], 16 << 20, &prepare).and_then(|mut t| {
                    repair::apply(&mut t, &fixes)?;
                    t.commit()
                });
            (r.is_ok(), f.ops(), m.snapshot())
        };
        let (ok, ops, repaired) = run(None);
        assert!(ok && ops > 2, "{ops} writes");
        assert_eq!(problems(&repaired), vec![], "after the repair");
        for k in 0..ops {
            let (_, _, img) = run(Some(k));
            let after = problems(&img);
            assert!(
                after.is_empty() || after == before,
                "writes failing from {k} of {ops}: {after:?}"
            );
        }
    }
}
