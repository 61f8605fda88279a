//! Tree block readahead: the kernel's `reada_for_search` policy for B-tree
//! cursors, and a small pool of I/O threads that read the chosen blocks
//! into the shared [`BlockCache`] ahead of their use.
//!
//! * [`plan`] decides which children of a node to read ahead when a cursor
//!   is about to read one of them (pure; see its documentation).
//! * [`Prefetcher`] owns a bounded queue of requests and
//!   [`READA_THREADS`] threads, started on first use. A thread reads the
//!   block's first copy, verifies it exactly as a demand read does
//!   ([`crate::tree::block::verify_tree_block`]: checksum, bytenr, fsid,
//!   structure, and the parent pointer's generation, level and first key)
//!   and inserts it into the cache. A read that fails is dropped: the
//!   demand read will read the block itself, try the other copies and
//!   report any error with its location, as without readahead.
//! * A demand read of a block that a thread is reading waits for that read
//!   ([`Prefetcher::claim_or_wait`]); a block still queued is taken back
//!   and read on demand, so a demand read never queues behind readahead.
//! * The window is bounded by a quarter of the cache, and by
//!   [`MAX_WINDOW`]: at most that many blocks are queued or being read
//!   (further requests are dropped), and one move of a cursor reads at
//!   most that many ahead. So the queue cannot grow without bound, and
//!   with a small cache readahead does not push its own blocks out before
//!   the cursor gets to them. (With the default 64 MiB cache the window is
//!   [`MAX_WINDOW`] blocks, more than the kernel's policy ever asks for.)

use crate::cache::block_cache::BlockCache;
use crate::io::dev::BlockDev;
use crate::io::device::Device;
use crate::io::volumes::{ChunkMap, Placement};
use crate::tree::block::{verify_tree_block, BlockExpect};
use std::collections::BTreeMap;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use ubtrfs_format::CsumType;

/// Readahead policy of a cursor, the kernel's four modes. Whenever the
/// cursor reads a child of a node (descending, or moving to another leaf),
/// it first queues reads of the siblings [`plan`] picks;
/// they go into the shared cache in the background.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Readahead {
    /// Read only what is needed.
    #[default]
    None,
    /// Read ahead blocks before the current one (backward iteration).
    Back,
    /// Read ahead nearby following leaves when a leaf is not cached.
    Forward,
    /// Read ahead following leaves and nodes, however far apart on disk
    /// and even when the current block is cached (full send).
    ForwardAlways,
}

/// I/O threads per filesystem. Reads are small (one tree block) and the
/// threads mostly wait for the device, so a few more than cores is right.
pub const READA_THREADS: usize = 4;

/// Most blocks queued or being read, and read ahead by one move.
pub const MAX_WINDOW: usize = 64;

/// How many blocks whose read ahead failed are remembered (and not read
/// ahead again: the demand read will deal with them).
const FAILED_MEMORY: usize = 64;

/// Bytes of leaves read ahead per move in [`Readahead::ForwardAlways`]
/// mode, and of blocks in the other modes (kernel: SZ_128K, SZ_64K).
const ALWAYS_LEAF_BUDGET: u64 = 128 << 10;
const BUDGET: u64 = 64 << 10;
/// Largest distance on disk from the target for non-ALWAYS modes.
const MAX_DISTANCE: u64 = 65536;
/// Slots scanned after this many are not looked at.
const MAX_SCAN: u32 = 32;

