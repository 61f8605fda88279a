//! A killed mount must not leave its connection hanging.
//!
//! The kernel fills a read-ahead push (FUSE_NOTIFY_STORE, [`crate::rw_push`])
//! page by page, each page locked, and waits uninterruptibly for a page
//! that a READ in flight holds locked until we answer it. A SIGKILL at that
//! moment kills every thread but the pushing one, which stays in the
//! kernel: the process's descriptor of /dev/fuse is never closed, so the
//! connection is never aborted, the READ never ends, and the push never
//! ends either. The result is a zombie mount, and readers stuck in D state,
//! until someone writes to /sys/fs/fuse/connections/N/abort.
//!
//! The watchdog does that write. It is a small process forked while the
//! mount's process still has one thread. The kernel sends it a signal when
//! the thread that forked it (the main thread, which serves until the end)
//! exits (PR_SET_PDEATHSIG), which a SIGKILL makes happen at once even
//! while another thread is stuck. It then aborts the connection, mounting
//! fusectl first when it is not mounted (root only; unmounted again after).
//! It is told the connection's number once the mount is made, and "end"
//! once the session is over, after which it exits: a number a later mount
//! reuses is never touched. When the process ends normally the pipe closes
//! and it exits too.

use crate::logging;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// What the pipe says after the connection's number: the session is over.
const END: u64 = u64::MAX;
const FUSECTL: &[u8] = b"/sys/fs/fuse/connections\0";

/// The mount's end of the pipe to its watchdog.
pub struct Watchdog {
    tx: Option<File>,
}

impl Watchdog {
    /// Forks the watchdog. Call it while the process has one thread (a
    /// fork in a threaded process could leave the child a lock no thread
    /// will let go); None (with a warning) when it has more, or when the
    /// fork fails.
    pub fn start() -> Option<Watchdog> {
        let threads = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Threads:"))
                    .and_then(|n| n.trim().parse::<u32>().ok())
            });
        if threads != Some(1) {
            logging::warn(&format!(
                "no watchdog for the connection: the process has {threads:?} threads"
            ));
            return None;
        }
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors we then own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            logging::warn(&format!(
                "no watchdog: pipe: {}",
                std::io::Error::last_os_error()
            ));
            return None;
        }
        // SAFETY: fresh descriptors from pipe2.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: one thread (checked above): the child may do anything.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            logging::warn(&format!(
                "no watchdog: fork: {}",
                std::io::Error::last_os_error()
            ));
            return None;
        }
        if pid == 0 {
            drop(wr);
            watch(rd.as_raw_fd(), parent);
        }
        drop(rd);
        Some(Watchdog {
            tx: Some(File::from(wr)),
        })
    }

    /// The mount is made: its connection is number `n`.
    pub fn connection(&mut self, n: u64) {
        self.send(n);
    }

    /// The session is over: the watchdog exits without acting.
    pub fn end(&mut self) {
        self.send(END);
        self.tx = None;
    }

    fn send(&mut self, v: u64) {
        if let Some(tx) = &mut self.tx {
            // 8 bytes: one atomic pipe write. A watchdog gone (killed) only
            // means nobody will abort for us: EPIPE is ignored (SIGPIPE is).
            let _ = tx.write_all(&v.to_le_bytes());
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // An error return from the session: it is over all the same.
        if self.tx.is_some() {
            self.end();
        }
    }
}

