//! Read-ahead pushed into the kernel's page cache on the read-write mount
//! ([`crate::readahead`] says when and where), kept coherent with the
//! writes. It matters most right after a file was written: a truncate
//! that changes the size drops the file's whole page cache
//! (fuse_do_setattr), and cp of the file then read it a page per round
//! trip.
//!
//! A push must never put older bytes over newer ones. The kernel's page
//! cache only gets bytes the daemon has not seen through a handle that
//! may write (write-through buffered writes, shared mappings, which the
//! kernel writes back when they are unmapped, fuse_vma_close), and a
//! store copies over a page whatever it holds. So, per inode:
//! - a push starts only when no handle that may write is open, decided
//!   under the mount's lock, in the same section that read the bytes
//!   ([`Pushes::begin`]);
//! - opening a handle that may write, or a truncate, first counts itself
//!   as a writer (no push starts from then on) and then waits for the
//!   pushes in flight to land ([`Pushes::writer_begin`]).
//!
//! A push waits for the page locks of READs in flight, which the request
//! threads answer. So no request thread may wait for a push while
//! holding the mount's lock, and a writer that must wait does so on a
//! thread of its own (the caller's choice: [`Pushes::writer_begin`] says
//! whether it must), never leaving the request threads all waiting.
//!
//! `UBTRFS_NO_RW_PUSH=1` turns pushes off (the benchmark's switch).

use crate::pool::Pool;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use ubtrfs_engine::InodeId;

/// Whether pushes are on (read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("UBTRFS_NO_RW_PUSH").is_none_or(|v| v == "0"))
}

#[derive(Default)]
struct Inode {
    /// Open handles that may write, and truncates in progress.
    writers: u32,
    /// Pushes read and not yet landed.
    pushing: u32,
}

impl Inode {
    fn idle(&self) -> bool {
        self.writers == 0 && self.pushing == 0
    }
}

/// Bits of [`CachedSet`].
const CACHED_BITS: usize = 1 << 16;

/// Inodes whose pages the kernel may hold from a READ of ours, as a
/// fixed set of hashed bits: a bit once set stays set (the kernel keeps a
/// file's pages across opens, FOPEN_KEEP_CACHE, and says nothing when it
/// drops them), and two inodes may share a bit. Either way an inode may
/// only be taken for cached when it is not, which costs a needless drop,
/// never the other way round.
struct CachedSet(Box<[AtomicU64]>);

impl CachedSet {
    fn new() -> CachedSet {
        CachedSet((0..CACHED_BITS / 64).map(|_| AtomicU64::new(0)).collect())
    }

    fn bit(id: InodeId) -> (usize, u64) {
        // A multiplicative hash of both numbers; its top 16 bits pick the bit.
        let h = (id.subvol.rotate_left(32) ^ id.ino).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let b = (h >> (64 - CACHED_BITS.trailing_zeros())) as usize;
        (b / 64, 1 << (b % 64))
    }

    fn insert(&self, id: InodeId) {
        let (w, m) = Self::bit(id);
        if self.0[w].load(Ordering::Relaxed) & m == 0 {
            self.0[w].fetch_or(m, Ordering::Relaxed);
        }
    }

    fn may_hold(&self, id: InodeId) -> bool {
        let (w, m) = Self::bit(id);
        self.0[w].load(Ordering::Relaxed) & m != 0
    }
}

/// The per-inode writers and pushes, and the thread that pushes.
pub struct Pushes {
    inodes: Mutex<HashMap<InodeId, Inode>>,
    landed: Condvar,
    notifier: OnceLock<crate::proto::Notifier>,
    /// Inodes the kernel may cache pages of, from READs or pushes.
    cached: CachedSet,
    /// The one thread that pushes (see the module).
    storer: Pool,
    /// The one thread that reads windows ahead after an lseek (not a
    /// request thread: the reader's next requests would wait for it).
    reader: Pool,
    /// Pushes made (of them, windows an lseek asked for), bytes pushed,
    /// writers that waited for pushes.
    pub pushed: AtomicU64,
    pub pushed_after_seek: AtomicU64,
    pub pushed_bytes: AtomicU64,
    pub writer_waits: AtomicU64,
}

