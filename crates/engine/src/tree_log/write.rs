//! Writing log trees on fsync (the kernel's tree-log.c, write side:
//! btrfs_log_inode and btrfs_sync_log), so that fsync does not commit.
//!
//! What is logged, per subvolume, is kept in memory as the items the log
//! tree holds: for a regular file fsynced, every item the file has (inode
//! item, names, xattrs, file extents; on no-holes filesystems explicit
//! holes between its extents, which replay turns into dropped ranges, as
//! btrfs_log_holes), the checksums of its extents made in this
//! transaction, and the inode items and names of its ancestors made in
//! this transaction (which replay needs to link it, as the kernel's
//! log_new_ancestors). An inode logged earlier keeps what was logged
//! then until it is logged again.
//!
//! Each log tree is kept as its leaves ([`super::log_leaves`]); logging an
//! inode again changes only the items that differ, so [`LogWriter::sync`]
//! writes only the leaves that changed, new nodes above them and a new log
//! root tree with one ROOT_ITEM per subvolume, all in space held out of
//! the committed block groups' free space (no extent items: the kernel's
//! replay pins them), then the committed superblock again with the log
//! root. Blocks the new log no longer uses are given back once its
//! superblock is on disk. Data a log points to is not handed out again
//! before the commit ([`crate::alloc::Allocator`]'s `log_holds_items`,
//! set from the first file logged), and the commit writes a superblock
//! without a log.
//!
//! Replay (the kernel's, or [`fn@super::replay`]) adds names but removes only
//! names of the same (inode, parent) pair, so an inode renamed, linked or
//! unlinked since the last commit, or below a directory renamed since,
//! is not logged: the caller commits instead, as the kernel falls back to
//! a full commit where its log cannot express a change.

use super::log_leaves::LogLeaves;
use crate::alloc::SpaceKind;
use crate::error::{Error, Result};
use crate::tree::buf::{Content, ExtentBuffer, Ptr, HEADER_FLAG_WRITTEN};
use crate::tree::leaf::Leaf;
use crate::tx::Trans;
use std::collections::BTreeMap;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{FileExtent, FileExtentKind, InodeItem, RootItem};
use ubtrfs_format::node::{HEADER_SIZE, ITEM_SIZE, KEY_PTR_SIZE};
use ubtrfs_format::Key;

/// Most blocks one log may take: past this, fsync commits (a commit
/// writes only what changed; rewriting a log this size costs more).
pub const MAX_LOG_BLOCKS: usize = 512;

/// Counters, for tests and the benchmark.
#[derive(Debug, Default, Clone)]
pub struct LogStats {
    /// Logs written (superblocks pointing to a log).
    pub syncs: u64,
    /// Inodes logged (ancestors included).
    pub inodes: u64,
    /// Tree blocks written for logs.
    pub blocks: u64,
    /// Extents whose checksums were looked up for a log.
    pub csum_lookups: u64,
}

/// The log trees of the running transaction.
#[derive(Debug, Default)]
pub struct LogWriter {
    /// The transaction the log belongs to (a commit ends it).
    transid: u64,
    trees: BTreeMap<u64, LogLeaves>,
    /// Node blocks of the log trees and blocks of the log root tree on
    /// disk now (held until commit; leaves keep their own).
    upper: Vec<u64>,
    pub stats: LogStats,
}

/// A log written whose superblock is still to write
/// ([`LogWriter::sync_begin`]).
pub struct LogSync {
    supers: Vec<crate::tx::durable::DevSupers>,
    release: Vec<u64>,
    nodesize: u32,
}

impl LogSync {
    /// Flush, superblock with the log root, flush: needs no transaction,
    /// only the devices.
    pub fn write(&self) -> Result<()> {
        crate::tx::durable::make_durable(&self.supers)
    }
}

/// Why an inode cannot be logged (the caller commits).
pub type NoLog = &'static str;

