#![recursion_limit = "256"]
//! `ubtrfs`: btrfs images and devices in userspace, read and written
//! without the kernel's btrfs driver. A thin front end over
//! `ubtrfs-engine`; each subcommand lives in its own module.

mod cmd_balance;
mod cmd_check;
mod cmd_device;
mod cmd_filesystem;
mod cmd_fs;
mod cmd_inspect;
mod cmd_mkfs;
mod cmd_mount;
mod cmd_property;
mod cmd_receive;
mod cmd_rescue;
mod cmd_scrub;
mod cmd_send;
mod cmd_subvol;
mod cmd_subvol_show;
mod cmd_tune;
mod gen_docs;
mod manifest;
mod mounted;
mod output;
mod readahead;

use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use ubtrfs_engine::{Filesystem, OpenOptions};

#[derive(Parser)]
#[command(
    name = "ubtrfs",
    version,
    about = "btrfs in userspace: read, write and mount btrfs images and devices without the kernel's btrfs driver",
    long_about = "btrfs in userspace: read, write and mount btrfs images and devices without the kernel's \
btrfs driver. Readers (ls, stat, cat, extract, scrub, send, inspect) need no root; writers (mkfs, \
receive, subvolume, rescue) change unmounted images; mount serves an image through FUSE, read-write \
or read-only. Each command opens an image file or a block device; one writer at a time."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

/// Options shared by every command that opens an image.
#[derive(Args, Clone)]
pub struct ImageArgs {
    /// The btrfs image file or block device (readers open it read-only;
    /// writers, read-write).
    pub image: PathBuf,
    /// Another device of a multi-device filesystem (repeatable).
    #[arg(short = 'd', long = "device", value_name = "PATH")]
    pub devices: Vec<PathBuf>,
    /// Memory budget of the tree block cache, in MiB.
    #[arg(long = "cache-mb", default_value_t = 64)]
    pub cache_mb: u64,
    /// Read the image as of its last commit, without replaying an
    /// unreplayed log tree (what was fsynced since is not shown).
    #[arg(long = "no-log-replay")]
    pub no_log_replay: bool,
    /// Read an image that a writer (a read-write mount, another ubtrfs
    /// command, the kernel) has in use, instead of refusing: what is read
    /// may be inconsistent, as the writer changes it meanwhile. Writers
    /// never write an image in use.
    #[arg(long)]
    pub force: bool,
}

/// The image `image` (and its other `devices`) opened read-only, for the
/// commands that take IMAGE and -d without the rest of [`ImageArgs`].
pub fn open_image(image: &Path, devices: Vec<PathBuf>) -> Result<Filesystem, ubtrfs_engine::Error> {
    Filesystem::open(
        image,
        &OpenOptions {
            devices,
            ..Default::default()
        },
    )
}

impl ImageArgs {
    fn options(&self) -> OpenOptions {
        ubtrfs_engine::io::claim::set_read_live(self.force);
        OpenOptions {
            devices: self.devices.clone(),
            cache_bytes: self.cache_mb << 20,
        }
    }

    /// The filesystem as the kernel would show it: an unreplayed log tree
    /// (fsyncs after the last commit, then a crash) is replayed in memory,
    /// nothing is written to the image.
    pub fn open(&self) -> Result<Filesystem, ubtrfs_engine::Error> {
        if self.image.is_dir() {
            return Err(ubtrfs_engine::Error::Invalid(mounted::not_an_image(
                &self.image,
            )));
        }
        if self.no_log_replay {
            return self.open_raw();
        }
        match ubtrfs_engine::tree_log::open_replayed(&self.image, &self.options()) {
            Ok((fs, _)) => Ok(fs),
            Err(e) => {
                if self.open_raw().is_ok_and(|fs| fs.info.sb.log_root != 0) {
                    eprintln!(
                        "ubtrfs: the image has an unreplayed log tree that could not be replayed; \
                         --no-log-replay reads the last commit, `ubtrfs rescue zero-log` drops the log"
                    );
                }
                Err(e)
            }
        }
    }

    /// The image's last commit as it is on disk (dump-tree, scrub).
    pub fn open_raw(&self) -> Result<Filesystem, ubtrfs_engine::Error> {
        Filesystem::open(&self.image, &self.options())
    }
}

