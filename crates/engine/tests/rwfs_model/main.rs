//! The read-write mount's operations (vfs) against a model, in process:
//! seeded sequences of creates, buffered writes (held dirty, written back
//! at commits, fsyncs and when the dirty limit is passed), truncates,
//! fallocate (prealloc, punch, zero range), copy ranges (clones where
//! aligned), links, unlinks, renames (plain, RENAME_NOREPLACE,
//! RENAME_EXCHANGE), NOCOW files and the nodatacow/compress mount options,
//! on an in-memory image. Every file read back after every operation
//! equals its model; SEEK_DATA/SEEK_HOLE maps cover every non-zero byte;
//! at the end the image is committed, checked by the engine's check and
//! by btrfs-progs' `btrfs check --readonly`, and read back by the
//! read-only engine (the reader the kernel tests judge) equal to the
//! model.
//!
//! UBTRFS_RWFS_MODEL_SEEDS=N (default 40), UBTRFS_RWFS_MODEL_SEED=S.
//!
//! Beside the model, cases of their own: [`writeback`] and [`space`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use ubtrfs_engine::fs::seek::{SeekCache, Versions};
use ubtrfs_engine::fs::view::View;
use ubtrfs_engine::fs::{Filesystem, InodeId};
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::io::device::Device;
use ubtrfs_engine::io::fault::FaultDev;
use ubtrfs_engine::mkfs::{make, MkfsOptions};
use ubtrfs_engine::rwfs::attr::SetAttr;
use ubtrfs_engine::rwfs::{FsyncStage, RwFs, RwOptions};
use ubtrfs_engine::tx::trim::TrimRange;
use ubtrfs_engine::tx::Trans;
use ubtrfs_engine::FileHandle;
use ubtrfs_format::consts::*;

const SS: u64 = 4096;

#[path = "../memcheck/mod.rs"]
mod memcheck;
mod space;
mod writeback;
use memcheck::{btrfs_check, offset, pattern, seeded_mkfs, write_len, Rng, TOP};

/// For the btrfs check: its skip message, UBTRFS_RWFS_MODEL_KEEP.
const SUITE: &str = "rwfs_model";
/// The seed switches (docs/environment.md).
const SEED_VAR: &str = "UBTRFS_RWFS_MODEL_SEED";
const SEEDS_VAR: &str = "UBTRFS_RWFS_MODEL_SEEDS";

/// The model: names per directory, and each file's bytes.
#[derive(Default)]
struct Model {
    names: BTreeMap<(usize, Vec<u8>), InodeId>,
    data: HashMap<InodeId, Vec<u8>>,
}

impl Model {
    fn files(&self) -> Vec<InodeId> {
        let mut v: Vec<InodeId> = self.data.keys().copied().collect();
        v.sort();
        v
    }
    fn links(&self, id: InodeId) -> usize {
        self.names.values().filter(|&&v| v == id).count()
    }
}

fn verify(fs: &mut RwFs, m: &Model, id: InodeId, what: &str) -> Result<(), String> {
    let want = &m.data[&id];
    let st = fs.stat(id).map_err(|e| format!("{what}: stat: {e}"))?;
    if st.size != want.len() as u64 {
        return Err(format!(
            "{what}: inode {} size {} want {}",
            id.ino,
            st.size,
            want.len()
        ));
    }
    if st.nlink as usize != m.links(id) {
        return Err(format!(
            "{what}: inode {} nlink {} want {}",
            id.ino,
            st.nlink,
            m.links(id)
        ));
    }
    let got = fs
        .read(id, 0, want.len() as u32 + 10)
        .map_err(|e| format!("{what}: read: {e}"))?;
    if &got != want {
        let at = got.iter().zip(want.iter()).position(|(a, b)| a != b);
        return Err(format!(
            "{what}: inode {} content differs (first at {at:?}, len {} want {})",
            id.ino,
            got.len(),
            want.len()
        ));
    }
    // Every non-zero byte is inside a data range.
    let mut cache = SeekCache::default();
    let mut off = 0;
    let mut covered = vec![false; want.len()];
    while let Some(d) = fs.seek(id, &mut cache, off, 3).map_err(|e| e.to_string())? {
        let h = fs
            .seek(id, &mut cache, d, 4)
            .map_err(|e| e.to_string())?
            .unwrap_or(want.len() as u64);
        for c in &mut covered[d as usize..h as usize] {
            *c = true;
        }
        off = h;
    }
    if let Some(p) = want.iter().zip(&covered).position(|(&b, &c)| b != 0 && !c) {
        return Err(format!(
            "{what}: inode {}: byte {p} is data but SEEK_DATA skips it",
            id.ino
        ));
    }
    Ok(())
}

