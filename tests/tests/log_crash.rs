//! Crash consistency of fsync through ubtrfs's read-write mount, which
//! answers fsync with a log tree (crates/engine/src/tree_log/write.rs)
//! instead of a commit. Each kill point, on a fresh image:
//!
//! 1. `ubtrfs mkfs` (4K or 16K nodes, no-holes or `-O ^no-holes`: the
//!    seed picks), the starting tree of tests/oracle/log_crash_ops.py
//!    `setup` copied in through our mount and committed by its unmount;
//! 2. our mount again with `-o rw,commit=300` (fsync is what makes data
//!    durable; `UBTRFS_TRACE_FSYNC=1` makes the daemon log how each fsync
//!    was answered) and log_crash_ops.py `run`: workers writing, appending,
//!    truncating, punching, zeroing, preallocating, creating files in old
//!    and new (nested) directories, fsync and fdatasync, renames, links
//!    and unlinks of scratch files, journaling outside the mount what
//!    each fsync made durable;
//! 3. at a seeded moment the workload is stopped (SIGSTOP), the daemon
//!    SIGKILLed and lazily unmounted, the workload killed;
//! 4. the crashed image is read by ubtrfs without replaying it on disk:
//!    `ubtrfs extract` (the log replayed in memory) must satisfy the
//!    journal, and `ubtrfs inspect manifest` is kept for step 5;
//! 5. a copy mounted read-write by the kernel (which replays the log):
//!    the journal's rule holds (log_crash_ops.py `check`: each journaled
//!    file holds its last fsynced content or a state it passed through
//!    after that fsync), the manifest equals ubtrfs's in-memory replay,
//!    no log is left after unmounting, `btrfs check --readonly` is clean;
//!    the kernel writes on it and `btrfs check` stays clean;
//! 6. another copy replayed by `ubtrfs rescue replay-log`: no log left,
//!    `btrfs check` clean, the kernel's (read-only) view equals its own
//!    replay's manifest and satisfies the journal.
//!
//! `log_crash_fsync_through_ubtrfs_mount` runs UBTRFS_LOGCRASH_KILLS kill
//! points (default 6), seeds UBTRFS_LOGCRASH_SEED (default 1) onwards;
//! `log_crash_notreelog_reference` runs one with `-o notreelog` (every
//! fsync commits: the same rule must hold, and no log is ever written).
//! UBTRFS_LOGCRASH_PROCS workers (default 3), UBTRFS_LOGCRASH_MAX_DELAY_MS
//! (the kill comes 0.5 s to 0.5 s + this after the start, default 3000).
//! A failed kill point keeps its directory (images, journal, daemon log)
//! and names it. Needs root, the kernel's btrfs, loop devices, /dev/fuse
//! (fails, never skips, under UBTRFS_REQUIRE_KERNEL=1).

use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use ubtrfs_oracle::*;

fn kills() -> u64 {
    env_u64("UBTRFS_LOGCRASH_KILLS").unwrap_or(6)
}

fn first_seed() -> u64 {
    env_u64("UBTRFS_LOGCRASH_SEED").unwrap_or(1)
}

fn procs() -> u64 {
    env_u64("UBTRFS_LOGCRASH_PROCS").unwrap_or(3)
}

fn max_delay_ms() -> u64 {
    env_u64("UBTRFS_LOGCRASH_MAX_DELAY_MS").unwrap_or(3000)
}

fn ops_script() -> PathBuf {
    repo_root().join("tests/oracle/log_crash_ops.py")
}

/// The image's layout for a seed: every combination of 4K/16K nodes and
/// no-holes on/off within four seeds.
fn layout(seed: u64) -> (u32, bool) {
    match seed % 4 {
        0 => (16384, true),
        1 => (4096, false),
        2 => (4096, true),
        _ => (16384, false),
    }
}

/// What one kill point saw.
#[derive(Debug, Default)]
struct Outcome {
    /// A log tree was on disk at the kill (the superblock's log_root).
    log_on_disk: bool,
    delay: Duration,
    /// From the journal: fsync(2) and fdatasync(2) that returned.
    fsyncs: u64,
    fdatasyncs: u64,
    /// Journaled files whose content is pinned to one state, files
    /// modified since their last fsync (several states allowed), of which
    /// those found at a state after the fsync, and never-synced files
    /// that were missing (allowed).
    exact: u64,
    in_flight: u64,
    later_state: u64,
    absent: u64,
    /// From the daemon's trace: fsyncs answered by a log (synced by
    /// themselves, or grouped into another fsync's log sync), by a commit
    /// (by reason), with nothing to write.
    traced_log: u64,
    traced_grouped: u64,
    traced_commit: BTreeMap<String, u64>,
    traced_nothing: u64,
}

