//! The send stream format: the stream header, commands framed with their
//! length, type and CRC32C, and TLV attributes (protocol versions 1 and 2).
//! Facts from btrfs-progs' Documentation/dev/dev-send-stream.rst and
//! kernel-shared/send.h.

use crate::error::{Error, Result};
use std::io::Write;

pub const MAGIC: &[u8; 13] = b"btrfs-stream\0";

/// Command numbers.
pub mod cmd {
    pub const SUBVOL: u16 = 1;
    pub const SNAPSHOT: u16 = 2;
    pub const MKFILE: u16 = 3;
    pub const MKDIR: u16 = 4;
    pub const MKNOD: u16 = 5;
    pub const MKFIFO: u16 = 6;
    pub const MKSOCK: u16 = 7;
    pub const SYMLINK: u16 = 8;
    pub const RENAME: u16 = 9;
    pub const LINK: u16 = 10;
    pub const UNLINK: u16 = 11;
    pub const RMDIR: u16 = 12;
    pub const SET_XATTR: u16 = 13;
    pub const REMOVE_XATTR: u16 = 14;
    pub const WRITE: u16 = 15;
    pub const CLONE: u16 = 16;
    pub const TRUNCATE: u16 = 17;
    pub const CHMOD: u16 = 18;
    pub const CHOWN: u16 = 19;
    pub const UTIMES: u16 = 20;
    pub const END: u16 = 21;
    pub const UPDATE_EXTENT: u16 = 22;
    pub const FALLOCATE: u16 = 23;
    pub const FILEATTR: u16 = 24;
    pub const ENCODED_WRITE: u16 = 25;
}

/// Attribute (TLV) types.
pub mod attr {
    pub const UUID: u16 = 1;
    pub const CTRANSID: u16 = 2;
    pub const INO: u16 = 3;
    pub const SIZE: u16 = 4;
    pub const MODE: u16 = 5;
    pub const UID: u16 = 6;
    pub const GID: u16 = 7;
    pub const RDEV: u16 = 8;
    pub const CTIME: u16 = 9;
    pub const MTIME: u16 = 10;
    pub const ATIME: u16 = 11;
    pub const OTIME: u16 = 12;
    pub const XATTR_NAME: u16 = 13;
    pub const XATTR_DATA: u16 = 14;
    pub const PATH: u16 = 15;
    pub const PATH_TO: u16 = 16;
    pub const PATH_LINK: u16 = 17;
    pub const FILE_OFFSET: u16 = 18;
    pub const DATA: u16 = 19;
    pub const CLONE_UUID: u16 = 20;
    pub const CLONE_CTRANSID: u16 = 21;
    pub const CLONE_PATH: u16 = 22;
    pub const CLONE_OFFSET: u16 = 23;
    pub const CLONE_LEN: u16 = 24;
    pub const FALLOCATE_MODE: u16 = 25;
    pub const FILEATTR: u16 = 26;
    pub const UNENCODED_FILE_LEN: u16 = 27;
    pub const UNENCODED_LEN: u16 = 28;
    pub const UNENCODED_OFFSET: u16 = 29;
    pub const COMPRESSION: u16 = 30;
    pub const ENCRYPTION: u16 = 31;
}

/// Command header: le32 payload length, le16 command, le32 crc.
const CMD_HEADER: usize = 10;

/// fallocate(2) mode bits used by FALLOCATE.
pub const FALLOC_FL_KEEP_SIZE: u32 = 0x01;
pub const FALLOC_FL_PUNCH_HOLE: u32 = 0x02;

/// Largest file data one WRITE carries: the kernel's send buffer minus 16K
/// for the other attributes (64K buffer in v1, 16K + 128K in v2).
pub fn max_write(proto: u32) -> u64 {
    if proto >= 2 {
        128 * 1024
    } else {
        48 * 1024
    }
}

