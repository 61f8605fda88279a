//! fsync writes log trees (tree_log::write): crash tests in process, as
//! dm-log-writes tests the kernel's fsync. A seeded workload of the
//! read-write mount's operations (files made in committed and in new,
//! nested directories; writes, appends, truncates, punches, zero ranges,
//! preallocations; renames, links and unlinks of scratch files, which make
//! fsync commit; fsyncs and the odd commit) runs on a recording device
//! with a long commit interval. After every fsync or commit that returned,
//! the durable state is noted: the path and content of every file fsynced
//! (or of every file, after a commit). Then every prefix of the writes
//! that ends at a flush is applied to a copy of the image as it was
//! before the workload; the log is replayed (tree_log::replay, then a
//! commit); the engine's check and `btrfs check --readonly` pass; and each
//! durable file of the last fsync the prefix holds reads back at its path
//! with that content. Write failures injected at seeded device
//! operations (the device fails from there on) make the failing call
//! return an error, and the image replays to the last durable state or to
//! the one the failing fsync or commit was making.
//!
//! As root, the kernel judges too: crash images of a few more seeds are
//! mounted by the kernel, which replays the log, and must show every
//! durable file and pass `btrfs check` (tests/oracle/kernel_replay.py).
//!
//! UBTRFS_LOG_WRITE_SEEDS=N (default 8), UBTRFS_LOG_WRITE_SEED=S;
//! UBTRFS_LOG_WRITE_KERNEL_SEEDS=N (default 3) for the kernel's part.
//! UBTRFS_LOG_WRITE_KEEP=FILE keeps the image of a failed btrfs check.

#[path = "../memcheck/mod.rs"]
mod memcheck;
mod workload;

use memcheck::{model_fallocate, model_write, seeded_mkfs, Rng, TOP};
use std::collections::BTreeMap;
use std::sync::Arc;
use ubtrfs_engine::fs::{Filesystem, InodeId};
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::io::device::Device;
use ubtrfs_engine::io::fault::{FaultDev, RecordDev};
use ubtrfs_engine::mkfs::{make, MkfsOptions};
use ubtrfs_engine::rwfs::attr::SetAttr;
use ubtrfs_engine::rwfs::{FsyncStage, RwFs, RwOptions, SyncStep};
use ubtrfs_engine::tx::Trans;
use ubtrfs_engine::FileHandle;
use ubtrfs_format::consts::*;
use workload::*;

const SS: u64 = 4096;
const DEV_SIZE: u64 = 128 << 20;

/// A file's user xattrs: name -> value.
type Xattrs = BTreeMap<Vec<u8>, Vec<u8>>;

/// Path -> content and xattrs of the files a crash must keep.
type Durable = BTreeMap<String, (Vec<u8>, Xattrs)>;

/// Mount options of a seed: a long commit interval; every fourth seed
/// compresses (zstd), every fourth has no data checksums. (Not
/// nodatacow: NOCOW data overwritten in place after its fsync is what a
/// crash shows, as with the kernel, which a model of durable contents
/// cannot follow.)
fn opts(seed: u64) -> RwOptions {
    RwOptions {
        commit_secs: 3600,
        compress: (seed % 4 == 1).then_some((COMPRESS_ZSTD, 1)),
        nodatasum: seed % 4 == 3,
        ..Default::default()
    }
}

