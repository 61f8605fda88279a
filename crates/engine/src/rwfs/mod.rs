//! `rwfs`, the read-write filesystem a mount serves ([`RwFs`]; not a VFS:
//! the kernel's VFS is above the FUSE mount): every POSIX operation on one
//! open transaction, as the kernel's entry points (inode.c btrfs_lookup,
//! btrfs_create, btrfs_mkdir, btrfs_unlink, btrfs_rename2, btrfs_setattr;
//! file.c btrfs_file_write_iter, btrfs_fallocate, btrfs_sync_file,
//! btrfs_file_llseek; xattr.c; ioctl.c's flags), with the kernel's delayed
//! allocation: written data is held in memory per inode ([`extent_io`])
//! and given extents at writeback (a commit, an fsync, too much dirty data,
//! or an operation that needs the extents), copy-on-write, compressed and
//! inline as the mount options and inode flags say, or overwritten in
//! place for NOCOW files ([`nocow`]).
//!
//! Reads see everything: the transaction's trees plus the dirty ranges.
//! A commit writes back every dirty range and then commits the
//! transaction, but for the interval commit, which leaves dirty data
//! dirty and commits grown files at the size their extents back (the
//! kernel's disk_i_size); until then the image on disk is the last
//! commit, whole.
//!
//! * [`namei`]: lookup, directory listings, create, link, unlink, rename;
//! * [`attr`]: stat, setattr, xattrs, inode flags;
//! * [`mod@file`]: read, write, writeback, truncate, fallocate, copy ranges,
//!   SEEK_DATA/SEEK_HOLE ([`crate::fs::seek`]), fsync;
//! * [`nocow`]: in-place overwrites of NOCOW extents;
//! * [`direct`]: O_DIRECT overwrites of NOCOW extents, written outside
//!   the mount's lock;
//! * [`ordered`]: writeback whose checksums and device writes run outside
//!   the mount's lock;
//! * [`orphan`]: open handles, and inodes kept until their last close.

pub mod acl;
pub mod attr;
pub mod direct;
pub mod extent_io;
pub mod file;
pub mod fsync;
pub mod namei;
pub mod nocow;
pub mod ordered;
pub mod orphan;
pub mod send;
pub mod subvol;

use crate::data::extent::ExtentKind;
use crate::error::{Error, Result};
use crate::fs::InodeId;
use crate::inode::namei::FreeObjectids;
use crate::tx::Trans;
use extent_io::InodeDirty;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::InodeItem;

/// Whether `VAR=1` (any value but 0) is in the environment: the
/// benchmark's switches.
pub(crate) fn env_on(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v != "0")
}

/// Mount options that change how data is written (the kernel's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwOptions {
    /// `compress=ALGO[:LEVEL]` (algorithm code, level; 0 the default).
    pub compress: Option<(u8, i32)>,
    /// compress-force: compress even files marked NOCOMPRESS.
    pub compress_force: bool,
    /// nodatacow: new files are NOCOW (and so without checksums).
    pub nodatacow: bool,
    /// nodatasum: new files have no data checksums.
    pub nodatasum: bool,
    /// commit=SECONDS: the longest time between commits.
    pub commit_secs: u64,
    /// max_inline=BYTES: the largest file kept inline.
    pub max_inline: u64,
    /// Dirty data held before it is written back.
    pub dirty_limit: u64,
    /// Changed metadata held before a commit.
    pub meta_limit: u64,
    /// notreelog: fsync commits instead of writing a log tree.
    pub notreelog: bool,
}

impl Default for RwOptions {
    fn default() -> Self {
        RwOptions {
            compress: None,
            compress_force: false,
            nodatacow: false,
            nodatasum: false,
            commit_secs: 30,
            max_inline: crate::tx::MAX_INLINE,
            dirty_limit: 256 << 20,
            meta_limit: 256 << 20,
            notreelog: false,
        }
    }
}

