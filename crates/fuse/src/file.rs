//! Open files on the read-only mount: open and release, READ (on a
//! worker, pushing read-ahead into the page cache as [`crate::readahead`]
//! says), lseek with SEEK_DATA/SEEK_HOLE.

use crate::proto::{args, Errno, FopenFlags, INodeNo};
use crate::proto::{ReplyData, ReplyEmpty, ReplyLseek, ReplyOpen};
use crate::readahead::{ReadAhead, Window};
use crate::reads::Mount;
use crate::reply::{OnInode, OpResult};
use crate::{ino, BtrfsFuse, Inner};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use ubtrfs_engine::fs::seek::SeekCache;
use ubtrfs_engine::{Error, FileHandle, InodeId};

/// Handles kept per open file for reads running at the same time.
const SPARE_READERS: usize = 4;

/// One open regular file.
pub(crate) struct OpenFile {
    id: InodeId,
    size: u64,
    /// Where the file's data lies, for lseek (built at the first SEEK_DATA
    /// or SEEK_HOLE: [`ubtrfs_engine::fs::seek`]).
    pub(crate) seek: Mutex<SeekCache>,
    /// Handles for reads (the kernel's readahead sends several at once).
    readers: Mutex<Vec<FileHandle>>,
    reads: Mutex<ReadAhead>,
}

impl OpenFile {
    fn reads(&self) -> std::sync::MutexGuard<'_, ReadAhead> {
        self.reads.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether open flags ask for writing (the mount is read-only).
pub(crate) fn is_write_open(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & (libc::O_TRUNC | libc::O_CREAT) != 0
}

impl BtrfsFuse {
    /// A READ, answered by a worker.
    pub(crate) fn read_request(&self, fh: u64, offset: u64, size: u32, reply: ReplyData) {
        let inner = self.inner.clone();
        self.pool.run(move || inner.read(fh, offset, size, reply));
    }

    /// An lseek; once it takes the reader well into what was pushed, a
    /// worker reads and pushes the next window.
    pub(crate) fn lseek_request(&self, node: INodeNo, a: args::Lseek, reply: ReplyLseek) {
        let res = self.inner.seek(node, a.fh.0, a.offset, a.whence);
        self.answer("lseek", reply, res, |reply, off| {
            reply.offset(off as i64);
            let Ok(f) = self.open_file(a.fh.0) else {
                return;
            };
            let window = f.reads().seeked_to(off, f.size);
            if let Some(w) = window {
                let inner = self.inner.clone();
                self.pool.run(move || inner.read_ahead(&f, w));
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
                reads: Mutex::new(ReadAhead::default()),
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

    /// Pushes `data[skip..]` (file bytes from `start`) into the kernel's
    /// page cache of the file, so the reader's next pages need no request.
    fn push_to_page_cache(&self, f: &OpenFile, start: u64, data: Arc<Vec<u8>>, skip: usize) {
        let (Some(n), Some(notifier)) = (ino::encode(f.id), self.notifier.get()) else {
            return;
        };
        let notifier = notifier.clone();
        self.storer.run(move || {
            notifier.store_all(INodeNo(n), start, data.get(skip..).unwrap_or_default())
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

    /// A READ: `size` bytes at `offset` (fewer at the end of the file)
    /// in `data[..len]`; a small forward one reads the window after it in
    /// the same read and pushes it into the page cache.
    fn read_file(&self, f: &OpenFile, offset: u64, size: u32) -> OpResult<(Arc<Vec<u8>>, usize)> {
        let len = f.size.saturating_sub(offset).min(size as u64) as usize;
        let window = f
            .reads()
            .window(offset, size)
            .filter(|w| len > 0 && w.start < f.size && self.notifier.get().is_some());
        // A failure in the window beyond the request is not this
        // request's: then read just the request.
        let ahead = window.and_then(|w| {
            let data = self.read_range(f, offset, (w.start + w.len as u64 - offset) as usize);
            data.ok()
                .filter(|d| d.len() >= len)
                .map(|d| (w, Arc::new(d)))
        });
        let pushed = ahead.as_ref().map(|(w, _)| *w);
        let data = match ahead {
            Some((w, data)) => {
                self.push_to_page_cache(f, w.start, data.clone(), (w.start - offset) as usize);
                data
            }
            None => Arc::new(
                self.read_range(f, offset, len)
                    .doing(f.id, || format!("{len} bytes at offset {offset}"))?,
            ),
        };
        let n = len.min(data.len());
        f.reads().read_to(offset, offset + n as u64, pushed);
        Ok((data, n))
    }

    // Served on the worker pool.

    /// Reads window `w` (errors are left for the READ that needs the bad
    /// range, if any) and pushes it.
    fn read_ahead(&self, f: &OpenFile, w: Window) {
        if let Ok(d) = self.read_range(f, w.start, w.len) {
            self.push_to_page_cache(f, w.start, Arc::new(d), 0);
        }
    }

    fn read(&self, fh: u64, offset: u64, size: u32, reply: ReplyData) {
        let res = self
            .open_file(fh)
            .and_then(|f| self.read_file(&f, offset, size));
        self.answer("read", reply, res, |reply, (buf, len)| {
            reply.data(&buf[..len])
        });
    }
}
