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
//! [`LogWriter::sync`] writes the whole log afresh: leaves packed full,
//! nodes above them, the log root tree with one ROOT_ITEM per subvolume,
//! all in space held out of the committed block groups' free space (no
//! extent items: the kernel's replay pins them), then the committed
//! superblock again with the log root. The previous log's blocks are
//! given back once the new superblock is on disk. Data a log points to is
//! not handed out again before the commit ([`crate::alloc::Allocator`]'s
//! `log_on_disk`), and the commit writes a superblock without a log.
//!
//! Replay (the kernel's, or [`super::replay`]) adds names but removes only
//! names of the same (inode, parent) pair, so an inode renamed, linked or
//! unlinked since the last commit, or below a directory renamed since,
//! is not logged: the caller commits instead, as the kernel falls back to
//! a full commit where its log cannot express a change.

use crate::alloc::SpaceKind;
use crate::error::{Error, Result};
use crate::tree::buf::{Content, ExtentBuffer, Ptr, HEADER_FLAG_WRITTEN};
use crate::tx::Trans;
use std::collections::BTreeMap;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{FileExtent, FileExtentKind, InodeItem, RootItem};
use ubtrfs_format::node::{HEADER_SIZE, ITEM_SIZE, KEY_PTR_SIZE};
use ubtrfs_format::Key;

/// Most blocks one log may take: past this, fsync commits (a commit
/// writes only what changed; rewriting a log this size costs more).
pub const MAX_LOG_BLOCKS: usize = 512;

/// What one subvolume's log tree holds.
#[derive(Debug, Default)]
struct LogContent {
    items: BTreeMap<Key, Vec<u8>>,
    /// Data checksums: disjoint runs, first sector -> sums.
    csums: BTreeMap<u64, Vec<u8>>,
}

/// Counters, for tests and the benchmark.
#[derive(Debug, Default, Clone)]
pub struct LogStats {
    /// Logs written (superblocks pointing to a log).
    pub syncs: u64,
    /// Inodes logged (ancestors included).
    pub inodes: u64,
    /// Tree blocks written for logs.
    pub blocks: u64,
}

