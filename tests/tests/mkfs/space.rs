//! Running out of space (ENOSPC, over an existing image too), mixed images
//! growing chunks under `--rootdir` and ubtrfs's other writers, and `-b` on
//! a larger device.

use super::*;
use ubtrfs_oracle::{fuse_available, kernel_fixture, Rng, UbtrfsMount};

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
    // An image file that is there already: a failed mkfs removes only a
    // file it made itself (mkfs_enospc checks that), and this one is to
    // be looked at afterwards.
    if !img.exists() {
        std::fs::File::create(img)
            .unwrap()
            .set_len(150 * MIB)
            .unwrap();
    }
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
    // On a path that was not there, the file mkfs made goes again.
    let fresh = base.join("fresh");
    let out = Command::new(ubtrfs_bin())
        .args(["mkfs", "-q", "-b", "150M", "-r"])
        .arg(&src)
        .arg(&fresh)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!fresh.exists(), "a failed mkfs left the file it made");
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
