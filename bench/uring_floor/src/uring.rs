//! The FUSE-over-io_uring transport (kernel fs/fuse/dev_uring.c, 6.14+).
//!
//! How the kernel side works, as read in dev_uring.c (6.18):
//! - The ring has one queue per *possible* CPU (num_possible_cpus()), and a
//!   request goes to the queue of the CPU its sender runs on (task_cpu).
//!   The kernel switches the connection over to the ring only once every
//!   queue has at least one registered entry (is_ring_ready); until then,
//!   and from INIT on, requests wait (fc->io_uring blocks allocation).
//! - An entry is a pair of user buffers given with REGISTER as an iovec
//!   array of 2 in sqe->addr, sqe->len = 2: a header buffer (struct
//!   fuse_uring_req_header) and a payload buffer of at least
//!   max(8 KiB, max_write, max_pages * PAGE_SIZE). The SQE must be 128
//!   bytes (IORING_SETUP_SQE128): fuse_uring_cmd_req sits in its command
//!   area.
//! - A REGISTER or COMMIT_AND_FETCH stays pending until a request is put in
//!   the entry; its CQE (res 0) says "a request is in your buffers". The
//!   answer goes back in the same buffers with COMMIT_AND_FETCH, which also
//!   re-arms the entry: one SQE and one CQE per request, no separate read.
//! - The request is copied into the buffers by task_work in the context of
//!   the task that submitted the entry's SQE: the queue thread must be the
//!   one waiting in io_uring_enter, and it is woken for every request.
//! - Only send_req goes to the ring: FORGET and INTERRUPT still come
//!   through read(/dev/fuse), so main.rs keeps reading the device.
//! - On unmount or abort, pending entries complete with -ENOTCONN.
//!
//! So: one thread per queue, pinned to the queue's CPU (the requester on
//! CPU n wakes the thread of queue n, on the same CPU), each with its own
//! ring and `depth` entries, serving in a loop of submit-and-wait.

use std::io;
use std::os::fd::RawFd;
use std::ptr::addr_of_mut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::fs::{self, Outcome};
use crate::proto::*;
use ubtrfs_fuse::proto::dev_uring::{pin_to, possible_cpus, with_len, EntBufs};

/// How to set up the rings.
#[derive(Clone, Copy, Debug)]
pub struct Opts {
    /// Entries per queue.
    pub depth: usize,
    /// Bytes per entry payload buffer.
    pub payload: usize,
    /// Pin queue thread n to CPU n.
    pub pin: bool,
    /// io_uring task-run mode, see `Taskrun`.
    pub taskrun: Taskrun,
}

/// How io_uring runs the task_work that copies each request into our
/// buffers (and posts the CQE). The kernel does it in our thread's context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taskrun {
    /// Plain ring: task_work is queued with a signal-style notification
    /// (TWA_SIGNAL) that kicks the thread out of its wait. libfuse's choice.
    Default,
    /// IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN: the work is queued on
    /// the ring and run only inside io_uring_enter(GETEVENTS), which is
    /// where our thread waits anyway: no signal-style kick.
    Defer,
    /// IORING_SETUP_COOP_TASKRUN | TASKRUN_FLAG: no IPI to interrupt a
    /// running task; the work runs at its next kernel entry.
    Coop,
}

/// Shared with main for the exit report.
pub struct Queues {
    /// Requests served per queue.
    pub served: Vec<AtomicU64>,
}

/// Starts one thread per queue and returns once each has created its ring
/// and submitted REGISTER for its entries (or failed: then the error).
pub fn start(dev: RawFd, o: Opts) -> io::Result<Arc<Queues>> {
    let nq = possible_cpus()?;
    eprintln!(
        "uring-floor: io_uring: {nq} queues x {} entries, payload {} bytes, pin {}, taskrun {:?}",
        o.depth, o.payload, o.pin, o.taskrun
    );
    let q = Arc::new(Queues {
        served: (0..nq).map(|_| AtomicU64::new(0)).collect(),
    });
    let (tx, rx) = mpsc::channel();
    for qid in 0..nq {
        let tx = tx.clone();
        let q = q.clone();
        std::thread::Builder::new()
            .name(format!("fuse-ring-{qid}"))
            .spawn(move || queue_thread(dev, qid, o, q, tx))?;
    }
    drop(tx);
    for _ in 0..nq {
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("a queue thread died during setup")),
        }
    }
    Ok(q)
}

/// What an entry has in flight, to resubmit it on EINTR/EAGAIN.
#[derive(Clone, Copy)]
enum Cmd {
    Register,
    Commit(u64),
}

