//! The subvolume a stream makes (its subvol or snapshot command, as
//! cmds/receive.c's process_subvol and process_snapshot make it under the
//! destination directory) and, at its end, marks received and read-only.

use super::stream::Command;
use super::{lossy, uuid_str, Receiver, Subvol};
use crate::error::{Error, Result};
use crate::subvol::Place;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::Timespec;
use ubtrfs_format::send_stream::attr;

impl Receiver<'_> {
    /// The subvol command: a new subvolume.
    pub(super) fn subvol_cmd(&mut self, c: &Command) -> Result<()> {
        let (name, uuid, ctransid) = subvol_attrs(c)?;
        self.finish_subvol()?;
        let place = self.new_place(name)?;
        let id = self.t.create_subvolume(
            &place,
            crate::inode::root::random_uuid()?,
            false,
            self.opts.now,
        )?;
        self.begin_subvol(id, name, uuid, ctransid);
        Ok(())
    }

    /// The snapshot command: a snapshot of the stream's parent.
    pub(super) fn snapshot_cmd(&mut self, c: &Command) -> Result<()> {
        let (name, uuid, ctransid) = subvol_attrs(c)?;
        let parent_uuid = c.uuid(attr::CLONE_UUID)?;
        let parent_ctransid = c.u64(attr::CLONE_CTRANSID)?;
        self.finish_subvol()?;
        let src = self.find_subvol(&parent_uuid)?.ok_or_else(|| {
            Error::NotFound(format!(
                "cannot find parent subvolume (uuid {}, ctransid {parent_ctransid})",
                uuid_str(&parent_uuid)
            ))
        })?;
        let place = self.new_place(name)?;
        let now = self.opts.now;
        let id = self
            .t
            .snapshot(src, &place, crate::inode::root::random_uuid()?, false, now)?;
        self.begin_subvol(id, name, uuid, ctransid);
        Ok(())
    }

    /// Where subvolume `name` goes: a name not yet taken in the
    /// destination directory.
    fn new_place<'n>(&mut self, name: &'n [u8]) -> Result<Place<'n>> {
        let place = Place {
            tree: self.dest.0,
            dir: self.dest.1,
            name,
        };
        if self.t.lookup_name(place.tree, place.dir, name)?.is_some() {
            return Err(Error::Exists(self.sub_path(name)));
        }
        Ok(place)
    }

    pub(super) fn sub_path(&self, name: &[u8]) -> String {
        format!("{}/{}", self.dest_path, lossy(name))
    }

    fn begin_subvol(&mut self, id: u64, name: &[u8], uuid: [u8; 16], stransid: u64) {
        self.resolved.clear();
        let path = self.sub_path(name);
        self.report.subvolumes.push(path);
        self.cur = Some(Subvol {
            tree: id,
            received_uuid: uuid,
            stransid,
        });
    }

    /// The subvolume whose received UUID is `uuid`, else whose UUID is.
    pub(super) fn find_subvol(&mut self, uuid: &[u8; 16]) -> Result<Option<u64>> {
        for kind in [UUID_KEY_RECEIVED_SUBVOL, UUID_KEY_SUBVOL] {
            if let Some(id) = self.t.uuid_lookup(uuid, kind)? {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// Marks the current subvolume received and read-only, and commits.
    pub(super) fn finish_subvol(&mut self) -> Result<()> {
        self.flush()?;
        self.write_held()?;
        let Some(s) = self.cur.take() else {
            return Ok(());
        };
        let now = self.opts.now;
        let transid = self.t.transid;
        let old = self.t.root(s.tree)?.item.received_uuid;
        let item = self.t.root_item_mut(s.tree)?;
        item.received_uuid = s.received_uuid;
        item.stransid = s.stransid;
        item.rtransid = transid;
        item.rtime = now;
        item.stime = Timespec::default();
        item.ctransid = transid;
        item.ctime = now;
        item.flags |= ROOT_SUBVOL_RDONLY;
        if old != s.received_uuid {
            self.t
                .remove_uuid_entry(&old, UUID_KEY_RECEIVED_SUBVOL, s.tree)?;
        }
        self.t
            .add_uuid_entry(&s.received_uuid, UUID_KEY_RECEIVED_SUBVOL, s.tree)?;
        self.cached_caps = None;
        self.t.commit()?;
        self.report.commits += 1;
        Ok(())
    }
}

/// The name, UUID and ctransid a subvol or snapshot command gives.
fn subvol_attrs(c: &Command) -> Result<(&[u8], [u8; 16], u64)> {
    Ok((
        c.name_attr(attr::PATH)?,
        c.uuid(attr::UUID)?,
        c.u64(attr::CTRANSID)?,
    ))
}