/// Which children of a node to read ahead, as the kernel's
/// `reada_for_search` chooses them, when a cursor is about to read child
/// `slot` (the target) of a node at `level` with `nritems` children.
/// `child(i)` gives child `i`'s key objectid and block address;
/// `target_cached` says whether the target is in the cache (or being read).
///
/// * `None`: nothing.
/// * `Forward` / `Back`: only at level 1 (children are leaves), and only
///   when the target is not cached. Scans the following (preceding)
///   children and takes those within 64 KiB of the target on disk, until
///   64 KiB have been taken. `Back` with `objectid != 0` stops at the
///   first child whose key has another objectid.
/// * `ForwardAlways`: at every level, whether or not the target is cached;
///   takes the following children however far apart on disk, 128 KiB of
///   them at level 1 and a node's worth at higher levels.
///
/// Every mode stops after scanning 32 children. As in the kernel the
/// budget test comes after a child is taken (`nread > max`), so the
/// budget is overshot by one block: 64 KiB of 16 KiB nodes takes 5
/// children, 128 KiB takes 9, and "one node" at higher levels takes 2.
/// Children already cached still count against the budget (the kernel's
/// readahead of an up-to-date block is a no-op that is counted too), so a
/// cursor moving leaf by leaf keeps a sliding window of the next few.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    mode: Readahead,
    level: u8,
    slot: usize,
    nritems: usize,
    nodesize: u32,
    target_cached: bool,
    objectid: u64,
    child: impl Fn(usize) -> (u64, u64),
) -> Vec<usize> {
    let always = mode == Readahead::ForwardAlways;
    if mode == Readahead::None || (level != 1 && !always) || slot >= nritems {
        return Vec::new();
    }
    if target_cached && !always {
        return Vec::new();
    }
    let max = match (always, level) {
        (true, 1) => ALWAYS_LEAF_BUDGET,
        (true, _) => nodesize as u64,
        (false, _) => BUDGET,
    };
    let target = child(slot).1;
    let mut out = Vec::new();
    let (mut nr, mut nread, mut nscan) = (slot, 0u64, 0u32);
    loop {
        if mode == Readahead::Back {
            if nr == 0 {
                break;
            }
            nr -= 1;
        } else {
            nr += 1;
            if nr >= nritems {
                break;
            }
        }
        let (obj, bytenr) = child(nr);
        if mode == Readahead::Back && objectid != 0 && obj != objectid {
            break;
        }
        if always || bytenr.abs_diff(target) <= MAX_DISTANCE {
            out.push(nr);
            nread += nodesize as u64;
        }
        nscan += 1;
        if nread > max || nscan > MAX_SCAN {
            break;
        }
    }
    out
}

/// Which children of a node to read ahead when the lockstep compare of
/// two trees (send's, the kernel's btrfs_compare_trees) descends into
/// child `slot` of a node at `level`: the following children newer than
/// `min_gen` (the other tree's generation: older ones may be shared and
/// skipped), up to 128 KiB of leaves or one node's worth of nodes, as the
/// kernel's tree_move_down. `generation(i)` is child `i`'s generation.
pub fn plan_compare(
    level: u8,
    slot: usize,
    nritems: usize,
    nodesize: u32,
    min_gen: u64,
    generation: impl Fn(usize) -> u64,
) -> Vec<usize> {
    let budget = if level == 1 {
        ALWAYS_LEAF_BUDGET
    } else {
        nodesize as u64
    };
    let mut out = Vec::new();
    let mut done = 0u64;
    for i in slot + 1..nritems {
        if done >= budget {
            break;
        }
        if generation(i) > min_gen {
            out.push(i);
            done += nodesize as u64;
        }
    }
    out
}

/// Counters of one filesystem's readahead, for benchmarks and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadaStats {
    /// Requests queued for the I/O threads.
    pub scheduled: u64,
    /// Blocks read, verified and put in the cache by the I/O threads.
    pub prefetched: u64,
    /// Read-ahead blocks later used by a demand read (found in the cache,
    /// or waited for while being read).
    pub hits: u64,
    /// Demand reads that waited for a read in flight instead of reading.
    pub waited: u64,
    /// Queued requests that a demand read took back to read itself.
    pub claimed: u64,
    /// Requests not queued because the window was full.
    pub dropped: u64,
    /// Read-ahead reads that failed (I/O error or verification); the
    /// blocks were left to demand reads.
    pub failed: u64,
    /// Read-ahead blocks evicted from the cache before any use.
    pub unused: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Queued,
    Reading,
}

struct Job {
    bytenr: u64,
    expect: BlockExpect,
    devid: u64,
    physical: u64,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    inflight: HashMap<u64, Phase>,
    /// Recent failures, oldest first.
    failed: VecDeque<u64>,
    shutdown: bool,
}