/// An open file's seek cache kept across steps: whenever it answers
/// without the filesystem ([`SeekCache::cached`]), the answer is the one a
/// map built now gives; then it is brought up to date as an lseek would.
fn check_kept_cache(
    fs: &mut RwFs,
    versions: &Versions,
    id: InodeId,
    cache: &mut SeekCache,
) -> Result<(), String> {
    let size = fs.stat(id).map_err(|e| format!("stat: {e}"))?.size;
    let mut fresh = SeekCache::default();
    for i in 0..=17u64 {
        let off = size * i / 16;
        for whence in [3, 4] {
            let want = fs
                .seek(id, &mut fresh, off, whence)
                .map_err(|e| format!("seek: {e}"))?;
            if let Some(got) = cache.cached(versions, id, off, whence) {
                if got != want {
                    return Err(format!(
                        "inode {}: the kept seek cache answers {got:?} for whence {whence} at {off}, the file {want:?}",
                        id.ino
                    ));
                }
            }
        }
    }
    fs.seek(id, cache, 0, 3).map_err(|e| format!("seek: {e}"))?;
    Ok(())
}

/// One seed's run: the mount over its in-memory image, the model, and
/// what every operation draws from.
struct Run {
    rng: Rng,
    dev: Arc<MemDev>,
    fs: RwFs,
    m: Model,
    /// The top directory and its subdirectory `d`.
    dirs: [InodeId; 2],
    log: Vec<String>,
    /// Interval commits so far (btrfs-progs checks the first).
    commits: usize,
}

/// What one operation did: its description for the log, and the files
/// to read back against the model.
struct Step {
    what: String,
    touched: Vec<InodeId>,
}

impl Step {
    fn new(what: String, touched: Vec<InodeId>) -> Option<Step> {
        Some(Step { what, touched })
    }
}

/// An operation's result: None when it found nothing to work on.
type Op = Result<Option<Step>, String>;

fn show(name: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(name)
}

impl Run {
    /// A file of the model, if there is one.
    fn pick(&mut self) -> Option<InodeId> {
        let files = self.m.files();
        (!files.is_empty()).then(|| files[self.rng.below(files.len() as u64) as usize])
    }

    /// The model's bytes of `id` with `data` written at `off`.
    fn model_write(&mut self, id: InodeId, off: u64, data: &[u8]) {
        memcheck::model_write(self.m.data.get_mut(&id).unwrap(), off, data);
    }

    fn create(&mut self, di: usize, name: Vec<u8>) -> Op {
        let what = format!("create {di}/{}", show(&name));
        let r = self
            .fs
            .create(self.dirs[di], &name, 0o100644, 0, (0, 0), None);
        match (self.m.names.contains_key(&(di, name.clone())), r) {
            (true, Err(e)) if e.errno() == libc::EEXIST => Ok(Step::new(what, vec![])),
            (false, Ok(id)) => {
                self.m.names.insert((di, name), id);
                self.m.data.insert(id, Vec::new());
                if self.rng.below(3) == 0 {
                    self.fs
                        .set_flags(id, 0x0080_0000)
                        .map_err(|e| format!("{what}: chattr +C: {e}"))?;
                }
                Ok(Step::new(what, vec![id]))
            }
            (_, r) => Err(format!("{what}: unexpected {r:?}")),
        }
    }

    fn write(&mut self) -> Op {
        let Some(id) = self.pick() else {
            return Ok(None);
        };
        let size = self.m.data[&id].len() as u64;
        let off = offset(&mut self.rng, size);
        let len = write_len(&mut self.rng, 5000, 400_000);
        let data = pattern(&mut self.rng, len, true);
        let what = format!("write {} at {off} len {len}", id.ino);
        self.fs
            .write(id, off, &data)
            .map_err(|e| format!("{what}: {e}"))?;
        self.model_write(id, off, &data);
        Ok(Step::new(what, vec![id]))
    }

