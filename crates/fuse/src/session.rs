//! Mounting: open the image, pick the root subvolume, mount through FUSE,
//! serve requests until the mount goes away, in the foreground or as a
//! daemon, and unmount on SIGINT/SIGTERM/SIGHUP. Making the mount itself
//! (mount(2) or fusermount3) and undoing it is [`mount`]'s.

mod mount;

pub(crate) use mount::mount_dev;
pub use mount::unmount;
use mount::{is_root, mount_fuse, set_readahead, Mounted, ENABLE_URING};

use crate::fslock::FsLock;
use crate::logging;
use crate::options::{MountOptions, Uring};
use crate::proto::{FuseFs, Session};
use crate::rw::RwFuse;
use crate::watchdog::{self, Watchdog};
use crate::BtrfsFuse;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use ubtrfs_engine::rwfs::RwFs;
use ubtrfs_engine::{ErrorKind, Filesystem, InodeId, OpenOptions};
use ubtrfs_format::consts::{FIRST_INODE, FS_TREE_OBJECTID};

/// What to mount where.
#[derive(Debug, Clone)]
pub struct MountRequest {
    pub image: PathBuf,
    pub devices: Vec<PathBuf>,
    pub cache_bytes: u64,
    pub mountpoint: PathBuf,
    pub options: MountOptions,
    /// Serve in this process instead of detaching a daemon.
    pub foreground: bool,
}

fn canonical(p: &Path, what: &str) -> Result<PathBuf, String> {
    p.canonicalize()
        .map_err(|e| format!("{what} {}: {e}", p.display()))
}

/// The root directory the mount shows: the subvolume chosen with
/// `subvol=` / `subvolid=` (both must agree when both given), else the
/// default subvolume (the top level unless `subvolume set-default` chose
/// another), as the kernel's btrfs.
pub fn mount_root(fs: &Filesystem, o: &MountOptions) -> Result<InodeId, String> {
    let by_path = match &o.subvol {
        None => None,
        Some(p) => {
            let id = fs
                .resolve(p)
                .map_err(|e| format!("subvol={}: {e}", String::from_utf8_lossy(p)))?;
            if id.ino != FIRST_INODE {
                return Err(format!(
                    "subvol={}: not a subvolume",
                    String::from_utf8_lossy(p)
                ));
            }
            Some(id.subvol)
        }
    };
    let by_id = match o.subvolid {
        None => None,
        Some(0) | Some(FS_TREE_OBJECTID) => Some(FS_TREE_OBJECTID),
        Some(id) => {
            let exists = fs
                .subvolumes()
                .map_err(|e| format!("subvolid={id}: {e}"))?
                .iter()
                .any(|s| s.id == id);
            if !exists {
                return Err(format!("subvolid={id}: no such subvolume"));
            }
            Some(id)
        }
    };
    let subvol = match (by_path, by_id) {
        (Some(a), Some(b)) if a != b => {
            return Err(format!(
                "subvol= is subvolume {a} but subvolid={b}: they must name the same one"
            ))
        }
        (Some(a), _) | (None, Some(a)) => a,
        // As the kernel: the default subvolume (`subvolume set-default`).
        (None, None) => fs
            .default_subvol()
            .map_err(|e| format!("the default subvolume: {e}"))?,
    };
    Ok(InodeId {
        subvol,
        ino: FIRST_INODE,
    })
}

