//! Support for the read-write mount's tests (tests/tests/rw_mount/):
//!
//! * [`UbtrfsMount`]: `ubtrfs mount -f -o rw[,extra] IMAGE MNT` as a child
//!   process; [`UbtrfsMount::unmount`] waits for it to exit 0 (it commits
//!   before exiting), [`UbtrfsMount::kill9`] is the crash; unmounted
//!   lazily and killed on drop;
//! * [`RwMount`]: the kernel's read-write loop mount (the reference) or
//!   ours (the subject), behind one interface, so that every scenario runs
//!   the same code against both;
//! * [`RwOps`]: tests/oracle/rw_ops.py (a seeded workload checked against
//!   its model; `--verify-only` checks a tree against the replayed model);
//! * [`compare_rw_manifests`]: two trees made by the same rw_ops run,
//!   without inode numbers and clock-set times.

use serde_json::Value;
use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::manifest::records;
use crate::mounts::{is_mounted, Mount};
use crate::paths::repo_root;
use crate::run::{run, run_limited, spawn_limited, tail, ubtrfs_bin, Limited, Limits, Run};

/// `btrfs check --readonly` of `image`; Err says when, with the report's
/// tail.
pub fn check(image: &Path, when: &str) -> Result<(), String> {
    crate::check::btrfs_check(image, &[])
        .map_err(|e| format!("btrfs check {when}: {}", tail(&e, 3000)))
}

/// The kernel's read-only loop mount of `image` on `dir`.
pub fn kernel_ro(image: &Path, dir: &Path) -> Mount {
    Mount::images_at(&[image.to_path_buf()], "", true, dir)
}

/// The kernel's read-write loop mount of `image` on `dir`.
pub fn kernel_rw(image: &Path, dir: &Path) -> Mount {
    Mount::images_at(std::slice::from_ref(&image.to_path_buf()), "", false, dir)
}

/// Whether `w`'s mount can run here (root, the kernel's btrfs; FUSE for
/// ubtrfs's); under UBTRFS_REQUIRE_KERNEL=1 a missing one panics.
pub fn ready(test: &str, w: Writer) -> bool {
    match w {
        Writer::Kernel => crate::require::kernel_available(test),
        Writer::Ubtrfs => crate::require::fuse_available(test),
    }
}

