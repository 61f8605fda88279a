//! User-reported CLI bugs (issue 8), each with a kernel-made image built
//! here:
//! - `send -f OUT` on a failing send removes only a regular file it created
//!   (never a device node, a fifo or a file that was there before);
//! - `send -q` prints nothing, `send` prints "At subvol NAME";
//! - `extract` onto a filesystem that refuses btrfs.* xattrs (ext4) carries
//!   on and says once which xattrs were not kept;
//! - `mkfs` on a path that is not there makes the image file with -b,
//!   refuses without it, and leaves no file behind when it fails;
//!   `--root-owner` gives the top directory its owner (issue 51);
//! - `tune -m` gives a clone of an image a UUID of its own, which the
//!   kernel mounts beside the original, and `tune -M` gives the old one
//!   back (issue 51);
//! - `filesystem resize` on an unmounted image: btrfs-progs misc-tests
//!   070's cases (grow by, to, with a devid; a wrong devid, `cancel`, a
//!   bad suffix and a mounted image refused), and more: a shrink, and
//!   the second of two devices (issue 51; shrinks that move chunks are
//!   relocation.rs's).
//!
//! Needs root, the kernel's btrfs, btrfs-progs, e2fsprogs and loop devices.
//! In CI (UBTRFS_REQUIRE_KERNEL=1) a missing prerequisite fails the run.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use ubtrfs_oracle::*;

/// Marks each 4 KiB block of the file whose data the send test damages.
const MARK: &[u8] = b"ubtrfs-cli-bugs-damage-me";

