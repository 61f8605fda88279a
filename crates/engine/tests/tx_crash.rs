//! Crash tests of the write engine, as dm-log-writes and fstests'
//! generic/482 test the kernel: a workload (mkfs, then random item
//! operations on scratch trees with several commits and reopens) runs on
//! a recording device; then every prefix of its writes that ends at a
//! flush is replayed onto a blank device, and must open at the last
//! commit whose superblock it holds, with the trees of that commit, and
//! pass `tools::check`. Torn variants (a random subset, in random order,
//! of the writes between two flushes, sometimes with one more write cut
//! short at a sector boundary) must open at the commit before, or at the
//! one whose superblock copies they hold.
//!
//! The same with commits whose superblock is written by the next commit
//! (`Trans::commit_deferred`, receive's commits as it goes).
//!
//! Full run (about 15 s):
//!
//!     UBTRFS_PROPTEST_CASES=100 cargo test --release -p ubtrfs-engine --test tx_crash

mod common;
mod memcheck;

use common::*;
use memcheck::Rng;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::io::fault::{Event, Log};

/// The generation of a superblock write, if `e` is one.
fn super_gen(off: u64, data: &[u8]) -> Option<u64> {
    if !ubtrfs_format::consts::SUPER_OFFSETS.contains(&off) {
        return None;
    }
    ubtrfs_format::Superblock::parse(data)
        .ok()
        .map(|s| s.generation)
}

fn run(
    seed: u64,
    nodesize: u32,
    n: usize,
    torn_per_segment: usize,
    deferred: bool,
) -> Result<(), String> {
    let (log, models) = record_with(seed, nodesize, n, deferred)?;
    let mut rng = Rng::new(seed);
    let d = Arc::new(MemDev::new(DEV_SIZE));
    let flushes = log.flushes();
    let mut durable = 0u64;
    let mut at = 0usize;
    let mut checked = 0;
    for (fi, &f) in flushes.iter().enumerate() {
        for e in &log.events[at..f] {
            if let Event::Write { off, data } = e {
                durable = durable.max(super_gen(*off, data).unwrap_or(0));
            }
        }
        log.replay(&*d, at, f).map_err(|e| e.to_string())?;
        at = f;
        expect_state(&d, durable, &models).map_err(|e| format!("prefix to flush {fi}: {e}"))?;
        checked += 1;
        // Torn variants of the writes up to the next flush.
        let next = flushes.get(fi + 1).copied().unwrap_or(log.events.len());
        let writes = log.writes_in(f, next);
        for v in 0..torn_per_segment.min(writes.len()) {
            let mut picks: Vec<usize> = writes
                .iter()
                .map(|w| w.0)
                .filter(|_| rng.below(3) != 0)
                .collect();
            if v == 0 && writes.len() > 1 {
                // All but one.
                picks = writes.iter().map(|w| w.0).collect();
                picks.remove(rng.below(picks.len() as u64) as usize);
            }
            rng.shuffle(&mut picks);
            let mut g = durable;
            for &i in &picks {
                if let Event::Write { off, data } = &log.events[i] {
                    g = g.max(super_gen(*off, data).unwrap_or(0));
                }
            }
            let mut undo = log.torn(&*d, &picks).map_err(|e| e.to_string())?;
            if v == 1 {
                // One more write, torn itself: only its first sectors.
                if let Some(&(_, off, data)) = writes.get(rng.below(writes.len() as u64) as usize) {
                    let sectors = data.len() as u64 / 4096;
                    let keep = (rng.below(sectors.max(1)) * 4096) as usize;
                    let mut old = vec![0u8; keep];
                    d.read_at(&mut old, off).map_err(|e| e.to_string())?;
                    d.write_at(&data[..keep], off).map_err(|e| e.to_string())?;
                    undo.push((off, old));
                }
            }
            expect_state(&d, g, &models).map_err(|e| {
                format!(
                    "torn variant {v} after flush {fi} ({} of {} writes): {e}",
                    picks.len(),
                    writes.len()
                )
            })?;
            Log::undo(&*d, undo).map_err(|e| e.to_string())?;
            checked += 1;
        }
    }
    if std::env::var_os("UBTRFS_TEST_VERBOSE").is_some() {
        eprintln!(
            "seed {seed} ns {nodesize}: {} events, {} flushes, {} commits, {checked} images checked",
            log.events.len(),
            flushes.len(),
            models.len()
        );
    }
    Ok(())
}

/// The image on `d` is generation `gen` (0: no filesystem yet) with the
/// trees of that commit, and is consistent.
fn expect_state(d: &Arc<MemDev>, gen: u64, models: &BTreeMap<u64, Model>) -> Result<(), String> {
    let dev: Arc<dyn BlockDev> = d.clone();
    if gen == 0 {
        return match read_back(dev) {
            Ok((g, _)) => Err(format!("opened at generation {g} before any superblock")),
            Err(_) => Ok(()),
        };
    }
    let want = models
        .get(&gen)
        .ok_or_else(|| format!("no model of generation {gen}"))?;
    let g = check_image(dev, want)?;
    if g != gen {
        return Err(format!("opened at generation {g}, expected {gen}"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(6),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn replay_prefixes_and_torn_writes(seed in any::<u64>(), small in any::<bool>(), n in 20..200usize) {
        run(seed, if small { 4096 } else { 16384 }, n, 3, false).map_err(TestCaseError::fail)?;
    }

    /// Commits whose superblock waits for the next commit: a crash
    /// before it finds the commit before, whole, whatever of the
    /// deferred commit's blocks (and of the next one's) reached the disk.
    #[test]
    fn deferred_commits_replay_prefixes_and_torn_writes(seed in any::<u64>(), small in any::<bool>(), n in 20..200usize) {
        run(seed, if small { 4096 } else { 16384 }, n, 3, true).map_err(TestCaseError::fail)?;
    }
}
