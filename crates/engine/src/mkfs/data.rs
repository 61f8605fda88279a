//! File data for mkfs --rootdir on worker threads: reading the source,
//! compressing and checksumming, the three jobs that do not touch the
//! trees. The walker (one thread, the only one changing the transaction)
//! asks for pieces in the order it writes them and takes their results in
//! that same order, so allocation, items and the image stay what one
//! thread makes: the threads only decide when a piece is ready, never
//! where it goes.
//!
//! A [`Pipe`] holds the pieces asked for, in order; at most `budget` bytes
//! of them are handed to the workers at a time (memory stays bounded
//! whatever the tree size). A piece the walker needs before its turn
//! (a file planned on demand, while lookahead filled the budget) jumps
//! the queue. With one thread there are no workers: each piece is made
//! when it is taken, in the walker's thread.

use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use ubtrfs_format::CsumType;

pub use crate::io::aligned::{AlignedBuf, Spare};

/// One piece of a file: `n` bytes (a multiple of the sector size, the
/// extent's length in the file) from `at`, of which `want` are in the
/// file (the rest is the zeros of the last sector).
#[derive(Debug)]
pub struct Job {
    pub path: Arc<PathBuf>,
    pub file: Arc<File>,
    pub at: u64,
    pub n: u64,
    pub want: usize,
    /// Compression (algorithm, level) to try.
    pub compress: Option<(u8, i32)>,
    /// Checksums of the written bytes, with this algorithm.
    pub csum: Option<CsumType>,
    pub sectorsize: u32,
    /// The whole (small) file, stored in its EXTENT_DATA item: not padded,
    /// not checksummed.
    pub inline: bool,
    /// `--reflink`: the whole sectors are shared from the file, not
    /// written; only the partial last sector is returned as data (all of
    /// it is still read for the checksums).
    pub reflink: bool,
}

/// A piece ready to write.
#[derive(Debug)]
pub struct Piece {
    pub at: u64,
    pub n: u64,
    pub want: usize,
    /// The bytes to write: compressed or not, padded to whole sectors
    /// (inline data is not padded).
    pub data: AlignedBuf,
    /// Compression algorithm of `data` (0: none).
    pub algo: u8,
    /// Checksums of the extent's sectors, when asked.
    pub sums: Option<Vec<u8>>,
    /// `--reflink`: bytes of the file from `at` to share before `data`.
    pub cloned: u64,
}

fn io_err(path: &std::path::Path, op: String, e: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        op,
        source: e,
    }
}

impl Job {
    /// Reads, compresses (keeping the result only when it shrinks) and
    /// checksums the piece.
    pub fn run(self, spare: &Spare) -> Result<Piece> {
        let ss = self.sectorsize as usize;
        let len = if self.inline {
            self.want
        } else {
            self.n as usize
        };
        if self.reflink && !self.inline {
            return self.run_reflink();
        }
        let mut buf = spare.take(len, self.want);
        self.file
            .read_exact_at(&mut buf[..self.want], self.at)
            .map_err(|e| io_err(&self.path, format!("read at {}", self.at), e))?;
        let mut algo = 0;
        if let Some((a, level)) = self.compress {
            let c = ubtrfs_format::compress::compress(a, level, &buf, self.sectorsize)
                .map_err(|e| Error::format(self.path.display().to_string(), e))?;
            if let Some(mut c) = c {
                if !self.inline {
                    c.resize(c.len().next_multiple_of(ss), 0);
                }
                spare.give(std::mem::replace(&mut buf, AlignedBuf::from_vec(c)));
                algo = a;
            }
        }
        let sums = match self.csum {
            Some(ct) if !self.inline => Some(ct.sector_sums(&buf, ss)),
            _ => None,
        };
        Ok(Piece {
            at: self.at,
            n: self.n,
            want: self.want,
            data: buf,
            algo,
            sums,
            cloned: 0,
        })
    }