/// Replays the log on `dev`, commits, checks, and reads every durable
/// file back.
fn check_crash(dev: Arc<MemDev>, want: &Durable, btrfs_check: bool) -> Result<(), String> {
    let t = Trans::open_dev_with_log(
        vec![("mem".into(), dev.clone() as Arc<dyn BlockDev>)],
        16 << 20,
    )
    .map_err(|e| format!("open: {e}"))?;
    let had_log = t.log_root().0 != 0;
    let mut t = t;
    if had_log {
        ubtrfs_engine::tree_log::replay(&mut t).map_err(|e| format!("replay: {e}"))?;
        t.commit()
            .map_err(|e| format!("commit after replay: {e}"))?;
    }
    drop(t);
    ubtrfs_engine::tools::check::check_dev(dev.clone())
        .map_err(|e| format!("engine check: {e}"))?;
    if btrfs_check {
        memcheck::btrfs_check(&dev, "log_write")?;
    }
    let d =
        Device::from_dev(std::path::Path::new("mem"), dev.clone()).map_err(|e| e.to_string())?;
    let reader = Filesystem::from_devices(vec![d], 16 << 20).map_err(|e| e.to_string())?;
    for (path, (data, xattrs)) in want {
        let id = reader
            .resolve(path.trim_start_matches('/').as_bytes())
            .map_err(|e| format!("{path}: {e}"))?;
        let mut fh = FileHandle::open(&reader, id).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; data.len() + 1];
        let got = fh
            .read_at(&reader, 0, &mut buf)
            .map_err(|e| format!("{path}: read: {e}"))?;
        if got != data.len() || buf[..got] != data[..] {
            let at = buf.iter().zip(data).position(|(a, b)| a != b);
            return Err(format!(
                "{path}: {got} bytes read, {} durable; first difference at {at:?}",
                data.len()
            ));
        }
        let got: Xattrs = reader
            .xattrs(id)
            .map_err(|e| format!("{path}: xattrs: {e}"))?
            .into_iter()
            .filter(|(n, _)| n.starts_with(b"user."))
            .collect();
        if &got != xattrs {
            return Err(format!("{path}: xattrs {got:?}, durable {xattrs:?}"));
        }
    }
    Ok(())
}

/// Writes a crash image and what it must show (one line per durable
/// file: path, size, FNV-1a 64 of the content, user xattrs as
/// name=hexvalue joined by commas) for a kernel mount to judge
/// (tests/oracle/kernel_replay.py).
fn export(dir: &std::path::Path, seed: u64, i: usize, dev: &MemDev, want: &Durable) {
    std::fs::create_dir_all(dir).unwrap();
    let base = format!("{}/s{seed}-f{i}", dir.display());
    memcheck::write_sparse(format!("{base}.img").as_ref(), &dev.snapshot());
    let mut lines = String::new();
    for (path, (data, xattrs)) in want {
        let sum = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        let xa: Vec<String> = xattrs
            .iter()
            .map(|(n, v)| {
                let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
                format!("{}={hex}", String::from_utf8_lossy(n))
            })
            .collect();
        lines += &format!("{path}\t{}\t{sum:016x}\t{}\n", data.len(), xa.join(","));
    }
    std::fs::write(format!("{base}.want"), lines).unwrap();
}

/// The image before the recorded workload (made by an unrecorded part,
/// committed), and the workload's state then.
fn prepare(seed: u64) -> Result<(Vec<u8>, World), String> {
    let base = Arc::new(MemDev::new(DEV_SIZE));
    let t = seeded_mkfs(base.clone(), seed, 0x26, 2)?;
    let mut fs = RwFs::with_trans(t, opts(seed)).map_err(|e| e.to_string())?;
    let root = TOP;
    // Committed before the recording starts: some files and a directory.
    let c = fs
        .create(root, b"c", 0o040755, 0, (0, 0), None)
        .map_err(|e| e.to_string())?;
    let mut w = World {
        rng: Rng::new(seed),
        files: Vec::new(),
        dirs: vec![(root, String::new()), (c, "/c".into())],
        log: Vec::new(),
        n: 0,
        states: Vec::new(),
        durable: Durable::new(),
        attempt: Vec::new(),
        grouped: 0,
        in_flight: 0,
    };
    let null = RecordDev::new(Arc::new(MemDev::new(4096)));
    workload(&mut fs, &null, &mut w, 30)?;
    fs.unmount().map_err(|e| e.to_string())?;
    w.files.iter_mut().for_each(|f| f.scratch = false);
    drop(fs);
    let first: Durable = w
        .files
        .iter()
        .map(|f| (f.path.clone(), (f.data.clone(), f.xattrs.clone())))
        .collect();
    w.states = vec![(0usize, first)];
    w.log.push("-- recording".into());
    Ok((base.snapshot(), w))
}

