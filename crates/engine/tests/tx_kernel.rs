//! Crash images checked by the real tools: prefixes (at flushes) and torn
//! variants of a recorded workload, written to files and given to
//! `btrfs check --readonly` (btrfs-progs), a few also loop-mounted by the
//! kernel (root only), and the final image mounted read-write, written to
//! by the kernel, and checked again.
//!
//! Skipped when `btrfs` (or, for mounts, root) is missing, unless
//! UBTRFS_REQUIRE_KERNEL=1, which makes missing tools a failure:
//!
//!     UBTRFS_REQUIRE_KERNEL=1 cargo test --release -p ubtrfs-engine --test tx_kernel

mod common;
mod memcheck;

use common::*;
use memcheck::check::{btrfs_check, btrfs_progs_here};
use std::path::{Path, PathBuf};
use std::process::Command;
use ubtrfs_engine::io::dev::MemDev;
use ubtrfs_engine::io::fault::{Event, Log};
use ubtrfs_format::consts::SUPER_OFFSETS;
use ubtrfs_format::Superblock;

fn require() -> bool {
    std::env::var("UBTRFS_REQUIRE_KERNEL").is_ok_and(|v| v == "1")
}

fn have(cmd: &str, arg: &str) -> bool {
    Command::new(cmd)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{cmd:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Loop-mounts `img` (read-only, or read-write and writes a file), lists
/// the top directory, unmounts.
fn kernel_mount(img: &Path, dir: &Path, rw: bool) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let opts = if rw { "loop" } else { "loop,ro" };
    run(Command::new("mount").args(["-o", opts]).arg(img).arg(dir))?;
    let r = (|| {
        std::fs::read_dir(dir).map_err(|e| e.to_string())?.count();
        if rw {
            std::fs::write(dir.join("written-by-kernel"), b"hello").map_err(|e| e.to_string())?;
            run(Command::new("sync").arg("-f").arg(dir))?;
        }
        Ok(())
    })();
    let u = run(Command::new("umount").arg(dir));
    r.and(u.map(|_| ()))
}

struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn crash_images_pass_btrfs_check_and_mount() {
    if !btrfs_progs_here() {
        assert!(!require(), "UBTRFS_REQUIRE_KERNEL=1 but `btrfs` is missing");
        eprintln!("skipped: no btrfs-progs");
        return;
    }
    let mount = is_root() && have("mount", "--version");
    if !mount {
        assert!(
            !require(),
            "UBTRFS_REQUIRE_KERNEL=1 but loop mounts need root"
        );
        eprintln!("no root: btrfs check only");
    }
    let seed = memcheck::env_u64("UBTRFS_SEED").unwrap_or(0x5eed);
    let checks = cases(20) as usize;
    let tmp = Tmp(std::env::temp_dir().join(format!("ubtrfs-txk-{}", std::process::id())));
    std::fs::create_dir_all(&tmp.0).unwrap();
    let img = tmp.0.join("img");
    let mnt = tmp.0.join("mnt");
    for (round, ns) in [4096u32, 16384].into_iter().enumerate() {
        // The second round's commits are deferred at random (the
        // commit's thread writes the blocks and the superblock).
        let (log, _) = record_with(seed + round as u64, ns, 150, round == 1).unwrap();
        let flushes = log.flushes();
        let mut rng = Rng::new(seed ^ ns as u64);
        // Which flush prefixes to check: the last always, others at random,
        // from the first that holds a superblock (before it, mkfs has only
        // wiped the old ones: no filesystem yet).
        let first = flushes
            .iter()
            .position(|&f| {
                log.events[..f].iter().any(|e| match e {
                    Event::Write { off, data } => {
                        *off == SUPER_OFFSETS[0] && Superblock::parse(data).is_ok()
                    }
                    _ => false,
                })
            })
            .expect("a superblock is written");
        let mut pick: Vec<usize> = (first..flushes.len()).collect();
        rng.shuffle(&mut pick);
        pick.truncate(checks / 2);
        pick.push(flushes.len() - 1);
        pick.sort_unstable();
        pick.dedup();
        let d = MemDev::new(DEV_SIZE);
        let mut at = 0;
        let mut mounts = 0;
        let mut checked = 0;
        for &fi in &pick {
            let f = flushes[fi];
            log.replay(&d, at, f).unwrap();
            at = f;
            memcheck::write_sparse(&img, &d.snapshot());
            btrfs_check(&img, &[]).unwrap_or_else(|e| panic!("ns {ns} prefix to flush {fi}: {e}"));
            checked += 1;
            // A torn variant of the writes up to the next flush.
            let next = flushes.get(fi + 1).copied().unwrap_or(log.events.len());
            let mut picks: Vec<usize> = log
                .writes_in(f, next)
                .iter()
                .map(|w| w.0)
                .filter(|_| rng.below(2) == 0)
                .collect();
            if !picks.is_empty() {
                rng.shuffle(&mut picks);
                let undo = log.torn(&d, &picks).unwrap();
                memcheck::write_sparse(&img, &d.snapshot());
                btrfs_check(&img, &[])
                    .unwrap_or_else(|e| panic!("ns {ns} torn after flush {fi}: {e}"));
                Log::undo(&d, undo).unwrap();
            }
            if mount && mounts < 2 && rng.below(3) == 0 {
                memcheck::write_sparse(&img, &d.snapshot());
                kernel_mount(&img, &mnt, false)
                    .unwrap_or_else(|e| panic!("ns {ns} prefix to flush {fi}: mount: {e}"));
                mounts += 1;
            }
        }
        if mount {
            // The final image: the kernel writes to it, and it stays clean.
            memcheck::write_sparse(&img, &d.snapshot());
            kernel_mount(&img, &mnt, true).unwrap_or_else(|e| panic!("ns {ns}: rw mount: {e}"));
            btrfs_check(&img, &[]).unwrap_or_else(|e| panic!("ns {ns} after kernel writes: {e}"));
            checked += 1;
        }
        eprintln!(
            "ns {ns}: {} flushes, {checked} images passed btrfs check, {mounts} read-only mounts{}",
            flushes.len(),
            if mount {
                ", final image mounted rw"
            } else {
                ""
            }
        );
    }
}
