//! The items of a leaf being changed, flat: the keys in a vector (for
//! binary search), the item data concatenated in item order, and where
//! each item's data ends. A leaf decodes into three allocations, not one
//! per item, and inserting, resizing or removing an item moves bytes
//! within one buffer (as the kernel's leaf operations do on the block).

use ubtrfs_format::key::Key;
use ubtrfs_format::node::ITEM_SIZE;

/// A leaf's items in key order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Leaf {
    keys: Vec<Key>,
    /// `ends[i]`: the end of item i's data in `data` (its start is the
    /// end of the item before it).
    ends: Vec<u32>,
    data: Vec<u8>,
}

impl Leaf {
    /// An empty leaf with room for `items` items of `bytes` data in all.
    pub fn with_capacity(items: usize, bytes: usize) -> Self {
        Leaf {
            keys: Vec::with_capacity(items),
            ends: Vec::with_capacity(items),
            data: Vec::with_capacity(bytes),
        }
    }

    /// Makes room for `bytes` of item data in all.
    pub fn reserve_data(&mut self, bytes: usize) {
        self.data
            .reserve_exact(bytes.saturating_sub(self.data.len()));
    }

    /// A leaf of `items`, given in key order.
    pub fn from_items<'a>(items: impl IntoIterator<Item = (Key, &'a [u8])>) -> Self {
        let mut l = Leaf::default();
        for (k, d) in items {
            l.push(k, d);
        }
        l
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    pub fn key(&self, i: usize) -> Key {
        self.keys[i]
    }

    fn start(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.ends[i - 1] as usize
        }
    }

    /// Item `i`'s data.
    pub fn data(&self, i: usize) -> &[u8] {
        &self.data[self.start(i)..self.ends[i] as usize]
    }

    /// Item `i`'s data, to change in place.
    pub fn data_mut(&mut self, i: usize) -> &mut [u8] {
        let a = self.start(i);
        &mut self.data[a..self.ends[i] as usize]
    }

    /// Item `i`: its key and data.
    pub fn item(&self, i: usize) -> (Key, &[u8]) {
        (self.keys[i], self.data(i))
    }

    /// The items from slot `from` on.
    pub fn iter_from(&self, from: usize) -> impl Iterator<Item = (Key, &[u8])> + '_ {
        (from..self.len()).map(move |i| self.item(i))
    }

    pub fn iter(&self) -> impl Iterator<Item = (Key, &[u8])> + '_ {
        self.iter_from(0)
    }

    /// Where `key` is (Ok) or would go (Err).
    pub fn search(&self, key: &Key) -> std::result::Result<usize, usize> {
        self.keys.binary_search(key)
    }

    /// Bytes the items take in a block: item headers and data.
    pub fn used(&self) -> usize {
        self.keys.len() * ITEM_SIZE + self.data.len()
    }

    /// Bytes item `i` takes in a block, its header included.
    pub fn item_size(&self, i: usize) -> usize {
        ITEM_SIZE + self.ends[i] as usize - self.start(i)
    }

    /// Appends an item (its key after every key here).
    pub fn push(&mut self, key: Key, data: &[u8]) {
        self.data.extend_from_slice(data);
        self.keys.push(key);
        self.ends.push(self.data.len() as u32);
    }

    /// Moves the item data from `at` on by `grow` bytes towards the end
    /// (one memmove, as the kernel moves item data within a leaf), making
    /// room at `at`; the room holds stale bytes for the caller to fill.
    fn open_gap(&mut self, at: usize, grow: usize) {
        let old = self.data.len();
        self.data.resize(old + grow, 0);
        self.data.copy_within(at..old, at + grow);
    }

    /// Inserts an item at slot `i`.
    pub fn insert(&mut self, i: usize, key: Key, data: &[u8]) {
        let at = self.start(i);
        self.open_gap(at, data.len());
        self.data[at..at + data.len()].copy_from_slice(data);
        self.keys.insert(i, key);
        self.ends.insert(i, at as u32);
        let n = data.len() as u32;
        for e in &mut self.ends[i..] {
            *e += n;
        }
    }

    /// Removes the item at slot `i`.
    pub fn remove(&mut self, i: usize) {
        let (a, b) = (self.start(i), self.ends[i] as usize);
        self.data.drain(a..b);
        self.keys.remove(i);
        self.ends.remove(i);
        let n = (b - a) as u32;
        for e in &mut self.ends[i..] {
            *e -= n;
        }
    }

    /// Replaces item `i`'s data (it may grow or shrink).
    pub fn set_data(&mut self, i: usize, data: &[u8]) {
        let (a, b) = (self.start(i), self.ends[i] as usize);
        if b - a == data.len() {
            self.data[a..b].copy_from_slice(data);
            return;
        }
        if data.len() > b - a {
            self.open_gap(b, data.len() - (b - a));
        } else {
            self.data.copy_within(b.., a + data.len());
            self.data.truncate(self.data.len() - (b - a - data.len()));
        }
        self.data[a..a + data.len()].copy_from_slice(data);
        let (old, new) = ((b - a) as u32, data.len() as u32);
        for e in &mut self.ends[i..] {
            *e = *e - old + new;
        }
    }

    /// Appends `bytes` to item `i`'s data (a name added to a DIR_ITEM or
    /// INODE_REF), without copying the item out and back.
    pub fn append_data(&mut self, i: usize, bytes: &[u8]) {
        let end = self.ends[i] as usize;
        self.open_gap(end, bytes.len());
        self.data[end..end + bytes.len()].copy_from_slice(bytes);
        let n = bytes.len() as u32;
        for e in &mut self.ends[i..] {
            *e += n;
        }
    }

    /// Cuts the leaf at slot `at`: the items from there on are returned.
    pub fn split_off(&mut self, at: usize) -> Leaf {
        let cut = self.start(at);
        let keys = self.keys.split_off(at);
        let mut ends = self.ends.split_off(at);
        for e in &mut ends {
            *e -= cut as u32;
        }
        // The tail keeps the room the leaf had: items go on being
        // inserted into both halves, and growing them a step at a time
        // reallocates and copies.
        let mut data = Vec::with_capacity(self.data.capacity());
        data.extend_from_slice(&self.data[cut..]);
        self.data.truncate(cut);
        Leaf { keys, ends, data }
    }

    /// Appends the items of `other` (its keys after every key here).
    pub fn append(&mut self, other: Leaf) {
        let base = self.data.len() as u32;
        self.keys.extend_from_slice(&other.keys);
        self.ends.extend(other.ends.iter().map(|e| e + base));
        self.data.extend_from_slice(&other.data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same changes on a leaf and on a vector of owned items.
    #[test]
    fn leaf_follows_a_vector_of_items() {
        let mut l = Leaf::default();
        let mut v: Vec<(Key, Vec<u8>)> = Vec::new();
        let check = |l: &Leaf, v: &Vec<(Key, Vec<u8>)>| {
            assert_eq!(l.len(), v.len());
            for (i, (k, d)) in v.iter().enumerate() {
                assert_eq!(l.item(i), (*k, &d[..]));
            }
            let used: usize = v.iter().map(|(_, d)| ITEM_SIZE + d.len()).sum();
            assert_eq!(l.used(), used);
        };
        let mut seed = 12345u64;
        let mut rnd = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..2000 {
            let op = rnd(5);
            let len = rnd(40) as usize;
            let byte = rnd(256) as u8;
            if op <= 1 || v.is_empty() {
                let key = Key::new(rnd(500), 1, rnd(3));
                if let Err(i) = l.search(&key) {
                    l.insert(i, key, &vec![byte; len]);
                    v.insert(i, (key, vec![byte; len]));
                }
            } else if op == 2 {
                let i = rnd(v.len() as u64) as usize;
                l.remove(i);
                v.remove(i);
            } else if op == 3 && len.is_multiple_of(2) {
                let i = rnd(v.len() as u64) as usize;
                l.set_data(i, &vec![byte; len]);
                v[i].1 = vec![byte; len];
            } else if op == 3 {
                let i = rnd(v.len() as u64) as usize;
                l.append_data(i, &vec![byte; len]);
                v[i].1.extend(vec![byte; len]);
            } else {
                let i = rnd(v.len() as u64 + 1) as usize;
                let tail = l.split_off(i);
                let vtail = v.split_off(i);
                check(&tail, &vtail);
                check(&l, &v);
                l.append(tail);
                v.extend(vtail);
            }
            check(&l, &v);
        }
        let back = Leaf::from_items(v.iter().map(|(k, d)| (*k, &d[..])));
        assert_eq!(back, l);
    }
}
