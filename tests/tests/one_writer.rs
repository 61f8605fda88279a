//! One writer per image, and a plain `umount` that keeps everything
//! (crates/engine/src/io/claim.rs, crates/fuse/src/loopdev.rs):
//!
//! (a) mkfs over ext4, XFS, swap, LUKS, GPT and MBR images refuses without
//!     -f, names what it found and leaves the image byte for byte; with -f
//!     it writes a filesystem `btrfs check` passes and the kernel mounts
//!     and writes.
//! (b) Under the kernel's read-write loop mount of an image, every writer
//!     (mkfs -f of the image and of the loop device, subvolume
//!     create/snapshot/delete, receive, rescue, a read-write mount) and
//!     every reader refuses, naming the kernel's mount; `--force` reads.
//!     The kernel's filesystem stays intact (check, read back).
//! (c) Under a live read-write ubtrfs mount with writes in flight, the
//!     same commands and the kernel's `mount -o loop` refuse or fail, the
//!     holder named; a second mount by root shares the first (a bind, as
//!     the kernel shares a superblock: `-o ro` refuses writes, another
//!     `subvol=` is refused); the image does not change by a byte; then a
//!     plain umount, check, the kernel reads it all and writes on top.
//! (d) Plain umount/mount cycles (UBTRFS_CYCLES, default 20; bench/
//!     runs 200) with writes, appends, unlinks and renames between:
//!     `btrfs check` right after each umount, and every byte of every
//!     file seen by the next mount; the kernel reads the end state.
//! (e) `sync`, `sync -f` (syncfs) or `mount -o remount,ro`, then kill -9
//!     of the daemon: everything written before is there (check, kernel
//!     read-back); the read-only remount refuses writes (EROFS) first.
//! (f) A user without root mounts through fusermount3, writes, runs
//!     `fusermount3 -u` and mounts again at once: the new mount waits
//!     for the old daemon's last commit and sees everything.
//!
//! (g) A loop device the kernel claims for a mount this process cannot
//!     see (made in a mount namespace of its own): a writer waits while
//!     the kernel lets go of it (as after the umount of a fuseblk mount:
//!     fstests generic/604) and refuses once the wait is over.
//!
//! Needs root, the kernel's btrfs, loop devices, /dev/fuse, and the user
//! `tests` for (f); under UBTRFS_REQUIRE_KERNEL=1 a missing one fails.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use ubtrfs_oracle::*;

/// Runs ubtrfs with `args`; Ok when it fails with one of `needles` in
/// its stderr, else Err saying what it did.
fn refused(args: &[&str], needles: &[String]) -> Result<(), String> {
    let o = ubtrfs(args);
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.success() || !needles.iter().any(|n| err.contains(n.as_str())) {
        return Err(format!(
            "`ubtrfs {}` should fail naming {needles:?}: {} {}",
            args.join(" "),
            o.status,
            tail(&out_text(&o), 600)
        ));
    }
    Ok(())
}

