//! Crash safety against a real kill (root): `ubtrfs mkfs -r` over the rich
//! source tree, with a commit every few tree blocks
//! (UBTRFS_MKFS_COMMIT_BLOCKS), killed with SIGKILL at seeded moments. Each
//! time the image must either hold no filesystem yet (killed before the
//! first superblock) or pass `btrfs check --readonly` and mount with the
//! kernel, every regular file it shows equal to the source's (a commit
//! only ever lands between whole files).
//!
//! UBTRFS_CRASH_KILLS sets how many kills (default 8; `bench/` runs use
//! hundreds).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use ubtrfs_oracle::manifest_of;
use ubtrfs_oracle::mkfs_support::{crash_kills, source_tree};
use ubtrfs_oracle::*;

fn mkfs(image: &std::path::Path, src: &std::path::Path) -> Command {
    let mut c = Command::new(ubtrfs_bin());
    c.args(["mkfs", "-q", "-f", "-n", "4096", "-b", "512M", "-r"])
        .arg(src)
        .arg(image)
        .env("UBTRFS_MKFS_COMMIT_BLOCKS", "64")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

fn has_superblock(image: &std::path::Path) -> bool {
    Command::new("btrfs")
        .args(["inspect-internal", "dump-super"])
        .arg(image)
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("[match]"))
}

#[test]
fn killed_mkfs_leaves_a_whole_commit() {
    skip_unless!(kernel_available);
    let (src, src_manifest) = source_tree();
    let want = file_sums(src_manifest);
    let dir = scratch_dir("crash-kill");
    let image = dir.join("img");
    // A full run first: how long it takes, and that it is clean.
    let t0 = Instant::now();
    let out = mkfs(&image, src).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let full = t0.elapsed();
    btrfs_check(&image, &[]).unwrap_or_else(|e| panic!("the full run: {e}"));
    let mut rng = Rng::new(0x6b1c_0de5);
    let (mut empty, mut partial) = (0, 0);
    for i in 0..crash_kills() {
        std::fs::remove_file(&image).ok();
        let delay = Duration::from_micros(rng.below(full.as_micros() as u64 + 1));
        let mut child = mkfs(&image, src).spawn().unwrap();
        std::thread::sleep(delay);
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let status = child.wait().unwrap();
        let what = format!("kill {i} after {delay:?} (run {status})");
        if !has_superblock(&image) {
            empty += 1;
            continue;
        }
        btrfs_check(&image, &[]).unwrap_or_else(|e| panic!("{what}: {e}"));
        let m = Mount::images(std::slice::from_ref(&image), "", true);
        let root: std::path::PathBuf = m.path("").components().collect();
        let got = file_sums(&manifest_of(&root));
        m.unmount();
        for (p, sum) in &got {
            assert_eq!(
                want.get(p),
                Some(sum),
                "{what}: {p} differs from the source"
            );
        }
        partial += 1;
    }
    eprintln!(
        "crash_kill: {} kills: {empty} before the first commit, {partial} at a commit",
        crash_kills()
    );
}
