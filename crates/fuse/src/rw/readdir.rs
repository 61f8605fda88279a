//! Directory listings on the read-write mount: READDIR and READDIRPLUS
//! through one walk.

use super::*;

impl RwInner {
    /// The entries of directory `node` after cookie `offset` for READDIR
    /// or READDIRPLUS, as many as fit, up to the index the directory had
    /// when the handle was opened or rewound.
    pub(super) fn list<R: DirReply>(
        &self,
        node: INodeNo,
        fh: crate::proto::FileHandle,
        offset: u64,
        mut reply: R,
    ) {
        let dir = self.inode(node);
        let fs = self.fs_read();
        let end = {
            let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
            match dirs.get_mut(&fh.0) {
                Some(end) if offset == 0 || *end == u64::MAX => {
                    // Opened, or rewound: names made from here on are not
                    // listed.
                    *end = fs.readdir_end(dir).unwrap_or(u64::MAX);
                    *end
                }
                Some(end) => *end,
                None => u64::MAX,
            }
        };
        let entries = match fs.readdir(dir, offset, 512) {
            Ok(entries) => entries,
            Err(e) => {
                drop(fs);
                return reply.error(errno(R::OP, e));
            }
        };
        // Every entry before the one at `added` was added.
        for (added, e) in entries
            .into_iter()
            .take_while(|e| e.cookie <= end)
            .enumerate()
        {
            let n = self.node_of(e.id).unwrap_or(0);
            // The kernel makes no entry of "." and "..": the directory's
            // own attributes are filler for both.
            let of = if e.cookie <= 2 { dir } else { e.id };
            let attr = if R::PLUS {
                match self.entry(&fs, of) {
                    Ok(a) => Some(a),
                    // Entries already added are answered; the failing one
                    // comes first in the next call and fails alone.
                    Err(_) if added > 0 => break,
                    Err(err) => {
                        drop(fs);
                        return reply.error(err);
                    }
                }
            } else {
                None
            };
            let kind = dirent_type(e.file_type);
            let entry = Entry::new(INodeNo(n), e.cookie, OsStr::from_bytes(&e.name), kind, attr);
            if reply.push(&entry, &self.ttl) {
                break;
            }
        }
        drop(fs);
        // Before the answer, as for READ.
        self.accessed(dir, true);
        reply.ok();
    }
}
