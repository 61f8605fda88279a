//! FUSE over io_uring (the kernel's fs/fuse/dev_uring.c, 6.14+): requests
//! arrive in ring entries instead of read(2)s of /dev/fuse, and each is
//! served on the CPU its sender runs on.
//!
//! How the kernel side works (dev_uring.c, 6.18):
//! - One queue per *possible* CPU; a request goes to the queue of the CPU
//!   its sender runs on. The connection switches to the ring once every
//!   queue has an entry registered; until then requests wait.
//! - An entry is two buffers given with REGISTER (an iovec pair, SQE128):
//!   a header (fuse_uring_req_header) and a payload of at least
//!   max(max_write, max_pages * 4 KiB). A REGISTER or COMMIT_AND_FETCH
//!   completes when a request is in the entry; the answer goes back in the
//!   same buffers with COMMIT_AND_FETCH, which re-arms the entry.
//! - The request is copied in by task_work of the task that submitted the
//!   entry's last command, so a queue's own thread waits in io_uring_enter.
//! - FORGET and INTERRUPT, and our notifications, still use /dev/fuse.
//! - On unmount, pending entries complete with -ENOTCONN.
//!
//! Our side: a thread per queue, pinned to its CPU, serving requests as
//! they complete. Requests that may take long (fsync, an O_DIRECT write, a
//! sync ioctl) go to a worker pool instead, so they neither hold the queue
//! nor lose the parallelism they had on /dev/fuse. An answer made off the
//! queue thread (a worker, or a thread a request spawned) is committed by
//! the queue thread, woken through an eventfd: the next request is copied
//! in by task_work of the committing task, and a thread that has ended by
//! then would see it cancelled (ECANCELED to the caller: seen, with
//! libfuse's commit-from-any-thread design, in rw_mount's rw_ops).

