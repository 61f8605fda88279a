//! Replies: one type per kind of answer, each consumed by the call that
//! answers (or by `error`). A reply dropped unanswered answers EIO, so a
//! forgotten path cannot leave the caller in the kernel waiting forever.
//!
//! The method names and arguments are those of the `fuser` crate's reply
//! types, whose value types (FileAttr, FileType, Errno, ...) we keep.

use super::abi::{self, bytes};
use super::types::{Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where replies go: /dev/fuse, or a ring entry.
pub(crate) trait Transport: Send + Sync {
    /// Answers request `unique`, which arrived in `slot` (the ring entry;
    /// unused by /dev/fuse), with `error` (0 or a negative errno) and the
    /// concatenation of `parts`.
    fn send(&self, slot: usize, unique: u64, error: i32, parts: &[&[u8]]);
}

/// The way back for one request.
pub(crate) struct Sender {
    pub transport: Arc<dyn Transport>,
    pub slot: usize,
    pub unique: u64,
}

/// The untyped reply under each typed one.
pub(crate) struct ReplyRaw(Option<Sender>);

impl ReplyRaw {
    pub(crate) fn new(s: Sender) -> ReplyRaw {
        ReplyRaw(Some(s))
    }

    fn send(&mut self, error: i32, parts: &[&[u8]]) {
        if let Some(s) = self.0.take() {
            s.transport.send(s.slot, s.unique, error, parts);
        }
    }

    fn error(mut self, e: Errno) {
        let code = e.code();
        // Errno 0 would be a success with no payload, never meant; the
        // kernel refuses a reply with an errno of 512 or more (it would
        // never answer the request): both become EIO.
        let code = if (1..512).contains(&code) {
            code
        } else {
            libc::EIO
        };
        self.send(-code, &[]);
    }

    fn ok(mut self, parts: &[&[u8]]) {
        self.send(0, parts);
    }
}

impl Drop for ReplyRaw {
    fn drop(&mut self) {
        if self.0.is_some() {
            crate::logging::warn("a request was dropped unanswered: answering EIO");
            self.send(-libc::EIO, &[]);
        }
    }
}

macro_rules! reply_types {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        $(
            $(#[$m])*
            pub struct $name(ReplyRaw);
            impl $name {
                pub(crate) fn new(s: Sender) -> $name {
                    $name(ReplyRaw::new(s))
                }
                pub fn error(self, e: Errno) {
                    self.0.error(e)
                }
            }
        )*
    };
}

reply_types!(
    ReplyEmpty,
    ReplyData,
    ReplyEntry,
    ReplyOpen,
    ReplyWrite,
    ReplyStatfs,
    ReplyCreate,
    ReplyXattr,
    ReplyLseek,
    ReplyIoctl,
);

/// The answer to a copy_file_range: FUSE_COPY_FILE_RANGE_64 takes the
/// count as 64 bits, FUSE_COPY_FILE_RANGE in a fuse_write_out.
pub struct ReplyCopy {
    raw: ReplyRaw,
    wide: bool,
}

impl ReplyCopy {
    pub(crate) fn new(s: Sender, wide: bool) -> ReplyCopy {
        ReplyCopy {
            raw: ReplyRaw::new(s),
            wide,
        }
    }

    pub fn error(self, e: Errno) {
        self.raw.error(e)
    }

    /// `n` bytes copied. The 32-bit answer cannot say more than
    /// u32::MAX: the file system caps the count it copies (the kernel
    /// asks FUSE_COPY_FILE_RANGE for at most 4 GiB - 4 KiB).
    pub fn copied(self, n: u64) {
        if self.wide {
            self.raw
                .ok(&[bytes(&abi::CopyFileRangeOut { bytes_copied: n })])
        } else {
            let size = u32::try_from(n).unwrap_or(u32::MAX);
            self.raw.ok(&[bytes(&abi::WriteOut { size, padding: 0 })])
        }
    }
}

/// Seconds and nanoseconds since the epoch, as fuse_attr stores them
/// (negative seconds before it, nanoseconds always forward).
pub(crate) fn time(t: SystemTime) -> (u64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let (s, n) = (d.as_secs() as i64, d.subsec_nanos());
            if n == 0 {
                ((-s) as u64, 0)
            } else {
                ((-s - 1) as u64, 1_000_000_000 - n)
            }
        }
    }
}

fn mode(kind: FileType, perm: u16) -> u32 {
    kind.mode_bits() | u32::from(perm)
}

