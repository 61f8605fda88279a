//! Offline space management against the kernel (root): a kernel-made
//! image with snapshots, reflinks, zstd/zlib/lzo, inline files, holes,
//! NOCOW files and xattrs is resized (grow, shrink past its chunks, to the
//! least size, max), balanced (-dconvert=dup, -mconvert=raid1 over two
//! devices, -dusage=0, -dusage=100, -dusage=50 -musage=90) and given a device then rid of one, by
//! `ubtrfs`.
//! After each step `btrfs check` passes, the kernel mounts the image and
//! every file equals the manifest taken before, `btrfs filesystem du` of
//! every snapshot shows the same total and exclusive bytes (sharing kept),
//! and the devices have the sizes asked. At the end the kernel writes on
//! top and check passes again. Then kill -9 at seeded moments of a shrink,
//! a conversion, a metadata compaction, `tune -u` and a device remove: each time the image checks clean and reads as
//! before (a shrink or balance; a killed fsid change is resumed first),
//! and the same command run again finishes; the clone with its new fsid
//! mounts beside the original.
//!
//! An image without skinny metadata takes a full balance and a shrink; a
//! RAID1 the kernel made over two devices compaction, a shrink of one and
//! a grow back.
//!
//! UBTRFS_CRASH_KILLS sets the kills per command (3 unless set;
//! bench/relocation.sh runs more).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use ubtrfs_oracle::mkfs_support::crash_kills;
use ubtrfs_oracle::*;

const MIB: u64 = 1 << 20;

fn ubtrfs(args: &[&str]) -> Command {
    let mut c = Command::new(ubtrfs_bin());
    c.args(args);
    c
}

fn ok(c: &mut Command) -> String {
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{c:?}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `IMAGE --device DEV...` (balance) or `IMAGE -d DEV...` (the rest).
fn with_devs(c: &mut Command, imgs: &[PathBuf], flag: &str) {
    c.arg(&imgs[0]);
    for d in &imgs[1..] {
        c.arg(flag).arg(d);
    }
}

/// The kernel's image: 1 GiB, zstd by mount option, the rich and
/// compress content, and big files written and partly removed so that
/// data lies in block groups far into the device.
fn kernel_image(dir: &Path) -> PathBuf {
    kernel_image_with(
        dir,
        &[],
        "mkdir -p big && for i in 1 2 3 4; do \
           head -c 120M /dev/urandom > big/f$i; sync; done; \
         rm big/f2; cp --reflink=always big/f3 big/f3.ref; \
         btrfs subvolume snapshot -r . snap-after >/dev/null; sync",
    )
}

/// A 1 GiB image mkfs.btrfs makes with `mkfs` options, populate.py's rich
/// and compress trees written by the kernel (zstd), then `fill` run in it.
fn kernel_image_with(dir: &Path, mkfs: &[&str], fill: &str) -> PathBuf {
    kernel_images(dir, 1, mkfs, fill).remove(0)
}

/// [`kernel_image_with`] over `n` devices of 1 GiB.
fn kernel_images(dir: &Path, n: usize, mkfs: &[&str], fill: &str) -> Vec<PathBuf> {
    let imgs: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("dev{i}.img"))).collect();
    for img in &imgs {
        let _ = std::fs::remove_file(img);
        std::fs::File::create(img)
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
    }
    run_ok(
        Command::new("mkfs.btrfs")
            .args(["-q", "-f"])
            .args(mkfs)
            .args(&imgs),
        "mkfs.btrfs",
    );
    let m = Mount::images(&imgs, "compress=zstd", false);
    run_ok(
        Command::new("python3")
            .arg(repo_root().join("tests/fixtures/populate.py"))
            .arg(&m.dir)
            .args(["rich", "compress"]),
        "populate.py",
    );
    run_ok(
        Command::new("sh").current_dir(&m.dir).arg("-c").arg(fill),
        "fill",
    );
    m.unmount();
    imgs
}

