//! `ubtrfs mkfs` against the kernel (issue 9): images made from a rich
//! source tree (tests/oracle/mkfs_source.py: every file type, holes, >4 GiB
//! offsets, hard links, long and non-UTF-8 names, a name hash collision,
//! xattrs and ACLs, odd modes and owners, nanosecond mtimes) over an option
//! matrix; each image must pass `btrfs check --readonly`, mount, show the
//! source tree exactly (manifest.py of the mount equals manifest.py of the
//! source), take kernel writes (copy, mkdir, rm, snapshot, subvolume) and
//! pass `btrfs check` again. Also: empty filesystems per profile, errors,
//! `--json`, reproducible images, and running out of space.
//!
//! Root only; with UBTRFS_REQUIRE_KERNEL=1 (CI) the kernel tests fail
//! rather than skip when they cannot run.
//!
//! Matrix size: a representative subset by default (every checksum, every
//! nodesize, every profile as metadata or data, both feature switches, two
//! mixed block group images; a few minutes on 2 cores).
//! UBTRFS_MKFS_MATRIX=full runs the full matrix: every checksum x nodesize,
//! every profile for metadata and data together, the feature switches,
//! mixed block groups with every checksum, mirrored and parity profiles and
//! compression, plus lowmem checks throughout (about 10x longer).
//! UBTRFS_MKFS_ONLY=TEXT keeps the configurations whose description holds
//! TEXT (e.g. `raid6`, `mixed: true`).
//!
//! Mixed block groups (`-M`): every chunk of a mixed image is SYSTEM or
//! DATA|METADATA, after mkfs and after the kernel's writes (and no other
//! image has a DATA|METADATA chunk); empty mixed images per profile and at
//! the smallest sizes; `--rootdir` sources larger than a chunk (new mixed
//! chunks on demand, extents split to fit them), `--shrink`, ENOSPC; and
//! ubtrfs's other writers (subvolume snapshot and delete, receive, the
//! read-write mount) growing mixed images made by ubtrfs and by the
//! kernel's mkfs.

use std::path::{Path, PathBuf};
use std::process::Command;
use ubtrfs_oracle::mkfs_support::*;
use ubtrfs_oracle::mounts::degraded_mounts;
use ubtrfs_oracle::{
    btrfs_check, compare_manifests, fuse_available, kernel_available, kernel_fixture, manifest_of,
    scratch_dir, skip_unless, ubtrfs_bin, Ignore, Rng, UbtrfsMount,
};

const MIB: u64 = 1 << 20;

#[derive(Debug, Clone)]
struct Config {
    csum: &'static str,
    nodesize: &'static str,
    meta: &'static str,
    data: &'static str,
    ndev: usize,
    features: Option<&'static str>,
    lowmem: bool,
    /// `-M`: mixed block groups.
    mixed: bool,
    /// `--compress`.
    compress: Option<&'static str>,
}

impl Config {
    /// `btrfs check` options: lowmem mode when the configuration asks.
    fn check_opts(&self) -> &'static [&'static str] {
        if self.lowmem {
            &["--mode=lowmem"]
        } else {
            &[]
        }
    }
}

fn cfg(
    csum: &'static str,
    nodesize: &'static str,
    meta: &'static str,
    data: &'static str,
) -> Config {
    Config {
        csum,
        nodesize,
        meta,
        data,
        ndev: devices_for(meta).max(devices_for(data)),
        features: None,
        lowmem: false,
        mixed: false,
        compress: None,
    }
}

fn devices_for(profile: &str) -> usize {
    match profile {
        "raid0" | "raid1" => 2,
        "raid1c3" => 3,
        "raid10" | "raid1c4" => 4,
        // One more than the minimum: parity then rotates over rows of two
        // (RAID5) or two (RAID6) data strips.
        "raid5" => 3,
        "raid6" => 4,
        _ => 1,
    }
}

/// How many devices a profile's chunks can lose and still be read.
fn tolerates(profile: &str) -> usize {
    match profile {
        "raid1" | "raid10" | "raid5" => 1,
        "raid1c3" | "raid6" => 2,
        "raid1c4" => 3,
        _ => 0,
    }
}

