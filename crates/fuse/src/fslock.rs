//! The read-write mount's lock on its filesystem, which lets direct
//! writes run beside each other.
//!
//! A direct write ([`ubtrfs_engine::vfs::direct`]) takes the lock to
//! begin and to end, and writes its bytes to the devices in between with
//! the lock released. While it is in flight its extents must stay as they
//! were planned: allocated, this file's, unshared. So every request that
//! could change extents ([`FsLock::lock`]: all but reads) waits until no
//! direct write is in flight, and new direct writes wait behind it (they
//! would otherwise keep it waiting forever under a steady load). Reads
//! ([`FsLock::lock_shared`]) change nothing and take the lock as it is.
//!
//! A log sync writes its superblock and waits for the disk's flushes with
//! the lock released ([`RwFs::fsync_sync_begin`]); until it ends, what may
//! commit ([`FsLock::lock_commit`]: the commit thread, the sync ioctls,
//! unmount) or sync the log ([`FsLock::lock_log`]: fsync) waits, and
//! everything else goes on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use ubtrfs_engine::vfs::direct::DirectWrite;
use ubtrfs_engine::vfs::{LogSyncWrite, RwFs};
use ubtrfs_engine::Error;

pub struct FsLock {
    fs: Mutex<RwFs>,
    /// Signalled when the last direct write in flight ends, and when a
    /// request that waited for that has the lock.
    drained: Condvar,
    /// Requests waiting for direct writes to drain.
    waiting: AtomicU64,
    /// Commits waiting for a log sync to end ([`FsLock::lock_commit`]).
    committers: AtomicU64,
    /// Signalled when a log sync ends, and when a waiting commit has the
    /// lock.
    log_ended: Condvar,
    /// Where time goes around the lock (logged at unmount).
    pub stats: LockStats,
}

/// Time spent waiting for the lock, and holding it to commit: what tells
/// whether requests queue behind each other or behind the commit.
#[derive(Default)]
pub struct LockStats {
    takes: AtomicU64,
    wait_ns: AtomicU64,
    max_wait_ns: AtomicU64,
    commits: AtomicU64,
    commit_ns: AtomicU64,
    max_commit_ns: AtomicU64,
}

impl LockStats {
    fn waited(&self, since: Instant) {
        let ns = since.elapsed().as_nanos() as u64;
        self.takes.fetch_add(1, Ordering::Relaxed);
        self.wait_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_wait_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// The commit thread's commit held the lock for `d`.
    pub fn committed(&self, d: Duration) {
        let ns = d.as_nanos() as u64;
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.commit_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_commit_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// One log line's worth.
    pub fn summary(&self) -> String {
        let ms = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e6;
        format!(
            "filesystem lock: taken {} times, {:.1} ms waited in all, at most {:.1} ms; commits held it {} times, {:.1} ms in all, at most {:.1} ms",
            self.takes.load(Ordering::Relaxed),
            ms(&self.wait_ns),
            ms(&self.max_wait_ns),
            self.commits.load(Ordering::Relaxed),
            ms(&self.commit_ns),
            ms(&self.max_commit_ns),
        )
    }
}

impl FsLock {
    pub fn new(fs: RwFs) -> FsLock {
        FsLock {
            fs: Mutex::new(fs),
            drained: Condvar::new(),
            waiting: AtomicU64::new(0),
            committers: AtomicU64::new(0),
            log_ended: Condvar::new(),
            stats: LockStats::default(),
        }
    }

    fn raw(&self) -> MutexGuard<'_, RwFs> {
        self.fs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, RwFs>) -> MutexGuard<'a, RwFs> {
        self.drained.wait(g).unwrap_or_else(|p| p.into_inner())
    }

    /// The filesystem with no direct write in flight: for every request
    /// that may change it.
    pub fn lock(&self) -> MutexGuard<'_, RwFs> {
        let since = Instant::now();
        let g = self.lock_drained();
        self.stats.waited(since);
        g
    }

    fn lock_drained(&self) -> MutexGuard<'_, RwFs> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut g = self.raw();
        while g.direct_in_flight() > 0 {
            g = self.wait(g);
        }
        // Under the lock, so that a direct write that saw it non-zero is
        // already waiting for the signal.
        if self.waiting.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.drained.notify_all();
        }
        g
    }

    /// Waits for the end of a log sync, or for a commit that log syncs
    /// waited for to take the lock ([`FsLock::log_ended`]; not `drained`,
    /// which every uncontended [`FsLock::lock`] signals: waiters for a
    /// flush would wake each other in turn until it ends).
    fn wait_log<'a>(&self, g: MutexGuard<'a, RwFs>) -> MutexGuard<'a, RwFs> {
        self.log_ended.wait(g).unwrap_or_else(|p| p.into_inner())
    }

    /// The filesystem with no direct write and no log sync in flight, for
    /// a commit (a commit's superblock must not land before a log
    /// sync's). Log syncs waiting to begin let it go first, so a steady
    /// stream of fsyncs does not keep the commit waiting.
    pub fn lock_commit(&self) -> MutexGuard<'_, RwFs> {
        let since = Instant::now();
        self.committers.fetch_add(1, Ordering::SeqCst);
        loop {
            let g = self.lock_drained();
            if !g.log_sync_in_flight() {
                // Under the lock: the log syncs this wakes find it taken
                // and run after the commit.
                self.committers.fetch_sub(1, Ordering::SeqCst);
                self.log_ended.notify_all();
                self.stats.waited(since);
                return g;
            }
            // Direct writes may begin while this waits: lock again.
            drop(self.wait_log(g));
        }
    }

    /// The filesystem with no direct write, no log sync in flight and no
    /// commit waiting for one: for fsync, which may begin a log sync.
    pub fn lock_log(&self) -> MutexGuard<'_, RwFs> {
        let since = Instant::now();
        loop {
            let g = self.lock_drained();
            if !g.log_sync_in_flight() && self.committers.load(Ordering::SeqCst) == 0 {
                self.stats.waited(since);
                return g;
            }
            drop(self.wait_log(g));
        }
    }

    /// Ends a log sync whose superblock write returned `res` (see
    /// [`RwFs::fsync_sync_begin`]): Err(why) when the caller must commit
    /// instead.
    pub fn end_log_sync(&self, w: LogSyncWrite, res: Result<(), Error>) -> Result<(), String> {
        let since = Instant::now();
        let mut g = self.raw();
        self.stats.waited(since);
        let res = g.fsync_sync_end(w, res);
        drop(g);
        self.log_ended.notify_all();
        res
    }

    /// The filesystem as it is, direct writes in flight or not: for
    /// requests that only read.
    pub fn lock_shared(&self) -> MutexGuard<'_, RwFs> {
        let since = Instant::now();
        let g = self.raw();
        self.stats.waited(since);
        g
    }

    /// The filesystem for beginning a direct write: after the requests
    /// waiting for direct writes to drain.
    pub fn lock_direct(&self) -> MutexGuard<'_, RwFs> {
        let since = Instant::now();
        let mut g = self.raw();
        while self.waiting.load(Ordering::SeqCst) > 0 {
            g = self.wait(g);
        }
        self.stats.waited(since);
        g
    }

    /// Ends a direct write (its bytes `written` or not).
    pub fn end_direct(&self, w: DirectWrite, written: bool) -> Result<(), Error> {
        let mut g = self.raw();
        let res = g.direct_write_end(w, written);
        if g.direct_in_flight() == 0 {
            self.drained.notify_all();
        }
        res
    }
}
