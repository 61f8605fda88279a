//! Devices for crash tests: [`FaultDev`] fails the N-th write or flush
//! and every one after it (a disk that dies), and [`RecordDev`] records
//! every write and flush in order, so that a test can rebuild the image
//! as it would be after a power cut at any point ([`Log::replay`]), the
//! way dm-log-writes and fstests' generic/482 test the kernel. Writes
//! after the last flush may reach the disk partly, in any order: a test
//! applies a subset of them ([`Log::torn`]).

use super::dev::BlockDev;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A device that fails, with an I/O error, the write or flush numbered
/// `fail_at` (counting both from 0) and every write and flush after it.
/// Reads go through.
#[derive(Debug)]
pub struct FaultDev {
    inner: Arc<dyn BlockDev>,
    ops: AtomicU64,
    fail_at: AtomicU64,
    dead: AtomicBool,
}

impl FaultDev {
    /// Wraps `inner`; `fail_at` None never fails (count only).
    pub fn new(inner: Arc<dyn BlockDev>, fail_at: Option<u64>) -> FaultDev {
        FaultDev {
            inner,
            ops: AtomicU64::new(0),
            fail_at: AtomicU64::new(fail_at.unwrap_or(u64::MAX)),
            dead: AtomicBool::new(false),
        }
    }

    /// Fails op number `n` from now on (counting from the ops already
    /// done, as [`FaultDev::ops`] returns them).
    pub fn fail_at(&self, n: u64) {
        self.fail_at.store(n, Ordering::SeqCst);
    }

    /// Works again (a transient fault ended): nothing fails from now on.
    pub fn revive(&self) {
        self.fail_at.store(u64::MAX, Ordering::SeqCst);
        self.dead.store(false, Ordering::SeqCst);
    }

    /// Writes and flushes seen so far (failed ones included).
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::SeqCst)
    }

    /// Whether the device has failed.
    pub fn dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    fn step(&self, what: &str) -> io::Result<()> {
        let n = self.ops.fetch_add(1, Ordering::SeqCst);
        if n >= self.fail_at.load(Ordering::SeqCst) {
            self.dead.store(true, Ordering::SeqCst);
        }
        if self.dead() {
            return Err(io::Error::other(format!("injected fault: {what} (op {n})")));
        }
        Ok(())
    }
}

impl BlockDev for FaultDev {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.inner.read_at(buf, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.step("write")?;
        self.inner.write_at(buf, off)
    }

    fn flush(&self) -> io::Result<()> {
        self.step("flush")?;
        self.inner.flush()
    }

    fn writable(&self) -> bool {
        self.inner.writable()
    }
}

/// One recorded operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Write { off: u64, data: Vec<u8> },
    Flush,
}

/// The operations a [`RecordDev`] saw, in order.
#[derive(Debug, Clone, Default)]
pub struct Log {
    pub events: Vec<Event>,
}

impl Log {
    /// Indexes (into `events`) of the flushes.
    pub fn flushes(&self) -> Vec<usize> {
        self.events
            .iter()
            .enumerate()
            .filter(|(_, e)| **e == Event::Flush)
            .map(|(i, _)| i)
            .collect()
    }

    /// Applies `events[from..to]` (writes only) to `dev`.
    pub fn replay(&self, dev: &dyn BlockDev, from: usize, to: usize) -> io::Result<()> {
        for e in &self.events[from..to] {
            if let Event::Write { off, data } = e {
                dev.write_at(data, *off)?;
            }
        }
        Ok(())
    }

    /// The writes in `events[from..to]`, with their indexes, for torn
    /// variants: the caller picks a subset and an order.
    pub fn writes_in(&self, from: usize, to: usize) -> Vec<(usize, u64, &[u8])> {
        self.events[from..to]
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                Event::Write { off, data } => Some((from + i, *off, &data[..])),
                Event::Flush => None,
            })
            .collect()
    }

    /// Applies the writes `picks` (indexes into `events`, in the order
    /// given: a subset, reordered, of the writes after a flush) to `dev`;
    /// returns an undo list that [`Log::undo`] applies to restore what
    /// was there.
    pub fn torn(&self, dev: &dyn BlockDev, picks: &[usize]) -> io::Result<Vec<(u64, Vec<u8>)>> {
        let mut undo = Vec::new();
        for &i in picks {
            if let Event::Write { off, data } = &self.events[i] {
                let mut old = vec![0u8; data.len()];
                dev.read_at(&mut old, *off)?;
                undo.push((*off, old));
                dev.write_at(data, *off)?;
            }
        }
        Ok(undo)
    }

    /// Restores what [`Log::torn`] overwrote.
    pub fn undo(dev: &dyn BlockDev, undo: Vec<(u64, Vec<u8>)>) -> io::Result<()> {
        for (off, old) in undo.into_iter().rev() {
            dev.write_at(&old, off)?;
        }
        Ok(())
    }
}

/// A device that records every write and flush, and passes them on.
#[derive(Debug)]
pub struct RecordDev {
    inner: Arc<dyn BlockDev>,
    log: Mutex<Log>,
}

impl RecordDev {
    pub fn new(inner: Arc<dyn BlockDev>) -> RecordDev {
        RecordDev {
            inner,
            log: Mutex::new(Log::default()),
        }
    }

    /// A copy of the log so far.
    pub fn log(&self) -> Log {
        self.log.lock().unwrap().clone()
    }
}

impl BlockDev for RecordDev {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.inner.read_at(buf, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.inner.write_at(buf, off)?;
        self.log.lock().unwrap().events.push(Event::Write {
            off,
            data: buf.to_vec(),
        });
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()?;
        self.log.lock().unwrap().events.push(Event::Flush);
        Ok(())
    }

    fn writable(&self) -> bool {
        self.inner.writable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::dev::MemDev;

    #[test]
    fn fault_dev_dies_at_the_nth_op_and_stays_dead() {
        let m = Arc::new(MemDev::new(4096));
        let f = FaultDev::new(m.clone(), Some(2));
        f.write_at(b"a", 0).unwrap();
        f.flush().unwrap();
        assert!(f.write_at(b"b", 1).is_err());
        assert!(f.flush().is_err());
        assert!(f.write_at(b"c", 2).is_err());
        assert!(f.dead());
        assert_eq!(f.ops(), 5);
        let mut b = [0u8; 3];
        f.read_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"a\0\0");
    }

    #[test]
    fn record_replay_and_torn_undo() {
        let m = Arc::new(MemDev::new(4096));
        let r = RecordDev::new(m.clone());
        r.write_at(b"xy", 0).unwrap();
        r.flush().unwrap();
        r.write_at(b"1", 10).unwrap();
        r.write_at(b"2", 11).unwrap();
        let log = r.log();
        assert_eq!(log.flushes(), vec![1]);
        let d = MemDev::new(4096);
        log.replay(&d, 0, 2).unwrap();
        let w = log.writes_in(2, log.events.len());
        assert_eq!(w.len(), 2);
        let undo = log.torn(&d, &[3]).unwrap();
        let mut b = [0u8; 12];
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(&b[..2], b"xy");
        assert_eq!(&b[10..], b"\x002");
        Log::undo(&d, undo).unwrap();
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(&b[10..], b"\0\0");
        assert_eq!(&m.snapshot()[10..12], b"12");
    }
}
