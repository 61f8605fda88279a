//! Fresh kernel-made fixtures (root): every image of the matrix must read
//! exactly as the kernel showed it; RAID images also with a device missing
//! and with a bad copy; extract must reproduce the tree; scrub must find
//! injected corruption and nothing else.
//!
//! Needs root, the kernel's btrfs and btrfs-progs. In CI
//! (UBTRFS_REQUIRE_KERNEL=1) a missing prerequisite fails the run.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use ubtrfs_oracle::*;

/// Profiles that survive losing one device.
fn redundant(p: &str) -> bool {
    matches!(
        p,
        "raid1" | "raid10" | "raid1c3" | "raid1c4" | "raid5" | "raid6"
    )
}

#[test]
fn kernel_fixtures_match_kernel_manifests() {
    skip_unless!(kernel_available);
    let mut failures = Vec::new();
    for f in kernel_fixtures() {
        let t = std::time::Instant::now();
        match f.ubtrfs_manifest(None) {
            Ok(actual) => {
                match compare_manifests(&f.kernel_manifest(), &actual, &Ignore::default()) {
                    Ok(n) => eprintln!(
                        "{}: {n} paths match the kernel ({:.1?})",
                        f.name,
                        t.elapsed()
                    ),
                    Err(d) => failures.push(format!("{}: {d}", f.name)),
                }
            }
            Err(e) => failures.push(format!("{}: {e}", f.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn kernel_raid_fixtures_read_degraded() {
    skip_unless!(kernel_available);
    let mut failures = Vec::new();
    for f in kernel_fixtures().iter().filter(|f| f.devices().len() > 1) {
        let ok = redundant(&f.profile("data")) && redundant(&f.profile("metadata"));
        for skip in 0..f.devices().len() {
            let res = f.ubtrfs_manifest(Some(skip));
            match (ok, res) {
                (true, Ok(actual)) => {
                    if let Err(d) =
                        compare_manifests(&f.kernel_manifest(), &actual, &Ignore::default())
                    {
                        failures.push(format!("{} without device {skip}: {d}", f.name));
                    }
                }
                (true, Err(e)) => failures.push(format!("{} without device {skip}: {e}", f.name)),
                // Without redundancy a clean error is the right answer.
                (false, Err(e)) => {
                    if e.contains("panicked") || !e.contains("error:") {
                        failures.push(format!(
                            "{} without device {skip}: not a clean error: {e}",
                            f.name
                        ));
                    }
                }
                (false, Ok(_)) => {}
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn kernel_extract_reproduces_tree() {
    skip_unless!(kernel_available);
    let base = scratch_dir("extract");
    let mut failures = Vec::new();
    for f in kernel_fixtures() {
        let dest = base.join(&f.name);
        let mut args = vec!["extract".to_string()];
        args.extend(f.image_args(None));
        args.push("/".into());
        args.push(dest.display().to_string());
        let out = ubtrfs(&args);
        if !out.status.success() {
            failures.push(format!(
                "{}: extract failed: {}",
                f.name,
                String::from_utf8_lossy(&out.stderr)
            ));
            continue;
        }
        let actual = manifest_of(&dest);
        // Inode numbers and directory sizes are the host filesystem's.
        let ignore = Ignore {
            fields: vec!["ino"],
            dir_size: true,
        };
        match compare_manifests(&f.kernel_manifest(), &actual, &ignore) {
            Ok(n) => eprintln!("{}: extracted {n} paths equal to the kernel's", f.name),
            Err(d) => failures.push(format!("{} extract: {d}", f.name)),
        }
        let _ = std::fs::remove_dir_all(&dest);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Scrub and `ubtrfs check --check-data-csum` find nothing on the
/// kernel's images (every profile, checksum and compression, subvolumes,
/// snapshots of snapshots, reflinks, inline files, holes, xattrs), which
/// `btrfs check` passes (tests/fixtures/build.sh).
#[test]
fn kernel_fixtures_scrub_and_check_clean() {
    skip_unless!(kernel_available);
    let mut failures = Vec::new();
    for f in kernel_fixtures() {
        for cmd in [&["scrub"][..], &["check", "--check-data-csum"]] {
            let mut args: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
            args.extend(f.image_args(None));
            let out = ubtrfs(&args);
            if !out.status.success() {
                failures.push(format!(
                    "{}: {} of a clean image reported errors: {}{}",
                    f.name,
                    cmd[0],
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// (image file, physical offset) of copy `mirror` (1-based) of `logical`,
/// as btrfs-progs' btrfs-map-logical reports it.
fn map_logical(loops: &Loops, logical: u64, mirror: usize) -> (PathBuf, u64) {
    let out = Command::new("btrfs-map-logical")
        .args(["-l", &logical.to_string(), loops.first()])
        .output()
        .expect("btrfs-map-logical");
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        // "mirror N logical L physical P device D"
        if w.len() >= 8 && w[0] == "mirror" && w[1] == mirror.to_string() {
            return (loops.image_of(w[7]).to_path_buf(), w[5].parse().unwrap());
        }
    }
    panic!("btrfs-map-logical gave no mirror {mirror} for {logical}: {text}");
}

/// Corruption targets from btrfs-progs' dump-tree of the unmounted image:
/// up to `n` tree blocks (of any tree) and up to `n` distinct data extents
/// that have checksums (a nodatasum extent cannot be caught by anyone),
/// picked evenly from the lists.
fn pick_targets(dev: &Path, n: usize) -> (Vec<u64>, Vec<u64>) {
    let dump = |args: &[&str]| {
        let out = run_ok(
            Command::new("btrfs")
                .args(["inspect-internal", "dump-tree"])
                .args(args)
                .arg(dev),
            "dump-tree",
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut blocks = Vec::new();
    for line in dump(&[]).lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if matches!(w.first(), Some(&"leaf") | Some(&"node")) {
            if let Some(b) = w.get(1).and_then(|x| x.parse::<u64>().ok()) {
                blocks.push(b);
            }
        }
    }
    let mut csummed = Vec::new();
    for line in dump(&["-t", "csum"]).lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() >= 5 && w[0] == "range" && w[1] == "start" {
            csummed.push((w[2].parse::<u64>().unwrap(), w[4].parse::<u64>().unwrap()));
        }
    }
    let mut data = Vec::new();
    for line in dump(&["-t", "5"]).lines() {
        if let Some(rest) = line.trim().strip_prefix("extent data disk byte ") {
            let b: u64 = rest.split_whitespace().next().unwrap().parse().unwrap();
            if b != 0 && csummed.iter().any(|&(s, e)| s <= b && b < e) && !data.contains(&b) {
                data.push(b);
            }
        }
    }
    blocks.sort_unstable();
    blocks.dedup();
    let pick = |v: &[u64]| -> Vec<u64> {
        let step = v.len().div_ceil(n).max(1);
        v.iter().step_by(step).take(n).copied().collect()
    };
    let (b, d) = (pick(&blocks), pick(&data));
    assert!(
        !b.is_empty() && !d.is_empty(),
        "no targets in {}",
        dev.display()
    );
    (b, d)
}

fn smash(file: &Path, physical: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.write_all_at(b"ubtrfs-corruption-test", physical + 100)
        .unwrap();
}

#[test]
fn kernel_bad_copy_is_survived_and_scrub_finds_it() {
    skip_unless!(kernel_available);
    let base = scratch_dir("badcopy");
    let mut tested = 0;
    for f in kernel_fixtures() {
        let data_p = f.profile("data");
        let meta_p = f.profile("metadata");
        let mirrored = |p: &str| matches!(p, "dup" | "raid1" | "raid10" | "raid1c3" | "raid1c4");
        if !mirrored(&data_p) || !mirrored(&meta_p) {
            continue;
        }
        // Work on a copy so other tests keep a clean fixture.
        let dir = base.join(&f.name);
        let copy = f.copy_to(&dir);
        let (blocks, data);
        {
            let loops = Loops::attach(&copy.devices(), false);
            (blocks, data) = pick_targets(Path::new(loops.first()), 4);
            for &logical in blocks.iter().chain(&data) {
                let (img, phys) = map_logical(&loops, logical, 1);
                smash(&img, phys);
            }
        }
        // Every read falls back to the good copy: the kernel's view holds.
        let actual = copy
            .ubtrfs_manifest(None)
            .unwrap_or_else(|e| panic!("{}: {e}", f.name));
        if let Err(d) = compare_manifests(&copy.kernel_manifest(), &actual, &Ignore::default()) {
            panic!("{} with bad copies: {d}", f.name);
        }
        // Scrub names every injected error, and nothing else.
        let mut args = vec!["scrub".to_string()];
        args.extend(copy.image_args(None));
        let out = ubtrfs(&args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !out.status.success(),
            "{}: scrub missed the corruption: {text}",
            f.name
        );
        let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error:")).collect();
        for b in &blocks {
            assert!(
                errors
                    .iter()
                    .any(|l| l.contains(&format!("tree block at logical {b} copy 0"))),
                "{}: scrub did not name tree block {b}: {text}",
                f.name
            );
        }
        for d in &data {
            let line = errors
                .iter()
                .find(|l| l.contains(&format!("data at logical {d} copy 0")))
                .unwrap_or_else(|| panic!("{}: scrub did not name data {d}: {text}", f.name));
            assert!(
                line.contains(", file /"),
                "{}: no file path in {line}",
                f.name
            );
        }
        assert_eq!(
            errors.len(),
            blocks.len() + data.len(),
            "{}: scrub reported other errors: {text}",
            f.name
        );
        eprintln!("{}: bad copies survived and found by scrub", f.name);
        tested += 1;
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(tested >= 2, "too few mirrored fixtures tested ({tested})");
}
