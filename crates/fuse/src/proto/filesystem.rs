//! What a file system served through [`super`] implements: one method per
//! request, named as the `fuser` crate's `Filesystem` trait has them (so
//! the op groups read the same), answering through the [`super::reply`]
//! types. A request with more than a node, a name and one value takes its
//! arguments as one [`super::args`] struct. A method left out answers ENOSYS, which tells the kernel not to
//! ask again where it keeps such a note (no_poll, no_bmap, ...).

use super::args;
use super::reply::*;
use super::types::{AccessFlags, Errno, FileHandle, INodeNo, InitFlags, OpenFlags};
use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

/// Who sent a request.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub(crate) unique: u64,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) pid: u32,
}

impl Request {
    pub fn unique(&self) -> u64 {
        self.unique
    }
    pub fn uid(&self) -> u32 {
        self.uid
    }
    pub fn gid(&self) -> u32 {
        self.gid
    }
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

/// The largest write (and read) we take in one request: our request and
/// ring buffers are sized for it.
pub const MAX_WRITE: u32 = 1 << 20;

/// The size of a page (4 KiB here, 64 KiB on some arm64 and ppc64le).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// The connection parameters INIT answers with; the file system's `init`
/// may change them within what the kernel offered. Asked for unless it
/// says otherwise: asynchronous reads, big writes and as many pages a
/// request as make up [`MAX_WRITE`] (1 MiB writes), and times to the
/// nanosecond.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    pub(crate) offered: InitFlags,
    pub(crate) requested: InitFlags,
    pub(crate) max_readahead: u32,
    pub(crate) kernel_max_readahead: u32,
    pub(crate) max_background: u16,
    pub(crate) congestion_threshold: Option<u16>,
    pub(crate) max_write: u32,
    pub(crate) time_gran: u32,
}

impl KernelConfig {
    pub(crate) fn new(offered: InitFlags, max_readahead: u32) -> KernelConfig {
        let mut requested = InitFlags::FUSE_ASYNC_READ | InitFlags::FUSE_BIG_WRITES;
        if offered.contains(InitFlags::FUSE_MAX_PAGES) {
            requested |= InitFlags::FUSE_MAX_PAGES;
        }
        KernelConfig {
            offered,
            requested,
            max_readahead,
            kernel_max_readahead: max_readahead,
            max_background: 16,
            congestion_threshold: None,
            max_write: MAX_WRITE,
            time_gran: 1,
        }
    }

    /// What the kernel offered.
    pub fn capabilities(&self) -> InitFlags {
        self.offered & !InitFlags::FUSE_INIT_EXT
    }

    /// Asks for those of `flags` the kernel offered; returns them.
    pub fn add_offered(&mut self, flags: InitFlags) -> InitFlags {
        let offered = flags & self.capabilities();
        self.requested |= offered;
        offered
    }

    /// Asks for `flags`; Err with those the kernel did not offer.
    pub fn add_capabilities(&mut self, flags: InitFlags) -> Result<(), InitFlags> {
        let missing = flags - self.offered;
        if !missing.is_empty() {
            return Err(missing);
        }
        self.requested |= flags;
        Ok(())
    }

    pub fn set_max_background(&mut self, n: u16) -> Result<u16, u16> {
        if n == 0 {
            return Err(1);
        }
        Ok(std::mem::replace(&mut self.max_background, n))
    }

    pub fn set_congestion_threshold(&mut self, n: u16) -> Result<u16, u16> {
        if n == 0 {
            return Err(1);
        }
        let old = self.congestion_threshold();
        self.congestion_threshold = Some(n);
        Ok(old)
    }

    /// Err(the nearest allowed value) when out of range.
    pub fn set_max_write(&mut self, n: u32) -> Result<u32, u32> {
        if n == 0 {
            return Err(1);
        }
        if n > MAX_WRITE {
            return Err(MAX_WRITE);
        }
        Ok(std::mem::replace(&mut self.max_write, n))
    }

    pub fn set_max_readahead(&mut self, n: u32) -> Result<u32, u32> {
        if n == 0 {
            return Err(1);
        }
        if n > self.kernel_max_readahead {
            return Err(self.kernel_max_readahead);
        }
        Ok(std::mem::replace(&mut self.max_readahead, n))
    }

    /// The timestamp granularity: a power of ten nanoseconds up to 1 s.
    pub fn set_time_granularity(&mut self, d: Duration) -> Result<Duration, Duration> {
        let ns = d.as_nanos();
        if ns == 0 || ns > 1_000_000_000 {
            return Err(Duration::from_nanos(1));
        }
        let mut p = 1u128;
        while p < ns {
            p *= 10;
        }
        if p != ns {
            return Err(Duration::from_nanos((p / 10) as u64));
        }
        let old = Duration::from_nanos(self.time_gran as u64);
        self.time_gran = ns as u32;
        Ok(old)
    }

    pub(crate) fn congestion_threshold(&self) -> u16 {
        match self.congestion_threshold {
            None => (u32::from(self.max_background) * 3 / 4) as u16,
            Some(n) => n.min(self.max_background),
        }
    }

    /// Pages per request: as many as make up the largest write, so that
    /// a request buffer holds any request (the kernel clamps it to its own
    /// limit, 256 by default).
    pub(crate) fn max_pages(&self) -> u16 {
        (MAX_WRITE as usize / page_size()).clamp(1, 256) as u16
    }
}