/// What the filesystem did, for tests and the benchmark.
#[derive(Debug, Default, Clone)]
pub struct RwStats {
    pub commits: u64,
    /// fsyncs answered by writing a log tree, and those that committed.
    pub log_syncs: u64,
    pub fsync_commits: u64,
    /// fsyncs whose file was already durable when their turn to sync
    /// came: another fsync's log sync (concurrent fsyncs share one, see
    /// [`RwFs::fsync_sync`]) or a commit covered it.
    pub fsync_batched: u64,
    /// Why the last fsync that committed could not write a log.
    pub last_fallback: Option<String>,
    pub writebacks: u64,
    /// NOCOW ranges overwritten in place, and those that fell back to COW.
    pub nocow_in_place: u64,
    pub nocow_cow: u64,
    /// fsyncs that logged their file while another's log sync was in
    /// flight (their own sync follows it).
    pub fsync_logged_in_flight: u64,
    /// O_DIRECT writes overwritten in place outside the lock ([`direct`]).
    pub direct_writes: u64,
    /// The most direct writes in flight at once (the kernel sends an
    /// O_DIRECT file's writes in parallel or one at a time).
    pub direct_max_in_flight: u64,
    /// Writebacks with bytes written outside the lock ([`ordered`]), and
    /// those bytes.
    pub ordered_writebacks: u64,
    pub ordered_bytes: u64,
}

pub use crate::fs::view::StatFs;

/// A filesystem mounted read-write.
pub struct RwFs {
    pub(crate) t: Trans,
    pub opts: RwOptions,
    /// Inodes with buffered data not yet written back, in inode order: a
    /// writeback of all of them allocates their extents in that order, so
    /// files made one after another (cp -a, tar x) lie one after another on
    /// disk, as the kernel's writeback of its dirty list leaves them, and a
    /// later cold read of the tree in directory order reads forward.
    dirty: BTreeMap<InodeId, InodeDirty>,
    dirty_bytes: u64,
    /// Files grown by buffered writes not yet written back, with the size
    /// their items back (the kernel's disk_i_size): an interval commit,
    /// which leaves dirty data in memory, writes that size
    /// ([`RwFs::commit_sizes`]). A writeback of the file drops the entry.
    disk_i_size: HashMap<InodeId, u64>,
    /// Ranges whose writeback is in flight ([`ordered`]): read from here
    /// until their extents are in the trees.
    ordered: HashMap<InodeId, InodeDirty<std::sync::Arc<Vec<u8>>>>,
    /// Writebacks begun and not ended ([`ordered`]).
    ordered_in_flight: u64,
    /// Change counters of inodes' data (SEEK_DATA caches compare them),
    /// shared with callers that answer from a cache without the lock.
    versions: std::sync::Arc<crate::fs::seek::Versions>,
    /// Next free inode number per subvolume.
    next_ino: FreeObjectids,
    /// Read-only subvolumes (received, snapshots made read-only).
    readonly: HashMap<u64, bool>,
    /// Open handles per inode: an inode whose last name goes while it is
    /// open lives on as an orphan until the last close.
    /// Behind a mutex of its own: opens and closes share the mount's lock
    /// ([`RwFs::opened`], [`RwFs::release_shared`]); what looks at it to
    /// change the trees (unlink, the last close of an orphan) holds the
    /// filesystem alone.
    open: std::sync::Mutex<HashMap<InodeId, u32>>,
    orphans: HashSet<InodeId>,
    /// Subvolumes deleted and not yet dropped: each is dropped after a
    /// commit once nothing in it is open ([`subvol`]).
    dead_subvols: HashSet<u64>,
    /// Subvolumes being sent from the mount, with how many sends
    /// ([`send`]).
    sending: HashMap<u64, u32>,
    /// The subvolume the mount shows as its root: not deleted under it
    /// (EBUSY, [`RwFs::set_shown_subvol`]).
    shown_subvol: u64,
    last_commit: Instant,
    /// A commit failed: the transaction is gone, nothing more is written
    /// (the kernel's transaction abort turns the filesystem read-only).
    aborted: Option<String>,
    /// The final commit was made ([`RwFs::unmount`]): nothing more is
    /// changed or written. A request still running when the mount ended
    /// (a lazy unmount, an aborted connection) is refused rather than
    /// changing what no commit will write, or writing a log after it.
    unmounted: bool,
    /// Direct writes begun and not ended ([`direct`]).
    direct_in_flight: u64,
    /// A log sync begun and not ended ([`RwFs::fsync_sync_begin`]): no
    /// commit and no other log sync until it ends.
    log_sync_in_flight: bool,
    /// An fsync during a log sync found that only a commit could answer it
    /// (why), and left the commit to its caller: until a commit is made,
    /// no log is written (logging may have stopped half way through a
    /// file, which a log must not hold).
    commit_owed: Option<String>,
    /// A writeback that failed after its write(2) had returned, reported
    /// at the next fsync.
    wb_error: Option<Error>,
    pub stats: RwStats,
    /// What fsync logged in this transaction ([`crate::tree_log::write`]).
    pub(crate) log: crate::tree_log::write::LogWriter,
    /// Inodes that gained or lost a name since the last commit: a log
    /// cannot express it (replay only adds names), fsync commits.
    pub(crate) renamed: HashSet<InodeId>,
    /// The transaction's change counter at the last commit: an idle mount
    /// does not commit.
    committed_mutations: u64,
    /// Files logged so far (numbered), and the number of the last one a
    /// log sync or commit made durable: fsyncs that logged their files
    /// before one log sync share it.
    log_seq: u64,
    durable_seq: u64,
}

