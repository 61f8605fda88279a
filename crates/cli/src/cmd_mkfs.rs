//! `ubtrfs mkfs`: make a btrfs filesystem on image files or devices, with
//! mkfs.btrfs's options, without root.

use crate::CmdResult;
use clap::Args;
use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use ubtrfs_engine::io::claim;
use ubtrfs_engine::io::dev::{BlockDev, FileDev};
use ubtrfs_engine::mkfs::{self, MkfsOptions};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::Timespec;
use ubtrfs_format::CsumType;

#[derive(Args)]
pub struct MkfsArgs {
    /// Overwrite what the device or image holds: without it, any
    /// signature libblkid finds (a filesystem, swap, a RAID or LVM member,
    /// LUKS, a partition table) is refused. A device or image in use is
    /// refused all the same.
    #[arg(short = 'f', long)]
    force: bool,
    /// Print nothing but errors.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Filesystem label.
    #[arg(short = 'L', long, default_value = "")]
    label: String,
    /// Tree block size (4096 to 65536, a power of two; with --mixed the
    /// sectorsize, which is also its default there).
    #[arg(short = 'n', long, value_parser = parse_size)]
    nodesize: Option<u64>,
    /// Data block (sector) size.
    #[arg(short = 's', long, value_parser = parse_size)]
    sectorsize: Option<u64>,
    /// Checksum algorithm: crc32c, xxhash, sha256, blake2.
    #[arg(long = "csum", alias = "checksum", default_value = "crc32c")]
    csum: String,
    /// Metadata profile: single, dup, raid0, raid1, raid1c3, raid1c4, raid10,
    /// raid5, raid6 (default dup; raid1 on several devices; single with
    /// --mixed).
    #[arg(short = 'm', long = "metadata")]
    metadata: Option<String>,
    /// Data profile: single, dup, raid0, raid1, raid1c3, raid1c4, raid10,
    /// raid5, raid6 (default single).
    #[arg(short = 'd', long = "data")]
    data: Option<String>,
    /// Mixed block groups: data and metadata share DATA|METADATA block
    /// groups (for small filesystems). Nodesize equals the sectorsize;
    /// data and metadata profiles must be equal (default single).
    #[arg(short = 'M', long)]
    mixed: bool,
    /// Features, comma separated; ^ turns one off (no-holes, free-space-tree).
    #[arg(short = 'O', long = "features")]
    features: Option<String>,
    /// Filesystem UUID (fixes every other identifier too).
    #[arg(short = 'U', long)]
    uuid: Option<String>,
    /// UUID of the (first) device.
    #[arg(long = "device-uuid")]
    device_uuid: Option<String>,
    /// Size of the filesystem on each device (an image file is grown to it).
    #[arg(short = 'b', long = "byte-count", value_parser = parse_size)]
    byte_count: Option<u64>,
    /// Fill the top-level subvolume from this directory (no root needed).
    #[arg(short = 'r', long = "rootdir", value_name = "DIR")]
    rootdir: Option<PathBuf>,
    /// Owner of the top directory (as mke2fs's root_owner); without it,
    /// the user running mkfs (with --rootdir: DIR's owner).
    #[arg(long = "root-owner", value_name = "UID:GID", value_parser = parse_owner, conflicts_with = "rootdir")]
    root_owner: Option<(u32, u32)>,
    /// Make SUBDIR of the rootdir a subvolume: [rw|ro|default|default-ro:]SUBDIR
    /// (repeatable; "./" escapes a colon in the name).
    #[arg(short = 'u', long = "subvol", value_name = "[TYPE:]SUBDIR")]
    subvol: Vec<String>,
    /// Inode flags for a path of the rootdir: FLAGS:PATH, FLAGS from
    /// nodatacow,nodatasum (inherited below a directory; repeatable).
    #[arg(long = "inode-flags", value_name = "FLAGS:PATH")]
    inode_flags: Vec<String>,
    /// Compress file data: zlib, lzo, zstd, with an optional :LEVEL
    /// (zlib 1-9, zstd 1-15; default 3).
    #[arg(long, value_name = "ALGO[:LEVEL]")]
    compress: Option<String>,
    /// With --rootdir: shrink the image file to the end of its last chunk.
    #[arg(long)]
    shrink: bool,
    /// With --rootdir: share file data with the source (FICLONERANGE)
    /// instead of copying it; DIR and the image file on one filesystem
    /// that clones (btrfs, XFS). Compression is off.
    #[arg(long)]
    reflink: bool,
    /// With --rootdir: threads reading, compressing and checksumming file
    /// data (default: one per CPU; the image is the same for any number).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Print a summary as JSON.
    #[arg(long)]
    json: bool,
    /// Image files or block devices.
    #[arg(required = true)]
    devices: Vec<PathBuf>,
}

