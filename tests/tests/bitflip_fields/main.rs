//! Hostile field flips: a field of a live tree block is changed (an item
//! header's key, offset or size; a payload field such as EXTENT_DATA's
//! num_bytes, disk_num_bytes or compression, an inode's size, a directory
//! entry's name length; a node's child pointer; the block header's item
//! count) and the block's checksum is recomputed, on every copy, so the
//! decoders see the change (bitflip.rs flips bits that mostly fail the
//! checksum first). Then every command runs on the image:
//!
//! * `inspect manifest` (walks, stats and reads every file: `ls -R` and
//!   more), `ls -l` of a directory, `extract /`, `scrub`;
//! * `send` full (v1; v2 with --compressed-data) and incremental
//!   (`-p`, v2 with --compressed-data);
//! * as root with FUSE: `ubtrfs mount -f`, a walk reading every file
//!   through the mount, unmount.
//!
//! Each runs under a timeout, RLIMIT_AS (2 GiB: an allocation sized by
//! the image fails) and RLIMIT_FSIZE (extract), and must end by itself
//! with 0, or 1 and an "error:" line: a signal (SIGABRT from a failed
//! allocation, SIGSEGV), exit 101 or "panicked at" (a panic, an overflow
//! in a debug build), another exit code or a timeout (a hang) is a
//! failure, reported with the fixture, seed, change and stderr tail.
//!
//! Seeds: UBTRFS_FIELDFLIP_SEEDS per fixture (default 50 in a release
//! build, 10 in a debug build), UBTRFS_FIELDFLIP_FIXTURES (comma-separated
//! committed fixtures), UBTRFS_FIELDFLIP_ONLY=FIXTURE:SEED replays one,
//! UBTRFS_FIELDFLIP_THREADS (default 2), UBTRFS_FIELDFLIP_KEEP=DIR keeps
//! the changed images of failing seeds. The full run (1000 seeds per
//! fixture) and a debug-build run are described in docs/hostile-images.md.
//!
//! Known failures (reported, to be fixed in the code they name) are listed
//! in EXPECTED_FAILURES by fixture, seed and command; they are printed
//! but do not fail the test.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use ubtrfs_engine::io::volumes::Placement;
use ubtrfs_format::consts::*;
use ubtrfs_format::node::{Node, HEADER_SIZE, ITEM_SIZE, KEY_PTR_SIZE};
use ubtrfs_format::CsumType;
use ubtrfs_oracle::*;

mod fields;

use fields::*;

const DEFAULT_FIXTURES: &[&str] = &["small-crc32c", "small-xxhash-zstd"];
/// The snapshots sent: full sends of both, and the second with the first
/// as parent.
const SNAPS: [&str; 2] = ["snap1", "snap2-ro"];
const ADDRESS_SPACE: u64 = 2 << 30;
/// The committed fixtures' files are at most a few MiB.
const FILE_SIZE: u64 = 64 << 20;
/// An inode size past this makes reading the file (all of it, as
/// manifest, extract and the FUSE walk do) slow in proportion, as through
/// the kernel: such a change runs only the commands that do not read
/// whole files.
const HUGE_FILE: u64 = 64 << 20;

/// (fixture, seed, command) of failures reported and left to fix. Both:
/// an EXTENT_DATA disk_num_bytes made huge in a compressed extent of
/// snap2-ro; send (crates/engine/src/send/data.rs, read_disk) asks
/// FsInfo::read_data for that many bytes: 1 TiB, an allocation failure
/// (SIGABRT), or u64::MAX, a slice index panic (data.rs:405).
// Seeds 1000033 and 1000043 of small-xxhash-zstd (a compressed extent's
// disk_num_bytes set to 1 TiB / u64::MAX) aborted or panicked in send until
// send read data through the one validated extent decoder.
const EXPECTED_FAILURES: &[(&str, u64, &str)] = &[];

fn expected_failure(fixture: &str, seed: u64, command: &str) -> bool {
    EXPECTED_FAILURES
        .iter()
        .any(|&(f, s, c)| f == fixture && s == seed && command.starts_with(c))
}

fn timeout() -> Duration {
    Duration::from_secs(if cfg!(debug_assertions) { 60 } else { 20 })
}

