//! Data paths beside each other: (j) pushed read-ahead against writers, (h)
//! O_DIRECT writers, (k) a SIGKILL while a push waits for a read; fstrim;
//! FUSE over io_uring for root's mount.

use super::*;

// ------------------------------------------------------------------ (j)

/// A fresh 512 MiB image in `base`/WRITER, mounted read-write by `w` on
/// its `mnt`: (the directory, the image, the mount point, the mount).
pub(super) fn fresh_512m(
    w: Writer,
    base: &Path,
) -> Result<(PathBuf, PathBuf, PathBuf, RwMount), String> {
    let dir = base.join(w.name());
    let (image, mnt) = fresh_image(&dir, "512M")?;
    let m = RwMount::start(w, &image, &mnt, "")?;
    Ok((dir, image, mnt, m))
}

pub(super) fn push_race_case(w: Writer, base: &Path) -> Result<String, String> {
    let (dir, image, mnt, m) = fresh_512m(w, base)?;
    let log = match &m {
        RwMount::Ubtrfs(u) => Some(u.log.clone()),
        RwMount::Kernel(_) => None,
    };
    let r = run(Command::new("python3")
        .arg(repo_root().join("tests/oracle/push_race.py"))
        .arg(mnt.join("f"))
        .args(["20", "2"]));
    let fin = m.finish();
    r.map_err(|e| format!("push_race.py through the {} mount: {e}", w.name()))?;
    fin.map_err(|e| format!("unmount: {e}"))?;
    let mut note = String::from("push_race.py passed");
    if let Some(log) = log {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // "read-ahead pushed: N windows (S after an lseek), M MiB; K
        // writers waited ..."
        let line = text
            .lines()
            .rev()
            .find_map(|l| {
                l.split_once("read-ahead pushed: ")
                    .map(|(_, r)| r.to_string())
            })
            .ok_or_else(|| format!("no push count in the mount's log: {}", tail(&text, 800)))?;
        let num = |after: &str| -> u64 {
            line.split_once(after)
                .map_or("", |(a, _)| a)
                .rsplit(|c: char| !c.is_ascii_digit())
                .find(|t| !t.is_empty())
                .and_then(|t| t.parse().ok())
                .unwrap_or(0)
        };
        let (pushed, waited) = (num(" windows"), num(" writers waited"));
        let after_seek = num(" after an lseek");
        if pushed == 0 || waited == 0 || after_seek == 0 {
            return Err(format!(
                "the race did not run ({pushed} pushes, {after_seek} after an lseek, {waited} writers waited): {line}"
            ));
        }
        note = format!("{note}; {line}");
    }
    check(
        &image,
        &format!("after push_race.py on the {} mount", w.name()),
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(note)
}

// ------------------------------------------------------------------ (h)

pub(super) fn direct_io_script() -> PathBuf {
    repo_root().join("tests/oracle/direct_io.py")
}

pub(super) fn direct_io_case(w: Writer, seed: u64, base: &Path) -> Result<String, String> {
    let dir = base.join(format!("{}-{seed}", w.name()));
    let (image, mnt) = fresh_image(&dir, "512M")?;
    let (procs, ops) = ("4", "400");
    let m = RwMount::start(w, &image, &mnt, "")?;
    let log = match &m {
        RwMount::Ubtrfs(u) => Some(u.log.clone()),
        RwMount::Kernel(_) => None,
    };
    let seed_s = seed.to_string();
    let r = run(Command::new("python3")
        .arg(direct_io_script())
        .arg(&mnt)
        .args([seed_s.as_str(), procs, ops]));
    if let Err(e) = r {
        let _ = m.finish();
        return Err(format!("direct_io.py through the {} mount: {e}", w.name()));
    }
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    let mut note = String::from("direct_io.py passed");
    if let Some(log) = log {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // "N direct writes in place, at most M at once"
        let (n, most): (u64, String) = text
            .lines()
            .rev()
            .find_map(|l| {
                l.split("; ").find_map(|p| {
                    let (n, rest) = p.split_once(" direct writes in place")?;
                    let most = rest.strip_prefix(", at most ")?.split(' ').next()?;
                    Some((n.trim().parse().ok()?, most.to_string()))
                })
            })
            .ok_or_else(|| {
                format!(
                    "no direct write count in the mount's log: {}",
                    tail(&text, 800)
                )
            })?;
        if n == 0 {
            return Err("no write was a direct write in place".into());
        }
        note = format!("{note}, {n} direct writes in place, at most {most} at once");
    }
    check(&image, &format!("after the {} mount", w.name()))?;
    let k = RwMount::start(Writer::Kernel, &image, &mnt, "")?;
    let v = run(Command::new("python3")
        .arg(direct_io_script())
        .arg("--verify")
        .arg(&mnt)
        .args([seed_s.as_str(), procs, ops]));
    let dd = run(Command::new("dd")
        .arg("if=/dev/urandom")
        .arg(format!("of={}", mnt.join("nocow").display()))
        .args([
            "bs=64K",
            "seek=7",
            "count=9",
            "oflag=direct",
            "conv=notrunc",
            "status=none",
        ]));
    k.finish().map_err(|e| format!("kernel unmount: {e}"))?;
    v.map_err(|e| format!("the kernel's view after the {} mount: {e}", w.name()))?;
    dd.map_err(|e| format!("kernel O_DIRECT write: {e}"))?;
    check(&image, "after the kernel wrote on top")?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(note)
}

// ------------------------------------------------------------------ (k)

/// The daemon's threads whose name starts with `prefix`: their states
/// (field 3 of /proc/PID/task/TID/stat).
pub(super) fn thread_states(pid: u32, prefix: &str) -> Vec<char> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            // "TID (COMM) S ...": COMM may hold spaces, not ')'.
            let (head, rest) = stat.rsplit_once(") ")?;
            let comm = head.split_once(" (")?.1;
            comm.starts_with(prefix)
                .then(|| rest.chars().next())
                .flatten()
        })
        .collect()
}