fn sh(cmd: &str) -> Result<Output, String> {
    run(Command::new("sh").args(["-c", cmd]))
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

// ------------------------------------------------------------------ (a)

#[test]
fn mkfs_refuses_existing_signatures() {
    one_case("mkfs_refuses_existing_signatures", Writer::Kernel, |base| {
        // (what makes it, what mkfs must name)
        let cases = [
            ("mkfs.ext4 -q -F IMG", "existing filesystem (ext4)"),
            ("mkfs.xfs -q -f IMG", "existing filesystem (xfs)"),
            ("mkswap IMG", "existing filesystem (swap)"),
            (
                "printf pw | cryptsetup luksFormat -q --pbkdf pbkdf2 IMG -",
                "existing filesystem (crypto_LUKS)",
            ),
            ("echo 'label: gpt' | sfdisk -q IMG", "partition table (gpt)"),
            ("echo 'label: dos' | sfdisk -q IMG", "partition table (dos)"),
        ];
        let img = base.join("sig.img");
        for (make, name) in cases {
            let _ = std::fs::remove_file(&img);
            sh(&format!("truncate -s 320M {}", s(&img)))?;
            sh(&make.replace("IMG", &s(&img)))?;
            let before = sha256_file(&img);
            refused(&["mkfs", "-q", &s(&img)], &[name.to_string()])?;
            if sha256_file(&img) != before {
                return Err(format!("mkfs without -f changed an image holding {name}"));
            }
        }
        // -f writes over the last one: check, the kernel mounts and writes.
        let o = ubtrfs(&["mkfs", "-q", "-f", &s(&img)]);
        if !o.status.success() {
            return Err(format!("mkfs -f: {}", out_text(&o)));
        }
        check(&img, "after mkfs -f over a partition table")?;
        {
            let m = kernel_rw(&img, &base.join("k"));
            std::fs::write(m.path("k"), b"kernel").map_err(|e| e.to_string())?;
            m.try_unmount()?;
        }
        check(&img, "after the kernel wrote")?;
        Ok(String::new())
    });
}

// ------------------------------------------------------------------ (b)

/// Every writer and reader of ubtrfs, against `img` (and `dev`, a block
/// device of it); each must be refused with one of `needles` in its
/// error.
fn everyone_refused(img: &Path, dev: &str, mnt2: &Path, needles: &[String]) -> Result<(), String> {
    let i = s(img);
    std::fs::create_dir_all(mnt2).map_err(|e| e.to_string())?;
    let m2 = s(mnt2);
    let mut writers: Vec<Vec<&str>> = vec![
        vec!["mkfs", "-q", "-f", &i],
        vec!["mkfs", "-q", "-f", dev],
        vec!["subvolume", "create", &i, "/x"],
        vec!["subvolume", "snapshot", &i, "/", "/snap"],
        vec!["subvolume", "delete", &i, "/x"],
        vec!["receive", "-f", "/dev/null", &i, "/"],
        vec!["rescue", "zero-log", &i],
        vec!["rescue", "replay-log", &i],
        // Readers.
        vec!["ls", &i, "/"],
        vec!["cat", &i, "/f"],
        vec!["stat", &i, "/"],
        vec!["scrub", &i],
        vec!["inspect", "dump-super", &i],
        vec!["send", "-f", "/dev/null", &i, "/"],
    ];
    // A second mount of an image ubtrfs serves shares that mount (see
    // `second_mount_shares_the_first`); of the kernel's, it is refused.
    if !needles.iter().any(|n| n.contains("by ubtrfs")) {
        writers.push(vec!["mount", "-f", "-o", "rw", &i, &m2]);
        writers.push(vec!["mount", "-f", "-o", "ro", &i, &m2]);
    }
    for w in writers {
        refused(&w, needles)?;
    }
    Ok(())
}

#[test]
fn everyone_refuses_a_kernel_mounted_image() {
    one_case(
        "everyone_refuses_a_kernel_mounted_image",
        Writer::Kernel,
        |base| {
            let img = base.join("k.img");
            sh(&format!(
                "truncate -s 512M {0} && mkfs.btrfs -q {0}",
                s(&img)
            ))?;
            let dir = base.join("k");
            let m = kernel_rw(&img, &dir);
            let data = pseudo_bytes(7, 3 << 20);
            std::fs::write(m.path("f"), &data).map_err(|e| e.to_string())?;
            sh("sync")?;
            let dev = m.loops().first().to_string();
            let needle = format!("mounted by the kernel at {}", s(&dir));
            everyone_refused(&img, &dev, &base.join("m2"), &[needle])?;
            // --force reads what the kernel committed.
            let o = ubtrfs(&["cat", "--force", &s(&img), "/f"]);
            if !o.status.success() || o.stdout != data {
                return Err(format!("cat --force: {}", out_text(&o)));
            }
            m.try_unmount()?;
            check(&img, "after the refusals")?;
            let r = kernel_ro(&img, &dir);
            if std::fs::read(r.path("f")).map_err(|e| e.to_string())? != data {
                return Err("the kernel's file changed".into());
            }
            Ok(String::new())
        },
    );
}

// ------------------------------------------------------------------ (c)

/// Deterministic bytes.
fn pseudo_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed);
    (0..len).map(|_| r.next() as u8).collect()
}

