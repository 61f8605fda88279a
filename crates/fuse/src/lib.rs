//! ubtrfs FUSE front end: serves a btrfs image read-only through FUSE.
//!
//! - [`BtrfsFuse`] answers the kernel's requests from an engine
//!   [`Filesystem`] (which is `Sync`). One thread takes requests and
//!   answers the quick ones (lookup, getattr, lseek, xattrs, open); reads
//!   and directory listings run on a worker pool ([`pool`]), so readers of
//!   different files do not wait on each other's disk reads.
//! - Node ids are a pure function of (subvolume, inode) ([`ino`]), so no
//!   lookup counts or inode tables are kept.
//! - Lookup, getattr, readlink, listings, xattrs and statfs are answered
//!   as on the read-write mount ([`reads`], over the engine's `View`);
//!   this mount adds [`attr`] (access), [`dir`] (opendir) and [`mod@file`]
//!   (open, read, lseek). Every answer logs the engine's recovery reports
//!   first and turns engine errors into their errno ([`reply`]), logged
//!   with the inode's path.
//! - Each open file keeps a data map for lseek, a stretch at a time
//!   (`fs::seek`, answered by [`reads::Mount::seek`] as on the read-write
//!   mount: amortized O(1) per call), and a small pool of handles for
//!   reads.
//! - Small forward reads (cp skipping holes) push a read-ahead window into
//!   the kernel's page cache ([`readahead`]).
//! - The image never changes under the mount, so attributes, entries,
//!   directory listings and file pages are cached by the kernel for long.
//! - [`session`] mounts, runs in the background or foreground, and
//!   unmounts cleanly on a signal.

// The docs are written for those who work on the code and link private
// items: `cargo doc --document-private-items` renders them whole.
#![allow(rustdoc::private_intra_doc_links)]

mod attr;
pub mod bind;
mod caps;
mod dir;
mod file;
pub mod fslock;
pub mod ino;
pub mod logging;
mod loopdev;
pub mod options;
pub mod pidfile;
mod pool;
pub mod proto;
mod readahead;
mod reads;
pub mod remount;
mod reply;
pub mod rw;
pub mod rw_push;
pub mod session;
pub mod watchdog;

use crate::file::OpenFile;
use crate::proto::{args, AccessFlags, Errno, FileHandle, INodeNo, InitFlags, OpenFlags};
use crate::proto::{
    KernelConfig, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use reads::{Core, Mount};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;
use ubtrfs_engine::fs::seek::{SeekCache, Versions};
use ubtrfs_engine::fs::view::View;
use ubtrfs_engine::{Filesystem, InodeId};
use ubtrfs_format::consts::FIRST_INODE;

pub use options::MountOptions;

/// The FUSE filesystem over an engine [`Filesystem`].
pub struct BtrfsFuse {
    inner: Arc<Inner>,
    pool: pool::Pool,
}

impl std::ops::Deref for BtrfsFuse {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.inner
    }
}

/// What every request handler shares.
pub struct Inner {
    fs: Arc<Filesystem>,
    core: Core,
    files: RwLock<HashMap<u64, Arc<OpenFile>>>,
    next_fh: AtomicU64,
    /// Subvolume paths from the top level, for log lines.
    subvol_paths: OnceLock<HashMap<u64, Vec<u8>>>,
    /// Pushes read-ahead windows into the kernel's page cache (set once
    /// the session exists).
    notifier: OnceLock<crate::proto::Notifier>,
    /// The one thread that pushes: a push waits for page locks, which
    /// READs in flight hold until the dispatcher or a worker answers them,
    /// so neither of those may be the one waiting.
    storer: pool::Pool,
}

impl BtrfsFuse {
    /// Serves `fs` with `root` (a directory) as the mount's root; reads and
    /// directory listings run on `io_threads` worker threads.
    pub fn new(fs: Arc<Filesystem>, root: InodeId, ttl: Duration, io_threads: usize) -> BtrfsFuse {
        BtrfsFuse {
            inner: Arc::new(Inner {
                core: Core {
                    nodes: ino::Nodes { root },
                    ttl,
                    sectorsize: fs.info.sectorsize,
                    // The image does not change under the mount.
                    negative_entries: true,
                },
                fs,
                files: RwLock::new(HashMap::new()),
                next_fh: AtomicU64::new(1),
                subvol_paths: OnceLock::new(),
                notifier: OnceLock::new(),
                storer: pool::Pool::new("ubtrfs-store", 1),
            }),
            pool: pool::Pool::new("ubtrfs-io", io_threads),
        }
    }

    /// Lets the filesystem push data into the kernel's page cache through
    /// `notifier` (from the session serving it).
    pub fn set_notifier(inner: &Arc<Inner>, notifier: crate::proto::Notifier) {
        let _ = inner.notifier.set(notifier);
    }

    /// The shared state, to hand the session's notifier to later.
    pub fn inner(&self) -> Arc<Inner> {
        self.inner.clone()
    }
}

impl Inner {
    /// The inode behind a FUSE node id.
    fn inode(&self, node: INodeNo) -> InodeId {
        self.core.inode(node)
    }
}

impl Mount for Inner {
    fn core(&self) -> &Core {
        &self.core
    }

    /// The committed filesystem, which is `Sync`: no lock.
    fn view<T>(&self, f: impl FnOnce(&dyn View) -> T) -> T {
        f(&*self.fs)
    }

    /// Reads with `f`; the recovery reports are left to [`Mount::answer`],
    /// which every request of this mount goes through.
    fn reading<T>(&self, f: impl FnOnce(&dyn View) -> T) -> T {
        f(&*self.fs)
    }

    /// The image never changes: every counter stays 0.
    fn versions(&self) -> &Versions {
        static NONE: OnceLock<Versions> = OnceLock::new();
        NONE.get_or_init(Versions::default)
    }

