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
