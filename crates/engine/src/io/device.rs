//! Devices: image files or block devices opened read-only, identified by
//! the superblock each carries (fsid, devid).

use crate::error::{Error, Result};
use crate::io::dev::{BlockDev, FileDev};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use ubtrfs_format::consts::{SUPER_OFFSETS, SUPER_SIZE};
use ubtrfs_format::Superblock;

/// One opened device of the filesystem.
#[derive(Debug)]
pub struct Device {
    pub path: PathBuf,
    pub devid: u64,
    pub uuid: [u8; 16],
    pub size: u64,
    /// The newest valid superblock copy found on this device.
    pub superblock: Superblock,
    /// Superblock copies that were present but invalid (offset, reason).
    pub bad_supers: Vec<(u64, String)>,
    dev: Arc<dyn BlockDev>,
}

impl Device {
    /// Opens `path` read-only and reads its superblock copies, keeping the
    /// valid one with the highest generation. Copies beyond the device end
    /// are not looked for.
    pub fn open(path: &Path) -> Result<Device> {
        let dev = FileDev::open(path, false).map_err(|e| Error::Io {
            path: path.display().to_string(),
            op: "open".into(),
            source: e,
        })?;
        Device::from_dev(path, Arc::new(dev))
    }

    /// A second handle of this device over the same open file, its
    /// superblock read anew: a reader of what a writer of this process
    /// has committed (a send from the mount), without a claim of its own.
    pub fn reopen(&self) -> Result<Device> {
        Device::from_dev(&self.path, self.dev.clone())
    }

    /// Reads the superblock copies of an already opened device; `path`
    /// names it in messages.
    pub fn from_dev(path: &Path, dev: Arc<dyn BlockDev>) -> Result<Device> {
        let size = dev.size();
        let mut best: Option<Superblock> = None;
        let mut bad = Vec::new();
        let mut buf = vec![0u8; SUPER_SIZE];
        for &off in SUPER_OFFSETS.iter() {
            if off + SUPER_SIZE as u64 > size {
                break;
            }
            if let Err(e) = dev.read_at(&mut buf, off) {
                bad.push((off, format!("read error: {e}")));
                continue;
            }
            match Superblock::parse(&buf) {
                Ok(sb) if sb.bytenr != off => bad.push((
                    off,
                    format!("superblock records bytenr {} instead", sb.bytenr),
                )),
                Ok(sb) => {
                    if best.as_ref().is_none_or(|b| sb.generation > b.generation) {
                        best = Some(sb);
                    }
                }
                Err(e) => {
                    // Mirrors never written (all zero, no magic) are not errors.
                    if off == SUPER_OFFSETS[0] || buf[0x40..0x48] == *b"_BHRfS_M" {
                        bad.push((off, e.to_string()))
                    }
                }
            }
        }
        let superblock = best.ok_or_else(|| {
            let why = bad
                .iter()
                .map(|(o, e)| format!("at {o}: {e}"))
                .collect::<Vec<_>>()
                .join("; ");
            Error::corrupt(
                format!("{}", path.display()),
                format!("no valid btrfs superblock ({why})"),
            )
        })?;
        Ok(Device {
            path: path.to_path_buf(),
            devid: superblock.dev_item.devid,
            uuid: superblock.dev_item.uuid,
            size,
            superblock,
            bad_supers: bad,
            dev,
        })
    }

    /// Reads exactly `buf.len()` bytes at physical offset `off`.
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> Result<()> {
        let end = off.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > self.size) {
            return Err(Error::corrupt(
                format!("device {} (devid {})", self.path.display(), self.devid),
                format!(
                    "read of {} bytes at physical {off} beyond device size {}",
                    buf.len(),
                    self.size
                ),
            ));
        }
        self.dev.read_at(buf, off).map_err(|e| Error::Io {
            path: self.path.display().to_string(),
            op: format!("read {} bytes at physical {off}", buf.len()),
            source: e,
        })
    }

    /// A device being made (mkfs): no superblock on it yet; `superblock`
    /// is the one that will be written.
    pub fn blank(path: &Path, dev: Arc<dyn BlockDev>, superblock: Superblock) -> Device {
        Device {
            path: path.to_path_buf(),
            devid: superblock.dev_item.devid,
            uuid: superblock.dev_item.uuid,
            size: dev.size(),
            superblock,
            bad_supers: Vec::new(),
            dev,
        }
    }

    /// The device itself, shared (readahead threads, writers).
    pub fn dev(&self) -> &Arc<dyn BlockDev> {
        &self.dev
    }

    pub fn name(&self) -> String {
        format!("{} (devid {})", self.path.display(), self.devid)
    }
}

/// The block devices of this machine holding a device of filesystem
/// `fsid` other than those in `have` (devids), as `btrfs device scan`
/// finds them: every entry of /sys/class/block is opened read-only and its
/// superblock read; devices that cannot be opened (in use, no permission)
/// are passed over.
pub fn scan_for(fsid: &[u8; 16], have: &[u64]) -> Vec<Device> {
    let mut found: Vec<Device> = Vec::new();
    let Ok(entries) = std::fs::read_dir("/sys/class/block") else {
        return found;
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    for name in names {
        let path = Path::new("/dev").join(&name);
        let Ok(d) = Device::open(&path) else { continue };
        if d.superblock.fsid == *fsid
            && !have.contains(&d.devid)
            && !found.iter().any(|f| f.devid == d.devid)
        {
            found.push(d);
        }
    }
    found
}
