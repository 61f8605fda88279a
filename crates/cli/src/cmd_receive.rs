//! `ubtrfs receive`: send streams applied to an unmounted image, without
//! the kernel (options as `btrfs receive`), and `--dump`.

use crate::readahead::ReadAhead;
use crate::CmdResult;
use clap::Args;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use ubtrfs_engine::receive::{self, ReceiveOptions};
use ubtrfs_engine::tx::Trans;

#[derive(Args)]
pub struct ReceiveArgs {
    /// The image (or first device) to receive into, opened read-write.
    #[arg(value_name = "IMAGE", required_unless_present = "dump")]
    image: Option<PathBuf>,
    /// The directory inside the image (absolute from the top level) that
    /// the received subvolumes are made in.
    #[arg(value_name = "PATH", required_unless_present = "dump")]
    path: Option<String>,
    /// Another device of a multi-device filesystem (repeatable).
    #[arg(short = 'd', long = "device", value_name = "DEV")]
    devices: Vec<PathBuf>,
    /// Read the stream from FILE instead of stdin.
    #[arg(short = 'f', value_name = "FILE")]
    file: Option<PathBuf>,
    /// Stop after the first end command in the stream (by default streams
    /// are read until end of file).
    #[arg(short = 'e')]
    honor_end: bool,
    /// Accepted for compatibility: paths never leave PATH.
    #[arg(short = 'C', long = "chroot")]
    chroot: bool,
    /// Stop after NERR failed commands (0: never). Default 1.
    #[arg(
        short = 'E',
        long = "max-errors",
        value_name = "NERR",
        default_value_t = 1
    )]
    max_errors: u64,
    /// Print the stream's commands, one per line, as `btrfs receive --dump`;
    /// needs no image.
    #[arg(long)]
    dump: bool,
    /// No messages, only errors.
    #[arg(short, long)]
    quiet: bool,
    /// Print what was received (commands, bytes, commits) to stderr.
    #[arg(short, long)]
    verbose: bool,
}

pub fn run(a: ReceiveArgs) -> CmdResult {
    let _ = a.chroot;
    // The stream is read on a thread, ahead of the commands being applied.
    let input = match &a.file {
        Some(f) => ReadAhead::new(
            File::open(f).map_err(|e| format!("cannot open {}: {e}", f.display()))?,
            1 << 20,
            8,
        ),
        None => ReadAhead::new(std::io::stdin(), 1 << 20, 8),
    };
    if a.dump {
        let out = std::io::stdout();
        let mut out = std::io::BufWriter::new(out.lock());
        receive::dump::dump(input, &mut out)?;
        out.flush().map_err(|e| format!("stdout: {e}"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let image = a.image.expect("required by clap");
    let path = a.path.expect("required by clap");
    let mut all = vec![image];
    all.extend(a.devices);
    // The block cache only holds committed blocks between readahead and
    // use: the transaction keeps the blocks it works on decoded.
    let mut t = Trans::open(&all, 64 << 20)?;
    let opts = ReceiveOptions {
        honor_end: a.honor_end,
        max_errors: a.max_errors,
        ..ReceiveOptions::new()
    };
    let dest = if path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    };
    let rep = receive::receive(&mut t, &dest, input, opts)?;
    for e in &rep.errors {
        eprintln!("ERROR: {e}");
    }
    if !a.quiet {
        for s in &rep.subvolumes {
            eprintln!("At subvol {}", s.rsplit('/').next().unwrap_or(s));
        }
    }
    if a.verbose {
        eprintln!(
            "received {} commands, {} bytes, {} commits",
            rep.commands, rep.bytes, rep.commits
        );
    }
    Ok(ExitCode::SUCCESS)
}
