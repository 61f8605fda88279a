//! Log trees (the kernel's tree-log.c, replay side): what fsync wrote
//! since the last commit, replayed over the committed trees through a
//! [`Trans`], as the kernel's btrfs_recover_log_trees does at mount.
//!
//! The superblock's `log_root` is the root of the log root tree, whose
//! ROOT_ITEMs (TREE_LOG_OBJECTID, ROOT_ITEM, subvolume id) point to one log
//! tree per subvolume. Log tree blocks and the data extents that only the
//! log references have no extent items (they were allocated in the
//! transaction that never committed): they are held out of the free space
//! while replay reads them, logged extents that replay keeps get their
//! extent items, and everything else is free again once the replay
//! commits.
//!
//! Replay, per stage over every log tree ([`fn@replay`]): inode items (with
//! the deletions of xattrs and, for logged ranges of directories, of
//! names the log no longer has, and extents past the new size), then
//! directory index entries, then everything else (xattrs, back
//! references with the names they no longer have removed, file extents
//! with their checksums), then the link counts of every inode replay
//! touched (inodes left without a name are deleted, as the kernel's
//! orphan cleanup does right after its replay).
//!
//! [`open_replayed`] gives readers the filesystem as the kernel shows it
//! after replay without writing to the image: the replay commits onto
//! [`OverlayDev`]s. [`replay_log`] and [`zero_log`] change an image (the
//! `rescue` commands).

pub mod log_leaves;
mod replay;
pub mod write;

use crate::ctree::Tree;
use crate::error::{Error, ErrorKind, Result};
use crate::fs::{Filesystem, OpenOptions};
use crate::io::dev::{BlockDev, FileDev};
use crate::io::device::Device;
use crate::io::overlay::OverlayDev;
use crate::tree::block::TreeBlock;
use crate::tx::Trans;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{FileExtent, FileExtentKind, RootItem};
use ubtrfs_format::Key;

/// One subvolume's log tree, read whole (logs hold what fsync wrote
/// since the last commit: small next to the trees they replay into).
#[derive(Debug)]
pub struct LogTree {
    /// The subvolume the log replays into.
    pub dest: u64,
    pub bytenr: u64,
    pub items: BTreeMap<Key, Vec<u8>>,
}

impl LogTree {
    fn get(&self, key: &Key) -> Option<&[u8]> {
        self.items.get(key).map(|v| &v[..])
    }

    fn range(&self, lo: Key, hi: Key) -> impl Iterator<Item = (&Key, &Vec<u8>)> {
        self.items.range(lo..=hi)
    }

    fn describe(&self) -> String {
        format!(
            "log tree of subvolume {} (root block {})",
            self.dest, self.bytenr
        )
    }
}

/// Everything the log root tree leads to.
#[derive(Debug, Default)]
pub struct Logs {
    pub trees: Vec<LogTree>,
    /// Addresses of every block of the log root tree and the log trees.
    pub blocks: Vec<u64>,
}

/// What a replay did.
#[derive(Debug, Default, Clone)]
pub struct ReplayStats {
    /// Log trees replayed (one per subvolume that had fsyncs).
    pub log_trees: usize,
    /// Log trees of subvolumes that no longer exist, skipped.
    pub skipped_trees: usize,
    pub log_blocks: usize,
    pub log_items: usize,
    /// Data extents only the log referenced that replay kept.
    pub claimed_extents: usize,
    /// Inodes left without a name, deleted.
    pub orphans: usize,
    /// Seconds spent opening the writer (block groups from the extent
    /// tree), replaying, and committing.
    pub open_secs: f64,
    pub replay_secs: f64,
    pub commit_secs: f64,
}

