//! Block devices as the engine sees them: positioned reads and writes,
//! flush, size. Everything above works on `Arc<dyn BlockDev>`, so tests run
//! on memory ([`MemDev`]) and crash tests can wrap a device to record or
//! fail writes, while real use goes to image files and block devices
//! ([`FileDev`]).

use crate::io::aligned::{Spare, DIRECT_ALIGN};
use crate::io::claim;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::RwLock;

/// One device: a byte array of fixed size with durable writes after
/// [`BlockDev::flush`].
pub trait BlockDev: Send + Sync + std::fmt::Debug {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Reads exactly `buf.len()` bytes at `off`.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Writes all of `buf` at `off`. Fails with `PermissionDenied` on a
    /// device opened read-only.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// Makes every completed write durable (fdatasync).
    fn flush(&self) -> io::Result<()>;
    /// Whether writes are allowed.
    fn writable(&self) -> bool;
    /// Writes file data that nothing reads back soon: as
    /// [`BlockDev::write_at`], but a device may send it to the disk at once
    /// rather than keep it in the page cache (a flush still makes it
    /// durable).
    fn write_data(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.write_at(buf, off)
    }
    /// A hint that the bytes written at `[off, off + len)` will be flushed
    /// soon: a device may start writing them to the disk now, so that the
    /// flush waits for less. Nothing is promised; only a flush makes them
    /// durable.
    fn start_writeback(&self, _off: u64, _len: u64) {}
    /// This writer is ending: others wanting the device may wait for it
    /// ([`claim::mark_ending`]).
    fn mark_ending(&self) {}
    /// Lets the device go: its claim ([`claim::release`]) and its open
    /// descriptors. Nothing more is read or written through it: reads
    /// fail (end of file), writes fail (EBADF). An exclusive open of a
    /// block device holds the kernel's claim on it until closed, and a
    /// loop device told to detach waits for its last close, so the next
    /// user of the device would otherwise wait for this process to exit
    /// (fstests generic/361: a plain umount of a fuseblk mount, then
    /// `losetup -d`, then the umount of the filesystem that holds the
    /// loop's file found it busy).
    fn release_claim(&self) {}
    /// Shares `len` bytes of `src` from `src_off` at `off` (FICLONERANGE:
    /// the image file and `src` on one filesystem that clones ranges), in
    /// place of writing them. Offsets and length in whole blocks of that
    /// filesystem.
    fn clone_range_from(&self, _src: &File, _src_off: u64, _len: u64, _off: u64) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this device cannot share data with a file",
        ))
    }
    /// Gives `[off, off + len)` back to what holds the device: a hole
    /// punched in an image file, a discard on a block device (FITRIM). The
    /// bytes read back as zeros or as they were; nothing may depend on
    /// them.
    fn discard(&self, _off: u64, _len: u64) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this device does not discard",
        ))
    }
}

/// Closes what `file`'s descriptor refers to while the descriptor number
/// stays valid: /dev/null opened read-only takes its place (dup2), so a
/// late read sees end of file and a late write fails, instead of going to
/// another file that reused the number.
fn close_in_place(file: &File) {
    use std::os::unix::io::AsRawFd;
    let Ok(null) = File::open("/dev/null") else {
        return;
    };
    // SAFETY: both descriptors are open and owned by live Files; dup2
    // replaces the second with a copy of the first atomically.
    unsafe {
        libc::dup2(null.as_raw_fd(), file.as_raw_fd());
    }
}

/// Each aligned buffer's size for file data in unaligned memory (see
/// [`write_bounced`]).
const BOUNCE_BYTES: usize = 4 << 20;

/// Writes `buf`, in unaligned memory (the mount's dirty ranges, which grow
/// as plain vectors), at `off` through `direct` (opened O_DIRECT), a
/// buffer of `spare` at a time: a copy into memory already faulted in
/// costs less than the page cache's copy into fresh pages, its dirty
/// accounting and the write-back later, and leaves no second cached copy
/// of the data that the mount's own page cache holds.
fn write_bounced(spare: &Spare, direct: &File, buf: &[u8], off: u64) -> io::Result<()> {
    let mut b = spare.take(BOUNCE_BYTES, BOUNCE_BYTES);
    let mut res = Ok(());
    for (i, part) in buf.chunks(BOUNCE_BYTES).enumerate() {
        let b = &mut b[..part.len()];
        b.copy_from_slice(part);
        res = direct.write_all_at(b, off + (i * BOUNCE_BYTES) as u64);
        if res.is_err() {
            break;
        }
    }
    spare.give(b);
    res
}

/// BLKDISCARD = _IO(0x12, 119): discards a byte range of a block device.
const BLKDISCARD: libc::c_ulong = 0x1277;