/// What [`RwFs::fsync_sync_begin`] left to do.
pub enum SyncStep {
    /// Nothing: durable already (covered, or committed).
    Done,
    /// The log's superblock, to write without the filesystem's lock.
    Write(LogSyncWrite),
}

/// A log sync's superblock write, made without the filesystem
/// ([`RwFs::fsync_sync_begin`]).
pub struct LogSyncWrite {
    sync: crate::tree_log::write::LogSync,
    /// The last file logged that it makes durable.
    upto: u64,
}

impl LogSyncWrite {
    /// Flush, superblock, flush.
    pub fn write(&self) -> Result<()> {
        self.sync.write()
    }
}

/// Where an fsync stands once its file is in the in-memory log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsyncStage {
    /// Durable already: nothing changed, or a commit was made.
    Durable,
    /// Logged as number `n`: durable once a log sync covers it
    /// ([`RwFs::fsync_sync`]).
    Logged(u64),
    /// Only a commit can make it durable (why), and a log sync is in
    /// flight, which no commit may overtake: the caller commits once it
    /// has ended ([`RwFs::fsync_fallback`]).
    Commit(String),
}

impl RwFs {
    /// Opens the image files `paths` (every device) read-write: an
    /// unreplayed log tree is replayed and committed first, as the
    /// kernel's read-write mount does, then orphans of an earlier crash
    /// are cleaned up.
    pub fn open(paths: &[PathBuf], cache_bytes: u64, opts: RwOptions) -> Result<RwFs> {
        crate::tree_log::replay_log(paths, cache_bytes)?;
        let t = Trans::open(paths, cache_bytes)?;
        Self::with_trans(t, opts)
    }

    /// A mount over an open transaction (tests use in-memory devices).
    pub fn with_trans(mut t: Trans, opts: RwOptions) -> Result<RwFs> {
        t.max_inline = opts.max_inline;
        let mut fs = RwFs {
            t,
            opts,
            dirty: BTreeMap::new(),
            disk_i_size: HashMap::new(),
            dirty_bytes: 0,
            ordered: HashMap::new(),
            ordered_in_flight: 0,
            versions: Default::default(),
            next_ino: FreeObjectids::default(),
            readonly: HashMap::new(),
            open: Default::default(),
            orphans: HashSet::new(),
            dead_subvols: HashSet::new(),
            sending: HashMap::new(),
            shown_subvol: FS_TREE_OBJECTID,
            last_commit: Instant::now(),
            aborted: None,
            unmounted: false,
            direct_in_flight: 0,
            log_sync_in_flight: false,
            commit_owed: None,
            wb_error: None,
            stats: RwStats::default(),
            log: Default::default(),
            renamed: HashSet::new(),
            committed_mutations: 0,
            log_seq: 0,
            durable_seq: 0,
        };
        fs.committed_mutations = fs.t.mutations();
        if fs.cleanup_orphans()? | fs.cleanup_dead_subvols()? {
            fs.commit()?;
        }
        Ok(fs)
    }

    /// The transaction (tests look at the trees through it).
    pub fn trans(&mut self) -> &mut Trans {
        &mut self.t
    }

    pub fn sectorsize(&self) -> u64 {
        self.t.sectorsize() as u64
    }

    /// Bumps the data change counter of `id`.
    pub(crate) fn bump(&mut self, id: InodeId) {
        self.versions.bump(id);
    }

