//! ubtrfs FUSE front end: serves a btrfs image read-only through FUSE.
//!
//! - [`BtrfsFuse`] answers the kernel's requests from an engine
//!   [`Filesystem`] (which is `Sync`). One thread takes requests and
//!   answers the quick ones (lookup, getattr, lseek, xattrs, open); reads
//!   and directory listings run on a worker pool ([`pool`]), so readers of
//!   different files do not wait on each other's disk reads.
//! - Node ids are a pure function of (subvolume, inode) ([`ino`]), so no
//!   lookup counts or inode tables are kept.
//! - Each open file keeps an engine [`FileHandle`] for lseek alone, so a
//!   walk with SEEK_DATA/SEEK_HOLE continues from the cached leaf
//!   (amortized O(1) per call), and a small pool of handles for reads.
//! - Small forward reads (cp skipping holes) are served from a read-ahead
//!   window that is also pushed into the kernel's page cache.
//! - The image never changes under the mount, so attributes, entries,
//!   directory listings and file pages are cached by the kernel for long.
//! - [`session`] mounts, runs in the background or foreground, and
//!   unmounts cleanly on a signal.

pub mod ino;
pub mod logging;
pub mod options;
mod pool;
pub mod session;

use fuser::{
    AccessFlags, Errno, FileAttr, FileType, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyLseek, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use ubtrfs_engine::{Error, FileHandle, Filesystem, InodeId, Stat};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::Timespec;

pub use options::MountOptions;

/// Handles kept per open file for reads running at the same time.
const SPARE_READERS: usize = 4;

/// Reads up to this size count as small: the kernel's readahead is not
/// doing its work for them.
const SMALL_READ: u32 = 128 << 10;
/// Read-ahead window for small forward reads: first and largest size.
const WINDOW_MIN: usize = 256 << 10;
const WINDOW_MAX: usize = 4 << 20;

/// Read-ahead for small reads that move forward.
///
/// The kernel grows its readahead window when a reader touches the page it
/// marked for that. A reader that jumps over holes with SEEK_DATA (cp, tar
/// --sparse) seldom does, so each page cache miss becomes a 16 KiB READ.
/// The btrfs kernel driver's own readahead is as small then, but its reads
/// reach a disk (or loop device) that reads ahead itself. Here a small
/// forward READ instead reads a window of the file (doubling up to 4 MiB,
/// adjacent extents in one device read), pushes it into the kernel's page
/// cache (so the reader's next pages need no READ at all), and READs that
/// still come inside the window are answered from memory without waiting
/// on a worker. Half way through a window the next one is read by a
/// worker, so the disk works while the reader is busy with lseek calls.
#[derive(Default)]
struct Window {
    start: u64,
    data: Arc<Vec<u8>>,
    /// End of the last READ: the next one at or a little after it is
    /// taken as moving forward.
    last_end: u64,
    size: usize,
    /// The window after this one, read by a worker while the reader was
    /// still in this one (so the disk works while cp is busy with lseek).
    next: Option<(u64, Arc<Vec<u8>>)>,
    prefetching: bool,
}

impl Window {
    fn covers(start: u64, data: &[u8], off: u64, len: usize) -> bool {
        !data.is_empty() && off >= start && off + len as u64 <= start + data.len() as u64
    }

    /// The reader is at `pos` (a READ, or where SEEK_DATA/SEEK_HOLE took
    /// it: with the window in the page cache, lseek is all the mount
    /// hears of a reader like cp). Moves on to the window read ahead when
    /// the reader has reached it, and says what to read ahead once the
    /// reader is half way through the current one.
    fn reader_at(&mut self, pos: u64, file_size: u64) -> Option<Prefetch> {
        let end = self.start + self.data.len() as u64;
        if pos >= end {
            if let Some((start, data)) = self.next.take() {
                if Window::covers(start, &data, pos, 1) {
                    self.start = start;
                    self.data = data;
                    self.size = (self.size * 2).clamp(WINDOW_MIN, WINDOW_MAX);
                } else {
                    self.next = Some((start, data));
                }
            }
        }
        let end = self.start + self.data.len() as u64;
        // A window read ahead for an earlier position is of no use now.
        if self.next.as_ref().is_some_and(|(s, _)| *s != end) {
            self.next = None;
        }
        let half = self.start + self.data.len() as u64 / 2;
        let go = pos >= half
            && pos < end
            && !self.prefetching
            && self.next.is_none()
            && self.size > WINDOW_MIN
            && end < file_size;
        go.then(|| {
            self.prefetching = true;
            Prefetch {
                start: end,
                len: self.size,
            }
        })
    }
}

/// Bytes to answer with: `data[skip..skip + len]`.
type Slice = (Arc<Vec<u8>>, usize, usize);

/// What a window hit asks for next: read `len` bytes at `start` ahead.
struct Prefetch {
    start: u64,
    len: usize,
}

/// One open regular file.
struct OpenFile {
    id: InodeId,
    size: u64,
    /// The handle lseek uses: its cursor stays where the last SEEK_DATA or
    /// SEEK_HOLE left it, whatever reads do meanwhile.
    seek: Mutex<FileHandle>,
    /// Handles for reads (the kernel's readahead sends several at once).
    readers: Mutex<Vec<FileHandle>>,
    window: Mutex<Window>,
}

impl OpenFile {
    /// `[off, off + size)` (cut at the end of the file) if the window (or
    /// the one read ahead of it) holds all of it; and the next window to
    /// read ahead once the reader is half way through this one.
    fn window_hit(&self, off: u64, size: u32) -> Option<(Slice, Option<Prefetch>)> {
        let len = self.size.saturating_sub(off).min(size as u64) as usize;
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let prefetch = w.reader_at(off, self.size);
        if !Window::covers(w.start, &w.data, off, len) {
            if prefetch.is_some() {
                // Not answered here: the worker's READ starts anew.
                w.prefetching = false;
            }
            return None;
        }
        w.last_end = off + len as u64;
        let skip = (off - w.start) as usize;
        Some(((w.data.clone(), skip, len), prefetch))
    }

    /// Where lseek left the reader; what to read ahead, if anything.
    fn seeked_to(&self, pos: u64) -> Option<Prefetch> {
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        if w.data.is_empty() {
            return None;
        }
        w.reader_at(pos, self.size)
    }
}

/// The FUSE filesystem over an engine [`Filesystem`].
pub struct BtrfsFuse {
    inner: Arc<Inner>,
    pool: pool::Pool,
}

impl std::ops::Deref for BtrfsFuse {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.inner
    }
}

