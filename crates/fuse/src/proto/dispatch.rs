//! One request, from its header, fixed argument and variable data, to the
//! file system's method. The same for both transports: /dev/fuse bodies
//! are split at [`abi::op_arg_size`], ring entries arrive split. Here:
//! who may ask ([`Acl`]), what a read-only file system never sees, and
//! which method answers each opcode; what the arguments mean is decoded
//! in [`super::args`].

use super::abi::{self, read, InHeader};
use super::args;
use super::filesystem::{FuseFs, Request};
use super::reply::*;
use super::types::{AccessFlags, Errno, FileHandle, INodeNo, OpenFlags, RenameFlags};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Who may use the mount, beyond what the kernel already checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acl {
    /// Only the mounting user (the kernel enforces it: no allow_other).
    Owner,
    /// The mounting user and root (allow_root: allow_other, checked here).
    RootAndOwner,
    /// Everyone (allow_other).
    All,
}

/// What a connection agreed at INIT that serving each request needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Conn {
    pub acl: Acl,
    /// The mounting user (for [`Acl::RootAndOwner`]).
    pub owner: u32,
    /// FUSE_SETXATTR_EXT: SETXATTR's argument is the 16-byte
    /// fuse_setxattr_in, with `setxattr_flags`.
    pub setxattr_ext: bool,
}

impl Conn {
    /// The size of the opcode's fixed argument on this connection.
    pub fn arg_size(&self, opcode: u32) -> usize {
        if opcode == abi::FUSE_SETXATTR && !self.setxattr_ext {
            return abi::FUSE_COMPAT_SETXATTR_IN_SIZE;
        }
        abi::op_arg_size(opcode)
    }
}

/// Requests that never get a reply.
pub(crate) fn no_reply(opcode: u32) -> bool {
    matches!(
        opcode,
        abi::FUSE_FORGET | abi::FUSE_BATCH_FORGET | abi::FUSE_INTERRUPT
    )
}

/// Requests on a descriptor already open (or the connection's end), let
/// through `allow_root`'s check as fuser did: a descriptor passed to or
/// inherited by another user keeps working.
fn on_open_file(opcode: u32) -> bool {
    matches!(
        opcode,
        abi::FUSE_READ
            | abi::FUSE_WRITE
            | abi::FUSE_FLUSH
            | abi::FUSE_FSYNC
            | abi::FUSE_FSYNCDIR
            | abi::FUSE_READDIR
            | abi::FUSE_READDIRPLUS
            | abi::FUSE_RELEASE
            | abi::FUSE_RELEASEDIR
            | abi::FUSE_DESTROY
    )
}

/// The name up to its NUL and what follows it.
fn cstr(b: &[u8]) -> Option<(&OsStr, &[u8])> {
    let n = b.iter().position(|&c| c == 0)?;
    Some((OsStr::from_bytes(&b[..n]), &b[n + 1..]))
}

/// Runs `f` (one request's dispatch), containing a panic: the reply it
/// owned answers EIO as it unwinds, and the serving thread goes on. A ring
/// queue thread that died would leave its CPU's requests waiting forever.
pub(crate) fn guarded(f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        crate::logging::error("a request handler panicked; it was answered EIO");
    }
}

/// Serves one request. `arg` is the fixed argument (`in_args[0]`), `data`
/// the rest. A malformed request is answered EINVAL (EIO for one we
/// cannot read at all) and logged.
pub(crate) fn dispatch<F: FuseFs>(
    fs: &F,
    conn: Conn,
    h: &InHeader,
    arg: &[u8],
    data: &[u8],
    s: Sender,
) {
    let req = Request {
        unique: h.unique,
        uid: h.uid,
        gid: h.gid,
        pid: h.pid,
    };
    if no_reply(h.opcode) {
        // No lookup counts are kept (node ids are a pure function of the
        // inode) and requests are not cancelled midway.
        return;
    }
    if conn.acl == Acl::RootAndOwner && h.uid != 0 && h.uid != conn.owner && !on_open_file(h.opcode)
    {
        return ReplyEmpty::new(s).error(Errno::EACCES);
    }
    if changes(h.opcode) && fs.read_only() {
        return ReplyEmpty::new(s).error(Errno::EROFS);
    }
    if serve(fs, &req, h, arg, data, s).is_none() {
        crate::logging::warn(&format!(
            "malformed request: opcode {} of {} + {} bytes",
            h.opcode,
            arg.len(),
            data.len()
        ));
    }
}

