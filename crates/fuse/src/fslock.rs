//! The read-write mount's lock on its filesystem, which lets direct
//! writes run beside each other.
//!
//! A direct write ([`ubtrfs_engine::rwfs::direct`]) takes the lock to
//! begin and to end, and writes its bytes to the devices in between with
//! the lock released. While it is in flight its extents must stay as they
//! were planned: allocated, this file's, unshared. So every request that
//! could change extents ([`FsLock::lock`]: all but reads) waits until no
//! direct write is in flight, and new direct writes wait behind it (they
//! would otherwise keep it waiting forever under a steady load). Reads
//! ([`FsLock::lock_shared`]: read, lookup, stat, readdir, xattrs, lseek)
//! change nothing: they share the lock with each other, and with direct
//! writes and log syncs in flight; every other request has it alone.
//!
//! The engine's reads take `&RwFs` ([`RwFs::read`], [`RwFs::stat`], ...):
//! they descend the transaction's trees as they are, loading committed
//! blocks into a cache of their own that readers fill side by side. So
//! readers of one file, or of different files, wait for no one but a
//! writer; the kernel's tree locks let readers of different leaves pass
//! writers too, which one transaction in memory does not (a writer may
//! move any block of a path it copies).
//!
//! A writeback ([`FsLock::writeback_all`]: the write that passes the
//! dirty limit, the commit thread) writes its bytes with the lock let go
//! too, and is waited for as direct writes are.
//!
//! A log sync writes its superblock and waits for the disk's flushes with
//! the lock released ([`RwFs::fsync_sync_begin`]); until it ends, what may
//! commit ([`FsLock::lock_commit`]: the commit thread, the sync ioctls,
//! unmount) or sync the log ([`FsLock::lock_log`]: fsync) waits, and
//! everything else goes on.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};
use ubtrfs_engine::fs::InodeId;
use ubtrfs_engine::rwfs::direct::DirectWrite;
use ubtrfs_engine::rwfs::ordered::Ordered;
use ubtrfs_engine::rwfs::{LogSyncWrite, RwFs};
use ubtrfs_engine::Error;

/// The filesystem held alone, for a request that may change it. How long
/// it was held is counted when it is let go ([`LockStats`]).
pub struct FsWrite<'a> {
    /// Let go first when dropped, before the hold is counted and logged.
    g: ManuallyDrop<RwLockWriteGuard<'a, RwFs>>,
    since: Instant,
    stats: &'a LockStats,
}

impl std::ops::Deref for FsWrite<'_> {
    type Target = RwFs;
    fn deref(&self) -> &RwFs {
        &self.g
    }
}

impl std::ops::DerefMut for FsWrite<'_> {
    fn deref_mut(&mut self) -> &mut RwFs {
        &mut self.g
    }
}

impl Drop for FsWrite<'_> {
    fn drop(&mut self) {
        // SAFETY: the guard is dropped once, here, and not used after.
        unsafe { ManuallyDrop::drop(&mut self.g) };
        self.stats.held(self.since);
    }
}

/// The filesystem shared with other readers.
pub type FsRead<'a> = RwLockReadGuard<'a, RwFs>;

pub struct FsLock {
    fs: RwLock<RwFs>,
    /// Taken by a request that must wait for direct writes to drain or a
    /// log sync to end, before it lets the filesystem go, and by whoever
    /// ends them to signal: no signal falls between a waiter's look at
    /// the filesystem and its wait.
    gate: Mutex<()>,
    /// Signalled when the last direct write in flight ends, and when a
    /// request that waited for that has the lock.
    drained: Condvar,
    /// Requests waiting for direct writes to drain.
    waiting: AtomicU64,
    /// Commits waiting for a log sync to end ([`FsLock::lock_commit`]).
    committers: AtomicU64,
    /// Writebacks whose bytes are being written ([`FsLock::writeback_all`]
    /// and its kin): requests that change the filesystem may wait long.
    flights: AtomicU64,
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
    /// Time the lock was held alone (by requests that may change the
    /// filesystem, commits, the ends of direct writes and log syncs).
    held_ns: AtomicU64,
    max_held_ns: AtomicU64,
}

impl LockStats {
    fn waited(&self, since: Instant) {
        let ns = since.elapsed().as_nanos() as u64;
        self.takes.fetch_add(1, Ordering::Relaxed);
        self.wait_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_wait_ns.fetch_max(ns, Ordering::Relaxed);
    }

