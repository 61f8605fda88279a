//! `ubtrfs filesystem df|usage|show|sync|label|resize`: on an unmounted image
//! (the reader, or a transaction for a new label) or on a path inside a
//! live mount (btrfs's ioctls, served by a ubtrfs mount and by the
//! kernel's btrfs). What df, usage and show print is btrfs-progs' text
//! (cmds/filesystem.c, cmds/filesystem-usage.c), from one set of figures
//! ([`Figures`]) that an image and a mount both give.

use crate::mounted::Target;
use crate::CmdResult;
use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use ubtrfs_engine::fs::space::{space_info, SpaceInfo};
use ubtrfs_engine::fs::usage::{
    chunk_uses, global_reserve, ncopies, progs_order, statfs_avail, ChunkUse,
};
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::bytes::format_uuid;
use ubtrfs_format::consts::*;
use ubtrfs_format::ioctl::SPACE_INFO_GLOBAL_RSV;
use ubtrfs_format::items::{block_group_kind, profile_name};

#[derive(Subcommand)]
pub enum FilesystemCmd {
    /// Space by kind and profile, as `btrfs filesystem df` prints it
    /// (the global reserve is the size the kernel would reserve).
    Df {
        /// The image, or a path inside a mount.
        target: PathBuf,
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
    },
    /// Space overall, per kind and profile, and per device, as `btrfs
    /// filesystem usage` prints it.
    Usage {
        /// The image, or a path inside a mount.
        target: PathBuf,
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
    },
    /// The label, UUID and devices, as `btrfs filesystem show` prints
    /// them.
    Show {
        /// The image, or a path inside a mount.
        target: PathBuf,
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
    },
    /// Resize a device of an unmounted image: `resize [DEVID:][+|-]SIZE|max
    /// IMAGE` (SIZE with k, m, g, t suffixes; max: the device's size). An
    /// image file grows to the new size, and is cut to it after a shrink.
    /// Shrinking moves the chunks past the new end below it first (their
    /// logical addresses stay: sharing, checksums and compression are
    /// kept), each in a transaction of its own, so a killed resize run
    /// again goes on; a size that cannot hold them is refused with the
    /// least that can.
    Resize {
        /// [DEVID:][+|-]SIZE[kKmMgGtT] or [DEVID:]max (devid 1 by default).
        #[arg(allow_hyphen_values = true)]
        amount: String,
        /// The image.
        image: PathBuf,
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
    },
    /// Write everything back and commit (a path inside a mount).
    Sync { path: PathBuf },
    /// Print the label, or set it to NEW.
    Label {
        /// The image, or a path inside a mount.
        target: PathBuf,
        new: Option<String>,
        #[arg(short = 'd', long = "device", value_name = "PATH")]
        devices: Vec<PathBuf>,
    },
}

/// A size as btrfs-progs' pretty_size prints it: two decimals of the
/// largest binary unit it reaches ("0.00B", "16.00KiB").
pub fn pretty_size(n: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{:.2}B", n as f64);
    }
    let (mut size, mut last, mut divs) = (n, n, 0);
    while size >= 1024 {
        last = size;
        size /= 1024;
        divs += 1;
    }
    format!("{:.2}{}", last as f64 / 1024.0, UNITS[divs])
}

fn global_reserve_slot(size: u64) -> SpaceInfo {
    SpaceInfo {
        flags: SPACE_INFO_GLOBAL_RSV,
        total_bytes: size,
        used_bytes: 0,
    }
}

/// A resize's amount: `[DEVID:][+|-]SIZE` or `[DEVID:]max`.
#[derive(Debug, PartialEq, Eq)]
struct Amount {
    devid: u64,
    /// +1 grow by, -1 shrink by, 0 set to.
    sign: i8,
    /// None: max.
    bytes: Option<u64>,
}

