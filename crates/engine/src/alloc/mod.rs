//! Extent allocation: block groups and the free space in each, kept in
//! memory for the life of a writer (the kernel's block group cache and
//! free-space cache). Space freed from extents that the last committed
//! superblock still reaches is pinned: it is not handed out again until
//! the transaction that freed it has committed.

use std::collections::BTreeMap;
use ubtrfs_format::consts::{BG_DATA, BG_METADATA, BG_SYSTEM};

/// One block group: a chunk's logical range and what is free in it.
#[derive(Debug, Clone)]
pub struct BlockGroup {
    pub start: u64,
    pub len: u64,
    pub flags: u64,
    /// Bytes allocated (the BLOCK_GROUP_ITEM's `used`).
    pub used: u64,
    /// Free ranges: start -> length, non-adjacent.
    free: BTreeMap<u64, u64>,
    /// The free-space tree needs rewriting for this group.
    pub fst_dirty: bool,
    /// The BLOCK_GROUP_ITEM needs rewriting.
    pub item_dirty: bool,
    /// Made in this transaction: its items do not exist yet.
    pub new: bool,
    /// Nothing new is allocated here (its extents are moving out).
    pub ro: bool,
}

impl BlockGroup {
    /// A block group that is entirely free.
    pub fn new(start: u64, len: u64, flags: u64) -> Self {
        let mut free = BTreeMap::new();
        free.insert(start, len);
        BlockGroup {
            start,
            len,
            flags,
            used: 0,
            free,
            fst_dirty: true,
            item_dirty: true,
            new: true,
            ro: false,
        }
    }

    /// A committed block group whose free ranges are still to be given.
    pub fn committed(start: u64, len: u64, flags: u64, used: u64) -> Self {
        BlockGroup {
            start,
            len,
            flags,
            used,
            free: BTreeMap::new(),
            fst_dirty: false,
            item_dirty: false,
            new: false,
            ro: false,
        }
    }

    pub fn end(&self) -> u64 {
        self.start + self.len
    }

    /// Free ranges in address order.
    pub fn free_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free.iter().map(|(&s, &l)| (s, l))
    }

    pub fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }

    /// Marks `[start, start+len)` free, merging with neighbours.
    pub fn add_free(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        let (mut s, mut l) = (start, len);
        if let Some((&ps, &pl)) = self.free.range(..s).next_back() {
            debug_assert!(ps + pl <= s, "double free at {s}");
            if ps + pl == s {
                self.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(s + l)) {
            self.free.remove(&(s + l));
            l += nl;
        }
        self.free.insert(s, l);
        self.fst_dirty = true;
    }

    /// Removes `[start, start+len)` from the free ranges; false when some
    /// of it is not free.
    pub fn remove_free(&mut self, start: u64, len: u64) -> bool {
        let Some((&fs, &fl)) = self.free.range(..=start).next_back() else {
            return false;
        };
        if fs + fl < start + len {
            return false;
        }
        self.free.remove(&fs);
        if fs < start {
            self.free.insert(fs, start - fs);
        }
        if start + len < fs + fl {
            self.free.insert(start + len, fs + fl - start - len);
        }
        self.fst_dirty = true;
        true
    }

    /// Takes whatever part of `[start, start+len)` is free out of the free
    /// ranges (superblock stripes: never allocated, never free).
    pub fn exclude(&mut self, start: u64, len: u64) {
        let end = start + len;
        let hits: Vec<(u64, u64)> = self
            .free
            .range(..end)
            .filter(|(&s, &l)| s + l > start)
            .map(|(&s, &l)| (s, l))
            .collect();
        for (s, l) in hits {
            self.free.remove(&s);
            if s < start {
                self.free.insert(s, start - s);
            }
            if s + l > end {
                self.free.insert(end, s + l - end);
            }
            self.fst_dirty = true;
        }
    }

    /// First free range of `len` bytes at an `align`-aligned address at or
    /// after `hint`, or anywhere when none is after it.
    fn find(&self, len: u64, align: u64, hint: u64) -> Option<u64> {
        let fit = |s: u64, l: u64, from: u64| {
            let a = s.max(from).next_multiple_of(align);
            (a + len <= s + l).then_some(a)
        };
        let first = self.free.range(..=hint).next_back().map_or(0, |(&s, _)| s);
        self.free
            .range(first..)
            .find_map(|(&s, &l)| fit(s, l, hint))
            .or_else(|| self.free.iter().find_map(|(&s, &l)| fit(s, l, 0)))
    }
}

