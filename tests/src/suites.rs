//! The kernel's own suites run on a mount (tests/tests/rw_mount/tools.rs):
//! pjdfstest ([`run_pjdfstest`], [`parse_pjdfstest`]) and fsx
//! ([`run_fsx`]), with structured results.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::paths::repo_root;
use crate::run::{run_limited, tail, Limits};

/// How one pjdfstest test case ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PjdStatus {
    Passed,
    Failed,
    Skipped,
    ExpectedFailure,
    UnexpectedPass,
}

/// pjdfstest's results: each test case's status, the counts of its
/// "Summary:" line (checked against the cases), the run.
#[derive(Debug, Default)]
pub struct PjdResult {
    pub cases: BTreeMap<String, PjdStatus>,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub expected_failures: usize,
    pub total: usize,
    /// The panic message of each failed case.
    pub messages: BTreeMap<String, String>,
    pub elapsed: Duration,
}

impl PjdResult {
    pub fn with(&self, s: PjdStatus) -> Vec<&str> {
        self.cases
            .iter()
            .filter(|(_, v)| **v == s)
            .map(|(k, _)| k.as_str())
            .collect()
    }

    /// The counts as pjdfstest prints them.
    pub fn counts(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped, {} expected failures, {} total",
            self.passed, self.failed, self.skipped, self.expected_failures, self.total
        )
    }

    /// Cases that pass in `reference` and do not pass here.
    pub fn regressions_from(&self, reference: &PjdResult) -> Vec<String> {
        reference
            .with(PjdStatus::Passed)
            .into_iter()
            .filter(|n| self.cases.get(*n) != Some(&PjdStatus::Passed))
            .map(|n| match self.messages.get(n) {
                Some(m) => format!("{n} ({:?}): {m}", self.cases.get(n)),
                None => format!("{n} ({:?})", self.cases.get(n)),
            })
            .collect()
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\u{1b}' && it.peek() == Some(&'[') {
            for d in it.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses pjdfstest 0.2's output: one line per case, its name (as
/// `chmod::eperm` or `rename::changed_ctime_success::dir`) padded with
/// spaces then `ok`, `FAILED`, `skipped`, `failed as expected` or `PASSED
/// UNEXPECTEDLY`; tab-indented lines below a case (reasons, the panic
/// message); a backtrace; and
/// `Summary: F failed, S skipped, P passed, E expected failures, T total`
/// (failed counts unexpected passes too). Err when there is no summary or
/// its counts do not match the cases.
pub fn parse_pjdfstest(out: &str) -> Result<PjdResult, String> {
    const STATUS: [(&str, PjdStatus); 5] = [
        ("failed as expected", PjdStatus::ExpectedFailure),
        ("PASSED UNEXPECTEDLY", PjdStatus::UnexpectedPass),
        ("FAILED", PjdStatus::Failed),
        ("skipped", PjdStatus::Skipped),
        ("ok", PjdStatus::Passed),
    ];
    let is_name = |n: &str| {
        n.contains("::")
            && n.split("::")
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    };
    let mut r = PjdResult::default();
    let mut summary: Option<[usize; 5]> = None;
    let mut last_failed: Option<String> = None;
    for raw in out.lines() {
        let line = strip_ansi(raw);
        if line.starts_with('\t') {
            if let Some(n) = &last_failed {
                let m = r.messages.entry(n.clone()).or_default();
                if m.len() < 400 {
                    if !m.is_empty() {
                        m.push(' ');
                    }
                    m.push_str(line.trim());
                }
            }
            continue;
        }
        if let Some(rest) = line.trim().strip_prefix("Summary:") {
            let mut nums = [0usize; 5];
            let parts: Vec<&str> = rest.split(',').map(str::trim).collect();
            let keys = ["failed", "skipped", "passed", "expected failures", "total"];
            if parts.len() != 5 {
                return Err(format!("pjdfstest: unreadable summary line {line:?}"));
            }
            for (i, (p, k)) in parts.iter().zip(keys).enumerate() {
                let (n, word) = p
                    .split_once(' ')
                    .ok_or_else(|| format!("pjdfstest: unreadable summary line {line:?}"))?;
                if word != k {
                    return Err(format!(
                        "pjdfstest: summary line {line:?}: {word:?} for {k:?}"
                    ));
                }
                nums[i] = n
                    .parse()
                    .map_err(|_| format!("pjdfstest: summary line {line:?}: {n:?}"))?;
            }
            summary = Some(nums);
            continue;
        }
        if line.starts_with(' ') {
            continue;
        }
        let Some((name, rest)) = line.split_once(' ') else {
            continue;
        };
        if !is_name(name) {
            continue;
        }
        let rest = rest.trim();
        let Some((_, st)) = STATUS.iter().find(|(s, _)| rest == *s) else {
            continue;
        };
        if r.cases.insert(name.to_string(), *st).is_some() {
            return Err(format!("pjdfstest: case {name} reported twice"));
        }
        last_failed = (*st == PjdStatus::Failed).then(|| name.to_string());
    }
    let Some([failed, skipped, passed, expected, total]) = summary else {
        return Err(format!(
            "pjdfstest: no Summary line; output ends: {}",
            tail(out, 1500)
        ));
    };
    let count = |s| r.cases.values().filter(|v| **v == s).count();
    let seen = [
        count(PjdStatus::Failed) + count(PjdStatus::UnexpectedPass),
        count(PjdStatus::Skipped),
        count(PjdStatus::Passed),
        count(PjdStatus::ExpectedFailure),
        r.cases.len(),
    ];
    if seen != [failed, skipped, passed, expected, total] {
        return Err(format!(
            "pjdfstest: the summary says {failed} failed, {skipped} skipped, {passed} passed, \
             {expected} expected failures, {total} total; the case lines give {seen:?}"
        ));
    }
    r.passed = passed;
    r.failed = failed;
    r.skipped = skipped;
    r.expected_failures = expected;
    r.total = total;
    Ok(r)
}

/// tests/oracle/pjdfstest.toml: every opt-in feature btrfs has on Linux,
/// 10 ms naps, no remounts.
pub fn pjdfstest_config() -> PathBuf {
    repo_root().join("tests/oracle/pjdfstest.toml")
}

/// `pjdfstest -c CONFIG -p DIR -s SECONDARY` (SECONDARY: a directory on
/// another file system, for the EXDEV cases). Its exit status is 1 when a
/// case fails, so only the parsed output is judged.
pub fn run_pjdfstest(
    bin: &Path,
    dir: &Path,
    secondary: &Path,
    tmp: &Path,
    patterns: &[&str],
) -> Result<PjdResult, String> {
    let mut c = Command::new(bin);
    c.arg("-c")
        .arg(pjdfstest_config())
        .arg("-p")
        .arg(dir)
        .arg("-s")
        .arg(secondary)
        .args(patterns)
        .env("NO_COLOR", "1");
    let r = run_limited(c, tmp, Limits::timeout_only(Duration::from_secs(900)));
    if r.timed_out || r.signal.is_some() {
        return Err(format!(
            "pjdfstest: timed out {} / signal {:?} after {:.1?}; output ends: {}",
            r.timed_out,
            r.signal,
            r.elapsed,
            tail(&String::from_utf8_lossy(&r.stdout), 1500)
        ));
    }
    let mut p = parse_pjdfstest(&String::from_utf8_lossy(&r.stdout))
        .map_err(|e| format!("{e}; stderr: {}", tail(&r.stderr, 500)))?;
    p.elapsed = r.elapsed;
    Ok(p)
}

/// tests/oracle/fsx.toml: every operation fsx-rs has (mmap, fallocate,
/// punch hole, copy_file_range, sendfile, fadvise, fsync, close/open),
/// files up to 1 MiB.
pub fn fsx_config() -> PathBuf {
    repo_root().join("tests/oracle/fsx.toml")
}

/// How an fsx run ended.
#[derive(Debug)]
pub struct FsxResult {
    pub ok: bool,
    pub code: Option<i32>,
    pub elapsed: Duration,
    /// stdout then stderr (its operation log and the miscompare on failure).
    pub output: String,
}

/// `fsx -f CONFIG -N OPS -S SEED -P ARTIFACTS FILE`: ok when it exits 0
/// saying "All operations completed A-OK!".
pub fn run_fsx(
    bin: &Path,
    file: &Path,
    seed: u64,
    ops: u64,
    artifacts: &Path,
    tmp: &Path,
) -> FsxResult {
    std::fs::create_dir_all(artifacts).unwrap();
    let mut c = Command::new(bin);
    c.arg("-f")
        .arg(fsx_config())
        .args(["-N", &ops.to_string(), "-S", &seed.to_string()])
        .arg("-P")
        .arg(artifacts)
        .arg(file);
    let r = run_limited(c, tmp, Limits::timeout_only(Duration::from_secs(900)));
    let output = format!("{}{}", String::from_utf8_lossy(&r.stdout), r.stderr);
    FsxResult {
        ok: r.code == Some(0) && output.contains("All operations completed A-OK!"),
        code: r.code,
        elapsed: r.elapsed,
        output,
    }
}
