//! Seeded bit-flip tests: corrupt committed kernel-made images a few bits at
//! a time and check that `ubtrfs` stays well behaved on every command.
//!
//! For each chosen fixture, each of a few hundred flips picks, from a seeded
//! xorshift PRNG, where to flip 1..=8 bits:
//!
//! * inside a live tree block (the `leaf N` / `node N` lines of
//!   `ubtrfs inspect dump-tree`), in one of its copies;
//! * inside a data extent (the EXTENT_DATA `disk byte` lines), one copy;
//! * anywhere in a chunk (used or not), or in the primary superblock;
//! * or, in "hostile" flips, inside a tree block whose checksum is then
//!   recomputed, so the corrupt bytes get past the checksum to the parsers.
//!
//! Logical addresses are mapped to (device, physical) through the chunk
//! items dump-tree prints (single, DUP and RAID1* profiles: every stripe is a
//! whole copy). Each flip is written into a private copy of the image, the
//! commands run, and the original bytes are written back.
//!
//! Every command (`inspect manifest`, `scrub`, `cat` of a few files,
//! `inspect dump-tree`) runs under a timeout and must: exit by itself (no
//! signal, no timeout = no hang) with code 0 or 1, print no Rust panic, and
//! say `error:` when it exits 1. Moreover:
//!
//! * a flip confined to one copy of a redundant profile (DUP, RAID1), or to
//!   the primary superblock when a mirror copy exists, changes nothing: the
//!   manifest still equals the kernel's, `cat` still gives the kernel's
//!   sha256;
//! * scrub exits 1 and names the logical address when the flip landed in a
//!   live tree block or in a checksummed data sector;
//! * no command changes the image: a sha256 fingerprint of every image file
//!   (its size and every data segment's offset and bytes; holes are skipped,
//!   which is what makes this cheap enough to do around every command) is
//!   the same before and after each command.
//!
//! Knobs: UBTRFS_BITFLIP_SEED (base seed), UBTRFS_BITFLIP_FLIPS (flips per
//! fixture, default 300), UBTRFS_BITFLIP_FIXTURES (comma-separated names),
//! UBTRFS_BITFLIP_THREADS (default 2), UBTRFS_BITFLIP_ONLY (replay one
//! flip: `FIXTURE:FLIPSEED` as printed in a failure), UBTRFS_BITFLIP_KEEP
//! (a directory to keep copies of the corrupted images in),
//! UBTRFS_BITFLIP_HOSTILE=1 (hostile flips only), UBTRFS_BIN.

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use ubtrfs_format::consts::{INODE_ITEM, SUPER_OFFSETS};
use ubtrfs_format::items::InodeItem;
use ubtrfs_format::node::Node;
use ubtrfs_format::CsumType;
use ubtrfs_oracle::{
    committed_fixture_copy, compare_manifests, data_ranges, env_u64, image_args, open_rw,
    regular_files, repo_root, run_limited, sparse_copy, ubtrfs_bin, Ignore, Limits, Rng, Run,
    Workdir,
};

mod layout;

use layout::*;

const DEFAULT_FIXTURES: &[&str] = &["small-crc32c", "small-xxhash-zstd", "small-raid1"];
const DEFAULT_FLIPS: usize = 300;
const TIMEOUT: Duration = Duration::from_secs(20);
/// RLIMIT_AS of every command: an allocation sized by the image fails.
const ADDRESS_SPACE: u64 = 2 << 30;
/// Files `cat` reads per flip (the largest one and random others).
const CATS_PER_FLIP: usize = 2;

// ------------------------------------------------------------- flips

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    TreeBlock,
    Data,
    AnyChunk,
    Superblock,
    /// A tree block, with its checksum recomputed after the flip.
    Hostile,
}

#[derive(Debug, Clone)]
struct Flip {
    seed: u64,
    target: Target,
    /// Device index (into the fixture's device list) written to.
    dev: usize,
    /// (physical offset, bit) of every flipped bit.
    bits: Vec<(u64, u8)>,
    /// Logical address of the tree block / data sector hit, if any.
    logical: Option<u64>,
    /// Whether other copies of the hit bytes are intact (so every read
    /// must give the same result as on the pristine image).
    redundant: bool,
    /// For Hostile: where the block's checksum is, to restore it too.
    block: Option<(u64, u64)>,
}