/// Reads `len` bytes at `off` of `path` with read-ahead off
/// (POSIX_FADV_RANDOM), so that the kernel asks the daemon for just that.
pub(super) fn read_random(path: &Path, off: u64, len: usize) -> std::io::Result<Vec<u8>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path)?;
    // SAFETY: an advice call on our own open descriptor.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    let mut buf = vec![0u8; len];
    let n = f.read_at(&mut buf, off)?;
    buf.truncate(n);
    Ok(buf)
}

pub(super) fn kill9_push_case(base: &Path) -> Result<String, String> {
    let dir = base.join("kill9-push");
    let (image, mnt) = fresh_image(&dir, "256M")?;
    let data = pseudo_block(11, 0);
    // Written through one mount and read through the next: no page of the
    // file is cached when the reads come.
    let m = UbtrfsMount::start(&image, &mnt, "")?;
    std::fs::write(mnt.join("f"), &data).map_err(|e| format!("write f: {e}"))?;
    m.unmount()?;
    let held = 128u64 << 10;
    // noatime: with atime due, the second open would move atime, taking
    // the filesystem's lock alone, and the reads are to race the push
    // alone.
    let mut m = UbtrfsMount::start_env(
        &image,
        &mnt,
        "noatime",
        &[("UBTRFS_TEST_READ_DELAY", &format!("{held}:60000"))],
    )?;
    let pid = m.pid().ok_or("no mount process")?;
    let f = mnt.join("f");
    let reader = {
        let f = f.clone();
        std::thread::spawn(move || read_random(&f, held, 4096))
    };
    // Waits up to 20 s for `done`; on a timeout kills the mount and says
    // what never happened.
    let wait = |m: &mut UbtrfsMount, done: &dyn Fn() -> bool, never: &str| {
        let t = Instant::now();
        while !done() {
            if t.elapsed() > Duration::from_secs(20) {
                let _ = m.kill9();
                return Err(format!("{never}; log: {}", m.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    };
    // The held READ is in the daemon once its answering thread exists.
    wait(
        &mut m,
        &|| !thread_states(pid, "ubtrfs-test-del").is_empty(),
        &format!("the READ at {held} never reached the daemon"),
    )?;
    let first = read_random(&f, 0, 4096).map_err(|e| format!("read at 0: {e}"))?;
    if first != data[..4096] {
        return Err("the read at 0 differs from what was written".into());
    }
    // The push of [4 KiB, 260 KiB) reaches the held page and waits.
    wait(
        &mut m,
        &|| thread_states(pid, "ubtrfs-store").contains(&'D'),
        "the push never waited in the kernel",
    )?;
    let t = Instant::now();
    m.kill9()?;
    let ended = t.elapsed();
    let got = reader.join().map_err(|_| "the held reader panicked")?;
    let outcome = match got {
        Ok(b) if b == data[held as usize..held as usize + 4096] => "read the page's bytes",
        Ok(_) => return Err("the held read returned other bytes than written".into()),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => "failed ENOTCONN",
        Err(e) => return Err(format!("the held read failed: {e}")),
    };
    check(&image, "after SIGKILL with a push waiting")?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!(
        "the process ended {ended:?} after SIGKILL; the held read {outcome}"
    ))
}

/// Bytes the file at `p` has allocated (st_blocks).
pub(super) fn allocated(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).map_or(0, |m| m.blocks() * 512)
}

/// fstrim through the mount gives the image file's free space back (a
/// sparse image shrinks) and nothing else: the tree reads back the same
/// through the mount, `btrfs check` passes, and the kernel's mount shows
/// the same tree.
pub(super) fn fstrim_case(base: &Path) -> Result<String, String> {
    let image = base.join("fs.img");
    mkfs_image(&image, "1G")?;
    let mnt = base.join("mnt");
    let m = UbtrfsMount::start(&image, &mnt, "")?;
    run(Command::new("cp")
        .arg("-a")
        .arg("/usr/include/linux")
        .arg(mnt.join("tree")))?;
    let big = vec![0x5au8; 64 << 20];
    for i in 0..4 {
        std::fs::write(mnt.join(format!("big{i}")), &big).map_err(|e| format!("big{i}: {e}"))?;
    }
    run(Command::new("btrfs").args(["filesystem", "sync"]).arg(&mnt))?;
    for i in 0..4 {
        std::fs::remove_file(mnt.join(format!("big{i}"))).map_err(|e| format!("rm big{i}: {e}"))?;
    }
    // The space the files had is pinned until a commit.
    run(Command::new("btrfs").args(["filesystem", "sync"]).arg(&mnt))?;
    let before = allocated(&image);
    let live = manifest_of(&mnt);
    let out = run(Command::new("fstrim").arg("-v").arg(&mnt))?;
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let after = allocated(&image);
    if manifest_of(&mnt) != live {
        return Err("the tree reads back otherwise after fstrim".into());
    }
    m.unmount()?;
    check(&image, "after fstrim")?;
    let k = kernel_ro(&image, &mnt);
    let seen = manifest_of(&mnt);
    drop(k);
    // The top directory is inode 1 through FUSE, 256 on the kernel's.
    let top = |l: &String| !l.contains("\"path\":\"/\"");
    let (live, seen): (Vec<String>, Vec<String>) = (
        live.into_iter().filter(top).collect(),
        seen.into_iter().filter(top).collect(),
    );
    if let Some((a, b)) = live.iter().zip(&seen).find(|(a, b)| a != b) {
        return Err(format!(
            "the kernel's mount shows another tree after fstrim: {b}, the mount showed {a}"
        ));
    }
    if seen.len() != live.len() {
        return Err(format!(
            "the kernel's mount shows {} paths after fstrim, the mount {}",
            seen.len(),
            live.len()
        ));
    }
    if after + (200 << 20) > before {
        return Err(format!(
            "the image kept {after} of {before} allocated bytes after fstrim ({})",
            out.trim()
        ));
    }
    Ok(format!(
        "{}; the image's allocated bytes went from {} MiB to {} MiB",
        out.trim(),
        before >> 20,
        after >> 20
    ))
}

/// Puts a kernel module parameter back as it was when dropped.
struct ParamBack {
    path: &'static str,
    was: String,
}

impl Drop for ParamBack {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path, self.was.trim());
    }
}

