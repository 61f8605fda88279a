//! Attributes as FUSE carries them ([`file_attr`]), and the read-only
//! mount's access(2).

use crate::proto::{AccessFlags, Errno, FileAttr, FileType, INodeNo};
use crate::proto::{ReplyAttr, ReplyEmpty, Request};
use crate::reads::Mount;
use crate::reply::OnInode;
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
