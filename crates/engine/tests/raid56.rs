//! RAID5/6 writing in process: seeded tree changes (inserts, updates,
//! deletes over three scratch trees, committed at random points) on three
//! to five in-memory devices with RAID5 or RAID6 metadata. After every
//! commit the image passes the engine's check, and reads back equal to
//! the model with any one device missing (RAID6: any two), each block it
//! held rebuilt from the others and the parity the commit wrote. Commits
//! write partial rows (a few 4 KiB blocks) over rows written before, so
//! the parity of the columns not written must come from the devices.
//!
//! UBTRFS_RAID56_SEEDS (default 2) seeds per layout.

mod common;
mod memcheck;

use common::*;
use std::path::Path;
use std::sync::Arc;
use ubtrfs_engine::fs::Filesystem;
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::io::device::Device;
use ubtrfs_engine::mkfs::{make, MkfsOptions};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::RootItem;

/// The devices without those in `gone`.
fn without(devs: &[Arc<MemDev>], gone: &[usize]) -> Vec<Arc<dyn BlockDev>> {
    devs.iter()
        .enumerate()
        .filter(|(i, _)| !gone.contains(i))
        .map(|(_, d)| d.clone() as Arc<dyn BlockDev>)
        .collect()
}

/// Every set of devices the profile can lose.
fn losses(ndev: usize, nparity: usize) -> Vec<Vec<usize>> {
    let mut v: Vec<Vec<usize>> = (0..ndev).map(|i| vec![i]).collect();
    if nparity == 2 {
        v.extend((0..ndev).flat_map(|i| (i + 1..ndev).map(move |j| vec![i, j])));
    }
    v
}

/// The engine's consistency check of the image on every device.
fn check_all(devs: &[Arc<MemDev>]) -> ubtrfs_engine::Result<()> {
    let devs = devs
        .iter()
        .enumerate()
        .map(|(i, d)| Device::from_dev(Path::new(&format!("mem{i}")), d.clone()))
        .collect::<ubtrfs_engine::Result<Vec<_>>>()?;
    let fs = Filesystem::from_devices(devs, 16 << 20)?;
    ubtrfs_engine::tools::check::check_filesystem(&fs).map(|_| ())
}

fn run(profile: u64, ndev: usize, seed: u64) -> Result<(), String> {
    let nparity = if profile == BG_RAID6 { 2 } else { 1 };
    let devs: Vec<Arc<MemDev>> = (0..ndev).map(|_| Arc::new(MemDev::new(DEV_SIZE))).collect();
    let o = MkfsOptions {
        nodesize: 4096,
        metadata_profile: profile,
        data_profile: profile,
        fsid: Some([0x56; 16]),
        ..Default::default()
    };
    let named = devs
        .iter()
        .enumerate()
        .map(|(i, d)| (format!("mem{i}").into(), d.clone() as Arc<dyn BlockDev>))
        .collect();
    let e = |what: &str, e: ubtrfs_engine::Error| format!("{what}: {e}");
    let mut t = make(named, &o).map_err(|x| e("mkfs", x))?;
    for id in SCRATCH {
        t.create_tree(id, RootItem::default())
            .map_err(|x| e("create tree", x))?;
    }
    t.commit().map_err(|x| e("commit", x))?;
    let mut model = empty_model();
    let mut ops = seeded_ops(seed, 400, 3, 24, 12);
    ops.push(Op::Commit);
    let mut commits = 0;
    for (step, op) in ops.iter().enumerate() {
        if !matches!(op, Op::Commit | Op::Reopen) {
            apply(&mut t, &mut model, op, step)?;
            continue;
        }
        t.commit()
            .map_err(|x| e(&format!("step {step}: commit"), x))?;
        commits += 1;
        check_all(&devs).map_err(|x| e(&format!("step {step}: check"), x))?;
        for gone in losses(ndev, nparity) {
            let (_, got) = read_back_devs(without(&devs, &gone))
                .map_err(|x| format!("step {step}: without devices {gone:?}: {x}"))?;
            for (tree, tm) in &model {
                let g = got.get(tree).ok_or_else(|| {
                    format!("step {step}: without devices {gone:?}: tree {tree} missing")
                })?;
                if g != tm {
                    return Err(format!(
                        "step {step}: without devices {gone:?}: tree {tree} differs ({} items, want {})",
                        g.len(),
                        tm.len()
                    ));
                }
            }
        }
    }
    assert!(commits > 3, "too few commits to test rows written twice");
    Ok(())
}

#[test]
fn raid56_parity_rebuilds_every_device() {
    let n = memcheck::env_count("UBTRFS_RAID56_SEEDS", 2);
    let mut failures = Vec::new();
    for (profile, ndev) in [(BG_RAID5, 3), (BG_RAID5, 4), (BG_RAID6, 4), (BG_RAID6, 5)] {
        for seed in 0..n {
            if let Err(e) = run(profile, ndev, seed) {
                failures.push(format!(
                    "profile {profile:#x} on {ndev} devices, seed {seed}: {e}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
