//! BTRFS_IOC_SCRUB on the read-write mount: the whole filesystem's last
//! commit verified while the mount goes on (every superblock, every copy
//! of every tree block and of every checksummed data sector), by the same
//! scrub as `ubtrfs scrub` of an unmounted image
//! ([`ubtrfs_engine::tools::scrub`]), reading through the mount's open
//! files ([`ubtrfs_engine::rwfs::RwFs::begin_commit_reader`]). It repairs
//! nothing: what it finds is counted uncorrectable and written to the
//! mount's log, one line per bad copy with where it is. The request's
//! thread runs it, as the kernel's ioctl returns when the scrub ends; no
//! lock of the mount is held meanwhile.

use super::{errno, RwInner};
use crate::caps;
use crate::logging;
use crate::proto::{Errno, ReplyIoctl, Request};
use ubtrfs_engine::tools::scrub::scrub;
use ubtrfs_format::ioctl::ScrubArgs;

impl RwInner {
    pub(super) fn scrub_ioctl(&self, req: &Request, arg: &[u8], reply: ReplyIoctl) {
        match self.scrub_for_caller(req, arg) {
            Ok(out) => reply.ioctl(0, &out),
            Err(e) => reply.error(e),
        }
    }

    fn scrub_for_caller(&self, req: &Request, arg: &[u8]) -> Result<Vec<u8>, Errno> {
        let mut a = ScrubArgs::parse(arg).ok_or(Errno::EINVAL)?;
        // As the kernel: CAP_SYS_ADMIN.
        if !caps::capable(req.pid(), caps::CAP_SYS_ADMIN) {
            return Err(Errno::EPERM);
        }
        // Any device of the filesystem names the whole of it: its copies
        // on every device are verified at once.
        if self.fs_read().dev_info(a.devid, &[0; 16]).is_none() {
            return Err(Errno::ENODEV);
        }
        let fs = self
            .fs
            .lock_commit()
            .begin_commit_reader()
            .map_err(|e| errno("ioctl SCRUB", e))?;
        let res = scrub(&fs, &mut |_| {});
        let (nodesize, sectorsize) = (fs.info.nodesize as u64, fs.info.sectorsize as u64);
        drop(fs);
        self.fs.lock().end_commit_reader();
        let r = res.map_err(|e| errno("ioctl SCRUB", e))?;
        for e in &r.errors {
            logging::warn(&format!("scrub: {e}"));
        }
        logging::info(&r.summary());
        a.set("tree_extents_scrubbed", r.tree_blocks_checked);
        a.set("tree_bytes_scrubbed", r.tree_blocks_checked * nodesize);
        a.set("data_bytes_scrubbed", r.data_sectors_checked * sectorsize);
        a.set("read_errors", r.unreadable);
        a.set("csum_errors", r.data_errors);
        a.set("verify_errors", r.tree_block_errors);
        a.set("super_errors", r.superblock_errors);
        a.set(
            "uncorrectable_errors",
            r.data_errors + r.tree_block_errors + r.unreadable,
        );
        a.ubtrfs = [
            r.superblocks_checked,
            r.skipped_copies,
            r.data_sectors_checked,
        ];
        Ok(a.to_bytes())
    }
}
