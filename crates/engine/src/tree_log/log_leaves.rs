//! A log tree kept in memory as its leaves, each remembering where it is
//! on disk until it changes: a log sync writes only the leaves that
//! changed since the last one (and the few nodes above them), as the
//! kernel's log tree is copy-on-write within its transaction.

use std::collections::BTreeMap;
use ubtrfs_format::node::ITEM_SIZE;
use ubtrfs_format::Key;

/// One leaf: its items, the bytes they take, and its block while it is
/// unchanged since it was written.
#[derive(Debug, Default)]
pub struct Leaf {
    pub items: BTreeMap<Key, Vec<u8>>,
    used: usize,
    pub addr: Option<u64>,
}

impl Leaf {
    pub fn first_key(&self) -> Option<Key> {
        self.items.keys().next().copied()
    }
}

/// The leaves of one log tree, in key order: leaf `i` holds the keys from
/// its first one up to the next leaf's first.
#[derive(Debug)]
pub struct LogLeaves {
    pub leaves: Vec<Leaf>,
    /// Bytes of items a leaf holds at most.
    cap: usize,
    /// Blocks of leaves changed since they were written: free once a log
    /// without them is on disk.
    pub replaced: Vec<u64>,
}

impl LogLeaves {
    /// An empty tree whose leaves hold `cap` bytes of items (and headers).
    pub fn new(cap: usize) -> Self {
        LogLeaves {
            leaves: vec![Leaf::default()],
            cap,
            replaced: Vec::new(),
        }
    }

    /// The leaf that holds (or would hold) `k`.
    fn find(&self, k: &Key) -> usize {
        self.leaves
            .partition_point(|l| l.first_key().is_some_and(|f| f <= *k))
            .saturating_sub(1)
    }

    /// Leaf `i` is about to change: its block no longer holds it.
    fn touch(&mut self, i: usize) {
        if let Some(a) = self.leaves[i].addr.take() {
            self.replaced.push(a);
        }
    }

    pub fn get(&self, k: &Key) -> Option<&Vec<u8>> {
        self.leaves[self.find(k)].items.get(k)
    }

    /// Sets item `k` (nothing changes when it already holds `d`).
    pub fn put(&mut self, k: Key, d: Vec<u8>) {
        let i = self.find(&k);
        if self.leaves[i].items.get(&k) == Some(&d) {
            return;
        }
        self.touch(i);
        let leaf = &mut self.leaves[i];
        leaf.used += ITEM_SIZE + d.len();
        if let Some(old) = leaf.items.insert(k, d) {
            leaf.used -= ITEM_SIZE + old.len();
        }
        if leaf.used > self.cap {
            self.split(i);
        }
    }

    /// Removes item `k`; an emptied leaf goes (unless it is the last).
    pub fn remove(&mut self, k: &Key) {
        let i = self.find(k);
        if !self.leaves[i].items.contains_key(k) {
            return;
        }
        self.touch(i);
        let leaf = &mut self.leaves[i];
        let d = leaf.items.remove(k).unwrap();
        leaf.used -= ITEM_SIZE + d.len();
        if leaf.items.is_empty() && self.leaves.len() > 1 {
            self.leaves.remove(i);
        }
    }

    /// Items in `[lo, hi]`, in key order.
    pub fn items_in(&self, lo: Key, hi: Key) -> Vec<(Key, &Vec<u8>)> {
        let mut out = Vec::new();
        for l in &self.leaves[self.find(&lo)..] {
            if l.first_key().is_some_and(|f| f > hi) {
                break;
            }
            out.extend(l.items.range(lo..=hi).map(|(k, d)| (*k, d)));
        }
        out
    }

    /// Keys in `[lo, hi]`.
    pub fn keys_in(&self, lo: Key, hi: Key) -> Vec<Key> {
        let mut out = Vec::new();
        for l in &self.leaves[self.find(&lo)..] {
            if l.first_key().is_some_and(|f| f > hi) {
                break;
            }
            out.extend(l.items.range(lo..=hi).map(|(k, _)| *k));
        }
        out
    }

