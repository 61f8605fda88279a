//! Filesystem commands: subvolume list, ls, stat, cat, extract.

use crate::output::{mode_string, pct, ts_human};
use crate::{print_reports, CmdResult, ImageArgs};
use clap::{Args, Subcommand};
use serde_json::json;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;
use ubtrfs_engine::{FileHandle, Filesystem, InodeId, Stat};
use ubtrfs_format::bytes::format_uuid;

#[derive(Subcommand)]
pub enum SubvolumeCmd {
    /// List subvolumes and snapshots (like `btrfs subvolume list -a -u -q -R`).
    List {
        #[command(flatten)]
        image: ImageArgs,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Create empty subvolumes: `create IMAGE PATH...` on an unmounted
    /// image (written in place), or `create PATH...` inside a live mount
    /// (made by the mount, as `btrfs subvolume create`).
    Create {
        /// The image (every device of it with -d), or the first path
        /// inside a mount.
        image: PathBuf,
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
        /// Paths inside the image, from the top level (/dir/name), or
        /// more paths inside the mount.
        paths: Vec<String>,
    },
    /// Snapshot a subvolume: `snapshot [-r] IMAGE SOURCE DEST` on an
    /// unmounted image (written in place), or `snapshot [-r] SOURCE DEST`
    /// inside a live mount (DEST a new name, or a directory to put it in).
    Snapshot {
        /// Make the snapshot read-only.
        #[arg(short = 'r')]
        readonly: bool,
        /// The image, or SOURCE inside a mount.
        image: PathBuf,
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
        /// The subvolume to snapshot (a path inside the image), or DEST
        /// inside a mount.
        source: String,
        /// Where the snapshot goes (a path inside the image).
        dest: Option<String>,
    },
    /// Show the subvolume mounted by default (`get-default IMAGE`, or a
    /// path inside a live mount).
    GetDefault {
        /// The image, or a path inside a mount.
        image: PathBuf,
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
    },
    /// Make a subvolume the one mounted by default: `set-default ID
    /// IMAGE` on an unmounted image, `set-default ID PATH` or
    /// `set-default SUBVOL_PATH` inside a live mount (0 or 5: the top
    /// level).
    SetDefault {
        /// The subvolume id, or the subvolume's path inside a mount.
        id_or_path: String,
        /// The image, or a path inside the mount.
        image: Option<PathBuf>,
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
    },
    /// Show a subvolume (as `btrfs subvolume show`): `show IMAGE [PATH]`
    /// on an image (PATH from the top level, default /), `show PATH`
    /// inside a live mount; `-r ID` or `-u UUID` pick another subvolume
    /// of the same filesystem.
    Show {
        /// The subvolume with this id.
        #[arg(short = 'r', long = "rootid", value_name = "ID")]
        rootid: Option<u64>,
        /// The subvolume with this UUID.
        #[arg(
            short = 'u',
            long = "uuid",
            value_name = "UUID",
            conflicts_with = "rootid"
        )]
        uuid: Option<String>,
        /// The image, or a path inside a mount.
        image: PathBuf,
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
        /// The subvolume's path inside the image.
        path: Option<String>,
    },
    /// Delete subvolumes: `delete IMAGE PATH...` on an unmounted image
    /// (written in place, committed at the end), or `delete [-c|-C]
    /// PATH...` inside a live mount (on disk at the mount's next commit,
    /// or at once with -c or -C).
    Delete {
        /// Inside a mount: commit once at the end (as btrfs-progs' -c).
        #[arg(short = 'c', long = "commit-after")]
        commit_after: bool,
        /// Inside a mount: commit after each deletion (as btrfs-progs' -C).
        #[arg(short = 'C', long = "commit-each")]
        commit_each: bool,
        /// The image, or the first path inside a mount.
        image: PathBuf,
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
        paths: Vec<String>,
    },
}

#[derive(Args)]
pub struct LsArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Absolute path inside the image (from the top-level subvolume).
    #[arg(default_value = "/")]
    path: PathBuf,
    /// Long listing.
    #[arg(short = 'l')]
    long: bool,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct StatArgs {
    #[command(flatten)]
    image: ImageArgs,
    path: PathBuf,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct CatArgs {
    #[command(flatten)]
    image: ImageArgs,
    path: PathBuf,
}

#[derive(Args)]
pub struct ExtractArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// File or directory inside the image.
    path: PathBuf,
    /// Destination; must not exist (created like `cp -a PATH DEST`).
    dest: PathBuf,
    /// Print each path extracted.
    #[arg(short, long)]
    verbose: bool,
}