/// What kind of space an allocation is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceKind {
    Data,
    Metadata,
    System,
}

impl SpaceKind {
    pub fn bg_flag(self) -> u64 {
        match self {
            SpaceKind::Data => BG_DATA,
            SpaceKind::Metadata => BG_METADATA,
            SpaceKind::System => BG_SYSTEM,
        }
    }
}

/// All block groups of a filesystem, and the pinned ranges.
#[derive(Debug, Default)]
pub struct Allocator {
    pub groups: BTreeMap<u64, BlockGroup>,
    /// Freed in this transaction, still reachable from the committed
    /// superblock: (start, len).
    pinned: Vec<(u64, u64)>,
    /// Where the last allocation of each kind ended: allocations go
    /// forward, so consecutive tree blocks and file data lie in order.
    hints: [u64; 3],
    /// A log tree of this transaction holds items (in memory, or on disk
    /// already): space freed before the commit may still be what the log
    /// points to (its data extents), so it stays pinned until the commit
    /// instead of being handed out again (the kernel pins every freed
    /// extent until commit).
    pub log_holds_items: bool,
    /// Readers of an older commit ([`Allocator::hold_freed`]), and the
    /// space freed and committed meanwhile, held for them.
    readers: u32,
    held_for_readers: Vec<(u64, u64)>,
}

impl Allocator {
    fn hint_slot(kind: SpaceKind) -> usize {
        kind as usize
    }

    /// Starts of the block groups `pick` picks (a dirty flag, say), in
    /// order.
    pub fn group_starts(&self, pick: impl Fn(&BlockGroup) -> bool) -> Vec<u64> {
        self.groups
            .values()
            .filter(|g| pick(g))
            .map(|g| g.start)
            .collect()
    }

    /// Free bytes of the block groups `pick` picks.
    pub fn free_bytes_in(&self, pick: impl Fn(&BlockGroup) -> bool) -> u64 {
        self.groups
            .values()
            .filter(|g| pick(g))
            .map(|g| g.free_bytes())
            .sum()
    }

    /// The end of the last block group's logical range (0 with none).
    pub fn groups_end(&self) -> u64 {
        self.groups.values().map(|g| g.end()).max().unwrap_or(0)
    }

    /// The block group holding `bytenr`.
    pub fn group_of(&mut self, bytenr: u64) -> Option<&mut BlockGroup> {
        let (_, g) = self.groups.range_mut(..=bytenr).next_back()?;
        (bytenr < g.end()).then_some(g)
    }

    /// Allocates `len` bytes aligned to `align` for `kind`; None when no
    /// block group of that kind has room (the caller makes a new chunk).
    pub fn alloc(&mut self, kind: SpaceKind, len: u64, align: u64) -> Option<u64> {
        let (s, a) = self.find_space(kind, len, align, false)?;
        let g = self.groups.get_mut(&s).unwrap();
        let ok = g.remove_free(a, len);
        debug_assert!(ok);
        g.used += len;
        g.item_dirty = true;
        self.hints[Self::hint_slot(kind)] = a + len;
        Some(a)
    }