#[derive(Default)]
struct Counters {
    scheduled: AtomicU64,
    prefetched: AtomicU64,
    waited: AtomicU64,
    claimed: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
}

/// What the I/O threads share: the request state, the cache, and what
/// reading and verifying needs (no reference to the `FsInfo` itself, so
/// the threads outlive no borrow).
struct Shared {
    state: Mutex<State>,
    /// Signalled when a job is queued (or on shutdown).
    work: Condvar,
    /// Signalled when a job leaves the in-flight set.
    done: Condvar,
    cache: Arc<BlockCache>,
    devs: HashMap<u64, Arc<dyn BlockDev>>,
    nodesize: u32,
    csum_type: CsumType,
    fsid: Option<[u8; 16]>,
}

struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

/// What readahead needs of a filesystem: where blocks are and how to
/// verify them. The filesystem ([`crate::disk_io::FsInfo`]) owns the
/// prefetcher and lends it this, so this layer does not depend on it.
pub struct Source<'a> {
    pub chunks: &'a ChunkMap,
    pub devices: &'a BTreeMap<u64, Device>,
    pub nodesize: u32,
    pub csum_type: CsumType,
    /// The fsid blocks carry (None: not checked, an fsid change under way).
    pub fsid: Option<[u8; 16]>,
}

/// The readahead engine of one filesystem; see the module documentation.
pub struct Prefetcher {
    cache: Arc<BlockCache>,
    window: usize,
    counters: Arc<Counters>,
    pool: OnceLock<Pool>,
}

impl Prefetcher {
    pub fn new(cache: Arc<BlockCache>) -> Self {
        let window = (cache.capacity() / 4).clamp(1, MAX_WINDOW);
        Prefetcher {
            cache,
            window,
            counters: Arc::default(),
            pool: OnceLock::new(),
        }
    }

    /// Most blocks queued or being read, and read ahead by one move.
    pub fn window(&self) -> usize {
        self.window
    }

