//! `ubtrfs tune -U UUID | -u | -M UUID | -m IMAGE`: a new filesystem
//! UUID for an unmounted image, as btrfstune's options.
//!
//! - `-M`/`-m`: the superblock's fsid changes, and the tree blocks keep
//!   the one they carry, which the superblock then names as its
//!   metadata_uuid (incompat METADATA_UUID). One transaction: the
//!   superblock copies are what its commit writes, so a kill leaves the
//!   old identity or the new one.
//! - `-U`/`-u`: every tree block gets the new fsid
//!   ([`ubtrfs_engine::tools::change_fsid`]), in place and resumable: a
//!   killed run, run again, finishes. The image needs no new feature.
//!
//! Images cloned from one another, one of them tuned, are two
//! filesystems to the kernel.

use crate::CmdResult;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use ubtrfs_engine::tools::change_fsid::change_fsid;
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::bytes::format_uuid;

#[derive(Args)]
pub struct TuneArgs {
    /// Rewrite the filesystem UUID in every tree block to this one (as
    /// btrfstune -U); resumes an interrupted change.
    #[arg(short = 'U', value_name = "UUID", conflicts_with_all = ["random", "metadata_uuid", "rewrite_random"])]
    fsid: Option<String>,
    /// Rewrite the filesystem UUID in every tree block to a random one
    /// (as btrfstune -u); resumes an interrupted change.
    #[arg(short = 'u', id = "rewrite_random", conflicts_with_all = ["random", "metadata_uuid"])]
    rewrite_random: bool,
    /// Set the filesystem UUID to this one (as btrfstune -M); the UUID the
    /// tree blocks carry makes the flag go again.
    #[arg(short = 'M', value_name = "UUID", conflicts_with = "random")]
    metadata_uuid: Option<String>,
    /// Set the filesystem UUID to a random one (as btrfstune -m).
    #[arg(short = 'm', id = "random")]
    random: bool,
    /// The image (opened read-write; must not be in use).
    image: PathBuf,
    /// Another device of a multi-device filesystem (repeatable).
    #[arg(short = 'd', long = "device", value_name = "PATH")]
    devices: Vec<PathBuf>,
}

pub fn run(a: TuneArgs) -> CmdResult {
    let mut all = vec![a.image.clone()];
    all.extend(a.devices.iter().cloned());
    if a.fsid.is_some() || a.rewrite_random {
        let want = a
            .fsid
            .as_deref()
            .map(crate::cmd_mkfs::parse_uuid)
            .transpose()?;
        let mut t = Trans::open(&all, 64 << 20)?;
        let bar = crate::cmd_scrub::progress_bar(0, "rewriting tree blocks");
        let r = change_fsid(&mut t, want, &mut |done, total| {
            if let Some(b) = &bar {
                b.set_length(total);
                b.set_position(done);
            }
        })?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        match r.old {
            Some(old) => println!("Current fsid: {}", format_uuid(&old)),
            None => println!("Resuming the interrupted fsid change"),
        }
        println!("New fsid: {}", format_uuid(&r.new));
        println!("Fsid change finished ({} tree blocks rewritten)", r.blocks);
        return Ok(ExitCode::SUCCESS);
    }
    let new = match (&a.metadata_uuid, a.random) {
        (Some(u), _) => crate::cmd_mkfs::parse_uuid(u)?,
        (None, true) => ubtrfs_engine::inode::root::random_uuid()?,
        (None, false) => return Err("tune: -U UUID, -u, -M UUID or -m".into()),
    };
    let mut t = Trans::open(&all, 64 << 20)?;
    let old = t.info.sb.fsid;
    t.set_fsid(new)?;
    t.commit()?;
    println!(
        "Filesystem UUID {} (was {}); tree blocks carry {}",
        format_uuid(&new),
        format_uuid(&old),
        format_uuid(&t.info.sb.metadata_uuid)
    );
    Ok(ExitCode::SUCCESS)
}
