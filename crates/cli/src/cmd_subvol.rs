//! `ubtrfs subvolume create|snapshot|delete`: on an unmounted image, one
//! transaction per command, committed at the end (nothing is written when
//! a command fails); on a path inside a live mount, requests to the mount
//! ([`crate::mounted`]), which carries them out in its transaction.

use crate::cmd_fs::SubvolumeCmd;
use crate::mounted::Target;
use crate::CmdResult;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use ubtrfs_engine::subvol::Place;
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::consts::FS_TREE_OBJECTID;

use ubtrfs_engine::inode::now;

fn open(image: &Path, devices: &[PathBuf]) -> Result<Trans, ubtrfs_engine::Error> {
    let mut all = vec![image.to_path_buf()];
    all.extend_from_slice(devices);
    Trans::open(&all, 64 << 20)
}

/// Splits "/a/b/name" into ("/a/b", "name").
fn split(path: &str) -> Result<(&str, &str), String> {
    let p = path.trim_end_matches('/');
    let (dir, name) = p.rsplit_once('/').unwrap_or(("", p));
    if name.is_empty() || name == "." || name == ".." {
        return Err(format!("{path}: not a name to create"));
    }
    Ok((if dir.is_empty() { "/" } else { dir }, name))
}

/// Where `path` is to be made: its directory, resolved, and its name.
fn place_of<'p>(t: &mut Trans, path: &'p str) -> Result<Place<'p>, Box<dyn std::error::Error>> {
    let (dir, name) = split(path)?;
    let (tree, ino) = t.resolve_path(dir.as_bytes())?;
    Ok(Place {
        tree,
        dir: ino,
        name: name.as_bytes(),
    })
}

fn new_uuid() -> Result<[u8; 16], ubtrfs_engine::Error> {
    ubtrfs_engine::inode::root::random_uuid()
}

/// The mount's form of a command: every path given (IMAGE first) is
/// inside a live mount, and no -d was given. `alone`: IMAGE is the only
/// path the image's form would have.
fn mounted_paths(
    image: &Path,
    devices: &[PathBuf],
    rest: &[String],
    alone: bool,
) -> Result<Option<Vec<PathBuf>>, Box<dyn std::error::Error>> {
    match crate::mounted::classify(image, alone)? {
        Target::Image => Ok(None),
        Target::Mounted => {
            if !devices.is_empty() {
                return Err(format!(
                    "{}: -d names devices of an image; a mount has its own",
                    image.display()
                )
                .into());
            }
            let mut all = vec![image.to_path_buf()];
            all.extend(rest.iter().map(PathBuf::from));
            Ok(Some(all))
        }
    }
}

