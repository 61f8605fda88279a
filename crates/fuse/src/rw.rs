//! The read-write mount: every request answered by the engine's
//! [`RwFs`] (one transaction, delayed allocation), behind one lock.
//!
//! - Node ids are the read-only mount's ([`crate::ino`]): a pure function
//!   of (subvolume, inode).
//! - Each open file keeps its SEEK_DATA/SEEK_HOLE cache (the engine's
//!   [`SeekCache`], answered by [`Mount::seek`] as on the read-only
//!   mount), so a walk of a file costs one map build per change.
//! - The kernel checks permissions (`default_permissions`) from the
//!   attributes we answer; what inode flags forbid (immutable,
//!   append-only) is refused by the engine.
//! - The kernel's writeback cache is off: every write reaches the daemon
//!   at once, so the dirty ranges the engine holds are exactly what has
//!   been written (what SEEK_DATA must see).
//! - A thread commits when the commit interval has passed (or too much
//!   is dirty); fsync writes a log tree (or commits where a log cannot
//!   say it; `UBTRFS_TRACE_FSYNC=1` logs which); unmount commits last.

use crate::fslock::{FsLock, FsRead, FsWrite};
use crate::ino;
use crate::logging;
use crate::proto::{args, Errno, FileAttr, FileHandle, FopenFlags, Generation, INodeNo};
use crate::proto::{
    KernelConfig, ReplyAttr, ReplyCopy, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request,
};
use crate::proto::{OpenFlags, WriteFlags};
use crate::readahead::ReadAhead;
use crate::reads::{Core, Mount};
use crate::rw_push::Pushes;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use ubtrfs_engine::fs::seek::{SeekCache, Versions};
use ubtrfs_engine::fs::view::View;
use ubtrfs_engine::rwfs::attr::{SetAttr, SetTime};
use ubtrfs_engine::rwfs::{FsyncStage, RwFs, RwStats, SyncStep};
use ubtrfs_engine::{Error, InodeId, Stat};
use ubtrfs_format::items::Timespec;

mod access;
mod attr;
mod data;
mod fsync;
mod handles;
mod ioctl;
mod read;
mod scrub;
mod send;
mod subvol;

pub use access::Atime;
use attr::{set_time, timespec};
use handles::{async_direct, Handle};
pub use subvol::Admin;

/// The read-write FUSE filesystem (shared with the threads a request may
/// finish on: see `open` in its [`crate::proto::FuseFs`] impl).
pub struct RwFuse(Arc<RwInner>);

impl std::ops::Deref for RwFuse {
    type Target = RwInner;
    fn deref(&self) -> &RwInner {
        &self.0
    }
}

pub struct RwInner {
    fs: Arc<FsLock>,
    /// The engine's data change counters: an lseek whose file's cache is
    /// current answers without the filesystem's lock.
    versions: Arc<Versions>,
    core: Core,
    handles: Mutex<HashMap<u64, Handle>>,
    /// Open directories: the cookie their listing stops at (set at offset
    /// 0, [`ubtrfs_engine::rwfs::RwFs::readdir_end`]).
    dirs: Mutex<HashMap<u64, u64>>,
    next_fh: AtomicU64,
    /// POSIX ACLs enforced by the kernel and inherited here (`acl`, the
    /// default; `noacl` turns them off).
    acl: AtomicBool,
    /// When reads and listings move atime (the kernel leaves it to us).
    atime: Atime,
    /// The mount was remounted read-only: the kernel refuses writes, and
    /// atime stays ([`crate::remount::follow_ro`] keeps it).
    remounted_ro: Arc<AtomicBool>,
    /// Read-ahead pushed into the kernel's page cache ([`crate::rw_push`]).
    pushes: Arc<Pushes>,
    /// fsyncs waiting for the filesystem lock, and the signal that a log
    /// sync finished: see [`RwInner::fsync_grouped`].
    fsyncs_waiting: AtomicU64,
    log_synced: Condvar,
    /// What the subvolume ioctls need of the mount ([`subvol`]).
    admin: Admin,
}