impl Outcome {
    fn commits(&self) -> u64 {
        self.traced_commit.values().sum()
    }

    fn line(&self) -> String {
        format!(
            "killed after {:.2?}, log on disk: {}; {} fsync + {} fdatasync journaled; \
             daemon: {} by log ({} grouped), {} by commit, {} with nothing to write; \
             files: {} exact, {} in flight ({} at a later state), {} absent",
            self.delay,
            if self.log_on_disk { "yes" } else { "no" },
            self.fsyncs,
            self.fdatasyncs,
            self.traced_log + self.traced_grouped,
            self.traced_grouped,
            self.commits(),
            self.traced_nothing,
            self.exact,
            self.in_flight,
            self.later_state,
            self.absent
        )
    }
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

/// log_crash_ops.py `check DIR`: Ok(summary) when every journaled file
/// follows the rule.
fn check_journal(dir: &Path, journal: &Path, shadow: &Path) -> Result<Value, String> {
    let o = Command::new("python3")
        .arg(ops_script())
        .arg("check")
        .arg(dir)
        .arg("--journal")
        .arg(journal)
        .arg("--shadow")
        .arg(shadow)
        .output()
        .map_err(|e| format!("log_crash_ops.py check: {e}"))?;
    let v: Value = serde_json::from_slice(&o.stdout).map_err(|_| {
        format!(
            "log_crash_ops.py check {} exited {}: {}",
            dir.display(),
            o.status,
            tail(&String::from_utf8_lossy(&o.stderr), 3000)
        )
    })?;
    if v["ok"] == true && o.status.success() {
        Ok(v)
    } else {
        let errs = errors_of(&v);
        Err(format!(
            "{} journaled files break the rule:\n    {}",
            v["error_count"],
            errs.join("\n    ")
        ))
    }
}

fn log_root(img: &Path) -> Result<u64, String> {
    let o = run(Command::new(ubtrfs_bin())
        .args(["inspect", "dump-super", "--json"])
        .arg(img))?;
    let v: Value = serde_json::from_slice(&o.stdout).map_err(|e| format!("dump-super: {e}"))?;
    v["log_root"]
        .as_u64()
        .ok_or_else(|| "dump-super: no log_root".to_string())
}

fn copy(img: &Path, to: &Path) -> Result<(), String> {
    sparse_copy(img, to)
}

/// The daemon's `trace:` lines (UBTRFS_TRACE_FSYNC=1) counted into `o`.
fn count_trace(log: &Path, o: &mut Outcome) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    for l in text.lines() {
        // "... trace: fsync[dir][ (datasync)] SUBVOL:INO: HOW in T ms"
        let Some((_, t)) = l.split_once("trace: fsync") else {
            continue;
        };
        let Some((_, rest)) = t.split_once(": ") else {
            continue;
        };
        if rest.starts_with("log in") {
            o.traced_log += 1;
        } else if rest.starts_with("grouped log") {
            o.traced_grouped += 1;
        } else if let Some(r) = rest.strip_prefix("commit (") {
            let why = r.split(") in").next().unwrap_or(r).to_string();
            *o.traced_commit.entry(why).or_default() += 1;
        } else if rest.starts_with("nothing to write") {
            o.traced_nothing += 1;
        }
    }
}

/// One kill point's files (see the module's doc).
struct Crash<'a> {
    dir: &'a Path,
    seed: u64,
    /// The workload's journal of acknowledged syncs, and its shadow
    /// copies of what they made durable.
    journal: PathBuf,
    shadow: PathBuf,
    img: PathBuf,
    mnt: PathBuf,
}