#[derive(Subcommand)]
enum Command {
    /// Low-level views of the image (superblock, trees).
    #[command(subcommand)]
    Inspect(cmd_inspect::InspectCmd),
    /// Filesystem-wide figures and settings: df, usage, show, sync, label
    /// (an image, or a path inside a live mount), resize (an image).
    #[command(subcommand)]
    Filesystem(cmd_filesystem::FilesystemCmd),
    /// Properties of subvolumes (ro), the filesystem (label) and files
    /// (compression), on a live mount or an unmounted image.
    #[command(subcommand)]
    Property(cmd_property::PropertyCmd),
    /// Convert block groups to another profile on an unmounted image
    /// (as btrfs balance start -dconvert/-mconvert).
    #[command(subcommand)]
    Balance(cmd_balance::BalanceCmd),
    /// Add or remove devices of an unmounted filesystem.
    #[command(subcommand)]
    Device(cmd_device::DeviceCmd),
    /// Subvolume commands.
    #[command(subcommand)]
    Subvolume(cmd_fs::SubvolumeCmd),
    /// List a directory (or show one file) inside the image.
    Ls(cmd_fs::LsArgs),
    /// Show an inode's attributes.
    Stat(cmd_fs::StatArgs),
    /// Write a file's content to stdout.
    Cat(cmd_fs::CatArgs),
    /// Copy a file or tree out of the image, like `cp -a`.
    Extract(cmd_fs::ExtractArgs),
    /// Verify every metadata and data checksum on every copy (an image, or
    /// a live mount's last commit, by the mount).
    Scrub(cmd_scrub::ScrubArgs),
    /// Check an unmounted image as btrfs check does: trees, extent
    /// references with snapshots and reflinks, chunks and devices, free
    /// space, every inode and name, subvolume links, checksums, the log;
    /// --repair mends what it can in one transaction.
    Check(cmd_check::CheckArgs),
    /// Write a btrfs send stream (full or incremental) of read-only snapshots.
    Send(cmd_send::SendArgs),
    /// Mount the image through FUSE: read-write when the image can be
    /// written, read-only with -o ro.
    Mount(cmd_mount::MountArgs),
    /// Unmount a `ubtrfs mount` and wait until its serving process has
    /// made its last commit and ended (a plain umount returns before).
    #[command(alias = "unmount")]
    Umount(cmd_mount::UmountArgs),
    /// Make a btrfs filesystem (options as mkfs.btrfs).
    Mkfs(cmd_mkfs::MkfsArgs),
    /// Apply send streams to an unmounted image (as btrfs receive), or
    /// print them (--dump).
    Receive(cmd_receive::ReceiveArgs),
    /// Repair commands on an unmounted image (log trees).
    #[command(subcommand)]
    Rescue(cmd_rescue::RescueCmd),
    /// Change an unmounted image's identity (as btrfstune): -M UUID or -m
    /// sets the filesystem UUID the kernel sees, the tree blocks keep
    /// theirs (metadata_uuid).
    Tune(cmd_tune::TuneArgs),
    /// Writes the man pages and shell completions made from this command
    /// line's definition (the setup installs them).
    #[command(hide = true)]
    GenDocs(gen_docs::GenDocsArgs),
}

fn main() -> ExitCode {
    if let Some(code) = cmd_mount::helper_main() {
        return code;
    }
    let cli = Cli::parse();
    let res = match cli.cmd {
        Command::Inspect(c) => cmd_inspect::run(c),
        Command::Subvolume(c) => cmd_fs::run_subvolume(c),
        Command::Property(c) => cmd_property::run(c),
        Command::Filesystem(c) => cmd_filesystem::run(c),
        Command::Balance(c) => cmd_balance::run(c),
        Command::Device(c) => cmd_device::run(c),
        Command::Ls(a) => cmd_fs::ls(a),
        Command::Stat(a) => cmd_fs::stat(a),
        Command::Cat(a) => cmd_fs::cat(a),
        Command::Extract(a) => cmd_fs::extract(a),
        Command::Scrub(a) => cmd_scrub::run(a),
        Command::Check(a) => cmd_check::run(a),
        Command::Send(a) => cmd_send::run(a),
        Command::Mount(a) => cmd_mount::run_mount(a),
        Command::Umount(a) => cmd_mount::run_umount(a),
        Command::Mkfs(a) => cmd_mkfs::run(a),
        Command::Receive(a) => cmd_receive::run(a),
        Command::Rescue(c) => cmd_rescue::run(c),
        Command::Tune(a) => cmd_tune::run(a),
        Command::GenDocs(a) => gen_docs::run::<Cli>(a),
    };
    match res {
        Ok(code) => code,
        Err(e) => {
            // A closed pipe (`ubtrfs cat ... | head`) is not an error.
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::BrokenPipe {
                    return ExitCode::SUCCESS;
                }
            }
            eprintln!("ubtrfs: error: {e}");
            ExitCode::FAILURE
        }
    }
}

pub type CmdResult = Result<ExitCode, Box<dyn std::error::Error>>;

/// Prints what the engine worked around (bad copies, missing devices).
pub fn print_reports(fs: &Filesystem) {
    let (reports, dropped) = fs.info.take_reports();
    for r in reports {
        eprintln!("ubtrfs: warning: {r}");
    }
    if dropped > 0 {
        eprintln!("ubtrfs: warning: {dropped} more recovery reports not shown");
    }
}