/// Sizes as mkfs.btrfs takes them: a number with an optional K/M/G/T/P/E suffix.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_lowercase() {
                'k' => 1 << 10,
                'm' => 1 << 20,
                'g' => 1 << 30,
                't' => 1 << 40,
                'p' => 1 << 50,
                'e' => 1 << 60,
                _ => return Err(format!("unknown size suffix in {s:?}")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("not a size: {s:?}"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size too large: {s:?}"))
}

pub(crate) fn parse_profile(s: &str) -> Result<u64, String> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "single" => 0,
        "dup" => BG_DUP,
        "raid0" => BG_RAID0,
        "raid1" => BG_RAID1,
        "raid1c3" => BG_RAID1C3,
        "raid1c4" => BG_RAID1C4,
        "raid10" => BG_RAID10,
        "raid5" => BG_RAID5,
        "raid6" => BG_RAID6,
        _ => return Err(format!("unknown profile {s:?}")),
    })
}

fn parse_csum(s: &str) -> Result<CsumType, String> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "crc32c" => CsumType::Crc32c,
        "xxhash" | "xxhash64" => CsumType::Xxhash64,
        "sha256" => CsumType::Sha256,
        "blake2" | "blake2b" => CsumType::Blake2b,
        _ => return Err(format!("unknown checksum algorithm {s:?}")),
    })
}

/// `UID:GID`, numbers.
fn parse_owner(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = s
        .split_once(':')
        .ok_or_else(|| format!("{s}: UID:GID (numbers)"))?;
    let n = |x: &str| {
        x.parse::<u32>()
            .map_err(|_| format!("{s}: UID:GID (numbers)"))
    };
    Ok((n(u)?, n(g)?))
}

pub fn parse_uuid(s: &str) -> Result<[u8; 16], String> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("not a UUID: {s:?}"));
    }
    let mut u = [0u8; 16];
    for (i, b) in u.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    Ok(u)
}

/// The time stamped into the image: SOURCE_DATE_EPOCH when set (as
/// reproducible builds expect), else now.
fn mkfs_time() -> Result<Timespec, String> {
    if let Ok(v) = std::env::var("SOURCE_DATE_EPOCH") {
        let sec: i64 = v
            .trim()
            .parse()
            .map_err(|_| format!("SOURCE_DATE_EPOCH={v:?} is not a number of seconds"))?;
        return Ok(Timespec { sec, nsec: 0 });
    }
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Ok(Timespec {
        sec: d.as_secs() as i64,
        nsec: d.subsec_nanos(),
    })
}

/// `[TYPE:]SUBDIR` of --subvol.
fn parse_subvol(s: &str) -> Result<(PathBuf, mkfs::rootdir::SubvolKind), String> {
    use mkfs::rootdir::SubvolKind::*;
    let (kind, path) = match s.split_once(':') {
        Some(("rw", p)) => (Rw, p),
        Some(("ro", p)) => (Ro, p),
        Some(("default", p)) => (Default, p),
        Some(("default-ro", p)) => (DefaultRo, p),
        Some((t, _)) if !s.starts_with("./") => {
            return Err(format!("--subvol {s:?}: unknown type {t:?}"))
        }
        _ => (Rw, s),
    };
    let p = PathBuf::from(path.trim_start_matches("./").trim_end_matches('/'));
    if p.as_os_str().is_empty() || p.is_absolute() || p.components().any(|c| c.as_os_str() == "..")
    {
        return Err(format!("--subvol {s:?}: a directory below the rootdir"));
    }
    Ok((p, kind))
}