impl Crash<'_> {
    /// The workload script's arguments for seed and processes.
    fn seeded(&self, c: &mut Command, step: &str, path: &Path) {
        c.arg(ops_script())
            .arg(step)
            .arg(path)
            .args([
                "--seed",
                &self.seed.to_string(),
                "--procs",
                &procs().to_string(),
            ])
            .arg("--journal")
            .arg(&self.journal);
    }

    /// The starting tree, made by the workload script, copied in through
    /// our mount and committed by its unmount.
    fn setup(&self) -> Result<(), String> {
        let (nodesize, no_holes) = layout(self.seed);
        let src = self.dir.join("src");
        let mut c = Command::new("python3");
        self.seeded(&mut c, "setup", &src);
        run(&mut c).map_err(|e| format!("setup: {e}"))?;
        let mut mkfs = Command::new(ubtrfs_bin());
        mkfs.args(["mkfs", "-q", "-f", "-b", "1G", "-n", &nodesize.to_string()]);
        if !no_holes {
            mkfs.args(["-O", "^no-holes"]);
        }
        run(mkfs.arg(&self.img))?;
        let m = UbtrfsMount::start(&self.img, &self.mnt, "")?;
        let cp = run(Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", src.display()))
            .arg(&self.mnt));
        m.unmount()
            .map_err(|e| format!("unmounting after the setup: {e}"))?;
        cp.map_err(|e| format!("copying the setup in: {e}"))?;
        Ok(())
    }

    /// The workload on our mount, stopped and the daemon killed (-9)
    /// after a seeded delay; the daemon's fsync trace counted.
    fn kill_workload(&self, notreelog: bool, out: &mut Outcome) -> Result<(), String> {
        let opts = if notreelog {
            "commit=300,notreelog"
        } else {
            "commit=300"
        };
        let mut m =
            UbtrfsMount::start_env(&self.img, &self.mnt, opts, &[("UBTRFS_TRACE_FSYNC", "1")])?;
        let mut c = Command::new("python3");
        self.seeded(&mut c, "run", &self.mnt);
        c.arg("--shadow")
            .arg(&self.shadow)
            .arg("--log")
            .arg(self.dir.join("ops.log"));
        c.process_group(0);
        let mut work = spawn_limited(c, self.dir, Limits::timeout_only(Duration::from_secs(600)));
        let mut rng = Rng::new(self.seed ^ 0x10_9c4a);
        out.delay = Duration::from_millis(500 + rng.below(max_delay_ms() + 1));
        let t = Instant::now();
        let mut ended_early = false;
        while t.elapsed() < out.delay {
            if !work.running() {
                ended_early = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Stopped first: no journal line is written after the daemon dies.
        // SAFETY: kill(2) on the process group made for the workload.
        unsafe {
            libc::kill(-(work.child.id() as i32), libc::SIGSTOP);
        }
        let killed = m.kill9();
        let r = kill_group(work);
        killed?;
        count_trace(&m.log, out);
        if ended_early {
            return Err(format!(
                "the workload ended before the kill (exit {:?}): {}",
                r.code,
                tail(&r.stderr, 2000)
            ));
        }
        out.log_on_disk = log_root(&self.img)? != 0;
        if notreelog && (out.log_on_disk || out.traced_log + out.traced_grouped > 0) {
            return Err(format!(
                "-o notreelog wrote a log: log_root set {}, {} fsyncs answered by a log",
                out.log_on_disk,
                out.traced_log + out.traced_grouped
            ));
        }
        Ok(())
    }

    /// ubtrfs's readers of the crashed image replay the log in memory:
    /// extract must keep every acknowledged sync. Returns the image's
    /// manifest as `inspect manifest` shows it.
    fn ubtrfs_reads(&self, out: &mut Outcome) -> Result<Vec<String>, String> {
        let extracted = self.dir.join("extracted");
        run(Command::new(ubtrfs_bin())
            .arg("extract")
            .arg(&self.img)
            .arg("/")
            .arg(&extracted))
        .map_err(|e| format!("ubtrfs extract of the crashed image: {e}"))?;
        let v = check_journal(&extracted, &self.journal, &self.shadow)
            .map_err(|e| format!("ubtrfs extract of the crashed image: {e}"))?;
        out.fsyncs = u(&v, "fsyncs");
        out.fdatasyncs = u(&v, "fdatasyncs");
        let _ = std::fs::remove_dir_all(&extracted);
        let listed = run(Command::new(ubtrfs_bin())
            .args(["inspect", "manifest"])
            .arg(&self.img))
        .map_err(|e| format!("ubtrfs inspect manifest of the crashed image: {e}"))?;
        Ok(String::from_utf8_lossy(&listed.stdout)
            .lines()
            .map(String::from)
            .collect())
    }

    /// The kernel replays a copy, which must keep every acknowledged
    /// sync, pass check, and equal `in_memory`; then the kernel writes
    /// on top and check passes again. Returns the kernel's view.
    fn kernel_replays(
        &self,
        in_memory: &[String],
        out: &mut Outcome,
    ) -> Result<Vec<String>, String> {
        let (a, mnt) = (self.dir.join("kernel.img"), &self.mnt);
        copy(&self.img, &a)?;
        let k = RwMount::start(Writer::Kernel, &a, mnt, "")
            .map_err(|e| format!("the kernel cannot mount the crashed image: {e}"))?;
        let judged = check_journal(mnt, &self.journal, &self.shadow);
        let kernel_view = try_manifest_of(mnt);
        k.finish().map_err(|e| format!("kernel unmount: {e}"))?;
        let kernel_view = kernel_view.map_err(|e| format!("the kernel's replay: {e}"))?;
        let v = judged.map_err(|e| format!("the kernel's replay: {e}"))?;
        out.exact = u(&v, "exact");
        out.in_flight = u(&v, "in_flight");
        out.later_state = u(&v, "later_state");
        out.absent = u(&v, "absent");
        if log_root(&a)? != 0 {
            return Err("the kernel left a log after mounting read-write".into());
        }
        check(&a, "after the kernel's replay")?;
        compare_manifests(&kernel_view, in_memory, &Ignore::default()).map_err(|d| {
            format!(
                "ubtrfs's in-memory replay (inspect manifest) differs from the kernel's replay: {d}"
            )
        })?;
        let k = RwMount::start(Writer::Kernel, &a, mnt, "")
            .map_err(|e| format!("the kernel cannot mount its replayed image again: {e}"))?;
        kernel_writes_on_top(k, mnt, mnt)?;
        check(&a, "after the kernel wrote on its replay")?;
        let _ = std::fs::remove_file(&a);
        Ok(kernel_view)
    }

    /// ubtrfs replays another copy (`rescue replay-log`), which must pass
    /// check, keep every acknowledged sync, and show the kernel what its
    /// own replay showed.
    fn ubtrfs_replays(&self, kernel_view: &[String]) -> Result<(), String> {
        let (b, mnt) = (self.dir.join("replayed.img"), &self.mnt);
        copy(&self.img, &b)?;
        run(Command::new(ubtrfs_bin())
            .args(["rescue", "replay-log"])
            .arg(&b))
        .map_err(|e| format!("ubtrfs rescue replay-log: {e}"))?;
        if log_root(&b)? != 0 {
            return Err("log_root still set after ubtrfs rescue replay-log".into());
        }
        check(&b, "after ubtrfs rescue replay-log")?;
        let k = Mount::images_at(std::slice::from_ref(&b), "", true, mnt);
        let judged = check_journal(mnt, &self.journal, &self.shadow);
        let replayed_view = try_manifest_of(mnt);
        drop(k);
        let what = "the kernel's view after ubtrfs rescue replay-log";
        let replayed_view = replayed_view.map_err(|e| format!("{what}: {e}"))?;
        judged.map_err(|e| format!("{what}: {e}"))?;
        compare_manifests(kernel_view, &replayed_view, &Ignore::default()).map_err(|d| {
            format!("after ubtrfs rescue replay-log, the kernel's view differs from the kernel's own replay: {d}")
        })?;
        Ok(())
    }
}

/// One kill point (see the module's doc). Err names the step.
fn crash_once(seed: u64, notreelog: bool, dir: &Path) -> Result<Outcome, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let c = Crash {
        dir,
        seed,
        journal: dir.join("journal.jsonl"),
        shadow: dir.join("shadow"),
        img: dir.join("fs.img"),
        mnt: dir.join("mnt"),
    };
    let mut out = Outcome::default();
    c.setup()?;
    c.kill_workload(notreelog, &mut out)?;
    let in_memory = c.ubtrfs_reads(&mut out)?;
    let kernel_view = c.kernel_replays(&in_memory, &mut out)?;
    c.ubtrfs_replays(&kernel_view)?;
    Ok(out)
}

