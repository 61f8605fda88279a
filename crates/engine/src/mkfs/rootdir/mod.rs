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

use super::data::{Job, Piece, Pipe, Slot};
use crate::error::{Error, Result};
use crate::inode::{file_type, user_rdev_to_kernel};
use crate::tx::Trans;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{CString, OsStr};
use std::fs::{File, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{InodeItem, Timespec};
use ubtrfs_format::Key;

/// Size of the pieces a file's data is read and written in: each is one
/// extent (the kernel's extents go up to 128 MiB; smaller ones bound the
/// memory used).
const EXTENT_CHUNK: u64 = 32 << 20;

/// Bytes of file data handed to the worker threads at a time (read,
/// compressed and checksummed, waiting to be written).
const PIPE_BUDGET: u64 = 128 << 20;

/// Lookahead: entries of a directory planned ahead of the walk, and files
/// open for it at most.
const LOOKAHEAD_ENTRIES: usize = 64;
const LOOKAHEAD_FILES: usize = 256;

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

/// Compressed extents hold at most this much data (BTRFS_MAX_COMPRESSED).
const COMPRESSED_CHUNK: u64 = 128 << 10;

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

fn io_err(path: &Path, op: &str, e: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        op: op.into(),
        source: e,
    }
}

fn ts(sec: i64, nsec: i64) -> Timespec {
    Timespec {
        sec,
        nsec: nsec as u32,
    }
}

fn cpath(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("{}: path has a NUL byte", path.display())))
}

/// Every xattr of `path` (not following symlinks), names sorted.
fn xattrs(path: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let c = cpath(path)?;
    let mut names = vec![0u8; 4096];
    let n = loop {
        // SAFETY: `c` is a NUL-terminated path and `names` a buffer of the
        // length passed.
        let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
        if n >= 0 {
            break n as usize;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => names.resize(names.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(io_err(path, "listxattr", e)),
        }
    };
    let mut out = Vec::new();
    for name in names[..n].split(|&b| b == 0).filter(|s| !s.is_empty()) {
        let cn = CString::new(name).unwrap();
        let mut val = vec![0u8; 4096];
        let len = loop {
            // SAFETY: NUL-terminated path and name, buffer of the length
            // passed.
            let r = unsafe {
                libc::lgetxattr(c.as_ptr(), cn.as_ptr(), val.as_mut_ptr().cast(), val.len())
            };
            if r >= 0 {
                break r as usize;
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ERANGE) if val.len() < (1 << 20) => val.resize(val.len() * 4, 0),
                _ => {
                    return Err(io_err(
                        path,
                        &format!("getxattr {}", String::from_utf8_lossy(name)),
                        e,
                    ))
                }
            }
        };
        val.truncate(len);
        out.push((name.to_vec(), val));
    }
    out.sort();
    Ok(out)
}