    /// Where `len` bytes aligned to `align` are free for `kind`: (group,
    /// address). `committed_only`: in block groups the last commit has.
    fn find_space(
        &self,
        kind: SpaceKind,
        len: u64,
        align: u64,
        committed_only: bool,
    ) -> Option<(u64, u64)> {
        let flag = kind.bg_flag();
        let hint = self.hints[Self::hint_slot(kind)];
        // Groups at or after the hint first, then the rest.
        let order = self
            .groups
            .range(..)
            .filter(|(_, g)| g.flags & flag != 0 && !g.ro && !(committed_only && g.new))
            .map(|(&s, g)| (s, g.end()))
            .collect::<Vec<_>>();
        let (after, before): (Vec<_>, Vec<_>) = order.into_iter().partition(|&(_, e)| e > hint);
        after.into_iter().chain(before).find_map(|(s, _)| {
            let g = &self.groups[&s];
            g.find(len, align, hint.max(g.start)).map(|a| (s, a))
        })
    }

    /// Takes `len` bytes of `kind` space in a committed block group out of
    /// the free space without accounting them as used (a log tree block:
    /// no extent item, and the kernel's replay finds it in free space of
    /// a block group it knows). Free again at commit, or at
    /// [`Allocator::release_held`].
    pub fn alloc_held(&mut self, kind: SpaceKind, len: u64, align: u64) -> Option<u64> {
        let (s, a) = self.find_space(kind, len, align, true)?;
        let g = self.groups.get_mut(&s).unwrap();
        let ok = g.remove_free(a, len);
        debug_assert!(ok);
        self.pinned.push((a, len));
        Some(a)
    }

    /// Gives back held space before commit (blocks of a log tree that a
    /// newer one on disk replaced).
    pub fn release_held(&mut self, start: u64, len: u64) {
        let Some(i) = self
            .pinned
            .iter()
            .position(|&(s, l)| s == start && l == len)
        else {
            return;
        };
        self.pinned.swap_remove(i);
        if let Some(g) = self.group_of(start) {
            g.add_free(start, len);
        }
    }

    /// Whether a block group was made in this transaction (its chunk is
    /// not in the committed chunk tree).
    pub fn has_new_groups(&self) -> bool {
        self.groups.values().any(|g| g.new)
    }

    /// Returns space allocated in this transaction and never committed:
    /// it may be handed out again at once (unless a log of this
    /// transaction may point to it: then it is pinned until commit).
    pub fn free_now(&mut self, start: u64, len: u64) {
        if self.log_holds_items {
            self.pin(start, len);
            return;
        }
        if let Some(g) = self.group_of(start) {
            g.add_free(start, len);
            g.used = g.used.saturating_sub(len);
            g.item_dirty = true;
        }
    }

    /// Frees space the committed superblock still reaches: accounted now,
    /// reusable after commit.
    pub fn pin(&mut self, start: u64, len: u64) {
        if let Some(g) = self.group_of(start) {
            g.used = g.used.saturating_sub(len);
            g.item_dirty = true;
            // The free-space tree records it free as of this commit.
            g.fst_dirty = true;
        }
        self.pinned.push((start, len));
    }

    /// Takes what is free of `[start, start+len)` out of the free space
    /// without accounting it as used, until commit: space the committed
    /// trees do not reach but something still reads (an unreplayed log
    /// tree's blocks and the data extents it logged). Returns whether any
    /// of it was free.
    pub fn hold(&mut self, start: u64, len: u64) -> bool {
        let Some(g) = self.group_of(start) else {
            return false;
        };
        let before = g.free_bytes();
        g.exclude(start, len);
        let took = g.free_bytes() != before;
        if took {
            self.pinned.push((start, len));
        }
        took
    }

    /// Accounts held space `[start, start+len)` as allocated (a logged
    /// data extent that replay keeps): it stays out of the free space
    /// after commit.
    pub fn claim_held(&mut self, start: u64, len: u64) {
        self.pinned.retain(|&(s, l)| !(s == start && l == len));
        if let Some(g) = self.group_of(start) {
            g.used += len;
            g.item_dirty = true;
            g.fst_dirty = true;
        }
    }

    /// Pinned ranges that fall in `[start, end)`, for writing the
    /// free-space tree (they are free once this transaction commits).
    pub fn pinned_in(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut v: Vec<_> = self
            .pinned
            .iter()
            .copied()
            .filter(|&(s, _)| s >= start && s < end)
            .collect();
        v.sort_unstable();
        v
    }

