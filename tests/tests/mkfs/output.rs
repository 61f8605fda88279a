//! What mkfs says and makes beside the tree: its errors, `--json`,
//! reproducible images (also over threads), and `--reflink`.

use super::*;

/// Wrong input fails with exit status 1 and a message naming the problem,
/// and leaves an existing filesystem alone.
#[test]
fn mkfs_errors() {
    let base = scratch_dir("mkfs-errors");
    let img = |n: &str, size: u64| -> PathBuf {
        let p = base.join(n);
        std::fs::File::create(&p).unwrap().set_len(size).unwrap();
        p
    };
    let fail = |args: &[&str], paths: &[&Path], want: &str| {
        let mut cmd = Command::new(ubtrfs_bin());
        cmd.args(["mkfs"]).args(args).args(paths);
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
        assert_eq!(out.status.code(), Some(1), "{}", report(&cmd, &out));
        assert!(
            err.contains(want),
            "want {want:?} in the message: {}",
            report(&cmd, &out)
        );
    };
    let small = img("small.img", MIB);
    fail(&[], &[&small], "too small");
    let one = img("one.img", 256 * MIB);
    fail(&["-d", "raid1"], &[&one], "needs at least 2 devices");
    fail(
        &["-m", "raid1c3"],
        &[&one, &small],
        "needs at least 3 devices",
    );
    fail(&["-m", "raid5"], &[&one], "needs at least 2 devices");
    fail(
        &["-d", "raid6"],
        &[&one, &small],
        "needs at least 3 devices",
    );
    fail(&["-U", "not-a-uuid"], &[&one], "not a uuid");
    fail(
        &["-U", "0123456789abcdef0123456789abcdeg"],
        &[&one],
        "not a uuid",
    );
    fail(&["--csum", "md5"], &[&one], "checksum");
    fail(&["-n", "3000"], &[&one], "nodesize");
    fail(&["-O", "raid56"], &[&one], "not supported");
    // Mixed block groups, as mkfs.btrfs: the nodesize must be the
    // sectorsize, the profiles equal (a one-sided -m or -d against the
    // other's single default too).
    fail(&["-M", "-n", "16384"], &[&one], "illegal nodesize 16384");
    fail(
        &["-M", "-n", "16k", "-s", "4k"],
        &[&one],
        "mixed block groups",
    );
    fail(&["-M", "-m", "dup"], &[&one], "profiles must be the same");
    fail(
        &["-M", "-m", "dup", "-d", "single"],
        &[&one],
        "profiles must be the same",
    );
    fail(&["-M", "-d", "raid1"], &[&one], "profiles must be the same");
    fail(&["-M"], &[&small], "too small");
    fail(&["-r", "/nonexistent/dir"], &[&one], "nonexistent");
    // A symlink target longer than a 4K leaf holds inline (the kernel
    // refuses it there with ENAMETOOLONG; mkfs.btrfs 6.2 hits a BUG_ON).
    let long = base.join("long-link");
    std::fs::create_dir_all(&long).unwrap();
    std::os::unix::fs::symlink("x".repeat(4095), long.join("l")).unwrap();
    fail(
        &["-f", "-n", "4k", "-r", long.to_str().unwrap()],
        &[&img("long.img", 256 * MIB)],
        "long-link/l",
    );
    // None of the failures above wrote a filesystem.
    let out = Command::new(ubtrfs_bin())
        .args(["mkfs", "-q"])
        .arg(&one)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let before = std::fs::read(&one).unwrap();
    fail(&[], &[&one], "existing filesystem (btrfs)");
    assert!(std::fs::read(&one).unwrap() == before, "image changed");
    let out = Command::new(ubtrfs_bin())
        .args(["mkfs", "-q", "-f"])
        .arg(&one)
        .output()
        .unwrap();
    assert!(out.status.success(), "-f: {out:?}");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn mkfs_json() {
    let base = scratch_dir("mkfs-json");
    let a = base.join("a.img");
    let b = base.join("b.img");
    let out = Command::new(ubtrfs_bin())
        .args(["mkfs", "--json", "-L", "lbl", "-b", "300M", "-d", "raid1"])
        .args(["-U", "11111111-2222-3333-4444-555555555555"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("--json output does not parse ({e}): {out:?}"));
    assert_eq!(v["uuid"], "11111111-2222-3333-4444-555555555555");
    assert_eq!(v["label"], "lbl");
    assert_eq!(v["nodesize"], 16384);
    assert_eq!(v["sectorsize"], 4096);
    assert_eq!(v["csum"], "crc32c");
    assert_eq!(v["total_bytes"], 600 * MIB);
    assert_eq!(v["devices"].as_array().map(|d| d.len()), Some(2));
    let _ = std::fs::remove_dir_all(&base);
}

/// Whether two files hold the same bytes (cmp -s).
fn identical(a: &Path, b: &Path) -> bool {
    Command::new("cmp")
        .arg("-s")
        .arg(a)
        .arg(b)
        .status()
        .unwrap()
        .success()
}

/// The same source, -U and SOURCE_DATE_EPOCH give the same bytes; without
/// -U the filesystem (and device, chunk tree) UUIDs are fresh.
#[test]
fn mkfs_reproducible() {
    skip_unless!(kernel_available);
    let (src, _) = source_tree();
    let base = scratch_dir("mkfs-repro");
    let make = |name: &str, uuid: bool| -> PathBuf {
        let p = base.join(name);
        let mut cmd = Command::new(ubtrfs_bin());
        cmd.env("SOURCE_DATE_EPOCH", "1700000000")
            .args(["mkfs", "-q", "-b", "300M", "-r"])
            .arg(src);
        if uuid {
            cmd.args(["-U", "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"]);
        }
        must(cmd.arg(&p));
        p
    };
    let a = make("a.img", true);
    let b = make("b.img", true);
    let c = make("c.img", false);
    assert!(
        identical(&a, &b),
        "same -U and SOURCE_DATE_EPOCH: images differ"
    );
    assert!(!identical(&a, &c), "without -U the images are identical");
    btrfs_check(&a, &[]).unwrap();
    let _ = std::fs::remove_dir_all(&base);
}

/// The data threads change nothing: 1, 2 and 5 threads (reading,
/// compressing and checksumming file data, the walker allocating in its
/// order) give byte-identical images, with and without compression.
#[test]
fn mkfs_threads_identical() {
    skip_unless!(kernel_available);
    let (src, _) = source_tree();
    let base = scratch_dir("mkfs-threads");
    for extra in [
        &[][..],
        &["--compress", "zstd"][..],
        &["--compress", "lzo"][..],
    ] {
        let images: Vec<PathBuf> = ["1", "2", "5"]
            .iter()
            .map(|threads| {
                let p = base.join(format!("t{threads}.img"));
                let _ = std::fs::remove_file(&p);
                let mut cmd = Command::new(ubtrfs_bin());
                cmd.env("SOURCE_DATE_EPOCH", "1700000000")
                    .args(["mkfs", "-q", "-b", "300M", "--threads", threads])
                    .args(["-U", "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"])
                    .args(extra)
                    .arg("-r")
                    .arg(src);
                must(cmd.arg(&p));
                p
            })
            .collect();
        for other in &images[1..] {
            assert!(
                identical(&images[0], other),
                "{extra:?}: {} differs from 1 thread",
                other.display()
            );
        }
        btrfs_check(&images[1], &[]).unwrap();
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// Bytes `btrfs filesystem du --raw -s PATH` shows as (total, exclusive,
/// set shared).
fn fi_du(path: &Path) -> (u64, u64, u64) {
    let out = must(
        Command::new("btrfs")
            .args(["filesystem", "du", "--raw", "-s"])
            .arg(path),
    );
    let line = out.lines().last().unwrap_or_default();
    let n: Vec<u64> = line
        .split_whitespace()
        .take(3)
        .map(|w| w.parse().unwrap_or_else(|_| panic!("btrfs fi du: {out}")))
        .collect();
    (n[0], n[1], n[2])
}

/// `--reflink`: the source tree and the image file on a host btrfs (a loop
/// device); the image's data is shared with the source (btrfs fi du: the
/// image's shared bytes cover every whole sector of the source's files),
/// the image passes `btrfs check`, mounts and shows the source exactly,
/// takes kernel writes and checks clean again; with DUP data too. Refused
/// before anything is written when DIR and the image are on different
/// filesystems, and without --rootdir.
#[test]
fn mkfs_reflink() {
    skip_unless!(kernel_available);
    let (orig, _) = source_tree();
    let base = scratch_dir("mkfs-reflink");
    let host_img = image_files(&base, "host", 1, 2048 * MIB).remove(0);
    must(Command::new("mkfs.btrfs").args(["-q", "-f"]).arg(&host_img));
    let host_loop = Loop::new(&host_img);
    let host = Mount::new(std::slice::from_ref(&host_loop), &base.join("host")).unwrap();
    let src = host.dir.join("src");
    must(
        Command::new("cp")
            .args(["-a", "--reflink=never"])
            .arg(orig)
            .arg(&src),
    );
    must(Command::new("sync").arg("-f").arg(&src));
    let src_manifest = manifest_of(&src);
    // Whole sectors of the source's files, each inode once: what must be
    // shared (files under a sector are inline, partial last sectors are
    // written).
    let mut expect = 0u64;
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.path().symlink_metadata().unwrap();
            use std::os::unix::fs::MetadataExt;
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() && m.len() >= 4096 && seen.insert(m.ino()) {
                expect += (m.blocks() * 512).saturating_sub(4096);
            }
        }
    }
    for (i, extra) in [&[][..], &["-d", "dup", "--csum", "xxhash"][..]]
        .into_iter()
        .enumerate()
    {
        let img = host.dir.join(format!("img{i}.img"));
        let mut cmd = Command::new(ubtrfs_bin());
        cmd.args(["mkfs", "-q", "-b", "512M", "--reflink"])
            .args(extra)
            .arg("-r")
            .arg(&src)
            .arg(&img);
        must(&mut cmd);
        let copies = if i == 1 { 2 } else { 1 };
        let (_, _, shared) = fi_du(&img);
        eprintln!("{extra:?}: shared {shared} bytes, source whole sectors {expect}");
        assert!(
            shared >= expect * copies,
            "{extra:?}: image shares {shared} bytes with the source, want at least {}",
            expect * copies
        );
        let l = Loop::new(&img);
        btrfs_check(&l.0, &[]).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
        let mnt = Mount::new(std::slice::from_ref(&l), &base.join("mnt")).unwrap();
        let got = manifest_of(&mnt.dir);
        compare_manifests(&src_manifest, &got, &source_ignore())
            .unwrap_or_else(|e| panic!("{extra:?}: mount differs from the source: {e}"));
        kernel_writes(&mnt.dir, &src);
        mnt.umount().unwrap();
        btrfs_check(&l.0, &[]).unwrap_or_else(|e| panic!("{extra:?} after kernel writes: {e}"));
        drop(l);
        let _ = std::fs::remove_file(&img);
    }
    // The source is untouched by the kernel's writes to the image.
    compare_manifests(&src_manifest, &manifest_of(&src), &source_ignore()).unwrap();
    // Not on one filesystem: refused before the image is made.
    let elsewhere = base.join("elsewhere.img");
    let out = Command::new(ubtrfs_bin())
        .args(["mkfs", "-q", "-b", "512M", "--reflink", "-r"])
        .arg(&src)
        .arg(&elsewhere)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not on the same filesystem"),
        "{err}"
    );
    assert!(!elsewhere.exists(), "refused --reflink made the image file");
    let out = Command::new(ubtrfs_bin())
        .args(["mkfs", "-q", "--reflink"])
        .arg(host.dir.join("x.img"))
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--rootdir"));
    host.umount().unwrap();
    drop(host_loop);
    let _ = std::fs::remove_dir_all(&base);
}