/// Reads every block of `tree`: items of its leaves into `items`, block
/// addresses into `blocks`.
fn walk(
    t: &Trans,
    tree: Tree,
    what: &str,
    blocks: &mut Vec<u64>,
    items: &mut BTreeMap<Key, Vec<u8>>,
) -> Result<()> {
    let ctx = |e: Error| e.context(|| format!("{what} (root block {})", tree.bytenr));
    let root = tree.read_root(&t.info).map_err(ctx)?;
    let mut stack: Vec<Arc<TreeBlock>> = vec![root];
    while let Some(b) = stack.pop() {
        blocks.push(b.bytenr);
        let node = b.node();
        if node.is_leaf() {
            for i in 0..node.nritems() {
                let it = node.item(i);
                items.insert(it.key, it.data.to_vec());
            }
        } else {
            for i in (0..node.nritems()).rev() {
                stack.push(tree.read_child(&t.info, &b, i).map_err(ctx)?);
            }
        }
    }
    Ok(())
}

/// Reads the log root tree and every log tree it points to.
pub fn read_logs(t: &Trans) -> Result<Logs> {
    let (bytenr, level) = t.log_root();
    let mut logs = Logs::default();
    if bytenr == 0 {
        return Ok(logs);
    }
    // The log belongs to the transaction after the last commit.
    let root_tree = Tree {
        id: TREE_LOG_OBJECTID,
        bytenr,
        level,
        generation: t.info.sb.generation + 1,
    };
    let mut roots = BTreeMap::new();
    walk(t, root_tree, "log root tree", &mut logs.blocks, &mut roots)?;
    for (k, d) in &roots {
        if k.objectid != TREE_LOG_OBJECTID || k.item_type != ROOT_ITEM {
            continue;
        }
        let ri = RootItem::parse(d).map_err(|e| {
            Error::format(format!("log root tree (root block {bytenr}) key {k}"), e)
        })?;
        let tree = Tree::of_root_item(TREE_LOG_OBJECTID, &ri);
        let mut items = BTreeMap::new();
        let what = format!("log tree of subvolume {}", k.offset);
        walk(t, tree, &what, &mut logs.blocks, &mut items)?;
        logs.trees.push(LogTree {
            dest: k.offset,
            bytenr: ri.bytenr,
            items,
        });
    }
    // The kernel replays from the highest subvolume id down.
    logs.trees.sort_by_key(|l| std::cmp::Reverse(l.dest));
    Ok(logs)
}

/// Data extents the logs' file extent items point to: (bytenr, length).
fn logged_extents(logs: &Logs) -> Result<BTreeMap<u64, u64>> {
    let mut out = BTreeMap::new();
    for l in &logs.trees {
        for (k, d) in &l.items {
            if k.item_type != EXTENT_DATA {
                continue;
            }
            let fe = FileExtent::parse(d)
                .map_err(|e| Error::format(format!("{} key {k}", l.describe()), e))?;
            if let FileExtentKind::Extent {
                disk_bytenr,
                disk_num_bytes,
                ..
            } = fe.kind
            {
                if disk_bytenr != 0 {
                    out.insert(disk_bytenr, disk_num_bytes);
                }
            }
        }
    }
    Ok(out)
}

/// Replays the log trees into the filesystem's trees in `t` and drops the
/// log (the superblock's pointer is cleared; its blocks are free once
/// `t` commits). The caller commits. Nothing to do without a log.
pub fn replay(t: &mut Trans) -> Result<ReplayStats> {
    let mut stats = ReplayStats::default();
    if t.log_root().0 == 0 {
        return Ok(stats);
    }
    let logs = read_logs(t)?;
    stats.log_blocks = logs.blocks.len();
    stats.log_items = logs.trees.iter().map(|l| l.items.len()).sum();
    // Nothing replay allocates may land on what it still has to read.
    let ns = t.nodesize() as u64;
    for &b in &logs.blocks {
        t.alloc.hold(b, ns);
    }
    let mut held = BTreeMap::new();
    for (bytenr, len) in logged_extents(&logs)? {
        if len == 0 || bytenr.checked_add(len).is_none() {
            // Nonsense: replay refuses it when it gets there.
            continue;
        }
        let key = Key::new(bytenr, EXTENT_ITEM, len);
        if t.lookup(EXTENT_TREE_OBJECTID, &key)?.is_some() {
            continue;
        }
        if t.alloc.hold(bytenr, len) {
            held.insert(bytenr, len);
        }
    }
    let mut state = replay::State::new(held);
    // Subvolumes deleted since are skipped, as the kernel does.
    let mut live = Vec::new();
    for l in &logs.trees {
        let exists = match t.root(l.dest) {
            Ok(r) => r.item.refs > 0,
            Err(Error::NotFound(_)) => false,
            Err(e) => return Err(e),
        };
        if exists {
            live.push(l);
        } else {
            stats.skipped_trees += 1;
        }
    }
    stats.log_trees = live.len();
    for stage in [
        replay::Stage::Inodes,
        replay::Stage::DirIndex,
        replay::Stage::All,
    ] {
        for l in &live {
            replay::Replayer::new(t, l, &mut state)
                .run(stage)
                .map_err(|e| e.context(|| l.describe()))?;
        }
    }
    stats.claimed_extents = state.claimed.len();
    stats.orphans = state.orphans;
    t.clear_log_root();
    Ok(stats)
}

