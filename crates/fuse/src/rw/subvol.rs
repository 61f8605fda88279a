//! btrfs's subvolume ioctls on the read-write mount: create, snapshot,
//! delete, read-only flag, default subvolume, and the lookups a client
//! needs to find its way (INO_LOOKUP, FS_INFO). The engine carries each
//! out in the running transaction ([`ubtrfs_engine::rwfs::subvol`]);
//! here are the kernel's checks that FUSE leaves to the daemon (it checks
//! no permission for an ioctl), the caller's file descriptor of a
//! snapshot's source, and the kernel's caches of the names that changed.
//!
//! The channel is btrfs's own ioctl ABI, so the same client works on the
//! kernel's btrfs: FUSE forwards an ioctl whose argument size is in its
//! command ("restricted" ioctls, fs/fuse/ioctl.c), and every one served
//! here has a fixed size of at most 4 KiB.

use super::{errno, RwInner};
use crate::caps;
use crate::ino;
use crate::logging;
use crate::proto::{Errno, INodeNo, ReplyIoctl, Request};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use ubtrfs_engine::InodeId;
use ubtrfs_format::consts::FIRST_INODE;
use ubtrfs_format::ioctl::{self as abi, FsInfo, InoLookup, VolArgs};

/// What the subvolume ioctls need of the mount beyond the filesystem.
#[derive(Debug, Default)]
pub struct Admin {
    /// Where the mount is: a snapshot's source must be on it.
    pub mountpoint: PathBuf,
    /// `user_subvol_rm_allowed`: callers without CAP_SYS_ADMIN may delete
    /// subvolumes they could remove as directories.
    pub user_subvol_rm_allowed: bool,
    /// The mount's device number ("MAJOR:MINOR"), from the mount table.
    dev: OnceLock<Option<String>>,
}

impl Admin {
    pub fn new(mountpoint: PathBuf, user_subvol_rm_allowed: bool) -> Admin {
        Admin {
            mountpoint,
            user_subvol_rm_allowed,
            dev: OnceLock::new(),
        }
    }

    /// The mount's device number, read once from /proc/self/mountinfo
    /// (no request to this mount is made: the daemon must not ask itself;
    /// the mount point is canonical from the mount).
    fn dev(&self) -> Option<&str> {
        self.dev
            .get_or_init(|| crate::session::mount_dev(&self.mountpoint))
            .as_deref()
    }
}

/// Whether `cmd` is one of the ioctls served here.
pub(super) fn handles(cmd: u32) -> bool {
    matches!(
        cmd,
        abi::SUBVOL_CREATE
            | abi::SUBVOL_CREATE_V2
            | abi::SNAP_CREATE_V2
            | abi::SNAP_DESTROY
            | abi::SNAP_DESTROY_V2
            | abi::SUBVOL_GETFLAGS
            | abi::SUBVOL_SETFLAGS
            | abi::DEFAULT_SUBVOL
            | abi::INO_LOOKUP
            | abi::FS_INFO
            | abi::DEV_INFO
            | abi::GET_SUBVOL_INFO
            | abi::GET_SUBVOL_ROOTREF
            | abi::INO_LOOKUP_USER
            | abi::TREE_SEARCH
            | abi::SPACE_INFO
            | abi::SPACE_INFO_FIXED
    )
}

/// MAY_WRITE | MAY_EXEC, as the kernel's may_create and may_delete ask
/// of a directory, and MAY_READ | MAY_EXEC, as INO_LOOKUP_USER asks.
const WRITE_EXEC: u32 = 0o3;
const READ_EXEC: u32 = 0o5;

/// Whether mode bits `mode` of a file owned by (`uid`, `gid`) grant the
/// caller of `req` the access `want` (WRITE_EXEC, READ_EXEC): by the
/// owner, group and other bits, or CAP_DAC_OVERRIDE (and for reading and
/// searching, CAP_DAC_READ_SEARCH). POSIX ACLs are not consulted.
fn may(req: &Request, mode: u32, uid: u32, gid: u32, want: u32) -> bool {
    if caps::capable(req.pid(), caps::CAP_DAC_OVERRIDE)
        || want == READ_EXEC && caps::capable(req.pid(), caps::CAP_DAC_READ_SEARCH)
    {
        return true;
    }
    let bits = if caller(req).0 == uid {
        mode >> 6
    } else if caps::in_group(req.pid(), gid) {
        mode >> 3
    } else {
        mode
    };
    bits & want == want
}

