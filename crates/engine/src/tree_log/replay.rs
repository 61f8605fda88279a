//! Replaying one log tree into its subvolume, stage by stage (the
//! kernel's replay_one_buffer and what it calls: overwrite_item,
//! replay_xattr_deletes, replay_dir_deletes, replay_one_name,
//! add_inode_ref, replay_one_extent, fixup_inode_link_counts).

use super::LogTree;
use crate::error::{Error, Result};
use crate::inode::file_type;
use crate::inode::now;
use crate::tx::delayed_ref::Backref;
use crate::tx::Trans;
use std::collections::{BTreeMap, BTreeSet};
use ubtrfs_format::checksum::name_hash;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{
    dir_index_key, dir_item_key, parse_dir_entries, parse_inode_extrefs, parse_inode_refs,
    DirEntry, FileExtent, FileExtentKind, InodeItem, Timespec,
};
use ubtrfs_format::Key;

/// The kernel's LOG_WALK_REPLAY_* stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Inode items (and the deletions they imply).
    Inodes,
    /// Directory index entries.
    DirIndex,
    /// Everything else, then link counts.
    All,
}

/// State kept across stages and log trees.
pub struct State {
    /// Logged data extents held out of the free space (no extent item).
    held: BTreeMap<u64, u64>,
    /// Held extents replay kept: their extent items are being made.
    pub claimed: BTreeSet<u64>,
    /// Per subvolume: inodes whose link counts are recounted at the end.
    fixups: super::Fixups,
    /// Per subvolume: logged inodes with no link (O_TMPFILE), skipped.
    ignored: BTreeMap<u64, BTreeSet<u64>>,
    pub orphans: usize,
    /// The time of the replay (ctime of unlinked inodes).
    time: Timespec,
}

impl State {
    pub fn new(held: BTreeMap<u64, u64>) -> State {
        State {
            held,
            claimed: BTreeSet::new(),
            fixups: BTreeMap::new(),
            ignored: BTreeMap::new(),
            orphans: 0,
            time: now(),
        }
    }
}

fn is_dir(mode: u32) -> bool {
    mode & 0o170000 == 0o040000
}

fn is_reg(mode: u32) -> bool {
    mode & 0o170000 == 0o100000
}

fn corrupt(at: String, what: impl Into<String>) -> Error {
    Error::corrupt(at, what)
}

/// Names in a DIR_ITEM / DIR_INDEX / XATTR_ITEM item.
fn entries<'a>(at: &dyn Fn() -> String, d: &'a [u8]) -> Result<Vec<DirEntry<'a>>> {
    parse_dir_entries(d).map_err(|e| Error::format(at(), e))
}

/// Whether replay of a back reference item goes on.
enum Flow {
    Go,
    Stop,
}

/// One back reference: (parent, name, index).
type Ref = (u64, Vec<u8>, u64);

fn refs_of(k: &Key, d: &[u8], at: &dyn Fn() -> String) -> Result<Vec<Ref>> {
    let refs = if k.item_type == INODE_REF {
        parse_inode_refs(k, d)
    } else {
        parse_inode_extrefs(d)
    }
    .map_err(|e| Error::format(at(), e))?;
    Ok(refs
        .iter()
        .map(|r| (r.parent, r.name.to_vec(), r.index))
        .collect())
}

pub struct Replayer<'a> {
    t: &'a mut Trans,
    log: &'a LogTree,
    st: &'a mut State,
    dest: u64,
}

impl<'a> Replayer<'a> {
    pub fn new(t: &'a mut Trans, log: &'a LogTree, st: &'a mut State) -> Self {
        let dest = log.dest;
        Replayer { t, log, st, dest }
    }

    /// Where in the log (the caller names the log tree).
    fn at(&self, k: &Key) -> String {
        format!("log item {k}")
    }

    /// One stage over every item of the log, in key order.
    pub fn run(&mut self, stage: Stage) -> Result<()> {
        let log = self.log;
        for (k, d) in &log.items {
            let ignored = self
                .st
                .ignored
                .get(&self.dest)
                .is_some_and(|s| s.contains(&k.objectid));
            match (stage, k.item_type) {
                (Stage::Inodes, INODE_ITEM) => self.replay_inode(k, d)?,
                _ if ignored => {}
                (Stage::DirIndex, DIR_INDEX) => self.replay_dir_index(k, d)?,
                (Stage::All, XATTR_ITEM) => self.overwrite(k, d)?,
                (Stage::All, INODE_REF | INODE_EXTREF) => self.add_inode_ref(k, d)?,
                (Stage::All, EXTENT_DATA) => self.replay_extent(k, d)?,
                _ => {}
            }
        }
        if stage == Stage::All {
            self.fixup_link_counts()?;
        }
        Ok(())
    }

