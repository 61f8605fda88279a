//! `ubtrfs rescue replay-log|zero-log`: what to do with an unreplayed log
//! tree (fsyncs since the last commit, then a crash) on an unmounted image.

use crate::CmdResult;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use ubtrfs_engine::tree_log;

#[derive(Subcommand)]
pub enum RescueCmd {
    /// Replay the log tree into the filesystem and commit, offline (what
    /// the kernel does when it mounts the image read-write): the image
    /// then holds everything that was fsynced, and no log.
    ReplayLog(RescueArgs),
    /// Drop the log tree without replaying it (as `btrfs rescue zero-log`):
    /// the image then reads as of its last commit; what was fsynced since
    /// is lost. For a log that cannot be replayed.
    ZeroLog(RescueArgs),
}

#[derive(Args)]
pub struct RescueArgs {
    /// The btrfs image file or block device (opened read-write; must not be mounted).
    pub image: PathBuf,
    /// Another device of a multi-device filesystem (repeatable).
    #[arg(short = 'd', long = "device", value_name = "PATH")]
    pub devices: Vec<PathBuf>,
    /// Memory budget of the tree block cache, in MiB.
    #[arg(long = "cache-mb", default_value_t = 64)]
    pub cache_mb: u64,
}

impl RescueArgs {
    fn paths(&self) -> Vec<PathBuf> {
        let mut all = vec![self.image.clone()];
        all.extend_from_slice(&self.devices);
        all
    }
}

pub fn run(cmd: RescueCmd) -> CmdResult {
    match cmd {
        RescueCmd::ReplayLog(a) => {
            let t0 = std::time::Instant::now();
            let s = tree_log::replay_log(&a.paths(), a.cache_mb << 20)?;
            if s.log_trees == 0 && s.log_items == 0 && s.skipped_trees == 0 {
                println!("{}: no log tree to replay", a.image.display());
            } else {
                println!(
                    "{}: replayed {} log tree(s) ({} items, {} blocks; {} skipped for deleted subvolumes), {} logged data extent(s) kept, {} unlinked inode(s) deleted, in {:.3}s (open {:.3}s, replay {:.3}s, commit {:.3}s)",
                    a.image.display(),
                    s.log_trees,
                    s.log_items,
                    s.log_blocks,
                    s.skipped_trees,
                    s.claimed_extents,
                    s.orphans,
                    t0.elapsed().as_secs_f64(),
                    s.open_secs,
                    s.replay_secs,
                    s.commit_secs
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        RescueCmd::ZeroLog(a) => {
            let lr = tree_log::zero_log(&a.paths(), a.cache_mb << 20)?;
            if lr == 0 {
                println!("{}: no log tree", a.image.display());
            } else {
                println!("{}: dropped the log tree at {lr}", a.image.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
