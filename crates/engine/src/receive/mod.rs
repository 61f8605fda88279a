//! `receive`: send streams applied to an image through transactions, as
//! btrfs-progs' cmds/receive.c applies them through a kernel mount (the
//! system calls it makes, and what the kernel does for each, are what
//! this module does to the trees):
//!
//! * subvol: a new subvolume under the destination directory; snapshot:
//!   a snapshot of the subvolume whose received UUID (else UUID) is the
//!   stream's parent;
//! * files made as `creat(0600)`, `mkdir(0700)`, `mknod(type, 0)` and
//!   `symlink` would make them, owned by root, their inode numbers and
//!   flags as the kernel allocates and inherits them; renames, links,
//!   unlinks, xattrs (`btrfs.compression` as the kernel's property),
//!   truncate, chmod, chown (which clears set-user-ID and capabilities as
//!   the kernel's chown does, receive restoring the capability), utimes
//!   (ctime is the time of receipt);
//! * writes are buffered per file and written as the kernel's writeback
//!   would (large extents, small files inline); clones share extents;
//!   encoded writes keep the compressed data; fallocate preallocates or
//!   punches;
//! * at the end of a subvolume: received UUID, stransid, rtransid and
//!   rtime set, read-only, the UUID tree entry, a commit.
//!
//! Commands that fail name their stream offset. Large streams commit as
//! they go (each such commit's superblock is written with the next
//! commit, so that the disk writes one batch while the next is built); a
//! stream that fails leaves the image valid, the partial subvolume
//! writable and not marked received.

pub mod dump;
pub mod stream;

use crate::cache::reada::Readahead;
use crate::error::{Error, Result};
use crate::inode::file::{DataPolicy, INODE_COMPRESS, INODE_NOCOMPRESS};
use crate::inode::namei::XATTR_COMPRESSION;
use crate::subvol::Place;
use crate::tx::Trans;
use std::collections::HashMap;
use std::io::Read;
use stream::{Command, Next, StreamReader};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{InodeItem, Timespec};
use ubtrfs_format::send_stream::{attr, cmd, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE};

/// Largest run of buffered writes to one file before it is written.
const WRITE_BUFFER: usize = 16 << 20;
const S_IFMT: u32 = 0o170000;

/// How a receive runs.
#[derive(Debug, Clone)]
pub struct ReceiveOptions {
    /// Stop after the first END command (`-e`).
    pub honor_end: bool,
    /// Commit when this many tree blocks are dirty. 4096 (64 MiB of 16K
    /// blocks): smaller batches cost re-copying the leaves that every
    /// batch changes (a directory's), larger ones memory and a longer
    /// wait for the last flush (bench/receive.sh: 8192 took 4.1 s and 305
    /// MiB on the full stream, 4096 3.6 s and 213 MiB, 2048 3.3 s and 125
    /// MiB, but the incremental one 2.3, 2.2 and 2.6 s).
    pub commit_blocks: usize,
    /// The time of receipt (ctime of changed inodes, rtime).
    pub now: Timespec,
    /// Stop at this many failed commands (`-E`; 0: never). A command that
    /// failed after changing the image always stops the receive.
    pub max_errors: u64,
}

/// What a receive did.
#[derive(Debug, Default, Clone)]
pub struct ReceiveReport {
    /// Paths (inside the image) of the subvolumes received.
    pub subvolumes: Vec<String>,
    pub commands: u64,
    pub bytes: u64,
    pub commits: u64,
    /// Commands that failed without stopping the receive (`-E`).
    pub errors: Vec<String>,
}

/// A failed receive: the error, and whether the transaction still holds
/// only whole commands (then committing it keeps what was received before
/// the failing command).
#[derive(Debug)]
pub struct ReceiveError {
    pub error: Error,
    pub clean: bool,
}

struct Subvol {
    tree: u64,
    received_uuid: [u8; 16],
    stransid: u64,
}

/// An inode item changed by the last commands and not yet written. A
/// file's chown, chmod and utimes (and the write before them) come one
/// after another in a stream: they change this copy, and the item is
/// written once, before any other command (which may read it from the
/// tree), before a commit, and at the end.
struct HeldInode {
    tree: u64,
    ino: u64,
    item: InodeItem,
}

struct PendingWrite {
    tree: u64,
    ino: u64,
    off: u64,
    data: Vec<u8>,
}

