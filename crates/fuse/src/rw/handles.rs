//! Open files: what a handle keeps, the flags an open is answered with,
//! and opening, creating and closing.

use super::*;

/// An open file.
pub(super) struct Handle {
    pub(super) id: InodeId,
    /// Opened O_NOATIME: its reads leave atime.
    pub(super) noatime: bool,
    /// The file had set-ID bits at open: its writers' writes may drop
    /// them ([`RwInner::drop_set_ids`]).
    pub(super) setid: bool,
    pub(super) seek: SeekCache,
    /// Opened for writing (counted in [`RwInner::pushes`]).
    pub(super) writer: bool,
    /// Reads through the page cache, not O_DIRECT (counted in
    /// [`RwInner::pushes`]).
    pub(super) buffered: bool,
    pub(super) reads: ReadAhead,
    /// Its open moved atime, and no READ has reached us through it since:
    /// the kernel's cached atime is the old one until its attributes are
    /// dropped, which its close does. (A READ's end drops the cached
    /// atime in the kernel, fuse_invalidate_atime, so a handle that reads
    /// through us costs no extra GETATTR.)
    pub(super) atime_unseen: bool,
}

/// How files are opened: the kernel keeps a file's page cache across
/// opens (FOPEN_KEEP_CACHE). Every change of a file's bytes goes through
/// this mount and the kernel's page cache follows it: writes fill it
/// (write-through: the writeback cache is off), fallocate's punch and zero
/// range, copy_file_range and direct writes drop the range they change,
/// and a truncate that changes the size drops all of it (the kernel's
/// fuse_do_setattr does so without the writeback cache). Without it every
/// open drops the file's cached pages and a `cp` right after a write reads
/// the whole file through the daemon again.
/// `UBTRFS_NO_KEEP_CACHE=1` drops them (the benchmark's switch).
pub(super) fn open_flags(open: i32, atime_due: bool) -> FopenFlags {
    static KEEP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // A read the page cache answers does not reach us: when the next read
    // must move atime (relatime after a change, strictatime always) and
    // the open did not move it (one for writing only), the open drops the
    // file's cached pages so that it does.
    let mut f = if env_switch_on(&KEEP, "UBTRFS_NO_KEEP_CACHE") && !atime_due {
        FopenFlags::FOPEN_KEEP_CACHE
    } else {
        FopenFlags::empty()
    };
    if open & libc::O_DIRECT != 0 && parallel_direct() {
        f |= FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
    }
    f
}

/// O_DIRECT opens are answered FOPEN_DIRECT_IO |
/// FOPEN_PARALLEL_DIRECT_WRITES unless `UBTRFS_NO_PARALLEL_DIO=1` (the
/// benchmark's switch). Without them the kernel sends an O_DIRECT write
/// through its page-cache path (fuse_cache_write_iter), which holds the
/// inode lock exclusively for the whole round trip: writers of one file
/// take turns, one request in flight. With them it holds the lock shared
/// for writes inside the file's size when no handle of the inode uses the
/// page cache (fuse_dio_lock), and flushes and drops the cached pages of
/// the range itself before and after the write (fuse_direct_io), as its
/// O_DIRECT path does for any filesystem. The engine's direct writes run
/// beside each other already ([`crate::fslock`]). bench/rw.sh's bssplit
/// measures both (docs/benchmarks.md).
pub(super) fn parallel_direct() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    env_switch_on(&ON, "UBTRFS_NO_PARALLEL_DIO")
}

/// FUSE_ASYNC_DIO unless `UBTRFS_NO_ASYNC_DIO=1` (the benchmark's switch):
/// see `init` in [`RwFuse`]'s [`crate::proto::FuseFs`] impl; bench/rw.sh's bssplit measures both.
pub(super) fn async_direct() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    env_switch_on(&ON, "UBTRFS_NO_ASYNC_DIO")
}