    pub fn stats(&self) -> ReadaStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ReadaStats {
            scheduled: get(&c.scheduled),
            prefetched: get(&c.prefetched),
            hits: self.cache.prefetch_hits(),
            waited: get(&c.waited),
            claimed: get(&c.claimed),
            dropped: get(&c.dropped),
            failed: get(&c.failed),
            unused: self.cache.prefetch_unused(),
        }
    }

    /// Whether `bytenr` is in the cache or being read ahead: what the
    /// kernel's `find_extent_buffer` would find.
    pub fn is_present(&self, bytenr: u64) -> bool {
        if self.cache.contains(bytenr) {
            return true;
        }
        match self.pool.get() {
            Some(p) => p
                .shared
                .state
                .lock()
                .unwrap()
                .inflight
                .contains_key(&bytenr),
            None => false,
        }
    }

    /// Queues reads of `blocks` (address and what the parent pointer
    /// promises, nearest to the reader first) on behalf of `fs`, the
    /// filesystem owning this prefetcher. Only the first [`Self::window`]
    /// blocks are considered; of those, blocks already cached or in flight
    /// are skipped, and blocks that do not fit the window, or whose first
    /// copy is not one plain range on a device that was given, are not
    /// read ahead.
    pub fn schedule(&self, fs: &Source<'_>, blocks: &[(u64, BlockExpect)]) {
        let mut jobs = Vec::with_capacity(blocks.len());
        for &(bytenr, expect) in blocks.iter().take(self.window) {
            if self.cache.contains(bytenr) {
                continue;
            }
            let Ok(piece) = fs.chunks.map(bytenr, fs.nodesize as u64) else {
                continue;
            };
            if piece.len < fs.nodesize as u64 {
                continue;
            }
            let loc = match &piece.placement {
                Placement::Mirrors(m) => m.first().copied(),
                Placement::Parity { target, row, .. } => row.get(*target).copied(),
            };
            let Some(loc) = loc.filter(|l| fs.devices.contains_key(&l.devid)) else {
                continue;
            };
            jobs.push(Job {
                bytenr,
                expect,
                devid: loc.devid,
                physical: loc.physical,
            });
        }
        if jobs.is_empty() {
            return;
        }
        let pool = self
            .pool
            .get_or_init(|| Pool::start(fs, self.cache.clone(), &self.counters));
        if pool.workers.is_empty() {
            // No thread could be started: nothing would ever take a job.
            return;
        }
        let sh = &pool.shared;
        let mut st = sh.state.lock().unwrap();
        let mut queued = 0;
        for job in jobs {
            if st.inflight.contains_key(&job.bytenr) || st.failed.contains(&job.bytenr) {
                continue;
            }
            if st.inflight.len() >= self.window {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            st.inflight.insert(job.bytenr, Phase::Queued);
            st.queue.push_back(job);
            queued += 1;
        }
        drop(st);
        self.counters.scheduled.fetch_add(queued, Ordering::Relaxed);
        for _ in 0..queued.min(READA_THREADS as u64) {
            sh.work.notify_one();
        }
    }

    /// Called by a demand read that missed the cache. A request for
    /// `bytenr` still queued is withdrawn (the caller reads the block
    /// itself); one being read is waited for. Returns whether the cache is
    /// worth a second look: after a wait, or when the block may have
    /// arrived since the caller looked.
    pub fn claim_or_wait(&self, bytenr: u64) -> bool {
        let Some(pool) = self.pool.get() else {
            return false;
        };
        let sh = &pool.shared;
        let mut st = sh.state.lock().unwrap();
        match st.inflight.get(&bytenr) {
            None => true,
            Some(Phase::Queued) => {
                st.inflight.remove(&bytenr);
                if let Some(i) = st.queue.iter().position(|j| j.bytenr == bytenr) {
                    st.queue.remove(i);
                }
                self.counters.claimed.fetch_add(1, Ordering::Relaxed);
                false
            }
            Some(Phase::Reading) => {
                self.counters.waited.fetch_add(1, Ordering::Relaxed);
                while st.inflight.contains_key(&bytenr) {
                    st = sh.done.wait(st).unwrap();
                }
                true
            }
        }
    }

    /// Waits until nothing is queued or being read (tests, benchmarks).
    pub fn wait_idle(&self) {
        let Some(pool) = self.pool.get() else {
            return;
        };
        let sh = &pool.shared;
        let mut st = sh.state.lock().unwrap();
        while !st.inflight.is_empty() {
            st = sh.done.wait(st).unwrap();
        }
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        let Some(pool) = self.pool.take() else {
            return;
        };
        {
            let mut st = pool.shared.state.lock().unwrap();
            st.shutdown = true;
            st.queue.clear();
        }
        pool.shared.work.notify_all();
        for w in pool.workers {
            let _ = w.join();
        }
    }
}

impl Pool {
    fn start(fs: &Source<'_>, cache: Arc<BlockCache>, counters: &Arc<Counters>) -> Pool {
        // A device whose handle cannot be duplicated is simply not read
        // ahead (its blocks are still read on demand).
        let devs = fs
            .devices
            .iter()
            .map(|(&id, d)| (id, d.dev().clone()))
            .collect();
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            work: Condvar::new(),
            done: Condvar::new(),
            cache,
            devs,
            nodesize: fs.nodesize,
            csum_type: fs.csum_type,
            fsid: fs.fsid,
        });
        let workers = (0..READA_THREADS)
            .filter_map(|i| {
                let sh = shared.clone();
                let c = counters.clone();
                std::thread::Builder::new()
                    .name(format!("ubtrfs-reada-{i}"))
                    .spawn(move || worker(&sh, &c))
                    .ok()
            })
            .collect();
        Pool { shared, workers }
    }
}

