//! A requesting process's capabilities and groups, for the few checks the
//! kernel leaves to a FUSE filesystem: an ioctl's (FS_IOC_SETFSLABEL wants
//! CAP_SYS_ADMIN), and which set-ID bits a change of a file's data drops
//! (CAP_FSETID, the file's group). The request's uid cannot tell: on an
//! idmapped mount it is FUSE_INVALID_UIDGID, and root without the
//! capability is not enough.

pub const CAP_DAC_OVERRIDE: u32 = 1;
pub const CAP_DAC_READ_SEARCH: u32 = 2;
pub const CAP_FOWNER: u32 = 3;
pub const CAP_FSETID: u32 = 4;
pub const CAP_SYS_ADMIN: u32 = 21;

/// A line of /proc/PID/status after `key`.
fn status_line(pid: u32, key: &str) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_string())
}

/// Whether process `pid` has capability `cap` in its effective set (its
/// /proc status line CapEff); false when it cannot be read.
pub fn capable(pid: u32, cap: u32) -> bool {
    status_line(pid, "CapEff:")
        .and_then(|hex| u64::from_str_radix(&hex, 16).ok())
        .is_some_and(|eff| eff >> cap & 1 == 1)
}

/// Whether process `pid` is known to lack capability `cap`: false when
/// its status cannot be read (pid 0: the kernel's own writeback; a
/// process gone), where dropping what the caller may keep is worse than
/// keeping it.
pub fn lacks(pid: u32, cap: u32) -> bool {
    status_line(pid, "CapEff:")
        .and_then(|hex| u64::from_str_radix(&hex, 16).ok())
        .is_some_and(|eff| eff >> cap & 1 == 0)
}

/// Process `pid`'s filesystem uid and gid (the fourth of its /proc
/// status "Uid:" and "Gid:"): who an ioctl's caller is, which the
/// request's own ids do not say (the kernel sends them only for requests
/// that make inodes when the mount allows idmapping).
pub fn fs_ids(pid: u32) -> Option<(u32, u32)> {
    let fourth = |key: &str| {
        status_line(pid, key)?
            .split_whitespace()
            .nth(3)?
            .parse::<u32>()
            .ok()
    };
    Some((fourth("Uid:")?, fourth("Gid:")?))
}

/// Process `pid`'s umask (its /proc status line Umask), for what an
/// ioctl makes (a subvolume's top directory, as the kernel's
/// inode_init_owner applies current_umask).
pub fn umask(pid: u32) -> Option<u32> {
    status_line(pid, "Umask:").and_then(|o| u32::from_str_radix(&o, 8).ok())
}

/// Whether process `pid` is in group `gid`: its filesystem gid (the
/// fourth of its /proc status "Gid:") or a supplementary one.
pub fn in_group(pid: u32, gid: u32) -> bool {
    fs_ids(pid).is_some_and(|(_, g)| g == gid)
        || status_line(pid, "Groups:")
            .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_what_its_status_says() {
        let me = std::process::id();
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert_eq!(capable(me, CAP_SYS_ADMIN), root);
        assert!(!capable(u32::MAX, CAP_SYS_ADMIN));
        assert_eq!(lacks(me, CAP_SYS_ADMIN), !root);
        assert!(!lacks(u32::MAX, CAP_SYS_ADMIN));
        // SAFETY: getegid has no preconditions.
        let gid = unsafe { libc::getegid() };
        assert!(in_group(me, gid));
        assert!(!in_group(u32::MAX, gid));
        // SAFETY: as above.
        assert_eq!(fs_ids(me), Some((unsafe { libc::geteuid() }, gid)));
        // SAFETY: umask has no preconditions; set back at once.
        let mine = unsafe { libc::umask(0o027) };
        assert_eq!(umask(me), Some(0o027));
        unsafe { libc::umask(mine) };
    }
}
