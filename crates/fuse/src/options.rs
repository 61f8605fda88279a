//! `-o` mount options: what `ubtrfs mount -o ...` and `mount -t fuse.ubtrfs
//! -o ...` accept.

use std::path::PathBuf;

/// Options of one mount, parsed from `-o` strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountOptions {
    /// Mount this subvolume (path from the top level) as the root.
    pub subvol: Option<Vec<u8>>,
    /// Mount the subvolume with this id as the root.
    pub subvolid: Option<u64>,
    /// Let every user access the mount (FUSE `allow_other`).
    pub allow_other: bool,
    /// Let root access the mount too (FUSE `allow_root`).
    pub allow_root: bool,
    /// Threads serving requests (`threads=N`); by default
    /// [`default_threads`] on the read-only mount and
    /// [`RW_DEFAULT_THREADS`] on the read-write one.
    pub threads: Option<usize>,
    /// Where log lines go when running in the background (else syslog).
    pub log_file: Option<PathBuf>,
    /// Further devices of a multi-device filesystem (`device=PATH`).
    pub devices: Vec<PathBuf>,
    /// Name shown as the mount's source.
    pub fsname: Option<String>,
    /// Attribute and entry cache timeout in seconds.
    pub timeout_secs: u64,
    /// Kernel flags passed through: nodev, nosuid, noexec, noatime, ...
    pub kernel_flags: Vec<String>,
    /// `rw` or `ro` as asked (the last counts); None: read-write when the
    /// image can be written and the writer takes it, else read-only.
    pub rw: Option<bool>,
    /// How the read-write mount writes data: compress=, compress-force=,
    /// nodatacow, nodatasum, commit=, max_inline=.
    pub write: ubtrfs_engine::rwfs::RwOptions,
    /// `user_subvol_rm_allowed`: users without CAP_SYS_ADMIN may delete
    /// subvolumes they could remove as directories (the kernel's option).
    pub user_subvol_rm_allowed: bool,
    /// POSIX ACLs on the read-write mount (`acl`, the default, as the
    /// kernel's btrfs; `noacl`).
    pub acl: bool,
    /// Readahead window of the mount in KiB (set when mounted as root).
    pub readahead_kb: u32,
    /// FUSE over io_uring: `uring` requires it, `nouring` refuses it; by
    /// default it is used when the kernel offers it
    /// (/sys/module/fuse/parameters/enable_uring is Y).
    pub uring: Uring,
    /// When reads move atime: `noatime`, `relatime` (the default),
    /// `strictatime`; `nodiratime` for directories.
    pub atime: crate::rw::Atime,
    /// `nologreplay` (also `norecovery`, `rescue=nologreplay`, as the
    /// kernel's): a read-only mount shows the last commit, not what an
    /// unreplayed log tree adds.
    pub nologreplay: bool,
    /// `remount`: change the flags of the mount on the mount point
    /// (`ro`, `rw`, `noatime`, ...) rather than mount.
    pub remount: bool,
    /// Root's read-write mount is a block-device FUSE mount (fuseblk) over
    /// a loop device it attaches (`blkdev`, the default;
    /// `noblkdev`: a plain FUSE mount, whose umount(2) returns before the
    /// last commit). See [`crate::loopdev`].
    pub blkdev: bool,
}

/// Which FUSE transport to ask the kernel for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Uring {
    /// io_uring when the kernel offers it, /dev/fuse otherwise.
    #[default]
    Auto,
    /// io_uring or fail.
    On,
    /// /dev/fuse.
    Off,
}

/// Request threads of the read-write mount by default. Every request
/// that changes the filesystem takes one lock, but fsyncs queued behind it
/// share one log sync (the mount's fsync grouping), which needs threads to
/// queue on (bench/rw.sh's fsync experiment with 4 jobs measures it).
pub const RW_DEFAULT_THREADS: usize = 8;

/// Default number of request threads of the read-only mount: enough that
/// a request waiting on the disk does not hold up the others.
pub fn default_threads() -> usize {
    let n = std::thread::available_parallelism().map_or(2, |n| n.get());
    (2 * n).clamp(4, 16)
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            subvol: None,
            subvolid: None,
            allow_other: false,
            allow_root: false,
            threads: None,
            log_file: None,
            devices: Vec::new(),
            fsname: None,
            timeout_secs: 86400,
            kernel_flags: Vec::new(),
            rw: None,
            readahead_kb: 4096,
            uring: Uring::Auto,
            blkdev: true,
            atime: Default::default(),
            nologreplay: false,
            remount: false,
            write: Default::default(),
            acl: true,
            user_subvol_rm_allowed: false,
        }
    }
}