    pub(crate) fn version(&self, id: InodeId) -> u64 {
        self.versions.get(id)
    }

    /// The data change counters, for answering SEEK_DATA/SEEK_HOLE from
    /// an open file's cache without this filesystem
    /// ([`crate::fs::seek::SeekCache::cached`]).
    pub fn versions(&self) -> std::sync::Arc<crate::fs::seek::Versions> {
        self.versions.clone()
    }

    /// Refuses changes once a commit has failed, and in read-only
    /// subvolumes (and the placeholder directories of snapshots).
    pub(crate) fn check_writable(&mut self, id: InodeId) -> Result<()> {
        if self.aborted.is_none() && !id.is_placeholder() && !self.readonly.contains_key(&id.subvol)
        {
            let ro = self.t.root(id.subvol)?.item.flags & ROOT_SUBVOL_RDONLY != 0;
            self.readonly.insert(id.subvol, ro);
        }
        self.writable(id)
    }

    /// [`RwFs::check_writable`] for a caller that shares the filesystem
    /// (a subvolume not looked at before is looked up, not remembered).
    pub(crate) fn writable(&self, id: InodeId) -> Result<()> {
        self.check_mounted()?;
        if let Some(why) = &self.aborted {
            return Err(Error::ReadOnly(format!(
                "the filesystem is read-only after a failed commit: {why}"
            )));
        }
        if id.is_placeholder() {
            return Err(Error::ReadOnly(format!(
                "subvolume {}: the placeholder of a subvolume the snapshot does not hold",
                id.subvol
            )));
        }
        let ro = match self.readonly.get(&id.subvol) {
            Some(&ro) => ro,
            None => self.t.root_view(id.subvol)?.item.flags & ROOT_SUBVOL_RDONLY != 0,
        };
        if ro {
            return Err(Error::ReadOnly(format!(
                "subvolume {} is read-only",
                id.subvol
            )));
        }
        Ok(())
    }

    /// A new inode number in subvolume `tree`.
    pub(crate) fn alloc_ino(&mut self, tree: u64) -> Result<u64> {
        self.next_ino.take(&mut self.t, tree)
    }

    /// Whether a commit is due: the commit interval passed, or too much is
    /// held in memory.
    pub fn commit_due(&self) -> bool {
        if self.aborted.is_some() || self.unmounted {
            return false;
        }
        let meta = self.t.dirty_blocks() as u64 * self.t.nodesize() as u64;
        self.last_commit.elapsed() >= Duration::from_secs(self.opts.commit_secs.max(1))
            && (self.dirty_bytes > 0 || self.changed() || meta > 0)
            || self.dirty_bytes > self.opts.dirty_limit
            || meta > self.opts.meta_limit
    }

    /// Writes back every dirty range and commits. A failed commit leaves
    /// the image at the last one and the mount read-only. Dirty data that
    /// finds no room (a full filesystem) stays dirty: the commit is made
    /// without it, and NoSpace says so.
    pub fn commit(&mut self) -> Result<()> {
        self.commit_as(true)
    }

    /// The commit interval's commit: as [`RwFs::commit`], but dirty data
    /// stays dirty (files grown since their last writeback go in at the
    /// size their extents back, [`RwFs::commit_sizes`]: the caller writes
    /// back first what it wants in), and a thread of the commit's own
    /// writes its blocks and, after a flush, its superblock
    /// ([`Trans::commit_deferred`]), so that requests need not wait for
    /// the disk. What must be durable waits for it: fsync
    /// ([`RwFs::wait_committed`]), the next commit, a log sync, unmount.
    pub fn commit_periodic(&mut self) -> Result<()> {
        self.commit_as(false)
    }

    /// Waits until the last commit is on disk (a periodic commit's
    /// superblock written). A failure leaves the mount read-only.
    pub fn wait_committed(&mut self) -> Result<()> {
        self.t.finish_deferred().inspect_err(|e| {
            self.aborted = Some(e.to_string());
        })
    }

