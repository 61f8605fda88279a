//! `btrfs send` from an image: full and incremental send streams of
//! read-only snapshots, in protocol versions 1 and 2, that btrfs-progs'
//! `btrfs receive` applies.
//!
//! * [`stream`]: header, command framing with crc32c, TLV attributes.
//! * [`full`]: the full send. The snapshot's tree is walked once in key
//!   order (with forward-always readahead); every inode is created under an
//!   orphan name and renamed or linked into place, then its xattrs, data and
//!   attributes follow, as the kernel's full send does.
//! * [`compare`]: the lockstep walk of two trees that skips every subtree
//!   whose block pointer and generation are equal in both.
//! * [`incr`]: the incremental send. The differences are collected first;
//!   then every name that disappears is removed (unlinked, removed, moved
//!   straight to its new place when that is safe, or else moved to an
//!   orphan name), children before parents; then the changed and new inodes
//!   are processed in inode order, each placed at its new names. Because all
//!   old names are gone before any new one is made, swaps, cycles of
//!   renames, a directory moved under its former child, or a directory
//!   replaced by a file need no special casing.
//! * [`data`]: writes, clones (found through the extent tree's back
//!   references, as the kernel does), encoded writes, holes, truncates.

mod compare;
mod data;
mod full;
mod incr;
pub mod stream;

use crate::cache::reada::Readahead;
use crate::ctree::Tree;
use crate::data::read::DataReader;
use crate::error::{Error, Result};
use crate::fs::file::FileHandle;
use crate::fs::{kernel_rdev_to_user, Filesystem, InodeId};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use stream::StreamWriter;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{InodeItem, RootItem};
use ubtrfs_format::send_stream::{attr, cmd};

pub use RootInfo as SendRoot;

/// A subvolume taking part in a send: the one sent, the parent, or a clone
/// source.
#[derive(Debug, Clone)]
pub struct RootInfo {
    pub id: u64,
    pub tree: Tree,
    pub item: RootItem,
    /// Its name in its parent directory (ROOT_BACKREF), as SUBVOL carries it.
    pub name: Vec<u8>,
}

impl RootInfo {
    pub fn load(fs: &Filesystem, id: u64) -> Result<RootInfo> {
        let item = fs
            .root_item(id)?
            .ok_or_else(|| Error::NotFound(format!("subvolume {id} does not exist")))?;
        let tree = fs.tree(id)?;
        let name = fs.root_backref(id)?.map(|b| b.2).unwrap_or_default();
        Ok(RootInfo {
            id,
            tree,
            item,
            name,
        })
    }

    /// The UUID a stream names this subvolume by: the received UUID when it
    /// was itself received, else its own (what `btrfs receive` looks up).
    pub fn stream_uuid(&self) -> [u8; 16] {
        if self.item.received_uuid != [0u8; 16] {
            self.item.received_uuid
        } else {
            self.item.uuid
        }
    }
}

/// What to send and how.
#[derive(Debug, Clone)]
pub struct SendOptions {
    /// Stream protocol version, 1 or 2.
    pub proto: u32,
    /// Send compressed extents as encoded writes (protocol 2).
    pub compressed_data: bool,
    /// Send no file data: UPDATE_EXTENT instead of writes (`--no-data`).
    pub no_data: bool,
    /// Readahead of the tree walks.
    pub readahead: Readahead,
    /// Parent snapshot (subvolume id) for an incremental send.
    pub parent: Option<u64>,
    /// Further clone sources (subvolume ids).
    pub clone_sources: Vec<u64>,
    /// Leave out the stream header (a later subvolume of one stream).
    pub omit_header: bool,
    /// Leave out the END command (an earlier subvolume of one stream).
    pub omit_end: bool,
}

impl Default for SendOptions {
    fn default() -> Self {
        SendOptions {
            proto: 1,
            compressed_data: false,
            no_data: false,
            readahead: Readahead::ForwardAlways,
            parent: None,
            clone_sources: Vec::new(),
            omit_header: false,
            omit_end: false,
        }
    }
}

