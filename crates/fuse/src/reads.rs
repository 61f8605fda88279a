//! The requests both mounts answer alike: lookup, getattr, readlink, the
//! listings (READDIR and READDIRPLUS as one walk), getxattr, listxattr,
//! statfs and lseek's SEEK_DATA/SEEK_HOLE. Each is written once over the
//! engine's [`View`], which the read-only mount's committed filesystem and
//! the read-write mount's running one both implement; what differs
//! between the mounts (how the filesystem is reached, where a listing
//! stops, atime, where an open file keeps its seek cache) is a [`Mount`]
//! hook. Data reads and every change stay with each mount: the read-only
//! one reads on a worker pool with a read-ahead window it answers from
//! (file.rs), the read-write one under its lock with pushes (rw/).

use crate::attr::{birth_of, file_attr};
use crate::dir::{dirent_type, DirReply, Entry};
use crate::ino::Nodes;
use crate::logging;
use crate::proto::{Errno, FileAttr, Generation, INodeNo};
use crate::proto::{ReplyAttr, ReplyData, ReplyEntry, ReplyStatfs, ReplyXattr};
use crate::reply::{engine_errno, Fail, OnInode, OpResult, Reply};
use std::ffi::OsStr;
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;
use ubtrfs_engine::disk_io::FsInfo;
use ubtrfs_engine::fs::seek::{SeekCache, Versions};
use ubtrfs_engine::fs::view::View;
use ubtrfs_engine::{InodeId, Stat};

/// What every mount holds alike.
pub(crate) struct Core {
    pub(crate) nodes: Nodes,
    /// How long the kernel may keep entries and attributes.
    pub(crate) ttl: Duration,
    pub(crate) sectorsize: u32,
    /// Whether a name that is not there is answered as an entry the
    /// kernel keeps for `ttl` (a negative dentry): only where no name can
    /// appear behind the kernel's back (the read-write mount's subvolume
    /// and snapshot ioctls make names the kernel does not see made).
    pub(crate) negative_entries: bool,
}

impl Core {
    /// The inode behind a FUSE node id.
    pub(crate) fn inode(&self, node: INodeNo) -> InodeId {
        self.nodes.inode(node.0)
    }

    /// Attributes as stat(2) shows them: the inode's own number in st_ino
    /// (the mount's root too, whose node id is 1).
    pub(crate) fn attr(&self, st: &Stat) -> Result<FileAttr, Errno> {
        Ok(file_attr(st, Nodes::ino_of(st.id)?, self.sectorsize))
    }

    /// Attributes for an entry reply: its node id in st_ino.
    pub(crate) fn entry_attr(&self, st: &Stat) -> Result<(FileAttr, Generation), Errno> {
        let node = self.nodes.node_of(st.id)?;
        Ok((
            file_attr(st, node, self.sectorsize),
            Generation(st.generation),
        ))
    }
}

/// A mount, as the shared handlers see it.
pub(crate) trait Mount: Sized {
    fn core(&self) -> &Core;

    /// Runs `f` on the filesystem as reads see it (the read-write mount's
    /// lock shared with other readers).
    fn view<T>(&self, f: impl FnOnce(&dyn View) -> T) -> T;

    /// Where `id` is, for a log line.
    fn describe(&self, id: InodeId) -> String;

    /// The cookie a listing of `dir` through handle `fh` stops after, from
    /// `offset`; `now` is where a listing started now would stop.
    fn listing_end(&self, _fh: u64, _offset: u64, _now: impl FnOnce() -> u64) -> u64 {
        u64::MAX
    }

    /// `dir` was listed (before the answer: atime).
    fn listed(&self, _dir: InodeId) {}

    /// The data change counters a seek cache is checked against.
    fn versions(&self) -> &Versions;

    /// Runs `f` on the SEEK_DATA/SEEK_HOLE cache of open file `fh` (of
    /// inode `id`), or on a fresh one.
    fn with_seek_cache<T>(&self, fh: u64, id: InodeId, f: impl FnOnce(&mut SeekCache) -> T) -> T;

