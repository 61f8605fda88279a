//! Filling a new filesystem from a directory (mkfs --rootdir): every file
//! type, modes, owners, times with nanoseconds, xattrs (ACLs included),
//! hard links, inline extents for small files, holes kept as holes, data
//! checksummed. Directories are walked in name order and inodes numbered
//! in walk order, so the same tree gives the same image.
//!
//! This is the host side: it reads the source with libc (lstat, xattrs,
//! SEEK_DATA/SEEK_HOLE) and writes through the transaction engine. File
//! data is read, compressed and checksummed on worker threads
//! ([`super::data`]), files planned a little ahead of the walk; the walk
//! (one thread) takes the pieces in its order and does every allocation
//! and tree change, so the image does not depend on the threads. With
//! `--reflink` the data is shared from the source file (FICLONERANGE) and
//! only read for its checksums.
//!
//! Here the walk (directories, entries, links, subvolumes); a regular
//! file's data is in `file.rs`, the libc reads of the source in
//! `source.rs`.

mod file;
mod source;

use super::data::Pipe;
use crate::error::{Error, Result};
use crate::inode::{file_type, user_rdev_to_kernel};
use crate::tx::Trans;
use file::FilePlan;
use source::{in_path, io_err, ts, xattrs};
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::Metadata;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{InodeItem, Timespec};

/// Bytes of file data handed to the worker threads at a time (read,
/// compressed and checksummed, waiting to be written).
const PIPE_BUDGET: u64 = 128 << 20;

/// Changed tree blocks after which a commit is made, bounding memory
/// whatever the size of the tree being copied. UBTRFS_MKFS_COMMIT_BLOCKS
/// overrides it (crash tests make commits frequent with a small tree).
const COMMIT_BLOCKS: usize = 8192;

/// Worker threads for `threads` asked (0: one per CPU).
fn threads(asked: usize) -> usize {
    match asked {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

fn commit_blocks() -> usize {
    std::env::var("UBTRFS_MKFS_COMMIT_BLOCKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(COMMIT_BLOCKS)
}

/// Inode flags mkfs can set (`--inode-flags`), as btrfs stores them.
pub const INODE_NODATASUM: u64 = 1 << 0;
pub const INODE_NODATACOW: u64 = 1 << 1;
pub const INODE_NOCOMPRESS: u64 = 1 << 3;

/// What a directory given to `--subvol` becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubvolKind {
    Rw,
    Ro,
    Default,
    DefaultRo,
}

/// How to fill the filesystem.
#[derive(Debug, Clone, Default)]
pub struct RootdirOptions {
    pub dir: PathBuf,
    /// Directories (relative to `dir`) made subvolumes.
    pub subvols: Vec<(PathBuf, SubvolKind)>,
    /// Inode flags for paths (relative to `dir`), inherited below them
    /// within a subvolume.
    pub inode_flags: Vec<(PathBuf, u64)>,
    /// Compression algorithm (COMPRESS_*) and level.
    pub compress: Option<(u8, i32)>,
    /// Fixed fsid: subvolume UUIDs are derived from it.
    pub uuid_seed: Option<[u8; 16]>,
    /// With SOURCE_DATE_EPOCH: every time is clamped to it, and atime,
    /// ctime and otime follow mtime, so reading the source (atime) or
    /// copying it (ctime) does not change the image.
    pub clamp_time: Option<Timespec>,
    /// The time new inodes are born (otime) when not clamped.
    pub now: Timespec,
    /// Threads reading, compressing and checksumming file data (0: one
    /// per CPU; 1: all in the walking thread). The image does not depend
    /// on it.
    pub threads: usize,
    /// `--reflink`: file data is shared from the source (FICLONERANGE)
    /// into the image file, which lives on the filesystem with this
    /// st_dev; compression is off, checksums are computed from the data.
    pub reflink: Option<u64>,
}

/// What was written.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub inodes: u64,
    pub dirs: u64,
    pub files: u64,
    pub hardlinks: u64,
    pub data_bytes: u64,
    pub inline_files: u64,
}

struct Walker<'a> {
    t: &'a mut Trans,
    o: &'a RootdirOptions,
    /// The next inode number of each tree.
    next_ino: HashMap<u64, u64>,
    /// Source (dev, ino) of files with several links, per tree -> our
    /// inode (links do not cross subvolumes).
    links: HashMap<(u64, u64, u64), u64>,
    /// Subvolumes made, to mark read-only or default at the end.
    made: Vec<(u64, SubvolKind)>,
    /// Commit when this many tree blocks are changed.
    commit_blocks: usize,
    stats: Stats,
    progress: &'a mut dyn FnMut(&Stats),
    /// File data made on worker threads.
    pipe: Pipe,
    /// Files planned ahead of the walk, by source path.
    plans: HashMap<PathBuf, Result<FilePlan>>,
    /// Multiply linked files planned ahead (tree, dev, ino).
    ahead_links: HashSet<(u64, u64, u64)>,
}

