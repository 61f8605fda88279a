//! fuseprobe: the client side of bench/transport.sh, timing FUSE round
//! trips from user space.
//!
//!   fuseprobe walk FILE     alternate SEEK_DATA / SEEK_HOLE from 0 to EOF
//!   fuseprobe stat FILE N   N statx(AT_STATX_FORCE_SYNC) on an open fd
//!
//! Each prints one line: `calls N total_ns T ns_per_call X`.
//!
//! Why not bench/seekwalk.c: the floor file systems (fuse_floor.c and
//! uring-floor) answer SEEK_DATA in the trailing hole with EOF instead of
//! ENXIO, and seekwalk then fails on SEEK_HOLE at EOF; this walk stops at
//! EOF either way. Why statx with FORCE_SYNC: it makes the kernel send
//! GETATTR whatever the attribute timeout (3600 s in both daemons), so the
//! stat loop is a plain round trip without changing fuse_floor.c.

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Instant;

fn die(what: &str, e: io::Error) -> ! {
    eprintln!("fuseprobe: {what}: {e}");
    std::process::exit(1);
}

fn walk(f: &std::fs::File) -> u64 {
    let fd = f.as_raw_fd();
    let size = f.metadata().unwrap_or_else(|e| die("fstat", e)).len() as i64;
    let mut calls = 0u64;
    let mut pos: i64 = 0;
    while pos < size {
        // SAFETY: lseek on an open fd.
        let d = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        calls += 1;
        if d < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break;
            }
            die("lseek SEEK_DATA", e);
        }
        if d >= size {
            break;
        }
        // SAFETY: as above.
        let h = unsafe { libc::lseek(fd, d, libc::SEEK_HOLE) };
        calls += 1;
        if h < 0 {
            die("lseek SEEK_HOLE", io::Error::last_os_error());
        }
        if h <= d {
            eprintln!("fuseprobe: SEEK_HOLE {h} <= SEEK_DATA {d}");
            std::process::exit(1);
        }
        pos = h;
    }
    calls
}

fn stat(f: &std::fs::File, n: u64) -> u64 {
    let empty = CString::new("").unwrap();
    for _ in 0..n {
        // SAFETY: a zeroed statx is a valid output buffer.
        let mut st: libc::statx = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd, empty path with AT_EMPTY_PATH, valid buffer.
        let r = unsafe {
            libc::statx(
                f.as_raw_fd(),
                empty.as_ptr(),
                libc::AT_EMPTY_PATH | libc::AT_STATX_FORCE_SYNC,
                libc::STATX_BASIC_STATS,
                &mut st,
            )
        };
        if r != 0 {
            die("statx", io::Error::last_os_error());
        }
    }
    n
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 3 {
        eprintln!("usage: fuseprobe walk FILE | fuseprobe stat FILE N");
        std::process::exit(2);
    }
    let f = std::fs::File::open(&a[2]).unwrap_or_else(|e| die(&a[2], e));
    let t = Instant::now();
    let calls = match a[1].as_str() {
        "walk" => walk(&f),
        "stat" => stat(&f, a.get(3).and_then(|n| n.parse().ok()).unwrap_or(100_000)),
        _ => {
            eprintln!("fuseprobe: unknown mode {}", a[1]);
            std::process::exit(2);
        }
    };
    let ns = t.elapsed().as_nanos() as f64;
    println!(
        "calls {calls} total_ns {ns:.0} ns_per_call {:.1}",
        ns / calls.max(1) as f64
    );
}
