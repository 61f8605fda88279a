//! Directories: opendir and the listings. READDIR and READDIRPLUS are one
//! walk ([`Inner::list`]); the PLUS reply also carries each entry's
//! attributes.

use crate::file::is_write_open;
use crate::proto::{Errno, FileAttr, FileType, FopenFlags, Generation, INodeNo};
use crate::proto::{ReplyDirectory, ReplyDirectoryPlus, ReplyOpen};
use crate::reply::{OnInode, OpResult, Reply};
use crate::Inner;
use std::ffi::OsStr;
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;
use ubtrfs_engine::InodeId;
use ubtrfs_format::consts::*;

pub(crate) fn dirent_type(ft: u8) -> FileType {
    match ft {
        FT_DIR => FileType::Directory,
        FT_SYMLINK => FileType::Symlink,
        FT_CHRDEV => FileType::CharDevice,
        FT_BLKDEV => FileType::BlockDevice,
        FT_FIFO => FileType::NamedPipe,
        FT_SOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

/// One entry of a listing.
pub(crate) struct Entry<'a> {
    node: INodeNo,
    /// Where the next call goes on from.
    cookie: u64,
    name: &'a OsStr,
    kind: FileType,
    /// The attributes (READDIRPLUS only).
    attr: Option<(FileAttr, Generation)>,
}

impl<'a> Entry<'a> {
    pub(crate) fn new(
        node: INodeNo,
        cookie: u64,
        name: &'a OsStr,
        kind: FileType,
        attr: Option<(FileAttr, Generation)>,
    ) -> Entry<'a> {
        Entry {
            node,
            cookie,
            name,
            kind,
            attr,
        }
    }
}

/// READDIR's or READDIRPLUS's reply.
pub(crate) trait DirReply: Reply {
    /// The request's name.
    const OP: &'static str;
    /// Whether entries carry attributes.
    const PLUS: bool;
    /// Adds an entry; true when the reply is full (the entry not added).
    fn push(&mut self, e: &Entry, ttl: &Duration) -> bool;
    fn ok(self);
}

impl DirReply for ReplyDirectory {
    const OP: &'static str = "readdir";
    const PLUS: bool = false;
    fn push(&mut self, e: &Entry, _ttl: &Duration) -> bool {
        self.add(e.node, e.cookie, e.kind, e.name)
    }
    fn ok(self) {
        ReplyDirectory::ok(self)
    }
}

impl DirReply for ReplyDirectoryPlus {
    const OP: &'static str = "readdirplus";
    const PLUS: bool = true;
    fn push(&mut self, e: &Entry, ttl: &Duration) -> bool {
        let (attr, generation) = e
            .attr
            .as_ref()
            .expect("READDIRPLUS entry without attributes");
        self.add(e.node, e.cookie, e.name, ttl, attr, *generation)
    }
    fn ok(self) {
        ReplyDirectoryPlus::ok(self)
    }
}

impl Inner {
    pub(crate) fn opendir(&self, node: INodeNo, flags: i32, reply: ReplyOpen) {
        let id = self.inode(node);
        let res = (|| {
            if is_write_open(flags) {
                return Err(Errno::EROFS.into());
            }
            if !self.fs.stat(id).on(id)?.is_dir() {
                return Err(Errno::ENOTDIR.into());
            }
            Ok(())
        })();
        self.answer("opendir", reply, res, |reply, ()| {
            reply.opened(
                crate::proto::FileHandle(0),
                FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR,
            )
        });
    }

    /// The entries of directory `node` after cookie `offset`, as many as
    /// fit. Cookies: 1 after ".", 2 after "..", index + 1 after an entry
    /// (btrfs directory indexes start at 2).
    pub(crate) fn list<R: DirReply>(&self, node: INodeNo, offset: u64, mut reply: R) {
        let dir = self.inode(node);
        let res = self.fill(dir, offset, &mut reply);
        self.answer(R::OP, reply, res, |reply, ()| reply.ok());
    }

    fn fill<R: DirReply>(&self, dir: InodeId, offset: u64, reply: &mut R) -> OpResult<()> {
        // "." and ".." are not looked up by the kernel; their attributes
        // are only filler.
        let (self_ino, dattr) = if R::PLUS {
            let (st, attr) = self.stat_attr(dir)?;
            (attr.ino, Some((attr, Generation(st.generation))))
        } else {
            (INodeNo(self.ino_of(dir)?), None)
        };
        for (cookie, name) in [(1, "."), (2, "..")] {
            let e = Entry {
                node: self_ino,
                cookie,
                name: OsStr::new(name),
                kind: FileType::Directory,
                attr: dattr,
            };
            if offset < cookie && reply.push(&e, &self.ttl) {
                return Ok(());
            }
        }
        let from = if offset < 3 { 0 } else { offset };
        let mut failed = None;
        let mut added = 0usize;
        self.fs
            .for_each_dir_entry(dir, from, |e| {
                let entry = (|| {
                    Ok::<_, crate::reply::Fail>(if R::PLUS {
                        let (st, attr) = self.entry_attr(e.target)?;
                        (attr.ino, Some((attr, Generation(st.generation))))
                    } else {
                        (INodeNo(self.ino_of(e.target)?), None)
                    })
                })();
                let (node, attr) = match entry {
                    Ok(x) => x,
                    Err(f) => {
                        failed = Some(f);
                        return Ok(ControlFlow::Break(()));
                    }
                };
                let entry = Entry {
                    node,
                    cookie: e.index + 1,
                    name: OsStr::from_bytes(&e.name),
                    kind: dirent_type(e.file_type),
                    attr,
                };
                if reply.push(&entry, &self.ttl) {
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
}