fn parse_amount(s: &str) -> Result<Amount, String> {
    let bad = || format!("{s:?}: [DEVID:][+|-]SIZE[kKmMgGtT] or [DEVID:]max");
    let (devid, rest) = match s.split_once(':') {
        Some((d, r)) => (d.parse::<u64>().map_err(|_| bad())?, r),
        None => (1, s),
    };
    if rest == "max" {
        return Ok(Amount {
            devid,
            sign: 0,
            bytes: None,
        });
    }
    let (sign, size) = match rest.as_bytes().first() {
        Some(b'+') => (1, &rest[1..]),
        Some(b'-') => (-1, &rest[1..]),
        _ => (0, rest),
    };
    let bytes = crate::cmd_mkfs::parse_size(size).map_err(|_| bad())?;
    Ok(Amount {
        devid,
        sign,
        bytes: Some(bytes),
    })
}

/// `filesystem resize`: the device's new size worked out from what the
/// image says now, the file grown first when it must, the transaction
/// committed, the file cut after a shrink.
fn resize(
    amount: &str,
    image: PathBuf,
    devices: Vec<PathBuf>,
) -> Result<(), Box<dyn std::error::Error>> {
    let a = parse_amount(amount)?;
    let mut all = vec![image];
    all.extend(devices);
    let mut t = Trans::open(&all, 64 << 20)?;
    let Some(di) = t.dev_items().get(&a.devid).copied() else {
        return Err(format!("devid {}: no such device in {}", a.devid, all[0].display()).into());
    };
    let path = t
        .info
        .devices
        .get(&a.devid)
        .map(|d| d.path.clone())
        .ok_or_else(|| format!("devid {}: missing (give it with -d)", a.devid))?;
    let old = di.total_bytes;
    let new = match (a.sign, a.bytes) {
        (_, None) => device_size(&path),
        (0, Some(b)) => b,
        (1, Some(b)) => old.checked_add(b).ok_or("size overflows")?,
        (_, Some(b)) => old
            .checked_sub(b)
            .ok_or_else(|| format!("devid {}: {old} bytes, not {b} to take", a.devid))?,
    };
    let is_file = std::fs::metadata(&path)?.is_file();
    if is_file && new > device_size(&path) {
        // The file grows before the transaction sees the device: reopen
        // it so that its size is the new one.
        drop(t);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)?
            .set_len(new)?;
        t = Trans::open(&all, 64 << 20)?;
    }
    let ss = t.sectorsize() as u64;
    t.check_device_size(a.devid, new / ss * ss)?;
    if new / ss * ss < t.device_in_use(a.devid) {
        // Chunks past the new end move below it first, each committed.
        // Empty block groups on the device go rather than move (as the
        // kernel's cleaner removes them); nothing is written unless the
        // plan fits.
        t.limit_device(a.devid, Some(new));
        let devid = a.devid;
        t.remove_empty_chunks(|_, c| c.stripes.iter().any(|s| s.devid == devid))?;
        let moves = match t.plan_shrink(a.devid, new) {
            Ok(m) => m,
            Err(ubtrfs_engine::Error::NoSpace(why)) => {
                // Whole chunks do not fit: compact the block groups past
                // the end into the space below it first, as the kernel's
                // shrink moves extents and tree blocks, then move what is
                // left.
                let past = groups_past(&t, devid, new);
                let need = bytes_needed(&t, devid, &past);
                if past.is_empty() || need > new {
                    return Err(format!(
                        "{why}; compacting what lies past the end would not fit either: \
                         what devid {devid} holds needs about {} MiB",
                        need.div_ceil(1 << 20)
                    )
                    .into());
                }
                t.commit()?;
                let kind = |t: &Trans, data: bool| -> Vec<u64> {
                    past.iter()
                        .copied()
                        .filter(|s| {
                            t.alloc
                                .groups
                                .get(s)
                                .is_some_and(|g| (g.flags & BG_DATA != 0) == data)
                        })
                        .collect()
                };
                let (data, trees) = (kind(&t, true), kind(&t, false));
                let held = t.alloc.used_in(&past);
                crate::cmd_scrub::with_progress(held, "compacting", |p| {
                    let d = t.compact_data_groups(&data, p)?;
                    let base = d.bytes;
                    t.compact_tree_groups(&trees, &mut |b| p(base + b))
                })?;
                t.plan_shrink(a.devid, new)?
            }
            Err(e) => return Err(e.into()),
        };
        t.commit()?;
        let total = moves.iter().map(|m| m.bytes()).sum();
        crate::cmd_scrub::with_progress(total, "relocating", |p| t.run_relocation(&moves, p))?;
    }
    t.resize_device(a.devid, new)?;
    t.commit()?;
    let now = t.dev_items().get(&a.devid).map_or(new, |d| d.total_bytes);
    drop(t);
    if is_file && now < device_size(&path) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)?
            .set_len(now)?;
    }
    println!(
        "Resize device id {} ({}) from {} to {}",
        a.devid,
        path.display(),
        pretty_size(old),
        pretty_size(now)
    );
    Ok(())
}