    /// Splits overfull leaf `i` (all new leaves): in two of about half
    /// the bytes each, or more where big items do not fit beside others.
    fn split(&mut self, i: usize) {
        let leaf = std::mem::take(&mut self.leaves[i]);
        let half = leaf.used / 2;
        let mut parts: Vec<Leaf> = vec![Leaf::default()];
        let mut halved = false;
        for (k, d) in leaf.items {
            let n = ITEM_SIZE + d.len();
            let cur = parts.last_mut().unwrap();
            if !cur.items.is_empty() && (cur.used + n > self.cap || !halved && cur.used >= half) {
                halved |= cur.used >= half;
                parts.push(Leaf::default());
            }
            let cur = parts.last_mut().unwrap();
            cur.used += n;
            cur.items.insert(k, d);
        }
        self.leaves.splice(i..=i, parts);
    }

    /// Every item, in key order.
    pub fn len(&self) -> usize {
        self.leaves.iter().map(|l| l.items.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the leaves are in key order and within their capacity
    /// (tests).
    pub fn well_formed(&self) -> bool {
        let mut prev: Option<Key> = None;
        for l in &self.leaves {
            let used: usize = l.items.values().map(|d| ITEM_SIZE + d.len()).sum();
            if used != l.used || used > self.cap {
                return false;
            }
            if let (Some(p), Some(f)) = (prev, l.first_key()) {
                if f <= p {
                    return false;
                }
            }
            if let Some((k, _)) = l.items.last_key_value() {
                prev = Some(*k);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a BTreeMap model: every key found where it was put, leaves
    /// ordered and within capacity, untouched leaves keep their blocks.
    #[test]
    fn leaves_match_a_map() {
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut t = LogLeaves::new(1000);
        let mut m = BTreeMap::new();
        for step in 0..5000u64 {
            let k = Key::new(rnd(200), 1, rnd(4));
            if rnd(3) == 0 {
                t.remove(&k);
                m.remove(&k);
            } else {
                let len = if rnd(10) == 0 { rnd(976) } else { rnd(120) };
                let d = vec![step as u8; len as usize];
                t.put(k, d.clone());
                m.insert(k, d);
            }
            if step % 97 == 0 {
                // A sync: every leaf gets a block.
                for (i, l) in t.leaves.iter_mut().enumerate() {
                    l.addr.get_or_insert(step * 1000 + i as u64);
                }
            }
            assert!(t.well_formed(), "step {step}");
        }
        assert_eq!(t.len(), m.len());
        for (k, d) in &m {
            assert_eq!(t.get(k), Some(d));
        }
        let lo = Key::new(50, 0, 0);
        let hi = Key::new(60, 255, u64::MAX);
        let want: Vec<Key> = m.range(lo..=hi).map(|(k, _)| *k).collect();
        assert_eq!(t.keys_in(lo, hi), want);
        // Putting what is there changes nothing.
        for l in t.leaves.iter_mut() {
            l.addr = Some(7);
        }
        let (k, d) = m.iter().next().unwrap();
        t.put(*k, d.clone());
        assert!(t.leaves.iter().all(|l| l.addr == Some(7)));
    }
}
#[cfg(test)]
mod big_items {
    //! Items near a leaf's capacity.
    use super::*;
    #[test]
    fn big_items_after_small() {
        let mut t = LogLeaves::new(16283);
        for o in 0..5u64 {
            t.put(Key::new(257, 1, o), vec![1; 160]);
        }
        for i in 0..6u64 {
            t.put(Key::new(u64::MAX - 9, 128, i << 20), vec![2; 16208]);
        }
        assert!(t.well_formed());
        // A big item among small ones: each leaf within capacity.
        t.put(Key::new(u64::MAX - 9, 128, (2 << 20) + 4096), vec![3; 30]);
        t.put(Key::new(300, 1, 0), vec![3; 16000]);
        assert!(t.well_formed());
        assert_eq!(t.leaves[0].first_key(), Some(Key::new(257, 1, 0)));
    }
}
