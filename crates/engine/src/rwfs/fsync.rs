//! fsync(2) on the mount, as the kernel's btrfs_sync_file: the file's
//! dirty data written back, the file logged in a log tree
//! ([`crate::tree_log::write`]) whose superblock makes it survive a crash
//! without a commit, or a commit where a log cannot say it. Concurrent
//! fsyncs share one log sync: each logs its file ([`RwFs::fsync_log`]),
//! and one writes the log for all ([`RwFs::fsync_sync_begin`], with its
//! flushes outside the mount's lock, then [`RwFs::fsync_sync_end`]).

use super::{FsyncStage, LogSyncWrite, RwFs, SyncStep};
use crate::error::{Error, Result};
use crate::fs::InodeId;

impl RwFs {
    /// fsync(2) (the kernel's btrfs_sync_file): the file's dirty data is
    /// written back and the file logged in a log tree, whose superblock
    /// makes it survive a crash without a commit; where a log cannot
    /// express the file's changes (see [`crate::tree_log::write`]), or with
    /// `notreelog`, everything is committed. Nothing is written when
    /// nothing changed since the last commit. A writeback that failed
    /// since the last fsync is reported.
    pub fn fsync(&mut self, id: InodeId) -> Result<()> {
        match self.fsync_log(id)? {
            FsyncStage::Durable => Ok(()),
            FsyncStage::Logged(n) => self.fsync_sync(n),
            FsyncStage::Commit(why) => self.fsync_fallback(why),
        }
    }

    /// fsync's first half: writes back `id`'s data and puts the file in
    /// the in-memory log (or commits where a log cannot say it). A caller
    /// serving concurrent fsyncs lets the others log their files before
    /// calling [`RwFs::fsync_sync`], so one log sync serves them all (the
    /// kernel batches fsyncs into one log commit the same way).
    ///
    /// While another fsync's log sync is in flight this logs into the log
    /// that the next sync writes (the kernel's fsync joins the next log
    /// transaction while one commits), and answers
    /// [`FsyncStage::Commit`] where it would commit.
    pub fn fsync_log(&mut self, id: InodeId) -> Result<FsyncStage> {
        self.take_wb_error()?;
        if self.final_commit_has_all() {
            return Ok(FsyncStage::Durable);
        }
        self.check_mounted()?;
        if self.aborted.is_some() {
            return self.fsync_commit_or_defer("the filesystem is read-only".into());
        }
        if !self.dirty.contains_key(&id) && !self.changed() {
            // The last commit has it: on disk once its superblock is.
            self.wait_committed()?;
            return Ok(FsyncStage::Durable);
        }
        if self.opts.notreelog {
            return self.fsync_commit_or_defer("notreelog".into());
        }
        if self.log_sync_in_flight {
            self.stats.fsync_logged_in_flight += 1;
        }
        self.writeback(id)?;
        let renamed = &self.renamed;
        let is_renamed = |ino: u64| {
            renamed.contains(&InodeId {
                subvol: id.subvol,
                ino,
            })
        };
        match self
            .log
            .log_file(&mut self.t, id.subvol, id.ino, &is_renamed)
        {
            Ok(Ok(())) => {
                self.log_seq += 1;
                Ok(FsyncStage::Logged(self.log_seq))
            }
            Ok(Err(why)) => self.fsync_commit_or_defer(why.into()),
            Err(e) => self.fsync_commit_or_defer(format!("logging the file failed: {e}")),
        }
    }

    /// An fsync that a commit must answer: made now, or left to the caller
    /// while a log sync is in flight.
    fn fsync_commit_or_defer(&mut self, why: String) -> Result<FsyncStage> {
        if self.log_sync_in_flight {
            self.commit_owed = Some(why.clone());
            return Ok(FsyncStage::Commit(why));
        }
        self.fsync_commit(why)
    }

    /// Whether the file logged as number `n` is durable.
    pub fn fsync_durable(&self, n: u64) -> bool {
        self.durable_seq >= n
    }

