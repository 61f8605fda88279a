//! Every superblock copy of every device: present copies valid (magic,
//! checksum, their own bytenr) and of this filesystem. A copy older than
//! the one in use is a warning: the kernel writes all of them at each
//! commit, but mounts with the newest.

use super::Problems;
use crate::fs::Filesystem;
use ubtrfs_format::consts::{SUPER_OFFSETS, SUPER_SIZE};
use ubtrfs_format::Superblock;

pub(crate) fn check(fs: &Filesystem, p: &mut Problems) {
    let sb = &fs.info.sb;
    fields(sb, p);
    let mut buf = vec![0u8; SUPER_SIZE];
    for (devid, d) in &fs.info.devices {
        for (i, &off) in SUPER_OFFSETS.iter().enumerate() {
            if off + SUPER_SIZE as u64 > d.size {
                break;
            }
            let here = format!("device {devid} superblock copy {i} (at {off})");
            if let Err(e) = d.read_at(&mut buf, off) {
                p.add(here, format!("{e}"));
                continue;
            }
            if i > 0 && buf.iter().all(|&b| b == 0) {
                continue; // never written
            }
            match Superblock::parse(&buf) {
                Ok(c) => {
                    if c.bytenr != off {
                        p.add(&here, format!("records bytenr {}", c.bytenr));
                    }
                    if c.fsid != sb.fsid {
                        p.add(&here, "of another filesystem (fsid)");
                    } else if c.generation != sb.generation {
                        p.warn(
                            &here,
                            format!(
                                "generation {} but the filesystem is at {}",
                                c.generation, sb.generation
                            ),
                        );
                    }
                }
                Err(e) => p.add(here, format!("{e}")),
            }
        }
    }
}

/// The fields the kernel's `btrfs_validate_super` refuses a mount over.
fn fields(sb: &Superblock, p: &mut Problems) {
    let ss = sb.sectorsize as u64;
    let ns = sb.nodesize as u64;
    let pow2 = |v: u64| v.is_power_of_two();
    if !pow2(ss) || !(4096..=65536).contains(&ss) {
        p.add("superblock", format!("sectorsize {ss}"));
        return;
    }
    if !pow2(ns) || ns < ss || ns > 65536 {
        p.add("superblock", format!("nodesize {ns} (sectorsize {ss})"));
    }
    if sb.stripesize as u64 != ss {
        p.add(
            "superblock",
            format!("stripesize {} but sectorsize {ss}", sb.stripesize),
        );
    }
    for (what, v) in [
        ("root", sb.root),
        ("chunk_root", sb.chunk_root),
        ("log_root", sb.log_root),
    ] {
        if !v.is_multiple_of(ss) {
            p.add(
                "superblock",
                format!("{what} {v} not aligned to the sector size"),
            );
        }
    }
    for (what, l) in [
        ("root_level", sb.root_level),
        ("chunk_root_level", sb.chunk_root_level),
        ("log_root_level", sb.log_root_level),
    ] {
        if l > ubtrfs_format::node::MAX_LEVEL {
            p.add("superblock", format!("{what} {l}"));
        }
    }
    if sb.num_devices == 0 {
        p.add("superblock", "num_devices 0");
    }
}
