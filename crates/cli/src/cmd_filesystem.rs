//! `ubtrfs filesystem df|sync|label`: on an unmounted image (the reader,
//! or a transaction for a new label) or on a path inside a live mount
//! (btrfs's ioctls, served by a ubtrfs mount and by the kernel's btrfs).

use crate::mounted::Target;
use crate::CmdResult;
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;
use ubtrfs_engine::fs::space::{space_info, SpaceInfo};
use ubtrfs_engine::tx::Trans;
use ubtrfs_engine::{Filesystem, OpenOptions};
use ubtrfs_format::items::{block_group_kind, profile_name};

#[derive(Subcommand)]
pub enum FilesystemCmd {
    /// Space by kind and profile, as `btrfs filesystem df` prints it
    /// (without the kernel's global reserve, which ubtrfs does not keep).
    Df {
        /// The image, or a path inside a mount.
        target: PathBuf,
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
    },
    /// Write everything back and commit (a path inside a mount).
    Sync { path: PathBuf },
    /// Print the label, or set it to NEW.
    Label {
        /// The image, or a path inside a mount.
        target: PathBuf,
        new: Option<String>,
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
    },
}

/// A size as btrfs-progs' pretty_size prints it: two decimals of the
/// largest binary unit it reaches ("0.00B", "16.00KiB").
pub fn pretty_size(n: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{:.2}B", n as f64);
    }
    let (mut size, mut last, mut divs) = (n, n, 0);
    while size >= 1024 {
        last = size;
        size /= 1024;
        divs += 1;
    }
    format!("{:.2}{}", last as f64 / 1024.0, UNITS[divs])
}

fn mounted(target: &std::path::Path) -> Result<bool, String> {
    Ok(target.is_dir() && matches!(crate::mounted::classify(target, true)?, Target::Mounted))
}

pub fn run(cmd: FilesystemCmd) -> CmdResult {
    match cmd {
        FilesystemCmd::Df { target, devices } => {
            let spaces: Vec<SpaceInfo> = if mounted(&target)? {
                crate::mounted::space(&target)?
            } else {
                let fs = Filesystem::open(
                    &target,
                    &OpenOptions {
                        devices,
                        ..Default::default()
                    },
                )?;
                space_info(&fs)?
            };
            for s in spaces {
                println!(
                    "{}, {}: total={}, used={}",
                    block_group_kind(s.flags),
                    profile_name(s.flags),
                    pretty_size(s.total_bytes),
                    pretty_size(s.used_bytes)
                );
            }
        }
        FilesystemCmd::Sync { path } => {
            if !mounted(&path)? {
                return Err(format!(
                    "{}: not inside a mount (an image has nothing to sync)",
                    path.display()
                )
                .into());
            }
            crate::mounted::sync(&path)?;
        }
        FilesystemCmd::Label {
            target,
            new,
            devices,
        } => {
            if mounted(&target)? {
                match new {
                    Some(l) => crate::mounted::set_property(&target, "label", &l)?,
                    None => println!(
                        "{}",
                        crate::mounted::property(&target, "label")?.unwrap_or_default()
                    ),
                }
                return Ok(ExitCode::SUCCESS);
            }
            match new {
                Some(l) => {
                    let mut all = vec![target];
                    all.extend(devices);
                    let mut t = Trans::open(&all, 64 << 20)?;
                    t.set_label(l.as_bytes())?;
                    t.commit()?;
                }
                None => {
                    let fs = Filesystem::open(
                        &target,
                        &OpenOptions {
                            devices,
                            ..Default::default()
                        },
                    )?;
                    // The superblock's label ends at its NUL as parsed.
                    println!("{}", String::from_utf8_lossy(&fs.info.sb.label));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::pretty_size;

    #[test]
    fn sizes_print_as_btrfs_progs_prints_them() {
        assert_eq!(pretty_size(0), "0.00B");
        assert_eq!(pretty_size(16384), "16.00KiB");
        assert_eq!(pretty_size(8 << 20), "8.00MiB");
        assert_eq!(pretty_size(53_673_984), "51.19MiB");
        assert_eq!(pretty_size(3_407_872), "3.25MiB");
    }
}