fn pbytes(p: &std::path::Path) -> &[u8] {
    p.as_os_str().as_bytes()
}

/// The image opened, and `path` in it found.
fn open_at(
    image: &ImageArgs,
    path: &std::path::Path,
) -> Result<(Filesystem, InodeId), ubtrfs_engine::Error> {
    let fs = image.open()?;
    let id = fs.resolve(pbytes(path))?;
    Ok((fs, id))
}

pub fn run_subvolume(cmd: SubvolumeCmd) -> CmdResult {
    let (image, json) = match cmd {
        SubvolumeCmd::List { image, json } => (image, json),
        other => return crate::cmd_subvol::run(other),
    };
    let mounted = image.image.is_dir()
        && matches!(
            crate::mounted::classify(&image.image, true)?,
            crate::mounted::Target::Mounted
        );
    let fs = if mounted { None } else { Some(image.open()?) };
    let subs = match &fs {
        Some(fs) => fs.subvolumes()?,
        None => crate::mounted::subvolumes(&image.image)?,
    };
    let mut out = std::io::stdout().lock();
    if json {
        let v: Vec<_> = subs
            .iter()
            .filter(|s| !s.path.is_empty())
            .map(|s| {
                json!({
                    "id": s.id, "parent_id": s.parent_id, "top_level": s.parent_id,
                    "path": String::from_utf8_lossy(&s.path), "path_pct": pct(&s.path),
                    "uuid": format_uuid(&s.root.uuid),
                    "parent_uuid": uuid_or_dash(&s.root.parent_uuid),
                    "received_uuid": uuid_or_dash(&s.root.received_uuid),
                    "readonly": s.root.is_readonly(),
                    "generation": s.root.generation, "ctransid": s.root.ctransid,
                    "otransid": s.root.otransid,
                    "otime": ts_human(&s.root.otime),
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        for s in subs.iter().filter(|s| !s.path.is_empty()) {
            out.write_all(
                format!(
                    "ID {} gen {} top level {} parent_uuid {} received_uuid {} uuid {} flags {} path ",
                    s.id,
                    s.root.generation,
                    s.parent_id,
                    uuid_or_dash(&s.root.parent_uuid),
                    uuid_or_dash(&s.root.received_uuid),
                    format_uuid(&s.root.uuid),
                    if s.root.is_readonly() { "ro" } else { "-" },
                )
                .as_bytes(),
            )?;
            out.write_all(&s.path)?;
            out.write_all(b"\n")?;
        }
    }
    if let Some(fs) = &fs {
        print_reports(fs);
    }
    Ok(ExitCode::SUCCESS)
}

fn uuid_or_dash(u: &[u8; 16]) -> String {
    if u.iter().all(|&b| b == 0) {
        "-".into()
    } else {
        format_uuid(u)
    }
}

fn type_char(st: &Stat) -> char {
    mode_string(st.mode).chars().next().unwrap_or('?')
}

pub fn ls(a: LsArgs) -> CmdResult {
    let (fs, id) = open_at(&a.image, &a.path)?;
    let st = fs.stat(id)?;
    let mut rows: Vec<(Vec<u8>, Stat, InodeId)> = Vec::new();
    if st.is_dir() {
        for e in fs.read_dir(id)? {
            let s = fs.stat(e.target)?;
            rows.push((e.name, s, e.target));
        }
    } else {
        rows.push((pbytes(&a.path).to_vec(), st, id));
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(n, s, _)| {
                json!({"name": String::from_utf8_lossy(n), "name_pct": pct(n), "ino": s.ino,
                       "type": type_char(s).to_string(), "mode": s.mode, "nlink": s.nlink,
                       "uid": s.uid, "gid": s.gid, "size": s.size,
                       "mtime": ts_human(&s.mtime)})
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        for (name, s, target) in &rows {
            if a.long {
                write!(
                    out,
                    "{} {:>3} {:>5} {:>5} {:>12} {} ",
                    mode_string(s.mode),
                    s.nlink,
                    s.uid,
                    s.gid,
                    s.size,
                    &ts_human(&s.mtime)[..19]
                )?;
            }
            out.write_all(name)?;
            if a.long && s.is_symlink() {
                out.write_all(b" -> ")?;
                out.write_all(&ubtrfs_engine::fs::file::readlink(&fs, *target)?)?;
            }
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    print_reports(&fs);
    Ok(ExitCode::SUCCESS)
}

pub fn stat(a: StatArgs) -> CmdResult {
    let (fs, id) = open_at(&a.image, &a.path)?;
    let s = fs.stat(id)?;
    let xattrs = fs.xattrs(id)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        let v = json!({
            "path": String::from_utf8_lossy(pbytes(&a.path)), "subvolume": id.subvol,
            "ino": s.ino, "mode": s.mode, "type": type_char(&s).to_string(), "nlink": s.nlink,
            "uid": s.uid, "gid": s.gid, "rdev": s.rdev, "size": s.size, "nbytes": s.nbytes,
            "atime": [s.atime.sec, s.atime.nsec], "mtime": [s.mtime.sec, s.mtime.nsec],
            "ctime": [s.ctime.sec, s.ctime.nsec], "otime": [s.otime.sec, s.otime.nsec],
            "flags": s.flags, "generation": s.generation, "transid": s.transid,
            "xattrs": xattrs.iter().map(|(k, v)| json!({"name": pct(k), "value_hex": crate::output::hex(v)})).collect::<Vec<_>>(),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        writeln!(out, "  File: {}", a.path.display())?;
        writeln!(
            out,
            "  Size: {:<12} Blocks: {:<10} Type: {}",
            s.size,
            s.nbytes / 512,
            type_char(&s)
        )?;
        writeln!(
            out,
            "Subvol: {:<12} Inode: {:<11} Links: {}",
            id.subvol, s.ino, s.nlink
        )?;
        writeln!(
            out,
            "Access: ({:04o}/{})  Uid: {}  Gid: {}  Rdev: {}",
            s.mode & 0o7777,
            mode_string(s.mode),
            s.uid,
            s.gid,
            s.rdev
        )?;
        for (n, t) in [
            ("Access", &s.atime),
            ("Modify", &s.mtime),
            ("Change", &s.ctime),
            (" Birth", &s.otime),
        ] {
            writeln!(out, "{n}: {} UTC", ts_human(t))?;
        }
        writeln!(
            out,
            " Flags: 0x{:x}  Generation: {}  Transid: {}",
            s.flags, s.generation, s.transid
        )?;
        for (k, v) in xattrs {
            writeln!(out, " Xattr: {} ({} bytes)", pct(&k), v.len())?;
        }
    }
    print_reports(&fs);
    Ok(ExitCode::SUCCESS)
}

pub fn cat(a: CatArgs) -> CmdResult {
    let (fs, id) = open_at(&a.image, &a.path)?;
    let st = fs.stat(id)?;
    if !st.is_reg() {
        return Err(format!("{}: not a regular file", a.path.display()).into());
    }
    let mut h = FileHandle::open(&fs, id)?;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0;
    loop {
        let n = h.read_at(&fs, pos, &mut buf)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        pos += n as u64;
    }
    out.flush()?;
    print_reports(&fs);
    Ok(ExitCode::SUCCESS)
}

pub fn extract(a: ExtractArgs) -> CmdResult {
    let (fs, id) = open_at(&a.image, &a.path)?;
    let opts = ubtrfs_engine::tools::extract::ExtractOptions { verbose: a.verbose };
    let report = crate::cmd_scrub::with_progress(fs.info.sb.bytes_used, "extract", |p| {
        ubtrfs_engine::tools::extract::extract(&fs, id, &a.dest, &opts, p)
    })?;
    print_reports(&fs);
    eprintln!(
        "extracted {} files, {} directories, {} other; {} bytes of data",
        report.files, report.dirs, report.others, report.bytes
    );
    if let Some(w) = report.skipped_xattrs_summary() {
        eprintln!("ubtrfs: warning: {w}");
    }
    if report.errors.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for e in &report.errors {
            eprintln!("ubtrfs: error: {e}");
        }
        Ok(ExitCode::FAILURE)
    }
}