/// `FLAGS:PATH` of --inode-flags.
fn parse_inode_flags(s: &str) -> Result<(PathBuf, u64), String> {
    let (flags, path) = s
        .split_once(':')
        .ok_or_else(|| format!("--inode-flags {s:?}: FLAGS:PATH"))?;
    let mut f = 0;
    for fl in flags.split(',') {
        f |= match fl {
            "nodatacow" => mkfs::rootdir::INODE_NODATACOW,
            "nodatasum" => mkfs::rootdir::INODE_NODATASUM,
            _ => return Err(format!("--inode-flags {s:?}: unknown flag {fl:?}")),
        };
    }
    let p = PathBuf::from(path.trim_start_matches("./").trim_end_matches('/'));
    if p.is_absolute() || p.components().any(|c| c.as_os_str() == "..") {
        return Err(format!("--inode-flags {s:?}: a path below the rootdir"));
    }
    Ok((p, f))
}

/// `ALGO[:LEVEL]` of --compress.
fn parse_compress(s: &str) -> Result<(u8, i32), String> {
    let (algo, level) = match s.split_once(':') {
        Some((a, l)) => (
            a,
            Some(
                l.parse::<i32>()
                    .map_err(|_| format!("--compress {s:?}: bad level"))?,
            ),
        ),
        None => (s, None),
    };
    let (code, max) = match algo {
        "zlib" => (COMPRESS_ZLIB, 9),
        "lzo" => (COMPRESS_LZO, 1),
        "zstd" => (COMPRESS_ZSTD, 15),
        "no" | "none" => return Err("--compress none: leave the option out".into()),
        _ => return Err(format!("--compress {s:?}: zlib, lzo or zstd")),
    };
    let level = level.unwrap_or(3).min(max);
    if level < 1 && code != COMPRESS_LZO {
        return Err(format!("--compress {s:?}: level from 1 to {max}"));
    }
    Ok((code, level))
}

fn options(a: &MkfsArgs) -> Result<MkfsOptions, String> {
    // SAFETY: geteuid and getegid have no preconditions.
    let me = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut o = MkfsOptions {
        csum: parse_csum(&a.csum)?,
        label: a.label.clone(),
        time: mkfs_time()?,
        root_owner: a.root_owner.unwrap_or(me),
        ..Default::default()
    };
    if a.label.len() >= 256 {
        return Err("label is longer than 255 bytes".into());
    }
    if let Some(s) = a.sectorsize {
        o.sectorsize = u32::try_from(s).map_err(|_| format!("sectorsize {s}"))?;
    }
    if let Some(n) = a.nodesize {
        o.nodesize = u32::try_from(n).map_err(|_| format!("nodesize {n}"))?;
    } else if a.mixed {
        o.nodesize = o.sectorsize;
    }
    if !o.sectorsize.is_power_of_two() || !(4096..=65536).contains(&o.sectorsize) {
        return Err(format!("invalid sectorsize {}", o.sectorsize));
    }
    if !o.nodesize.is_power_of_two() || o.nodesize < o.sectorsize || o.nodesize > 65536 {
        return Err(format!(
            "invalid nodesize {}: a power of two from the sectorsize ({}) to 65536",
            o.nodesize, o.sectorsize
        ));
    }
    let ndev = a.devices.len();
    o.metadata_profile = match &a.metadata {
        Some(p) => parse_profile(p)?,
        // Mixed: single, as the data default (mkfs.btrfs -M).
        None if a.mixed => 0,
        None if ndev > 1 => BG_RAID1,
        None => BG_DUP,
    };
    o.data_profile = match &a.data {
        Some(p) => parse_profile(p)?,
        None => 0,
    };
    if a.mixed {
        // As mkfs.btrfs: an explicit -n other than the sectorsize, or
        // profiles that differ (one given, the other single by default),
        // are refused rather than adjusted.
        if o.nodesize != o.sectorsize {
            return Err(format!(
                "illegal nodesize {} (not equal to sectorsize {} for mixed block groups)",
                o.nodesize, o.sectorsize
            ));
        }
        if o.metadata_profile != o.data_profile {
            return Err(format!(
                "with mixed block groups data and metadata profiles must be the same (metadata {}, data {})",
                ubtrfs_format::items::profile_name(o.metadata_profile),
                ubtrfs_format::items::profile_name(o.data_profile)
            ));
        }
        o.mixed = true;
    }
    for (what, p) in [("metadata", o.metadata_profile), ("data", o.data_profile)] {
        let need = match p {
            BG_RAID1 | BG_RAID10 | BG_RAID0 | BG_RAID5 => 2,
            BG_RAID1C3 | BG_RAID6 => 3,
            BG_RAID1C4 => 4,
            _ => 1,
        };
        if ndev < need {
            return Err(format!(
                "{what} profile {} needs at least {need} devices, {ndev} given",
                ubtrfs_format::items::profile_name(p)
            ));
        }
    }
    if let Some(f) = &a.features {
        for feat in f.split(',').filter(|s| !s.is_empty()) {
            let (on, name) = match feat.strip_prefix('^') {
                Some(n) => (false, n),
                None => (true, feat),
            };
            match name {
                "no-holes" => o.no_holes = on,
                "free-space-tree" | "fst" => o.free_space_tree = on,
                "extref" | "skinny-metadata" if on => {}
                _ => return Err(format!("feature {feat:?} is not supported")),
            }
        }
    }
    if let Some(u) = &a.uuid {
        o.fsid = Some(parse_uuid(u)?);
    }
    if let Some(u) = &a.device_uuid {
        o.dev_uuid = Some(parse_uuid(u)?);
    }
    Ok(o)
}