fn matrix() -> Vec<Config> {
    let full = std::env::var("UBTRFS_MKFS_MATRIX").is_ok_and(|v| v == "full");
    if !full {
        return vec![
            Config {
                lowmem: true,
                ..cfg("crc32c", "16k", "dup", "single")
            },
            Config {
                features: Some("^no-holes"),
                ..cfg("xxhash", "4k", "single", "dup")
            },
            Config {
                features: Some("^free-space-tree"),
                ..cfg("sha256", "64k", "raid1", "raid0")
            },
            cfg("blake2", "16k", "raid1c3", "raid10"),
            Config {
                lowmem: true,
                ..cfg("crc32c", "4k", "raid10", "raid1c4")
            },
            cfg("xxhash", "16k", "raid1c4", "raid1"),
            cfg("crc32c", "16k", "raid5", "raid5"),
            Config {
                features: Some("^no-holes"),
                ..cfg("blake2", "4k", "raid6", "raid6")
            },
            cfg("xxhash", "64k", "raid1", "raid6"),
            Config {
                mixed: true,
                lowmem: true,
                ..cfg("crc32c", "4k", "single", "single")
            },
            Config {
                mixed: true,
                compress: Some("zstd"),
                ..cfg("xxhash", "4k", "dup", "dup")
            },
        ];
    }
    let mut v = Vec::new();
    for csum in ["crc32c", "xxhash", "sha256", "blake2"] {
        for ns in ["4k", "16k", "64k"] {
            v.push(Config {
                lowmem: true,
                ..cfg(csum, ns, "dup", "single")
            });
        }
    }
    let profiles = [
        "single", "dup", "raid0", "raid1", "raid10", "raid1c3", "raid1c4", "raid5", "raid6",
    ];
    for m in profiles {
        for d in profiles {
            v.push(Config {
                lowmem: m == d,
                ..cfg("crc32c", "16k", m, d)
            });
        }
    }
    for f in [
        "^no-holes",
        "^free-space-tree",
        "^no-holes,^free-space-tree",
    ] {
        for ns in ["4k", "64k"] {
            v.push(Config {
                features: Some(f),
                lowmem: true,
                ..cfg("xxhash", ns, "dup", "single")
            });
        }
    }
    // Mixed block groups: nodesize is the sectorsize (4K); data and
    // metadata profiles equal.
    for csum in ["crc32c", "xxhash", "sha256", "blake2"] {
        v.push(Config {
            mixed: true,
            lowmem: true,
            ..cfg(csum, "4k", "single", "single")
        });
    }
    for p in [
        "dup", "raid0", "raid1", "raid10", "raid1c3", "raid5", "raid6",
    ] {
        v.push(Config {
            mixed: true,
            ..cfg("crc32c", "4k", p, p)
        });
    }
    for algo in ["zlib", "lzo", "zstd"] {
        v.push(Config {
            mixed: true,
            compress: Some(algo),
            ..cfg("blake2", "4k", "dup", "dup")
        });
    }
    v.push(Config {
        mixed: true,
        features: Some("^no-holes,^free-space-tree"),
        lowmem: true,
        ..cfg("sha256", "4k", "single", "single")
    });
    v
}

fn mkfs_cmd(c: &Config, images: &[PathBuf], rootdir: Option<&Path>) -> Command {
    let mut cmd = Command::new(ubtrfs_bin());
    cmd.args(["mkfs", "-q", "--csum", c.csum, "-n", c.nodesize, "-s", "4k"]);
    cmd.args(["-m", c.meta, "-d", c.data]);
    if c.mixed {
        cmd.arg("-M");
    }
    if let Some(f) = c.features {
        cmd.args(["-O", f]);
    }
    if let Some(a) = c.compress {
        cmd.args(["--compress", a]);
    }
    if let Some(r) = rootdir {
        cmd.arg("-r").arg(r);
    }
    cmd.args(images);
    cmd
}

/// What btrfs shows differently from the source filesystem, by design:
///  - `ino`: btrfs numbers inodes itself (256 and up per subvolume);
///  - directory `size`: btrfs's is the sum of name lengths times two (ext4's
///    is its block count); nlink of directories is always 1 on btrfs — not
///    in the manifest at all, nor are atime/ctime (mkfs sets ctime to now).
///
/// Everything else — type, mode incl. setuid/setgid/sticky, uid, gid,
/// rdev, mtime to the nanosecond, symlink target, every xattr incl. ACLs,
/// hard link groups, content hash and the SEEK_DATA/SEEK_HOLE data map — is
/// compared exactly.
fn source_ignore() -> Ignore {
    Ignore {
        fields: vec!["ino"],
        dir_size: true,
    }
}

/// The type of every chunk of the filesystem on `dev` (`btrfs
/// inspect-internal dump-tree -t chunk`), as "DATA|METADATA|single".
fn chunk_types(dev: &Path) -> Vec<String> {
    let out = must(
        Command::new("btrfs")
            .args(["inspect-internal", "dump-tree", "-t", "chunk"])
            .arg(dev),
    );
    out.lines()
        .filter(|l| l.contains("stripe_len"))
        .filter_map(|l| l.split_once(" type ").map(|(_, t)| t.trim().to_string()))
        .collect()
}