    fn fixup(&mut self, ino: u64) {
        self.st.fixups.entry(self.dest).or_default().insert(ino);
    }

    fn inode(&mut self, ino: u64) -> Result<Option<InodeItem>> {
        self.t.inode(self.dest, ino)
    }

    /// The inode `ino` of the subvolume, which must exist.
    fn need_inode(&mut self, ino: u64, why: &str) -> Result<InodeItem> {
        self.inode(ino)?.ok_or_else(|| {
            corrupt(
                format!("log replay of inode {ino}"),
                format!(
                    "{why}: the inode exists neither in the log nor in subvolume {}",
                    self.dest
                ),
            )
        })
    }

    /// Copies a log item over the subvolume's (unless equal).
    fn overwrite(&mut self, k: &Key, d: &[u8]) -> Result<()> {
        if self.t.lookup(self.dest, k)?.as_deref() == Some(d) {
            return Ok(());
        }
        self.t.put_item(self.dest, *k, d.to_vec())
    }

    // ------------------------------------------------------------ stage 1

    fn replay_inode(&mut self, k: &Key, d: &[u8]) -> Result<()> {
        let ino = k.objectid;
        let src = InodeItem::parse(d).map_err(|e| Error::format(self.at(k), e))?;
        if src.nlink == 0 {
            // A tmpfile logged by an older kernel: never reachable.
            self.st.ignored.entry(self.dest).or_default().insert(ino);
            return Ok(());
        }
        self.replay_xattr_deletes(ino)?;
        if is_dir(src.mode) {
            self.replay_dir_deletes(ino, false)?;
        }
        self.overwrite_inode(ino, d, src)?;
        if is_reg(src.mode) {
            // Extents past the size go before the logged ones come in
            // (prealloc past EOF that the log has stays).
            let mut ii = self.need_inode(ino, "truncate to the logged size")?;
            let ss = self.t.sectorsize() as u64;
            let from = ii.size.next_multiple_of(ss);
            let found = self
                .t
                .inode_mut(self.dest, ino)
                .drop_extents(from, u64::MAX)?;
            if found > 0 {
                ii.nbytes = ii.nbytes.saturating_sub(found);
                ii.transid = self.t.transid;
                self.t.inode_mut(self.dest, ino).put(&ii)?;
            }
        }
        self.fixup(ino);
        Ok(())
    }

    /// The kernel's overwrite_item for inode items: nbytes is rebuilt as
    /// extents are replayed, a directory's size as names are, an item
    /// logged with generation 0 only says the inode exists.
    fn overwrite_inode(&mut self, ino: u64, d: &[u8], mut src: InodeItem) -> Result<()> {
        let key = InodeItem::key(ino);
        match self.t.lookup(self.dest, &key)? {
            Some(dst_bytes) if dst_bytes == d => return Ok(()),
            Some(dst_bytes) => {
                let mut dst = InodeItem::parse(&dst_bytes)
                    .map_err(|e| Error::format(format!("tree {} inode {ino}", self.dest), e))?;
                if src.generation == 0 {
                    if is_reg(src.mode) && is_reg(dst.mode) && src.size != 0 {
                        dst.size = src.size;
                        self.t.inode_mut(self.dest, ino).put(&dst)?;
                    }
                    return Ok(());
                }
                src.nbytes = dst.nbytes;
                if is_dir(src.mode) {
                    src.size = if is_dir(dst.mode) { dst.size } else { 0 };
                }
            }
            None => {
                src.nbytes = 0;
                if is_dir(src.mode) {
                    src.size = 0;
                }
            }
        }
        if src.generation == 0 {
            src.generation = self.t.transid;
        }
        self.t.inode_mut(self.dest, ino).put(&src)
    }

