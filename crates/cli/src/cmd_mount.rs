//! `ubtrfs mount`: mount an image through FUSE, read-write when it can be
//! written (as the kernel mounts), or read-only (`-o ro`). The same binary
//! run as `mount.fuse.ubtrfs` (a symlink) is the helper mount(8) calls for
//! `mount -t fuse.ubtrfs IMAGE MOUNTPOINT`.

use crate::{CmdResult, ImageArgs};
use clap::Args;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use ubtrfs_fuse::session::{run, MountRequest};
use ubtrfs_fuse::MountOptions;

#[derive(Args)]
pub struct MountArgs {
    /// Mount options, comma-separated (repeatable): ro, rw (the default
    /// when the image can be written), subvol=PATH, subvolid=N,
    /// `compress=ALGO[:LEVEL]`, `compress-force=ALGO[:LEVEL]`, nodatacow,
    /// nodatasum, notreelog, commit=SECS, max_inline=BYTES, allow_other, allow_root,
    /// threads=N, log=FILE, device=PATH, fsname=NAME, timeout=SECS, nodev,
    /// nosuid, noexec, ...
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Stay in the foreground (log to stderr) instead of detaching.
    #[arg(short = 'f', long)]
    pub foreground: bool,
    #[command(flatten)]
    pub image: ImageArgs,
    /// Directory to mount on.
    pub mountpoint: PathBuf,
}

#[derive(Args)]
pub struct UmountArgs {
    /// Detach now and let the serving process end when the mount is no
    /// longer busy (umount -l); does not wait for it.
    #[arg(short = 'l', long)]
    pub lazy: bool,
    /// Where the image is mounted.
    pub mountpoint: PathBuf,
}

/// `ubtrfs umount`: unmounts, then waits until the process serving the
/// mount has made its last commit and ended (a plain umount returns
/// before that).
pub fn run_umount(a: UmountArgs) -> CmdResult {
    ubtrfs_fuse::session::unmount(&a.mountpoint, a.lazy)?;
    Ok(ExitCode::SUCCESS)
}

pub fn run_mount(a: MountArgs) -> CmdResult {
    let options = MountOptions::parse(&a.options)?;
    if options.remount {
        ubtrfs_fuse::remount::remount(&a.mountpoint, &a.options)?;
        return Ok(ExitCode::SUCCESS);
    }
    ubtrfs_engine::io::claim::set_read_live(a.image.force);
    run(MountRequest {
        image: a.image.image,
        devices: a.image.devices,
        cache_bytes: a.image.cache_mb << 20,
        mountpoint: a.mountpoint,
        options,
        foreground: a.foreground,
    })?;
    Ok(ExitCode::SUCCESS)
}

/// When called as `mount.fuse.ubtrfs SOURCE MOUNTPOINT [-o OPTS] [-f] [-n]
/// [-s] [-v] [-t TYPE]` (mount(8)'s helper convention), mounts and returns
/// the exit code; None for any other program name.
pub fn helper_main() -> Option<ExitCode> {
    let mut args = std::env::args_os();
    let argv0 = PathBuf::from(args.next()?);
    let name = argv0.file_name()?.to_string_lossy().into_owned();
    if !name.starts_with("mount.fuse.ubtrfs") && !name.starts_with("mount.ubtrfs") {
        return None;
    }
    let mut positional: Vec<OsString> = Vec::new();
    let mut opts = Vec::new();
    let mut foreground = false;
    let mut rest = args.peekable();
    while let Some(a) = rest.next() {
        match a.to_str() {
            Some("-o") => match rest.next() {
                Some(o) => opts.push(o.to_string_lossy().into_owned()),
                None => return Some(helper_fail("-o needs an argument")),
            },
            Some(s) if s.starts_with("-o") => opts.push(s[2..].to_string()),
            // -t TYPE: the type mount(8) was given.
            Some("-t") => {
                rest.next();
            }
            Some("-f") => foreground = true,
            // No mtab writing, sloppy options, verbose: nothing to do.
            Some("-n" | "-s" | "-v" | "-r" | "-w") => {}
            _ => positional.push(a),
        }
    }
    if positional.len() != 2 {
        return Some(helper_fail(
            "usage: mount.fuse.ubtrfs IMAGE MOUNTPOINT [-o OPTIONS]",
        ));
    }
    let options = match MountOptions::parse(&opts) {
        Ok(o) => o,
        Err(e) => return Some(helper_fail(&e)),
    };
    if options.remount {
        return Some(
            match ubtrfs_fuse::remount::remount(Path::new(&positional[1]), &opts) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => helper_fail(&e),
            },
        );
    }
    let res = run(MountRequest {
        image: PathBuf::from(&positional[0]),
        devices: Vec::new(),
        cache_bytes: 64 << 20,
        mountpoint: PathBuf::from(&positional[1]),
        options,
        foreground,
    });
    Some(match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => helper_fail(&e),
    })
}

fn helper_fail(msg: &str) -> ExitCode {
    eprintln!("mount.fuse.ubtrfs: {msg}");
    // mount(8) reads 32 as "mount failure".
    ExitCode::from(32)
}
