//! `ubtrfs property get|set`: the properties btrfs-progs' `btrfs
//! property` knows: `ro` of a subvolume, `label` of the filesystem,
//! `compression` of a file or directory. On a path inside a live mount
//! they go through the mount (SUBVOL_GETFLAGS/SETFLAGS, the label
//! ioctls, the btrfs.compression xattr); on an unmounted image
//! (`IMAGE PATH`), through a transaction (set) or the reader (get).

use crate::mounted::Target;
use crate::CmdResult;
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::consts::ROOT_SUBVOL_RDONLY;

#[derive(Subcommand)]
pub enum PropertyCmd {
    /// Print properties: `get [-t TYPE] PATH [NAME]` inside a live mount,
    /// or `get [-t TYPE] IMAGE PATH [NAME]` on an unmounted image.
    Get {
        /// The object's type: s (subvolume), f (filesystem), i (inode);
        /// by default every type the object has.
        #[arg(short = 't', value_name = "TYPE")]
        kind: Option<String>,
        /// The path inside a mount, or the image.
        target: PathBuf,
        /// On an image: the path inside it, then the name.
        rest: Vec<String>,
        /// Another device of the image (repeatable).
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
    },
    /// Set a property: `set [-t TYPE] PATH NAME VALUE` inside a live
    /// mount, or `set [-t TYPE] IMAGE PATH NAME VALUE` on an unmounted
    /// image.
    Set {
        #[arg(short = 't', value_name = "TYPE")]
        kind: Option<String>,
        target: PathBuf,
        rest: Vec<String>,
        /// Another device of the image (repeatable).
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
    },
}

/// The properties of an object of each type.
fn names_for(kind: Option<&str>, is_subvol: bool) -> Result<Vec<&'static str>, String> {
    Ok(match kind {
        Some("s") | Some("subvol") => vec!["ro"],
        Some("f") | Some("filesystem") => vec!["label"],
        Some("i") | Some("inode") => vec!["compression"],
        Some(k) => return Err(format!("-t {k}: s, f or i")),
        None if is_subvol => vec!["ro", "label", "compression"],
        None => vec!["label", "compression"],
    })
}

pub fn run(cmd: PropertyCmd) -> CmdResult {
    match cmd {
        PropertyCmd::Get {
            kind,
            target,
            rest,
            devices,
        } => {
            let mounted = matches!(crate::mounted::classify(&target, true)?, Target::Mounted);
            if mounted {
                no_devices(&devices)?;
                let is_subvol = crate::mounted::is_subvol_root(&target);
                let names = match rest.as_slice() {
                    [] => names_for(kind.as_deref(), is_subvol)?,
                    [n] => vec![known(n)?],
                    _ => return Err("get [-t TYPE] PATH [NAME]".into()),
                };
                for n in names {
                    if let Some(v) = crate::mounted::property(&target, n)? {
                        println!("{n}={v}");
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            let (path, names) = match rest.as_slice() {
                [p] => (p.clone(), None),
                [p, n] => (p.clone(), Some(known(n)?)),
                _ => return Err("get [-t TYPE] IMAGE PATH [NAME]".into()),
            };
            let fs = crate::open_image(&target, devices)?;
            let id = fs.resolve(path.as_bytes())?;
            let is_subvol = id.ino == ubtrfs_format::consts::FIRST_INODE;
            let names = match names {
                Some(n) => vec![n],
                None => names_for(kind.as_deref(), is_subvol)?,
            };
            for n in names {
                let v = match n {
                    "ro" => fs
                        .root_item(id.subvol)?
                        .map(|r| (r.flags & ROOT_SUBVOL_RDONLY != 0).to_string()),
                    "label" => Some(String::from_utf8_lossy(&fs.info.sb.label).into_owned()),
                    _ => fs
                        .xattr(id, b"btrfs.compression")?
                        .map(|v| String::from_utf8_lossy(&v).into_owned()),
                };
                if let Some(v) = v {
                    println!("{n}={v}");
                }
            }
        }
        PropertyCmd::Set {
            kind,
            target,
            rest,
            devices,
        } => {
            let mounted = matches!(crate::mounted::classify(&target, true)?, Target::Mounted);
            // -t only says which object a name belongs to: each name here
            // belongs to one type.
            let _ = kind;
            if mounted {
                no_devices(&devices)?;
                let [n, v] = rest.as_slice() else {
                    return Err("set [-t TYPE] PATH NAME VALUE".into());
                };
                crate::mounted::set_property(&target, known(n)?, v)?;
                return Ok(ExitCode::SUCCESS);
            }
            let [path, n, v] = rest.as_slice() else {
                return Err("set [-t TYPE] IMAGE PATH NAME VALUE".into());
            };
            let mut all = vec![target];
            all.extend(devices);
            set_offline(&all, path, known(n)?, v)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn known(n: &str) -> Result<&'static str, String> {
    match n {
        "ro" => Ok("ro"),
        "label" => Ok("label"),
        "compression" => Ok("compression"),
        _ => Err(format!("{n}: unknown property (ro, label, compression)")),
    }
}

/// `ro true|false` as btrfs-progs reads it.
pub fn parse_bool(v: &str) -> Result<bool, String> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("{v}: true or false")),
    }
}

fn no_devices(devices: &[PathBuf]) -> Result<(), String> {
    if devices.is_empty() {
        Ok(())
    } else {
        Err("-d names devices of an image; a mount has its own".into())
    }
}

/// Sets a property of `path` in the image on `devices` (the image first).
fn set_offline(devices: &[PathBuf], path: &str, name: &str, value: &str) -> CmdResult {
    let mut t = Trans::open(devices, 64 << 20)?;
    let (tree, ino) = t.resolve_path(path.as_bytes())?;
    match name {
        "ro" => {
            let ro = parse_bool(value)?;
            if ino != t.root(tree)?.item.root_dirid {
                return Err(format!("{path}: not a subvolume").into());
            }
            let r = t.root_item_mut(tree)?;
            if ro {
                r.flags |= ROOT_SUBVOL_RDONLY;
            } else {
                r.flags &= !ROOT_SUBVOL_RDONLY;
            }
        }
        "label" => {
            t.set_label(value.as_bytes())?;
        }
        _ => {
            if value.is_empty() {
                t.inode_mut(tree, ino).remove_xattr(b"btrfs.compression")?;
            } else {
                t.inode_mut(tree, ino)
                    .set_xattr(b"btrfs.compression", value.as_bytes())?;
            }
        }
    }
    t.commit()?;
    Ok(ExitCode::SUCCESS)
}
