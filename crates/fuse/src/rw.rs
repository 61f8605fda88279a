//! The read-write mount: every request answered by the engine's
//! [`RwFs`] (one transaction, delayed allocation), behind one lock.
//!
//! - Node ids are the read-only mount's ([`crate::ino`]): a pure function
//!   of (subvolume, inode).
//! - Each open file keeps its SEEK_DATA/SEEK_HOLE cache (the engine's
//!   [`SeekCache`]), so a walk of a file costs one map build per change.
//! - The kernel checks permissions (`default_permissions`) from the
//!   attributes we answer; what inode flags forbid (immutable,
//!   append-only) is refused by the engine.
//! - The kernel's writeback cache is off: every write reaches the daemon
//!   at once, so the dirty ranges the engine holds are exactly what has
//!   been written (what SEEK_DATA must see).
//! - A thread commits when the commit interval has passed (or too much
//!   is dirty); fsync writes a log tree (or commits where a log cannot
//!   say it; `UBTRFS_TRACE_FSYNC=1` logs which); unmount commits last.

use crate::attr::file_attr;
use crate::dir::{dirent_type, DirReply, Entry};
use crate::fslock::{FsLock, FsRead, FsWrite};
use crate::ino;
use crate::logging;
use crate::proto::{Errno, FileAttr, FopenFlags, Generation, INodeNo, TimeOrNow};
use crate::proto::{
    KernelConfig, ReplyAttr, ReplyCopy, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request,
};
use crate::rw_push::{Pushes, ReadPattern};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};
use ubtrfs_engine::vfs::attr::{SetAttr, SetTime};
use ubtrfs_engine::vfs::seek::{SeekCache, Versions};
use ubtrfs_engine::vfs::{FsyncStage, RwFs, RwStats, SyncStep};
use ubtrfs_engine::{Error, InodeId, Stat};
use ubtrfs_format::items::Timespec;

mod access;
mod ioctl;

pub use access::Atime;

/// `UBTRFS_TRACE_FSYNC=1` (read once): [`RwFuse::sync_node`] logs each
/// fsync.
fn trace_fsync() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    env_switch_set(&ON, "UBTRFS_TRACE_FSYNC")
}

/// An open file.
struct Handle {
    id: InodeId,
    /// Opened O_NOATIME: its reads leave atime.
    noatime: bool,
    /// The file had set-ID bits at open: its writers' writes may drop
    /// them ([`RwInner::drop_set_ids`]).
    setid: bool,
    seek: SeekCache,
    /// Opened for writing (counted in [`RwInner::pushes`]).
    writer: bool,
    /// Reads through the page cache, not O_DIRECT (counted in
    /// [`RwInner::pushes`]).
    buffered: bool,
    reads: ReadPattern,
}

/// The read-write FUSE filesystem (shared with the threads a request may
/// finish on: see [`RwFuse::open`]).
pub struct RwFuse(Arc<RwInner>);

impl std::ops::Deref for RwFuse {
    type Target = RwInner;
    fn deref(&self) -> &RwInner {
        &self.0
    }
}

pub struct RwInner {
    fs: Arc<FsLock>,
    /// The engine's data change counters: an lseek whose file's cache is
    /// current answers without the filesystem's lock.
    versions: Arc<Versions>,
    nodes: ino::Nodes,
    ttl: Duration,
    sectorsize: u32,
    handles: Mutex<HashMap<u64, Handle>>,
    /// Open directories: the cookie their listing stops at (set at offset
    /// 0, [`ubtrfs_engine::vfs::RwFs::readdir_end`]).
    dirs: Mutex<HashMap<u64, u64>>,
    next_fh: AtomicU64,
    /// POSIX ACLs enforced by the kernel and inherited here (`acl`, the
    /// default; `noacl` turns them off).
    acl: AtomicBool,
    /// When reads and listings move atime (the kernel leaves it to us).
    atime: Atime,
    /// The mount was remounted read-only: the kernel refuses writes, and
    /// atime stays ([`crate::remount::follow_ro`] keeps it).
    remounted_ro: Arc<AtomicBool>,
    /// Read-ahead pushed into the kernel's page cache ([`crate::rw_push`]).
    pushes: Arc<Pushes>,
    /// fsyncs waiting for the filesystem lock, and the signal that a log
    /// sync finished: see [`RwFuse::fsync_grouped`].
    fsyncs_waiting: AtomicU64,
    log_synced: Condvar,
}

/// The longest an fsync whose file is logged waits for queued fsyncs to
/// log theirs and sync for all, before it syncs itself.
const FSYNC_GROUP_WAIT: Duration = Duration::from_millis(5);

/// UBTRFS_NO_FSYNC_BATCH=1: every fsync syncs the log itself (the
/// benchmark's switch for the grouping).
fn fsync_batching() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    env_switch_on(&ON, "UBTRFS_NO_FSYNC_BATCH")
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
fn open_flags(open: i32, atime_due: bool) -> FopenFlags {
    static KEEP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // A read the page cache answers does not reach us: when the next read
    // must move atime (relatime after a change, strictatime always), the
    // open drops the file's cached pages so that it does.
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
fn parallel_direct() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    env_switch_on(&ON, "UBTRFS_NO_PARALLEL_DIO")
}