impl Walker<'_> {
    fn times(&self, m: &Metadata) -> (Timespec, Timespec, Timespec, Timespec) {
        let mtime = ts(m.mtime(), m.mtime_nsec());
        match self.o.clamp_time {
            Some(c) => {
                let t = if (mtime.sec, mtime.nsec) > (c.sec, c.nsec) {
                    c
                } else {
                    mtime
                };
                (t, t, t, t)
            }
            None => (
                ts(m.atime(), m.atime_nsec()),
                ts(m.ctime(), m.ctime_nsec()),
                mtime,
                self.o.now,
            ),
        }
    }

    fn inode_item(&self, m: &Metadata) -> InodeItem {
        let (atime, ctime, mtime, otime) = self.times(m);
        let transid = self.t.transid;
        let is_dev = matches!(m.mode() & 0o170000, 0o020000 | 0o060000);
        InodeItem {
            generation: transid,
            transid,
            size: 0,
            nbytes: 0,
            block_group: 0,
            nlink: 1,
            uid: m.uid(),
            gid: m.gid(),
            mode: m.mode(),
            rdev: if is_dev {
                user_rdev_to_kernel(m.rdev())
            } else {
                0
            },
            flags: 0,
            sequence: 0,
            atime,
            ctime,
            mtime,
            otime,
        }
    }

    fn set_xattrs(&mut self, tree: u64, ino: u64, path: &Path) -> Result<()> {
        for (name, value) in xattrs(path)? {
            self.t
                .inode_mut(tree, ino)
                .set_xattr(&name, &value)
                .map_err(|e| in_path(path, e))?;
        }
        Ok(())
    }

    /// Copies directory `src` (already made as inode `dir` of `tree`, at
    /// `rel` from the top) entry by entry; `flags` are inherited.
    fn walk_dir(&mut self, src: &Path, tree: u64, dir: u64, rel: &Path, flags: u64) -> Result<()> {
        let rd = std::fs::read_dir(src).map_err(|e| io_err(src, "read directory", e))?;
        let mut names: Vec<std::ffi::OsString> = Vec::new();
        for e in rd {
            names.push(e.map_err(|e| io_err(src, "read directory", e))?.file_name());
        }
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        let here = Dir { tree, dir, flags };
        let mut ahead = Ahead {
            metas: vec![None; names.len()],
            names,
            next: 0,
        };
        // Dir indexes start at 2, as the kernel numbers them.
        for i in 0..ahead.names.len() {
            self.look_ahead(src, rel, here, &mut ahead, i + 1);
            let name = ahead.names[i].clone();
            let path = src.join(&name);
            let m = match ahead.metas[i].take() {
                Some(m) => m,
                None => std::fs::symlink_metadata(&path).map_err(|e| io_err(&path, "lstat", e))?,
            };
            self.add_entry(&path, &rel.join(&name), &name, here, i as u64 + 2, m)?;
            if self.t.dirty_blocks() > self.commit_blocks {
                self.t.commit()?;
            }
            (self.progress)(&self.stats);
        }
        Ok(())
    }

    fn add_entry(
        &mut self,
        path: &Path,
        rel: &Path,
        name: &OsStr,
        at: Dir,
        index: u64,
        m: Metadata,
    ) -> Result<()> {
        let name = name.as_bytes();
        let (tree, dir) = (at.tree, at.dir);
        let ftype = file_type(m.mode());
        if m.is_dir() {
            if let Some(&(_, kind)) = self.o.subvols.iter().find(|(p, _)| p == rel) {
                return self.add_subvol(path, rel, name, at, kind, &m);
            }
        }
        if !m.is_dir() && m.nlink() > 1 {
            if let Some(&ino) = self.links.get(&(tree, m.dev(), m.ino())) {
                if let Some(Ok(plan)) = self.plans.remove(path) {
                    self.discard(plan);
                }
                self.t
                    .inode_mut(tree, dir)
                    .link_inode(name, ino, ftype, index, None)
                    .map_err(|e| in_path(path, e))?;
                let mut it = self.t.inode(tree, ino)?.expect("linked inode was made");
                it.nlink += 1;
                self.t.inode_mut(tree, ino).put(&it)?;
                self.stats.hardlinks += 1;
                return Ok(());
            }
        }
        let ino = self.take_ino(tree);
        let mut item = self.inode_item(&m);
        item.flags = self.flags_for(rel, at.flags);
        self.t.inode_mut(tree, ino).put(&item)?;
        self.t
            .inode_mut(tree, dir)
            .link_inode(name, ino, ftype, index, None)
            .map_err(|e| in_path(path, e))?;
        self.stats.inodes += 1;
        if !m.is_dir() && m.nlink() > 1 {
            self.links.insert((tree, m.dev(), m.ino()), ino);
        }
        self.set_xattrs(tree, ino, path)?;
        let ft = m.file_type();
        if ft.is_dir() {
            self.stats.dirs += 1;
            self.walk_dir(path, tree, ino, rel, item.flags)?;
            // Links made the size; the rest of the item is the source's.
            let now = self.t.inode(tree, ino)?.expect("directory was made");
            item.size = now.size;
        } else if ft.is_symlink() {
            let target = std::fs::read_link(path).map_err(|e| io_err(path, "readlink", e))?;
            let target = target.as_os_str().as_bytes();
            self.t
                .inode_mut(tree, ino)
                .insert_inline_extent(target, target.len() as u64, 0)
                .map_err(|e| in_path(path, e))?;
            item.size = target.len() as u64;
            item.nbytes = target.len() as u64;
        } else if ft.is_file() {
            if let Some(dev) = self.o.reflink {
                if m.dev() != dev && m.len() > 0 {
                    return Err(Error::Invalid(format!(
                        "{}: --reflink: on another filesystem than the image (data can only \
                         be shared within one filesystem)",
                        path.display()
                    )));
                }
            }
            self.stats.files += 1;
            let (size, nbytes) = self.copy_file(path, tree, ino, m.len(), &mut item.flags)?;
            item.size = size;
            item.nbytes = nbytes;
        }
        self.t.inode_mut(tree, ino).put(&item)
    }

    fn take_ino(&mut self, tree: u64) -> u64 {
        let n = self.next_ino.entry(tree).or_insert(FIRST_INODE + 1);
        *n += 1;
        *n - 1
    }

    /// Flags of a new inode at `rel`: inherited, plus those asked for it.
    fn flags_for(&self, rel: &Path, inherited: u64) -> u64 {
        let mut f = inherited;
        for (p, fl) in &self.o.inode_flags {
            if p == rel {
                f |= fl;
            }
        }
        if f & INODE_NODATACOW != 0 {
            f |= INODE_NODATASUM;
        }
        f
    }

    /// Makes directory `path` a subvolume linked at `at`, and fills it.
    fn add_subvol(
        &mut self,
        path: &Path,
        rel: &Path,
        name: &[u8],
        at: Dir,
        kind: SubvolKind,
        m: &Metadata,
    ) -> Result<()> {
        let uuid = match self.o.uuid_seed {
            Some(seed) => crate::mkfs::derived_uuid(&seed, &format!("subvolume {}", rel.display())),
            None => crate::inode::root::random_uuid()?,
        };
        let place = crate::subvol::Place {
            tree: at.tree,
            dir: at.dir,
            name,
        };
        let (_, _, _, otime) = self.times(m);
        let id = self
            .t
            .create_subvolume(&place, uuid, false, otime)
            .map_err(|e| in_path(path, e))?;
        self.made.push((id, kind));
        let mut top = self.inode_item(m);
        // Inode flags do not cross into a subvolume.
        top.flags = self.flags_for(rel, 0);
        self.set_xattrs(id, FIRST_INODE, path)?;
        self.stats.dirs += 1;
        self.walk_dir(path, id, FIRST_INODE, rel, top.flags)?;
        top.size = self.t.inode(id, FIRST_INODE)?.expect("subvolume top").size;
        self.t.inode_mut(id, FIRST_INODE).put(&top)
    }
}