impl Default for Pushes {
    fn default() -> Pushes {
        Pushes {
            inodes: Mutex::new(HashMap::new()),
            landed: Condvar::new(),
            notifier: OnceLock::new(),
            cached: CachedSet::new(),
            storer: Pool::new("ubtrfs-store", 1),
            reader: Pool::new("ubtrfs-readahead", 1),
            pushed: AtomicU64::new(0),
            pushed_after_seek: AtomicU64::new(0),
            pushed_bytes: AtomicU64::new(0),
            writer_waits: AtomicU64::new(0),
        }
    }
}

impl Pushes {
    fn inodes(&self) -> std::sync::MutexGuard<'_, HashMap<InodeId, Inode>> {
        self.inodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets pushes go to the kernel through the session's `notifier`.
    pub fn set_notifier(&self, notifier: crate::proto::Notifier) {
        let _ = self.notifier.set(notifier);
    }

    /// The session's notifier, once set (for notifications other than
    /// pushes: [`crate::rw::RwFuse`] shares it).
    pub fn notifier(&self) -> Option<&crate::proto::Notifier> {
        self.notifier.get()
    }

    /// Whether a push of `id` could start now (no handle that may write
    /// is open): asked before reading a window, so that a file with a
    /// writer is not read 4 MiB at a time for nothing. [`Pushes::begin`]
    /// decides.
    pub fn may_push(&self, id: InodeId) -> bool {
        enabled()
            && self.notifier.get().is_some()
            && self.inodes().get(&id).is_none_or(|i| i.writers == 0)
    }

    /// Whether bytes of `id` just read may be pushed: no handle that may
    /// write is open. Called holding the mount's lock, in the section
    /// that read them; true counts a push in flight, which
    /// [`Pushes::push`] then must be given.
    pub fn begin(&self, id: InodeId) -> bool {
        enabled() && self.notifier.get().is_some() && self.count_push(id)
    }

    /// Counts a push of `id` in flight unless a writer is open.
    fn count_push(&self, id: InodeId) -> bool {
        let mut m = self.inodes();
        let i = m.entry(id).or_default();
        if i.writers > 0 {
            return false;
        }
        i.pushing += 1;
        true
    }

    /// Runs `read` on the read-ahead thread: it reads a window, counts its
    /// push ([`Pushes::begin`]) and pushes it.
    pub fn read_ahead(&self, read: impl FnOnce() + Send + 'static) {
        self.reader.run(read);
    }

    /// Pushes `data`, the file's bytes at `start`, on the pushing
    /// thread (node `node`), and counts the push landed after. Errors (the
    /// kernel forgot the inode) only lose the read-ahead.
    pub fn push(self: &Arc<Self>, id: InodeId, node: u64, start: u64, data: Vec<u8>) {
        let this = self.clone();
        self.storer.run(move || {
            if let Some(n) = this.notifier.get() {
                this.pushed.fetch_add(1, Ordering::Relaxed);
                this.pushed_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                n.store_all(crate::proto::INodeNo(node), start, &data);
            }
            this.end(id);
        });
    }

    fn end(&self, id: InodeId) {
        let mut m = self.inodes();
        if let Some(i) = m.get_mut(&id) {
            i.pushing -= 1;
            if i.pushing == 0 {
                if i.idle() {
                    m.remove(&id);
                }
                self.landed.notify_all();
            }
        }
    }

    /// A handle that may write `id` opens, or a truncate begins: no push
    /// starts until [`Pushes::writer_end`]. False if pushes are in
    /// flight: the caller must [`Pushes::wait_landed`] before changing
    /// the file, on a thread that is not a request thread.
    pub fn writer_begin(&self, id: InodeId) -> bool {
        let mut m = self.inodes();
        let i = m.entry(id).or_default();
        i.writers += 1;
        if i.pushing > 0 {
            self.writer_waits.fetch_add(1, Ordering::Relaxed);
        }
        i.pushing == 0
    }

    /// One log line's worth: what was pushed, and who waited for it.
    pub fn summary(&self) -> String {
        format!(
            "read-ahead pushed: {} windows ({} after an lseek), {} MiB; {} writers waited for a push to land",
            self.pushed.load(Ordering::Relaxed),
            self.pushed_after_seek.load(Ordering::Relaxed),
            self.pushed_bytes.load(Ordering::Relaxed) >> 20,
            self.writer_waits.load(Ordering::Relaxed)
        )
    }

