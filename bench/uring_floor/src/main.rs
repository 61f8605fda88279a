//! uring-floor: a minimal FUSE server that speaks the protocol itself (no
//! fuser, no libfuse) over one of two transports, to measure what a FUSE
//! round trip costs on each:
//!
//!   uring-floor --transport dev   MNT   classic read()/write() on /dev/fuse
//!   uring-floor --transport uring MNT   FUSE-over-io_uring (kernel 6.14+,
//!                                       fuse module parameter enable_uring=Y)
//!
//! It serves the file system of /work/shared/tools/fuse_floor.c (see fs.rs)
//! and runs in the foreground until the mount goes away (umount MNT), then
//! prints per-transport request counts on stderr.
//!
//! Options (uring only): --depth N (ring entries per queue, default 2),
//! --no-pin (do not pin queue threads to their CPU), --taskrun
//! default|defer|coop (io_uring task_work mode, see uring::Taskrun).

mod fs;
mod proto;
mod uring;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fs::Outcome;
use proto::*;

/// Largest WRITE payload we accept and largest READ the kernel may ask for
/// (max_pages * 4 KiB): the size of a request buffer and, over io_uring, of
/// each entry's payload buffer (the kernel requires at least
/// max(8 KiB, max_write, max_pages * PAGE_SIZE)).
pub const MAX_WRITE: u32 = 1 << 20;
pub const MAX_PAGES: u16 = 256;
/// /dev/fuse reads must offer room for the largest request: max_write plus
/// headers. The kernel also insists on at least FUSE_MIN_READ_BUFFER (8 KiB).
const DEV_BUF: usize = MAX_WRITE as usize + 4096;

/// 1 MiB of 0xab: the file's data, written from here by the /dev/fuse
/// transport without a copy into a reply buffer.
pub static DATA: [u8; MAX_WRITE as usize] = [0xab; MAX_WRITE as usize];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Transport {
    Dev,
    Uring,
}

struct Args {
    transport: Transport,
    mountpoint: String,
    depth: usize,
    pin: bool,
    taskrun: uring::Taskrun,
}

fn usage() -> ! {
    eprintln!("usage: uring-floor --transport dev|uring [--depth N] [--no-pin] [--taskrun default|defer|coop] MOUNTPOINT");
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut transport = None;
    let mut mountpoint = None;
    let mut depth = 2;
    let mut pin = true;
    let mut taskrun = uring::Taskrun::Default;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--transport" => {
                transport = match it.next().as_deref() {
                    Some("dev") => Some(Transport::Dev),
                    Some("uring") => Some(Transport::Uring),
                    _ => usage(),
                }
            }
            "--depth" => {
                depth = it
                    .next()
                    .and_then(|d| d.parse().ok())
                    .filter(|&d| d > 0 && d <= 64)
                    .unwrap_or_else(|| usage())
            }
            "--no-pin" => pin = false,
            "--taskrun" => {
                taskrun = match it.next().as_deref() {
                    Some("default") => uring::Taskrun::Default,
                    Some("defer") => uring::Taskrun::Defer,
                    Some("coop") => uring::Taskrun::Coop,
                    _ => usage(),
                }
            }
            _ if a.starts_with('-') => usage(),
            _ => mountpoint = Some(a),
        }
    }
    Args {
        transport: transport.unwrap_or_else(|| usage()),
        mountpoint: mountpoint.unwrap_or_else(|| usage()),
        depth,
        pin,
        taskrun,
    }
}

/// Opens /dev/fuse and mounts it (mount(2) as root, fusermount3 otherwise):
/// read-write, the mounting user's only, the fd ours from the start.
fn mount(mnt: &str) -> io::Result<OwnedFd> {
    ubtrfs_fuse::proto::mount::mount(
        std::path::Path::new(mnt),
        "uringfloor",
        "uringfloor",
        false,
        ubtrfs_fuse::proto::Acl::Owner,
        false,
    )
}

