//! Where the mount's log lines go: stderr in the foreground; in the
//! background a log file (`-o log=FILE`) or syslog. Messages of the `fuser`
//! crate at warning level and above go the same way.

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

enum Sink {
    Stderr,
    File(File),
    Syslog,
}

static SINK: Mutex<Sink> = Mutex::new(Sink::Stderr);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error,
    Warn,
    Info,
}

impl Level {
    fn word(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warning",
            Level::Info => "info",
        }
    }

    fn syslog_priority(self) -> libc::c_int {
        match self {
            Level::Error => libc::LOG_ERR,
            Level::Warn => libc::LOG_WARNING,
            Level::Info => libc::LOG_INFO,
        }
    }
}

/// Writes one log line.
pub fn log(level: Level, msg: &str) {
    let mut sink = SINK.lock().unwrap_or_else(|e| e.into_inner());
    match &mut *sink {
        Sink::Stderr => {
            let _ = writeln!(std::io::stderr(), "ubtrfs: {}: {msg}", level.word());
        }
        Sink::File(f) => {
            let _ = writeln!(f, "ubtrfs[{}]: {}: {msg}", std::process::id(), level.word());
        }
        Sink::Syslog => {
            let text = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
            // SAFETY: a constant format and a NUL-terminated argument.
            unsafe {
                libc::syslog(
                    level.syslog_priority(),
                    c"%s: %s".as_ptr(),
                    CString::new(level.word()).unwrap_or_default().as_ptr(),
                    text.as_ptr(),
                )
            };
        }
    }
}

pub fn error(msg: &str) {
    log(Level::Error, msg)
}

pub fn warn(msg: &str) {
    log(Level::Warn, msg)
}

pub fn info(msg: &str) {
    log(Level::Info, msg)
}

/// Sends log lines to `file` (appended).
pub fn to_file(file: File) {
    *SINK.lock().unwrap_or_else(|e| e.into_inner()) = Sink::File(file);
}

/// Sends log lines to syslog (facility daemon).
pub fn to_syslog() {
    // SAFETY: the identifier is a static C string.
    unsafe { libc::openlog(c"ubtrfs".as_ptr(), libc::LOG_PID, libc::LOG_DAEMON) };
    *SINK.lock().unwrap_or_else(|e| e.into_inner()) = Sink::Syslog;
}

/// Forwards the `fuser` crate's warnings and errors.
struct FuserLog;

impl log::Log for FuserLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let level = if r.level() == log::Level::Error {
                Level::Error
            } else {
                Level::Warn
            };
            log(level, &format!("fuse: {}", r.args()));
        }
    }

    fn flush(&self) {}
}

/// Installs the forwarder for the `log` crate (once per process).
pub fn install_fuser_logger() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        if log::set_logger(&FuserLog).is_ok() {
            log::set_max_level(log::LevelFilter::Warn);
        }
    });
}