/// A RAID1 filesystem the kernel made over two devices: data and metadata
/// block groups compacted, one device shrunk past its chunks, then grown
/// back to its size; the kernel writes on top.
#[test]
fn kernel_raid1_shrinks_compacts_and_grows() {
    skip_unless!(kernel_available);
    let dir = scratch_dir("relocation-raid1");
    let two = kernel_images(
        &dir,
        2,
        &["-d", "raid1", "-m", "raid1"],
        "head -c 200M /dev/urandom > big; cp --reflink=always big big.ref; \
         btrfs subvolume snapshot -r . snap-1 >/dev/null; rm big; \
         head -c 100M /dev/urandom > big2; sync",
    );
    let want = seen(&two);
    let g = 1u64 << 30;
    let mut c = ubtrfs(&["balance", "start", "-dusage=90", "-musage=90"]);
    with_devs(&mut c, &two, "--device");
    let said = ok(&mut c);
    assert!(!said.contains(" 0 metadata compacted"), "{said}");
    verify("RAID1: -dusage=90 -musage=90", &two, &want, &[g, g]);
    let mut c = ubtrfs(&["filesystem", "resize", "1:800M"]);
    with_devs(&mut c, &two, "-d");
    ok(&mut c);
    verify("RAID1: shrink devid 1", &two, &want, &[800 * MIB, g]);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&two[0])
        .unwrap()
        .set_len(g)
        .unwrap();
    let mut c = ubtrfs(&["filesystem", "resize", "1:max"]);
    with_devs(&mut c, &two, "-d");
    ok(&mut c);
    verify("RAID1: devid 1 grown back", &two, &want, &[g, g]);
    let _ = Command::new("btrfs")
        .args(["device", "scan", "--forget"])
        .output();
    let m = Mount::images(&two, "", false);
    run_ok(
        Command::new("sh")
            .current_dir(&m.dir)
            .arg("-c")
            .arg("head -c 20M /dev/urandom > after && sync"),
        "kernel writes",
    );
    m.unmount();
    let l = scanned(&two, true);
    btrfs_check(Path::new(l.first()), &[]).unwrap();
}

/// An image without skinny metadata (tree blocks' extent items are
/// EXTENT_ITEMs with a tree block info): a full balance and a shrink
/// write new ones the kernel and btrfs check accept.
#[test]
fn full_balance_and_shrink_without_skinny_metadata() {
    skip_unless!(kernel_available);
    let dir = scratch_dir("relocation-noskinny");
    let img = kernel_image_with(
        &dir,
        &["-O", "^skinny-metadata"],
        "head -c 30M /dev/urandom > big; cp --reflink=always big big.ref; \
         btrfs subvolume snapshot -r . snap-1 >/dev/null; rm -r big; sync",
    );
    let one = vec![img.clone()];
    let want = seen(&one);
    let said = ok(ubtrfs(&["balance", "start", "--full-balance"]).arg(&img));
    assert!(!said.contains(" 0 metadata compacted"), "{said}");
    verify("full balance", &one, &want, &[1 << 30]);
    ok(ubtrfs(&["filesystem", "resize", "400M"]).arg(&img));
    verify("shrink to 400M", &one, &want, &[400 * MIB]);
}

/// Loop devices of `imgs`, known to the kernel's device list (for
/// btrfs check and mount of several devices).
fn scanned(imgs: &[PathBuf], readonly: bool) -> Loops {
    let _ = Command::new("btrfs")
        .args(["device", "scan", "--forget"])
        .output();
    let l = Loops::attach(imgs, readonly);
    for d in l.devs() {
        let _ = Command::new("btrfs").args(["device", "scan", d]).output();
    }
    l
}

/// `btrfs filesystem du -s --raw` of the top and every snapshot: path ->
/// (total, exclusive).
fn du(mnt: &Path) -> Vec<(String, u64, u64)> {
    let mut paths = vec![mnt.to_path_buf()];
    for e in std::fs::read_dir(mnt).unwrap() {
        let e = e.unwrap();
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("snap") {
            paths.push(e.path());
        }
    }
    paths.sort();
    let o = ok(Command::new("btrfs")
        .args(["filesystem", "du", "-s", "--raw"])
        .args(&paths));
    o.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[3].replace(&mnt.display().to_string(), "."),
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
            )
        })
        .collect()
}

/// What the kernel shows of the filesystem: its manifest and du.
struct Seen {
    manifest: Vec<String>,
    du: Vec<(String, u64, u64)>,
    /// Device sizes by devid (`btrfs filesystem show --raw`).
    sizes: Vec<u64>,
}

/// Device sizes `btrfs filesystem show --raw` prints, by devid.
fn kernel_sizes(mnt: &Path) -> Vec<u64> {
    let o = ok(Command::new("btrfs")
        .args(["filesystem", "show", "--raw"])
        .arg(mnt));
    let mut v: Vec<(u64, u64)> = o
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&"devid")).then(|| (f[1].parse().unwrap(), f[3].parse().unwrap()))
        })
        .collect();
    v.sort();
    v.into_iter().map(|x| x.1).collect()
}

