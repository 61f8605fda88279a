//! Attributes on the read-write mount: the node ids and attributes its
//! answers carry, and the times SETATTR sets.

use super::*;
use crate::proto::TimeOrNow;
use std::time::SystemTime;

/// A time as btrfs stores it: seconds (negative before the epoch) and
/// nanoseconds forward from them, as the kernel sends it.
pub(super) fn timespec(t: SystemTime) -> Timespec {
    let (sec, nsec) = crate::proto::reply::time(t);
    Timespec {
        sec: sec as i64,
        nsec,
    }
}

pub(super) fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(timespec(t)),
    }
}

impl RwInner {
    pub(super) fn node_of(&self, id: InodeId) -> Result<u64, Errno> {
        self.core.nodes.node_of(id)
    }

    pub(super) fn attr(&self, st: &Stat) -> Result<FileAttr, Errno> {
        self.core.attr(st)
    }

    /// Stat and attributes of `id`, for an entry reply.
    pub(super) fn entry(&self, fs: &RwFs, id: InodeId) -> Result<(FileAttr, Generation), Errno> {
        let st = fs.stat(id).map_err(|e| errno("stat", e))?;
        self.core.entry_attr(&st)
    }

    pub(super) fn reply_entry(&self, op: &str, reply: ReplyEntry, res: Result<InodeId, Error>) {
        let fs = self.fs_read();
        match res
            .map_err(|e| errno(op, e))
            .and_then(|id| self.entry(&fs, id))
        {
            Ok((attr, g)) => reply.entry(&self.core.ttl, &attr, g),
            Err(e) => reply.error(e),
        }
    }

    /// The umask a create applies itself: with POSIX ACLs the kernel
    /// leaves the mode unmasked (FUSE_DONT_MASK) for the default ACL to
    /// decide; else it has masked the mode already.
    pub(super) fn umask(&self, umask: u32) -> Option<u32> {
        self.acl.load(Ordering::Relaxed).then_some(umask)
    }

    /// SETATTR of `id`.
    pub(super) fn setattr_as(&self, id: InodeId, a: &SetAttr, reply: ReplyAttr) {
        let res = self.fs().setattr(id, a);
        match res
            .map_err(|e| errno("setattr", e))
            .and_then(|st| self.attr(&st))
        {
            Ok(a) => reply.attr(&self.core.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    /// Drops the kernel's cached attributes of `node` after a change it
    /// did not make through SETATTR (an ioctl's: the new ctime).
    pub(super) fn inval_attr(&self, node: INodeNo) {
        if let Some(n) = self.pushes.notifier() {
            if let Err(e) = n.inval_attr(node) {
                logging::warn(&format!("attributes of node {}: {e}", node.0));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's (-2, 250_000_000) is 1969-12-31 23:59:58.25, 1.75 s
    /// before the epoch (our decoder's reading, proto::dispatch), stored
    /// as the kernel sent it.
    #[test]
    fn setattr_times_before_1970_are_stored_as_the_kernel_sent_them() {
        use std::time::UNIX_EPOCH;
        let decoded = UNIX_EPOCH - Duration::new(1, 750_000_000);
        assert_eq!(
            timespec(decoded),
            Timespec {
                sec: -2,
                nsec: 250_000_000
            }
        );
        let after = UNIX_EPOCH + Duration::new(5, 7);
        assert_eq!(timespec(after), Timespec { sec: 5, nsec: 7 });
    }
}