/// One case in a fresh temporary directory: skipped (or failed under
/// UBTRFS_REQUIRE_KERNEL) when `w`'s mount cannot run; its note printed.
pub fn one_case(test: &str, w: Writer, case: impl FnOnce(&Path) -> Result<String, String>) {
    if !ready(test, w) {
        return;
    }
    let base = crate::paths::tempdir(&format!("ubtrfs-{test}"));
    let note = case(&base).unwrap_or_else(|e| panic!("{test}: {e}"));
    if !note.is_empty() {
        eprintln!("{test}: {note}");
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// A fresh image of `size` bytes made by `ubtrfs mkfs -q -f -b SIZE`.
pub fn mkfs_image(image: &Path, size: &str) -> Result<(), String> {
    let _ = std::fs::remove_file(image);
    run(Command::new(ubtrfs_bin())
        .args(["mkfs", "-q", "-f", "-b", size])
        .arg(image))
    .map(|_| ())
}

/// The line of /proc/self/mountinfo for the mount on `dir` (the last
/// one: the one seen), read without a request to the mount.
fn mountinfo_line(dir: &Path) -> Option<String> {
    let want = dir.display().to_string();
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some(want.as_str()))
        .map(str::to_string)
}

/// The line of /proc/self/mountinfo for mount point `dir`: (per-mount
/// options, file system type, super block options).
pub fn mount_entry(dir: &Path) -> Option<(String, String, String)> {
    mountinfo_line(dir).and_then(|l| {
        let (head, rest) = l.split_once(" - ")?;
        let opts = head.split(' ').nth(5)?.to_string();
        let mut r = rest.split(' ');
        let fstype = r.next()?.to_string();
        let _source = r.next();
        Some((opts, fstype, r.next().unwrap_or("").to_string()))
    })
}

/// The source mountinfo shows for the mount on `dir` (for root's
/// read-write ubtrfs mount, its fuseblk device).
pub fn mount_source(dir: &Path) -> Option<String> {
    let l = mountinfo_line(dir)?;
    let (_, rest) = l.split_once(" - ")?;
    rest.split(' ').nth(1).map(str::to_string)
}

/// `ubtrfs mount -f -o rw[,extra] IMAGE MNT`, a child of this process.
pub struct UbtrfsMount {
    pub dir: PathBuf,
    pub image: PathBuf,
    /// The mount's stderr (its log lines).
    pub log: PathBuf,
    child: Option<Child>,
    /// The FUSE connection's number, read once mounted (for an abort by
    /// hand: see [`UbtrfsMount::kill9`]).
    conn: Option<u64>,
}

impl UbtrfsMount {
    /// Starts the mount and waits (30 s at most) until `dir` is a FUSE
    /// mount; Err (with the log's tail) when the process ends first, or
    /// when the mount is not read-write.
    pub fn start(image: &Path, dir: &Path, extra: &str) -> Result<UbtrfsMount, String> {
        UbtrfsMount::start_env(image, dir, extra, &[])
    }

    /// [`UbtrfsMount::start`] with `envs` added to the daemon's
    /// environment (`UBTRFS_TRACE_FSYNC=1`: a log line per fsync). The
    /// transport UBTRFS_FUSE_TRANSPORT names is added to the options
    /// unless `extra` names one (`uring`, `nouring`).
    pub fn start_env(
        image: &Path,
        dir: &Path,
        extra: &str,
        envs: &[(&str, &str)],
    ) -> Result<UbtrfsMount, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let log = dir.with_extension("mount.log");
        let mut opts = if extra.is_empty() {
            "rw".to_string()
        } else {
            format!("rw,{extra}")
        };
        let names_transport = extra.split(',').any(|o| o == "uring" || o == "nouring");
        if let Some(t) = crate::run::transport_option().filter(|_| !names_transport) {
            opts = format!("{opts},{t}");
        }
        let child = Command::new(ubtrfs_bin())
            .args(["mount", "-f", "-o", &opts])
            .arg(image)
            .arg(dir)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(File::create(&log).map_err(|e| e.to_string())?)
            .stderr(File::create(&log).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("spawn ubtrfs mount: {e}"))?;
        let mut m = UbtrfsMount {
            dir: dir.to_path_buf(),
            image: image.to_path_buf(),
            log,
            child: Some(child),
            conn: None,
        };
        let what = format!("ubtrfs mount -f -o {opts} {}", image.display());
        let t = Instant::now();
        loop {
            if let Some((mopts, fstype, _)) = mount_entry(dir) {
                if !fstype.starts_with("fuse") {
                    return Err(format!("{what}: {} is a {fstype} mount", dir.display()));
                }
                if mopts.split(',').next() != Some("rw") {
                    let err = format!(
                        "{what}: the mount is read-only ({mopts}); log: {}",
                        m.log_tail()
                    );
                    let _ = m.kill9();
                    return Err(err);
                }
                m.conn = fuse_connection(dir);
                return Ok(m);
            }
            if let Some(s) = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                m.child = None;
                return Err(format!(
                    "{what}: exited ({s}) before mounting; log: {}",
                    m.log_tail()
                ));
            }
            if t.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "{what}: not mounted after 30 s; log: {}",
                    m.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The last lines of the mount's log.
    pub fn log_tail(&self) -> String {
        tail(
            &std::fs::read_to_string(&self.log).unwrap_or_default(),
            1500,
        )
    }

    /// umount, then wait (`timeout`) for the process to exit: Ok when it
    /// exits 0 (everything committed), Err with its status and log
    /// otherwise (a busy mount is unmounted lazily, the process killed).
    pub fn unmount_within(mut self, timeout: Duration) -> Result<(), String> {
        let r = crate::mounts::unmount_cmd(Command::new("umount").arg(&self.dir));
        if let Err(e) = r {
            let log = self.log_tail();
            let _ = self.kill9();
            return Err(format!("umount {}: {e}; log: {log}", self.dir.display()));
        }
        self.exit_within(timeout)
    }

    /// After an unmount: waits (`timeout`) for the process to exit; Ok
    /// when it exits 0, Err with its status and log otherwise (killed
    /// when it has not ended).
    pub fn exit_within(mut self, timeout: Duration) -> Result<(), String> {
        let mut child = self.child.take().expect("a running mount");
        let Some(status) = wait_within(&mut child, timeout) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "ubtrfs mount did not exit within {timeout:?} of umount; log: {}",
                self.log_tail()
            ));
        };
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "ubtrfs mount exited with {status} after umount; log: {}",
                self.log_tail()
            ))
        }
    }

    /// After an unmount that should have waited for the process: its
    /// exit status if it has ended (reaped now), Err when it still runs.
    pub fn ended(mut self) -> Result<ExitStatus, String> {
        let log = self.log_tail();
        let child = self.child.as_mut().expect("a running mount");
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(s) => {
                self.child = None;
                Ok(s)
            }
            None => {
                // For the report: how much longer it ran.
                let t = Instant::now();
                let pid = child.id();
                let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
                    .map(|d| {
                        d.flatten()
                            .map(|e| {
                                std::fs::read_to_string(e.path().join("stat")).unwrap_or_default()
                            })
                            .collect::<Vec<_>>()
                            .join(" | ")
                    })
                    .unwrap_or_default();
                let status = wait_within(child, Duration::from_secs(60));
                Err(format!(
                    "the mount's process {pid} still ran (threads: {tasks}); it ended {:?} later ({status:?}); log then: {log}",
                    t.elapsed(),
                ))
            }
        }
    }

    /// [`UbtrfsMount::unmount_within`] five minutes.
    pub fn unmount(self) -> Result<(), String> {
        self.unmount_within(Duration::from_secs(300))
    }

    /// The crash: SIGKILL to the mount's process, then `umount -l`.
    ///
    /// A process with a thread stuck in the kernel (a read-ahead push
    /// waiting for a page a READ holds: see crates/fuse/src/watchdog.rs)
    /// does not end while its /dev/fuse descriptor keeps the connection
    /// up. The mount's watchdog aborts the connection then; if the process
    /// has still not ended after 30 s, this aborts it by hand (so that a
    /// test fails instead of hanging) and says so: Err.
    pub fn kill9(&mut self) -> Result<(), String> {
        let mut res = Ok(());
        if let Some(mut c) = self.child.take() {
            let conn = self.conn.or_else(|| fuse_connection(&self.dir));
            let _ = c.kill();
            if wait_within(&mut c, Duration::from_secs(30)).is_none() {
                let aborted = match conn {
                    Some(n) => abort_fuse_connection(n),
                    None => Err("no FUSE connection found for the mount".into()),
                };
                let ended = wait_within(&mut c, Duration::from_secs(30));
                res = Err(format!(
                    "the mount's process {} had not ended 30 s after SIGKILL \
                     (connection {conn:?} aborted by hand: {aborted:?}; ended then: {})",
                    c.id(),
                    ended.is_some()
                ));
            }
        }
        if is_mounted(&self.dir) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).output();
        }
        res
    }
}