    /// Xattrs of `ino` the log does not have go.
    fn replay_xattr_deletes(&mut self, ino: u64) -> Result<()> {
        let lo = Key::new(ino, XATTR_ITEM, 0);
        let hi = Key::new(ino, XATTR_ITEM, u64::MAX);
        for (k, d) in self.t.items_in(self.dest, &lo, &hi)? {
            let at = || format!("tree {} key {k}", self.dest);
            let names: Vec<Vec<u8>> = entries(&at, &d)?.iter().map(|e| e.name.to_vec()).collect();
            for name in names {
                if !self.log_has_name(&Key::new(ino, XATTR_ITEM, name_hash(&name)), &name)? {
                    self.t.del_dir_name(self.dest, &k, &name)?;
                }
            }
        }
        Ok(())
    }

    /// Whether the log's DIR_ITEM / DIR_INDEX / XATTR_ITEM at `key` has
    /// an entry named `name`.
    fn log_has_name(&self, key: &Key, name: &[u8]) -> Result<bool> {
        let Some(d) = self.log.get(key) else {
            return Ok(false);
        };
        let at = || self.at(key);
        Ok(entries(&at, d)?.iter().any(|e| e.name == name))
    }

    /// Names of directory `dir` in the ranges the log is authoritative for
    /// (its DIR_LOG_INDEX items; everything with `all`) that the log does
    /// not have are unlinked.
    fn replay_dir_deletes(&mut self, dir: u64, all: bool) -> Result<()> {
        if self.inode(dir)?.is_none() {
            return Ok(());
        }
        let ranges: Vec<(u64, u64)> = if all {
            vec![(0, u64::MAX)]
        } else {
            let lo = Key::new(dir, DIR_LOG_INDEX, 0);
            let hi = Key::new(dir, DIR_LOG_INDEX, u64::MAX);
            let mut v = Vec::new();
            for (k, d) in self.log.range(lo, hi) {
                let end = d
                    .get(..8)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
                    .ok_or_else(|| {
                        corrupt(self.at(k), "DIR_LOG_INDEX item shorter than 8 bytes")
                    })?;
                v.push((k.offset, end));
            }
            v
        };
        for (start, end) in ranges {
            let lo = Key::new(dir, DIR_INDEX, start);
            let hi = Key::new(dir, DIR_INDEX, end);
            for (k, d) in self.t.items_in(self.dest, &lo, &hi)? {
                let at = || format!("tree {} key {k}", self.dest);
                let es = entries(&at, &d)?;
                let Some(e) = es.first() else { continue };
                let name = e.name.to_vec();
                let loc = e.location;
                if !all && self.log_has_name(&k, &name)? {
                    continue;
                }
                self.unlink_entry(dir, loc, &name, &k)?;
            }
        }
        Ok(())
    }

    /// Unlinks the name `name` in `dir` that points to `loc` (the
    /// kernel's drop_one_dir_item): the inode's link count is recounted.
    fn unlink_entry(&mut self, dir: u64, loc: Key, name: &[u8], k: &Key) -> Result<()> {
        if loc.item_type != INODE_ITEM {
            return Err(Error::Unsupported(format!(
                "tree {} key {k}: replay would unlink the subvolume link {:?}",
                self.dest,
                String::from_utf8_lossy(name)
            )));
        }
        self.need_inode(loc.objectid, "unlink of a name the log dropped")?;
        self.fixup(loc.objectid);
        self.unlink(dir, loc.objectid, name)
    }

    // ------------------------------------------------------------ stage 2

    /// The entry of `name` in the subvolume's item at `key`, if any.
    fn dest_entry(&mut self, key: &Key, name: &[u8]) -> Result<Option<(Key, u8)>> {
        let Some(d) = self.t.lookup(self.dest, key)? else {
            return Ok(None);
        };
        let at = || format!("tree {} key {key}", self.dest);
        Ok(entries(&at, &d)?
            .iter()
            .find(|e| e.name == name)
            .map(|e| (e.location, e.file_type)))
    }

