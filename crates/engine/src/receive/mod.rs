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
//!
//! The parts, as btrfs-progs splits them: [`stream`] reads the commands
//! (common/send-stream.c), `process.rs` applies each (cmds/receive.c's
//! process_* callbacks), with `paths.rs` resolving the stream's paths,
//! `write.rs` the buffered writes, clones and encoded writes, and
//! `subvol.rs` the subvolume a stream makes and marks received.

pub mod dump;
mod paths;
mod process;
pub mod stream;
mod subvol;
mod write;

use crate::cache::reada::Readahead;
use crate::error::{Error, Result};
use crate::inode::namei::FreeObjectids;
use crate::tx::Trans;
use std::collections::HashMap;
use std::io::Read;
use stream::{lossy, Next, StreamReader};
use ubtrfs_format::items::{InodeItem, Timespec};
use ubtrfs_format::send_stream::cmd;

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
    next_ino: FreeObjectids,
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

/// Whether command `c` changes only the inode item of its file (then a
/// held inode item may stay held through it: see [`HeldInode`]); every
/// other command finds the tree up to date.
fn holds_inode(c: u16) -> bool {
    matches!(c, cmd::CHOWN | cmd::CHMOD | cmd::UTIMES)
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
            next_ino: FreeObjectids::default(),
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
