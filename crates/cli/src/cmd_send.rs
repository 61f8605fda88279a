//! `ubtrfs send`: a btrfs send stream of read-only snapshots, straight from
//! an image, that `btrfs receive` applies.

use crate::mounted::Target;
use crate::{print_reports, CmdResult, ImageArgs};
use clap::{Args, ValueEnum};
use std::io::{BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;
use ubtrfs_engine::cache::reada::Readahead;
use ubtrfs_engine::send::{send, subvolume_by_path, SendOptions};
use ubtrfs_engine::Subvolume;

#[derive(Clone, Copy, ValueEnum)]
pub enum ReadaArg {
    None,
    Back,
    Forward,
    Always,
}

#[derive(Args)]
pub struct SendArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Read-only subvolumes (snapshots) to send, by path from the top
    /// level; on a live mount, IMAGE is the first snapshot's path in the
    /// mount and these are more.
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Send an incremental stream from this parent snapshot.
    #[arg(short = 'p', long = "parent", value_name = "PARENT")]
    parent: Option<PathBuf>,
    /// Further snapshots the receiver has, to clone extents from.
    #[arg(short = 'c', long = "clone-src", value_name = "CLONE_SRC")]
    clone_sources: Vec<PathBuf>,
    /// Send stream protocol version (1 by default, 2 with
    /// --compressed-data).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=2))]
    proto: Option<u32>,
    /// Send compressed extents as encoded writes, without decompressing
    /// (implies --proto 2).
    #[arg(long)]
    compressed_data: bool,
    /// Send no file data, only the metadata (UPDATE_EXTENT for writes).
    #[arg(long)]
    no_data: bool,
    /// Write the stream to this file instead of stdout.
    #[arg(short = 'f', value_name = "OUTFILE")]
    outfile: Option<PathBuf>,
    /// Tree readahead while walking the snapshots.
    #[arg(long, value_enum, default_value = "always")]
    reada: ReadaArg,
    /// Print what was sent (commands, bytes) to stderr.
    #[arg(short, long)]
    verbose: bool,
    /// Print no messages ("At subvol ..."), only errors.
    #[arg(short, long)]
    quiet: bool,
    /// With several subvolumes, one stream: no end marker between them
    /// and one header (as btrfs send -e; `btrfs receive -e` ends at its
    /// end). Without it each subvolume's stream is whole, back to back.
    #[arg(short = 'e')]
    one_stream: bool,
}

/// Where the stream goes. A file this send created is removed if the send
/// fails (a partial stream must not look like a complete one); anything
/// that was there before (a device, a fifo, an existing file) is left as
/// it is.
struct Output {
    path: PathBuf,
    file: std::fs::File,
    created: bool,
}

impl Output {
    fn open(path: &std::path::Path) -> Result<Output, String> {
        let err = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true);
        // As btrfs send: O_CREAT | O_TRUNC, mode 0600 when created.
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        match opts.clone().create_new(true).open(path) {
            Ok(file) => Ok(Output {
                path: path.to_path_buf(),
                file,
                created: true,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let file = opts.truncate(true).open(path).map_err(err)?;
                Ok(Output {
                    path: path.to_path_buf(),
                    file,
                    created: false,
                })
            }
            Err(e) => Err(err(e)),
        }
    }