/// One ring entry: the mount's buffer set, plus what the floor tracks.
struct Ent {
    b: EntBufs,
    /// Bytes at the front of the payload that are not 0xab: the payload is
    /// pre-filled with file data so that a READ reply needs no copy (a real
    /// server would read straight into it); only what other replies or the
    /// kernel's request payload overwrote is restored.
    dirty: usize,
    last: Cmd,
    dead: bool,
}

impl Ent {
    fn new(payload_len: usize) -> Ent {
        Ent {
            b: EntBufs::new(payload_len, 0xab),
            dirty: 0,
            last: Cmd::Register,
            dead: false,
        }
    }
}

/// The SQE for an entry's command. The device is fixed file 0 (registered
/// with the ring, as libfuse does: saves a file lookup per command).
fn sqe(ent: &Ent, idx: usize, qid: usize) -> squeue::Entry128 {
    let (op, commit_id) = match ent.last {
        Cmd::Register => (FUSE_IO_URING_CMD_REGISTER, 0),
        Cmd::Commit(id) => (FUSE_IO_URING_CMD_COMMIT_AND_FETCH, id),
    };
    let req = UringCmdReq {
        commit_id,
        qid: qid as u16,
        ..UringCmdReq::default()
    };
    let mut cmd = [0u8; 80];
    cmd[..std::mem::size_of::<UringCmdReq>()].copy_from_slice(bytes(&req));
    let mut b = opcode::UringCmd80::new(types::Fixed(0), op).cmd(cmd);
    if let Cmd::Register = ent.last {
        b = b.addr(Some(ent.b.iov.as_ptr() as u64));
    }
    let e = b.build().user_data(idx as u64);
    if let Cmd::Register = ent.last {
        with_len(e, 2)
    } else {
        e
    }
}

/// A queue's ring, its entries, and the completions already seen.
type Setup = (
    IoUring<squeue::Entry128, cqueue::Entry>,
    Vec<Ent>,
    Vec<(u64, i32)>,
);

/// Creates the ring and submits REGISTER for every entry.
fn setup(dev: RawFd, qid: usize, o: Opts) -> io::Result<Setup> {
    let (depth, payload) = (o.depth, o.payload);
    // SQE128 is implied by the Entry128 type. See Taskrun for the rest;
    // libfuse notes that SINGLE_ISSUER and COOP_TASKRUN made it slower.
    let mut b = IoUring::<squeue::Entry128, cqueue::Entry>::builder();
    match o.taskrun {
        Taskrun::Default => {}
        Taskrun::Defer => {
            b.setup_single_issuer().setup_defer_taskrun();
        }
        Taskrun::Coop => {
            b.setup_coop_taskrun().setup_taskrun_flag();
        }
    }
    let ring = b.build((depth as u32).next_power_of_two().max(2))?;
    ring.submitter().register_files(&[dev])?;
    let mut ents: Vec<Ent> = (0..depth).map(|_| Ent::new(payload)).collect();
    for (i, e) in ents.iter_mut().enumerate() {
        e.last = Cmd::Register;
        let s = sqe(e, i, qid);
        // SAFETY: the iovecs and buffers the SQE points at are leaked and
        // live for the rest of the process.
        unsafe { ring.submission_shared().push(&s) }
            .map_err(|_| io::Error::other("submission queue full"))?;
    }
    ring.submit()?;
    // A REGISTER that is refused (EOPNOTSUPP when enable_uring is off,
    // EINVAL for a bad size or qid) completes at once: report it now. But
    // an accepted one may complete at once too, with a request in it: the
    // registration that makes the ring ready wakes the requests that were
    // waiting for it, and their task_work runs as our io_uring_enter
    // returns. Those completions must be served, not dropped (dropping one
    // leaves its sender in D state forever), so they are handed back.
    let mut early = Vec::new();
    // SAFETY: only this thread touches the ring.
    for c in unsafe { ring.completion_shared() } {
        if c.result() < 0 && c.result() != -libc::EINTR && c.result() != -libc::EAGAIN {
            return Err(io::Error::other(format!(
                "REGISTER qid {qid} entry {}: {}",
                c.user_data(),
                io::Error::from_raw_os_error(-c.result())
            )));
        }
        early.push((c.user_data(), c.result()));
    }
    Ok((ring, ents, early))
}

