//! `ubtrfs subvolume show`: one subvolume's root item and back reference,
//! and the snapshots made of it, printed as `btrfs subvolume show` prints
//! them (btrfs-progs cmds/subvolume.c), from an image or a live mount.
//! Both read the same items: the image's root tree, or the mount's
//! through TREE_SEARCH ([`crate::mounted::subvolumes`]).

use crate::output::ts_local;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use ubtrfs_engine::Subvolume;
use ubtrfs_format::bytes::format_uuid;
use ubtrfs_format::consts::{FIRST_INODE, FS_TREE_OBJECTID};

/// Which subvolume to show.
pub enum Which {
    Path(String),
    Id(u64),
    Uuid([u8; 16]),
}

fn dash_or_uuid(u: &[u8; 16]) -> String {
    if u.iter().all(|&b| b == 0) {
        "-".into()
    } else {
        format_uuid(u)
    }
}

/// The text `btrfs subvolume show` prints for subvolume `s` of `subs`.
/// progs prints the creation time again as the send time, and lists as
/// snapshots every subvolume whose parent UUID is this one's, in the
/// order its iterator walks them: from the top level, each subvolume's
/// children by id, depth first.
pub fn render(s: &Subvolume, subs: &[Subvolume]) -> String {
    let r = &s.root;
    let created = if r.otime.sec != 0 {
        ts_local(r.otime.sec)
    } else {
        "-".into()
    };
    let received = if r.rtime.sec != 0 {
        ts_local(r.rtime.sec)
    } else {
        "-".into()
    };
    let mut o = String::new();
    // Without CAP_SYS_ADMIN a subvolume's path from the top is not known
    // (the listing starts at it): its name stands in.
    let path = if s.id == FS_TREE_OBJECTID {
        "/".into()
    } else if s.path.is_empty() {
        String::from_utf8_lossy(&s.name).into_owned()
    } else {
        String::from_utf8_lossy(&s.path).into_owned()
    };
    let name = if s.id == FS_TREE_OBJECTID {
        "<FS_TREE>".into()
    } else {
        String::from_utf8_lossy(&s.name).into_owned()
    };
    let _ = writeln!(o, "{path}");
    let _ = writeln!(o, "\tName: \t\t\t{name}");
    let _ = writeln!(o, "\tUUID: \t\t\t{}", dash_or_uuid(&r.uuid));
    let _ = writeln!(o, "\tParent UUID: \t\t{}", dash_or_uuid(&r.parent_uuid));
    let _ = writeln!(o, "\tReceived UUID: \t\t{}", dash_or_uuid(&r.received_uuid));
    let _ = writeln!(o, "\tCreation time: \t\t{created}");
    let _ = writeln!(o, "\tSubvolume ID: \t\t{}", s.id);
    let _ = writeln!(o, "\tGeneration: \t\t{}", r.generation);
    let _ = writeln!(o, "\tGen at creation: \t{}", r.otransid);
    let _ = writeln!(o, "\tParent ID: \t\t{}", s.parent_id);
    let _ = writeln!(o, "\tTop level ID: \t\t{}", s.parent_id);
    let flags = if r.is_readonly() { "readonly" } else { "-" };
    let _ = writeln!(o, "\tFlags: \t\t\t{flags}");
    let _ = writeln!(o, "\tSend transid: \t\t{}", r.stransid);
    let _ = writeln!(o, "\tSend time: \t\t{created}");
    let _ = writeln!(o, "\tReceive transid: \t{}", r.rtransid);
    let _ = writeln!(o, "\tReceive time: \t\t{received}");
    let _ = writeln!(o, "\tSnapshot(s):");
    let mut stack = vec![FS_TREE_OBJECTID];
    while let Some(p) = stack.pop() {
        let mut children: Vec<&Subvolume> = subs
            .iter()
            .filter(|c| c.parent_id == p && c.id != FS_TREE_OBJECTID)
            .collect();
        children.sort_by_key(|c| std::cmp::Reverse(c.id));
        for c in children {
            stack.push(c.id);
        }
        if p == FS_TREE_OBJECTID {
            continue;
        }
        let Some(c) = subs.iter().find(|c| c.id == p) else {
            continue;
        };
        if c.root.parent_uuid == r.uuid && r.uuid != [0; 16] {
            let _ = writeln!(o, "\t\t\t\t{}", String::from_utf8_lossy(&c.path));
        }
    }
    o
}

fn pick<'a>(subs: &'a [Subvolume], id: u64, what: &str) -> Result<&'a Subvolume, String> {
    subs.iter()
        .find(|s| s.id == id)
        .ok_or_else(|| format!("{what}: no such subvolume"))
}

/// The subvolume `which` names, with the filesystem's subvolumes: of the
/// image `image` (and `devices`), or of the mount `image` is inside.
pub fn show(
    image: &Path,
    devices: &[PathBuf],
    mounted: bool,
    which: Which,
) -> Result<String, Box<dyn std::error::Error>> {
    let (subs, id) = if mounted {
        let subs = crate::mounted::subvolumes(image)?;
        let id = match &which {
            Which::Path(_) => {
                if !crate::mounted::is_subvol_root(image) {
                    return Err(format!("{}: not a subvolume", image.display()).into());
                }
                crate::mounted::subvol_id(image)?
            }
            _ => 0,
        };
        (subs, id)
    } else {
        let fs = crate::open_image(image, devices.to_vec())?;
        let id = match &which {
            Which::Path(p) => {
                let at = fs.resolve(p.as_bytes())?;
                if at.ino != FIRST_INODE {
                    return Err(format!("{p}: not a subvolume").into());
                }
                at.subvol
            }
            _ => 0,
        };
        (fs.subvolumes()?, id)
    };
    let s = match which {
        Which::Path(p) => pick(&subs, id, &p)?,
        Which::Id(id) => pick(&subs, id, &format!("subvolume id {id}"))?,
        Which::Uuid(u) => subs
            .iter()
            .find(|s| s.root.uuid == u)
            .ok_or_else(|| format!("subvolume UUID {}: not found", format_uuid(&u)))?,
    };
    Ok(render(s, &subs))
}
