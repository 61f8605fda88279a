//! Claims on devices: one writer or many readers per image.
//!
//! Every process that writes a filesystem holds an exclusive claim on each
//! of its devices for as long as it has them open, taken before the
//! superblock is read; readers hold a shared claim. A claim that cannot be
//! had stops the open before anything is read or written, with an error
//! naming the holder.
//!
//! - Image files: an open-file-description lock (`F_OFD_SETLK`) over the
//!   whole file, write for writers and read for readers. The kernel drops
//!   it when the last descriptor of that open goes, kill -9 included, so
//!   nothing is left stale. Its holder is found through /proc/PID/fdinfo
//!   (the lock itself records no pid for OFD locks).
//! - Block devices: writers open them `O_EXCL`, the kernel's exclusive
//!   claim, which a kernel mount, md, dm or another writer already holds
//!   (EBUSY); they also take the lock above, for other ubtrfs processes.
//! - An image file that backs a loop device which the kernel has mounted,
//!   or which someone claims, is in use: the kernel would write it
//!   underneath us.
//!
//! Every claimant marks itself live with a second lock, one byte far past
//! any device's end ([`LIVE_BYTE`]); a read-write mount lets it go once it
//! is unmounted and makes its last commit. A writer that finds the image
//! claimed by a process no longer live waits (bounded) for it to end
//! instead of refusing: `umount` then `mount` at once, as scripts do.
//!
//! Readers refuse a live image too: what they read could change under
//! them. [`set_read_live`] (the commands' `--force`) lets them go on.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The main lock's range: the whole file, bar the live byte.
const MAIN_LEN: i64 = 1 << 62;
/// Where a live writer holds its marker lock.
const LIVE_BYTE: i64 = 1 << 62;
/// How long a writer waits for a writer that is ending to let go.
const ENDING_WAIT: Duration = Duration::from_secs(120);
/// How long a writer waits for a block device that the kernel claims for
/// nothing it shows: no mount, no holder in sysfs, no process that has it
/// open. That is a superblock being torn down (a fuseblk mount's, after
/// its daemon let go of the device), or a mount in another namespace.
const LETTING_GO_WAIT: Duration = Duration::from_secs(3);

/// Whether readers read an image that a writer holds (`--force`).
static READ_LIVE: AtomicBool = AtomicBool::new(false);

/// Lets this process's readers open images that are in use by a writer
/// (the view may be inconsistent: the writer changes it meanwhile).
pub fn set_read_live(on: bool) {
    READ_LIVE.store(on, Ordering::Relaxed);
}

/// Block devices carrying this process's own fuseblk mount (by number).
static OWN_MOUNTS: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

/// The block device `rdev` carries this process's own fuseblk mount,
/// made before its writer opens the image: the kernel's exclusive claim
/// on it is the mount's, on this process's behalf. The writer then opens
/// it without `O_EXCL`, and a loop device of it is not another user.
pub fn own_mount(rdev: u64) {
    OWN_MOUNTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(rdev);
}

fn is_own(rdev: u64) -> bool {
    OWN_MOUNTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&rdev)
}

/// What a process wants of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// The error of a claim refused: EBUSY, with the holder in the message.
fn busy(holder: String) -> io::Error {
    io::Error::new(io::ErrorKind::ResourceBusy, format!("in use: {holder}"))
}

/// Opens `path` for `access` and claims it; block devices opened for
/// writing are opened `O_EXCL`.
pub fn open_claimed(path: &Path, access: Access) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let write = access == Access::Write;
    let meta = std::fs::metadata(path).ok();
    let block = meta
        .as_ref()
        .is_some_and(|m| m.file_type().is_block_device());
    let own = block && meta.as_ref().is_some_and(|m| is_own(m.rdev()));
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(write);
    if block && write && !own {
        o.custom_flags(libc::O_EXCL);
    }
    let mut wait = EndingWait::new(path, ENDING_WAIT);
    let mut letting_go = EndingWait::new(path, LETTING_GO_WAIT);
    let file = loop {
        match o.open(path) {
            Ok(f) => break f,
            // Claimed: by a ubtrfs mount that is ending (waited for), by
            // nothing the kernel shows (waited for briefly: `umount` of a
            // fuseblk mount, then `mount` at once, finds the kernel still
            // letting go of the device after the daemon did; fstests
            // generic/604), or by anyone else (refused).
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                let pids = meta
                    .as_ref()
                    .map(|m| holder_pids(m, false))
                    .unwrap_or_default();
                let waited = if meta.as_ref().is_some_and(|m| unmounted_daemons(m, &pids)) {
                    wait.wait_ending(&describe(&pids))
                } else if block && pids.is_empty() && unseen_claim(path) {
                    letting_go.wait(|| {
                        "the kernel to let the device go (no mount or process holds it)".into()
                    })
                } else {
                    false
                };
                if !waited {
                    return Err(busy(block_holder(path)));
                }
            }
            Err(e) => return Err(e),
        }
    };
    claim(&file, path, access, block)?;
    Ok(file)
}