    fn truncate(&mut self) -> Op {
        let Some(id) = self.pick() else {
            return Ok(None);
        };
        let n = offset(&mut self.rng, self.m.data[&id].len() as u64);
        let what = format!("truncate {} to {n}", id.ino);
        let a = SetAttr {
            size: Some(n),
            ..Default::default()
        };
        self.fs
            .setattr(id, &a)
            .map_err(|e| format!("{what}: {e}"))?;
        self.m.data.get_mut(&id).unwrap().resize(n as usize, 0);
        Ok(Step::new(what, vec![id]))
    }

    fn fallocate(&mut self) -> Op {
        let Some(id) = self.pick() else {
            return Ok(None);
        };
        let size = self.m.data[&id].len() as u64;
        let off = offset(&mut self.rng, size);
        let len = 1 + self.rng.below(8 * SS);
        let mode = [0, 1, 3, 0x10, 0x11][self.rng.below(5) as usize];
        let what = format!("fallocate {} at {off} len {len} mode {mode:#x}", id.ino);
        self.fs
            .fallocate(id, off, len, mode)
            .map_err(|e| format!("{what}: {e}"))?;
        memcheck::model_fallocate(self.m.data.get_mut(&id).unwrap(), off, len, mode);
        Ok(Step::new(what, vec![id]))
    }

    fn copy(&mut self) -> Op {
        let (Some(a), Some(b)) = (self.pick(), self.pick()) else {
            return Ok(None);
        };
        let rng = &mut self.rng;
        let asz = self.m.data[&a].len() as u64;
        let bsz = self.m.data[&b].len() as u64;
        let (so, doff) = if rng.below(2) == 0 {
            (rng.below(asz + 1) / SS * SS, rng.below(bsz + SS) / SS * SS)
        } else {
            (rng.below(asz + 1), rng.below(bsz + SS))
        };
        let len = if rng.below(2) == 0 {
            asz
        } else {
            rng.below(64 * SS) + 1
        };
        let what = format!("copy {}:{so} -> {}:{doff} len {len}", a.ino, b.ino);
        let n = self
            .fs
            .copy_range(a, so, b, doff, len)
            .map_err(|e| format!("{what}: {e}"))?;
        let mut src: Vec<u8> = self.m.data[&a][(so as usize).min(asz as usize)..]
            .iter()
            .take(len as usize)
            .copied()
            .collect();
        // A clone may stop at the last whole sector, as the kernel's
        // copy_file_range does.
        let short = n > 0 && n % SS == 0 && (n as usize) < src.len();
        if n as usize != src.len() && !short {
            return Err(format!("{what}: copied {n} want {}", src.len()));
        }
        src.truncate(n as usize);
        if !src.is_empty() {
            self.model_write(b, doff, &src);
        }
        Ok(Step::new(what, vec![b]))
    }

    fn rename(&mut self, di: usize, name: Vec<u8>) -> Op {
        let from: Vec<(usize, Vec<u8>)> = self.m.names.keys().cloned().collect();
        if from.is_empty() {
            return Ok(None);
        }
        let (fdi, fname) = from[self.rng.below(from.len() as u64) as usize].clone();
        let flags = [0u32, 0, 1, 2][self.rng.below(4) as usize];
        let what = format!(
            "rename {fdi}/{} -> {di}/{} flags {flags}",
            show(&fname),
            show(&name)
        );
        let (dirs, m) = (self.dirs, &mut self.m);
        let r = self
            .fs
            .rename(dirs[fdi], &fname, dirs[di], &name, flags, (0, 0));
        let src = m.names[&(fdi, fname.clone())];
        let dst = m.names.get(&(di, name.clone())).copied();
        let same = (fdi, &fname) == (di, &name);
        let mut touched = Vec::new();
        match (flags, dst, r) {
            (2, None, Err(e)) if e.errno() == libc::ENOENT => {}
            (2, Some(d), Ok(())) => {
                m.names.insert((fdi, fname), d);
                m.names.insert((di, name), src);
                touched.extend([src, d]);
            }
            (1, Some(_), Err(e)) if e.errno() == libc::EEXIST => {}
            (_, _, Ok(())) if flags != 2 => {
                if !same && dst != Some(src) {
                    m.names.remove(&(fdi, fname));
                    if let Some(old) = m.names.insert((di, name), src) {
                        if m.links(old) == 0 {
                            m.data.remove(&old);
                        } else {
                            touched.push(old);
                        }
                    }
                }
                touched.push(src);
            }
            (_, _, r) => return Err(format!("{what}: unexpected {r:?} (dst {dst:?})")),
        }
        Ok(Step::new(what, touched))
    }

