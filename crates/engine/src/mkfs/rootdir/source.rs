//! The source tree as the host has it, read with libc: xattrs (llistxattr,
//! lgetxattr, not following symlinks), data ranges (SEEK_DATA/SEEK_HOLE),
//! and the errors that name the source path. The only unsafe code of
//! mkfs --rootdir is here.

use crate::error::{Error, Result};
use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use ubtrfs_format::items::Timespec;

pub(super) fn io_err(path: &Path, op: &str, e: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        op: op.into(),
        source: e,
    }
}

pub(super) fn ts(sec: i64, nsec: i64) -> Timespec {
    Timespec {
        sec,
        nsec: nsec as u32,
    }
}

fn cpath(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("{}: path has a NUL byte", path.display())))
}

/// Every xattr of `path` (not following symlinks), names sorted.
pub(super) fn xattrs(path: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let c = cpath(path)?;
    let mut names = vec![0u8; 4096];
    let n = loop {
        // SAFETY: `c` is a NUL-terminated path and `names` a buffer of the
        // length passed.
        let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
        if n >= 0 {
            break n as usize;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => names.resize(names.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(io_err(path, "listxattr", e)),
        }
    };
    let mut out = Vec::new();
    for name in names[..n].split(|&b| b == 0).filter(|s| !s.is_empty()) {
        let cn = CString::new(name).unwrap();
        let mut val = vec![0u8; 4096];
        let len = loop {
            // SAFETY: NUL-terminated path and name, buffer of the length
            // passed.
            let r = unsafe {
                libc::lgetxattr(c.as_ptr(), cn.as_ptr(), val.as_mut_ptr().cast(), val.len())
            };
            if r >= 0 {
                break r as usize;
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ERANGE) if val.len() < (1 << 20) => val.resize(val.len() * 4, 0),
                _ => {
                    return Err(io_err(
                        path,
                        &format!("getxattr {}", String::from_utf8_lossy(name)),
                        e,
                    ))
                }
            }
        };
        val.truncate(len);
        out.push((name.to_vec(), val));
    }
    out.sort();
    Ok(out)
}

/// Data ranges of an open file: [start, end) pairs from SEEK_DATA /
/// SEEK_HOLE, or the whole file where the source cannot tell.
pub(super) fn data_ranges(f: &File, size: u64) -> Vec<(u64, u64)> {
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    let mut at: i64 = 0;
    while (at as u64) < size {
        // SAFETY: lseek on an open descriptor; no memory is involved.
        let d = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
        if d < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break;
            }
            return vec![(0, size)];
        }
        // SAFETY: as above.
        let h = unsafe { libc::lseek(fd, d, libc::SEEK_HOLE) };
        let h = if h < 0 { size as i64 } else { h };
        out.push((d as u64, (h as u64).min(size)));
        at = h;
    }
    out
}

/// Names the source path in an error from the engine.
pub(super) fn in_path(path: &Path, e: Error) -> Error {
    match e {
        Error::Io { .. } => e,
        other => Error::Invalid(format!("{}: {other}", path.display())),
    }
}