/// Waits at most `limit` for `c` to end; its status, or None.
fn wait_within(c: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let t = Instant::now();
    loop {
        if let Ok(Some(s)) = c.try_wait() {
            return Some(s);
        }
        if t.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The FUSE connection number of the mount on `dir` (its device number
/// in mountinfo, which fusectl names it by; major 0): read without a
/// request to the mount, which may not answer.
pub fn fuse_connection(dir: &Path) -> Option<u64> {
    let line = mountinfo_line(dir)?;
    let (major, minor) = line.split(' ').nth(2)?.split_once(':')?;
    let (major, minor): (u64, u64) = (major.parse().ok()?, minor.parse().ok()?);
    Some((major << 20) | minor)
}

/// Writes to fusectl's abort file of connection `n` (mounting fusectl on
/// /sys/fs/fuse/connections first when it is not): what closing the
/// daemon's /dev/fuse descriptor would have done.
pub fn abort_fuse_connection(n: u64) -> Result<(), String> {
    let ctl = Path::new("/sys/fs/fuse/connections");
    // mount(2), not mount(8): libmount looks at the mounts, and a look at
    // the stuck one never returns.
    // SAFETY: NUL-terminated constant strings.
    let mounted = !ctl.join(n.to_string()).exists()
        && unsafe {
            libc::mount(
                c"fusectl".as_ptr(),
                c"/sys/fs/fuse/connections".as_ptr(),
                c"fusectl".as_ptr(),
                0,
                std::ptr::null(),
            )
        } == 0;
    let p = ctl.join(n.to_string()).join("abort");
    let res = std::fs::write(&p, "1").map_err(|e| format!("{}: {e}", p.display()));
    if mounted {
        // SAFETY: as above.
        unsafe { libc::umount2(c"/sys/fs/fuse/connections".as_ptr(), libc::MNT_DETACH) };
    }
    res
}

impl Drop for UbtrfsMount {
    fn drop(&mut self) {
        if self.child.is_some() || is_mounted(&self.dir) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).output();
            let _ = self.kill9();
        }
    }
}

/// The count N of "N `what`" in the last line of the daemon's log `text`
/// that has it (its unmount line: "...; N direct writes in place, ...;
/// N writebacks written outside the lock (M MiB)").
pub fn daemon_count(text: &str, what: &str) -> Option<u64> {
    text.lines().rev().find_map(|l| {
        l.split("; ").find_map(|p| {
            let (n, _) = p.split_once(what)?;
            n.trim().parse().ok()
        })
    })
}

/// Who writes: the kernel (the reference) or ubtrfs's mount (the subject).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    Kernel,
    Ubtrfs,
}

