//! A bounded cache of verified tree blocks, shared by every reader of a
//! filesystem. CLOCK replacement: a hit sets a reference bit, eviction
//! sweeps a hand that clears bits until it finds an unreferenced block.
//!
//! Blocks brought in by readahead ([`crate::cache::reada`]) are marked until their
//! first use, so that readahead hits can be counted. They enter with their
//! reference bit set, so that one sweep of the hand does not evict them
//! before the reader gets to them.

use crate::tree::block::TreeBlock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

struct Slot {
    block: Arc<TreeBlock>,
    referenced: AtomicBool,
    /// Inserted by readahead and not used since.
    prefetched: AtomicBool,
}

struct Inner {
    index: HashMap<u64, usize>,
    slots: Vec<Slot>,
    hand: usize,
}

pub struct BlockCache {
    capacity: usize,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
    prefetch_hits: AtomicU64,
    prefetch_unused: AtomicU64,
}

impl BlockCache {
    /// A cache holding at most `budget_bytes / nodesize` blocks (at least 16).
    pub fn new(budget_bytes: u64, nodesize: u32) -> Self {
        let capacity = ((budget_bytes / nodesize.max(1) as u64) as usize).max(16);
        BlockCache {
            capacity,
            inner: Mutex::new(Inner {
                index: HashMap::new(),
                slots: Vec::new(),
                hand: 0,
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            prefetch_hits: AtomicU64::new(0),
            prefetch_unused: AtomicU64::new(0),
        }
    }

    pub fn get(&self, bytenr: u64) -> Option<Arc<TreeBlock>> {
        let b = self.lookup(bytenr);
        let counter = if b.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        b
    }

    /// Like [`BlockCache::get`] but not counted as a hit or miss: for a
    /// second look after waiting for a read in flight, whose first look
    /// was already counted.
    pub fn get_again(&self, bytenr: u64) -> Option<Arc<TreeBlock>> {
        self.lookup(bytenr)
    }

    fn lookup(&self, bytenr: u64) -> Option<Arc<TreeBlock>> {
        let inner = self.inner.lock().unwrap();
        let &i = inner.index.get(&bytenr)?;
        let s = &inner.slots[i];
        s.referenced.store(true, Ordering::Relaxed);
        if s.prefetched.swap(false, Ordering::Relaxed) {
            self.prefetch_hits.fetch_add(1, Ordering::Relaxed);
        }
        Some(s.block.clone())
    }

    pub fn contains(&self, bytenr: u64) -> bool {
        self.inner.lock().unwrap().index.contains_key(&bytenr)
    }

    pub fn insert(&self, block: Arc<TreeBlock>) {
        self.insert_slot(block, false);
    }

    /// Inserts a block read ahead of its use; its first use counts as a
    /// prefetch hit. Returns false when the block was already cached.
    pub fn insert_prefetched(&self, block: Arc<TreeBlock>) -> bool {
        self.insert_slot(block, true)
    }

    fn insert_slot(&self, block: Arc<TreeBlock>, prefetched: bool) -> bool {
        let mut inner = self.inner.lock().unwrap();
        if inner.index.contains_key(&block.bytenr) {
            return false;
        }
        let bytenr = block.bytenr;
        let slot = Slot {
            block,
            referenced: AtomicBool::new(prefetched),
            prefetched: AtomicBool::new(prefetched),
        };
        if inner.slots.len() < self.capacity {
            inner.slots.push(slot);
            let i = inner.slots.len() - 1;
            inner.index.insert(bytenr, i);
            return true;
        }
        let victim = loop {
            let h = inner.hand;
            inner.hand = (h + 1) % inner.slots.len();
            if !inner.slots[h].referenced.swap(false, Ordering::Relaxed) {
                break h;
            }
        };
        if inner.slots[victim].prefetched.load(Ordering::Relaxed) {
            self.prefetch_unused.fetch_add(1, Ordering::Relaxed);
        }
        let old = inner.slots[victim].block.bytenr;
        inner.index.remove(&old);
        inner.slots[victim] = slot;
        inner.index.insert(bytenr, victim);
        true
    }

    /// Forgets the block at `bytenr` (a writer reused the address). Swaps
    /// the last slot into its place, so no slot is left empty.
    pub fn remove(&self, bytenr: u64) {
        let mut inner = self.inner.lock().unwrap();
        let Some(i) = inner.index.remove(&bytenr) else {
            return;
        };
        inner.slots.swap_remove(i);
        if i < inner.slots.len() {
            let moved = inner.slots[i].block.bytenr;
            inner.index.insert(moved, i);
        }
        if inner.hand >= inner.slots.len() {
            inner.hand = 0;
        }
    }

    /// (hits, misses) since creation.
    pub fn stats(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// How many blocks inserted by readahead were later used.
    pub fn prefetch_hits(&self) -> u64 {
        self.prefetch_hits.load(Ordering::Relaxed)
    }

    /// How many blocks inserted by readahead were evicted before any use.
    pub fn prefetch_unused(&self) -> u64 {
        self.prefetch_unused.load(Ordering::Relaxed)
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}