    /// Removes the file after a failed send, if this send created it and
    /// the path still names that regular file.
    fn discard(self) {
        use std::os::unix::fs::MetadataExt;
        if !self.created {
            return;
        }
        let (Ok(ours), Ok(now)) = (self.file.metadata(), std::fs::symlink_metadata(&self.path))
        else {
            return;
        };
        if now.file_type().is_file() && now.dev() == ours.dev() && now.ino() == ours.ino() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

pub fn run(a: SendArgs) -> CmdResult {
    let proto = match (a.proto, a.compressed_data) {
        (Some(1), true) => {
            return Err("--compressed-data requires protocol version >= 2 (requested 1)".into())
        }
        (Some(p), _) => p,
        (None, true) => 2,
        (None, false) => 1,
    };
    if a.image.image.is_dir() {
        if let Target::Mounted = crate::mounted::classify(&a.image.image, true)? {
            return send_mounted(&a, proto);
        }
    }
    if a.paths.is_empty() {
        return Err(format!(
            "{}: which snapshot PATH inside the image to send?",
            a.image.image.display()
        )
        .into());
    }
    let fs = a.image.open()?;
    let readahead = match a.reada {
        ReadaArg::None => Readahead::None,
        ReadaArg::Back => Readahead::Back,
        ReadaArg::Forward => Readahead::Forward,
        ReadaArg::Always => Readahead::ForwardAlways,
    };
    let parent = match &a.parent {
        Some(p) => Some(subvolume_by_path(&fs, p.as_os_str().as_bytes())?.id),
        None => None,
    };
    let mut clones = Vec::new();
    for c in &a.clone_sources {
        clones.push(subvolume_by_path(&fs, c.as_os_str().as_bytes())?.id);
    }
    let mut subs = Vec::new();
    for p in &a.paths {
        subs.push(subvolume_by_path(&fs, p.as_os_str().as_bytes())?);
    }

    let output = match &a.outfile {
        Some(f) => Some(Output::open(f)?),
        None => None,
    };
    let mut out: Box<dyn Write> = match &output {
        Some(o) => Box::new(BufWriter::with_capacity(1 << 20, &o.file)),
        None => Box::new(BufWriter::with_capacity(1 << 20, std::io::stdout().lock())),
    };
    // As btrfs-progs: with neither -p nor -c every subvolume is sent in
    // full; otherwise a subvolume without -p gets a parent among the clone
    // sources, and is a clone source for the ones after it.
    let full_send = parent.is_none() && clones.is_empty();
    let all = fs.subvolumes()?;
    let res = (|| -> Result<(), Box<dyn std::error::Error>> {
        for (i, sub) in subs.iter().enumerate() {
            if !a.quiet {
                eprintln!("At subvol {}", String::from_utf8_lossy(&sub.path));
            }
            let this_parent = match parent {
                Some(p) => Some(p),
                None if full_send => None,
                None => Some(find_good_parent(&all, sub, &clones).ok_or_else(|| {
                    format!(
                        "parent determination failed for {}: no clone source is, or shares the origin of, this snapshot (give -p)",
                        String::from_utf8_lossy(&sub.path)
                    )
                })?),
            };
            let opts = SendOptions {
                proto,
                compressed_data: a.compressed_data,
                no_data: a.no_data,
                readahead,
                parent: this_parent,
                clone_sources: clones.clone(),
                omit_header: a.one_stream && i > 0,
                omit_end: a.one_stream && i + 1 < subs.len(),
            };
            let stats = send(&fs, sub.id, &opts, Box::new(&mut out))?;
            if a.verbose {
                let names: Vec<String> = stats
                    .by_command
                    .iter()
                    .map(|(c, n)| format!("{}={n}", cmd_name(*c)))
                    .collect();
                eprintln!(
                    "{}: {} bytes, {} commands ({}), {} inodes sent, {} inodes differ",
                    String::from_utf8_lossy(&sub.path),
                    stats.bytes,
                    stats.commands,
                    names.join(" "),
                    stats.inodes,
                    stats.changed_inodes
                );
            }
            if !full_send && parent.is_none() {
                clones.push(sub.id);
            }
        }
        out.flush()?;
        Ok(())
    })();
    drop(out);
    print_reports(&fs);
    if let Err(e) = res {
        // A partial stream must not look like a complete one.
        if let Some(o) = output {
            o.discard();
        }
        return Err(e);
    }
    Ok(ExitCode::SUCCESS)
}

/// `send` of snapshots inside a live mount: the mount makes each stream
/// (BTRFS_IOC_SEND, one per snapshot as btrfs-progs sends them: whole,
/// or with -e a later one without the stream header, an earlier one
/// without the end).
fn send_mounted(a: &SendArgs, proto: u32) -> CmdResult {
    if !a.image.devices.is_empty() {
        return Err(
            "send on a live mount: -d names devices of an image; a mount has its own".into(),
        );
    }
    let parent = match &a.parent {
        Some(p) => crate::mounted::subvol_id(p)?,
        None => 0,
    };
    let snaps: Vec<PathBuf> = std::iter::once(a.image.image.clone())
        .chain(a.paths.iter().cloned())
        .collect();
    let mut clones = Vec::new();
    for c in &a.clone_sources {
        clones.push(crate::mounted::subvol_id(c)?);
    }
    // The parent of each, as for an image (see `run`).
    let full_send = parent == 0 && clones.is_empty();
    let all = if full_send || parent != 0 {
        Vec::new()
    } else {
        crate::mounted::subvolumes(&a.image.image)?
    };
    let output = match &a.outfile {
        Some(f) => Some(Output::open(f)?),
        None => None,
    };
    let stdout = std::io::stdout();
    let res = (|| -> Result<(), String> {
        for (i, snap) in snaps.iter().enumerate() {
            if !a.quiet {
                eprintln!("At subvol {}", snap.display());
            }
            let mut flags = 0;
            if proto != 1 {
                flags |= ubtrfs_format::ioctl::SEND_FLAG_VERSION;
            }
            if a.compressed_data {
                flags |= ubtrfs_format::ioctl::SEND_FLAG_COMPRESSED;
            }
            if a.no_data {
                flags |= ubtrfs_format::ioctl::SEND_FLAG_NO_FILE_DATA;
            }
            if a.one_stream && i > 0 {
                flags |= ubtrfs_format::ioctl::SEND_FLAG_OMIT_STREAM_HEADER;
            }
            if a.one_stream && i + 1 < snaps.len() {
                flags |= ubtrfs_format::ioctl::SEND_FLAG_OMIT_END_CMD;
            }
            let id = crate::mounted::subvol_id(snap)?;
            let this_parent = if parent != 0 || full_send {
                parent
            } else {
                all.iter()
                    .find(|s| s.id == id)
                    .and_then(|sub| find_good_parent(&all, sub, &clones))
                    .ok_or_else(|| {
                        format!(
                            "parent determination failed for {}: no clone source is, or shares the origin of, this snapshot (give -p)",
                            snap.display()
                        )
                    })?
            };
            let args = ubtrfs_format::ioctl::SendArgs {
                parent_root: this_parent,
                clone_sources: clones.clone(),
                flags,
                version: proto,
                ..Default::default()
            };
            match &output {
                Some(o) => crate::mounted::send_one(snap, &args, &o.file)?,
                None => crate::mounted::send_one(snap, &args, &stdout)?,
            }
            if !full_send && parent == 0 {
                clones.push(id);
            }
        }
        Ok(())
    })();
    if let Err(e) = res {
        if let Some(o) = output {
            o.discard();
        }
        return Err(e.into());
    }
    Ok(ExitCode::SUCCESS)
}

/// btrfs-progs' find_good_parent: the snapshot's origin when it is a clone
/// source, else the clone source made from the same origin whose ctransid
/// is closest to the origin's.
fn find_good_parent(all: &[Subvolume], sub: &Subvolume, clones: &[u64]) -> Option<u64> {
    let by_uuid = |u: &[u8; 16]| all.iter().find(|s| s.root.uuid == *u && *u != [0u8; 16]);
    let origin = by_uuid(&sub.root.parent_uuid)?;
    if clones.contains(&origin.id) {
        return Some(origin.id);
    }
    clones
        .iter()
        .filter_map(|c| all.iter().find(|s| s.id == *c))
        .filter(|c| by_uuid(&c.root.parent_uuid).is_some_and(|o| o.id == origin.id))
        .min_by_key(|c| c.root.ctransid.abs_diff(origin.root.ctransid))
        .map(|c| c.id)
}

fn cmd_name(c: u16) -> &'static str {
    const N: [&str; 26] = [
        "unspec",
        "subvol",
        "snapshot",
        "mkfile",
        "mkdir",
        "mknod",
        "mkfifo",
        "mksock",
        "symlink",
        "rename",
        "link",
        "unlink",
        "rmdir",
        "set_xattr",
        "remove_xattr",
        "write",
        "clone",
        "truncate",
        "chmod",
        "chown",
        "utimes",
        "end",
        "update_extent",
        "fallocate",
        "fileattr",
        "encoded_write",
    ];
    N.get(c as usize).copied().unwrap_or("?")
}