/// Mounts and serves until unmounted. In the background (the default) the
/// calling process returns once the mount is ready (or failed) and a
/// detached child serves it.
pub fn run(req: MountRequest) -> Result<(), String> {
    let mut req = req;
    req.image = canonical(&req.image, "image")?;
    let mut devices = Vec::new();
    for d in req.devices.iter().chain(req.options.devices.iter()) {
        devices.push(canonical(d, "device")?);
    }
    req.devices = devices;
    req.mountpoint = canonical(&req.mountpoint, "mount point")?;
    if !req.mountpoint.is_dir() {
        return Err(format!(
            "mount point {}: not a directory",
            req.mountpoint.display()
        ));
    }
    if is_root() && crate::bind::share(&req)? {
        return Ok(());
    }
    if req.foreground {
        return serve(&req, &mut None);
    }
    // Fork before any thread exists; the parent waits for word from the
    // child that the mount is up.
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fresh descriptors from pipe2.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: single-threaded here; the child only continues this code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid > 0 {
        drop(wr);
        let mut msg = String::new();
        let _ = File::from(rd).read_to_string(&mut msg);
        if msg == "ok" {
            return Ok(());
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if msg.is_empty() {
            return Err("the mount process ended before the mount was ready".into());
        }
        return Err(msg);
    }
    drop(rd);
    // SAFETY: plain syscalls in the child.
    unsafe {
        libc::setsid();
    }
    let _ = std::env::set_current_dir("/");
    let mut notify = Some(File::from(wr));
    match serve(&req, &mut notify) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            // After the mount was ready the parent is gone: log instead.
            match notify.take() {
                Some(mut n) => {
                    let _ = n.write_all(e.as_bytes());
                }
                None => logging::error(&e),
            }
            std::process::exit(1)
        }
    }
}

/// Signals that end the mount.
fn stop_signals() -> libc::sigset_t {
    signal_set(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT])
}