    /// Answers request `op` with `res`: `ok` replies with the value, a
    /// failure becomes its errno (damage and I/O errors logged with the
    /// inode's place).
    fn answer<R: Reply, T>(&self, op: &str, reply: R, res: OpResult<T>, ok: impl FnOnce(R, T)) {
        answer(self, op, reply, res, ok)
    }

    /// Reads with `f`, then logs what the engine worked around meanwhile
    /// (bad copies it read past), once the filesystem is let go.
    fn reading<T>(&self, f: impl FnOnce(&dyn View) -> T) -> T {
        let (res, reports) = self.view(|v| (f(v), v.info().take_reports()));
        log_taken(reports);
        res
    }

    fn lookup(&self, parent: INodeNo, name: &[u8], reply: ReplyEntry) {
        let c = self.core();
        let dir = c.inode(parent);
        let res = self.reading(|v| {
            // "." and "..": a file handle's inode the kernel no longer
            // caches (open_by_handle_at, NFS export) is asked for by its
            // node id, and so is its parent (FUSE_EXPORT_SUPPORT).
            let found = match name {
                b"." => v.stat(dir).map(|_| Some(dir)),
                b".." => v.parent(dir).map(Some),
                n => v.lookup(dir, n),
            }
            .on(dir)?;
            match found {
                Some(id) => Ok(Some(c.entry_attr(&v.stat(id).on(id)?)?)),
                None => Ok(None),
            }
        });
        self.answer("lookup", reply, res, |reply, found| match found {
            Some((attr, generation)) => reply.entry(&c.ttl, &attr, generation),
            None if c.negative_entries => {
                let none = Stat::of_inode(InodeId { subvol: 0, ino: 0 }, &Default::default());
                let mut attr = file_attr(&none, 0, c.sectorsize);
                attr.ino = INodeNo(0);
                reply.entry(&c.ttl, &attr, Generation(0));
            }
            None => reply.error(Errno::ENOENT),
        });
    }

    fn getattr(&self, node: INodeNo, reply: ReplyAttr) {
        let c = self.core();
        let id = c.inode(node);
        let res = self.reading(|v| Ok(c.attr(&v.stat(id).on(id)?)?));
        self.answer("getattr", birth_of(reply, id), res, |reply, attr| {
            reply.attr(&c.ttl, &attr)
        });
    }

    fn readlink(&self, node: INodeNo, reply: ReplyData) {
        let id = self.core().inode(node);
        let res = self.reading(|v| v.readlink(id).on(id));
        self.answer("readlink", reply, res, |reply, t| reply.data(&t));
    }

    fn getxattr(&self, node: INodeNo, name: &[u8], size: u32, reply: ReplyXattr) {
        let id = self.core().inode(node);
        let res = self.reading(|v| v.getxattr(id, name).on(id));
        let res = res.and_then(|v| v.ok_or(Errno::ENODATA.into()));
        self.answer("getxattr", reply, res, |reply, v| reply.value(&v, size));
    }

    fn listxattr(&self, node: INodeNo, size: u32, reply: ReplyXattr) {
        let id = self.core().inode(node);
        let res = self.reading(|v| v.listxattr(id).on(id));
        self.answer("listxattr", reply, res, |reply, names| {
            reply.value(&names, size)
        });
    }

    /// lseek(2) with SEEK_DATA or SEEK_HOLE of open file `fh` (the kernel
    /// answers SEEK_SET/CUR/END itself). A cache still current answers
    /// without the filesystem (the read-write mount's walk does not wait
    /// for a commit or another writer).
    fn seek(&self, node: INodeNo, fh: u64, offset: i64, whence: i32) -> OpResult<u64> {
        if whence != libc::SEEK_DATA && whence != libc::SEEK_HOLE {
            return Err(Errno::EINVAL.into());
        }
        let Ok(off) = u64::try_from(offset) else {
            return Err(Errno::ENXIO.into());
        };
        let id = self.core().inode(node);
        let found = self.with_seek_cache(fh, id, |cache| {
            match cache.cached(self.versions(), id, off, whence) {
                Some(o) => Ok(o),
                None => self.reading(|v| v.seek(id, cache, off, whence)),
            }
        });
        found.on(id)?.ok_or(Errno::ENXIO.into())
    }