/// Data ranges of an open file: [start, end) pairs from SEEK_DATA /
/// SEEK_HOLE, or the whole file where the source cannot tell.
fn data_ranges(f: &File, size: u64) -> Vec<(u64, u64)> {
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    let mut at: i64 = 0;
    while (at as u64) < size {
        // SAFETY: lseek on an open descriptor; no memory is involved.
        let d = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
        if d < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break;
            }
            return vec![(0, size)];
        }
        // SAFETY: as above.
        let h = unsafe { libc::lseek(fd, d, libc::SEEK_HOLE) };
        let h = if h < 0 { size as i64 } else { h };
        out.push((d as u64, (h as u64).min(size)));
        at = h;
    }
    out
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
                .set_xattr(tree, ino, &name, &value)
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
                    .link_inode(tree, dir, name, ino, ftype, index)
                    .map_err(|e| in_path(path, e))?;
                let mut it = self.t.inode(tree, ino)?.expect("linked inode was made");
                it.nlink += 1;
                self.t.put_inode(tree, ino, &it)?;
                self.stats.hardlinks += 1;
                return Ok(());
            }
        }
        let ino = self.take_ino(tree);
        let mut item = self.inode_item(&m);
        item.flags = self.flags_for(rel, at.flags);
        self.t.put_inode(tree, ino, &item)?;
        self.t
            .link_inode(tree, dir, name, ino, ftype, index)
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
                .insert_inline_extent(tree, ino, target, target.len() as u64, 0)
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
        self.t.put_inode(tree, ino, &item)
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
        self.t.put_inode(id, FIRST_INODE, &top)
    }

    /// Plans the data of regular file `path` (`size` bytes, inode flags
    /// `flags`): opens it, finds its data ranges and asks the pipe for its
    /// pieces, `front` when needed now, else as lookahead. A file that
    /// compresses asks for its first piece only: whether the rest is
    /// compressed (and in which piece size) depends on it.
    fn plan_file(&mut self, path: &Path, size: u64, flags: u64, front: bool) -> Result<FilePlan> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOATIME)
            .open(path)
            .or_else(|_| File::open(path))
            .map_err(|e| io_err(path, "open", e))?;
        let ss = self.t.sectorsize() as u64;
        let csum = flags & INODE_NODATASUM == 0;
        let mut plan = FilePlan {
            path: Arc::new(path.to_path_buf()),
            file: Arc::new(f),
            size,
            csum,
            compress: self.o.compress.filter(|_| csum && self.o.reflink.is_none()),
            undecided: false,
            inline: None,
            ranges: Vec::new(),
            slots: VecDeque::new(),
        };
        // Small files live in their EXTENT_DATA item, as mkfs.btrfs keeps
        // them: under one sector.
        let max_inline = crate::tree::buf::max_item_data(self.t.nodesize()) - 21;
        if size < ss && (size as usize) <= max_inline {
            let job = self.job(&plan, 0, 0, size as usize, true);
            plan.inline = self.pipe.ask(vec![job], front).pop();
            return Ok(plan);
        }
        let end_aligned = size.next_multiple_of(ss);
        let mut covered = 0u64;
        for (s, e) in data_ranges(&plan.file, size) {
            let s = s / ss * ss;
            let e = e.next_multiple_of(ss).min(end_aligned);
            if s < covered {
                continue;
            }
            plan.ranges.push((s, e));
            covered = e;
        }
        plan.undecided = plan.compress.is_some();
        let mut jobs = self.jobs_from(&plan, 0);
        if plan.undecided {
            jobs.truncate(1);
        }
        plan.slots = self.pipe.ask(jobs, front).into();
        Ok(plan)
    }

    fn job(&self, plan: &FilePlan, at: u64, n: u64, want: usize, inline: bool) -> Job {
        Job {
            path: plan.path.clone(),
            file: plan.file.clone(),
            at,
            n,
            want,
            compress: plan.compress,
            csum: plan.csum.then_some(self.t.info.csum_type),
            sectorsize: self.t.sectorsize(),
            inline,
            reflink: self.o.reflink.is_some(),
        }
    }

    /// Writes a piece of file data: one extent, or, when the piece is
    /// larger than a new chunk (chunks smaller than a piece: mixed or
    /// small filesystems), several: the largest free range filled first
    /// when it is 1 MiB or more, else a new chunk's worth; and when an
    /// extent still finds no room, extents of halving size, as the
    /// kernel's allocator retries smaller (uncompressed data only: a
    /// compressed extent is at most 128 KiB).
    /// Returns (offset in the piece, disk address, disk length, length)
    /// per extent.
    fn write_piece(
        &mut self,
        file: &File,
        piece: &Piece,
        path: &Path,
    ) -> Result<Vec<(u64, u64, u64, u64)>> {
        let ss = self.t.sectorsize() as u64;
        let n = piece.n;
        let splittable = piece.algo == 0 && piece.cloned + piece.data.len() as u64 == n;
        let csum_size = self.t.info.csum_type.size() as u64;
        let mut out = Vec::new();
        let (mut o, mut step) = (0u64, n);
        while o < n {
            let mut k = step.min(n - o);
            let chunk = self.t.new_chunk_size(crate::alloc::SpaceKind::Data);
            if splittable && k > chunk {
                // Larger than a new chunk: fill the largest free range
                // first when it is sizable, else take a new chunk's worth.
                let hole = self.t.alloc.largest_free(crate::alloc::SpaceKind::Data) / ss * ss;
                k = k.min(if hole >= (1 << 20) {
                    hole
                } else {
                    chunk / ss * ss
                });
            }
            let r = if k == n {
                self.write_extent(
                    file,
                    piece.at,
                    piece.cloned,
                    &piece.data,
                    piece.sums.clone(),
                )
            } else {
                // [o, o+k) of the piece: its cloned part, then its written part.
                let cloned = piece.cloned.saturating_sub(o).min(k);
                let d0 = (o + cloned - piece.cloned) as usize;
                let d1 = (o + k).saturating_sub(piece.cloned) as usize;
                let sums = piece.sums.as_ref().map(|s| {
                    s[(o / ss * csum_size) as usize..((o + k) / ss * csum_size) as usize].to_vec()
                });
                self.write_extent(
                    file,
                    piece.at + o,
                    cloned,
                    &piece.data[d0..d1.max(d0)],
                    sums,
                )
            };
            match r {
                Ok((disk, len)) => {
                    out.push((o, disk, len, k));
                    o += k;
                }
                Err(Error::NoSpace(_)) if splittable && k > ss => {
                    step = (k / 2).div_ceil(ss) * ss;
                }
                Err(e) if self.o.reflink.is_some() => {
                    return Err(Error::Invalid(format!("{}: {e}", path.display())))
                }
                Err(e) => return Err(in_path(path, e)),
            }
        }
        Ok(out)
    }

    /// One data extent: `cloned` bytes of the file from `at`
    /// (`--reflink`), then `data`.
    fn write_extent(
        &mut self,
        file: &File,
        at: u64,
        cloned: u64,
        data: &[u8],
        sums: Option<Vec<u8>>,
    ) -> Result<(u64, u64)> {
        if self.o.reflink.is_some() {
            self.t
                .write_data_extent_cloned(file, at, cloned, data, sums)
        } else {
            self.t.write_data_extent_summed(data, sums)
        }
    }

    /// The pieces of `plan`'s data ranges from file offset `from` on: one
    /// extent each (compressed extents hold at most 128 KiB).
    fn jobs_from(&self, plan: &FilePlan, from: u64) -> Vec<Job> {
        let step = if plan.compress.is_some() {
            COMPRESSED_CHUNK
        } else {
            EXTENT_CHUNK
        };
        let mut jobs = Vec::new();
        for &(s, e) in &plan.ranges {
            let mut at = s.max(from);
            while at < e {
                let n = (e - at).min(step);
                let want = n.min(plan.size.saturating_sub(at)) as usize;
                jobs.push(self.job(plan, at, n, want, false));
                at += n;
            }
        }
        jobs
    }

    /// Takes back the pieces of a plan that is not used (the file turned
    /// out to be another link to an inode already written).
    fn discard(&mut self, plan: FilePlan) {
        for slot in plan.inline.iter().chain(plan.slots.iter()) {
            let _ = self.pipe.take(slot);
        }
    }

    /// Plans files of a directory ahead of the walk (names from `from`
    /// on), so that workers read and checksum them while the walker
    /// writes those before.
    fn look_ahead(&mut self, src: &Path, rel: &Path, here: Dir, ahead: &mut Ahead, from: usize) {
        if self.pipe.threads() < 2 {
            return;
        }
        ahead.next = ahead.next.max(from);
        while ahead.next < ahead.names.len()
            && ahead.next < from + LOOKAHEAD_ENTRIES
            && self.plans.len() < LOOKAHEAD_FILES
        {
            let i = ahead.next;
            ahead.next += 1;
            let path = src.join(&ahead.names[i]);
            let Ok(m) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            // Small files with nothing to compress are read by the walker
            // itself (see data::SMALL).
            let ok = m.is_file()
                && m.len() > 0
                && (m.len() >= super::data::SMALL || self.o.compress.is_some());
            ahead.metas[i] = Some(m.clone());
            if !ok {
                continue;
            }
            if m.nlink() > 1 {
                let id = (here.tree, m.dev(), m.ino());
                if self.links.contains_key(&id) || !self.ahead_links.insert(id) {
                    continue;
                }
            }
            let flags = self.flags_for(&rel.join(&ahead.names[i]), here.flags);
            let plan = self.plan_file(&path, m.len(), flags, false);
            self.plans.insert(path, plan);
        }
    }

    /// Writes the data of file `path` as inode `ino`; returns (size,
    /// nbytes). Sets NOCOMPRESS in `flags` when its data does not
    /// compress, as the kernel does.
    fn copy_file(
        &mut self,
        path: &Path,
        tree: u64,
        ino: u64,
        size: u64,
        flags: &mut u64,
    ) -> Result<(u64, u64)> {
        if size == 0 {
            return Ok((0, 0));
        }
        let mut plan = match self.plans.remove(path) {
            Some(p) => p?,
            None => self.plan_file(path, size, *flags, true)?,
        };
        if let Some(slot) = plan.inline.take() {
            let piece = self.pipe.take(&slot)?;
            self.t
                .insert_inline_extent(tree, ino, &piece.data, size, piece.algo)
                .map_err(|e| in_path(path, e))?;
            self.stats.inline_files += 1;
            self.stats.data_bytes += size;
            return Ok((size, size));
        }
        let ss = self.t.sectorsize() as u64;
        let no_holes = self.t.info.sb.incompat_flags & INCOMPAT_NO_HOLES != 0;
        let end_aligned = size.next_multiple_of(ss);
        let mut nbytes = 0;
        let mut covered = 0u64;
        for (s, e) in plan.ranges.clone() {
            if !no_holes && s > covered {
                self.t.insert_file_extent(
                    tree,
                    ino,
                    covered,
                    0,
                    0,
                    0,
                    s - covered,
                    s - covered,
                    0,
                    false,
                    false,
                )?;
            }
            let mut at = s;
            while at < e {
                let slot = plan.slots.pop_front().expect("a piece for every range");
                let piece = self.pipe.take(&slot)?;
                debug_assert_eq!(piece.at, at);
                let n = piece.n;
                if plan.undecided {
                    // The first piece does not compress: neither will the
                    // file, as the kernel judges it.
                    if piece.algo == 0 {
                        *flags |= INODE_NOCOMPRESS;
                        plan.compress = None;
                    }
                    plan.undecided = false;
                    let rest = self.jobs_from(&plan, at + n);
                    plan.slots = self.pipe.ask(rest, true).into();
                }
                for (off, disk, len, k) in self.write_piece(&plan.file, &piece, path)? {
                    self.t
                        .insert_file_extent(
                            tree,
                            ino,
                            at + off,
                            disk,
                            len,
                            0,
                            k,
                            k,
                            piece.algo,
                            false,
                            true,
                        )
                        .map_err(|e| in_path(path, e))?;
                }
                self.pipe.give_back(piece.data);
                nbytes += n;
                self.stats.data_bytes += piece.want as u64;
                at += n;
            }
            covered = e;
        }
        if !no_holes && covered < end_aligned {
            let n = end_aligned - covered;
            self.t
                .insert_file_extent(tree, ino, covered, 0, 0, 0, n, n, 0, false, false)?;
        }
        Ok((size, nbytes))
    }
}