    /// The piece of a `--reflink` copy: checksums of all of it, and its
    /// partial last sector (padded) as the data to write.
    fn run_reflink(self) -> Result<Piece> {
        let ss = self.sectorsize as usize;
        let n = self.n as usize;
        let full = self.want / ss * ss;
        let read = |buf: &mut [u8], off: u64| {
            self.file
                .read_exact_at(buf, off)
                .map_err(|e| io_err(&self.path, format!("read at {off}"), e))
        };
        let (data, sums) = match self.csum {
            Some(ct) => {
                let mut buf = vec![0u8; n];
                read(&mut buf[..self.want], self.at)?;
                let s = ct.sector_sums(&buf, ss);
                (AlignedBuf::from_vec(buf[full..].to_vec()), Some(s))
            }
            None => {
                let mut tail = vec![0u8; n - full];
                read(&mut tail[..self.want - full], self.at + full as u64)?;
                (AlignedBuf::from_vec(tail), None)
            }
        };
        Ok(Piece {
            at: self.at,
            n: self.n,
            want: self.want,
            data,
            algo: 0,
            sums,
            cloned: full as u64,
        })
    }
}

enum State {
    /// Asked for, not handed to a worker yet.
    Pending(Job),
    /// In the workers' queue.
    Queued(Job),
    Running,
    Done(Result<Piece>),
    Taken,
}

/// Where a piece's result appears.
pub struct Slot {
    state: Mutex<State>,
    ready: Condvar,
    bytes: u64,
    /// Cheap enough to make in the walker's thread (small, nothing to
    /// compress).
    here: bool,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slot({} bytes)", self.bytes)
    }
}

struct Queue {
    jobs: VecDeque<Arc<Slot>>,
    closed: bool,
}

struct Shared {
    spare: Arc<Spare>,
    queue: Mutex<Queue>,
    more: Condvar,
}

struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    fn new(n: usize, spare: Arc<Spare>) -> Result<Pool> {
        let shared = Arc::new(Shared {
            spare,
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                closed: false,
            }),
            more: Condvar::new(),
        });
        let mut threads = Vec::new();
        for i in 0..n {
            let s = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("mkfs-data-{i}"))
                .spawn(move || worker(&s))
                .map_err(|e| io_err(std::path::Path::new("thread"), "spawn".into(), e))?;
            threads.push(h);
        }
        Ok(Pool { shared, threads })
    }

    fn push(&self, slot: Arc<Slot>, front: bool) {
        let mut q = self.shared.queue.lock().unwrap();
        if front {
            q.jobs.push_front(slot);
        } else {
            q.jobs.push_back(slot);
        }
        drop(q);
        self.shared.more.notify_one();
    }
}

impl Pool {
    fn push_all(&self, slots: Vec<Arc<Slot>>) {
        let n = slots.len();
        if n == 0 {
            return;
        }
        self.shared.queue.lock().unwrap().jobs.extend(slots);
        if n == 1 {
            self.shared.more.notify_one();
        } else {
            self.shared.more.notify_all();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.queue.lock().unwrap().closed = true;
        self.shared.more.notify_all();
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

fn worker(s: &Shared) {
    loop {
        let slot = {
            let mut q = s.queue.lock().unwrap();
            loop {
                if q.closed {
                    return;
                }
                if let Some(slot) = q.jobs.pop_front() {
                    break slot;
                }
                q = s.more.wait(q).unwrap();
            }
        };
        let job = {
            let mut st = slot.state.lock().unwrap();
            match std::mem::replace(&mut *st, State::Running) {
                State::Queued(job) => job,
                other => {
                    // Taken by the walker meanwhile (cannot happen: a
                    // queued piece is only made here); leave it.
                    *st = other;
                    continue;
                }
            }
        };
        let out = job.run(&s.spare);
        *slot.state.lock().unwrap() = State::Done(out);
        slot.ready.notify_all();
    }
}

/// Pieces smaller than this are made in the walker's thread.
pub const SMALL: u64 = 256 << 10;

/// The pieces asked for, in order, and the workers making them.
pub struct Pipe {
    pool: Option<Pool>,
    /// Asked for and not yet handed to the workers, in order.
    pending: VecDeque<Arc<Slot>>,
    /// Bytes handed to the workers and not yet taken.
    inflight: u64,
    budget: u64,
    spare: Arc<Spare>,
}

impl std::fmt::Debug for Pipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Pipe(threads {}, pending {}, inflight {})",
            self.threads(),
            self.pending.len(),
            self.inflight
        )
    }
}