/// A mechanism that `VAR=1` (any value but 0) in the daemon's environment
/// switches off, read once.
pub(crate) fn env_switch_on(cell: &std::sync::OnceLock<bool>, var: &str) -> bool {
    *cell.get_or_init(|| std::env::var_os(var).is_none_or(|v| v == "0"))
}

/// UBTRFS_NO_KILLPRIV=1: FUSE_HANDLE_KILLPRIV_V2 is not offered, and the
/// kernel drops set-ID bits and asks for security.capability before
/// every write (the benchmark's switch).
fn killpriv() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    env_switch_on(&ON, "UBTRFS_NO_KILLPRIV")
}

/// Whether `VAR=1` (any value but 0) is in the daemon's environment, read
/// once: for what is off unless asked for.
fn env_switch_set(cell: &std::sync::OnceLock<bool>, var: &str) -> bool {
    *cell.get_or_init(|| std::env::var_os(var).is_some_and(|v| v != "0"))
}

/// The errno of an engine error; failures of the image or host logged.
fn errno(op: &str, e: Error) -> Errno {
    crate::reply::engine_errno(op, &e, String::new)
}

impl RwFuse {
    pub fn new(
        fs: Arc<FsLock>,
        root: InodeId,
        ttl: Duration,
        acl: bool,
        atime: Atime,
        admin: Admin,
    ) -> RwFuse {
        let (sectorsize, versions) = {
            let g = fs.lock_shared();
            (g.sectorsize() as u32, g.versions())
        };
        RwFuse(Arc::new(RwInner {
            fs,
            versions,
            core: Core {
                nodes: ino::Nodes { root },
                ttl,
                sectorsize,
                negative_entries: false,
            },
            handles: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            acl: AtomicBool::new(acl),
            atime,
            remounted_ro: Arc::new(AtomicBool::new(false)),
            pushes: Arc::new(Pushes::default()),
            fsyncs_waiting: AtomicU64::new(0),
            log_synced: Condvar::new(),
            admin,
        }))
    }

    /// Runs `then` once the read-ahead pushes of `id` in flight have
    /// landed, on a thread of its own (a request thread must not wait for
    /// a push: see rw_push). If no thread can be made, the reply that
    /// went with `then` is answered EIO as it is dropped, and the writer
    /// stays counted, which only keeps pushes of this file off.
    fn after_pushes_land(
        &self,
        id: InodeId,
        op: &str,
        then: impl FnOnce(&RwInner) + Send + 'static,
    ) {
        let this = self.0.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("ubtrfs-{op}"))
            .spawn(move || {
                this.pushes.wait_landed(id);
                then(&this);
            });
        if let Err(e) = spawned {
            logging::error(&format!("{op}: a thread to wait on: {e}"));
        }
    }

    /// Where read-ahead is pushed from, to be given the session's
    /// notifier once the session exists.
    pub fn pushes_handle(&self) -> Arc<Pushes> {
        self.pushes.clone()
    }
}

impl RwInner {
    /// The filesystem, for a request that may change it.
    fn fs(&self) -> FsWrite<'_> {
        self.fs.lock()
    }

    /// The filesystem, for a request that only reads it: shared with
    /// other readers (direct writes and a log sync may be in flight).
    fn fs_read(&self) -> FsRead<'_> {
        self.fs.lock_shared()
    }

    fn inode(&self, node: INodeNo) -> InodeId {
        self.core.inode(node)
    }

    /// A new inode `name` in `parent` (MKNOD, MKDIR, CREATE), owned by
    /// the caller.
    #[allow(clippy::too_many_arguments)]
    fn make(
        &self,
        fs: &mut FsWrite<'_>,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        rdev: u32,
        umask: u32,
    ) -> Result<InodeId, Error> {
        let owner = (req.uid(), req.gid());
        let dir = self.inode(parent);
        fs.create(
            dir,
            name.as_bytes(),
            mode,
            rdev as u64,
            owner,
            self.umask(umask),
        )
    }

    /// The flag [`crate::remount::follow_ro`] keeps.
    pub fn remounted_ro(&self) -> Arc<AtomicBool> {
        self.remounted_ro.clone()
    }
}

