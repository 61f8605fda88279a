//! A send from the mount (BTRFS_IOC_SEND), and the reader of the last
//! commit it reads (a scrub of the mount reads it too): the stream is made by the
//! same sender as `ubtrfs send` of an unmounted image ([`crate::send`]),
//! reading the trees of the commit on disk while the mount goes on
//! writing and committing:
//!
//! - the read-only snapshots sent are on disk first (a commit when the
//!   transaction changed anything);
//! - from then until the send ends, space freed stays pinned
//!   ([`crate::alloc::Allocator::hold_freed`]), so that no block the
//!   reader may reach (the root, extent, checksum and chunk trees of that
//!   commit) is written over; the snapshots themselves never change
//!   (read-only) and are not deleted during the send (EPERM, as the
//!   kernel's btrfs_delete_subvolume);
//! - the reader opens no device of its own: it reads through the mount's
//!   open files ([`crate::io::device::Device::reopen`]).

use super::RwFs;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use ubtrfs_format::consts::*;

/// Tree block cache of a send's (or a scrub's) reader.
const SEND_CACHE_BYTES: u64 = 64 << 20;

impl RwFs {
    /// Begins a send of `subvols` (the one sent, its parent, clone
    /// sources): each must be a read-only subvolume. Commits when needed,
    /// holds freed space, and returns a reader of the commit on disk.
    /// [`RwFs::end_send`] with the same list must follow, whatever the
    /// send's outcome. The caller holds the filesystem as a commit needs.
    pub fn begin_send(&mut self, subvols: &[u64]) -> Result<Filesystem> {
        for &id in subvols {
            let item = &self.t.root(id)?.item;
            if item.refs == 0 && id != FS_TREE_OBJECTID {
                return Err(Error::NotFound(format!("subvolume {id} is deleted")));
            }
            if item.flags & ROOT_SUBVOL_RDONLY == 0 {
                return Err(Error::Permission(format!(
                    "subvolume {id} is not read-only: only read-only snapshots are sent"
                )));
            }
        }
        let fs = self.begin_commit_reader()?;
        for &id in subvols {
            *self.sending.entry(id).or_insert(0) += 1;
        }
        Ok(fs)
    }

    /// A reader of the commit on disk, made now (a commit first when the
    /// transaction changed anything), through the mount's open files;
    /// until [`RwFs::end_commit_reader`], space freed stays pinned so that
    /// nothing it may reach is written over. A send and a scrub read so.
    pub fn begin_commit_reader(&mut self) -> Result<Filesystem> {
        self.sync_fs()?;
        let devs = self
            .t
            .info
            .devices
            .values()
            .map(|d| d.reopen())
            .collect::<Result<Vec<_>>>()?;
        let fs = Filesystem::from_devices(devs, SEND_CACHE_BYTES)?;
        self.t.alloc.hold_freed();
        Ok(fs)
    }

    /// Ends a reader of [`RwFs::begin_commit_reader`].
    pub fn end_commit_reader(&mut self) {
        self.t.alloc.release_freed();
    }

    /// Ends a send begun by [`RwFs::begin_send`].
    pub fn end_send(&mut self, subvols: &[u64]) {
        for id in subvols {
            if let Some(n) = self.sending.get_mut(id) {
                *n -= 1;
                if *n == 0 {
                    self.sending.remove(id);
                }
            }
        }
        self.end_commit_reader();
    }

    /// Whether subvolume `id` is being sent.
    pub(super) fn is_sending(&self, id: u64) -> bool {
        self.sending.contains_key(&id)
    }
}