fn limits() -> Limits {
    Limits {
        timeout: timeout(),
        address_space: Some(ADDRESS_SPACE),
        file_size: Some(FILE_SIZE),
    }
}

// ------------------------------------------------------------ the image

/// A live tree block and where its copies are.
#[derive(Debug, Clone)]
struct Block {
    owner: u64,
    bytenr: u64,
    level: u8,
    /// (device index, physical offset) of every copy.
    copies: Vec<(usize, u64)>,
    /// The trees that reach it.
    trees: BTreeSet<u64>,
}

struct Image {
    name: String,
    dir: PathBuf,
    devices: Vec<PathBuf>,
    files: Vec<File>,
    blocks: Vec<Block>,
    csum: CsumType,
    nodesize: usize,
    /// Directories (paths without percent-encoding) to `ls -l`.
    dirs: Vec<String>,
    /// The trees of SNAPS.
    snap_trees: Vec<u64>,
}

fn devid_of(img: &Path) -> u64 {
    let f = File::open(img).unwrap();
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, SUPER_OFFSETS[0] + 0xc9).unwrap();
    u64::from_le_bytes(b)
}

impl Image {
    /// A private copy of committed fixture `name` in `dir`, and its blocks.
    fn load(name: &str, dir: &Path) -> Image {
        let fx = committed_fixture_copy(name, &dir.join("image"));
        let devices = fx.devices();
        let index: BTreeMap<u64, usize> = devices
            .iter()
            .enumerate()
            .map(|(i, d)| (devid_of(d), i))
            .collect();
        let fs = open_fixture(&fx);
        let mut trees = all_trees(&fs);
        trees.push(ubtrfs_engine::ctree::Tree::chunk(&fs.info.sb));
        let blocks = tree_blocks(&fs, &trees)
            .into_iter()
            .map(|(b, reached_from)| {
                let piece = fs
                    .info
                    .chunks
                    .map(b.bytenr, fs.info.nodesize as u64)
                    .unwrap();
                let Placement::Mirrors(m) = piece.placement else {
                    panic!("{name}: block {} is not mirrored", b.bytenr);
                };
                Block {
                    owner: b.header.owner,
                    bytenr: b.bytenr,
                    level: b.header.level,
                    copies: m.iter().map(|l| (index[&l.devid], l.physical)).collect(),
                    trees: reached_from,
                }
            })
            .collect();
        let snap_trees = fs
            .subvolumes()
            .unwrap()
            .into_iter()
            .filter(|sv| SNAPS.contains(&String::from_utf8_lossy(&sv.path).as_ref()))
            .map(|sv| sv.id)
            .collect::<Vec<_>>();
        assert_eq!(snap_trees.len(), SNAPS.len(), "{name}: snapshots {SNAPS:?}");
        let files = open_rw(&devices);
        let dirs = records(&fx.kernel_manifest())
            .into_iter()
            .filter(|(p, v)| v["type"] == "dir" && !p.contains('%'))
            .map(|(p, _)| p)
            .collect();
        Image {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            devices,
            files,
            blocks,
            csum: fs.info.csum_type,
            nodesize: fs.info.nodesize as usize,
            dirs,
            snap_trees,
        }
    }

    fn read_block(&self, b: &Block) -> Vec<u8> {
        let mut buf = vec![0u8; self.nodesize];
        let (dev, phys) = b.copies[0];
        self.files[dev].read_exact_at(&mut buf, phys).unwrap();
        buf
    }

    /// Writes `buf` to every copy of `b`.
    fn write_block(&self, b: &Block, buf: &[u8]) {
        for &(dev, phys) in &b.copies {
            self.files[dev].write_all_at(buf, phys).unwrap();
        }
    }

    fn image_args(&self) -> Vec<String> {
        image_args(&self.devices)
    }
}

// ------------------------------------------------------------- commands

/// A failure: the command and what went wrong.
struct Failure {
    command: String,
    detail: String,
}

fn ubtrfs_cmd(args: &[String]) -> Command {
    let mut c = Command::new(ubtrfs_bin());
    c.args(args);
    c
}