impl crate::proto::FuseFs for RwFuse {
    fn busy(&self) -> bool {
        self.fs.writeback_in_flight()
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        use crate::proto::InitFlags;
        config.add_offered(
            // Not FUSE_ATOMIC_O_TRUNC: with it an open(O_RDONLY|O_TRUNC)
            // reaches us, and we truncate, before the kernel asks whether
            // the file is being executed (ETXTBSY): a running program lost
            // its text and died of SIGBUS. Without it the kernel makes that
            // check, then truncates with a SETATTR.
            InitFlags::FUSE_PARALLEL_DIROPS
                // SETXATTR says when an ACL must clear S_ISGID (the kernel
                // knows the caller's groups and capabilities; we do not).
                | InitFlags::FUSE_SETXATTR_EXT
                | InitFlags::FUSE_EXPORT_SUPPORT
                | InitFlags::FUSE_DO_READDIRPLUS
                | InitFlags::FUSE_READDIRPLUS_AUTO,
        );
        if async_direct() {
            // An io_uring or aio O_DIRECT request goes out as a background
            // request and its submitter moves on (FUSE_ASYNC_DIO); 64 of
            // them may be queued (fio's 4 jobs x iodepth 16), not 16.
            config.add_offered(InitFlags::FUSE_ASYNC_DIO);
            let _ = config.set_max_background(64);
        }
        // A shared mapping of a file opened FOPEN_DIRECT_IO (an O_DIRECT
        // open, see open_flags) is refused (ENODEV) unless the kernel may
        // switch the inode back to page-cache I/O for it, which keeps it
        // coherent with the direct writes.
        config.add_offered(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        if killpriv() {
            // We drop the set-ID bits where the kernel says (WRITE, SETATTR
            // and OPEN flags): the kernel then marks the superblock
            // SB_NOSEC, and a write to a file that has neither set-ID bits
            // nor security xattrs no longer asks for security.capability
            // first (a GETXATTR round trip per write(2)). The kernel still
            // removes that xattr on write, truncate and chown itself.
            config.add_offered(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        }
        if self.acl.load(Ordering::Relaxed) {
            let acl = InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK;
            if config.add_offered(acl) != acl {
                self.acl.store(false, Ordering::Relaxed);
            }
        }
        // 1 MiB writes (the most the protocol layer takes) and times to
        // the nanosecond: KernelConfig's defaults.
        Ok(())
    }

    /// The final commit, and the image let go: a fuseblk mount's
    /// umount(2) waits for this reply, so the next writer finds the image
    /// free.
    fn destroy(&self) {
        let mut fs = self.fs.lock_commit();
        fs.mark_ending();
        if let Err(e) = fs.unmount() {
            logging::error(&format!("final commit: {e}"));
        }
        // Also after a failed commit, which left the mount read-only.
        fs.release_claims();
    }

    /// sync(1) and syncfs(2) (sent to the fuseblk mount): a commit, as the
    /// kernel's btrfs_sync_fs.
    fn syncfs(&self, _req: &Request, reply: ReplyEmpty) {
        match self.fs.lock_commit().sync_fs() {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno("syncfs", e)),
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.0.lookup(parent, name.as_bytes(), reply);
    }

    fn getattr(&self, _: &Request, node: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.0.getattr(node, reply);
    }

    fn setattr(&self, req: &Request, node: INodeNo, set: args::Setattr, reply: ReplyAttr) {
        let id = self.inode(node);
        let a = SetAttr {
            mode: set.mode,
            uid: set.uid,
            gid: set.gid,
            size: set.size,
            atime: set.atime.map(set_time),
            mtime: set.mtime.map(set_time),
            ctime: set.ctime.map(timespec),
            kill_set_ids: self.kill_set_ids(id, req, set.kill_suidgid),
        };
        if set.size.is_none() {
            return self.setattr_as(id, &a, reply);
        }
        // A truncate changes the bytes the page cache holds: counted as
        // a writer while it runs, after read-ahead pushes in flight have
        // landed (on a thread of its own if it must wait: see rw_push).
        if self.pushes.writer_begin(id) {
            self.setattr_as(id, &a, reply);
            self.pushes.writer_end(id);
            return;
        }
        self.after_pushes_land(id, "setattr", move |this| {
            this.setattr_as(id, &a, reply);
            this.pushes.writer_end(id);
        });
    }

    fn readlink(&self, _req: &Request, node: INodeNo, reply: ReplyData) {
        self.0.readlink(node, reply);
    }

    fn mknod(&self, req: &Request, parent: INodeNo, a: args::Mknod, reply: ReplyEntry) {
        let res = self.make(&mut self.fs(), req, parent, a.name, a.mode, a.rdev, a.umask);
        self.reply_entry("mknod", reply, res);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, a: args::Mkdir, reply: ReplyEntry) {
        let mode = 0o040000 | (a.mode & 0o7777);
        let res = self.make(&mut self.fs(), req, parent, a.name, mode, 0, a.umask);
        self.reply_entry("mkdir", reply, res);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self.fs().unlink(self.inode(parent), name.as_bytes());
        reply.result(res.map_err(|e| errno("unlink", e)));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self.fs().rmdir(self.inode(parent), name.as_bytes());
        reply.result(res.map_err(|e| errno("rmdir", e)));
    }

    fn symlink(&self, req: &Request, dir: INodeNo, name: &OsStr, target: &Path, reply: ReplyEntry) {
        let res = self.fs().symlink(
            self.inode(dir),
            name.as_bytes(),
            target.as_os_str().as_bytes(),
            req.uid(),
            req.gid(),
        );
        self.reply_entry("symlink", reply, res);
    }

    fn rename(&self, req: &Request, parent: INodeNo, r: args::Rename, reply: ReplyEmpty) {
        let res = self.fs().rename(
            self.inode(parent),
            r.name.as_bytes(),
            self.inode(r.newparent),
            r.newname.as_bytes(),
            r.flags.bits(),
            (req.uid(), req.gid()),
        );
        reply.result(res.map_err(|e| errno("rename", e)));
    }

    fn link(&self, _: &Request, node: INodeNo, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let id = self.inode(node);
        let res = self
            .fs()
            .link(id, self.inode(parent), name.as_bytes())
            .map(|_| id);
        self.reply_entry("link", reply, res);
    }

    fn open(&self, _: &Request, node: INodeNo, a: args::Open, reply: ReplyOpen) {
        let id = self.inode(node);
        let f = a.flags.0;
        let writing = f & libc::O_ACCMODE != libc::O_RDONLY;
        if writing && !self.pushes.writer_begin(id) {
            // Read-ahead of this file is being pushed into the page
            // cache: the open waits for it to land, on a thread of its
            // own (see rw_push).
            return self
                .after_pushes_land(id, "open", move |this| this.open_as(id, f, true, reply));
        }
        self.open_as(id, f, writing, reply);
    }

    fn read(&self, _: &Request, node: INodeNo, a: args::Read, reply: ReplyData) {
        self.0.read_request(node, a, reply);
    }

    fn write(&self, req: &Request, node: INodeNo, w: args::Write, reply: ReplyWrite) {
        let args::Write {
            fh, offset, data, ..
        } = w;
        let id = self.inode(node);
        let direct = w.flags.0 & libc::O_DIRECT != 0;
        let res = match direct
            .then(|| self.direct_write(id, offset, data))
            .flatten()
        {
            Some(res) => res.map(|()| data.len()),
            None => self.buffered_write(id, offset, data),
        };
        // The kernel says when a direct write's caller lacks CAP_FSETID;
        // on buffered writes it drops only what its own (older) rule
        // says, so a file that had set-ID bits is looked at here.
        // A write from the page cache (FUSE_WRITE_CACHE) is not the
        // caller's: the kernel dropped what it drops when the data was
        // written into the cache.
        let (setid, buffered) = self.handle_write_flags(fh).unwrap_or_default();
        let kill = w.write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID)
            || !w.write_flags.contains(WriteFlags::FUSE_WRITE_CACHE)
                && setid
                && crate::caps::lacks(req.pid(), crate::caps::CAP_FSETID);
        match res {
            Ok(n) => {
                if kill {
                    self.drop_set_ids(id, req);
                }
                if direct && !buffered {
                    self.pushes
                        .after_direct_write(id, node.0, offset, n as u64, move || {
                            reply.written(n as u32)
                        });
                } else if direct {
                    // fcntl can set O_DIRECT on a handle opened without it,
                    // and the kernel copies the file's flags into each
                    // request as it sends it: a write from its page-cache
                    // path, which holds the range's page locks until we
                    // answer, can come flagged O_DIRECT. Dropping those
                    // pages before answering would wait for that answer
                    // (fstests generic/036 hung so): answered first, the
                    // pages dropped after.
                    reply.written(n as u32);
                    self.pushes
                        .after_direct_write(id, node.0, offset, n as u64, || ());
                } else {
                    reply.written(n as u32)
                }
            }
            Err(e) => reply.error(errno("write", e)),
        }
    }

    fn release(&self, _: &Request, node: INodeNo, a: args::Release, reply: ReplyEmpty) {
        let h = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&a.fh.0);
        if let Some(h) = h {
            if h.atime_unseen {
                // Before the answer: a close waits for it on root's
                // fuseblk mount, and a stat after the close sees the atime
                // its open moved.
                self.inval_attr(node);
            }
            if h.writer {
                self.pushes.writer_end(h.id);
            }
            self.closed(h.id, "release");
        }
        reply.ok();
    }

