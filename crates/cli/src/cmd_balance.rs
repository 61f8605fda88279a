//! `ubtrfs balance start`: btrfs balance's profile conversion on an
//! unmounted image (-dconvert, -mconvert, -sconvert), with progs' filters
//! to pick block groups (profiles, usage, devid, limit). Chunks move as
//! [`ubtrfs_engine::tx::relocation`] moves them: logical addresses stay,
//! one commit per chunk, so a killed balance run again goes on where it
//! was. Empty block groups a filter picks are removed. Without convert,
//! picked block groups are compacted ([`ubtrfs_engine::tx::compact`]:
//! data extents, or tree blocks, move to other groups, then they go).
//!
//! As in btrfs-progs, `-d`, `-m` and `-s` take their filters attached
//! (`-dconvert=dup,soft`); other devices of the filesystem are given
//! with `--device`.

use crate::CmdResult;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use ubtrfs_engine::tx::relocation::RelocTarget;
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{profile_name, ChunkItem};

#[derive(Subcommand)]
pub enum BalanceCmd {
    /// Convert block groups to another profile, compact them (without
    /// convert), or remove empty ones (-dusage=0), on an unmounted image.
    /// Without filters, every block group is compacted (a full balance).
    Start(StartArgs),
}

#[derive(Args)]
pub struct StartArgs {
    /// Data block groups, with filters attached: -dconvert=PROFILE[,soft],
    /// usage=N|MIN..MAX, profiles=P1|P2, devid=N, limit=N.
    #[arg(short = 'd', value_name = "FILTERS", num_args = 0..=1, default_missing_value = "")]
    data: Option<String>,
    /// Metadata block groups, filters as -d (system ones follow unless -s
    /// is given).
    #[arg(short = 'm', value_name = "FILTERS", num_args = 0..=1, default_missing_value = "")]
    metadata: Option<String>,
    /// System block groups, filters as -d (needs --force, as in progs).
    #[arg(short = 's', value_name = "FILTERS", num_args = 0..=1, default_missing_value = "")]
    system: Option<String>,
    /// Allow -s, and a metadata conversion that lowers redundancy.
    #[arg(short = 'f', long)]
    force: bool,
    /// Balance every block group without the warning a full balance
    /// (no filters) otherwise prints.
    #[arg(long)]
    full_balance: bool,
    /// The image (opened read-write; must not be in use).
    image: PathBuf,
    /// Another device of a multi-device filesystem (repeatable).
    #[arg(long = "device", value_name = "PATH")]
    devices: Vec<PathBuf>,
}

/// One block group type's filters.
#[derive(Debug, Default, Clone, PartialEq)]
struct Filters {
    convert: Option<u64>,
    soft: bool,
    /// Usage percent range [min, max) as the kernel's
    /// chunk_usage_range_filter; (0, 0): empty ones only.
    usage: Option<(u64, u64)>,
    profiles: Option<Vec<u64>>,
    devid: Option<u64>,
    limit: Option<usize>,
}

fn parse_filters(what: &str, s: &str) -> Result<Filters, String> {
    let mut f = Filters::default();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        let bad = || format!("-{what}{s}: bad filter {part:?}");
        let num = |v: &str| v.parse::<u64>().map_err(|_| bad());
        match k {
            "convert" => f.convert = Some(crate::cmd_mkfs::parse_profile(v)?),
            "soft" => f.soft = true,
            "usage" => {
                let (lo, hi) = match v.split_once("..") {
                    Some((a, b)) => (
                        if a.is_empty() { 0 } else { num(a)? },
                        if b.is_empty() { 100 } else { num(b)? },
                    ),
                    // usage=N: block groups less than N% full (usage=0:
                    // empty ones).
                    None => (0, num(v)?),
                };
                if lo > 100 || hi > 100 || (lo > hi) {
                    return Err(bad());
                }
                f.usage = Some((lo, hi));
            }
            "profiles" => {
                f.profiles = Some(
                    v.split('|')
                        .map(crate::cmd_mkfs::parse_profile)
                        .collect::<Result<_, _>>()?,
                )
            }
            "devid" => f.devid = Some(num(v)?),
            "limit" => f.limit = Some(num(v)? as usize),
            _ => {
                return Err(format!(
                "-{what}{s}: unknown filter {k:?} (convert, soft, usage, profiles, devid, limit)"
            ))
            }
        }
    }
    Ok(f)
}