#[test]
fn everyone_refuses_a_live_ubtrfs_mount() {
    one_case(
        "everyone_refuses_a_live_ubtrfs_mount",
        Writer::Ubtrfs,
        |base| {
            let img = base.join("u.img");
            mkfs_image(&img, "512M")?;
            let mnt = base.join("mnt");
            // No commit or writeback during the refusals: the image must not
            // change by a byte while the writer's data stays dirty.
            let m = UbtrfsMount::start(&img, &mnt, "commit=300")?;
            let pid = m.pid().ok_or("no mount process")?;
            let src = mount_source(&mnt).ok_or("no mountinfo line")?;
            if !src.starts_with("/dev/loop") {
                return Err(format!("root's rw mount is not over a loop device: {src}"));
            }
            std::fs::write(mnt.join("f"), b"first").map_err(|e| e.to_string())?;
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let writer = {
                let (stop, path) = (stop.clone(), mnt.join("w"));
                std::thread::spawn(move || -> Result<u64, String> {
                    use std::io::{Seek, SeekFrom, Write};
                    let mut f = std::fs::File::create(&path).map_err(|e| e.to_string())?;
                    let mut n = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        f.seek(SeekFrom::Start((n % 32) << 20))
                            .map_err(|e| e.to_string())?;
                        f.write_all(&pseudo_bytes(n, 1 << 20))
                            .map_err(|e| e.to_string())?;
                        n += 1;
                    }
                    Ok(n)
                })
            };
            std::thread::sleep(Duration::from_millis(300));
            let before = sha256_file(&img);
            // The image names the process; its loop device, the mount.
            let needles = [
                format!("process {pid}"),
                format!("mounted by ubtrfs at {}", s(&mnt)),
            ];
            let res = everyone_refused(&img, &src, &base.join("m2"), &needles).and_then(|()| {
                // The kernel: mount -o loop of the image, and of the device.
                let k = base.join("k");
                std::fs::create_dir_all(&k).map_err(|e| e.to_string())?;
                for what in [format!("-o loop {}", s(&img)), src.clone()] {
                    if sh(&format!("mount -t btrfs {what} {}", s(&k))).is_ok() {
                        unmount(&k);
                        return Err(format!("the kernel mounted {what} under the live mount"));
                    }
                }
                // --force reads the last commit.
                let o = ubtrfs(&["ls", "--force", &s(&img), "/"]);
                if !o.status.success() {
                    return Err(format!("ls --force: {}", out_text(&o)));
                }
                second_mount_shares_the_first(&img, &mnt, &base.join("m2"))
            });
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let rounds = writer.join().map_err(|_| "writer panicked")??;
            let after = sha256_file(&img);
            res?;
            if after != before {
                return Err("the image changed during the refusals".into());
            }
            // Rounds wrote MiB n at (n % 32) MiB: the last 32 show.
            let mut model = vec![0u8; (rounds.min(32) as usize) << 20];
            for n in rounds.saturating_sub(32)..rounds {
                let at = ((n % 32) << 20) as usize;
                model[at..at + (1 << 20)].copy_from_slice(&pseudo_bytes(n, 1 << 20));
            }
            // A plain umount: when it returns, everything is on the image.
            if !unmount(&mnt) {
                return Err("plain umount failed".into());
            }
            check(&img, "right after a plain umount")?;
            drop(m);
            let k = base.join("k");
            {
                let r = kernel_rw(&img, &k);
                if std::fs::read(r.path("w")).map_err(|e| e.to_string())? != model {
                    return Err("the kernel reads w other than written".into());
                }
                std::fs::write(r.path("kernel"), b"on top").map_err(|e| e.to_string())?;
                r.try_unmount()?;
            }
            check(&img, "after the kernel wrote on top")?;
            Ok(format!("{rounds} MiB written during the refusals"))
        },
    );
}

/// A second mount of `img` (served at `mnt`) on `m2`: read-only, it
/// shows the first mount's files and refuses writes; with another root it
/// is refused.
fn second_mount_shares_the_first(img: &Path, mnt: &Path, m2: &Path) -> Result<(), String> {
    let o = ubtrfs(&["mount", "-o", "ro", &s(img), &s(m2)]);
    if !o.status.success() {
        return Err(format!("a second mount -o ro: {}", out_text(&o)));
    }
    let seen = std::fs::read(m2.join("f"));
    let write = std::fs::write(m2.join("g"), b"x");
    let first = std::fs::read(mnt.join("f"));
    unmount(m2);
    if seen.as_deref().ok() != Some(&b"first"[..]) || first.is_err() {
        return Err(format!("the second mount shows f as {seen:?}"));
    }
    match write {
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => {}
        other => return Err(format!("a write through the ro second mount: {other:?}")),
    }
    refused(
        &["mount", "-o", "ro,subvol=x", &s(img), &s(m2)],
        &["must ask for the same root".to_string()],
    )
}