    /// The open file's own cache, under its lock.
    fn with_seek_cache<T>(&self, fh: u64, _id: InodeId, f: impl FnOnce(&mut SeekCache) -> T) -> T {
        match self.open_file(fh) {
            Ok(file) => f(&mut file.seek.lock().unwrap_or_else(|e| e.into_inner())),
            Err(_) => f(&mut SeekCache::default()),
        }
    }

    /// Every request reads the image, the ones outside [`Mount::reading`]
    /// too (open, read, access): their recovery reports are logged here,
    /// once, before the answer.
    fn answer<R: reply::Reply, T>(
        &self,
        op: &str,
        reply: R,
        res: reply::OpResult<T>,
        ok: impl FnOnce(R, T),
    ) {
        reads::log_reports(&self.fs.info);
        reads::answer(self, op, reply, res, ok)
    }

    /// Path of an inode from the top level.
    fn describe(&self, id: InodeId) -> String {
        let subvols = self.subvol_paths.get_or_init(|| {
            self.fs
                .subvolumes()
                .map(|v| v.into_iter().map(|s| (s.id, s.path)).collect())
                .unwrap_or_default()
        });
        let mut path = subvols.get(&id.subvol).cloned().unwrap_or_default();
        let inner = if id.ino == FIRST_INODE {
            Some(Vec::new())
        } else {
            self.fs
                .inode_refs(id)
                .ok()
                .and_then(|r| r.into_iter().next())
                .and_then(|(parent, name)| {
                    let mut p = self.fs.dir_path(id.subvol, parent).ok()?;
                    if !p.is_empty() {
                        p.push(b'/');
                    }
                    p.extend_from_slice(&name);
                    Some(p)
                })
        };
        let where_ = format!("subvolume {} inode {}", id.subvol, id.ino);
        match inner {
            Some(inner) => {
                if !inner.is_empty() {
                    if !path.is_empty() {
                        path.push(b'/');
                    }
                    path.extend_from_slice(&inner);
                }
                format!("/{} ({where_})", String::from_utf8_lossy(&path))
            }
            None => where_,
        }
    }
}

/// Requests go to the op groups: [`attr`], [`dir`], [`mod@file`], and
/// [`reads`] (what both mounts answer alike, xattrs among it);
/// each answers through [`Inner::answer`]. Reads and listings run on the
/// worker pool.
impl crate::proto::FuseFs for BtrfsFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        config.add_offered(
            InitFlags::FUSE_DO_READDIRPLUS
                | InitFlags::FUSE_READDIRPLUS_AUTO
                | InitFlags::FUSE_PARALLEL_DIROPS
                | InitFlags::FUSE_CACHE_SYMLINKS,
        );
        // Readahead as large as the kernel allows; more requests in flight.
        let mut ra = 4 << 20;
        while let Err(max) = config.set_max_readahead(ra) {
            if max == ra {
                break;
            }
            ra = max;
        }
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn lookup(&self, _: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.inner.lookup(parent, name.as_bytes(), reply);
    }

    fn getattr(&self, _: &Request, node: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.inner.getattr(node, reply);
    }

    fn readlink(&self, _: &Request, node: INodeNo, reply: ReplyData) {
        self.inner.readlink(node, reply);
    }

    fn open(&self, _: &Request, node: INodeNo, a: args::Open, reply: ReplyOpen) {
        self.inner.open(node, a.flags.0, reply);
    }

    fn read(&self, _: &Request, _node: INodeNo, a: args::Read, reply: ReplyData) {
        self.read_request(a.fh.0, a.offset, a.size, reply);
    }

    fn release(&self, _: &Request, _node: INodeNo, a: args::Release, reply: ReplyEmpty) {
        self.inner.release(a.fh.0, reply);
    }

    /// Nothing to make durable: the image is never written.
    fn fsync(&self, _: &Request, _node: INodeNo, _a: args::Fsync, reply: ReplyEmpty) {
        reply.ok();
    }

    fn opendir(&self, _: &Request, node: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.inner.opendir(node, flags.0, reply);
    }

    fn readdir(&self, _: &Request, node: INodeNo, a: args::Readdir, reply: ReplyDirectory) {
        let inner = self.inner.clone();
        self.pool
            .run(move || inner.list(node, a.fh.0, a.offset, reply));
    }

    fn readdirplus(&self, _: &Request, node: INodeNo, a: args::Readdir, reply: ReplyDirectoryPlus) {
        let inner = self.inner.clone();
        self.pool
            .run(move || inner.list(node, a.fh.0, a.offset, reply));
    }

    fn fsyncdir(&self, _: &Request, _node: INodeNo, _a: args::Fsync, reply: ReplyEmpty) {
        reply.ok();
    }

    fn statfs(&self, _: &Request, _node: INodeNo, reply: ReplyStatfs) {
        self.inner.statfs(reply);
    }

    fn getxattr(&self, _: &Request, node: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.inner.getxattr(node, name.as_bytes(), size, reply);
    }

    fn listxattr(&self, _: &Request, node: INodeNo, size: u32, reply: ReplyXattr) {
        self.inner.listxattr(node, size, reply);
    }

    fn access(&self, req: &Request, node: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.inner.access(req, node, mask, reply);
    }

    fn lseek(&self, _: &Request, node: INodeNo, a: args::Lseek, reply: ReplyLseek) {
        self.lseek_request(node, a, reply);
    }

    /// Every request that would change the image is answered EROFS by
    /// the dispatcher.
    fn read_only(&self) -> bool {
        true
    }

    fn ioctl(&self, _: &Request, _node: INodeNo, _a: args::Ioctl, reply: ReplyIoctl) {
        reply.error(Errno::ENOTTY);
    }
}