fn seen(imgs: &[PathBuf]) -> Seen {
    let _ = Command::new("btrfs")
        .args(["device", "scan", "--forget"])
        .output();
    let m = Mount::images(imgs, "", true);
    let s = Seen {
        manifest: manifest_of(&m.dir),
        du: du(&m.dir),
        sizes: kernel_sizes(&m.dir),
    };
    m.unmount();
    s
}

/// btrfs check (by its loop device) and ubtrfs check clean, and the
/// kernel's view of the files the same as `want`; the kernel's view.
fn verify_files(step: &str, imgs: &[PathBuf], want: &Seen) -> Seen {
    {
        let l = scanned(imgs, true);
        btrfs_check(Path::new(l.first()), &[]).unwrap_or_else(|e| panic!("{step}: {e}"));
    }
    let mut c = ubtrfs(&["check"]);
    with_devs(&mut c, imgs, "-d");
    ok(&mut c);
    let got = seen(imgs);
    compare_manifests(&want.manifest, &got.manifest, &Ignore::default())
        .unwrap_or_else(|e| panic!("{step}: {e}"));
    assert_eq!(got.du, want.du, "{step}: btrfs filesystem du");
    got
}

/// [`verify_files`], and each device (file and the kernel's figure) of
/// the size asked.
fn verify(step: &str, imgs: &[PathBuf], want: &Seen, sizes: &[u64]) {
    let got = verify_files(step, imgs, want);
    for (img, &size) in imgs.iter().zip(sizes) {
        assert_eq!(
            std::fs::metadata(img).unwrap().len(),
            size,
            "{step}: {} size",
            img.display()
        );
    }
    assert_eq!(got.sizes, sizes, "{step}: device sizes the kernel shows");
}

/// The least size `resize` names when refusing `size`.
fn least_size(imgs: &[PathBuf], size: &str) -> u64 {
    let mut c = ubtrfs(&["filesystem", "resize", size]);
    with_devs(&mut c, imgs, "-d");
    let o = c.output().unwrap();
    assert!(!o.status.success(), "{size} was taken");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    err.split("the least size that does now is ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no least size in: {err}"))
}