// ------------------------------------------------------------------ (d)

/// Files by name and content: what the mount must show.
type Model = BTreeMap<String, Vec<u8>>;

/// Every file of the model and nothing else in `dir`.
fn verify(dir: &Path, model: &Model, when: &str) -> Result<(), String> {
    let mut seen = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| format!("{when}: readdir: {e}"))? {
        let name = e.map_err(|e| e.to_string())?.file_name();
        seen.push(name.to_string_lossy().into_owned());
    }
    seen.sort();
    let want: Vec<&String> = model.keys().collect();
    if seen.iter().collect::<Vec<_>>() != want {
        return Err(format!("{when}: names {seen:?}, expected {want:?}"));
    }
    for (name, data) in model {
        let got = std::fs::read(dir.join(name)).map_err(|e| format!("{when}: {name}: {e}"))?;
        if &got != data {
            return Err(format!(
                "{when}: {name}: {} bytes read, {} written (first difference at {:?})",
                got.len(),
                data.len(),
                got.iter().zip(data).position(|(a, b)| a != b)
            ));
        }
    }
    Ok(())
}

/// One cycle's changes: a new file, an append, and an unlink or a rename.
fn change(dir: &Path, model: &mut Model, rng: &mut Rng, cycle: u64) -> Result<(), String> {
    use std::io::Write;
    let len = rng.below(300 << 10) as usize;
    let name = format!("f{cycle}");
    let data = pseudo_bytes(rng.next(), len);
    std::fs::write(dir.join(&name), &data).map_err(|e| format!("write {name}: {e}"))?;
    model.insert(name, data);
    let names: Vec<String> = model.keys().cloned().collect();
    let pick = |r: &mut Rng| names[r.below(names.len() as u64) as usize].clone();
    let a = pick(rng);
    let more = pseudo_bytes(rng.next(), rng.below(64 << 10) as usize);
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join(&a))
        .and_then(|mut f| f.write_all(&more))
        .map_err(|e| format!("append {a}: {e}"))?;
    model.get_mut(&a).unwrap().extend_from_slice(&more);
    let b = pick(rng);
    if rng.below(2) == 0 && model.len() > 3 {
        std::fs::remove_file(dir.join(&b)).map_err(|e| format!("unlink {b}: {e}"))?;
        model.remove(&b);
    } else if model.contains_key(&b) {
        let to = format!("r{cycle}");
        std::fs::rename(dir.join(&b), dir.join(&to)).map_err(|e| format!("rename {b}: {e}"))?;
        let v = model.remove(&b).unwrap();
        model.insert(to, v);
    }
    Ok(())
}

#[test]
fn plain_umount_keeps_everything() {
    one_case("plain_umount_keeps_everything", Writer::Ubtrfs, |base| {
        let cycles = env_u64("UBTRFS_CYCLES").unwrap_or(20);
        let img = base.join("c.img");
        mkfs_image(&img, "512M")?;
        let mnt = base.join("mnt");
        let mut model = Model::new();
        let mut rng = Rng::new(30);
        let t = Instant::now();
        for cycle in 0..cycles {
            let m = UbtrfsMount::start(&img, &mnt, "")?;
            verify(&mnt, &model, &format!("cycle {cycle}, after mounting"))?;
            change(&mnt, &mut model, &mut rng, cycle)?;
            if !unmount(&mnt) {
                return Err(format!("cycle {cycle}: plain umount failed"));
            }
            check(&img, &format!("right after umount of cycle {cycle}"))
                .map_err(|e| format!("{e}; mount log: {}", m.log_tail()))?;
            m.exit_within(Duration::from_secs(60))
                .map_err(|e| format!("cycle {cycle}: {e}"))?;
        }
        let r = kernel_ro(&img, &base.join("k"));
        verify(&r.dir, &model, "through the kernel")?;
        Ok(format!(
            "{cycles} cycles in {:.1?}, {} files at the end",
            t.elapsed(),
            model.len()
        ))
    });
}