/// FUSE_ASYNC_DIO unless `UBTRFS_NO_ASYNC_DIO=1` (the benchmark's switch):
/// see [`RwFuse::init`]; bench/rw.sh's bssplit measures both.
fn async_direct() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    env_switch_on(&ON, "UBTRFS_NO_ASYNC_DIO")
}

/// A mechanism that `VAR=1` (any value but 0) in the daemon's environment
/// switches off, read once.
pub(crate) fn env_switch_on(cell: &std::sync::OnceLock<bool>, var: &str) -> bool {
    *cell.get_or_init(|| std::env::var_os(var).is_none_or(|v| v == "0"))
}

/// Whether `VAR=1` (any value but 0) is in the daemon's environment, read
/// once: for what is off unless asked for.
fn env_switch_set(cell: &std::sync::OnceLock<bool>, var: &str) -> bool {
    *cell.get_or_init(|| std::env::var_os(var).is_some_and(|v| v != "0"))
}

/// How an fsync was answered, from the counters its own calls moved (for
/// UBTRFS_TRACE_FSYNC).
fn answered(before: &RwStats, after: &RwStats) -> String {
    if after.fsync_commits > before.fsync_commits {
        let why = after.last_fallback.as_deref().unwrap_or("?");
        format!("commit ({why})")
    } else if after.log_syncs > before.log_syncs {
        "log".into()
    } else if after.fsync_batched > before.fsync_batched {
        "grouped log (synced by another fsync)".into()
    } else {
        "nothing to write".into()
    }
}

/// A time as btrfs stores it: seconds (negative before the epoch) and
/// nanoseconds forward from them, as the kernel sends it.
fn timespec(t: SystemTime) -> Timespec {
    let (sec, nsec) = crate::proto::reply::time(t);
    Timespec {
        sec: sec as i64,
        nsec,
    }
}

fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(timespec(t)),
    }
}

/// The errno of an engine error; failures of the image or host logged.
fn errno(op: &str, e: Error) -> Errno {
    crate::reply::engine_errno(op, &e, String::new)
}

impl RwFuse {
    pub fn new(fs: Arc<FsLock>, root: InodeId, ttl: Duration, acl: bool, atime: Atime) -> RwFuse {
        let (sectorsize, versions) = {
            let g = fs.lock_shared();
            (g.sectorsize() as u32, g.versions())
        };
        RwFuse(Arc::new(RwInner {
            fs,
            versions,
            nodes: ino::Nodes { root },
            ttl,
            sectorsize,
            handles: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            acl: AtomicBool::new(acl),
            atime,
            remounted_ro: Arc::new(AtomicBool::new(false)),
            pushes: Arc::new(Pushes::default()),
            fsyncs_waiting: AtomicU64::new(0),
            log_synced: Condvar::new(),
        }))
    }

    /// Runs `then` once the read-ahead pushes of `id` in flight have
    /// landed, on a thread of its own (a request thread must not wait for
    /// a push: see rw_push). If no thread can be made, the reply that
    /// went with `then` is answered EIO as it is dropped, and the writer
    /// stays counted, which only keeps pushes of this file off.
    fn after_pushes_land(
        &self,
        id: InodeId,
        op: &str,
        then: impl FnOnce(&RwInner) + Send + 'static,
    ) {
        let this = self.0.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("ubtrfs-{op}"))
            .spawn(move || {
                this.pushes.wait_landed(id);
                then(&this);
            });
        if let Err(e) = spawned {
            logging::error(&format!("{op}: a thread to wait on: {e}"));
        }
    }

    /// Where read-ahead is pushed from, to be given the session's
    /// notifier once the session exists.
    pub fn pushes_handle(&self) -> Arc<Pushes> {
        self.pushes.clone()
    }
}