    fn link(&mut self, di: usize, name: Vec<u8>) -> Op {
        let Some(id) = self.pick() else {
            return Ok(None);
        };
        let what = format!("link {} as {di}/{}", id.ino, show(&name));
        let r = self.fs.link(id, self.dirs[di], &name);
        match (self.m.names.contains_key(&(di, name.clone())), r) {
            (true, Err(e)) if e.errno() == libc::EEXIST => Ok(Step::new(what, vec![])),
            (false, Ok(())) => {
                self.m.names.insert((di, name), id);
                Ok(Step::new(what, vec![id]))
            }
            (_, r) => Err(format!("{what}: unexpected {r:?}")),
        }
    }

    fn unlink(&mut self, di: usize, name: Vec<u8>) -> Op {
        let what = format!("unlink {di}/{}", show(&name));
        let r = self.fs.unlink(self.dirs[di], &name);
        match (self.m.names.remove(&(di, name)), r) {
            (None, Err(e)) if e.errno() == libc::ENOENT => Ok(Step::new(what, vec![])),
            (Some(id), Ok(())) => {
                if self.m.links(id) == 0 {
                    self.m.data.remove(&id);
                    Ok(Step::new(what, vec![]))
                } else {
                    Ok(Step::new(what, vec![id]))
                }
            }
            (_, r) => Err(format!("{what}: unexpected {r:?}")),
        }
    }

    /// A writeback in flight (the mount lets its lock go while the bytes
    /// are written): reads, stat and lseek see every file as the model
    /// holds it meanwhile, and after, with writes made during the flight.
    fn writeback_in_flight(&mut self) -> Op {
        let what = String::from("writeback in flight");
        let mut o = self
            .fs
            .writeback_all_begin()
            .map_err(|e| format!("{what}: begin: {e}"))?;
        // Buffered writes go on during a flight (the mount lets them):
        // over in-flight ranges, past the end of file.
        for _ in 0..self.rng.below(4) {
            let Some(id) = self.pick() else { break };
            let size = self.m.data[&id].len() as u64;
            let off = offset(&mut self.rng, size);
            let most = [100, 9000, 300_000][self.rng.below(3) as usize];
            let len = 1 + self.rng.below(most) as usize;
            let data = pattern(&mut self.rng, len, true);
            self.fs
                .write_buffered(id, off, &data)
                .map_err(|e| format!("{what}: write {} at {off} len {len}: {e}", id.ino))?;
            self.model_write(id, off, &data);
        }
        for id in self.m.files() {
            verify(&mut self.fs, &self.m, id, &what)?;
        }
        let res = o.write();
        self.fs
            .writeback_all_end(o, res)
            .map_err(|e| format!("{what}: end: {e}"))?;
        Ok(Step::new(what, self.m.files()))
    }

    /// The interval commit: dirty data stays dirty, files grown since
    /// their last writeback go in at their old sizes. What it left on the
    /// device is what a crash now would leave.
    fn interval_commit(&mut self) -> Op {
        let what = String::from("interval commit");
        self.fs
            .commit_periodic()
            .and_then(|()| self.fs.wait_committed())
            .map_err(|e| format!("{what}: {e}"))?;
        // btrfs-progs checks the first of each seed
        // (UBTRFS_RWFS_MODEL_CHECK_ALL=1: every one).
        let progs = self.commits == 0 || std::env::var_os("UBTRFS_RWFS_MODEL_CHECK_ALL").is_some();
        check_committed(&self.dev, progs)
            .map_err(|e| format!("{what}: {e}\nlog:\n{}", self.log.join("\n")))?;
        self.commits += 1;
        Ok(Step::new(what, vec![]))
    }