// ------------------------------------------------------------------ (e)

#[test]
fn sync_or_remount_ro_then_kill9_keeps_what_was_written() {
    one_case(
        "sync_or_remount_ro_then_kill9_keeps_what_was_written",
        Writer::Ubtrfs,
        |base| {
            let ways = ["sync", "sync -f MNT", "mount -o remount,ro MNT"];
            for (i, sync) in ways.into_iter().enumerate() {
                let img = base.join(format!("s{i}.img"));
                mkfs_image(&img, "512M")?;
                let mnt = base.join(format!("mnt{i}"));
                let mut m = UbtrfsMount::start(&img, &mnt, "commit=300")?;
                let mut model = Model::new();
                for (n, len) in [(0u64, 0usize), (1, 3000), (2, 20 << 20), (3, 150 << 10)] {
                    let data = pseudo_bytes(n + 10 * i as u64, len);
                    std::fs::write(mnt.join(format!("f{n}")), &data).map_err(|e| e.to_string())?;
                    model.insert(format!("f{n}"), data);
                }
                std::fs::rename(mnt.join("f3"), mnt.join("g3")).map_err(|e| e.to_string())?;
                let v = model.remove("f3").unwrap();
                model.insert("g3".into(), v);
                sh(&sync.replace("MNT", &s(&mnt)))?;
                if sync.contains("remount") {
                    match std::fs::write(mnt.join("x"), b"x") {
                        Err(e) if e.raw_os_error() == Some(libc::EROFS) => {}
                        other => return Err(format!("a write after `{sync}`: {other:?}")),
                    }
                }
                m.kill9()?;
                check(&img, &format!("after `{sync}` and kill -9"))?;
                let r = kernel_ro(&img, &base.join("k"));
                verify(&r.dir, &model, &format!("after `{sync}` and kill -9"))?;
            }
            Ok(String::new())
        },
    );
}

// ------------------------------------------------------------------ (f)

/// Opens /dev/fuse to every user for the test and restores its mode.
struct FuseOpen(u32);

impl FuseOpen {
    fn new() -> Result<FuseOpen, String> {
        let p = Path::new("/dev/fuse");
        let mode = std::fs::metadata(p)
            .map_err(|e| e.to_string())?
            .permissions()
            .mode();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| e.to_string())?;
        Ok(FuseOpen(mode))
    }
}

impl Drop for FuseOpen {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(self.0));
    }
}

/// `cmd` (a shell line) as the user `tests`.
fn as_user(uid: u32, cmd: &str) -> Result<Output, String> {
    run(Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            "--",
            "env",
            "HOME=/",
            "XDG_RUNTIME_DIR=",
            "sh",
            "-c",
        ])
        .arg(cmd))
}