/// Runs the kill points of `seeds`; panics listing every failure (their
/// directories kept), else prints the summary.
fn kill_points(test: &str, seeds: &[u64], notreelog: bool) -> Vec<Outcome> {
    let base = Workdir::new(test);
    let keep = base
        .parent()
        .unwrap()
        .join(format!("{test}-failed-{}", std::process::id()));
    let mut failures = Vec::new();
    let mut outs = Vec::new();
    let t0 = Instant::now();
    for &seed in seeds {
        let (ns, nh) = layout(seed);
        let what = format!(
            "seed {seed} ({}K nodes, {})",
            ns / 1024,
            if nh { "no-holes" } else { "^no-holes" }
        );
        let dir = base.join(format!("seed-{seed}"));
        let t = Instant::now();
        match crash_once(seed, notreelog, &dir) {
            Ok(o) => {
                eprintln!("{test}: {what}: {} ({:.1?})", o.line(), t.elapsed());
                let _ = std::fs::remove_dir_all(&dir);
                outs.push(o);
            }
            Err(e) => {
                let kept = keep.join(format!("seed-{seed}"));
                let _ = std::fs::create_dir_all(&keep);
                let moved = std::fs::rename(&dir, &kept).is_ok();
                failures.push(format!(
                    "{what}: {e}\n  (kept: {})",
                    if moved {
                        kept.display().to_string()
                    } else {
                        "nothing".into()
                    }
                ));
            }
        }
    }
    let mut reasons: BTreeMap<&str, u64> = BTreeMap::new();
    for o in &outs {
        for (r, n) in &o.traced_commit {
            *reasons.entry(r).or_default() += n;
        }
    }
    let sum = |f: fn(&Outcome) -> u64| outs.iter().map(f).sum::<u64>();
    eprintln!(
        "{test}: {} kills passed of {} in {:.1?} ({} with a log on disk); journaled: {} fsync, {} fdatasync; \
         daemon: {} fsyncs by log ({} grouped), {} by commit, {} with nothing to write; files checked: {} exact, {} in flight \
         ({} at a later state), {} never synced and absent; commits because: {reasons:?}",
        outs.len(),
        seeds.len(),
        t0.elapsed(),
        outs.iter().filter(|o| o.log_on_disk).count(),
        sum(|o| o.fsyncs),
        sum(|o| o.fdatasyncs),
        sum(|o| o.traced_log + o.traced_grouped),
        sum(|o| o.traced_grouped),
        sum(|o| o.commits()),
        sum(|o| o.traced_nothing),
        sum(|o| o.exact),
        sum(|o| o.in_flight),
        sum(|o| o.later_state),
        sum(|o| o.absent),
    );
    assert!(
        failures.is_empty(),
        "{test}: {} of {} kill points failed:\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n")
    );
    outs
}

