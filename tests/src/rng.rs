//! The tests' one seeded PRNG: xorshift64* started from a splitmix64 of
//! the seed, so neighbouring seeds diverge at once. Deterministic from its
//! seed, which every failure prints. Also the one list of seeds a seeded
//! test runs ([`seeds`]) and the environment's numbers ([`env_u64`]).
//!
//! Self-contained (no `crate::` paths, std only): included with `#[path]`
//! by the engine's integration tests (crates/engine/tests/memcheck: the
//! engine cannot depend on this crate, which depends on it) and by the
//! fuzz crate (a separate workspace).

/// xorshift64* seeded through splitmix64.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    /// A seed for the stream named `name` derived from `base`: every
    /// fixture or fuzz target gets its own sequence from one base seed.
    pub fn for_name(base: u64, name: &str) -> Rng {
        Rng::new(base ^ name.bytes().fold(0u64, |h, b| h.rotate_left(7) ^ b as u64))
    }

    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in 0..n (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// An index in 0..n (0 when n is 0).
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// An element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.index(v.len())]
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// Puts `v` in a random order (Fisher-Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.index(i + 1);
            v.swap(i, j);
        }
    }

    /// Fills `buf` with random bytes (each number's, little-endian).
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let n = c.len();
            c.copy_from_slice(&self.next().to_le_bytes()[..n]);
        }
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.fill(&mut v);
        v
    }
}

/// A number as the environment gives one: decimal, or hex with 0x.
fn parse_u64(v: &str) -> Option<u64> {
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// An environment variable as a number (decimal, or hex with 0x).
pub fn env_u64(name: &str) -> Option<u64> {
    parse_u64(&std::env::var(name).ok()?)
}

/// The seeds a seeded test runs: those in `list_var` when it is set (one,
/// or a comma list: to replay failures), else 1 to the count in
/// `count_var` (`default` when that is unset or there is none).
pub fn seeds(list_var: &str, count_var: Option<&str>, default: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var(list_var) {
        return s
            .split(',')
            .map(|x| parse_u64(x).unwrap_or_else(|| panic!("{list_var}={s}: not numbers")))
            .collect();
    }
    let n = count_var.and_then(env_u64).unwrap_or(default);
    (1..=n).collect()
}
