//! Model-based tests of the write engine on memory devices: random
//! inserts, puts, updates (grow and shrink), deletes and range deletes on
//! several scratch trees at once, with commits and reopens at random
//! points, checked against a BTreeMap model after every step (lookup,
//! search_first, items_in), and after every commit read back from the
//! device bytes with the read side and checked with
//! `tools::check::check_dev` (tree structure, extent tree, block groups,
//! free-space tree). Then the same with a fault injected at a write or
//! flush of a commit: the commit fails, and the image is the state before
//! or after it, whole.
//!
//! Default case counts keep the binary quick (about 10 s in release); the
//! full run (every test at that many cases; about 6 minutes on two shared
//! cores, most of it model_long) is
//!
//!     UBTRFS_PROPTEST_CASES=100 cargo test --release -p ubtrfs-engine --test tx_model
//!
//! UBTRFS_TEST_VERBOSE=1 (with --nocapture) prints each case's size: ops,
//! commits, items per tree, tree levels, blocks.

mod common;
mod memcheck;

use common::*;
use proptest::prelude::*;
use std::sync::Arc;
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::io::fault::FaultDev;
use ubtrfs_engine::mkfs::make;
use ubtrfs_engine::tx::Trans;

/// Runs `ops` on a fresh filesystem of `nodesize`; with `fault` =
/// (commit number, op number within it) the device dies there.
fn run(nodesize: u32, ops: &[Op], fault: Option<(usize, u64)>) -> Result<(), String> {
    run_with(nodesize, ops, fault, false)
}

/// [`run`]; with `deferred`, every commit is a deferred one whose thread
/// writes the blocks and the superblock (`Trans::commit_deferred`), then
/// waited for (`Trans::finish_deferred`), where a fault shows.
fn run_with(
    nodesize: u32,
    ops: &[Op],
    fault: Option<(usize, u64)>,
    deferred: bool,
) -> Result<(), String> {
    let m = Arc::new(MemDev::new(DEV_SIZE));
    let f = Arc::new(FaultDev::new(m.clone(), None));
    let fd: Arc<dyn BlockDev> = f.clone();
    let mut t = setup_on(fd.clone(), nodesize).map_err(|e| e.to_string())?;
    let mut model = empty_model();
    let mut committed = model.clone();
    let mut gen = check_image(m.clone(), &model)?;
    let mut commits = 0usize;
    let mut all = ops.to_vec();
    all.push(Op::Commit);
    for (step, op) in all.iter().enumerate() {
        match op {
            Op::Commit | Op::Reopen => {
                if fault.is_some_and(|(c, _)| c == commits) {
                    f.fail_at(f.ops() + fault.unwrap().1);
                }
                commits += 1;
                let res = if deferred {
                    t.commit_deferred().and_then(|()| t.finish_deferred())
                } else {
                    t.commit()
                };
                if let Err(e) = res {
                    if fault.is_none() {
                        return Err(format!("step {step}: commit: {e}"));
                    }
                    // The image is the last commit or this one, whole.
                    let (g, _) = read_back(m.clone())?;
                    let want = if g == gen {
                        &committed
                    } else if g == gen + 1 {
                        &model
                    } else {
                        return Err(format!(
                            "after a failed commit: generation {g}, committed {gen}"
                        ));
                    };
                    check_image(m.clone(), want)
                        .map_err(|e| format!("after a failed commit (generation {g}): {e}"))?;
                    if std::env::var_os("UBTRFS_TEST_VERBOSE").is_some() {
                        eprintln!(
                            "ns {nodesize}: commit {commits} failed at op {}: image at {}",
                            f.ops(),
                            if g == gen {
                                "the old commit"
                            } else {
                                "the new commit"
                            }
                        );
                    }
                    return Ok(());
                }
                let g = check_image(m.clone(), &model)
                    .map_err(|e| format!("step {step}: after commit: {e}"))?;
                if g != gen + 1 {
                    return Err(format!("step {step}: generation {g} after {gen}"));
                }
                gen = g;
                committed = model.clone();
                if matches!(op, Op::Reopen) {
                    drop(t);
                    t = Trans::open_dev(vec![fd.clone()], 16 << 20)
                        .map_err(|e| format!("step {step}: reopen: {e}"))?;
                }
                check_trans(&mut t, &model, op, true)?;
            }
            _ => {
                apply(&mut t, &mut model, op, step)?;
                check_trans(&mut t, &model, op, step % 16 == 0)?;
            }
        }
    }
    if std::env::var_os("UBTRFS_TEST_VERBOSE").is_some() {
        let r = ubtrfs_engine::tools::check::check_dev(m.clone()).map_err(|e| e.to_string())?;
        let sizes: Vec<usize> = model.values().map(|t| t.len()).collect();
        let levels: Vec<u8> = SCRATCH.iter().map(|id| r.trees[id].1).collect();
        eprintln!(
            "ns {nodesize}: {} ops, {commits} commits, items {sizes:?}, levels {levels:?}, {} blocks",
            ops.len(),
            r.blocks
        );
    }
    Ok(())
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    }
}