    fn held(&self, since: Instant) -> Duration {
        let d = since.elapsed();
        let ns = d.as_nanos() as u64;
        self.held_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_held_ns.fetch_max(ns, Ordering::Relaxed);
        d
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
            "filesystem lock: taken {} times, {:.1} ms waited in all, at most {:.1} ms; held alone {:.1} ms in all, at most {:.1} ms; commits held it {} times, {:.1} ms in all, at most {:.1} ms",
            self.takes.load(Ordering::Relaxed),
            ms(&self.wait_ns),
            ms(&self.max_wait_ns),
            ms(&self.held_ns),
            ms(&self.max_held_ns),
            self.commits.load(Ordering::Relaxed),
            ms(&self.commit_ns),
            ms(&self.max_commit_ns),
        )
    }
}

impl FsLock {
    pub fn new(fs: RwFs) -> FsLock {
        FsLock {
            fs: RwLock::new(fs),
            gate: Mutex::new(()),
            drained: Condvar::new(),
            waiting: AtomicU64::new(0),
            committers: AtomicU64::new(0),
            flights: AtomicU64::new(0),
            log_ended: Condvar::new(),
            stats: LockStats::default(),
        }
    }

    fn raw(&self) -> FsWrite<'_> {
        FsWrite {
            g: ManuallyDrop::new(self.fs.write().unwrap_or_else(|p| p.into_inner())),
            since: Instant::now(),
            stats: &self.stats,
        }
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, ()> {
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets the filesystem go and waits for `cv` (the caller looks
    /// again: wake-ups may be spurious).
    fn wait_on(&self, cv: &Condvar, g: FsWrite<'_>) {
        let gate = self.gate();
        drop(g);
        drop(cv.wait(gate).unwrap_or_else(|p| p.into_inner()));
    }

    /// Lets the filesystem go, waits for `cv` at most `dur`, and takes it
    /// again (as it is: the caller looks at what it waited for).
    pub fn wait_timeout<'a>(&'a self, cv: &Condvar, g: FsWrite<'a>, dur: Duration) -> FsWrite<'a> {
        let gate = self.gate();
        drop(g);
        drop(
            cv.wait_timeout(gate, dur)
                .unwrap_or_else(|p| p.into_inner()),
        );
        self.raw()
    }

    /// Wakes the requests waiting on `cv` (in [`FsLock::wait_timeout`],
    /// or for direct writes to drain and log syncs to end).
    pub fn signal(&self, cv: &Condvar) {
        let _gate = self.gate();
        cv.notify_all();
    }

    /// The filesystem with no direct write or writeback in flight: for
    /// every request that may change it.
    pub fn lock(&self) -> FsWrite<'_> {
        let since = Instant::now();
        let g = self.lock_drained();
        self.stats.waited(since);
        g
    }

    /// The filesystem with no direct write in flight, a writeback in
    /// flight or not: for a buffered write, which only adds to the dirty
    /// ranges and the inode item (a writeback in flight reads neither:
    /// its end takes the inode as it is then, and what was written since
    /// stays dirty over its ranges).
    pub fn lock_buffered(&self) -> FsWrite<'_> {
        let since = Instant::now();
        let g = self.lock_until(|fs| fs.direct_in_flight() == 0);
        self.stats.waited(since);
        g
    }