    /// A logged directory index entry (the kernel's replay_one_name).
    fn replay_dir_index(&mut self, k: &Key, d: &[u8]) -> Result<()> {
        let dir = k.objectid;
        let at = || self.at(k);
        let es = entries(&at, d)?;
        let e = es
            .first()
            .ok_or_else(|| corrupt(self.at(k), "empty DIR_INDEX item"))?;
        let (name, loc, ftype) = (e.name.to_vec(), e.location, e.file_type);
        crate::fs::check_entry_name(&name).map_err(|why| corrupt(self.at(k), why))?;
        self.need_inode(dir, "directory of a logged entry")?;
        let exists = loc.item_type == INODE_ITEM && self.inode(loc.objectid)?.is_some();
        let mut matches = 0;
        for key in [dir_item_key(dir, &name), dir_index_key(dir, k.offset)] {
            if let Some((dloc, dtype)) = self.dest_entry(&key, &name)? {
                if dloc == loc && dtype == ftype {
                    matches += 1;
                } else if exists {
                    self.unlink_entry(dir, dloc, &name, &key)?;
                }
            }
        }
        if matches == 2 {
            return Ok(());
        }
        // A name the log also has as a back reference is added then.
        let rkey = Key::new(loc.objectid, INODE_REF, dir);
        if self.log_ref_has(&rkey, dir, &name)? {
            return Ok(());
        }
        // (The kernel looks for the extended ref under this same offset.)
        let xkey = Key::new(loc.objectid, INODE_EXTREF, dir);
        if self.log_ref_has(&xkey, dir, &name)? {
            return Ok(());
        }
        if !exists {
            return Ok(());
        }
        let added = self.add_link(dir, loc.objectid, &name, true, k.offset)?;
        if added && ftype != FT_DIR {
            self.fixup(loc.objectid);
        }
        Ok(())
    }

    /// Whether the log's INODE_REF / INODE_EXTREF item at `key` holds
    /// `name` in `parent` (the kernel's backref_in_log).
    fn log_ref_has(&self, key: &Key, parent: u64, name: &[u8]) -> Result<bool> {
        let Some(d) = self.log.get(key) else {
            return Ok(false);
        };
        let at = || self.at(key);
        Ok(refs_of(key, d, &at)?
            .iter()
            .any(|(p, n, _)| n == name && (key.item_type == INODE_REF || *p == parent)))
    }

    /// Links `ino` as `name` in `dir` at `index` (the kernel's
    /// btrfs_add_link during replay: directory times stay); false when
    /// the name or index is taken.
    fn add_link(
        &mut self,
        dir: u64,
        ino: u64,
        name: &[u8],
        backref: bool,
        index: u64,
    ) -> Result<bool> {
        let ii = self.need_inode(ino, "link")?;
        if self.dest_entry(&dir_item_key(dir, name), name)?.is_some()
            || self
                .t
                .lookup(self.dest, &dir_index_key(dir, index))?
                .is_some()
        {
            return Ok(false);
        }
        if backref {
            if self.t.inode_ref_exists(self.dest, ino, dir, name, false)?
                || self.t.inode_ref_exists(self.dest, ino, dir, name, true)?
            {
                return Ok(false);
            }
            self.t
                .inode_mut(self.dest, ino)
                .add_inode_ref(dir, name, index)?;
        }
        self.t.inode_mut(self.dest, dir).add_dir_entry(
            name,
            InodeItem::key(ino),
            file_type(ii.mode),
            index,
            None,
        )?;
        Ok(true)
    }

    // ------------------------------------------------------------ stage 3

    /// A logged INODE_REF / INODE_EXTREF item (the kernel's add_inode_ref).
    fn add_inode_ref(&mut self, k: &Key, d: &[u8]) -> Result<()> {
        let ino = k.objectid;
        let at = || self.at(k);
        let refs = refs_of(k, d, &at)?;
        for (parent, name, _) in &refs {
            // A subvolume's root directory names itself "..".
            if !(*parent == k.objectid && name == b"..") {
                crate::fs::check_entry_name(name).map_err(|why| corrupt(self.at(k), why))?;
            }
        }
        let extref = k.item_type == INODE_EXTREF;
        let first_parent = refs.first().map_or(k.offset, |r| r.0);
        if self.inode(first_parent)?.is_none() {
            // The parent was not logged: the link count fixup sees to it.
            return Ok(());
        }
        self.need_inode(ino, "logged back reference")?;
        let mut search_done = false;
        for (parent, name, index) in &refs {
            if self.inode(*parent)?.is_none() {
                return Ok(());
            }
            if self.inode_in_dir(*parent, ino, *index, name)? {
                continue;
            }
            if !search_done {
                match self.resolve_conflicts(*parent, ino, *index, name, &mut search_done)? {
                    Flow::Go => {}
                    // The root directory's own back reference, or a name
                    // already gone (the kernel's -ENOENT): stop here.
                    Flow::Stop => return Ok(()),
                }
            }
            if self
                .t
                .inode_ref_exists(self.dest, ino, *parent, name, extref)?
                && !self.try_unlink(*parent, ino, name)?
            {
                return Ok(());
            }
            // Another inode's entry with this name goes first.
            if let Some((oloc, _)) = self.dest_entry(&dir_item_key(*parent, name), name)? {
                let dk = dir_item_key(*parent, name);
                self.unlink_entry(*parent, oloc, name, &dk)?;
            }
            self.add_link(*parent, ino, name, false, *index)?;
        }
        if !self.unlink_old_refs(k, &refs)? {
            return Ok(());
        }
        self.overwrite(k, d)
    }