/// The block groups (not mixed) with a stripe on `devid` past byte `end`.
fn groups_past(t: &Trans, devid: u64, end: u64) -> Vec<u64> {
    t.info
        .chunks
        .iter()
        .filter(|(_, c)| {
            let k = c.chunk_type & (BG_DATA | BG_METADATA | BG_SYSTEM);
            k == BG_DATA || k & BG_DATA == 0
        })
        .filter(|(_, c)| {
            c.stripes
                .iter()
                .any(|s| s.devid == devid && s.offset + c.length > end)
        })
        .map(|(l, _)| l)
        .collect()
}

/// About the device bytes `devid` needs once the block groups `past` are
/// compacted into the free space of the others: every other chunk's
/// stripe on it, what those groups hold (each copy), the first MiB. (A
/// lower bound: the free space below the end may not take every extent
/// whole, tree blocks snapshots share are copied per tree, and then the
/// compaction stops with no space, each group it finished committed.)
fn bytes_needed(t: &Trans, devid: u64, past: &[u64]) -> u64 {
    let mut need = 1 << 20;
    for (l, c) in t.info.chunks.iter() {
        let on = c.stripes.iter().filter(|s| s.devid == devid).count() as u64;
        if on == 0 {
            continue;
        }
        let data_only = c.chunk_type & (BG_DATA | BG_METADATA | BG_SYSTEM) == BG_DATA;
        if past.contains(&l) || (data_only && !past.is_empty()) {
            need += t.alloc.groups.get(&l).map_or(0, |g| g.used) * on;
        } else {
            need += ubtrfs_engine::io::volumes::stripe_len(c) * on;
        }
    }
    need
}

/// A device as usage and show print it.
struct Dev {
    devid: u64,
    /// The path it was opened by ("missing" when it was not).
    path: String,
    /// Its size in the filesystem, and the bytes of it in chunks.
    total_bytes: u64,
    bytes_used: u64,
    /// The size of what `path` names (0: missing).
    device_size: u64,
}

/// What usage and show print, from an image or a mount.
struct Figures {
    label: String,
    fsid: [u8; 16],
    /// Bytes used: the superblock's (an image), the space's (a mount).
    bytes_used: u64,
    /// Space per kind and profile, the global reserve last.
    spaces: Vec<SpaceInfo>,
    chunks: Vec<ChunkUse>,
    devices: Vec<Dev>,
    /// What statfs(2) says is free: the mount's, or for an image what the
    /// kernel's statfs would say of it mounted.
    statfs_avail: u64,
}

/// The size of the file or block device at `path` (0 when it cannot be
/// opened), as progs' device_get_partition_size.
fn device_size(path: &Path) -> u64 {
    std::fs::File::open(path)
        .and_then(|f| ubtrfs_engine::io::dev::file_size(&f))
        .unwrap_or(0)
}

