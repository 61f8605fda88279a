//! `receive --dump`: one line per command, as `btrfs receive --dump`
//! prints it (btrfs-progs cmds/receive-dump.c): the command name padded
//! to 16 columns, the full path (C-escaped) padded to 32, then the
//! command's fields (encoded writes with the commas of btrfs-progs 6.2,
//! the version the tests compare with).

use super::stream::{Command, Next, StreamReader};
use super::uuid_str;
use crate::error::{Error, Result};
use std::io::{Read, Write};
use ubtrfs_format::send_stream::{attr, cmd};

/// Escapes a path as receive-dump.c's print_path_escaped.
fn escaped(p: &[u8]) -> String {
    let mut s = String::new();
    for &c in p {
        match c {
            7 => s.push_str("\\a"),
            8 => s.push_str("\\b"),
            0x1b => s.push_str("\\e"),
            0x0c => s.push_str("\\f"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            0x0b => s.push_str("\\v"),
            b' ' => s.push_str("\\ "),
            b'\\' => s.push_str("\\\\"),
            c if (0x20..0x7f).contains(&c) => s.push(c as char),
            c => s.push_str(&format!("\\{:o}{:o}{:o}", c >> 6, (c >> 3) & 7, c & 7)),
        }
    }
    s
}

/// Joins two paths as path_cat: "a" + "b" is "a/b", "a" + "" is "a/".
fn cat(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut v = a.to_vec();
    while v.last() == Some(&b'/') && v.len() > 1 {
        v.pop();
    }
    v.push(b'/');
    let b = b.strip_prefix(b"/").unwrap_or(b);
    v.extend_from_slice(b);
    v
}

/// Bytes printed with `%s` / `%.*s`: up to the first NUL.
fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// A time as `%FT%T%z` in the local time zone.
fn local_time(sec: i64) -> String {
    let t = sec as libc::time_t;
    // SAFETY: localtime_r writes the struct we own; strftime writes at
    // most the buffer's length.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return format!("{sec}");
        }
        let mut buf = [0u8; 64];
        let n = libc::strftime(
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
            c"%FT%T%z".as_ptr(),
            &tm,
        );
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

struct Dumper {
    subvol_path: Vec<u8>,
}

impl Dumper {
    fn line(
        &self,
        out: &mut dyn Write,
        title: &str,
        path: &[u8],
        rest: Option<String>,
    ) -> Result<()> {
        let p = escaped(path);
        let mut s = format!("{title:<16}{p}");
        if let Some(r) = rest {
            s.push(' ');
            let mut len = p.len() + 1;
            while len < 32 {
                s.push(' ');
                len += 1;
            }
            s.push_str(&r);
        }
        s.push('\n');
        out.write_all(s.as_bytes()).map_err(|e| Error::Io {
            path: "standard output".into(),
            op: "write".into(),
            source: e,
        })
    }

    fn full(&self, p: &[u8]) -> Vec<u8> {
        cat(&self.subvol_path, p)
    }

    fn command(&mut self, out: &mut dyn Write, c: &Command) -> Result<()> {
        let path = c.get(attr::PATH).unwrap_or_default();
        let full = self.full(path);
        let u = |a| c.u64(a);
        let line = match c.cmd {
            cmd::SUBVOL => {
                self.subvol_path = cat(b".", path);
                let r = format!(
                    "uuid={} transid={}",
                    uuid_str(&c.uuid(attr::UUID)?),
                    u(attr::CTRANSID)?
                );
                return self.line(out, "subvol", &self.subvol_path.clone(), Some(r));
            }
            cmd::SNAPSHOT => {
                self.subvol_path = cat(b".", path);
                let r = format!(
                    "uuid={} transid={} parent_uuid={} parent_transid={}",
                    uuid_str(&c.uuid(attr::UUID)?),
                    u(attr::CTRANSID)?,
                    uuid_str(&c.uuid(attr::CLONE_UUID)?),
                    u(attr::CLONE_CTRANSID)?
                );
                return self.line(out, "snapshot", &self.subvol_path.clone(), Some(r));
            }
            cmd::MKFILE | cmd::MKDIR | cmd::MKFIFO | cmd::MKSOCK | cmd::UNLINK | cmd::RMDIR => {
                None
            }
            cmd::MKNOD => Some(format!("mode={:o} dev={:#x}", u(attr::MODE)?, u(attr::RDEV)?)),
            cmd::SYMLINK | cmd::LINK => Some(format!("dest={}", c_str(c.bytes(attr::PATH_LINK)?))),
            cmd::RENAME => Some(format!(
                "dest={}",
                String::from_utf8_lossy(&self.full(c.bytes(attr::PATH_TO)?))
            )),
            cmd::WRITE => Some(format!(
                "offset={} len={}",
                u(attr::FILE_OFFSET)?,
                c.bytes(attr::DATA)?.len()
            )),
            cmd::CLONE => Some(format!(
                "offset={} len={} from={} clone_offset={}",
                u(attr::FILE_OFFSET)?,
                u(attr::CLONE_LEN)?,
                String::from_utf8_lossy(&self.full(c.bytes(attr::CLONE_PATH)?)),
                u(attr::CLONE_OFFSET)?
            )),
            cmd::SET_XATTR => {
                let d = c.bytes(attr::XATTR_DATA)?;
                Some(format!(
                    "name={} data={} len={}",
                    c_str(c.bytes(attr::XATTR_NAME)?),
                    c_str(d),
                    d.len()
                ))
            }
            cmd::REMOVE_XATTR => Some(format!("name={}", c_str(c.bytes(attr::XATTR_NAME)?))),
            cmd::TRUNCATE => Some(format!("size={}", u(attr::SIZE)?)),
            cmd::CHMOD => Some(format!("mode={:o}", u(attr::MODE)?)),
            cmd::CHOWN => Some(format!("gid={} uid={}", u(attr::GID)?, u(attr::UID)?)),
            cmd::UTIMES => Some(format!(
                "atime={} mtime={} ctime={}",
                local_time(c.timespec(attr::ATIME)?.sec),
                local_time(c.timespec(attr::MTIME)?.sec),
                local_time(c.timespec(attr::CTIME)?.sec)
            )),
            cmd::UPDATE_EXTENT => Some(format!(
                "offset={} len={}",
                u(attr::FILE_OFFSET)?,
                u(attr::SIZE)?
            )),
            cmd::FALLOCATE => Some(format!(
                "mode={} offset={} len={}",
                c.u32(attr::FALLOCATE_MODE)?,
                u(attr::FILE_OFFSET)?,
                u(attr::SIZE)?
            )),
            cmd::FILEATTR => Some(format!("fileattr=0x{:x}", u(attr::FILEATTR)?)),
            cmd::ENCODED_WRITE => Some(format!(
                "offset={} len={}, unencoded_file_len={}, unencoded_len={}, unencoded_offset={}, compression={}, encryption={}",
                u(attr::FILE_OFFSET)?,
                c.bytes(attr::DATA)?.len(),
                u(attr::UNENCODED_FILE_LEN)?,
                u(attr::UNENCODED_LEN)?,
                u(attr::UNENCODED_OFFSET)?,
                c.get(attr::COMPRESSION).map_or(Ok(0), |_| c.u32(attr::COMPRESSION))?,
                c.get(attr::ENCRYPTION).map_or(Ok(0), |_| c.u32(attr::ENCRYPTION))?
            )),
            _ => return Ok(()),
        };
        self.line(out, c.name(), &full, line)
    }
}

/// Prints every command of the streams in `input`.
pub fn dump(input: impl Read, out: &mut dyn Write) -> Result<u64> {
    let mut r = StreamReader::new(input);
    let mut d = Dumper {
        subvol_path: b".".to_vec(),
    };
    let mut n = 0;
    let mut streams = 0;
    while r.read_header()? {
        streams += 1;
        while let Next::Command(c) = r.next_command()? {
            n += 1;
            if c.cmd == cmd::END {
                break;
            }
            d.command(out, &c).map_err(|e| c.context(e))?;
        }
    }
    if streams == 0 {
        return Err(Error::Invalid(
            "empty stream is not considered valid".into(),
        ));
    }
    Ok(n)
}