    /// Whether `dir` has `name` at `index` and by name, both for `ino`.
    fn inode_in_dir(&mut self, dir: u64, ino: u64, index: u64, name: &[u8]) -> Result<bool> {
        let by_index = self.dest_entry(&dir_index_key(dir, index), name)?;
        if by_index.is_none_or(|(l, _)| l.objectid != ino) {
            return Ok(false);
        }
        let by_name = self.dest_entry(&dir_item_key(dir, name), name)?;
        Ok(by_name.is_some_and(|(l, _)| l.objectid == ino))
    }

    /// The kernel's __add_inode_ref: names of `ino` in `parent` the log no
    /// longer has are unlinked, and entries in `parent` that take the
    /// logged name or index go. True for the root directory's own
    /// reference (nothing to do).
    fn resolve_conflicts(
        &mut self,
        parent: u64,
        ino: u64,
        index: u64,
        name: &[u8],
        search_done: &mut bool,
    ) -> Result<Flow> {
        // Old-style refs in this parent.
        let rkey = Key::new(ino, INODE_REF, parent);
        if let Some(d) = self.t.lookup(self.dest, &rkey)? {
            if ino == parent {
                return Ok(Flow::Stop);
            }
            let at = || format!("tree {} key {rkey}", self.dest);
            for (_, victim, _) in refs_of(&rkey, &d, &at)? {
                if !self.log_ref_has(&rkey, parent, &victim)? {
                    self.fixup(ino);
                    if !self.try_unlink(parent, ino, &victim)? {
                        return Ok(Flow::Stop);
                    }
                }
            }
            *search_done = true;
        }
        // Extended refs sharing the logged name's item.
        let xkey = Key::new(
            ino,
            INODE_EXTREF,
            ubtrfs_format::checksum::extref_hash(parent, name),
        );
        if let Some(d) = self.t.lookup(self.dest, &xkey)? {
            let at = || format!("tree {} key {xkey}", self.dest);
            let all = refs_of(&xkey, &d, &at)?;
            if all.iter().any(|(p, n, _)| *p == parent && n == name) {
                for (p, victim, _) in all.iter().filter(|(p, _, _)| *p == parent) {
                    let vkey = Key::new(
                        ino,
                        INODE_EXTREF,
                        ubtrfs_format::checksum::extref_hash(*p, victim),
                    );
                    if !self.log_ref_has(&vkey, *p, victim)? {
                        if self.inode(*p)?.is_none() {
                            return Ok(Flow::Stop);
                        }
                        self.fixup(ino);
                        if !self.try_unlink(*p, ino, victim)? {
                            return Ok(Flow::Stop);
                        }
                    }
                }
                *search_done = true;
            }
        }
        // An entry with the logged index, or the logged name, goes.
        for key in [dir_index_key(parent, index), dir_item_key(parent, name)] {
            if let Some((loc, _)) = self.dest_entry(&key, name)? {
                self.unlink_entry(parent, loc, name, &key)?;
            }
        }
        Ok(Flow::Go)
    }

    /// Unlinks `name` of `ino` from `dir` as the kernel's replay does: the
    /// inode's ctime becomes the time of the replay, the directory keeps
    /// the times the log gave it (what the kernel shows after its replay).
    fn unlink(&mut self, dir: u64, ino: u64, name: &[u8]) -> Result<()> {
        self.t.unlink_inode(self.dest, dir, ino, name, None)?;
        let mut ii = self.need_inode(ino, "unlink")?;
        ii.ctime = self.st.time;
        self.t.inode_mut(self.dest, ino).put(&ii)
    }