/// The watchdog's life, in the child: never returns.
fn watch(rx: RawFd, parent: libc::pid_t) -> ! {
    // SAFETY: plain syscalls on our own descriptors and signal state.
    unsafe {
        // Keep nothing of the mount's open but the pipe: an inherited pipe
        // to a caller (stdout of `ubtrfs mount`, the background mount's
        // notify pipe) must close when the mount's process lets go of it.
        // The pipe first out of 0..2 (a mount started with stdin or stdout
        // closed), then to 3.
        let rx = if rx < 3 {
            libc::fcntl(rx, libc::F_DUPFD, 3)
        } else {
            rx
        };
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
        }
        if rx != 3 {
            libc::dup2(rx, 3);
        }
        if libc::syscall(libc::SYS_close_range, 4, libc::c_uint::MAX, 0) != 0 {
            // Before Linux 5.9, or refused by a seccomp profile: one by
            // one, up to the descriptor limit.
            let mut lim: libc::rlimit = std::mem::zeroed();
            let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                lim.rlim_cur.min(1 << 20) as libc::c_int
            } else {
                1024
            };
            for fd in 4..max {
                libc::close(fd);
            }
        }
        // A terminal's Ctrl-C goes to the whole process group: the mount
        // unmounts on it, the watchdog waits for the pipe to say so.
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
        ] {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGUSR1 as libc::c_ulong);
        if libc::getppid() != parent {
            // Gone before we could ask to be told.
            libc::_exit(0);
        }
        let mut only = std::mem::zeroed();
        libc::sigemptyset(&mut only);
        libc::sigaddset(&mut only, libc::SIGUSR1);
        let sfd = libc::signalfd(-1, &only, libc::SFD_CLOEXEC);
        if sfd < 0 {
            // No way to hear of the death: nothing to watch with.
            libc::_exit(0);
        }
        libc::fcntl(3, libc::F_SETFL, libc::O_NONBLOCK);
        let mut conn: Option<u64> = None;
        loop {
            let mut p = [
                libc::pollfd {
                    fd: 3,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: sfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let n = libc::poll(p.as_mut_ptr(), 2, -1);
            if n < 0 {
                continue;
            }
            // The pipe first: "end" is written before the main thread exits.
            loop {
                let mut b = [0u8; 8];
                let r = libc::read(3, b.as_mut_ptr().cast(), 8);
                if r == 8 {
                    match u64::from_le_bytes(b) {
                        END => libc::_exit(0),
                        v => conn = Some(v),
                    }
                } else if r == 0 {
                    // The process is gone and its descriptors closed: the
                    // connection went with them.
                    libc::_exit(0);
                } else {
                    break;
                }
            }
            if p[1].revents & libc::POLLIN != 0 {
                if let Some(c) = conn {
                    abort(c);
                }
                libc::_exit(0);
            }
        }
    }
}

/// Writes "1" to connection `c`'s abort file, mounting fusectl first if
/// the file is not there (and unmounting it after).
///
/// # Safety
/// Plain syscalls; called in the watchdog only.
unsafe fn abort(c: u64) {
    let path = format!("/sys/fs/fuse/connections/{c}/abort\0");
    let try_write = || {
        // SAFETY: a NUL-terminated path; our own descriptor.
        unsafe {
            let fd = libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return false;
            }
            let ok = libc::write(fd, b"1".as_ptr().cast(), 1) == 1;
            libc::close(fd);
            ok
        }
    };
    if try_write() {
        return;
    }
    let mounted = libc::mount(
        c"fusectl".as_ptr(),
        FUSECTL.as_ptr().cast(),
        c"fusectl".as_ptr(),
        0,
        std::ptr::null(),
    ) == 0;
    try_write();
    if mounted {
        libc::umount2(FUSECTL.as_ptr().cast(), libc::MNT_DETACH);
    }
}

/// The FUSE connection number of the mount whose mountinfo device field
/// is `dev` ("MAJOR:MINOR"): the kernel's dev_t, as fusectl names it.
pub fn connection_number(dev: &str) -> Option<u64> {
    let (major, minor) = dev.split_once(':')?;
    let (major, minor): (u64, u64) = (major.parse().ok()?, minor.parse().ok()?);
    Some((major << 20) | minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_numbers_as_fusectl_names_them() {
        assert_eq!(connection_number("0:53"), Some(53));
        assert_eq!(connection_number("0:1234"), Some(1234));
        assert_eq!(connection_number("1:2"), Some((1 << 20) | 2));
        assert_eq!(connection_number("x"), None);
        assert_eq!(connection_number("0:"), None);
    }
}
