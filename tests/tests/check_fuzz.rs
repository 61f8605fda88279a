//! `ubtrfs check` never panics on damaged tree blocks: seeded random
//! changes to the blocks of an image (tests/src/check_fuzz.rs, the harness
//! of the cargo-fuzz target `check`), checksums recomputed; nor does its
//! `--repair`, which never leaves them worse. Iterations:
//! UBTRFS_CHECK_FUZZ_ITERS (CI: 300); `cargo fuzz run check` in fuzz/
//! for more.

use std::panic::{catch_unwind, AssertUnwindSafe};
use ubtrfs_oracle::check_fuzz::check_mutated;
use ubtrfs_oracle::*;

#[test]
fn check_survives_damaged_blocks() {
    let iters = env_u64("UBTRFS_CHECK_FUZZ_ITERS").unwrap_or(300);
    let mut rng = Rng::new(0xc4ec_f022);
    assert_eq!(check_mutated(&[]), Some(0), "the base image checks clean");
    let (mut flagged, mut refused) = (0, 0);
    for i in 0..iters {
        let n = 1 + rng.below(6) as usize;
        let data: Vec<u8> = (0..n * 5).map(|_| rng.below(256) as u8).collect();
        match catch_unwind(AssertUnwindSafe(|| check_mutated(&data))) {
            Ok(Some(0)) => {}
            Ok(Some(_)) => flagged += 1,
            Ok(None) => refused += 1,
            Err(_) => panic!("iteration {i}: check panicked on input {data:02x?}"),
        }
    }
    eprintln!(
        "{iters} damaged images: {flagged} with problems, {refused} refused whole, the rest clean"
    );
    // Many changes are in what no check can judge (a time, a file's
    // bytes inline, a checksum of data); most are not.
    assert!(
        flagged + refused > iters / 2,
        "most damage went unseen: {flagged} + {refused} of {iters}"
    );
}

/// `check --repair` on the same kind of damage: never a panic, nor a
/// failed transaction; what it repairs it leaves passing the check, or
/// with fewer problems, or with problems the first ones hid that a second
/// run repairs (never a state it cannot go on from). Iterations: a third
/// of the above (each copies the image).
#[test]
fn repair_survives_damaged_blocks() {
    use ubtrfs_oracle::check_fuzz::{repair_mutated, RepairOutcome};
    let iters = env_u64("UBTRFS_CHECK_FUZZ_ITERS").unwrap_or(300) / 3;
    let mut rng = Rng::new(0x4e9a_f022);
    let mut seen: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut worse = Vec::new();
    for i in 0..iters {
        let n = 1 + rng.below(3) as usize;
        let data: Vec<u8> = (0..n * 5).map(|_| rng.below(256) as u8).collect();
        let out = match catch_unwind(AssertUnwindSafe(|| repair_mutated(&data))) {
            Ok(o) => o,
            Err(_) => panic!("iteration {i}: repair panicked on input {data:02x?}"),
        };
        let kind = match out {
            RepairOutcome::Nothing => "nothing to repair",
            RepairOutcome::Refused => "refused",
            RepairOutcome::Repaired { after: 0, .. } => "repaired",
            RepairOutcome::Repaired { before, after, .. } if after < before => "repaired in part",
            RepairOutcome::Repaired { again: true, .. } => "repaired, more uncovered",
            _ => {
                worse.push(format!("iteration {i} {data:02x?}: {out:?}"));
                "worse or failed"
            }
        };
        *seen.entry(kind).or_insert(0) += 1;
    }
    eprintln!("{iters} repairs of damaged images: {seen:?}");
    assert!(worse.is_empty(), "{}", worse.join("\n"));
}