impl RwInner {
    /// Answers a CREATE or TMPFILE whose file `res` is, opened with
    /// `flags`, noted open before the filesystem `fs` is let go (a file
    /// without a name must not be deleted in between).
    pub(super) fn created(
        &self,
        op: &str,
        fs: FsWrite<'_>,
        res: Result<InodeId, Error>,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let res = res
            .map_err(|e| errno(op, e))
            .and_then(|id| self.entry(&fs, id).map(|a| (id, a)));
        match res {
            Ok((id, (attr, g))) => {
                fs.opened(id);
                drop(fs);
                // A new file: no push of it can be in flight.
                let writer = flags & libc::O_ACCMODE != libc::O_RDONLY;
                if writer {
                    self.pushes.writer_begin(id);
                }
                let fh = self.new_handle(id, writer, flags, false);
                reply.created(
                    &self.core.ttl,
                    &attr,
                    g,
                    crate::proto::FileHandle(fh),
                    // New: the page cache holds nothing of it.
                    open_flags(flags, false),
                );
            }
            Err(e) => reply.error(e),
        }
    }

    /// The close of a handle of `id` (a file's or a directory's): shared,
    /// but for the last close of an inode without names, which deletes it.
    pub(super) fn closed(&self, id: InodeId, op: &str) {
        let last_of_orphan = self.fs_read().release_shared(id);
        if last_of_orphan {
            if let Err(e) = self.fs().drop_orphan_if_closed(id) {
                logging::error(&format!("{op}: {e}"));
            }
        }
    }

    /// OPEN with flags `f`, a `writer` already counted by
    /// [`Pushes::writer_begin`] (and uncounted here if the open fails).
    /// The kernel sends no O_TRUNC (no FUSE_ATOMIC_O_TRUNC): an open that
    /// truncates comes as this OPEN and a SETATTR of the size.
    pub(super) fn open_as(&self, id: InodeId, f: i32, writer: bool, reply: ReplyOpen) {
        let res = (|| {
            // Changes nothing but the open count: shared.
            let fs = self.fs_read();
            if writer {
                fs.check_open_write(id, f & libc::O_APPEND != 0)?;
            }
            fs.opened(id);
            Ok(())
        })();
        match res {
            Ok(()) => {
                let mut atime_due = f & libc::O_NOATIME == 0 && self.atime_due(id, false);
                let moved = atime_due && f & libc::O_ACCMODE != libc::O_WRONLY;
                if moved {
                    // An open to read when a read would move atime moves
                    // it now, and the file's cached pages stay: dropping
                    // them so that the first read reaches us made a read
                    // of a file just written come from the disk. (Only an
                    // open that reads nothing moves atime where the
                    // kernel's btrfs would not.) The kernel learns of it
                    // at the first READ or at the close (`atime_unseen`).
                    self.move_atime(id, false);
                    atime_due = false;
                }
                let fh = self.new_handle(id, writer, f, moved);
                reply.opened(crate::proto::FileHandle(fh), open_flags(f, atime_due));
            }
            Err(e) => {
                if writer {
                    self.pushes.writer_end(id);
                }
                reply.error(errno("open", e));
            }
        }
    }

    /// A new handle of `id`; a `writer` was counted by
    /// [`Pushes::writer_begin`]; `atime_unseen` when its open moved atime.
    pub(super) fn new_handle(
        &self,
        id: InodeId,
        writer: bool,
        flags: i32,
        atime_unseen: bool,
    ) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        // Looked at before the handles' lock is taken: never the
        // filesystem's lock under it.
        let setid = self
            .fs_read()
            .inode_stat(id)
            .is_ok_and(|st| st.mode & (libc::S_ISUID | libc::S_ISGID) != 0);
        let buffered = flags & libc::O_DIRECT == 0;
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                fh,
                Handle {
                    id,
                    noatime: flags & libc::O_NOATIME != 0,
                    setid,
                    seek: SeekCache::default(),
                    writer,
                    buffered,
                    reads: ReadAhead::default(),
                    atime_unseen,
                },
            );
        fh
    }
}