impl Figures {
    fn of(target: &Path, devices: Vec<PathBuf>) -> Result<Figures, Box<dyn std::error::Error>> {
        if mounted(target)? {
            let spaces = crate::mounted::space(target)?;
            let (fs, devs) = crate::mounted::devices(target)?;
            let chunks = crate::mounted::chunks(target)?;
            let label = crate::mounted::property(target, "label")?.unwrap_or_default();
            let devices = devs
                .into_iter()
                .map(|d| {
                    let path = String::from_utf8_lossy(&d.path).into_owned();
                    Dev {
                        devid: d.devid,
                        device_size: if path.is_empty() {
                            0
                        } else {
                            device_size(Path::new(&path))
                        },
                        path: if path.is_empty() {
                            "missing".into()
                        } else {
                            path
                        },
                        total_bytes: d.total_bytes,
                        bytes_used: d.bytes_used,
                    }
                })
                .collect();
            return Ok(Figures {
                label,
                fsid: fs.fsid,
                bytes_used: spaces
                    .iter()
                    .filter(|s| s.flags & SPACE_INFO_GLOBAL_RSV == 0)
                    .map(|s| s.used_bytes)
                    .sum(),
                chunks: chunk_uses(&chunks),
                statfs_avail: crate::mounted::statfs_avail(target)?,
                spaces,
                devices,
            });
        }
        let fs = crate::open_image(target, devices)?;
        let mut spaces = space_info(&fs)?;
        spaces.push(global_reserve_slot(global_reserve(&fs)?));
        let items = &fs.dev_items;
        let free: Vec<u64> = items
            .iter()
            .map(|d| d.total_bytes.saturating_sub(d.bytes_used))
            .collect();
        let devices = items
            .iter()
            .map(|d| match fs.info.devices.get(&d.devid) {
                Some(dev) => Dev {
                    devid: d.devid,
                    path: dev.path.display().to_string(),
                    total_bytes: d.total_bytes,
                    bytes_used: d.bytes_used,
                    device_size: device_size(&dev.path),
                },
                None => Dev {
                    devid: d.devid,
                    path: "missing".into(),
                    total_bytes: d.total_bytes,
                    bytes_used: d.bytes_used,
                    device_size: 0,
                },
            })
            .collect();
        Ok(Figures {
            label: String::from_utf8_lossy(&fs.info.sb.label).into_owned(),
            fsid: fs.info.sb.fsid,
            bytes_used: fs.info.sb.bytes_used,
            chunks: chunk_uses(fs.info.chunks.iter().map(|(_, c)| c)),
            statfs_avail: statfs_avail(&spaces, &free, fs.info.sectorsize),
            spaces,
            devices,
        })
    }
}

