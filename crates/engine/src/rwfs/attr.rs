//! Attributes on the mount: stat, setattr (modes, owners, times, size),
//! xattrs and the inode flags of FS_IOC_GETFLAGS / FS_IOC_SETFLAGS
//! (`chattr`), as the kernel's inode.c btrfs_setattr, xattr.c and
//! ioctl.c keep them.

use super::namei::INODE_IMMUTABLE_FLAGS;
use super::{RwFs, StatFs};
use crate::error::{Error, Result};
use crate::fs::seek::DataMap;
use crate::fs::view::ListVisitor;
use crate::fs::{InodeId, Stat};
use crate::inode::namei::XATTR_COMPRESSION;
use crate::inode::now;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::Timespec;

/// A time to set: a given one, or now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    At(Timespec),
    Now,
}

/// What setattr changes (None: unchanged).
#[derive(Debug, Clone, Default)]
pub struct SetAttr {
    /// Permission bits (and set-ID/sticky), the type kept.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    pub ctime: Option<Timespec>,
    /// Some(`in_group`): the change drops the set-ID bits of a file that
    /// is not a directory, as the VFS does on a chown, and on a truncate
    /// by a caller without CAP_FSETID ([`set_id_bits_dropped`]); the
    /// kernel asks it of a FUSE server that handles them
    /// (FUSE_HANDLE_KILLPRIV_V2, FATTR_KILL_SUIDGID).
    pub kill_set_ids: Option<bool>,
}

/// The set-ID bits of `mode` a change drops: the set-user-ID bit, and the
/// set-group-ID bit when the group may execute or the caller is not
/// `in_group` (nor capable: the kernel's setattr_should_drop_sgid).
pub fn set_id_bits_dropped(mode: u32, in_group: bool) -> u32 {
    let mut drop = mode & libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && (mode & libc::S_IXGRP != 0 || !in_group) {
        drop |= libc::S_ISGID;
    }
    drop
}

/// When an access (a read of a file, a listing of a directory) updates
/// the access time: the mount's `noatime`, `relatime` (the default) or
/// `strictatime`. The kernel leaves atime to a FUSE filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimePolicy {
    Never,
    #[default]
    Relative,
    Strict,
}

impl AtimePolicy {
    /// Whether an access at `now` moves `st`'s atime, as the kernel's
    /// atime_needs_update with relatime_need_update: under relatime only
    /// when atime is not after mtime or ctime, or is a day old.
    pub fn needs_update(self, st: &Stat, now: Timespec) -> bool {
        let t = |t: Timespec| (t.sec, t.nsec);
        if st.flags & INODE_NOATIME != 0 {
            // chattr +A
            return false;
        }
        match self {
            AtimePolicy::Never => false,
            AtimePolicy::Strict => st.atime != now,
            AtimePolicy::Relative => {
                t(st.mtime) >= t(st.atime)
                    || t(st.ctime) >= t(st.atime)
                    || now.sec - st.atime.sec >= 24 * 60 * 60
            }
        }
    }
}

/// FS_IOC_GETFLAGS bits (linux/fs.h) and the inode flags they show.
const FS_FLAGS: [(u32, u64); 9] = [
    (0x0000_0008, INODE_SYNC),
    (0x0000_0010, INODE_IMMUTABLE),
    (0x0000_0020, INODE_APPEND),
    (0x0000_0040, INODE_NODUMP),
    (0x0000_0080, INODE_NOATIME),
    (0x0001_0000, INODE_DIRSYNC),
    (0x0080_0000, INODE_NODATACOW),
    (0x0000_0004, INODE_COMPRESS),
    (0x0000_0400, INODE_NOCOMPRESS),
];

