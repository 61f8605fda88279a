//! `ubtrfs check`: btrfs check's original mode, read-only, on an unmounted
//! image (options as btrfs-progs' `btrfs check`). One line per problem,
//! then a summary; exit 1 when there is any.

use crate::{print_reports, CmdResult};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use ubtrfs_engine::fs::Filesystem;
use ubtrfs_engine::io::device::Device;
use ubtrfs_engine::tools::check::{check, repair, CheckOptions, CheckReport};
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::bytes::format_uuid;
use ubtrfs_format::consts::{SUPER_OFFSETS, SUPER_SIZE};
use ubtrfs_format::Superblock;

#[derive(Args)]
pub struct CheckArgs {
    /// The image file or block device.
    image: PathBuf,
    /// Another device of a multi-device filesystem (repeatable).
    #[arg(short = 'd', long = "device", value_name = "PATH")]
    devices: Vec<PathBuf>,
    /// Check without writing (the default; accepted as btrfs check takes it).
    #[arg(long)]
    readonly: bool,
    /// Repair what is found, in one transaction, then check again:
    /// counters and fields (block group, device and superblock usage and
    /// sizes, an inode's nbytes, size, link count or generations, an
    /// extent item's refs, a data reference's count, a lost orphan item),
    /// names (missing or misplaced DIR_ITEM, DIR_INDEX, INODE_REF),
    /// invalid modes, missing inode items, lost extent items (made again
    /// from the references found), and inodes no name reaches (into
    /// lost+found); quota counts that differ are marked inconsistent for
    /// `btrfs quota rescan`; also mkfs.btrfs's leftover free-space entries
    /// that the check only warns of. When anything else is wrong, the
    /// problems that cannot be repaired are named and nothing is written.
    #[arg(long, conflicts_with = "readonly")]
    repair: bool,
    /// Also read all data and verify it against its checksums.
    #[arg(long = "check-data-csum")]
    check_data_csum: bool,
    /// Use superblock copy N (0, 1 or 2) instead of the newest.
    #[arg(short = 's', long = "super", value_name = "N")]
    super_copy: Option<usize>,
    /// Use the newest backup root that can be read instead of the
    /// superblock's roots.
    #[arg(short = 'b', long = "backup")]
    backup: bool,
    /// Show progress (on by default when stderr is a terminal).
    #[arg(short = 'p', long)]
    progress: bool,
    /// Output as JSON.
    #[arg(long)]
    json: bool,
    /// Check an image that a writer has in use (what is read may change
    /// under the check).
    #[arg(long)]
    force: bool,
    /// Memory budget of the tree block cache, in MiB. The check reads
    /// each block about twice, once per pass, so a larger cache buys
    /// little (measured: 16 MiB is faster than 256 on 250,000 files).
    #[arg(long = "cache-mb", default_value_t = 16)]
    cache_mb: u64,
}

pub fn run(a: CheckArgs) -> CmdResult {
    if a.image.is_dir() {
        return Err(crate::mounted::not_an_image(&a.image).into());
    }
    if a.repair && (a.backup || a.super_copy.is_some() || a.force) {
        return Err("check --repair: not with -b, -s or --force (it repairs the filesystem as it is, unused)".into());
    }
    ubtrfs_engine::io::claim::set_read_live(a.force);
    let (report, clean, paths) = check_once(&a)?;
    if !a.repair || !report.repairable() {
        if a.repair {
            println!("no error found: nothing to repair");
        }
        return Ok(exit(clean));
    }
    let fixes = match report.fixes() {
        Ok(f) => f,
        Err(cannot) => {
            let mut out = std::io::stdout().lock();
            for p in &cannot {
                writeln!(out, "cannot repair: {p}")?;
            }
            writeln!(
                out,
                "check --repair: {} of {} problems cannot be repaired yet; nothing was written",
                (report.problem_count - report.problems.len()) + cannot.len(),
                report.problem_count
            )?;
            return Ok(ExitCode::FAILURE);
        }
    };
    // One transaction: a kill leaves the image as it was, or repaired.
    let mut t = Trans::open_with(&paths, 64 << 20, &|i| repair::prepare(i, &fixes))?;
    repair::apply(&mut t, &fixes)?;
    t.commit()?;
    drop(t);
    let warned = report.warnings.iter().filter(|w| w.fix.is_some()).count();
    let and_warnings = if warned > 0 {
        format!(" and {warned} warnings")
    } else {
        String::new()
    };
    println!(
        "repaired {} problems{and_warnings}; checking again",
        fixes.len() - warned
    );
    let (_, clean, _) = check_once(&a)?;
    Ok(exit(clean))
}

