//! Extended attributes: getxattr, listxattr.

use crate::proto::ReplyXattr;
use crate::proto::{Errno, INodeNo};
use crate::reply::OnInode;
use crate::Inner;

impl Inner {
    pub(crate) fn getxattr(&self, node: INodeNo, name: &[u8], size: u32, reply: ReplyXattr) {
        let id = self.inode(node);
        let res = self
            .fs
            .xattr(id, name)
            .on(id)
            .and_then(|v| v.ok_or(Errno::ENODATA.into()));
        self.answer("getxattr", reply, res, |reply, v| {
            xattr_reply(reply, &v, size)
        });
    }

    pub(crate) fn listxattr(&self, node: INodeNo, size: u32, reply: ReplyXattr) {
        let id = self.inode(node);
        let res = self.fs.xattrs(id).on(id).map(|list| {
            let mut names = Vec::new();
            for (n, _) in list {
                names.extend_from_slice(&n);
                names.push(0);
            }
            names
        });
        self.answer("listxattr", reply, res, |reply, names| {
            xattr_reply(reply, &names, size)
        });
    }
}

/// The value's size when asked with size 0; ERANGE when it does not fit.
fn xattr_reply(reply: ReplyXattr, v: &[u8], size: u32) {
    if size == 0 {
        reply.size(v.len() as u32)
    } else if v.len() > size as usize {
        reply.error(Errno::ERANGE)
    } else {
        reply.data(v)
    }
}