#[test]
fn resize_balance_and_devices_keep_every_file() {
    skip_unless!(kernel_available);
    let dir = scratch_dir("relocation");
    let img = kernel_image(&dir);
    let one = vec![img.clone()];
    let want = seen(&one);
    let g = 1u64 << 30;

    // Grow, then shrink past the chunks the image has.
    ok(ubtrfs(&["filesystem", "resize", "+512M"]).arg(&img));
    verify("grow +512M", &one, &want, &[g + 512 * MIB]);
    // Below what the data needs: refused with the least size. A shrink
    // to a little more, then to that least, moves chunks.
    let least = least_size(&one, "256M");
    ok(ubtrfs(&["filesystem", "resize", &format!("{}M", least + 40)]).arg(&img));
    verify("shrink", &one, &want, &[(least + 40) * MIB]);
    ok(ubtrfs(&["filesystem", "resize", &format!("{least}M")]).arg(&img));
    verify("shrink to the least", &one, &want, &[least * MIB]);
    // Below that whole chunks do not fit: the data past the end is
    // compacted into the free space below it first. Where the extents do
    // not fit whole either, it stops with no space, each group it
    // finished committed: the image reads the same either way.
    let under = least - 48;
    let o = ubtrfs(&["filesystem", "resize", &format!("{under}M")])
        .arg(&img)
        .output()
        .unwrap();
    let size = if o.status.success() {
        under * MIB
    } else {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("no space"), "{err}");
        least * MIB
    };
    verify("shrink by compacting", &one, &want, &[size]);
    eprintln!(
        "shrink to {under}M by compacting: {}",
        if o.status.success() {
            "done"
        } else {
            "no space"
        }
    );
    // max: the file is the device, so max is where it is; grow the file
    // first, as a user grows a partition.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .unwrap()
        .set_len(2 * g)
        .unwrap();
    ok(ubtrfs(&["filesystem", "resize", "max"]).arg(&img));
    verify("max", &one, &want, &[2 * g]);

    // Data block groups not full are compacted: their extents move to
    // other groups, shared as they were, and the groups go; the data
    // allocated does not grow.
    let data_total = |imgs: &[PathBuf]| {
        let _ = Command::new("btrfs")
            .args(["device", "scan", "--forget"])
            .output();
        let m = Mount::images(imgs, "", true);
        let o = ok(Command::new("btrfs")
            .args(["filesystem", "df", "--raw"])
            .arg(&m.dir));
        o.lines()
            .find_map(|l| l.strip_prefix("Data, single: total="))
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no data line in {o}"))
    };
    let before = data_total(&one);
    let said = ok(ubtrfs(&["balance", "start", "-dusage=100"]).arg(&img));
    verify("-dusage=100", &one, &want, &[2 * g]);
    assert!(!said.contains(" 0 compacted"), "{said}");
    assert!(data_total(&one) <= before, "data grew: {said}");
    // Data to DUP on one device.
    ok(ubtrfs(&["balance", "start", "-dconvert=dup"]).arg(&img));
    verify("-dconvert=dup", &one, &want, &[2 * g]);

    // A second device, then metadata and data to RAID1 over both.
    let img2 = dir.join("dev1.img");
    let _ = std::fs::remove_file(&img2);
    std::fs::File::create(&img2)
        .unwrap()
        .set_len(2 * g)
        .unwrap();
    ok(ubtrfs(&["device", "add"]).arg(&img2).arg(&img));
    let two = vec![img.clone(), img2.clone()];
    verify("device add", &two, &want, &[2 * g, 2 * g]);
    let mut c = ubtrfs(&["balance", "start", "-mconvert=raid1", "-dconvert=raid1"]);
    with_devs(&mut c, &two, "--device");
    ok(&mut c);
    verify("-mconvert=raid1 -dconvert=raid1", &two, &want, &[2 * g; 2]);
    // Shrink one device of the RAID1 past its chunks.
    let mut c = ubtrfs(&["filesystem", "resize", "2:900M"]);
    with_devs(&mut c, &two, "-d");
    ok(&mut c);
    verify("RAID1: shrink devid 2", &two, &want, &[2 * g, 900 * MIB]);
    // Removing a device of a two-device RAID1 is refused; after a
    // conversion back it moves everything to the other.
    let mut c = ubtrfs(&["device", "remove", "1"]);
    with_devs(&mut c, &two, "-d");
    assert!(
        !c.output().unwrap().status.success(),
        "RAID1 below two devices"
    );
    let mut c = ubtrfs(&[
        "balance",
        "start",
        "-f",
        "-mconvert=dup",
        "-dconvert=single",
    ]);
    with_devs(&mut c, &two, "--device");
    ok(&mut c);
    verify("back to dup/single", &two, &want, &[2 * g, 900 * MIB]);
    let mut c = ubtrfs(&["device", "remove"]);
    c.arg(&img).arg(&img).arg("-d").arg(&img2);
    ok(&mut c);
    let left = vec![img2.clone()];
    verify("device remove devid 1", &left, &want, &[900 * MIB]);
    assert!(
        !Command::new("btrfs")
            .args(["inspect-internal", "dump-super"])
            .arg(&img)
            .output()
            .unwrap()
            .stdout
            .windows(7)
            .any(|w| w == b"[match]"),
        "the removed device still has a superblock"
    );
    // -dusage=0: empty block groups go.
    ok(ubtrfs(&["balance", "start", "-dusage=0"]).arg(&img2));
    verify("-dusage=0", &left, &want, &[900 * MIB]);
    // Block groups under half full compact: data extents and tree blocks
    // move to others (or new chunks), the emptied groups go.
    let said = ok(ubtrfs(&["balance", "start", "-dusage=50", "-musage=90"]).arg(&img2));
    verify("-dusage=50 -musage=90", &left, &want, &[900 * MIB]);
    assert!(!said.contains(" 0 metadata compacted"), "{said}");

    // The kernel writes on top.
    let _ = Command::new("btrfs")
        .args(["device", "scan", "--forget"])
        .output();
    let m = Mount::images(&left, "", false);
    run_ok(
        Command::new("sh")
            .current_dir(&m.dir)
            .arg("-c")
            .arg("head -c 50M /dev/urandom > after && rm -r big && sync"),
        "kernel writes",
    );
    m.unmount();
    let l = scanned(&left, true);
    btrfs_check(Path::new(l.first()), &[]).unwrap();
}

/// Runs `args` killed after `delay`; whether it was still running.
fn killed_at(args: &[String], delay: Duration) -> bool {
    let mut child = Command::new(ubtrfs_bin())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(delay);
    let running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    running
}