use super::abi::{self, bytes, read, InHeader, OutHeader, UringCmdReq, UringReqHeader};
use super::dispatch::{dispatch, guarded, no_reply, Conn};
use super::filesystem::FuseFs;
use super::reply::{Sender, Transport};
use crate::pool::Pool;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::{addr_of_mut, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

/// The user data of the wake read's completions (entries use their index).
const WAKE: u64 = u64::MAX;

/// Entries per queue at most, and the memory all entries' payload buffers
/// may take together (the depth shrinks on machines with many CPUs).
const MAX_DEPTH: usize = 16;
const MAX_PAYLOAD_TOTAL: usize = 512 << 20;

/// One ring entry's buffers. Leaked raw allocations, not Boxes: the kernel
/// writes into them behind the compiler's back, and may still hold them
/// when we stop serving; the process ends soon after.
pub struct EntBufs {
    pub hdr: NonNull<UringReqHeader>,
    pub payload: NonNull<u8>,
    /// The REGISTER iovec pair, which must also stay put.
    pub iov: NonNull<[libc::iovec; 2]>,
}

impl EntBufs {
    /// Buffers with a payload of `payload_len` bytes of `fill`.
    pub fn new(payload_len: usize, fill: u8) -> EntBufs {
        let hdr = NonNull::from(Box::leak(Box::<UringReqHeader>::default()));
        let payload = NonNull::from(vec![fill; payload_len].leak()).cast::<u8>();
        let iov = NonNull::from(Box::leak(Box::new([
            libc::iovec {
                iov_base: hdr.as_ptr().cast(),
                iov_len: std::mem::size_of::<UringReqHeader>(),
            },
            libc::iovec {
                iov_base: payload.as_ptr().cast(),
                iov_len: payload_len,
            },
        ])));
        EntBufs { hdr, payload, iov }
    }
}

/// One queue: its ring, entries and counters. The submission side is
/// shared (under `sq`); the completion side belongs to the queue thread.
pub(crate) struct Queue {
    qid: usize,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    sq: Mutex<()>,
    /// Answers made on other threads, for the queue thread to commit:
    /// (entry, request).
    pending: Mutex<Vec<(usize, u64)>>,
    /// Written when `pending` gains one; the queue thread keeps a read of
    /// it in its ring, so the write wakes it.
    wake: OwnedFd,
    /// Where that read puts the count.
    wake_buf: NonNull<u64>,
    ents: Vec<EntBufs>,
    payload_len: usize,
    served: AtomicU64,
    offloaded: AtomicU64,
}

// SAFETY: the raw buffers are owned by protocol, not by a thread: an
// entry's buffers are touched by whoever serves the request in it (one
// party at a time: the kernel until the completion, then one serving
// thread until its commit). The ring's submission side is used under
// `sq`; its completion side only by the queue thread.
unsafe impl Send for Queue {}
// SAFETY: as above.
unsafe impl Sync for Queue {}

thread_local! {
    /// The queue this thread serves (its address), if any: replies made
    /// on it are submitted by its next wait, not one by one.
    static ON_QUEUE: Cell<usize> = const { Cell::new(0) };
}

/// Sets sqe->len, which io-uring 0.7's UringCmd80 does not expose and
/// REGISTER needs (the number of iovecs, 2).
pub fn with_len(e: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // SAFETY: Entry128 is #[repr(C)]: a 64-byte struct io_uring_sqe and 64
    // more bytes, any bytes valid. In io_uring_sqe, `len` (u32) is at
    // offset 24.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
    raw[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

impl Queue {
    /// The SQE that registers entry `idx` (commit_id None) or commits its
    /// answer to request `commit_id` and fetches the next.
    fn sqe(&self, idx: usize, commit_id: Option<u64>) -> squeue::Entry128 {
        let req = UringCmdReq {
            commit_id: commit_id.unwrap_or(0),
            qid: self.qid as u16,
            ..UringCmdReq::default()
        };
        let mut cmd = [0u8; 80];
        cmd[..std::mem::size_of::<UringCmdReq>()].copy_from_slice(bytes(&req));
        let op = if commit_id.is_some() {
            abi::FUSE_IO_URING_CMD_COMMIT_AND_FETCH
        } else {
            abi::FUSE_IO_URING_CMD_REGISTER
        };
        // The device is fixed file 0 (registered with the ring).
        let mut b = opcode::UringCmd80::new(types::Fixed(0), op).cmd(cmd);
        if commit_id.is_none() {
            b = b.addr(Some(self.ents[idx].iov.as_ptr() as u64));
        }
        let e = b.build().user_data(idx as u64);
        if commit_id.is_none() {
            with_len(e, 2)
        } else {
            e
        }
    }

    /// Queues an SQE for the queue thread's next wait to submit. Only the
    /// queue thread submits: the kernel copies the next request into an
    /// entry by task_work of whichever task submitted the entry's last
    /// command, and a worker that has ended by then would cancel it.
    fn push(&self, e: squeue::Entry128) {
        let _g = self.sq.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the SQEs point at leaked buffers that live for the
        // process; `sq` makes this the only user of the submission queue.
        // There is room: each entry has at most one command in flight, plus
        // the wake read, and the queue holds ents.len() + 1 SQEs.
        if unsafe { self.ring.submission_shared().push(&e) }.is_err() {
            crate::logging::error(&format!("fuse ring {}: submission queue full", self.qid));
        }
    }

    /// The read of `wake` that wakes the queue thread.
    fn wake_sqe(&self) -> squeue::Entry128 {
        opcode::Read::new(
            types::Fd(self.wake.as_raw_fd()),
            self.wake_buf.as_ptr().cast(),
            8,
        )
        .build()
        .user_data(WAKE)
        .into()
    }

    /// Commits entry `slot`'s answer to request `unique`: at once on the
    /// queue thread, else through `pending` and a wakeup.
    fn commit(&self, slot: usize, unique: u64) {
        if ON_QUEUE.with(|q| q.get()) == self as *const Queue as usize {
            self.push(self.sqe(slot, Some(unique)));
            return;
        }
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((slot, unique));
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

impl Transport for Queue {
    fn send(&self, slot: usize, unique: u64, error: i32, parts: &[&[u8]]) {
        let Some(ent) = self.ents.get(slot) else {
            return;
        };
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let (error, total) = if total > self.payload_len {
            crate::logging::error(&format!(
                "reply of {total} bytes to request {unique} does not fit the ring's {} byte buffer",
                self.payload_len
            ));
            (-libc::EIO, 0)
        } else {
            (error, total)
        };
        let oh = OutHeader {
            len: (std::mem::size_of::<OutHeader>() + total) as u32,
            error,
            unique,
        };
        let hp = ent.hdr.as_ptr();
        // SAFETY: the entry holds this request, so its buffers are ours
        // (no one else writes them) until the commit below.
        unsafe {
            if error == 0 || total == 0 {
                let mut at = ent.payload.as_ptr();
                for p in parts.iter().filter(|_| error == 0) {
                    std::ptr::copy_nonoverlapping(p.as_ptr(), at, p.len());
                    at = at.add(p.len());
                }
            }
            std::ptr::copy_nonoverlapping(
                bytes(&oh).as_ptr(),
                addr_of_mut!((*hp).in_out).cast::<u8>(),
                std::mem::size_of::<OutHeader>(),
            );
            addr_of_mut!((*hp).ring_ent_in_out.payload_sz).write_volatile(if error == 0 {
                total as u32
            } else {
                0
            });
        }
        self.commit(slot, unique);
    }
}

/// A completion: the entry (user data) and the result.
type Completion = (u64, i32);

/// The rings of one mount.
pub struct Rings {
    queues: Vec<Arc<Queue>>,
}

impl Rings {
    /// "N queues x D entries of P KiB" for the log.
    pub fn describe(&self) -> String {
        let q = &self.queues[0];
        format!(
            "{} queues x {} entries of {} KiB",
            self.queues.len(),
            q.ents.len(),
            q.payload_len >> 10
        )
    }

    /// Requests served by the queue threads and by the worker pool.
    pub fn counts(&self) -> (u64, u64) {
        let s = self
            .queues
            .iter()
            .map(|q| q.served.load(Ordering::Relaxed))
            .sum();
        let o = self
            .queues
            .iter()
            .map(|q| q.offloaded.load(Ordering::Relaxed))
            .sum();
        (s, o)
    }
}

/// The number of queues the kernel expects: one per possible CPU, counted
/// as its num_possible_cpus() counts them, from the `possible` mask
/// ("0-1", "0-3,8-11").
pub fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    count_cpus(&s).ok_or_else(|| io::Error::other(format!("cpu possible mask {s:?}")))
}

/// The number of CPUs in a cpu list ("0-3,8-11"), None if malformed.
fn count_cpus(s: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in s.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
        n = n.checked_add(b.checked_sub(a)?.checked_add(1)?)?;
    }
    Some(n)
}

pub fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and
    // sched_setaffinity get valid pointers and sizes.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        // Not fatal: a CPU that is possible but offline cannot be pinned to.
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Whether a request may take long enough that it should not hold its
/// queue: fsync (a log sync or commit), an O_DIRECT write (disk I/O, and
/// many may run at once), ioctls (a sync waits for a commit), fallocate
/// and copy_file_range (they may write a file back first); while the
/// filesystem is `busy` ([`FuseFs::busy`]), every request but those that
/// only read.
fn slow(h: &InHeader, arg: &[u8], busy: impl FnOnce() -> bool) -> bool {
    let reads = matches!(
        h.opcode,
        abi::FUSE_READ
            | abi::FUSE_LOOKUP
            | abi::FUSE_GETATTR
            | abi::FUSE_STATX
            | abi::FUSE_READDIR
            | abi::FUSE_READDIRPLUS
            | abi::FUSE_READLINK
            | abi::FUSE_GETXATTR
            | abi::FUSE_LISTXATTR
            | abi::FUSE_STATFS
            | abi::FUSE_LSEEK
            | abi::FUSE_FLUSH
    );
    if !reads && busy() {
        return true;
    }
    match h.opcode {
        // fallocate and copy_file_range may write a file back first.
        abi::FUSE_FSYNC
        | abi::FUSE_FSYNCDIR
        | abi::FUSE_IOCTL
        | abi::FUSE_FALLOCATE
        | abi::FUSE_COPY_FILE_RANGE
        | abi::FUSE_COPY_FILE_RANGE_64 => true,
        abi::FUSE_WRITE => {
            read::<abi::WriteIn>(arg).is_some_and(|w| w.flags as i32 & libc::O_DIRECT != 0)
        }
        _ => false,
    }
}

/// Starts a queue per possible CPU serving `fs` and returns once each has
/// registered its entries (or the first error). The queue threads run
/// until the connection ends.
pub(crate) fn start<F: FuseFs>(
    fs: Arc<F>,
    dev: RawFd,
    conn: Conn,
    payload_len: usize,
) -> io::Result<Rings> {
    let nq = possible_cpus()?;
    let depth = (MAX_PAYLOAD_TOTAL / (nq * payload_len)).clamp(2, MAX_DEPTH);
    let pool = Arc::new(Pool::new("fuse-slow", 8));
    let (tx, rx) = mpsc::channel();
    for qid in 0..nq {
        let (tx, fs, pool) = (tx.clone(), fs.clone(), pool.clone());
        std::thread::Builder::new()
            .name(format!("fuse-ring-{qid}"))
            .spawn(move || {
                pin_to(qid);
                // Allocated after pinning: first touch places the buffers
                // on this CPU's memory node.
                match setup(dev, qid, depth, payload_len) {
                    Ok((q, early)) => {
                        let _ = tx.send(Ok(q.clone()));
                        drop(tx);
                        serve(&q, early, &fs, &pool, conn);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })?;
    }
    drop(tx);
    let mut queues = Vec::with_capacity(nq);
    for _ in 0..nq {
        match rx.recv() {
            Ok(Ok(q)) => queues.push(q),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("a fuse ring thread died during setup")),
        }
    }
    queues.sort_by_key(|q| q.qid);
    Ok(Rings { queues })
}

/// Creates the queue's ring and registers its entries. Returns the
/// completions already there: a registration that makes the ring ready
/// may complete at once with a request in it, which must be served.
fn setup(
    dev: RawFd,
    qid: usize,
    depth: usize,
    payload_len: usize,
) -> io::Result<(Arc<Queue>, Vec<Completion>)> {
    // SQE128 comes with the Entry128 type. Only this thread submits, and
    // it waits for completions in io_uring_enter, so the kernel's
    // task_work (which copies each request in) can wait for that wait
    // instead of interrupting the thread: SINGLE_ISSUER | DEFER_TASKRUN.
    let mut b = IoUring::<squeue::Entry128, cqueue::Entry>::builder();
    b.setup_single_issuer().setup_defer_taskrun();
    let ring = b.build((depth as u32 + 1).next_power_of_two())?;
    ring.submitter().register_files(&[dev])?;
    // SAFETY: eventfd returns a new descriptor (or -1, checked).
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if efd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    let wake = unsafe { OwnedFd::from_raw_fd(efd) };
    let q = Arc::new(Queue {
        qid,
        ring,
        sq: Mutex::new(()),
        pending: Mutex::new(Vec::new()),
        wake,
        wake_buf: NonNull::from(Box::leak(Box::new(0u64))),
        ents: (0..depth).map(|_| EntBufs::new(payload_len, 0)).collect(),
        payload_len,
        served: AtomicU64::new(0),
        offloaded: AtomicU64::new(0),
    });
    ON_QUEUE.with(|c| c.set(Arc::as_ptr(&q) as usize));
    for i in 0..depth {
        q.push(q.sqe(i, None));
    }
    q.push(q.wake_sqe());
    q.ring.submit()?;
    let mut early = Vec::new();
    // SAFETY: only this thread reads the completion queue.
    for c in unsafe { q.ring.completion_shared() } {
        let r = c.result();
        if r < 0 && r != -libc::EINTR && r != -libc::EAGAIN {
            return Err(io::Error::other(format!(
                "registering fuse ring {qid} entry {}: {}",
                c.user_data(),
                io::Error::from_raw_os_error(-r)
            )));
        }
        if c.user_data() != WAKE {
            early.push((c.user_data(), r));
        }
    }
    Ok((q, early))
}

/// The queue thread's scheduling policy.
///
/// The answer to a request wakes its sender from inside the queue
/// thread's io_uring_enter, while the thread still runs on the sender's
/// CPU. The scheduler then moves the sender to another CPU if one is idle
/// (select_idle_sibling), its next request goes to the other queue, and
/// every round trip wakes a halted vCPU, several times slower than a
/// round trip on one CPU (bench/lseek.sh). A CPU whose runnable tasks
/// are all SCHED_IDLE counts as idle for that choice (sched_idle_cpu),
/// and a SCHED_IDLE queue thread keeps the sender where it is. But when
/// many senders keep the CPUs busy, a SCHED_IDLE thread waits behind
/// them, holding the mount's lock (dbench's 16 clients slow down).
///
/// So the thread goes SCHED_IDLE only while it serves one sender at a
/// time: a wakeup that brought exactly one request from a process (and
/// perhaps requests from none, see [`Policy::after`]), the process that
/// sent the one before on this queue. Anything else puts it back to
/// SCHED_OTHER. The policy changes only when that state does (a system
/// call each).
struct Policy {
    /// Off where the thread could not leave SCHED_IDLE again.
    adaptive: bool,
    idle: bool,
    last_pid: u32,
}

impl Policy {
    fn new() -> Policy {
        Policy {
            // An unprivileged thread may enter SCHED_IDLE but not leave it
            // unless RLIMIT_NICE allows nice 0: then never enter it.
            adaptive: can_leave_idle(),
            idle: false,
            last_pid: 0,
        }
    }

    fn set(&mut self, idle: bool) {
        if self.idle == idle {
            return;
        }
        let policy = if idle {
            libc::SCHED_IDLE
        } else {
            libc::SCHED_OTHER
        };
        let p = libc::sched_param { sched_priority: 0 };
        // SAFETY: this thread, a valid param.
        if unsafe { libc::sched_setscheduler(0, policy, &p) } == 0 {
            self.idle = idle;
        } else if !idle {
            // Could not leave SCHED_IDLE: stop adapting (and say so once).
            crate::logging::warn(&format!(
                "fuse ring thread: leaving SCHED_IDLE: {}",
                io::Error::last_os_error()
            ));
            self.adaptive = false;
        }
    }

    /// After serving a wakeup's requests (`pids` of their senders), before
    /// waiting again.
    fn after(&mut self, pids: &[u32]) {
        if !self.adaptive {
            return;
        }
        // Requests without a sender (pid 0: a close's RELEASE, sent in the
        // background beside the closer's next request) neither wait nor
        // say who is sending: they change nothing.
        let mut senders = pids.iter().copied().filter(|&pid| pid != 0);
        let one = match (senders.next(), senders.next_back()) {
            (None, _) => return,
            (Some(only), None) => {
                let same = only == self.last_pid;
                self.last_pid = only;
                same
            }
            (Some(_), Some(last)) => {
                self.last_pid = last;
                false
            }
        };
        self.set(one);
    }
}

/// Whether this thread could return from SCHED_IDLE to SCHED_OTHER: root
/// (CAP_SYS_NICE, approximately) or RLIMIT_NICE of 20 (nice 0) or more.
fn can_leave_idle() -> bool {
    // SAFETY: geteuid has no preconditions; getrlimit fills a local.
    unsafe {
        if libc::geteuid() == 0 {
            return true;
        }
        let mut r: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NICE, &mut r) == 0 && r.rlim_cur >= 20
    }
}

/// The queue thread: serve what completed, submit, wait; until every
/// entry has ended (the connection went away).
fn serve<F: FuseFs>(
    q: &Arc<Queue>,
    early: Vec<Completion>,
    fs: &Arc<F>,
    pool: &Arc<Pool>,
    conn: Conn,
) {
    let mut live = q.ents.len();
    let mut done = early;
    let mut policy = Policy::new();
    // The senders of the requests served since the last wait.
    let mut pids: Vec<u32> = Vec::new();
    // The request's payload is copied out before the answer overwrites
    // the same buffer.
    let mut data: Vec<u8> = Vec::with_capacity(64 << 10);
    loop {
        for &(idx, res) in &done {
            if idx == WAKE {
                // Answers from other threads (committed below); read again,
                // whatever this read's result: a lost wake read would leave
                // their answers waiting until this queue's next request.
                if res < 0 && !matches!(-res, libc::EINTR | libc::EAGAIN) {
                    crate::logging::warn(&format!(
                        "fuse ring {}: wake read: {}",
                        q.qid,
                        io::Error::from_raw_os_error(-res)
                    ));
                }
                q.push(q.wake_sqe());
                continue;
            }
            let idx = idx as usize;
            if idx >= q.ents.len() {
                continue;
            }
            if res < 0 {
                match -res {
                    // Not taken: try the registration again.
                    libc::EINTR | libc::EAGAIN => q.push(q.sqe(idx, None)),
                    libc::ENOTCONN | libc::ECONNABORTED | libc::ENODEV | libc::ECANCELED => {
                        live -= 1
                    }
                    e => {
                        crate::logging::error(&format!(
                            "fuse ring {} entry {idx}: {}",
                            q.qid,
                            io::Error::from_raw_os_error(e)
                        ));
                        live -= 1;
                    }
                }
                continue;
            }
            let ent = &q.ents[idx];
            // SAFETY: the kernel filled the header before completing the
            // command and does not touch it until our commit; read by
            // value through the raw pointer.
            let hdr: UringReqHeader = unsafe { ent.hdr.as_ptr().read_volatile() };
            let Some(h) = read::<InHeader>(&hdr.in_out) else {
                live -= 1;
                continue;
            };
            let info = hdr.ring_ent_in_out;
            if info.commit_id == 0 || no_reply(h.opcode) {
                // Nothing the kernel would take back: the entry is lost.
                crate::logging::error(&format!(
                    "fuse ring {}: request opcode {} with commit id {}",
                    q.qid, h.opcode, info.commit_id
                ));
                live -= 1;
                continue;
            }
            pids.push(h.pid);
            let psz = (info.payload_sz as usize).min(q.payload_len);
            // SAFETY: psz bytes of the entry's payload buffer, which is ours
            // until the commit.
            let payload = unsafe { std::slice::from_raw_parts(ent.payload.as_ptr(), psz) };
            let arg = &hdr.op_in[..conn.arg_size(h.opcode).min(abi::FUSE_URING_OP_IN_OUT_SZ)];
            let sender = Sender {
                transport: q.clone(),
                slot: idx,
                unique: h.unique,
            };
            if slow(&h, arg, || fs.busy()) {
                q.offloaded.fetch_add(1, Ordering::Relaxed);
                let (arg, payload, fs) = (arg.to_vec(), payload.to_vec(), fs.clone());
                pool.run(move || guarded(|| dispatch(&*fs, conn, &h, &arg, &payload, sender)));
            } else {
                q.served.fetch_add(1, Ordering::Relaxed);
                data.clear();
                data.extend_from_slice(payload);
                guarded(|| dispatch(&**fs, conn, &h, arg, &data, sender));
            }
        }
        // Answers made on other threads since the last wait.
        let ready = std::mem::take(&mut *q.pending.lock().unwrap_or_else(|p| p.into_inner()));
        for (slot, unique) in ready {
            q.push(q.sqe(slot, Some(unique)));
        }
        if live == 0 {
            return;
        }
        // Submit the answers and wait; see `Policy`.
        policy.after(&pids);
        pids.clear();
        let res = q.ring.submitter().submit_and_wait(1);
        match res {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) => {}
            Err(e) => {
                crate::logging::error(&format!("fuse ring {}: io_uring_enter: {e}", q.qid));
                return;
            }
        }
        done.clear();
        // SAFETY: only this thread reads the completion queue.
        done.extend(unsafe { q.ring.completion_shared() }.map(|c| (c.user_data(), c.result())));
    }
}

#[cfg(test)]
mod tests {
    use super::count_cpus;

    #[test]
    fn cpu_lists_count_as_the_kernel_counts() {
        assert_eq!(count_cpus("0-1\n"), Some(2));
        assert_eq!(count_cpus("0"), Some(1));
        assert_eq!(count_cpus("0-3,8-11"), Some(8));
        assert_eq!(count_cpus("3-1"), None);
        assert_eq!(count_cpus("x"), None);
        assert_eq!(count_cpus(""), None);
    }
}
