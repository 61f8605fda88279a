//! Where the mount's log lines go: stderr in the foreground; in the
//! background a log file (`-o log=FILE`) or syslog.

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::sync::Mutex;

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