pub fn run(cmd: SubvolumeCmd) -> CmdResult {
    match cmd {
        SubvolumeCmd::List { .. } => unreachable!("listed by cmd_fs"),
        SubvolumeCmd::Create {
            image,
            devices,
            paths,
        } => {
            if let Some(all) = mounted_paths(&image, &devices, &paths, paths.is_empty())? {
                for p in all {
                    crate::mounted::create(&p)?;
                }
                return Ok(ExitCode::SUCCESS);
            }
            if paths.is_empty() {
                return Err(format!(
                    "{}: which PATH inside the image to create?",
                    image.display()
                )
                .into());
            }
            each_path(&image, &devices, &paths, |t, p| {
                let place = place_of(t, p)?;
                let id = t.create_subvolume(&place, new_uuid()?, false, now())?;
                println!("Create subvolume '{p}' (id {id})");
                Ok(())
            })?
        }
        SubvolumeCmd::Snapshot {
            readonly,
            image,
            devices,
            source,
            dest,
        } => {
            if let Some(all) = mounted_paths(&image, &devices, &[], dest.is_none())? {
                let Some(dest) = dest.is_none().then_some(&source) else {
                    return Err("inside a mount: snapshot [-r] SOURCE DEST".into());
                };
                crate::mounted::snapshot(&all[0], Path::new(dest), readonly)?;
                return Ok(ExitCode::SUCCESS);
            }
            let Some(dest) = dest else {
                return Err(format!("{}: snapshot [-r] IMAGE SOURCE DEST", image.display()).into());
            };
            let mut t = open(&image, &devices)?;
            let (src_tree, src_ino) = t.resolve_path(source.as_bytes())?;
            if src_ino != t.root(src_tree)?.item.root_dirid {
                return Err(format!("{source}: not a subvolume").into());
            }
            let place = place_of(&mut t, &dest)?;
            let id = t.snapshot(src_tree, &place, new_uuid()?, readonly, now())?;
            println!(
                "Create {}snapshot of '{source}' in '{dest}' (id {id})",
                if readonly { "a readonly " } else { "a " }
            );
            t.commit()?;
        }
        SubvolumeCmd::Show {
            rootid,
            uuid,
            image,
            devices,
            path,
        } => {
            use crate::cmd_subvol_show::{show, Which};
            let mounted = mounted_paths(&image, &devices, &[], path.is_none())?.is_some();
            let which = match (rootid, uuid) {
                (Some(id), _) => Which::Id(id),
                (None, Some(u)) => Which::Uuid(crate::cmd_mkfs::parse_uuid(&u)?),
                (None, None) => Which::Path(path.clone().unwrap_or_else(|| {
                    if mounted {
                        image.display().to_string()
                    } else {
                        "/".into()
                    }
                })),
            };
            if mounted && path.is_some() {
                return Err("inside a mount: show [-r ID | -u UUID] PATH".into());
            }
            print!("{}", show(&image, &devices, mounted, which)?);
        }
        SubvolumeCmd::GetDefault { image, devices } => {
            let (id, subs) = match mounted_paths(&image, &devices, &[], true)? {
                Some(_) => (
                    crate::mounted::default_subvol(&image)?,
                    crate::mounted::subvolumes(&image)?,
                ),
                None => {
                    let fs = crate::open_image(&image, devices)?;
                    (fs.default_subvol()?, fs.subvolumes()?)
                }
            };
            if id == FS_TREE_OBJECTID {
                println!("ID 5 (FS_TREE)");
                return Ok(ExitCode::SUCCESS);
            }
            let s = subs
                .iter()
                .find(|s| s.id == id)
                .ok_or_else(|| format!("the default subvolume {id} is not in the filesystem"))?;
            println!(
                "ID {} gen {} top level {} path {}",
                s.id,
                s.root.generation,
                s.parent_id,
                String::from_utf8_lossy(&s.path)
            );
        }
        SubvolumeCmd::SetDefault {
            id_or_path,
            image,
            devices,
        } => match image {
            Some(image) => {
                let id: u64 = id_or_path
                    .parse()
                    .map_err(|_| format!("{id_or_path}: not a subvolume id"))?;
                if mounted_paths(&image, &devices, &[], true)?.is_some() {
                    crate::mounted::set_default(&image, id)?;
                } else {
                    let mut t = open(&image, &devices)?;
                    let id = if id == 0 { FS_TREE_OBJECTID } else { id };
                    if id != FS_TREE_OBJECTID && t.root(id)?.item.refs == 0 {
                        return Err(format!("subvolume {id} is deleted").into());
                    }
                    t.set_default_subvol(id)?;
                    t.commit()?;
                }
            }
            None => {
                let path = PathBuf::from(&id_or_path);
                if mounted_paths(&path, &devices, &[], true)?.is_none() {
                    return Err(format!("{id_or_path}: set-default SUBVOL_PATH takes a subvolume inside a mount; on an image: set-default ID IMAGE").into());
                }
                let id = crate::mounted::subvol_id(&path)?;
                crate::mounted::set_default(&path, id)?;
            }
        },
        SubvolumeCmd::Delete {
            commit_after,
            commit_each,
            image,
            devices,
            paths,
        } => {
            if let Some(all) = mounted_paths(&image, &devices, &paths, paths.is_empty())? {
                for p in &all {
                    crate::mounted::delete(p, commit_after || commit_each)?;
                    if commit_each {
                        crate::mounted::sync(&crate::mounted::parent_of(p))?;
                    }
                }
                if commit_after && !commit_each {
                    crate::mounted::sync(&crate::mounted::parent_of(&all[0]))?;
                }
                return Ok(ExitCode::SUCCESS);
            }
            if paths.is_empty() {
                return Err(format!(
                    "{}: which PATH inside the image to delete?",
                    image.display()
                )
                .into());
            }
            each_path(&image, &devices, &paths, |t, p| {
                let (tree, ino) = t.resolve_path(p.as_bytes())?;
                if tree == ubtrfs_format::consts::FS_TREE_OBJECTID
                    || ino != t.root(tree)?.item.root_dirid
                {
                    return Err(format!("{p}: not a subvolume").into());
                }
                t.delete_subvolume(tree, now())?;
                println!("Delete subvolume (commit): '{p}'");
                Ok(())
            })?
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens the image, does `each` for every path in one transaction, and
/// commits it (nothing is written if one fails).
fn each_path(
    image: &Path,
    devices: &[PathBuf],
    paths: &[String],
    mut each: impl FnMut(&mut Trans, &str) -> Result<(), Box<dyn std::error::Error>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut t = open(image, devices)?;
    for p in paths {
        each(&mut t, p)?;
    }
    t.commit()?;
    Ok(())
}
