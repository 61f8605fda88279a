//! The inodes of one subvolume tree (btrfs-progs' `check_fs_root` and
//! `check_inode_recs`): every inode's items read in key order, then the
//! names checked across inodes.
//!
//! Per inode: an INODE_ITEM for every inode with items; a valid mode and
//! generations; nlink equal to its names (INODE_REF and INODE_EXTREF),
//! an inode without names or with nlink 0 only as an orphan; a directory's
//! size the sum of its entries' name lengths, a directory never with file
//! extents or more than one link; a file's extents not overlapping, well
//! formed, with no hole below its size unless the filesystem has
//! no-holes, and nbytes equal to what they hold. Across inodes: every name
//! in INODE_REF has its DIR_ITEM and DIR_INDEX in the parent, each
//! pointing back, with the type of the inode's mode; every entry of a
//! directory has its INODE_REF. Names hash to their keys. Entries naming
//! a subvolume are handed to [`super::roots`].

use super::csum::CsumWant;
use super::{Fix, NamePart, Problems};
use crate::ctree::{for_each_item, Tree};
use crate::fs::Filesystem;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use ubtrfs_format::checksum::{extref_hash, name_hash};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{
    parse_dir_entries, parse_inode_extrefs, parse_inode_refs, FileExtent, FileExtentKind,
    InodeItem, InodeRef,
};
use ubtrfs_format::Key;

/// A directory entry naming a subvolume: (tree, directory, name,
/// DIR_INDEX index or None for the DIR_ITEM, subvolume id).
pub(crate) type SubvolEntry = (u64, u64, Vec<u8>, Option<u64>, u64);

/// What the items of one inode said.
#[derive(Default)]
struct Ino {
    ino: u64,
    item: Option<InodeItem>,
    names: u32,
    /// Directory: name bytes of its DIR_ITEMs and DIR_INDEXes.
    entry_bytes: u64,
    has_entries: bool,
    has_extents: bool,
    extent_start: Option<u64>,
    extent_end: u64,
    first_gap: Option<u64>,
    found_bytes: u64,
}

/// Where a name's bytes are in [`Names::arena`].
#[derive(Debug, Clone, Copy)]
struct NameAt {
    off: usize,
    len: usize,
}

/// One name of an inode (INODE_REF or INODE_EXTREF).
struct Ref {
    parent: u64,
    hash: u64,
    ino: u64,
    index: u64,
    name: NameAt,
}

/// One directory entry (DIR_ITEM: `key` is the name's hash; DIR_INDEX:
/// the index).
struct Entry {
    dir: u64,
    key: u64,
    target: u64,
    ftype: u8,
    name: NameAt,
    matched: bool,
}

/// Names across inodes. Kept in vectors in key order and joined by
/// binary search: a tree of many files has as many names, and maps keyed
/// by name bytes cost more than the rest of the check.
#[derive(Default)]
struct Names {
    /// Every name's bytes, back to back.
    arena: Vec<u8>,
    refs: Vec<Ref>,
    /// DIR_ITEM entries in (dir, hash) order, DIR_INDEX in (dir, index).
    items: Vec<Entry>,
    index: Vec<Entry>,
    /// Inode -> mode, in inode order, for the entries' types.
    modes: Vec<(u64, u32)>,
    /// Inodes with nlink 0, and the orphan items.
    unlinked: Vec<u64>,
    orphans: BTreeSet<u64>,
    /// Figures judged once the names are known (the repair adds names):
    /// (inode, nlink, names) of linked inodes, (directory, size, entry
    /// bytes), inodes with an invalid mode, inodes without INODE_ITEM.
    links: Vec<(u64, u32, u32)>,
    dir_sizes: Vec<(u64, u64, u64)>,
    bad_modes: Vec<Shape>,
    missing: Vec<Shape>,
}

/// What an inode's items show of it, to judge its type and figures by
/// when its INODE_ITEM is missing or its mode invalid.
#[derive(Debug, Clone, Copy)]
struct Shape {
    ino: u64,
    mode: u32,
    names: u32,
    has_entries: bool,
    entry_bytes: u64,
    extent_end: u64,
    found_bytes: u64,
}