/// The log trees of the running transaction.
#[derive(Debug, Default)]
pub struct LogWriter {
    /// The transaction the log belongs to (a commit ends it).
    transid: u64,
    trees: BTreeMap<u64, LogContent>,
    /// Blocks of the log on disk now (held until commit).
    blocks: Vec<u64>,
    pub stats: LogStats,
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
            self.blocks.clear();
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
        Ok(Ok(()))
    }

    /// Replaces what the log has of inode `ino` with its items now: all
    /// of them with `full`, else the inode item, names and xattrs.
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
        let items = t.items_in(subvol, &lo, &hi)?;
        let transid = t.transid;
        let ss = t.sectorsize() as u64;
        let no_holes = t.info.sb.incompat_flags & INCOMPAT_NO_HOLES != 0;
        let log = self.trees.entry(subvol).or_default();
        let old: Vec<Key> = log.items.range(lo..=hi).map(|(k, _)| *k).collect();
        for k in old {
            log.items.remove(&k);
        }
        let mut extent_end = 0u64;
        let mut holes = Vec::new();
        let mut sum_ranges = Vec::new();
        for (k, d) in items {
            match k.item_type {
                INODE_ITEM | INODE_REF | INODE_EXTREF | XATTR_ITEM => {}
                EXTENT_DATA if full => {
                    let fe = FileExtent::parse(&d)
                        .map_err(|e| Error::format(format!("tree {subvol} key {k}"), e))?;
                    if no_holes && k.offset > extent_end {
                        holes.push((extent_end, k.offset - extent_end));
                    }
                    extent_end = match fe.kind {
                        FileExtentKind::Inline { .. } => {
                            k.offset + fe.ram_bytes.next_multiple_of(ss)
                        }
                        FileExtentKind::Extent {
                            disk_bytenr,
                            disk_num_bytes,
                            num_bytes,
                            ..
                        } => {
                            if disk_bytenr != 0 && fe.generation == transid {
                                sum_ranges.push((disk_bytenr, disk_bytenr + disk_num_bytes));
                            }
                            k.offset + num_bytes
                        }
                    };
                }
                _ => continue,
            }
            log.items.insert(k, d);
        }
        let size_end = inode.size.next_multiple_of(ss);
        if full && no_holes && size_end > extent_end {
            holes.push((extent_end, size_end - extent_end));
        }
        for (at, len) in holes {
            let hole = FileExtent {
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
            log.items
                .insert(Key::new(ino, EXTENT_DATA, at), hole.to_bytes());
        }
        if full && inode.flags & INODE_NODATASUM == 0 {
            for (s, e) in sum_ranges {
                for (at, sums) in t.csums_in(s, e)? {
                    let log = self.trees.get_mut(&subvol).unwrap();
                    put_csums(&mut log.csums, at, sums, ss, t.info.csum_type.size() as u64);
                }
            }
        }
        Ok(())
    }

    /// Writes the log and a superblock pointing to it: what was logged is
    /// what a crash from now until the commit replays. Err(reason) when
    /// the log would be too big (the caller commits).
    pub fn sync(&mut self, t: &mut Trans) -> Result<std::result::Result<(), NoLog>> {
        self.follow(t);
        if self.trees.is_empty() {
            return Ok(Ok(()));
        }
        let ns = t.nodesize();
        let mut written: Vec<u64> = Vec::new();
        let res = self.write_trees(t, ns, &mut written);
        let root = match res {
            Ok(Some(r)) => r,
            Ok(None) => {
                for b in written {
                    t.alloc.release_held(b, ns as u64);
                }
                return Ok(Err("the log would be too big"));
            }
            Err(e) => {
                for b in written {
                    t.alloc.release_held(b, ns as u64);
                }
                return Err(e);
            }
        };
        t.write_log_super(root.0, root.1)?;
        for b in std::mem::replace(&mut self.blocks, written) {
            t.alloc.release_held(b, ns as u64);
        }
        self.stats.syncs += 1;
        Ok(Ok(()))
    }

    /// Writes every log tree and the log root tree: the root tree's
    /// (bytenr, level), or None past [`MAX_LOG_BLOCKS`].
    fn write_trees(
        &self,
        t: &mut Trans,
        ns: u32,
        written: &mut Vec<u64>,
    ) -> Result<Option<(u64, u8)>> {
        let cs = t.info.csum_type.size() as u64;
        let ss = t.sectorsize() as u64;
        let per_item = ((crate::tree::buf::max_item_data(ns) - 2 * ITEM_SIZE) as u64 / cs) as usize;
        let mut roots: Vec<(Key, Vec<u8>)> = Vec::new();
        for (&subvol, log) in &self.trees {
            let mut items: Vec<(Key, Vec<u8>)> =
                log.items.iter().map(|(k, d)| (*k, d.clone())).collect();
            for (&at, sums) in &log.csums {
                for (i, chunk) in sums.chunks(per_item * cs as usize).enumerate() {
                    let key = Key::new(
                        EXTENT_CSUM_OBJECTID,
                        EXTENT_CSUM,
                        at + (i * per_item) as u64 * ss,
                    );
                    items.push((key, chunk.to_vec()));
                }
            }
            let Some((bytenr, level)) = build_tree(t, ns, items, written)? else {
                return Ok(None);
            };
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
        build_tree(t, ns, roots, written)
    }
}

/// Adds checksums `sums` of the sectors from `at` to the disjoint runs
/// in `map`, replacing what overlapped (a sector's checksum is the same
/// within a transaction: data is never rewritten in new extents, and a
/// NOCOW extent has none).
fn put_csums(map: &mut BTreeMap<u64, Vec<u8>>, at: u64, sums: Vec<u8>, ss: u64, cs: u64) {
    let end = at + sums.len() as u64 / cs * ss;
    let over: Vec<u64> = map
        .range(..end)
        .rev()
        .take_while(|(&s, v)| s + v.len() as u64 / cs * ss > at)
        .map(|(&s, _)| s)
        .collect();
    for s in over {
        let v = map.remove(&s).unwrap();
        let v_end = s + v.len() as u64 / cs * ss;
        if s < at {
            map.insert(s, v[..((at - s) / ss * cs) as usize].to_vec());
        }
        if v_end > end {
            map.insert(end, v[((end - s) / ss * cs) as usize..].to_vec());
        }
    }
    map.insert(at, sums);
}