/// Whether block group `c` (with `used` bytes) passes `f`.
fn picks(f: &Filters, c: &ChunkItem, used: u64) -> bool {
    let p = c.chunk_type & BG_PROFILE_MASK;
    if let Some(ps) = &f.profiles {
        if !ps.contains(&p) {
            return false;
        }
    }
    if let Some((lo, hi)) = f.usage {
        let (u, len) = (used as u128 * 100, c.length.max(1) as u128);
        let inside = if hi == 0 {
            used == 0
        } else {
            u >= lo as u128 * len && u < hi as u128 * len
        };
        if !inside {
            return false;
        }
    }
    if let Some(d) = f.devid {
        if !c.stripes.iter().any(|s| s.devid == d) {
            return false;
        }
    }
    true
}

/// Copies of each byte a profile keeps (for the redundancy check).
fn copies(p: u64) -> u64 {
    match p & BG_PROFILE_MASK {
        BG_DUP | BG_RAID1 | BG_RAID10 | BG_RAID5 => 2,
        BG_RAID1C3 | BG_RAID6 => 3,
        BG_RAID1C4 => 4,
        _ => 1,
    }
}

pub fn run(c: BalanceCmd) -> CmdResult {
    match c {
        BalanceCmd::Start(a) => start(a),
    }
}