fn run_ok(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sh(dir: &Path, script: &str) {
    run_ok(
        Command::new("bash")
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(dir),
        script,
    );
}

/// Unmounts `mnt` when dropped (also when the test panics).
struct Mounted(PathBuf);

impl Mounted {
    fn new(image: &Path, mnt: &Path, opts: &[&str]) -> Mounted {
        std::fs::create_dir_all(mnt).unwrap();
        run_ok(
            Command::new("mount")
                .args(["-o", "loop"])
                .args(opts)
                .arg(image)
                .arg(mnt),
            "mount",
        );
        Mounted(mnt.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A fresh btrfs image at `base/btrfs.img`, filled by `fill` (run with the
/// kernel's mount of it); returns the image.
fn btrfs_image(base: &Path, fill: impl FnOnce(&Path)) -> PathBuf {
    let image = base.join("btrfs.img");
    let f = std::fs::File::create(&image).unwrap();
    f.set_len(256 << 20).unwrap();
    drop(f);
    run_ok(
        Command::new("mkfs.btrfs").args(["-q", "-f"]).arg(&image),
        "mkfs.btrfs",
    );
    let mnt = base.join("btrfs-mnt");
    let m = Mounted::new(&image, &mnt, &[]);
    fill(&mnt);
    sh(&mnt, "sync");
    drop(m);
    image
}

/// A read-only snapshot `snap` of a subvolume holding `f`, a file whose
/// every 4 KiB block starts with [`MARK`].
fn snapshot_image(base: &Path) -> PathBuf {
    btrfs_image(base, |mnt| {
        sh(mnt, "btrfs -q subvolume create sv");
        let mut data = Vec::new();
        for i in 0..64u32 {
            let mut block = MARK.to_vec();
            block.extend(std::iter::repeat_n((i % 251) as u8, 4096 - MARK.len()));
            data.extend(block);
        }
        std::fs::write(mnt.join("sv/f"), &data).unwrap();
        std::fs::write(mnt.join("sv/small"), b"hello\n").unwrap();
        sh(mnt, "sync; btrfs -q subvolume snapshot -r sv snap");
    })
}

/// Overwrites the data of every block starting with [`MARK`] (single data
/// profile: the one copy), so reading that file fails its checksum.
fn damage_marked_data(image: &Path) {
    let img = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(image)
        .unwrap();
    let len = img.metadata().unwrap().len();
    let mut buf = vec![0u8; 1 << 20];
    let mut hits = 0;
    let mut off = 0u64;
    while off < len {
        let n = img.read_at(&mut buf, off).unwrap();
        for b in (0..n).step_by(4096) {
            if buf[b..n].starts_with(MARK) {
                img.write_all_at(b"damaged!", off + (b + MARK.len()) as u64)
                    .unwrap();
                hits += 1;
            }
        }
        off += n as u64;
    }
    assert!(hits > 0, "{}: marked data not found", image.display());
}

fn mknod(path: &Path, mode: libc::mode_t, dev: libc::dev_t) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    let rc = unsafe { libc::mknod(c.as_ptr(), mode, dev) };
    assert_eq!(
        rc,
        0,
        "mknod {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

fn send_to(image: &Path, out: &Path) -> std::process::Output {
    let out = ubtrfs(&[
        "send",
        &image.display().to_string(),
        "snap",
        "-f",
        &out.display().to_string(),
    ]);
    assert!(
        !out.status.success(),
        "send of the damaged snapshot succeeded: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn failed_send_removes_only_a_file_it_created() {
    skip_unless!(kernel_available);
    let base = scratch_dir("cli-bugs-send-f");
    let image = snapshot_image(&base);
    damage_marked_data(&image);
    let dir = base.join("out");
    std::fs::create_dir(&dir).unwrap();

    // A character device (the same numbers as /dev/null).
    let dev = dir.join("null");
    mknod(&dev, libc::S_IFCHR | 0o666, libc::makedev(1, 3));
    send_to(&image, &dev);
    let m = std::fs::symlink_metadata(&dev).expect("the device node was removed");
    assert!(m.file_type().is_char_device(), "{:?}", m.file_type());

    // A fifo, with a reader so the send can write to it.
    let fifo = dir.join("fifo");
    mknod(&fifo, libc::S_IFIFO | 0o600, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).map(|d| d.len()))
    };
    send_to(&image, &fifo);
    reader.join().unwrap().expect("read the fifo");
    let m = std::fs::symlink_metadata(&fifo).expect("the fifo was removed");
    assert!(m.file_type().is_fifo(), "{:?}", m.file_type());

    // A regular file that was there before.
    let old = dir.join("old");
    std::fs::write(&old, b"was here").unwrap();
    send_to(&image, &old);
    assert!(old.exists(), "a file that was there before was removed");

    // A file this send created: a partial stream must not be left.
    let new = dir.join("new");
    let out = send_to(&image, &new);
    assert!(
        !new.exists(),
        "a partial stream was left: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn send_quiet_prints_nothing() {
    skip_unless!(kernel_available);
    let base = scratch_dir("cli-bugs-send-q");
    let image = snapshot_image(&base);
    let img = image.display().to_string();
    for (quiet, args) in [
        (false, vec!["send", &img, "snap", "-f", "/dev/null"]),
        (true, vec!["send", &img, "snap", "-q", "-f", "/dev/null"]),
        (
            true,
            vec!["send", "--quiet", &img, "snap", "-f", "/dev/null"],
        ),
    ] {
        let out = ubtrfs(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {err}");
        if quiet {
            assert_eq!(err, "", "{args:?}");
        } else {
            assert_eq!(err, "At subvol snap\n", "{args:?}");
        }
    }
}

/// Relative path -> (kind, content or link target, listed xattrs) under
/// `root`.
fn tree(root: &Path) -> BTreeMap<String, (String, Vec<u8>, Vec<String>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        let rel = p.strip_prefix(root).unwrap().display().to_string();
        let (kind, data) = if m.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
            ("dir", Vec::new())
        } else if m.file_type().is_symlink() {
            (
                "symlink",
                std::fs::read_link(&p)
                    .unwrap()
                    .as_os_str()
                    .as_bytes()
                    .to_vec(),
            )
        } else {
            ("file", std::fs::read(&p).unwrap())
        };
        out.insert(rel, (kind.to_string(), data, xattr_names(&p)));
    }
    out
}

fn xattr_names(p: &Path) -> Vec<String> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    // SAFETY: a NUL-terminated path and a buffer of the given size.
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(
        n >= 0,
        "{}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
    let mut names: Vec<String> = buf[..n as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn extract_to_ext4_skips_btrfs_xattrs_and_says_so() {
    skip_unless!(kernel_available);
    let base = scratch_dir("cli-bugs-extract");
    let mut expected = BTreeMap::new();
    let image = btrfs_image(&base, |mnt| {
        sh(
            mnt,
            "mkdir d
             btrfs property set d compression zstd
             head -c 300000 /dev/urandom > d/inherits
             mkdir d/sub
             echo text > d/sub/file
             touch c
             chattr +c c
             seq 1 20000 > c
             echo plain > plain
             setfattr -n user.kept -v one plain
             setfattr -n trusted.kept -v two d/inherits
             ln -s d/inherits link
             sync",
        );
        expected = tree(mnt);
    });
    // What the kernel stored: btrfs.compression on d, what d holds, and c.
    let with_prop: Vec<&String> = expected
        .iter()
        .filter(|(_, (_, _, x))| x.iter().any(|n| n == "btrfs.compression"))
        .map(|(p, _)| p)
        .collect();
    assert!(with_prop.len() >= 4, "btrfs.compression on {with_prop:?}");

    let ext4 = base.join("ext4.img");
    std::fs::File::create(&ext4)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    run_ok(
        Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&ext4),
        "mkfs.ext4",
    );
    let dst = base.join("ext4-mnt");
    let _m = Mounted::new(&ext4, &dst, &[]);
    let out = ubtrfs(&[
        "extract",
        &image.display().to_string(),
        "/",
        &dst.join("x").display().to_string(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "extract failed: {err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("btrfs.compression") && !warnings[0].contains("user.kept"),
        "{err}"
    );
    assert!(!err.contains("ubtrfs: error"), "{err}");

    // Everything else as the kernel showed it, xattrs but btrfs.* too.
    let mut want = expected;
    for (_, _, x) in want.values_mut() {
        x.retain(|n| !n.starts_with("btrfs."));
    }
    let got = tree(&dst.join("x"));
    let diff: Vec<String> = want
        .iter()
        .filter(|(p, v)| got.get(*p) != Some(v))
        .map(|(p, v)| {
            format!(
                "{p}: want {:?}, got {:?}",
                (&v.0, &v.2),
                got.get(p).map(|g| (&g.0, &g.2))
            )
        })
        .chain(
            got.keys()
                .filter(|p| !want.contains_key(*p))
                .map(|p| format!("{p}: unexpected")),
        )
        .collect();
    assert!(diff.is_empty(), "{}", diff.join("\n"));
}

#[test]
fn mkfs_on_a_new_path_and_the_top_directory_owner() {
    skip_unless!(kernel_available);
    let base = scratch_dir("cli-bugs-mkfs-new");
    let img = base.join("new.img");
    let mkfs = |args: &[&str]| {
        Command::new(ubtrfs_bin())
            .arg("mkfs")
            .args(args)
            .arg(&img)
            .output()
            .unwrap()
    };
    // Not there, no size: refused, nothing made.
    let o = mkfs(&["-q"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("give -b SIZE"));
    assert!(!img.exists(), "a refused mkfs left {}", img.display());
    // Too small for a filesystem: refused, the file it made removed.
    let o = mkfs(&["-q", "-b", "10M"]);
    assert!(!o.status.success());
    assert!(!img.exists(), "a failed mkfs left {}", img.display());
    // Made of the size asked, the top directory owned as asked.
    let o = mkfs(&["-b", "300M", "--root-owner", "1234:5678"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("owned by 1234:5678"));
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 300 << 20);
    run_ok(
        Command::new("btrfs")
            .args(["check", "--readonly"])
            .arg(&img),
        "btrfs check",
    );
    let mnt = base.join("mnt");
    let m = Mounted::new(&img, &mnt, &["-o", "ro"]);
    let top = std::fs::metadata(&m.0).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((top.uid(), top.gid()), (1234, 5678));
    drop(m);
    // An owner that is not UID:GID is a usage error.
    let _ = std::fs::remove_file(&img);
    let o = mkfs(&["-b", "300M", "--root-owner", "me"]);
    assert!(!o.status.success());
    assert!(!img.exists());
}

/// The fsid and metadata_uuid `btrfs inspect-internal dump-super` reads.
fn super_uuids(image: &Path) -> (String, String) {
    let o = Command::new("btrfs")
        .args(["inspect-internal", "dump-super"])
        .arg(image)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    (field("fsid"), field("metadata_uuid"))
}

#[test]
fn tune_gives_a_clone_its_own_uuid() {
    skip_unless!(kernel_available);
    let base = scratch_dir("cli-bugs-tune");
    let a = btrfs_image(&base, |m| {
        sh(m, "cp -a /usr/include/linux . && echo one > f")
    });
    let b = base.join("clone.img");
    std::fs::copy(&a, &b).unwrap();
    let (old, _) = super_uuids(&a);
    let o = Command::new(ubtrfs_bin())
        .args(["tune", "-m"])
        .arg(&b)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (new, meta) = super_uuids(&b);
    assert!(
        new != old && meta == old,
        "fsid {new}, metadata_uuid {meta}, was {old}"
    );
    run_ok(
        Command::new("btrfs").args(["check", "--readonly"]).arg(&b),
        "btrfs check",
    );
    // Both at once: the clone is its own filesystem to the kernel (its
    // sysfs directory is the new UUID's), with the same files.
    {
        let ma = Mounted::new(&a, &base.join("a"), &[]);
        let mb = Mounted::new(&b, &base.join("b"), &[]);
        let sys = std::fs::read_to_string(format!("/sys/fs/btrfs/{new}/metadata_uuid")).unwrap();
        assert_eq!(sys.trim(), old);
        sh(
            &base,
            &format!("diff -r {}/linux {}/linux", ma.0.display(), mb.0.display()),
        );
        sh(&mb.0, "echo two > g");
    }
    run_ok(
        Command::new("btrfs").args(["check", "--readonly"]).arg(&b),
        "btrfs check",
    );
    // -M with the UUID the tree blocks carry: the flag goes.
    let o = Command::new(ubtrfs_bin())
        .args(["tune", "-M", &old])
        .arg(&b)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new("btrfs")
        .args(["inspect-internal", "dump-super"])
        .arg(&b)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let flags = text
        .lines()
        .find_map(|l| l.strip_prefix("incompat_flags"))
        .and_then(|v| u64::from_str_radix(v.trim().trim_start_matches("0x"), 16).ok())
        .unwrap();
    assert_eq!(flags & (1 << 10), 0, "METADATA_UUID still set: {flags:#x}");
    assert_eq!(super_uuids(&b).0, old);
    run_ok(
        Command::new("btrfs").args(["check", "--readonly"]).arg(&b),
        "btrfs check",
    );
}

/// The "Device size" `btrfs filesystem usage -b` shows with the kernel's
/// mount of `images` (the first mounted, the rest scanned).
fn kernel_device_size(base: &Path, images: &[&Path]) -> u64 {
    let mut loops = Vec::new();
    for i in images {
        let o = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(i)
            .output()
            .unwrap();
        loops.push(String::from_utf8_lossy(&o.stdout).trim().to_string());
    }
    for l in &loops {
        let _ = Command::new("btrfs").args(["device", "scan", l]).output();
    }
    let mnt = base.join("resize-mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    run_ok(Command::new("mount").arg(&loops[0]).arg(&mnt), "mount");
    let o = Command::new("btrfs")
        .args(["filesystem", "usage", "-b"])
        .arg(&mnt)
        .output()
        .unwrap();
    let _ = Command::new("umount").arg(&mnt).status();
    for l in &loops {
        let _ = Command::new("losetup").args(["-d", l]).status();
    }
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Device size:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

#[test]
fn offline_resize_as_btrfs_progs_misc_070_and_more() {
    skip_unless!(kernel_available);
    let base = scratch_dir("cli-bugs-resize");
    let img = base.join("r.img");
    let fresh = |devs: &[&Path]| {
        for d in devs {
            let f = std::fs::File::create(d).unwrap();
            f.set_len(1 << 30).unwrap();
        }
        run_ok(
            Command::new("mkfs.btrfs").args(["-q", "-f"]).args(devs),
            "mkfs.btrfs",
        );
    };
    let resize = |amount: &str, extra: &[&Path]| {
        let mut c = Command::new(ubtrfs_bin());
        c.args(["filesystem", "resize", amount]).arg(&img);
        for d in extra {
            c.arg("-d").arg(d);
        }
        c.output().unwrap()
    };
    let g = 1u64 << 30;
    for (amount, size) in [
        ("+1G", 2 * g),
        ("1:+1G", 2 * g),
        ("2G", 2 * g),
        ("-10M", g - (10 << 20)),
    ] {
        fresh(&[&img]);
        let o = resize(amount, &[]);
        assert!(
            o.status.success(),
            "{amount}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            std::fs::metadata(&img).unwrap().len(),
            size,
            "{amount}: the file"
        );
        run_ok(
            Command::new("btrfs")
                .args(["check", "--readonly"])
                .arg(&img),
            "btrfs check",
        );
        assert_eq!(
            kernel_device_size(&base, &[&img]),
            size,
            "{amount}: the kernel's size"
        );
    }
    for amount in ["2:+1G", "cancel", "1:+1a", "100M"] {
        fresh(&[&img]);
        let o = resize(amount, &[]);
        assert!(!o.status.success(), "{amount} was taken");
        assert_eq!(
            std::fs::metadata(&img).unwrap().len(),
            g,
            "{amount} changed the file"
        );
    }
    // In use by the kernel: refused, naming it.
    fresh(&[&img]);
    {
        let m = Mounted::new(&img, &base.join("busy"), &[]);
        let o = resize("+1G", &[]);
        assert!(!o.status.success());
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("in use"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        drop(m);
    }
    // Two devices (RAID1): the second grows.
    let img2 = base.join("r2.img");
    fresh(&[&img, &img2]);
    let _ = Command::new("btrfs")
        .args(["device", "scan", "--forget"])
        .status();
    let o = resize("2:+512M", &[&img2]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::metadata(&img2).unwrap().len(), g + (512 << 20));
    run_ok(
        Command::new("btrfs")
            .args(["check", "--readonly"])
            .arg(&img),
        "btrfs check",
    );
    assert_eq!(
        kernel_device_size(&base, &[&img, &img2]),
        2 * g + (512 << 20)
    );
}
