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
    btrfs_check, compare_manifests, kernel_available, manifest_of, scratch_dir, skip_unless,
    ubtrfs_bin, Ignore,
};

mod output;
mod space;

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