/// Room for the files under `dir` (allocated bytes, so sparse files count
/// what they hold) with metadata and chunk slack: the size mkfs gives a
/// new image file for --rootdir when -b is not given.
fn estimate_size(dir: &std::path::Path) -> Result<u64, String> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut entries = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        for e in rd {
            let e = e.map_err(|e| format!("{}: {e}", d.display()))?;
            let m = e
                .path()
                .symlink_metadata()
                .map_err(|x| format!("{}: {x}", e.path().display()))?;
            entries += 1;
            total += (m.blocks() * 512).min(m.len().next_multiple_of(4096));
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    // Data, 2 KiB of (DUP) metadata per entry, the first metadata and
    // system chunks (DUP: 2 x 256 MiB and 2 x 32 MiB), and room for the
    // last, partly used, data chunk.
    Ok(total + total / 8 + entries * 2048 + (576 << 20) + (256 << 20))
}

/// For --reflink: the filesystem (st_dev) DIR and every image file are
/// on, refused before anything is written when they are not one, or when
/// a target is not a regular file.
fn reflink_dev(dir: &std::path::Path, devices: &[PathBuf]) -> Result<u64, String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .dev();
    for p in devices {
        let at = match std::fs::metadata(p) {
            Ok(m) if m.is_file() => m.dev(),
            Ok(_) => {
                return Err(format!(
                "--reflink: {} is not a regular file (data can only be shared into an image file)",
                p.display()
            ))
            }
            // A new image file: made in its directory.
            Err(_) => {
                let parent = match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                std::fs::metadata(&parent)
                    .map_err(|e| format!("{}: {e}", parent.display()))?
                    .dev()
            }
        };
        if at != dev {
            return Err(format!(
                "--reflink: {} and {} are not on the same filesystem (data can only be shared within one)",
                dir.display(),
                p.display()
            ));
        }
    }
    Ok(dev)
}

