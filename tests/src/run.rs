//! Running things: the `ubtrfs` binary, commands whose failure is a test
//! failure, and commands under a timeout and an address-space limit whose
//! every way of ending (exit code, signal, panic, hang) is judged.

use serde_json::Value;
use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::paths::repo_root;

/// The `ubtrfs` binary: $UBTRFS_BIN, or built now by cargo with the
/// profile this test was built with (`cargo test --release`: release;
/// plain `cargo test`: the dev profile, with overflow checks and debug
/// assertions).
/// The FUSE transport option every ubtrfs mount of the tests gets, from
/// UBTRFS_FUSE_TRANSPORT: `uring` mounts with `-o uring` (FUSE over
/// io_uring, or the mount fails), `dev` with `-o nouring`; unset leaves
/// the mount's default (io_uring when the kernel offers it).
pub fn transport_option() -> Option<&'static str> {
    match std::env::var("UBTRFS_FUSE_TRANSPORT").as_deref() {
        Ok("uring") => Some("uring"),
        Ok("dev") => Some("nouring"),
        Ok("") | Err(_) => None,
        Ok(other) => panic!("UBTRFS_FUSE_TRANSPORT={other}: uring or dev"),
    }
}

pub fn ubtrfs_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("UBTRFS_BIN") {
            return PathBuf::from(p);
        }
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-p", "ubtrfs", "--message-format=json"]);
        if !cfg!(debug_assertions) {
            cmd.arg("--release");
        }
        let out = cmd
            .current_dir(repo_root())
            .output()
            .expect("run cargo build");
        assert!(
            out.status.success(),
            "cargo build failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                if v["reason"] == "compiler-artifact" && v["target"]["name"] == "ubtrfs" {
                    if let Some(exe) = v["executable"].as_str() {
                        return PathBuf::from(exe);
                    }
                }
            }
        }
        panic!("cargo build did not report the ubtrfs executable");
    })
}

/// Runs ubtrfs with `args`; returns the output.
pub fn ubtrfs<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(ubtrfs_bin())
        .args(args)
        .output()
        .expect("run ubtrfs")
}

/// The lines `ubtrfs ARGS...` prints; Err naming the command, with its
/// stderr, when it fails.
pub fn ubtrfs_lines(args: &[String]) -> Result<Vec<String>, String> {
    let o = ubtrfs(args);
    if !o.status.success() {
        return Err(format!(
            "ubtrfs {} failed ({}): {}",
            args.join(" "),
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect())
}

/// stdout then stderr, as text.
pub fn out_text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs a command; Err carries its output when it fails.
pub fn run(cmd: &mut Command) -> Result<Output, String> {
    let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if o.status.success() {
        Ok(o)
    } else {
        Err(format!("{cmd:?} failed ({}): {}", o.status, out_text(&o)))
    }
}

/// Runs a command that must succeed (panics with its output otherwise).
pub fn run_ok(cmd: &mut Command, what: &str) -> Output {
    run(cmd).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Limits for [`run_limited`] and [`spawn_limited`].
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Killed (SIGKILL) after this long: a hang.
    pub timeout: Duration,
    /// RLIMIT_AS, in bytes: an allocation sized by hostile input fails
    /// (abort, or a clean error) instead of taking the machine's memory.
    pub address_space: Option<u64>,
    /// RLIMIT_FSIZE, in bytes, with SIGXFSZ ignored: writing a file past
    /// it fails with EFBIG (a clean error) instead of filling the disk.
    pub file_size: Option<u64>,
}

impl Limits {
    /// A timeout, and no limit on memory or file sizes.
    pub fn timeout_only(timeout: Duration) -> Limits {
        Limits {
            timeout,
            address_space: None,
            file_size: None,
        }
    }
}

/// How a command under [`run_limited`] ended.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub elapsed: Duration,
}

/// A command started by [`spawn_limited`].
pub struct Limited {
    pub child: Child,
    pub start: Instant,
    limits: Limits,
    out: PathBuf,
    err: PathBuf,
}

/// Starts `cmd` with stdin from /dev/null and its output into files in
/// `tmp` (no pipe to drain), under `limits` (the timeout is enforced by
/// [`Limited::wait`]).
pub fn spawn_limited(mut cmd: Command, tmp: &Path, limits: Limits) -> Limited {
    let out = tmp.join("stdout");
    let err = tmp.join("stderr");
    cmd.stdin(Stdio::null())
        .stdout(File::create(&out).expect("stdout file"))
        .stderr(File::create(&err).expect("stderr file"));
    let (address_space, file_size) = (limits.address_space, limits.file_size);
    // SAFETY: setrlimit and signal are async-signal-safe; nothing else
    // runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let set = |what, bytes: u64| {
                let l = libc::rlimit {
                    rlim_cur: bytes,
                    rlim_max: bytes,
                };
                if libc::setrlimit(what, &l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            };
            if let Some(b) = address_space {
                set(libc::RLIMIT_AS, b)?;
            }
            if let Some(b) = file_size {
                set(libc::RLIMIT_FSIZE, b)?;
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            }
            Ok(())
        });
    }
    let start = Instant::now();
    let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    Limited {
        child,
        start,
        limits,
        out,
        err,
    }
}