/// Packs `items` (in key order) into full leaves and nodes above them, in
/// held metadata space, and writes them: the root's (bytenr, level), or
/// None past [`MAX_LOG_BLOCKS`] in all.
fn build_tree(
    t: &mut Trans,
    ns: u32,
    mut items: Vec<(Key, Vec<u8>)>,
    written: &mut Vec<u64>,
) -> Result<Option<(u64, u8)>> {
    items.sort_by_key(|(k, _)| *k);
    let cap = ns as usize - HEADER_SIZE;
    // Leaves.
    let mut level_blocks: Vec<(Key, u64)> = Vec::new();
    let mut leaf: Vec<(Key, Vec<u8>)> = Vec::new();
    let mut used = 0usize;
    let mut leaves: Vec<Vec<(Key, Vec<u8>)>> = Vec::new();
    for (k, d) in items {
        let need = ITEM_SIZE + d.len();
        if used + need > cap && !leaf.is_empty() {
            leaves.push(std::mem::take(&mut leaf));
            used = 0;
        }
        used += need;
        leaf.push((k, d));
    }
    if !leaf.is_empty() || leaves.is_empty() {
        leaves.push(leaf);
    }
    for l in leaves {
        let first = l.first().map_or(Key::new(0, 0, 0), |(k, _)| *k);
        let Some(b) = write_block(t, ns, 0, Content::Leaf(l), written)? else {
            return Ok(None);
        };
        level_blocks.push((first, b));
    }
    // Nodes, level by level.
    let per_node = cap / KEY_PTR_SIZE;
    let mut level = 0u8;
    while level_blocks.len() > 1 {
        level += 1;
        let mut up = Vec::new();
        for chunk in level_blocks.chunks(per_node) {
            let ptrs = chunk
                .iter()
                .map(|&(key, blockptr)| Ptr {
                    key,
                    blockptr,
                    generation: t.transid,
                })
                .collect();
            let Some(b) = write_block(t, ns, level, Content::Node(ptrs), written)? else {
                return Ok(None);
            };
            up.push((chunk[0].0, b));
        }
        level_blocks = up;
    }
    Ok(Some((level_blocks[0].1, level)))
}

/// Writes one log block in newly held space; None past the block limit.
fn write_block(
    t: &mut Trans,
    ns: u32,
    level: u8,
    content: Content,
    written: &mut Vec<u64>,
) -> Result<Option<u64>> {
    if written.len() >= MAX_LOG_BLOCKS {
        return Ok(None);
    }
    let bytenr = t
        .alloc
        .alloc_held(SpaceKind::Metadata, ns as u64, ns as u64)
        .ok_or_else(|| Error::NoSpace("no metadata space for a log tree block".into()))?;
    written.push(bytenr);
    let eb = ExtentBuffer {
        bytenr,
        generation: t.transid,
        owner: TREE_LOG_OBJECTID,
        flags: HEADER_FLAG_WRITTEN,
        level,
        content,
    };
    t.write_block(&eb)?;
    Ok(Some(bytenr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csum_runs_replace_overlaps() {
        let (ss, cs) = (4096u64, 4u64);
        let mut m = BTreeMap::new();
        put_csums(&mut m, 0, vec![1; 16], ss, cs); // sectors 0..4
        put_csums(&mut m, 8192, vec![2; 16], ss, cs); // sectors 2..6
        assert_eq!(m.len(), 2);
        assert_eq!(m[&0], vec![1; 8]);
        assert_eq!(m[&8192], vec![2; 16]);
        put_csums(&mut m, 4096, vec![3; 4], ss, cs); // sector 1
        assert_eq!(m[&0], vec![1; 4]);
        assert_eq!(m[&4096], vec![3; 4]);
        assert_eq!(m[&8192], vec![2; 16]);
        put_csums(&mut m, 0, vec![4; 32], ss, cs); // sectors 0..8 cover all
        assert_eq!(m.len(), 1);
    }
}