/// Opens (or creates, for an image file) a target device with the one
/// writer's claim, refuses one that holds a known signature unless
/// `force` (as mkfs.btrfs, through libblkid), then grows an image file to
/// `size` when given. Nothing is written before both checks.
/// The device at `path`, claimed for writing and probed: an image file
/// grown to `size`; seen as its first `limit` bytes (-b). A file made
/// here is added to `made`.
pub(crate) fn open_target(
    path: &PathBuf,
    size: Option<u64>,
    limit: Option<u64>,
    force: bool,
    made: &mut Vec<PathBuf>,
) -> Result<Arc<dyn BlockDev>, String> {
    let err = |op: &str, e: std::io::Error| format!("{}: {op}: {e}", path.display());
    if !path.exists() {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| err("create", e))?;
        made.push(path.clone());
    }
    let f = claim::open_claimed(path, claim::Access::Write).map_err(|e| err("open", e))?;
    if !force {
        if let Some(what) = mkfs::probe::signature(path)? {
            return Err(format!(
                "{}: appears to contain {what}; use -f to overwrite",
                path.display()
            ));
        }
    }
    let meta = f.metadata().map_err(|e| err("stat", e))?;
    if meta.is_file() {
        if let Some(s) = size {
            if meta.len() < s {
                f.set_len(s).map_err(|e| err("grow", e))?;
            }
        }
    }
    let dev = FileDev::from_claimed(f, true).map_err(|e| err("open", e))?;
    // -b: the filesystem's size on this device, as mkfs.btrfs takes it.
    Ok(Arc::new(match limit {
        Some(s) if s > dev.size() => {
            return Err(format!(
                "{}: -b {s} is larger than the device ({} bytes)",
                path.display(),
                dev.size()
            ))
        }
        Some(s) => dev.limited_to(s),
        None => dev,
    }))
}

/// A spinner with counts on stderr when it is a terminal.
fn spinner(quiet: bool) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let b = indicatif::ProgressBar::new_spinner();
    b.enable_steady_tick(std::time::Duration::from_millis(200));
    Some(b)
}

pub fn run(a: MkfsArgs) -> CmdResult {
    let o = options(&a)?;
    // Before any device is touched (as mkfs.btrfs does).
    if let Some(dir) = &a.rootdir {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(format!("{}: not a directory", dir.display()).into()),
            Err(e) => return Err(format!("{}: {e}", dir.display()).into()),
        }
    }
    if a.rootdir.is_none()
        && (!a.subvol.is_empty() || !a.inode_flags.is_empty() || a.compress.is_some())
    {
        return Err("--subvol, --inode-flags and --compress need --rootdir".into());
    }
    if a.reflink && a.rootdir.is_none() {
        return Err("--reflink needs --rootdir".into());
    }
    let reflink = match (&a.rootdir, a.reflink) {
        (Some(dir), true) => Some(reflink_dev(dir, &a.devices)?),
        _ => None,
    };
    if reflink.is_some() && o.data_profile & (BG_RAID5 | BG_RAID6) != 0 {
        return Err(
            "--reflink cannot share data into RAID5/6 block groups (their parity is computed from the data written); leave out --reflink"
                .into(),
        );
    }
    if reflink.is_some() && a.compress.is_some() && !a.quiet {
        eprintln!("warning: --compress is ignored with --reflink (as mkfs.btrfs: shared data is stored as it is)");
    }
    if a.shrink && (a.rootdir.is_none() || a.devices.len() != 1) {
        return Err("--shrink needs --rootdir and one device".into());
    }
    let mut o = o;
    o.small_chunks = a.shrink;
    // A new image file for a rootdir is sized from the source when no
    // size is given.
    let size = match (a.byte_count, &a.rootdir) {
        (None, Some(dir)) => Some(estimate_size(dir)?.max(mkfs::MIN_DEVICE_SIZE)),
        (b, _) => b,
    };
    // An image file that is not there is made of the size asked (or, for
    // a rootdir, the size its files need), and removed again when mkfs
    // fails.
    if size.is_none() {
        if let Some(p) = a.devices.iter().find(|p| p.symlink_metadata().is_err()) {
            return Err(format!(
                "{}: no such file; give -b SIZE to make an image file of that size",
                p.display()
            )
            .into());
        }
    }
    let mut made = Made(Vec::new());
    let res = make(&a, o, size, reflink, &mut made.0);
    if res.is_ok() {
        made.0.clear();
    }
    res
}