/// A mixed filesystem has SYSTEM and DATA|METADATA chunks only; any other
/// none of DATA|METADATA. Ok(the number of DATA|METADATA chunks).
fn check_chunk_types(dev: &Path, mixed: bool) -> Result<usize, String> {
    let types = chunk_types(dev);
    let n = types
        .iter()
        .filter(|t| t.starts_with("DATA|METADATA|"))
        .count();
    let bad: Vec<&String> = types
        .iter()
        .filter(|t| {
            let is_mixed = t.starts_with("DATA|METADATA|");
            if mixed {
                !is_mixed && !t.starts_with("SYSTEM|")
            } else {
                is_mixed
            }
        })
        .collect();
    if !bad.is_empty() || (mixed && n == 0) {
        return Err(format!(
            "chunk types of a {}mixed filesystem: {types:?}",
            if mixed { "" } else { "non-" }
        ));
    }
    Ok(n)
}

/// The kernel writes to a mounted ubtrfs image: a snapshot, then copy part
/// of the source in, mkdir, delete (incl. one of two hard link names in one
/// directory and a name from the hash collision), a new subvolume, an
/// overwrite of snapshot-shared data.
fn kernel_writes(mnt: &Path, src: &Path) {
    // First, so it keeps what mkfs wrote while the rest changes below.
    must(
        Command::new("btrfs")
            .args(["subvolume", "snapshot"])
            .arg(mnt)
            .arg(mnt.join("snap")),
    );
    must(
        Command::new("cp")
            .arg("-a")
            .arg(src.join("links"))
            .arg(src.join("hard"))
            .arg(src.join("files/odd"))
            .arg(mnt.join("many")),
    );
    std::fs::create_dir_all(mnt.join("new/dir/deeper")).unwrap();
    std::fs::write(mnt.join("new/dir/file"), vec![7u8; 300_000]).unwrap();
    for p in [
        "files/tiny",
        "files/big",
        "hard/a/two",
        "many/entry-00010",
        "many/hc01371838",
        "special/fifo",
        "links/long-target",
    ] {
        std::fs::remove_file(mnt.join(p)).unwrap_or_else(|e| panic!("rm {p}: {e}"));
    }
    std::fs::remove_dir_all(mnt.join("deep/level00/level01")).unwrap();
    must(
        Command::new("btrfs")
            .args(["subvolume", "create"])
            .arg(mnt.join("sub")),
    );
    std::fs::write(mnt.join("sub/f"), b"in a new subvolume").unwrap();
    // Overwrite shared (snapshotted) data in place.
    std::fs::write(mnt.join("files/sector"), vec![1u8; 4096]).unwrap();
    must(Command::new("sync").arg("-f").arg(mnt));
}

/// One matrix entry: mkfs -r, check, mount and compare, kernel writes,
/// check again. Err describes the first failure.
fn one_config(c: &Config, dir: &Path, src: &Path, src_manifest: &[String]) -> Result<(), String> {
    let images = image_files(dir, "img", c.ndev, 512 * MIB);
    let res = (|| {
        run(&mut mkfs_cmd(c, &images, Some(src))).map_err(|e| format!("mkfs: {e}"))?;
        degraded_reads(c, &images, src_manifest)?;
        let loops: Vec<Loop> = images.iter().map(|p| Loop::new(p)).collect();
        btrfs_check(&loops[0].0, c.check_opts()).map_err(|e| format!("check after mkfs: {e}"))?;
        check_chunk_types(&loops[0].0, c.mixed).map_err(|e| format!("after mkfs: {e}"))?;
        if c.lowmem {
            btrfs_check(&loops[0].0, &[]).map_err(|e| format!("check after mkfs: {e}"))?;
        }
        let mnt = Mount::new(&loops, &dir.join("mnt"))?;
        let got = manifest_of(&mnt.dir);
        compare_manifests(src_manifest, &got, &source_ignore())
            .map_err(|e| format!("mount differs from the source: {e}"))?;
        kernel_writes(&mnt.dir, src);
        mnt.umount()?;
        btrfs_check(&loops[0].0, c.check_opts())
            .map_err(|e| format!("check after kernel writes: {e}"))?;
        check_chunk_types(&loops[0].0, c.mixed).map_err(|e| format!("after kernel writes: {e}"))?;
        // A second mount sees the kernel's changes, and the snapshot still
        // holds exactly what mkfs wrote.
        let mnt = Mount::new(&loops, &dir.join("mnt"))?;
        let ok = !mnt.dir.join("files/big").exists()
            && mnt.dir.join("new/dir/file").exists()
            && mnt.dir.join("sub/f").exists();
        let snap = manifest_of(&mnt.dir.join("snap"));
        mnt.umount()?;
        if !ok {
            return Err("kernel writes not seen after a remount".into());
        }
        compare_manifests(src_manifest, &snap, &source_ignore())
            .map_err(|e| format!("snapshot differs from the source: {e}"))?;
        Ok(())
    })();
    remove_all(&images);
    res
}