/// Whether a request would change the filesystem.
fn changes(opcode: u32) -> bool {
    matches!(
        opcode,
        abi::FUSE_SETATTR
            | abi::FUSE_MKNOD
            | abi::FUSE_MKDIR
            | abi::FUSE_UNLINK
            | abi::FUSE_RMDIR
            | abi::FUSE_SYMLINK
            | abi::FUSE_RENAME
            | abi::FUSE_RENAME2
            | abi::FUSE_LINK
            | abi::FUSE_WRITE
            | abi::FUSE_SETXATTR
            | abi::FUSE_REMOVEXATTR
            | abi::FUSE_CREATE
            | abi::FUSE_TMPFILE
            | abi::FUSE_FALLOCATE
            | abi::FUSE_COPY_FILE_RANGE
            | abi::FUSE_COPY_FILE_RANGE_64
    )
}

/// Answers the request; None (with EINVAL sent) when it is malformed.
fn serve<F: FuseFs>(
    fs: &F,
    req: &Request,
    h: &InHeader,
    arg: &[u8],
    data: &[u8],
    s: Sender,
) -> Option<()> {
    let node = INodeNo(h.nodeid);
    // What a malformed request cannot give: answered EINVAL.
    macro_rules! or_einval {
        ($e:expr) => {
            match $e {
                Some(x) => x,
                None => {
                    ReplyEmpty::new(s).error(Errno::EINVAL);
                    return None;
                }
            }
        };
    }
    // The fixed argument; a name up to its NUL, and what follows it.
    macro_rules! arg {
        ($t:ty) => {
            or_einval!(read::<$t>(arg))
        };
    }
    macro_rules! name {
        ($b:expr) => {
            or_einval!(cstr($b))
        };
    }
    // A request whose one argument is its fixed one, decoded (args.rs).
    macro_rules! with_arg {
        ($t:ty, $method:ident, $reply:expr) => {{
            let a = arg!($t);
            fs.$method(req, node, (&a).into(), $reply)
        }};
    }
    // One that makes an entry: its fixed argument and the new name.
    macro_rules! with_arg_and_name {
        ($t:ty, $args:ident, $method:ident, $reply:expr) => {{
            let a = arg!($t);
            let (name, _) = name!(data);
            fs.$method(req, node, args::$args::new(&a, name), $reply)
        }};
    }
    match h.opcode {
        abi::FUSE_LOOKUP => {
            let (name, _) = name!(data);
            fs.lookup(req, node, name, ReplyEntry::new(s));
        }
        abi::FUSE_GETATTR => {
            let a = arg!(abi::GetattrIn);
            let fh = (a.getattr_flags & abi::FUSE_GETATTR_FH != 0).then_some(FileHandle(a.fh));
            fs.getattr(req, node, fh, ReplyAttr::new(s));
        }
        abi::FUSE_STATX => {
            // The same attributes, answered with the birth time (btrfs
            // keeps it: the inode's otime) as the kernel's btrfs does;
            // the kernel asks when a caller wants more than the basic
            // statistics (statx with STATX_BTIME).
            let a = arg!(abi::StatxIn);
            let fh = (a.getattr_flags & abi::FUSE_GETATTR_FH != 0).then_some(FileHandle(a.fh));
            fs.getattr(req, node, fh, ReplyAttr::statx(s));
        }
        abi::FUSE_SETATTR => with_arg!(abi::SetattrIn, setattr, ReplyAttr::new(s)),
        abi::FUSE_READLINK => fs.readlink(req, node, ReplyData::new(s)),
        abi::FUSE_SYMLINK => {
            let (name, rest) = name!(data);
            let (target, _) = name!(rest);
            fs.symlink(req, node, name, Path::new(target), ReplyEntry::new(s));
        }
        abi::FUSE_MKNOD => with_arg_and_name!(abi::MknodIn, Mknod, mknod, ReplyEntry::new(s)),
        abi::FUSE_MKDIR => with_arg_and_name!(abi::MkdirIn, Mkdir, mkdir, ReplyEntry::new(s)),
        abi::FUSE_UNLINK => {
            let (name, _) = name!(data);
            fs.unlink(req, node, name, ReplyEmpty::new(s));
        }
        abi::FUSE_RMDIR => {
            let (name, _) = name!(data);
            fs.rmdir(req, node, name, ReplyEmpty::new(s));
        }
        abi::FUSE_RENAME | abi::FUSE_RENAME2 => {
            let (newdir, flags) = if h.opcode == abi::FUSE_RENAME {
                (arg!(abi::NodeIn).nodeid, 0)
            } else {
                let a = arg!(abi::Rename2In);
                (a.newdir, a.flags)
            };
            let (name, rest) = name!(data);
            let (newname, _) = name!(rest);
            let r = args::Rename {
                name,
                newparent: INodeNo(newdir),
                newname,
                flags: RenameFlags::from_bits_retain(flags),
            };
            fs.rename(req, node, r, ReplyEmpty::new(s));
        }
        abi::FUSE_LINK => {
            let a = arg!(abi::NodeIn);
            let (name, _) = name!(data);
            fs.link(req, INodeNo(a.nodeid), node, name, ReplyEntry::new(s));
        }
        abi::FUSE_OPEN => with_arg!(abi::OpenIn, open, ReplyOpen::new(s)),
        abi::FUSE_OPENDIR => {
            let a = arg!(abi::OpenIn);
            fs.opendir(req, node, OpenFlags(a.flags as i32), ReplyOpen::new(s));
        }
        abi::FUSE_READ => with_arg!(abi::ReadIn, read, ReplyData::new(s)),
        abi::FUSE_WRITE => {
            let w = or_einval!(args::Write::new(&arg!(abi::WriteIn), data));
            fs.write(req, node, w, ReplyWrite::new(s));
        }
        abi::FUSE_FLUSH => with_arg!(abi::FlushIn, flush, ReplyEmpty::new(s)),
        abi::FUSE_RELEASE => with_arg!(abi::ReleaseIn, release, ReplyEmpty::new(s)),
        abi::FUSE_RELEASEDIR => with_arg!(abi::ReleaseIn, releasedir, ReplyEmpty::new(s)),
        abi::FUSE_FSYNC => with_arg!(abi::FsyncIn, fsync, ReplyEmpty::new(s)),
        abi::FUSE_FSYNCDIR => with_arg!(abi::FsyncIn, fsyncdir, ReplyEmpty::new(s)),
        abi::FUSE_READDIR => {
            let a = arg!(abi::ReadIn);
            let reply = ReplyDirectory::new(s, a.size as usize);
            fs.readdir(req, node, (&a).into(), reply);
        }
        abi::FUSE_READDIRPLUS => {
            let a = arg!(abi::ReadIn);
            let reply = ReplyDirectoryPlus::new(s, a.size as usize);
            fs.readdirplus(req, node, (&a).into(), reply);
        }
        abi::FUSE_STATFS => fs.statfs(req, node, ReplyStatfs::new(s)),
        abi::FUSE_SETXATTR => {
            let (name, value) = name!(data);
            let x = or_einval!(args::Setxattr::new(arg, name, value));
            fs.setxattr(req, node, x, ReplyEmpty::new(s));
        }
        abi::FUSE_GETXATTR => {
            let a = arg!(abi::XattrSize);
            let (name, _) = name!(data);
            fs.getxattr(req, node, name, a.size, ReplyXattr::new(s));
        }
        abi::FUSE_LISTXATTR => {
            let a = arg!(abi::XattrSize);
            fs.listxattr(req, node, a.size, ReplyXattr::new(s));
        }
        abi::FUSE_REMOVEXATTR => {
            let (name, _) = name!(data);
            fs.removexattr(req, node, name, ReplyEmpty::new(s));
        }
        abi::FUSE_ACCESS => {
            let a = arg!(abi::AccessIn);
            let mask = AccessFlags::from_bits_retain(a.mask as i32);
            fs.access(req, node, mask, ReplyEmpty::new(s));
        }
        abi::FUSE_CREATE => with_arg_and_name!(abi::CreateIn, Create, create, ReplyCreate::new(s)),
        abi::FUSE_TMPFILE => {
            let a = arg!(abi::CreateIn);
            let c = args::Create::new(&a, OsStr::new(""));
            fs.tmpfile(req, node, c, ReplyCreate::new(s));
        }
        abi::FUSE_IOCTL => {
            let io = or_einval!(args::Ioctl::new(&arg!(abi::IoctlIn), data));
            fs.ioctl(req, node, io, ReplyIoctl::new(s));
        }
        abi::FUSE_FALLOCATE => with_arg!(abi::FallocateIn, fallocate, ReplyEmpty::new(s)),
        abi::FUSE_LSEEK => with_arg!(abi::LseekIn, lseek, ReplyLseek::new(s)),
        abi::FUSE_COPY_FILE_RANGE | abi::FUSE_COPY_FILE_RANGE_64 => {
            // Answering the 64-bit opcode matters beyond large copies:
            // the kernel (6.18) tries it first and, on ENOSYS, falls back
            // to the old one; two first copies at once can both see
            // ENOSYS, and the second then takes it for the old opcode's
            // and turns every later copy_file_range of the mount into a
            // byte copy (holes written as zeros).
            let wide = h.opcode == abi::FUSE_COPY_FILE_RANGE_64;
            with_arg!(
                abi::CopyFileRangeIn,
                copy_file_range,
                ReplyCopy::new(s, wide)
            );
        }
        abi::FUSE_SYNCFS => fs.syncfs(req, ReplyEmpty::new(s)),
        abi::FUSE_DESTROY => {
            fs.destroy();
            ReplyEmpty::new(s).ok();
        }
        op => {
            note_unknown(op);
            ReplyEmpty::new(s).error(Errno::ENOSYS)
        }
    }
    Some(())
}

