//! Copying a file or tree out of the image onto the host, as `cp -a` would:
//! modes, owners (as root), times, xattrs, hardlinks, symlinks, special files
//! and the data/hole layout (holes and prealloc ranges stay holes).

use crate::error::{Error, Result};
use crate::fs::file::FileHandle;
use crate::fs::{Filesystem, InodeId, Stat};
use crate::tools::walk::{walk, Descend};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::fs::{File, OpenOptions as FsOpen};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use ubtrfs_format::items::Timespec;

#[derive(Debug, Default, Clone)]
pub struct ExtractOptions {
    /// Print each path as it is extracted.
    pub verbose: bool,
}

#[derive(Debug, Default)]
pub struct ExtractReport {
    pub files: u64,
    pub dirs: u64,
    pub others: u64,
    pub bytes: u64,
    /// Problems with single paths; the rest of the tree was extracted.
    pub errors: Vec<String>,
    /// Extended attributes the destination would not hold (as `cp -a`,
    /// the files were extracted without them), by name.
    pub skipped_xattrs: BTreeMap<String, SkippedXattr>,
}

/// An extended attribute left out of the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedXattr {
    /// How many paths had it.
    pub paths: u64,
    /// Why the destination refused it (the first time).
    pub why: String,
}

impl ExtractReport {
    /// One line naming the extended attributes that were not kept, if any.
    pub fn skipped_xattrs_summary(&self) -> Option<String> {
        if self.skipped_xattrs.is_empty() {
            return None;
        }
        let list: Vec<String> = self
            .skipped_xattrs
            .iter()
            .map(|(name, s)| {
                let n = if s.paths == 1 { "path" } else { "paths" };
                format!("{name} on {} {n} ({})", s.paths, s.why)
            })
            .collect();
        Some(format!(
            "extended attributes not kept (the destination refused them): {}",
            list.join(", ")
        ))
    }
}

/// Extended attributes skipped so far, shared by the walk's two visits.
type Skipped = RefCell<BTreeMap<String, SkippedXattr>>;

/// Extracts the tree at `root` to `dest` (which must not exist).
/// `progress` is called with the bytes of data written so far.
pub fn extract(
    fs: &Filesystem,
    root: InodeId,
    dest: &Path,
    opts: &ExtractOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<ExtractReport> {
    if dest.symlink_metadata().is_ok() {
        return Err(Error::Exists(dest.display().to_string()));
    }
    let c = Copier {
        fs,
        is_root: unsafe { libc::geteuid() } == 0,
        skipped: Skipped::default(),
        links: RefCell::new(HashMap::new()),
    };
    let mut report = ExtractReport::default();
    let mut dir_errors = Vec::new();
    walk(
        fs,
        root,
        |v| {
            let target = join(dest, v.path);
            if opts.verbose {
                eprintln!("{}", target.display());
            }
            let res = c.extract_one(v.id, v.stat, &target, &mut report, progress);
            match res {
                Ok(()) => Ok(Descend::Yes),
                Err(e) if v.stat.is_dir() && v.path.is_empty() => Err(e),
                Err(e) => {
                    report.errors.push(on_path(&target, &e));
                    Ok(Descend::No)
                }
            }
        },
        |v| {
            // Directory attributes last, so creating children does not
            // change the times we set.
            let target = join(dest, v.path);
            if let Err(e) = c.set_attrs(v.id, v.stat, &target) {
                dir_errors.push(on_path(&target, &e));
            }
            Ok(())
        },
    )?;
    report.errors.extend(dir_errors);
    report.skipped_xattrs = c.skipped.into_inner();
    Ok(report)
}

/// An error about one path, naming it once.
fn on_path(target: &Path, e: &Error) -> String {
    match e {
        Error::Io { path, .. } if Path::new(path) == target => e.to_string(),
        _ => format!("{}: {e}", target.display()),
    }
}

fn join(dest: &Path, rel: &[u8]) -> PathBuf {
    if rel.is_empty() {
        dest.to_path_buf()
    } else {
        dest.join(std::ffi::OsStr::from_bytes(rel))
    }
}

fn io_err(p: &Path, op: &str, e: std::io::Error) -> Error {
    Error::io(p.display().to_string(), op, e)
}

fn cpath(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("{}: NUL in path", p.display())))
}

