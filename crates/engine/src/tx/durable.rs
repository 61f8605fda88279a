//! Making a commit durable (the end of the kernel's
//! btrfs_commit_transaction: write_all_supers between two flushes): every
//! device is flushed so that the commit's blocks are on disk, the
//! superblock copies are written, and every device is flushed again. The
//! superblock goes last, so a crash at any point leaves the commit before
//! or this one.
//!
//! A deferred commit (receive's commits as it goes) does this on a thread
//! of its own, while the next transaction is built: the flush waits for
//! the disk, and there is nothing else for the writer to wait for. The
//! thread also encodes and writes the commit's blocks ([`BlockWrites`];
//! copying them into the page cache is a tenth of receive's time), and
//! reads of them wait until it has ([`PendingWrites`]).

use super::commit::DataTarget;
use crate::error::{Error, Result};
use crate::io::dev::BlockDev;
use crate::io::pending::PendingWrites;
use crate::tree::buf::ExtentBuffer;
use std::path::PathBuf;
use std::sync::Arc;
use ubtrfs_format::CsumType;

/// One device's superblock copies, encoded.
pub(crate) struct DevSupers {
    dev: Arc<dyn BlockDev>,
    path: PathBuf,
    /// (offset, bytes) of every copy that fits on the device.
    copies: Vec<(u64, Vec<u8>)>,
}

impl DevSupers {
    pub(crate) fn new(dev: Arc<dyn BlockDev>, path: PathBuf, copies: Vec<(u64, Vec<u8>)>) -> Self {
        DevSupers { dev, path, copies }
    }
}

fn io_error(path: &std::path::Path, op: String, source: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        op,
        source,
    }
}

/// Flushes every device.
pub(crate) fn flush(devs: &[DevSupers]) -> Result<()> {
    for d in devs {
        d.dev
            .flush()
            .map_err(|e| io_error(&d.path, "flush".into(), e))?;
    }
    Ok(())
}

/// Flush, superblock copies, flush: after this returns the superblock is
/// the one on disk.
pub(crate) fn make_durable(devs: &[DevSupers]) -> Result<()> {
    flush(devs)?;
    for d in devs {
        for (off, bytes) in &d.copies {
            d.dev
                .write_at(bytes, *off)
                .map_err(|e| io_error(&d.path, format!("write superblock at {off}"), e))?;
        }
    }
    flush(devs)
}

/// Adjacent blocks written in one run, and where the run goes (one
/// target per copy of each piece of its chunk mapping).
pub(crate) struct BlockRun {
    pub blocks: Vec<Arc<ExtentBuffer>>,
    pub targets: Vec<DataTarget>,
}

/// A commit's blocks, to encode and write off the writer's thread.
pub(crate) struct BlockWrites {
    pub runs: Vec<BlockRun>,
    pub nodesize: usize,
    pub fsid: [u8; 16],
    pub chunk_tree_uuid: [u8; 16],
    pub csum: CsumType,
    /// Marked pending by the writer before the thread starts; cleared
    /// when every run is written, or the writing failed.
    pub pending: Arc<PendingWrites>,
}

impl BlockWrites {
    fn write(&self) -> Result<()> {
        let mut buf = Vec::new();
        for run in &self.runs {
            buf.clear();
            buf.resize(run.blocks.len() * self.nodesize, 0);
            for (b, out) in run.blocks.iter().zip(buf.chunks_exact_mut(self.nodesize)) {
                b.encode_into(out, &self.fsid, &self.chunk_tree_uuid, self.csum);
            }
            for t in &run.targets {
                t.write_cached(&buf)?;
            }
        }
        Ok(())
    }
}

impl Drop for BlockWrites {
    /// Written, failed, or never started (the thread could not be made):
    /// readers stop waiting either way.
    fn drop(&mut self) {
        self.pending.clear();
    }
}

/// [`make_durable`] on a thread; [`Background::wait`] tells how it went.
/// Dropped unwaited, it still waits: a superblock is never left being
/// written behind the writer's back.
pub(crate) struct Background(Option<std::thread::JoinHandle<Result<()>>>);

impl Background {
    /// Writes `blocks` if given, then makes the superblock `devs` hold
    /// durable.
    pub(crate) fn start(blocks: Option<BlockWrites>, devs: Vec<DevSupers>) -> Result<Self> {
        let h = std::thread::Builder::new()
            .name("commit".into())
            .spawn(move || {
                if let Some(b) = blocks {
                    b.write()?;
                    // Written: reads need not wait for the flush.
                    drop(b);
                }
                make_durable(&devs)
            })
            .map_err(|e| io_error(std::path::Path::new("commit thread"), "spawn".into(), e))?;
        Ok(Background(Some(h)))
    }

    pub(crate) fn wait(mut self) -> Result<()> {
        self.join()
    }

    fn join(&mut self) -> Result<()> {
        match self.0.take() {
            Some(h) => h.join().unwrap_or_else(|_| {
                Err(Error::Invalid(
                    "the thread writing a commit's superblock panicked".into(),
                ))
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.join();
    }
}