pub trait FuseFs: Send + Sync + 'static {
    /// Whether requests that change the filesystem may wait long now (a
    /// writeback in flight): the io_uring transport then serves them on
    /// its workers rather than on the queue thread, which the reads of
    /// the same CPU would wait behind.
    fn busy(&self) -> bool {
        false
    }
    /// Whether the filesystem is read-only for good (the read-only mount):
    /// every request that would change it is answered EROFS before it
    /// reaches a method, as the kernel refuses writes to a read-only
    /// superblock.
    fn read_only(&self) -> bool {
        false
    }
    fn init(&mut self, _req: &Request, _config: &mut KernelConfig) -> std::io::Result<()> {
        Ok(())
    }
    fn destroy(&self) {}
    /// syncfs(2) and sync(1): make everything durable. Nothing to do for
    /// a filesystem that does not write.
    fn syncfs(&self, _req: &Request, reply: ReplyEmpty) {
        reply.ok()
    }
    fn lookup(&self, _: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS)
    }
    fn getattr(&self, _: &Request, _ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        reply.error(Errno::ENOSYS)
    }
    fn setattr(&self, _: &Request, _ino: INodeNo, _a: args::Setattr, reply: ReplyAttr) {
        reply.error(Errno::ENOSYS)
    }
    fn readlink(&self, _: &Request, _ino: INodeNo, reply: ReplyData) {
        reply.error(Errno::ENOSYS)
    }
    fn mknod(&self, _: &Request, _parent: INodeNo, _a: args::Mknod, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS)
    }
    fn mkdir(&self, _: &Request, _parent: INodeNo, _a: args::Mkdir, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS)
    }
    fn unlink(&self, _: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS)
    }
    fn rmdir(&self, _: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS)
    }
    /// A symbolic link in `_parent`: its name, and the path it holds.
    fn symlink(&self, _: &Request, _parent: INodeNo, _: &OsStr, _to: &Path, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS)
    }
    fn rename(&self, _: &Request, _parent: INodeNo, _a: args::Rename, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS)
    }
    /// A new name for `_ino`: the name given, in the directory the second
    /// node is.
    fn link(&self, _: &Request, _ino: INodeNo, _: INodeNo, _: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS)
    }
    fn open(&self, _: &Request, _ino: INodeNo, _a: args::Open, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS)
    }
    fn read(&self, _: &Request, _ino: INodeNo, _a: args::Read, reply: ReplyData) {
        reply.error(Errno::ENOSYS)
    }
    fn write(&self, _: &Request, _ino: INodeNo, _a: args::Write, reply: ReplyWrite) {
        reply.error(Errno::ENOSYS)
    }
    /// Unanswered (ENOSYS) by both mounts: the kernel holds no dirty
    /// data of ours (writes reach us as they are made) and POSIX locks
    /// are its own. ENOSYS tells it so once (fc->no_flush), saving a
    /// round trip at every close.
    fn flush(&self, _: &Request, _ino: INodeNo, _a: args::Flush, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS)
    }
    fn release(&self, _: &Request, _ino: INodeNo, _a: args::Release, reply: ReplyEmpty) {
        reply.ok()
    }
    fn fsync(&self, _: &Request, _ino: INodeNo, _a: args::Fsync, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS)
    }
    fn opendir(&self, _: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS)
    }
    fn readdir(&self, _: &Request, _ino: INodeNo, _a: args::Readdir, reply: ReplyDirectory) {
        reply.error(Errno::ENOSYS)
    }
    fn readdirplus(&self, _: &Request, _ino: INodeNo, _: args::Readdir, reply: ReplyDirectoryPlus) {
        reply.error(Errno::ENOSYS)
    }
    fn releasedir(&self, _: &Request, _ino: INodeNo, _a: args::Release, reply: ReplyEmpty) {
        reply.ok()
    }
    fn fsyncdir(&self, _: &Request, _ino: INodeNo, _a: args::Fsync, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS)
    }
    fn statfs(&self, _: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.error(Errno::ENOSYS)
    }
    fn setxattr(&self, _: &Request, _ino: INodeNo, _a: args::Setxattr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS)
    }
    fn getxattr(&self, _: &Request, _ino: INodeNo, _: &OsStr, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS)
    }
    fn listxattr(&self, _: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS)
    }
    fn removexattr(&self, _: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS)
    }
    fn access(&self, _: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS)
    }
    fn create(&self, _: &Request, _parent: INodeNo, _a: args::Create, reply: ReplyCreate) {
        reply.error(Errno::ENOSYS)
    }
    /// open(O_TMPFILE) in `parent`: a file without a name (`name` is
    /// empty), answered as a CREATE.
    fn tmpfile(&self, _: &Request, _parent: INodeNo, _a: args::Create, reply: ReplyCreate) {
        reply.error(Errno::ENOSYS)
    }
    fn ioctl(&self, _: &Request, _ino: INodeNo, _a: args::Ioctl, reply: ReplyIoctl) {
        reply.error(Errno::ENOSYS)
    }
    fn fallocate(&self, _: &Request, _ino: INodeNo, _a: args::Fallocate, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS)
    }
    fn lseek(&self, _: &Request, _ino: INodeNo, _a: args::Lseek, reply: ReplyLseek) {
        reply.error(Errno::ENOSYS)
    }
    fn copy_file_range(&self, _: &Request, _: INodeNo, _: args::CopyFileRange, reply: ReplyCopy) {
        reply.error(Errno::ENOSYS)
    }
}