/// The argument of a request that makes a subvolume (create, snapshot):
/// read-only is the one flag served (qgroup inheritance: EOPNOTSUPP).
fn new_subvol_args(arg: &[u8], v2: bool) -> Result<VolArgs, Errno> {
    let a = VolArgs::parse(arg, v2).ok_or(Errno::EINVAL)?;
    if a.flags & !abi::SUBVOL_RDONLY != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(a)
}

/// The caller's filesystem uid and gid, from its /proc status (the
/// request's ids are not sent for an ioctl on a mount that allows
/// idmapping); nobody's when the process is gone.
fn caller(req: &Request) -> (u32, u32) {
    caps::fs_ids(req.pid()).unwrap_or((65534, 65534))
}

impl RwInner {
    /// One of the ioctls [`handles`] says are served here, on `node`.
    pub(super) fn subvol_ioctl(
        &self,
        req: &Request,
        node: INodeNo,
        cmd: u32,
        in_data: &[u8],
        reply: ReplyIoctl,
    ) {
        let id = self.inode(node);
        if cmd == abi::GET_SUBVOL_ROOTREF {
            return self.ioctl_rootref(id, in_data, reply);
        }
        let res = match cmd {
            abi::SUBVOL_CREATE | abi::SUBVOL_CREATE_V2 => {
                self.ioctl_create(req, node, id, in_data, cmd == abi::SUBVOL_CREATE_V2)
            }
            abi::SNAP_CREATE_V2 => self.ioctl_snapshot(req, node, id, in_data),
            abi::SNAP_DESTROY | abi::SNAP_DESTROY_V2 => {
                self.ioctl_destroy(req, node, id, in_data, cmd == abi::SNAP_DESTROY_V2)
            }
            abi::SUBVOL_GETFLAGS => self
                .fs_read()
                .subvol_flags(id.subvol)
                .map(|f| f.to_le_bytes().to_vec())
                .map_err(|e| errno("ioctl SUBVOL_GETFLAGS", e)),
            abi::SUBVOL_SETFLAGS => self.ioctl_setflags(req, id, in_data),
            abi::DEFAULT_SUBVOL => self.ioctl_default(req, in_data),
            abi::INO_LOOKUP => self.ioctl_ino_lookup(req, id, in_data),
            abi::FS_INFO => Ok(self.fs_info(in_data)),
            abi::DEV_INFO => self.ioctl_dev_info(in_data),
            abi::GET_SUBVOL_INFO => self.ioctl_subvol_info(id),
            abi::INO_LOOKUP_USER => self.ioctl_lookup_user(req, id, in_data),
            abi::TREE_SEARCH => self.ioctl_tree_search(req, id, in_data),
            abi::SPACE_INFO | abi::SPACE_INFO_FIXED => self.ioctl_space(cmd, in_data),
            _ => Err(Errno::ENOTTY),
        };
        match res {
            Ok(out) => reply.ioctl(0, &out),
            Err(e) => reply.error(e),
        }
    }

    /// EROFS when the mount was remounted read-only (the kernel's
    /// mnt_want_write_file).
    fn writable_mount(&self) -> Result<(), Errno> {
        if self.remounted_ro.load(Ordering::Relaxed) {
            return Err(Errno::EROFS);
        }
        Ok(())
    }

    /// The caller may make a name in directory `dir` (may_create).
    fn may_create_in(&self, req: &Request, dir: InodeId) -> Result<(), Errno> {
        let st = self.fs_read().stat(dir).map_err(|e| errno("ioctl", e))?;
        if st.mode & 0o170000 != 0o040000 {
            return Err(Errno::ENOTDIR);
        }
        if !may(req, st.mode, st.uid, st.gid, WRITE_EXEC) {
            return Err(Errno::EACCES);
        }
        Ok(())
    }

    /// The kernel's caches after `name` came or went in `parent`: the
    /// entry, and the directory's attributes and listing.
    fn names_changed(&self, parent: INodeNo, name: &[u8]) {
        if let Some(n) = self.pushes.notifier() {
            if let Err(e) = n.inval_entry(parent, name) {
                logging::warn(&format!(
                    "entry {:?} of node {}: {e}",
                    String::from_utf8_lossy(name),
                    parent.0
                ));
            }
            if let Err(e) = n.inval_range(parent, 0, 0) {
                logging::warn(&format!("listing of node {}: {e}", parent.0));
            }
        }
    }