pub(crate) fn fuse_attr(a: &FileAttr) -> abi::Attr {
    let (atime, atimensec) = time(a.atime);
    let (mtime, mtimensec) = time(a.mtime);
    let (ctime, ctimensec) = time(a.ctime);
    abi::Attr {
        ino: a.ino.0,
        size: a.size,
        blocks: a.blocks,
        atime,
        mtime,
        ctime,
        atimensec,
        mtimensec,
        ctimensec,
        mode: mode(a.kind, a.perm),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

fn entry_out(ttl: &Duration, attr: &FileAttr, generation: Generation) -> abi::EntryOut {
    abi::EntryOut {
        nodeid: attr.ino.0,
        generation: generation.0,
        entry_valid: ttl.as_secs(),
        attr_valid: ttl.as_secs(),
        entry_valid_nsec: ttl.subsec_nanos(),
        attr_valid_nsec: ttl.subsec_nanos(),
        attr: fuse_attr(attr),
    }
}

fn open_out(fh: FileHandle, flags: FopenFlags) -> abi::OpenOut {
    abi::OpenOut {
        fh: fh.0,
        open_flags: flags.bits(),
        backing_id: 0,
    }
}

impl ReplyEmpty {
    pub fn ok(self) {
        self.0.ok(&[])
    }

    /// Answers done, or the error.
    pub fn result(self, res: Result<(), Errno>) {
        match res {
            Ok(()) => self.ok(),
            Err(e) => self.error(e),
        }
    }
}

impl ReplyData {
    pub fn data(self, data: &[u8]) {
        self.0.ok(&[data])
    }
}

impl ReplyEntry {
    pub fn entry(self, ttl: &Duration, attr: &FileAttr, generation: Generation) {
        self.0.ok(&[bytes(&entry_out(ttl, attr, generation))])
    }
}

/// The answer to GETATTR (a fuse_attr_out) or to STATX (a
/// fuse_statx_out: the same attributes and the birth time).
pub struct ReplyAttr {
    raw: ReplyRaw,
    statx: bool,
    /// The birth time is known (STATX_BTIME in a STATX answer).
    born: bool,
}

impl ReplyAttr {
    pub(crate) fn new(s: Sender) -> ReplyAttr {
        ReplyAttr {
            raw: ReplyRaw::new(s),
            statx: false,
            born: true,
        }
    }

    pub(crate) fn statx(s: Sender) -> ReplyAttr {
        ReplyAttr {
            raw: ReplyRaw::new(s),
            statx: true,
            born: true,
        }
    }

    /// Answers without a birth time (the kernel's btrfs has none for the
    /// placeholder directory of a subvolume a snapshot does not hold).
    pub fn without_birth(mut self) -> ReplyAttr {
        self.born = false;
        self
    }

    pub fn error(self, e: Errno) {
        self.raw.error(e)
    }

    pub fn attr(self, ttl: &Duration, attr: &FileAttr) {
        if self.statx {
            let out = abi::StatxOut {
                attr_valid: ttl.as_secs(),
                attr_valid_nsec: ttl.subsec_nanos(),
                stat: fuse_statx(attr, self.born),
                ..Default::default()
            };
            return self.raw.ok(&[bytes(&out)]);
        }
        let out = abi::AttrOut {
            attr_valid: ttl.as_secs(),
            attr_valid_nsec: ttl.subsec_nanos(),
            dummy: 0,
            attr: fuse_attr(attr),
        };
        self.raw.ok(&[bytes(&out)])
    }
}

/// fuse_statx of `a`: the basic statistics and, if `born`, the birth
/// time (the inode's otime; what the kernel takes from a STATX answer).
fn fuse_statx(a: &FileAttr, born: bool) -> abi::Statx {
    let t = |when: SystemTime| {
        let (tv_sec, tv_nsec) = time(when);
        abi::SxTime {
            tv_sec,
            tv_nsec,
            reserved: 0,
        }
    };
    let rdev = libc::dev_t::from(a.rdev);
    abi::Statx {
        mask: libc::STATX_BASIC_STATS | if born { libc::STATX_BTIME } else { 0 },
        blksize: a.blksize,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        mode: mode(a.kind, a.perm) as u16,
        ino: a.ino.0,
        size: a.size,
        blocks: a.blocks,
        atime: t(a.atime),
        btime: if born {
            t(a.crtime)
        } else {
            abi::SxTime::default()
        },
        ctime: t(a.ctime),
        mtime: t(a.mtime),
        rdev_major: libc::major(rdev),
        rdev_minor: libc::minor(rdev),
        ..Default::default()
    }
}

impl ReplyOpen {
    pub fn opened(self, fh: FileHandle, flags: FopenFlags) {
        self.0.ok(&[bytes(&open_out(fh, flags))])
    }
}

impl ReplyWrite {
    pub fn written(self, size: u32) {
        self.0.ok(&[bytes(&abi::WriteOut { size, padding: 0 })])
    }
}

impl ReplyStatfs {
    #[allow(clippy::too_many_arguments)]
    pub fn statfs(
        self,
        blocks: u64,
        bfree: u64,
        bavail: u64,
        files: u64,
        ffree: u64,
        bsize: u32,
        namelen: u32,
        frsize: u32,
    ) {
        let out = abi::Kstatfs {
            blocks,
            bfree,
            bavail,
            files,
            ffree,
            bsize,
            namelen,
            frsize,
            ..abi::Kstatfs::default()
        };
        self.0.ok(&[bytes(&out)])
    }
}

impl ReplyCreate {
    pub fn created(
        self,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
        fh: FileHandle,
        flags: FopenFlags,
    ) {
        let e = entry_out(ttl, attr, generation);
        let o = open_out(fh, flags);
        self.0.ok(&[bytes(&e), bytes(&o)])
    }
}

impl ReplyXattr {
    /// The size of the value or list, for a request that asked with size 0.
    pub fn size(self, size: u32) {
        self.0.ok(&[bytes(&abi::XattrSize { size, padding: 0 })])
    }

    pub fn data(self, data: &[u8]) {
        self.0.ok(&[data])
    }

    /// Answers with value or list `v` for a request that asked with
    /// `size`: its size when `size` is 0, ERANGE when it does not fit,
    /// else the bytes.
    pub fn value(self, v: &[u8], size: u32) {
        if size == 0 {
            self.size(v.len() as u32)
        } else if v.len() > size as usize {
            self.error(Errno::ERANGE)
        } else {
            self.data(v)
        }
    }
}

impl ReplyLseek {
    pub fn offset(self, offset: i64) {
        self.0.ok(&[bytes(&abi::LseekOut {
            offset: offset as u64,
        })])
    }
}

impl ReplyIoctl {
    pub fn ioctl(self, result: i32, data: &[u8]) {
        let out = abi::IoctlOut {
            result,
            ..abi::IoctlOut::default()
        };
        self.0.ok(&[bytes(&out), data])
    }
}

/// The buffer of a directory listing answer, filled up to the size asked.
struct DirBuf {
    raw: ReplyRaw,
    buf: Vec<u8>,
    max: usize,
}

impl DirBuf {
    fn new(s: Sender, size: usize) -> DirBuf {
        DirBuf {
            raw: ReplyRaw::new(s),
            buf: Vec::with_capacity(size.min(1 << 20)),
            max: size,
        }
    }

    /// Appends one entry (`head` then the name, padded to 8 bytes) unless
    /// it would not fit: then true ("full").
    fn add(&mut self, head: &[u8], name: &[u8]) -> bool {
        let len = head.len() + name.len();
        let padded = len.next_multiple_of(8);
        if self.buf.len() + padded > self.max {
            return true;
        }
        self.buf.extend_from_slice(head);
        self.buf.extend_from_slice(name);
        self.buf.resize(self.buf.len() + padded - len, 0);
        false
    }

    fn ok(self) {
        self.raw.ok(&[&self.buf])
    }
}

fn dirent(ino: INodeNo, offset: u64, kind: FileType, name: &[u8]) -> abi::Dirent {
    abi::Dirent {
        ino: ino.0,
        off: offset,
        namelen: name.len() as u32,
        typ: mode(kind, 0) >> 12,
    }
}

/// A READDIR answer.
pub struct ReplyDirectory(DirBuf);

impl ReplyDirectory {
    pub(crate) fn new(s: Sender, size: usize) -> ReplyDirectory {
        ReplyDirectory(DirBuf::new(s, size))
    }

    /// Adds an entry; true when it did not fit (the buffer is full).
    pub fn add<T: AsRef<OsStr>>(
        &mut self,
        ino: INodeNo,
        offset: u64,
        kind: FileType,
        name: T,
    ) -> bool {
        let name = name.as_ref().as_bytes();
        self.0.add(bytes(&dirent(ino, offset, kind, name)), name)
    }

    pub fn ok(self) {
        self.0.ok()
    }

    pub fn error(self, e: Errno) {
        self.0.raw.error(e)
    }
}

/// A READDIRPLUS answer: each entry carries its lookup answer.
pub struct ReplyDirectoryPlus(DirBuf);

impl ReplyDirectoryPlus {
    pub(crate) fn new(s: Sender, size: usize) -> ReplyDirectoryPlus {
        ReplyDirectoryPlus(DirBuf::new(s, size))
    }

    /// Adds an entry; true when it did not fit (the buffer is full).
    pub fn add<T: AsRef<OsStr>>(
        &mut self,
        ino: INodeNo,
        offset: u64,
        name: T,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
    ) -> bool {
        let name = name.as_ref().as_bytes();
        let mut head = [0u8; 128 + 24];
        head[..128].copy_from_slice(bytes(&entry_out(ttl, attr, generation)));
        head[128..].copy_from_slice(bytes(&dirent(ino, offset, attr.kind, name)));
        self.0.add(&head, name)
    }

    pub fn ok(self) {
        self.0.ok()
    }

    pub fn error(self, e: Errno) {
        self.0.raw.error(e)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A reply as sent: unique, error, bytes.
    pub(crate) type Sent = (u64, i32, Vec<u8>);

    /// Records what was sent.
    #[derive(Default)]
    pub(crate) struct Capture(pub Mutex<Vec<Sent>>);

    impl Transport for Capture {
        fn send(&self, _slot: usize, unique: u64, error: i32, parts: &[&[u8]]) {
            self.0.lock().unwrap().push((unique, error, parts.concat()));
        }
    }

    fn sender(c: &Arc<Capture>, unique: u64) -> Sender {
        Sender {
            transport: c.clone(),
            slot: 0,
            unique,
        }
    }

    fn attr(kind: FileType) -> FileAttr {
        FileAttr {
            ino: INodeNo(7),
            size: 4096,
            blocks: 8,
            atime: UNIX_EPOCH + Duration::new(10, 5),
            mtime: UNIX_EPOCH - Duration::new(1, 250),
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm: 0o644,
            nlink: 1,
            uid: 1000,
            gid: 100,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    #[test]
    fn dropped_reply_answers_eio_once() {
        let c = Arc::new(Capture::default());
        drop(ReplyEmpty::new(sender(&c, 5)));
        ReplyEmpty::new(sender(&c, 6)).ok();
        ReplyEmpty::new(sender(&c, 7)).error(Errno::ENOENT);
        // The kernel would refuse 600 and never answer: EIO instead.
        ReplyEmpty::new(sender(&c, 8)).error(Errno::from_i32(600));
        let got = c.0.lock().unwrap().clone();
        assert_eq!(
            got,
            vec![
                (5, -libc::EIO, vec![]),
                (6, 0, vec![]),
                (7, -libc::ENOENT, vec![]),
                (8, -libc::EIO, vec![])
            ]
        );
    }

    #[test]
    fn entry_layout() {
        let c = Arc::new(Capture::default());
        let a = attr(FileType::RegularFile);
        ReplyEntry::new(sender(&c, 1)).entry(&Duration::new(2, 3), &a, Generation(9));
        let (_, err, b) = c.0.lock().unwrap()[0].clone();
        assert_eq!(err, 0);
        assert_eq!(b.len(), 128);
        let e: abi::EntryOut = abi::read(&b).unwrap();
        assert_eq!(
            (e.nodeid, e.generation, e.entry_valid, e.attr_valid_nsec),
            (7, 9, 2, 3)
        );
        assert_eq!(e.attr.mode, libc::S_IFREG | 0o644);
        assert_eq!((e.attr.atime, e.attr.atimensec), (10, 5));
        // One second and 250 ns before the epoch: -2 s + 999999750 ns.
        assert_eq!((e.attr.mtime as i64, e.attr.mtimensec), (-2, 999_999_750));
    }

    #[test]
    fn directory_fills_to_the_size_asked() {
        let c = Arc::new(Capture::default());
        // Two entries of 24 + 5 -> 32 bytes fit in 70; the third does not.
        let mut r = ReplyDirectory::new(sender(&c, 1), 70);
        assert!(!r.add(INodeNo(2), 1, FileType::Directory, "abcde"));
        assert!(!r.add(INodeNo(3), 2, FileType::Symlink, "x"));
        assert!(r.add(INodeNo(4), 3, FileType::RegularFile, "y"));
        r.ok();
        let (_, _, b) = c.0.lock().unwrap()[0].clone();
        assert_eq!(b.len(), 64);
        let d: abi::Dirent = abi::read(&b).unwrap();
        assert_eq!(
            (d.ino, d.off, d.namelen, d.typ),
            (2, 1, 5, libc::DT_DIR as u32)
        );
        assert_eq!(&b[24..29], b"abcde");
        assert_eq!(&b[29..32], &[0, 0, 0]);
        let d: abi::Dirent = abi::read(&b[32..]).unwrap();
        assert_eq!((d.ino, d.typ), (3, libc::DT_LNK as u32));
    }

    #[test]
    fn directory_plus_carries_the_entry() {
        let c = Arc::new(Capture::default());
        let mut r = ReplyDirectoryPlus::new(sender(&c, 1), 4096);
        let a = attr(FileType::RegularFile);
        assert!(!r.add(
            INodeNo(7),
            1,
            "f",
            &Duration::from_secs(1),
            &a,
            Generation(0)
        ));
        r.ok();
        let (_, _, b) = c.0.lock().unwrap()[0].clone();
        assert_eq!(b.len(), 128 + 24 + 8);
        let e: abi::EntryOut = abi::read(&b).unwrap();
        assert_eq!(e.nodeid, 7);
        let d: abi::Dirent = abi::read(&b[128..]).unwrap();
        assert_eq!((d.ino, d.namelen, d.typ), (7, 1, libc::DT_REG as u32));
    }
}