/// An image file or block device.
#[derive(Debug)]
pub struct FileDev {
    file: File,
    size: u64,
    writable: bool,
    /// The same file opened with O_DIRECT for [`BlockDev::write_data`]
    /// (None where the filesystem refuses it, tmpfs for one).
    direct: std::sync::OnceLock<Option<File>>,
    /// Aligned copies for O_DIRECT of data whose memory is not aligned.
    bounce: Spare,
    /// Buffered file data written and not yet handed to write-back:
    /// [start, end), handed over once it is large (small files' extents
    /// follow each other; one request per extent costs more than the
    /// writes).
    unkicked: std::sync::Mutex<(u64, u64)>,
}

/// Buffered data handed to write-back in runs of at least this much.
const KICK_BYTES: u64 = 8 << 20;

/// Writes of file data of at least this size, aligned to [`DIRECT_ALIGN`], bypass the
/// page cache (O_DIRECT); smaller ones (RAID0 stripes, file tails) are
/// buffered and handed to write-back at once.
const DIRECT_MIN: usize = 1 << 20;

impl FileDev {
    /// Opens `path` read-only, or read-write when `writable`, with the
    /// claim of a reader or of the one writer ([`crate::io::claim`]).
    pub fn open(path: &Path, writable: bool) -> io::Result<FileDev> {
        let access = if writable {
            claim::Access::Write
        } else {
            claim::Access::Read
        };
        let file = claim::open_claimed(path, access)?;
        FileDev::from_claimed(file, writable)
    }

    /// A device over a file already opened with its claim
    /// ([`claim::open_claimed`]): mkfs grows an image file it has claimed
    /// before it makes the device.
    pub fn from_claimed(file: File, writable: bool) -> io::Result<FileDev> {
        let size = file_size(&file)?;
        Ok(FileDev {
            file,
            size,
            writable,
            direct: std::sync::OnceLock::new(),
            bounce: Spare::default(),
            unkicked: std::sync::Mutex::new((0, 0)),
        })
    }
}

impl FileDev {
    /// The device seen as its first `size` bytes (mkfs -b on a larger
    /// device or file).
    pub fn limited_to(mut self, size: u64) -> FileDev {
        self.size = self.size.min(size);
        self
    }
}