impl Pipe {
    /// `threads` workers (1: none, pieces are made in the caller's thread
    /// when taken), at most `budget` bytes handed to them at a time.
    pub fn new(threads: usize, budget: u64) -> Result<Pipe> {
        let spare = Arc::new(Spare::default());
        let pool = if threads > 1 {
            Some(Pool::new(threads, spare.clone())?)
        } else {
            None
        };
        Ok(Pipe {
            pool,
            pending: VecDeque::new(),
            inflight: 0,
            budget,
            spare,
        })
    }

    /// Gives back the buffer of a piece written, for later pieces.
    pub fn give_back(&self, b: AlignedBuf) {
        self.spare.give(b);
    }

    pub fn threads(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.threads.len())
    }

    /// Asks for pieces: after those asked for before (`front` false:
    /// lookahead), or before them (`front` true: needed next), in the
    /// order given.
    pub fn ask(&mut self, jobs: Vec<Job>, front: bool) -> Vec<Arc<Slot>> {
        let slots: Vec<Arc<Slot>> = jobs
            .into_iter()
            .map(|j| {
                Arc::new(Slot {
                    bytes: j.n.max(j.want as u64),
                    here: j.compress.is_none() && j.n.max(j.want as u64) < SMALL,
                    state: Mutex::new(State::Pending(j)),
                    ready: Condvar::new(),
                })
            })
            .collect();
        if self.pool.is_some() {
            // Small pieces with nothing to compress are made by the
            // walker when taken: handing a few KiB to another thread costs more (wake-ups, a lock, a
            // context switch) than reading and checksumming them.
            let big: Vec<Arc<Slot>> = slots.iter().filter(|s| !s.here).cloned().collect();
            if front {
                for s in big.iter().rev() {
                    self.pending.push_front(s.clone());
                }
            } else {
                self.pending.extend(big);
            }
            self.pump();
        }
        slots
    }

    /// Hands pending pieces to the workers while the budget allows.
    /// Hands pending pieces to the workers while the budget allows, all
    /// in one go (one wake-up per batch, not per small file).
    fn pump(&mut self) {
        let Some(pool) = &self.pool else { return };
        let mut batch = Vec::new();
        while self.inflight < self.budget {
            let Some(slot) = self.pending.pop_front() else {
                break;
            };
            let mut st = slot.state.lock().unwrap();
            if let State::Pending(_) = &*st {
                let State::Pending(job) = std::mem::replace(&mut *st, State::Running) else {
                    unreachable!()
                };
                *st = State::Queued(job);
                drop(st);
                self.inflight += slot.bytes;
                batch.push(slot);
            }
        }
        pool.push_all(batch);
    }

    /// The result of `slot`, waiting for it.
    pub fn take(&mut self, slot: &Arc<Slot>) -> Result<Piece> {
        let mut st = slot.state.lock().unwrap();
        if let State::Pending(_) = &*st {
            let State::Pending(job) = std::mem::replace(&mut *st, State::Taken) else {
                unreachable!()
            };
            match &self.pool {
                // One thread, or a small piece: made here, now.
                None => return job.run(&self.spare),
                Some(_) if slot.here => return job.run(&self.spare),
                // Needed before its turn: first in the workers' queue
                // (it stays in `pending` until pump skips it).
                Some(pool) => {
                    *st = State::Queued(job);
                    drop(st);
                    pool.push(slot.clone(), true);
                    st = slot.state.lock().unwrap();
                }
            }
        } else {
            self.inflight -= slot.bytes;
        }
        loop {
            match std::mem::replace(&mut *st, State::Taken) {
                State::Done(r) => {
                    drop(st);
                    self.pump();
                    return r;
                }
                State::Taken => {
                    return Err(Error::Invalid("a data piece was taken twice".into()));
                }
                other => {
                    *st = other;
                    st = slot.ready.wait(st).unwrap();
                }
            }
        }
    }
}