    fn lock_drained(&self) -> FsWrite<'_> {
        self.lock_until(|fs| fs.in_flight() == 0)
    }

    /// The filesystem once `ready` holds, after the requests already
    /// waiting for direct writes to drain (new ones wait behind this).
    fn lock_until(&self, ready: impl Fn(&RwFs) -> bool) -> FsWrite<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut g = self.raw();
        while !ready(&g) {
            self.wait_on(&self.drained, g);
            g = self.raw();
        }
        // Under the lock, so that a direct write that saw it non-zero is
        // already waiting for the signal.
        if self.waiting.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.signal(&self.drained);
        }
        g
    }

    /// The filesystem with no direct write and no log sync in flight, for
    /// a commit (a commit's superblock must not land before a log
    /// sync's). Log syncs waiting to begin let it go first, so a steady
    /// stream of fsyncs does not keep the commit waiting.
    pub fn lock_commit(&self) -> FsWrite<'_> {
        let since = Instant::now();
        self.committers.fetch_add(1, Ordering::SeqCst);
        loop {
            let g = self.lock_drained();
            if !g.log_sync_in_flight() {
                // Under the lock: the log syncs this wakes find it taken
                // and run after the commit.
                self.committers.fetch_sub(1, Ordering::SeqCst);
                self.signal(&self.log_ended);
                self.stats.waited(since);
                return g;
            }
            // Direct writes may begin while this waits: lock again. Not
            // on `drained`, which every uncontended lock() signals:
            // waiters for a flush would wake each other in turn until it
            // ends.
            self.wait_on(&self.log_ended, g);
        }
    }

    /// The filesystem with no direct write, no log sync in flight and no
    /// commit waiting for one: for fsync, which may begin a log sync.
    pub fn lock_log(&self) -> FsWrite<'_> {
        let since = Instant::now();
        loop {
            let g = self.lock_drained();
            if !g.log_sync_in_flight() && self.committers.load(Ordering::SeqCst) == 0 {
                self.stats.waited(since);
                return g;
            }
            self.wait_on(&self.log_ended, g);
        }
    }

    /// Whether a commit waits for a log sync to end (fsyncs let it go
    /// first).
    pub fn commit_waiting(&self) -> bool {
        self.committers.load(Ordering::SeqCst) > 0
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
        self.signal(&self.log_ended);
        res
    }

    /// The filesystem as it is, shared with other readers, direct writes
    /// and log syncs in flight or not: for requests that only read.
    pub fn lock_shared(&self) -> FsRead<'_> {
        let since = Instant::now();
        let g = self.fs.read().unwrap_or_else(|p| p.into_inner());
        self.stats.waited(since);
        g
    }

    /// The filesystem for beginning a direct write: after the requests
    /// waiting for direct writes to drain.
    pub fn lock_direct(&self) -> FsWrite<'_> {
        let since = Instant::now();
        let mut g = self.raw();
        while self.waiting.load(Ordering::SeqCst) > 0 {
            self.wait_on(&self.drained, g);
            g = self.raw();
        }
        self.stats.waited(since);
        g
    }

    /// Ends a direct write (its bytes `written` or not).
    pub fn end_direct(&self, w: DirectWrite, written: bool) -> Result<(), Error> {
        let mut g = self.raw();
        let res = g.direct_write_end(w, written);
        if g.direct_in_flight() == 0 {
            self.signal(&self.drained);
        }
        res
    }

    /// Writes back every dirty inode, the bytes checksummed and written
    /// with the lock let go (see [`ubtrfs_engine::rwfs::ordered`]): reads
    /// and direct writes go on meanwhile, every other request waits for
    /// the end as it waits for direct writes to drain. `g` is the lock
    /// held alone, by the caller.
    pub fn writeback_all(&self, mut g: FsWrite<'_>) -> Result<(), Error> {
        let o = g.writeback_all_begin()?;
        self.fly(g, o)
    }

    /// [`FsLock::writeback_all`] for the dirty ranges of `id` only.
    pub fn writeback(&self, mut g: FsWrite<'_>, id: InodeId) -> Result<(), Error> {
        let o = g.writeback_begin(&[id])?;
        self.fly(g, o)
    }

    /// Lets the filesystem go while `o`, begun under `g`, is written, and
    /// ends it.
    fn fly(&self, g: FsWrite<'_>, o: Ordered) -> Result<(), Error> {
        self.flights.fetch_add(1, Ordering::SeqCst);
        drop(g);
        self.write_and_end(o)
    }

    /// Writes a writeback's bytes (no lock held) and ends it.
    fn write_and_end(&self, mut o: Ordered) -> Result<(), Error> {
        let res = o.write();
        let mut g = self.raw();
        let res = g.writeback_all_end(o, res);
        self.flights.fetch_sub(1, Ordering::SeqCst);
        if g.in_flight() == 0 {
            self.signal(&self.drained);
        }
        res
    }

    /// Whether a writeback's bytes are being written: a request that
    /// changes the filesystem may wait for the end (the io_uring
    /// transport serves those on its workers meanwhile, not on the queue
    /// that reads of the same CPU wait behind).
    pub fn writeback_in_flight(&self) -> bool {
        self.flights.load(Ordering::SeqCst) > 0
    }

    /// [`FsLock::writeback_all`] with the bytes written and the end made
    /// by a thread of its own (the kernel's flusher threads): the caller
    /// goes on at once. Buffered writes go on meanwhile
    /// ([`FsLock::lock_buffered`]); the next writer that passes the dirty
    /// limit waits for this one. A failure is logged and reported at the
    /// next fsync.
    pub fn writeback_background(self: &Arc<Self>, mut g: FsWrite<'_>) -> Result<(), Error> {
        let mut o = g.writeback_all_begin()?;
        if o.bytes() == 0 {
            // Everything was written under the lock (inline files,
            // RAID5/6 rows, UBTRFS_NO_ORDERED=1): only the end is left
            // (write() seals nothing more then, but is the one path).
            let res = o.write();
            let res = g.writeback_all_end(o, res);
            if g.in_flight() == 0 {
                drop(g);
                self.signal(&self.drained);
            }
            return res;
        }
        self.flights.fetch_add(1, Ordering::SeqCst);
        drop(g);
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("ubtrfs-flush".into())
            .spawn(move || {
                if let Err(e) = me.write_and_end(o) {
                    crate::logging::error(&format!("writeback: {e}"));
                }
            });
        // A thread that cannot start would leave the writeback in flight
        // for ever: the mount would stop. Nothing to do but abort.
        if let Err(e) = spawned {
            crate::logging::error(&format!("writeback thread: {e}"));
            std::process::abort();
        }
        Ok(())
    }
}