    /// FITRIM: every free range discarded (zeroed on this device); nothing
    /// the trees, a log or dirty data reach may be among them (the files
    /// are read back, the image checked at the end).
    fn fitrim(&mut self) -> Op {
        let what = String::from("fitrim");
        let all = TrimRange {
            start: 0,
            len: u64::MAX,
            minlen: 0,
        };
        self.fs.trim(all).map_err(|e| format!("{what}: {e}"))?;
        Ok(Step::new(what, self.m.files()))
    }

    /// An open file loses its last name, is read, then closed.
    fn unlink_open(&mut self) -> Op {
        let Some(id) = self.pick() else {
            return Ok(None);
        };
        if self.m.links(id) != 1 {
            return Ok(None);
        }
        let key = self
            .m
            .names
            .iter()
            .find(|(_, &v)| v == id)
            .map(|(k, _)| k.clone())
            .unwrap();
        let what = format!("unlink open {}", id.ino);
        self.fs.opened(id);
        self.fs
            .unlink(self.dirs[key.0], &key.1)
            .map_err(|e| format!("{what}: {e}"))?;
        self.m.names.remove(&key);
        let got = self
            .fs
            .read(id, 0, 1 << 30)
            .map_err(|e| format!("{what}: read: {e}"))?;
        if got != self.m.data[&id] {
            return Err(format!("{what}: orphan reads differ"));
        }
        self.fs
            .released(id)
            .map_err(|e| format!("{what}: release: {e}"))?;
        self.m.data.remove(&id);
        if self.fs.stat(id).is_ok() {
            return Err(format!("{what}: inode still there after the last close"));
        }
        Ok(Step::new(what, vec![]))
    }

    /// One operation, drawn from the seed.
    fn step(&mut self) -> Op {
        let di = self.rng.below(2) as usize;
        let names: [&[u8]; 5] = [b"a", b"b", b"c", b"e", b"f"];
        let name = names[self.rng.below(5) as usize].to_vec();
        match self.rng.below(20) {
            0..=2 => self.create(di, name),
            3..=7 => self.write(),
            8 => self.truncate(),
            9 | 10 => self.fallocate(),
            11 => self.copy(),
            12 | 13 => self.rename(di, name),
            14 => self.link(di, name),
            15 | 16 => self.unlink(di, name),
            17 if self.rng.below(2) == 0 => self.writeback_in_flight(),
            17 if self.rng.below(2) == 0 => self.interval_commit(),
            17 => {
                self.fs.commit().map_err(|e| format!("commit: {e}"))?;
                Ok(Step::new("commit".into(), vec![]))
            }
            18 if self.rng.below(3) == 0 => self.fitrim(),
            18 => {
                let Some(id) = self.pick() else {
                    return Ok(None);
                };
                let what = format!("fsync {}", id.ino);
                self.fs.fsync(id).map_err(|e| format!("{what}: {e}"))?;
                Ok(Step::new(what, vec![]))
            }
            _ => self.unlink_open(),
        }
    }

    /// `e` with the log of the operations so far.
    fn logged(&self, e: String) -> String {
        format!("{e}\nlog:\n{}", self.log.join("\n"))
    }