/// The CLI commands of one seed: (name, arguments).
fn commands(img: &Image, rng: &mut Rng, out: &Path, huge: bool) -> Vec<(String, Vec<String>)> {
    let ia = img.image_args();
    let with = |pre: &[&str], post: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = pre.iter().map(|s| s.to_string()).collect();
        v.extend(ia.iter().cloned());
        v.extend(post.iter().map(|s| s.to_string()));
        v
    };
    let o = out.join("stream").display().to_string();
    let dest = out.join("extract").display().to_string();
    let dir = rng.pick(&img.dirs).clone();
    let mut v = vec![
        ("ls -l".to_string(), with(&["ls", "-l"], &[&dir])),
        ("scrub".into(), with(&["scrub"], &[])),
        (
            "send full v1".into(),
            with(&["send"], &["-f", &o, SNAPS[0]]),
        ),
        (
            "send full v2 compressed".into(),
            with(
                &["send"],
                &["--proto", "2", "--compressed-data", "-f", &o, SNAPS[1]],
            ),
        ),
        (
            "send incremental v2 compressed".into(),
            with(
                &["send"],
                &[
                    "--proto",
                    "2",
                    "--compressed-data",
                    "-p",
                    SNAPS[0],
                    "-f",
                    &o,
                    SNAPS[1],
                ],
            ),
        ),
    ];
    if !huge {
        v.push(("manifest".into(), with(&["inspect", "manifest"], &[])));
        v.push(("extract".into(), with(&["extract"], &["/", &dest])));
    }
    v
}