/// A fault case: operations, the commit that fails, the device operation
/// it fails at, and whether the nodes are 4 KiB (else 16 KiB).
fn fault_case() -> impl Strategy<Value = (Vec<Op>, usize, u64, bool)> {
    (
        proptest::collection::vec(op_strategy(3, 4, 15), 1..150),
        0..6usize,
        prop_oneof![0..16u64, 0..64u64, 0..200u64],
        any::<bool>(),
    )
}

proptest! {
    #![proptest_config(config(cases(16)))]

    #[test]
    fn model_4k(ops in proptest::collection::vec(op_strategy(3, 4, 25), 1..300)) {
        run(4096, &ops, None).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn model_16k(ops in proptest::collection::vec(op_strategy(3, 6, 25), 1..300)) {
        run(16384, &ops, None).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn model_4k_one_tree_dense(ops in proptest::collection::vec(op_strategy(1, 2, 50), 1..400)) {
        run(4096, &ops, None).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn fault_in_commit((ops, commit, at, small) in fault_case()) {
        run(if small { 4096 } else { 16384 }, &ops, Some((commit, at)))
            .map_err(TestCaseError::fail)?;
    }

    /// The same with commits whose thread writes their blocks and
    /// superblock (receive's and the mount's interval commits).
    #[test]
    fn fault_in_deferred_commit((ops, commit, at, small) in fault_case()) {
        run_with(if small { 4096 } else { 16384 }, &ops, Some((commit, at)), true)
            .map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(config(cases(2)))]

    /// Thousands of operations: deep trees, many commits.
    #[test]
    fn model_long(ops in proptest::collection::vec(op_strategy(3, 8, 200), 2000..3000)) {
        run(4096, &ops, None).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn model_long_16k(ops in proptest::collection::vec(op_strategy(2, 8, 100), 1000..2000)) {
        run(16384, &ops, None).map_err(TestCaseError::fail)?;
    }
}

/// mkfs itself on a device that dies at every op in turn: an error, and
/// the image is either no filesystem yet or the whole new one.
#[test]
fn fault_in_mkfs() {
    let count = Arc::new(FaultDev::new(Arc::new(MemDev::new(DEV_SIZE)), None));
    make(vec![("m".into(), count.clone())], &mkfs_options(4096)).unwrap();
    let n = count.ops();
    assert!(n > 4, "mkfs did {n} writes and flushes");
    for at in 0..n {
        let m = Arc::new(MemDev::new(DEV_SIZE));
        let f = Arc::new(FaultDev::new(m.clone(), Some(at)));
        let r = make(vec![("m".into(), f.clone())], &mkfs_options(4096));
        assert!(r.is_err(), "mkfs succeeded with a fault at op {at} of {n}");
        match read_back(m.clone()) {
            Ok(_) => {
                ubtrfs_engine::tools::check::check_dev(m.clone())
                    .unwrap_or_else(|e| panic!("fault at op {at}: {e}"));
            }
            Err(e) => assert!(
                e.contains("superblock") || e.contains("magic"),
                "fault at op {at}: {e}"
            ),
        }
    }
}