    /// After the last operation: unmounted, the image checks clean, and
    /// the read-only engine sees what the model holds.
    fn finish(mut self) -> Result<(), String> {
        for id in self.m.files() {
            verify(&mut self.fs, &self.m, id, "end").map_err(|e| self.logged(e))?;
        }
        self.fs.unmount().map_err(|e| e.to_string())?;
        drop(self.fs);
        let dev = self.dev.clone();
        ubtrfs_engine::tools::check::check_dev(dev.clone())
            .map_err(|e| format!("engine check: {e}\nlog:\n{}", self.log.join("\n")))?;
        btrfs_check(&dev, SUITE).map_err(|e| format!("{e}\nlog:\n{}", self.log.join("\n")))?;
        let d = Device::from_dev(std::path::Path::new("mem"), dev.clone())
            .map_err(|e| e.to_string())?;
        let reader = Filesystem::from_devices(vec![d], 16 << 20).map_err(|e| e.to_string())?;
        for ((di, name), id) in &self.m.names {
            let e = reader
                .lookup(self.dirs[*di], name)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("reader: no {di}/{}", show(name)))?;
            if e.target != *id {
                return Err(format!(
                    "reader: {di}/{} is {:?} want {id:?}",
                    show(name),
                    e.target
                ));
            }
            let want = &self.m.data[id];
            let mut fh = FileHandle::open(&reader, *id).map_err(|e| e.to_string())?;
            let mut buf = vec![0u8; want.len()];
            let n = fh
                .read_at(&reader, 0, &mut buf)
                .map_err(|e| format!("reader: inode {}: {e}", id.ino))?;
            if n != want.len() || &buf != want {
                return Err(format!(
                    "reader: inode {} content differs\nlog:\n{}",
                    id.ino,
                    self.log.join("\n")
                ));
            }
        }
        Ok(())
    }
}

fn run_seed(seed: u64) -> Result<usize, String> {
    let mut rng = Rng::new(seed);
    let dev = Arc::new(MemDev::new(192 << 20));
    let t = seeded_mkfs(dev.clone(), seed, 0x25, 1)?;
    let opts = RwOptions {
        compress: (seed % 4 == 2).then_some((COMPRESS_ZSTD, 1)),
        nodatacow: seed % 4 == 3,
        nodatasum: seed % 4 == 3,
        dirty_limit: [1 << 20, 64 << 20][seed as usize % 2],
        ..Default::default()
    };
    let mut fs = RwFs::with_trans(t, opts).map_err(|e| e.to_string())?;
    let sub = fs
        .create(TOP, b"d", 0o040755, 0, (0, 0), None)
        .map_err(|e| e.to_string())?;
    let versions = fs.versions();
    let steps = 60 + rng.below(80) as usize;
    let mut run = Run {
        rng,
        dev,
        fs,
        m: Model::default(),
        dirs: [TOP, sub],
        log: Vec::new(),
        commits: 0,
    };
    let mut kept: HashMap<InodeId, SeekCache> = HashMap::new();
    for step in 0..steps {
        let Some(Step { what, touched }) = run.step()? else {
            continue;
        };
        run.log.push(format!("{step}: {what}"));
        for id in touched {
            if run.m.data.contains_key(&id) {
                verify(&mut run.fs, &run.m, id, &what).map_err(|e| run.logged(e))?;
            }
        }
        kept.retain(|id, _| run.m.data.contains_key(id));
        for id in run.m.files() {
            check_kept_cache(&mut run.fs, &versions, id, kept.entry(id).or_default())
                .map_err(|e| run.logged(format!("{what}: {e}")))?;
        }
    }
    run.finish()?;
    Ok(steps)
}

#[test]
fn rwfs_operations_match_a_model() {
    let seeds = memcheck::seeds(SEED_VAR, Some(SEEDS_VAR), 40);
    let mut failed = Vec::new();
    let mut ops = 0;
    for s in &seeds {
        match run_seed(*s) {
            Ok(n) => ops += n,
            Err(e) => {
                eprintln!("seed {s}: {e}");
                failed.push(*s);
            }
        }
    }
    assert!(failed.is_empty(), "seeds failed: {failed:?}");
    eprintln!("rwfs_model: {} seeds, {ops} operations", seeds.len());
}