/// A bounded wait for a claim that is going away: a ubtrfs writer that is
/// ending (its mount is gone, its last commit being made), or the kernel
/// letting go of a device.
struct EndingWait<'a> {
    path: &'a Path,
    /// When the first wait began: a claim may change hands (an ending
    /// daemon lets go, then the kernel), each wait timed from its own
    /// start.
    start: Option<Instant>,
    limit: Duration,
    told: bool,
}

impl<'a> EndingWait<'a> {
    fn new(path: &'a Path, limit: Duration) -> Self {
        EndingWait {
            path,
            start: None,
            limit,
            told: false,
        }
    }

    /// Sleeps a little before the next try; false once the wait is over
    /// (its limit). Says on stderr, once, what it waits for (`what`, only
    /// formatted then).
    fn wait(&mut self, what: impl FnOnce() -> String) -> bool {
        let waited = self.start.get_or_insert_with(Instant::now).elapsed();
        if waited > self.limit {
            return false;
        }
        if !self.told && waited > Duration::from_millis(500) {
            eprintln!("{}: waiting for {}", self.path.display(), what());
            self.told = true;
        }
        std::thread::sleep(Duration::from_millis(20));
        true
    }

    /// [`EndingWait::wait`] for a ubtrfs writer that is ending, `holder`.
    fn wait_ending(&mut self, holder: &str) -> bool {
        self.wait(|| format!("{holder} to make its last commit and let the image go"))
    }
}

/// Takes the claim on an opened device.
fn claim(file: &File, path: &Path, access: Access, block: bool) -> io::Result<()> {
    let read_live = access == Access::Read && READ_LIVE.load(Ordering::Relaxed);
    let kind = match access {
        Access::Read => libc::F_RDLCK,
        Access::Write => libc::F_WRLCK,
    };
    let mut wait = EndingWait::new(path, ENDING_WAIT);
    let meta = file.metadata()?;
    loop {
        match lock(file, kind, 0, MAIN_LEN) {
            Ok(()) => break,
            Err(e) if !is_conflict(&e) => return Err(e),
            Err(_) if read_live => return Ok(()),
            Err(_) => {}
        }
        // Held: by a live process (refused), or by a writer that is
        // ending (waited for).
        let pids = holder_pids(&meta, true);
        let ending = !held(file, LIVE_BYTE, 1)? || unmounted_daemons(&meta, &pids);
        let holder = describe(&pids);
        if !ending {
            return Err(busy(holder));
        }
        if !wait.wait_ending(&holder) {
            return Err(busy(format!("{holder} (still ending after 120 s)")));
        }
    }
    // Readers and writers alike are live until they say they are ending.
    lock(file, libc::F_RDLCK, LIVE_BYTE, 1)?;
    // Block devices: the kernel's claims. Writers hold O_EXCL; a reader
    // asks for it for a moment to learn whether someone else holds it.
    if block
        && access == Access::Read
        && !read_live
        && claimed_by_other(path)
        && !mounted_ro_only(dev_of_block(path))
    {
        return Err(busy(block_holder(path)));
    }
    if !block {
        if let Some(h) = loop_users(file, access, read_live)? {
            return Err(busy(h));
        }
    }
    Ok(())
}

/// Lets the claim go before the file is closed: a writer that has made
/// its last commit and writes no more (a read-write mount at unmount),
/// so that the next writer need not wait for the process to end.
pub fn release(file: &File) {
    let _ = lock(file, libc::F_UNLCK, 0, 0);
}

/// Drops the live marker: this writer is ending (its mount is gone) and
/// other writers may wait for it rather than refuse.
pub fn mark_ending(file: &File) {
    let _ = lock(file, libc::F_UNLCK, LIVE_BYTE, 1);
}

