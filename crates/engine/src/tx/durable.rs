//! Making a commit durable (the end of the kernel's
//! btrfs_commit_transaction: write_all_supers between two flushes): every
//! device is flushed so that the commit's blocks are on disk, the
//! superblock copies are written, and every device is flushed again. The
//! superblock goes last, so a crash at any point leaves the commit before
//! or this one.
//!
//! A deferred commit (receive's commits as it goes) does this on a thread
//! of its own, while the next transaction is built: the flush waits for
//! the disk, and there is nothing else for the writer to wait for.

use crate::error::{Error, Result};
use crate::io::dev::BlockDev;
use std::path::PathBuf;
use std::sync::Arc;

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

/// [`make_durable`] on a thread; [`Background::wait`] tells how it went.
/// Dropped unwaited, it still waits: a superblock is never left being
/// written behind the writer's back.
pub(crate) struct Background(Option<std::thread::JoinHandle<Result<()>>>);

impl Background {
    pub(crate) fn start(devs: Vec<DevSupers>) -> Result<Self> {
        let h = std::thread::Builder::new()
            .name("commit-super".into())
            .spawn(move || make_durable(&devs))
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