impl Flip {
    fn describe(&self, fx: &str) -> String {
        let bits: Vec<String> = self.bits.iter().map(|(o, b)| format!("{o}:{b}")).collect();
        format!(
            "fixture {fx} flip seed {:#x} (replay: {}UBTRFS_BITFLIP_ONLY={fx}:{:#x}) target {:?} dev {} logical {:?} redundant {} bits [{}]",
            self.seed,
            if hostile_only() { "UBTRFS_BITFLIP_HOSTILE=1 " } else { "" },
            self.seed,
            self.target,
            self.dev,
            self.logical,
            self.redundant,
            bits.join(" ")
        )
    }
}

struct Fixture {
    name: String,
    /// Device file names, first one first.
    devices: Vec<String>,
    /// devid -> index into `devices`.
    devid_index: BTreeMap<u64, usize>,
    layout: Layout,
    kernel_manifest: Vec<String>,
    /// ubtrfs' manifest of the pristine image, if it succeeds.
    pristine_manifest: Option<Vec<String>>,
    /// Whether the pristine manifest equals the kernel's.
    pristine_matches_kernel: bool,
    /// Regular files to `cat`: (path, kernel sha256), largest first.
    files: Vec<(String, String)>,
    /// Sizes of the device images.
    dev_sizes: Vec<u64>,
}

fn hostile_only() -> bool {
    std::env::var("UBTRFS_BITFLIP_HOSTILE").is_ok_and(|v| v == "1")
}

fn pick_bits(rng: &mut Rng, start: u64, len: u64) -> Vec<(u64, u8)> {
    let n = 1 + rng.below(8);
    // Distinct bits: flipping one bit twice would undo it.
    let set: BTreeSet<(u64, u8)> = (0..n)
        .map(|_| (start + rng.below(len), rng.below(8) as u8))
        .collect();
    set.into_iter().collect()
}

fn choose_flip(fx: &Fixture, seed: u64) -> Flip {
    let mut rng = Rng::new(seed);
    let l = &fx.layout;
    // UBTRFS_BITFLIP_HOSTILE=1: only hostile flips (for bug hunting).
    let r = if hostile_only() { 99 } else { rng.below(100) };
    let mut target = match r {
        0..=39 => Target::TreeBlock,
        40..=64 => Target::Data,
        65..=79 => Target::AnyChunk,
        80..=84 => Target::Superblock,
        _ => Target::Hostile,
    };
    if target == Target::Data && l.data_extents.is_empty() {
        target = Target::TreeBlock;
    }
    let mut flip = Flip {
        seed,
        target,
        dev: 0,
        bits: Vec::new(),
        logical: None,
        redundant: false,
        block: None,
    };
    if target == Target::Superblock {
        flip.dev = rng.below(fx.devices.len() as u64) as usize;
        flip.bits = pick_bits(&mut rng, SUPER_OFFSETS[0], 4096);
        // A mirror copy at 64 MiB takes over if the device is that large.
        flip.redundant = fx.dev_sizes[flip.dev] >= SUPER_OFFSETS[1] + 4096;
        return flip;
    }
    // A logical range to hit, and the block/sector of interest in it.
    let (logical, len) = match target {
        Target::TreeBlock | Target::Hostile => (*rng.pick(&l.tree_blocks), l.nodesize),
        Target::Data => *rng.pick(&l.data_extents),
        _ => {
            let c = rng.pick(&l.chunks);
            (c.logical, c.length)
        }
    };
    let chunk = l
        .chunk_of(logical)
        .unwrap_or_else(|| panic!("{}: logical {logical} not in any chunk", fx.name));
    assert!(
        chunk.mirrored(),
        "{}: chunk {} profile {} is not handled by this test's mapping",
        fx.name,
        chunk.logical,
        chunk.profile
    );
    let stripe = rng.below(chunk.stripes.len() as u64) as usize;
    let (devid, phys0) = chunk.stripes[stripe];
    flip.dev = *fx
        .devid_index
        .get(&devid)
        .unwrap_or_else(|| panic!("{}: no device file for devid {devid}", fx.name));
    flip.redundant = chunk.stripes.len() > 1;
    let phys = phys0 + (logical - chunk.logical);
    if target == Target::Hostile {
        // Leave the checksum field alone; it is rewritten after the flip.
        flip.bits = pick_bits(&mut rng, phys + 32, len - 32);
        flip.block = Some((phys, len));
        flip.logical = Some(logical);
        return flip;
    }
    flip.bits = pick_bits(&mut rng, phys, len);
    let logical_of = |o: u64| logical + (o - phys);
    // Reads of data without a checksum are not verified, so only a copy
    // whose flipped bytes are all metadata, checksummed data or unused can
    // be relied on to be caught and read around.
    flip.redundant &= flip.bits.iter().all(|&(o, _)| {
        let at = logical_of(o);
        let sector = at / l.sectorsize * l.sectorsize;
        !l.in_data_extent(at) || l.has_csum(sector)
    });
    match target {
        Target::TreeBlock => {
            // Bytes past the checksum's size in the 32-byte csum field are
            // not covered by anything: a flip only there changes nothing.
            let cs = CsumType::from_raw(l.csum_type).map_or(32, |c| c.size() as u64);
            let covered = |o: u64| o - phys < cs || o - phys >= 32;
            if flip.bits.iter().any(|&(o, _)| covered(o)) {
                flip.logical = Some(logical);
            }
        }
        Target::Data => {
            // The first flipped sector that has a checksum, if any.
            flip.logical = flip
                .bits
                .iter()
                .map(|&(o, _)| (logical + (o - phys)) / l.sectorsize * l.sectorsize)
                .find(|&s| l.has_csum(s));
        }
        _ => {}
    }
    flip
}

