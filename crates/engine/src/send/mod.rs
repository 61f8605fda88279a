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
//!
//! The Sender's own parts, one concern a file: `names.rs` (where an inode
//! is at the receiver: send.c's get_cur_path and orphan names),
//! `commands.rs` (the commands that name paths), `dir_utimes.rs` (the
//! directory-times cache), `inode.rs` (an inode begun, placed at its
//! names and finished: send.c's process_recorded_refs and
//! finish_inode_if_needed).

mod commands;
mod compare;
mod data;
mod dir_utimes;
mod full;
mod incr;
mod inode;
mod names;
pub mod stream;

use crate::cache::reada::Readahead;
use crate::ctree::Tree;
use crate::data::read::DataReader;
use crate::error::{Error, Result};
use crate::fs::file::FileHandle;
use crate::fs::Filesystem;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use stream::StreamWriter;
use ubtrfs_format::consts::FIRST_INODE;
use ubtrfs_format::items::{InodeItem, RootItem};
use ubtrfs_format::send_stream::cmd;

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

impl Loc {
    /// Name `name` in directory `parent`.
    pub fn named(parent: u64, name: Vec<u8>) -> Loc {
        Loc {
            parent,
            name,
            orphan: false,
        }
    }

    /// Orphan name `name` in the top directory.
    pub fn orphan(name: Vec<u8>) -> Loc {
        Loc {
            parent: FIRST_INODE,
            name,
            orphan: true,
        }
    }
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
