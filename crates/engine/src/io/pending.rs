//! Tree block writes in flight on another thread (a deferred commit's
//! blocks, written while the next transaction is built): a read of a
//! logical range being written waits until the writer has written it, so
//! that it never sees what the address held before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

/// Logical ranges `[start, end)` being written; see the module doc.
#[derive(Debug, Default)]
pub struct PendingWrites {
    /// Whether any range is pending: reads check this flag, not the lock.
    busy: AtomicBool,
    ranges: Mutex<Vec<(u64, u64)>>,
    written: Condvar,
}

impl PendingWrites {
    /// Marks `ranges` as being written (until [`PendingWrites::clear`]).
    pub fn start(&self, ranges: Vec<(u64, u64)>) {
        let mut r = self.ranges.lock().unwrap_or_else(|e| e.into_inner());
        r.extend(ranges);
        // Sorted, for a binary search per read (a commit's runs do not
        // overlap).
        r.sort_unstable();
        self.busy.store(!r.is_empty(), Ordering::Release);
    }

    /// Every range is written (or its writer gave up: a reader then reads
    /// what the device holds, and the commit reports the failure).
    pub fn clear(&self) {
        let mut r = self.ranges.lock().unwrap_or_else(|e| e.into_inner());
        r.clear();
        self.busy.store(false, Ordering::Release);
        self.written.notify_all();
    }

    /// Waits while `[logical, logical + len)` overlaps a pending range.
    pub fn wait_for(&self, logical: u64, len: u64) {
        if !self.busy.load(Ordering::Acquire) {
            return;
        }
        let end = logical.saturating_add(len);
        let mut r = self.ranges.lock().unwrap_or_else(|e| e.into_inner());
        let overlaps = |r: &[(u64, u64)]| {
            // The first range ending after `logical` is the only one that
            // can overlap first.
            let i = r.partition_point(|&(_, e)| e <= logical);
            r.get(i).is_some_and(|&(s, _)| s < end)
        };
        while overlaps(&r) {
            r = self.written.wait(r).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_read_of_a_pending_range_waits_for_the_writer() {
        let p = Arc::new(PendingWrites::default());
        p.start(vec![(300, 400), (100, 200)]);
        // Outside: no wait.
        p.wait_for(0, 100);
        p.wait_for(200, 50);
        p.wait_for(250, 50);
        p.wait_for(400, 10);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = {
            let p = p.clone();
            std::thread::spawn(move || {
                p.wait_for(150, 10);
                tx.send(()).unwrap();
            })
        };
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(50))
            .is_err());
        p.clear();
        rx.recv().unwrap();
        reader.join().unwrap();
    }
}
