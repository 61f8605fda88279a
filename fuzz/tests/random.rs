//! The fuzz harnesses as plain tests, runnable on stable without libFuzzer:
//! seeded random inputs and random mutations of the well-formed seeds, plus
//! every file under `regressions/<target>/` (inputs that once crashed) and,
//! when present, the cargo-fuzz corpus `corpus/<target>/`.
//!
//!   cd fuzz && cargo test --release
//!   UBTRFS_FUZZ_ITERS=1000000 UBTRFS_FUZZ_SEED=42 cargo test --release
//!
//! A failure prints the seed and iteration, so it can be replayed.

use std::path::Path;

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn iters() -> u64 {
    std::env::var("UBTRFS_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn base_seed() -> u64 {
    std::env::var("UBTRFS_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_b7f5)
}

const INTERESTING: &[u64] = &[
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x100,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0xffff_ffff,
    0x1_0000_0000,
    u64::MAX,
    u64::MAX - 1,
    i64::MAX as u64,
    4096,
    16384,
    65536,
];

/// Applies 1..=8 random mutations: bit flips, byte sets, little-endian
/// "interesting" values at random offsets, truncation, or extension.
fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(8) {
        if input.is_empty() {
            input.push(rng.next() as u8);
            continue;
        }
        let at = rng.below(input.len());
        match rng.below(10) {
            0..=3 => input[at] ^= 1 << rng.below(8),
            4 | 5 => input[at] = rng.next() as u8,
            6 | 7 => {
                let v = INTERESTING[rng.below(INTERESTING.len())].to_le_bytes();
                let w = [1, 2, 4, 8][rng.below(4)];
                let end = (at + w).min(input.len());
                input[at..end].copy_from_slice(&v[..end - at]);
            }
            8 => input.truncate(at),
            _ => {
                let n = rng.below(64);
                input.extend((0..n).map(|_| rng.next() as u8));
            }
        }
    }
}

fn run_files(dir: &Path, f: fn(&[u8])) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        let p = e.path();
        if let Ok(data) = std::fs::read(&p) {
            let r = std::panic::catch_unwind(|| f(&data));
            assert!(r.is_ok(), "input {} panicked", p.display());
            n += 1;
        }
    }
    n
}

fn run(target: &str, f: fn(&[u8])) {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = run_files(&here.join("regressions").join(target), f)
        + run_files(&here.join("corpus").join(target), f);
    let seeds = ubtrfs_fuzz::seeds::for_target(target);
    for s in &seeds {
        f(s);
    }
    let seed = base_seed()
        ^ target
            .bytes()
            .fold(0u64, |h, b| h.rotate_left(5) ^ b as u64);
    let mut rng = Rng(seed | 1);
    let n = iters();
    for i in 0..n {
        let mut input = if i % 8 == 0 || seeds.is_empty() {
            // Fully random bytes, sized around the interesting lengths.
            let len = [rng.below(256), rng.below(4200), 4096, 16384][rng.below(4)];
            (0..len).map(|_| rng.next() as u8).collect()
        } else {
            seeds[rng.below(seeds.len())].clone()
        };
        mutate(&mut rng, &mut input);
        let r = std::panic::catch_unwind(|| f(&input));
        if r.is_err() {
            let out = std::env::temp_dir().join(format!("ubtrfs-fuzz-{target}-{seed:x}-{i}"));
            let _ = std::fs::write(&out, &input);
            panic!(
                "target {target}: input panicked (UBTRFS_FUZZ_SEED={} iteration {i}; input saved to {})",
                base_seed(),
                out.display()
            );
        }
    }
    eprintln!(
        "{target}: {n} mutated inputs, {} seeds, {files} corpus/regression files: ok",
        seeds.len()
    );
}

#[test]
fn node() {
    run("node", ubtrfs_fuzz::node);
}

#[test]
fn superblock() {
    run("superblock", ubtrfs_fuzz::superblock);
}

#[test]
fn superblock_csum() {
    run("superblock_csum", ubtrfs_fuzz::superblock_csum);
}

#[test]
fn decompress() {
    run("decompress", ubtrfs_fuzz::decompress);
}

/// The seeds themselves must be accepted, or the fuzzers start blind.
#[test]
fn seeds_are_valid() {
    use ubtrfs_format::node::Node;
    use ubtrfs_format::Superblock;
    for s in ubtrfs_fuzz::seeds::for_target("node") {
        Node::parse(&s).expect("node seed parses");
    }
    let leaf = ubtrfs_fuzz::seeds::rich_leaf(4096);
    assert!(Node::parse(&leaf).unwrap().nritems() >= 18);
    for s in ubtrfs_fuzz::seeds::for_target("superblock") {
        let sb = Superblock::parse(&s).expect("superblock seed parses");
        assert!(!sb.sys_chunks().expect("sys chunks").is_empty());
    }
}
