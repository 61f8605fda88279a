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
        self.answer("getxattr", reply, res, |reply, v| reply.value(&v, size));
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
            reply.value(&names, size)
        });
    }
}
