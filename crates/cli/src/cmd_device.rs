//! `ubtrfs device add|remove` on an unmounted filesystem, with
//! btrfs-progs' argument order (devices first, the filesystem last).
//! Add: a new device item and superblocks, one commit. Remove: every
//! chunk with a stripe on the device moves to the others first
//! ([`ubtrfs_engine::tx::relocation`], a commit each, so a killed remove
//! run again goes on), then the device item goes and, once that commit is
//! on disk, the device's superblocks are wiped.

use crate::CmdResult;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use ubtrfs_engine::tx::devices::wipe_superblocks;
use ubtrfs_engine::tx::relocation::RelocTarget;
use ubtrfs_engine::tx::Trans;

#[derive(Subcommand)]
pub enum DeviceCmd {
    /// Add devices to an unmounted filesystem: `add NEWDEV... IMAGE`.
    Add(AddArgs),
    /// Remove devices from an unmounted filesystem, moving their chunks
    /// to the other devices first: `remove DEVID|DEV... IMAGE`.
    #[command(alias = "delete")]
    Remove(RemoveArgs),
}

#[derive(Args)]
pub struct AddArgs {
    /// The new devices, then the filesystem's first device (the image).
    #[arg(required = true, num_args = 2..)]
    paths: Vec<PathBuf>,
    /// Add a device that holds another filesystem's or a partition
    /// table's signature.
    #[arg(short = 'f', long)]
    force: bool,
    /// Another device of the filesystem already (repeatable).
    #[arg(short = 'd', long = "device", value_name = "PATH")]
    devices: Vec<PathBuf>,
}

#[derive(Args)]
pub struct RemoveArgs {
    /// Devids or device paths to remove, then the filesystem's first
    /// device (the image).
    #[arg(required = true, num_args = 2..)]
    targets: Vec<String>,
    /// Another device of the filesystem (repeatable).
    #[arg(short = 'd', long = "device", value_name = "PATH")]
    devices: Vec<PathBuf>,
}

pub fn run(c: DeviceCmd) -> CmdResult {
    match c {
        DeviceCmd::Add(a) => add(a),
        DeviceCmd::Remove(a) => remove(a),
    }
}

fn add(mut a: AddArgs) -> CmdResult {
    let image = a.paths.pop().unwrap();
    let mut all = vec![image];
    all.extend(a.devices.iter().cloned());
    let mut t = Trans::open(&all, 64 << 20)?;
    let mut made = Vec::new();
    for p in &a.paths {
        if !p.exists() {
            return Err(format!("{}: no such device or image file", p.display()).into());
        }
        let dev = crate::cmd_mkfs::open_target(p, None, None, a.force, &mut made)?;
        let uuid = ubtrfs_engine::inode::root::random_uuid()?;
        let devid = t.add_device(p, dev, uuid)?;
        println!("Added device {} as devid {devid}", p.display());
    }
    t.commit()?;
    Ok(ExitCode::SUCCESS)
}

fn remove(mut a: RemoveArgs) -> CmdResult {
    let image = PathBuf::from(a.targets.pop().unwrap());
    let mut all = vec![image];
    all.extend(a.devices.iter().cloned());
    let mut t = Trans::open(&all, 64 << 20)?;
    let mut devids = Vec::new();
    for s in &a.targets {
        let devid = match s.parse::<u64>() {
            Ok(d) => d,
            Err(_) => {
                let want = std::fs::canonicalize(s).map_err(|e| format!("{s}: {e}"))?;
                t.info
                    .devices
                    .values()
                    .find(|d| std::fs::canonicalize(&d.path).ok().as_ref() == Some(&want))
                    .map(|d| d.devid)
                    .ok_or_else(|| {
                        format!("{s}: not a device of this filesystem (give it with -d)")
                    })?
            }
        };
        if !t.dev_items().contains_key(&devid) {
            return Err(format!("devid {devid}: no such device").into());
        }
        if !t.info.devices.contains_key(&devid) {
            return Err(format!(
                "devid {devid}: missing (give it with -d): its chunks are read from it"
            )
            .into());
        }
        devids.push(devid);
    }
    for &d in &devids {
        // No new chunk lands on it; empty block groups on it go.
        t.limit_device(d, Some(0));
    }
    t.remove_empty_chunks(|_, c| c.stripes.iter().any(|s| devids.contains(&s.devid)))?;
    let mut room = t.reloc_room();
    room.retain(|d, _| !devids.contains(d));
    let moves = t.plan_relocation(|_, c| {
        c.stripes
            .iter()
            .any(|s| devids.contains(&s.devid))
            .then(|| RelocTarget {
                profile: None,
                room: room.clone(),
            })
    })?;
    t.commit()?;
    let bytes = moves.iter().map(|m| m.bytes()).sum();
    crate::cmd_scrub::with_progress(bytes, "moving chunks", |p| t.run_relocation(&moves, p))?;
    let mut gone = Vec::new();
    for &d in &devids {
        gone.push(t.remove_device(d)?);
    }
    t.commit()?;
    drop(t);
    for d in &gone {
        wipe_superblocks(d)?;
        println!("Removed devid {} ({})", d.devid, d.path.display());
    }
    Ok(ExitCode::SUCCESS)
}