/// Counters of one send.
#[derive(Debug, Clone, Default)]
pub struct SendStats {
    pub bytes: u64,
    pub commands: u64,
    /// Commands by number (see [`ubtrfs_format::send_stream::cmd`]).
    pub by_command: Vec<(u16, u64)>,
    /// Inodes created or changed.
    pub inodes: u64,
    /// Inodes the incremental compare found different.
    pub changed_inodes: u64,
}

/// Sends subvolume `subvol` of `fs` to `out`.
pub fn send(
    fs: &Filesystem,
    subvol: u64,
    opts: &SendOptions,
    out: Box<dyn Write + '_>,
) -> Result<SendStats> {
    if opts.proto != 1 && opts.proto != 2 {
        return Err(Error::Invalid(format!(
            "send protocol version {} is not supported (1 or 2)",
            opts.proto
        )));
    }
    if opts.compressed_data && opts.proto < 2 {
        return Err(Error::Invalid(
            "--compressed-data needs protocol version 2".into(),
        ));
    }
    let send_root = RootInfo::load(fs, subvol)?;
    check_readonly(&send_root, "subvolume")?;
    let parent = match opts.parent {
        Some(p) => {
            let r = RootInfo::load(fs, p)?;
            check_readonly(&r, "parent")?;
            Some(r)
        }
        None => None,
    };
    let mut clones = Vec::new();
    for &c in &opts.clone_sources {
        if c == subvol || Some(c) == opts.parent || clones.iter().any(|r: &RootInfo| r.id == c) {
            continue;
        }
        let r = RootInfo::load(fs, c)?;
        check_readonly(&r, "clone source")?;
        clones.push(r);
    }
    clones.sort_by_key(|r| r.id);
    let mut s = Sender::new(fs, opts.clone(), send_root, parent, clones, out)?;
    s.run()?;
    Ok(s.stats())
}

fn check_readonly(r: &RootInfo, what: &str) -> Result<()> {
    if !r.item.is_readonly() {
        return Err(Error::Invalid(format!(
            "{what} {} (id {}) is not read-only: only read-only snapshots can be sent, as with the kernel",
            String::from_utf8_lossy(&r.name),
            r.id
        )));
    }
    Ok(())
}

/// Where an inode is at the receiver when it differs from what the trees
/// say (created under an orphan name, moved before being processed).
#[derive(Debug, Clone)]
pub(crate) struct Loc {
    pub parent: u64,
    pub name: Vec<u8>,
    /// Under an orphan name in the top directory.
    pub orphan: bool,
}

/// The inode being processed.
#[derive(Default)]
pub(crate) struct Cur {
    pub active: bool,
    pub ino: u64,
    pub ii: InodeItem,
    /// A new inode (created by this stream): everything is sent.
    pub new: bool,
    /// Inode with nlink 0 (an orphan in the snapshot): skipped.
    pub ignore: bool,
    pub refs: Vec<(u64, Vec<u8>)>,
    pub refs_done: bool,
    /// End of the data sent so far.
    pub next_write_offset: u64,
    /// Cached path at the receiver.
    pub path: Option<Vec<u8>>,
    pub fh: Option<FileHandle>,
    /// Incremental: the inode as the parent snapshot has it.
    pub old: Option<InodeItem>,
    /// The security.capability xattr, when all xattrs were seen (new inode
    /// read item by item).
    pub caps: Option<Option<Vec<u8>>>,
}

impl Cur {
    fn is_reg(&self) -> bool {
        self.ii.mode & 0o170000 == 0o100000
    }
    fn is_dir(&self) -> bool {
        self.ii.mode & 0o170000 == 0o040000
    }
    fn is_symlink(&self) -> bool {
        self.ii.mode & 0o170000 == 0o120000
    }
}