/// The kernel offers FUSE over io_uring only while fuse's `enable_uring`
/// is Y, N by default: a mount by root that may use io_uring sets it
/// before it mounts, and then serves over io_uring.
pub(super) fn root_mount_io_uring_case(base: &Path) -> Result<String, String> {
    const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";
    let was = std::fs::read_to_string(PARAM)
        .map_err(|e| format!("{PARAM}: {e} (FUSE over io_uring needs Linux 6.14+)"))?;
    let _back = ParamBack { path: PARAM, was };
    std::fs::write(PARAM, "N").map_err(|e| format!("{PARAM}: {e}"))?;
    let image = base.join("fs.img");
    mkfs_image(&image, "256M")?;
    let mnt = base.join("mnt");
    let m = UbtrfsMount::start(&image, &mnt, "uring")?;
    let log = m.log_tail();
    let now = std::fs::read_to_string(PARAM).map_err(|e| format!("{PARAM}: {e}"))?;
    std::fs::write(mnt.join("f"), b"over io_uring").map_err(|e| format!("write f: {e}"))?;
    m.unmount()?;
    if now.trim() != "Y" {
        return Err(format!(
            "{PARAM} is {} after the mount; log: {log}",
            now.trim()
        ));
    }
    if !log.contains("FUSE transport: io_uring") {
        return Err(format!("the mount did not serve io_uring; log: {log}"));
    }
    check(&image, "after the io_uring mount")?;
    Ok(String::new())
}