/// Options that only matter to mount(8), fstab or other helpers.
const IGNORED: &[&str] = &[
    "space_cache",
    "ssd",
    "nossd",
    "discard",
    "nodiscard",
    "autodefrag",
    "noautodefrag",
    "defaults",
    "auto",
    "noauto",
    "user",
    "users",
    "nouser",
    "owner",
    "group",
    "nofail",
    "_netdev",
    "exec",
    "async",
    // atime updates reach the disk at the next commit in any case.
    "lazytime",
    "nolazytime",
    "default_permissions",
];

/// Flags handed to the kernel as they are.
const KERNEL_FLAGS: &[&str] = &[
    "nodev",
    "dev",
    "nosuid",
    "suid",
    "noexec",
    "noatime",
    "nodiratime",
    "strictatime",
    "sync",
    "dirsync",
];

/// The kernel flags with a mount(2) bit; their opposites (dev, suid,
/// atime, ...) are the bit's absence.
pub const MS_FLAGS: [(&str, libc::c_ulong); 8] = [
    ("nodev", libc::MS_NODEV),
    ("nosuid", libc::MS_NOSUID),
    ("noexec", libc::MS_NOEXEC),
    ("noatime", libc::MS_NOATIME),
    ("nodiratime", libc::MS_NODIRATIME),
    ("strictatime", libc::MS_STRICTATIME),
    ("sync", libc::MS_SYNCHRONOUS),
    ("dirsync", libc::MS_DIRSYNC),
];

/// `compress=ALGO[:LEVEL]` as the kernel takes it (no, none: off).
fn parse_compress(v: &str) -> Result<Option<(u8, i32)>, String> {
    use ubtrfs_format::consts::{COMPRESS_LZO, COMPRESS_ZLIB, COMPRESS_ZSTD};
    let (algo, level) = match v.split_once(':') {
        Some((a, l)) => (
            a,
            l.parse::<i32>()
                .map_err(|_| format!("compress={v}: bad level"))?,
        ),
        None => (v, 0),
    };
    let (code, max) = match algo {
        "no" | "none" => return Ok(None),
        "zlib" => (COMPRESS_ZLIB, 9),
        "lzo" => (COMPRESS_LZO, 0),
        "zstd" => (COMPRESS_ZSTD, 15),
        _ => {
            return Err(format!(
                "compress={v}: unknown algorithm (zlib, lzo, zstd, no)"
            ))
        }
    };
    let ok = (0..=max).contains(&level) || (algo == "zstd" && (-15..0).contains(&level));
    if !ok {
        return Err(format!("compress={v}: level out of range for {algo}"));
    }
    Ok(Some((code, level)))
}