/// Flips the bits of `flip` in the device files and returns the original
/// bytes (offset, byte) to restore. A Hostile flip also rewrites the
/// block's checksum, and its original checksum is in the returned bytes.
fn apply(files: &[File], fx: &Fixture, flip: &Flip) -> Vec<(u64, u8)> {
    let f = &files[flip.dev];
    let mut orig: BTreeMap<u64, u8> = BTreeMap::new();
    for &(off, bit) in &flip.bits {
        let mut b = [0u8];
        f.read_exact_at(&mut b, off).expect("read image byte");
        orig.entry(off).or_insert(b[0]);
        b[0] ^= 1 << bit;
        f.write_all_at(&b, off).expect("write image byte");
    }
    if let Some((start, len)) = flip.block {
        let mut blk = vec![0u8; len as usize];
        f.read_exact_at(&mut blk, start).expect("read block");
        let ct = CsumType::from_raw(fx.layout.csum_type).expect("csum type");
        let c = ct.compute(&blk[32..]);
        for (i, &byte) in c.iter().enumerate() {
            orig.entry(start + i as u64).or_insert(blk[i]);
            blk[i] = byte;
        }
        f.write_all_at(&blk[..32], start).expect("write csum");
    }
    orig.into_iter().collect()
}

fn restore(files: &[File], dev: usize, orig: &[(u64, u8)]) {
    for &(off, b) in orig {
        files[dev].write_all_at(&[b], off).expect("restore byte");
        let mut r = [0u8];
        files[dev].read_exact_at(&mut r, off).expect("reread");
        assert_eq!(r[0], b, "restoring byte at {off} failed");
    }
}

// ------------------------------------------------------ fingerprints

/// sha256 of a file's size and of every data segment (offset, bytes), found
/// with SEEK_DATA/SEEK_HOLE: holes read as zeros and are skipped, so a
/// 100 MiB sparse image with 8 MiB of data hashes in milliseconds. Any
/// write to the file changes it.
fn fingerprint(path: &Path) -> String {
    let f = File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let size = f.metadata().expect("metadata").len();
    let mut h = Sha256::new();
    h.update(size.to_le_bytes());
    let mut buf = vec![0u8; 1 << 20];
    let map = data_ranges(&f).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for (data, hole) in map {
        h.update(data.to_le_bytes());
        let mut p = data;
        while p < hole {
            let n = ((hole - p) as usize).min(buf.len());
            f.read_exact_at(&mut buf[..n], p).expect("read image");
            h.update(&buf[..n]);
            p += n as u64;
        }
    }
    format!("{:x}", h.finalize())
}