impl Names {
    fn put(&mut self, name: &[u8]) -> NameAt {
        let off = self.arena.len();
        self.arena.extend_from_slice(name);
        NameAt {
            off,
            len: name.len(),
        }
    }

    /// One name of inode `ino`, from INODE_REF or INODE_EXTREF.
    fn add_ref(&mut self, ino: u64, r: &InodeRef<'_>) {
        let name = self.put(r.name);
        self.refs.push(Ref {
            parent: r.parent,
            hash: name_hash(r.name),
            ino,
            index: r.index,
            name,
        });
    }

    fn name(&self, n: NameAt) -> &[u8] {
        &self.arena[n.off..n.off + n.len]
    }

    fn mode(&self, ino: u64) -> Option<u32> {
        self.modes
            .binary_search_by_key(&ino, |m| m.0)
            .ok()
            .map(|i| self.modes[i].1)
    }
}

/// Checks the inodes of `t`; returns how many there were. Entries naming
/// subvolumes are added to `subvols`.
pub(crate) fn check(
    fs: &Filesystem,
    t: Tree,
    no_holes: bool,
    subvols: &mut Vec<SubvolEntry>,
    want: &mut CsumWant,
    p: &mut Problems,
) -> u64 {
    let tname = t.describe();
    let ss = fs.info.sectorsize as u64;
    let sb_gen = fs.info.sb.generation;
    let mut names = Names::default();
    let mut cur = Ino::default();
    let mut count = 0u64;
    let finish = |cur: &mut Ino, names: &mut Names, p: &mut Problems, count: &mut u64| {
        if cur.ino != 0 {
            finish_inode(&tname, t.id, cur, no_holes, sb_gen, names, p);
            *count += 1;
            if (*count).is_multiple_of(4096) {
                p.progress("inodes", *count);
            }
        }
    };
    let r = for_each_item(&fs.info, t, Key::MIN, Key::MAX, |k, d| {
        let here = || format!("{tname} key {k}");
        if k.objectid == ORPHAN_OBJECTID && k.item_type == ORPHAN_ITEM {
            names.orphans.insert(k.offset);
            return Ok(ControlFlow::Continue(()));
        }
        if k.objectid == FREE_INO_OBJECTID {
            if k.item_type == INODE_ITEM {
                p.add(
                    here(),
                    "the inode number cache (removed from the kernel in 5.11); \
                     `btrfs rescue clear-ino-cache` removes it",
                );
            }
            return Ok(ControlFlow::Continue(()));
        }
        if !(FIRST_FREE_OBJECTID..=LAST_FREE_OBJECTID).contains(&k.objectid) {
            return Ok(ControlFlow::Continue(()));
        }
        if k.objectid != cur.ino {
            finish(&mut cur, &mut names, p, &mut count);
            cur = Ino {
                ino: k.objectid,
                ..Default::default()
            };
        }
        match k.item_type {
            INODE_ITEM => match InodeItem::parse(d) {
                Ok(i) if cur.item.is_some() => {
                    let _ = i;
                    p.add(here(), "a second INODE_ITEM");
                }
                Ok(i) => {
                    if k.offset != 0 {
                        p.add(here(), "INODE_ITEM with a non-zero offset");
                    }
                    cur.item = Some(i);
                }
                Err(e) => p.add(here(), format!("INODE_ITEM: {e}")),
            },
            INODE_REF => match parse_inode_refs(&k, d) {
                Ok(refs) => {
                    for r in refs {
                        cur.names += 1;
                        names.add_ref(k.objectid, &r);
                    }
                }
                Err(e) => p.add(here(), format!("INODE_REF: {e}")),
            },
            INODE_EXTREF => match parse_inode_extrefs(d) {
                Ok(refs) => {
                    for r in refs {
                        if extref_hash(r.parent, r.name) != k.offset {
                            p.add(
                                here(),
                                format!("INODE_EXTREF name {:?} hashes elsewhere", lossy(r.name)),
                            );
                        }
                        cur.names += 1;
                        names.add_ref(k.objectid, &r);
                    }
                }
                Err(e) => p.add(here(), format!("INODE_EXTREF: {e}")),
            },
            DIR_ITEM | DIR_INDEX | XATTR_ITEM => match parse_dir_entries(d) {
                Ok(entries) => {
                    if k.item_type == DIR_INDEX && entries.len() != 1 {
                        p.add(here(), format!("DIR_INDEX with {} entries", entries.len()));
                    }
                    for e in entries {
                        if k.item_type != DIR_INDEX && name_hash(e.name) != k.offset {
                            let what = format!("name {:?} hashes elsewhere", lossy(e.name));
                            if k.item_type == XATTR_ITEM {
                                p.add(here(), what);
                            } else {
                                // Removed; its INODE_REF gets a DIR_ITEM
                                // where the name hashes.
                                p.add_fix(
                                    here(),
                                    what,
                                    Fix::DeleteDirName {
                                        tree: t.id,
                                        key: k,
                                        name: e.name.to_vec(),
                                    },
                                );
                                continue;
                            }
                        }
                        if k.item_type == XATTR_ITEM {
                            continue;
                        }
                        cur.has_entries = true;
                        cur.entry_bytes += e.name.len() as u64;
                        let loc = e.location;
                        if loc.item_type == ROOT_ITEM {
                            let idx = (k.item_type == DIR_INDEX).then_some(k.offset);
                            subvols.push((t.id, k.objectid, e.name.to_vec(), idx, loc.objectid));
                            continue;
                        }
                        if loc.item_type != INODE_ITEM || loc.offset != 0 {
                            p.add(
                                here(),
                                format!("entry {:?} points at key {loc}", lossy(e.name)),
                            );
                            continue;
                        }
                        let entry = Entry {
                            dir: k.objectid,
                            key: k.offset,
                            target: loc.objectid,
                            ftype: e.file_type,
                            name: names.put(e.name),
                            matched: false,
                        };
                        if k.item_type == DIR_ITEM {
                            names.items.push(entry);
                        } else {
                            names.index.push(entry);
                        }
                    }
                }
                Err(e) => p.add(here(), format!("entry: {e}")),
            },
            VERITY_DESC_ITEM | VERITY_MERKLE_ITEM | DIR_LOG_ITEM | DIR_LOG_INDEX => {}
            t if k.item_type != EXTENT_DATA => {
                p.add(
                    here(),
                    format!("item type {t} does not belong in a subvolume tree"),
                );
            }
            _ => {
                file_extent(&mut cur, t.id, &k, d, ss, p, &tname);
                nodatasum_compressed(&cur, &k, d, p, &tname);
                if t.id != DATA_RELOC_TREE_OBJECTID {
                    wanted_csums(&cur, &k, d, want, &tname);
                }
            }
        }
        Ok(ControlFlow::Continue(()))
    });
    finish(&mut cur, &mut names, p, &mut count);
    if let Err(e) = r {
        p.add(&tname, format!("inodes not all checked: {e}"));
        return count;
    }
    check_names(&tname, t, fs, &mut names, p);
    count
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A compressed extent in a file without checksums: the kernel never
/// writes one (compression needs checksums), and reads of it fail.
fn nodatasum_compressed(cur: &Ino, k: &Key, d: &[u8], p: &mut Problems, tname: &str) {
    let Ok(fe) = FileExtent::parse(d) else { return };
    let nodatasum = cur
        .item
        .as_ref()
        .is_some_and(|i| i.flags & INODE_NODATASUM != 0);
    if nodatasum && fe.compression != 0 && matches!(fe.kind, FileExtentKind::Extent { .. }) {
        p.add(
            format!("{tname} key {k}"),
            "compressed extent in a file without checksums (NODATASUM)",
        );
    }
}

/// The sectors a written regular extent wants checksums for, or wants
/// none for (an inode with NODATASUM).
fn wanted_csums(cur: &Ino, k: &Key, d: &[u8], want: &mut CsumWant, tname: &str) {
    let Ok(fe) = FileExtent::parse(d) else { return };
    if !matches!(
        fe.kind,
        FileExtentKind::Extent {
            prealloc: false,
            ..
        }
    ) {
        return;
    }
    if let Ok(Some((s, e))) = fe.csum_range() {
        let sums = cur
            .item
            .as_ref()
            .is_none_or(|i| i.flags & INODE_NODATASUM == 0);
        want.add(s, e, sums, || {
            format!("{tname} inode {} offset {}", k.objectid, k.offset)
        });
    }
}

/// One EXTENT_DATA item of the current inode (progs' process_file_extent).
fn file_extent(
    cur: &mut Ino,
    tree: u64,
    k: &Key,
    d: &[u8],
    ss: u64,
    p: &mut Problems,
    tname: &str,
) {
    let here = || format!("{tname} key {k}");
    cur.has_extents = true;
    if cur.extent_start.is_none() {
        cur.extent_start = Some(k.offset);
        cur.extent_end = k.offset;
    }
    if cur.extent_end > k.offset {
        p.add(
            here(),
            format!(
                "overlaps the extent before, which ends at {}",
                cur.extent_end
            ),
        );
    } else if cur.extent_end < k.offset && cur.first_gap.is_none() {
        cur.first_gap = Some(cur.extent_end);
    }
    let fe = match FileExtent::parse(d) {
        Ok(f) => f,
        Err(e) => {
            p.add(here(), format!("EXTENT_DATA: {e}"));
            return;
        }
    };
    let len = match fe.kind {
        FileExtentKind::Inline { data } => {
            if fe.ram_bytes == 0 {
                p.add(here(), "inline extent of 0 bytes");
            }
            if fe.compression == 0 && data.len() as u64 != fe.ram_bytes {
                p.add_fix(
                    here(),
                    format!(
                        "inline extent holds {} bytes, ram_bytes {}",
                        data.len(),
                        fe.ram_bytes
                    ),
                    Fix::InlineRamBytes {
                        tree,
                        key: *k,
                        ram: data.len() as u64,
                    },
                );
            }
            // What the inode holds: the bytes stored, uncompressed.
            cur.found_bytes += if fe.compression == 0 {
                data.len() as u64
            } else {
                fe.ram_bytes
            };
            fe.ram_bytes.div_ceil(ss) * ss
        }
        FileExtentKind::Extent {
            prealloc,
            disk_bytenr,
            offset,
            num_bytes,
            ..
        } => {
            if num_bytes == 0 || num_bytes % ss != 0 {
                p.add(
                    here(),
                    format!("num_bytes {num_bytes} not a positive multiple of the sector size"),
                );
            }
            if num_bytes.saturating_add(offset) > fe.ram_bytes {
                p.add(
                    here(),
                    format!(
                        "offset {offset} + num_bytes {num_bytes} beyond ram_bytes {}",
                        fe.ram_bytes
                    ),
                );
            }
            if prealloc && (fe.compression != 0 || fe.encryption != 0 || fe.other_encoding != 0) {
                p.add(here(), "preallocated extent with an encoding");
            }
            if disk_bytenr != 0 {
                cur.found_bytes += num_bytes;
            }
            num_bytes
        }
    };
    cur.extent_end = k.offset.saturating_add(len);
}

/// The checks of one inode once all its items are read.
fn finish_inode(
    tname: &str,
    tree: u64,
    cur: &Ino,
    no_holes: bool,
    sb_gen: u64,
    names: &mut Names,
    p: &mut Problems,
) {
    let here = || format!("{tname} inode {}", cur.ino);
    let shape = |mode| Shape {
        ino: cur.ino,
        mode,
        names: cur.names,
        has_entries: cur.has_entries,
        entry_bytes: cur.entry_bytes,
        extent_end: cur.extent_end,
        found_bytes: cur.found_bytes,
    };
    let Some(i) = &cur.item else {
        names.missing.push(shape(0));
        return;
    };
    names.modes.push((cur.ino, i.mode));
    let fmt = i.mode & 0o170000;
    if !mode_valid(i.mode) {
        names.bad_modes.push(shape(i.mode));
    }
    if i.generation > sb_gen + 1 || i.transid > sb_gen + 1 {
        let fix = |g: u64| if g > sb_gen + 1 { sb_gen } else { g };
        p.add_fix(
            here(),
            format!(
                "generation {} / transid {} after the superblock's {sb_gen}",
                i.generation, i.transid
            ),
            Fix::InodeGenerations {
                tree,
                ino: cur.ino,
                generation: fix(i.generation),
                transid: fix(i.transid),
            },
        );
    }
    if fmt == 0o120000 && i.flags & (INODE_IMMUTABLE | INODE_APPEND) != 0 {
        p.add(
            here(),
            format!(
                "symlink with flags {:#x} (immutable or append-only)",
                i.flags
            ),
        );
    }
    if i.nlink == 0 {
        names.unlinked.push(cur.ino);
    } else {
        names.links.push((cur.ino, i.nlink, cur.names));
    }
    if i.nlink == 0 {
        // An orphan, half deleted: what it still holds is not checked
        // (its orphan item is, below).
        return;
    }
    if fmt == 0o040000 {
        if i.nlink >= 2 {
            p.add(here(), format!("directory with nlink {}", i.nlink));
        }
        names.dir_sizes.push((cur.ino, i.size, cur.entry_bytes));
        if cur.has_extents {
            p.add(here(), "directory with file extents");
        }
    } else if fmt == 0o100000 || fmt == 0o120000 {
        if cur.has_entries {
            p.add(here(), "file with directory entries");
        }
        if i.nlink > 0 && cur.found_bytes != i.nbytes {
            p.add_fix(
                here(),
                format!(
                    "nbytes {} but its extents hold {}",
                    i.nbytes, cur.found_bytes
                ),
                Fix::InodeNbytes {
                    tree,
                    ino: cur.ino,
                    nbytes: cur.found_bytes,
                },
            );
        }
        if i.nlink > 0 && !no_holes && i.size > 0 {
            let gap = cur.first_gap.is_some_and(|g| g < i.size);
            if cur.extent_end < i.size || cur.extent_start.is_some_and(|s| s != 0) || gap {
                let from = cur
                    .first_gap
                    .or(cur.extent_start.filter(|&s| s != 0).map(|_| 0));
                let what = format!(
                    "file extents do not cover its size {} (no hole extent from {}; the filesystem has no no-holes)",
                    i.size,
                    from.unwrap_or(cur.extent_end)
                );
                if fmt == 0o100000 {
                    p.add_fix(
                        here(),
                        what,
                        Fix::FillHoles {
                            tree,
                            ino: cur.ino,
                            size: i.size,
                        },
                    );
                } else {
                    p.add(here(), what);
                }
            }
        }
    }
}

/// A mode of a known type with no bits past the type and permissions
/// (progs' "invalid inode mode bit").
fn mode_valid(mode: u32) -> bool {
    mode & !0o177777 == 0 && type_of(mode) != FT_UNKNOWN
}

/// The file type a directory entry of an inode of `mode` carries.
fn type_of(mode: u32) -> u8 {
    match mode & 0o170000 {
        0o100000 => FT_REG_FILE,
        0o040000 => FT_DIR,
        0o120000 => FT_SYMLINK,
        0o020000 => FT_CHRDEV,
        0o060000 => FT_BLKDEV,
        0o010000 => FT_FIFO,
        0o140000 => FT_SOCK,
        _ => FT_UNKNOWN,
    }
}

/// A mode for an inode whose own is missing or invalid, as progs'
/// detect_imode: the type an entry naming it gives, else a directory when
/// it has entries (or is the top directory), else a regular file; the
/// permissions mkdir and creat give by default.
fn detect_mode(s: &Shape, root_dir: u64, n: &Names) -> u32 {
    let named = n
        .items
        .iter()
        .chain(n.index.iter())
        .find(|e| e.target == s.ino && e.ftype != FT_UNKNOWN)
        .map(|e| e.ftype);
    let ft = match named {
        Some(ft) => ft,
        None if s.has_entries || s.ino == root_dir => FT_DIR,
        None => FT_REG_FILE,
    };
    match ft {
        FT_DIR => 0o040755,
        FT_SYMLINK => 0o120777,
        FT_CHRDEV => 0o020644,
        FT_BLKDEV => 0o060644,
        FT_FIFO => 0o010644,
        FT_SOCK => 0o140644,
        _ => 0o100644,
    }
}

/// Names across inodes: every INODE_REF with its DIR_ITEM and DIR_INDEX,
/// every entry with its INODE_REF; orphans. Then the figures that count
/// names (nlink, a directory's size), with the names the repair adds, and
/// the inodes whose type or item is missing.
fn check_names(tname: &str, t: Tree, fs: &Filesystem, n: &mut Names, p: &mut Problems) {
    let tree = t.id;
    let root_dir = fs
        .root_item(t.id)
        .ok()
        .flatten()
        .map_or(FIRST_FREE_OBJECTID, |r| r.root_dirid);
    // In key order already, unless the tree is out of order (reported).
    n.items.sort_by_key(|e| (e.dir, e.key));
    n.index.sort_by_key(|e| (e.dir, e.key));
    n.modes.sort_unstable_by_key(|m| m.0);
    // Inodes that entries name but that have no item at all (lost with a
    // leaf a repair takes out): made anew, as progs' repair_inode_no_item,
    // an INODE_ITEM of the type the entries give and an INODE_REF from a
    // DIR_ITEM and DIR_INDEX pair (below).
    let mut ghosts: Vec<u64> = n
        .items
        .iter()
        .chain(n.index.iter())
        .map(|e| e.target)
        .filter(|&t| n.mode(t).is_none() && !n.missing.iter().any(|s| s.ino == t))
        .collect();
    ghosts.sort_unstable();
    ghosts.dedup();
    ghosts.retain(|&t| !n.refs.iter().any(|r| r.ino == t));
    n.missing.extend(ghosts.into_iter().map(|ino| Shape {
        ino,
        mode: 0,
        names: 0,
        has_entries: false,
        entry_bytes: 0,
        extent_end: 0,
        found_bytes: 0,
    }));
    let missing = std::mem::take(&mut n.missing);
    let shape_of = |ino: u64| missing.iter().find(|s| s.ino == ino);
    // Whether `d` is a directory the repair can add names to.
    let is_dir = |n: &Names, d: u64| match n.mode(d) {
        Some(m) => m & 0o170000 == 0o040000,
        None => shape_of(d).is_some_and(|s| s.has_entries || s.ino == root_dir),
    };
    // What the repair adds: name bytes per directory, names per inode.
    let mut added_bytes: BTreeMap<u64, i64> = BTreeMap::new();
    let mut added_links: BTreeMap<u64, u32> = BTreeMap::new();
    let refs = std::mem::take(&mut n.refs);
    for r in &refs {
        let (ino, parent, index) = (r.ino, r.parent, r.index);
        if ino == root_dir && parent == ino {
            continue; // the top directory's ".."
        }
        let here = |n: &Names| {
            format!(
                "{tname} inode {ino} name {:?} in directory {parent}",
                lossy(n.name(r.name))
            )
        };
        let name = n.name(r.name).to_vec();
        let mode = n.mode(ino);
        let valid = mode.is_some_and(mode_valid);
        let wrong_type = |ft: u8| valid && mode.is_some_and(|m| type_of(m) != ft);
        // DIR_ITEM: among the entries of (parent, hash), the one of this name.
        let lo = n
            .items
            .partition_point(|e| (e.dir, e.key) < (parent, r.hash));
        let hit = (lo..n.items.len())
            .take_while(|&i| (n.items[i].dir, n.items[i].key) == (parent, r.hash))
            .find(|&i| n.name(n.items[i].name) == name.as_slice());
        let ix = n
            .index
            .binary_search_by_key(&(parent, index), |e| (e.dir, e.key))
            .ok();
        // The type its entries give, for the ones added.
        let ftype = match mode {
            Some(m) if valid => type_of(m),
            _ => hit
                .map(|i| n.items[i].ftype)
                .or(ix.map(|i| n.index[i].ftype))
                .unwrap_or(FT_REG_FILE),
        };
        let can_add = is_dir(n, parent) && (mode.is_some() || shape_of(ino).is_some());
        let mut add = |n: &Names, p: &mut Problems, what: String, part: NamePart, bytes: i64| {
            if can_add {
                *added_bytes.entry(parent).or_default() += bytes;
                p.add_fix(
                    here(n),
                    what,
                    Fix::AddName {
                        tree,
                        dir: parent,
                        ino,
                        name: name.clone(),
                        index,
                        ftype,
                        part,
                    },
                );
            } else {
                p.add(here(n), what);
            }
        };
        match hit {
            Some(i) => {
                n.items[i].matched = true;
                let (target, ft) = (n.items[i].target, n.items[i].ftype);
                if target != ino {
                    p.add(here(n), format!("DIR_ITEM points at inode {target}"));
                } else if wrong_type(ft) {
                    p.add(
                        here(n),
                        format!(
                            "DIR_ITEM type {ft} but the inode's mode is {:o}",
                            mode.unwrap_or(0)
                        ),
                    );
                }
            }
            None => add(
                n,
                p,
                "no DIR_ITEM".into(),
                NamePart::DirItem,
                name.len() as i64,
            ),
        }
        match ix {
            Some(i) => {
                n.index[i].matched = true;
                let (target, at) = (n.index[i].target, n.index[i].name);
                if n.name(at) != name.as_slice() {
                    let what = format!(
                        "DIR_INDEX {index} names {:?}, inode {target}",
                        lossy(n.name(at))
                    );
                    if target == ino && can_add {
                        *added_bytes.entry(parent).or_default() +=
                            name.len() as i64 - at.len as i64;
                        p.add_fix(
                            here(n),
                            what,
                            Fix::RewriteDirIndex {
                                tree,
                                dir: parent,
                                index,
                                ino,
                                name: name.clone(),
                                ftype,
                            },
                        );
                    } else {
                        p.add(here(n), what);
                    }
                } else if target != ino {
                    p.add(
                        here(n),
                        format!("DIR_INDEX {index} names {:?}, inode {target}", lossy(&name)),
                    );
                }
            }
            None => add(
                n,
                p,
                format!("no DIR_INDEX {index}"),
                NamePart::DirIndex,
                name.len() as i64,
            ),
        }
    }
    // What no name claimed, but in a directory being deleted. A DIR_INDEX
    // with its DIR_ITEM both naming an inode that is there give it the
    // INODE_REF they imply.
    let orphan_dir = |d: u64| n.unlinked.contains(&d) && n.orphans.contains(&d);
    let mut implied = Vec::new();
    for e in n.index.iter().filter(|e| !e.matched && !orphan_dir(e.dir)) {
        let name = n.name(e.name);
        let h = name_hash(name);
        let lo = n.items.partition_point(|d| (d.dir, d.key) < (e.dir, h));
        let pair = (lo..n.items.len())
            .take_while(|&i| (n.items[i].dir, n.items[i].key) == (e.dir, h))
            .find(|&i| {
                !n.items[i].matched
                    && n.items[i].target == e.target
                    && n.name(n.items[i].name) == name
            });
        let there = n.mode(e.target).is_some() || shape_of(e.target).is_some();
        // A DIR_INDEX alone (its DIR_ITEM gone too) of an inode that is
        // there gets its DIR_ITEM back as well.
        if there && (pair.is_some() || is_dir(n, e.dir)) {
            implied.push((pair, e.dir, e.key, e.target, e.ftype, name.to_vec()));
        }
    }
    for (pair, dir, index, ino, ftype, name) in implied {
        match pair {
            Some(i) => n.items[i].matched = true,
            None => {
                *added_bytes.entry(dir).or_default() += name.len() as i64;
                p.add_fix(
                    format!("{tname} directory {dir}"),
                    format!(
                        "DIR_INDEX {index} {:?} -> inode {ino}: no DIR_ITEM",
                        lossy(&name)
                    ),
                    Fix::AddName {
                        tree,
                        dir,
                        ino,
                        name: name.clone(),
                        index,
                        ftype,
                        part: NamePart::DirItem,
                    },
                );
            }
        }
        if let Ok(j) = n
            .index
            .binary_search_by_key(&(dir, index), |e| (e.dir, e.key))
        {
            n.index[j].matched = true;
        }
        *added_links.entry(ino).or_default() += 1;
        p.add_fix(
            format!("{tname} directory {dir}"),
            format!(
                "{} {index} {:?} -> inode {ino}: no INODE_REF",
                if pair.is_some() {
                    "DIR_ITEM and DIR_INDEX"
                } else {
                    "DIR_INDEX"
                },
                lossy(&name),
            ),
            Fix::AddName {
                tree,
                dir,
                ino,
                name,
                index,
                ftype,
                part: NamePart::InodeRef,
            },
        );
    }
    for (what, list) in [("DIR_ITEM", &n.items), ("DIR_INDEX", &n.index)] {
        for e in list.iter().filter(|e| !e.matched && !orphan_dir(e.dir)) {
            let which = if what == "DIR_INDEX" {
                format!("DIR_INDEX {}", e.key)
            } else {
                what.to_string()
            };
            p.add(
                format!("{tname} directory {}", e.dir),
                format!(
                    "{which} {:?} -> inode {}: no INODE_REF{}",
                    lossy(n.name(e.name)),
                    e.target,
                    if n.mode(e.target).is_some() || shape_of(e.target).is_some() {
                        ""
                    } else {
                        " and no inode"
                    }
                ),
            );
        }
    }
    let mut fixed_modes = BTreeMap::new();
    for s in std::mem::take(&mut n.bad_modes) {
        let mode = detect_mode(&s, root_dir, n);
        fixed_modes.insert(s.ino, mode);
        p.add_fix(
            format!("{tname} inode {}", s.ino),
            format!("invalid mode {:o}", s.mode),
            Fix::InodeMode {
                tree,
                ino: s.ino,
                mode,
            },
        );
    }
    for s in &missing {
        let here = format!("{tname} inode {}", s.ino);
        let nlink = s.names + added_links.get(&s.ino).copied().unwrap_or(0);
        if nlink == 0 {
            p.add(here, "has items but no INODE_ITEM, and no name");
            continue;
        }
        let mode = detect_mode(s, root_dir, n);
        let size = if mode & 0o170000 == 0o040000 {
            (s.entry_bytes as i64 + added_bytes.get(&s.ino).copied().unwrap_or(0)).max(0) as u64
        } else {
            s.extent_end
        };
        p.add_fix(
            here,
            "has items but no INODE_ITEM",
            Fix::NewInodeItem {
                tree,
                ino: s.ino,
                mode,
                size,
                nbytes: s.found_bytes,
                nlink,
            },
        );
    }
    for &(ino, nlink, names) in &n.links {
        let total = names + added_links.get(&ino).copied().unwrap_or(0);
        if nlink == total {
            continue;
        }
        let here = format!("{tname} inode {ino}");
        let what = format!("nlink {nlink} but {total} names");
        if total > 0 {
            p.add_fix(
                here,
                what,
                Fix::Nlink {
                    tree,
                    ino,
                    nlink: total,
                },
            );
        } else {
            let ftype = match n.mode(ino) {
                Some(m) if mode_valid(m) => type_of(m),
                _ => fixed_modes.get(&ino).map_or(FT_REG_FILE, |&m| type_of(m)),
            };
            p.add_fix(
                here,
                format!("{what}: to lost+found"),
                Fix::LostFound { tree, ino, ftype },
            );
        }
    }
    for &(dir, size, bytes) in &n.dir_sizes {
        let want = (bytes as i64 + added_bytes.get(&dir).copied().unwrap_or(0)).max(0) as u64;
        if size != want {
            p.add_fix(
                format!("{tname} inode {dir}"),
                format!("directory size {size} but its entries make {want}"),
                Fix::DirSize {
                    tree,
                    ino: dir,
                    size: want,
                },
            );
        }
    }
    for ino in &n.unlinked {
        if !n.orphans.contains(ino) {
            p.add(format!("{tname} inode {ino}"), "nlink 0 and no orphan item");
        }
    }
}