fn check(rc: libc::c_int, p: &Path, op: &str) -> Result<()> {
    if rc != 0 {
        return Err(io_err(p, op, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// What the walk's two visits share: the image, whether owners can be
/// kept, the xattrs skipped and the first path of each hardlinked inode.
struct Copier<'a> {
    fs: &'a Filesystem,
    is_root: bool,
    skipped: Skipped,
    links: RefCell<HashMap<InodeId, PathBuf>>,
}

impl Copier<'_> {
    /// Makes `target` as inode `id` (`st`), with its data and attributes.
    fn extract_one(
        &self,
        id: InodeId,
        st: &Stat,
        target: &Path,
        report: &mut ExtractReport,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        let fs = self.fs;
        if st.is_dir() {
            std::fs::create_dir(target).map_err(|e| io_err(target, "mkdir", e))?;
            report.dirs += 1;
            return Ok(());
        }
        if st.nlink > 1 {
            let mut links = self.links.borrow_mut();
            if let Some(first) = links.get(&id) {
                std::fs::hard_link(first, target).map_err(|e| io_err(target, "link", e))?;
                return Ok(());
            }
            links.insert(id, target.to_path_buf());
        }
        let c = cpath(target)?;
        if st.is_reg() {
            let f = FsOpen::new()
                .write(true)
                .create_new(true)
                .open(target)
                .map_err(|e| io_err(target, "create", e))?;
            report.bytes += copy_data(fs, id, &f, target, report.bytes, progress)?;
            report.files += 1;
        } else if st.is_symlink() {
            let t = CString::new(crate::fs::file::readlink(fs, id)?).map_err(|_| {
                Error::corrupt(format!("symlink inode {}", id.ino), "NUL in target")
            })?;
            check(
                unsafe { libc::symlink(t.as_ptr(), c.as_ptr()) },
                target,
                "symlink",
            )?;
            report.others += 1;
        } else {
            let rc =
                unsafe { libc::mknod(c.as_ptr(), st.mode as libc::mode_t, st.rdev as libc::dev_t) };
            check(rc, target, "mknod")?;
            report.others += 1;
        }
        self.set_attrs(id, st, target)
    }
}

/// Writes the data ranges of inode `id` into `f`, leaving holes unwritten.
fn copy_data(
    fs: &Filesystem,
    id: InodeId,
    f: &File,
    target: &Path,
    done_before: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    let mut h = FileHandle::open(fs, id)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut written = 0u64;
    let mut pos = 0u64;
    while let Some(start) = h.seek_data(fs, pos)? {
        let end = h.seek_hole(fs, start)?.unwrap_or(h.size);
        h.read_range(fs, (start, end), &mut buf, |p, data| {
            f.write_all_at(data, p)
                .map_err(|e| io_err(target, "write", e))?;
            written += data.len() as u64;
            progress(done_before + written);
            Ok(())
        })?;
        pos = end;
    }
    f.set_len(h.size)
        .map_err(|e| io_err(target, "truncate", e))?;
    Ok(written)
}

impl Copier<'_> {
    /// Owner, mode, xattrs and times, in the order that keeps each: chown
    /// clears set-id bits and capabilities, so it goes first. Extended
    /// attributes the destination refuses are skipped and counted in `skipped`,
    /// as `cp -a` does.
    fn set_attrs(&self, id: InodeId, st: &Stat, target: &Path) -> Result<()> {
        let (fs, is_root) = (self.fs, self.is_root);
        let c = cpath(target)?;
        if is_root {
            check(
                unsafe { libc::lchown(c.as_ptr(), st.uid, st.gid) },
                target,
                "lchown",
            )?;
        }
        if !st.is_symlink() {
            check(
                unsafe { libc::chmod(c.as_ptr(), (st.mode & 0o7777) as libc::mode_t) },
                target,
                "chmod",
            )?;
        }
        for (name, value) in fs.xattrs(id)? {
            let n = CString::new(name.clone())
                .map_err(|_| Error::corrupt(format!("inode {}", id.ino), "NUL in xattr name"))?;
            let rc = unsafe {
                libc::lsetxattr(
                    c.as_ptr(),
                    n.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    0,
                )
            };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                if !refused(&e, &name, is_root) {
                    return Err(io_err(
                        target,
                        &format!("setxattr {}", String::from_utf8_lossy(&name)),
                        e,
                    ));
                }
                let mut skipped = self.skipped.borrow_mut();
                let s = skipped
                    .entry(String::from_utf8_lossy(&name).into_owned())
                    .or_insert_with(|| SkippedXattr {
                        paths: 0,
                        why: strerror(&e),
                    });
                s.paths += 1;
            }
        }
        let ts = |t: &Timespec| libc::timespec {
            tv_sec: t.sec as libc::time_t,
            tv_nsec: t.nsec as libc::c_long,
        };
        let times = [ts(&st.atime), ts(&st.mtime)];
        let rc = unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                c.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        check(rc, target, "utimensat")
    }
}

/// "Operation not supported" rather than "... (os error 95)".
fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Whether a failed setxattr is the destination not holding that kind of
/// attribute (which `cp -a` skips) rather than an error: a namespace or
/// attribute the filesystem does not support (btrfs.* outside btrfs,
/// user.* on some filesystems), or, without root, trusted.* and
/// security.*.
fn refused(e: &std::io::Error, name: &[u8], is_root: bool) -> bool {
    let privileged = name.starts_with(b"trusted.") || name.starts_with(b"security.");
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) => true,
        Some(libc::EPERM | libc::EACCES) => privileged && !is_root,
        _ => false,
    }
}