// ---------------------------------------------------------- commands

/// Runs ubtrfs with `args` under TIMEOUT and ADDRESS_SPACE.
fn run_ubtrfs(tmp: &Path, args: &[String]) -> Run {
    let mut cmd = Command::new(ubtrfs_bin());
    cmd.args(args);
    run_limited(
        cmd,
        tmp,
        Limits {
            timeout: TIMEOUT,
            address_space: Some(ADDRESS_SPACE),
            file_size: None,
        },
    )
}

fn contains_number(hay: &str, n: u64) -> bool {
    let s = n.to_string();
    hay.match_indices(&s).any(|(i, _)| {
        let before = hay[..i].chars().next_back();
        let after = hay[i + s.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit())
    })
}

fn sha256_hex(b: &[u8]) -> String {
    format!("{:x}", Sha256::digest(b))
}

// ------------------------------------------------------------ setup

fn dev_paths(dir: &Path, devices: &[String]) -> Vec<PathBuf> {
    devices.iter().map(|d| dir.join(d)).collect()
}

fn load_fixture(name: &str, dir: &Path) -> Fixture {
    let src = repo_root().join("tests/fixtures/committed").join(name);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("meta.json")).expect("meta.json"))
            .expect("meta.json parses");
    let devices: Vec<String> = meta["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| d.as_str().expect("device name").to_string())
        .collect();
    committed_fixture_copy(name, dir);
    let mut devid_index = BTreeMap::new();
    let mut dev_sizes = Vec::new();
    let mut sb0 = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        let f = File::open(dir.join(d)).expect("open image");
        let mut sb = vec![0u8; 4096];
        f.read_exact_at(&mut sb, SUPER_OFFSETS[0])
            .expect("read superblock");
        let devid = u64::from_le_bytes(sb[0xc9..0xd1].try_into().unwrap());
        devid_index.insert(devid, i);
        dev_sizes.push(f.metadata().expect("metadata").len());
        if i == 0 {
            sb0 = sb;
        }
    }
    let mut args = vec!["inspect".to_string(), "dump-tree".to_string()];
    args.extend(image_args(&dev_paths(dir, &devices)));
    let r = run_ubtrfs(dir, &args);
    assert_eq!(
        r.code,
        Some(0),
        "{name}: dump-tree of the pristine image failed (signal {:?}, timed out {}): {}",
        r.signal,
        r.timed_out,
        r.stderr
    );
    let layout = parse_layout(&String::from_utf8_lossy(&r.stdout), &sb0);
    assert!(
        !layout.chunks.is_empty(),
        "{name}: no chunk items in dump-tree output"
    );
    assert!(
        !layout.tree_blocks.is_empty(),
        "{name}: no tree blocks in dump-tree output"
    );
    let kernel_manifest: Vec<String> = std::fs::read_to_string(src.join("manifest.jsonl"))
        .expect("manifest.jsonl")
        .lines()
        .map(String::from)
        .collect();
    let mut args = vec!["inspect".to_string(), "manifest".to_string()];
    args.extend(image_args(&dev_paths(dir, &devices)));
    let r = run_ubtrfs(dir, &args);
    let pristine_manifest = (r.code == Some(0)).then(|| {
        String::from_utf8_lossy(&r.stdout)
            .lines()
            .map(String::from)
            .collect::<Vec<_>>()
    });
    let pristine_matches_kernel = pristine_manifest
        .as_ref()
        .is_some_and(|m| compare_manifests(&kernel_manifest, m, &Ignore::default()).is_ok());
    if !pristine_matches_kernel {
        eprintln!(
            "bitflip: NOTE {name}: ubtrfs' manifest of the pristine image does not match the kernel's ({}); flips are compared with ubtrfs' own pristine output instead",
            if pristine_manifest.is_some() { "differs" } else { "manifest failed" }
        );
    }
    let mut files: Vec<(u64, String, String)> = regular_files(&kernel_manifest)
        .into_iter()
        // Only paths that need no percent-decoding.
        .filter(|f| !f.path.contains('%'))
        .map(|f| (f.size, f.path, f.sha256))
        .collect();
    files.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    Fixture {
        name: name.to_string(),
        devices,
        devid_index,
        layout,
        kernel_manifest,
        pristine_manifest,
        pristine_matches_kernel,
        files: files.into_iter().map(|(_, p, s)| (p, s)).collect(),
        dev_sizes,
    }
}