    /// After commit: pinned space becomes free space.
    pub fn unpin_all(&mut self) {
        let pinned = self.committed();
        self.unpin(pinned);
    }

    /// At a commit whose superblock is not written yet: the block group
    /// state is the committed one from here on, and what was pinned
    /// (returned) stays out of the free space until [`Allocator::unpin`]
    /// once that superblock is on disk.
    pub fn committed(&mut self) -> Vec<(u64, u64)> {
        self.log_holds_items = false;
        for g in self.groups.values_mut() {
            g.fst_dirty = false;
            g.item_dirty = false;
            g.new = false;
        }
        std::mem::take(&mut self.pinned)
    }

    /// Pinned space of a commit now on disk becomes free space, unless a
    /// reader of an older commit holds freed space ([`Allocator::hold_freed`]).
    pub fn unpin(&mut self, pinned: Vec<(u64, u64)>) {
        if self.readers > 0 {
            self.held_for_readers.extend(pinned);
            return;
        }
        for (s, l) in pinned {
            if let Some(g) = self.group_of(s) {
                g.add_free(s, l);
            }
        }
    }

    /// A reader of the last commit begins (a send from the mount reads
    /// the trees of the superblock on disk while the mount commits on):
    /// space freed from now on stays pinned until every such reader has
    /// ended, so that no block a reader may still reach is written over.
    pub fn hold_freed(&mut self) {
        self.readers += 1;
    }

    /// A reader of [`Allocator::hold_freed`] ended; the last one gives
    /// the space held back.
    pub fn release_freed(&mut self) {
        self.readers = self.readers.saturating_sub(1);
        if self.readers == 0 {
            let held = std::mem::take(&mut self.held_for_readers);
            self.unpin(held);
        }
    }

    /// The largest free range in the block groups of `kind`.
    pub fn largest_free(&self, kind: SpaceKind) -> u64 {
        let flag = kind.bg_flag();
        self.groups
            .values()
            .filter(|g| g.flags & flag != 0)
            .flat_map(|g| g.free.values().copied())
            .max()
            .unwrap_or(0)
    }

    /// Space freed in this transaction: free once it commits.
    pub fn pinned_bytes(&self) -> u64 {
        self.pinned.iter().map(|&(_, l)| l).sum()
    }

    /// Bytes allocated in every group.
    pub fn used_bytes(&self) -> u64 {
        self.groups.values().map(|g| g.used).sum()
    }

    /// Bytes allocated in the groups starting at `starts` (what moving
    /// them out has to move).
    pub fn used_in(&self, starts: &[u64]) -> u64 {
        starts
            .iter()
            .filter_map(|s| self.groups.get(s).map(|g| g.used))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_and_pin() {
        let mut a = Allocator::default();
        a.groups
            .insert(1 << 20, BlockGroup::new(1 << 20, 1 << 20, BG_METADATA));
        let x = a.alloc(SpaceKind::Metadata, 16384, 16384).unwrap();
        let y = a.alloc(SpaceKind::Metadata, 16384, 16384).unwrap();
        assert_eq!((x, y), (1 << 20, (1 << 20) + 16384));
        assert!(a.alloc(SpaceKind::Data, 4096, 4096).is_none());
        a.pin(x, 16384);
        // Pinned space is not handed out before commit.
        let z = a.alloc(SpaceKind::Metadata, 16384, 16384).unwrap();
        assert_ne!(z, x);
        a.free_now(z, 16384);
        assert_eq!(a.groups[&(1 << 20)].used, 16384);
        a.unpin_all();
        let g = &a.groups[&(1 << 20)];
        assert_eq!(g.free_bytes(), (1 << 20) - 16384);
        assert_eq!(g.free_ranges().next(), Some((1 << 20, 16384)));
        // Fill it up: then None.
        let mut n = 0;
        while a.alloc(SpaceKind::Metadata, 16384, 16384).is_some() {
            n += 1;
        }
        assert_eq!(n, 63);
    }
}
