//! Open files on the read-only mount: open and release, READ (from the
//! read-ahead window or on a worker), lseek with SEEK_DATA/SEEK_HOLE.

use crate::proto::{args, Errno, FopenFlags, INodeNo};
use crate::proto::{ReplyData, ReplyEmpty, ReplyLseek, ReplyOpen};
use crate::reads::Mount;
use crate::reply::{OnInode, OpResult};
use crate::{ino, BtrfsFuse, Inner};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use ubtrfs_engine::fs::seek::SeekCache;
use ubtrfs_engine::{Error, FileHandle, InodeId};

/// Handles kept per open file for reads running at the same time.
const SPARE_READERS: usize = 4;

/// Small reads and the read-ahead window's sizes: the read-write mount's
/// (its pushes follow this one).
use crate::rw_push::{SMALL_READ, WINDOW_MAX, WINDOW_MIN};

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
pub(crate) struct OpenFile {
    id: InodeId,
    size: u64,
    /// Where the file's data lies, for lseek (built at the first SEEK_DATA
    /// or SEEK_HOLE: [`ubtrfs_engine::fs::seek`]).
    pub(crate) seek: Mutex<SeekCache>,
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

/// Whether open flags ask for writing (the mount is read-only).
pub(crate) fn is_write_open(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & (libc::O_TRUNC | libc::O_CREAT) != 0
}

impl BtrfsFuse {
    /// A READ: answered from the read-ahead window right here, or by a
    /// worker.
    pub(crate) fn read_request(&self, fh: u64, offset: u64, size: u32, reply: ReplyData) {
        if size <= SMALL_READ {
            if let Ok(f) = self.open_file(fh) {
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
        self.pool.run(move || inner.read(fh, offset, size, reply));
    }

    /// An lseek; then the read-ahead window follows the reader there.
    pub(crate) fn lseek_request(&self, node: INodeNo, a: args::Lseek, reply: ReplyLseek) {
        let res = self.inner.seek(node, a.fh.0, a.offset, a.whence);
        self.answer("lseek", reply, res, |reply, off| {
            reply.offset(off as i64);
            let f = self.open_file(a.fh.0).ok();
            if let Some((f, p)) = f.and_then(|f| f.seeked_to(off).map(|p| (f, p))) {
                let inner = self.inner.clone();
                self.pool.run(move || inner.prefetch(&f, p));
            }
        });
    }
}

impl Inner {
    pub(crate) fn open(&self, node: INodeNo, flags: i32, reply: ReplyOpen) {
        let res = (|| {
            if is_write_open(flags) {
                return Err(Errno::EROFS.into());
            }
            let id = self.inode(node);
            let h = FileHandle::open(&self.fs, id).on(id)?;
            let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
            let f = OpenFile {
                id,
                size: h.size,
                seek: Mutex::new(SeekCache::default()),
                readers: Mutex::new(Vec::new()),
                window: Mutex::new(Window::default()),
            };
            self.files
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(fh, Arc::new(f));
            Ok(fh)
        })();
        self.answer("open", reply, res, |reply, fh| {
            reply.opened(crate::proto::FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE)
        });
    }

    pub(crate) fn release(&self, fh: u64, reply: ReplyEmpty) {
        self.files
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh);
        self.answer("release", reply, Ok(()), |reply, ()| reply.ok());
    }

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

    pub(crate) fn open_file(&self, fh: u64) -> OpResult<Arc<OpenFile>> {
        self.files
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&fh)
            .cloned()
            .ok_or(Errno::EBADF.into())
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
    fn read_file(&self, f: &OpenFile, offset: u64, size: u32) -> OpResult<Slice> {
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
            .doing(f.id, || format!("{len} bytes at offset {offset}"))?;
        let mut w = f.window.lock().unwrap_or_else(|e| e.into_inner());
        w.last_end = offset + data.len() as u64;
        if !forward {
            w.size = 0;
        }
        let n = data.len();
        Ok((Arc::new(data), 0, n))
    }

    // Served on the worker pool.

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
        self.answer("read", reply, res, |reply, (buf, skip, len)| {
            reply.data(&buf[skip..skip + len])
        });
    }
}
