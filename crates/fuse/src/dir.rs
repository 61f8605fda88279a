//! Directory listings as FUSE carries them: an [`Entry`], and the
//! READDIR and READDIRPLUS replies behind one [`DirReply`] (the listing
//! itself is [`crate::reads::Mount::list`]); and the read-only mount's
//! opendir.

use crate::file::is_write_open;
use crate::proto::{Errno, FileAttr, FileType, FopenFlags, Generation, INodeNo};
use crate::proto::{ReplyDirectory, ReplyDirectoryPlus, ReplyOpen};
use crate::reads::Mount;
use crate::reply::{OnInode, Reply};
use crate::Inner;
use std::ffi::OsStr;
use std::time::Duration;
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
}