/// Which subvolume a clone comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CloneRoot {
    Send,
    Parent,
    Source(usize),
}

const MAX_DIRTY_DIRS: usize = 64;

pub(crate) struct Sender<'a, 'w> {
    pub fs: &'a Filesystem,
    pub opts: SendOptions,
    pub w: StreamWriter<'w>,
    pub send: RootInfo,
    pub parent: Option<RootInfo>,
    pub clones: Vec<RootInfo>,
    pub cur: Cur,
    /// Receiver locations that differ from the trees.
    pub loc: HashMap<u64, Loc>,
    /// Inodes below this number whose refs were processed sit at their
    /// send-tree names.
    pub progress: u64,
    /// Incremental: inodes whose names differ between the trees (their
    /// parent-tree names hold until they are processed).
    pub ref_changed: HashSet<u64>,
    /// Incremental: inodes new in the send tree (or with a new generation).
    pub new_inodes: HashSet<u64>,
    /// Incremental: inodes that will be processed (finished) in pass 2.
    pub to_process: HashSet<u64>,
    send_ref_cache: HashMap<u64, Option<(u64, Vec<u8>)>>,
    parent_ref_cache: HashMap<u64, Option<(u64, Vec<u8>)>>,
    /// Directories whose times must be sent (LRU order, oldest first).
    dirty: Vec<u64>,
    /// The top directory changed after its queued times were sent.
    root_stale: bool,
    pub sectorsize: u64,
    /// Reads the data of the current inode's extents.
    pub reader: DataReader,
    pub n_inodes: u64,
    pub n_changed: u64,
}

impl<'a, 'w> Sender<'a, 'w> {
    fn new(
        fs: &'a Filesystem,
        opts: SendOptions,
        send: RootInfo,
        parent: Option<RootInfo>,
        clones: Vec<RootInfo>,
        out: Box<dyn Write + 'w>,
    ) -> Result<Self> {
        let w = StreamWriter::new(out, opts.proto);
        let reader = DataReader::new(send.tree.id, 0, false);
        Ok(Sender {
            fs,
            w,
            send,
            parent,
            clones,
            cur: Cur::default(),
            loc: HashMap::new(),
            progress: 0,
            ref_changed: HashSet::new(),
            new_inodes: HashSet::new(),
            to_process: HashSet::new(),
            send_ref_cache: HashMap::new(),
            parent_ref_cache: HashMap::new(),
            dirty: Vec::new(),
            root_stale: false,
            reader,
            sectorsize: fs.info.sectorsize as u64,
            n_inodes: 0,
            n_changed: 0,
            opts,
        })
    }