/// Whether someone holds the kernel's exclusive claim on the block device
/// at `path` (an O_EXCL open of it, at once closed, gives EBUSY).
fn claimed_by_other(path: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(path)
        .is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY))
}

fn flock_of(kind: i32, start: i64, len: i64) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = len;
    fl
}

fn lock(file: &File, kind: i32, start: i64, len: i64) -> io::Result<()> {
    let fl = flock_of(kind, start, len);
    // SAFETY: F_OFD_SETLK reads the flock passed, which lives for the call.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether some other open file description holds a lock that conflicts
/// with a write lock on the range.
fn held(file: &File, start: i64, len: i64) -> io::Result<bool> {
    let mut fl = flock_of(libc::F_WRLCK, start, len);
    // SAFETY: F_OFD_GETLK fills the flock passed, which lives for the call.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

fn is_conflict(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES))
}

/// A process's arguments (empty when /proc does not show them).
fn cmdline_args(pid: u32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// A process's command line, spaces between its arguments.
fn cmdline(pid: u32) -> String {
    let args = cmdline_args(pid);
    if args.is_empty() {
        "?".into()
    } else {
        args.join(" ")
    }
}

/// Processes other than this one with an open file on (dev, ino) and
/// whether they hold an OFD lock on it: (pid, locks).
fn openers(dev: u64, ino: u64) -> Vec<(u32, bool)> {
    let me = std::process::id();
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    // fdinfo's lock lines name the file as "MAJ:MIN:INO " (hex, hex,
    // decimal).
    let dev_id = format!("{:02x}:{:02x}:{ino} ", libc::major(dev), libc::minor(dev));
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        let mut found = None;
        for fd in fds.flatten() {
            let Ok(m) = std::fs::metadata(fd.path()) else {
                continue;
            };
            if m.dev() != dev || m.ino() != ino {
                continue;
            }
            let info = std::fs::read_to_string(p.path().join("fdinfo").join(fd.file_name()))
                .unwrap_or_default();
            let locks = info
                .lines()
                .any(|l| l.starts_with("lock:") && l.contains("OFDLCK") && l.contains(&dev_id));
            found = Some(found.unwrap_or(false) || locks);
        }
        if let Some(locks) = found {
            out.push((pid, locks));
        }
    }
    out
}

/// The processes with the file `m` describes open (those /proc shows);
/// with `locked`, only those holding an OFD lock on it.
fn holder_pids(m: &std::fs::Metadata, locked: bool) -> Vec<u32> {
    openers(m.dev(), m.ino())
        .into_iter()
        .filter(|&(_, locks)| locks || !locked)
        .map(|(pid, _)| pid)
        .collect()
}