// -------------------------------------------------------------- one flip

#[derive(Default)]
struct Stats {
    flips: BTreeMap<String, usize>,
    commands: usize,
    exit1: usize,
    slowest: Duration,
    /// Hostile flips that made a file's size huge (see `makes_huge_file`).
    huge_files: usize,
}

fn run_flip(
    fx: &Fixture,
    dir: &Path,
    files: &[File],
    flip: &Flip,
    stats: &mut Stats,
) -> Vec<String> {
    let mut failures = Vec::new();
    let orig = apply(files, fx, flip);
    let images: Vec<PathBuf> = fx.devices.iter().map(|d| dir.join(d)).collect();
    let img = image_args(&dev_paths(dir, &fx.devices));
    let mut rng = Rng::new(flip.seed ^ 0xca75);
    let mut cats: Vec<&(String, String)> = fx.files.iter().take(1).collect();
    for _ in 1..CATS_PER_FLIP.min(fx.files.len()) {
        cats.push(rng.pick(&fx.files));
    }
    let mut cmds: Vec<(String, Vec<String>)> = vec![
        (
            "manifest".into(),
            ["inspect", "manifest"].map(String::from).to_vec(),
        ),
        ("scrub".into(), vec!["scrub".into()]),
        (
            "dump-tree".into(),
            ["inspect", "dump-tree"].map(String::from).to_vec(),
        ),
    ];
    for (p, _) in &cats {
        cmds.push((format!("cat {p}"), vec!["cat".into()]));
    }
    // A hostile flip can make a file's size huge (say 8 TiB) and the
    // image still valid: then reading it all (manifest's sha256, cat) takes
    // time in proportion, as it would through the kernel. Such a flip is
    // recognized here and only the commands that do not read file contents
    // (scrub, dump-tree) are run.
    let huge_file = flip.target == Target::Hostile && makes_huge_file(&files[flip.dev], flip);
    if huge_file {
        stats.huge_files += 1;
    }
    let mut fp = images.iter().map(|p| fingerprint(p)).collect::<Vec<_>>();
    // Whether this flip must leave every result as on the pristine image.
    let must_heal = flip.redundant && flip.target != Target::Hostile;
    for (i, (what, base)) in cmds.iter().enumerate() {
        if huge_file && (what == "manifest" || what.starts_with("cat ")) {
            continue;
        }
        let mut args = base.clone();
        args.extend(img.iter().cloned());
        if what.starts_with("cat ") {
            args.push(cats[i - 3].0.clone());
        }
        let r = run_ubtrfs(dir, &args);
        stats.commands += 1;
        stats.slowest = stats.slowest.max(r.elapsed);
        if r.code == Some(1) {
            stats.exit1 += 1;
        }
        let after = images.iter().map(|p| fingerprint(p)).collect::<Vec<_>>();
        if after != fp {
            failures.push(format!(
                "{what}: the image changed while it ran (fingerprint)"
            ));
            fp = after;
        }
        if let Err(e) = r.judge(what) {
            failures.push(e);
            continue;
        }
        let stdout = String::from_utf8_lossy(&r.stdout);
        if what == "manifest" && must_heal {
            let got: Vec<String> = stdout.lines().map(String::from).collect();
            if r.code != Some(0) {
                failures.push(format!(
                    "manifest: failed although another copy is intact: {}",
                    r.stderr.trim()
                ));
            } else if fx.pristine_matches_kernel {
                if let Err(d) = compare_manifests(&fx.kernel_manifest, &got, &Ignore::default()) {
                    failures.push(format!("manifest differs from the kernel's: {d}"));
                }
            } else if fx.pristine_manifest.as_ref().is_some_and(|p| *p != got) {
                failures.push("manifest differs from the pristine image's".into());
            }
        }
        if what.starts_with("cat ") && must_heal && fx.pristine_matches_kernel {
            let want = &cats[i - 3].1;
            if r.code != Some(0) || sha256_hex(&r.stdout) != *want {
                failures.push(format!(
                    "{what}: exit {:?}, sha256 {} instead of the kernel's {want}: {}",
                    r.code,
                    sha256_hex(&r.stdout),
                    r.stderr.trim()
                ));
            }
        }
        if what == "scrub" && matches!(flip.target, Target::TreeBlock | Target::Data) {
            if let Some(l) = flip.logical {
                let all = format!("{stdout}\n{}", r.stderr);
                if r.code != Some(1) || !contains_number(&all, l) {
                    failures.push(format!(
                        "scrub: exit {:?} and output not naming logical {l} although the flip hit it: {}",
                        r.code,
                        all.chars().take(800).collect::<String>()
                    ));
                }
            }
        }
    }
    if let Ok(keep) = std::env::var("UBTRFS_BITFLIP_KEEP") {
        // Debugging aid: keep the corrupted images (sparse copies).
        std::fs::create_dir_all(&keep).expect("create UBTRFS_BITFLIP_KEEP");
        for p in &images {
            let dst = Path::new(&keep).join(format!(
                "{:#x}-{}",
                flip.seed,
                p.file_name().unwrap().to_string_lossy()
            ));
            let _ = sparse_copy(p, &dst);
        }
    }
    restore(files, flip.dev, &orig);
    *stats.flips.entry(format!("{:?}", flip.target)).or_default() += 1;
    failures
        .into_iter()
        .map(|f| format!("{}: {f}", flip.describe(&fx.name)))
        .collect()
}