    /// Unlinks `name` of `ino` from `dir`; false (nothing done) when `dir`
    /// has no such name (the kernel's -ENOENT, which ends the replay of
    /// the back reference item).
    fn try_unlink(&mut self, dir: u64, ino: u64, name: &[u8]) -> Result<bool> {
        if self.dest_entry(&dir_item_key(dir, name), name)?.is_none() {
            return Ok(false);
        }
        self.unlink(dir, ino, name)?;
        Ok(true)
    }

    /// The kernel's unlink_old_inode_refs: names in the subvolume's item
    /// at `k` that the logged item does not have are unlinked. False when
    /// a parent is missing (the kernel then leaves the item alone).
    fn unlink_old_refs(&mut self, k: &Key, logged: &[Ref]) -> Result<bool> {
        let ino = k.objectid;
        let Some(cur) = self.t.lookup(self.dest, k)? else {
            return Ok(true);
        };
        let at = || format!("tree {} key {k}", self.dest);
        for (parent, name, _) in refs_of(k, &cur, &at)? {
            let in_log = logged
                .iter()
                .any(|(p, n, _)| *n == name && (k.item_type == INODE_REF || *p == parent));
            if in_log {
                continue;
            }
            if self.inode(parent)?.is_none() {
                return Ok(false);
            }
            self.fixup(ino);
            if !self.try_unlink(parent, ino, &name)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// A logged file extent (the kernel's replay_one_extent).
    fn replay_extent(&mut self, k: &Key, d: &[u8]) -> Result<()> {
        let ino = k.objectid;
        let start = k.offset;
        let fe = FileExtent::parse(d).map_err(|e| Error::format(self.at(k), e))?;
        let ss = self.t.sectorsize() as u64;
        let (extent_end, mut nbytes) = match fe.kind {
            FileExtentKind::Extent {
                disk_bytenr,
                num_bytes,
                ..
            } => (
                start
                    .checked_add(num_bytes)
                    .ok_or_else(|| corrupt(self.at(k), "extent end past 2^64"))?,
                if disk_bytenr == 0 { 0 } else { num_bytes },
            ),
            FileExtentKind::Inline { .. } => (
                start
                    .checked_add(fe.ram_bytes)
                    .and_then(|e| e.checked_next_multiple_of(ss))
                    .ok_or_else(|| corrupt(self.at(k), "inline extent end past 2^64"))?,
                fe.ram_bytes,
            ),
        };
        self.need_inode(ino, "logged file extent")?;
        let regular = matches!(fe.kind, FileExtentKind::Extent { .. });
        if regular {
            if let Some(cur) = self.t.lookup(self.dest, k)? {
                let n = d.len().min(53);
                if cur.len() >= n && cur[..n] == d[..n] {
                    return Ok(());
                }
            }
        }
        let found = self
            .t
            .inode_mut(self.dest, ino)
            .drop_extents(start, extent_end)?;
        match fe.kind {
            FileExtentKind::Extent {
                disk_bytenr,
                disk_num_bytes,
                offset,
                ..
            } => {
                let no_holes = self.t.info.sb.incompat_flags & INCOMPAT_NO_HOLES != 0;
                if disk_bytenr == 0 && no_holes {
                    nbytes = 0;
                } else {
                    self.t.insert_item(self.dest, *k, d.to_vec())?;
                }
                if disk_bytenr != 0 {
                    self.ref_extent(
                        k,
                        ino,
                        disk_bytenr,
                        disk_num_bytes,
                        start.wrapping_sub(offset),
                    )?;
                    if let Some((cs, ce)) = fe
                        .csum_range()
                        .map_err(|e| corrupt(self.at(k), e.to_string()))?
                    {
                        self.copy_csums(cs, ce)?;
                    }
                }
            }
            FileExtentKind::Inline { .. } => self.overwrite(k, d)?,
        }
        let mut ii = self.need_inode(ino, "logged file extent")?;
        ii.nbytes = ii.nbytes.saturating_add(nbytes).saturating_sub(found);
        ii.transid = self.t.transid;
        self.t.inode_mut(self.dest, ino).put(&ii)
    }

    /// A reference to data extent `bytenr` from the replayed item: an
    /// extent only the log knew gets its extent item.
    fn ref_extent(&mut self, k: &Key, ino: u64, bytenr: u64, len: u64, offset: u64) -> Result<()> {
        let backref = Backref::Data {
            root: self.dest,
            objectid: ino,
            offset,
        };
        if self.st.claimed.contains(&bytenr) {
            self.t.add_data_ref(bytenr, len, backref, false);
            return Ok(());
        }
        let key = Key::new(bytenr, EXTENT_ITEM, len);
        if self.t.lookup(EXTENT_TREE_OBJECTID, &key)?.is_some() {
            self.t.add_data_ref(bytenr, len, backref, false);
            return Ok(());
        }
        if self.st.held.get(&bytenr) != Some(&len) || bytenr.checked_add(len).is_none() {
            return Err(corrupt(
                self.at(k),
                format!(
                    "data extent {bytenr} ({len} bytes) is neither a known extent nor free space"
                ),
            ));
        }
        self.t.alloc.claim_held(bytenr, len);
        self.st.claimed.insert(bytenr);
        self.t.add_data_ref(bytenr, len, backref, true);
        Ok(())
    }

    /// The log's checksums of `[start, end)` replace the csum tree's.
    fn copy_csums(&mut self, start: u64, end: u64) -> Result<()> {
        let ss = self.t.sectorsize() as u64;
        let cs = self.t.info.csum_type.size() as u64;
        let lo = Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, 0);
        let hi = Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, end.saturating_sub(1));
        // Runs of consecutive sectors: (start, sums).
        let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
        for (k, d) in self.log.items.range(lo..=hi).rev() {
            let item_end = k.offset.saturating_add(d.len() as u64 / cs * ss);
            if item_end <= start {
                break;
            }
            let from = k.offset.max(start);
            let to = item_end.min(end);
            if from >= to {
                continue;
            }
            let a = ((from - k.offset) / ss * cs) as usize;
            let b = ((to - k.offset) / ss * cs) as usize;
            runs.push((from, d[a..b].to_vec()));
        }
        runs.reverse();
        for (at, sums) in runs {
            let len = sums.len() as u64 / cs * ss;
            self.t.delete_csums(at, len)?;
            self.t.add_csum_run(at, sums)?;
            self.t.flush_csums()?;
        }
        Ok(())
    }