    fn stats(&self) -> SendStats {
        let by_command: Vec<(u16, u64)> = self
            .w
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(c, &n)| (c as u16, n))
            .collect();
        SendStats {
            bytes: self.w.bytes,
            commands: by_command.iter().map(|(_, n)| n).sum(),
            by_command,
            inodes: self.n_inodes,
            changed_inodes: self.n_changed,
        }
    }

    fn run(&mut self) -> Result<()> {
        if !self.opts.omit_header {
            self.w.header()?;
        }
        self.send_subvol_begin()?;
        if self.parent.is_some() {
            incr::incremental_send(self)?;
        } else {
            full::full_send(self)?;
        }
        self.flush_dirty_all()?;
        if !self.opts.omit_end {
            self.w.begin(cmd::END);
            self.w.finish()?;
        }
        self.w.flush()
    }

    fn send_subvol_begin(&mut self) -> Result<()> {
        let uuid = self.send.stream_uuid();
        let ctransid = self.send.item.ctransid;
        let name = self.send.name.clone();
        match &self.parent {
            Some(p) => {
                let puuid = p.stream_uuid();
                let pct = p.item.ctransid;
                self.w.begin(cmd::SNAPSHOT);
                self.w.put(attr::PATH, &name);
                self.w.put_uuid(attr::UUID, &uuid);
                self.w.put_u64(attr::CTRANSID, ctransid);
                self.w.put_uuid(attr::CLONE_UUID, &puuid);
                self.w.put_u64(attr::CLONE_CTRANSID, pct);
            }
            None => {
                self.w.begin(cmd::SUBVOL);
                self.w.put(attr::PATH, &name);
                self.w.put_uuid(attr::UUID, &uuid);
                self.w.put_u64(attr::CTRANSID, ctransid);
            }
        }
        self.w.finish()
    }

    // ------------------------------------------------------------ names

    fn send_first_ref(&mut self, ino: u64) -> Result<Option<(u64, Vec<u8>)>> {
        if let Some(r) = self.send_ref_cache.get(&ino) {
            return Ok(r.clone());
        }
        let r = self.fs.first_ref(self.send.tree, ino)?;
        if self.send_ref_cache.len() > 1 << 16 {
            self.send_ref_cache.clear();
        }
        self.send_ref_cache.insert(ino, r.clone());
        Ok(r)
    }

    fn parent_first_ref(&mut self, ino: u64) -> Result<Option<(u64, Vec<u8>)>> {
        let Some(p) = &self.parent else {
            return Ok(None);
        };
        if let Some(r) = self.parent_ref_cache.get(&ino) {
            return Ok(r.clone());
        }
        let r = self.fs.first_ref(p.tree, ino)?;
        if self.parent_ref_cache.len() > 1 << 16 {
            self.parent_ref_cache.clear();
        }
        self.parent_ref_cache.insert(ino, r.clone());
        Ok(r)
    }

    /// Where `ino` is at the receiver right now: (parent, name).
    pub fn location(&mut self, ino: u64) -> Result<(u64, Vec<u8>)> {
        if let Some(l) = self.loc.get(&ino) {
            return Ok((l.parent, l.name.clone()));
        }
        let r = if self.parent.is_none() || ino < self.progress || !self.ref_changed.contains(&ino)
        {
            self.send_first_ref(ino)?
        } else {
            self.parent_first_ref(ino)?
        };
        r.ok_or_else(|| {
            Error::corrupt(
                format!("{} inode {ino}", self.send.tree.describe()),
                "inode has no name (INODE_REF) to send it under",
            )
        })
    }

    /// The path of `ino` at the receiver, relative to the subvolume.
    pub fn path(&mut self, ino: u64) -> Result<Vec<u8>> {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let mut cur = ino;
        for _ in 0..4096 {
            if cur == FIRST_INODE {
                let mut out = Vec::new();
                for (i, p) in parts.iter().rev().enumerate() {
                    if i > 0 {
                        out.push(b'/');
                    }
                    out.extend_from_slice(p);
                }
                return Ok(out);
            }
            let (p, name) = self.location(cur)?;
            parts.push(name);
            cur = p;
        }
        Err(Error::corrupt(
            format!("{} inode {ino}", self.send.tree.describe()),
            "directory chain does not reach the subvolume root",
        ))
    }

    pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(dir.len() + name.len() + 1);
        if !dir.is_empty() {
            v.extend_from_slice(dir);
            v.push(b'/');
        }
        v.extend_from_slice(name);
        v
    }

    pub fn cur_path(&mut self) -> Result<Vec<u8>> {
        if let Some(p) = &self.cur.path {
            return Ok(p.clone());
        }
        let p = self.path(self.cur.ino)?;
        self.cur.path = Some(p.clone());
        Ok(p)
    }

    /// An orphan name for (ino, gen) that neither snapshot has in its top
    /// directory: o<ino>-<gen>-<idx>.
    pub fn orphan_name(&mut self, ino: u64, gen: u64) -> Result<Vec<u8>> {
        for idx in 0u64.. {
            let name = format!("o{ino}-{gen}-{idx}").into_bytes();
            if self
                .fs
                .dir_lookup_in(self.send.tree, FIRST_INODE, &name)?
                .is_some()
            {
                continue;
            }
            if let Some(p) = &self.parent {
                if self.fs.dir_lookup_in(p.tree, FIRST_INODE, &name)?.is_some() {
                    continue;
                }
            }
            return Ok(name);
        }
        unreachable!()
    }

    // ------------------------------------------------------------ commands

    pub fn send_rename(&mut self, from: &[u8], to: &[u8]) -> Result<()> {
        self.w.begin(cmd::RENAME);
        self.w.put(attr::PATH, from);
        self.w.put(attr::PATH_TO, to);
        self.w.finish()
    }

    pub fn send_link(&mut self, path: &[u8], target: &[u8]) -> Result<()> {
        self.w.begin(cmd::LINK);
        self.w.put(attr::PATH, path);
        self.w.put(attr::PATH_LINK, target);
        self.w.finish()
    }

    pub fn send_unlink(&mut self, path: &[u8]) -> Result<()> {
        self.w.begin(cmd::UNLINK);
        self.w.put(attr::PATH, path);
        self.w.finish()
    }

    pub fn send_rmdir(&mut self, path: &[u8]) -> Result<()> {
        self.w.begin(cmd::RMDIR);
        self.w.put(attr::PATH, path);
        self.w.finish()
    }

    pub fn send_set_xattr(&mut self, path: &[u8], name: &[u8], data: &[u8]) -> Result<()> {
        // Empty ACLs are stored as zero-length xattrs, which setxattr on the
        // receiving side refuses; send an ACL header with no entries.
        let dummy = 2u32.to_le_bytes();
        let data = if data.is_empty()
            && (name == b"system.posix_acl_access" || name == b"system.posix_acl_default")
        {
            &dummy[..]
        } else {
            data
        };
        self.w.begin(cmd::SET_XATTR);
        self.w.put(attr::PATH, path);
        self.w.put(attr::XATTR_NAME, name);
        self.w.put(attr::XATTR_DATA, data);
        self.w.finish()
    }

    pub fn send_remove_xattr(&mut self, path: &[u8], name: &[u8]) -> Result<()> {
        self.w.begin(cmd::REMOVE_XATTR);
        self.w.put(attr::PATH, path);
        self.w.put(attr::XATTR_NAME, name);
        self.w.finish()
    }

    pub fn send_truncate(&mut self, size: u64) -> Result<()> {
        let p = self.cur_path()?;
        self.w.begin(cmd::TRUNCATE);
        self.w.put(attr::PATH, &p);
        self.w.put_u64(attr::SIZE, size);
        self.w.finish()
    }

    fn send_utimes_of(&mut self, path: &[u8], ii: &InodeItem) -> Result<()> {
        self.w.begin(cmd::UTIMES);
        self.w.put(attr::PATH, path);
        self.w
            .put_timespec(attr::ATIME, ii.atime.sec, ii.atime.nsec);
        self.w
            .put_timespec(attr::MTIME, ii.mtime.sec, ii.mtime.nsec);
        self.w
            .put_timespec(attr::CTIME, ii.ctime.sec, ii.ctime.nsec);
        if self.w.proto() >= 2 {
            self.w
                .put_timespec(attr::OTIME, ii.otime.sec, ii.otime.nsec);
        }
        self.w.finish()
    }

    /// Creates inode `ino` under its orphan name.
    pub fn create_inode(&mut self, ino: u64, ii: &InodeItem) -> Result<()> {
        let name = self.orphan_name(ino, ii.generation)?;
        let ft = ii.mode & 0o170000;
        let c = match ft {
            0o100000 => cmd::MKFILE,
            0o040000 => cmd::MKDIR,
            0o120000 => cmd::SYMLINK,
            0o020000 | 0o060000 => cmd::MKNOD,
            0o010000 => cmd::MKFIFO,
            0o140000 => cmd::MKSOCK,
            _ => {
                return Err(Error::Unsupported(format!(
                    "{} inode {ino}: unexpected file type {:o}",
                    self.send.tree.describe(),
                    ft
                )))
            }
        };
        let target = if c == cmd::SYMLINK {
            Some(self.read_symlink(ino)?)
        } else {
            None
        };
        self.w.begin(c);
        self.w.put(attr::PATH, &name);
        self.w.put_u64(attr::INO, ino);
        if let Some(t) = target {
            self.w.put(attr::PATH_LINK, &t);
        } else if c == cmd::MKNOD || c == cmd::MKFIFO || c == cmd::MKSOCK {
            self.w.put_u64(attr::RDEV, kernel_rdev_to_user(ii.rdev));
            self.w.put_u64(attr::MODE, ii.mode as u64);
        }
        self.w.finish()?;
        self.loc.insert(
            ino,
            Loc {
                parent: FIRST_INODE,
                name,
                orphan: true,
            },
        );
        self.touch_root();
        Ok(())
    }

    fn read_symlink(&mut self, ino: u64) -> Result<Vec<u8>> {
        let id = InodeId {
            subvol: self.send.id,
            ino,
        };
        let mut h = FileHandle::open(self.fs, id)?;
        let mut buf = vec![0u8; h.size.min(1 << 16) as usize];
        let n = h.read_at(self.fs, 0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    // ------------------------------------------------------------ directory times

    /// Records that directory `dir` needs its times sent after the last
    /// change to its entries: an LRU like the kernel's (a hit moves the
    /// entry to the most recent end), trimmed to 64 entries after each
    /// inode, flushed most recent first at the end.
    pub fn dirty_dir(&mut self, dir: u64) -> Result<()> {
        if let Some(i) = self.dirty.iter().position(|&d| d == dir) {
            self.dirty.remove(i);
        }
        self.dirty.push(dir);
        if dir == FIRST_INODE {
            self.root_stale = false;
        }
        Ok(())
    }

    pub fn forget_dirty(&mut self, dir: u64) {
        self.dirty.retain(|&d| d != dir);
    }

    /// Notes a change to the top directory's entries (orphan names) that
    /// the kernel does not queue its times for: if it is not queued
    /// anyway, its times are sent once more at the end.
    pub fn touch_root(&mut self) {
        if !self.dirty.contains(&FIRST_INODE) {
            self.root_stale = true;
        }
    }

    pub fn trim_dirty(&mut self) -> Result<()> {
        while self.dirty.len() > MAX_DIRTY_DIRS {
            let d = self.dirty.remove(0);
            if d == FIRST_INODE {
                self.root_stale = false;
            }
            self.send_dir_utimes(d)?;
        }
        Ok(())
    }

    fn send_dir_utimes(&mut self, dir: u64) -> Result<()> {
        let ii = self.fs.inode_item_in(self.send.tree, dir)?.ok_or_else(|| {
            Error::corrupt(
                format!("{} inode {dir}", self.send.tree.describe()),
                "directory has no inode item",
            )
        })?;
        let p = self.path(dir)?;
        self.send_utimes_of(&p, &ii)
    }

    /// Sends the times of every directory still queued, most recently
    /// used first (the kernel's order).
    fn flush_dirty_all(&mut self) -> Result<()> {
        while let Some(d) = self.dirty.pop() {
            self.send_dir_utimes(d)?;
        }
        if self.root_stale {
            self.root_stale = false;
            self.send_dir_utimes(FIRST_INODE)?;
        }
        Ok(())
    }

    // ------------------------------------------------------------ per inode

    /// Whether `p` exists at the receiver while inode `self.cur.ino` is
    /// being processed.
    fn exists_now(&self, p: u64) -> bool {
        p == FIRST_INODE
            || self.loc.contains_key(&p)
            || p < self.cur.ino
            || (self.parent.is_some() && !self.new_inodes.contains(&p))
    }

    /// Whether `dir` will be finished later (and send its own times then).
    fn finished_later(&self, dir: u64) -> bool {
        dir > self.cur.ino && (self.parent.is_none() || self.to_process.contains(&dir))
    }

    /// Makes sure directory `p` exists, creating it early under its orphan
    /// name when it is a new directory not processed yet.
    fn ensure_dir(&mut self, p: u64) -> Result<()> {
        if self.exists_now(p) {
            return Ok(());
        }
        let ii = self.fs.inode_item_in(self.send.tree, p)?.ok_or_else(|| {
            Error::corrupt(
                format!("{} inode {p}", self.send.tree.describe()),
                "parent directory has no inode item",
            )
        })?;
        self.create_inode(p, &ii)?;
        Ok(())
    }

    /// Gives the current inode the names `refs` at the receiver: renames it
    /// from where it is for the first when it has no name yet, links the
    /// others.
    pub fn place_refs(&mut self, refs: &[(u64, Vec<u8>)], mut has_name: bool) -> Result<()> {
        let ino = self.cur.ino;
        for (p, name) in refs {
            self.ensure_dir(*p)?;
            let dir = self.path(*p)?;
            let target = Self::join(&dir, name);
            if !has_name {
                let from = self.cur_path()?;
                self.send_rename(&from, &target)?;
                let was_orphan = self.loc.get(&ino).is_some_and(|l| l.orphan);
                self.loc.insert(
                    ino,
                    Loc {
                        parent: *p,
                        name: name.clone(),
                        orphan: false,
                    },
                );
                self.cur.path = Some(target);
                has_name = true;
                if was_orphan {
                    self.touch_root();
                }
            } else {
                let cur = self.cur_path()?;
                self.send_link(&target, &cur)?;
            }
            if !self.finished_later(*p) {
                self.dirty_dir(*p)?;
            }
        }
        Ok(())
    }

    /// Marks the current inode's names done: from now on it is found under
    /// its send-tree names.
    pub fn refs_processed(&mut self) {
        self.cur.refs_done = true;
        self.loc.remove(&self.cur.ino);
        self.progress = self.cur.ino + 1;
        // A cached path stays valid: it is one of the inode's names now.
    }

    /// Begins a new inode (created by this stream).
    pub fn begin_new(&mut self, ino: u64, ii: InodeItem) -> Result<()> {
        self.cur = Cur {
            active: true,
            ino,
            ii,
            new: true,
            ..Default::default()
        };
        self.progress = ino;
        if ii.nlink == 0 {
            self.cur.ignore = true;
            return Ok(());
        }
        self.n_inodes += 1;
        if ino != FIRST_INODE && !self.loc.contains_key(&ino) {
            self.create_inode(ino, &ii)?;
        }
        if ino == FIRST_INODE {
            self.cur.refs_done = true;
            self.progress = ino + 1;
        }
        Ok(())
    }

    /// Places a new inode's recorded refs (at its first item after them).
    pub fn process_new_refs(&mut self) -> Result<()> {
        if self.cur.refs_done {
            return Ok(());
        }
        let refs = std::mem::take(&mut self.cur.refs);
        self.place_refs(&refs, false)?;
        self.refs_processed();
        // The kernel trims its directory-times cache after every item.
        self.trim_dirty()
    }

    /// An xattr of a new inode.
    pub fn new_xattr(&mut self, name: &[u8], data: &[u8]) -> Result<()> {
        if name == b"security.capability" {
            self.cur.caps = Some(Some(data.to_vec()));
            return Ok(());
        }
        let p = self.cur_path()?;
        self.send_set_xattr(&p, name, data)
    }

    /// Ends the current inode: truncate, owner, mode, capabilities, times.
    pub fn finish_cur(&mut self) -> Result<()> {
        if !self.cur.active {
            return Ok(());
        }
        if self.cur.ignore {
            self.cur.active = false;
            return Ok(());
        }
        if !self.cur.refs_done {
            self.process_new_refs()?;
        }
        let ii = self.cur.ii;
        let (need_chown, need_chmod, need_truncate) = match &self.cur.old {
            Some(old) if !self.cur.new => {
                let grew_fully = ii.size > old.size && self.cur.next_write_offset == ii.size;
                (
                    old.uid != ii.uid || old.gid != ii.gid,
                    !self.cur.is_symlink() && old.mode != ii.mode,
                    !(old.size == ii.size || grew_fully),
                )
            }
            _ => (
                true,
                !self.cur.is_symlink(),
                self.cur.next_write_offset != ii.size,
            ),
        };
        if self.cur.is_reg() && need_truncate {
            self.send_truncate(ii.size)?;
        }
        if need_chown {
            let p = self.cur_path()?;
            self.w.begin(cmd::CHOWN);
            self.w.put(attr::PATH, &p);
            self.w.put_u64(attr::UID, ii.uid as u64);
            self.w.put_u64(attr::GID, ii.gid as u64);
            self.w.finish()?;
        }
        if need_chmod {
            let p = self.cur_path()?;
            self.w.begin(cmd::CHMOD);
            self.w.put(attr::PATH, &p);
            self.w.put_u64(attr::MODE, (ii.mode & 0o7777) as u64);
            self.w.finish()?;
        }
        // v2: changed inode flags (the kernel sends them only for inodes
        // that exist in the parent; receive may ignore them).
        let need_fileattr = match &self.cur.old {
            Some(old) if !self.cur.new => {
                self.w.proto() >= 2 && !self.cur.is_symlink() && old.flags != ii.flags
            }
            _ => false,
        };
        if need_fileattr {
            let p = self.cur_path()?;
            self.w.begin(cmd::FILEATTR);
            self.w.put(attr::PATH, &p);
            self.w.put_u64(attr::FILEATTR, ii.flags);
            self.w.finish()?;
        }
        // A new inode was read item by item: its capabilities, if any,
        // were seen among its xattrs.
        let caps = if self.cur.new {
            self.cur.caps.take().flatten()
        } else {
            self.fs
                .xattr_in(self.send.tree, self.cur.ino, b"security.capability")?
        };
        if let Some(caps) = caps {
            let p = self.cur_path()?;
            self.send_set_xattr(&p, b"security.capability", &caps)?;
        }
        // A directory with entries gets its times once its last entry is
        // in place; others now.
        if self.cur.is_dir() && ii.size > 0 {
            self.dirty_dir(self.cur.ino)?;
        } else {
            let p = self.cur_path()?;
            self.send_utimes_of(&p, &ii)?;
            if self.cur.is_dir() {
                self.forget_dirty(self.cur.ino);
            }
        }
        self.cur.active = false;
        self.cur.fh = None;
        self.trim_dirty()
    }
}

/// Finds a subvolume by its path from the top level ("snap1", "/a/snap").
pub fn subvolume_by_path(fs: &Filesystem, path: &[u8]) -> Result<crate::fs::Subvolume> {
    let want: Vec<&[u8]> = path
        .split(|&c| c == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect();
    let want = want.join(&b'/');
    if want.is_empty() {
        return Err(Error::Invalid(
            "the top-level subvolume (id 5) cannot be sent: it is never read-only".into(),
        ));
    }
    for s in fs.subvolumes()? {
        if s.path == want {
            return Ok(s);
        }
    }
    // A subvolume given by the path of its root directory, or by id.
    if let Ok(id) = std::str::from_utf8(&want).unwrap_or("").parse::<u64>() {
        if let Some(s) = fs.subvolumes()?.into_iter().find(|s| s.id == id) {
            return Ok(s);
        }
    }
    Err(Error::NotFound(format!(
        "{}: no such subvolume in the image",
        String::from_utf8_lossy(path)
    )))
}
