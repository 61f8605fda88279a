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

/// A filesystem made on `devs` with `profile` metadata and data and the
/// scratch trees, committed.
fn setup(
    devs: Vec<Arc<dyn BlockDev>>,
    profile: u64,
    fsid: u8,
) -> Result<ubtrfs_engine::tx::Trans, String> {
    let o = MkfsOptions {
        nodesize: 4096,
        metadata_profile: profile,
        data_profile: profile,
        fsid: Some([fsid; 16]),
        ..Default::default()
    };
    let named = devs
        .into_iter()
        .enumerate()
        .map(|(i, d)| (format!("mem{i}").into(), d))
        .collect();
    let e = |what: &str, e: ubtrfs_engine::Error| format!("{what}: {e}");
    let mut t = make(named, &o).map_err(|x| e("mkfs", x))?;
    for id in SCRATCH {
        t.create_tree(id, RootItem::default())
            .map_err(|x| e("create tree", x))?;
    }
    t.commit().map_err(|x| e("commit", x))?;
    Ok(t)
}

fn run(profile: u64, ndev: usize, seed: u64) -> Result<(), String> {
    let nparity = if profile == BG_RAID6 { 2 } else { 1 };
    let devs: Vec<Arc<MemDev>> = (0..ndev).map(|_| Arc::new(MemDev::new(DEV_SIZE))).collect();
    let e = |what: &str, e: ubtrfs_engine::Error| format!("{what}: {e}");
    let mut t = setup(devs.iter().map(|d| d.clone() as _).collect(), profile, 0x56)?;
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
    let n = memcheck::env_u64("UBTRFS_RAID56_SEEDS").unwrap_or(2);
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

/// A device failing in the middle of a commit (fault injection: it fails
/// that write or flush and every one after, as a device that died or a
/// crash of its writes) on RAID5/6: the commit fails, and
///
/// - the devices as they are then open at the last commit or at the
///   failed one, whole (both are consistent: the superblocks go last,
///   after every block of the commit is flushed on every device), and
///   pass the engine's check, but for stale parity: the RAID5/6 write
///   hole, as in the kernel — a row the failed commit wrote in part may
///   have its data written and its parity not, so the rebuilt copies of
///   the blocks in that row's columns differ (counted, not refused);
/// - without the failed device (what a device that died leaves), they
///   open and read back at one of those two commits: the parity the
///   survivors got rebuilds the missing device's blocks.
///
/// Returns how the image was found and the stale parity problems seen.
fn run_fault(profile: u64, ndev: usize, seed: u64) -> Result<(&'static str, usize), String> {
    use ubtrfs_engine::io::fault::FaultDev;
    let mut rng = Rng::new(seed ^ profile ^ (ndev as u64) << 32);
    let mems: Vec<Arc<MemDev>> = (0..ndev).map(|_| Arc::new(MemDev::new(DEV_SIZE))).collect();
    let faults: Vec<Arc<FaultDev>> = mems
        .iter()
        .map(|m| Arc::new(FaultDev::new(m.clone(), None)))
        .collect();
    let e = |what: &str, e: ubtrfs_engine::Error| format!("{what}: {e}");
    let mut t = setup(
        faults.iter().map(|d| d.clone() as _).collect(),
        profile,
        0x57,
    )?;
    let all: Vec<Arc<dyn BlockDev>> = mems.iter().map(|m| m.clone() as _).collect();
    let (mut gen, _) = read_back_devs(all.clone())?;
    let mut model = empty_model();
    let mut committed = model.clone();
    let fail_commit = rng.below(4) as usize;
    let mut commits = 0;
    let mut ops = seeded_ops(seed, 300, 3, 24, 12);
    ops.push(Op::Commit);
    for (step, op) in ops.iter().enumerate() {
        if !matches!(op, Op::Commit | Op::Reopen) {
            apply(&mut t, &mut model, op, step)?;
            continue;
        }
        let victim = rng.below(ndev as u64) as usize;
        let faulty = commits == fail_commit;
        if faulty {
            let f = &faults[victim];
            f.fail_at(f.ops() + rng.below(6));
        }
        commits += 1;
        match t.commit() {
            Ok(()) if !faulty => {
                gen += 1;
                committed = model.clone();
            }
            // The fault came after this commit's last write to the device.
            Ok(()) => return Ok(("committed before the fault", 0)),
            Err(x) if !faulty => return Err(e(&format!("step {step}: commit"), x)),
            Err(_) => {
                drop(t);
                let (g, got) = read_back_devs(all.clone())
                    .map_err(|x| format!("step {step}: after device {victim} failed: {x}"))?;
                let (want, found) = match g {
                    _ if g == gen => (&committed, "the last commit"),
                    _ if g == gen + 1 => (&model, "the failed commit"),
                    _ => {
                        return Err(format!(
                            "step {step}: after device {victim} failed: generation {g}, last commit {gen}"
                        ))
                    }
                };
                let stale = match check_all(&mems) {
                    Ok(()) => 0,
                    Err(x) => stale_parity_only(&x.to_string()).ok_or_else(|| {
                        format!("step {step}: after device {victim} failed, at {found}: {x}")
                    })?,
                };
                for (tree, tm) in want {
                    if got.get(tree) != Some(tm) {
                        return Err(format!(
                            "step {step}: after device {victim} failed: tree {tree} is not as {found} left it"
                        ));
                    }
                }
                let survivors = mems
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != victim)
                    .map(|(_, m)| m.clone() as Arc<dyn BlockDev>)
                    .collect();
                let (g2, got2) = read_back_devs(survivors)
                    .map_err(|x| format!("step {step}: without failed device {victim}: {x}"))?;
                let want2 = match g2 {
                    _ if g2 == gen => &committed,
                    _ if g2 == gen + 1 => &model,
                    _ => {
                        return Err(format!(
                            "step {step}: without failed device {victim}: generation {g2}, last commit {gen}"
                        ))
                    }
                };
                for (tree, tm) in want2 {
                    if got2.get(tree) != Some(tm) {
                        return Err(format!(
                            "step {step}: without failed device {victim}: tree {tree} differs from generation {g2}"
                        ));
                    }
                }
                return Ok((found, stale));
            }
        }
    }
    Ok(("no commit to fail", 0))
}