/// RAID5/6: the kernel mounts the image read-only and degraded with each
/// device missing (each pair too when every profile survives two),
/// rebuilding what it lost from the parity we wrote, and must still show
/// the source tree.
fn degraded_reads(c: &Config, images: &[PathBuf], src_manifest: &[String]) -> Result<(), String> {
    let parity = [c.meta, c.data]
        .iter()
        .any(|p| p.starts_with("raid5") || p.starts_with("raid6"));
    let tolerated = tolerates(c.meta).min(tolerates(c.data));
    if !parity || tolerated == 0 {
        return Ok(());
    }
    degraded_mounts(images, tolerated >= 2, |dir| {
        compare_manifests(src_manifest, &manifest_of(dir), &source_ignore()).map(|_| ())
    })
}

/// Runs `case` on each of `cases` (a name for its failure, and the case),
/// every one whatever fails; then removes `base` and panics listing the
/// failures.
fn every_case<T>(
    base: &Path,
    cases: impl IntoIterator<Item = (String, T)>,
    mut case: impl FnMut(&str, T) -> Result<(), String>,
) {
    let mut failures = Vec::new();
    for (name, c) in cases {
        if let Err(e) = case(&name, c) {
            failures.push(format!("{name}: {e}"));
        }
    }
    let _ = std::fs::remove_dir_all(base);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn mkfs_rootdir_matrix() {
    skip_unless!(kernel_available);
    let (src, src_manifest) = source_tree();
    assert!(src_manifest.len() > 3000, "source tree too small");
    let base = scratch_dir("mkfs-matrix");
    let mut failures = Vec::new();
    // UBTRFS_MKFS_ONLY=raid6 runs the configurations whose description
    // holds that text (by hand, while working on one).
    let only = std::env::var("UBTRFS_MKFS_ONLY").unwrap_or_default();
    let configs: Vec<Config> = matrix()
        .into_iter()
        .filter(|c| format!("{c:?}").contains(&only))
        .collect();
    for (i, c) in configs.iter().enumerate() {
        let dir = base.join(format!("c{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let t = std::time::Instant::now();
        let r = one_config(c, &dir, src, src_manifest);
        eprintln!(
            "mkfs matrix {}/{}: {c:?}: {} ({:.1}s)",
            i + 1,
            configs.len(),
            if r.is_ok() { "ok" } else { "FAILED" },
            t.elapsed().as_secs_f64()
        );
        if let Err(e) = r {
            failures.push(format!("{c:?}:\n{e}"));
        }
    }
    let _ = std::fs::remove_dir_all(&base);
    assert!(
        failures.is_empty(),
        "{} of {} configurations failed:\n{}",
        failures.len(),
        configs.len(),
        failures.join("\n\n")
    );
}

/// Superblock copies inside chunks (the mirror at 64 MiB): with -m single
/// -d single -b 300M the first data chunk spans 41..108 MiB, so the source's
/// data runs over the mirror. The allocator must leave that stripe alone
/// (before the fix, the commit's superblock overwrote 4 KiB of file data:
/// csum errors; with /usr/share and DUP metadata, a tree block).
#[test]
fn mkfs_super_stripes() {
    skip_unless!(kernel_available);
    let (src, src_manifest) = source_tree();
    let base = scratch_dir("mkfs-sb");
    let img = base.join("img");
    must(
        Command::new(ubtrfs_bin())
            .args([
                "mkfs", "-q", "-m", "single", "-d", "single", "-b", "300M", "-r",
            ])
            .arg(src)
            .arg(&img),
    );
    btrfs_check(&img, &["--check-data-csum"]).unwrap_or_else(|e| panic!("{e}"));
    let l = Loop::new(&img);
    let mnt = Mount::new(std::slice::from_ref(&l), &base.join("mnt")).unwrap();
    let got = manifest_of(&mnt.dir);
    mnt.umount().unwrap();
    compare_manifests(src_manifest, &got, &source_ignore()).unwrap();
    drop(l);
    let _ = std::fs::remove_dir_all(&base);
}

/// An empty filesystem (no -r) per profile: check, mount, write, check.
#[test]
fn mkfs_empty_profiles() {
    skip_unless!(kernel_available);
    let base = scratch_dir("mkfs-empty");
    let profiles = [
        "single", "dup", "raid0", "raid1", "raid10", "raid1c3", "raid1c4", "raid5", "raid6",
    ];
    every_case(&base, profiles.map(|p| (p.to_string(), p)), |_, p| {
        let c = cfg("crc32c", "16k", p, p);
        let images = image_files(&base, p, c.ndev, 256 * MIB);
        let r = (|| {
            run(&mut mkfs_cmd(&c, &images, None))?;
            let loops: Vec<Loop> = images.iter().map(|p| Loop::new(p)).collect();
            btrfs_check(&loops[0].0, &[]).map_err(|e| format!("check after mkfs: {e}"))?;
            let mnt = Mount::new(&loops, &base.join("mnt"))?;
            let n = std::fs::read_dir(&mnt.dir).unwrap().count();
            std::fs::write(mnt.dir.join("f"), vec![5u8; 5 << 20]).unwrap();
            std::fs::create_dir(mnt.dir.join("d")).unwrap();
            mnt.umount()?;
            if n != 0 {
                return Err(format!("new filesystem has {n} entries"));
            }
            btrfs_check(&loops[0].0, &[]).map_err(|e| format!("check after writes: {e}"))
        })();
        remove_all(&images);
        r
    });
}

/// An empty mixed filesystem (`-M`, no -n: the nodesize is the
/// sectorsize) per profile, and at the smallest sizes mkfs takes: check,
/// only SYSTEM and DATA|METADATA chunks, the kernel mounts it and shows
/// Data+Metadata, writes (growing it where the first chunk is small),
/// check again, chunks still mixed.
#[test]
fn mkfs_empty_mixed() {
    skip_unless!(kernel_available);
    let base = scratch_dir("mkfs-empty-mixed");
    let cases = [
        (None, 256 * MIB),
        (Some("dup"), 256 * MIB),
        (Some("raid1"), 256 * MIB),
        (Some("raid10"), 256 * MIB),
        (Some("raid5"), 256 * MIB),
        (Some("raid6"), 256 * MIB),
        (None, 32 * MIB),
        (Some("dup"), 64 * MIB),
    ]
    .map(|(p, size)| {
        (
            format!("{}-{}M", p.unwrap_or("default"), size / MIB),
            (p, size),
        )
    });
    every_case(&base, cases, |name, (p, size)| {
        let images = image_files(&base, name, devices_for(p.unwrap_or("single")), size);
        let r = (|| {
            let mut cmd = Command::new(ubtrfs_bin());
            cmd.args(["mkfs", "-q", "-M"]);
            if let Some(p) = p {
                cmd.args(["-m", p, "-d", p]);
            }
            run(cmd.args(&images))?;
            let loops: Vec<Loop> = images.iter().map(|p| Loop::new(p)).collect();
            btrfs_check(&loops[0].0, &[]).map_err(|e| format!("check after mkfs: {e}"))?;
            let n0 = check_chunk_types(&loops[0].0, true)?;
            let sb = must(
                Command::new("btrfs")
                    .args(["inspect-internal", "dump-super"])
                    .arg(&loops[0].0),
            );
            if !sb.contains("MIXED_GROUPS")
                || !sb
                    .lines()
                    .any(|l| l.split_whitespace().eq(["nodesize", "4096"]))
            {
                return Err(format!("superblock: {sb}"));
            }
            let mnt = Mount::new(&loops, &base.join("mnt"))?;
            let df = must(
                Command::new("btrfs")
                    .args(["filesystem", "df"])
                    .arg(&mnt.dir),
            );
            let n = std::fs::read_dir(&mnt.dir).unwrap().count();
            let big = if size < 100 * MIB { 5 << 20 } else { 40 << 20 };
            std::fs::write(mnt.dir.join("f"), vec![5u8; big]).unwrap();
            std::fs::create_dir(mnt.dir.join("d")).unwrap();
            mnt.umount()?;
            if n != 0 {
                return Err(format!("new filesystem has {n} entries"));
            }
            if !df.contains("Data+Metadata") {
                return Err(format!("btrfs filesystem df: {df}"));
            }
            btrfs_check(&loops[0].0, &[]).map_err(|e| format!("check after writes: {e}"))?;
            let n1 = check_chunk_types(&loops[0].0, true)?;
            eprintln!("{name}: {n0} mixed chunks after mkfs, {n1} after the kernel's writes");
            Ok::<(), String>(())
        })();
        remove_all(&images);
        r
    });
}

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

/// 200 MiB of pseudo-random data in 20 files, plus small files.
fn enospc_source(src: &Path) {
    std::fs::create_dir_all(src).unwrap();
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    for i in 0..20 {
        std::fs::write(src.join(format!("f{i:02}")), rng.bytes(10 << 20)).unwrap();
        std::fs::write(src.join(format!("s{i:02}")), format!("{i}")).unwrap();
    }
}

/// Whether a btrfs superblock (magic) is at 64 KiB.
fn has_btrfs_magic(img: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(img).unwrap();
    let mut b = [0u8; 8];
    f.seek(SeekFrom::Start(0x10000 + 0x40)).unwrap();
    f.read_exact(&mut b).is_ok() && &b == b"_BHRfS_M"
}

/// mkfs -b 150M -r of a 200 MiB source (into `img`, over whatever it
/// holds): exit status 1 and a message naming the lack of space. Then the
/// image is either no filesystem at all (nothing was committed: the
/// superblocks are written at commit, and any old ones were wiped first)
/// or what was committed last is consistent: `btrfs check` (with data
/// checksums) clean, mounts, every file it has is the source's.
/// Returns whether the image is a filesystem.
fn enospc_case(base: &Path, src: &Path, img: &Path, force: bool, extra: &[&str]) -> bool {
    enospc_case_env(base, src, img, force, extra, &[])
}

/// [`enospc_case`] with `env` set for mkfs (UBTRFS_MKFS_COMMIT_BLOCKS: a
/// commit every so many changed tree blocks, so that some are made
/// before the space runs out).
fn enospc_case_env(
    base: &Path,
    src: &Path,
    img: &Path,
    force: bool,
    extra: &[&str],
    env: &[(&str, &str)],
) -> bool {
    let mut cmd = Command::new(ubtrfs_bin());
    cmd.args(["mkfs", "-q", "-b", "150M"])
        .args(extra)
        .envs(env.iter().copied());
    if force {
        cmd.arg("-f");
    }
    cmd.arg("-r").arg(src).arg(img);
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert_eq!(out.status.code(), Some(1), "{}", report(&cmd, &out));
    assert!(
        err.contains("no space") || err.contains("enospc"),
        "{}",
        report(&cmd, &out)
    );
    if !has_btrfs_magic(img) {
        eprintln!("after ENOSPC: not a filesystem (no superblock)");
        return false;
    }
    btrfs_check(img, &["--check-data-csum"]).unwrap_or_else(|e| panic!("{e}"));
    let l = Loop::new(img);
    let mnt = Mount::new(std::slice::from_ref(&l), &base.join("mnt"))
        .unwrap_or_else(|e| panic!("after ENOSPC the image does not mount: {e}"));
    let mut n = 0;
    for e in std::fs::read_dir(&mnt.dir).unwrap() {
        let e = e.unwrap();
        let got = std::fs::read(e.path()).unwrap();
        let want = std::fs::read(src.join(e.file_name())).unwrap();
        assert!(got == want, "{:?} differs from the source", e.file_name());
        n += 1;
    }
    eprintln!("after ENOSPC: a filesystem with {n} whole files");
    mnt.umount().unwrap();
    true
}

/// A source larger than the device: a clean failure, and no half-made
/// filesystem (see enospc_case).
#[test]
fn mkfs_enospc() {
    skip_unless!(kernel_available);
    let base = scratch_dir("mkfs-enospc");
    let src = base.join("src");
    enospc_source(&src);
    enospc_case(&base, &src, &base.join("img"), false, &[]);
    // Mixed block groups: data and metadata run out together; the
    // metadata reserve keeps the commits possible. With frequent commits
    // the image must be a filesystem holding what was committed.
    for extra in [&["-M"][..], &["-M", "-m", "dup", "-d", "dup"][..]] {
        for commits in [None, Some("16")] {
            let img = base.join("img-mixed");
            let _ = std::fs::remove_file(&img);
            let env: Vec<(&str, &str)> = commits
                .map(|n| ("UBTRFS_MKFS_COMMIT_BLOCKS", n))
                .into_iter()
                .collect();
            let fs = enospc_case_env(&base, &src, &img, false, extra, &env);
            assert!(
                fs || commits.is_none(),
                "{extra:?}: no filesystem after ENOSPC with a commit every {commits:?} blocks"
            );
            if fs {
                check_chunk_types(&img, true).unwrap();
            }
        }
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// The same over an existing (kernel-made, with files) filesystem with -f:
/// the failed mkfs must not leave the old superblocks in place over the
/// data it overwrote (the old filesystem would mount with corrupt files).
#[test]
fn mkfs_enospc_over_existing() {
    skip_unless!(kernel_available);
    let base = scratch_dir("mkfs-enospc-old");
    let src = base.join("src");
    enospc_source(&src);
    let img = base.join("img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(150 * MIB)
        .unwrap();
    must(Command::new("mkfs.btrfs").args(["-q", "-f"]).arg(&img));
    {
        let l = Loop::new(&img);
        let mnt = Mount::new(std::slice::from_ref(&l), &base.join("mnt")).unwrap();
        for f in ["f00", "f01", "s00"] {
            std::fs::copy(src.join(f), mnt.dir.join(f)).unwrap();
        }
        mnt.umount().unwrap();
    }
    enospc_case(&base, &src, &img, true, &[]);
    let _ = std::fs::remove_dir_all(&base);
}

/// `count` files of `size` pseudo-random bytes (f00, f01, ...), 100 small
/// files and a few directories in `src`.
fn growth_source(src: &Path, count: usize, size: usize) {
    std::fs::create_dir_all(src.join("d/e")).unwrap();
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
    for i in 0..count {
        std::fs::write(src.join(format!("f{i:02}")), rng.bytes(size)).unwrap();
    }
    for i in 0..100 {
        let dir = if i % 2 == 0 { "d" } else { "d/e" };
        std::fs::write(
            src.join(dir).join(format!("s{i:03}")),
            format!("small file {i}\n").repeat(i * 7 + 1),
        )
        .unwrap();
    }
}

/// Mixed images from a --rootdir source larger than their chunks (five
/// 30 MiB files; chunks of a 256 MiB filesystem are 26 MiB, so extents
/// are split to fit): single with -b, DUP with -b, --shrink, and
/// subvolumes (--subvol, one read-only) with compression. Each:
/// `btrfs check --check-data-csum`, only mixed (and system) chunks and
/// several of them, the kernel mount shows the source exactly, the kernel
/// writes (growing it by more mixed chunks), check again.
#[test]
fn mkfs_mixed_rootdir_grows_chunks() {
    skip_unless!(kernel_available);
    let base = scratch_dir("mkfs-mixed-grow");
    let src = base.join("src");
    growth_source(&src, 5, 30 << 20);
    let src_manifest = manifest_of(&src);
    let extras = [
        &["-b", "256M"][..],
        &["-m", "dup", "-d", "dup", "-b", "448M", "--csum", "xxhash"][..],
        &["--shrink", "--compress", "zstd"][..],
        &["-b", "320M", "-u", "d", "-u", "ro:d/e", "--compress", "lzo"][..],
    ];
    every_case(&base, extras.map(|e| (format!("{e:?}"), e)), |_, extra| {
        let img = base.join("img");
        let _ = std::fs::remove_file(&img);
        let r = (|| {
            let mut cmd = Command::new(ubtrfs_bin());
            cmd.args(["mkfs", "-q", "-M"])
                .args(extra)
                .arg("-r")
                .arg(&src);
            run(cmd.arg(&img))?;
            btrfs_check(&img, &["--check-data-csum"])?;
            let n = check_chunk_types(&img, true)?;
            if n < 4 {
                return Err(format!("{n} mixed chunks: {:?}", chunk_types(&img)));
            }
            let size = std::fs::metadata(&img).unwrap().len();
            let l = Loop::new(&img);
            let mnt = Mount::new(std::slice::from_ref(&l), &base.join("mnt"))?;
            compare_manifests(&src_manifest, &manifest_of(&mnt.dir), &source_ignore())
                .map_err(|e| format!("mount differs from the source: {e}"))?;
            must(
                Command::new("btrfs")
                    .args(["subvolume", "snapshot"])
                    .arg(&mnt.dir)
                    .arg(mnt.dir.join("snap")),
            );
            std::fs::remove_file(mnt.dir.join("f00")).unwrap();
            std::fs::write(mnt.dir.join("new"), vec![3u8; 12 << 20]).unwrap();
            must(Command::new("sync").arg("-f").arg(&mnt.dir));
            mnt.umount()?;
            btrfs_check(&l.0, &[]).map_err(|e| format!("check after kernel writes: {e}"))?;
            let n2 = check_chunk_types(&l.0, true)?;
            eprintln!(
                "{extra:?}: image {} MiB, {n} mixed chunks after mkfs, {n2} after the kernel's writes",
                size / MIB
            );
            Ok::<(), String>(())
        })();
        let _ = std::fs::remove_file(&img);
        r
    });
}

/// ubtrfs's other writers on mixed images, one made by `ubtrfs mkfs -M`
/// and a copy of the kernel fixture `mixed` (mkfs.btrfs -M, 64 MiB, with
/// content): subvolume snapshot, receive of a 24 MiB stream (`ubtrfs
/// send` of another image made from a source), the read-write mount
/// copying an 8 MiB file in, subvolume delete. After each, `btrfs check`
/// and only mixed (and system) chunks; the image grows by mixed chunks;
/// the kernel then shows the received subvolume as the source and the
/// copied file, writes, and `btrfs check` stays clean.
#[test]
fn mkfs_mixed_writers_make_mixed_chunks() {
    // (fuse_available checks kernel_available first)
    skip_unless!(fuse_available);
    let base = scratch_dir("mkfs-mixed-writers");
    let src = base.join("src");
    growth_source(&src, 2, 12 << 20);
    let src_manifest = manifest_of(&src);
    let extra_file = base.join("extra");
    std::fs::write(
        &extra_file,
        (0..8u32 << 20)
            .map(|i| ((i * 7) >> 9) as u8)
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    // The stream: the source's image, its top level snapshotted read-only.
    let stream = base.join("stream");
    let from = base.join("from.img");
    let ub = |args: &[&std::ffi::OsStr]| -> Result<String, String> {
        run(Command::new(ubtrfs_bin()).args(args))
    };
    let os = |s: &str| std::ffi::OsString::from(s);
    must(
        Command::new(ubtrfs_bin())
            .args(["mkfs", "-q", "-b", "256M", "-r"])
            .arg(&src)
            .arg(&from),
    );
    must(
        Command::new(ubtrfs_bin())
            .args(["subvolume", "snapshot", "-r"])
            .arg(&from)
            .args(["/", "/src"]),
    );
    must(
        Command::new(ubtrfs_bin())
            .args(["send", "-q", "-f"])
            .arg(&stream)
            .arg(&from)
            .arg("/src"),
    );
    let _ = std::fs::remove_file(&from);
    let ours = base.join("ours.img");
    must(
        Command::new(ubtrfs_bin())
            .args(["mkfs", "-q", "-M", "-b", "128M"])
            .arg(&ours),
    );
    let kernel = kernel_fixture("mixed").copy_to(&base.join("kernel"));
    let images = [
        ("ours".to_string(), ours.clone()),
        ("kernel".to_string(), kernel.devices()[0].clone()),
    ];
    every_case(&base, images, |name, img| {
        let step = |what: &str| -> Result<usize, String> {
            btrfs_check(&img, &[]).map_err(|e| format!("check after {what}: {e}"))?;
            check_chunk_types(&img, true).map_err(|e| format!("after {what}: {e}"))
        };
        let n0 = step("mkfs")?;
        let img_os = img.clone().into_os_string();
        ub(&[
            &os("subvolume"),
            &os("snapshot"),
            &img_os,
            &os("/"),
            &os("/snap"),
        ])?;
        step("snapshot")?;
        ub(&[
            &os("receive"),
            &os("-q"),
            &os("-f"),
            stream.as_os_str(),
            &img_os,
            &os("/"),
        ])?;
        step("receive")?;
        let mnt_dir = base.join(format!("{name}-rw"));
        let m = UbtrfsMount::start(&img, &mnt_dir, "")?;
        let copied = std::fs::copy(&extra_file, mnt_dir.join("extra"))
            .map_err(|e| format!("copy into the rw mount: {e}"));
        m.unmount()?;
        copied?;
        step("the read-write mount")?;
        ub(&[&os("subvolume"), &os("delete"), &img_os, &os("/snap")])?;
        let n1 = step("subvolume delete")?;
        if n1 <= n0 {
            return Err(format!("{n0} mixed chunks before the writers, {n1} after"));
        }
        let l = Loop::new(&img);
        let mnt = Mount::new(std::slice::from_ref(&l), &base.join("mnt"))?;
        compare_manifests(
            &src_manifest,
            &manifest_of(&mnt.dir.join("src")),
            &source_ignore(),
        )
        .map_err(|e| format!("received subvolume differs from the source: {e}"))?;
        if std::fs::read(mnt.dir.join("extra")).ok() != std::fs::read(&extra_file).ok() {
            return Err("the file copied through the rw mount differs".into());
        }
        if mnt.dir.join("snap").exists() {
            return Err("deleted snapshot still there".into());
        }
        std::fs::write(mnt.dir.join("kernel-new"), vec![9u8; 4 << 20]).unwrap();
        must(
            Command::new("btrfs")
                .args(["subvolume", "snapshot", "-r"])
                .arg(&mnt.dir)
                .arg(mnt.dir.join("ksnap")),
        );
        mnt.umount()?;
        drop(l);
        let n2 = step("kernel writes")?;
        eprintln!(
            "{name}: {n0} mixed chunks, {n1} after ubtrfs's writers, {n2} after the kernel's"
        );
        Ok::<(), String>(())
    });
}

/// -b on a larger device or image file: the filesystem is that size (as
/// mkfs.btrfs -b), the kernel mounts it so and writes; -b past the
/// device's end is refused, naming both sizes.
#[test]
fn mkfs_b_is_the_size_on_a_larger_device() {
    skip_unless!(kernel_available);
    let base = scratch_dir("mkfs-b-larger");
    let img = base.join("img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(1 << 30))
        .unwrap();
    let l = Loop::new(&img);
    for target in [l.0.clone(), img.clone()] {
        must(
            Command::new(ubtrfs_bin())
                .args(["mkfs", "-q", "-f", "-b", "300M"])
                .arg(&target),
        );
        let sup = must(
            Command::new("btrfs")
                .args(["inspect-internal", "dump-super"])
                .arg(&target),
        );
        assert!(
            sup.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["total_bytes", "314572800"]),
            "{}: {sup}",
            target.display()
        );
        btrfs_check(&target, &[]).unwrap_or_else(|e| panic!("{e}"));
    }
    let mnt = Mount::new(std::slice::from_ref(&l), &base.join("mnt")).unwrap();
    std::fs::write(mnt.dir.join("f"), vec![7u8; 8 << 20]).unwrap();
    mnt.umount().unwrap();
    btrfs_check(&l.0, &[]).unwrap();
    let out = Command::new(ubtrfs_bin())
        .args(["mkfs", "-q", "-f", "-b", "2G"])
        .arg(&l.0)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("2147483648") && err.contains("1073741824"),
        "-b past the device's end: {err}"
    );
}
