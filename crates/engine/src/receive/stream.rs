//! Reading send streams (btrfs-progs' send-stream.c, facts from
//! Documentation/dev/dev-send-stream.rst): the header (magic and
//! version), then commands framed by length, type and CRC32C, each a list
//! of TLV attributes. Every length is checked against what is left of
//! the command; a command longer than [`MAX_COMMAND`] is refused before
//! anything is allocated for it. Errors name the stream offset.

use crate::error::{Error, Result};
use std::io::Read;
use ubtrfs_format::items::Timespec;
use ubtrfs_format::send_stream::{attr, cmd, MAGIC};

/// Largest command accepted: the kernel's largest send buffer is 16 KiB
/// plus 128 KiB of encoded data (protocol 2); v1 commands are at most 64
/// KiB.
pub const MAX_COMMAND: usize = 1 << 20;
/// Highest protocol version read.
pub const MAX_VERSION: u32 = 3;
const HEADER: usize = 10;

/// The name of a command number, as `btrfs receive --dump` shows it.
pub fn command_name(c: u16) -> &'static str {
    match c {
        cmd::SUBVOL => "subvol",
        cmd::SNAPSHOT => "snapshot",
        cmd::MKFILE => "mkfile",
        cmd::MKDIR => "mkdir",
        cmd::MKNOD => "mknod",
        cmd::MKFIFO => "mkfifo",
        cmd::MKSOCK => "mksock",
        cmd::SYMLINK => "symlink",
        cmd::RENAME => "rename",
        cmd::LINK => "link",
        cmd::UNLINK => "unlink",
        cmd::RMDIR => "rmdir",
        cmd::SET_XATTR => "set_xattr",
        cmd::REMOVE_XATTR => "remove_xattr",
        cmd::WRITE => "write",
        cmd::CLONE => "clone",
        cmd::TRUNCATE => "truncate",
        cmd::CHMOD => "chmod",
        cmd::CHOWN => "chown",
        cmd::UTIMES => "utimes",
        cmd::END => "end",
        cmd::UPDATE_EXTENT => "update_extent",
        cmd::FALLOCATE => "fallocate",
        cmd::FILEATTR => "fileattr",
        cmd::ENCODED_WRITE => "encoded_write",
        ENABLE_VERITY => "enable_verity",
        _ => "unknown",
    }
}

/// Protocol 3: fs-verity enabled on a file.
pub const ENABLE_VERITY: u16 = 26;

/// One command read from a stream.
#[derive(Debug, Clone)]
pub struct Command {
    /// Offset of the command in the stream (across concatenated streams).
    pub offset: u64,
    pub cmd: u16,
    /// The payload; attributes are ranges into it.
    body: Vec<u8>,
    attrs: Attrs,
}

/// A command's attributes: type and where its value is in the body.
type Attrs = Vec<(u16, std::ops::Range<usize>)>;