impl RwInner {
    /// The filesystem, for a request that may change it.
    fn fs(&self) -> FsWrite<'_> {
        self.fs.lock()
    }

    /// The filesystem, for a request that only reads it: shared with
    /// other readers (direct writes and a log sync may be in flight).
    fn fs_read(&self) -> FsRead<'_> {
        self.fs.lock_shared()
    }

    /// A write into the dirty ranges, beside a writeback in flight; the
    /// one that passes the dirty limit starts a writeback of everything,
    /// its bytes written in the background (one at a time: while one is
    /// in flight, that writer waits for it, as the kernel's
    /// balance_dirty_pages makes writers wait for writeback).
    fn buffered_write(&self, id: InodeId, offset: u64, data: &[u8]) -> Result<usize, Error> {
        let mut g = self.fs.lock_buffered();
        let n = match g.write_buffered(id, offset, data) {
            Err(e @ Error::NoSpace(_)) => {
                drop(g);
                if !self.space_back() {
                    return Err(e);
                }
                g = self.fs.lock_buffered();
                g.write_buffered(id, offset, data)?
            }
            r => r?,
        };
        if g.over_dirty_limit() {
            if g.in_flight() > 0 {
                drop(g);
                g = self.fs();
                if !g.over_dirty_limit() {
                    return Ok(n);
                }
            }
            if self.fs.commit_waiting() {
                // The commit's thread writes everything back before it
                // commits: writers starting a flight at each one's end
                // could keep it waiting.
                return Ok(n);
            }
            self.fs.writeback_background(g)?;
        }
        Ok(n)
    }

    /// After ENOSPC: commits if that could give space back (space freed
    /// since the last commit is pinned until one, [`RwFs::commit_for_space`]);
    /// whether the request should be tried once more.
    fn space_back(&self) -> bool {
        let mut g = self.fs.lock_commit();
        match g.commit_for_space() {
            Ok(again) => again,
            Err(e) => {
                crate::logging::error(&format!("commit for space: {e}"));
                false
            }
        }
    }

    /// `op` on the filesystem held alone, run once more after ENOSPC when
    /// a commit gave space back ([`RwInner::space_back`]): for requests
    /// that may run again after a partial failure (fallocate, clones).
    fn with_space<T>(&self, op: impl Fn(&mut RwFs) -> Result<T, Error>) -> Result<T, Error> {
        let res = op(&mut self.fs());
        match res {
            Err(Error::NoSpace(_)) if self.space_back() => op(&mut self.fs()),
            r => r,
        }
    }

    /// Writes back the files among `ids` that hold much dirty data
    /// before a request whose own writeback of them holds the lock
    /// (fsync, fallocate, copy_file_range), the bytes written with the
    /// lock let go. A failure leaves the bytes dirty; the request's own
    /// writeback meets it again (fsync reports it).
    fn writeback_first(&self, ids: &[InodeId]) {
        const MUCH: u64 = 1 << 20;
        for &id in ids {
            let much = |fs: &RwFs| fs.dirty_of(id).is_some_and(|d| d.bytes() >= MUCH);
            if !much(&self.fs_read()) {
                continue;
            }
            let g = self.fs();
            if much(&g) {
                let _ = self.fs.writeback(g, id);
            }
        }
    }

    /// An O_DIRECT write: in place and outside the lock where the engine
    /// can (see [`ubtrfs_engine::vfs::direct`]); None if it must be
    /// written as a buffered write.
    fn direct_write(&self, id: InodeId, offset: u64, data: &[u8]) -> Option<Result<(), Error>> {
        let w = match self
            .fs
            .lock_direct()
            .direct_write_begin(id, offset, data.len())
        {
            Ok(Some(w)) => w,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let res = w.write(data);
        let end = self.fs.end_direct(w, res.is_ok());
        Some(res.and(end))
    }

    fn inode(&self, node: INodeNo) -> InodeId {
        self.nodes.inode(node.0)
    }

    /// fsync(2) and fdatasync(2) of a file or directory: the engine's
    /// fsync (a log tree, or a commit). With `UBTRFS_TRACE_FSYNC=1` in
    /// the daemon's environment, one log line each: answered by a log, by
    /// a commit (and why no log), or with nothing to write (tests and the
    /// benchmark count them).
    fn sync_node(&self, op: &str, node: INodeNo, datasync: bool) -> Result<(), Error> {
        let id = self.inode(node);
        let t = std::time::Instant::now();
        let (res, how) = self.fsync_grouped(id);
        if trace_fsync() {
            logging::info(&format!(
                "trace: {op}{} {}:{}: {how} in {:.3} ms{}",
                if datasync { " (datasync)" } else { "" },
                id.subvol,
                id.ino,
                t.elapsed().as_secs_f64() * 1000.0,
                if res.is_err() { ", failed" } else { "" }
            ));
        }
        res
    }

    /// fsync with concurrent fsyncs grouped, as the kernel batches them
    /// into one log commit: the file is logged under the lock; if other
    /// fsyncs are queued for the lock, it waits (lock released, at most
    /// [`FSYNC_GROUP_WAIT`]) for them to log their files, and the last to
    /// log syncs the log for all. A log sync costs two device flushes
    /// whatever it holds, so four writers pay for one instead of four.
    /// Also says how the fsync was answered (for UBTRFS_TRACE_FSYNC).
    fn fsync_grouped(&self, id: InodeId) -> (Result<(), Error>, String) {
        let trace = trace_fsync();
        self.writeback_first(&[id]);
        self.fsyncs_waiting.fetch_add(1, Ordering::SeqCst);
        // Logging waits for a log sync in flight to end (logging into the
        // next sync's log beside it did not pay: docs/rw-bench.md).
        let mut fs = self.fs.lock_log();
        self.fsyncs_waiting.fetch_sub(1, Ordering::SeqCst);
        let before = trace.then(|| fs.stats.clone());
        let n = match fs.fsync_log(id) {
            Ok(FsyncStage::Logged(n)) => n,
            Ok(FsyncStage::Commit(why)) => {
                // A commit, once the log sync in flight has ended.
                drop(fs);
                let mut fs = self.fs.lock_commit();
                let res = fs.fsync_fallback(why);
                let how = before.map(|b| answered(&b, &fs.stats));
                return (res, how.unwrap_or_default());
            }
            res => {
                let how = before.map(|b| answered(&b, &fs.stats));
                return (res.map(|_| ()), how.unwrap_or_default());
            }
        };
        let mut waited = false;
        if fsync_batching() {
            let until = std::time::Instant::now() + FSYNC_GROUP_WAIT;
            while !fs.fsync_durable(n) && self.fsyncs_waiting.load(Ordering::SeqCst) > 0 {
                let left = until.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                fs = self.fs.wait_timeout(&self.log_synced, fs, left);
                waited = true;
            }
        }
        // While this one waited (the lock released), another fsync's log
        // sync may have begun (it covers this file, or the next one will),
        // a commit may be waiting, and direct writes may have begun; or
        // this one logged while a log sync was in flight, which must end
        // first.
        if waited || fs.log_sync_in_flight() || self.fs.commit_waiting() {
            drop(fs);
            fs = self.fs.lock_log();
        }
        // Counted from here: other fsyncs moved the counters while this
        // one waited.
        let before = trace.then(|| fs.stats.clone());
        let step = fs.fsync_sync_begin(n);
        let res = match step {
            Ok(SyncStep::Done) => Ok(()),
            Ok(SyncStep::Write(w)) => {
                // The flushes wait for the disk without the lock. A panic
                // there must still end the sync (else every fsync and
                // commit after it would wait for good).
                drop(fs);
                let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.write()))
                    .unwrap_or_else(|_| {
                        Err(Error::Invalid("the log sync's write panicked".into()))
                    });
                let res = match self.fs.end_log_sync(w, written) {
                    Ok(()) => Ok(()),
                    Err(why) => self.fs.lock_commit().fsync_fallback(why),
                };
                let how = before.map(|b| answered(&b, &self.fs.lock_shared().stats));
                self.fs.signal(&self.log_synced);
                return (res, how.unwrap_or_default());
            }
            Err(e) => Err(e),
        };
        let how = before.map(|b| answered(&b, &fs.stats));
        drop(fs);
        self.fs.signal(&self.log_synced);
        (res, how.unwrap_or_default())
    }

    /// The entries of directory `node` after cookie `offset` for READDIR
    /// or READDIRPLUS, as many as fit, up to the index the directory had
    /// when the handle was opened or rewound.
    fn list<R: DirReply>(
        &self,
        node: INodeNo,
        fh: crate::proto::FileHandle,
        offset: u64,
        mut reply: R,
    ) {
        let dir = self.inode(node);
        let fs = self.fs_read();
        let end = {
            let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
            match dirs.get_mut(&fh.0) {
                Some(end) if offset == 0 || *end == u64::MAX => {
                    // Opened, or rewound: names made from here on are not
                    // listed.
                    *end = fs.readdir_end(dir).unwrap_or(u64::MAX);
                    *end
                }
                Some(end) => *end,
                None => u64::MAX,
            }
        };
        let entries = match fs.readdir(dir, offset, 512) {
            Ok(entries) => entries,
            Err(e) => {
                drop(fs);
                return reply.error(errno(R::OP, e));
            }
        };
        // Every entry before the one at `added` was added.
        for (added, e) in entries
            .into_iter()
            .take_while(|e| e.cookie <= end)
            .enumerate()
        {
            let n = self.node_of(e.id).unwrap_or(0);
            // The kernel makes no entry of "." and "..": the directory's
            // own attributes are filler for both.
            let of = if e.cookie <= 2 { dir } else { e.id };
            let attr = if R::PLUS {
                match self.entry(&fs, of) {
                    Ok(a) => Some(a),
                    // Entries already added are answered; the failing one
                    // comes first in the next call and fails alone.
                    Err(_) if added > 0 => break,
                    Err(err) => {
                        drop(fs);
                        return reply.error(err);
                    }
                }
            } else {
                None
            };
            let kind = dirent_type(e.file_type);
            let entry = Entry::new(INodeNo(n), e.cookie, OsStr::from_bytes(&e.name), kind, attr);
            if reply.push(&entry, &self.ttl) {
                break;
            }
        }
        drop(fs);
        // Before the answer, as for READ.
        self.accessed(dir, true);
        reply.ok();
    }

    fn node_of(&self, id: InodeId) -> Result<u64, Errno> {
        self.nodes.node_of(id)
    }

    fn attr(&self, st: &Stat) -> Result<FileAttr, Errno> {
        Ok(file_attr(st, self.node_of(st.id)?, self.sectorsize))
    }

    /// Stat and attributes of `id`, for an entry reply.
    fn entry(&self, fs: &RwFs, id: InodeId) -> Result<(FileAttr, Generation), Errno> {
        let st = fs.stat(id).map_err(|e| errno("stat", e))?;
        Ok((self.attr(&st)?, Generation(st.generation)))
    }

    fn reply_entry(&self, op: &str, reply: ReplyEntry, res: Result<InodeId, Error>) {
        let fs = self.fs_read();
        match res
            .map_err(|e| errno(op, e))
            .and_then(|id| self.entry(&fs, id))
        {
            Ok((attr, g)) => reply.entry(&self.ttl, &attr, g),
            Err(e) => reply.error(e),
        }
    }

    /// The umask a create applies itself: with POSIX ACLs the kernel
    /// leaves the mode unmasked (FUSE_DONT_MASK) for the default ACL to
    /// decide; else it has masked the mode already.
    fn umask(&self, umask: u32) -> Option<u32> {
        self.acl.load(Ordering::Relaxed).then_some(umask)
    }

    /// SETATTR of `id`.
    fn setattr_as(&self, id: InodeId, a: &SetAttr, reply: ReplyAttr) {
        let res = self.fs().setattr(id, a);
        match res
            .map_err(|e| errno("setattr", e))
            .and_then(|st| self.attr(&st))
        {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    /// The flag [`crate::remount::follow_ro`] keeps.
    pub fn remounted_ro(&self) -> Arc<AtomicBool> {
        self.remounted_ro.clone()
    }

    /// Drops the kernel's cached attributes of `node` after a change it
    /// did not make through SETATTR (an ioctl's: the new ctime).
    fn inval_attr(&self, node: INodeNo) {
        if let Some(n) = self.pushes.notifier() {
            if let Err(e) = n.inval_attr(node) {
                logging::warn(&format!("attributes of node {}: {e}", node.0));
            }
        }
    }

    /// Answers a CREATE or TMPFILE whose file `res` is, opened with
    /// `flags`, noted open before the filesystem `fs` is let go (a file
    /// without a name must not be deleted in between).
    fn created(
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
                let fh = self.new_handle(id, writer, flags);
                reply.created(
                    &self.ttl,
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
    fn closed(&self, id: InodeId, op: &str) {
        let last_of_orphan = self.fs_read().release_shared(id);
        if last_of_orphan {
            if let Err(e) = self.fs().drop_orphan_if_closed(id) {
                logging::error(&format!("{op}: {e}"));
            }
        }
    }

    /// OPEN with flags `f`, a `writer` already counted by
    /// [`Pushes::writer_begin`] (and uncounted here if the open fails).
    fn open_as(&self, id: InodeId, f: i32, writer: bool, reply: ReplyOpen) {
        let res = (|| {
            if f & libc::O_TRUNC == 0 {
                // Changes nothing but the open count: shared.
                let fs = self.fs_read();
                if writer {
                    fs.check_open_write(id, f & libc::O_APPEND != 0)?;
                }
                fs.opened(id);
                return Ok(());
            }
            let mut fs = self.fs();
            if writer {
                fs.check_open_write(id, f & libc::O_APPEND != 0)?;
            }
            let a = SetAttr {
                size: Some(0),
                ..Default::default()
            };
            fs.setattr(id, &a)?;
            fs.opened(id);
            Ok(())
        })();
        match res {
            Ok(()) => {
                let fh = self.new_handle(id, writer, f);
                reply.opened(
                    crate::proto::FileHandle(fh),
                    open_flags(f, f & libc::O_NOATIME == 0 && self.atime_due(id, false)),
                );
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
    /// [`Pushes::writer_begin`].
    fn new_handle(&self, id: InodeId, writer: bool, flags: i32) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        // Looked at before the handles' lock is taken: never the
        // filesystem's lock under it.
        let setid = self
            .fs_read()
            .stat(id)
            .is_ok_and(|st| st.mode & (libc::S_ISUID | libc::S_ISGID) != 0);
        let buffered = flags & libc::O_DIRECT == 0;
        if buffered {
            self.pushes.buffered_open(id);
        }
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
                    reads: ReadPattern::default(),
                },
            );
        fh
    }
}

impl crate::proto::FuseFs for RwFuse {
    fn busy(&self) -> bool {
        self.fs.writeback_in_flight()
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        use crate::proto::InitFlags;
        let caps = config.capabilities();
        let wanted = InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_MAX_PAGES
            | InitFlags::FUSE_ASYNC_READ
            | InitFlags::FUSE_BIG_WRITES
            | InitFlags::FUSE_ATOMIC_O_TRUNC
            // SETXATTR says when an ACL must clear S_ISGID (the kernel
            // knows the caller's groups and capabilities; we do not).
            | InitFlags::FUSE_SETXATTR_EXT
            | InitFlags::FUSE_EXPORT_SUPPORT
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO;
        let _ = config.add_capabilities(wanted & caps);
        if async_direct() {
            // An io_uring or aio O_DIRECT request goes out as a background
            // request and its submitter moves on (FUSE_ASYNC_DIO); 64 of
            // them may be queued (fio's 4 jobs x iodepth 16), not 16.
            let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO & caps);
            let _ = config.set_max_background(64);
        }
        // A shared mapping of a file opened FOPEN_DIRECT_IO (an O_DIRECT
        // open, see open_flags) is refused (ENODEV) unless the kernel may
        // switch the inode back to page-cache I/O for it, which keeps it
        // coherent with the direct writes.
        let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP & caps);
        if self.acl.load(Ordering::Relaxed) {
            let acl = InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK;
            if config.add_capabilities(acl & caps).is_err() || !caps.contains(acl) {
                self.acl.store(false, Ordering::Relaxed);
            }
        }
        // 1 MiB writes, the most the protocol layer takes.
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_time_granularity(Duration::from_nanos(1));
        Ok(())
    }

    /// The final commit, and the image let go: a fuseblk mount's
    /// umount(2) waits for this reply, so the next writer finds the image
    /// free.
    fn destroy(&self) {
        let mut fs = self.fs.lock_commit();
        fs.mark_ending();
        match fs.unmount() {
            Ok(()) => fs.release_claims(),
            Err(e) => logging::error(&format!("final commit: {e}")),
        }
    }

    /// sync(1) and syncfs(2) (sent to the fuseblk mount): a commit, as the
    /// kernel's btrfs_sync_fs.
    fn syncfs(&self, _req: &Request, reply: ReplyEmpty) {
        match self.fs.lock_commit().sync_fs() {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno("syncfs", e)),
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let dir = self.inode(parent);
        let fs = self.fs_read();
        let res = match name.as_bytes() {
            // A file handle's inode the kernel no longer caches
            // (open_by_handle_at, NFS export): it asks for the node by its
            // id, and for its parent (FUSE_EXPORT_SUPPORT). Node ids are
            // a function of the inode, so handles outlive the mount.
            b"." => fs.stat(dir).map(|_| Some(dir)),
            b".." => fs.parent(dir).map(Some),
            n => fs.lookup(dir, n),
        };
        drop(fs);
        match res {
            Ok(Some(id)) => self.reply_entry("lookup", reply, Ok(id)),
            Ok(None) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(errno("lookup", e)),
        }
    }

    fn getattr(
        &self,
        _req: &Request,
        node: INodeNo,
        _fh: Option<crate::proto::FileHandle>,
        reply: ReplyAttr,
    ) {
        let id = self.inode(node);
        let res = self.fs_read().stat(id);
        let reply = crate::attr::birth_of(reply, id);
        match res
            .map_err(|e| errno("getattr", e))
            .and_then(|st| self.attr(&st))
        {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        _req: &Request,
        node: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<crate::proto::FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<crate::proto::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let id = self.inode(node);
        let a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
            ctime: ctime.map(timespec),
        };
        if size.is_none() {
            return self.setattr_as(id, &a, reply);
        }
        // A truncate changes the bytes the page cache holds: counted as
        // a writer while it runs, after read-ahead pushes in flight have
        // landed (on a thread of its own if it must wait: see rw_push).
        if self.pushes.writer_begin(id) {
            self.setattr_as(id, &a, reply);
            self.pushes.writer_end(id);
            return;
        }
        self.after_pushes_land(id, "setattr", move |this| {
            this.setattr_as(id, &a, reply);
            this.pushes.writer_end(id);
        });
    }

    fn readlink(&self, _req: &Request, node: INodeNo, reply: ReplyData) {
        let res = self.fs_read().readlink(self.inode(node));
        match res {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno("readlink", e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let dir = self.inode(parent);
        let res = self.fs().create(
            dir,
            name.as_bytes(),
            mode,
            rdev as u64,
            (req.uid(), req.gid()),
            self.umask(umask),
        );
        self.reply_entry("mknod", reply, res);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let dir = self.inode(parent);
        let mode = 0o040000 | (mode & 0o7777);
        let res = self.fs().create(
            dir,
            name.as_bytes(),
            mode,
            0,
            (req.uid(), req.gid()),
            self.umask(umask),
        );
        self.reply_entry("mkdir", reply, res);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self.fs().unlink(self.inode(parent), name.as_bytes());
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno("unlink", e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self.fs().rmdir(self.inode(parent), name.as_bytes());
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno("rmdir", e)),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let res = self.fs().symlink(
            self.inode(parent),
            link_name.as_bytes(),
            target.as_os_str().as_bytes(),
            req.uid(),
            req.gid(),
        );
        self.reply_entry("symlink", reply, res);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: crate::proto::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let res = self.fs().rename_as(
            self.inode(parent),
            name.as_bytes(),
            self.inode(newparent),
            newname.as_bytes(),
            flags.bits(),
            (req.uid(), req.gid()),
        );
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno("rename", e)),
        }
    }

    fn link(
        &self,
        _req: &Request,
        node: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let id = self.inode(node);
        let res = self
            .fs()
            .link(id, self.inode(newparent), newname.as_bytes())
            .map(|_| id);
        self.reply_entry("link", reply, res);
    }

    fn open(
        &self,
        _req: &Request,
        node: INodeNo,
        flags: crate::proto::OpenFlags,
        reply: ReplyOpen,
    ) {
        let id = self.inode(node);
        let f = flags.0;
        let writing = f & libc::O_ACCMODE != libc::O_RDONLY || f & libc::O_TRUNC != 0;
        if writing && !self.pushes.writer_begin(id) {
            // Read-ahead of this file is being pushed into the page
            // cache: the open waits for it to land, on a thread of its
            // own (see rw_push).
            return self
                .after_pushes_land(id, "open", move |this| this.open_as(id, f, true, reply));
        }
        self.open_as(id, f, writing, reply);
    }

    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        _req: &Request,
        node: INodeNo,
        fh: crate::proto::FileHandle,
        offset: u64,
        size: u32,
        _flags: crate::proto::OpenFlags,
        _lock_owner: Option<crate::proto::LockOwner>,
        reply: ReplyData,
    ) {
        let id = self.inode(node);
        if let Some(ms) = test_read_delay(offset, size) {
            // Test hook: this READ is answered late, from a thread of its
            // own, before any window is counted (it ties up no request
            // thread or ring queue, and pushes nothing).
            let this = self.0.clone();
            let spawned = std::thread::Builder::new()
                .name("ubtrfs-test-delay".into())
                .spawn(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    match this.fs_read().read(id, offset, size) {
                        Ok(d) => reply.data(&d),
                        Err(e) => reply.error(errno("read", e)),
                    }
                });
            if let Err(e) = spawned {
                logging::error(&format!("read: the test delay's thread: {e}"));
            }
            return;
        }
        // A small forward read reads a window, and what lies past the
        // request is pushed into the page cache (see rw_push).
        let (window, noatime) = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh.0)
            .filter(|h| h.id == id)
            .map_or((None, false), |h| (h.reads.window(offset, size), h.noatime));
        let window = window.filter(|_| self.pushes.may_push(id));
        let fs = self.fs_read();
        let res = fs.read(id, offset, size);
        // A failure past the request is not this request's.
        let ahead = window
            .filter(|_| res.is_ok())
            .and_then(|w| fs.read(id, w.start, w.len as u32).ok())
            .filter(|d| !d.is_empty());
        let push = ahead.is_some() && self.pushes.begin(id);
        drop(fs);
        let n = res.as_ref().map_or(0, |d| d.len());
        if let Some(h) = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&fh.0)
        {
            h.reads
                .read_to(offset, offset + n as u64, window.filter(|_| push));
        }
        match res {
            Ok(d) => {
                // atime moves before the answer, as the kernel's read moves
                // it before read(2) returns: a stat right after the read
                // must see it.
                if !noatime {
                    self.accessed(id, false);
                }
                reply.data(&d);
                if let (true, Some(w), Some(data)) = (push, window, ahead) {
                    self.pushes.push(id, node.0, w.start, data);
                }
            }
            Err(e) => reply.error(errno("read", e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        req: &Request,
        node: INodeNo,
        fh: crate::proto::FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: crate::proto::WriteFlags,
        flags: crate::proto::OpenFlags,
        _lock_owner: Option<crate::proto::LockOwner>,
        reply: ReplyWrite,
    ) {
        let id = self.inode(node);
        let direct = flags.0 & libc::O_DIRECT != 0;
        let res = match direct
            .then(|| self.direct_write(id, offset, data))
            .flatten()
        {
            Some(res) => res.map(|()| data.len()),
            None => self.buffered_write(id, offset, data),
        };
        // The kernel says when a direct write's caller lacks CAP_FSETID;
        // on buffered writes it drops only what its own (older) rule
        // says, so a file that had set-ID bits is looked at here.
        // A write from the page cache (FUSE_WRITE_CACHE) is not the
        // caller's: the kernel dropped what it drops when the data was
        // written into the cache.
        let flags = write_flags.bits();
        let kill = flags & crate::proto::abi::FUSE_WRITE_KILL_SUIDGID != 0
            || flags & crate::proto::abi::FUSE_WRITE_CACHE == 0
                && self.handle_setid(fh)
                && crate::caps::lacks(req.pid(), crate::caps::CAP_FSETID);
        match res {
            Ok(n) => {
                if kill {
                    self.drop_set_ids(id, req);
                }
                if direct {
                    self.pushes
                        .after_direct_write(id, node.0, offset, n as u64, move || {
                            reply.written(n as u32)
                        });
                } else {
                    reply.written(n as u32)
                }
            }
            Err(e) => reply.error(errno("write", e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _node: INodeNo,
        fh: crate::proto::FileHandle,
        _flags: crate::proto::OpenFlags,
        _lock_owner: Option<crate::proto::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let h = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh.0);
        if let Some(h) = h {
            if h.writer {
                self.pushes.writer_end(h.id);
            }
            if h.buffered {
                self.pushes.buffered_close(h.id);
            }
            self.closed(h.id, "release");
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        node: INodeNo,
        _fh: crate::proto::FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.sync_node("fsync", node, datasync) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno("fsync", e)),
        }
    }

    fn opendir(
        &self,
        _req: &Request,
        node: INodeNo,
        _flags: crate::proto::OpenFlags,
        reply: ReplyOpen,
    ) {
        // Counted as a file's open: a directory removed while open lives
        // on (nlink 0, fstat works) until its last close.
        let id = self.inode(node);
        self.fs_read().opened(id);
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fh, u64::MAX);
        // The kernel keeps the listing (FOPEN_CACHE_DIR), and the next
        // open reads it again only when the directory changed (its mtime
        // or change counter, which every change through the mount bumps:
        // the mount is the image's one writer) or when atime is due (a
        // listing the cache answers does not reach us, as with files).
        let mut f = FopenFlags::FOPEN_CACHE_DIR;
        if !self.atime_due(id, true) {
            f |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        reply.opened(crate::proto::FileHandle(fh), f);
    }

    fn readdir(
        &self,
        _req: &Request,
        node: INodeNo,
        fh: crate::proto::FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.list(node, fh, offset, reply);
    }

    /// READDIR with each entry's lookup answer: a walk that stats what it
    /// lists (ls -l, tar, rm -r, find) makes no LOOKUP per entry. The
    /// kernel asks for it at the start of a listing, and after that only
    /// while the entries it gave are being looked up
    /// (FUSE_READDIRPLUS_AUTO).
    fn readdirplus(
        &self,
        _req: &Request,
        node: INodeNo,
        fh: crate::proto::FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.list(node, fh, offset, reply);
    }

    fn releasedir(
        &self,
        _req: &Request,
        node: INodeNo,
        fh: crate::proto::FileHandle,
        _flags: crate::proto::OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh.0);
        self.closed(self.inode(node), "releasedir");
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        node: INodeNo,
        _fh: crate::proto::FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.sync_node("fsyncdir", node, datasync) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno("fsyncdir", e)),
        }
    }

    fn statfs(&self, _req: &Request, _node: INodeNo, reply: ReplyStatfs) {
        let s = self.fs_read().statfs();
        reply.statfs(s.blocks, s.bfree, s.bavail, 0, 0, s.bsize, 255, s.bsize);
    }

    #[allow(clippy::too_many_arguments)]
    fn setxattr(
        &self,
        _req: &Request,
        node: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        setxattr_flags: u32,
        reply: ReplyEmpty,
    ) {
        let kill_sgid = setxattr_flags & crate::proto::abi::FUSE_SETXATTR_ACL_KILL_SGID != 0;
        let res = self
            .fs()
            .setxattr(self.inode(node), name.as_bytes(), value, flags, kill_sgid);
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno("setxattr", e)),
        }
    }

    fn getxattr(&self, _req: &Request, node: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let res = self.fs_read().getxattr(self.inode(node), name.as_bytes());
        answer_xattr(res, size, reply, "getxattr");
    }

    fn listxattr(&self, _req: &Request, node: INodeNo, size: u32, reply: ReplyXattr) {
        let res = self.fs_read().listxattr(self.inode(node));
        answer_xattr(res, size, reply, "listxattr");
    }

    fn removexattr(&self, _req: &Request, node: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self.fs().removexattr(self.inode(node), name.as_bytes());
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno("removexattr", e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let dir = self.inode(parent);
        let mode = if mode & 0o170000 == 0 {
            mode | 0o100000
        } else {
            mode
        };
        let mut fs = self.fs();
        let res = fs.create(
            dir,
            name.as_bytes(),
            mode,
            0,
            (req.uid(), req.gid()),
            self.umask(umask),
        );
        self.created("create", fs, res, flags, reply);
    }

    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let dir = self.inode(parent);
        let mut fs = self.fs();
        let res = fs.tmpfile(dir, mode, (req.uid(), req.gid()), self.umask(umask));
        self.created("tmpfile", fs, res, flags, reply);
    }

    #[allow(clippy::too_many_arguments)]
    fn ioctl(
        &self,
        req: &Request,
        node: INodeNo,
        _fh: crate::proto::FileHandle,
        _flags: crate::proto::IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        self.ioctl_request(req, node, cmd, in_data, reply)
    }

    fn fallocate(
        &self,
        req: &Request,
        node: INodeNo,
        _fh: crate::proto::FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let id = self.inode(node);
        self.writeback_first(&[id]);
        let res = self.with_space(|fs| fs.fallocate(id, offset, length, mode));
        match res {
            Ok(()) => {
                // The kernel's FUSE dropped the set-user-ID bit already
                // (file_modified), but keeps set-group-ID unless the group
                // may execute; the VFS also drops it for a caller outside
                // the file's group.
                if crate::caps::lacks(req.pid(), crate::caps::CAP_FSETID) {
                    self.drop_set_ids(id, req);
                }
                reply.ok()
            }
            Err(e) => reply.error(errno("fallocate", e)),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        node: INodeNo,
        fh: crate::proto::FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        if whence != libc::SEEK_DATA && whence != libc::SEEK_HOLE {
            return reply.error(Errno::EINVAL);
        }
        if offset < 0 {
            return reply.error(Errno::ENXIO);
        }
        let id = self.inode(node);
        let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        let mut scratch = SeekCache::default();
        let cache = match handles.get_mut(&fh.0) {
            Some(h) if h.id == id => &mut h.seek,
            _ => &mut scratch,
        };
        // A current cache answers without the filesystem's lock (seed
        // 001: the walk does not wait for a commit or another writer).
        let res = match cache.cached(&self.versions, id, offset as u64, whence) {
            Some(o) => Ok(o),
            None => self.fs_read().seek(id, cache, offset as u64, whence),
        };
        match res {
            Ok(Some(o)) => reply.offset(o as i64),
            Ok(None) => reply.error(Errno::ENXIO),
            Err(e) => reply.error(errno("lseek", e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: crate::proto::FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: crate::proto::FileHandle,
        offset_out: u64,
        len: u64,
        _flags: crate::proto::CopyFileRangeFlags,
        reply: ReplyCopy,
    ) {
        let len = len.min(u32::MAX as u64 & !0xfff);
        let (src, dst) = (self.inode(ino_in), self.inode(ino_out));
        self.writeback_first(&[src, dst]);
        let res = self.with_space(|fs| fs.copy_range(src, offset_in, dst, offset_out, len));
        match res {
            Ok(n) => reply.copied(n),
            Err(e) => reply.error(errno("copy_file_range", e)),
        }
    }
}

fn answer_xattr(res: Result<Vec<u8>, Error>, size: u32, reply: ReplyXattr, op: &str) {
    match res {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(errno(op, e)),
    }
}

/// Test hook `UBTRFS_TEST_READ_DELAY=OFFSET:MS`: a READ whose range holds
/// byte OFFSET is answered MS milliseconds late (tests/tests/rw_mount.rs
/// (k) holds a page locked in the kernel with it). None for every other
/// READ, and always without the variable.
fn test_read_delay(offset: u64, size: u32) -> Option<u64> {
    static DELAY: std::sync::OnceLock<Option<(u64, u64)>> = std::sync::OnceLock::new();
    let (at, ms) = (*DELAY.get_or_init(|| {
        let v = std::env::var("UBTRFS_TEST_READ_DELAY").ok()?;
        let (at, ms) = v.split_once(':')?;
        Some((at.parse().ok()?, ms.parse().ok()?))
    }))?;
    (offset <= at && at < offset + size as u64).then_some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's (-2, 250_000_000) is 1969-12-31 23:59:58.25, 1.75 s
    /// before the epoch (our decoder's reading, proto::dispatch), stored
    /// as the kernel sent it.
    #[test]
    fn setattr_times_before_1970_are_stored_as_the_kernel_sent_them() {
        use std::time::UNIX_EPOCH;
        let decoded = UNIX_EPOCH - Duration::new(1, 750_000_000);
        assert_eq!(
            timespec(decoded),
            Timespec {
                sec: -2,
                nsec: 250_000_000
            }
        );
        let after = UNIX_EPOCH + Duration::new(5, 7);
        assert_eq!(timespec(after), Timespec { sec: 5, nsec: 7 });
    }
}
