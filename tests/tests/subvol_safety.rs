//! Writers on bad input and under kill -9 (root), issue 9:
//!
//! - `corrupt_image_refused_before_writing`: an image whose extent tree,
//!   root tree or fs tree root block fails its checksum (every copy), or
//!   whose primary superblock is bad, opened read-write by `ubtrfs
//!   subvolume snapshot|create|delete`: refused with an error naming the
//!   problem, and the image's bytes are unchanged (hashed before/after).
//! - `killed_snapshot_and_delete_leave_a_whole_commit`: `subvolume
//!   snapshot` and `subvolume delete` killed with SIGKILL at seeded moments
//!   (UBTRFS_CRASH_KILLS each, default 8): every time `btrfs check
//!   --readonly` is clean and the kernel mounts the image at the old or the
//!   new generation (the snapshot absent, or present with every file equal
//!   to the source; the deleted subvolume whole, or gone).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use ubtrfs_oracle::manifest_of;
use ubtrfs_oracle::mkfs_support::{crash_kills, must, source_tree};
use ubtrfs_oracle::*;

fn ubtrfs(args: &[&str], image: &Path) -> std::process::Output {
    let mut c = Command::new(ubtrfs_bin());
    c.arg("subvolume").arg(args[0]).arg(image).args(&args[1..]);
    c.output().unwrap()
}

fn sha256(p: &Path) -> String {
    must(Command::new("sha256sum").arg(p))
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// Physical offsets of every copy of logical `logical` (single/DUP
/// chunks of one device), from the chunk tree as btrfs prints it.
fn physical_copies(image: &Path, logical: u64) -> Vec<u64> {
    let out = must(
        Command::new("btrfs")
            .args(["inspect-internal", "dump-tree", "-t", "chunk"])
            .arg(image),
    );
    let mut chunk: Option<(u64, u64)> = None;
    let mut copies = Vec::new();
    for line in out.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if line.contains("CHUNK_ITEM") {
            let start: u64 = w[w.iter().position(|x| *x == "CHUNK_ITEM").unwrap() + 1]
                .trim_end_matches(')')
                .parse()
                .unwrap();
            chunk = Some((start, 0));
        } else if w.first() == Some(&"length") {
            if let Some(c) = chunk.as_mut() {
                c.1 = w[1].parse().unwrap();
            }
        } else if w.first() == Some(&"stripe") && w.get(4) == Some(&"offset") {
            let (start, len) = chunk.unwrap();
            if (start..start + len).contains(&logical) {
                copies.push(w[5].parse::<u64>().unwrap() + (logical - start));
            }
        }
    }
    assert!(!copies.is_empty(), "no chunk maps logical {logical}");
    copies
}

/// Logical address of the root block of tree `name` (EXTENT_TREE,
/// FS_TREE, ...) from the root tree.
fn tree_root(image: &Path, name: &str) -> u64 {
    let out = must(
        Command::new("btrfs")
            .args(["inspect-internal", "dump-tree", "-t", "root"])
            .arg(image),
    );
    let mut lines = out.lines();
    while let Some(l) = lines.next() {
        if l.contains(&format!("key ({name} ROOT_ITEM")) {
            let next = lines.next().unwrap();
            let w: Vec<&str> = next.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "bytenr").unwrap();
            return w[i + 1].parse().unwrap();
        }
    }
    panic!("no ROOT_ITEM for {name}:\n{out}");
}

fn super_root(image: &Path) -> u64 {
    let out = must(
        Command::new("btrfs")
            .args(["inspect-internal", "dump-super"])
            .arg(image),
    );
    out.lines()
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.first() == Some(&"root")).then(|| w[1].parse().unwrap())
        })
        .unwrap()
}

/// Flips two bytes at each offset (inside a block, past its checksum).
fn corrupt(image: &Path, offsets: &[u64]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(image)
        .unwrap();
    for &o in offsets {
        let mut b = [0u8; 2];
        f.read_exact_at(&mut b, o).unwrap();
        f.write_all_at(&[!b[0], b[1] ^ 0x5a], o).unwrap();
    }
}