impl Writer {
    pub fn name(self) -> &'static str {
        match self {
            Writer::Kernel => "kernel",
            Writer::Ubtrfs => "ubtrfs",
        }
    }
}

/// A read-write mount of an image by the kernel (loop device) or by
/// ubtrfs.
pub enum RwMount {
    Kernel(Mount),
    Ubtrfs(UbtrfsMount),
}

impl RwMount {
    /// Mounts `image` read-write on `dir`. `extra`: further options (for
    /// ubtrfs, after "rw,"; for the kernel, its btrfs options).
    pub fn start(w: Writer, image: &Path, dir: &Path, extra: &str) -> Result<RwMount, String> {
        RwMount::start_env(w, image, dir, extra, &[])
    }

    /// [`RwMount::start`] with `envs` in ubtrfs's daemon's environment
    /// (the kernel's mount has none).
    pub fn start_env(
        w: Writer,
        image: &Path,
        dir: &Path,
        extra: &str,
        envs: &[(&str, &str)],
    ) -> Result<RwMount, String> {
        match w {
            Writer::Kernel => {
                std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
                let img = [image.to_path_buf()];
                std::panic::catch_unwind(|| Mount::images_at(&img, extra, false, dir))
                    .map(RwMount::Kernel)
                    .map_err(|_| format!("kernel mount of {} failed", image.display()))
            }
            Writer::Ubtrfs => UbtrfsMount::start_env(image, dir, extra, envs).map(RwMount::Ubtrfs),
        }
    }

