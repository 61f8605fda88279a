//! `ubtrfs tune -M UUID | -m IMAGE`: a new filesystem UUID for an
//! unmounted image, as btrfstune's -M and -m: the superblock's fsid
//! changes, and the tree blocks keep the one they carry, which the
//! superblock then names as its metadata_uuid (incompat METADATA_UUID).
//! One transaction: the superblock copies are what its commit writes, so a
//! kill leaves the old identity or the new one. Images cloned from one
//! another, one of them tuned, are two filesystems to the kernel.

use crate::CmdResult;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::bytes::format_uuid;

#[derive(Args)]
pub struct TuneArgs {
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
    let new = match (&a.metadata_uuid, a.random) {
        (Some(u), _) => crate::cmd_mkfs::parse_uuid(u)?,
        (None, true) => ubtrfs_engine::inode::root::random_uuid()?,
        (None, false) => return Err("tune: -M UUID or -m".into()),
    };
    let mut all = vec![a.image.clone()];
    all.extend(a.devices.iter().cloned());
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