fn queue_thread(
    dev: RawFd,
    qid: usize,
    o: Opts,
    q: Arc<Queues>,
    ready: mpsc::Sender<io::Result<()>>,
) {
    let payload = o.payload;
    if o.pin {
        pin_to(qid);
    }
    // Allocate after pinning, so that first touch puts the buffers on this
    // CPU's node (moot on this VM, right on NUMA machines).
    let (mut ring, mut ents, mut done) = match setup(dev, qid, o) {
        Ok(x) => {
            let _ = ready.send(Ok(()));
            x
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    drop(ready);
    // A request's payload (LOOKUP's name) is copied here before the reply
    // overwrites the same buffer.
    let mut scratch: Vec<u8> = Vec::with_capacity(4096);
    // Completions to serve first: those setup saw. Then: serve, submit the
    // commits and wait for the next completions, in one io_uring_enter.
    loop {
        for &(idx, res) in &done {
            let Some(ent) = ents.get_mut(idx as usize) else {
                eprintln!("uring-floor: queue {qid}: CQE for unknown entry {idx}");
                continue;
            };
            if res < 0 {
                match -res {
                    // Try again with the same command.
                    libc::EINTR | libc::EAGAIN => {}
                    // The connection is going away: this entry is done.
                    libc::ENOTCONN | libc::ECONNABORTED | libc::ENODEV => {
                        ent.dead = true;
                        continue;
                    }
                    e => {
                        eprintln!(
                            "uring-floor: queue {qid} entry {idx}: {}",
                            io::Error::from_raw_os_error(e)
                        );
                        ent.dead = true;
                        continue;
                    }
                }
            } else {
                match serve(ent, payload, &mut scratch) {
                    Some(id) => ent.last = Cmd::Commit(id),
                    None => {
                        ent.dead = true;
                        continue;
                    }
                }
                q.served[qid].fetch_add(1, Ordering::Relaxed);
            }
            let s = sqe(ent, idx as usize, qid);
            // SAFETY: as in setup; at most `depth` SQEs are in flight, one
            // per entry, and the queue holds at least that many.
            if unsafe { ring.submission().push(&s) }.is_err() {
                eprintln!("uring-floor: queue {qid}: submission queue full");
                return;
            }
        }
        if ents.iter().all(|e| e.dead) {
            return;
        }
        loop {
            match ring.submit_and_wait(1) {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    eprintln!("uring-floor: queue {qid}: io_uring_enter: {e}");
                    return;
                }
            }
        }
        done.clear();
        done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
    }
}

/// Answers the request the kernel put in `ent` and returns the commit id
/// to send back, or None if the entry carries something we cannot commit.
fn serve(ent: &mut Ent, payload_len: usize, scratch: &mut Vec<u8>) -> Option<u64> {
    let hp = ent.b.hdr.as_ptr();
    // SAFETY: the kernel filled the header before completing the command
    // and does not touch it again until we submit the commit; reading it by
    // value via a raw pointer makes no aliasing promise to the compiler.
    let hdr: UringReqHeader = unsafe { hp.read_volatile() };
    let h = read::<InHeader>(&hdr.in_out)?;
    let info = hdr.ring_ent_in_out;
    if info.commit_id == 0 {
        // The kernel would not find the request to complete: nothing we can
        // commit; dropping the entry is the least bad choice.
        eprintln!(
            "uring-floor: request with commit id 0 (opcode {})",
            h.opcode
        );
        return None;
    }
    let psz = (info.payload_sz as usize).min(payload_len);
    // SAFETY: the payload buffer is payload_len bytes, leaked for the
    // process's life, and the kernel is done with it until the commit.
    let buf = unsafe { std::slice::from_raw_parts_mut(ent.b.payload.as_ptr(), payload_len) };
    scratch.clear();
    scratch.extend_from_slice(&buf[..psz]);
    ent.dirty = ent.dirty.max(psz);

    let (error, n) = match fs::dispatch(&h, &hdr.op_in, scratch, buf) {
        Outcome::Reply(n) => {
            ent.dirty = ent.dirty.max(n);
            (0, n)
        }
        Outcome::Data(n) => {
            if ent.dirty > 0 {
                buf[..ent.dirty].fill(0xab);
                ent.dirty = 0;
            }
            (0, n)
        }
        Outcome::Err(e) => (-e, 0),
        // FORGET/INTERRUPT never come over the ring; if something
        // reply-less did, the entry must still be committed to be re-armed.
        Outcome::None => (0, 0),
    };
    let oh = OutHeader {
        len: (std::mem::size_of::<OutHeader>() + n) as u32,
        error,
        unique: h.unique,
    };
    // SAFETY: hp is the entry's header buffer, ours until the commit.
    unsafe {
        std::ptr::copy_nonoverlapping(
            bytes(&oh).as_ptr(),
            addr_of_mut!((*hp).in_out).cast::<u8>(),
            std::mem::size_of::<OutHeader>(),
        );
        addr_of_mut!((*hp).ring_ent_in_out.payload_sz).write_volatile(n as u32);
    }
    Some(info.commit_id)
}
