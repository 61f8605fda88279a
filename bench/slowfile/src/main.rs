//! slowfile: one image file served through FUSE as from a slow disk, for
//! readahead benchmarks (bench/slowdev.sh).
//!
//! ```text
//! slowfile [--latency-ms MS] [--model seek|every] [--queue-depth N]
//!          [--near-kb K] [--rw] [--name NAME] [--allow-other] IMAGE MOUNTPOINT
//! ```
//!
//! Mounts, in the foreground, a FUSE file system at MOUNTPOINT holding one
//! regular file, NAME (default: IMAGE's file name), with IMAGE's contents,
//! read-only unless `--rw`. Each read is answered after a delay:
//!
//! * model `seek` (the default): MS milliseconds (default 4), unless the
//!   read starts where one of the last [`SEQ_STREAMS`] reads ended (or at
//!   most K KiB after, with `--near-kb K`: a disk that reorders its queue
//!   or keeps the rest of the track in its cache). Such a sequential read
//!   finds the head already there and costs no more than the read of the
//!   image itself. Which reads are sequential is decided in the order they
//!   arrive.
//! * model `every`: every read waits MS milliseconds.
//!
//! N threads (`--queue-depth`, default 8) serve the reads: up to N of them
//! wait out their latency at the same time, like a disk with a command
//! queue; with N = 1 reads are served one at a time, in arrival order.
//!
//! The file is opened with FOPEN_DIRECT_IO, so the kernel keeps no page
//! cache of it: every read a program or a loop device makes of the file
//! arrives here and waits. Writes (`--rw`) wait like reads.
//!
//! Counters go to stderr on SIGUSR1 and at exit, as one line of
//! `name=value` fields: reads, bytes read, reads delayed, the largest and
//! mean number of requests outstanding when a read arrived (1 = reads came
//! one at a time) and the sum behind that mean (for differences between
//! two lines), writes. SIGINT, SIGTERM and SIGHUP unmount; while a loop
//! device still uses the file the mount is busy and stays.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use ubtrfs_fuse::proto::{
    args, Acl, Errno, FileAttr, FileHandle, FileType, FopenFlags, FuseFs, Generation, INodeNo,
    InitFlags, KernelConfig, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, Session,
};

/// How many read ends are remembered as positions a read may continue
/// without a seek (concurrent sequential streams, a track cache).
const SEQ_STREAMS: usize = 8;

const ROOT: u64 = 1;
const FILE: u64 = 2;
const TTL: Duration = Duration::from_secs(1);

const USAGE: &str = "usage: slowfile [--latency-ms MS] [--model seek|every] [--queue-depth N] \
                     [--near-kb K] [--rw] [--name NAME] [--allow-other] IMAGE MOUNTPOINT";

#[derive(Clone, Copy, PartialEq, Debug)]
enum Model {
    Seek,
    Every,
}

struct Args {
    image: PathBuf,
    mountpoint: PathBuf,
    latency: Duration,
    model: Model,
    queue_depth: usize,
    near: u64,
    rw: bool,
    name: Option<OsString>,
    allow_other: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args_os().skip(1);
    let mut pos = Vec::new();
    let (mut latency, mut model, mut queue_depth) = (Duration::from_millis(4), Model::Seek, 8);
    let (mut near, mut rw, mut name, mut allow_other) = (0, false, None, false);
    while let Some(a) = it.next() {
        let mut val = |what: &str| {
            it.next()
                .and_then(|v| v.into_string().ok())
                .ok_or_else(|| format!("{what} needs a value"))
        };
        match a.to_str().unwrap_or("") {
            "--latency-ms" => {
                let ms: f64 = val("--latency-ms")?
                    .parse()
                    .map_err(|_| "--latency-ms: not a number")?;
                if !(0.0..=60_000.0).contains(&ms) {
                    return Err("--latency-ms: out of range".into());
                }
                latency = Duration::from_secs_f64(ms / 1000.0);
            }
            "--model" => {
                model = match val("--model")?.as_str() {
                    "seek" => Model::Seek,
                    "every" => Model::Every,
                    m => return Err(format!("--model: {m}: not seek or every")),
                }
            }
            "--queue-depth" => {
                queue_depth = val("--queue-depth")?
                    .parse()
                    .ok()
                    .filter(|n| (1..=1024).contains(n))
                    .ok_or("--queue-depth: a number from 1 to 1024")?
            }
            "--near-kb" => {
                near = val("--near-kb")?
                    .parse::<u64>()
                    .ok()
                    .filter(|k| *k <= 1 << 30)
                    .ok_or("--near-kb: a number of KiB")?
                    << 10
            }
            "--rw" => rw = true,
            "--name" => name = Some(OsString::from(val("--name")?)),
            "--allow-other" => allow_other = true,
            "-h" | "--help" => return Err(USAGE.into()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}\n{USAGE}")),
            _ => pos.push(PathBuf::from(a)),
        }
    }
    let [image, mountpoint] = <[PathBuf; 2]>::try_from(pos).map_err(|_| USAGE.to_string())?;
    Ok(Args {
        image,
        mountpoint,
        latency,
        model,
        queue_depth,
        near,
        rw,
        name,
        allow_other,
    })
}