    pub fn dir(&self) -> &Path {
        match self {
            RwMount::Kernel(m) => &m.dir,
            RwMount::Ubtrfs(m) => &m.dir,
        }
    }

    /// Unmounts: everything written must then be on the image.
    pub fn finish(self) -> Result<(), String> {
        match self {
            RwMount::Kernel(m) => m.try_unmount(),
            RwMount::Ubtrfs(m) => m.unmount(),
        }
    }

    /// The mount back when the run `r` on it passed; else unmounted
    /// (however that goes), and `what` with the run's failures.
    pub fn check_run(self, r: &RwOpsResult, what: &str) -> Result<RwMount, String> {
        if r.ok() {
            return Ok(self);
        }
        let _ = self.finish();
        Err(format!("{what}: {}", r.describe()))
    }
}

/// The kernel's writes on top of a tree `top` that rw_ops left, on its
/// read-write mount `k` at `mnt`: `cp -a` of top/p0 to mnt/kernel-copy,
/// `rm -rf` of top/p1 and a new file mnt/kernel-new; then unmounts.
pub fn kernel_writes_on_top(k: RwMount, top: &Path, mnt: &Path) -> Result<(), String> {
    let cp = run(Command::new("cp")
        .arg("-a")
        .arg(top.join("p0"))
        .arg(mnt.join("kernel-copy")));
    let rm = run(Command::new("rm").arg("-rf").arg(top.join("p1")));
    let new = std::fs::write(mnt.join("kernel-new"), vec![7u8; 300_000]);
    k.finish().map_err(|e| format!("kernel unmount: {e}"))?;
    cp.map_err(|e| format!("kernel cp -a: {e}"))?;
    rm.map_err(|e| format!("kernel rm -rf: {e}"))?;
    new.map_err(|e| format!("kernel write: {e}"))?;
    Ok(())
}

/// tests/oracle/rw_ops.py: `--procs` workers of `--ops` operations each.
#[derive(Debug, Clone)]
pub struct RwOps {
    pub seed: u64,
    pub ops: u64,
    pub procs: u32,
    /// Killed after this long (a hang of the file system under test).
    pub timeout: Duration,
    /// --log FILE (one line per operation).
    pub log: Option<PathBuf>,
}

/// How an rw_ops.py run ended, with its JSON summary.
#[derive(Debug)]
pub struct RwOpsResult {
    pub run: Run,
    /// The JSON summary (Null when it printed none: killed, crashed).
    pub summary: Value,
}

