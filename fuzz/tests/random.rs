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

// The tests' one PRNG (tests/src/rng.rs of the ubtrfs-oracle crate),
// shared by path: this crate is a separate workspace without that crate.
#[path = "../../tests/src/rng.rs"]
#[allow(dead_code)]
mod rng;
use rng::Rng;

fn iters() -> u64 {
    rng::env_u64("UBTRFS_FUZZ_ITERS").unwrap_or(20_000)
}

fn base_seed() -> u64 {
    rng::env_u64("UBTRFS_FUZZ_SEED").unwrap_or(0x5eed_b7f5)
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
    for _ in 0..1 + rng.index(8) {
        if input.is_empty() {
            input.push(rng.next() as u8);
            continue;
        }
        let at = rng.index(input.len());
        match rng.index(10) {
            0..=3 => input[at] ^= 1 << rng.index(8),
            4 | 5 => input[at] = rng.next() as u8,
            6 | 7 => {
                let v = INTERESTING[rng.index(INTERESTING.len())].to_le_bytes();
                let w = [1, 2, 4, 8][rng.index(4)];
                let end = (at + w).min(input.len());
                input[at..end].copy_from_slice(&v[..end - at]);
            }
            8 => input.truncate(at),
            _ => {
                let n = rng.index(64);
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
    let mut rng = Rng::for_name(base_seed(), target);
    let n = iters();
    for i in 0..n {
        let mut input = if i % 8 == 0 || seeds.is_empty() {
            // Fully random bytes, sized around the interesting lengths.
            let len = [rng.index(256), rng.index(4200), 4096, 16384][rng.index(4)];
            (0..len).map(|_| rng.next() as u8).collect()
        } else {
            seeds[rng.index(seeds.len())].clone()
        };
        mutate(&mut rng, &mut input);
        let r = std::panic::catch_unwind(|| f(&input));
        if r.is_err() {
            let out =
                std::env::temp_dir().join(format!("ubtrfs-fuzz-{target}-{:x}-{i}", base_seed()));
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

/// A test for each fuzz target `name`: [`run`] on `ubtrfs_fuzz::name`.
macro_rules! target_tests {
    ($($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name), ubtrfs_fuzz::$name);
            }
        )*
    };
}

target_tests!(node, superblock, superblock_csum, decompress);

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