fn exit(clean: bool) -> ExitCode {
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One read-only check, printed; the report, whether it is clean, and
/// the devices' paths (the image first).
type Checked = (CheckReport, bool, Vec<PathBuf>);

fn check_once(a: &CheckArgs) -> Result<Checked, Box<dyn std::error::Error>> {
    let fs = open(a)?;
    let mut paths = vec![a.image.clone()];
    paths.extend(
        fs.info
            .devices
            .values()
            .map(|d| d.path.clone())
            .filter(|p| *p != a.image),
    );
    let sb = &fs.info.sb;
    if !a.json {
        let mut out = std::io::stdout().lock();
        writeln!(out, "Checking filesystem on {}", a.image.display())?;
        writeln!(out, "UUID: {}", format_uuid(&sb.fsid))?;
    }
    let bar = (a.progress || std::io::stderr().is_terminal()).then(|| {
        let b = ProgressBar::new_spinner();
        b.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        b.enable_steady_tick(Duration::from_millis(200));
        b
    });
    let opts = CheckOptions {
        check_data_csum: a.check_data_csum,
    };
    let report = check(&fs, &opts, &mut |phase, n| {
        if let Some(b) = &bar {
            b.set_message(format!("{phase}: {n}"));
        }
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    print_reports(&fs);
    if a.json {
        writeln!(
            std::io::stdout(),
            "{}",
            serde_json::to_string_pretty(&to_json(&report, &a.image))?
        )?;
    } else {
        print_text(&report)?;
    }
    let clean = report.clean();
    Ok((report, clean, paths))
}

/// Opens the filesystem as asked: a chosen superblock copy, or a backup
/// root.
fn open(a: &CheckArgs) -> Result<Filesystem, Box<dyn std::error::Error>> {
    let mut devs = vec![Device::open(&a.image)?];
    for p in &a.devices {
        devs.push(Device::open(p)?);
    }
    // The other devices of a multi-device filesystem that -d did not
    // name, found among the machine's block devices as btrfs check finds
    // them.
    if (devs.len() as u64) < devs[0].superblock.num_devices {
        let have: Vec<u64> = devs.iter().map(|d| d.devid).collect();
        let fsid = devs[0].superblock.fsid;
        for d in ubtrfs_engine::io::device::scan_for(&fsid, &have) {
            eprintln!("ubtrfs check: devid {} is {}", d.devid, d.path.display());
            devs.push(d);
        }
    }
    if let Some(n) = a.super_copy {
        let off = *SUPER_OFFSETS
            .get(n)
            .ok_or_else(|| format!("-s {n}: superblock copies are 0, 1 and 2"))?;
        let sb = read_super(&devs[0], off)
            .map_err(|e| format!("{}: superblock copy {n} at {off}: {e}", a.image.display()))?;
        for d in devs.iter_mut() {
            d.superblock = sb.clone();
        }
    }
    if !a.backup {
        return Ok(Filesystem::from_devices(devs, a.cache_mb << 20)?);
    }
    let sb = devs[0].superblock.clone();
    let mut backups: Vec<_> = sb
        .backups
        .iter()
        .filter(|b| b.tree_root != 0)
        .cloned()
        .collect();
    backups.sort_by_key(|b| std::cmp::Reverse(b.tree_root_gen));
    let mut why = Vec::new();
    for b in backups {
        let mut s = sb.clone();
        s.root = b.tree_root;
        s.root_level = b.tree_root_level;
        s.generation = b.tree_root_gen;
        s.chunk_root = b.chunk_root;
        s.chunk_root_level = b.chunk_root_level;
        s.chunk_root_generation = b.chunk_root_gen;
        s.bytes_used = b.bytes_used;
        s.log_root = 0;
        let mut ds = Vec::new();
        for d in &devs {
            let mut nd = d.reopen()?;
            nd.superblock = s.clone();
            ds.push(nd);
        }
        match Filesystem::from_devices(ds, a.cache_mb << 20) {
            Ok(fs)
                if fs
                    .tree_opt(ubtrfs_format::consts::EXTENT_TREE_OBJECTID)
                    .is_ok() =>
            {
                println!("Using the backup root of generation {}", b.tree_root_gen);
                return Ok(fs);
            }
            Ok(_) => why.push(format!(
                "generation {}: root tree unreadable",
                b.tree_root_gen
            )),
            Err(e) => why.push(format!("generation {}: {e}", b.tree_root_gen)),
        }
    }
    Err(format!(
        "{}: no backup root can be read ({})",
        a.image.display(),
        why.join("; ")
    )
    .into())
}

fn read_super(d: &Device, off: u64) -> Result<Superblock, Box<dyn std::error::Error>> {
    let mut buf = vec![0u8; SUPER_SIZE];
    d.read_at(&mut buf, off)?;
    let sb = Superblock::parse(&buf)?;
    if sb.bytenr != off {
        return Err(format!("records bytenr {}", sb.bytenr).into());
    }
    Ok(sb)
}

fn print_text(r: &CheckReport) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    for w in &r.warnings {
        writeln!(out, "WARNING: {w}")?;
    }
    for p in &r.problems {
        writeln!(out, "ERROR: {p}")?;
    }
    if r.problem_count > r.problems.len() {
        writeln!(
            out,
            "ERROR: ... and {} more",
            r.problem_count - r.problems.len()
        )?;
    }
    if r.clean() {
        writeln!(
            out,
            "found {} bytes used, no error found",
            r.tree_bytes + r.data_bytes_allocated
        )?;
    } else {
        writeln!(
            out,
            "found {} bytes used, error(s) found: {} problems",
            r.tree_bytes + r.data_bytes_allocated,
            r.problem_count
        )?;
    }
    writeln!(out, "total csum bytes: {}", r.csum_bytes)?;
    writeln!(out, "total tree bytes: {}", r.tree_bytes)?;
    writeln!(out, "total fs tree bytes: {}", r.fs_tree_bytes)?;
    writeln!(out, "total extent tree bytes: {}", r.extent_tree_bytes)?;
    writeln!(
        out,
        "file data blocks allocated: {}",
        r.data_bytes_allocated
    )?;
    writeln!(out, " referenced {}", r.data_bytes_referenced)?;
    writeln!(
        out,
        "inodes checked: {}, tree blocks: {}",
        r.inodes, r.blocks
    )?;
    if r.data_verified > 0 {
        writeln!(out, "data verified: {} bytes", r.data_verified)?;
    }
    Ok(())
}

fn to_json(r: &CheckReport, image: &Path) -> serde_json::Value {
    let problems: Vec<serde_json::Value> = r
        .problems
        .iter()
        .map(|p| serde_json::json!({"where": p.place, "what": p.what}))
        .collect();
    serde_json::json!({
        "image": image.display().to_string(),
        "generation": r.generation,
        "clean": r.clean(),
        "problem_count": r.problem_count,
        "problems": problems,
        "warnings": r.warnings.iter().map(|w| serde_json::json!({"where": w.place, "what": w.what})).collect::<Vec<_>>(),
        "tree_blocks": r.blocks,
        "tree_bytes": r.tree_bytes,
        "fs_tree_bytes": r.fs_tree_bytes,
        "extent_tree_bytes": r.extent_tree_bytes,
        "csum_bytes": r.csum_bytes,
        "data_bytes_allocated": r.data_bytes_allocated,
        "data_bytes_referenced": r.data_bytes_referenced,
        "inodes": r.inodes,
        "data_verified": r.data_verified,
    })
}
