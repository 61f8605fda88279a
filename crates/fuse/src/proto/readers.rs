//! Which serving threads wait in read(2) of /dev/fuse.
//!
//! The kernel hands each request to the thread that has waited longest
//! in read (its wait queue is first in, first out). With every serving
//! thread waiting there, a caller that makes one request at a time (cp,
//! tar, an lseek walk) is served by each thread in turn: every request
//! wakes a thread that has slept the longest, cold in its CPU's caches
//! (bench/rw.sh's sparse step over /dev/fuse measures it;
//! docs/benchmarks.md has the figures).
//!
//! So at most [`HOT`] threads wait in read; the others wait here, and one
//! of them is woken when a request leaves no thread in read (all of those
//! are busy), so that requests still run side by side when they come side
//! by side (fsyncs that queue for one log sync, reads waiting on the disk).
//! Two rather than one: with one, every request would wake a second
//! thread to take its place in read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// Threads waiting in read(2) at most, when no request is running.
const HOT: usize = 2;

#[derive(Default)]
struct Idle {
    /// Threads waiting here.
    idle: usize,
    /// Wake-ups given and not yet taken.
    wakes: usize,
    /// The connection has ended: every thread returns.
    done: bool,
}

/// The serving threads' turns at read(2). The count of threads in read
/// is an atomic, so that a request costs no lock while threads are not
/// waiting here; the lock is taken to wait, and by the thread that leaves
/// none in read.
#[derive(Default)]
pub(crate) struct Readers {
    /// Threads in read(2), or on their way to it.
    in_read: AtomicUsize,
    idle: Mutex<Idle>,
    woken: Condvar,
}

impl Readers {
    fn lock(&self) -> MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until this thread may read; false once the connection has
    /// ended.
    pub(crate) fn enter(&self) -> bool {
        let mut n = self.in_read.load(Ordering::Acquire);
        while n < HOT {
            match self
                .in_read
                .compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => n = now,
            }
        }
        let mut s = self.lock();
        loop {
            if s.done {
                return false;
            }
            // A turn given by `left` (taken by whoever comes first), or a
            // free place among the HOT. (A `left` that empties the count
            // after this look takes the lock after this thread waits, and
            // sees it waiting.)
            if s.wakes > 0 || self.in_read.load(Ordering::Acquire) < HOT {
                s.wakes = s.wakes.saturating_sub(1);
                self.in_read.fetch_add(1, Ordering::AcqRel);
                return true;
            }
            s.idle += 1;
            s = self.woken.wait(s).unwrap_or_else(|p| p.into_inner());
            s.idle -= 1;
        }
    }

    /// This thread's read(2) has returned (a request, or an error): when
    /// no thread is left in read, one waiting here is woken to take its
    /// place.
    pub(crate) fn left(&self) {
        if self.in_read.fetch_sub(1, Ordering::AcqRel) == 1 {
            let mut s = self.lock();
            if s.idle > s.wakes {
                s.wakes += 1;
                self.woken.notify_one();
            }
        }
    }

    /// The connection has ended: every thread waiting here returns.
    pub(crate) fn end(&self) {
        self.lock().done = true;
        self.woken.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn two_read_and_a_third_comes_when_both_are_busy() {
        let r = Arc::new(Readers::default());
        assert!(r.enter());
        assert!(r.enter());
        // A third waits: two are in read.
        let third = {
            let r = r.clone();
            std::thread::spawn(move || r.enter())
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!third.is_finished());
        // One takes a request: one is still in read, the third waits on.
        r.left();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!third.is_finished());
        // The other takes one too: nobody is in read, the third goes.
        r.left();
        assert!(third.join().unwrap());
        // The connection ends: a thread waiting here returns false.
        assert!(r.enter());
        let fourth = {
            let r = r.clone();
            std::thread::spawn(move || r.enter())
        };
        std::thread::sleep(Duration::from_millis(50));
        r.end();
        assert!(!fourth.join().unwrap());
        assert!(!r.enter());
    }
}