/// Whether the (flipped, re-checksummed) tree block of a Hostile flip now
/// has an inode whose size is over 64 MiB (the fixtures' files are at most
/// 10 MiB; hashing 1 GiB of zeros already takes over 20 s in a debug build).
fn makes_huge_file(f: &File, flip: &Flip) -> bool {
    let Some((start, len)) = flip.block else {
        return false;
    };
    let mut blk = vec![0u8; len as usize];
    f.read_exact_at(&mut blk, start).expect("read block");
    let Ok(node) = Node::parse(&blk) else {
        return false;
    };
    node.is_leaf()
        && (0..node.nritems()).any(|i| {
            let it = node.item(i);
            it.key.item_type == INODE_ITEM
                && InodeItem::parse(it.data).is_ok_and(|ino| ino.size > 64 << 20)
        })
}

// ------------------------------------------------------------- the test

#[test]
fn bitflips_never_crash_hang_or_write() {
    let started = Instant::now();
    let base_seed = env_u64("UBTRFS_BITFLIP_SEED").unwrap_or(0xb17f_11b5);
    let nflips = env_u64("UBTRFS_BITFLIP_FLIPS").unwrap_or(DEFAULT_FLIPS as u64) as usize;
    let threads = env_u64("UBTRFS_BITFLIP_THREADS").unwrap_or(2).max(1) as usize;
    let only = std::env::var("UBTRFS_BITFLIP_ONLY").ok();
    let names: Vec<String> = match (&only, std::env::var("UBTRFS_BITFLIP_FIXTURES")) {
        (Some(o), _) => vec![o.split(':').next().unwrap_or("").to_string()],
        (None, Ok(v)) => v
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        (None, Err(_)) => DEFAULT_FIXTURES.iter().map(|s| s.to_string()).collect(),
    };
    let bin = ubtrfs_bin();
    eprintln!("bitflip: binary {}, base seed {base_seed:#x}, {nflips} flips per fixture, {threads} threads", bin.display());
    let base = std::env::temp_dir().join(format!("ubtrfs-bitflip-{}", std::process::id()));
    let _cleanup = Workdir(base.clone());
    let failures = Mutex::new(Vec::<String>::new());
    for name in &names {
        // One private copy of the images per worker.
        let fixtures: Vec<(PathBuf, Fixture)> = (0..threads)
            .map(|t| {
                let dir = base.join(format!("{name}-{t}"));
                let fx = load_fixture(name, &dir);
                (dir, fx)
            })
            .collect();
        let seeds: Vec<u64> = match &only {
            Some(o) => vec![o
                .split(':')
                .nth(1)
                .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
                .expect("UBTRFS_BITFLIP_ONLY=FIXTURE:0xSEED")],
            None => {
                let mut r = Rng::for_name(base_seed, name);
                (0..nflips).map(|_| r.next()).collect()
            }
        };
        let fx0 = &fixtures[0].1;
        eprintln!(
            "bitflip: {name}: {} chunks, {} tree blocks, {} data extents, {} csum ranges, {} files to cat; pristine manifest {}",
            fx0.layout.chunks.len(),
            fx0.layout.tree_blocks.len(),
            fx0.layout.data_extents.len(),
            fx0.layout.csum_ranges.len(),
            fx0.files.len(),
            if fx0.pristine_matches_kernel { "matches the kernel" } else { "does NOT match the kernel" }
        );
        let all_stats = Mutex::new(Stats::default());
        std::thread::scope(|s| {
            for (t, (dir, fx)) in fixtures.iter().enumerate() {
                let seeds = &seeds;
                let failures = &failures;
                let all_stats = &all_stats;
                s.spawn(move || {
                    let files = open_rw(&dev_paths(dir, &fx.devices));
                    let mut stats = Stats::default();
                    for &seed in seeds.iter().skip(t).step_by(threads) {
                        let flip = choose_flip(fx, seed);
                        let f = run_flip(fx, dir, &files, &flip, &mut stats);
                        failures.lock().unwrap().extend(f);
                    }
                    let mut a = all_stats.lock().unwrap();
                    for (k, v) in stats.flips {
                        *a.flips.entry(k).or_default() += v;
                    }
                    a.commands += stats.commands;
                    a.exit1 += stats.exit1;
                    a.slowest = a.slowest.max(stats.slowest);
                    a.huge_files += stats.huge_files;
                });
            }
        });
        let a = all_stats.into_inner().unwrap();
        eprintln!(
            "bitflip: {name}: flips {:?}; {} commands, {} exited 1 (with an error), slowest {:?}; {} hostile flips made a file huge; {:?} elapsed",
            a.flips,
            a.commands,
            a.exit1,
            a.slowest,
            a.huge_files,
            started.elapsed()
        );
        for (dir, _) in &fixtures {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    let failures = failures.into_inner().unwrap();
    if !failures.is_empty() {
        let n = failures.len();
        let shown: Vec<&String> = failures.iter().take(25).collect();
        panic!(
            "{n} bit-flip failures (base seed {base_seed:#x}):\n{}",
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// A hostile image (checksums made right) where directories are linked
/// more than once: along a chain of directories D0 = /, D1, ... Dk (each with
/// at least two entries) two entries of every Di lead to Di+1, so a naive
/// depth-first walk visits Dk 2^k times (on this fixture, k = 13: 173,487
/// paths instead of 480; a few dozen such directories make it a hang).
/// `inspect manifest` must stop with an error saying a directory was
/// reached twice.
#[test]
fn directory_linked_twice_is_an_error_not_an_exponential_walk() {
    let name = "small-crc32c";
    let base = std::env::temp_dir().join(format!("ubtrfs-dirdag-{}", std::process::id()));
    let _cleanup = Workdir(base.clone());
    let fx = load_fixture(name, &base);
    let l = &fx.layout;
    // Directories of the top-level subvolume (not below a subvolume root,
    // which the manifest shows with inode 256) and their entry counts.
    let entries: Vec<serde_json::Value> = fx
        .kernel_manifest
        .iter()
        .map(|x| serde_json::from_str(x).expect("manifest line"))
        .collect();
    let subvol_roots: Vec<String> = entries
        .iter()
        .filter(|e| e["ino"] == 256 && e["path"] != "/")
        .map(|e| format!("{}/", e["path"].as_str().unwrap()))
        .collect();
    let mut dirs: Vec<(usize, String, u64)> = entries
        .iter()
        .filter(|e| e["type"] == "dir")
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_string(),
                e["ino"].as_u64().unwrap(),
            )
        })
        .filter(|(p, ino)| {
            p == "/" || (*ino != 256 && !subvol_roots.iter().any(|r| p.starts_with(r.as_str())))
        })
        .filter(|(p, _)| {
            let prefix = if p == "/" {
                "/".to_string()
            } else {
                format!("{p}/")
            };
            entries
                .iter()
                .filter(|e| {
                    let q = e["path"].as_str().unwrap();
                    q.starts_with(&prefix)
                        && q.len() > prefix.len()
                        && !q[prefix.len()..].contains('/')
                })
                .count()
                >= 2
        })
        .map(|(p, ino)| (if p == "/" { 0 } else { p.matches('/').count() }, p, ino))
        .collect();
    // Shallower first: a chain edge never leads back up, so no loop is made
    // (loops are cut off by the depth limit anyway); only fan-out.
    dirs.sort();
    assert!(
        dirs.len() >= 8,
        "{name}: only {} directories with two entries",
        dirs.len()
    );
    let next: BTreeMap<u64, u64> = dirs.windows(2).map(|w| (w[0].2, w[1].2)).collect();
    // Rewrite the location of the first two DIR_INDEX entries of each
    // chained directory, in every leaf of the fs tree that holds them.
    let ct = CsumType::from_raw(l.csum_type).expect("csum type");
    let files = open_rw(&dev_paths(&base, &fx.devices));
    let mut rewritten: BTreeMap<u64, usize> = BTreeMap::new();
    for &bytenr in &l.tree_blocks {
        let chunk = l.chunk_of(bytenr).expect("tree block in a chunk");
        let (devid, phys0) = chunk.stripes[0];
        let mut blk = vec![0u8; l.nodesize as usize];
        files[fx.devid_index[&devid]]
            .read_exact_at(&mut blk, phys0 + (bytenr - chunk.logical))
            .expect("read block");
        let node = Node::parse(&blk).expect("pristine block parses");
        if !node.is_leaf() || node.header.owner != 5 {
            continue;
        }
        let mut edits = Vec::new();
        for i in 0..node.nritems() {
            let it = node.item(i);
            let Some(&to) = next.get(&it.key.objectid) else {
                continue;
            };
            if it.key.item_type != ubtrfs_format::consts::DIR_INDEX
                || it.data.len() < 17
                || it.data[8] != INODE_ITEM
            {
                continue;
            }
            let n = rewritten.entry(it.key.objectid).or_default();
            if *n < 2 {
                *n += 1;
                edits.push((it.data.as_ptr() as usize - blk.as_ptr() as usize, to));
            }
        }
        if edits.is_empty() {
            continue;
        }
        for (at, to) in edits {
            blk[at..at + 8].copy_from_slice(&to.to_le_bytes());
        }
        let c = ct.compute(&blk[32..]);
        blk[..32].copy_from_slice(&c);
        // Every copy, so no mirror hides the change.
        for &(devid, phys0) in &chunk.stripes {
            files[fx.devid_index[&devid]]
                .write_all_at(&blk, phys0 + (bytenr - chunk.logical))
                .expect("write block");
        }
    }
    let fanned = rewritten.values().filter(|&&n| n == 2).count();
    assert!(
        fanned >= 8,
        "{name}: only {fanned} directories got two links to the next"
    );
    let mut args = vec!["inspect".to_string(), "manifest".to_string()];
    args.extend(image_args(&dev_paths(&base, &fx.devices)));
    let r = run_ubtrfs(&base, &args);
    r.judge("manifest")
        .unwrap_or_else(|e| panic!("{name}, {fanned} directories linked twice: {e}"));
    assert_eq!(
        r.code,
        Some(1),
        "{name}: a directory linked twice must be an error: {}",
        r.stderr
    );
    assert!(
        r.stderr.contains("second time"),
        "{name}: the error should say a directory was reached twice: {}",
        r.stderr
    );
}