/// A directory's names and how far lookahead got in them.
struct Ahead {
    names: Vec<std::ffi::OsString>,
    /// lstat results taken by lookahead.
    metas: Vec<Option<Metadata>>,
    next: usize,
}

/// The directory entries are being added to.
#[derive(Debug, Clone, Copy)]
struct Dir {
    tree: u64,
    dir: u64,
    flags: u64,
}

/// Fills the top-level subvolume from `o.dir` (and the subvolumes asked
/// for below it). The caller commits.
pub fn populate(
    t: &mut Trans,
    o: &RootdirOptions,
    progress: &mut dyn FnMut(&Stats),
) -> Result<Stats> {
    let m = std::fs::metadata(&o.dir).map_err(|e| io_err(&o.dir, "stat", e))?;
    if !m.is_dir() {
        return Err(Error::Invalid(format!(
            "{}: not a directory",
            o.dir.display()
        )));
    }
    for (p, _) in &o.subvols {
        if !o.dir.join(p).is_dir() || p.as_os_str().is_empty() {
            return Err(Error::Invalid(format!(
                "--subvol {}: not a directory below {}",
                p.display(),
                o.dir.display()
            )));
        }
    }
    if o.subvols
        .iter()
        .filter(|(_, k)| matches!(k, SubvolKind::Default | SubvolKind::DefaultRo))
        .count()
        > 1
    {
        return Err(Error::Invalid(
            "at most one --subvol can be the default".into(),
        ));
    }
    if let Some((algo, _)) = o.compress {
        t.info.sb.incompat_flags |= match algo {
            COMPRESS_LZO => INCOMPAT_COMPRESS_LZO,
            COMPRESS_ZSTD => INCOMPAT_COMPRESS_ZSTD,
            _ => 0,
        };
    }
    let tree = FS_TREE_OBJECTID;
    let mut w = Walker {
        t,
        o,
        next_ino: HashMap::new(),
        links: HashMap::new(),
        made: Vec::new(),
        commit_blocks: commit_blocks(),
        stats: Stats::default(),
        progress,
        pipe: Pipe::new(threads(o.threads), PIPE_BUDGET)?,
        plans: HashMap::new(),
        ahead_links: HashSet::new(),
    };
    // The top directory takes the source's attributes.
    let mut top = w.inode_item(&m);
    top.flags = w.flags_for(Path::new(""), 0);
    w.set_xattrs(tree, FIRST_INODE, &o.dir)?;
    w.walk_dir(&o.dir, tree, FIRST_INODE, Path::new(""), top.flags)?;
    top.size = w.t.inode(tree, FIRST_INODE)?.expect("top directory").size;
    w.t.inode_mut(tree, FIRST_INODE).put(&top)?;
    let (made, stats) = (std::mem::take(&mut w.made), w.stats);
    for (id, kind) in made {
        if matches!(kind, SubvolKind::Ro | SubvolKind::DefaultRo) {
            t.root_item_mut(id)?.flags |= ROOT_SUBVOL_RDONLY;
        }
        if matches!(kind, SubvolKind::Default | SubvolKind::DefaultRo) {
            t.set_default_subvol(id)?;
        }
    }
    Ok(stats)
}