impl LogWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets a log its transaction has committed (its blocks were held
    /// until that commit, which freed them).
    fn follow(&mut self, t: &Trans) {
        if self.transid != t.transid {
            self.trees.clear();
            self.upper.clear();
            self.transid = t.transid;
        }
    }

    /// Whether anything is logged in the running transaction.
    pub fn is_empty(&self, t: &Trans) -> bool {
        self.transid != t.transid || self.trees.is_empty()
    }

    /// Logs regular file `ino` of subvolume `subvol` whole, with the
    /// ancestors made in this transaction, from the transaction's trees
    /// (the caller has written its dirty data back). `renamed` tells
    /// whether an inode had a name added or removed since the last commit
    /// (then nothing is logged and the reason is returned).
    pub fn log_file(
        &mut self,
        t: &mut Trans,
        subvol: u64,
        ino: u64,
        renamed: &dyn Fn(u64) -> bool,
    ) -> Result<std::result::Result<(), NoLog>> {
        self.follow(t);
        if t.has_new_chunks() {
            return Ok(Err("the transaction made new chunks"));
        }
        let Some(inode) = t.inode(subvol, ino)? else {
            return Ok(Err("no such inode"));
        };
        if inode.mode & 0o170000 != 0o100000 {
            return Ok(Err("not a regular file"));
        }
        // The file and every ancestor up to the subvolume's root: none
        // renamed since the last commit; those made since are logged.
        let mut new_dirs = Vec::new();
        let mut cur = ino;
        for _ in 0..4096 {
            if renamed(cur) {
                return Ok(Err(
                    "an inode on the path changed names since the last commit",
                ));
            }
            if cur == FIRST_FREE_OBJECTID {
                break;
            }
            let refs = t.inode_refs(subvol, cur)?;
            let [(parent, _, _)] = refs[..] else {
                return Ok(Err("an inode on the path has several names or none"));
            };
            if parent == cur {
                break;
            }
            let Some(p) = t.inode(subvol, parent)? else {
                return Err(Error::corrupt(
                    format!("subvolume {subvol} inode {cur}"),
                    format!("its parent directory {parent} has no inode item"),
                ));
            };
            if p.generation == t.transid {
                new_dirs.push(parent);
            }
            cur = parent;
        }
        self.copy_inode(t, subvol, ino, &inode, true)?;
        for d in new_dirs {
            let ii = t.inode_of(subvol, d)?;
            self.copy_inode(t, subvol, d, &ii, false)?;
        }
        // The logged items point to this transaction's extents: until the
        // commit, space freed is not handed out again, even before this
        // log reaches the disk (concurrent fsyncs log, then one of them
        // syncs for all, and writes may run in between).
        t.alloc.log_holds_items = true;
        Ok(Ok(()))
    }

    /// Makes what the log has of inode `ino` its items now (only the
    /// items that differ change): all of them with `full`, else the inode
    /// item, names and xattrs.
    fn copy_inode(
        &mut self,
        t: &mut Trans,
        subvol: u64,
        ino: u64,
        inode: &InodeItem,
        full: bool,
    ) -> Result<()> {
        self.stats.inodes += 1;
        let lo = Key::new(ino, 0, 0);
        let hi = Key::new(ino, u8::MAX, u64::MAX);
        let transid = t.transid;
        let ss = t.sectorsize() as u64;
        let ns = t.nodesize();
        let no_holes = t.info.sb.incompat_flags & INCOMPAT_NO_HOLES != 0;
        let log = self
            .trees
            .entry(subvol)
            .or_insert_with(|| LogLeaves::new(ns as usize - HEADER_SIZE));
        // The inode's items now (with holes) against what the log has,
        // both in key order: only differences change the log.
        let mut diff = Diff {
            old: log.items_in(lo, hi),
            at: 0,
            changes: Vec::new(),
        };
        let mut extent_end = 0u64;
        let mut sum_ranges = Vec::new();
        let mut bad = None;
        t.scan(subvol, &lo, |k, d| {
            if *k > hi {
                return false;
            }
            match k.item_type {
                INODE_ITEM | INODE_REF | INODE_EXTREF | XATTR_ITEM => {}
                EXTENT_DATA if full => {
                    let fe = match FileExtent::parse(d) {
                        Ok(fe) => fe,
                        Err(e) => {
                            bad = Some(Error::format(format!("tree {subvol} key {k}"), e));
                            return false;
                        }
                    };
                    if no_holes && k.offset > extent_end {
                        let (hk, hd) = hole(ino, transid, extent_end, k.offset - extent_end);
                        diff.want(hk, &hd);
                    }
                    extent_end = match fe.kind {
                        FileExtentKind::Inline { .. } => {
                            k.offset + fe.ram_bytes.next_multiple_of(ss)
                        }
                        FileExtentKind::Extent {
                            prealloc,
                            num_bytes,
                            ..
                        } => {
                            // What replay looks for checksums of.
                            if !prealloc && fe.generation == transid {
                                if let Ok(Some(r)) = fe.csum_range() {
                                    sum_ranges.push(r);
                                }
                            }
                            k.offset + num_bytes
                        }
                    };
                }
                _ => return true,
            }
            diff.want(*k, d);
            true
        })?;
        if let Some(e) = bad {
            return Err(e);
        }
        let size_end = inode.size.next_multiple_of(ss);
        if full && no_holes && size_end > extent_end {
            let (hk, hd) = hole(ino, transid, extent_end, size_end - extent_end);
            diff.want(hk, &hd);
        }
        let changes = diff.finish();
        for (k, d) in changes {
            match d {
                Some(d) => log.put(k, d),
                None => log.remove(&k),
            }
        }
        if !full || inode.flags & INODE_NODATASUM != 0 {
            return Ok(());
        }
        for (s, e) in crate::data::ranges::merged(sum_ranges) {
            self.log_csums(t, subvol, s, e)?;
        }
        Ok(())
    }

    /// Makes the log hold the checksums of data sectors `[start, end)`,
    /// as runs of EXTENT_CSUM items keyed from where each run starts.
    /// A range the log already covers whole is left alone (an extent's
    /// checksums do not change within its transaction). One it does not
    /// is looked up again, since parts of a preallocated extent written
    /// after it was logged have checksums now; the log's items over it
    /// are replaced, widened to where they start and end, so that no two
    /// items overlap. (Extents made in one transaction and still in files
    /// never overlap: freed space is not reused once the log holds
    /// items.)
    fn log_csums(&mut self, t: &mut Trans, subvol: u64, start: u64, end: u64) -> Result<()> {
        let ss = t.sectorsize() as u64;
        let cs = t.info.csum_type.size();
        let per_item = (crate::tree::buf::max_item_data(t.nodesize()) - 2 * ITEM_SIZE) / cs;
        let key = |at: u64| Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, at);
        let log = self.trees.get_mut(&subvol).expect("the inode's log");
        // An item reaching into the range starts at most one item's
        // span before it.
        let span = per_item as u64 * ss;
        let (mut lo, mut hi) = (start, end);
        let (mut covered_to, mut gap) = (start, false);
        let mut logged = Vec::new();
        for (k, d) in log.items_in(key(start.saturating_sub(span)), key(end - 1)) {
            let item_end = k.offset + (d.len() / cs) as u64 * ss;
            if item_end <= start {
                continue;
            }
            gap |= k.offset > covered_to;
            covered_to = covered_to.max(item_end);
            lo = lo.min(k.offset);
            hi = hi.max(item_end);
            logged.push(k);
        }
        if !gap && covered_to >= end {
            return Ok(());
        }
        self.stats.csum_lookups += 1;
        let runs = t.csums_in(lo, hi)?;
        let log = self.trees.get_mut(&subvol).expect("the inode's log");
        for k in &logged {
            log.remove(k);
        }
        for (at, sums) in runs {
            for (i, chunk) in sums.chunks(per_item * cs).enumerate() {
                log.put(key(at + (i * per_item) as u64 * ss), chunk.to_vec());
            }
        }
        Ok(())
    }

    /// Writes the log and a superblock pointing to it: what was logged is
    /// what a crash from now until the commit replays. Err(reason) when
    /// the log would be too big (the caller commits).
    pub fn sync(&mut self, t: &mut Trans) -> Result<std::result::Result<(), NoLog>> {
        match self.sync_begin(t)? {
            Err(why) => Ok(Err(why)),
            Ok(None) => Ok(Ok(())),
            Ok(Some(s)) => {
                let res = s.write();
                self.sync_end(t, s, res.is_ok());
                res.map(Ok)
            }
        }
    }

    /// A log sync's first half, which needs the transaction: writes the
    /// changed log blocks and encodes the superblock that points to them.
    /// [`LogSync::write`] then makes it durable without the transaction
    /// (the flushes wait for the disk: other requests need not), and
    /// [`LogWriter::sync_end`] gives back what the log before it used.
    /// None when nothing is logged. Until `sync_end` nothing may commit
    /// or sync the log again (the caller's lock says so); other changes
    /// to the transaction may go on: the log's blocks are held, and what
    /// it points to is pinned.
    pub fn sync_begin(
        &mut self,
        t: &mut Trans,
    ) -> Result<std::result::Result<Option<LogSync>, NoLog>> {
        self.follow(t);
        if self.trees.is_empty() {
            return Ok(Ok(None));
        }
        let leaves: usize = self.trees.values().map(|l| l.leaves.len()).sum();
        if leaves > MAX_LOG_BLOCKS {
            return Ok(Err("the log would be too big"));
        }
        let ns = t.nodesize();
        let mut upper: Vec<u64> = Vec::new();
        let supers = self
            .write_trees(t, ns, &mut upper)
            .and_then(|(root, level)| t.log_super_writes(root, level));
        let supers = match supers {
            Ok(s) => s,
            Err(e) => {
                for b in upper {
                    t.alloc.release_held(b, ns as u64);
                }
                return Err(e);
            }
        };
        // Blocks the log on disk uses now and the new one does not: free
        // once the new superblock is (blocks replaced after this go to
        // the next sync).
        let mut release = std::mem::replace(&mut self.upper, upper);
        for log in self.trees.values_mut() {
            release.append(&mut log.replaced);
        }
        Ok(Ok(Some(LogSync {
            supers,
            release,
            nodesize: ns,
        })))
    }

    /// A log sync's last half, after [`LogSync::write`]: when `written`,
    /// the blocks only the log before used are given back. When not, the
    /// superblock on disk may be either, so they stay held until the
    /// commit the caller makes instead.
    pub fn sync_end(&mut self, t: &mut Trans, s: LogSync, written: bool) {
        if !written {
            return;
        }
        for b in s.release {
            t.alloc.release_held(b, s.nodesize as u64);
        }
        self.stats.syncs += 1;
    }

    /// Writes the changed leaves of every log tree, nodes above them and
    /// the log root tree: the root tree's (bytenr, level). Nodes and root
    /// tree blocks written go to `upper`.
    fn write_trees(&mut self, t: &mut Trans, ns: u32, upper: &mut Vec<u64>) -> Result<(u64, u8)> {
        let mut roots: Vec<(Key, Vec<u8>)> = Vec::new();
        let mut written = 0u64;
        for (&subvol, log) in self.trees.iter_mut() {
            let mut level_blocks: Vec<(Key, u64)> = Vec::new();
            for leaf in log.leaves.iter_mut() {
                let first = leaf.first_key().unwrap_or(Key::new(0, 0, 0));
                let addr = match leaf.addr {
                    Some(a) => a,
                    None => {
                        let items = Leaf::from_items(leaf.items.iter().map(|(k, d)| (*k, &d[..])));
                        let a = write_block(t, ns, 0, Content::Leaf(items))?;
                        written += 1;
                        leaf.addr = Some(a);
                        a
                    }
                };
                level_blocks.push((first, addr));
            }
            let (bytenr, level) = build_nodes(t, ns, level_blocks, 0, upper)?;
            let item = RootItem {
                inode: InodeItem {
                    generation: 1,
                    size: 3,
                    nlink: 1,
                    nbytes: ns as u64,
                    mode: 0o40755,
                    ..Default::default()
                },
                generation: t.transid,
                generation_v2: t.transid,
                bytenr,
                level,
                ..Default::default()
            };
            roots.push((
                Key::new(TREE_LOG_OBJECTID, ROOT_ITEM, subvol),
                item.to_bytes(),
            ));
        }
        // The log root tree: a handful of items, written whole.
        let mut level_blocks = Vec::new();
        for chunk in roots.chunks((ns as usize - HEADER_SIZE) / (ITEM_SIZE + 439)) {
            let items = Leaf::from_items(chunk.iter().map(|(k, d)| (*k, &d[..])));
            let a = write_block(t, ns, 0, Content::Leaf(items))?;
            upper.push(a);
            level_blocks.push((chunk[0].0, a));
        }
        self.stats.blocks += written + upper.len() as u64;
        build_nodes(t, ns, level_blocks, 0, upper)
    }
}