impl Command {
    pub fn name(&self) -> &'static str {
        command_name(self.cmd)
    }

    fn err(&self, detail: String) -> Error {
        Error::Invalid(format!(
            "send stream offset {}: {} command: {detail}",
            self.offset,
            self.name()
        ))
    }

    /// The raw value of attribute `a`, if present.
    pub fn get(&self, a: u16) -> Option<&[u8]> {
        self.attrs
            .iter()
            .find(|(t, _)| *t == a)
            .map(|(_, r)| &self.body[r.clone()])
    }

    /// The value of attribute `a`; an error naming it when missing.
    pub fn bytes(&self, a: u16) -> Result<&[u8]> {
        self.get(a)
            .ok_or_else(|| self.err(format!("attribute {} missing", attr_name(a))))
    }

    fn fixed<const N: usize>(&self, a: u16) -> Result<[u8; N]> {
        let v = self.bytes(a)?;
        v.try_into().map_err(|_| {
            self.err(format!(
                "attribute {} is {} bytes, expected {N}",
                attr_name(a),
                v.len()
            ))
        })
    }

    pub fn u64(&self, a: u16) -> Result<u64> {
        Ok(u64::from_le_bytes(self.fixed(a)?))
    }

    pub fn u32(&self, a: u16) -> Result<u32> {
        Ok(u32::from_le_bytes(self.fixed(a)?))
    }

    pub fn uuid(&self, a: u16) -> Result<[u8; 16]> {
        self.fixed(a)
    }

    pub fn timespec(&self, a: u16) -> Result<Timespec> {
        let b: [u8; 12] = self.fixed(a)?;
        let sec = i64::from_le_bytes(b[..8].try_into().unwrap());
        let nsec = u32::from_le_bytes(b[8..].try_into().unwrap());
        if nsec >= 1_000_000_000 {
            return Err(self.err(format!("attribute {} has {nsec} nanoseconds", attr_name(a))));
        }
        Ok(Timespec { sec, nsec })
    }

    /// A path inside the subvolume being received (attribute `a`):
    /// relative, components without '.', '..' or NUL; empty for the
    /// subvolume's top directory.
    pub fn path(&self, a: u16) -> Result<&[u8]> {
        let p = self.bytes(a)?;
        check_path(p).map_err(|d| self.err(format!("{} {:?}: {d}", attr_name(a), lossy(p))))?;
        Ok(p)
    }

    /// A name of one component (subvolume names).
    pub fn name_attr(&self, a: u16) -> Result<&[u8]> {
        let p = self.path(a)?;
        if p.is_empty() || p.contains(&b'/') {
            return Err(self.err(format!(
                "{} {:?}: must be one path component",
                attr_name(a),
                lossy(p)
            )));
        }
        Ok(p)
    }

    /// Adds the command and its offset to an error from applying it.
    pub fn context(&self, e: Error) -> Error {
        let path = self
            .get(attr::PATH)
            .map(|p| format!(" {:?}", lossy(p)))
            .unwrap_or_default();
        let at = format!(
            "send stream offset {}, {} command{path}",
            self.offset,
            self.name()
        );
        let p = |m: String| {
            if m.starts_with("send stream offset") {
                m
            } else {
                format!("{at}: {m}")
            }
        };
        match e {
            Error::NotFound(m) => Error::NotFound(p(m)),
            Error::Unsupported(m) => Error::Unsupported(p(m)),
            Error::Invalid(m) => Error::Invalid(p(m)),
            Error::NoSpace(m) => Error::NoSpace(p(m)),
            Error::Exists(m) => Error::Exists(p(m)),
            Error::NotEmpty(m) => Error::NotEmpty(p(m)),
            Error::ReadOnly(m) => Error::ReadOnly(p(m)),
            Error::NotDir(m) => Error::NotDir(p(m)),
            Error::IsDir(m) => Error::IsDir(p(m)),
            Error::NameTooLong(m) => Error::NameTooLong(p(m)),
            Error::TooManyLinks(m) => Error::TooManyLinks(p(m)),
            Error::Io { path, op, source } => Error::Io {
                path,
                op: format!("{op} ({at})"),
                source,
            },
            other => other.context(|| at),
        }
    }
}

pub(super) fn lossy(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

fn check_path(p: &[u8]) -> std::result::Result<(), &'static str> {
    if p.is_empty() {
        return Ok(());
    }
    if p.contains(&0) {
        return Err("contains a NUL byte");
    }
    if p.len() > 4095 {
        return Err("longer than PATH_MAX");
    }
    for c in p.split(|&b| b == b'/') {
        match c {
            b"" => return Err("absolute or with an empty component"),
            b"." | b".." => return Err("has a '.' or '..' component"),
            c if c.len() > 255 => return Err("has a component longer than 255 bytes"),
            _ => {}
        }
    }
    Ok(())
}

/// The name of an attribute number, for errors.
pub fn attr_name(a: u16) -> String {
    let n = match a {
        attr::UUID => "uuid",
        attr::CTRANSID => "ctransid",
        attr::INO => "ino",
        attr::SIZE => "size",
        attr::MODE => "mode",
        attr::UID => "uid",
        attr::GID => "gid",
        attr::RDEV => "rdev",
        attr::CTIME => "ctime",
        attr::MTIME => "mtime",
        attr::ATIME => "atime",
        attr::OTIME => "otime",
        attr::XATTR_NAME => "xattr_name",
        attr::XATTR_DATA => "xattr_data",
        attr::PATH => "path",
        attr::PATH_TO => "path_to",
        attr::PATH_LINK => "path_link",
        attr::FILE_OFFSET => "file_offset",
        attr::DATA => "data",
        attr::CLONE_UUID => "clone_uuid",
        attr::CLONE_CTRANSID => "clone_ctransid",
        attr::CLONE_PATH => "clone_path",
        attr::CLONE_OFFSET => "clone_offset",
        attr::CLONE_LEN => "clone_len",
        attr::FALLOCATE_MODE => "fallocate_mode",
        attr::FILEATTR => "fileattr",
        attr::UNENCODED_FILE_LEN => "unencoded_file_len",
        attr::UNENCODED_LEN => "unencoded_len",
        attr::UNENCODED_OFFSET => "unencoded_offset",
        attr::COMPRESSION => "compression",
        attr::ENCRYPTION => "encryption",
        _ => return format!("#{a}"),
    };
    n.to_string()
}