/// Counters, shared with the signal thread.
#[derive(Default)]
struct Stats {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    delayed: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    /// Requests received and not yet answered.
    outstanding: AtomicU64,
    max_outstanding: AtomicU64,
    /// Sum over reads of the requests outstanding when each arrived (itself
    /// included).
    outstanding_sum: AtomicU64,
}

impl Stats {
    /// A read arrives: counts it.
    fn arrive_read(&self, len: u32, delayed: bool) {
        let now = self.outstanding.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_outstanding.fetch_max(now, Ordering::Relaxed);
        self.outstanding_sum.fetch_add(now, Ordering::Relaxed);
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.read_bytes.fetch_add(len as u64, Ordering::Relaxed);
        if delayed {
            self.delayed.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn done(&self) {
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
    }

    fn line(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let reads = g(&self.reads);
        let mean = if reads > 0 {
            g(&self.outstanding_sum) as f64 / reads as f64
        } else {
            0.0
        };
        format!(
            "slowfile: reads={} read_bytes={} delayed={} max_outstanding={} mean_outstanding={mean:.2} outstanding_sum={} writes={} write_bytes={}",
            reads,
            g(&self.read_bytes),
            g(&self.delayed),
            g(&self.max_outstanding),
            g(&self.outstanding_sum),
            g(&self.writes),
            g(&self.write_bytes),
        )
    }
}

type Job = Box<dyn FnOnce() + Send + 'static>;

/// `n` threads taking jobs from one queue.
fn start_workers(n: usize) -> Result<Sender<Job>, String> {
    let (tx, rx) = channel::<Job>();
    let rx: Arc<Mutex<Receiver<Job>>> = Arc::new(Mutex::new(rx));
    for i in 0..n {
        let rx = rx.clone();
        std::thread::Builder::new()
            .name(format!("slowfile-{i}"))
            .spawn(move || loop {
                let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                match job {
                    Ok(job) => job(),
                    Err(_) => return,
                }
            })
            .map_err(|e| format!("starting a worker thread: {e}"))?;
    }
    Ok(tx)
}

struct SlowFs {
    file: Arc<File>,
    name: OsString,
    rw: bool,
    model: Model,
    latency: Duration,
    /// How far past a recent end a read still counts as sequential.
    near: u64,
    /// Where the last reads ended, oldest overwritten first.
    ends: Mutex<([u64; SEQ_STREAMS], usize)>,
    stats: Arc<Stats>,
    /// Jobs for the workers; a Mutex so that the handler is Sync on every
    /// toolchain the workspace supports.
    queue: Mutex<Sender<Job>>,
}

impl SlowFs {
    /// The wait for an access of `len` bytes at `offset`, decided in
    /// arrival order; remembers where it ends.
    fn delay_for(&self, offset: u64, len: u32) -> Duration {
        let mut g = self.ends.lock().unwrap_or_else(|e| e.into_inner());
        let (ends, next) = &mut *g;
        let sequential = ends.iter().any(|&e| offset >= e && offset - e <= self.near);
        ends[*next] = offset + len as u64;
        *next = (*next + 1) % SEQ_STREAMS;
        match self.model {
            Model::Every => self.latency,
            Model::Seek if sequential => Duration::ZERO,
            Model::Seek => self.latency,
        }
    }

    fn submit(&self, job: Job) {
        let _ = self
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(job);
    }

    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let m = self.file.metadata().map_err(errno)?;
        let t = |s: i64, ns: i64| {
            UNIX_EPOCH
                + Duration::from_secs(s.max(0) as u64)
                + Duration::from_nanos(ns.max(0) as u64)
        };
        let (kind, perm, size, nlink) = if ino == ROOT {
            (FileType::Directory, 0o755, 0, 2)
        } else if self.rw {
            (FileType::RegularFile, 0o644, m.len(), 1)
        } else {
            (FileType::RegularFile, 0o444, m.len(), 1)
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: if ino == ROOT { 0 } else { m.blocks() },
            atime: t(m.atime(), m.atime_nsec()),
            mtime: t(m.mtime(), m.mtime_nsec()),
            ctime: t(m.ctime(), m.ctime_nsec()),
            crtime: SystemTime::UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: m.uid(),
            gid: m.gid(),
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }
}

fn errno(e: std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(f: &File, buf: &mut [u8], mut off: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], off) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                off += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

impl FuseFs for SlowFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Requests up to 1 MiB (KernelConfig's default), and many
        // asynchronous ones in flight.
        config.add_offered(InitFlags::FUSE_ASYNC_DIO);
        let _ = config.set_max_background(128);
        let _ = config.set_congestion_threshold(96);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 != ROOT || name != self.name {
            return reply.error(Errno::ENOENT);
        }
        match self.attr(FILE) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino.0 != ROOT && ino.0 != FILE {
            return reply.error(Errno::ENOENT);
        }
        match self.attr(ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, a: args::Open, reply: ReplyOpen) {
        if ino.0 != FILE {
            return reply.error(Errno::EISDIR);
        }
        let f = a.flags.0;
        let writes = f & libc::O_ACCMODE != libc::O_RDONLY || f & libc::O_TRUNC != 0;
        if writes && !self.rw {
            return reply.error(Errno::EROFS);
        }
        // No page cache above us: every read reaches the slow disk.
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(&self, _: &Request, _ino: INodeNo, a: args::Read, reply: ReplyData) {
        let args::Read { offset, size, .. } = a;
        let delay = self.delay_for(offset, size);
        self.stats.arrive_read(size, !delay.is_zero());
        let (file, stats) = (self.file.clone(), self.stats.clone());
        self.submit(Box::new(move || {
            std::thread::sleep(delay);
            let mut buf = vec![0u8; size as usize];
            match read_full(&file, &mut buf, offset) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(errno(e)),
            }
            stats.done();
        }));
    }

    fn write(&self, _: &Request, _ino: INodeNo, w: args::Write, reply: ReplyWrite) {
        let args::Write { offset, data, .. } = w;
        if !self.rw {
            return reply.error(Errno::EROFS);
        }
        let delay = self.delay_for(offset, data.len() as u32);
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .write_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        let (file, data) = (self.file.clone(), data.to_vec());
        self.submit(Box::new(move || {
            std::thread::sleep(delay);
            match file.write_all_at(&data, offset) {
                Ok(()) => reply.written(data.len() as u32),
                Err(e) => reply.error(errno(e)),
            }
        }));
    }

    fn flush(&self, _: &Request, _ino: INodeNo, _a: args::Flush, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsync(&self, _: &Request, _ino: INodeNo, _a: args::Fsync, reply: ReplyEmpty) {
        if !self.rw {
            return reply.ok();
        }
        match self.file.sync_data() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    /// The root needs no directory handle: readdir lists it from the name.
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(&self, _: &Request, ino: INodeNo, a: args::Readdir, mut reply: ReplyDirectory) {
        if ino.0 != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (ROOT, FileType::Directory, OsStr::new(".")),
            (ROOT, FileType::Directory, OsStr::new("..")),
            (FILE, FileType::RegularFile, self.name.as_os_str()),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(a.offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    /// No space to report: zero blocks (of 512 bytes) and inodes, names up
    /// to 255 bytes (df shows the mount empty, as it always has).
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, 512, 255, 0);
    }
}

/// The signals this program handles, blocked in every thread and taken by
/// one with sigwait.
fn handled_signals() -> libc::sigset_t {
    ubtrfs_fuse::session::signal_set(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1])
}

/// Unmounts `mnt`: umount(2) as root, else fusermount3 -u. With `lazy`
/// (MNT_DETACH, -z), also while busy: for giving up after an error.
fn unmount(mnt: &std::path::Path, lazy: bool) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let c = std::ffi::CString::new(mnt.as_os_str().as_bytes())
            .map_err(|_| "NUL in the mount point".to_string())?;
        let flags = if lazy { libc::MNT_DETACH } else { 0 };
        // SAFETY: a NUL-terminated path.
        if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
            return Ok(());
        }
        return Err(std::io::Error::last_os_error().to_string());
    }
    let ok = std::process::Command::new("fusermount3")
        .arg(if lazy { "-uz" } else { "-u" })
        .arg("--")
        .arg(mnt)
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err("fusermount3 -u failed".into())
    }
}