/// Writes one stream: header, then commands built attribute by attribute.
pub struct StreamWriter<'w> {
    out: Box<dyn Write + 'w>,
    buf: Vec<u8>,
    proto: u32,
    /// Bytes written so far.
    pub bytes: u64,
    /// Commands written so far, by command number.
    pub counts: [u64; 32],
}

fn io_err(e: std::io::Error) -> Error {
    Error::Io {
        path: "send stream".into(),
        op: "write".into(),
        source: e,
    }
}

impl<'w> StreamWriter<'w> {
    pub fn new(out: Box<dyn Write + 'w>, proto: u32) -> Self {
        StreamWriter {
            out,
            buf: Vec::with_capacity(256 * 1024),
            proto,
            bytes: 0,
            counts: [0; 32],
        }
    }

    pub fn proto(&self) -> u32 {
        self.proto
    }

    /// The stream header: magic and protocol version.
    pub fn header(&mut self) -> Result<()> {
        let mut h = Vec::with_capacity(17);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&self.proto.to_le_bytes());
        self.out.write_all(&h).map_err(io_err)?;
        self.bytes += h.len() as u64;
        Ok(())
    }

    /// Starts command `cmd`; attributes follow, then [`finish`](Self::finish).
    pub fn begin(&mut self, cmd: u16) {
        self.buf.clear();
        self.buf.extend_from_slice(&[0u8; CMD_HEADER]);
        self.buf[4..6].copy_from_slice(&cmd.to_le_bytes());
    }

    pub fn put(&mut self, attr: u16, data: &[u8]) {
        debug_assert!(data.len() <= u16::MAX as usize);
        self.buf.extend_from_slice(&attr.to_le_bytes());
        self.buf
            .extend_from_slice(&(data.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(data);
    }

    pub fn put_u64(&mut self, attr: u16, v: u64) {
        self.put(attr, &v.to_le_bytes());
    }

    pub fn put_u32(&mut self, attr: u16, v: u32) {
        self.put(attr, &v.to_le_bytes());
    }

    pub fn put_uuid(&mut self, attr: u16, u: &[u8; 16]) {
        self.put(attr, u);
    }

    pub fn put_timespec(&mut self, attr: u16, sec: i64, nsec: u32) {
        let mut b = [0u8; 12];
        b[..8].copy_from_slice(&sec.to_le_bytes());
        b[8..].copy_from_slice(&nsec.to_le_bytes());
        self.put(attr, &b);
    }

    /// Starts the DATA attribute with `len` bytes and returns the space to
    /// fill. From v2 the attribute carries only its type and must be last;
    /// its length is the rest of the command.
    pub fn data_slot(&mut self, len: usize) -> &mut [u8] {
        self.buf.extend_from_slice(&attr::DATA.to_le_bytes());
        if self.proto < 2 {
            debug_assert!(len <= u16::MAX as usize);
            self.buf.extend_from_slice(&(len as u16).to_le_bytes());
        }
        let at = self.buf.len();
        self.buf.resize(at + len, 0);
        &mut self.buf[at..]
    }

    pub fn put_data(&mut self, data: &[u8]) {
        self.data_slot(data.len()).copy_from_slice(data);
    }

    /// Frames the command (length, crc over header and payload with the crc
    /// field zero) and writes it.
    pub fn finish(&mut self) -> Result<()> {
        let len = (self.buf.len() - CMD_HEADER) as u32;
        self.buf[0..4].copy_from_slice(&len.to_le_bytes());
        // The kernel's crc32c(0, ...): the bare register update from 0, no
        // inversion in or out; crc32c_append inverts both ways.
        let crc = !crc32c::crc32c_append(!0, &self.buf);
        self.buf[6..10].copy_from_slice(&crc.to_le_bytes());
        self.out.write_all(&self.buf).map_err(io_err)?;
        self.bytes += self.buf.len() as u64;
        let cmd = u16::from_le_bytes([self.buf[4], self.buf[5]]) as usize;
        if cmd < self.counts.len() {
            self.counts[cmd] += 1;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(io_err)
    }
}