/// Reads commands from one or more concatenated streams.
pub struct StreamReader<R: Read> {
    input: R,
    /// Bytes consumed so far.
    pub offset: u64,
    /// The version of the current stream (0 before a header).
    pub version: u32,
    /// Buffers of a command given back ([`StreamReader::recycle`]), for
    /// the next one: a receive reads a million small commands.
    spare: Option<(Vec<u8>, Attrs)>,
}

/// What the reader found next.
#[derive(Debug)]
pub enum Next {
    Command(Command),
    /// End of input at a command boundary.
    Eof,
}

impl<R: Read> StreamReader<R> {
    pub fn new(input: R) -> Self {
        StreamReader {
            input,
            offset: 0,
            version: 0,
            spare: None,
        }
    }

    /// Gives the buffers of a command done with back, for the next.
    pub fn recycle(&mut self, c: Command) {
        self.spare = Some((c.body, c.attrs));
    }

    fn bad(&self, at: u64, detail: impl Into<String>) -> Error {
        Error::Invalid(format!("send stream offset {at}: {}", detail.into()))
    }

    /// Fills `buf`; Ok(false) when the input ended before its first byte.
    fn read_full(&mut self, buf: &mut [u8], what: &str) -> Result<bool> {
        let mut n = 0;
        while n < buf.len() {
            match self.input.read(&mut buf[n..]) {
                Ok(0) if n == 0 => return Ok(false),
                Ok(0) => {
                    return Err(self.bad(
                        self.offset + n as u64,
                        format!("stream ends inside {what} ({n} of {} bytes)", buf.len()),
                    ))
                }
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::Io {
                        path: "send stream".into(),
                        op: format!("read at offset {}", self.offset + n as u64),
                        source: e,
                    })
                }
            }
        }
        self.offset += buf.len() as u64;
        Ok(true)
    }

    /// Reads a stream header; Ok(false) at the end of the input.
    pub fn read_header(&mut self) -> Result<bool> {
        let at = self.offset;
        let mut h = [0u8; 17];
        if !self.read_full(&mut h, "the stream header")? {
            return Ok(false);
        }
        if &h[..13] != MAGIC {
            return Err(self.bad(at, "not a send stream (no btrfs-stream magic)"));
        }
        let v = u32::from_le_bytes(h[13..].try_into().unwrap());
        if v == 0 || v > MAX_VERSION {
            return Err(self.bad(
                at,
                format!("stream version {v} (known: 1 to {MAX_VERSION})"),
            ));
        }
        self.version = v;
        Ok(true)
    }

    /// The next command, its CRC and attribute framing checked.
    pub fn next_command(&mut self) -> Result<Next> {
        let at = self.offset;
        let mut h = [0u8; HEADER];
        if !self.read_full(&mut h, "a command header")? {
            return Ok(Next::Eof);
        }
        let len = u32::from_le_bytes(h[..4].try_into().unwrap()) as usize;
        let c = u16::from_le_bytes(h[4..6].try_into().unwrap());
        let crc = u32::from_le_bytes(h[6..10].try_into().unwrap());
        if len > MAX_COMMAND {
            return Err(self.bad(
                at,
                format!(
                    "{} command of {len} bytes (at most {MAX_COMMAND})",
                    command_name(c)
                ),
            ));
        }
        let (mut body, mut attrs) = self.spare.take().unwrap_or_default();
        body.clear();
        body.resize(len, 0);
        attrs.clear();
        if !body.is_empty() && !self.read_full(&mut body, "a command")? {
            return Err(self.bad(self.offset, "stream ends inside a command"));
        }
        h[6..10].fill(0);
        let mut sum = !crc32c::crc32c_append(!0, &h);
        sum = !crc32c::crc32c_append(!sum, &body);
        if sum != crc {
            return Err(self.bad(
                at,
                format!(
                    "{} command: crc {crc:#010x}, computed {sum:#010x}",
                    command_name(c)
                ),
            ));
        }
        let mut q = 0;
        while q < body.len() {
            if q + 2 > body.len() {
                return Err(self.bad(at, format!("{}: truncated attribute", command_name(c))));
            }
            let t = u16::from_le_bytes([body[q], body[q + 1]]);
            q += 2;
            if self.version >= 2 && t == attr::DATA {
                // From v2 the data attribute has no length: the rest.
                attrs.push((t, q..body.len()));
                q = body.len();
                continue;
            }
            if q + 2 > body.len() {
                return Err(self.bad(at, format!("{}: truncated attribute", command_name(c))));
            }
            let l = u16::from_le_bytes([body[q], body[q + 1]]) as usize;
            q += 2;
            if q + l > body.len() {
                return Err(self.bad(
                    at,
                    format!(
                        "{}: attribute {} of {l} bytes runs past the command",
                        command_name(c),
                        attr_name(t)
                    ),
                ));
            }
            attrs.push((t, q..q + l));
            q += l;
        }
        Ok(Next::Command(Command {
            offset: at,
            cmd: c,
            body,
            attrs,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::stream::StreamWriter;

    fn stream(proto: u32, f: impl FnOnce(&mut StreamWriter)) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut w = StreamWriter::new(Box::new(&mut out), proto);
            w.header().unwrap();
            f(&mut w);
        }
        out
    }

    #[test]
    fn reads_what_send_writes() {
        for proto in [1, 2] {
            let s = stream(proto, |w| {
                w.begin(cmd::WRITE);
                w.put(attr::PATH, b"a/b");
                w.put_u64(attr::FILE_OFFSET, 4096);
                w.put_data(b"hello");
                w.finish().unwrap();
                w.begin(cmd::END);
                w.finish().unwrap();
            });
            let mut r = StreamReader::new(&s[..]);
            assert!(r.read_header().unwrap());
            let Next::Command(c) = r.next_command().unwrap() else {
                panic!()
            };
            assert_eq!(c.offset, 17);
            assert_eq!(c.path(attr::PATH).unwrap(), b"a/b");
            assert_eq!(c.u64(attr::FILE_OFFSET).unwrap(), 4096);
            assert_eq!(c.bytes(attr::DATA).unwrap(), b"hello");
            let Next::Command(e) = r.next_command().unwrap() else {
                panic!()
            };
            assert_eq!(e.cmd, cmd::END);
            assert!(matches!(r.next_command().unwrap(), Next::Eof));
        }
    }

    #[test]
    fn refuses_bad_framing_with_offsets() {
        let s = stream(1, |w| {
            w.begin(cmd::MKFILE);
            w.put(attr::PATH, b"f");
            w.finish().unwrap();
        });
        // A flipped payload byte: crc mismatch at offset 17.
        let mut bad = s.clone();
        let n = bad.len();
        bad[n - 1] ^= 1;
        let mut r = StreamReader::new(&bad[..]);
        r.read_header().unwrap();
        let e = r.next_command().unwrap_err().to_string();
        assert!(e.contains("offset 17") && e.contains("crc"), "{e}");
        // Every truncation is an error or a clean end, never a panic.
        for cut in 0..s.len() {
            let mut r = StreamReader::new(&s[..cut]);
            if let Ok(true) = r.read_header() {
                let _ = r.next_command();
            }
        }
        // A huge length is refused before allocating.
        let mut huge = s.clone();
        huge[17..21].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut r = StreamReader::new(&huge[..]);
        r.read_header().unwrap();
        assert!(r
            .next_command()
            .unwrap_err()
            .to_string()
            .contains("at most"));
    }

    #[test]
    fn paths_are_checked() {
        for (p, ok) in [
            (&b""[..], true),
            (b"a/b", true),
            (b"/a", false),
            (b"a//b", false),
            (b"a/../b", false),
            (b".", false),
            (b"a\0b", false),
        ] {
            assert_eq!(check_path(p).is_ok(), ok, "{p:?}");
        }
    }
}
