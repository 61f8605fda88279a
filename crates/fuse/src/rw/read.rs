//! READ on the read-write mount: a small forward read reads a window
//! and pushes what lies past the request into the page cache
//! ([`crate::rw_push`]); atime moves before the answer.

use super::*;
use ubtrfs_engine::vfs::attr::AtimePolicy;

impl RwInner {
    /// A READ of `node`.
    pub(super) fn read_request(self: &Arc<Self>, node: INodeNo, a: args::Read, reply: ReplyData) {
        let (fh, offset, size) = (a.fh.0, a.offset, a.size);
        let id = self.inode(node);
        // The READ's flags are the file's now (fcntl may have changed
        // O_DIRECT since the open): without O_DIRECT, its answer fills
        // the kernel's page cache.
        if a.flags.0 & libc::O_DIRECT == 0 {
            self.pushes.read_cached(id);
        }
        if let Some(ms) = test_read_delay(offset, size) {
            // Test hook: this READ is answered late, from a thread of its
            // own, before any window is counted (it ties up no request
            // thread or ring queue, and pushes nothing).
            let this = self.clone();
            let spawned = std::thread::Builder::new()
                .name("ubtrfs-test-delay".into())
                .spawn(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    match this.fs_read().read(id, offset, size) {
                        Ok(d) => reply.data(&d),
                        Err(e) => reply.error(errno("read", e)),
                    }
                });
            if let Err(e) = spawned {
                logging::error(&format!("read: the test delay's thread: {e}"));
            }
            return;
        }
        // A small forward read reads a window, and what lies past the
        // request is pushed into the page cache (see rw_push).
        let (window, noatime) = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh)
            .filter(|h| h.id == id)
            .map_or((None, false), |h| (h.reads.window(offset, size), h.noatime));
        let window = window.filter(|_| self.pushes.may_push(id));
        // atime moves before the answer, as the kernel's read moves it
        // before read(2) returns: a stat right after the read must see it.
        // Whether it is due comes from the read's own look at the inode.
        let atime = if noatime {
            AtimePolicy::Never
        } else {
            self.atime_policy(false)
        };
        let fs = self.fs_read();
        let res = fs.read_noting_atime(id, offset, size, atime);
        // A failure past the request is not this request's.
        let ahead = window
            .filter(|_| res.is_ok())
            .and_then(|w| fs.read(id, w.start, w.len as u32).ok())
            .filter(|d| !d.is_empty());
        let push = ahead.is_some() && self.pushes.begin(id);
        drop(fs);
        let n = res.as_ref().map_or(0, |(d, _)| d.len());
        if let Some(h) = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&fh)
        {
            h.reads
                .read_to(offset, offset + n as u64, window.filter(|_| push));
            h.atime_unseen = false;
        }
        match res {
            Ok((d, atime_due)) => {
                if atime_due {
                    self.move_atime(id, false);
                }
                reply.data(&d);
                if let (true, Some(w), Some(data)) = (push, window, ahead) {
                    self.pushes.push(id, node.0, w.start, data);
                }
            }
            Err(e) => reply.error(errno("read", e)),
        }
    }
}

/// Test hook `UBTRFS_TEST_READ_DELAY=OFFSET:MS`: a READ whose range holds
/// byte OFFSET is answered MS milliseconds late (tests/tests/rw_mount/io.rs
/// (k) holds a page locked in the kernel with it). None for every other
/// READ, and always without the variable.
fn test_read_delay(offset: u64, size: u32) -> Option<u64> {
    static DELAY: std::sync::OnceLock<Option<(u64, u64)>> = std::sync::OnceLock::new();
    let (at, ms) = (*DELAY.get_or_init(|| {
        let v = std::env::var("UBTRFS_TEST_READ_DELAY").ok()?;
        let (at, ms) = v.split_once(':')?;
        Some((at.parse().ok()?, ms.parse().ok()?))
    }))?;
    (offset <= at && at < offset + size as u64).then_some(ms)
}
