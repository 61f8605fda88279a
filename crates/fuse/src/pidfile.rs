//! Which process serves a mount point, so that `ubtrfs umount` (and the
//! `umount.fuse.ubtrfs` helper umount(8) runs) can wait for it to end.
//!
//! The kernel sends a plain FUSE mount nothing at unmount that it waits
//! for (only fuseblk mounts get a synchronous DESTROY): umount(2) returns
//! while the serving process still makes its last commit. A script that
//! then copies the image, checks it or mounts it with the kernel would
//! race that commit. The serving process records itself in a small file
//! named after the mount point; `ubtrfs umount` reads it, unmounts, and
//! waits until that process is gone. (umount(8) cannot be made to wait:
//! util-linux looks for a helper by the type statfs gives, plain `fuse`,
//! which would catch every FUSE mount.)

use std::path::{Path, PathBuf};

/// Where the records live: /run/ubtrfs for root, else
/// $XDG_RUNTIME_DIR/ubtrfs (or /tmp/ubtrfs-UID).
fn dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from("/run/ubtrfs");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => Path::new(&d).join("ubtrfs"),
        _ => PathBuf::from(format!("/tmp/ubtrfs-{uid}")),
    }
}

/// The record's file for `mountpoint` (an absolute, canonical path): its
/// bytes in hex, so any path makes one flat name.
fn path_for(mountpoint: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let hex: String = mountpoint
        .as_os_str()
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir().join(format!("{hex}.pid"))
}

/// A process: its pid and start time (clock ticks after boot, field 22 of
/// /proc/PID/stat), which tells a reused pid apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Server {
    pub pid: u32,
    start: u64,
}

impl Server {
    /// The fields of /proc/PID/stat after the command name (which is in
    /// parentheses and may hold spaces): state first, then field 4 on.
    fn stat_fields(pid: u32) -> Option<Vec<String>> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 1..];
        Some(rest.split_whitespace().map(str::to_string).collect())
    }

    /// Start time: field 22.
    fn start_in(f: &[String]) -> Option<u64> {
        f.get(19)?.parse().ok()
    }

    fn start_of(pid: u32) -> Option<u64> {
        Self::start_in(&Self::stat_fields(pid)?)
    }

    /// Whether this process still runs: not gone, and not a zombie whose
    /// threads have all ended (a zombie leader with threads left is a
    /// process still exiting).
    pub fn alive(&self) -> bool {
        let Some(f) = Self::stat_fields(self.pid) else {
            return false;
        };
        // State is field 3, num_threads field 20.
        let ended = f.first().is_some_and(|s| s == "Z") && f.get(17).is_none_or(|n| n == "1");
        !ended && Self::start_in(&f) == Some(self.start)
    }
}

/// The record of this process serving `mountpoint`; removed on drop (after
/// the last commit, when the serving function returns). One line: pid,
/// start time, `rw` once the mount serves read-write (else `-`), and the
/// root it serves (`subvol=` / `subvolid=` as asked, hex; `-`: the
/// default), which a second mount of the same image compares
/// ([`crate::bind`]).
pub struct Record {
    path: PathBuf,
    root: String,
}

impl Record {
    /// Records this process for `mountpoint`, serving `root`. Failing to
    /// is not fatal: the mount works, `ubtrfs umount` just cannot wait
    /// for it.
    pub fn create(mountpoint: &Path, root: &str) -> Option<Record> {
        let r = Record {
            path: path_for(mountpoint),
            root: root.to_string(),
        };
        r.write(false)?;
        Some(r)
    }

    /// Notes that this process serves the mount read-write (it has a
    /// writer: a read-only remount of it may become read-write again).
    pub fn set_writable(&self) {
        let _ = self.write(true);
    }

    fn write(&self, rw: bool) -> Option<()> {
        let pid = std::process::id();
        let start = Server::start_of(pid)?;
        let d = dir();
        std::fs::create_dir_all(&d).ok()?;
        let tmp = d.join(format!(".{pid}.tmp"));
        let root: String = if self.root.is_empty() {
            "-".into()
        } else {
            self.root.bytes().map(|b| format!("{b:02x}")).collect()
        };
        let mode = if rw { "rw" } else { "-" };
        std::fs::write(&tmp, format!("{pid} {start} {mode} {root}\n")).ok()?;
        std::fs::rename(&tmp, &self.path).ok()
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        // Only our own record: a later mount on the same point may have
        // replaced it.
        let mine = std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
            == Some(std::process::id());
        if mine {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The process serving `mountpoint`, if its record names one still
/// running.
pub fn server_of(mountpoint: &Path) -> Option<Server> {
    let text = std::fs::read_to_string(path_for(mountpoint)).ok()?;
    let mut f = text.split_whitespace();
    let s = Server {
        pid: f.next()?.parse().ok()?,
        start: f.next()?.parse().ok()?,
    };
    s.alive().then_some(s)
}

/// What the process serving a mount point serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    /// Read-write ([`Record::set_writable`]).
    pub rw: bool,
    /// The root asked for ([`Record::create`]).
    pub root: String,
}

/// What the live process serving `mountpoint` serves, from its record.
pub fn serving(mountpoint: &Path) -> Option<Serving> {
    server_of(mountpoint)?;
    let text = std::fs::read_to_string(path_for(mountpoint)).ok()?;
    let f: Vec<&str> = text.split_whitespace().collect();
    let root = match *f.get(3)? {
        "-" => String::new(),
        hex => {
            let bytes: Option<Vec<u8>> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                .collect();
            String::from_utf8(bytes?).ok()?
        }
    };
    Some(Serving {
        rw: f.get(2) == Some(&"rw"),
        root,
    })
}

/// Whether the process serving `mountpoint` serves it read-write.
pub fn writable(mountpoint: &Path) -> bool {
    serving(mountpoint).is_some_and(|s| s.rw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        let me = Server {
            pid: std::process::id(),
            start: Server::start_of(std::process::id()).unwrap(),
        };
        assert!(me.alive());
        let other = Server {
            start: me.start + 1,
            ..me
        };
        assert!(!other.alive());
    }

    #[test]
    fn names_are_flat() {
        let p = path_for(Path::new("/mnt/a b/c"));
        assert_eq!(p.parent().unwrap(), dir());
        assert!(!p.file_name().unwrap().to_string_lossy().contains('/'));
    }
}