/// The devices of an image, opened read-only.
fn open_files(image: &Path, opts: &OpenOptions) -> Result<Vec<(PathBuf, Arc<dyn BlockDev>)>> {
    let mut out = Vec::new();
    for p in std::iter::once(image).chain(opts.devices.iter().map(|p| p.as_path())) {
        let dev = FileDev::open(p, false).map_err(|e| Error::Io {
            path: p.display().to_string(),
            op: "open".into(),
            source: e,
        })?;
        out.push((p.to_path_buf(), Arc::new(dev) as Arc<dyn BlockDev>));
    }
    Ok(out)
}

/// Whether the newest superblock among `devs` points to a log tree.
fn has_log(devs: &[(PathBuf, Arc<dyn BlockDev>)]) -> Result<bool> {
    let mut best: Option<(u64, u64)> = None;
    for (p, d) in devs {
        let dev = Device::from_dev(p, d.clone())?;
        let sb = &dev.superblock;
        if best.is_none_or(|(g, _)| sb.generation > g) {
            best = Some((sb.generation, sb.log_root));
        }
    }
    Ok(best.is_some_and(|(_, lr)| lr != 0))
}

/// Opens the filesystem on `image` (and `opts.devices`) read-only, as the
/// kernel would show it: when the superblock points to a log tree, the
/// log is replayed and committed onto in-memory overlays of the devices
/// (nothing is written to them), and the filesystem read from those.
/// Returns what the replay did, if there was one. Images the writer
/// cannot change (RAID5/6, a missing device, ...) are read as of their
/// last commit, with a warning in the filesystem's reports; a log that
/// cannot be read or replayed is an error.
/// The last commit of the image, a log tree left unreplayed (the
/// kernel's `nologreplay`).
pub fn open_committed(image: &Path, opts: &OpenOptions) -> Result<Filesystem> {
    committed_of(open_files(image, opts)?, opts.cache_bytes)
}

/// The last commit on `devs`.
fn committed_of(devs: Vec<(PathBuf, Arc<dyn BlockDev>)>, cache_bytes: u64) -> Result<Filesystem> {
    let devs = devs
        .into_iter()
        .map(|(p, d)| Device::from_dev(&p, d))
        .collect::<Result<Vec<_>>>()?;
    Filesystem::from_devices(devs, cache_bytes)
}

