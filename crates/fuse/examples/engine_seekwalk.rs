//! The lseek walk of bench/seekwalk.c done on the engine directly, without
//! FUSE: alternating SEEK_DATA / SEEK_HOLE over a file of an image, with a
//! fresh [`FileHandle`] per run. Separates the engine's cost per call from
//! the FUSE round trip.
//!
//!   cargo run --release -p ubtrfs-fuse --example engine_seekwalk -- IMAGE /PATH [RUNS]

use std::time::Instant;
use ubtrfs_engine::{FileHandle, Filesystem, OpenOptions};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: engine_seekwalk IMAGE /PATH [RUNS]");
        std::process::exit(2);
    }
    let runs: usize = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(1).max(1);
    let fs = Filesystem::open(args[1].as_ref(), &OpenOptions::default()).expect("open image");
    let id = fs.resolve(args[2].as_bytes()).expect("resolve path");
    let mut per_call = Vec::new();
    for _ in 0..runs {
        let mut h = FileHandle::open(&fs, id).expect("open file");
        let (mut calls, mut ranges, mut pos) = (0u64, 0u64, 0u64);
        let t = Instant::now();
        while let Some(d) = h.seek_data(&fs, pos).expect("SEEK_DATA") {
            let e = h.seek_hole(&fs, d).expect("SEEK_HOLE").unwrap_or(h.size);
            calls += 2;
            ranges += 1;
            pos = e;
        }
        calls += 1; // the SEEK_DATA that found no more data
        let ns = t.elapsed().as_nanos() as f64 / calls as f64;
        println!("calls {calls} ranges {ranges} ns_per_call {ns:.1}");
        per_call.push(ns);
    }
    per_call.sort_by(|a, b| a.total_cmp(b));
    if runs > 1 {
        println!("median_ns_per_call {:.1}", per_call[runs / 2]);
    }
}