impl Limited {
    /// Whether it has ended (without reaping it for [`Limited::wait`]).
    pub fn running(&mut self) -> bool {
        // SAFETY: waitid with WNOWAIT only looks at the child's state.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                self.child.id(),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        r == 0 && unsafe { info.si_pid() } == 0
    }

    /// Waits for the end, killing it (SIGKILL) once the timeout is past.
    pub fn wait(mut self) -> Run {
        let mut timed_out = false;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            if self.start.elapsed() > self.limits.timeout {
                timed_out = true;
                let _ = self.child.kill();
                break self.child.wait().expect("wait after kill");
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        Run {
            code: status.code(),
            signal: status.signal(),
            timed_out,
            stdout: std::fs::read(&self.out).unwrap_or_default(),
            stderr: String::from_utf8_lossy(&std::fs::read(&self.err).unwrap_or_default())
                .into_owned(),
            elapsed: self.start.elapsed(),
        }
    }
}

/// Runs `cmd` under `limits` (see [`spawn_limited`]) to its end.
pub fn run_limited(cmd: Command, tmp: &Path, limits: Limits) -> Run {
    spawn_limited(cmd, tmp, limits).wait()
}

/// The last `n` characters of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let v: Vec<char> = s.chars().collect();
    v[v.len().saturating_sub(n)..].iter().collect()
}

impl Run {
    /// The rules every command must follow on any image, however hostile:
    /// it ends by itself (no timeout: no hang; no signal: no abort or
    /// segfault), does not panic (exit 101, "panicked at"), and exits 0, or
    /// 1 with an "error:" line (on stderr, or on stdout for scrub's report).
    pub fn judge(&self, what: &str) -> Result<(), String> {
        if self.timed_out {
            return Err(format!(
                "{what}: timed out after {:.1?} (hang); stderr: {}",
                self.elapsed,
                tail(&self.stderr, 600)
            ));
        }
        if let Some(sig) = self.signal {
            return Err(format!(
                "{what}: killed by signal {sig}; stderr: {}",
                tail(&self.stderr, 600)
            ));
        }
        if self.stderr.contains("panicked at") {
            return Err(format!("{what}: panicked: {}", tail(&self.stderr, 600)));
        }
        match self.code {
            Some(0) => Ok(()),
            Some(1) => {
                let stdout = String::from_utf8_lossy(&self.stdout);
                if self.stderr.lines().any(|l| l.contains("error:"))
                    || stdout.lines().any(|l| l.starts_with("error:"))
                {
                    Ok(())
                } else {
                    Err(format!(
                        "{what}: exit 1 without an 'error:' line; stderr: {}",
                        tail(&self.stderr, 600)
                    ))
                }
            }
            c => Err(format!(
                "{what}: exit code {c:?}; stderr: {}",
                tail(&self.stderr, 600)
            )),
        }
    }
}