    fn fsync(&self, _: &Request, node: INodeNo, a: args::Fsync, reply: ReplyEmpty) {
        self.sync_node("fsync", node, a.datasync, reply);
    }

    fn opendir(&self, _: &Request, node: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Counted as a file's open: a directory removed while open lives
        // on (nlink 0, fstat works) until its last close.
        let id = self.inode(node);
        self.fs_read().opened(id);
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fh, u64::MAX);
        // The kernel keeps the listing (FOPEN_CACHE_DIR), and the next
        // open reads it again only when the directory changed (its mtime
        // or change counter, which every change through the mount bumps:
        // the mount is the image's one writer) or when atime is due (a
        // listing the cache answers does not reach us, as with files).
        let mut f = FopenFlags::FOPEN_CACHE_DIR;
        if !self.atime_due(id, true) {
            f |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        reply.opened(FileHandle(fh), f);
    }

    fn readdir(&self, _: &Request, node: INodeNo, a: args::Readdir, reply: ReplyDirectory) {
        self.0.list(node, a.fh.0, a.offset, reply);
    }

    /// READDIR with each entry's lookup answer: a walk that stats what it
    /// lists (ls -l, tar, rm -r, find) makes no LOOKUP per entry. The
    /// kernel asks for it at the start of a listing, and after that only
    /// while the entries it gave are being looked up
    /// (FUSE_READDIRPLUS_AUTO).
    fn readdirplus(&self, _: &Request, node: INodeNo, a: args::Readdir, reply: ReplyDirectoryPlus) {
        self.0.list(node, a.fh.0, a.offset, reply);
    }