/// A set of `signals`, to block in every thread and wait for in one
/// (also bench/slowfile's).
pub fn signal_set(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Opens the image, mounts and serves until the mount goes away. `notify`
/// (taken and closed) gets "ok" once the mount is ready; errors before
/// that are for the caller to send.
fn serve(req: &MountRequest, notify: &mut Option<File>) -> Result<(), String> {
    // Lives until this returns, after the last commit.
    let record =
        crate::pidfile::Record::create(&req.mountpoint, &crate::bind::root_spec(&req.options));
    // Threads made from here on inherit the blocked signals; one thread
    // waits for them.
    let set = stop_signals();
    // SAFETY: blocking signals in this (only) thread.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // Before any thread exists (it forks): aborts the connection if this
    // process is killed with a thread stuck in the kernel.
    let mut watchdog = Watchdog::start();
    let o = &req.options;
    // An unreplayed log tree is replayed in memory: the mount shows what
    // the kernel would after its replay, the image is not written. (The
    // root is found here for the read-write mount too, before anything
    // is written.)
    let open_ro = || {
        let opts = OpenOptions {
            devices: req.devices.clone(),
            cache_bytes: req.cache_bytes,
        };
        if o.nologreplay {
            ubtrfs_engine::tree_log::open_committed(&req.image, &opts)
        } else {
            ubtrfs_engine::tree_log::open_replayed(&req.image, &opts).map(|(fs, _)| fs)
        }
        .map_err(|e| e.to_string())
    };
    let fs = open_ro()?;
    let root = mount_root(&fs, o)?;
    let want_rw = o.rw.unwrap_or_else(|| writable(req));
    if !want_rw && o.rw.is_none() {
        logging::info("the image is not writable: mounting read-only");
    }
    let fs = if want_rw {
        // The reader's claim goes before the writer's is taken.
        drop(fs);
        // Root's fuseblk mount is made before the writer opens the image:
        // the kernel's claim on the device then stands before anything
        // is written (an unreplayed log is replayed at open).
        let pre = if is_root() && o.blkdev {
            Some(mount_fuse(req, true)?)
        } else {
            None
        };
        match open_rw(req) {
            Ok(rw) => {
                if let Some(r) = &record {
                    r.set_writable();
                }
                return serve_rw(req, notify, set, rw, root, &mut watchdog, pre);
            }
            Err(e) => {
                if let Some(m) = pre {
                    m.abandon();
                }
                // Asked for, or another process has the image: no
                // fallback.
                if o.rw.is_some() || e.kind() == ErrorKind::Busy {
                    return Err(format!("{}: {e}", req.image.display()));
                }
                logging::warn(&format!("mounting read-only: {e}"));
            }
        }
        open_ro()?
    } else {
        fs
    };
    let fs = Arc::new(fs);
    let ttl = Duration::from_secs(o.timeout_secs);
    let threads = o.threads.unwrap_or_else(crate::options::default_threads);
    let handler = BtrfsFuse::new(fs, root, ttl, threads);
    let shared = handler.inner();
    // One thread takes requests; the worker pool does the I/O (see pool.rs).
    let on_session = |session: &Session<BtrfsFuse>| {
        BtrfsFuse::set_notifier(&shared, session.notifier());
    };
    let run = Run {
        notify,
        set,
        watchdog: &mut watchdog,
    };
    let mounted = mount_fuse(req, false)?;
    mount_and_run(req, run, handler, mounted, 1, on_session)
}

/// Whether every device of the image can be opened for writing.
fn writable(req: &MountRequest) -> bool {
    std::iter::once(&req.image)
        .chain(req.devices.iter())
        .all(|p| std::fs::OpenOptions::new().write(true).open(p).is_ok())
}

/// Opens the image for writing (the writer refuses what it cannot change
/// safely: a missing device, a block-group tree, ...).
fn open_rw(req: &MountRequest) -> Result<RwFs, ubtrfs_engine::Error> {
    let mut paths = vec![req.image.clone()];
    paths.extend(req.devices.iter().cloned());
    let mut opts = req.options.write.clone();
    // UBTRFS_DIRTY_LIMIT_KB=N: write back everything once N KiB are dirty
    // (tests and benchmarks; 256 MiB by default. The kernel's limit,
    // vm.dirty_bytes, is no mount option either).
    if let Some(kb) = std::env::var("UBTRFS_DIRTY_LIMIT_KB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        opts.dirty_limit = kb.saturating_mul(1024);
    }
    RwFs::open(&paths, req.cache_bytes, opts)
}

/// The read-write mount: the image opened for writing (an unreplayed log
/// replayed and committed first), a thread committing on the commit
/// interval, and a last commit when the mount goes away.
fn serve_rw(
    req: &MountRequest,
    notify: &mut Option<File>,
    set: libc::sigset_t,
    rw: RwFs,
    root: InodeId,
    watchdog: &mut Option<Watchdog>,
    pre: Option<Mounted>,
) -> Result<(), String> {
    let o = &req.options;
    let mounted = match pre {
        Some(m) => m,
        None => mount_fuse(req, true)?,
    };
    let rw = Arc::new(FsLock::new(rw));
    // Attributes change only through this mount, but briefly cached all
    // the same: what the kernel caches it also updates from our replies.
    let ttl = Duration::from_secs(o.timeout_secs.min(1));
    let admin = crate::rw::Admin::new(req.mountpoint.clone(), o.user_subvol_rm_allowed);
    rw.lock_commit().set_shown_subvol(root.subvol);
    let handler = RwFuse::new(rw.clone(), root, ttl, o.acl, o.atime, admin);
    let stop = Arc::new(AtomicBool::new(false));
    crate::remount::follow_ro(req.mountpoint.clone(), handler.remounted_ro(), stop.clone());
    let committer = {
        let rw = rw.clone();
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("ubtrfs-commit".into())
            .spawn(move || {
                loop {
                    // Woken early when the mount ends (`ubtrfs umount`
                    // waits for this process to exit).
                    std::thread::park_timeout(Duration::from_millis(200));
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    // Asked first without waiting for direct writes to
                    // drain: most checks find nothing due.
                    if !rw.lock_shared().commit_due() {
                        continue;
                    }
                    let mut fs = rw.lock_commit();
                    if fs.commit_due() {
                        // The dirty data is written back with the lock let
                        // go, then the commit's thread writes its blocks
                        // and superblock. The commit leaves what was dirtied
                        // meanwhile dirty (files grown since go in at the
                        // size their extents back). A failed writeback
                        // leaves its data dirty and is reported at the
                        // next fsync; the commit is made all the same.
                        let mut since = std::time::Instant::now();
                        if fs.dirty_bytes() > 0 {
                            if let Err(e) = rw.writeback_all(fs) {
                                logging::error(&format!("writeback: {e}"));
                            }
                            fs = rw.lock_commit();
                            if fs.unmounted() {
                                continue;
                            }
                            // The hold counted from here: the flight let
                            // the lock go.
                            since = std::time::Instant::now();
                        }
                        let res = fs.commit_periodic();
                        rw.stats.committed(since.elapsed());
                        if let Err(e) = res {
                            logging::error(&format!("commit: {e}"));
                        }
                    }
                }
            })
            .map_err(|e| format!("commit thread: {e}"))?
    };
    let pushes = handler.pushes_handle();
    let run = Run {
        notify,
        set,
        watchdog,
    };
    let res = mount_and_run(
        req,
        run,
        handler,
        mounted,
        o.threads.unwrap_or(crate::options::RW_DEFAULT_THREADS),
        {
            let pushes = pushes.clone();
            move |session| pushes.set_notifier(session.notifier())
        },
    );
    // The mount is gone: a writer of the image waits for the last commit
    // from here on, rather than refusing.
    rw.lock_shared().mark_ending();
    logging::info(&pushes.summary());
    logging::info(&rw.stats.summary());
    stop.store(true, Ordering::Relaxed);
    committer.thread().unpark();
    let _ = committer.join();
    // The kernel may end the session without DESTROY (a lazy unmount, a
    // dead connection): commit here too (a second commit of nothing
    // writes nothing).
    let last = {
        let mut fs = rw.lock_commit();
        fs.mark_ending();
        // A failed commit (during the mount, or DESTROY's final one)
        // leaves it read-only and not closed: the daemon says so.
        let last = fs.unmount().and_then(|()| match fs.aborted() {
            Some(why) if !fs.unmounted() => Err(ubtrfs_engine::Error::ReadOnly(format!(
                "not made: the filesystem is read-only after a failed commit: {why}"
            ))),
            _ => Ok(()),
        });
        fs.release_claims();
        let (st, ls) = (fs.stats.clone(), fs.log_stats());
        logging::info(&format!(
            "{} commits; fsync: {} by log tree, {} by another's log sync or a commit, {} by commit, {} logged during a log sync; log: {} syncs, {} inodes, {} blocks, {} checksum lookups; {} direct writes in place, at most {} at once; {} writebacks written outside the lock ({} MiB)",
            st.commits, st.log_syncs, st.fsync_batched, st.fsync_commits, st.fsync_logged_in_flight, ls.syncs, ls.inodes, ls.blocks, ls.csum_lookups, st.direct_writes, st.direct_max_in_flight, st.ordered_writebacks, st.ordered_bytes >> 20
        ));
        last
    };
    res?;
    last.map_err(|e| format!("final commit: {e}"))
}

/// What serving a mount carries besides the request and the handler.
struct Run<'a> {
    /// Told "ok" once the mount is ready (the background mount's parent).
    notify: &'a mut Option<File>,
    /// The stop signals, waited for by the signal thread.
    set: libc::sigset_t,
    /// Told the connection once mounted and the end once served.
    watchdog: &'a mut Option<Watchdog>,
}