/// Lazily detaches the mount, for the error paths: a mount whose daemon has
/// gone would otherwise answer ENOTCONN until someone unmounts it.
fn detach(mnt: &str) {
    if let Ok(t) = CString::new(mnt) {
        // SAFETY: valid C string.
        unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Writes one reply to /dev/fuse: out header plus payload, gathered.
fn write_reply(fd: RawFd, unique: u64, error: i32, payload: &[u8]) -> io::Result<()> {
    let oh = OutHeader {
        len: (std::mem::size_of::<OutHeader>() + payload.len()) as u32,
        error: -error,
        unique,
    };
    let hb = bytes(&oh);
    let iov = [
        libc::iovec {
            iov_base: hb.as_ptr() as *mut libc::c_void,
            iov_len: hb.len(),
        },
        libc::iovec {
            iov_base: payload.as_ptr() as *mut libc::c_void,
            iov_len: payload.len(),
        },
    ];
    let cnt = if payload.is_empty() { 1 } else { 2 };
    // SAFETY: the iovecs point at live buffers of the given lengths.
    let r = unsafe { libc::writev(fd, iov.as_ptr(), cnt) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The INIT reply. Only flags the kernel offered are taken; with the
/// io_uring transport FUSE_OVER_IO_URING must be among them, which the
/// kernel offers only while enable_uring=Y.
fn init_reply(arg: &[u8], transport: Transport) -> Result<InitOut, String> {
    // Kernels before 7.36 send a 16-byte fuse_init_in: zero-pad the rest.
    let mut padded = [0u8; 64];
    let n = arg.len().min(64);
    padded[..n].copy_from_slice(&arg[..n]);
    let init = read::<InitIn>(&padded).ok_or("INIT too short")?;
    if n < 16 {
        return Err(format!("INIT argument of {n} bytes"));
    }
    if init.major != KERNEL_VERSION {
        return Err(format!("kernel FUSE major {} (want 7)", init.major));
    }
    let offered = if init.flags as u64 & FUSE_INIT_EXT != 0 {
        init.flags as u64 | (init.flags2 as u64) << 32
    } else {
        init.flags as u64
    };
    eprintln!(
        "uring-floor: kernel FUSE 7.{}, flags {offered:#x}, max_readahead {}",
        init.minor, init.max_readahead
    );
    let mut want =
        FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_PARALLEL_DIROPS | FUSE_MAX_PAGES | FUSE_INIT_EXT;
    if transport == Transport::Uring {
        if init.minor < 42 || offered & FUSE_OVER_IO_URING == 0 {
            return Err(format!(
                "kernel did not offer FUSE_OVER_IO_URING (7.{}, flags {offered:#x}); \
                 is /sys/module/fuse/parameters/enable_uring Y?",
                init.minor
            ));
        }
        want |= FUSE_OVER_IO_URING;
    }
    let flags = want & offered;
    Ok(InitOut {
        major: KERNEL_VERSION,
        minor: init.minor.min(KERNEL_MINOR_VERSION),
        max_readahead: init.max_readahead,
        flags: flags as u32,
        flags2: (flags >> 32) as u32,
        max_write: MAX_WRITE,
        max_pages: MAX_PAGES,
        time_gran: 1,
        ..InitOut::default()
    })
}

/// Counts requests per opcode, for the exit report (which path carried
/// what). Opcodes above 63 share the last slot.
struct Counts([u64; 64]);

impl Counts {
    fn add(&mut self, op: u32) {
        self.0[(op as usize).min(63)] += 1;
    }
    fn report(&self) -> String {
        let total: u64 = self.0.iter().sum();
        let mut s = format!("{total} requests");
        for (op, &c) in self.0.iter().enumerate() {
            if c > 0 {
                s.push_str(&format!(" op{op}:{c}"));
            }
        }
        s
    }
}

fn main() {
    let args = parse_args();
    let fd = match mount(&args.mountpoint) {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("uring-floor: mount {}: {e}", args.mountpoint);
            std::process::exit(1);
        }
    };
    let raw = fd.as_raw_fd();
    let mut buf = vec![0u8; DEV_BUF];
    let mut out = vec![0u8; MAX_WRITE as usize];
    let mut counts = Counts([0; 64]);
    let mut queues: Option<Arc<uring::Queues>> = None;

    // The /dev/fuse loop. With --transport dev it serves everything. With
    // --transport uring it serves INIT (which always comes this way), then
    // starts the rings, and keeps reading for what the kernel still sends
    // through the device once the ring is up: FORGET/BATCH_FORGET and
    // INTERRUPT (fuse_io_uring_ops routes only send_req to the ring).
    loop {
        // SAFETY: buf is a live buffer of buf.len() bytes.
        let n = unsafe { libc::read(raw, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                // Interrupted, or a request that went away before we read
                // it: read again.
                Some(libc::EINTR) | Some(libc::ENOENT) | Some(libc::EAGAIN) => continue,
                // The mount is gone (umount, abort): we are done.
                Some(libc::ENODEV) => break,
                _ => {
                    eprintln!("uring-floor: read /dev/fuse: {e}");
                    break;
                }
            }
        }
        let msg = &buf[..n as usize];
        let Some(h) = read::<InHeader>(msg) else {
            eprintln!("uring-floor: short message of {n} bytes");
            continue;
        };
        // Trust neither length alone: take the shorter.
        let end = (h.len as usize).min(msg.len());
        let body = msg.get(std::mem::size_of::<InHeader>()..end).unwrap_or(&[]);
        counts.add(h.opcode);

        if h.opcode == FUSE_INIT {
            match init_reply(body, args.transport) {
                Ok(io) => {
                    if let Err(e) = write_reply(raw, h.unique, 0, bytes(&io)) {
                        eprintln!("uring-floor: INIT reply: {e}");
                        detach(&args.mountpoint);
                        std::process::exit(1);
                    }
                    // The ring can be registered only now: the kernel
                    // answers REGISTER with EAGAIN until the connection is
                    // initialised, and sizes the ring from our INIT reply.
                    if args.transport == Transport::Uring && queues.is_none() {
                        let payload = (MAX_WRITE as usize)
                            .max(MAX_PAGES as usize * 4096)
                            .max(8192);
                        let o = uring::Opts {
                            depth: args.depth,
                            payload,
                            pin: args.pin,
                            taskrun: args.taskrun,
                        };
                        match uring::start(raw, o) {
                            Ok(q) => queues = Some(q),
                            Err(e) => {
                                eprintln!("uring-floor: io_uring setup: {e}");
                                detach(&args.mountpoint);
                                std::process::exit(1);
                            }
                        }
                    }
                }
                Err(e) => {
                    eprintln!("uring-floor: {e}");
                    let _ = write_reply(raw, h.unique, libc::EPROTO, &[]);
                    detach(&args.mountpoint);
                    std::process::exit(1);
                }
            }
            continue;
        }

        let split = op_arg_size(h.opcode).min(body.len());
        let (arg, data) = body.split_at(split);
        let r = match fs::dispatch(&h, arg, data, &mut out) {
            Outcome::Reply(n) => write_reply(raw, h.unique, 0, &out[..n]),
            Outcome::Data(n) => write_reply(raw, h.unique, 0, &DATA[..n]),
            Outcome::Err(e) => write_reply(raw, h.unique, e, &[]),
            Outcome::None => Ok(()),
        };
        if let Err(e) = r {
            // ENOENT: the request was interrupted and is gone. Harmless.
            if e.raw_os_error() != Some(libc::ENOENT) {
                eprintln!("uring-floor: reply to op {}: {e}", h.opcode);
            }
        }
    }

    eprintln!("uring-floor: /dev/fuse: {}", counts.report());
    if let Some(q) = queues {
        for (i, c) in q.served.iter().enumerate() {
            eprintln!(
                "uring-floor: ring queue {i}: {} requests",
                c.load(Ordering::Relaxed)
            );
        }
    }
    // The queue threads end on their own once the kernel cancels their
    // entries (ENOTCONN); no need to wait for them to exit.
    drop(fd);
}