    fn releasedir(&self, _: &Request, node: INodeNo, a: args::Release, reply: ReplyEmpty) {
        self.dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&a.fh.0);
        self.closed(self.inode(node), "releasedir");
        reply.ok();
    }

    fn fsyncdir(&self, _: &Request, node: INodeNo, a: args::Fsync, reply: ReplyEmpty) {
        self.sync_node("fsyncdir", node, a.datasync, reply);
    }

    fn statfs(&self, _req: &Request, _node: INodeNo, reply: ReplyStatfs) {
        self.0.statfs(reply);
    }

    fn setxattr(&self, _: &Request, node: INodeNo, x: args::Setxattr, reply: ReplyEmpty) {
        let kill_sgid = x.setxattr_flags & crate::proto::abi::FUSE_SETXATTR_ACL_KILL_SGID != 0;
        let res = self.fs().setxattr(
            self.inode(node),
            x.name.as_bytes(),
            x.value,
            x.flags,
            kill_sgid,
        );
        reply.result(res.map_err(|e| errno("setxattr", e)));
    }

    fn getxattr(&self, _req: &Request, node: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.0.getxattr(node, name.as_bytes(), size, reply);
    }

    fn listxattr(&self, _req: &Request, node: INodeNo, size: u32, reply: ReplyXattr) {
        self.0.listxattr(node, size, reply);
    }

    fn removexattr(&self, _req: &Request, node: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = self.fs().removexattr(self.inode(node), name.as_bytes());
        reply.result(res.map_err(|e| errno("removexattr", e)));
    }

    fn create(&self, req: &Request, parent: INodeNo, a: args::Create, reply: ReplyCreate) {
        let mode = if a.mode & 0o170000 == 0 {
            a.mode | 0o100000
        } else {
            a.mode
        };
        let mut fs = self.fs();
        let res = self.make(&mut fs, req, parent, a.name, mode, 0, a.umask);
        self.created("create", fs, res, a.flags, reply);
    }

    fn tmpfile(&self, req: &Request, parent: INodeNo, a: args::Create, reply: ReplyCreate) {
        let dir = self.inode(parent);
        let mut fs = self.fs();
        let res = fs.tmpfile(dir, a.mode, (req.uid(), req.gid()), self.umask(a.umask));
        self.created("tmpfile", fs, res, a.flags, reply);
    }

    fn ioctl(&self, req: &Request, node: INodeNo, io: args::Ioctl, reply: ReplyIoctl) {
        self.ioctl_request(req, node, io.cmd, io.in_data, reply)
    }

    fn fallocate(&self, req: &Request, node: INodeNo, a: args::Fallocate, reply: ReplyEmpty) {
        let id = self.inode(node);
        self.writeback_first(&[id]);
        let res = self.with_space(|fs| fs.fallocate(id, a.offset, a.length, a.mode));
        match res {
            Ok(()) => {
                // The kernel's FUSE dropped the set-user-ID bit already
                // (file_modified), but keeps set-group-ID unless the group
                // may execute; the VFS also drops it for a caller outside
                // the file's group.
                if crate::caps::lacks(req.pid(), crate::caps::CAP_FSETID) {
                    self.drop_set_ids(id, req);
                }
                reply.ok()
            }
            Err(e) => reply.error(errno("fallocate", e)),
        }
    }

    fn lseek(&self, _: &Request, node: INodeNo, a: args::Lseek, reply: ReplyLseek) {
        let res = self.0.seek(node, a.fh.0, a.offset, a.whence);
        self.0.answer("lseek", reply, res, |reply, o| {
            reply.offset(o as i64);
            self.0.seeked_to(node, a.fh.0, o);
        });
    }

    fn copy_file_range(&self, _: &Request, ino: INodeNo, c: args::CopyFileRange, reply: ReplyCopy) {
        let len = c.len.min(u32::MAX as u64 & !0xfff);
        let (src, dst) = (self.inode(ino), self.inode(c.ino_out));
        self.writeback_first(&[src, dst]);
        let res = self.with_space(|fs| fs.copy_range(src, c.offset_in, dst, c.offset_out, len));
        match res {
            Ok(n) => reply.copied(n),
            Err(e) => reply.error(errno("copy_file_range", e)),
        }
    }
}