/// An explicit hole of `len` bytes at `at` (the kernel's btrfs_log_holes:
/// replay drops what the subvolume has there).
fn hole(ino: u64, transid: u64, at: u64, len: u64) -> (Key, Vec<u8>) {
    let fe = FileExtent {
        generation: transid,
        ram_bytes: len,
        compression: 0,
        encryption: 0,
        other_encoding: 0,
        kind: FileExtentKind::Extent {
            prealloc: false,
            disk_bytenr: 0,
            disk_num_bytes: 0,
            offset: 0,
            num_bytes: len,
        },
    };
    (Key::new(ino, EXTENT_DATA, at), fe.to_bytes())
}

/// A merge of an inode's items now (given in key order) with the items
/// the log has of it: the puts and removals that make the log equal.
struct Diff<'a> {
    old: Vec<(Key, &'a Vec<u8>)>,
    at: usize,
    changes: Vec<(Key, Option<Vec<u8>>)>,
}

impl Diff<'_> {
    /// The next item the inode has (keys ascending).
    fn want(&mut self, k: Key, d: &[u8]) {
        while self.at < self.old.len() && self.old[self.at].0 < k {
            self.changes.push((self.old[self.at].0, None));
            self.at += 1;
        }
        if self.at < self.old.len() && self.old[self.at].0 == k {
            if self.old[self.at].1[..] != *d {
                self.changes.push((k, Some(d.to_vec())));
            }
            self.at += 1;
        } else {
            self.changes.push((k, Some(d.to_vec())));
        }
    }

    /// The changes, with every old item past the last wanted removed.
    fn finish(mut self) -> Vec<(Key, Option<Vec<u8>>)> {
        for (k, _) in &self.old[self.at..] {
            self.changes.push((*k, None));
        }
        self.changes
    }
}

