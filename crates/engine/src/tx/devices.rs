//! Adding and removing devices of an unmounted filesystem (the kernel's
//! volumes.c btrfs_init_new_device and btrfs_rm_device). A removal first
//! moves every chunk off the device ([`super::relocation`]); here are the
//! device item, the superblock's counts and the device's own superblocks.

use super::Trans;
use crate::error::{Error, Result};
use crate::io::dev::BlockDev;
use crate::io::device::Device;
use crate::io::volumes::DEV_RESERVED;
use std::path::Path;
use std::sync::Arc;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::DevItem;
use ubtrfs_format::Key;

/// Least size of a device the filesystem takes (as resize's).
pub const MIN_DEVICE_SIZE: u64 = 256 << 20;

impl Trans {
    /// Adds `dev` (at `path`, claimed by the caller and checked for other
    /// signatures) as a new device: the next devid, device uuid `uuid`, its
    /// DEV_ITEM, the superblock's num_devices and total_bytes. Its first
    /// MiB is zeroed now (old signatures; nothing of this filesystem is
    /// there yet); its superblocks are written by the commit, with every
    /// other device's. Returns the devid.
    pub fn add_device(
        &mut self,
        path: &Path,
        dev: Arc<dyn BlockDev>,
        uuid: [u8; 16],
    ) -> Result<u64> {
        let ss = self.info.sectorsize as u64;
        let size = dev.size() / ss * ss;
        if size < MIN_DEVICE_SIZE {
            return Err(Error::Invalid(format!(
                "{}: {size} bytes is below the least size of a device (256 MiB)",
                path.display()
            )));
        }
        let devid = self.dev_items.keys().max().copied().unwrap_or(0) + 1;
        let item = DevItem::new(devid, size, self.info.sectorsize, uuid, self.fsid);
        dev.write_at(&vec![0u8; DEV_RESERVED as usize], 0)
            .map_err(|e| Error::Io {
                path: path.display().to_string(),
                op: "zero the first MiB".into(),
                source: e,
            })?;
        let mut sb = self.info.sb.clone();
        sb.dev_item = item;
        self.info
            .devices
            .insert(devid, Device::blank(path, dev, sb));
        self.dev_items.insert(devid, item);
        self.added_devices.push(devid);
        self.dev_items_dirty = true;
        self.info.sb.num_devices += 1;
        self.info.sb.total_bytes += size;
        Ok(devid)
    }

    /// Takes device `devid` out of the filesystem, which has no chunk on
    /// it any more: its DEV_ITEM and device statistics go, the
    /// superblock's counts drop. Returns the device, whose superblocks the
    /// caller wipes ([`wipe_superblocks`]) once the commit is on disk.
    pub fn remove_device(&mut self, devid: u64) -> Result<Device> {
        if self.dev_space.extents.keys().any(|&(d, _)| d == devid) {
            return Err(Error::Invalid(format!(
                "devid {devid} still has chunks: move them first"
            )));
        }
        if self.dev_items.len() < 2 {
            return Err(Error::Invalid(format!("devid {devid} is the only device")));
        }
        let di = self
            .dev_items
            .remove(&devid)
            .ok_or_else(|| Error::NotFound(format!("devid {devid}: no such device")))?;
        self.delete_item(
            CHUNK_TREE_OBJECTID,
            &Key::new(DEV_ITEMS_OBJECTID, DEV_ITEM, devid),
        )?;
        // DEV_STATS: (0, PERSISTENT_ITEM, devid) in the device tree.
        self.delete_item(DEV_TREE_OBJECTID, &Key::new(0, PERSISTENT_ITEM, devid))?;
        self.dev_space.limits.remove(&devid);
        self.dev_items_dirty = true;
        self.info.sb.num_devices -= 1;
        self.info.sb.total_bytes -= di.total_bytes;
        if self.info.sb.dev_item.devid == devid {
            // The superblock's own dev_item is set per device at commit.
            self.info.sb.dev_item = *self.dev_items.values().next().unwrap();
        }
        self.info
            .devices
            .remove(&devid)
            .ok_or_else(|| Error::NotFound(format!("devid {devid} was not opened")))
    }
}

/// Zeroes the magic of every superblock copy on `dev` (a removed
/// device), as the kernel's btrfs_scratch_superblocks: no scan finds it
/// as a member again.
pub fn wipe_superblocks(dev: &Device) -> Result<()> {
    for off in SUPER_OFFSETS {
        if off + SUPER_SIZE as u64 > dev.size {
            break;
        }
        // The magic sits at byte 64 of the superblock.
        dev.dev()
            .write_at(&[0u8; 8], off + 64)
            .map_err(|e| Error::Io {
                path: dev.path.display().to_string(),
                op: format!("wipe the superblock at {off}"),
                source: e,
            })?;
    }
    dev.dev().flush().map_err(|e| Error::Io {
        path: dev.path.display().to_string(),
        op: "flush".into(),
        source: e,
    })
}