    fn statfs(&self, reply: ReplyStatfs) {
        let s = self.view(|v| v.statfs());
        reply.statfs(s.blocks, s.bfree, s.bavail, 0, 0, s.bsize, 255, s.bsize);
    }

    /// The entries of directory `node` after cookie `offset`, as many as
    /// fit, up to where [`Mount::listing_end`] says the listing stops.
    fn list<R: DirReply>(&self, node: INodeNo, fh: u64, offset: u64, mut reply: R) {
        let dir = self.core().inode(node);
        let res = self.reading(|v| {
            let end = self.listing_end(fh, offset, || v.list_end(dir).unwrap_or(u64::MAX));
            fill(self.core(), v, dir, offset, end, &mut reply)
        });
        if res.is_ok() {
            self.listed(dir);
        }
        self.answer(R::OP, reply, res, |reply, ()| reply.ok());
    }
}

/// Adds the entries of `dir` after cookie `offset` and up to `end` to
/// `reply` until it is full. The kernel makes no entry of "." and "..":
/// the directory's own attributes are filler for both.
fn fill<R: DirReply>(
    c: &Core,
    v: &dyn View,
    dir: InodeId,
    offset: u64,
    end: u64,
    reply: &mut R,
) -> OpResult<()> {
    let mut failed = None;
    let mut added = 0usize;
    v.list(dir, offset, &mut |e| {
        if e.cookie > end {
            return Ok(ControlFlow::Break(()));
        }
        let of = if e.cookie <= 2 { dir } else { e.id };
        let attrs = (|| -> OpResult<_> {
            let node = if e.cookie <= 2 {
                Nodes::ino_of(e.id)?
            } else {
                c.nodes.node_of(e.id)?
            };
            let attr = if R::PLUS {
                Some(c.entry_attr(&v.stat(of).on(of)?)?)
            } else {
                None
            };
            Ok((node, attr))
        })();
        let (node, attr) = match attrs {
            Ok(x) => x,
            Err(f) => {
                failed = Some(f);
                return Ok(ControlFlow::Break(()));
            }
        };
        let kind = dirent_type(e.file_type);
        let name = OsStr::from_bytes(&e.name);
        let entry = Entry::new(INodeNo(node), e.cookie, name, kind, attr);
        if reply.push(&entry, &c.ttl) {
            return Ok(ControlFlow::Break(()));
        }
        added += 1;
        Ok(ControlFlow::Continue(()))
    })
    .on(dir)?;
    match failed {
        // Entries already added are answered; the failing one comes
        // first in the next call and fails alone.
        Some(_) if added > 0 => Ok(()),
        Some(f) => Err(f),
        None => Ok(()),
    }
}

/// Answers request `op` of mount `m` with `res` (see [`Mount::answer`]).
pub(crate) fn answer<M: Mount, R: Reply, T>(
    m: &M,
    op: &str,
    reply: R,
    res: OpResult<T>,
    ok: impl FnOnce(R, T),
) {
    match res {
        Ok(v) => ok(reply, v),
        Err(f) => reply.error(errno(m, op, f)),
    }
}

/// The errno of a failure of request `op`; damage, I/O errors and what
/// the engine does not support are logged with the inode's place.
pub(crate) fn errno<M: Mount>(m: &M, op: &str, f: Fail) -> Errno {
    match f {
        Fail::Errno(e) => e,
        Fail::Engine(e, id, what) => {
            let op = if what.is_empty() {
                op.to_string()
            } else {
                format!("{op} {what}")
            };
            engine_errno(&op, &e, || format!("{}: ", m.describe(id)))
        }
    }
}

/// Logs what the engine worked around (bad copies it read past), for a
/// mount that reads outside [`Mount::reading`].
pub(crate) fn log_reports(info: &FsInfo) {
    log_taken(info.take_reports());
}

fn log_taken((reports, dropped): (Vec<String>, usize)) {
    for r in reports {
        logging::warn(&r);
    }
    if dropped > 0 {
        logging::warn(&format!("{dropped} more recovery reports not shown"));
    }
}