/// Logs, once per opcode (for the first 64 of them), a request this
/// mount does not know: the kernel may take ENOSYS for "never again"
/// and change course, as it did with FUSE_COPY_FILE_RANGE_64.
fn note_unknown(opcode: u32) {
    static SEEN: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.len() < 64 && !seen.contains(&opcode) {
        seen.push(opcode);
        crate::logging::info(&format!(
            "the kernel sent FUSE opcode {opcode}, which this mount does not implement: answered ENOSYS"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use crate::proto::reply::tests::{Capture, Sent};
    use std::time::{Duration, UNIX_EPOCH};

    /// Records the calls it gets; read-only when `.1` is set.
    #[derive(Default)]
    struct Calls(Mutex<Vec<String>>, bool);
    impl FuseFs for Calls {
        fn read_only(&self) -> bool {
            self.1
        }
        fn rename(&self, _: &Request, parent: INodeNo, r: args::Rename, reply: ReplyEmpty) {
            self.0.lock().unwrap().push(format!(
                "rename {} {:?} {} {:?} {}",
                parent.0,
                r.name,
                r.newparent.0,
                r.newname,
                r.flags.bits()
            ));
            reply.ok()
        }
        fn write(&self, _: &Request, ino: INodeNo, w: args::Write, reply: ReplyWrite) {
            self.0.lock().unwrap().push(format!(
                "write {} {} {} {:?} {:#o}",
                ino.0, w.fh.0, w.offset, w.data, w.flags.0
            ));
            reply.written(w.data.len() as u32)
        }
        fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
            self.0.lock().unwrap().push(format!("getattr {}", ino.0));
            let t = UNIX_EPOCH + Duration::new(1_700_000_000, 5);
            let attr = crate::proto::FileAttr {
                ino,
                size: 12345,
                blocks: 32,
                atime: t,
                mtime: t,
                ctime: t,
                crtime: UNIX_EPOCH - Duration::new(1, 250_000_000),
                kind: crate::proto::FileType::RegularFile,
                perm: 0o640,
                nlink: 1,
                uid: 1000,
                gid: 1000,
                rdev: 0,
                blksize: 4096,
                flags: 0,
            };
            reply.attr(&Duration::from_secs(1), &attr)
        }
        fn setxattr(&self, _: &Request, ino: INodeNo, x: args::Setxattr, reply: ReplyEmpty) {
            self.0.lock().unwrap().push(format!(
                "setxattr {} {:?} {:?} {} {}",
                ino.0, x.name, x.value, x.flags, x.setxattr_flags
            ));
            reply.ok()
        }
        fn copy_file_range(
            &self,
            _: &Request,
            ino: INodeNo,
            c: args::CopyFileRange,
            reply: ReplyCopy,
        ) {
            self.0.lock().unwrap().push(format!(
                "copy {} {} {} {} {}",
                ino.0, c.offset_in, c.ino_out.0, c.offset_out, c.len
            ));
            reply.copied(c.len)
        }
    }

    fn run(opcode: u32, arg: &[u8], data: &[u8]) -> (Vec<String>, Vec<Sent>) {
        run_on(Calls::default(), Acl::All, 0, opcode, arg, data)
    }

    fn run_on(
        fs: Calls,
        acl: Acl,
        uid: u32,
        opcode: u32,
        arg: &[u8],
        data: &[u8],
    ) -> (Vec<String>, Vec<Sent>) {
        let cap = Arc::new(Capture::default());
        let h = InHeader {
            opcode,
            unique: 42,
            nodeid: 5,
            uid,
            ..InHeader::default()
        };
        let s = Sender {
            transport: cap.clone(),
            slot: 0,
            unique: 42,
        };
        let conn = Conn {
            acl,
            owner: 1000,
            setxattr_ext: true,
        };
        dispatch(&fs, conn, &h, arg, data, s);
        let calls = fs.0.lock().unwrap().clone();
        let sent = cap.0.lock().unwrap().clone();
        (calls, sent)
    }

    #[test]
    fn setxattr_takes_either_argument_size() {
        // FUSE_SETXATTR_EXT: 16 bytes, with setxattr_flags; without it
        // the kernel sends the first 8 and the name follows at once.
        let ext = abi::SetxattrIn {
            size: 2,
            flags: 1,
            setxattr_flags: abi::FUSE_SETXATTR_ACL_KILL_SGID,
            padding: 0,
        };
        let body = b"user.a\0hi";
        for (setxattr_ext, want) in [(true, 1), (false, 0)] {
            let conn = Conn {
                acl: Acl::All,
                owner: 0,
                setxattr_ext,
            };
            let mut msg = abi::bytes(&ext)[..conn.arg_size(abi::FUSE_SETXATTR)].to_vec();
            msg.extend_from_slice(body);
            let (arg, data) = msg.split_at(conn.arg_size(abi::FUSE_SETXATTR));
            let (calls, sent) = run(abi::FUSE_SETXATTR, arg, data);
            assert_eq!(sent[0].1, 0, "ext {setxattr_ext}");
            assert_eq!(
                calls,
                [format!("setxattr 5 \"user.a\" [104, 105] 1 {want}")]
            );
        }
    }

    #[test]
    fn allow_root_refuses_others_but_not_on_open_files() {
        let w = abi::WriteIn {
            size: 1,
            ..abi::WriteIn::default()
        };
        // The owner (1000) and root pass; another user only on an open file.
        for uid in [0, 1000] {
            let (_, sent) = run_on(
                Calls::default(),
                Acl::RootAndOwner,
                uid,
                abi::FUSE_UNLINK,
                &[],
                b"x\0",
            );
            assert_eq!(sent[0].1, -libc::ENOSYS, "uid {uid}");
        }
        let (_, sent) = run_on(
            Calls::default(),
            Acl::RootAndOwner,
            7,
            abi::FUSE_UNLINK,
            &[],
            b"x\0",
        );
        assert_eq!(sent[0].1, -libc::EACCES);
        let (calls, sent) = run_on(
            Calls::default(),
            Acl::RootAndOwner,
            7,
            abi::FUSE_WRITE,
            abi::bytes(&w),
            b"z",
        );
        assert_eq!((calls.len(), sent[0].1), (1, 0));
    }

    #[test]
    fn a_read_only_filesystem_gets_no_change() {
        let w = abi::WriteIn {
            size: 1,
            ..abi::WriteIn::default()
        };
        let ro = || Calls(Mutex::default(), true);
        let (calls, sent) = run_on(ro(), Acl::All, 0, abi::FUSE_WRITE, abi::bytes(&w), b"z");
        assert_eq!((calls.len(), sent[0].1), (0, -libc::EROFS));
        let (_, sent) = run_on(ro(), Acl::All, 0, abi::FUSE_UNLINK, &[], b"x\0");
        assert_eq!(sent[0].1, -libc::EROFS);
        // Reads reach it.
        let g = abi::GetattrIn::default();
        let (calls, _) = run_on(ro(), Acl::All, 0, abi::FUSE_GETATTR, abi::bytes(&g), &[]);
        assert_eq!(calls.len(), 1);
    }

    #[test]
    fn rename2_names_and_flags() {
        let a = abi::Rename2In {
            newdir: 9,
            flags: libc::RENAME_NOREPLACE,
            padding: 0,
        };
        let (calls, sent) = run(abi::FUSE_RENAME2, abi::bytes(&a), b"old\0new\0");
        assert_eq!(calls, vec![r#"rename 5 "old" 9 "new" 1"#.to_string()]);
        assert_eq!(sent, vec![(42, 0, vec![])]);
    }

    #[test]
    fn write_takes_size_bytes() {
        let a = abi::WriteIn {
            fh: 3,
            offset: 4096,
            size: 2,
            flags: libc::O_DIRECT as u32,
            ..abi::WriteIn::default()
        };
        let (calls, sent) = run(abi::FUSE_WRITE, abi::bytes(&a), b"abc");
        assert_eq!(
            calls,
            vec![format!("write 5 3 4096 [97, 98] {:#o}", libc::O_DIRECT)]
        );
        assert_eq!(
            sent[0].2,
            abi::bytes(&abi::WriteOut {
                size: 2,
                padding: 0
            })
        );
    }

    /// STATX is answered with GETATTR's attributes and the birth time.
    #[test]
    fn statx_answers_the_attributes_and_birth_time() {
        let a = abi::StatxIn {
            sx_mask: libc::STATX_BASIC_STATS | libc::STATX_BTIME,
            ..abi::StatxIn::default()
        };
        let (calls, sent) = run(abi::FUSE_STATX, abi::bytes(&a), &[]);
        assert_eq!(calls, vec!["getattr 5".to_string()]);
        let out: abi::StatxOut = read(&sent[0].2).expect("a statx answer");
        assert_eq!(sent[0].2.len(), std::mem::size_of::<abi::StatxOut>());
        let st = out.stat;
        assert_eq!(st.mask, libc::STATX_BASIC_STATS | libc::STATX_BTIME);
        assert_eq!((st.ino, st.size, st.nlink), (5, 12345, 1));
        assert_eq!(st.mode as u32, libc::S_IFREG | 0o640);
        // 1.25 s before the epoch: (-2, 750000000), as fuse_attr's times.
        assert_eq!(
            (st.btime.tv_sec as i64, st.btime.tv_nsec),
            (-2, 750_000_000)
        );
        assert_eq!((st.mtime.tv_sec, st.mtime.tv_nsec), (1_700_000_000, 5));
        assert_eq!(out.attr_valid, 1);
    }

    /// Both copy_file_range opcodes reach the file system; the 64-bit
    /// one is answered with a 64-bit count, the old one with a
    /// fuse_write_out.
    #[test]
    fn copy_file_range_answers_both_opcodes() {
        let a = abi::CopyFileRangeIn {
            fh_in: 1,
            off_in: 4096,
            nodeid_out: 9,
            fh_out: 2,
            off_out: 8192,
            len: 5 << 30,
            flags: 0,
        };
        let (calls, sent) = run(abi::FUSE_COPY_FILE_RANGE_64, abi::bytes(&a), &[]);
        assert_eq!(calls, vec![format!("copy 5 4096 9 8192 {}", 5u64 << 30)]);
        assert_eq!(sent, vec![(42, 0, (5u64 << 30).to_ne_bytes().to_vec())]);
        let a = abi::CopyFileRangeIn { len: 12288, ..a };
        let (_, sent) = run(abi::FUSE_COPY_FILE_RANGE, abi::bytes(&a), &[]);
        let out = abi::WriteOut {
            size: 12288,
            padding: 0,
        };
        assert_eq!(sent, vec![(42, 0, abi::bytes(&out).to_vec())]);
    }

    #[test]
    fn malformed_requests_get_einval() {
        // A name without its NUL, a write shorter than it says, a short arg.
        let (calls, sent) = run(abi::FUSE_UNLINK, &[], b"abc");
        assert!(calls.is_empty());
        assert_eq!(sent, vec![(42, -libc::EINVAL, vec![])]);
        let a = abi::WriteIn {
            size: 10,
            ..abi::WriteIn::default()
        };
        let (calls, sent) = run(abi::FUSE_WRITE, abi::bytes(&a), b"abc");
        assert!(calls.is_empty());
        assert_eq!(sent[0].1, -libc::EINVAL);
        let (_, sent) = run(abi::FUSE_WRITE, &[0; 8], b"abc");
        assert_eq!(sent[0].1, -libc::EINVAL);
    }

    #[test]
    fn unknown_and_unimplemented_are_enosys_and_forget_is_silent() {
        let (_, sent) = run(4242, &[], &[]);
        assert_eq!(sent[0].1, -libc::ENOSYS);
        let (_, sent) = run(abi::FUSE_READLINK, &[], &[]);
        assert_eq!(sent[0].1, -libc::ENOSYS);
        let (_, sent) = run(abi::FUSE_FORGET, &[1, 0, 0, 0, 0, 0, 0, 0], &[]);
        assert!(sent.is_empty());
    }
}
