//! The file system served: the same as /work/shared/tools/fuse_floor.c, so
//! that the three daemons of bench/transport.sh differ only in the transport
//! and the protocol layer. A root directory (ino 1) holding one file "f"
//! (ino 2) of 1 GiB whose map alternates 4 KiB of data and 4 KiB of hole;
//! lseek is answered arithmetically and reads return 0xab bytes. No state:
//! every request is answered from its own arguments, so the io_uring queue
//! threads and the /dev/fuse reader share nothing and take no locks.

use crate::proto::*;

pub const ROOT_INO: u64 = 1;
pub const FILE_INO: u64 = 2;
pub const FILE_NAME: &[u8] = b"f";
pub const FILE_SIZE: u64 = 1 << 30;
/// Attribute and entry validity in seconds, as fuse_floor.c (3600): the
/// benches measure lseek and read round trips, not attribute revalidation.
/// The stat loop forces GETATTR with AT_STATX_FORCE_SYNC instead.
const TTL: u64 = 3600;

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;

/// What a request turned into. The transport turns it into bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A reply whose payload is the first `n` bytes of the output buffer.
    Reply(usize),
    /// A reply of `n` bytes of file data (all 0xab). Kept apart from
    /// `Reply` so that each transport can supply the bytes its cheapest way
    /// (a static buffer for writev, a pre-filled ring payload buffer),
    /// like a real server reading straight into the reply buffer.
    Data(usize),
    /// An error reply (positive errno).
    Err(i32),
    /// No reply at all: FORGET, BATCH_FORGET, INTERRUPT.
    None,
}

fn attr(ino: u64) -> Attr {
    let mut a = Attr {
        ino,
        blksize: 4096,
        ..Attr::default()
    };
    if ino == ROOT_INO {
        a.mode = S_IFDIR | 0o755;
        a.nlink = 2;
    } else {
        a.mode = S_IFREG | 0o644;
        a.nlink = 1;
        a.size = FILE_SIZE;
        // st_blocks is in 512-byte units; half the file is data but the
        // floor daemon reports SZ/1024 too, so keep the same.
        a.blocks = FILE_SIZE / 1024;
    }
    a
}

/// Copies `b` to the front of `out`, or fails with ERANGE when the output
/// buffer is too small (it never is with the buffers the transports use,
/// but a wrong size must not panic).
fn put(out: &mut [u8], b: &[u8]) -> Outcome {
    match out.get_mut(..b.len()) {
        Some(dst) => {
            dst.copy_from_slice(b);
            Outcome::Reply(b.len())
        }
        None => Outcome::Err(libc::ERANGE),
    }
}

/// Whether an inode number names something we serve.
fn known(ino: u64) -> bool {
    ino == ROOT_INO || ino == FILE_INO
}

/// Answers one request (INIT excepted: the transport owns the handshake).
/// `arg` is the opcode's fixed argument struct, `data` what follows it (a
/// name for LOOKUP); `out` receives the reply payload. Short or malformed
/// arguments are EINVAL, never a panic.
pub fn dispatch(h: &InHeader, arg: &[u8], data: &[u8], out: &mut [u8]) -> Outcome {
    match h.opcode {
        FUSE_LOOKUP => {
            // The name is NUL-terminated in the request.
            let name = data.split(|&c| c == 0).next().unwrap_or(&[]);
            if h.nodeid != ROOT_INO || name != FILE_NAME {
                return Outcome::Err(libc::ENOENT);
            }
            let e = EntryOut {
                nodeid: FILE_INO,
                entry_valid: TTL,
                attr_valid: TTL,
                attr: attr(FILE_INO),
                ..EntryOut::default()
            };
            put(out, bytes(&e))
        }
        FUSE_GETATTR => {
            if !known(h.nodeid) {
                return Outcome::Err(libc::ENOENT);
            }
            let a = AttrOut {
                attr_valid: TTL,
                attr: attr(h.nodeid),
                ..AttrOut::default()
            };
            put(out, bytes(&a))
        }
        FUSE_OPEN => {
            if h.nodeid != FILE_INO {
                return Outcome::Err(libc::EISDIR);
            }
            let o = OpenOut {
                open_flags: FOPEN_KEEP_CACHE,
                ..OpenOut::default()
            };
            put(out, bytes(&o))
        }
        FUSE_OPENDIR => {
            if h.nodeid != ROOT_INO {
                return Outcome::Err(libc::ENOTDIR);
            }
            put(out, bytes(&OpenOut::default()))
        }
        FUSE_READ => {
            let Some(r) = read::<ReadIn>(arg) else {
                return Outcome::Err(libc::EINVAL);
            };
            if h.nodeid != FILE_INO {
                return Outcome::Err(libc::EISDIR);
            }
            let n = if r.offset >= FILE_SIZE {
                0
            } else {
                (r.size as u64).min(FILE_SIZE - r.offset) as usize
            };
            if n > out.len() {
                return Outcome::Err(libc::ERANGE);
            }
            Outcome::Data(n)
        }
        FUSE_LSEEK => {
            let Some(l) = read::<LseekIn>(arg) else {
                return Outcome::Err(libc::EINVAL);
            };
            match lseek(l.offset, l.whence as i32) {
                Ok(off) => put(out, bytes(&LseekOut { offset: off })),
                Err(e) => Outcome::Err(e),
            }
        }
        FUSE_READDIR => {
            let Some(r) = read::<ReadIn>(arg) else {
                return Outcome::Err(libc::EINVAL);
            };
            readdir(r.offset, (r.size as usize).min(out.len()), out)
        }
        FUSE_STATFS => {
            let s = Kstatfs {
                blocks: FILE_SIZE / 4096,
                bsize: 4096,
                frsize: 4096,
                namelen: 255,
                files: 2,
                ..Kstatfs::default()
            };
            put(out, bytes(&s))
        }
        FUSE_FLUSH | FUSE_RELEASE | FUSE_RELEASEDIR | FUSE_DESTROY => Outcome::Reply(0),
        // Requests are answered as soon as they are read, so there is
        // never anything to interrupt; the kernel needs no reply.
        FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT => Outcome::None,
        _ => Outcome::Err(libc::ENOSYS),
    }
}