impl BlockDev for FileDev {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "device opened read-only",
            ));
        }
        self.file.write_all_at(buf, off)
    }

    fn flush(&self) -> io::Result<()> {
        if self.writable {
            self.file.sync_data()?;
        }
        Ok(())
    }

    fn writable(&self) -> bool {
        self.writable
    }

    fn discard(&self, off: u64, len: u64) -> io::Result<()> {
        use std::os::unix::fs::FileTypeExt;
        use std::os::unix::io::AsRawFd;
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "device opened read-only",
            ));
        }
        if off.checked_add(len).is_none_or(|e| e > self.size) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "discard of {len} bytes at {off} past the device's {} bytes",
                    self.size
                ),
            ));
        }
        let fd = self.file.as_raw_fd();
        let r = if self.file.metadata()?.file_type().is_block_device() {
            let range = [off, len];
            // SAFETY: BLKDISCARD reads two u64s (start, length) from the
            // pointer, which lives across the call.
            unsafe { libc::ioctl(fd, BLKDISCARD, range.as_ptr()) }
        } else {
            // SAFETY: fallocate(2) on our own descriptor.
            unsafe {
                libc::fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off as libc::off_t,
                    len as libc::off_t,
                )
            }
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn clone_range_from(&self, src: &File, src_off: u64, len: u64, off: u64) -> io::Result<()> {
        use std::os::unix::io::AsRawFd;
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "device opened read-only",
            ));
        }
        let range = libc::file_clone_range {
            src_fd: src.as_raw_fd() as i64,
            src_offset: src_off,
            src_length: len,
            dest_offset: off,
        };
        // SAFETY: FICLONERANGE reads the struct passed, which lives for the
        // call; both descriptors are open.
        let r = unsafe { libc::ioctl(self.file.as_raw_fd(), libc::FICLONERANGE, &range) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn mark_ending(&self) {
        claim::mark_ending(&self.file);
    }

    fn release_claim(&self) {
        claim::release(&self.file);
        close_in_place(&self.file);
        if let Some(Some(d)) = self.direct.get() {
            close_in_place(d);
        }
    }

    fn start_writeback(&self, off: u64, len: u64) {
        use std::os::unix::io::AsRawFd;
        // SAFETY: sync_file_range on an open descriptor; no memory is
        // involved. A failure is only a lost hint.
        unsafe {
            libc::sync_file_range(
                self.file.as_raw_fd(),
                off as i64,
                len as i64,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }

    fn write_data(&self, buf: &[u8], off: u64) -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        use std::os::unix::io::AsRawFd;
        let aligned = buf.len() >= DIRECT_MIN
            && buf.len().is_multiple_of(DIRECT_ALIGN)
            && off.is_multiple_of(DIRECT_ALIGN as u64);
        if aligned && self.writable {
            let direct = self.direct.get_or_init(|| {
                OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
                    .ok()
            });
            if let Some(d) = direct {
                let res = if (buf.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN) {
                    d.write_all_at(buf, off)
                } else {
                    write_bounced(&self.bounce, d, buf, off)
                };
                match res {
                    Ok(()) => return Ok(()),
                    // Not for this file after all: buffered below.
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.write_at(buf, off)?;
        let end = off + buf.len() as u64;
        let run = {
            let mut u = self.unkicked.lock().unwrap();
            if u.0 == u.1 || u.1 != off {
                // Not following the last run: hand that one over now if
                // it is worth a request (else the flush at commit writes
                // it).
                let prev = *u;
                *u = (off, end);
                (prev.1 - prev.0 >= KICK_BYTES / 8).then_some(prev)
            } else {
                u.1 = end;
                (u.1 - u.0 >= KICK_BYTES).then(|| std::mem::take(&mut *u))
            }
        };
        if let Some((s, e)) = run {
            // SAFETY: sync_file_range on an open descriptor; no memory is
            // involved. A failure is only a lost hint: the flush at commit
            // writes the range anyway.
            unsafe {
                libc::sync_file_range(
                    self.file.as_raw_fd(),
                    s as i64,
                    (e - s) as i64,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
        }
        Ok(())
    }
}

/// Size of a regular file or block device.
pub fn file_size(file: &File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let meta = file.metadata()?;
    if meta.is_file() {
        return Ok(meta.len());
    }
    // Block devices report 0 in metadata; seeking to the end gives the size.
    let mut f = file.try_clone()?;
    f.seek(SeekFrom::End(0))
}

/// A device in memory, for in-process tests of writers.
#[derive(Debug)]
pub struct MemDev {
    bytes: RwLock<Vec<u8>>,
}

impl MemDev {
    /// A zero-filled device of `size` bytes.
    pub fn new(size: u64) -> MemDev {
        MemDev::from_bytes(vec![0; size as usize])
    }

    /// A device holding `bytes` (for example an image read from a file).
    pub fn from_bytes(bytes: Vec<u8>) -> MemDev {
        MemDev {
            bytes: RwLock::new(bytes),
        }
    }

    /// A copy of the whole device.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.read().unwrap().clone()
    }
}

fn range(off: u64, len: usize, size: usize) -> io::Result<std::ops::Range<usize>> {
    let start = usize::try_from(off).ok();
    match start.and_then(|s| s.checked_add(len).map(|e| (s, e))) {
        Some((s, e)) if e <= size => Ok(s..e),
        _ => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{len} bytes at {off} beyond device size {size}"),
        )),
    }
}

impl BlockDev for MemDev {
    fn size(&self) -> u64 {
        self.bytes.read().unwrap().len() as u64
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let b = self.bytes.read().unwrap();
        let r = range(off, buf.len(), b.len())?;
        buf.copy_from_slice(&b[r]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut b = self.bytes.write().unwrap();
        let r = range(off, buf.len(), b.len())?;
        b[r].copy_from_slice(buf);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn writable(&self) -> bool {
        true
    }

    /// Zeros: a test reading what was discarded finds nothing of it.
    fn discard(&self, off: u64, len: u64) -> io::Result<()> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "discard length"))?;
        let mut b = self.bytes.write().unwrap();
        let r = range(off, len, b.len())?;
        b[r].fill(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memdev_reads_what_was_written_and_refuses_out_of_range() {
        let d = MemDev::new(8192);
        d.write_at(b"abc", 4000).unwrap();
        let mut b = [0u8; 5];
        d.read_at(&mut b, 3999).unwrap();
        assert_eq!(&b, b"\0abc\0");
        assert!(d.write_at(b"x", 8192).is_err());
        assert!(d.read_at(&mut b, u64::MAX - 2).is_err());
    }

    #[test]
    fn filedev_read_only_refuses_writes() {
        let dir = std::env::temp_dir().join(format!("ubtrfs-dev-{}", std::process::id()));
        std::fs::write(&dir, [0u8; 4096]).unwrap();
        let d = FileDev::open(&dir, false).unwrap();
        assert_eq!(d.size(), 4096);
        assert_eq!(
            d.write_at(b"x", 0).unwrap_err().kind(),
            io::ErrorKind::PermissionDenied
        );
        // One writer or many readers (io::claim).
        let busy = |r: io::Result<FileDev>| r.unwrap_err().kind() == io::ErrorKind::ResourceBusy;
        assert!(busy(FileDev::open(&dir, true)));
        let d2 = FileDev::open(&dir, false).unwrap();
        drop((d, d2));
        let w = FileDev::open(&dir, true).unwrap();
        assert!(busy(FileDev::open(&dir, true)));
        assert!(busy(FileDev::open(&dir, false)));
        w.write_at(b"x", 10).unwrap();
        w.flush().unwrap();
        // Let go after the last write: the next writer gets it.
        w.release_claim();
        let w2 = FileDev::open(&dir, true).unwrap();
        drop((w, w2));
        let d = FileDev::open(&dir, false).unwrap();
        let mut b = [0u8; 1];
        d.read_at(&mut b, 10).unwrap();
        assert_eq!(&b, b"x");
        std::fs::remove_file(&dir).unwrap();
    }
}