/// Nodes above `blocks` (first key, address) at `level`, written in held
/// metadata space (their addresses go to `upper`): the root's (bytenr,
/// level).
fn build_nodes(
    t: &mut Trans,
    ns: u32,
    mut blocks: Vec<(Key, u64)>,
    mut level: u8,
    upper: &mut Vec<u64>,
) -> Result<(u64, u8)> {
    let per_node = (ns as usize - HEADER_SIZE) / KEY_PTR_SIZE;
    while blocks.len() > 1 {
        level += 1;
        let mut up = Vec::new();
        for chunk in blocks.chunks(per_node) {
            let ptrs = chunk
                .iter()
                .map(|&(key, blockptr)| Ptr {
                    key,
                    blockptr,
                    generation: t.transid,
                })
                .collect();
            let b = write_block(t, ns, level, Content::Node(ptrs))?;
            upper.push(b);
            up.push((chunk[0].0, b));
        }
        blocks = up;
    }
    Ok((blocks[0].1, level))
}

/// Writes one log block in newly held space.
fn write_block(t: &mut Trans, ns: u32, level: u8, content: Content) -> Result<u64> {
    let bytenr = t
        .alloc
        .alloc_held(SpaceKind::Metadata, ns as u64, ns as u64)
        .ok_or_else(|| Error::NoSpace("no metadata space for a log tree block".into()))?;
    let eb = ExtentBuffer {
        bytenr,
        generation: t.transid,
        owner: TREE_LOG_OBJECTID,
        flags: HEADER_FLAG_WRITTEN,
        level,
        content,
    };
    t.write_block(&eb)?;
    Ok(bytenr)
}
