//! READ on the read-write mount: a small forward read reads a window
//! and pushes what lies past the request into the page cache, as does an
//! lseek well into what was pushed ([`crate::readahead`], kept coherent
//! with writes by [`crate::rw_push`]); atime moves before the answer.

use super::*;
use crate::readahead::Window;
use ubtrfs_engine::rwfs::attr::AtimePolicy;
use ubtrfs_engine::rwfs::RwFs;

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
            .and_then(|w| self.window_bytes(&fs, id, w));
        let push = ahead.is_some();
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

    /// The bytes of window `w` of `id`, read under `fs` (the mount's lock)
    /// with their push counted ([`Pushes::begin`], in the same section):
    /// None when there is nothing to push.
    fn window_bytes(&self, fs: &RwFs, id: InodeId, w: Window) -> Option<Vec<u8>> {
        let data = fs.read(id, w.start, w.len as u32).ok()?;
        (!data.is_empty() && self.pushes.begin(id)).then_some(data)
    }

    /// An lseek took the reader of handle `fh` to `pos`: the next window,
    /// if one is due, is read and pushed by the read-ahead thread.
    pub(super) fn seeked_to(self: &Arc<Self>, node: INodeNo, fh: u64, pos: u64) {
        let id = self.inode(node);
        // Asked before the handle's window: a window the handle gives is
        // counted as pushed from then on, so it must not be given when it
        // cannot be pushed.
        if !self.pushes.may_push(id) {
            return;
        }
        // The file's size may change meanwhile: a window past its end
        // reads nothing and pushes nothing.
        let w = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&fh)
            .filter(|h| h.id == id)
            .and_then(|h| h.reads.seeked_to(pos, u64::MAX));
        let Some(w) = w else {
            return;
        };
        let this = self.clone();
        self.pushes.read_ahead(move || {
            let fs = this.fs_read();
            let data = this.window_bytes(&fs, id, w);
            drop(fs);
            if let Some(d) = data {
                this.pushes
                    .pushed_after_seek
                    .fetch_add(1, Ordering::Relaxed);
                this.pushes.push(id, node.0, w.start, d);
            }
        });
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
