//! Walks every item of one tree with a chosen readahead mode and prints
//! the time taken, an item digest and the cache/readahead counters. For
//! readahead benchmarks:
//!
//! ```text
//! cargo run --release --example walk_tree -- IMAGE [-t TREE] [-m MODE] [-b] [--cache-mb N]
//! ```
//!
//! MODE is none, forward, always (forward-always) or back. The walk goes
//! from the first item forward, or with `-b` (the default in back mode)
//! from the last item backward. TREE defaults to 5 (the fs tree).

use std::process::ExitCode;
use std::time::Instant;
use ubtrfs_engine::cache::reada::Readahead;
use ubtrfs_engine::ctree::Cursor;
use ubtrfs_engine::{Filesystem, OpenOptions};
use ubtrfs_format::key::Key;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut image, mut tree, mut mode, mut cache_mb) = (None, 5u64, Readahead::None, 64u64);
    let mut backward = false;
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_default();
        match a.as_str() {
            "-t" | "--tree" => tree = val().parse().expect("tree id"),
            "-m" | "--mode" => {
                mode = match val().as_str() {
                    "none" => Readahead::None,
                    "forward" => Readahead::Forward,
                    "always" | "forward-always" => Readahead::ForwardAlways,
                    "back" => Readahead::Back,
                    m => panic!("unknown mode {m}"),
                }
            }
            "--cache-mb" => cache_mb = val().parse().expect("MiB"),
            "-b" | "--backward" => backward = true,
            _ => image = Some(a),
        }
    }
    let Some(image) = image else {
        eprintln!(
            "usage: walk_tree IMAGE [-t TREE] [-m none|forward|always|back] [-b] [--cache-mb N]"
        );
        return ExitCode::FAILURE;
    };
    let backward = backward || mode == Readahead::Back;
    let t0 = Instant::now();
    let fs = Filesystem::open(
        image.as_ref(),
        &OpenOptions {
            cache_bytes: cache_mb << 20,
            ..Default::default()
        },
    )
    .expect("open");
    let t = fs.tree(tree).expect("tree");
    let opened = t0.elapsed();
    let s1 = schedstat();
    let t1 = Instant::now();
    let mut c = Cursor::new(&fs.info, t);
    c.set_readahead(mode);
    let (mut items, mut bytes, mut digest) = (0u64, 0u64, 0xcbf29ce484222325u64);
    let mut ok = if backward {
        c.seek_last()
    } else {
        c.seek(&Key::MIN)
    }
    .expect("seek");
    while ok {
        let (k, d) = c.item().expect("item");
        items += 1;
        bytes += d.len() as u64;
        // FNV-1a over key and data, order-sensitive.
        for b in k
            .objectid
            .to_le_bytes()
            .iter()
            .chain(&[k.item_type])
            .chain(&k.offset.to_le_bytes())
            .chain(d)
        {
            digest = (digest ^ *b as u64).wrapping_mul(0x100000001b3);
        }
        ok = if backward { c.prev() } else { c.next() }.expect("move");
    }
    let walked = t1.elapsed();
    let s2 = schedstat();
    let (hits, misses) = fs.info.cache.stats();
    println!(
        "tree {tree} level {} mode {mode:?} {}: {items} items, {bytes} data bytes, digest {digest:016x}",
        t.level,
        if backward { "backward" } else { "forward" }
    );
    println!(
        "open {:.3}s walk {:.3}s; cache hits {hits} misses {misses}",
        opened.as_secs_f64(),
        walked.as_secs_f64()
    );
    // Of the walking thread's wall time: on a CPU, waiting for one, and
    // the rest, blocked (reads, or waiting for a read ahead in flight).
    let (run, wait) = ((s2.0 - s1.0) as f64 / 1e9, (s2.1 - s1.1) as f64 / 1e9);
    println!(
        "walker cpu {run:.3}s runqueue {wait:.3}s blocked {:.3}s",
        walked.as_secs_f64() - run - wait
    );
    println!("readahead {:?}", fs.info.reada.stats());
    ExitCode::SUCCESS
}

/// This thread's (time on a CPU, time waiting for one) in ns, from
/// /proc/thread-self/schedstat; zeros where unavailable.
fn schedstat() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut f = s.split_whitespace().map(|x| x.parse::<u64>().unwrap_or(0));
    (f.next().unwrap_or(0), f.next().unwrap_or(0))
}
