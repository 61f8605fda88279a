//! fuse-passthrough: the floor of bench/everyday.sh. A FUSE server that
//! serves a directory (on tmpfs) as it is, over the same protocol layer and
//! transports as `ubtrfs mount` (ubtrfs_fuse::proto), asking the kernel
//! for the same features and caching (READDIRPLUS, POSIX ACLs, 1 MiB
//! writes, 1 s attribute and entry timeouts, FLUSH answered ENOSYS). What
//! a step costs through it is what FUSE costs; what ubtrfs takes beyond
//! that is ubtrfs's.
//!
//!   fuse-passthrough [--transport dev|uring] DIR MNT
//!
//! Runs in the foreground until MNT is unmounted. Benchmark only: node ids
//! are the files' inode numbers, FORGET is ignored, and rename, link and
//! mknod are not served.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use ubtrfs_fuse::proto::{
    args, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, OpenFlags,
    TimeOrNow,
};
use ubtrfs_fuse::proto::{
    Acl, FuseFs, KernelConfig, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, Session,
};

const TTL: Duration = Duration::from_secs(1);
/// Node ids are inode numbers moved past FUSE_ROOT_ID (1).
const NODE_BASE: u64 = 1 << 32;

/// A directory handle's entries, read at opendir: name, inode, type.
type Listed = Vec<(Vec<u8>, u64, FileType)>;

struct Pass {
    /// Node id to the path it was last found at.
    paths: RwLock<HashMap<u64, PathBuf>>,
    files: Mutex<HashMap<u64, Arc<File>>>,
    dirs: Mutex<HashMap<u64, Arc<Listed>>>,
    next_fh: AtomicU64,
}

fn errno(e: std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("a path without NUL")
}

fn last_err() -> Errno {
    errno(std::io::Error::last_os_error())
}

fn time(secs: i64, nsecs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nsecs as u64)
    }
}

fn kind(m: &std::fs::Metadata) -> FileType {
    FileType::from_std(m.file_type()).unwrap_or(FileType::RegularFile)
}

impl Pass {
    fn path(&self, node: INodeNo) -> Result<PathBuf, Errno> {
        self.paths
            .read()
            .unwrap()
            .get(&node.0)
            .cloned()
            .ok_or(Errno::ESTALE)
    }

    fn node_of(&self, path: &Path, m: &std::fs::Metadata) -> u64 {
        let root = self.paths.read().unwrap()[&1].clone();
        if path == root {
            return 1;
        }
        let node = NODE_BASE + m.ino();
        self.paths.write().unwrap().insert(node, path.to_path_buf());
        node
    }

