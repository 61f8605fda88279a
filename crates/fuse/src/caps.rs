//! A requesting process's capabilities, for the few checks the kernel
//! leaves to a FUSE filesystem (an ioctl's: FS_IOC_SETFSLABEL wants
//! CAP_SYS_ADMIN). The request's uid cannot tell: on an idmapped mount it
//! is FUSE_INVALID_UIDGID, and root without the capability is not enough.

pub const CAP_SYS_ADMIN: u32 = 21;

/// Whether process `pid` has capability `cap` in its effective set (its
/// /proc status line CapEff); false when it cannot be read.
pub fn capable(pid: u32, cap: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let hex = s.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
            u64::from_str_radix(hex.trim(), 16).ok()
        })
        .is_some_and(|eff| eff >> cap & 1 == 1)
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
    }
}