/// Mounts the image through FUSE (`ubtrfs mount -f`, under the limits),
/// walks and reads every file through the mount, unmounts; judges the
/// mount process and the walk.
fn fuse_check(img: &Image, work: &Path, tally: &Mutex<Tally>) -> Result<(), String> {
    let mnt = work.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let logs = work.join("fuse-logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut cmd = ubtrfs_cmd(&[]);
    cmd.arg("mount").arg("-f").args(img.image_args()).arg(&mnt);
    let mut lim = limits();
    // The daemon runs for the whole walk; its own hang shows in the walk.
    lim.timeout = timeout() * 3;
    let mut daemon = spawn_limited(cmd, &logs, lim);
    // Whatever happens below (a panic included), no mount is left behind.
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            if is_mounted(self.0) {
                unmount(self.0);
            }
        }
    }
    let _guard = Unmount(&mnt);
    let t = Instant::now();
    while !is_mounted(&mnt) && daemon.running() {
        if t.elapsed() > timeout() {
            let _ = daemon.child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut problems = Vec::new();
    let mounted = is_mounted(&mnt);
    if mounted {
        let walk_dir = work.join("walk");
        std::fs::create_dir_all(&walk_dir).unwrap();
        let mut sh = Command::new("sh");
        // Errors (EIO from a refused block) are expected and ignored.
        sh.arg("-c")
            .arg(
                "cd \"$1\" 2>/dev/null || exit 0; \
                 find . -xdev -printf '%p %s %m %l\\n' >/dev/null 2>&1; \
                 find . -xdev -type f -size -64M -print0 2>/dev/null \
                 | xargs -0 -r cat >/dev/null 2>&1; exit 0",
            )
            .arg("walk")
            .arg(&mnt);
        let w = run_limited(sh, &walk_dir, Limits::timeout_only(timeout()));
        if w.timed_out {
            problems.push(format!("walking the mount hung (over {:?})", w.elapsed));
        }
        unmount(&mnt);
    }
    let r = daemon.wait();
    if is_mounted(&mnt) {
        unmount(&mnt);
    }
    // Exit 0: mounted, served and unmounted; 1: refused to mount.
    count(
        tally,
        "fuse mount+walk",
        r.code.filter(|_| mounted || r.code != Some(0)),
        r.elapsed,
    );
    if let Err(e) = r.judge("mount -f") {
        problems.push(e);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Per command: (runs, exits 0, exits 1, total time, slowest).
type Tally = BTreeMap<String, (usize, usize, usize, Duration, Duration)>;

fn count(t: &Mutex<Tally>, what: &str, code: Option<i32>, took: Duration) {
    let mut t = t.lock().unwrap();
    let e = t.entry(what.to_string()).or_default();
    e.0 += 1;
    e.1 += (code == Some(0)) as usize;
    e.2 += (code == Some(1)) as usize;
    e.3 += took;
    e.4 = e.4.max(took);
}

fn run_seed(img: &Image, seed: u64, fuse: bool, tally: &Mutex<Tally>) -> Vec<Failure> {
    let (change, pristine) = apply(img, seed);
    run_change(img, &change, &pristine, seed, fuse, tally)
}

/// Runs every command on the image with `change` applied (block
/// `pristine` before it), then puts the block back. `seed` names it.
fn run_change(
    img: &Image,
    change: &Change,
    pristine: &[u8],
    seed: u64,
    fuse: bool,
    tally: &Mutex<Tally>,
) -> Vec<Failure> {
    let work = img.dir.join("work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let mut rng = Rng::new(seed ^ 0xc0de);
    let mut failures = Vec::new();
    for (what, args) in commands(img, &mut rng, &work, change.huge_file) {
        let r = run_limited(ubtrfs_cmd(&args), &work, limits());
        count(tally, &what, r.code, r.elapsed);
        if let Err(e) = r.judge(&what) {
            failures.push(Failure {
                command: format!("{what}: ubtrfs {}", args.join(" ")),
                detail: e,
            });
        }
        let _ = std::fs::remove_dir_all(work.join("extract"));
    }
    if fuse && !change.huge_file {
        if let Err(e) = fuse_check(img, &work, tally) {
            failures.push(Failure {
                command: format!("fuse: ubtrfs mount -f {}", img.image_args().join(" ")),
                detail: e,
            });
        }
    }
    if !failures.is_empty() {
        if let Ok(keep) = std::env::var("UBTRFS_FIELDFLIP_KEEP") {
            std::fs::create_dir_all(&keep).unwrap();
            for d in &img.devices {
                let name = format!(
                    "{}-{seed}-{}",
                    img.name,
                    d.file_name().unwrap().to_string_lossy()
                );
                let _ = sparse_copy(d, &Path::new(&keep).join(name));
            }
        }
        for f in &mut failures {
            f.detail = format!("{} [{}]", f.detail, change.describe());
        }
    }
    img.write_block(&change.block, pristine);
    failures
}

/// Directed changes: (item type, payload field, value), applied to items
/// of the sent snapshots' leaves, one of each kind (inline or regular,
/// compressed or not). A failure's seed is 1_000_000 + the index here
/// times 10 + the item's kind.
const DIRECTED: &[(u8, &str, u64)] = &[
    (EXTENT_DATA, "ram_bytes", 1 << 40),
    (EXTENT_DATA, "ram_bytes", u64::MAX),
    (EXTENT_DATA, "ram_bytes", 0),
    (EXTENT_DATA, "disk_num_bytes", 1 << 40),
    (EXTENT_DATA, "disk_num_bytes", u64::MAX),
    (EXTENT_DATA, "disk_num_bytes", 0),
    (EXTENT_DATA, "num_bytes", 1 << 40),
    (EXTENT_DATA, "num_bytes", u64::MAX),
    (EXTENT_DATA, "offset", u64::MAX),
    (EXTENT_DATA, "offset", 1 << 40),
    (EXTENT_DATA, "disk_bytenr", u64::MAX - 4095),
    (EXTENT_DATA, "compression", 4),
    (EXTENT_DATA, "compression", 255),
    (EXTENT_DATA, "encryption", 1),
    (EXTENT_DATA, "type", 0),
    (EXTENT_DATA, "type", 2),
    (EXTENT_DATA, "type", 7),
    (INODE_ITEM, "size", u64::MAX),
    (INODE_ITEM, "nlink", 0),
    (INODE_ITEM, "mode", 0),
    (INODE_ITEM, "mode", 0o120777),
    (INODE_ITEM, "mode", 0o040755),
    (INODE_ITEM, "flags", u64::MAX),
    (DIR_INDEX, "name_len", 0xffff),
    (DIR_INDEX, "name_len", 0),
    (DIR_INDEX, "data_len", 0xffff),
    (DIR_INDEX, "location.objectid", u64::MAX),
    (DIR_INDEX, "location.type", ROOT_ITEM as u64),
    (DIR_ITEM, "name_len", 0xffff),
    (XATTR_ITEM, "data_len", 0xffff),
    (XATTR_ITEM, "name_len", 0),
    (INODE_REF, "name_len", 0xffff),
    (INODE_REF, "name_len", 0),
    (INODE_REF, "index", u64::MAX),
];

/// The directed changes for `img`: (seed, change).
fn directed_changes(img: &Image) -> Vec<(u64, Change)> {
    let mut out = Vec::new();
    let leaves: Vec<&Block> = img
        .blocks
        .iter()
        .filter(|b| b.level == 0 && b.trees.iter().any(|t| img.snap_trees.contains(t)))
        .collect();
    let bufs: Vec<Vec<u8>> = leaves.iter().map(|b| img.read_block(b)).collect();
    for (di, &(ty, field, value)) in DIRECTED.iter().enumerate() {
        // One item of each kind: inline or regular, compressed or not.
        let mut kinds_done = BTreeSet::new();
        for (b, buf) in leaves.iter().zip(&bufs) {
            let node = Node::parse(buf).unwrap();
            for i in 0..node.nritems() {
                let it = node.item(i);
                if it.key.item_type != ty {
                    continue;
                }
                let fields = payload_fields(ty, it.data.len());
                let Some(&(_, off, width)) = fields.iter().find(|f| f.0 == field) else {
                    continue;
                };
                let kind = if ty == EXTENT_DATA {
                    (it.data.len() >= 53) as u64 * 2 + (it.data[16] != 0) as u64
                } else {
                    0
                };
                if !kinds_done.insert(kind) {
                    continue;
                }
                let f = Field {
                    name: format!("item[{i}] ({}).{field}", it.key),
                    at: it.data.as_ptr() as usize - buf.as_ptr() as usize + off,
                    width,
                };
                let old = get(buf, &f);
                out.push((
                    1_000_000 + di as u64 * 10 + kind,
                    Change {
                        block: (*b).clone(),
                        huge_file: field == "size" && value > HUGE_FILE,
                        fields: vec![(f, old, value)],
                    },
                ));
            }
        }
    }
    out
}

/// Writes `change` into the image (checksum recomputed); returns the
/// pristine block.
fn apply_change(img: &Image, change: &Change) -> Vec<u8> {
    let pristine = img.read_block(&change.block);
    let mut buf = pristine.clone();
    for (f, _, new) in &change.fields {
        put(&mut buf, f, *new);
    }
    let c = img.csum.compute(&buf[32..]);
    buf[..32].copy_from_slice(&c);
    img.write_block(&change.block, &buf);
    pristine
}

#[test]
fn directed_field_changes_never_crash_hang_or_allocate_by_the_image() {
    let started = Instant::now();
    let fuse = fuse_available("directed field changes (FUSE reads)");
    let base = Workdir::new("fieldflip-directed");
    let tally = Mutex::new(Tally::new());
    let mut failures = Vec::new();
    let mut n = 0;
    // UBTRFS_FIELDFLIP_ONLY=FIXTURE:SEED replays one directed change too.
    let only = std::env::var("UBTRFS_FIELDFLIP_ONLY").ok();
    let only = only.as_deref().and_then(|o| o.split_once(':'));
    for name in DEFAULT_FIXTURES {
        if only.is_some_and(|(f, _)| f != *name) {
            continue;
        }
        let img = Image::load(name, &base.join(name));
        for (seed, change) in directed_changes(&img) {
            if only.is_some_and(|(_, s)| s != seed.to_string()) {
                continue;
            }
            let pristine = apply_change(&img, &change);
            for f in run_change(&img, &change, &pristine, seed, fuse, &tally) {
                let line = format!(
                    "{name} directed {seed} (replay: UBTRFS_FIELDFLIP_ONLY={name}:{seed}): {}\n    {}",
                    f.command, f.detail
                );
                if expected_failure(name, seed, &f.command) {
                    eprintln!("EXPECTED FAILURE (reported): {line}");
                } else {
                    failures.push(line);
                }
            }
            n += 1;
        }
    }
    print_tally(tally);
    eprintln!(
        "fieldflip: {n} directed changes, {} failures in {:.1?}",
        failures.len(),
        started.elapsed()
    );
    assert!(n >= 40 || only.is_some(), "only {n} directed changes found");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn print_tally(tally: Mutex<Tally>) {
    for (what, (n, ok, err, total, slowest)) in tally.into_inner().unwrap() {
        eprintln!(
            "fieldflip: {what}: {n} runs, {ok} exit 0, {err} exit 1 with an error; {total:.1?} in all, slowest {slowest:.1?}"
        );
    }
}

#[test]
fn hostile_fields_never_crash_hang_or_allocate_by_the_image() {
    let started = Instant::now();
    let debug = cfg!(debug_assertions);
    let nseeds = env_u64("UBTRFS_FIELDFLIP_SEEDS").unwrap_or(if debug { 10 } else { 50 });
    let threads = env_u64("UBTRFS_FIELDFLIP_THREADS").unwrap_or(2).max(1) as usize;
    let only = std::env::var("UBTRFS_FIELDFLIP_ONLY").ok();
    let names: Vec<String> = match (&only, std::env::var("UBTRFS_FIELDFLIP_FIXTURES")) {
        (Some(o), _) => vec![o.split(':').next().unwrap().to_string()],
        (None, Ok(v)) => v.split(',').map(|s| s.trim().to_string()).collect(),
        (None, Err(_)) => DEFAULT_FIXTURES.iter().map(|s| s.to_string()).collect(),
    };
    // FUSE reads run where they can (root, /dev/fuse); CI
    // (UBTRFS_REQUIRE_KERNEL=1) must have them.
    let fuse = fuse_available("hostile_fields (FUSE reads)");
    let bin = ubtrfs_bin();
    eprintln!(
        "fieldflip: {} ({} build), {nseeds} seeds per fixture, {threads} threads, FUSE reads {}",
        bin.display(),
        if debug { "debug" } else { "release" },
        if fuse {
            "on"
        } else {
            "off (not root or no FUSE)"
        }
    );
    let base = Workdir::new("fieldflip");
    let all: Mutex<Vec<(String, u64, Failure)>> = Mutex::new(Vec::new());
    let tally = Mutex::new(Tally::new());
    let mut seeds_run = 0;
    for name in &names {
        let seeds: Vec<u64> = match &only {
            Some(o) => vec![o
                .split(':')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .expect("UBTRFS_FIELDFLIP_ONLY=FIXTURE:SEED")],
            None => (1..=nseeds).collect(),
        };
        seeds_run += seeds.len();
        std::thread::scope(|s| {
            for t in 0..threads {
                let (seeds, all, base, tally) = (&seeds, &all, &base, &tally);
                s.spawn(move || {
                    let img = Image::load(name, &base.join(format!("{name}-{t}")));
                    for &seed in seeds.iter().skip(t).step_by(threads) {
                        for f in run_seed(&img, seed, fuse, tally) {
                            all.lock().unwrap().push((name.clone(), seed, f));
                        }
                    }
                });
            }
        });
        eprintln!(
            "fieldflip: {name}: {} seeds done ({:.1?})",
            seeds.len(),
            started.elapsed()
        );
    }
    let all = all.into_inner().unwrap();
    print_tally(tally);
    let mut unexpected = Vec::new();
    for (fx, seed, f) in &all {
        let line = format!(
            "{fx} seed {seed} (replay: UBTRFS_FIELDFLIP_ONLY={fx}:{seed}): {}\n    {}",
            f.command, f.detail
        );
        if expected_failure(fx, *seed, &f.command) {
            eprintln!("EXPECTED FAILURE (reported): {line}");
        } else {
            unexpected.push(line);
        }
    }
    eprintln!(
        "fieldflip: {seeds_run} seeds, {} failures ({} unexpected) in {:.1?}",
        all.len(),
        unexpected.len(),
        started.elapsed()
    );
    assert!(
        unexpected.is_empty(),
        "{} failures:\n{}",
        unexpected.len(),
        unexpected.join("\n")
    );
}