#[test]
fn corrupt_image_refused_before_writing() {
    skip_unless!(kernel_available);
    let (src, _) = source_tree();
    let dir = scratch_dir("subvol-corrupt");
    let base = dir.join("base.img");
    must(
        Command::new(ubtrfs_bin())
            .args(["mkfs", "-q", "-b", "300M", "-r"])
            .arg(src)
            .arg(&base),
    );
    let out = ubtrfs(&["create", "/sub"], &base);
    assert!(out.status.success(), "{out:?}");
    // Inside each block, away from the header's checksum field.
    let blocks = [
        ("extent tree", tree_root(&base, "EXTENT_TREE")),
        ("root tree", super_root(&base)),
        ("fs tree", tree_root(&base, "FS_TREE")),
    ];
    let mut cases: Vec<(String, Vec<u64>, &str)> = blocks
        .iter()
        .map(|(what, logical)| {
            let offs = physical_copies(&base, *logical)
                .into_iter()
                .map(|p| p + 1000)
                .collect();
            (what.to_string(), offs, "checksum mismatch")
        })
        .collect();
    cases.push((
        "primary superblock".into(),
        vec![65536 + 300],
        "primary superblock",
    ));
    let img = dir.join("img");
    for (what, offsets, expect) in &cases {
        for op in [
            &["snapshot", "/", "/snap"][..],
            &["snapshot", "-r", "/sub", "/snap"][..],
            &["create", "/new"][..],
            &["delete", "/sub"][..],
        ] {
            std::fs::copy(&base, &img).unwrap();
            corrupt(&img, offsets);
            let before = sha256(&img);
            let mut c = Command::new(ubtrfs_bin());
            c.arg("subvolume").arg(op[0]);
            let rest: Vec<&str> = op[1..]
                .iter()
                .copied()
                .filter(|a| a.starts_with('-'))
                .collect();
            let paths: Vec<&str> = op[1..]
                .iter()
                .copied()
                .filter(|a| !a.starts_with('-'))
                .collect();
            c.args(&rest).arg(&img).args(&paths);
            let out = c.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success(),
                "{what}, {op:?}: not refused: {}",
                String::from_utf8_lossy(&out.stdout)
            );
            assert!(err.contains(expect), "{what}, {op:?}: unclear error: {err}");
            assert_eq!(
                sha256(&img),
                before,
                "{what}, {op:?}: the image was written"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn killed_snapshot_and_delete_leave_a_whole_commit() {
    skip_unless!(kernel_available);
    let (src, src_manifest) = source_tree();
    let want = file_sums(src_manifest);
    let dir = scratch_dir("subvol-kill");
    let base = dir.join("base.img");
    // 4 KiB nodes: many blocks to drop in the delete.
    must(
        Command::new(ubtrfs_bin())
            .args(["mkfs", "-q", "-n", "4096", "-b", "512M", "-r"])
            .arg(src)
            .arg(&base),
    );
    let out = ubtrfs(&["snapshot", "/", "/old"], &base);
    assert!(out.status.success(), "{out:?}");
    let img = dir.join("img");
    let mut rng = Rng::new(0x5eed_d31e);
    let ops: [(&str, &[&str]); 2] = [
        ("snapshot", &["snapshot", "/", "/snap"]),
        ("delete", &["delete", "/old"]),
    ];
    for (name, op) in ops {
        // A full run: its length, and that it is clean.
        std::fs::copy(&base, &img).unwrap();
        let t0 = Instant::now();
        let out = ubtrfs(op, &img);
        let full = t0.elapsed();
        assert!(out.status.success(), "{name}: {out:?}");
        btrfs_check(&img, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (mut old, mut new) = (0, 0);
        for i in 0..crash_kills() {
            std::fs::copy(&base, &img).unwrap();
            let delay = Duration::from_micros(rng.below(full.as_micros() as u64 * 5 / 4 + 1));
            let mut c = Command::new(ubtrfs_bin());
            c.arg("subvolume")
                .arg(op[0])
                .arg(&img)
                .args(&op[1..])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut child = c.spawn().unwrap();
            std::thread::sleep(delay);
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            let status = child.wait().unwrap();
            let what = format!("{name}: kill {i} after {delay:?} of {full:?} ({status})");
            btrfs_check(&img, &[]).unwrap_or_else(|e| panic!("{what}: {e}"));
            let m = Mount::images(std::slice::from_ref(&img), "", true);
            let (present, target) = match name {
                "snapshot" => (m.path("snap").exists(), "snap"),
                _ => (m.path("old").exists(), "old"),
            };
            m.unmount();
            if present {
                // Mounted by itself: manifest.py writes beside the
                // directory it reads, outside the read-only mount.
                let m = Mount::images(
                    std::slice::from_ref(&img),
                    &format!("subvol={target}"),
                    true,
                );
                let root: PathBuf = m.path("").components().collect();
                let got = file_sums(&manifest_of(&root));
                m.unmount();
                assert_eq!(got, want, "{what}: /{target} differs from the source");
            }
            // The snapshot appears at the new generation, the deleted
            // subvolume disappears.
            if present == (name == "snapshot") {
                new += 1;
            } else {
                old += 1;
            }
        }
        eprintln!(
            "{name}: {} kills over {full:?}: {old} at the old generation, {new} at the new",
            crash_kills()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