#[test]
fn killed_relocation_leaves_a_whole_commit_and_finishes_when_run_again() {
    skip_unless!(kernel_available);
    let dir = scratch_dir("relocation-kill");
    let base = kernel_image(&dir);
    let pristine = dir.join("pristine.img");
    std::fs::rename(&base, &pristine).unwrap();
    // The image as the kernel left it (its chunks end near its end: a
    // shrink moves some), and grown with room for a DUP copy of
    // everything.
    let small = dir.join("small.img");
    sparse_copy(&pristine, &small).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&pristine)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    ok(ubtrfs(&["filesystem", "resize", "max"]).arg(&pristine));
    let want = seen(std::slice::from_ref(&pristine));
    let img = dir.join("k.img");
    let p = img.display().to_string();
    let least = format!("{}M", least_size(std::slice::from_ref(&small), "256M"));
    let mut rng = Rng::new(0x7e10_ca7e);
    let kills = std::env::var("UBTRFS_CRASH_KILLS").map_or(3, |_| crash_kills());
    for (what, from, args) in [
        ("shrink", &small, vec!["filesystem", "resize", &least, &p]),
        (
            "balance",
            &pristine,
            vec!["balance", "start", "-dconvert=dup", "-mconvert=dup", &p],
        ),
        (
            "balance -musage",
            &pristine,
            vec!["balance", "start", "-musage=90", &p],
        ),
        ("tune -u", &pristine, vec!["tune", "-u", &p]),
    ] {
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        // A full run: how long it takes.
        sparse_copy(from, &img).unwrap();
        let t0 = Instant::now();
        ok(Command::new(ubtrfs_bin()).args(&args));
        let full = t0.elapsed();
        let mut hits = 0;
        for i in 0..kills {
            sparse_copy(from, &img).unwrap();
            let delay = Duration::from_micros(rng.below(full.as_micros() as u64 * 3 / 4 + 1));
            hits += killed_at(&args, delay) as usize;
            let step = format!("{what}: kill {i} after {delay:?}");
            let one = vec![img.clone()];
            // An fsid change under way is finished first (the kernel
            // refuses such an image; btrfstune resumes it alike).
            if what != "tune -u" {
                verify_files(&step, &one, &want);
            }
            ok(Command::new(ubtrfs_bin()).args(&args));
            verify_files(&format!("{step}, run again"), &one, &want);
        }
        eprintln!("{what}: {hits} kills landed while it ran (full run {full:?})");
    }
    // Device remove: devid 1 of a two-device copy (a second device added
    // by ubtrfs) moves everything to devid 2. A kill leaves both devices
    // members, or devid 2 alone once the last commit is on disk (devid 1's
    // superblocks wiped after it); either way the files read the same, and
    // while devid 1 is a member the same command finishes.
    let second = dir.join("second.img");
    let prepare = || {
        sparse_copy(&pristine, &img).unwrap();
        let _ = std::fs::remove_file(&second);
        std::fs::File::create(&second)
            .unwrap()
            .set_len(2 << 30)
            .unwrap();
        ok(ubtrfs(&["device", "add"]).arg(&second).arg(&img));
    };
    let s = second.display().to_string();
    let args: Vec<String> = ["device", "remove", "1", &p, "-d", &s]
        .iter()
        .map(|a| a.to_string())
        .collect();
    prepare();
    let t0 = Instant::now();
    ok(Command::new(ubtrfs_bin()).args(&args));
    let full = t0.elapsed();
    // Whether devid 2's superblock still counts two devices.
    let two_devices = || {
        let o = ok(Command::new("btrfs")
            .args(["inspect-internal", "dump-super"])
            .arg(&second));
        o.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["num_devices", "2"])
    };
    let mut hits = 0;
    for i in 0..kills {
        prepare();
        let delay = Duration::from_micros(rng.below(full.as_micros() as u64 * 3 / 4 + 1));
        hits += killed_at(&args, delay) as usize;
        let step = format!("device remove: kill {i} after {delay:?}");
        if two_devices() {
            let both = vec![img.clone(), second.clone()];
            verify_files(&step, &both, &want);
            ok(Command::new(ubtrfs_bin()).args(&args));
        }
        verify_files(
            &format!("{step}, finished"),
            std::slice::from_ref(&second),
            &want,
        );
    }
    eprintln!("device remove: {hits} kills landed while it ran (full run {full:?})");
    // The clone with its new fsid mounts beside the original.
    sparse_copy(&pristine, &img).unwrap();
    ok(ubtrfs(&["tune", "-u"]).arg(&img));
    let _ = Command::new("btrfs")
        .args(["device", "scan", "--forget"])
        .output();
    let a = Mount::images(std::slice::from_ref(&pristine), "", true);
    let b = Mount::images(std::slice::from_ref(&img), "", true);
    compare_manifests(
        &manifest_of(&a.dir),
        &manifest_of(&b.dir),
        &Ignore::default(),
    )
    .unwrap();
}