/// `btrfs filesystem usage`'s text (its default form: human units, the
/// overall figures, then each kind and profile with its devices).
/// RAID5/6 chunks are counted as progs counts every other profile.
fn usage_text(f: &Figures) -> String {
    use std::fmt::Write as _;
    use ubtrfs_format::consts::*;
    let mut spaces: Vec<&SpaceInfo> = f.spaces.iter().collect();
    spaces.sort_by_key(|s| progs_order(s.flags));
    let (mut r_data_used, mut r_data_chunks, mut l_data_chunks) = (0u64, 0u64, 0u64);
    let (mut r_meta_used, mut r_meta_chunks, mut l_meta_chunks) = (0u64, 0u64, 0u64);
    let (mut r_sys_used, mut r_sys_chunks) = (0u64, 0u64);
    let (mut rsv, mut rsv_used) = (0, 0);
    let mut max_ratio = 1u64;
    let mut mixed = false;
    for s in &spaces {
        let ratio = ncopies(s.flags);
        max_ratio = max_ratio.max(ratio);
        if s.flags & SPACE_INFO_GLOBAL_RSV != 0 {
            rsv = s.total_bytes;
            rsv_used = s.used_bytes;
            continue;
        }
        if s.flags & BG_DATA != 0 && s.flags & BG_METADATA != 0 {
            mixed = true;
        }
        if s.flags & BG_DATA != 0 {
            r_data_used += s.used_bytes * ratio;
            r_data_chunks += s.total_bytes * ratio;
            l_data_chunks += s.total_bytes;
        }
        if s.flags & BG_METADATA != 0 {
            r_meta_used += s.used_bytes * ratio;
            r_meta_chunks += s.total_bytes * ratio;
            l_meta_chunks += s.total_bytes;
        }
        if s.flags & BG_SYSTEM != 0 {
            r_sys_used += s.used_bytes * ratio;
            r_sys_chunks += s.total_bytes * ratio;
        }
    }
    let size: u64 = f.devices.iter().map(|d| d.total_bytes).sum();
    let slack: u64 = f
        .devices
        .iter()
        .filter(|d| d.device_size > 0)
        .map(|d| d.device_size.saturating_sub(d.total_bytes))
        .sum();
    let missing: u64 = f
        .devices
        .iter()
        .filter(|d| d.device_size == 0)
        .map(|d| d.total_bytes)
        .sum();
    let mut chunks = r_data_chunks + r_sys_chunks;
    let mut used = r_data_used + r_sys_used;
    if !mixed {
        chunks += r_meta_chunks;
        used += r_meta_used;
    }
    let unused = size.saturating_sub(chunks);
    let data_ratio = r_data_chunks as f64 / l_data_chunks.max(1) as f64;
    let meta_ratio = if mixed {
        data_ratio
    } else {
        r_meta_chunks as f64 / l_meta_chunks.max(1) as f64
    };
    let mut free_est =
        ((r_data_chunks - r_data_used.min(r_data_chunks)) as f64 / data_ratio) as u64;
    if mixed {
        free_est = free_est.saturating_sub(rsv - rsv_used.min(rsv));
    }
    let mut free_min = free_est;
    if unused >= 16 << 20 {
        free_est += (unused as f64 / data_ratio) as u64;
        free_min += unused / max_ratio;
    }
    let mut multiple = Vec::new();
    for (bit, name) in [
        (BG_DATA, "data"),
        (BG_METADATA, "metadata"),
        (BG_SYSTEM, "system"),
    ] {
        let n = spaces
            .iter()
            .filter(|s| s.flags & SPACE_INFO_GLOBAL_RSV == 0 && s.flags & bit != 0)
            .count();
        if n > 1 {
            multiple.push(name);
        }
    }
    let p = pretty_size;
    let mut o = String::new();
    let _ = writeln!(o, "Overall:");
    let _ = writeln!(o, "    Device size:\t\t{:>10}", p(size));
    let _ = writeln!(o, "    Device allocated:\t\t{:>10}", p(chunks));
    let _ = writeln!(o, "    Device unallocated:\t\t{:>10}", p(unused));
    let _ = writeln!(o, "    Device missing:\t\t{:>10}", p(missing));
    let _ = writeln!(o, "    Device slack:\t\t{:>10}", p(slack));
    let _ = writeln!(o, "    Used:\t\t\t{:>10}", p(used));
    let _ = writeln!(
        o,
        "    Free (estimated):\t\t{:>10}\t(min: {})",
        p(free_est),
        p(free_min)
    );
    let _ = writeln!(o, "    Free (statfs, df):\t\t{:>10}", p(f.statfs_avail));
    let _ = writeln!(o, "    Data ratio:\t\t\t{data_ratio:>10.2}");
    let _ = writeln!(o, "    Metadata ratio:\t\t{meta_ratio:>10.2}");
    let _ = writeln!(
        o,
        "    Global reserve:\t\t{:>10}\t(used: {})",
        p(rsv),
        p(rsv_used)
    );
    if multiple.is_empty() {
        let _ = writeln!(o, "    Multiple profiles:\t\t{:>10}", "no");
    } else {
        let _ = writeln!(
            o,
            "    Multiple profiles:\t\t{:>10}\t({})",
            "yes",
            multiple.join(", ")
        );
    }
    let _ = writeln!(o);
    for s in spaces
        .iter()
        .filter(|s| s.flags & SPACE_INFO_GLOBAL_RSV == 0)
    {
        let _ = writeln!(
            o,
            "{},{}: Size:{}, Used:{} ({:.2}%)",
            block_group_kind(s.flags),
            profile_name(s.flags),
            p(s.total_bytes),
            p(s.used_bytes),
            100.0 * s.used_bytes as f32 / (s.total_bytes as f32 + 1.0)
        );
        for d in &f.devices {
            let on: u64 = f
                .chunks
                .iter()
                .filter(|c| c.flags == s.flags && c.devid == d.devid)
                .map(|c| c.on_device())
                .sum();
            if on > 0 {
                let _ = writeln!(o, "   {}\t{:>10}", d.path, p(on));
            }
        }
        let _ = writeln!(o);
    }
    if !f.chunks.is_empty() {
        let _ = writeln!(o, "Unallocated:");
        for d in &f.devices {
            let on: u64 = f
                .chunks
                .iter()
                .filter(|c| c.devid == d.devid)
                .map(|c| c.on_device())
                .sum();
            let _ = writeln!(
                o,
                "   {}\t{:>10}",
                d.path,
                p(d.total_bytes.saturating_sub(on))
            );
        }
    }
    o
}

