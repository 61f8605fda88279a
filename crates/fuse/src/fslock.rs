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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use ubtrfs_engine::vfs::direct::DirectWrite;
use ubtrfs_engine::vfs::RwFs;
use ubtrfs_engine::Error;

pub struct FsLock {
    fs: Mutex<RwFs>,
    /// Signalled when the last direct write in flight ends, and when a
    /// request that waited for that has the lock.
    drained: Condvar,
    /// Requests waiting for direct writes to drain.
    waiting: AtomicU64,
}

impl FsLock {
    pub fn new(fs: RwFs) -> FsLock {
        FsLock {
            fs: Mutex::new(fs),
            drained: Condvar::new(),
            waiting: AtomicU64::new(0),
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

    /// The filesystem as it is, direct writes in flight or not: for
    /// requests that only read.
    pub fn lock_shared(&self) -> MutexGuard<'_, RwFs> {
        self.raw()
    }

    /// The filesystem for beginning a direct write: after the requests
    /// waiting for direct writes to drain.
    pub fn lock_direct(&self) -> MutexGuard<'_, RwFs> {
        let mut g = self.raw();
        while self.waiting.load(Ordering::SeqCst) > 0 {
            g = self.wait(g);
        }
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