/// Image files this mkfs made, removed when it fails (dropped unemptied).
struct Made(Vec<PathBuf>);

impl Drop for Made {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// mkfs after its arguments are checked: the devices opened (image files
/// made), the trees built and filled, the summary printed.
fn make(
    a: &MkfsArgs,
    o: MkfsOptions,
    size: Option<u64>,
    reflink: Option<u64>,
    made: &mut Vec<PathBuf>,
) -> CmdResult {
    let mut devs = Vec::new();
    for p in &a.devices {
        devs.push((
            p.clone(),
            open_target(p, size, a.byte_count, a.force, made)?,
        ));
    }
    let mut t = mkfs::build(devs, &o)?;
    let mut stats = None;
    if let Some(dir) = &a.rootdir {
        let ro = mkfs::rootdir::RootdirOptions {
            dir: dir.clone(),
            subvols: a
                .subvol
                .iter()
                .map(|s| parse_subvol(s))
                .collect::<Result<_, _>>()?,
            inode_flags: a
                .inode_flags
                .iter()
                .map(|s| parse_inode_flags(s))
                .collect::<Result<_, _>>()?,
            compress: a.compress.as_deref().map(parse_compress).transpose()?,
            uuid_seed: o.fsid,
            clamp_time: std::env::var_os("SOURCE_DATE_EPOCH").map(|_| o.time),
            now: o.time,
            threads: a.threads.unwrap_or(0),
            reflink,
        };
        let bar = spinner(a.quiet);
        let mut tick = |s: &mkfs::rootdir::Stats| {
            if let Some(b) = &bar {
                b.set_message(format!("{} inodes, {} MiB", s.inodes, s.data_bytes >> 20));
            }
        };
        stats = Some(mkfs::rootdir::populate(&mut t, &ro, &mut tick)?);
        if let Some(b) = bar {
            b.finish_and_clear();
        }
    }
    t.commit()?;
    if a.shrink {
        let end = t.shrink_device(1)?;
        t.commit()?;
        let f = OpenOptions::new().write(true).open(&a.devices[0])?;
        if f.metadata()?.is_file() {
            f.set_len(end)?;
        }
    }
    let sb = &t.info.sb;
    let fsid = ubtrfs_format::bytes::format_uuid(&sb.fsid);
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "uuid": fsid,
                "label": a.label,
                "nodesize": o.nodesize,
                "sectorsize": o.sectorsize,
                "csum": o.csum.name(),
                "devices": a.devices,
                "total_bytes": sb.total_bytes,
                "generation": sb.generation,
                "mixed": o.mixed,
                "root_owner": a.rootdir.is_none().then(|| format!("{}:{}", o.root_owner.0, o.root_owner.1)),
                "inodes": stats.map(|s| s.inodes),
                "data_bytes": stats.map(|s| s.data_bytes),
            })
        );
    } else if !a.quiet {
        println!(
            "Label:              {}",
            if a.label.is_empty() {
                "(null)"
            } else {
                &a.label
            }
        );
        println!("UUID:               {fsid}");
        println!("Node size:          {}", o.nodesize);
        println!("Sector size:        {}", o.sectorsize);
        println!("Filesystem size:    {}", sb.total_bytes);
        println!("Checksum:           {}", o.csum.name());
        if a.rootdir.is_none() {
            println!(
                "Top directory:      owned by {}:{}{}",
                o.root_owner.0,
                o.root_owner.1,
                if a.root_owner.is_none() {
                    " (the user running mkfs; --root-owner to choose)"
                } else {
                    ""
                }
            );
        }
        if o.mixed {
            println!(
                "Profiles:           data+metadata {} (mixed block groups)",
                ubtrfs_format::items::profile_name(o.data_profile)
            );
        } else {
            println!(
                "Profiles:           metadata {}, data {}",
                ubtrfs_format::items::profile_name(o.metadata_profile),
                ubtrfs_format::items::profile_name(o.data_profile)
            );
        }
        for p in &a.devices {
            println!("Device:             {}", p.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