impl Mount for RwInner {
    fn core(&self) -> &Core {
        &self.core
    }

    /// The running filesystem, shared with other readers.
    fn view<T>(&self, f: impl FnOnce(&dyn View) -> T) -> T {
        f(&*self.fs_read())
    }

    fn describe(&self, id: InodeId) -> String {
        format!("subvolume {} inode {}", id.subvol, id.ino)
    }

    /// Up to the index the directory had when the handle was opened or
    /// rewound (offset 0): names made during the listing are not listed.
    fn listing_end(&self, fh: u64, offset: u64, now: impl FnOnce() -> u64) -> u64 {
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        match dirs.get_mut(&fh) {
            Some(end) if offset == 0 || *end == u64::MAX => {
                *end = now();
                *end
            }
            Some(end) => *end,
            None => u64::MAX,
        }
    }

    /// atime moves before the answer, as for READ.
    fn listed(&self, dir: InodeId) {
        self.accessed(dir, true);
    }

    fn versions(&self) -> &Versions {
        &self.versions
    }

    /// The handles' lock is held throughout: the handle's cache is its
    /// own.
    fn with_seek_cache<T>(&self, fh: u64, id: InodeId, f: impl FnOnce(&mut SeekCache) -> T) -> T {
        let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        match handles.get_mut(&fh) {
            Some(h) if h.id == id => f(&mut h.seek),
            _ => f(&mut SeekCache::default()),
        }
    }
}