fn worker(sh: &Shared, c: &Counters) {
    loop {
        let job = {
            let mut st = sh.state.lock().unwrap();
            loop {
                if st.shutdown {
                    return;
                }
                if let Some(j) = st.queue.pop_front() {
                    st.inflight.insert(j.bytenr, Phase::Reading);
                    break j;
                }
                st = sh.work.wait(st).unwrap();
            }
        };
        // A panic in verification (a bug) must not leave the block marked
        // in flight forever: count it as a failure; the demand read will
        // run the same code and show it.
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read_block(sh, &job)));
        let ok = match read.ok().flatten() {
            Some(block) => {
                if sh.cache.insert_prefetched(Arc::new(block)) {
                    c.prefetched.fetch_add(1, Ordering::Relaxed);
                }
                true
            }
            None => {
                c.failed.fetch_add(1, Ordering::Relaxed);
                false
            }
        };
        {
            let mut st = sh.state.lock().unwrap();
            st.inflight.remove(&job.bytenr);
            if !ok {
                if st.failed.len() >= FAILED_MEMORY {
                    st.failed.pop_front();
                }
                st.failed.push_back(job.bytenr);
            }
        }
        sh.done.notify_all();
    }
}

/// Reads and verifies one block; None on any failure (the demand read
/// will redo it and report).
fn read_block(sh: &Shared, job: &Job) -> Option<crate::tree::block::TreeBlock> {
    let dev = sh.devs.get(&job.devid)?;
    let mut buf = vec![0u8; sh.nodesize as usize].into_boxed_slice();
    dev.read_at(&mut buf, job.physical).ok()?;
    verify_tree_block(buf, job.bytenr, sh.csum_type, sh.fsid.as_ref(), &job.expect).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Readahead::*;

    const NS: u32 = 16384;

    /// Children at the given addresses, all with key objectid `obj(i)`.
    fn run(
        mode: Readahead,
        level: u8,
        slot: usize,
        addrs: &[u64],
        cached: bool,
        objectid: u64,
        obj: impl Fn(usize) -> u64,
    ) -> Vec<usize> {
        plan(mode, level, slot, addrs.len(), NS, cached, objectid, |i| {
            (obj(i), addrs[i])
        })
    }

    /// `n` children laid out one after another on disk.
    fn contiguous(n: usize) -> Vec<u64> {
        (0..n as u64).map(|i| (1 << 30) + i * NS as u64).collect()
    }

    /// `n` children 1 MiB apart.
    fn scattered(n: usize) -> Vec<u64> {
        (0..n as u64).map(|i| (1 << 30) + i * (1 << 20)).collect()
    }

    #[test]
    fn none_reads_nothing() {
        let a = contiguous(100);
        assert!(run(None, 1, 3, &a, false, 0, |_| 1).is_empty());
        assert!(run(None, 2, 3, &a, false, 0, |_| 1).is_empty());
    }

    #[test]
    fn forward_takes_next_nearby_leaves_within_64k() {
        let a = contiguous(100);
        // Laid out in order: the four leaves within 64 KiB after the target.
        assert_eq!(
            run(Forward, 1, 10, &a, false, 0, |_| 1),
            vec![11, 12, 13, 14]
        );
        // More blocks that close (on both sides of the target): 64 KiB
        // worth plus the kernel's one over.
        let mut b = contiguous(100);
        for (k, i) in (11..30).enumerate() {
            let d = 16384 * (k as u64 / 2 + 1);
            b[i] = if k % 2 == 0 { b[10] - d } else { b[10] + d };
        }
        assert_eq!(
            run(Forward, 1, 10, &b, false, 0, |_| 1),
            vec![11, 12, 13, 14, 15]
        );
        // Not when the target is cached, nor above level 1.
        assert!(run(Forward, 1, 10, &a, true, 0, |_| 1).is_empty());
        assert!(run(Forward, 2, 10, &a, false, 0, |_| 1).is_empty());
        // Near the end of the node.
        assert_eq!(run(Forward, 1, 97, &a, false, 0, |_| 1), vec![98, 99]);
        assert!(run(Forward, 1, 99, &a, false, 0, |_| 1).is_empty());
    }

    #[test]
    fn forward_skips_far_blocks_and_stops_after_32_scanned() {
        // Everything 1 MiB apart: nothing is close enough, and the scan
        // stops after 33 slots whatever the node holds.
        let a = scattered(100);
        assert!(run(Forward, 1, 0, &a, false, 0, |_| 1).is_empty());
        // Children within 64 KiB before or after the target count, others not.
        let mut a = scattered(60);
        a[5] = a[0] + 65536; // exactly 64 KiB after: taken
        a[7] = a[0] - 65536; // 64 KiB before: taken
        a[9] = a[0] + 65537; // one byte too far
        a[40] = a[0] + 4096; // beyond the 33 scanned slots
        assert_eq!(run(Forward, 1, 0, &a, false, 0, |_| 1), vec![5, 7]);
        // The scan covers slots 1..=33: a close child at 33 is still taken.
        let mut a = scattered(60);
        a[33] = a[0] + 16384;
        a[34] = a[0] + 32768;
        assert_eq!(run(Forward, 1, 0, &a, false, 0, |_| 1), vec![33]);
    }

    #[test]
    fn back_takes_preceding_leaves() {
        let a = contiguous(100);
        assert_eq!(run(Back, 1, 50, &a, false, 0, |_| 1), vec![49, 48, 47, 46]);
        assert_eq!(run(Back, 1, 2, &a, false, 0, |_| 1), vec![1, 0]);
        assert!(run(Back, 1, 0, &a, false, 0, |_| 1).is_empty());
        assert!(run(Back, 1, 50, &a, true, 0, |_| 1).is_empty());
        assert!(run(Back, 3, 50, &a, false, 0, |_| 1).is_empty());
        // With an objectid, stops at the first child keyed by another one.
        let obj = |i: usize| if i >= 48 { 7 } else { 6 };
        assert_eq!(run(Back, 1, 50, &a, false, 7, obj), vec![49, 48]);
        assert_eq!(run(Back, 1, 50, &a, false, 0, obj), vec![49, 48, 47, 46]);
        // Leaves laid out backwards are as near as forwards.
        let r: Vec<u64> = a.iter().rev().copied().collect();
        assert_eq!(run(Back, 1, 50, &r, false, 0, |_| 1), vec![49, 48, 47, 46]);
    }

    #[test]
    fn forward_always_ignores_distance_and_cache() {
        let a = scattered(100);
        let nine: Vec<usize> = (11..=19).collect();
        // 128 KiB of leaves at level 1 (one over, as the kernel), cached or not.
        assert_eq!(run(ForwardAlways, 1, 10, &a, false, 0, |_| 1), nine);
        assert_eq!(run(ForwardAlways, 1, 10, &a, true, 0, |_| 1), nine);
        // A node's worth (one over: two nodes) at higher levels.
        assert_eq!(run(ForwardAlways, 2, 10, &a, true, 0, |_| 1), vec![11, 12]);
        assert_eq!(run(ForwardAlways, 5, 98, &a, false, 0, |_| 1), vec![99]);
        // Objectids do not matter going forward.
        assert_eq!(run(ForwardAlways, 1, 10, &a, false, 3, |i| i as u64), nine);
    }

    #[test]
    fn forward_always_with_small_nodes_stops_at_scan_limit() {
        // 4 KiB nodes: 128 KiB would be 33 blocks; the 33-slot scan limit
        // ends it at the same place.
        let a: Vec<u64> = (0..100u64).map(|i| i << 20).collect();
        let got = plan(ForwardAlways, 1, 0, a.len(), 4096, false, 0, |i| (1, a[i]));
        assert_eq!(got, (1..=33).collect::<Vec<_>>());
        // 64 KiB nodes: 128 KiB is three of them.
        let got = plan(ForwardAlways, 1, 0, a.len(), 65536, false, 0, |i| (1, a[i]));
        assert_eq!(got, vec![1, 2, 3]);
    }

    #[test]
    fn slot_out_of_range_reads_nothing() {
        let a = contiguous(4);
        assert!(run(ForwardAlways, 1, 4, &a, false, 0, |_| 1).is_empty());
    }
}