/// What every request handler shares.
pub struct Inner {
    fs: Arc<Filesystem>,
    root: InodeId,
    ttl: Duration,
    files: RwLock<HashMap<u64, Arc<OpenFile>>>,
    next_fh: AtomicU64,
    /// Subvolume paths from the top level, for log lines.
    subvol_paths: OnceLock<HashMap<u64, Vec<u8>>>,
    /// Pushes read-ahead windows into the kernel's page cache (set once
    /// the session exists).
    notifier: OnceLock<fuser::Notifier>,
    /// The one thread that pushes: a push waits for page locks, which
    /// READs in flight hold until the dispatcher or a worker answers them,
    /// so neither of those may be the one waiting.
    storer: pool::Pool,
}

fn system_time(t: &Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec.min(999_999_999))
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs())
            + Duration::from_nanos(t.nsec.min(999_999_999) as u64)
    }
}

fn file_type(mode: u32) -> FileType {
    match mode & 0o170000 {
        0o040000 => FileType::Directory,
        0o120000 => FileType::Symlink,
        0o020000 => FileType::CharDevice,
        0o060000 => FileType::BlockDevice,
        0o010000 => FileType::NamedPipe,
        0o140000 => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

fn dirent_type(ft: u8) -> FileType {
    match ft {
        FT_DIR => FileType::Directory,
        FT_SYMLINK => FileType::Symlink,
        FT_CHRDEV => FileType::CharDevice,
        FT_BLKDEV => FileType::BlockDevice,
        FT_FIFO => FileType::NamedPipe,
        FT_SOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

impl BtrfsFuse {
    /// Serves `fs` with `root` (a directory) as the mount's root; reads and
    /// directory listings run on `io_threads` worker threads.
    pub fn new(fs: Arc<Filesystem>, root: InodeId, ttl: Duration, io_threads: usize) -> BtrfsFuse {
        BtrfsFuse {
            inner: Arc::new(Inner {
                fs,
                root,
                ttl,
                files: RwLock::new(HashMap::new()),
                next_fh: AtomicU64::new(1),
                subvol_paths: OnceLock::new(),
                notifier: OnceLock::new(),
                storer: pool::Pool::new("ubtrfs-store", 1),
            }),
            pool: pool::Pool::new("ubtrfs-io", io_threads),
        }
    }
}

impl BtrfsFuse {
    /// Lets the filesystem push data into the kernel's page cache through
    /// `notifier` (from the session serving it).
    pub fn set_notifier(inner: &Arc<Inner>, notifier: fuser::Notifier) {
        let _ = inner.notifier.set(notifier);
    }

    /// The shared state, to hand the session's notifier to later.
    pub fn inner(&self) -> Arc<Inner> {
        self.inner.clone()
    }
}

impl Inner {
    /// Pushes `data` (file bytes from `start`) into the kernel's page cache
    /// of the file, so the reader's next page faults need no request.
    fn push_to_page_cache(&self, f: &OpenFile, start: u64, data: Arc<Vec<u8>>) {
        let (Some(n), Some(notifier)) = (ino::encode(f.id), self.notifier.get()) else {
            return;
        };
        let notifier = notifier.clone();
        self.storer.run(move || {
            for (i, chunk) in data.chunks(1 << 20).enumerate() {
                let off = start + (i << 20) as u64;
                if notifier.store(INodeNo(n), off, chunk).is_err() {
                    break;
                }
            }
        });
    }

    /// The inode behind a FUSE node id.
    fn inode(&self, node: INodeNo) -> InodeId {
        if node.0 == ino::ROOT_NODE {
            self.root
        } else {
            ino::decode(node.0)
        }
    }

    /// The node id of an inode (its stat number, or 1 for the root).
    fn node_of(&self, id: InodeId) -> Result<u64, Errno> {
        if id == self.root {
            return Ok(ino::ROOT_NODE);
        }
        self.ino_of(id)
    }

    /// The st_ino of an inode on the mount.
    fn ino_of(&self, id: InodeId) -> Result<u64, Errno> {
        ino::encode(id).ok_or_else(|| {
            logging::error(&format!(
                "subvolume {} inode {}: number too large for the mount's inode mapping",
                id.subvol, id.ino
            ));
            Errno::EOVERFLOW
        })
    }

    fn attr(&self, st: &Stat, node: u64) -> FileAttr {
        let ss = self.fs.info.sectorsize as u64;
        FileAttr {
            ino: INodeNo(node),
            size: st.size,
            // As the kernel: allocated bytes rounded up to the sector size.
            blocks: st.nbytes.div_ceil(ss) * ss / 512,
            atime: system_time(&st.atime),
            mtime: system_time(&st.mtime),
            ctime: system_time(&st.ctime),
            crtime: system_time(&st.otime),
            kind: file_type(st.mode),
            perm: (st.mode & 0o7777) as u16,
            nlink: st.nlink,
            uid: st.uid,
            gid: st.gid,
            rdev: st.rdev as u32,
            blksize: self.fs.info.sectorsize,
            flags: 0,
        }
    }

    /// Attributes with the inode's own number in st_ino (used by lookup,
    /// where the node id is the same number).
    fn stat_attr(&self, id: InodeId) -> Result<(Stat, FileAttr), Errno> {
        let st = self.fs.stat(id).map_err(|e| self.errno(&e, id, "stat"))?;
        let attr = self.attr(&st, self.ino_of(id)?);
        Ok((st, attr))
    }

    /// Path of an inode from the top level, for log lines.
    fn describe(&self, id: InodeId) -> String {
        let subvols = self.subvol_paths.get_or_init(|| {
            self.fs
                .subvolumes()
                .map(|v| v.into_iter().map(|s| (s.id, s.path)).collect())
                .unwrap_or_default()
        });
        let mut path = subvols.get(&id.subvol).cloned().unwrap_or_default();
        let inner = if id.ino == FIRST_INODE {
            Some(Vec::new())
        } else {
            self.fs
                .inode_refs(id)
                .ok()
                .and_then(|r| r.into_iter().next())
                .and_then(|(parent, name)| {
                    let mut p = self.fs.dir_path(id.subvol, parent).ok()?;
                    if !p.is_empty() {
                        p.push(b'/');
                    }
                    p.extend_from_slice(&name);
                    Some(p)
                })
        };
        let where_ = format!("subvolume {} inode {}", id.subvol, id.ino);
        match inner {
            Some(inner) => {
                if !inner.is_empty() {
                    if !path.is_empty() {
                        path.push(b'/');
                    }
                    path.extend_from_slice(&inner);
                }
                format!("/{} ({where_})", String::from_utf8_lossy(&path))
            }
            None => where_,
        }
    }

    /// The errno for an engine error; damage and I/O errors are logged with
    /// the path of the inode.
    fn errno(&self, e: &Error, id: InodeId, op: &str) -> Errno {
        let kind = e.kind();
        if kind == ubtrfs_engine::ErrorKind::Unsupported {
            logging::error(&format!("{}: {op}: {e}", self.describe(id)));
        } else if kind.is_failure() {
            logging::error(&format!("{}: {op}: I/O error: {e}", self.describe(id)));
        }
        Errno::from_i32(e.errno())
    }

    /// Logs what the engine worked around (bad copies it read past).
    fn flush_reports(&self) {
        let (reports, dropped) = self.fs.info.take_reports();
        for r in reports {
            logging::warn(&r);
        }
        if dropped > 0 {
            logging::warn(&format!("{dropped} more recovery reports not shown"));
        }
    }

    fn open_file(&self, fh: u64) -> Result<Arc<OpenFile>, Errno> {
        self.files
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    /// `len` bytes at `offset` (fewer at the end of the file).
    fn read_range(&self, f: &OpenFile, offset: u64, len: usize) -> Result<Vec<u8>, Error> {
        let spare = f.readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut h = match spare {
            Some(h) => h,
            None => FileHandle::open(&self.fs, f.id)?,
        };
        let len = h.size.saturating_sub(offset).min(len as u64) as usize;
        let mut buf = vec![0u8; len];
        let res = h.read_at_merged(&self.fs, offset, &mut buf);
        let mut readers = f.readers.lock().unwrap_or_else(|e| e.into_inner());
        if readers.len() < SPARE_READERS {
            readers.push(h);
        }
        drop(readers);
        let n = res?;
        buf.truncate(n);
        Ok(buf)
    }

    /// A READ that the window did not answer: small forward reads fill a
    /// (larger) window, others read what was asked.
    fn read_file(&self, f: &OpenFile, offset: u64, size: u32) -> Result<Slice, Errno> {
        let len = f.size.saturating_sub(offset).min(size as u64) as usize;
        let (forward, wsize) = {
            let w = f.window.lock().unwrap_or_else(|e| e.into_inner());
            let gap = w.size.max(WINDOW_MIN) as u64;
            (offset >= w.last_end && offset - w.last_end <= gap, w.size)
        };
        if size <= SMALL_READ && forward && len > 0 {
            let grow = (wsize * 2).clamp(WINDOW_MIN, WINDOW_MAX);
            // A failure in the window beyond the request is not this
            // request's: then read just the request.
            if let Ok(data) = self.read_range(f, offset, grow.max(len)) {
                let data = Arc::new(data);
                let mut w = f.window.lock().unwrap_or_else(|e| e.into_inner());
                w.start = offset;
                w.data = data.clone();
                w.last_end = offset + len as u64;
                w.size = grow;
                w.next = None;
                drop(w);
                self.push_to_page_cache(f, offset, data.clone());
                return Ok((data, 0, len));
            }
        }
        let data = self
            .read_range(f, offset, len)
            .map_err(|e| self.errno(&e, f.id, &format!("read {len} bytes at offset {offset}")))?;
        let mut w = f.window.lock().unwrap_or_else(|e| e.into_inner());
        w.last_end = offset + data.len() as u64;
        if !forward {
            w.size = 0;
        }
        let n = data.len();
        Ok((Arc::new(data), 0, n))
    }

    /// Permission check of `access(2)` for the caller (root passes read
    /// and write checks; execute needs some x bit, as in the kernel).
    fn may_access(&self, req: &Request, st: &Stat, mask: AccessFlags) -> bool {
        let want = mask.bits() & 0o7;
        if want == 0 {
            return true;
        }
        let mode = st.mode;
        if req.uid() == 0 {
            let x_ok = want & 1 == 0 || st.is_dir() || mode & 0o111 != 0;
            return x_ok;
        }
        let bits = if req.uid() == st.uid {
            (mode >> 6) & 7
        } else if req.gid() == st.gid || in_groups(req.pid(), st.gid) {
            (mode >> 3) & 7
        } else {
            mode & 7
        };
        bits as i32 & want == want
    }

    // Requests served on the worker pool.

    /// Reads the window after the current one (errors are left for the
    /// READ that needs the bad range, if any).
    fn prefetch(&self, f: &OpenFile, p: Prefetch) {
        let data = self.read_range(f, p.start, p.len).ok();
        let mut w = f.window.lock().unwrap_or_else(|e| e.into_inner());
        w.prefetching = false;
        if let Some(d) = data {
            let d = Arc::new(d);
            w.next = Some((p.start, d.clone()));
            drop(w);
            self.push_to_page_cache(f, p.start, d);
        }
    }

    fn read(&self, fh: u64, offset: u64, size: u32, reply: ReplyData) {
        let res = self
            .open_file(fh)
            .and_then(|f| self.read_file(&f, offset, size));
        self.flush_reports();
        match res {
            Ok((buf, skip, len)) => reply.data(&buf[skip..skip + len]),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, node: INodeNo, offset: u64, mut reply: ReplyDirectory) {
        let dir = self.inode(node);
        let Ok(self_ino) = self.ino_of(dir) else {
            return reply.error(Errno::EOVERFLOW);
        };
        // Cookies: 1 after ".", 2 after "..", index + 1 after an entry
        // (btrfs directory indexes start at 2).
        if offset < 1 && reply.add(INodeNo(self_ino), 1, FileType::Directory, ".") {
            return reply.ok();
        }
        if offset < 2 && reply.add(INodeNo(self_ino), 2, FileType::Directory, "..") {
            return reply.ok();
        }
        let from = if offset < 3 { 0 } else { offset };
        let mut err = None;
        let res = self.fs.for_each_dir_entry(dir, from, |e| {
            let Some(n) = ino::encode(e.target) else {
                err = Some(Errno::EOVERFLOW);
                return Ok(ControlFlow::Break(()));
            };
            let full = reply.add(
                INodeNo(n),
                e.index + 1,
                dirent_type(e.file_type),
                OsStr::from_bytes(&e.name),
            );
            Ok(if full {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        });
        match (res, err) {
            (Err(e), _) => reply.error(self.errno(&e, dir, "readdir")),
            (_, Some(e)) => reply.error(e),
            _ => reply.ok(),
        }
    }

    fn readdirplus(&self, node: INodeNo, offset: u64, mut reply: ReplyDirectoryPlus) {
        let dir = self.inode(node);
        let (dst, dattr) = match self.stat_attr(dir) {
            Ok(x) => x,
            Err(e) => return reply.error(e),
        };
        let dgen = Generation(dst.generation);
        // "." and ".." are not looked up by the kernel; their attributes
        // are only filler.
        if offset < 1 && reply.add(dattr.ino, 1, ".", &self.ttl, &dattr, dgen) {
            return reply.ok();
        }
        if offset < 2 && reply.add(dattr.ino, 2, "..", &self.ttl, &dattr, dgen) {
            return reply.ok();
        }
        let from = if offset < 3 { 0 } else { offset };
        let mut err = None;
        let mut added = 0usize;
        let res = self.fs.for_each_dir_entry(dir, from, |e| {
            let attr = self.node_of(e.target).and_then(|node| {
                let (st, mut attr) = self.stat_attr(e.target)?;
                attr.ino = INodeNo(node);
                Ok((st, attr))
            });
            let (st, attr) = match attr {
                Ok(x) => x,
                Err(e) => {
                    err = Some(e);
                    return Ok(ControlFlow::Break(()));
                }
            };
            let full = reply.add(
                attr.ino,
                e.index + 1,
                OsStr::from_bytes(&e.name),
                &self.ttl,
                &attr,
                Generation(st.generation),
            );
            added += usize::from(!full);
            Ok(if full {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        });
        self.flush_reports();
        match (res, err) {
            (Err(e), _) => reply.error(self.errno(&e, dir, "readdir")),
            // Entries already added are answered; the failing one comes
            // first in the next call and fails alone.
            (_, Some(_)) if added > 0 => reply.ok(),
            (_, Some(e)) => reply.error(e),
            _ => reply.ok(),
        }
    }
}

/// Whether process `pid` has `gid` among its supplementary groups.
fn in_groups(pid: u32, gid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
    })
}

fn is_write_open(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & (libc::O_TRUNC | libc::O_CREAT) != 0
}

impl fuser::Filesystem for BtrfsFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let caps = config.capabilities();
        let wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_MAX_PAGES
            | InitFlags::FUSE_ASYNC_READ;
        let _ = config.add_capabilities(wanted & caps);
        // Readahead as large as the kernel allows; more requests in flight.
        let mut ra = 4 << 20;
        while let Err(max) = config.set_max_readahead(ra) {
            if max == ra {
                break;
            }
            ra = max;
        }
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let dir = self.inode(parent);
        let res = (|| {
            let Some(e) = self
                .fs
                .lookup(dir, name.as_bytes())
                .map_err(|e| self.errno(&e, dir, "lookup"))?
            else {
                return Ok(None);
            };
            let node = self.node_of(e.target)?;
            let (st, mut attr) = self.stat_attr(e.target)?;
            attr.ino = INodeNo(node);
            Ok(Some((st, attr)))
        })();
        self.flush_reports();
        match res {
            Ok(Some((st, attr))) => reply.entry(&self.ttl, &attr, Generation(st.generation)),
            Ok(None) => {
                // A negative entry the kernel keeps for the timeout.
                let mut attr = self.attr(&empty_stat(), 0);
                attr.ino = INodeNo(0);
                reply.entry(&self.ttl, &attr, Generation(0));
            }
            Err(e) => reply.error(e),
        }
    }

    fn getattr(
        &self,
        _req: &Request,
        node: INodeNo,
        _fh: Option<fuser::FileHandle>,
        reply: ReplyAttr,
    ) {
        let id = self.inode(node);
        match self.stat_attr(id) {
            Ok((_, attr)) => reply.attr(&self.ttl, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, node: INodeNo, reply: ReplyData) {
        let id = self.inode(node);
        match ubtrfs_engine::fs::file::readlink(&self.fs, id) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(self.errno(&e, id, "readlink")),
        }
    }

    fn open(&self, _req: &Request, node: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        if is_write_open(flags.0) {
            return reply.error(Errno::EROFS);
        }
        let id = self.inode(node);
        let h = match FileHandle::open(&self.fs, id) {
            Ok(h) => h,
            Err(e) => return reply.error(self.errno(&e, id, "open")),
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let f = OpenFile {
            id,
            size: h.size,
            seek: Mutex::new(h),
            readers: Mutex::new(Vec::new()),
            window: Mutex::new(Window::default()),
        };
        self.files
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fh, Arc::new(f));
        reply.opened(fuser::FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE);
    }

    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        _req: &Request,
        _node: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        size: u32,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        // Answered from the read-ahead window right here, or by a worker.
        if size <= SMALL_READ {
            if let Ok(f) = self.open_file(fh.0) {
                if let Some(((buf, skip, len), prefetch)) = f.window_hit(offset, size) {
                    reply.data(&buf[skip..skip + len]);
                    if let Some(p) = prefetch {
                        let inner = self.inner.clone();
                        self.pool.run(move || inner.prefetch(&f, p));
                    }
                    return;
                }
            }
        }
        let inner = self.inner.clone();
        self.pool.run(move || inner.read(fh.0, offset, size, reply));
    }

    fn flush(
        &self,
        _req: &Request,
        _node: INodeNo,
        _fh: fuser::FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _node: INodeNo,
        fh: fuser::FileHandle,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.files
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _node: INodeNo,
        _fh: fuser::FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, node: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        if is_write_open(flags.0) {
            return reply.error(Errno::EROFS);
        }
        let id = self.inode(node);
        match self.fs.stat(id) {
            Ok(st) if st.is_dir() => reply.opened(
                fuser::FileHandle(0),
                FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR,
            ),
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(e) => reply.error(self.errno(&e, id, "opendir")),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        node: INodeNo,
        _fh: fuser::FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let inner = self.inner.clone();
        self.pool.run(move || inner.readdir(node, offset, reply));
    }

    fn readdirplus(
        &self,
        _req: &Request,
        node: INodeNo,
        _fh: fuser::FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let inner = self.inner.clone();
        self.pool
            .run(move || inner.readdirplus(node, offset, reply));
    }

    fn releasedir(
        &self,
        _req: &Request,
        _node: INodeNo,
        _fh: fuser::FileHandle,
        _flags: fuser::OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _node: INodeNo,
        _fh: fuser::FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _node: INodeNo, reply: ReplyStatfs) {
        let sb = &self.fs.info.sb;
        let bs = self.fs.info.sectorsize as u64;
        let blocks = sb.total_bytes / bs;
        let free = sb.total_bytes.saturating_sub(sb.bytes_used) / bs;
        reply.statfs(blocks, free, free, 0, 0, bs as u32, 255, bs as u32);
    }

    fn getxattr(&self, _req: &Request, node: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let id = self.inode(node);
        match self.fs.xattr(id, name.as_bytes()) {
            Ok(Some(v)) => xattr_reply(reply, &v, size),
            Ok(None) => reply.error(Errno::ENODATA),
            Err(e) => reply.error(self.errno(&e, id, "getxattr")),
        }
    }

    fn listxattr(&self, _req: &Request, node: INodeNo, size: u32, reply: ReplyXattr) {
        let id = self.inode(node);
        match self.fs.xattrs(id) {
            Ok(list) => {
                let mut names = Vec::new();
                for (n, _) in list {
                    names.extend_from_slice(&n);
                    names.push(0);
                }
                xattr_reply(reply, &names, size)
            }
            Err(e) => reply.error(self.errno(&e, id, "listxattr")),
        }
    }

    fn access(&self, req: &Request, node: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let id = self.inode(node);
        let st = match self.fs.stat(id) {
            Ok(st) => st,
            Err(e) => return reply.error(self.errno(&e, id, "access")),
        };
        if mask.contains(AccessFlags::W_OK) {
            return reply.error(Errno::EROFS);
        }
        if self.may_access(req, &st, mask) {
            reply.ok()
        } else {
            reply.error(Errno::EACCES)
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        _node: INodeNo,
        fh: fuser::FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let f = match self.open_file(fh.0) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        if whence != libc::SEEK_DATA && whence != libc::SEEK_HOLE {
            // The kernel answers SEEK_SET/CUR/END itself.
            return reply.error(Errno::EINVAL);
        }
        if offset < 0 {
            return reply.error(Errno::ENXIO);
        }
        let mut h = f.seek.lock().unwrap_or_else(|e| e.into_inner());
        let res = if whence == libc::SEEK_DATA {
            h.seek_data(&self.fs, offset as u64)
        } else {
            h.seek_hole(&self.fs, offset as u64)
        };
        drop(h);
        match res {
            Ok(Some(off)) => {
                reply.offset(off as i64);
                if let Some(p) = f.seeked_to(off) {
                    let inner = self.inner.clone();
                    self.pool.run(move || inner.prefetch(&f, p));
                }
            }
            Ok(None) => reply.error(Errno::ENXIO),
            Err(e) => reply.error(self.errno(&e, f.id, "lseek")),
        }
    }

    // Everything that would change the image: the mount is read-only.

    fn setattr(
        &self,
        _req: &Request,
        _node: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<fuser::FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn link(
        &self,
        _req: &Request,
        _node: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn write(
        &self,
        _req: &Request,
        _node: INodeNo,
        _fh: fuser::FileHandle,
        _offset: u64,
        _data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: fuser::ReplyWrite,
    ) {
        reply.error(Errno::EROFS);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _node: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn removexattr(&self, _req: &Request, _node: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: fuser::ReplyCreate,
    ) {
        reply.error(Errno::EROFS);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _node: INodeNo,
        _fh: fuser::FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: fuser::FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: fuser::FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: fuser::ReplyWrite,
    ) {
        // Both ends are on this mount, so the destination is read-only.
        reply.error(Errno::EROFS);
    }

    fn ioctl(
        &self,
        _req: &Request,
        _node: INodeNo,
        _fh: fuser::FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
    }

    fn poll(
        &self,
        _req: &Request,
        _node: INodeNo,
        _fh: fuser::FileHandle,
        _ph: fuser::PollNotifier,
        _events: fuser::PollEvents,
        _flags: fuser::PollFlags,
        reply: fuser::ReplyPoll,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn bmap(&self, _req: &Request, _node: INodeNo, _bs: u32, _idx: u64, reply: fuser::ReplyBmap) {
        reply.error(Errno::ENOSYS);
    }
}

fn xattr_reply(reply: ReplyXattr, v: &[u8], size: u32) {
    if size == 0 {
        reply.size(v.len() as u32)
    } else if v.len() > size as usize {
        reply.error(Errno::ERANGE)
    } else {
        reply.data(v)
    }
}

fn empty_stat() -> Stat {
    Stat {
        id: InodeId { subvol: 0, ino: 0 },
        ino: 0,
        mode: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        size: 0,
        nbytes: 0,
        atime: Timespec::default(),
        mtime: Timespec::default(),
        ctime: Timespec::default(),
        otime: Timespec::default(),
        flags: 0,
        generation: 0,
        transid: 0,
    }
}