    /// fsync's second half: unless an earlier log sync or commit already
    /// covered it, writes the log (every file logged so far) and its
    /// superblock. A log that cannot be written falls back to a commit (a
    /// commit may still succeed, else it turns the mount read-only).
    pub fn fsync_sync(&mut self, n: u64) -> Result<()> {
        match self.fsync_sync_begin(n)? {
            SyncStep::Done => Ok(()),
            SyncStep::Write(w) => {
                let res = w.write();
                match self.fsync_sync_end(w, res) {
                    Ok(()) => Ok(()),
                    Err(why) => self.fsync_fallback(why),
                }
            }
        }
    }

    /// [`RwFs::fsync_sync`] in three steps, so that the disk's flushes
    /// need not hold the caller's lock: this one, under it, answers when
    /// an earlier log sync or a commit covered `n`, or writes the log's
    /// blocks and returns the superblock write to make
    /// ([`LogSyncWrite::write`], without the lock), after which
    /// [`RwFs::fsync_sync_end`] (under it again) settles. While that write
    /// is in flight nothing may commit or begin another log sync
    /// ([`RwFs::log_sync_in_flight`]); every other change may go on.
    pub fn fsync_sync_begin(&mut self, n: u64) -> Result<SyncStep> {
        if self.fsync_durable(n) {
            // A log sync or a commit covered it; a periodic commit's
            // superblock may still be on its way.
            self.wait_committed()?;
            self.stats.fsync_batched += 1;
            return Ok(SyncStep::Done);
        }
        self.check_mounted()?;
        // A commit failed since this file was logged (another fsync's, or
        // the commit thread's): nothing more is written, the error says so.
        if self.aborted.is_some() {
            return self.commit().map(|()| SyncStep::Done);
        }
        if self.log_sync_in_flight {
            return Err(Error::Invalid(
                "a log sync while another is in flight".into(),
            ));
        }
        if let Some(why) = self.commit_owed.clone() {
            // An fsync logged during the last sync may have left its file
            // half in the log: a commit answers instead.
            return self.fsync_commit(why).map(|_| SyncStep::Done);
        }
        let upto = self.log_seq;
        match self.log.sync_begin(&mut self.t) {
            Ok(Ok(None)) => {
                self.stats.log_syncs += 1;
                self.durable_seq = upto;
                Ok(SyncStep::Done)
            }
            Ok(Ok(Some(sync))) => {
                self.log_sync_in_flight = true;
                Ok(SyncStep::Write(LogSyncWrite { sync, upto }))
            }
            Ok(Err(why)) => self.fsync_commit(why.into()).map(|_| SyncStep::Done),
            Err(e) => self
                .fsync_commit(format!("writing the log failed: {e}"))
                .map(|_| SyncStep::Done),
        }
    }

    /// After [`LogSyncWrite::write`] returned `res`: Ok when the log is
    /// durable (every fsync logged before it is answered); else why not,
    /// for [`RwFs::fsync_fallback`].
    pub fn fsync_sync_end(
        &mut self,
        w: LogSyncWrite,
        res: Result<()>,
    ) -> std::result::Result<(), String> {
        self.log_sync_in_flight = false;
        self.log.sync_end(&mut self.t, w.sync, res.is_ok());
        match res {
            Ok(()) => {
                self.stats.log_syncs += 1;
                self.durable_seq = self.durable_seq.max(w.upto);
                Ok(())
            }
            Err(e) => Err(format!("writing the log failed: {e}")),
        }
    }

    /// An fsync whose log could not be written: answered by a commit.
    pub fn fsync_fallback(&mut self, why: String) -> Result<()> {
        if self.final_commit_has_all() {
            return Ok(());
        }
        self.fsync_commit(why).map(|_| ())
    }

    /// Whether a log sync is between [`RwFs::fsync_sync_begin`] and
    /// [`RwFs::fsync_sync_end`].
    pub fn log_sync_in_flight(&self) -> bool {
        self.log_sync_in_flight
    }

    /// An fsync answered by a commit, and why.
    fn fsync_commit(&mut self, why: String) -> Result<FsyncStage> {
        self.stats.fsync_commits += 1;
        self.stats.last_fallback = Some(why);
        self.commit().map(|()| FsyncStage::Durable)
    }
}
