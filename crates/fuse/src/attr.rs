//! Attributes: lookup, getattr, access, statfs.

use crate::proto::{AccessFlags, Errno, FileAttr, FileType, Generation, INodeNo};
use crate::proto::{ReplyAttr, ReplyEmpty, ReplyEntry, ReplyStatfs, Request};
use crate::reply::{OnInode, OpResult};
use crate::Inner;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use ubtrfs_engine::{InodeId, Stat};
use ubtrfs_format::items::Timespec;

pub(crate) fn system_time(t: &Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec.min(999_999_999))
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs())
            + Duration::from_nanos(t.nsec.min(999_999_999) as u64)
    }
}

/// `reply` for `id`'s attributes: without a birth time for the
/// placeholder of a subvolume a snapshot does not hold (the kernel's btrfs
/// has none for it), with one for every inode.
pub(crate) fn birth_of(reply: ReplyAttr, id: InodeId) -> ReplyAttr {
    if id.is_placeholder() {
        reply.without_birth()
    } else {
        reply
    }
}

/// What FUSE shows for `st` as node `node`.
pub(crate) fn file_attr(st: &Stat, node: u64, sectorsize: u32) -> FileAttr {
    let ss = sectorsize as u64;
    FileAttr {
        ino: INodeNo(node),
        size: st.size,
        // As the kernel: allocated bytes rounded up to the sector size.
        blocks: st.nbytes.div_ceil(ss) * ss / 512,
        atime: system_time(&st.atime),
        mtime: system_time(&st.mtime),
        ctime: system_time(&st.ctime),
        crtime: system_time(&st.otime),
        kind: FileType::from_mode(st.mode),
        perm: (st.mode & 0o7777) as u16,
        nlink: st.nlink,
        uid: st.uid,
        gid: st.gid,
        rdev: st.rdev as u32,
        blksize: sectorsize,
        flags: 0,
    }
}

impl Inner {
    pub(crate) fn attr(&self, st: &Stat, node: u64) -> FileAttr {
        file_attr(st, node, self.fs.info.sectorsize)
    }

    /// Attributes with the inode's own number in st_ino (used by lookup,
    /// where the node id is the same number).
    pub(crate) fn stat_attr(&self, id: InodeId) -> OpResult<(Stat, FileAttr)> {
        let st = self.fs.stat(id).on(id)?;
        let attr = self.attr(&st, self.ino_of(id)?);
        Ok((st, attr))
    }

    /// Attributes of the inode an entry names, with its node id in st_ino
    /// (1 for the mount's root).
    pub(crate) fn entry_attr(&self, id: InodeId) -> OpResult<(Stat, FileAttr)> {
        let node = self.node_of(id)?;
        let (st, mut attr) = self.stat_attr(id)?;
        attr.ino = INodeNo(node);
        Ok((st, attr))
    }

    pub(crate) fn lookup(&self, parent: INodeNo, name: &[u8], reply: ReplyEntry) {
        let dir = self.inode(parent);
        let res = (|| match self.fs.lookup(dir, name).on(dir)? {
            Some(e) => self.entry_attr(e.target).map(Some),
            None => Ok(None),
        })();
        self.answer("lookup", reply, res, |reply, found| match found {
            Some((st, attr)) => reply.entry(&self.ttl, &attr, Generation(st.generation)),
            None => {
                // A negative entry the kernel keeps for the timeout.
                let mut attr = self.attr(&empty_stat(), 0);
                attr.ino = INodeNo(0);
                reply.entry(&self.ttl, &attr, Generation(0));
            }
        });
    }

    pub(crate) fn getattr(&self, node: INodeNo, reply: ReplyAttr) {
        let id = self.inode(node);
        let res = self.stat_attr(id);
        let reply = birth_of(reply, id);
        self.answer("getattr", reply, res, |reply, (_, attr)| {
            reply.attr(&self.ttl, &attr)
        });
    }

    pub(crate) fn access(
        &self,
        req: &Request,
        node: INodeNo,
        mask: AccessFlags,
        reply: ReplyEmpty,
    ) {
        let id = self.inode(node);
        let res = (|| {
            let st = self.fs.stat(id).on(id)?;
            if mask.contains(AccessFlags::W_OK) {
                return Err(Errno::EROFS.into());
            }
            if !may_access(req, &st, mask) {
                return Err(Errno::EACCES.into());
            }
            Ok(())
        })();
        self.answer("access", reply, res, |reply, ()| reply.ok());
    }

    pub(crate) fn statfs(&self, reply: ReplyStatfs) {
        let sb = &self.fs.info.sb;
        let bs = self.fs.info.sectorsize as u64;
        let blocks = sb.total_bytes / bs;
        let free = sb.total_bytes.saturating_sub(sb.bytes_used) / bs;
        reply.statfs(blocks, free, free, 0, 0, bs as u32, 255, bs as u32);
    }
}

/// Permission check of `access(2)` for the caller (root passes read
/// and write checks; execute needs some x bit, as in the kernel).
fn may_access(req: &Request, st: &Stat, mask: AccessFlags) -> bool {
    let want = mask.bits() & 0o7;
    if want == 0 {
        return true;
    }
    let mode = st.mode;
    if req.uid() == 0 {
        let x_ok = want & 1 == 0 || st.is_dir() || mode & 0o111 != 0;
        return x_ok;
    }
    let bits = if req.uid() == st.uid {
        (mode >> 6) & 7
    } else if req.gid() == st.gid || in_groups(req.pid(), st.gid) {
        (mode >> 3) & 7
    } else {
        mode & 7
    };
    bits as i32 & want == want
}

/// Whether process `pid` has `gid` among its supplementary groups.
fn in_groups(pid: u32, gid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
    })
}

fn empty_stat() -> Stat {
    Stat::of_inode(InodeId { subvol: 0, ino: 0 }, &Default::default())
}