    fn ioctl_create(
        &self,
        req: &Request,
        node: INodeNo,
        dir: InodeId,
        arg: &[u8],
        v2: bool,
    ) -> Result<Vec<u8>, Errno> {
        let a = new_subvol_args(arg, v2)?;
        self.writable_mount()?;
        self.may_create_in(req, dir)?;
        let umask = caps::umask(req.pid()).unwrap_or(0o022);
        let mode = 0o777 & !umask;
        // A read-only flag is taken and not used, as the kernel's
        // btrfs_mksubvol uses it for snapshots only.
        self.fs()
            .create_subvolume(dir, &a.name, caller(req), mode)
            .map_err(|e| errno("ioctl SUBVOL_CREATE", e))?;
        self.names_changed(node, &a.name);
        Ok(Vec::new())
    }

    /// The subvolume a caller's file descriptor `fd` is the root of: a
    /// directory of this mount, resolved through /proc/PID/fd without
    /// asking this mount anything (AT_STATX_DONT_SYNC: the kernel answers
    /// from its cache). EXDEV when it is elsewhere, EINVAL when it is not
    /// a subvolume's root, EBADF when the caller has no such descriptor.
    fn caller_subvol(&self, req: &Request, fd: i64) -> Result<InodeId, Errno> {
        if fd < 0 || fd > i32::MAX as i64 {
            return Err(Errno::EBADF);
        }
        let path = format!("/proc/{}/fd/{fd}\0", req.pid());
        // SAFETY: statx writes a struct statx into `st`; `path` is
        // NUL-terminated.
        let mut st: libc::statx = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::statx(
                libc::AT_FDCWD,
                path.as_ptr().cast(),
                libc::AT_STATX_DONT_SYNC,
                libc::STATX_TYPE | libc::STATX_INO,
                &mut st,
            )
        };
        if r != 0 {
            return Err(Errno::EBADF);
        }
        let dev = format!("{}:{}", st.stx_dev_major, st.stx_dev_minor);
        if self.admin.dev() != Some(dev.as_str()) {
            return Err(Errno::EXDEV);
        }
        if st.stx_mode as u32 & libc::S_IFMT != libc::S_IFDIR {
            return Err(Errno::ENOTDIR);
        }
        let id = ino::decode(st.stx_ino);
        if id.ino != FIRST_INODE {
            return Err(Errno::EINVAL);
        }
        Ok(id)
    }

    fn ioctl_snapshot(
        &self,
        req: &Request,
        node: INodeNo,
        dir: InodeId,
        arg: &[u8],
    ) -> Result<Vec<u8>, Errno> {
        let a = new_subvol_args(arg, true)?;
        self.writable_mount()?;
        let src = self.caller_subvol(req, a.fd)?;
        self.may_create_in(req, dir)?;
        // Snapshots are limited to the source's owner and CAP_FOWNER, as
        // the kernel's btrfs_ioctl_snap_create_transid.
        let owner = self.fs_read().stat(src).map_err(|e| errno("ioctl", e))?.uid;
        if owner != caller(req).0 && !caps::capable(req.pid(), caps::CAP_FOWNER) {
            return Err(Errno::EPERM);
        }
        let readonly = a.flags & abi::SUBVOL_RDONLY != 0;
        self.fs
            .lock_commit()
            .snapshot(src.subvol, dir, &a.name, readonly)
            .map_err(|e| errno("ioctl SNAP_CREATE_V2", e))?;
        self.names_changed(node, &a.name);
        Ok(Vec::new())
    }

    fn ioctl_destroy(
        &self,
        req: &Request,
        node: INodeNo,
        dir: InodeId,
        arg: &[u8],
        v2: bool,
    ) -> Result<Vec<u8>, Errno> {
        let a = VolArgs::parse(arg, v2).ok_or(Errno::EINVAL)?;
        if a.flags & !abi::SUBVOL_SPEC_BY_ID != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        self.writable_mount()?;
        let admin = caps::capable(req.pid(), caps::CAP_SYS_ADMIN);
        if a.flags & abi::SUBVOL_SPEC_BY_ID != 0 {
            // By id: CAP_SYS_ADMIN only, as the kernel asks.
            if !admin {
                return Err(Errno::EPERM);
            }
            let parents = self
                .fs()
                .delete_subvolume_id(a.subvolid)
                .map_err(|e| errno("ioctl SNAP_DESTROY_V2", e))?;
            // The names went from these directories: the kernel forgets
            // their listings and attributes (the entries time out).
            for p in parents {
                if let (Some(n), Ok(node)) = (self.pushes.notifier(), self.node_of(p)) {
                    let _ = n.inval_range(INodeNo(node), 0, 0);
                }
            }
            return Ok(Vec::new());
        }
        if a.name.is_empty() || a.name.contains(&b'/') || a.name == b".." || a.name == b"." {
            return Err(Errno::EINVAL);
        }
        if !admin {
            if !self.admin.user_subvol_rm_allowed {
                return Err(Errno::EPERM);
            }
            // As rmdir(2) would need, and write and search of the
            // subvolume's root (the kernel's btrfs_ioctl_snap_destroy).
            self.may_create_in(req, dir)?;
            let sub = self
                .fs_read()
                .lookup(dir, &a.name)
                .map_err(|e| errno("ioctl", e))?;
            let sub = sub.ok_or(Errno::ENOENT)?;
            let st = self.fs_read().stat(sub).map_err(|e| errno("ioctl", e))?;
            if !may(req, st.mode, st.uid, st.gid, WRITE_EXEC) {
                return Err(Errno::EACCES);
            }
        }
        self.fs()
            .delete_subvolume(dir, &a.name)
            .map_err(|e| errno("ioctl SNAP_DESTROY", e))?;
        self.names_changed(node, &a.name);
        Ok(Vec::new())
    }

    fn ioctl_setflags(&self, req: &Request, id: InodeId, arg: &[u8]) -> Result<Vec<u8>, Errno> {
        let flags = u64::from_le_bytes(
            arg.get(..8)
                .ok_or(Errno::EINVAL)?
                .try_into()
                .unwrap_or([0; 8]),
        );
        self.writable_mount()?;
        // The owner of the subvolume's root, or CAP_FOWNER
        // (inode_owner_or_capable), and only on that root.
        let st = self.fs_read().stat(id).map_err(|e| errno("ioctl", e))?;
        if id.ino != FIRST_INODE {
            return Err(Errno::EINVAL);
        }
        if st.uid != caller(req).0 && !caps::capable(req.pid(), caps::CAP_FOWNER) {
            return Err(Errno::EPERM);
        }
        self.fs
            .lock_commit()
            .set_subvol_flags(id.subvol, flags)
            .map_err(|e| errno("ioctl SUBVOL_SETFLAGS", e))?;
        Ok(Vec::new())
    }

    fn ioctl_default(&self, req: &Request, arg: &[u8]) -> Result<Vec<u8>, Errno> {
        let sub = u64::from_le_bytes(
            arg.get(..8)
                .ok_or(Errno::EINVAL)?
                .try_into()
                .unwrap_or([0; 8]),
        );
        if !caps::capable(req.pid(), caps::CAP_SYS_ADMIN) {
            return Err(Errno::EPERM);
        }
        self.writable_mount()?;
        let mut fs = self.fs.lock_commit();
        fs.set_default_subvol(sub)
            .and_then(|()| fs.sync_fs().map(|_| ()))
            .map_err(|e| errno("ioctl DEFAULT_SUBVOL", e))?;
        Ok(Vec::new())
    }

    /// INO_LOOKUP: the tree of the file the ioctl was sent to (when 0 is
    /// asked), and the path of inode `objectid` in that tree from its top
    /// (`a/b/`; empty for the top directory). CAP_SYS_ADMIN for another
    /// tree or inode, as the kernel asks.
    fn ioctl_ino_lookup(&self, req: &Request, id: InodeId, arg: &[u8]) -> Result<Vec<u8>, Errno> {
        let mut a = InoLookup::parse(arg).ok_or(Errno::EINVAL)?;
        if a.treeid == 0 {
            a.treeid = id.subvol;
        }
        let plain = a.treeid == id.subvol && a.objectid == FIRST_INODE;
        if !plain && !caps::capable(req.pid(), caps::CAP_SYS_ADMIN) {
            return Err(Errno::EPERM);
        }
        a.name = if a.objectid == FIRST_INODE {
            Vec::new()
        } else {
            let mut p = self
                .fs_read()
                .path_in_tree(a.treeid, a.objectid)
                .map_err(|e| errno("ioctl INO_LOOKUP", e))?;
            p.push(b'/');
            p
        };
        a.to_bytes().ok_or(Errno::ENAMETOOLONG)
    }

    /// TREE_SEARCH (v1): the key is answered with the count found, the
    /// results after it. CAP_SYS_ADMIN, as the kernel asks.
    fn ioctl_tree_search(&self, req: &Request, id: InodeId, arg: &[u8]) -> Result<Vec<u8>, Errno> {
        if !caps::capable(req.pid(), caps::CAP_SYS_ADMIN) {
            return Err(Errno::EPERM);
        }
        let mut key = abi::SearchKey::parse(arg).ok_or(Errno::EINVAL)?;
        if key.tree_id == 0 {
            key.tree_id = id.subvol;
        }
        let room = abi::SEARCH_ARGS_SIZE - abi::SEARCH_KEY_SIZE;
        let (results, n) = self
            .fs_read()
            .tree_search(&key, room)
            .map_err(|e| errno("ioctl TREE_SEARCH", e))?;
        key.nr_items = n;
        let mut out = key.to_args();
        out[abi::SEARCH_KEY_SIZE..abi::SEARCH_KEY_SIZE + results.len()].copy_from_slice(&results);
        Ok(out)
    }

    /// SPACE_INFO: the block groups' bytes per type and profile, as the
    /// allocator has them now, and last the global reserve the kernel
    /// would keep for this filesystem (ubtrfs reserves no such space; its
    /// size is the kernel's formula, none of it in use). The kernel's
    /// 16-byte command can carry the count only (FUSE passes no slots
    /// past the head); the fixed one carries up to [`abi::SPACE_SLOTS`].
    fn ioctl_space(&self, cmd: u32, arg: &[u8]) -> Result<Vec<u8>, Errno> {
        let fs = self.fs_read();
        let mut slots: Vec<abi::SpaceSlot> = fs
            .space_info()
            .iter()
            .map(|s| (s.flags, s.total_bytes, s.used_bytes))
            .collect();
        let rsv = fs
            .global_reserve()
            .map_err(|e| errno("ioctl SPACE_INFO", e))?;
        drop(fs);
        slots.push((abi::SPACE_INFO_GLOBAL_RSV, rsv, 0));
        let asked = arg.get(..8).map_or(0, |b| {
            u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize
        });
        let (room, size) = if cmd == abi::SPACE_INFO {
            (0, abi::SPACE_HEAD_SIZE)
        } else {
            (asked.min(abi::SPACE_SLOTS), abi::SPACE_FIXED_SIZE)
        };
        let mut out = abi::encode_space(&slots, room);
        out.resize(size, 0);
        Ok(out)
    }

    /// GET_SUBVOL_INFO: the subvolume the file is in (anyone may ask).
    fn ioctl_subvol_info(&self, id: InodeId) -> Result<Vec<u8>, Errno> {
        let s = self
            .fs_read()
            .subvol_info(id.subvol)
            .map_err(|e| errno("ioctl GET_SUBVOL_INFO", e))?;
        let r = &s.root;
        Ok(abi::SubvolInfo {
            treeid: id.subvol,
            name: s.name.clone(),
            parent_id: s.parent_id,
            dirid: s.dirid,
            generation: r.generation,
            flags: r.flags,
            uuid: r.uuid,
            parent_uuid: r.parent_uuid,
            received_uuid: r.received_uuid,
            ctransid: r.ctransid,
            otransid: r.otransid,
            stransid: r.stransid,
            rtransid: r.rtransid,
            ctime: r.ctime,
            otime: r.otime,
            stime: r.stime,
            rtime: r.rtime,
        }
        .to_bytes())
    }

    /// GET_SUBVOL_ROOTREF: the subvolumes directly inside the file's,
    /// from the id asked on, [`abi::ROOTREF_MAX`] at most; with more,
    /// EOVERFLOW and those found (FUSE returns an ioctl's result with its
    /// data, as the kernel copies them out with EOVERFLOW), so the caller
    /// asks again from the next id.
    fn ioctl_rootref(&self, id: InodeId, arg: &[u8], reply: ReplyIoctl) {
        let Some(asked) = abi::Rootrefs::parse(arg) else {
            return reply.error(Errno::EINVAL);
        };
        let found = self
            .fs_read()
            .root_refs(id.subvol, asked.min_treeid, abi::ROOTREF_MAX + 1);
        let mut refs = match found {
            Ok(r) => r,
            Err(e) => return reply.error(errno("ioctl GET_SUBVOL_ROOTREF", e)),
        };
        let more = refs.len() > abi::ROOTREF_MAX;
        refs.truncate(abi::ROOTREF_MAX);
        let min_treeid = refs.last().map_or(asked.min_treeid, |r| r.0 + 1);
        let out = abi::Rootrefs { min_treeid, refs }.to_bytes();
        reply.ioctl(if more { -libc::EOVERFLOW } else { 0 }, &out)
    }

    /// INO_LOOKUP_USER: the path from the file (a subvolume's root, when
    /// `dirid` is one) to directory `dirid`, each directory on the way
    /// readable and searchable by the caller (else EACCES), and the name
    /// subvolume `treeid` has there.
    fn ioctl_lookup_user(&self, req: &Request, id: InodeId, arg: &[u8]) -> Result<Vec<u8>, Errno> {
        let mut a = abi::InoLookupUser::parse(arg).ok_or(Errno::EINVAL)?;
        if a.dirid == FIRST_INODE && id.ino != FIRST_INODE {
            return Err(Errno::EACCES);
        }
        let fs = self.fs_read();
        let (path, dirs, name) = fs
            .lookup_user(id.subvol, id.ino, a.dirid, a.treeid)
            .map_err(|e| errno("ioctl INO_LOOKUP_USER", e))?;
        for d in dirs {
            let st = fs.stat(d).map_err(|e| errno("ioctl INO_LOOKUP_USER", e))?;
            if !may(req, st.mode, st.uid, st.gid, READ_EXEC) {
                return Err(Errno::EACCES);
            }
        }
        drop(fs);
        a.path = path;
        a.name = name;
        a.to_bytes().ok_or(Errno::ENAMETOOLONG)
    }

    /// DEV_INFO: a device's item and the path the mount opened it by;
    /// ENODEV when there is no such device.
    fn ioctl_dev_info(&self, arg: &[u8]) -> Result<Vec<u8>, Errno> {
        let asked = abi::DevInfo::parse(arg).ok_or(Errno::EINVAL)?;
        let fs = self.fs_read();
        let (item, path) = fs.dev_info(asked.devid, &asked.uuid).ok_or(Errno::ENODEV)?;
        let fsid = fs.superblock().fsid;
        drop(fs);
        Ok(abi::DevInfo {
            devid: item.devid,
            uuid: item.uuid,
            bytes_used: item.bytes_used,
            total_bytes: item.total_bytes,
            fsid,
            path: path
                .map(|p| std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()).to_vec())
                .unwrap_or_default(),
        }
        .to_bytes())
    }

    /// FS_INFO: the superblock's figures.
    fn fs_info(&self, arg: &[u8]) -> Vec<u8> {
        let asked = FsInfo::asked_flags(arg);
        let fs = self.fs_read();
        let sb = fs.superblock();
        let mut f = FsInfo {
            max_id: sb.num_devices,
            num_devices: sb.num_devices,
            fsid: sb.fsid,
            nodesize: sb.nodesize,
            sectorsize: sb.sectorsize,
            clone_alignment: sb.sectorsize,
            ..FsInfo::default()
        };
        if asked & abi::FS_INFO_FLAG_CSUM_INFO != 0 {
            f.csum_type = sb.csum_type.to_raw();
            f.csum_size = sb.csum_type.size() as u16;
            f.flags |= abi::FS_INFO_FLAG_CSUM_INFO;
        }
        if asked & abi::FS_INFO_FLAG_GENERATION != 0 {
            f.generation = sb.generation;
            f.flags |= abi::FS_INFO_FLAG_GENERATION;
        }
        if asked & abi::FS_INFO_FLAG_METADATA_UUID != 0 {
            f.metadata_uuid = sb.metadata_uuid;
            f.flags |= abi::FS_INFO_FLAG_METADATA_UUID;
        }
        f.to_bytes()
    }
}