/// SEEK_DATA / SEEK_HOLE on the 4 KiB data / 4 KiB hole map, with the same
/// arithmetic as fuse_floor.c. ENXIO at or past EOF, as the VFS expects.
pub fn lseek(off: u64, whence: i32) -> Result<u64, i32> {
    if off >= FILE_SIZE {
        return Err(libc::ENXIO);
    }
    let in_data = off % 8192 < 4096;
    match whence {
        libc::SEEK_DATA => Ok(if in_data { off } else { (off | 8191) + 1 }),
        libc::SEEK_HOLE => Ok(if in_data { (off | 4095) + 1 } else { off }),
        _ => Err(libc::EINVAL),
    }
}

/// The root directory: ".", "..", "f" at offsets 1, 2, 3; `off` is the
/// offset of the last entry the kernel has seen.
fn readdir(off: u64, max: usize, out: &mut [u8]) -> Outcome {
    let entries: [(u64, &[u8], u32); 3] = [
        (ROOT_INO, b".", libc::DT_DIR as u32),
        (ROOT_INO, b"..", libc::DT_DIR as u32),
        (FILE_INO, FILE_NAME, libc::DT_REG as u32),
    ];
    let mut n = 0usize;
    for (i, (ino, name, typ)) in entries.iter().enumerate().skip(off as usize) {
        let d = Dirent {
            ino: *ino,
            off: i as u64 + 1,
            namelen: name.len() as u32,
            typ: *typ,
        };
        let len = std::mem::size_of::<Dirent>() + name.len();
        let padded = (len + 7) & !7;
        if n + padded > max {
            break;
        }
        out[n..n + 24].copy_from_slice(bytes(&d));
        out[n + 24..n + len].copy_from_slice(name);
        out[n + len..n + padded].fill(0);
        n += padded;
    }
    Outcome::Reply(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lseek_map() {
        assert_eq!(lseek(0, libc::SEEK_DATA), Ok(0));
        assert_eq!(lseek(0, libc::SEEK_HOLE), Ok(4096));
        assert_eq!(lseek(4096, libc::SEEK_DATA), Ok(8192));
        assert_eq!(lseek(5000, libc::SEEK_HOLE), Ok(5000));
        assert_eq!(lseek(FILE_SIZE - 1, libc::SEEK_DATA), Ok(FILE_SIZE));
        assert_eq!(lseek(FILE_SIZE, libc::SEEK_DATA), Err(libc::ENXIO));
    }

    #[test]
    fn short_args_do_not_panic() {
        let h = InHeader {
            opcode: FUSE_READ,
            nodeid: FILE_INO,
            ..InHeader::default()
        };
        let mut out = [0u8; 64];
        assert_eq!(
            dispatch(&h, &[1, 2], &[], &mut out),
            Outcome::Err(libc::EINVAL)
        );
        let h = InHeader {
            opcode: FUSE_LSEEK,
            ..h
        };
        assert_eq!(dispatch(&h, &[], &[], &mut out), Outcome::Err(libc::EINVAL));
        // A reply larger than the output buffer is ERANGE, not a panic.
        let h = InHeader {
            opcode: FUSE_LOOKUP,
            nodeid: ROOT_INO,
            ..h
        };
        assert_eq!(
            dispatch(&h, &[], b"f\0", &mut out),
            Outcome::Err(libc::ERANGE)
        );
    }

    #[test]
    fn readdir_fits_and_resumes() {
        let mut out = [0u8; 4096];
        assert_eq!(readdir(0, 4096, &mut out), Outcome::Reply(3 * 32));
        assert_eq!(readdir(2, 4096, &mut out), Outcome::Reply(32));
        assert_eq!(readdir(3, 4096, &mut out), Outcome::Reply(0));
        assert_eq!(readdir(0, 40, &mut out), Outcome::Reply(32));
    }
}