/// "process PID (COMMAND)", for each holder, or a placeholder when /proc
/// does not show them (another user's).
fn describe(pids: &[u32]) -> String {
    if pids.is_empty() {
        return "another process (not visible to this user)".into();
    }
    pids.iter()
        .map(|&pid| format!("process {pid} ({})", cmdline(pid)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether every holder is a `ubtrfs mount` whose mount of the image is
/// gone: unmounted (fusermount3 -u returns before the daemon has seen
/// it), making its last commit, about to let its marker go.
fn unmounted_daemons(m: &std::fs::Metadata, pids: &[u32]) -> bool {
    let daemon = |pid: u32| {
        let args = cmdline_args(pid);
        let name = args
            .first()
            .map(|a| a.rsplit('/').next().unwrap_or(a))
            .unwrap_or("");
        name.starts_with("mount.fuse.ubtrfs")
            || name.starts_with("mount.ubtrfs")
            || (name == "ubtrfs" && args.get(1).is_some_and(|a| a == "mount"))
    };
    !pids.is_empty() && pids.iter().all(|&p| daemon(p)) && ubtrfs_mounts_of(m).is_empty()
}

/// The ubtrfs FUSE mounts that show `file` as their source, itself (the
/// user's mount, named by its path; a block device) or through a loop
/// device over it (root's fuseblk mount of an image).
pub fn ubtrfs_mounts_of(m: &std::fs::Metadata) -> Vec<MountLine> {
    mounts()
        .into_iter()
        .filter(|l| l.fstype.ends_with(".ubtrfs"))
        .filter(|l| {
            same_file(m, &l.source) || l.source.file_name().is_some_and(|n| loop_backs(n, m))
        })
        .collect()
}

/// Whether `p` is the file `m` describes (device and inode).
fn same_file(m: &std::fs::Metadata, p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|b| b.dev() == m.dev() && b.ino() == m.ino())
}

/// Whether the loop device `name` (loop3) is backed by the file `m`
/// describes.
fn loop_backs(name: &std::ffi::OsStr, m: &std::fs::Metadata) -> bool {
    std::fs::read_to_string(Path::new("/sys/block").join(name).join("loop/backing_file"))
        .is_ok_and(|b| same_file(m, Path::new(b.trim_end_matches('\n'))))
}

/// A device number written "MAJOR:MINOR" (mountinfo, sysfs `dev` files).
fn parse_devnum(s: &str) -> Option<u64> {
    let (a, b) = s.trim().split_once(':')?;
    Some(libc::makedev(a.parse().ok()?, b.parse().ok()?))
}

/// A block device's number.
fn dev_of_block(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.rdev()).unwrap_or(0)
}

/// One line of /proc/self/mountinfo: device number (the block device's
/// for a source that is one: the kernel's btrfs shows an anonymous number
/// of its own), mount point, type, and whether it is read-only.
pub struct MountLine {
    pub dev: u64,
    /// The device field as mountinfo gives it ("MAJOR:MINOR"): for a
    /// FUSE mount, its connection.
    pub st_dev: String,
    pub source: PathBuf,
    pub point: PathBuf,
    pub fstype: String,
    pub ro: bool,
    /// The per-mount options (rw, nodev, relatime, ...).
    pub options: String,
    /// In a peer group (mount propagation `shared:N`).
    pub shared: bool,
}

/// The mounts of this process's namespace, in mountinfo's order (a later
/// mount on the same point is over an earlier one).
pub fn mounts() -> Vec<MountLine> {
    use std::os::unix::ffi::OsStringExt;
    let Ok(info) = std::fs::read("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in info.split(|&b| b == b'\n') {
        let f: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let Some(sep) = f.iter().position(|x| *x == b"-") else {
            continue;
        };
        if f.len() < 6 || sep + 1 >= f.len() {
            continue;
        }
        let dev = std::str::from_utf8(f[2]).ok().and_then(parse_devnum);
        let Some(mut dev) = dev else { continue };
        let source = f
            .get(sep + 2)
            .map(|x| unescape_mountinfo(x))
            .unwrap_or_default();
        let source = PathBuf::from(std::ffi::OsString::from_vec(source));
        if source.starts_with("/dev/") {
            if let Ok(m) = std::fs::metadata(&source) {
                if m.file_type().is_block_device() {
                    dev = m.rdev();
                }
            }
        }
        let ro = f[5].split(|&b| b == b',').any(|o| o == b"ro");
        out.push(MountLine {
            dev,
            st_dev: String::from_utf8_lossy(f[2]).into_owned(),
            options: String::from_utf8_lossy(f[5]).into_owned(),
            shared: f[6..sep].iter().any(|o| o.starts_with(b"shared:")),
            source,
            point: PathBuf::from(std::ffi::OsString::from_vec(unescape_mountinfo(f[4]))),
            fstype: String::from_utf8_lossy(f[sep + 1]).into_owned(),
            ro,
        });
    }
    out
}

/// mountinfo's octal escapes (\040 for a space, ...) undone.
pub fn unescape_mountinfo(f: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(f.len());
    let mut i = 0;
    while i < f.len() {
        if f[i] == b'\\'
            && i + 3 < f.len()
            && f[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (f[i + 1] - b'0') as u32 * 64
                + (f[i + 2] - b'0') as u32 * 8
                + (f[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(f[i]);
            i += 1;
        }
    }
    out
}

/// The device numbers that mount `dev` together: itself, and every
/// device of a multi-device btrfs the kernel has open with it
/// (/sys/fs/btrfs/FSID/devices: mountinfo names only one of them).
fn fellow_devices(dev: u64) -> Vec<u64> {
    let mut out = vec![dev];
    let Some(name) = sys_name(dev) else {
        return out;
    };
    let Ok(fsids) = std::fs::read_dir("/sys/fs/btrfs") else {
        return out;
    };
    for fs in fsids.flatten() {
        let devices = fs.path().join("devices");
        if !devices.join(&name).exists() {
            continue;
        }
        for d in std::fs::read_dir(&devices).into_iter().flatten().flatten() {
            let n = std::fs::read_to_string(d.path().join("dev")).unwrap_or_default();
            out.extend(parse_devnum(&n));
        }
    }
    out
}

/// The mounts of `dev` (or of a fellow device: [`fellow_devices`]).
fn mounts_of(dev: u64) -> Vec<MountLine> {
    let devs = fellow_devices(dev);
    mounts()
        .into_iter()
        .filter(|m| devs.contains(&m.dev))
        .collect()
}

/// Where the device `dev` is mounted, as "mounted by the kernel at X (type
/// T)" or "mounted by ubtrfs at X"; None when it is not.
fn mounted_at(dev: u64) -> Option<String> {
    let m = mounts_of(dev);
    let first = m.first()?;
    Some(if first.fstype.ends_with(".ubtrfs") {
        format!("mounted by ubtrfs at {}", first.point.display())
    } else {
        format!(
            "mounted by the kernel at {} (type {})",
            first.point.display(),
            first.fstype
        )
    })
}

/// Whether every mount of `dev` is read-only (and there is one).
fn mounted_ro_only(dev: u64) -> bool {
    let m = mounts_of(dev);
    !m.is_empty() && m.iter().all(|m| m.ro)
}

/// Who claims the block device at `path`: its mount, a ubtrfs process
/// with it open, or the kernel's holders (md, dm, loop).
fn block_holder(path: &Path) -> String {
    let rdev = dev_of_block(path);
    if let Some(m) = mounted_at(rdev) {
        return m;
    }
    let holders = sys_holders(rdev);
    if !holders.is_empty() {
        return format!("held by the kernel's {}", holders.join(", "));
    }
    if let Ok(m) = std::fs::metadata(path) {
        let pids = holder_pids(&m, false);
        if !pids.is_empty() {
            return format!("claimed by {}", describe(&pids));
        }
    }
    "claimed by another process or the kernel (EBUSY)".into()
}

/// The devices the kernel stacks on block device `rdev` (md, dm, loop:
/// its sysfs holders).
fn sys_holders(rdev: u64) -> Vec<String> {
    let Some(n) = sys_name(rdev) else {
        return Vec::new();
    };
    std::fs::read_dir(format!("/sys/class/block/{n}/holders"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the block device at `path` is claimed for nothing this process
/// can see: not mounted here and no device stacked on it (the caller has
/// found no process with it open).
fn unseen_claim(path: &Path) -> bool {
    let rdev = dev_of_block(path);
    mounted_at(rdev).is_none() && sys_holders(rdev).is_empty()
}

/// The kernel's name of a block device (loop0, sda1) from its number.
fn sys_name(rdev: u64) -> Option<String> {
    let p = std::fs::read_link(format!(
        "/sys/dev/block/{}:{}",
        libc::major(rdev),
        libc::minor(rdev)
    ))
    .ok()?;
    Some(p.file_name()?.to_string_lossy().into_owned())
}

/// Loop devices backed by `file` that are in use: mounted (for readers:
/// mounted read-write) or claimed. None when there is none.
fn loop_users(file: &File, access: Access, read_live: bool) -> io::Result<Option<String>> {
    if read_live {
        return Ok(None);
    }
    let m = file.metadata()?;
    let Ok(dir) = std::fs::read_dir("/sys/block") else {
        return Ok(None);
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        if !loop_backs(&e.file_name(), &m) {
            continue;
        }
        let Some(rdev) = std::fs::read_to_string(e.path().join("dev"))
            .ok()
            .and_then(|d| parse_devnum(&d))
        else {
            continue;
        };
        if is_own(rdev) || (access == Access::Read && mounted_ro_only(rdev)) {
            continue;
        }
        if let Some(at) = mounted_at(rdev) {
            return Ok(Some(format!("/dev/{name} (backed by it) is {at}")));
        }
        let holders = std::fs::read_dir(e.path().join("holders"))
            .map(|d| d.count())
            .unwrap_or(0);
        let dev_path = PathBuf::from(format!("/dev/{name}"));
        let claimed = holders > 0 || claimed_by_other(&dev_path);
        if claimed {
            return Ok(Some(format!(
                "{} (backed by it) is {}",
                dev_path.display(),
                block_holder(&dev_path)
            )));
        }
    }
    Ok(None)
}
