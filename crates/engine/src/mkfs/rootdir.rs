//! Filling a new filesystem from a directory (mkfs --rootdir): every file
//! type, modes, owners, times with nanoseconds, xattrs (ACLs included),
//! hard links, inline extents for small files, holes kept as holes, data
//! checksummed. Directories are walked in name order and inodes numbered
//! in walk order, so the same tree gives the same image.
//!
//! This is the host side: it reads the source with libc (lstat, xattrs,
//! SEEK_DATA/SEEK_HOLE) and writes through the transaction engine.

use crate::error::{Error, Result};
use crate::inode::{file_type, user_rdev_to_kernel};
use crate::tx::Trans;
use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::{File, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{InodeItem, Timespec};
use ubtrfs_format::Key;

/// Size of the pieces a file's data is read and written in: each is one
/// extent (the kernel's extents go up to 128 MiB; smaller ones bound the
/// memory used).
const EXTENT_CHUNK: u64 = 32 << 20;

/// Changed tree blocks after which a commit is made, bounding memory
/// whatever the size of the tree being copied.
const COMMIT_BLOCKS: usize = 8192;

/// How to fill the filesystem.
#[derive(Debug, Clone, Default)]
pub struct RootdirOptions {
    pub dir: PathBuf,
    /// With SOURCE_DATE_EPOCH: every time is clamped to it, and atime,
    /// ctime and otime follow mtime, so reading the source (atime) or
    /// copying it (ctime) does not change the image.
    pub clamp_time: Option<Timespec>,
    /// The time new inodes are born (otime) when not clamped.
    pub now: Timespec,
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
    tree: u64,
    next_ino: u64,
    /// Source (dev, ino) of files with several links -> our inode.
    links: HashMap<(u64, u64), u64>,
    stats: Stats,
    progress: &'a mut dyn FnMut(&Stats),
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

    fn set_xattrs(&mut self, ino: u64, path: &Path) -> Result<()> {
        for (name, value) in xattrs(path)? {
            self.t
                .set_xattr(self.tree, ino, &name, &value)
                .map_err(|e| in_path(path, e))?;
        }
        Ok(())
    }

    /// Copies directory `src` (already made as inode `dir`) entry by entry.
    fn walk_dir(&mut self, src: &Path, dir: u64) -> Result<()> {
        let rd = std::fs::read_dir(src).map_err(|e| io_err(src, "read directory", e))?;
        let mut names: Vec<std::ffi::OsString> = Vec::new();
        for e in rd {
            names.push(e.map_err(|e| io_err(src, "read directory", e))?.file_name());
        }
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        // Dir indexes start at 2, as the kernel numbers them.
        for (index, name) in (2u64..).zip(names) {
            let path = src.join(&name);
            self.add_entry(&path, name.as_os_str(), dir, index)?;
            if self.t.dirty_blocks() > COMMIT_BLOCKS {
                self.t.commit()?;
            }
            (self.progress)(&self.stats);
        }
        Ok(())
    }

    fn add_entry(&mut self, path: &Path, name: &OsStr, dir: u64, index: u64) -> Result<()> {
        let m = std::fs::symlink_metadata(path).map_err(|e| io_err(path, "lstat", e))?;
        let name = name.as_bytes();
        let tree = self.tree;
        let ftype = file_type(m.mode());
        if !m.is_dir() && m.nlink() > 1 {
            if let Some(&ino) = self.links.get(&(m.dev(), m.ino())) {
                self.t
                    .add_dir_entry(tree, dir, name, Key::new(ino, INODE_ITEM, 0), ftype, index)
                    .map_err(|e| in_path(path, e))?;
                self.t
                    .add_inode_ref(tree, ino, dir, name, index)
                    .map_err(|e| in_path(path, e))?;
                let mut it = self.t.inode(tree, ino)?.expect("linked inode was made");
                it.nlink += 1;
                self.t.put_inode(tree, ino, &it)?;
                self.stats.hardlinks += 1;
                return Ok(());
            }
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let mut item = self.inode_item(&m);
        self.t.put_inode(tree, ino, &item)?;
        self.t
            .add_dir_entry(tree, dir, name, Key::new(ino, INODE_ITEM, 0), ftype, index)
            .map_err(|e| in_path(path, e))?;
        self.t
            .add_inode_ref(tree, ino, dir, name, index)
            .map_err(|e| in_path(path, e))?;
        self.stats.inodes += 1;
        if !m.is_dir() && m.nlink() > 1 {
            self.links.insert((m.dev(), m.ino()), ino);
        }
        self.set_xattrs(ino, path)?;
        let ft = m.file_type();
        if ft.is_dir() {
            self.stats.dirs += 1;
            self.walk_dir(path, ino)?;
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
            self.stats.files += 1;
            let (size, nbytes) = self.copy_file(path, ino, m.len())?;
            item.size = size;
            item.nbytes = nbytes;
        }
        self.t.put_inode(tree, ino, &item)
    }

    /// Writes the data of file `path` as inode `ino`; returns (size, nbytes).
    fn copy_file(&mut self, path: &Path, ino: u64, size: u64) -> Result<(u64, u64)> {
        if size == 0 {
            return Ok((0, 0));
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOATIME)
            .open(path)
            .or_else(|_| File::open(path))
            .map_err(|e| io_err(path, "open", e))?;
        let ss = self.t.sectorsize() as u64;
        let tree = self.tree;
        // Small files live in their EXTENT_DATA item, as mkfs.btrfs keeps
        // them: under one sector.
        if size < ss && (size as usize) <= crate::tree::buf::max_item_data(self.t.nodesize()) - 21 {
            let mut buf = vec![0u8; size as usize];
            f.read_exact_at(&mut buf, 0)
                .map_err(|e| io_err(path, "read", e))?;
            self.t
                .insert_inline_extent(tree, ino, &buf, size, 0)
                .map_err(|e| in_path(path, e))?;
            self.stats.inline_files += 1;
            self.stats.data_bytes += size;
            return Ok((size, size));
        }
        let no_holes = self.t.info.sb.incompat_flags & INCOMPAT_NO_HOLES != 0;
        let end_aligned = size.next_multiple_of(ss);
        let mut nbytes = 0;
        let mut covered = 0u64;
        for (s, e) in data_ranges(&f, size) {
            let s = s / ss * ss;
            let e = e.next_multiple_of(ss).min(end_aligned);
            if s < covered {
                continue;
            }
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
                let n = (e - at).min(EXTENT_CHUNK);
                let want = n.min(size.saturating_sub(at)) as usize;
                let mut buf = vec![0u8; want];
                f.read_exact_at(&mut buf, at)
                    .map_err(|e| io_err(path, &format!("read at {at}"), e))?;
                let (disk, len) = self
                    .t
                    .write_data_extent(&buf, true)
                    .map_err(|e| in_path(path, e))?;
                self.t
                    .insert_file_extent(tree, ino, at, disk, len, 0, len, len, 0, false, true)
                    .map_err(|e| in_path(path, e))?;
                nbytes += len;
                self.stats.data_bytes += want as u64;
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

/// Names the source path in an error from the engine.
fn in_path(path: &Path, e: Error) -> Error {
    match e {
        Error::Io { .. } => e,
        other => Error::Invalid(format!("{}: {other}", path.display())),
    }
}

/// Fills the top-level subvolume from `o.dir`. The caller commits.
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
    let tree = FS_TREE_OBJECTID;
    let mut w = Walker {
        t,
        o,
        tree,
        next_ino: FIRST_INODE + 1,
        links: HashMap::new(),
        stats: Stats::default(),
        progress,
    };
    // The top directory takes the source's attributes.
    let mut top = w.inode_item(&m);
    w.set_xattrs(FIRST_INODE, &o.dir)?;
    w.walk_dir(&o.dir, FIRST_INODE)?;
    top.size = w.t.inode(tree, FIRST_INODE)?.expect("top directory").size;
    w.t.put_inode(tree, FIRST_INODE, &top)?;
    Ok(w.stats)
}