    fn attr(&self, path: &Path) -> Result<FileAttr, Errno> {
        let m = std::fs::symlink_metadata(path).map_err(errno)?;
        let node = self.node_of(path, &m);
        Ok(FileAttr {
            ino: INodeNo(node),
            size: m.size(),
            blocks: m.blocks(),
            atime: time(m.atime(), m.atime_nsec()),
            mtime: time(m.mtime(), m.mtime_nsec()),
            ctime: time(m.ctime(), m.ctime_nsec()),
            crtime: time(m.ctime(), m.ctime_nsec()),
            kind: kind(&m),
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            blksize: m.blksize() as u32,
            flags: 0,
        })
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.path(parent)?.join(name))
    }

    /// Answers with the entry at `path` (found or made), or the error.
    fn entry(&self, path: Result<PathBuf, Errno>, reply: ReplyEntry) {
        match path.and_then(|p| self.attr(&p)) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn handle(&self, file: File) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files.lock().unwrap().insert(fh, Arc::new(file));
        FileHandle(fh)
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<File>, Errno> {
        self.files
            .lock()
            .unwrap()
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    fn list<R: Listing>(&self, a: args::Readdir, mut reply: R) {
        let Some(entries) = self.dirs.lock().unwrap().get(&a.fh.0).cloned() else {
            return reply.fail(Errno::EBADF);
        };
        let dir = reply.dir().to_path_buf();
        for (i, (name, ino, kind)) in entries.iter().enumerate().skip(a.offset as usize) {
            if reply.add(self, &dir, name, *ino, *kind, i as u64 + 1) {
                break;
            }
        }
        reply.done();
    }
}

/// READDIR's and READDIRPLUS's replies, for [`Pass::list`].
trait Listing {
    fn dir(&self) -> &Path;
    /// True when full.
    fn add(
        &mut self,
        p: &Pass,
        dir: &Path,
        name: &[u8],
        ino: u64,
        kind: FileType,
        cookie: u64,
    ) -> bool;
    fn done(self);
    fn fail(self, e: Errno);
}

struct Plain(ReplyDirectory, PathBuf);
struct Plus(ReplyDirectoryPlus, PathBuf);

impl Listing for Plain {
    fn dir(&self) -> &Path {
        &self.1
    }
    fn add(&mut self, _: &Pass, _: &Path, name: &[u8], ino: u64, kind: FileType, c: u64) -> bool {
        self.0
            .add(INodeNo(NODE_BASE + ino), c, kind, OsStr::from_bytes(name))
    }
    fn done(self) {
        self.0.ok()
    }
    fn fail(self, e: Errno) {
        self.0.error(e)
    }
}

impl Listing for Plus {
    fn dir(&self) -> &Path {
        &self.1
    }
    fn add(&mut self, p: &Pass, dir: &Path, name: &[u8], _: u64, _: FileType, c: u64) -> bool {
        let path = dir.join(OsStr::from_bytes(name));
        match p.attr(&path) {
            Ok(a) => self
                .0
                .add(a.ino, c, OsStr::from_bytes(name), &TTL, &a, Generation(0)),
            // Gone since opendir: left out.
            Err(_) => false,
        }
    }
    fn done(self) {
        self.0.ok()
    }
    fn fail(self, e: Errno) {
        self.0.error(e)
    }
}

fn set_time(path: &Path, atime: Option<TimeOrNow>, mtime: Option<TimeOrNow>) -> Result<(), Errno> {
    if atime.is_none() && mtime.is_none() {
        return Ok(());
    }
    let ts = |t: Option<TimeOrNow>| match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => {
            let (s, n) = match t.duration_since(UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
                Err(e) => {
                    let d = e.duration();
                    let n = d.subsec_nanos() as i64;
                    if n == 0 {
                        (-(d.as_secs() as i64), 0)
                    } else {
                        (-(d.as_secs() as i64) - 1, 1_000_000_000 - n)
                    }
                }
            };
            libc::timespec {
                tv_sec: s,
                tv_nsec: n,
            }
        }
    };
    let times = [ts(atime), ts(mtime)];
    let c = cpath(path);
    // SAFETY: a NUL-terminated path and two timespecs.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(last_err());
    }
    Ok(())
}

/// An xattr value or list read by `call(buffer, length)` into `size`
/// bytes (0: only its size is asked): (its size, its bytes).
fn xattr_read(
    size: u32,
    call: impl FnOnce(*mut u8, usize) -> libc::ssize_t,
) -> Result<(u32, Vec<u8>), Errno> {
    let mut buf = vec![0u8; size as usize];
    let r = call(buf.as_mut_ptr(), buf.len());
    if r < 0 {
        return Err(last_err());
    }
    buf.truncate(r as usize);
    Ok((r as u32, buf))
}

fn xattr_reply(size: u32, res: Result<(u32, Vec<u8>), Errno>, reply: ReplyXattr) {
    match res {
        Ok((n, _)) if size == 0 => reply.size(n),
        Ok((_, v)) => reply.data(&v),
        Err(e) => reply.error(e),
    }
}

/// Applies the owner the kernel asked for to what a request made (the
/// server runs as root).
fn own(path: &Path, req: &Request) -> Result<(), Errno> {
    std::os::unix::fs::lchown(path, Some(req.uid()), Some(req.gid())).map_err(errno)
}