#[test]
fn user_remount_waits_for_the_last_commit() {
    let test = fn_name!();
    skip_unless!(user_available, "tests");
    one_case(test, Writer::Ubtrfs, |base| {
        let uid: u32 = String::from_utf8_lossy(&sh("id -u tests")?.stdout)
            .trim()
            .parse()
            .map_err(|_| "id -u tests")?;
        let _open = FuseOpen::new()?;
        let dir = base.join("user");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        // The binary where the user can run it.
        let bin = dir.join("ubtrfs");
        std::fs::copy(ubtrfs_bin(), &bin).map_err(|e| e.to_string())?;
        let img = dir.join("u.img");
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
        sh(&format!("chown -R {uid}:{uid} {}", s(&dir)))?;
        let (b, i, m) = (s(&bin), s(&img), s(&mnt));
        // The user's mkfs makes the image file (-b) and gives the user
        // the top directory, and says so.
        let made = as_user(uid, &format!("{b} mkfs -b 512M {i}"))?;
        let said = String::from_utf8_lossy(&made.stdout);
        if !said.contains(&format!("owned by {uid}:{uid} (the user running mkfs")) {
            return Err(format!("mkfs as the user said:\n{said}"));
        }
        let mount = format!("{b} mount -o rw {i} {m}");
        as_user(uid, &mount)?;
        if mount_source(&mnt).is_none() {
            return Err("the user's mount is not in mountinfo".into());
        }
        // Enough dirty data that the last commit takes a while.
        as_user(
            uid,
            &format!(
                "dd if=/dev/urandom of={m}/big bs=1M count=96 status=none && echo small > {m}/s"
            ),
        )?;
        // The user's mount is private: root reads it through the user.
        let sum = as_user(uid, &format!("sha256sum < {m}/big"))?;
        let want = String::from_utf8_lossy(&sum.stdout)
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string();
        let t = Instant::now();
        let remount = as_user(
            uid,
            &format!("fusermount3 -u {m} && {mount} && sha256sum {m}/big && cat {m}/s"),
        )?;
        let took = t.elapsed();
        let out = String::from_utf8_lossy(&remount.stdout);
        if !out.contains(&want) || !out.contains("small") {
            return Err(format!(
                "the new mount does not show what was written: {out}"
            ));
        }
        as_user(uid, &format!("{b} umount {m}"))?;
        check(&img, "after the user's umount")?;
        let r = kernel_ro(&img, &base.join("k"));
        if sha256_file(&r.path("big")) != want {
            return Err("the kernel reads big other than written".into());
        }
        let top = std::fs::metadata(r.path("")).map_err(|e| e.to_string())?;
        if (top.uid(), top.gid()) != (uid, uid) {
            return Err(format!(
                "the kernel shows the top directory owned by {}:{}",
                top.uid(),
                top.gid()
            ));
        }
        Ok(format!(
            "remount at once took {took:.1?}; {}",
            String::from_utf8_lossy(&remount.stderr).trim()
        ))
    });
}

// ------------------------------------------------------------------ (g)

/// The kernel's mount of `dev` on `dir` in a mount namespace of its own,
/// for `secs` seconds or until the file `stop` appears in `base`: nothing
/// in this process's mount table or any process's open files shows it.
/// Returns once it is mounted.
fn hidden_mount(
    base: &Path,
    dev: &str,
    dir: &Path,
    secs: u32,
) -> Result<std::process::Child, String> {
    let ready = base.join("mounted");
    let stop = base.join("stop");
    let _ = std::fs::remove_file(&ready);
    let _ = std::fs::remove_file(&stop);
    let child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount {dev} {0} && touch {1} && i=0 && \
             while [ ! -e {2} ] && [ $i -lt {3} ]; do sleep 0.1; i=$((i + 1)); done; \
             umount {0}",
            s(dir),
            s(&ready),
            s(&stop),
            secs * 10
        ))
        .spawn()
        .map_err(|e| format!("unshare: {e}"))?;
    let t = Instant::now();
    while !ready.exists() {
        if t.elapsed() > Duration::from_secs(20) {
            return Err(format!("the hidden mount of {dev} did not come up"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child)
}

#[test]
fn a_claim_the_kernel_lets_go_is_waited_for() {
    one_case(
        "a_claim_the_kernel_lets_go_is_waited_for",
        Writer::Kernel,
        |base| {
            let img = base.join("k.img");
            sh(&format!(
                "truncate -s 256M {0} && mkfs.btrfs -q {0}",
                s(&img)
            ))?;
            let lo = LoopDev::attach(&img, false);
            let dir = base.join("hidden");
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            // Let go after a second: mkfs of the device waits, then writes.
            let mut child = hidden_mount(base, &lo.dev, &dir, 1)?;
            let o = ubtrfs(&["mkfs", "-q", "-f", &lo.dev]);
            let _ = child.wait();
            if !o.status.success() {
                return Err(format!(
                    "mkfs while the kernel let go of the device: {}",
                    out_text(&o)
                ));
            }
            check(&img, "after mkfs")?;
            // Kept: refused once the wait is over.
            let mut child = hidden_mount(base, &lo.dev, &dir, 30)?;
            let res = refused(
                &["mkfs", "-q", "-f", &lo.dev],
                &["claimed by another process or the kernel".into()],
            );
            std::fs::write(base.join("stop"), b"").map_err(|e| e.to_string())?;
            let _ = child.wait();
            res?;
            Ok(String::new())
        },
    );
}