/// A size in bytes with an optional k/m/g suffix.
fn parse_size(v: &str) -> Option<u64> {
    let (num, mult) = match v.chars().last()? {
        'k' | 'K' => (&v[..v.len() - 1], 1 << 10),
        'm' | 'M' => (&v[..v.len() - 1], 1 << 20),
        'g' | 'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

impl MountOptions {
    /// Adds the comma-separated options of one `-o` argument.
    pub fn parse_into(&mut self, s: &str) -> Result<(), String> {
        for opt in s.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            fn need<'a>(key: &str, v: Option<&'a str>) -> Result<&'a str, String> {
                v.filter(|v| !v.is_empty())
                    .ok_or_else(|| format!("mount option {key} needs a value ({key}=...)"))
            }
            match key {
                "subvol" => {
                    let v = need(key, value)?;
                    self.subvol = Some(v.trim_start_matches('/').as_bytes().to_vec());
                }
                "subvolid" => {
                    let v = need(key, value)?;
                    self.subvolid = Some(
                        v.parse()
                            .map_err(|_| format!("subvolid={v}: not a number"))?,
                    );
                }
                "allow_other" => self.allow_other = true,
                "allow_root" => self.allow_root = true,
                "threads" => {
                    let v = need(key, value)?;
                    let n: usize = v
                        .parse()
                        .map_err(|_| format!("threads={v}: not a number"))?;
                    if !(1..=256).contains(&n) {
                        return Err(format!("threads={v}: must be 1 to 256"));
                    }
                    self.threads = Some(n);
                }
                "log" | "logfile" => self.log_file = Some(PathBuf::from(need(key, value)?)),
                "device" => self.devices.push(PathBuf::from(need(key, value)?)),
                "fsname" => self.fsname = Some(need(key, value)?.to_string()),
                "timeout" => {
                    let v = need(key, value)?;
                    self.timeout_secs = v
                        .parse()
                        .map_err(|_| format!("timeout={v}: not a number of seconds"))?;
                }
                "remount" if value.is_none() => self.remount = true,
                "nologreplay" | "norecovery" if value.is_none() => self.nologreplay = true,
                "rescue" => match need(key, value)? {
                    "nologreplay" => self.nologreplay = true,
                    v => return Err(format!("rescue={v}: only rescue=nologreplay is supported")),
                },
                "rw" => self.rw = Some(true),
                "ro" => self.rw = Some(false),
                "compress" | "compress-force" => {
                    let v = value.unwrap_or("zlib");
                    self.write.compress = parse_compress(v)?;
                    self.write.compress_force = key == "compress-force";
                }
                "user_subvol_rm_allowed" if value.is_none() => self.user_subvol_rm_allowed = true,
                "acl" => self.acl = true,
                "noacl" => self.acl = false,
                "nodatacow" => {
                    self.write.nodatacow = true;
                    self.write.nodatasum = true;
                }
                "datacow" => self.write.nodatacow = false,
                "nodatasum" => self.write.nodatasum = true,
                "notreelog" => self.write.notreelog = true,
                "treelog" => self.write.notreelog = false,
                "datasum" => {
                    self.write.nodatasum = false;
                    self.write.nodatacow = false;
                }
                "commit" => {
                    let v = need(key, value)?;
                    self.write.commit_secs = v
                        .parse()
                        .ok()
                        .filter(|&n| n > 0 && n <= 300)
                        .ok_or_else(|| format!("commit={v}: a number of seconds, 1 to 300"))?;
                }
                "max_inline" => {
                    let v = need(key, value)?;
                    self.write.max_inline =
                        parse_size(v).ok_or_else(|| format!("max_inline={v}: not a size"))?;
                }
                "uring" if value.is_none() => self.uring = Uring::On,
                "nouring" if value.is_none() => self.uring = Uring::Off,
                "blkdev" if value.is_none() => self.blkdev = true,
                "noblkdev" if value.is_none() => self.blkdev = false,
                "readahead_kb" => {
                    let v = need(key, value)?;
                    self.readahead_kb = v
                        .parse()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| format!("readahead_kb={v}: not a positive number"))?;
                }
                "atime" | "relatime" | "noatime" | "strictatime" | "norelatime"
                    if value.is_none() =>
                {
                    use ubtrfs_engine::rwfs::attr::AtimePolicy;
                    self.atime.files = match key {
                        "noatime" => AtimePolicy::Never,
                        "strictatime" | "norelatime" => AtimePolicy::Strict,
                        _ => AtimePolicy::Relative,
                    };
                    // The last of them counts, for the kernel too.
                    self.kernel_flags
                        .retain(|f| f != "noatime" && f != "strictatime");
                    if matches!(key, "noatime" | "strictatime") {
                        self.kernel_flags.push(key.to_string());
                    }
                }
                "nodiratime" | "diratime" if value.is_none() => {
                    self.atime.dirs = key == "diratime";
                    self.kernel_flags.retain(|f| f != "nodiratime");
                    if key == "nodiratime" {
                        self.kernel_flags.push(key.to_string());
                    }
                }
                k if KERNEL_FLAGS.contains(&k) && value.is_none() => {
                    if !self.kernel_flags.iter().any(|f| f == k) {
                        self.kernel_flags.push(k.to_string());
                    }
                }
                k if IGNORED.contains(&k) => {}
                // fstab comments and options for other helpers.
                k if k.starts_with("x-") || k == "comment" => {}
                // mount(8) may pass the helper type or source along.
                "subtype" | "source" | "uid" | "gid" | "user_id" | "group_id" | "context"
                | "fscontext" | "defcontext" | "rootcontext" => {}
                _ => return Err(format!("unknown mount option {opt:?}")),
            }
        }
        Ok(())
    }

    /// The mount(2) bits of the kernel flags asked for.
    pub fn ms_flags(&self) -> libc::c_ulong {
        MS_FLAGS
            .iter()
            .filter(|(name, _)| self.kernel_flags.iter().any(|k| k == name))
            .fold(0, |a, (_, bit)| a | bit)
    }

    /// Parses a list of `-o` arguments.
    pub fn parse(args: &[String]) -> Result<MountOptions, String> {
        let mut o = MountOptions::default();
        for a in args {
            o.parse_into(a)?;
        }
        if o.nologreplay && o.rw != Some(false) && !o.remount {
            return Err("nologreplay must be used with the ro mount option".into());
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_options() {
        let o = MountOptions::parse(&[
            "ro,subvol=/snaps/a,allow_other".into(),
            "threads=3,nodev,x-systemd.automount,device=/dev/loop1".into(),
        ])
        .unwrap();
        assert_eq!(o.subvol.as_deref(), Some(&b"snaps/a"[..]));
        assert!(o.allow_other);
        assert_eq!(o.threads, Some(3));
        assert_eq!(o.kernel_flags, vec!["nodev".to_string()]);
        assert_eq!(o.devices, vec![PathBuf::from("/dev/loop1")]);
        assert_eq!(o.rw, Some(false));
    }

    #[test]
    fn atime_options_take_the_last() {
        use ubtrfs_engine::rwfs::attr::AtimePolicy;
        let o = MountOptions::parse(&[]).unwrap();
        assert_eq!(o.atime.files, AtimePolicy::Relative);
        assert!(o.atime.dirs);
        let o = MountOptions::parse(&["noatime,nodiratime".into()]).unwrap();
        assert_eq!(o.atime.files, AtimePolicy::Never);
        assert!(!o.atime.dirs);
        assert_eq!(o.kernel_flags, ["noatime", "nodiratime"]);
        let o = MountOptions::parse(&["noatime,strictatime,lazytime".into()]).unwrap();
        assert_eq!(o.atime.files, AtimePolicy::Strict);
        assert_eq!(o.kernel_flags, ["strictatime"]);
        let o = MountOptions::parse(&["strictatime,relatime".into()]).unwrap();
        assert_eq!(o.atime.files, AtimePolicy::Relative);
        assert!(o.kernel_flags.is_empty());
    }

    #[test]
    fn nologreplay_needs_ro() {
        for o in ["nologreplay", "norecovery", "rescue=nologreplay"] {
            assert!(MountOptions::parse(&[o.into()]).is_err(), "{o}");
            let ro = MountOptions::parse(&[format!("ro,{o}")]).unwrap();
            assert!(ro.nologreplay, "{o}");
        }
        assert!(MountOptions::parse(&["ro,rescue=all".into()]).is_err());
    }

    #[test]
    fn rejects_bad_options() {
        assert!(MountOptions::parse(&["subvolid=abc".into()]).is_err());
        assert!(MountOptions::parse(&["frobnicate".into()]).is_err());
        assert!(MountOptions::parse(&["subvol=".into()]).is_err());
        assert!(MountOptions::parse(&["threads=0".into()]).is_err());
    }

    #[test]
    fn rw_is_noted() {
        let o = MountOptions::parse(&["rw".into()]).unwrap();
        assert_eq!(o.rw, Some(true));
        let o = MountOptions::parse(&["rw,ro".into()]).unwrap();
        assert_eq!(o.rw, Some(false));
        assert_eq!(MountOptions::parse(&[]).unwrap().rw, None);
    }

    #[test]
    fn write_options_parse_as_the_kernel_takes_them() {
        let o =
            MountOptions::parse(&["rw,compress=zstd:3,commit=5,nodatacow,max_inline=1k".into()])
                .unwrap();
        assert_eq!(o.write.compress, Some((3, 3)));
        assert!(!o.write.compress_force);
        assert!(o.write.nodatacow && o.write.nodatasum);
        assert_eq!(o.write.commit_secs, 5);
        assert_eq!(o.write.max_inline, 1024);
        let o = MountOptions::parse(&["compress-force=lzo".into()]).unwrap();
        assert_eq!(o.write.compress, Some((2, 0)));
        assert!(o.write.compress_force);
        assert!(MountOptions::parse(&["compress=lz4".into()]).is_err());
        assert!(MountOptions::parse(&["compress=zlib:12".into()]).is_err());
        assert!(MountOptions::parse(&["commit=0".into()]).is_err());
    }
}
