//! Writing a send stream: the header, then commands framed with their
//! length, type and CRC32C, built attribute by attribute. The numbers are
//! the format's ([`ubtrfs_format::send_stream`]), which receive reads too.

use crate::error::{Error, Result};
use std::io::Write;
use ubtrfs_format::send_stream::{attr, CMD_HEADER, MAGIC};

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