fn run_seed(seed: u64, export_to: Option<&std::path::Path>) -> Result<String, String> {
    let (image, mut w) = prepare(seed)?;
    // The recorded workload.
    let rec = Arc::new(RecordDev::new(Arc::new(MemDev::from_bytes(image.clone()))));
    let t = Trans::open_dev(vec![rec.clone() as Arc<dyn BlockDev>], 16 << 20)
        .map_err(|e| e.to_string())?;
    let mut fs = RwFs::with_trans(t, opts(seed)).map_err(|e| e.to_string())?;
    let more = workload(&mut fs, &rec, &mut w, 90);
    let log = std::mem::take(&mut w.log);
    more.map_err(|e| format!("{e}\nlog:\n{}", log.join("\n")))?;
    let states = std::mem::take(&mut w.states);
    let (syncs, commits) = (fs.stats.log_syncs, fs.stats.fsync_commits);
    drop(fs); // the crash: nothing more reaches the device
    let events = rec.log();
    let flushes = events.flushes();
    let mut checked = 0;
    for (i, &f) in flushes.iter().enumerate() {
        // Every prefix near the end, a sample elsewhere.
        if i % 3 != 0 && i + 4 < flushes.len() {
            continue;
        }
        let dev = Arc::new(MemDev::from_bytes(image.clone()));
        events.replay(&*dev, 0, f).map_err(|e| e.to_string())?;
        let want = &states
            .iter()
            .rev()
            .find(|(e, _)| *e <= f + 1)
            .expect("the first state")
            .1;
        if let Some(dir) = export_to {
            export(dir, seed, i, &dev, want);
        }
        check_crash(dev, want, i % 6 == 0 || i + 1 == flushes.len()).map_err(|e| {
            format!(
                "prefix to flush {i} (event {f}): {e}\nlog:\n{}",
                log.join("\n")
            )
        })?;
        checked += 1;
    }
    Ok(format!(
        "{} fsyncs logged ({} grouped pairs), {commits} committed, {checked} of {} prefixes checked; {} log syncs written while another file changed",
        syncs,
        w.grouped,
        flushes.len(),
        w.in_flight
    ))
}

/// Write failures injected at seeded points of the recorded workload
/// (the device fails that write or flush and all after it): the failing
/// call returns an error (never a panic), and the image replays to the
/// last durable state, or to the one the failing fsync or commit was
/// making if its superblock got out.
fn run_faults(seed: u64, points: u64) -> Result<String, String> {
    // A run without faults counts the device operations.
    let (image, mut w) = prepare(seed)?;
    let fdev = Arc::new(FaultDev::new(Arc::new(MemDev::from_bytes(image)), None));
    let rec = RecordDev::new(fdev.clone());
    let t = Trans::open_dev(vec![fdev.clone() as Arc<dyn BlockDev>], 16 << 20)
        .map_err(|e| e.to_string())?;
    let mut fs = RwFs::with_trans(t, opts(seed)).map_err(|e| e.to_string())?;
    workload(&mut fs, &rec, &mut w, 90)?;
    let total = fdev.ops();
    let mut rng = Rng::new(seed ^ 0x5555_aaaa_5555_aaaa);
    let mut failed_calls = 0;
    for _ in 0..points {
        let at = rng.below(total);
        let (image, mut w) = prepare(seed)?;
        let mem = Arc::new(MemDev::from_bytes(image));
        let fdev = Arc::new(FaultDev::new(mem.clone(), Some(at)));
        let rec = Arc::new(RecordDev::new(fdev.clone()));
        let t = Trans::open_dev(vec![rec.clone() as Arc<dyn BlockDev>], 16 << 20)
            .map_err(|e| e.to_string())?;
        let mut fs = RwFs::with_trans(t, opts(seed)).map_err(|e| e.to_string())?;
        let r = workload(&mut fs, &rec, &mut w, 90);
        drop(fs);
        let mut wants = vec![w.states.last().unwrap().1.clone()];
        if r.is_err() {
            failed_calls += 1;
            wants.extend(std::mem::take(&mut w.attempt));
        }
        let bytes = mem.snapshot();
        let mut why = Vec::new();
        let ok = wants.iter().any(|want| {
            let dev = Arc::new(MemDev::from_bytes(bytes.clone()));
            match check_crash(dev, want, false) {
                Ok(()) => true,
                Err(e) => {
                    why.push(e);
                    false
                }
            }
        });
        if !ok {
            return Err(format!(
                "fault at device op {at} of {total} ({r:?}): {}\nlog:\n{}",
                why.join("; or "),
                w.log.join("\n")
            ));
        }
    }
    Ok(format!(
        "{points} fault points of {total} device ops, {failed_calls} failed calls"
    ))
}