/// The xattr namespaces btrfs stores (others: EOPNOTSUPP).
fn check_xattr_name(name: &[u8]) -> Result<()> {
    const PREFIXES: [&[u8]; 5] = [
        b"user.",
        b"trusted.",
        b"security.",
        b"system.posix_acl_access",
        b"system.posix_acl_default",
    ];
    if name.len() > 255 {
        return Err(Error::TooLarge(format!(
            "xattr name of {} bytes",
            name.len()
        )));
    }
    let ok = PREFIXES
        .iter()
        .any(|p| name.starts_with(p) && (name.len() > p.len() || p.starts_with(b"system.")))
        || name == XATTR_COMPRESSION;
    if !ok {
        return Err(Error::Unsupported(format!(
            "xattr namespace of {:?}",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(())
}

fn system_time(t: SetTime) -> Timespec {
    match t {
        SetTime::At(t) => t,
        SetTime::Now => now(),
    }
}

impl RwFs {
    /// stat(2) of `id`: the inode item, with dirty data counted in the
    /// allocated bytes as the kernel counts delalloc bytes.
    pub fn stat(&self, id: InodeId) -> Result<Stat> {
        self.with_dirty_bytes(self.inode_stat(id)?)
    }

    /// `st` (of the inode item) with the dirty data counted.
    fn with_dirty_bytes(&self, mut st: Stat) -> Result<Stat> {
        let id = st.id;
        if !id.is_placeholder() {
            // No room taken yet (a file made since its last writeback, as
            // a copy or untar makes them): every dirty byte is over a hole.
            let bare = st.nbytes == 0;
            st.nbytes += self.new_dirty_bytes(id, bare, self.dirty.get(&id).map(|d| d.spans()))?
                + self.new_dirty_bytes(id, bare, self.ordered.get(&id).map(|d| d.spans()))?;
        }
        Ok(st)
    }

    /// [`RwFs::stat`] as the inode item alone has it: st_blocks without
    /// the dirty data, which takes a walk of every dirty range. For the
    /// looks at times, mode and flags made on every READ (atime) and
    /// open: a file just written 4 KiB at a time has tens of thousands of
    /// dirty ranges.
    pub fn inode_stat(&self, id: InodeId) -> Result<Stat> {
        if id.is_placeholder() {
            let t = self.t.root_view(id.subvol)?.item.otime;
            return Ok(Stat::placeholder(id, t));
        }
        Ok(Stat::of_inode(id, &self.t.inode_of(id.subvol, id.ino)?))
    }

    /// Of the dirty (or in-flight) sectors `spans` of `id`, the bytes over
    /// holes: what the kernel counts in st_blocks beside the inode's
    /// nbytes (new_delalloc_bytes). A write over an extent or over
    /// preallocated space takes no new room, and nbytes counts that
    /// room already (fstests generic/568). `bare`: the inode item counts
    /// no bytes (nbytes 0), so it has no extent but holes, and nothing is
    /// looked up.
    fn new_dirty_bytes(
        &self,
        id: InodeId,
        bare: bool,
        spans: Option<impl Iterator<Item = (u64, u64)>>,
    ) -> Result<u64> {
        let spans: Vec<(u64, u64)> = spans.into_iter().flatten().collect();
        let total: u64 = spans.iter().map(|(s, e)| e - s).sum();
        let (Some(first), Some(last)) = (spans.first(), spans.last()) else {
            return Ok(0);
        };
        if bare {
            return Ok(total);
        }
        // One search per span while they are few, else one over them all.
        let searches: Vec<(u64, u64)> = if spans.len() <= 32 {
            spans.clone()
        } else {
            vec![(first.0, last.1)]
        };
        let mut allocated = Vec::new();
        for (s, e) in searches {
            for (_, x) in self.t.file_extents(id.subvol, id.ino, s, e)? {
                let hole = matches!(
                    x.kind,
                    crate::data::extent::ExtentKind::Regular { disk_bytenr: 0, .. }
                );
                if !hole {
                    allocated.push((x.start, x.end));
                }
            }
        }
        Ok(total - overlap(&spans, &allocated))
    }

    /// The target of symlink `id`.
    pub fn readlink(&self, id: InodeId) -> Result<Vec<u8>> {
        let i = self.t.inode_of(id.subvol, id.ino)?;
        if i.mode & 0o170000 != 0o120000 {
            return Err(Error::Invalid(format!("inode {} is not a symlink", id.ino)));
        }
        self.t.read_file(id.subvol, id.ino, 0, i.size.min(4096))
    }

    /// setattr: chmod, chown, truncate, utimens. Permission checks are
    /// the kernel's (default_permissions); what the inode's flags forbid
    /// is refused here.
    pub fn setattr(&mut self, id: InodeId, a: &SetAttr) -> Result<Stat> {
        self.check_writable(id)?;
        let mut i = self.t.inode_of(id.subvol, id.ino)?;
        self.reserve_change(a.size.is_some_and(|n| n < i.size))?;
        let flags = i.flags;
        if flags & INODE_IMMUTABLE != 0 {
            return Err(Error::Permission(format!("inode {} is immutable", id.ino)));
        }
        // Append-only: no truncate, chmod, chown, nor times set to a
        // value (setting them to now is allowed), as the kernel's
        // notify_change (ATTR_TIMES_SET).
        let times_set = [a.atime, a.mtime]
            .iter()
            .any(|t| matches!(t, Some(SetTime::At(_))));
        if flags & INODE_APPEND != 0
            && (a.size.is_some()
                || a.mode.is_some()
                || a.uid.is_some()
                || a.gid.is_some()
                || times_set)
        {
            return Err(Error::Permission(format!(
                "inode {} is append-only",
                id.ino
            )));
        }
        let time = now();
        if let Some(size) = a.size {
            self.truncate(id, size)?;
            i = self.t.inode_of(id.subvol, id.ino)?;
        }
        if let Some(m) = a.mode {
            i.mode = (i.mode & 0o170000) | (m & 0o7777);
            // The access ACL follows the mode (the kernel leaves this to
            // a FUSE filesystem that has ACLs).
            if let Some(old) = self.t.get_xattr(id.subvol, id.ino, super::acl::ACCESS)? {
                if let Some(new) = super::acl::chmod(&old, m) {
                    self.inode_mut(id).set_xattr(super::acl::ACCESS, &new)?;
                }
            }
        }
        if let Some(u) = a.uid {
            i.uid = u;
        }
        if let Some(g) = a.gid {
            i.gid = g;
        }
        if let Some(in_group) = a.kill_set_ids {
            if i.mode & 0o170000 != 0o040000 {
                i.mode &= !set_id_bits_dropped(i.mode, in_group);
            }
        }
        if let Some(t) = a.atime {
            i.atime = system_time(t);
        }
        if let Some(t) = a.mtime {
            i.mtime = system_time(t);
        } else if a.size.is_some() {
            i.mtime = time;
        }
        let ctime = a.ctime.unwrap_or(time);
        self.inode_mut(id).put_changed(&mut i, Some(ctime))?;
        self.with_dirty_bytes(Stat::of_inode(id, &i))
    }

    /// Whether an access of `id` now moves its atime under `policy`: the
    /// shared check before [`RwFs::touch_atime`] takes the filesystem.
    pub fn atime_due(&self, id: InodeId, policy: AtimePolicy) -> bool {
        policy != AtimePolicy::Never
            && !id.is_placeholder()
            && self
                .inode_stat(id)
                .is_ok_and(|st| policy.needs_update(&st, now()))
    }

    /// An access of `id` under `policy` (after [`RwFs::atime_due`]
    /// said so, without the filesystem held alone): atime becomes now, the
    /// change time and the inode's sequence stay. Nothing on a read-only
    /// subvolume or mount, as the kernel's touch_atime.
    pub fn touch_atime(&mut self, id: InodeId, policy: AtimePolicy) -> Result<()> {
        // Nothing on a read-only subvolume.
        if self.check_writable(id).is_err() {
            return Ok(());
        }
        let time = now();
        if !policy.needs_update(&self.inode_stat(id)?, time) {
            return Ok(());
        }
        // Nothing either when the metadata is short even after a commit
        // for space (the kernel's reservation flushes space the same
        // way): an access is no reason for ENOSPC.
        if self.reserve_change(false).is_err() {
            return Ok(());
        }
        let mut i = self.t.inode_of(id.subvol, id.ino)?;
        i.atime = time;
        i.transid = self.t.transid;
        self.inode_mut(id).put(&i)
    }

    /// A change of the data of regular file `id` by a caller without
    /// CAP_FSETID (a write, a fallocate) drops its set-user-ID bit, and
    /// its set-group-ID bit when the group may execute or the caller is
    /// not `in_group` (the kernel's setattr_should_drop_suidgid).
    pub fn drop_suid_sgid(&mut self, id: InodeId, in_group: bool) -> Result<()> {
        let mut i = self.t.inode_of(id.subvol, id.ino)?;
        if i.mode & 0o170000 != 0o100000 {
            return Ok(());
        }
        let drop = set_id_bits_dropped(i.mode, in_group);
        if drop == 0 {
            return Ok(());
        }
        self.check_writable(id)?;
        i.mode &= !drop;
        self.inode_mut(id).put_changed(&mut i, Some(now()))?;
        self.bump(id);
        Ok(())
    }

    /// Sets the change time of `id` to now (an xattr or flag change).
    fn touch_ctime(&mut self, id: InodeId) -> Result<()> {
        let mut i = self.t.inode_of(id.subvol, id.ino)?;
        self.inode_mut(id).put_changed(&mut i, Some(now()))
    }

    /// getxattr(2): NoData when `id` has no xattr `name`.
    pub fn getxattr(&self, id: InodeId, name: &[u8]) -> Result<Vec<u8>> {
        if id.is_placeholder() {
            return Err(Error::NoData(String::from_utf8_lossy(name).into_owned()));
        }
        self.t
            .get_xattr(id.subvol, id.ino, name)?
            .ok_or_else(|| Error::NoData(String::from_utf8_lossy(name).into_owned()))
    }

    /// listxattr(2): the names, each followed by a NUL.
    pub fn listxattr(&self, id: InodeId) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        if id.is_placeholder() {
            return Ok(out);
        }
        crate::items::dir_item::for_each_xattr(&self.t, id.subvol, id.ino, |e| {
            out.extend_from_slice(e.name);
            out.push(0);
        })?;
        Ok(out)
    }

    /// setxattr(2) with XATTR_CREATE (1) or XATTR_REPLACE (2).
    /// `kill_sgid`: the caller is neither in the file's group nor
    /// CAP_FSETID, so an access ACL that sets the mode also clears
    /// S_ISGID (posix_acl_update_mode).
    pub fn setxattr(
        &mut self,
        id: InodeId,
        name: &[u8],
        value: &[u8],
        flags: i32,
        kill_sgid: bool,
    ) -> Result<()> {
        self.xattr_change(id, name, false)?;
        let exists = self.t.get_xattr(id.subvol, id.ino, name)?.is_some();
        if flags & 1 != 0 && exists {
            return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
        }
        if flags & 2 != 0 && !exists {
            return Err(Error::NoData(String::from_utf8_lossy(name).into_owned()));
        }
        if name == XATTR_COMPRESSION {
            self.set_compression_prop(id, value)?;
        } else if name == super::acl::ACCESS {
            // The mode follows the ACL (the kernel leaves this to a FUSE
            // filesystem); an ACL that says no more than the mode is not
            // kept, as posix_acl_update_mode drops it.
            let (bits, equiv) = super::acl::mode_of(value)
                .ok_or_else(|| Error::Invalid("malformed POSIX ACL".into()))?;
            let mut i = self.t.inode_of(id.subvol, id.ino)?;
            i.mode = (i.mode & !0o777) | bits;
            if kill_sgid {
                i.mode &= !libc::S_ISGID;
            }
            self.inode_mut(id).put(&i)?;
            if equiv {
                if exists {
                    self.inode_mut(id).remove_xattr(name)?;
                }
            } else {
                self.inode_mut(id).set_xattr(name, value)?;
            }
        } else {
            self.inode_mut(id).set_xattr(name, value)?;
        }
        self.touch_ctime(id)
    }

    /// The btrfs.compression property: zlib, lzo, zstd (the COMPRESS
    /// flag), "no"/"none" (NOCOMPRESS), or empty (neither).
    fn set_compression_prop(&mut self, id: InodeId, value: &[u8]) -> Result<()> {
        let v = value.strip_suffix(b"\0").unwrap_or(value);
        let mut i = self.t.inode_of(id.subvol, id.ino)?;
        i.flags &= !(INODE_COMPRESS | INODE_NOCOMPRESS);
        let algo = v.split(|&b| b == b':').next().unwrap_or_default();
        match algo {
            b"" => {
                let _ = self.inode_mut(id).remove_xattr(XATTR_COMPRESSION);
            }
            b"no" | b"none" => {
                i.flags |= INODE_NOCOMPRESS;
                let _ = self.inode_mut(id).remove_xattr(XATTR_COMPRESSION);
            }
            b"zlib" | b"lzo" | b"zstd" => {
                i.flags |= INODE_COMPRESS;
                self.inode_mut(id).set_xattr(XATTR_COMPRESSION, v)?;
            }
            _ => {
                return Err(Error::Invalid(format!(
                    "btrfs.compression {:?}",
                    String::from_utf8_lossy(v)
                )))
            }
        }
        self.inode_mut(id).put(&i)
    }

    /// Whether xattr `name` of `id` may be set (or removed, `removes`),
    /// refusing what the kernel refuses: a bad name, a read-only
    /// subvolume, an immutable or append-only inode; with metadata room
    /// for the change reserved.
    fn xattr_change(&mut self, id: InodeId, name: &[u8], removes: bool) -> Result<()> {
        check_xattr_name(name)?;
        self.check_writable(id)?;
        self.reserve_change(removes)?;
        let inode = self.t.inode_of(id.subvol, id.ino)?;
        if inode.flags & INODE_IMMUTABLE_FLAGS != 0 {
            return Err(Error::Permission(format!(
                "inode {} is immutable or append-only",
                id.ino
            )));
        }
        Ok(())
    }

    /// removexattr(2).
    pub fn removexattr(&mut self, id: InodeId, name: &[u8]) -> Result<()> {
        self.xattr_change(id, name, true)?;
        if name == XATTR_COMPRESSION {
            self.set_compression_prop(id, b"")?;
        } else {
            self.inode_mut(id).remove_xattr(name).map_err(|e| {
                if e.is_not_found() {
                    Error::NoData(String::from_utf8_lossy(name).into_owned())
                } else {
                    e
                }
            })?;
        }
        self.touch_ctime(id)
    }

    /// FS_IOC_GETFLAGS: the inode's flags as `lsattr` shows them.
    pub fn get_flags(&self, id: InodeId) -> Result<u32> {
        if id.is_placeholder() {
            return Ok(0);
        }
        let f = self.t.inode_of(id.subvol, id.ino)?.flags;
        Ok(FS_FLAGS
            .iter()
            .filter(|(_, bit)| f & bit != 0)
            .fold(0, |acc, (fs, _)| acc | fs))
    }

    /// FS_IOC_SETFLAGS (`chattr`): as the kernel's btrfs_fileattr_set,
    /// NOCOW changes only on empty files (or directories), and clears
    /// compression; +c clears NOCOW.
    pub fn set_flags(&mut self, id: InodeId, fs_flags: u32) -> Result<()> {
        self.check_writable(id)?;
        self.reserve_change(false)?;
        let known: u32 = FS_FLAGS.iter().fold(0, |a, (f, _)| a | f);
        if fs_flags & !known != 0 {
            return Err(Error::Unsupported(format!(
                "inode flags {:#x}",
                fs_flags & !known
            )));
        }
        let mut i = self.t.inode_of(id.subvol, id.ino)?;
        let mut flags = i.flags;
        for (fs, bit) in FS_FLAGS {
            if fs_flags & fs != 0 {
                flags |= bit;
            } else {
                flags &= !bit;
            }
        }
        if flags & INODE_COMPRESS != 0 && flags & INODE_NOCOMPRESS != 0 {
            return Err(Error::Invalid("both compress and nocompress".into()));
        }
        let is_dir = i.mode & 0o170000 == 0o040000;
        let cow_change = (flags ^ i.flags) & INODE_NODATACOW != 0;
        if cow_change {
            let has_data =
                !is_dir && (i.size != 0 || self.dirty.get(&id).is_some_and(|d| !d.is_empty()));
            if has_data {
                // The kernel leaves the flag as it was on a file with data.
                flags = (flags & !INODE_NODATACOW) | (i.flags & INODE_NODATACOW);
            } else if flags & INODE_NODATACOW != 0 {
                if !is_dir {
                    flags |= INODE_NODATASUM;
                }
                flags &= !INODE_COMPRESS;
            } else if !is_dir {
                flags &= !INODE_NODATASUM;
            }
        }
        if flags & INODE_COMPRESS != 0 {
            flags &= !(INODE_NODATACOW | INODE_NODATASUM);
            if i.flags & INODE_NODATACOW != 0 && i.size != 0 && !is_dir {
                flags |= INODE_NODATACOW | INODE_NODATASUM;
            }
        }
        i.flags = flags;
        self.inode_mut(id).put_changed(&mut i, Some(now()))
    }
}

/// Bytes where two lists of sorted, non-overlapping ranges meet (`b` may
/// repeat a range: each of `a`'s bytes counts once).
fn overlap(a: &[(u64, u64)], b: &[(u64, u64)]) -> u64 {
    let (mut i, mut j, mut n) = (0, 0, 0);
    let mut done = 0; // `a`'s bytes below this are counted
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0).max(done);
        let hi = a[i].1.min(b[j].1);
        if lo < hi {
            n += hi - lo;
            done = hi;
        }
        if a[i].1 <= b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    n
}

/// The mount's reads of the running transaction and its dirty data.
impl crate::fs::view::View for RwFs {
    fn info(&self) -> &crate::disk_io::FsInfo {
        &self.t.info
    }

    fn stat(&self, id: InodeId) -> Result<Stat> {
        RwFs::stat(self, id)
    }

    fn lookup(&self, dir: InodeId, name: &[u8]) -> Result<Option<InodeId>> {
        RwFs::lookup(self, dir, name)
    }

    fn parent(&self, dir: InodeId) -> Result<InodeId> {
        RwFs::parent(self, dir)
    }

    fn list(&self, dir: InodeId, from: u64, f: &mut ListVisitor<'_>) -> Result<()> {
        crate::items::dir_item::list(&self.t, dir, from, f)
    }

    fn list_end(&self, dir: InodeId) -> Result<u64> {
        RwFs::readdir_end(self, dir)
    }

    fn readlink(&self, id: InodeId) -> Result<Vec<u8>> {
        RwFs::readlink(self, id)
    }

    fn getxattr(&self, id: InodeId, name: &[u8]) -> Result<Option<Vec<u8>>> {
        match RwFs::getxattr(self, id, name) {
            Ok(v) => Ok(Some(v)),
            Err(Error::NoData(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn listxattr(&self, id: InodeId) -> Result<Vec<u8>> {
        RwFs::listxattr(self, id)
    }

    fn statfs(&self) -> StatFs {
        RwFs::statfs(self)
    }

    fn data_version(&self, id: InodeId) -> u64 {
        self.version(id)
    }

    /// The whole file: data extents (inline and regular, not
    /// preallocated) and dirty ranges, below the size.
    fn data_map(&self, id: InodeId, _off: u64, _ranges: usize) -> Result<DataMap> {
        RwFs::data_map(self, id)
    }
}

#[cfg(test)]
mod tests {
    use super::overlap;

    #[test]
    fn overlap_counts_each_byte_once() {
        assert_eq!(overlap(&[(10, 20), (50, 60)], &[(0, 100), (0, 100)]), 20);
        assert_eq!(overlap(&[(10, 20), (25, 40)], &[(0, 30), (0, 30)]), 15);
        assert_eq!(overlap(&[(0, 8192)], &[(4096, 12288)]), 4096);
        assert_eq!(overlap(&[(0, 4096), (8192, 12288)], &[(4096, 8192)]), 0);
        assert_eq!(overlap(&[], &[(0, 1)]), 0);
    }
}
