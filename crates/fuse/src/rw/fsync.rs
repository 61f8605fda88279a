//! fsync on the read-write mount: the engine's log tree (or a commit),
//! with concurrent fsyncs grouped into one log sync as the kernel
//! batches them.

use super::*;

/// `UBTRFS_TRACE_FSYNC=1` (read once): [`RwInner::sync_node`] logs each
/// fsync.
pub(super) fn trace_fsync() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    env_switch_set(&ON, "UBTRFS_TRACE_FSYNC")
}

/// The longest an fsync whose file is logged waits for queued fsyncs to
/// log theirs and sync for all, before it syncs itself.
pub(super) const FSYNC_GROUP_WAIT: Duration = Duration::from_millis(5);

/// UBTRFS_NO_FSYNC_BATCH=1: every fsync syncs the log itself (the
/// benchmark's switch for the grouping).
pub(super) fn fsync_batching() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    env_switch_on(&ON, "UBTRFS_NO_FSYNC_BATCH")
}

/// How an fsync was answered, from the counters its own calls moved (for
/// UBTRFS_TRACE_FSYNC).
pub(super) fn answered(before: &RwStats, after: &RwStats) -> String {
    if after.fsync_commits > before.fsync_commits {
        let why = after.last_fallback.as_deref().unwrap_or("?");
        format!("commit ({why})")
    } else if after.log_syncs > before.log_syncs {
        "log".into()
    } else if after.fsync_batched > before.fsync_batched {
        "grouped log (synced by another fsync)".into()
    } else {
        "nothing to write".into()
    }
}

impl RwInner {
    /// fsync(2) and fdatasync(2) of a file or directory, answered: the
    /// engine's fsync (a log tree, or a commit). With `UBTRFS_TRACE_FSYNC=1` in
    /// the daemon's environment, one log line each: answered by a log, by
    /// a commit (and why no log), or with nothing to write (tests and the
    /// benchmark count them).
    pub(super) fn sync_node(&self, op: &str, node: INodeNo, datasync: bool, reply: ReplyEmpty) {
        let id = self.inode(node);
        let t = std::time::Instant::now();
        let (res, how) = self.fsync_grouped(id);
        if trace_fsync() {
            logging::info(&format!(
                "trace: {op}{} {}:{}: {how} in {:.3} ms{}",
                if datasync { " (datasync)" } else { "" },
                id.subvol,
                id.ino,
                t.elapsed().as_secs_f64() * 1000.0,
                if res.is_err() { ", failed" } else { "" }
            ));
        }
        reply.result(res.map_err(|e| errno(op, e)));
    }

    /// fsync with concurrent fsyncs grouped, as the kernel batches them
    /// into one log commit: the file is logged under the lock; if other
    /// fsyncs are queued for the lock, it waits (lock released, at most
    /// [`FSYNC_GROUP_WAIT`]) for them to log their files, and the last to
    /// log syncs the log for all. A log sync costs two device flushes
    /// whatever it holds, so four writers pay for one instead of four.
    /// Also says how the fsync was answered (for UBTRFS_TRACE_FSYNC).
    pub(super) fn fsync_grouped(&self, id: InodeId) -> (Result<(), Error>, String) {
        let trace = trace_fsync();
        self.writeback_first(&[id]);
        self.fsyncs_waiting.fetch_add(1, Ordering::SeqCst);
        // Logging waits for a log sync in flight to end (logging into the
        // next sync's log beside it did not pay: docs/rw-bench.md).
        let mut fs = self.fs.lock_log();
        self.fsyncs_waiting.fetch_sub(1, Ordering::SeqCst);
        let before = trace.then(|| fs.stats.clone());
        let n = match fs.fsync_log(id) {
            Ok(FsyncStage::Logged(n)) => n,
            Ok(FsyncStage::Commit(why)) => {
                // A commit, once the log sync in flight has ended.
                drop(fs);
                let mut fs = self.fs.lock_commit();
                let res = fs.fsync_fallback(why);
                let how = before.map(|b| answered(&b, &fs.stats));
                return (res, how.unwrap_or_default());
            }
            res => {
                let how = before.map(|b| answered(&b, &fs.stats));
                return (res.map(|_| ()), how.unwrap_or_default());
            }
        };
        let mut waited = false;
        if fsync_batching() {
            let until = std::time::Instant::now() + FSYNC_GROUP_WAIT;
            while !fs.fsync_durable(n) && self.fsyncs_waiting.load(Ordering::SeqCst) > 0 {
                let left = until.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                fs = self.fs.wait_timeout(&self.log_synced, fs, left);
                waited = true;
            }
        }
        // While this one waited (the lock released), another fsync's log
        // sync may have begun (it covers this file, or the next one will),
        // a commit may be waiting, and direct writes may have begun; or
        // this one logged while a log sync was in flight, which must end
        // first.
        if waited || fs.log_sync_in_flight() || self.fs.commit_waiting() {
            drop(fs);
            fs = self.fs.lock_log();
        }
        // Counted from here: other fsyncs moved the counters while this
        // one waited.
        let before = trace.then(|| fs.stats.clone());
        let step = fs.fsync_sync_begin(n);
        let res = match step {
            Ok(SyncStep::Done) => Ok(()),
            Ok(SyncStep::Write(w)) => {
                // The flushes wait for the disk without the lock. A panic
                // there must still end the sync (else every fsync and
                // commit after it would wait for good).
                drop(fs);
                let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.write()))
                    .unwrap_or_else(|_| {
                        Err(Error::Invalid("the log sync's write panicked".into()))
                    });
                let res = match self.fs.end_log_sync(w, written) {
                    Ok(()) => Ok(()),
                    Err(why) => self.fs.lock_commit().fsync_fallback(why),
                };
                let how = before.map(|b| answered(&b, &self.fs.lock_shared().stats));
                self.fs.signal(&self.log_synced);
                return (res, how.unwrap_or_default());
            }
            Err(e) => Err(e),
        };
        let how = before.map(|b| answered(&b, &fs.stats));
        drop(fs);
        self.fs.signal(&self.log_synced);
        (res, how.unwrap_or_default())
    }
}