    fn commit_as(&mut self, sync: bool) -> Result<()> {
        self.check_mounted()?;
        if self.log_sync_in_flight {
            // The caller's lock lets no commit start during a log sync:
            // its superblock could land before the log's.
            return Err(Error::Invalid(
                "a commit while a log sync is in flight".into(),
            ));
        }
        if self.ordered_in_flight > 0 {
            // Its extents are allocated and have no items yet.
            return Err(Error::Invalid(
                "a commit while a writeback is in flight".into(),
            ));
        }
        if let Some(why) = &self.aborted {
            return Err(Error::ReadOnly(format!(
                "the filesystem is read-only after a failed commit: {why}"
            )));
        }
        // The interval commit leaves dirty data dirty, as the kernel's
        // transaction commit leaves delalloc to writeback (the mount wrote
        // back what was dirty before it took the lock, outside the lock):
        // files grown since go in with the size their items back.
        // Every other commit is asked for durability: all written back.
        let res = if sync { self.writeback_all() } else { Ok(()) };
        // Dirty data with no room (a full filesystem) stays dirty, and the
        // commit goes on without it, as the interval commit does: the
        // kernel's commit leaves delalloc it cannot place to writeback,
        // whose error goes to the next fsync. Read-only would lose every
        // change since the last commit.
        let (res, no_room) = match res {
            Err(Error::NoSpace(why)) => (Ok(()), Some(why)),
            r => (r, None),
        };
        // Files cut to the size their items back, put back after the
        // commit, or at once if it is not made: the mount reads them
        // grown either way.
        let mut cut = Vec::new();
        let res = res
            .and_then(|()| self.commit_sizes(&mut cut))
            .and_then(|()| {
                if sync {
                    self.t.commit()
                } else {
                    self.t.commit_deferred()
                }
            })
            .map(|()| self.t.mutations());
        let put_back = self.put_back(cut);
        // A failed put-back after a commit that was made: the mount would
        // read those files short. Read-only, as a failed commit.
        let res = res.and_then(|committed| put_back.map(|()| committed));
        self.last_commit = Instant::now();
        match res {
            Ok(committed) => {
                self.stats.commits += 1;
                self.renamed.clear();
                self.committed_mutations = committed;
                self.durable_seq = self.log_seq;
                self.commit_owed = None;
                // Deleted subvolumes are dropped in the next transaction,
                // as the kernel's cleaner does: their blocks have extent
                // items now. A drop that fails half way leaves the
                // transaction unfit to commit: read-only, as a failed
                // commit.
                if let Err(e) = self.drop_dead_subvols() {
                    self.aborted = Some(format!("dropping a deleted subvolume: {e}"));
                    return Err(e);
                }
                match no_room {
                    None => Ok(()),
                    Some(why) => Err(Error::NoSpace(format!(
                        "{why}; committed without the {} bytes of dirty data that have no room",
                        self.dirty_bytes
                    ))),
                }
            }
            Err(e) => {
                self.aborted = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Before a commit that leaves dirty data: each file grown by buffered
    /// writes not yet written back gets the size its items back (the
    /// kernel writes disk_i_size into the inode item), so that the image
    /// as committed shows the file as it was before it grew, not a tail
    /// of zeros (or, without no-holes, a size its hole items do not
    /// reach). Returns the items to put back after the commit.
    ///
    /// A file given items past that size since (a truncate up without
    /// no-holes, a clone), or with nothing dirty left (a truncate dropped
    /// it), is left at its size, its gaps given hole items: consistent,
    /// the pending bytes read as zeros after a crash, as the kernel's
    /// with no-holes once an ordered extent of the file ends. So is every
    /// file at a commit that wrote everything back first.
    fn commit_sizes(&mut self, cut: &mut Vec<(InodeId, InodeItem)>) -> Result<()> {
        let pending: Vec<(InodeId, u64)> = self.disk_i_size.drain().collect();
        let mut pending = pending.into_iter();
        while let Some((id, disk)) = pending.next() {
            if let Err(e) = self.commit_size(id, disk, cut) {
                // Kept for the next commit: this one is not made.
                self.disk_i_size.insert(id, disk);
                self.disk_i_size.extend(pending);
                return Err(e);
            }
        }
        Ok(())
    }

    /// [`RwFs::commit_sizes`] for one file grown past `disk`.
    fn commit_size(
        &mut self,
        id: InodeId,
        disk: u64,
        cut: &mut Vec<(InodeId, InodeItem)>,
    ) -> Result<()> {
        let Some(inode) = self.t.inode(id.subvol, id.ino)? else {
            return Ok(());
        };
        if disk >= inode.size {
            return Ok(());
        }
        // With nothing dirty (a truncate dropped it) the size stands on
        // its own: it only needs its hole items. Preallocated extents do
        // not count: they may lie past the end of file (KEEP_SIZE).
        let settle = !self.dirty.contains_key(&id)
            || self
                .t
                .file_extents(id.subvol, id.ino, disk, u64::MAX)?
                .iter()
                .any(|(k, e)| k.offset >= disk && !matches!(e.kind, ExtentKind::Prealloc { .. }));
        if settle {
            let ss = self.sectorsize();
            return self
                .inode_mut(id)
                .fill_holes(0, inode.size.div_ceil(ss) * ss);
        }
        let mut short = inode;
        short.size = disk;
        self.inode_mut(id).put(&short)?;
        cut.push((id, inode));
        // Kept for the commit after this one, if it also leaves the data
        // dirty.
        self.disk_i_size.insert(id, disk);
        Ok(())
    }

    /// Puts back the inode items [`RwFs::commit_sizes`] cut, every one
    /// tried; the first error.
    fn put_back(&mut self, cut: Vec<(InodeId, InodeItem)>) -> Result<()> {
        let mut res = Ok(());
        for (id, inode) in cut {
            let put = self.inode_mut(id).put(&inode);
            if res.is_ok() {
                res = put;
            }
        }
        res
    }

    /// After ENOSPC: space freed since the last commit, and by a commit
    /// whose superblock is not written yet, is pinned (the superblock on
    /// disk still reaches it) and comes back only with a commit. As the
    /// kernel's flush_space commits the transaction before it answers
    /// ENOSPC, this commits when a commit could give space back (the
    /// trees changed, or space is pinned); whether it did. The caller
    /// tries once more.
    pub fn commit_for_space(&mut self) -> Result<bool> {
        if !self.changed() && self.t.deferred.is_none() && self.t.alloc.pinned_bytes() == 0 {
            return Ok(false);
        }
        match self.commit() {
            // Made, without dirty data that has no room: space may be
            // back all the same.
            Err(Error::NoSpace(_)) if self.aborted.is_none() => Ok(true),
            r => r.map(|()| true),
        }
    }

    /// Before a change of the trees: room for the tree blocks it may add
    /// and for those the commit after it adds. The kernel reserves
    /// metadata space before each change (nodesize x BTRFS_MAX_LEVEL x 2
    /// per item, and a global reserve for commits); changes here are one
    /// at a time, so the room is looked at rather than held. Without it, a
    /// commit first (space freed since the last one stays pinned until
    /// then), then ENOSPC: a change that ran out of tree blocks midway
    /// would leave a transaction no commit can write, and every change
    /// since the last commit would be lost. A `removal` (unlink, rmdir,
    /// removexattr, a truncate) needs only the commit's share: it gives
    /// space back, as the kernel lets an unlink use its global reserve.
    pub(crate) fn reserve_change(&mut self, removal: bool) -> Result<()> {
        if self.room_for_change(removal) {
            return Ok(());
        }
        if !self.log_sync_in_flight
            && self.in_flight() == 0
            && self.commit_for_space()?
            && self.room_for_change(removal)
        {
            return Ok(());
        }
        Err(Error::NoSpace(format!(
            "metadata: {} bytes of room, a change and its commit need {}",
            self.t.metadata_room(),
            self.change_needs(removal)
        )))
    }

    /// Whether metadata has room for a change and the commit after it,
    /// as things stand (no commit made for space).
    fn room_for_change(&self, removal: bool) -> bool {
        self.t.metadata_room() >= self.change_needs(removal)
    }

    /// Metadata bytes a change and the commit after it may need: a few
    /// items changed down a tree of up to 8 levels, COWed (none for a
    /// removal); the commit's extent, free-space and root tree updates,
    /// more with every extent whose references it changes (the kernel's
    /// delayed refs reservation): unlinks of many small files free many
    /// extents, and the commit COWs leaves of the extent, csum and
    /// free-space trees for them. Half a block per extent is what
    /// unlinking every other 4 KiB file of a full 128 MiB image took
    /// (fstests generic/416; a quarter ran out).
    fn change_needs(&self, removal: bool) -> u64 {
        let ns = self.t.nodesize() as u64;
        let change = if removal { 0 } else { 4 * 8 * 2 * ns };
        let refs = self.t.pending_ref_heads() as u64 / 2;
        change + (self.t.dirty_blocks() as u64 / 2 + refs + 32) * ns
    }

    /// Whether the trees changed since the last commit.
    pub(crate) fn changed(&self) -> bool {
        self.t.mutations() != self.committed_mutations
    }

    /// At unmount: orphans still open are deleted, everything committed
    /// (nothing is written when nothing changed and no log is on disk).
    ///
    /// After it returns Ok, the filesystem is closed: reads go on, every
    /// change, commit and log sync is refused (EROFS), and a second
    /// unmount does nothing. A failed final commit leaves it open and
    /// read-only, as any failed commit. One made without dirty data that
    /// found no room closes it and returns that NoSpace.
    pub fn unmount(&mut self) -> Result<()> {
        if self.aborted.is_some() || self.unmounted {
            return Ok(());
        }
        if self.in_flight() > 0 || self.log_sync_in_flight {
            // Their writes could land after the final commit.
            return Err(Error::Invalid(
                "unmount with a direct write, writeback or log sync in flight".into(),
            ));
        }
        let orphans: Vec<InodeId> = self.orphans.drain().collect();
        for id in orphans {
            self.drop_orphan(id)?;
        }
        if !self.dirty.is_empty() || self.changed() || !self.log.is_empty(&self.t) {
            match self.commit() {
                // Made, without the dirty data that had no room: closed
                // all the same, and the caller hears what was left out.
                Err(e @ Error::NoSpace(_)) if self.aborted.is_none() => {
                    self.wait_committed()?;
                    self.unmounted = true;
                    return Err(e);
                }
                r => r?,
            }
        }
        // A periodic commit's superblock is on disk before the mount
        // says it is done.
        self.wait_committed()?;
        self.unmounted = true;
        Ok(())
    }

    /// The mount is gone: other writers of the image may wait for this
    /// one's last commit instead of refusing ([`crate::io::claim`]).
    pub fn mark_ending(&self) {
        for d in self.t.info.devices.values() {
            d.dev().mark_ending();
        }
    }

    /// After the final commit ([`RwFs::unmount`]), or once a failed commit
    /// made the filesystem read-only (nothing is written then either):
    /// lets every device go, its claim and its descriptors
    /// ([`crate::io::dev::BlockDev::release_claim`]), so that the next
    /// user need not wait for this process to end. Nothing is read or
    /// written after it.
    pub fn release_claims(&self) {
        if self.unmounted || self.aborted.is_some() {
            for d in self.t.info.devices.values() {
                d.dev().release_claim();
            }
        }
    }

    /// Why the filesystem is read-only after a failed commit, if it is.
    pub fn aborted(&self) -> Option<&str> {
        self.aborted.as_deref()
    }

    /// The running transaction's handle of inode `id`, for its changes.
    pub(crate) fn inode_mut(&mut self, id: InodeId) -> crate::inode::InodeMut<'_> {
        self.t.inode_mut(id.subvol, id.ino)
    }

    /// Whether the final commit was made ([`RwFs::unmount`]).
    pub fn unmounted(&self) -> bool {
        self.unmounted
    }

    /// The final commit was made and nothing changed since: an fsync is
    /// answered by it.
    pub(crate) fn final_commit_has_all(&self) -> bool {
        self.unmounted && !self.changed()
    }

    /// Refuses what would change or write the filesystem after its final
    /// commit ([`RwFs::unmount`]).
    pub(crate) fn check_mounted(&self) -> Result<()> {
        if self.unmounted {
            return Err(Error::ReadOnly(
                "the filesystem is unmounted (its final commit was made)".into(),
            ));
        }
        Ok(())
    }

    /// A sync of the whole filesystem, as the kernel's BTRFS_IOC_SYNC
    /// (`btrfs filesystem sync`): everything written back and committed,
    /// on disk when this returns. When nothing changed since the last
    /// commit (and no log tree waits to be folded in) it only waits for
    /// that commit's superblock. Returns the generation on disk.
    pub fn sync_fs(&mut self) -> Result<u64> {
        if self.dirty.is_empty() && !self.changed() && self.log.is_empty(&self.t) {
            if let Some(why) = &self.aborted {
                return Err(Error::ReadOnly(format!(
                    "the filesystem is read-only after a failed commit: {why}"
                )));
            }
            self.wait_committed()?;
        } else {
            self.commit()?;
        }
        Ok(self.t.info.sb.generation)
    }

    /// FITRIM: the free space of block groups in `r` and the devices'
    /// unallocated space discarded ([`crate::tx::trim`]); the bytes given
    /// back. A range shorter than a sector, or whose end overflows, is
    /// EINVAL, as the kernel's btrfs_ioctl_fitrim answers; so is a start
    /// past both the devices' bytes and the last block group, where the
    /// kernel answers EINVAL only for a start of 2^64 - 1 (fstests'
    /// generic/260 asks it of every filesystem but btrfs). Space freed
    /// since the last commit is still pinned, and is trimmed after it.
    pub fn trim(&mut self, r: crate::tx::trim::TrimRange) -> Result<u64> {
        self.check_mounted()?;
        if let Some(why) = &self.aborted {
            return Err(Error::ReadOnly(format!(
                "the filesystem is read-only after a failed commit: {why}"
            )));
        }
        if r.len < self.t.info.sectorsize as u64 {
            return Err(Error::Invalid(format!(
                "FITRIM of {} bytes: less than a sector",
                r.len
            )));
        }
        if r.len != u64::MAX && r.start.checked_add(r.len).is_none() {
            return Err(Error::Invalid(format!(
                "FITRIM of {} bytes at {}: past 2^64",
                r.len, r.start
            )));
        }
        let end = self.t.alloc.groups_end().max(self.t.info.sb.total_bytes);
        if r.start >= end {
            return Err(Error::Invalid(format!(
                "FITRIM from {}: past the filesystem's end at {end}",
                r.start
            )));
        }
        self.t.trim(r)
    }

    /// The filesystem's label (FS_IOC_GETFSLABEL), as the superblock
    /// holds it.
    pub fn label(&self) -> Vec<u8> {
        let l = &self.t.info.sb.label;
        l[..l.iter().position(|&b| b == 0).unwrap_or(l.len())].to_vec()
    }

    /// FS_IOC_SETFSLABEL: at most 255 bytes, on disk when this returns
    /// (the kernel's btrfs_ioctl_set_fslabel commits).
    pub fn set_label(&mut self, label: &[u8]) -> Result<()> {
        self.check_mounted()?;
        self.writable(InodeId {
            subvol: FS_TREE_OBJECTID,
            ino: FIRST_INODE,
        })?;
        self.t.set_label(label)?;
        self.sync_fs().map(|_| ())
    }

    /// BTRFS_IOC_WAIT_SYNC: returns when transaction `transid` (0: the
    /// last one committed) is on disk. The kernel waits for that
    /// transaction's commit; the one still open is committed now. A
    /// transaction not begun yet is EINVAL, as in the kernel.
    pub fn wait_sync(&mut self, transid: u64) -> Result<()> {
        let on_disk = self.t.info.sb.generation;
        if transid > self.t.transid {
            return Err(Error::Invalid(format!(
                "wait for transaction {transid}: the newest is {}",
                self.t.transid
            )));
        }
        if transid == 0 || transid <= on_disk {
            return self.wait_committed();
        }
        self.sync_fs().map(|_| ())
    }

    /// The log statistics.
    pub fn log_stats(&self) -> crate::tree_log::write::LogStats {
        self.log.stats.clone()
    }

    /// What statfs(2) shows: the devices' bytes, and those not used by
    /// extents (nor promised to dirty data).
    pub fn statfs(&self) -> StatFs {
        let ss = self.sectorsize();
        let sb = &self.t.info.sb;
        let used = self.t.alloc.used_bytes() + self.dirty_bytes;
        let free = sb.total_bytes.saturating_sub(used);
        let avail = self
            .t
            .data_space_estimate()
            .saturating_sub(self.dirty_bytes)
            .min(free);
        StatFs {
            blocks: sb.total_bytes / ss,
            bfree: free / ss,
            bavail: avail / ss,
            bsize: ss as u32,
        }
    }

    /// Reports (and clears) a writeback failure since the last fsync.
    pub(crate) fn take_wb_error(&mut self) -> Result<()> {
        match self.wb_error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[allow(dead_code)]
fn _assert_sync() {
    fn s<T: Sync>() {}
    s::<RwFs>();
}