/// Applies streams to one destination directory of an open transaction.
pub struct Receiver<'t> {
    t: &'t mut Trans,
    opts: ReceiveOptions,
    /// The destination directory: (tree, inode) and its path.
    dest: (u64, u64),
    dest_path: String,
    cur: Option<Subvol>,
    next_ino: HashMap<u64, u64>,
    pending: Option<PendingWrite>,
    held: Option<HeldInode>,
    /// Paths of the current subvolume resolved to inodes (entries go
    /// with renames and removals).
    resolved: HashMap<Vec<u8>, u64>,
    /// security.capability set on the current file, restored after chown
    /// (receive.c does this: the kernel's chown drops it).
    cached_caps: Option<Vec<u8>>,
    report: ReceiveReport,
}

impl ReceiveOptions {
    pub fn new() -> Self {
        ReceiveOptions {
            honor_end: false,
            commit_blocks: 4096,
            now: crate::inode::now(),
            max_errors: 1,
        }
    }
}

impl Default for ReceiveOptions {
    fn default() -> Self {
        Self::new()
    }
}

fn lossy(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

/// Whether command `c` changes only the inode item of its file (then a
/// held inode item may stay held through it: see [`HeldInode`]); every
/// other command finds the tree up to date.
fn holds_inode(c: u16) -> bool {
    matches!(c, cmd::CHOWN | cmd::CHMOD | cmd::UTIMES)
}

/// The btrfs compression type a `btrfs.compression` value asks for.
fn compression_prop(v: &[u8]) -> Option<Option<u8>> {
    let algo = v.split(|&b| b == b':').next().unwrap_or(v);
    match algo {
        b"zlib" => Some(Some(COMPRESS_ZLIB)),
        b"lzo" => Some(Some(COMPRESS_LZO)),
        b"zstd" => Some(Some(COMPRESS_ZSTD)),
        b"no" | b"none" => Some(None),
        _ => None,
    }
}

impl<'t> Receiver<'t> {
    /// A receiver into directory `dest` (an absolute path inside the
    /// image).
    pub fn new(t: &'t mut Trans, dest: &str, opts: ReceiveOptions) -> Result<Self> {
        let (tree, dir) = t.resolve_path(dest.as_bytes())?;
        let d = t.inode_of(tree, dir)?;
        if d.mode & S_IFMT != 0o040000 {
            return Err(Error::NotDir(format!("destination {dest}")));
        }
        Ok(Receiver {
            t,
            opts,
            dest: (tree, dir),
            dest_path: dest.trim_end_matches('/').to_string(),
            cur: None,
            next_ino: HashMap::new(),
            pending: None,
            held: None,
            resolved: HashMap::new(),
            cached_caps: None,
            report: ReceiveReport::default(),
        })
    }

    /// Reads and applies every stream in `input`.
    pub fn receive(mut self, input: impl Read) -> std::result::Result<ReceiveReport, ReceiveError> {
        let mut r = StreamReader::new(input);
        let mut streams = 0;
        loop {
            let header = r.read_header().map_err(|e| self.fail(e, true))?;
            if !header {
                if streams == 0 {
                    return Err(self.fail(
                        Error::Invalid("empty stream is not considered valid".into()),
                        true,
                    ));
                }
                break;
            }
            streams += 1;
            let mut ended = false;
            loop {
                let c = match r.next_command().map_err(|e| self.fail(e, true))? {
                    Next::Eof => break,
                    Next::Command(c) => c,
                };
                self.report.commands += 1;
                if !holds_inode(c.cmd) {
                    self.write_held()
                        .map_err(|e| self.fail(c.context(e), false))?;
                }
                let before = self.t.mutations();
                if c.cmd == cmd::END {
                    self.finish_subvol()
                        .map_err(|e| self.fail(c.context(e), false))?;
                    ended = true;
                    break;
                }
                if let Err(e) = self.apply(&c) {
                    let clean = self.t.mutations() == before;
                    let n = self.report.errors.len() as u64 + 1;
                    if !clean || self.opts.max_errors != 0 && n >= self.opts.max_errors {
                        return Err(self.fail(c.context(e), clean));
                    }
                    self.report.errors.push(c.context(e).to_string());
                }
                r.recycle(c);
                if self.t.dirty_blocks() >= self.opts.commit_blocks {
                    self.write_held().map_err(|e| self.fail(e, false))?;
                    // The disk writes this batch while the next is built;
                    // its superblock goes with the next commit.
                    self.t.commit_deferred().map_err(|e| self.fail(e, false))?;
                    self.report.commits += 1;
                }
            }
            if !ended {
                if self.cur.is_some() {
                    return Err(self.fail(
                        Error::Invalid(format!(
                            "send stream offset {}: the stream ends without an end command",
                            r.offset
                        )),
                        true,
                    ));
                }
                break;
            }
            if self.opts.honor_end {
                break;
            }
        }
        self.write_held().map_err(|e| self.fail(e, false))?;
        self.report.bytes = r.offset;
        Ok(self.report)
    }

    /// A failure; buffered writes of whole commands are applied first
    /// when the transaction is clean, so that committing keeps them.
    fn fail(&mut self, error: Error, clean: bool) -> ReceiveError {
        let mut clean = clean;
        if clean {
            let before = self.t.mutations();
            if self.flush().and_then(|_| self.write_held()).is_err() {
                clean = self.t.mutations() == before;
                self.pending = None;
                self.held = None;
            }
        }
        ReceiveError { error, clean }
    }

    fn cur(&self) -> Result<&Subvol> {
        self.cur
            .as_ref()
            .ok_or_else(|| Error::Invalid("a command before the subvol or snapshot command".into()))
    }

    fn tree(&self) -> Result<u64> {
        Ok(self.cur()?.tree)
    }

    /// The inode at `path` in the current subvolume.
    fn resolve(&mut self, path: &[u8]) -> Result<u64> {
        if let Some(&ino) = self.resolved.get(path) {
            return Ok(ino);
        }
        let ino = self.lookup_path(path)?;
        self.remember(path, ino);
        Ok(ino)
    }

    /// Notes that `path` is inode `ino` now.
    fn remember(&mut self, path: &[u8], ino: u64) {
        if self.resolved.len() >= 1 << 16 {
            self.resolved.clear();
        }
        self.resolved.insert(path.to_vec(), ino);
    }

    /// Forgets resolved paths after `path` was renamed or removed: the
    /// path alone for a non-directory, everything for a directory.
    fn forget_path(&mut self, path: &[u8], is_dir: bool) {
        if is_dir {
            self.resolved.clear();
        } else {
            self.resolved.remove(path);
        }
    }

    fn lookup_path(&mut self, path: &[u8]) -> Result<u64> {
        let tree = self.tree()?;
        let mut ino = FIRST_INODE;
        for comp in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            let e = self.t.lookup_name(tree, ino, comp)?.ok_or_else(|| {
                Error::NotFound(format!("{}: no such file or directory", lossy(path)))
            })?;
            ino = e.ino().ok_or_else(|| {
                Error::Unsupported(format!("{}: crosses into another subvolume", lossy(path)))
            })?;
        }
        Ok(ino)
    }

    /// The current subvolume and the inode at the command's path.
    fn target(&mut self, c: &Command) -> Result<(u64, u64)> {
        let path = c.path(attr::PATH)?;
        let tree = self.tree()?;
        Ok((tree, self.resolve(path)?))
    }

    /// The directory holding `path` and its last component.
    fn resolve_parent<'p>(&mut self, path: &'p [u8]) -> Result<(u64, &'p [u8])> {
        if path.is_empty() {
            return Err(Error::Invalid(
                "the subvolume's top directory cannot be made, moved or removed".into(),
            ));
        }
        let (dir, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => (self.resolve(&path[..i])?, &path[i + 1..]),
            None => (FIRST_INODE, path),
        };
        Ok((dir, name))
    }

    fn alloc_ino(&mut self, tree: u64) -> Result<u64> {
        let next = match self.next_ino.get(&tree) {
            Some(&n) => n,
            None => self.t.highest_ino(tree)? + 1,
        };
        if next > LAST_FREE_OBJECTID {
            return Err(Error::NoSpace(format!(
                "tree {tree}: no free inode numbers"
            )));
        }
        self.next_ino.insert(tree, next + 1);
        Ok(next)
    }

    /// Writes the buffered writes.
    fn flush(&mut self) -> Result<()> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        // write_file reads the inode from the tree.
        self.write_held()?;
        let policy = self.policy(p.tree, p.ino)?;
        let inode = self.t.write_file(p.tree, p.ino, p.off, &p.data, policy)?;
        self.put_changed(p.tree, p.ino, inode, true)
    }

    /// The inode item of `ino` as the commands so far left it.
    fn inode(&mut self, tree: u64, ino: u64) -> Result<InodeItem> {
        match &self.held {
            Some(h) if h.tree == tree && h.ino == ino => Ok(h.item),
            _ => self.t.inode_of(tree, ino),
        }
    }

    /// Writes the held inode item, if any.
    fn write_held(&mut self) -> Result<()> {
        match self.held.take() {
            Some(h) => self.t.put_inode(h.tree, h.ino, &h.item),
            None => Ok(()),
        }
    }

    /// How new data of `ino` is stored.
    fn policy(&mut self, tree: u64, ino: u64) -> Result<DataPolicy> {
        let inode = self.inode(tree, ino)?;
        let algo = if inode.flags & INODE_COMPRESS != 0 {
            self.t
                .get_xattr(tree, ino, XATTR_COMPRESSION)?
                .and_then(|v| compression_prop(&v))
                .flatten()
        } else {
            None
        };
        Ok(DataPolicy::of_inode(&inode, algo))
    }

    /// Writes an inode changed now: ctime (and mtime for data changes).
    fn put_changed(&mut self, tree: u64, ino: u64, mut i: InodeItem, data: bool) -> Result<()> {
        let now = self.opts.now;
        i.ctime = now;
        if data {
            i.mtime = now;
        }
        i.transid = self.t.transid;
        i.sequence += 1;
        if self
            .held
            .as_ref()
            .is_some_and(|h| (h.tree, h.ino) != (tree, ino))
        {
            self.write_held()?;
        }
        self.held = Some(HeldInode { tree, ino, item: i });
        Ok(())
    }

    fn apply(&mut self, c: &Command) -> Result<()> {
        let now = self.opts.now;
        if c.cmd != cmd::WRITE {
            self.flush()?;
        }
        if !holds_inode(c.cmd) {
            // The flush may have left the written file's inode held: the
            // command's own changes read it from the tree.
            self.write_held()?;
        }
        match c.cmd {
            cmd::SUBVOL => {
                let name = c.name_attr(attr::PATH)?;
                let uuid = c.uuid(attr::UUID)?;
                let ctransid = c.u64(attr::CTRANSID)?;
                self.finish_subvol()?;
                let place = Place {
                    tree: self.dest.0,
                    dir: self.dest.1,
                    name,
                };
                if self.t.lookup_name(place.tree, place.dir, name)?.is_some() {
                    return Err(Error::Exists(self.sub_path(name)));
                }
                let id = self.t.create_subvolume(
                    &place,
                    crate::inode::root::random_uuid()?,
                    false,
                    now,
                )?;
                self.begin_subvol(id, name, uuid, ctransid);
            }
            cmd::SNAPSHOT => {
                let name = c.name_attr(attr::PATH)?;
                let uuid = c.uuid(attr::UUID)?;
                let ctransid = c.u64(attr::CTRANSID)?;
                let parent_uuid = c.uuid(attr::CLONE_UUID)?;
                let parent_ctransid = c.u64(attr::CLONE_CTRANSID)?;
                self.finish_subvol()?;
                let src = self.find_subvol(&parent_uuid)?.ok_or_else(|| {
                    Error::NotFound(format!(
                        "cannot find parent subvolume (uuid {}, ctransid {parent_ctransid})",
                        uuid_str(&parent_uuid)
                    ))
                })?;
                let place = Place {
                    tree: self.dest.0,
                    dir: self.dest.1,
                    name,
                };
                if self.t.lookup_name(place.tree, place.dir, name)?.is_some() {
                    return Err(Error::Exists(self.sub_path(name)));
                }
                let id =
                    self.t
                        .snapshot(src, &place, crate::inode::root::random_uuid()?, false, now)?;
                self.begin_subvol(id, name, uuid, ctransid);
            }
            cmd::MKFILE | cmd::MKDIR | cmd::MKNOD | cmd::MKFIFO | cmd::MKSOCK | cmd::SYMLINK => {
                self.make(c)?
            }
            cmd::RENAME => {
                let from = c.path(attr::PATH)?;
                let to = c.path(attr::PATH_TO)?;
                let tree = self.tree()?;
                let (fd, fname) = self.resolve_parent(from)?;
                let (td, tname) = self.resolve_parent(to)?;
                let moved = self.t.lookup_name(tree, fd, fname)?;
                let is_dir = moved.is_none_or(|e| e.file_type == FT_DIR);
                let over_dir = self
                    .t
                    .lookup_name(tree, td, tname)?
                    .is_some_and(|e| e.file_type == FT_DIR);
                self.forget_path(from, is_dir);
                self.forget_path(to, over_dir);
                self.t.rename(tree, fd, fname, td, tname, now)?;
                // The commands after a rename name the file by its new
                // path (send renames every new file from its temporary
                // name).
                if let Some(ino) = moved.and_then(|e| e.ino()) {
                    self.remember(to, ino);
                }
            }
            cmd::LINK => {
                let path = c.path(attr::PATH)?;
                let target = c.path(attr::PATH_LINK)?;
                let tree = self.tree()?;
                let ino = self.resolve(target)?;
                let (dir, name) = self.resolve_parent(path)?;
                self.t.link(tree, ino, dir, name, now)?;
            }
            cmd::UNLINK | cmd::RMDIR => {
                let path = c.path(attr::PATH)?;
                let tree = self.tree()?;
                let (dir, name) = self.resolve_parent(path)?;
                let e = self.t.lookup_name(tree, dir, name)?.ok_or_else(|| {
                    Error::NotFound(format!("{}: no such file or directory", lossy(path)))
                })?;
                let is_dir = e.file_type == FT_DIR;
                if c.cmd == cmd::UNLINK && is_dir {
                    return Err(Error::IsDir(lossy(path)));
                }
                if c.cmd == cmd::RMDIR && !is_dir {
                    return Err(Error::NotDir(lossy(path)));
                }
                self.forget_path(path, is_dir);
                self.t.unlink(tree, dir, name, now)?;
            }
            cmd::SET_XATTR => {
                let name = c.bytes(attr::XATTR_NAME)?;
                let value = c.bytes(attr::XATTR_DATA)?;
                let (tree, ino) = self.target(c)?;
                if name == b"security.capability" {
                    self.cached_caps = Some(value.to_vec());
                }
                self.set_xattr(tree, ino, name, value)?;
            }
            cmd::REMOVE_XATTR => {
                let name = c.bytes(attr::XATTR_NAME)?;
                let (tree, ino) = self.target(c)?;
                self.t.remove_xattr(tree, ino, name)?;
                let mut i = self.inode(tree, ino)?;
                if name == XATTR_COMPRESSION {
                    i.flags &= !(INODE_COMPRESS | INODE_NOCOMPRESS);
                }
                self.put_changed(tree, ino, i, false)?;
            }
            cmd::WRITE => {
                let off = c.u64(attr::FILE_OFFSET)?;
                let data = c.bytes(attr::DATA)?;
                let (tree, ino) = self.target(c)?;
                self.buffer_write(tree, ino, off, data)?;
            }
            cmd::CLONE => self.clone_cmd(c)?,
            cmd::TRUNCATE => {
                let size = c.u64(attr::SIZE)?;
                let (tree, ino) = self.target(c)?;
                let policy = self.policy(tree, ino)?;
                let i = self.t.truncate_file(tree, ino, size, policy)?;
                self.put_changed(tree, ino, i, true)?;
            }
            cmd::CHMOD => {
                let mode = c.u64(attr::MODE)?;
                let (tree, ino) = self.target(c)?;
                let mut i = self.inode(tree, ino)?;
                i.mode = (i.mode & S_IFMT) | (mode as u32 & 0o7777);
                self.put_changed(tree, ino, i, false)?;
            }
            cmd::CHOWN => {
                let uid = c.u64(attr::UID)?;
                let gid = c.u64(attr::GID)?;
                let (tree, ino) = self.target(c)?;
                let (Ok(uid), Ok(gid)) = (u32::try_from(uid), u32::try_from(gid)) else {
                    return Err(Error::Invalid(format!(
                        "uid {uid} / gid {gid} out of range"
                    )));
                };
                let mut i = self.inode(tree, ino)?;
                i.uid = uid;
                i.gid = gid;
                if i.mode & S_IFMT != 0o040000 {
                    // The kernel's chown of a non-directory drops
                    // set-user-ID, set-group-ID with group execute, and
                    // file capabilities.
                    i.mode &= !0o4000;
                    if i.mode & 0o010 != 0 {
                        i.mode &= !0o2000;
                    }
                    if self
                        .t
                        .get_xattr(tree, ino, b"security.capability")?
                        .is_some()
                    {
                        self.t.remove_xattr(tree, ino, b"security.capability")?;
                    }
                }
                self.put_changed(tree, ino, i, false)?;
                if let Some(caps) = self.cached_caps.take() {
                    self.t.set_xattr(tree, ino, b"security.capability", &caps)?;
                }
            }
            cmd::UTIMES => {
                let atime = c.timespec(attr::ATIME)?;
                let mtime = c.timespec(attr::MTIME)?;
                let (tree, ino) = self.target(c)?;
                let mut i = self.inode(tree, ino)?;
                i.atime = atime;
                i.mtime = mtime;
                self.put_changed(tree, ino, i, false)?;
                // put_changed set mtime only for data changes.
            }
            cmd::UPDATE_EXTENT => {
                // A stream sent without file data: nothing to write.
                c.path(attr::PATH)?;
            }
            cmd::FALLOCATE => {
                let mode = c.u32(attr::FALLOCATE_MODE)?;
                let off = c.u64(attr::FILE_OFFSET)?;
                let len = c.u64(attr::SIZE)?;
                let (tree, ino) = self.target(c)?;
                let i = if mode == FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE {
                    let policy = self.policy(tree, ino)?;
                    self.t.punch_hole(tree, ino, off, len, policy)?
                } else if mode & !FALLOC_FL_KEEP_SIZE == 0 {
                    let policy = self.policy(tree, ino)?;
                    let keep = mode & FALLOC_FL_KEEP_SIZE != 0;
                    self.t.prealloc(tree, ino, off, len, keep, policy)?
                } else {
                    return Err(Error::Unsupported(format!("fallocate mode {mode:#x}")));
                };
                self.put_changed(tree, ino, i, true)?;
            }
            cmd::FILEATTR => {
                // btrfs receive does not apply file attributes either.
                c.path(attr::PATH)?;
            }
            cmd::ENCODED_WRITE => self.encoded_write(c)?,
            stream::ENABLE_VERITY => {
                return Err(Error::Unsupported(
                    "fs-verity: ubtrfs does not write verity items".into(),
                ))
            }
            other => {
                return Err(Error::Invalid(format!("unknown command {other}")));
            }
        }
        Ok(())
    }

    fn sub_path(&self, name: &[u8]) -> String {
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
    fn find_subvol(&mut self, uuid: &[u8; 16]) -> Result<Option<u64>> {
        for kind in [UUID_KEY_RECEIVED_SUBVOL, UUID_KEY_SUBVOL] {
            if let Some(id) = self.t.uuid_lookup(uuid, kind)? {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// Marks the current subvolume received and read-only, and commits.
    fn finish_subvol(&mut self) -> Result<()> {
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

    fn make(&mut self, c: &Command) -> Result<()> {
        let path = c.path(attr::PATH)?;
        let tree = self.tree()?;
        let (dir, name) = self.resolve_parent(path)?;
        let (mode, rdev) = match c.cmd {
            cmd::MKFILE => (0o100600, 0),
            cmd::MKDIR => (0o040700, 0),
            cmd::MKNOD => {
                let mode = c.u64(attr::MODE)? as u32 & S_IFMT;
                if !matches!(mode, 0o020000 | 0o060000 | 0o010000 | 0o140000 | 0o100000) {
                    return Err(Error::Invalid(format!("mknod of file type {mode:o}")));
                }
                let rdev = c.u64(attr::RDEV)?;
                (mode, crate::inode::user_rdev_to_kernel(rdev))
            }
            cmd::MKFIFO => (0o010600, 0),
            cmd::MKSOCK => (0o140600, 0),
            _ => (0o120777, 0),
        };
        let target = if c.cmd == cmd::SYMLINK {
            let t = c.bytes(attr::PATH_LINK)?;
            let max = crate::tree::buf::max_item_data(self.t.nodesize()) - 21;
            if t.is_empty() || t.len() > max.min(4095) || t.contains(&0) {
                return Err(Error::NameTooLong(format!(
                    "symlink target of {} bytes",
                    t.len()
                )));
            }
            Some(t)
        } else {
            None
        };
        let ino = self.alloc_ino(tree)?;
        let now = self.opts.now;
        let mut i = self
            .t
            .create_inode(tree, dir, name, ino, mode, rdev, (0, 0), now)?;
        if let Some(t) = target {
            self.t
                .insert_inline_extent(tree, ino, t, t.len() as u64, COMPRESS_NONE)?;
            i.size = t.len() as u64;
            i.nbytes = t.len() as u64;
            self.t.put_inode(tree, ino, &i)?;
        }
        Ok(())
    }

    fn set_xattr(&mut self, tree: u64, ino: u64, name: &[u8], value: &[u8]) -> Result<()> {
        let mut i = self.inode(tree, ino)?;
        if name.starts_with(b"btrfs.") {
            if name != XATTR_COMPRESSION {
                return Err(Error::Invalid(format!(
                    "unknown btrfs property {:?}",
                    lossy(name)
                )));
            }
            if value.is_empty() {
                i.flags &= !(INODE_COMPRESS | INODE_NOCOMPRESS);
                if self.t.get_xattr(tree, ino, name)?.is_some() {
                    self.t.remove_xattr(tree, ino, name)?;
                }
                return self.put_changed(tree, ino, i, false);
            }
            match compression_prop(value) {
                Some(Some(_)) => {
                    i.flags = (i.flags & !INODE_NOCOMPRESS) | INODE_COMPRESS;
                }
                Some(None) => {
                    i.flags = (i.flags & !INODE_COMPRESS) | INODE_NOCOMPRESS;
                }
                None => {
                    return Err(Error::Invalid(format!(
                        "btrfs.compression value {:?}",
                        lossy(value)
                    )))
                }
            }
        }
        self.t.set_xattr(tree, ino, name, value)?;
        self.put_changed(tree, ino, i, false)
    }

    fn buffer_write(&mut self, tree: u64, ino: u64, off: u64, data: &[u8]) -> Result<()> {
        if let Some(p) = &mut self.pending {
            if p.tree == tree
                && p.ino == ino
                && p.off + p.data.len() as u64 == off
                && p.data.len() + data.len() <= WRITE_BUFFER
            {
                p.data.extend_from_slice(data);
                return Ok(());
            }
        }
        self.flush()?;
        let i = self.inode(tree, ino)?;
        if i.mode & S_IFMT != 0o100000 {
            return Err(Error::Invalid(format!("inode {ino} is not a regular file")));
        }
        off.checked_add(data.len() as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| Error::Invalid(format!("write at {off}: past the largest file")))?;
        self.pending = Some(PendingWrite {
            tree,
            ino,
            off,
            data: data.to_vec(),
        });
        Ok(())
    }

    fn clone_cmd(&mut self, c: &Command) -> Result<()> {
        let path = c.path(attr::PATH)?;
        let off = c.u64(attr::FILE_OFFSET)?;
        let len = c.u64(attr::CLONE_LEN)?;
        let src_uuid = c.uuid(attr::CLONE_UUID)?;
        let src_path = c.path(attr::CLONE_PATH)?;
        let src_off = c.u64(attr::CLONE_OFFSET)?;
        let cur = self.cur()?;
        let (tree, cur_uuid) = (cur.tree, cur.received_uuid);
        let src_tree = if src_uuid == cur_uuid {
            tree
        } else {
            self.find_subvol(&src_uuid)?.ok_or_else(|| {
                Error::NotFound(format!(
                    "clone: did not find source subvolume (uuid {})",
                    uuid_str(&src_uuid)
                ))
            })?
        };
        let ino = self.resolve(path)?;
        let src_ino = if src_tree == tree {
            self.resolve(src_path)?
        } else {
            let mut i = FIRST_INODE;
            for comp in src_path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
                let e = self.t.lookup_name(src_tree, i, comp)?.ok_or_else(|| {
                    Error::NotFound(format!(
                        "clone source {}: no such file in subvolume {src_tree}",
                        lossy(src_path)
                    ))
                })?;
                i = e.ino().ok_or_else(|| {
                    Error::Unsupported(format!("clone source {} is a subvolume", lossy(src_path)))
                })?;
            }
            i
        };
        let policy = self.policy(tree, ino)?;
        let i = self
            .t
            .clone_range(src_tree, src_ino, src_off, len, tree, ino, off, policy)?;
        self.put_changed(tree, ino, i, true)
    }

    fn encoded_write(&mut self, c: &Command) -> Result<()> {
        let path = c.path(attr::PATH)?;
        let off = c.u64(attr::FILE_OFFSET)?;
        let num = c.u64(attr::UNENCODED_FILE_LEN)?;
        let ram = c.u64(attr::UNENCODED_LEN)?;
        let offset = c.u64(attr::UNENCODED_OFFSET)?;
        let compression = c
            .get(attr::COMPRESSION)
            .map_or(Ok(0), |_| c.u32(attr::COMPRESSION))?;
        let encryption = c
            .get(attr::ENCRYPTION)
            .map_or(Ok(0), |_| c.u32(attr::ENCRYPTION))?;
        let data = c.bytes(attr::DATA)?;
        if encryption != 0 {
            return Err(Error::Unsupported(format!(
                "encrypted data (encryption {encryption})"
            )));
        }
        let tree = self.tree()?;
        let ino = self.resolve(path)?;
        let policy = self.policy(tree, ino)?;
        let ss = self.t.sectorsize();
        // BTRFS_ENCODED_IO_COMPRESSION_*: 1 zlib, 2 zstd, 3..7 lzo with
        // sectors of 4K..64K.
        let (algo, lzo_sector) = match compression {
            0 => (COMPRESS_NONE, ss),
            1 => (COMPRESS_ZLIB, ss),
            2 => (COMPRESS_ZSTD, ss),
            3..=7 => (COMPRESS_LZO, 4096u32 << (compression - 3)),
            n => return Err(Error::Invalid(format!("unknown encoded compression {n}"))),
        };
        let i = if algo == COMPRESS_NONE || lzo_sector != ss {
            let plain =
                ubtrfs_format::compress::decompress(algo, data, ram as usize, lzo_sector)
                    .map_err(|e| Error::format(format!("encoded data for {}", lossy(path)), e))?;
            if offset
                .checked_add(num)
                .is_none_or(|e| e > plain.len() as u64)
            {
                return Err(Error::Invalid(format!(
                    "encoded range {offset}+{num} past {} bytes",
                    plain.len()
                )));
            }
            let piece = &plain[offset as usize..(offset + num) as usize];
            self.t.write_file(tree, ino, off, piece, policy)?
        } else {
            self.t
                .encoded_write(tree, ino, off, num, ram, offset, algo, data, policy)?
        };
        self.put_changed(tree, ino, i, true)
    }
}

/// A UUID as text (8-4-4-4-12 lowercase hex).
pub fn uuid_str(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Receives `input` into directory `dest` of the image open in `t`. On
/// failure the transaction is committed when it holds only whole
/// commands (what was received before the failing command stays, the
/// partial subvolume writable and not marked received); otherwise it is
/// left uncommitted for the caller to drop.
pub fn receive(
    t: &mut Trans,
    dest: &str,
    input: impl Read,
    opts: ReceiveOptions,
) -> Result<ReceiveReport> {
    // Incremental streams change files in inode order: their leaves are
    // read ahead, as send reads the trees it walks.
    // UBTRFS_NO_RECEIVE_READAHEAD=1 turns it off (benchmark switch).
    let ours = if std::env::var_os("UBTRFS_NO_RECEIVE_READAHEAD").is_some() {
        Readahead::None
    } else {
        Readahead::ForwardAlways
    };
    let mode = std::mem::replace(&mut t.readahead, ours);
    let out = Receiver::new(t, dest, opts)
        .map(|r| r.receive(input))
        .and_then(|res| finish_receive(t, res));
    t.readahead = mode;
    out
}

/// Commits what `receive` applied, as [`receive`] says.
fn finish_receive(
    t: &mut Trans,
    res: std::result::Result<ReceiveReport, ReceiveError>,
) -> Result<ReceiveReport> {
    match res {
        Ok(rep) => {
            t.commit()?;
            Ok(rep)
        }
        Err(ReceiveError { error, clean }) => {
            // Nothing changed (a refusal before the first command took
            // effect): nothing is written.
            if clean && t.mutations() > 0 {
                t.commit()?;
            }
            // Else what the last commit made goes on disk (its superblock
            // may be waiting), not what the failed command left.
            t.finish_deferred()?;
            Err(error)
        }
    }
}