fn run(a: Args) -> Result<(), String> {
    let file = File::options()
        .read(true)
        .write(a.rw)
        .open(&a.image)
        .map_err(|e| format!("{}: {e}", a.image.display()))?;
    if !file.metadata().map_err(|e| e.to_string())?.is_file() {
        return Err(format!("{}: not a regular file", a.image.display()));
    }
    let name = match a.name {
        Some(n) => n,
        None => a
            .image
            .file_name()
            .ok_or("IMAGE has no file name")?
            .to_os_string(),
    };
    if name.as_bytes().contains(&b'/') || name.is_empty() || name == "." || name == ".." {
        return Err("--name: not a file name".into());
    }
    let mountpoint = a
        .mountpoint
        .canonicalize()
        .map_err(|e| format!("{}: {e}", a.mountpoint.display()))?;

    // Threads made from here on inherit the blocked signals.
    let set = handled_signals();
    // SAFETY: blocking signals in this (only) thread.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };

    let stats = Arc::new(Stats::default());
    let fs = SlowFs {
        file: Arc::new(file),
        name,
        rw: a.rw,
        model: a.model,
        latency: a.latency,
        near: a.near,
        ends: Mutex::new(([u64::MAX; SEQ_STREAMS], 0)),
        stats: stats.clone(),
        queue: Mutex::new(start_workers(a.queue_depth)?),
    };
    let acl = if a.allow_other { Acl::All } else { Acl::Owner };
    let fd = ubtrfs_fuse::proto::mount::mount(
        &mountpoint,
        &a.image.display().to_string(),
        "slowfile",
        !a.rw,
        acl,
        false,
    )
    .map_err(|e| format!("mount {}: {e}", mountpoint.display()))?;
    // From here on an error leaves no mount behind.
    let fail = |e: String| {
        let _ = unmount(&mountpoint, true);
        e
    };
    let session =
        Session::new(fs, fd, acl, false).map_err(|e| fail(format!("FUSE handshake: {e}")))?;
    eprintln!(
        "slowfile: {} on {} latency={:?} model={:?} queue_depth={} near_kb={}",
        a.image.display(),
        mountpoint.display(),
        a.latency,
        a.model,
        a.queue_depth,
        a.near >> 10
    );

    let (st, mnt) = (stats.clone(), mountpoint.clone());
    std::thread::Builder::new()
        .name("slowfile-signals".into())
        .spawn(move || loop {
            let mut sig = 0;
            // SAFETY: waiting on a set of blocked signals.
            if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                continue;
            }
            if sig == libc::SIGUSR1 {
                eprintln!("{}", st.line());
            } else if let Err(e) = unmount(&mnt, false) {
                eprintln!("slowfile: unmount {}: {e}; still serving", mnt.display());
            }
        })
        .map_err(|e| fail(format!("signal thread: {e}")))?;

    // One thread takes requests; the workers wait and read. It returns
    // once the mount is gone.
    let res = session.run_dev(1);
    eprintln!("{}", stats.line());
    res.map_err(|e| fail(format!("serving: {e}")))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("slowfile: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slowfile: {e}");
            ExitCode::FAILURE
        }
    }
}