#[test]
fn fsync_log_survives_write_failures() {
    let n = memcheck::env_u64("UBTRFS_LOG_WRITE_SEEDS").unwrap_or(8);
    let mut failed = Vec::new();
    for s in 500..500 + n {
        match run_faults(s, 6) {
            Ok(line) => eprintln!("seed {s}: {line}"),
            Err(e) => {
                eprintln!("seed {s}: {e}");
                failed.push(s);
            }
        }
    }
    assert!(failed.is_empty(), "seeds failed: {failed:?}");
}

#[test]
fn fsync_log_survives_every_crash_point() {
    let seeds = memcheck::seeds("UBTRFS_LOG_WRITE_SEED", Some("UBTRFS_LOG_WRITE_SEEDS"), 8);
    let mut failed = Vec::new();
    let (mut logged, mut grouped, mut in_flight) = (0, 0, 0);
    for s in &seeds {
        match run_seed(*s, None) {
            Ok(line) => {
                eprintln!("seed {s}: {line}");
                in_flight += line
                    .rsplit("; ")
                    .next()
                    .and_then(|t| t.split(' ').next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap();
                logged += line.split(' ').next().unwrap().parse::<u64>().unwrap();
                grouped += line
                    .split('(')
                    .nth(1)
                    .unwrap()
                    .split(' ')
                    .next()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap();
            }
            Err(e) => {
                eprintln!("seed {s}: {e}");
                failed.push(*s);
            }
        }
    }
    assert!(failed.is_empty(), "seeds failed: {failed:?}");
    assert!(logged > 0, "no fsync wrote a log");
    assert!(grouped > 0, "no two fsyncs shared a log sync");
    assert!(
        in_flight > 0,
        "no log sync was written while another file changed"
    );
    assert!(
        PIPELINED.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "no fsync logged its file during a log sync"
    );
}

/// The kernel replays the logs of every crash image (root; fails under
/// UBTRFS_REQUIRE_KERNEL=1 when it cannot run).
#[test]
fn kernel_replays_fsync_logs_of_every_crash_point() {
    let require = std::env::var("UBTRFS_REQUIRE_KERNEL").as_deref() == Ok("1");
    if unsafe { libc::geteuid() } != 0 {
        assert!(!require, "needs root (UBTRFS_REQUIRE_KERNEL=1)");
        eprintln!("SKIPPED kernel_replays_fsync_logs_of_every_crash_point: not root");
        return;
    }
    let n = memcheck::env_u64("UBTRFS_LOG_WRITE_KERNEL_SEEDS").unwrap_or(3);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/oracle/kernel_replay.py");
    // One seed's images at a time, removed once judged: the disk need not
    // hold every seed's.
    for s in 1001..1001 + n {
        let dir = std::env::temp_dir().join(format!("ubtrfs-log-write-{}-{s}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = run_seed(s, Some(&dir)) {
            let _ = std::fs::remove_dir_all(&dir);
            panic!("seed {s}: {e}");
        }
        let out = std::process::Command::new("python3")
            .arg(&script)
            .arg(&dir)
            .output()
            .expect("python3");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!("seed {s}: {text}");
        assert!(
            out.status.success(),
            "seed {s}: the kernel's replay differs:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Random 4 KiB writes to a 64 MiB file, each fsynced, with and without
/// log trees (a profile target: `cargo test --release -p ubtrfs-engine
/// --test log_write -- --ignored --nocapture`).
#[test]
#[ignore]
fn fsync_random_4k_profile() {
    for notreelog in [false, true] {
        for cow in [true, false] {
            let dev = Arc::new(MemDev::new(1 << 30));
            let t = make(vec![("mem".into(), dev.clone())], &MkfsOptions::default()).unwrap();
            let mut o = opts(0);
            o.notreelog = notreelog;
            o.nodatacow = !cow;
            o.nodatasum = !cow;
            let mut fs = RwFs::with_trans(t, o.clone()).unwrap();
            fs.commit().unwrap();
            let root = TOP;
            let id = fs.create(root, b"f", 0o100644, 0, (0, 0), None).unwrap();
            let mut rng = Rng::new(7);
            let mb = fill(&mut rng, 1 << 20);
            for i in 0..64u64 {
                fs.write(id, i << 20, &mb).unwrap();
            }
            fs.commit().unwrap();
            drop(fs);
            // Reopened on a recording device: what each fsync writes.
            let rec = Arc::new(RecordDev::new(dev.clone()));
            let t = Trans::open_dev(vec![rec.clone() as Arc<dyn BlockDev>], 64 << 20).unwrap();
            let mut fs = RwFs::with_trans(t, o).unwrap();
            let blk = fill(&mut rng, 4096);
            let n = 2000;
            let t0 = std::time::Instant::now();
            for _ in 0..n {
                fs.write(id, rng.below(16384) * 4096, &blk).unwrap();
                fs.fsync(id).unwrap();
            }
            let dt = t0.elapsed().as_secs_f64();
            let log = rec.log();
            let flushes = log.flushes().len();
            let (writes, bytes) = log.events.iter().fold((0, 0), |(w, b), e| match e {
                ubtrfs_engine::io::fault::Event::Write { data, .. } => (w + 1, b + data.len()),
                _ => (w, b),
            });
            eprintln!(
                "notreelog={notreelog} cow={cow}: {n} fsyncs in {dt:.2}s ({:.0}/s); per fsync {:.1} writes, {:.1} KiB, {:.2} flushes; {:?} {:?}",
                n as f64 / dt,
                writes as f64 / n as f64,
                bytes as f64 / n as f64 / 1024.0,
                flushes as f64 / n as f64,
                fs.stats,
                fs.log_stats()
            );
        }
    }
}

/// Writes into one preallocated extent, each fsynced in one transaction:
/// the log holds the checksums of every part written, not only of the
/// first. (A log whose file extent has no checksum, in the log or in the
/// csum tree, replays to data the kernel refuses to read: "csum hole
/// found", EIO.)
#[test]
fn fsync_logs_checksums_of_each_write_into_preallocated_space() {
    for committed in [true, false] {
        let dev = Arc::new(MemDev::new(DEV_SIZE));
        let t = seeded_mkfs(dev.clone(), 2, 0x27, 2).unwrap();
        let mut fs = RwFs::with_trans(t, opts(2)).unwrap();
        let f = fs.create(TOP, b"f", 0o100644, 0, (0, 0), None).unwrap();
        fs.fallocate(f, 0, 256 << 10, 0).unwrap();
        if committed {
            fs.commit().unwrap();
        }
        let mut want = vec![0u8; 256 << 10];
        for (at, byte) in [(0usize, 0xa5u8), (64 << 10, 0x5a), (8 << 10, 0x3c)] {
            want[at..at + 4096].fill(byte);
            fs.write(f, at as u64, &want[at..at + 4096]).unwrap();
            fs.fsync(f).unwrap();
        }
        assert!(fs.stats.log_syncs >= 3, "the fsyncs did not write logs");
        drop(fs); // the crash
        let durable = Durable::from([("/f".to_string(), (want, Xattrs::new()))]);
        if let Err(e) = check_crash(dev, &durable, true) {
            panic!("preallocated extent committed first: {committed}: {e}");
        }
    }
}