/// Serves `handler` on the mount made until it is unmounted.
fn mount_and_run<F: FuseFs>(
    req: &MountRequest,
    run: Run,
    handler: F,
    mounted: Mounted,
    threads: usize,
    on_session: impl FnOnce(&Session<F>),
) -> Result<(), String> {
    let o = &req.options;
    let Mounted { fd, unmount, acl } = mounted;
    let is_root = is_root();
    let uring = o.uring;
    let session = match Session::new(handler, fd, acl, uring != Uring::Off) {
        Ok(s) => s,
        Err(e) => {
            unmount.unmount();
            return Err(format!("FUSE handshake: {e}"));
        }
    };
    // FUSE over io_uring when the kernel agreed (see proto::dev_uring).
    // Once agreed, requests wait for the rings: failing to set them up
    // ends the mount.
    let rings = if session.uring() {
        match session.start_uring() {
            Ok(r) => Some(r),
            // A refused REGISTER puts the connection back on /dev/fuse
            // (fc->io_uring = 0, dev_uring.c): serve it there, unless the
            // ring was required.
            Err(e) if uring == Uring::Auto => {
                logging::warn(&format!("FUSE over io_uring: {e}: serving /dev/fuse"));
                None
            }
            Err(e) => {
                // The connection first: a fuseblk unmount would wait for
                // DESTROY's answer.
                drop(session);
                unmount.unmount();
                return Err(format!(
                    "FUSE over io_uring: {e} (-o nouring mounts over /dev/fuse)"
                ));
            }
        }
    } else if uring == Uring::On {
        drop(session);
        unmount.unmount();
        return Err(format!(
            "-o uring: the kernel does not offer FUSE over io_uring (it needs Linux 6.14+ \
                 and {ENABLE_URING} set to Y, which a mount by root does)"
        ));
    } else {
        None
    };
    let transport = match &rings {
        Some(r) => format!("io_uring, {}", r.describe()),
        None => format!("/dev/fuse, {threads} threads"),
    };
    if let Some(w) = run.watchdog.as_mut() {
        match mount_dev(&req.mountpoint).and_then(|d| watchdog::connection_number(&d)) {
            Some(n) => w.connection(n),
            None => logging::warn("the watchdog: the mount's connection not found in mountinfo"),
        }
    }
    if is_root {
        // After the handshake, which sets the window from INIT.
        if let Err(e) = set_readahead(&req.mountpoint, o.readahead_kb) {
            logging::warn(&format!("setting readahead: {e}"));
        }
    }

    on_session(&session);

    // The signal thread: unmount, and the serving threads then see the
    // device close and return.
    let u = unmount.clone();
    let set = run.set;
    std::thread::Builder::new()
        .name("ubtrfs-signals".into())
        .spawn(move || loop {
            let mut sig = 0;
            // SAFETY: waiting on a set of blocked signals.
            if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
                logging::info(&format!("signal {sig}: unmounting"));
                u.unmount();
            }
        })
        .map_err(|e| format!("signal thread: {e}"))?;

    if let Some(mut n) = run.notify.take() {
        if let Some(f) = &o.log_file {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o640)
                .open(f)
                .map_err(|e| format!("log file {}: {e}", f.display()))?;
            logging::to_file(file);
        } else {
            logging::to_syslog();
        }
        detach_stdio();
        let _ = n.write_all(b"ok");
    }
    if let Some(f) = &o.log_file {
        if req.foreground {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(f)
                .map_err(|e| format!("log file {}: {e}", f.display()))?;
            logging::to_file(file);
        }
    }
    logging::info(&format!(
        "mounted {} on {} (FUSE transport: {transport})",
        req.image.display(),
        req.mountpoint.display()
    ));
    // With the rings, /dev/fuse carries only FORGET and INTERRUPT.
    let res = session.run_dev(if rings.is_some() { 1 } else { threads });
    // The connection is gone: a later mount may get its number.
    if let Some(w) = run.watchdog.as_mut() {
        w.end();
    }
    if let Some(r) = &rings {
        let (inline, offloaded) = r.counts();
        logging::info(&format!(
            "io_uring: {inline} requests served on their CPU's queue, {offloaded} by workers"
        ));
    }
    logging::info(&format!("{} unmounted", req.mountpoint.display()));
    res.map_err(|e| format!("serving the mount: {e}"))
}

/// Points stdin, stdout and stderr at /dev/null (a daemon has no terminal).
fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        for fd in 0..3 {
            // SAFETY: duplicating an open descriptor onto 0..2.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}