#[test]
fn log_crash_fsync_through_ubtrfs_mount() {
    let test = "log_crash_fsync_through_ubtrfs_mount";
    if !fuse_available(test) {
        return;
    }
    let seeds: Vec<u64> = (0..kills()).map(|k| first_seed() + k).collect();
    let outs = kill_points(test, &seeds, false);
    // The test shows something only if fsyncs were answered by logs and
    // crashes found logs to replay.
    let logged: u64 = outs.iter().map(|o| o.traced_log).sum();
    let with_log = outs.iter().filter(|o| o.log_on_disk).count();
    assert!(
        logged > 0 && (outs.len() < 3 || with_log > 0),
        "{test}: {logged} fsyncs answered by a log, {with_log} of {} crashes with a log on disk: \
         the log path was not exercised",
        outs.len()
    );
    assert!(
        outs.iter().map(|o| o.fsyncs + o.fdatasyncs).sum::<u64>() > 0,
        "{test}: no fsync returned before the kills"
    );
}

#[test]
fn log_crash_notreelog_reference() {
    let test = "log_crash_notreelog_reference";
    if !fuse_available(test) {
        return;
    }
    kill_points(test, &[first_seed() + 1000], true);
}

#[test]
fn trace_lines_are_counted() {
    let dir = Workdir::new("log-crash-trace");
    let log = dir.join("m.log");
    std::fs::write(
        &log,
        "ubtrfs: info: trace: fsync 5:257: log in 0.1 ms\n\
         ubtrfs: info: trace: fsync (datasync) 5:258: commit (an inode on the path has several names or none) in 3.0 ms\n\
         ubtrfs: info: trace: fsyncdir 5:256: commit (not a regular file) in 2.0 ms\n\
         ubtrfs: info: trace: fsync 5:259: nothing to write in 0.0 ms\n\
         ubtrfs: info: trace: fsync 5:260: grouped log (synced by another fsync) in 1.0 ms\n\
         ubtrfs: info: something else\n",
    )
    .unwrap();
    let mut o = Outcome::default();
    count_trace(&log, &mut o);
    assert_eq!((o.traced_log, o.commits(), o.traced_nothing), (1, 2, 1));
    assert_eq!(o.traced_grouped, 1);
    assert_eq!(
        o.traced_commit.get("not a regular file"),
        Some(&1),
        "{:?}",
        o.traced_commit
    );
}