/// A regular file's data as asked of the pipe.
#[derive(Debug)]
struct FilePlan {
    path: Arc<PathBuf>,
    file: Arc<File>,
    size: u64,
    csum: bool,
    compress: Option<(u8, i32)>,
    /// Compression asked and only the first piece planned: the rest waits
    /// for its result.
    undecided: bool,
    /// The whole file as an inline extent.
    inline: Option<Arc<Slot>>,
    /// Data ranges, sector-aligned, in order.
    ranges: Vec<(u64, u64)>,
    /// Pieces asked for, in file order.
    slots: VecDeque<Arc<Slot>>,
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

/// Names the source path in an error from the engine.
fn in_path(path: &Path, e: Error) -> Error {
    match e {
        Error::Io { .. } => e,
        other => Error::Invalid(format!("{}: {other}", path.display())),
    }
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
    w.t.put_inode(tree, FIRST_INODE, &top)?;
    let (made, stats) = (std::mem::take(&mut w.made), w.stats);
    for (id, kind) in made {
        if matches!(kind, SubvolKind::Ro | SubvolKind::DefaultRo) {
            t.root_item_mut(id)?.flags |= ROOT_SUBVOL_RDONLY;
        }
        if matches!(kind, SubvolKind::Default | SubvolKind::DefaultRo) {
            set_default_subvol(t, id)?;
        }
    }
    Ok(stats)
}

/// Makes subvolume `id` the one mounted by default.
pub fn set_default_subvol(t: &mut Trans, id: u64) -> Result<()> {
    let key = ubtrfs_format::items::dir_item_key(ROOT_TREE_DIR_OBJECTID, b"default");
    let entry = ubtrfs_format::items::DirEntry {
        location: Key::new(id, ROOT_ITEM, u64::MAX),
        transid: t.transid,
        file_type: FT_DIR,
        name: b"default",
        data: &[],
    };
    t.put_item(ROOT_TREE_OBJECTID, key, entry.to_bytes())?;
    t.info.sb.incompat_flags |= INCOMPAT_DEFAULT_SUBVOL;
    Ok(())
}