/// The image `dev` holds now, as a crash would leave it: the engine's
/// check passes (and btrfs-progs' when `progs`), and the reader reads
/// every file of the top directory and its subdirectory `d` whole.
/// Returns that image.
fn check_committed(dev: &MemDev, progs: bool) -> Result<Arc<MemDev>, String> {
    let snap = Arc::new(MemDev::from_bytes(dev.snapshot()));
    ubtrfs_engine::tools::check::check_dev(snap.clone())
        .map_err(|e| format!("engine check of the committed image: {e}"))?;
    if progs {
        btrfs_check(&snap, SUITE).map_err(|e| format!("the committed image: {e}"))?;
    }
    let reader = reader_of(&snap);
    let top = TOP;
    let mut dirs = vec![top];
    if let Some(d) = reader.lookup(top, b"d").map_err(|e| e.to_string())? {
        dirs.push(d.target);
    }
    for dir in dirs {
        for e in reader.read_dir(dir).map_err(|e| e.to_string())? {
            let st = reader
                .stat(e.target)
                .map_err(|err| format!("committed image: inode {}: {err}", e.target.ino))?;
            if !st.is_reg() {
                continue;
            }
            let mut fh = FileHandle::open(&reader, e.target).map_err(|e| e.to_string())?;
            let mut buf = vec![0u8; st.size as usize];
            let n = fh
                .read_at(&reader, 0, &mut buf)
                .map_err(|err| format!("committed image: inode {}: {err}", e.target.ino))?;
            if n != buf.len() {
                return Err(format!(
                    "committed image: inode {} read {n} of {} bytes",
                    e.target.ino,
                    buf.len()
                ));
            }
        }
    }
    Ok(snap)
}

/// The image on `dev` passes the engine's check and btrfs-progs'.
fn checks_clean(dev: &Arc<MemDev>) {
    ubtrfs_engine::tools::check::check_dev(dev.clone()).unwrap();
    btrfs_check(dev, SUITE).unwrap();
}

/// The read-only engine (the reader the kernel tests judge) over `dev`.
fn reader_of(dev: &Arc<MemDev>) -> Filesystem {
    let d = Device::from_dev(std::path::Path::new("mem"), dev.clone()).unwrap();
    Filesystem::from_devices(vec![d], 16 << 20).unwrap()
}

/// The first `len` bytes of `id` through `reader` (all of them there).
fn read_through(reader: &Filesystem, id: InodeId, len: usize) -> Vec<u8> {
    let mut fh = FileHandle::open(reader, id).unwrap();
    let mut got = vec![0u8; len];
    assert_eq!(fh.read_at(reader, 0, &mut got).unwrap(), len);
    got
}

/// A mount over a fresh 160 MiB in-memory image made with `mkopts`, and
/// its top directory.
fn fresh_mount(mkopts: &MkfsOptions) -> (Arc<MemDev>, RwFs, InodeId) {
    let dev = Arc::new(MemDev::new(160 << 20));
    let t = make(vec![("mem".into(), dev.clone())], mkopts).unwrap();
    let fs = RwFs::with_trans(t, RwOptions::default()).unwrap();
    let root = TOP;
    (dev, fs, root)
}

/// A fresh in-memory image of `size` bytes made with mkfs's defaults but
/// for the fsid (every byte `fsid`), as a transaction to mount.
fn fresh_image(size: u64, fsid: u8) -> (Arc<MemDev>, Trans) {
    let dev = Arc::new(MemDev::new(size));
    let mkopts = MkfsOptions {
        fsid: Some([fsid; 16]),
        ..Default::default()
    };
    let t = make(vec![("mem".into(), dev.clone())], &mkopts).unwrap();
    (dev, t)
}

/// [`fresh_mount`] with mkfs's defaults but for the fsid (every byte
/// `fsid`).
fn fresh_mount_fsid(fsid: u8) -> (Arc<MemDev>, RwFs, InodeId) {
    fresh_mount(&MkfsOptions {
        fsid: Some([fsid; 16]),
        ..Default::default()
    })
}

/// [`fresh_mount_fsid`] with an empty regular file `f` in the top
/// directory: (image, mount, top directory, file).
fn fresh_file(fsid: u8) -> (Arc<MemDev>, RwFs, InodeId, InodeId) {
    let (dev, mut fs, root) = fresh_mount_fsid(fsid);
    let f = fs.create(root, b"f", 0o100644, 0, (0, 0), None).unwrap();
    (dev, fs, root, f)
}

/// Where the sector `sector` (4 KiB) lies on `dev`, the first place.
fn find_sector(dev: &MemDev, sector: &[u8]) -> Option<u64> {
    use ubtrfs_engine::io::dev::BlockDev;
    let mut buf = vec![0u8; 1 << 20];
    for off in (0..dev.size()).step_by(1 << 20) {
        dev.read_at(&mut buf, off).unwrap();
        if let Some(i) = buf.chunks(SS as usize).position(|c| c == sector) {
            return Some(off + i as u64 * SS);
        }
    }
    None
}
