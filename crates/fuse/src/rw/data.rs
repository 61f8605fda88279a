//! Writes of file data: buffered writes into the engine's dirty ranges
//! (the writer that passes the dirty limit starts a writeback), O_DIRECT
//! writes in place outside the lock, and retrying a change that ran out
//! of space once pinned space is back.

use super::*;

impl RwInner {
    /// A write into the dirty ranges, beside a writeback in flight; the
    /// one that passes the dirty limit starts a writeback of everything,
    /// its bytes written in the background (one at a time: while one is
    /// in flight, that writer waits for it, as the kernel's
    /// balance_dirty_pages makes writers wait for writeback).
    pub(super) fn buffered_write(
        &self,
        id: InodeId,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, Error> {
        let mut g = self.fs.lock_buffered();
        let n = match g.write_buffered(id, offset, data) {
            Err(e @ Error::NoSpace(_)) => {
                drop(g);
                if !self.space_back() {
                    return Err(e);
                }
                g = self.fs.lock_buffered();
                g.write_buffered(id, offset, data)?
            }
            r => r?,
        };
        if g.over_dirty_limit() {
            if g.in_flight() > 0 {
                drop(g);
                g = self.fs();
                if !g.over_dirty_limit() {
                    return Ok(n);
                }
            }
            if self.fs.commit_waiting() {
                // The commit's thread writes everything back before it
                // commits: writers starting a flight at each one's end
                // could keep it waiting.
                return Ok(n);
            }
            self.fs.writeback_background(g)?;
        }
        Ok(n)
    }

    /// After ENOSPC: commits if that could give space back (space freed
    /// since the last commit is pinned until one, [`RwFs::commit_for_space`]);
    /// whether the request should be tried once more.
    pub(super) fn space_back(&self) -> bool {
        let mut g = self.fs.lock_commit();
        match g.commit_for_space() {
            Ok(again) => again,
            Err(e) => {
                crate::logging::error(&format!("commit for space: {e}"));
                false
            }
        }
    }

    /// `op` on the filesystem held alone, run once more after ENOSPC when
    /// a commit gave space back ([`RwInner::space_back`]): for requests
    /// that may run again after a partial failure (fallocate, clones).
    pub(super) fn with_space<T>(
        &self,
        op: impl Fn(&mut RwFs) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let res = op(&mut self.fs());
        match res {
            Err(Error::NoSpace(_)) if self.space_back() => op(&mut self.fs()),
            r => r,
        }
    }

    /// Writes back the files among `ids` that hold much dirty data
    /// before a request whose own writeback of them holds the lock
    /// (fsync, fallocate, copy_file_range), the bytes written with the
    /// lock let go. A failure leaves the bytes dirty; the request's own
    /// writeback meets it again (fsync reports it).
    pub(super) fn writeback_first(&self, ids: &[InodeId]) {
        const MUCH: u64 = 1 << 20;
        for &id in ids {
            let much = |fs: &RwFs| fs.dirty_of(id).is_some_and(|d| d.bytes() >= MUCH);
            if !much(&self.fs_read()) {
                continue;
            }
            let g = self.fs();
            if much(&g) {
                let _ = self.fs.writeback(g, id);
            }
        }
    }

    /// An O_DIRECT write: in place and outside the lock where the engine
    /// can (see [`ubtrfs_engine::rwfs::direct`]); None if it must be
    /// written as a buffered write.
    pub(super) fn direct_write(
        &self,
        id: InodeId,
        offset: u64,
        data: &[u8],
    ) -> Option<Result<(), Error>> {
        let w = match self
            .fs
            .lock_direct()
            .direct_write_begin(id, offset, data.len())
        {
            Ok(Some(w)) => w,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let res = w.write(data);
        let end = self.fs.end_direct(w, res.is_ok());
        Some(res.and(end))
    }
}