/// The number of problems in an engine check's error if every one is a
/// rebuilt copy (copy 1 and up: parity) that differs; None otherwise.
fn stale_parity_only(err: &str) -> Option<usize> {
    let lines: Vec<&str> = err.lines().skip(1).collect();
    let stale = |l: &&str| {
        l.rsplit_once(": copy ")
            .and_then(|(_, rest)| rest.strip_suffix(" differs"))
            .and_then(|m| m.parse::<u32>().ok())
            .is_some_and(|m| m >= 1)
    };
    (!lines.is_empty() && lines.iter().all(stale)).then_some(lines.len())
}

#[test]
fn raid56_device_failure_in_commit() {
    let n = memcheck::env_u64("UBTRFS_RAID56_SEEDS").unwrap_or(2) * 4;
    let mut failures = Vec::new();
    let mut found = std::collections::BTreeMap::new();
    let mut stale = 0;
    for (profile, ndev) in [(BG_RAID5, 3), (BG_RAID6, 4)] {
        for seed in 0..n {
            match run_fault(profile, ndev, seed) {
                Ok((how, n)) => {
                    *found.entry(how).or_insert(0) += 1;
                    stale += n;
                }
                Err(e) => failures.push(format!(
                    "profile {profile:#x} on {ndev} devices, seed {seed}: {e}"
                )),
            }
        }
    }
    eprintln!(
        "raid56_device_failure_in_commit: {found:?}; {stale} blocks with stale parity (write hole)"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        found.contains_key("the last commit"),
        "no fault left the image at the last commit: {found:?}"
    );
}

/// The read-write mount's writeback on RAID5 data with compress=zstd:
/// rows are written with their parity when the writeback begins (not in
/// its flight), compressed and summed there; the file takes a fraction of
/// its size, reads back with every device and with any one missing, and
/// the image checks clean.
#[test]
fn raid5_compressed_writeback_reads_back() {
    use ubtrfs_engine::FileHandle;
    let devs: Vec<Arc<MemDev>> = (0..3).map(|_| Arc::new(MemDev::new(DEV_SIZE))).collect();
    let t = setup(
        devs.iter().map(|d| d.clone() as _).collect(),
        BG_RAID5,
        0x57,
    )
    .unwrap();
    let (mut fs, root) = memcheck::zstd_mount(t);
    let id = fs.create(root, b"f", 0o100644, 0, (0, 0), None).unwrap();
    let want = memcheck::compressible(b"rows written with their parity. ", (3 << 20) + 777, 14);
    let before = fs.statfs().bfree;
    fs.write(id, 0, &want).unwrap();
    fs.commit().unwrap();
    let used = (before - fs.statfs().bfree) * 4096;
    assert!(
        used < want.len() as u64 / 2,
        "{used} bytes used for {} bytes: not compressed",
        want.len()
    );
    fs.unmount().unwrap();
    drop(fs);
    check_all(&devs).unwrap();
    let mut sets = vec![vec![]];
    sets.extend(losses(3, 1));
    for gone in sets {
        let devices = without(&devs, &gone)
            .into_iter()
            .enumerate()
            .map(|(i, d)| Device::from_dev(Path::new(&format!("mem{i}")), d).unwrap())
            .collect();
        let reader = Filesystem::from_devices(devices, 16 << 20).unwrap();
        let mut fh = FileHandle::open(&reader, id).unwrap();
        let mut got = vec![0u8; want.len()];
        assert_eq!(fh.read_at(&reader, 0, &mut got).unwrap(), want.len());
        assert!(got == want, "read back without devices {gone:?}");
    }
}