/// `btrfs filesystem show`'s text for one filesystem.
fn show_text(f: &Figures) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let label = if f.label.is_empty() {
        "none".to_string()
    } else {
        format!("'{}'", f.label)
    };
    let _ = writeln!(o, "Label: {label}  uuid: {}", format_uuid(&f.fsid));
    let _ = writeln!(
        o,
        "\tTotal devices {} FS bytes used {}",
        f.devices.len(),
        pretty_size(f.bytes_used)
    );
    for d in &f.devices {
        let _ = writeln!(
            o,
            "\tdevid {:>4} size {} used {} path {}",
            d.devid,
            pretty_size(d.total_bytes),
            pretty_size(d.bytes_used),
            d.path
        );
    }
    let _ = writeln!(o);
    o
}

fn mounted(target: &std::path::Path) -> Result<bool, String> {
    Ok(target.is_dir() && matches!(crate::mounted::classify(target, true)?, Target::Mounted))
}

pub fn run(cmd: FilesystemCmd) -> CmdResult {
    match cmd {
        FilesystemCmd::Df { target, devices } => {
            let spaces: Vec<SpaceInfo> = if mounted(&target)? {
                crate::mounted::space(&target)?
            } else {
                let fs = crate::open_image(&target, devices)?;
                let mut s = space_info(&fs)?;
                s.push(global_reserve_slot(global_reserve(&fs)?));
                s
            };
            for s in spaces {
                let (kind, profile) = if s.flags & SPACE_INFO_GLOBAL_RSV != 0 {
                    ("GlobalReserve", "single")
                } else {
                    (block_group_kind(s.flags), profile_name(s.flags))
                };
                println!(
                    "{kind}, {profile}: total={}, used={}",
                    pretty_size(s.total_bytes),
                    pretty_size(s.used_bytes)
                );
            }
        }
        FilesystemCmd::Usage { target, devices } => {
            print!("{}", usage_text(&Figures::of(&target, devices)?));
        }
        FilesystemCmd::Show { target, devices } => {
            print!("{}", show_text(&Figures::of(&target, devices)?));
        }
        FilesystemCmd::Resize {
            amount,
            image,
            devices,
        } => resize(&amount, image, devices)?,
        FilesystemCmd::Sync { path } => {
            if !mounted(&path)? {
                return Err(format!(
                    "{}: not inside a mount (an image has nothing to sync)",
                    path.display()
                )
                .into());
            }
            crate::mounted::sync(&path)?;
        }
        FilesystemCmd::Label {
            target,
            new,
            devices,
        } => {
            if mounted(&target)? {
                match new {
                    Some(l) => crate::mounted::set_property(&target, "label", &l)?,
                    None => println!(
                        "{}",
                        crate::mounted::property(&target, "label")?.unwrap_or_default()
                    ),
                }
                return Ok(ExitCode::SUCCESS);
            }
            match new {
                Some(l) => {
                    let mut all = vec![target];
                    all.extend(devices);
                    let mut t = Trans::open(&all, 64 << 20)?;
                    t.set_label(l.as_bytes())?;
                    t.commit()?;
                }
                None => {
                    let fs = crate::open_image(&target, devices)?;
                    // The superblock's label ends at its NUL as parsed.
                    println!("{}", String::from_utf8_lossy(&fs.info.sb.label));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::pretty_size;

    #[test]
    fn sizes_print_as_btrfs_progs_prints_them() {
        assert_eq!(pretty_size(0), "0.00B");
        assert_eq!(pretty_size(16384), "16.00KiB");
        assert_eq!(pretty_size(8 << 20), "8.00MiB");
        assert_eq!(pretty_size(53_673_984), "51.19MiB");
        assert_eq!(pretty_size(3_407_872), "3.25MiB");
    }
}