pub fn open_replayed(
    image: &Path,
    opts: &OpenOptions,
) -> Result<(Filesystem, Option<ReplayStats>)> {
    let devs = open_files(image, opts)?;
    if !has_log(&devs)? {
        return Ok((committed_of(devs, opts.cache_bytes)?, None));
    }
    let overlays: Vec<(PathBuf, Arc<dyn BlockDev>)> = devs
        .iter()
        .map(|(p, d)| {
            (
                p.clone(),
                Arc::new(OverlayDev::new(d.clone())) as Arc<dyn BlockDev>,
            )
        })
        .collect();
    // Only what the writer refuses to open (RAID5/6, a block group tree,
    // a missing device, ...) falls back to the last commit, with a
    // warning; a log that does not replay is an error.
    let t = match Trans::open_dev_with_log(overlays.clone(), opts.cache_bytes) {
        Ok(t) => t,
        Err(e) if matches!(e.kind(), ErrorKind::Unsupported | ErrorKind::Invalid) => {
            let devs = devs
                .into_iter()
                .map(|(p, d)| Device::from_dev(&p, d))
                .collect::<Result<Vec<_>>>()?;
            let fs = Filesystem::from_devices(devs, opts.cache_bytes)?;
            fs.info.report(format!(
                "the log tree was not replayed ({e}); showing the last commit, without what was fsynced since"
            ));
            return Ok((fs, None));
        }
        Err(e) => return Err(e),
    };
    let stats = replay_and_commit(t)?;
    let devs = overlays
        .into_iter()
        .map(|(p, d)| Device::from_dev(&p, d))
        .collect::<Result<Vec<_>>>()?;
    Ok((
        Filesystem::from_devices(devs, opts.cache_bytes)?,
        Some(stats),
    ))
}

/// Replays the log on `devs` and commits: the image no longer has a log
/// and holds what was fsynced (ubtrfs rescue replay-log). Without a log,
/// nothing is written.
pub fn replay_on(devs: Vec<(PathBuf, Arc<dyn BlockDev>)>, cache_bytes: u64) -> Result<ReplayStats> {
    let t0 = std::time::Instant::now();
    let t = Trans::open_dev_with_log(devs, cache_bytes)?;
    let mut stats = replay_and_commit(t)?;
    stats.open_secs = t0.elapsed().as_secs_f64() - stats.replay_secs - stats.commit_secs;
    Ok(stats)
}

/// Replays the log in `t` and commits (nothing without a log).
fn replay_and_commit(mut t: Trans) -> Result<ReplayStats> {
    if t.log_root().0 == 0 {
        return Ok(ReplayStats::default());
    }
    let t1 = std::time::Instant::now();
    let mut stats = replay(&mut t)?;
    let t2 = std::time::Instant::now();
    t.commit()?;
    stats.replay_secs = (t2 - t1).as_secs_f64();
    stats.commit_secs = t2.elapsed().as_secs_f64();
    Ok(stats)
}

/// Drops the log without replaying it (btrfs rescue zero-log): the
/// superblock is rewritten without a log root; what was fsynced since the
/// last commit is lost. Returns the log root that was dropped (0: none,
/// nothing written).
pub fn zero_log_on(devs: Vec<(PathBuf, Arc<dyn BlockDev>)>, cache_bytes: u64) -> Result<u64> {
    let mut t = Trans::open_dev_with_log(devs, cache_bytes)?;
    let (lr, _) = t.log_root();
    if lr == 0 {
        return Ok(0);
    }
    t.clear_log_root();
    t.commit()?;
    Ok(lr)
}

/// Opens the devices of an image read-write.
pub fn open_files_rw(paths: &[PathBuf]) -> Result<Vec<(PathBuf, Arc<dyn BlockDev>)>> {
    paths
        .iter()
        .map(|p| {
            let dev = FileDev::open(p, true).map_err(|e| Error::Io {
                path: p.display().to_string(),
                op: "open for writing".into(),
                source: e,
            })?;
            Ok((p.clone(), Arc::new(dev) as Arc<dyn BlockDev>))
        })
        .collect()
}

/// [`replay_on`] the image files `paths` (every device).
pub fn replay_log(paths: &[PathBuf], cache_bytes: u64) -> Result<ReplayStats> {
    replay_on(open_files_rw(paths)?, cache_bytes)
}

/// [`zero_log_on`] the image files `paths` (every device).
pub fn zero_log(paths: &[PathBuf], cache_bytes: u64) -> Result<u64> {
    zero_log_on(open_files_rw(paths)?, cache_bytes)
}

/// Inodes replay touched, per subvolume, whose link counts are recounted
/// at the end (the kernel's TREE_LOG_FIXUP items).
pub(crate) type Fixups = BTreeMap<u64, BTreeSet<u64>>;