fn start(a: StartArgs) -> CmdResult {
    let parse = |w, v: &Option<String>| v.as_deref().map(|s| parse_filters(w, s)).transpose();
    let mut data = parse("d", &a.data)?;
    let mut meta = parse("m", &a.metadata)?;
    let mut sys = parse("s", &a.system)?;
    if sys.is_some() && !a.force {
        return Err("Refusing to explicitly operate on system chunks. Pass --force if you really want to do that.".into());
    }
    if sys.is_none() {
        // As progs: system chunks do what metadata ones are told.
        sys = meta.clone();
    }
    if data.is_none() && meta.is_none() && a.system.is_none() {
        // As progs: no filters is a full balance, which it warns about.
        if !a.full_balance {
            eprintln!(
                "WARNING: Full balance without filters requested: every block group is \
                 rewritten (pass --full-balance to skip this warning)"
            );
        }
        data = Some(Filters::default());
        meta = Some(Filters::default());
        sys = meta.clone();
    }
    let mut all = vec![a.image.clone()];
    all.extend(a.devices.iter().cloned());
    let mut t = Trans::open(&all, 64 << 20)?;
    let ndevs = t.dev_items().len();
    for (w, f) in [("d", &data), ("m", &meta), ("s", &sys)] {
        if let Some(p) = f.as_ref().and_then(|f| f.convert) {
            let need = match p {
                BG_RAID1 | BG_RAID10 | BG_RAID5 => 2,
                BG_RAID1C3 | BG_RAID6 => 3,
                BG_RAID1C4 => 4,
                _ => 1,
            };
            if ndevs < need {
                return Err(format!(
                    "-{w}convert={}: needs at least {need} devices, the filesystem has {ndevs}",
                    profile_name(p).to_lowercase()
                )
                .into());
            }
        }
    }
    // As the kernel: --force to go from a redundant profile to one
    // without redundancy, for metadata or system.
    for (w, f, kind) in [("m", &meta, BG_METADATA), ("s", &sys, BG_SYSTEM)] {
        let Some(p) = f.as_ref().and_then(|f| f.convert) else {
            continue;
        };
        let lower = copies(p) < 2
            && t.info
                .chunks
                .iter()
                .any(|(_, c)| c.chunk_type & kind != 0 && copies(c.chunk_type) >= 2);
        if lower && !a.force {
            return Err(format!(
                "-{w}convert={}: reduces metadata redundancy, use --force if you want this",
                profile_name(p).to_lowercase()
            )
            .into());
        }
    }
    for (w, f) in [("d", &data), ("m", &meta), ("s", &sys)] {
        if f.as_ref().is_some_and(|f| f.soft && f.convert.is_none()) {
            return Err(format!("-{w}: soft needs convert").into());
        }
    }
    // The block groups picked, by type's filters.
    let filter_of = |c: &ChunkItem| -> Option<&Filters> {
        if c.chunk_type & BG_DATA != 0 {
            data.as_ref()
        } else if c.chunk_type & BG_METADATA != 0 {
            meta.as_ref()
        } else {
            sys.as_ref()
        }
    };
    let mut counts = [0usize; 3];
    let mut picked: Vec<(u64, Option<u64>)> = Vec::new();
    let total = t.info.chunks.iter().count();
    for (l, c) in t.info.chunks.iter() {
        let Some(f) = filter_of(c) else { continue };
        let used = t.alloc.groups.get(&l).map_or(0, |g| g.used);
        if !picks(f, c, used) {
            continue;
        }
        if f.soft && f.convert == Some(c.chunk_type & BG_PROFILE_MASK) {
            continue;
        }
        let slot = if c.chunk_type & BG_DATA != 0 {
            0
        } else if c.chunk_type & BG_METADATA != 0 {
            1
        } else {
            2
        };
        if f.limit.is_some_and(|n| counts[slot] >= n) {
            continue;
        }
        counts[slot] += 1;
        picked.push((l, f.convert));
    }
    // Empty ones go; the rest convert, or are refused.
    let empty: Vec<u64> = picked
        .iter()
        .map(|p| p.0)
        .filter(|&l| t.chunk_is_empty(l))
        .collect();
    let removed = t.remove_empty_chunks(|l, _| empty.contains(&l))?;
    let room = t.reloc_room();
    let mut refused = Vec::new();
    let moves = t.plan_relocation(|l, c| {
        let &(_, convert) = picked.iter().find(|p| p.0 == l)?;
        match convert {
            Some(p) => Some(RelocTarget {
                profile: Some(p),
                room: room.clone(),
            }),
            None => {
                refused.push((l, c.chunk_type));
                None
            }
        }
    })?;
    // Without convert: data block groups have their extents moved to
    // others, metadata and system ones their tree blocks.
    let of = |data: bool| -> Vec<u64> {
        refused
            .iter()
            .filter(|&&(_, ty)| (ty & BG_DATA != 0) == data)
            .map(|g| g.0)
            .collect()
    };
    let (compact, trees) = (of(true), of(false));
    t.commit()?;
    let bytes = moves.iter().map(|m| m.bytes()).sum();
    crate::cmd_scrub::with_progress(bytes, "balance", |p| t.run_relocation(&moves, p))?;
    let held = t.alloc.used_in(&compact);
    let c = crate::cmd_scrub::with_progress(held, "compacting", |p| {
        t.compact_data_groups(&compact, p)
    })?;
    let held = t.alloc.used_in(&trees);
    let m = crate::cmd_scrub::with_progress(held, "compacting metadata", |p| {
        t.compact_tree_groups(&trees, p)
    })?;
    let unchanged = picked.len() - removed - moves.len() - c.groups - m.groups;
    println!(
        "Done, had to relocate {} out of {total} chunks ({removed} empty removed, {} \
         compacted: {} extents, {} bytes moved; {} metadata compacted: {} tree blocks \
         moved{})",
        moves.len() + removed + c.groups + m.groups,
        c.groups,
        c.extents,
        c.bytes,
        m.groups,
        m.extents,
        if unchanged > 0 {
            format!(", {unchanged} already as asked")
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_as_progs_writes_them() {
        let f = parse_filters("d", "convert=raid1,soft,usage=50").unwrap();
        assert_eq!(f.convert, Some(BG_RAID1));
        assert!(f.soft);
        assert_eq!(f.usage, Some((0, 50)));
        let f = parse_filters("m", "profiles=dup|single,usage=10..90,devid=2,limit=3").unwrap();
        assert_eq!(f.profiles, Some(vec![BG_DUP, 0]));
        assert_eq!(f.usage, Some((10, 90)));
        assert_eq!((f.devid, f.limit), (Some(2), Some(3)));
        assert!(parse_filters("d", "convert=raid9").is_err());
        assert!(parse_filters("d", "usage=200").is_err());
        assert!(parse_filters("d", "frobnicate=1").is_err());
    }
}