impl FuseFs for Pass {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        use ubtrfs_fuse::proto::InitFlags;
        // With KernelConfig's defaults (1 MiB writes, asynchronous
        // reads, times to the nanosecond), as ubtrfs's read-write mount.
        config.add_offered(
            InitFlags::FUSE_PARALLEL_DIROPS
                | InitFlags::FUSE_ATOMIC_O_TRUNC
                | InitFlags::FUSE_DO_READDIRPLUS
                | InitFlags::FUSE_READDIRPLUS_AUTO
                | InitFlags::FUSE_POSIX_ACL
                | InitFlags::FUSE_DONT_MASK
                // As ubtrfs's mount: no security.capability lookup before
                // each write. The floor drops no set-ID bits itself (it
                // serves benchmarks, not users).
                | InitFlags::FUSE_HANDLE_KILLPRIV_V2,
        );
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.entry(self.child(parent, name), reply);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.path(ino).and_then(|p| self.attr(&p)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(&self, _: &Request, ino: INodeNo, a: args::Setattr, reply: ReplyAttr) {
        let res = (|| {
            let path = self.path(ino)?;
            if a.uid.is_some() || a.gid.is_some() {
                std::os::unix::fs::lchown(&path, a.uid, a.gid).map_err(errno)?;
            }
            if let Some(mode) = a.mode {
                let c = cpath(&path);
                // SAFETY: a NUL-terminated path.
                if unsafe { libc::chmod(c.as_ptr(), mode & 0o7777) } != 0 {
                    return Err(last_err());
                }
            }
            if let Some(size) = a.size {
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_len(size))
                    .map_err(errno)?;
            }
            set_time(&path, a.atime, a.mtime)?;
            self.attr(&path)
        })();
        match res {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self
            .path(ino)
            .and_then(|p| std::fs::read_link(p).map_err(errno))
        {
            Ok(t) => reply.data(t.as_os_str().as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, a: args::Mkdir, reply: ReplyEntry) {
        let res = self.child(parent, a.name).and_then(|p| {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(a.mode & !a.umask & 0o7777)
                .create(&p)
                .map_err(errno)?;
            own(&p, req)?;
            Ok(p)
        });
        self.entry(res, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.result(
            self.child(parent, name)
                .and_then(|p| std::fs::remove_file(p).map_err(errno)),
        );
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.result(
            self.child(parent, name)
                .and_then(|p| std::fs::remove_dir(p).map_err(errno)),
        );
    }

    fn symlink(&self, req: &Request, dir: INodeNo, name: &OsStr, target: &Path, reply: ReplyEntry) {
        let res = self.child(dir, name).and_then(|p| {
            std::os::unix::fs::symlink(target, &p).map_err(errno)?;
            own(&p, req)?;
            Ok(p)
        });
        self.entry(res, reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, a: args::Open, reply: ReplyOpen) {
        let f = a.flags.0;
        let res = self.path(ino).and_then(|p| {
            let acc = f & libc::O_ACCMODE;
            OpenOptions::new()
                .read(acc != libc::O_WRONLY)
                .write(acc != libc::O_RDONLY)
                .custom_flags(f & (libc::O_TRUNC | libc::O_APPEND | libc::O_DIRECT))
                .open(p)
                .map_err(errno)
        });
        match res {
            Ok(file) => reply.opened(self.handle(file), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(e),
        }
    }

    fn read(&self, _: &Request, _ino: INodeNo, a: args::Read, reply: ReplyData) {
        let args::Read { offset, size, .. } = a;
        let res = self.file(a.fh).and_then(|f| {
            let mut buf = vec![0u8; size as usize];
            let mut n = 0;
            while n < buf.len() {
                match f.read_at(&mut buf[n..], offset + n as u64) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) => return Err(errno(e)),
                }
            }
            buf.truncate(n);
            Ok(buf)
        });
        match res {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn write(&self, _: &Request, _ino: INodeNo, w: args::Write, reply: ReplyWrite) {
        match self
            .file(w.fh)
            .and_then(|f| f.write_all_at(w.data, w.offset).map_err(errno))
        {
            Ok(()) => reply.written(w.data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    // FLUSH: the trait's ENOSYS, as ubtrfs answers it.

    fn release(&self, _: &Request, _ino: INodeNo, a: args::Release, reply: ReplyEmpty) {
        self.files.lock().unwrap().remove(&a.fh.0);
        reply.ok();
    }

    fn fsync(&self, _: &Request, _ino: INodeNo, a: args::Fsync, reply: ReplyEmpty) {
        reply.result(self.file(a.fh).and_then(|f| f.sync_all().map_err(errno)));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let res = self.path(ino).and_then(|p| {
            let mut v = Vec::new();
            for e in std::fs::read_dir(p).map_err(errno)? {
                let e = e.map_err(errno)?;
                let t = e
                    .file_type()
                    .ok()
                    .and_then(FileType::from_std)
                    .unwrap_or(FileType::RegularFile);
                use std::os::unix::fs::DirEntryExt;
                v.push((e.file_name().as_bytes().to_vec(), e.ino(), t));
            }
            Ok(v)
        });
        match res {
            Ok(v) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.dirs.lock().unwrap().insert(fh, Arc::new(v));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _: &Request, ino: INodeNo, a: args::Readdir, reply: ReplyDirectory) {
        match self.path(ino) {
            Ok(p) => self.list(a, Plain(reply, p)),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(&self, _: &Request, ino: INodeNo, a: args::Readdir, reply: ReplyDirectoryPlus) {
        match self.path(ino) {
            Ok(p) => self.list(a, Plus(reply, p)),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(&self, _: &Request, _ino: INodeNo, a: args::Release, reply: ReplyEmpty) {
        self.dirs.lock().unwrap().remove(&a.fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let root = self.paths.read().unwrap()[&1].clone();
        let c = cpath(&root);
        // SAFETY: a zeroed statvfs filled by the call.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
            return reply.error(last_err());
        }
        reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            s.f_namemax as u32,
            s.f_frsize as u32,
        );
    }

    fn setxattr(&self, _: &Request, ino: INodeNo, x: args::Setxattr, reply: ReplyEmpty) {
        let args::Setxattr {
            name, value, flags, ..
        } = x;
        let res = self.path(ino).and_then(|p| {
            let (c, n) = (cpath(&p), cpath(Path::new(name)));
            // SAFETY: NUL-terminated path and name; value and its length.
            let r = unsafe {
                libc::lsetxattr(
                    c.as_ptr(),
                    n.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    flags,
                )
            };
            if r != 0 {
                return Err(last_err());
            }
            Ok(())
        });
        reply.result(res);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let res = self.path(ino).and_then(|p| {
            let (c, n) = (cpath(&p), cpath(Path::new(name)));
            // SAFETY: NUL-terminated path and name; a buffer and its length.
            xattr_read(size, |buf, len| unsafe {
                libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.cast(), len)
            })
        });
        xattr_reply(size, res, reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let res = self.path(ino).and_then(|p| {
            let c = cpath(&p);
            // SAFETY: a NUL-terminated path; a buffer and its length.
            xattr_read(size, |buf, len| unsafe {
                libc::llistxattr(c.as_ptr(), buf.cast(), len)
            })
        });
        xattr_reply(size, res, reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self.path(ino).and_then(|p| {
            let (c, n) = (cpath(&p), cpath(Path::new(name)));
            // SAFETY: NUL-terminated path and name.
            if unsafe { libc::lremovexattr(c.as_ptr(), n.as_ptr()) } != 0 {
                return Err(last_err());
            }
            Ok(())
        });
        reply.result(res);
    }

    fn create(&self, req: &Request, parent: INodeNo, a: args::Create, reply: ReplyCreate) {
        let args::Create {
            name,
            mode,
            umask,
            flags,
        } = a;
        let res = self.child(parent, name).and_then(|p| {
            let acc = flags & libc::O_ACCMODE;
            let f = OpenOptions::new()
                .read(acc != libc::O_WRONLY)
                .write(true)
                .create(true)
                .custom_flags(flags & (libc::O_EXCL | libc::O_TRUNC | libc::O_APPEND))
                .mode(mode & !umask & 0o7777)
                .open(&p)
                .map_err(errno)?;
            own(&p, req)?;
            Ok((p, f))
        });
        match res.and_then(|(p, f)| Ok((self.attr(&p)?, f))) {
            Ok((a, f)) => reply.created(
                &TTL,
                &a,
                Generation(0),
                self.handle(f),
                FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Err(e) => reply.error(e),
        }
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut uring = false;
    if args.first().map(String::as_str) == Some("--transport") && args.len() >= 2 {
        uring = match args[1].as_str() {
            "uring" => true,
            "dev" => false,
            t => die(&format!("--transport {t}: dev or uring")),
        };
        args.drain(..2);
    }
    let [dir, mnt] = &args[..] else {
        die("usage: fuse-passthrough [--transport dev|uring] DIR MNT");
    };
    let root = std::fs::canonicalize(dir).unwrap_or_else(|e| die(&format!("{dir}: {e}")));
    // SAFETY: clearing the umask: modes come masked by the kernel (or not,
    // under FUSE_DONT_MASK, masked here from the request's umask).
    unsafe { libc::umask(0) };
    let fd = ubtrfs_fuse::proto::mount::mount(
        Path::new(mnt),
        "passthrough",
        "passthrough",
        false,
        Acl::All,
        true,
    )
    .unwrap_or_else(|e| die(&format!("mount {mnt}: {e}")));
    let pass = Pass {
        paths: RwLock::new(HashMap::from([(1, root)])),
        files: Mutex::new(HashMap::new()),
        dirs: Mutex::new(HashMap::new()),
        next_fh: AtomicU64::new(1),
    };
    let session =
        Session::new(pass, fd, Acl::All, uring).unwrap_or_else(|e| die(&format!("INIT: {e}")));
    let rings = if session.uring() {
        Some(
            session
                .start_uring()
                .unwrap_or_else(|e| die(&format!("io_uring: {e}"))),
        )
    } else if uring {
        die("--transport uring: the kernel did not offer FUSE over io_uring");
    } else {
        None
    };
    eprintln!(
        "fuse-passthrough: {} on {mnt} over {}",
        dir,
        if rings.is_some() {
            "io_uring"
        } else {
            "/dev/fuse"
        }
    );
    if let Err(e) = session.run_dev(if rings.is_some() { 1 } else { 8 }) {
        die(&format!("serving: {e}"));
    }
    drop(rings);
}

fn die(msg: &str) -> ! {
    eprintln!("fuse-passthrough: {msg}");
    std::process::exit(1)
}