    /// Waits until no push of `id` is in flight (after
    /// [`Pushes::writer_begin`]).
    pub fn wait_landed(&self, id: InodeId) {
        let mut m = self.inodes();
        while m.get(&id).is_some_and(|i| i.pushing > 0) {
            m = self.landed.wait(m).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The writer counted by [`Pushes::writer_begin`] is gone.
    pub fn writer_end(&self, id: InodeId) {
        self.count_down(id, |i| &mut i.writers);
    }

    /// A READ of `id` through the page cache (not O_DIRECT) is answered:
    /// the kernel may cache its pages from now on, so a direct write must
    /// drop them ([`Pushes::after_direct_write`]).
    pub fn read_cached(&self, id: InodeId) {
        self.cached.insert(id);
    }

    /// One fewer of the `count` of `id` (its writers); its entry goes
    /// once nothing is counted.
    fn count_down(&self, id: InodeId, count: fn(&mut Inode) -> &mut u32) {
        let mut m = self.inodes();
        if let Some(i) = m.get_mut(&id) {
            let n = count(i);
            *n = n.saturating_sub(1);
            if i.idle() {
                m.remove(&id);
            }
        }
    }

    /// After an O_DIRECT write of `[offset, offset + len)` of `id`
    /// (node `node`): `reply`, once the kernel's cached pages of the
    /// range are dropped if a READ of ours may have filled them.
    ///
    /// The kernel drops those pages before it sends the write, and after
    /// it only for a synchronous write through a handle without
    /// FOPEN_DIRECT_IO. A buffered READ that reaches us between the two
    /// reads the old bytes, which then stay cached over the new ones
    /// (fstests generic/451: aio O_DIRECT writes beside buffered
    /// readers). Whether a buffered handle is open now does not say: the
    /// reader may have read and closed while the write was on its way,
    /// and its pages outlive it (generic/451 failed so, rarely). Dropped
    /// on the pushing thread, which may wait for the page locks of READs
    /// in flight (see the module), in order with the pushes queued
    /// before.
    pub fn after_direct_write(
        self: &Arc<Self>,
        id: InodeId,
        node: u64,
        offset: u64,
        len: u64,
        reply: impl FnOnce() + Send + 'static,
    ) {
        let cached = self.cached.may_hold(id);
        let Some(n) = self.notifier.get().filter(|_| cached && len > 0).cloned() else {
            return reply();
        };
        self.storer.run(move || {
            if let Err(e) = n.inval_range(crate::proto::INodeNo(node), offset, len) {
                if e.raw_os_error() != Some(libc::ENOENT) {
                    crate::logging::error(&format!(
                        "write: dropping cached pages after a direct write: {e}"
                    ));
                }
            }
            reply();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ino: u64) -> InodeId {
        InodeId { subvol: 5, ino }
    }

    #[test]
    fn an_inode_read_through_the_cache_stays_cached() {
        let c = CachedSet::new();
        let ids: Vec<InodeId> = (256..4352)
            .map(id)
            .chain((256..300).map(|subvol| InodeId { subvol, ino: 256 }))
            .collect();
        assert!(ids.iter().all(|&i| !c.may_hold(i)));
        for &i in &ids[..ids.len() / 2] {
            c.insert(i);
        }
        assert!(ids[..ids.len() / 2].iter().all(|&i| c.may_hold(i)));
        // The rest mostly stay out: a shared bit costs a drop, no more.
        let false_hits = ids[ids.len() / 2..]
            .iter()
            .filter(|&&i| c.may_hold(i))
            .count();
        assert!(false_hits < ids.len() / 20, "{false_hits} false hits");
    }

    #[test]
    fn writers_and_pushes_exclude_each_other() {
        let p = Pushes::default();
        // No notifier (no session): nothing is pushed.
        assert!(!p.begin(id(257)));
        assert!(p.count_push(id(257)));
        // A writer that arrives while a push is in flight must wait.
        assert!(!p.writer_begin(id(257)));
        // While it is open no push starts.
        assert!(!p.count_push(id(257)));
        p.end(id(257));
        p.wait_landed(id(257));
        p.writer_end(id(257));
        assert!(p.inodes().is_empty());
        assert!(p.writer_begin(id(258)));
        assert!(!p.count_push(id(258)));
        p.writer_end(id(258));
        assert!(p.count_push(id(258)));
        p.end(id(258));
        assert!(p.inodes().is_empty());
    }
}