/// The `errors` (strings) of a script's JSON summary (rw_ops.py,
/// log_crash_ops.py).
pub fn errors_of(summary: &Value) -> Vec<String> {
    summary["errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

impl RwOpsResult {
    /// Exit 0 and a summary saying ok.
    pub fn ok(&self) -> bool {
        self.run.code == Some(0) && self.summary["ok"] == true
    }

    /// The failures it reported (or how it ended, when it reported none).
    pub fn describe(&self) -> String {
        let errs = errors_of(&self.summary);
        format!(
            "rw_ops exit {:?} signal {:?} timed out {} after {:.1?}; errors: {}; stderr: {}",
            self.run.code,
            self.run.signal,
            self.run.timed_out,
            self.run.elapsed,
            if errs.is_empty() {
                "(none)".into()
            } else {
                errs.join(" | ")
            },
            tail(&self.run.stderr, 1500)
        )
    }

    /// The paths (from rw_ops's DIR, percent-encoded) whose mtime the
    /// model knows.
    pub fn explicit_mtimes(&self) -> Vec<String> {
        self.summary["explicit_mtime"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| p.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// One line: elapsed, operations, reads checked, bytes written.
    pub fn brief(&self) -> String {
        format!(
            "{:.1?}, {} reads checked, {} expected errors, {} bytes written, dir nlink {}",
            self.run.elapsed,
            self.summary["reads_checked"],
            self.summary["expected_errors"],
            self.summary["bytes_written"],
            self.summary["dir_nlink"]
        )
    }
}

impl RwOps {
    pub fn new(seed: u64, ops: u64, procs: u32) -> RwOps {
        RwOps {
            seed,
            ops,
            procs,
            timeout: Duration::from_secs(900),
            log: None,
        }
    }

    fn command(&self, dir: &Path) -> Command {
        let mut c = Command::new("python3");
        c.arg(repo_root().join("tests/oracle/rw_ops.py"))
            .arg(dir)
            .args(["--seed", &self.seed.to_string()])
            .args(["--ops", &self.ops.to_string()])
            .args(["--procs", &self.procs.to_string()]);
        // Its own process group: a kill reaches every worker.
        c.process_group(0);
        c
    }

    fn limits(&self) -> Limits {
        Limits::timeout_only(self.timeout)
    }

    fn result(run: Run) -> RwOpsResult {
        let summary = serde_json::from_slice(&run.stdout).unwrap_or(Value::Null);
        RwOpsResult { run, summary }
    }

    /// Runs the workload in `dir` (an empty directory) to its end.
    pub fn run(&self, dir: &Path, tmp: &Path) -> RwOpsResult {
        let mut c = self.command(dir);
        if let Some(l) = &self.log {
            c.arg("--log").arg(l);
        }
        RwOps::result(run_limited(c, tmp, self.limits()))
    }

    /// Starts the workload (to be killed: [`kill_group`]).
    pub fn spawn(&self, dir: &Path, tmp: &Path) -> Limited {
        spawn_limited(self.command(dir), tmp, self.limits())
    }

    /// `--verify-only` of `dir` against the model of `of` (a run of the
    /// same seed, ops and procs: its refused fallocate calls).
    pub fn verify(&self, dir: &Path, of: &RwOpsResult, tmp: &Path) -> RwOpsResult {
        let summary = tmp.join(format!("rw_ops-{}.json", self.seed));
        std::fs::write(&summary, serde_json::to_vec(&of.summary).unwrap()).unwrap();
        let mut c = self.command(dir);
        c.arg("--verify-only").arg("--summary").arg(&summary);
        RwOps::result(run_limited(c, tmp, self.limits()))
    }
}

/// SIGKILL to the process group led by `l` (a command started with
/// `process_group(0)`, as [`RwOps::spawn`] does), then its end.
pub fn kill_group(l: Limited) -> Run {
    let pid = l.child.id() as i32;
    // SAFETY: kill(2) on the group this process made for the child.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
    let r = l.wait();
    // The leader is reaped; its children (killed too) may still be
    // exiting, holding files of the mount open: wait for the group to go.
    let t = Instant::now();
    // SAFETY: signal 0 only asks whether the group still has a member.
    while unsafe { libc::kill(-pid, 0) } == 0 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    r
}

/// Compares the manifests of two trees made by the same rw_ops run,
/// without inode numbers, and without mtimes except on the paths the run
/// set explicitly (`explicit`, from rw_ops's DIR, found at `prefix` in the
/// manifests: "/t"). Ok(number of paths) or Err(the differences).
pub fn compare_rw_manifests(
    expected: &[String],
    actual: &[String],
    explicit: &[String],
    prefix: &str,
) -> Result<usize, String> {
    let prefix = prefix.trim_end_matches('/');
    let known: BTreeSet<String> = explicit.iter().map(|p| format!("{prefix}{p}")).collect();
    let mask = |lines: &[String]| -> Vec<String> {
        records(lines)
            .into_iter()
            .map(|(p, mut v)| {
                let o = v.as_object_mut().unwrap();
                o.remove("ino");
                if !known.contains(&p) {
                    o.remove("mtime_ns");
                }
                serde_json::to_string(&v).unwrap()
            })
            .collect()
    };
    crate::manifest::compare_manifests(&mask(expected), &mask(actual), &Default::default())
}