    /// Deletes inode `ino` (no name left): its extents (their references),
    /// then every item it has, and an orphan item if there was one.
    fn evict(&mut self, ino: u64) -> Result<()> {
        self.t.inode_mut(self.dest, ino).drop_extents(0, u64::MAX)?;
        self.t.delete_range(
            self.dest,
            &Key::new(ino, 0, 0),
            &Key::new(ino, u8::MAX, u64::MAX),
        )?;
        self.t
            .delete_item(self.dest, &Key::new(ORPHAN_OBJECTID, ORPHAN_ITEM, ino))?;
        Ok(())
    }

    /// Link counts of every inode replay touched are their names' count;
    /// an inode left with none is deleted (a directory loses its entries
    /// first), as the kernel's fixup_inode_link_counts and the orphan
    /// cleanup after it.
    fn fixup_link_counts(&mut self) -> Result<()> {
        loop {
            let Some(ino) = self
                .st
                .fixups
                .get_mut(&self.dest)
                .and_then(|s| s.pop_last())
            else {
                return Ok(());
            };
            let mut ii = self.need_inode(ino, "link count fixup")?;
            // The kernel's link_to_fixup_dir writes every such inode (a
            // link more, taken back here): its transid is the replay's.
            let nlink = self.t.inode_refs(self.dest, ino)?.len() as u32;
            if nlink != ii.nlink || ii.transid != self.t.transid {
                ii.nlink = nlink;
                ii.transid = self.t.transid;
                self.t.inode_mut(self.dest, ino).put(&ii)?;
            }
            if nlink == 0 {
                if is_dir(ii.mode) {
                    self.replay_dir_deletes(ino, true)?;
                }
                // The kernel adds an orphan item here and its orphan
                // cleanup deletes the inode right after the replay's
                // commit; the inode goes now instead.
                self.evict(ino)?;
                self.st.orphans += 1;
            }
        }
    }
}
