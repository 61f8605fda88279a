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
//! UBTRFS_VFS_MODEL_SEEDS=N (default 40), UBTRFS_VFS_MODEL_SEED=S.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use ubtrfs_engine::fs::{Filesystem, InodeId};
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::io::device::Device;
use ubtrfs_engine::io::fault::FaultDev;
use ubtrfs_engine::mkfs::{make, MkfsOptions};
use ubtrfs_engine::tx::trim::TrimRange;
use ubtrfs_engine::tx::Trans;
use ubtrfs_engine::vfs::attr::SetAttr;
use ubtrfs_engine::vfs::seek::{SeekCache, Versions};
use ubtrfs_engine::vfs::{FsyncStage, RwFs, RwOptions};
use ubtrfs_engine::FileHandle;
use ubtrfs_format::consts::*;

const SS: u64 = 4096;

mod memcheck;
use memcheck::{btrfs_check, offset, pattern, seeded_mkfs, write_len, Rng, TOP};

/// For the btrfs check: its skip message, UBTRFS_VFS_MODEL_KEEP.
const SUITE: &str = "vfs_model";

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
    let root = TOP;
    let sub = fs
        .create(root, b"d", 0o040755, 0, (0, 0), None)
        .map_err(|e| e.to_string())?;
    let dirs = [root, sub];
    let mut m = Model::default();
    let versions = fs.versions();
    let mut kept: HashMap<InodeId, SeekCache> = HashMap::new();
    let names: [&[u8]; 5] = [b"a", b"b", b"c", b"e", b"f"];
    let steps = 60 + rng.below(80) as usize;
    let mut log: Vec<String> = Vec::new();
    let mut commits = 0;
    for step in 0..steps {
        let files = m.files();
        let pick = |rng: &mut Rng| -> Option<InodeId> {
            (!files.is_empty()).then(|| files[rng.below(files.len() as u64) as usize])
        };
        let di = rng.below(2) as usize;
        let name = names[rng.below(5) as usize].to_vec();
        let op = rng.below(20);
        let what;
        let mut touched: Vec<InodeId> = Vec::new();
        match op {
            0..=2 => {
                what = format!("create {di}/{}", String::from_utf8_lossy(&name));
                let r = fs.create(dirs[di], &name, 0o100644, 0, (0, 0), None);
                match (m.names.contains_key(&(di, name.clone())), r) {
                    (true, Err(e)) if e.errno() == libc::EEXIST => {}
                    (false, Ok(id)) => {
                        m.names.insert((di, name), id);
                        m.data.insert(id, Vec::new());
                        if rng.below(3) == 0 {
                            fs.set_flags(id, 0x0080_0000)
                                .map_err(|e| format!("{what}: chattr +C: {e}"))?;
                        }
                        touched.push(id);
                    }
                    (_, r) => return Err(format!("{what}: unexpected {r:?}")),
                }
            }
            3..=7 => {
                let Some(id) = pick(&mut rng) else { continue };
                let size = m.data[&id].len() as u64;
                let off = offset(&mut rng, size);
                let len = write_len(&mut rng, 5000, 400_000);
                let data = pattern(&mut rng, len, true);
                what = format!("write {} at {off} len {len}", id.ino);
                fs.write(id, off, &data)
                    .map_err(|e| format!("{what}: {e}"))?;
                let d = m.data.get_mut(&id).unwrap();
                if d.len() < off as usize + len {
                    d.resize(off as usize + len, 0);
                }
                d[off as usize..off as usize + len].copy_from_slice(&data);
                touched.push(id);
            }
            8 => {
                let Some(id) = pick(&mut rng) else { continue };
                let n = offset(&mut rng, m.data[&id].len() as u64);
                what = format!("truncate {} to {n}", id.ino);
                let a = SetAttr {
                    size: Some(n),
                    ..Default::default()
                };
                fs.setattr(id, &a).map_err(|e| format!("{what}: {e}"))?;
                m.data.get_mut(&id).unwrap().resize(n as usize, 0);
                touched.push(id);
            }
            9 | 10 => {
                let Some(id) = pick(&mut rng) else { continue };
                let size = m.data[&id].len() as u64;
                let off = offset(&mut rng, size);
                let len = 1 + rng.below(8 * SS);
                let mode = [0, 1, 3, 0x10, 0x11][rng.below(5) as usize];
                what = format!("fallocate {} at {off} len {len} mode {mode:#x}", id.ino);
                fs.fallocate(id, off, len, mode)
                    .map_err(|e| format!("{what}: {e}"))?;
                let d = m.data.get_mut(&id).unwrap();
                let end = (off + len) as usize;
                if mode & 1 == 0 && d.len() < end {
                    d.resize(end, 0);
                }
                if mode & 0x12 != 0 {
                    let e = end.min(d.len());
                    if (off as usize) < e {
                        d[off as usize..e].fill(0);
                    }
                }
                touched.push(id);
            }
            11 => {
                let (Some(a), Some(b)) = (pick(&mut rng), pick(&mut rng)) else {
                    continue;
                };
                let asz = m.data[&a].len() as u64;
                let (so, doff) = if rng.below(2) == 0 {
                    (
                        rng.below(asz + 1) / SS * SS,
                        rng.below(m.data[&b].len() as u64 + SS) / SS * SS,
                    )
                } else {
                    (rng.below(asz + 1), rng.below(m.data[&b].len() as u64 + SS))
                };
                let len = if rng.below(2) == 0 {
                    asz
                } else {
                    rng.below(64 * SS) + 1
                };
                what = format!("copy {}:{so} -> {}:{doff} len {len}", a.ino, b.ino);
                let n = fs
                    .copy_range(a, so, b, doff, len)
                    .map_err(|e| format!("{what}: {e}"))?;
                let mut src: Vec<u8> = m.data[&a][(so as usize).min(asz as usize)..]
                    .iter()
                    .take(len as usize)
                    .copied()
                    .collect();
                // A clone may stop at the last whole sector, as the
                // kernel's copy_file_range does.
                let short = n > 0 && n % SS == 0 && (n as usize) < src.len();
                if n as usize != src.len() && !short {
                    return Err(format!("{what}: copied {n} want {}", src.len()));
                }
                src.truncate(n as usize);
                let d = m.data.get_mut(&b).unwrap();
                let end = doff as usize + src.len();
                if !src.is_empty() {
                    if d.len() < end {
                        d.resize(end, 0);
                    }
                    d[doff as usize..end].copy_from_slice(&src);
                }
                touched.push(b);
            }
            12 | 13 => {
                let from: Vec<(usize, Vec<u8>)> = m.names.keys().cloned().collect();
                if from.is_empty() {
                    continue;
                }
                let (fdi, fname) = from[rng.below(from.len() as u64) as usize].clone();
                let flags = [0u32, 0, 1, 2][rng.below(4) as usize];
                what = format!(
                    "rename {fdi}/{} -> {di}/{} flags {flags}",
                    String::from_utf8_lossy(&fname),
                    String::from_utf8_lossy(&name)
                );
                let r = fs.rename(dirs[fdi], &fname, dirs[di], &name, flags, (0, 0));
                let src = m.names[&(fdi, fname.clone())];
                let dst = m.names.get(&(di, name.clone())).copied();
                let same = (fdi, &fname) == (di, &name);
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
            }
            14 => {
                let Some(id) = pick(&mut rng) else { continue };
                what = format!("link {} as {di}/{}", id.ino, String::from_utf8_lossy(&name));
                let r = fs.link(id, dirs[di], &name);
                match (m.names.contains_key(&(di, name.clone())), r) {
                    (true, Err(e)) if e.errno() == libc::EEXIST => {}
                    (false, Ok(())) => {
                        m.names.insert((di, name), id);
                        touched.push(id);
                    }
                    (_, r) => return Err(format!("{what}: unexpected {r:?}")),
                }
            }
            15 | 16 => {
                what = format!("unlink {di}/{}", String::from_utf8_lossy(&name));
                let r = fs.unlink(dirs[di], &name);
                match (m.names.remove(&(di, name)), r) {
                    (None, Err(e)) if e.errno() == libc::ENOENT => {}
                    (Some(id), Ok(())) => {
                        if m.links(id) == 0 {
                            m.data.remove(&id);
                        } else {
                            touched.push(id);
                        }
                    }
                    (_, r) => return Err(format!("{what}: unexpected {r:?}")),
                }
            }
            17 if rng.below(2) == 0 => {
                // A writeback in flight (the mount lets its lock go while
                // the bytes are written): reads, stat and lseek see every
                // file as the model holds it meanwhile, and after, with
                // writes made during the flight.
                what = "writeback in flight".into();
                let mut o = fs
                    .writeback_all_begin()
                    .map_err(|e| format!("{what}: begin: {e}"))?;
                // Buffered writes go on during a flight (the mount lets
                // them): over in-flight ranges, past the end of file.
                for _ in 0..rng.below(4) {
                    let Some(id) = pick(&mut rng) else { break };
                    let size = m.data[&id].len() as u64;
                    let off = offset(&mut rng, size);
                    let most = [100, 9000, 300_000][rng.below(3) as usize];
                    let len = 1 + rng.below(most) as usize;
                    let data = pattern(&mut rng, len, true);
                    fs.write_buffered(id, off, &data)
                        .map_err(|e| format!("{what}: write {} at {off} len {len}: {e}", id.ino))?;
                    let d = m.data.get_mut(&id).unwrap();
                    if d.len() < off as usize + len {
                        d.resize(off as usize + len, 0);
                    }
                    d[off as usize..off as usize + len].copy_from_slice(&data);
                }
                for id in m.files() {
                    verify(&mut fs, &m, id, &what)?;
                }
                let res = o.write();
                fs.writeback_all_end(o, res)
                    .map_err(|e| format!("{what}: end: {e}"))?;
                touched.extend(m.files());
            }
            17 if rng.below(2) == 0 => {
                // The interval commit: dirty data stays dirty, files grown
                // since their last writeback go in at their old sizes. What
                // it left on the device is what a crash now would leave.
                what = "interval commit".into();
                fs.commit_periodic()
                    .and_then(|()| fs.wait_committed())
                    .map_err(|e| format!("{what}: {e}"))?;
                // btrfs-progs checks the first of each seed
                // (UBTRFS_VFS_MODEL_CHECK_ALL=1: every one).
                let progs =
                    commits == 0 || std::env::var_os("UBTRFS_VFS_MODEL_CHECK_ALL").is_some();
                check_committed(&dev, progs)
                    .map_err(|e| format!("{what}: {e}\nlog:\n{}", log.join("\n")))?;
                commits += 1;
            }
            17 => {
                what = "commit".into();
                fs.commit().map_err(|e| format!("{what}: {e}"))?;
            }
            18 if rng.below(3) == 0 => {
                // FITRIM: every free range discarded (zeroed on this
                // device); nothing the trees, a log or dirty data reach
                // may be among them (the files are read back below, the
                // image checked at the end).
                what = "fitrim".into();
                let all = TrimRange {
                    start: 0,
                    len: u64::MAX,
                    minlen: 0,
                };
                fs.trim(all).map_err(|e| format!("{what}: {e}"))?;
                touched.extend(m.files());
            }
            18 => {
                let Some(id) = pick(&mut rng) else { continue };
                what = format!("fsync {}", id.ino);
                fs.fsync(id).map_err(|e| format!("{what}: {e}"))?;
            }
            _ => {
                // An open file loses its last name, is read, then closed.
                let Some(id) = pick(&mut rng) else { continue };
                if m.links(id) != 1 {
                    continue;
                }
                let key = m
                    .names
                    .iter()
                    .find(|(_, &v)| v == id)
                    .map(|(k, _)| k.clone())
                    .unwrap();
                what = format!("unlink open {}", id.ino);
                fs.opened(id);
                fs.unlink(dirs[key.0], &key.1)
                    .map_err(|e| format!("{what}: {e}"))?;
                m.names.remove(&key);
                let got = fs
                    .read(id, 0, 1 << 30)
                    .map_err(|e| format!("{what}: read: {e}"))?;
                if got != m.data[&id] {
                    return Err(format!("{what}: orphan reads differ"));
                }
                fs.released(id)
                    .map_err(|e| format!("{what}: release: {e}"))?;
                m.data.remove(&id);
                if fs.stat(id).is_ok() {
                    return Err(format!("{what}: inode still there after the last close"));
                }
            }
        }
        log.push(format!("{step}: {what}"));
        for id in touched {
            if m.data.contains_key(&id) {
                verify(&mut fs, &m, id, &what)
                    .map_err(|e| format!("{e}\nlog:\n{}", log.join("\n")))?;
            }
        }
        kept.retain(|id, _| m.data.contains_key(id));
        for id in m.files() {
            check_kept_cache(&mut fs, &versions, id, kept.entry(id).or_default())
                .map_err(|e| format!("{what}: {e}\nlog:\n{}", log.join("\n")))?;
        }
    }
    for id in m.files() {
        verify(&mut fs, &m, id, "end").map_err(|e| format!("{e}\nlog:\n{}", log.join("\n")))?;
    }
    fs.unmount().map_err(|e| e.to_string())?;
    drop(fs);
    ubtrfs_engine::tools::check::check_dev(dev.clone())
        .map_err(|e| format!("engine check: {e}\nlog:\n{}", log.join("\n")))?;
    btrfs_check(&dev, SUITE).map_err(|e| format!("{e}\nlog:\n{}", log.join("\n")))?;
    // The read-only engine sees what the model holds.
    let d =
        Device::from_dev(std::path::Path::new("mem"), dev.clone()).map_err(|e| e.to_string())?;
    let reader = Filesystem::from_devices(vec![d], 16 << 20).map_err(|e| e.to_string())?;
    for ((di, name), id) in &m.names {
        let dir = if *di == 0 { root } else { sub };
        let e = reader
            .lookup(dir, name)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("reader: no {di}/{}", String::from_utf8_lossy(name)))?;
        if e.target != *id {
            return Err(format!(
                "reader: {di}/{} is {:?} want {id:?}",
                String::from_utf8_lossy(name),
                e.target
            ));
        }
        let want = &m.data[id];
        let mut fh = FileHandle::open(&reader, *id).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; want.len()];
        let n = fh
            .read_at(&reader, 0, &mut buf)
            .map_err(|e| format!("reader: inode {}: {e}", id.ino))?;
        if n != want.len() || &buf != want {
            return Err(format!(
                "reader: inode {} content differs\nlog:\n{}",
                id.ino,
                log.join("\n")
            ));
        }
    }
    Ok(steps)
}

#[test]
fn vfs_operations_match_a_model() {
    let seeds = memcheck::seeds("UBTRFS_VFS_MODEL_SEED", Some("UBTRFS_VFS_MODEL_SEEDS"), 40);
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
    eprintln!("vfs_model: {} seeds, {ops} operations", seeds.len());
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

/// A writeback whose device writes fail while in flight (the mount's
/// lock let go, [`ubtrfs_engine::vfs::ordered`]) loses nothing: reads see
/// the new bytes throughout, afterwards they are dirty again, the extents
/// it allocated are free again, the next fsync reports the failure, and a
/// later commit writes them; the image checks clean and reads back.
#[test]
fn vfs_failed_writeback_in_flight_keeps_the_data() {
    let mem = Arc::new(MemDev::new(160 << 20));
    let fault = Arc::new(FaultDev::new(mem.clone(), None));
    let mkopts = MkfsOptions {
        fsid: Some([0x27; 16]),
        ..Default::default()
    };
    let t = make(vec![("mem".into(), fault.clone())], &mkopts).unwrap();
    let mut fs = RwFs::with_trans(t, RwOptions::default()).unwrap();
    let root = TOP;
    let id = fs.create(root, b"f", 0o100644, 0, (0, 0), None).unwrap();
    let mut want: Vec<u8> = (0..3u64 << 20).map(|b| (b >> 9) as u8).collect();
    fs.write(id, 0, &want).unwrap();
    // A fallocated file, written in place in the same flight (its extent
    // is not the flight's to free).
    let pre = fs.create(root, b"p", 0o100644, 0, (0, 0), None).unwrap();
    fs.fallocate(pre, 0, 2 << 20, 0).unwrap();
    fs.commit().unwrap();
    let mut pre_want = vec![0u8; 2 << 20];
    pre_want[4096..4096 + 700_000].fill(0x3c);
    fs.write(pre, 4096, &pre_want[4096..4096 + 700_000])
        .unwrap();
    // An unaligned overwrite, and an append after a hole.
    for (off, len, fill) in [
        (528_484u64, 1usize << 20, 0xa5u8),
        (3 << 20 | 8192, 100_000, 0x5a),
    ] {
        fs.write(id, off, &vec![fill; len]).unwrap();
        let end = off as usize + len;
        if want.len() < end {
            want.resize(end, 0);
        }
        want[off as usize..end].fill(fill);
    }
    let read_all = |fs: &RwFs| fs.read(id, 0, want.len() as u32 + 10).unwrap();
    let read_pre = |fs: &RwFs| fs.read(pre, 0, 3 << 20).unwrap();
    let free = fs.statfs().bfree;
    let mut o = fs.writeback_all_begin().unwrap();
    assert!(
        o.bytes() > 1 << 20,
        "{} bytes to write in flight",
        o.bytes()
    );
    // The dirty bytes became allocated extents, but for those going in
    // place (dirty, they counted on top of their preallocated extent).
    assert!(fs.statfs().bfree >= free, "free space during the flight");
    assert!(read_all(&fs) == want, "reads during the flight");
    assert!(
        read_pre(&fs) == pre_want,
        "reads of the fallocated file during the flight"
    );
    fault.fail_at(fault.ops());
    let res = o.write();
    assert!(res.is_err(), "the injected fault failed no write");
    fault.revive();
    let e = fs.writeback_all_end(o, res).unwrap_err();
    eprintln!("vfs_failed_writeback_in_flight_keeps_the_data: {e}");
    assert!(read_all(&fs) == want, "reads after the failed flight");
    assert!(
        read_pre(&fs) == pre_want,
        "reads of the fallocated file after the failed flight"
    );
    assert_eq!(
        fs.statfs().bfree,
        free,
        "the flight's extents are free again"
    );
    assert!(fs.dirty_bytes() > 1 << 20);
    assert!(fs.fsync(id).is_err(), "the next fsync reports the failure");
    fs.fsync(id).unwrap();
    fs.commit().unwrap();
    assert!(read_all(&fs) == want, "reads after the commit");
    assert!(
        read_pre(&fs) == pre_want,
        "reads of the fallocated file after the commit"
    );
    fs.unmount().unwrap();
    drop(fs);
    ubtrfs_engine::tools::check::check_dev(mem.clone()).unwrap();
    btrfs_check(&mem, SUITE).unwrap();
    let reader = reader_of(&mem);
    assert!(
        read_through(&reader, id, want.len()) == want,
        "the reader after unmount"
    );
    assert!(
        read_through(&reader, pre, pre_want.len()) == pre_want,
        "the reader after unmount: the fallocated file"
    );
}

/// The interval commit leaves dirty data dirty (the mount wrote back what
/// was dirty outside its lock just before), as the kernel's transaction
/// commit leaves delalloc: a file grown since its last writeback goes into
/// that commit at the size its extents back (the kernel's disk_i_size),
/// so the committed image, what a crash would leave, shows each file as
/// it was before: not a tail of zeros, nor a size its hole items do not
/// reach; preallocated space past the end of file (KEEP_SIZE) changes
/// nothing. With and without no-holes; btrfs-progs checks each image.
#[test]
fn vfs_interval_commit_writes_disk_sizes() {
    for no_holes in [true, false] {
        let mkopts = MkfsOptions {
            fsid: Some([0x2d; 16]),
            no_holes,
            ..Default::default()
        };
        let (dev, mut fs, root) = fresh_mount(&mkopts);
        let grown = fs
            .create(root, b"grown", 0o100644, 0, (0, 0), None)
            .unwrap();
        let old: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        fs.write(grown, 0, &old).unwrap();
        let cut = fs.create(root, b"cut", 0o100644, 0, (0, 0), None).unwrap();
        let pre = fs.create(root, b"pre", 0o100644, 0, (0, 0), None).unwrap();
        fs.write(pre, 0, &[0x44; 8192]).unwrap();
        fs.fallocate(pre, 1 << 20, 1 << 20, 1).unwrap();
        fs.commit().unwrap();
        fs.write(pre, 8192, &[0x45; 8192]).unwrap();
        // Dirty: an overwrite and a growth of `grown`, a new file, and a
        // file grown then cut back with all its dirty bytes dropped.
        let mut new = old.clone();
        new[..100].fill(0xee);
        new.resize(300_000, 0x77);
        fs.write(grown, 0, &new[..100]).unwrap();
        fs.write(grown, 10_000, &new[10_000..]).unwrap();
        let fresh = fs
            .create(root, b"fresh", 0o100644, 0, (0, 0), None)
            .unwrap();
        fs.write(fresh, 0, &[0x55; 20_000]).unwrap();
        fs.write(cut, 10_000, &[0x66; 10_000]).unwrap();
        let a = SetAttr {
            size: Some(5_000),
            ..Default::default()
        };
        fs.setattr(cut, &a).unwrap();
        fs.commit_periodic().unwrap();
        fs.wait_committed().unwrap();
        assert!(fs.dirty_bytes() > 290_000, "the interval commit wrote back");
        let snap = check_committed(&dev, true).unwrap();
        let reader = reader_of(&snap);
        let size = |id| reader.stat(id).unwrap().size;
        assert_eq!(
            size(grown),
            10_000,
            "no-holes {no_holes}: the grown file's size"
        );
        assert!(read_through(&reader, grown, old.len()) == old);
        assert_eq!(size(fresh), 0, "no-holes {no_holes}: the new file's size");
        assert_eq!(size(cut), 5_000, "no-holes {no_holes}: the cut file's size");
        assert!(read_through(&reader, cut, 5_000) == vec![0; 5_000]);
        assert_eq!(
            size(pre),
            8192,
            "no-holes {no_holes}: the preallocated file's size"
        );
        // The mount reads what was written, and its next commits write it.
        assert!(fs.read(grown, 0, 400_000).unwrap() == new);
        assert_eq!(fs.stat(fresh).unwrap().size, 20_000);
        fs.commit_periodic().unwrap();
        fs.wait_committed().unwrap();
        fs.unmount().unwrap();
        drop(fs);
        ubtrfs_engine::tools::check::check_dev(dev.clone()).unwrap();
        btrfs_check(&dev, SUITE).unwrap();
        let reader = reader_of(&dev);
        assert!(read_through(&reader, grown, new.len()) == new);
        assert!(read_through(&reader, fresh, 20_000) == vec![0x55; 20_000]);
        assert_eq!(reader.stat(cut).unwrap().size, 5_000);
    }
}

/// Under compress=zstd a writeback compresses outside the lock
/// ([`ubtrfs_engine::vfs::ordered`]): each 128 KiB piece gets space for
/// its whole, and gives back what its compressed bytes did not take; the
/// file reads back, takes a fraction of its size, and the image checks
/// clean (block groups' used bytes equal to their extents).
#[test]
fn vfs_compressed_writeback_gives_back_unused_space() {
    let (dev, t) = fresh_image(160 << 20, 0x2b);
    let (mut fs, root) = memcheck::zstd_mount(t);
    let id = fs.create(root, b"f", 0o100644, 0, (0, 0), None).unwrap();
    let line = b"ordered extents, compressed outside the lock. ";
    let text = memcheck::compressible(line, (8 << 20) + 1234, 16);
    let before = fs.statfs().bfree;
    fs.write(id, 0, &text).unwrap();
    let mut o = fs.writeback_all_begin().unwrap();
    assert!(fs.read(id, 0, text.len() as u32 + 1).unwrap() == text);
    let res = o.write();
    fs.writeback_all_end(o, res).unwrap();
    fs.commit().unwrap();
    let used = (before - fs.statfs().bfree) * SS;
    assert!(
        used < text.len() as u64 / 4,
        "{used} bytes used for {} bytes of text",
        text.len()
    );
    assert!(fs.read(id, 0, text.len() as u32 + 1).unwrap() == text);
    fs.unmount().unwrap();
    drop(fs);
    ubtrfs_engine::tools::check::check_dev(dev.clone()).unwrap();
    btrfs_check(&dev, SUITE).unwrap();
    assert!(read_through(&reader_of(&dev), id, text.len()) == text);
}

/// Files written one after another (cp -a, tar x) lie one after another
/// on disk after a writeback of them all, as the kernel's writeback of its
/// dirty list leaves them: a cold read of the tree in directory order then
/// reads forward.
#[test]
fn vfs_writeback_lays_files_out_in_inode_order() {
    let (dev, mut fs, root) = fresh_mount_fsid(0x2c);
    let sector = |i: usize| -> Vec<u8> {
        let mut s = vec![0u8; SS as usize];
        for (j, b) in s.iter_mut().enumerate() {
            *b = (i * 7 + j * 13 + (j >> 8)) as u8 ^ 0x5a;
        }
        s[..8].copy_from_slice(&(i as u64).to_le_bytes());
        s
    };
    const FILES: usize = 64;
    for i in 0..FILES {
        let id = fs
            .create(root, format!("f{i}").as_bytes(), 0o100644, 0, (0, 0), None)
            .unwrap();
        fs.write(id, 0, &sector(i)).unwrap();
    }
    fs.writeback_all().unwrap();
    fs.commit().unwrap();
    let at: Vec<u64> = (0..FILES)
        .map(|i| find_sector(&dev, &sector(i)).unwrap())
        .collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "data of files made in order lies at {at:?}"
    );
}

/// Under compress=zstd, data the kernel's heuristic refuses (only what
/// it samples, 16 bytes every 256, is random; the rest zeros) is written
/// as it is, as the kernel writes it; under compress-force=zstd the same
/// data is compressed (to a fraction: it is mostly zeros).
#[test]
fn vfs_compression_heuristic_and_compress_force() {
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
    let data: Vec<u8> = (0..4usize << 20)
        .map(|i| {
            if i % 256 < 16 {
                (rng.next() >> 32) as u8
            } else {
                0
            }
        })
        .collect();
    assert!(!ubtrfs_format::compress::worth_compressing(&data));
    let mut used = Vec::new();
    for force in [false, true] {
        let (dev, t) = fresh_image(160 << 20, 0x2c);
        let (mut fs, root) = memcheck::zstd_mount_forced(t, force);
        let id = fs.create(root, b"f", 0o100644, 0, (0, 0), None).unwrap();
        let before = fs.statfs().bfree;
        fs.write(id, 0, &data).unwrap();
        fs.commit().unwrap();
        used.push((before - fs.statfs().bfree) * SS);
        assert!(fs.read(id, 0, data.len() as u32).unwrap() == data);
        fs.unmount().unwrap();
        drop(fs);
        btrfs_check(&dev, SUITE).unwrap();
        let reader = reader_of(&dev);
        assert!(read_through(&reader, id, data.len()) == data);
        let map = FileHandle::open(&reader, id).unwrap().map(&reader).unwrap();
        let data_extents = map.iter().filter(|r| r.disk.is_some()).count();
        let compressed = map
            .iter()
            .filter(|r| r.disk.is_some_and(|d| d.2 != 0))
            .count();
        if force {
            assert_eq!(
                compressed, 32,
                "compress-force: 128 KiB pieces, compressed: {map:?}"
            );
        } else {
            // As the kernel sends a range that does not look compressible
            // to cow_file_range: large plain extents, not 128 KiB pieces.
            assert!(
                compressed == 0 && data_extents < 4,
                "compress=zstd: {data_extents} extents, {compressed} compressed"
            );
        }
    }
    let n = data.len() as u64;
    assert!(
        used[0] > n * 3 / 4,
        "compress=zstd: {} bytes used for {n}",
        used[0]
    );
    assert!(
        used[1] < n / 4,
        "compress-force=zstd: {} bytes used for {n}",
        used[1]
    );
}

/// A full filesystem is ENOSPC at write(2), never a lost writeback: what
/// was accepted is committed, reads back, and the image checks clean.
#[test]
fn vfs_full_filesystem_is_enospc_at_write() {
    let (dev, mut fs, root) = fresh_mount_fsid(0x26);
    let mut accepted = Vec::new();
    let mut refused = 0;
    for i in 0..40u64 {
        let id = fs
            .create(root, format!("f{i}").as_bytes(), 0o100644, 0, (0, 0), None)
            .unwrap();
        let data: Vec<u8> = (0..(8u64 << 20))
            .map(|b| ((b * (i + 3)) >> 9) as u8)
            .collect();
        match fs.write(id, 0, &data) {
            Ok(_) => accepted.push((id, data)),
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                refused += 1;
            }
        }
    }
    assert!(
        refused > 0 && !accepted.is_empty(),
        "accepted {} refused {refused}",
        accepted.len()
    );
    fs.unmount().expect("the final commit of accepted data");
    for (id, data) in &accepted {
        assert_eq!(&fs.read(*id, 0, data.len() as u32).unwrap(), data);
    }
    drop(fs);
    ubtrfs_engine::tools::check::check_dev(dev.clone()).unwrap();
    btrfs_check(&dev, SUITE).unwrap();
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

/// Writes into a COW file's fallocated space go in place, with checksums,
/// as the kernel's (an inode with BTRFS_INODE_PREALLOC takes
/// run_delalloc_nocow): overwriting a file preallocated over most of the
/// free space needs no more space. Written copy-on-write it would need as
/// much again, which this image does not have: the rest of the space is
/// taken by another file before the overwrite. The file reads back equal,
/// a corrupted sector of it is EIO (it has checksums), and the image
/// checks clean.
#[test]
fn vfs_writes_into_fallocated_space_go_in_place() {
    use ubtrfs_engine::io::dev::BlockDev;
    let (dev, mut fs, root) = fresh_mount_fsid(0x29);
    let id = fs.create(root, b"f", 0o100644, 0, (0, 0), None).unwrap();
    let free = fs.statfs().bavail * SS;
    let size = (free * 3 / 5) & !((1 << 20) - 1);
    fs.fallocate(id, 0, size, 0).unwrap();
    fs.commit().unwrap();
    let after_prealloc = fs.statfs().bavail * SS;
    assert!(
        after_prealloc < size,
        "{after_prealloc} bytes still free: a COW overwrite of {size} would fit"
    );
    // The rest of the space taken by another file: writes into the
    // fallocated space need none (the kernel's btrfs_check_nocow_lock).
    let filler = fs
        .create(root, b"filler", 0o100644, 0, (0, 0), None)
        .unwrap();
    let mut at = 0u64;
    for chunk in [1 << 20, 64 << 10] {
        while fs.write(filler, at, &vec![0x77; chunk]).is_ok() {
            at += chunk as u64;
        }
        fs.commit().unwrap();
    }
    let full = fs.statfs().bavail * SS;
    assert!(full < 1 << 20, "{full} bytes free after filling");
    let mut rng = Rng::new(0xfa11);
    let mut model = vec![0u8; size as usize];
    let chunks = size >> 20;
    let mut order: Vec<u64> = (0..chunks).collect();
    rng.shuffle(&mut order);
    for (n, c) in order.into_iter().enumerate() {
        // Whole MiBs, and now and then a piece of one (unaligned too).
        let (off, len) = if n % 5 == 4 {
            ((c << 20) + 1000, 70_000)
        } else {
            (c << 20, 1 << 20)
        };
        let data = pattern(&mut rng, len, true);
        fs.write(id, off, &data)
            .unwrap_or_else(|e| panic!("write {n} at {off}: {e}"));
        model[off as usize..off as usize + len].copy_from_slice(&data);
        if n == 2 {
            // Written again while its writeback is in flight: the flight
            // makes the preallocated extent a written one, which a COW
            // file rewrites copy-on-write, so on a full filesystem the
            // write is ENOSPC now (not a failed writeback later).
            let mut o = fs.writeback_all_begin().unwrap();
            let e = fs.write_buffered(id, off, &data).unwrap_err();
            assert_eq!(e.errno(), libc::ENOSPC, "{e}");
            let res = o.write();
            fs.writeback_all_end(o, res).unwrap();
        }
        if n % 8 == 7 {
            fs.commit()
                .unwrap_or_else(|e| panic!("commit after write {n}: {e}"));
        }
    }
    fs.commit().unwrap();
    let left = fs.statfs().bavail * SS;
    assert!(
        left + (1 << 20) >= full,
        "{left} bytes free after the overwrite, {full} before: written copy-on-write"
    );
    for at in (0..size).step_by(1 << 20) {
        let got = fs.read(id, at, 1 << 20).unwrap();
        assert!(
            got == model[at as usize..at as usize + (1 << 20)],
            "MiB at {at}"
        );
    }
    // The first whole sector of a MiB from the fourth on, one whose bytes
    // no other sector of the file has (pattern() repeats some: zeros, the
    // compressible one), found on the device and corrupted: its checksum
    // makes the read fail.
    let sector = |at: u64| &model[at as usize..(at + SS) as usize];
    let mut seen = std::collections::HashMap::new();
    for at in (0..size).step_by(SS as usize) {
        *seen.entry(sector(at)).or_insert(0) += 1;
    }
    let mib = (3 << 20..size)
        .step_by(1 << 20)
        .find(|&at| seen[sector(at)] == 1 && sector(at).iter().any(|&b| b != 0))
        .expect("a MiB whose first sector is the file's only one so");
    let at = find_sector(&dev, sector(mib));
    fs.unmount().unwrap();
    drop(fs);
    ubtrfs_engine::tools::check::check_dev(dev.clone()).unwrap();
    btrfs_check(&dev, SUITE).unwrap();
    let at = at.expect("the file's sector on the device");
    dev.write_at(&[0x5a; 512], at + 8).unwrap();
    // The read-only engine (the reader the kernel tests judge).
    let d = Device::from_dev(std::path::Path::new("mem"), dev.clone()).unwrap();
    let reader = Filesystem::from_devices(vec![d], 16 << 20).unwrap();
    let mut fh = FileHandle::open(&reader, id).unwrap();
    let mut got = vec![0u8; SS as usize];
    assert_eq!(fh.read_at(&reader, 0, &mut got).unwrap(), got.len());
    assert!(got == model[..SS as usize], "the reader's first sector");
    match fh.read_at(&reader, mib, &mut got) {
        Ok(_) => panic!("a corrupted sector read back: it has no checksum"),
        Err(e) => assert_eq!(e.errno(), libc::EIO, "{e}"),
    }
}

/// A write past the end of file into fallocated space of a full
/// filesystem dirties the sector of the old end of file too, which is not
/// preallocated: it needs space, so the write is ENOSPC (as the kernel's
/// btrfs_truncate_block), and the next commit still succeeds.
#[test]
fn vfs_full_filesystem_refuses_a_write_whose_eof_sector_needs_space() {
    let (dev, mut fs, root) = fresh_mount_fsid(0x2a);
    let id = fs.create(root, b"f", 0o100644, 0, (0, 0), None).unwrap();
    fs.write(id, 0, &[b'x'; 100]).unwrap();
    fs.commit().unwrap();
    fs.fallocate(id, 4096, 1 << 20, libc::FALLOC_FL_KEEP_SIZE)
        .unwrap();
    let filler = fs
        .create(root, b"filler", 0o100644, 0, (0, 0), None)
        .unwrap();
    let mut at = 0u64;
    for chunk in [1 << 20, 64 << 10, 4096] {
        while fs.write(filler, at, &vec![0x77; chunk]).is_ok() {
            at += chunk as u64;
        }
        fs.commit().unwrap();
    }
    // Inside the preallocated range, not touching the old end: in place.
    // Past the end: the sector at 0 is dirtied with it.
    match fs.write(id, 8192, &[1; 4096]) {
        Ok(_) => panic!("a write needing the end-of-file sector's space was taken"),
        Err(e) => assert_eq!(e.errno(), libc::ENOSPC, "{e}"),
    }
    fs.commit().expect("the commit after a refused write");
    assert_eq!(fs.read(id, 0, 100).unwrap(), vec![b'x'; 100]);
    fs.unmount().unwrap();
    drop(fs);
    ubtrfs_engine::tools::check::check_dev(dev.clone()).unwrap();
    btrfs_check(&dev, SUITE).unwrap();
}

/// ZERO_RANGE growing a file past a gap, without no-holes: the gap between
/// the old end of file and the zeroed range has hole items (btrfs check:
/// "file extent discount" / "Found file extent holes" otherwise).
#[test]
fn vfs_zero_range_past_eof_fills_holes_without_no_holes() {
    for keep in [false, true] {
        let (dev, mut fs, root) = fresh_mount(&MkfsOptions {
            fsid: Some([0x27; 16]),
            no_holes: false,
            ..Default::default()
        });
        let id = fs.create(root, b"f", 0o100644, 0, (0, 0), None).unwrap();
        fs.write(id, 0, &[7u8; 8192]).unwrap();
        let mode = 0x10 | if keep { 0x01 } else { 0 };
        fs.fallocate(id, 49152, 12288, mode).unwrap();
        // Unaligned, from inside the end-of-file sector.
        let id2 = fs.create(root, b"g", 0o100644, 0, (0, 0), None).unwrap();
        fs.write(id2, 0, &[9u8; 10000]).unwrap();
        fs.fallocate(id2, 50000, 10000, mode).unwrap();
        fs.unmount().unwrap();
        let want_size = if keep { 8192 } else { 61440 };
        assert_eq!(fs.stat(id).unwrap().size, want_size);
        let data = fs.read(id, 0, 70000).unwrap();
        assert_eq!(&data[..8192], &[7u8; 8192][..]);
        assert!(data[8192..].iter().all(|&b| b == 0));
        drop(fs);
        ubtrfs_engine::tools::check::check_dev(dev.clone()).unwrap();
        btrfs_check(&dev, SUITE).unwrap_or_else(|e| panic!("keep={keep}: {e}"));
    }
}

/// Reads through the mount check data checksums, as the kernel's: a
/// sector corrupted on the disk fails the read with EIO when it has one
/// copy; with DUP data the other copy answers. The corrupted sector is
/// found on the device by its bytes (black box: no address arithmetic).
#[test]
fn vfs_reads_verify_data_checksums() {
    use ubtrfs_engine::io::dev::BlockDev;
    for dup in [false, true] {
        let (dev, mut fs, root) = fresh_mount(&MkfsOptions {
            fsid: Some([0x28; 16]),
            data_profile: if dup { BG_DUP } else { 0 },
            ..Default::default()
        });
        let id = fs.create(root, b"f", 0o100644, 0, (0, 0), None).unwrap();
        let mut rng = Rng::new(0x5eed + dup as u64);
        let data: Vec<u8> = (0..256 << 10).map(|_| (rng.next() >> 24) as u8).collect();
        fs.write(id, 0, &data).unwrap();
        fs.commit().unwrap();
        assert_eq!(fs.read(id, 0, data.len() as u32).unwrap(), data);
        // Sector 5 of the file, wherever it is on the device.
        let at =
            find_sector(&dev, &data[5 * 4096..6 * 4096]).expect("the file's sector on the device");
        dev.write_at(&[0xa5; 512], at + 100).unwrap();
        let r = fs.read(id, 4 * 4096, 3 * 4096);
        if dup {
            let got = r.expect("the other copy");
            assert!(got == data[4 * 4096..7 * 4096], "DUP: not the good copy");
        } else {
            match r {
                Ok(_) => panic!("a corrupted sector read back without an error"),
                Err(e) => assert_eq!(e.errno(), libc::EIO, "{e}"),
            }
        }
        // Sectors around it still read.
        let around = fs.read(id, 0, 4 * 4096).unwrap();
        assert!(around == data[..4 * 4096], "dup {dup}: the sectors before");
    }
}

/// O_DIRECT writes of NOCOW files (vfs::direct): begun and ended under a
/// lock, written without it by 4 threads at once into a preallocated
/// NOCOW file (each thread in its own 64 KiB chunks, so the outcome does
/// not depend on the interleaving), with buffered writes beside them.
/// The file reads back equal to the model, through the mount and after a
/// commit through the read-only engine, and the image checks clean. What
/// cannot be written in place outside the lock is refused (None): a COW
/// file, an unaligned or past-EOF range, a range with dirty data, a
/// shared extent.
#[test]
fn vfs_direct_writes_outside_the_lock() {
    use std::sync::Mutex;
    const CHUNK: u64 = 64 << 10;
    const SIZE: u64 = 8 << 20;
    const THREADS: u64 = 4;
    let (dev, mut fs, root) = fresh_mount_fsid(0x29);
    let id = fs
        .create(root, b"nocow", 0o100644, 0, (0, 0), None)
        .unwrap();
    fs.set_flags(id, 0x0080_0000).unwrap();
    fs.fallocate(id, 0, SIZE, 0).unwrap();
    let cow = fs.create(root, b"cow", 0o100644, 0, (0, 0), None).unwrap();
    fs.write(cow, 0, &vec![5u8; 1 << 20]).unwrap();
    fs.commit().unwrap();

    // Refusals.
    assert!(
        fs.direct_write_begin(cow, 0, 4096).unwrap().is_none(),
        "COW file"
    );
    assert!(
        fs.direct_write_begin(id, 512, 4096).unwrap().is_none(),
        "unaligned"
    );
    assert!(
        fs.direct_write_begin(id, SIZE - 4096, 8192)
            .unwrap()
            .is_none(),
        "past EOF"
    );
    fs.write(id, 100, b"dirty").unwrap();
    assert!(
        fs.direct_write_begin(id, 0, 8192).unwrap().is_none(),
        "dirty range"
    );
    let mut model = vec![0u8; SIZE as usize];
    model[100..105].copy_from_slice(b"dirty");

    let fs = Mutex::new(fs);
    let models: Vec<Vec<(u64, Vec<u8>)>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let fs = &fs;
                s.spawn(move || {
                    let mut rng = Rng::new(0xd1ec7 + t);
                    let mut done = Vec::new();
                    let chunks: Vec<u64> = (1..SIZE / CHUNK).filter(|c| c % THREADS == t).collect();
                    for _ in 0..150 {
                        let c = chunks[rng.below(chunks.len() as u64) as usize];
                        let a = rng.below(CHUNK / SS);
                        let n = 1 + rng.below(CHUNK / SS - a);
                        let off = c * CHUNK + a * SS;
                        let data = pattern(&mut rng, (n * SS) as usize, true);
                        if rng.below(8) == 0 {
                            // Buffered, beside the direct writes.
                            fs.lock().unwrap().write(id, off + 7, &data[7..]).unwrap();
                            done.push((off + 7, data[7..].to_vec()));
                            continue;
                        }
                        let w = fs
                            .lock()
                            .unwrap()
                            .direct_write_begin(id, off, data.len())
                            .unwrap();
                        match w {
                            Some(w) => {
                                w.write(&data).unwrap();
                                fs.lock().unwrap().direct_write_end(w, true).unwrap();
                            }
                            // Dirty data of this thread's buffered write.
                            None => {
                                fs.lock().unwrap().write(id, off, &data).unwrap();
                            }
                        }
                        done.push((off, data));
                    }
                    done
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let mut fs = fs.into_inner().unwrap();
    assert_eq!(fs.direct_in_flight(), 0);
    for t in &models {
        for (off, data) in t {
            model[*off as usize..*off as usize + data.len()].copy_from_slice(data);
        }
    }
    let direct = fs.stats.direct_writes;
    assert!(direct > 300, "only {direct} direct writes");
    assert_eq!(
        fs.read(id, 0, SIZE as u32).unwrap(),
        model,
        "through the mount"
    );

    // A clone shares the extents: no more direct writes into them.
    let copy = fs.create(root, b"copy", 0o100644, 0, (0, 0), None).unwrap();
    fs.set_flags(copy, 0x0080_0000).unwrap();
    fs.copy_range(id, 0, copy, 0, SIZE).unwrap();
    fs.commit().unwrap();
    assert!(
        fs.direct_write_begin(id, CHUNK, 4096).unwrap().is_none(),
        "shared extent"
    );
    fs.unmount().unwrap();
    drop(fs);
    ubtrfs_engine::tools::check::check_dev(dev.clone()).unwrap();
    btrfs_check(&dev, SUITE).unwrap();
    let got = read_through(&reader_of(&dev), id, SIZE as usize);
    assert!(got == model, "the committed file differs from the model");
}

/// After the final commit (unmount) the filesystem is closed: a request
/// still running when the mount ended is refused (EROFS) and writes
/// nothing, and a second unmount does nothing; reads go on.
#[test]
fn vfs_unmount_closes_the_filesystem() {
    let (dev, mut fs, root) = fresh_mount_fsid(0x31);
    let id = fs.create(root, b"f", 0o100644, 0, (0, 0), None).unwrap();
    fs.write(id, 0, &[5u8; 10000]).unwrap();
    fs.opened(id);
    // A file open without names: the final commit deletes it.
    let gone = fs.create(root, b"o", 0o100644, 0, (0, 0), None).unwrap();
    fs.write(gone, 0, &[7u8; 5000]).unwrap();
    fs.opened(gone);
    fs.unlink(root, b"o").unwrap();
    // The last commit's superblock left to its thread: unmount waits for
    // it.
    fs.commit_periodic().unwrap();
    // Logged before the unmount, synced after: the final commit has it.
    let g = fs.create(root, b"g", 0o100644, 0, (0, 0), None).unwrap();
    fs.write(g, 0, &[8u8; 3000]).unwrap();
    let logged = match fs.fsync_log(g).unwrap() {
        FsyncStage::Logged(n) => n,
        other => panic!("fsync_log: {other:?}"),
    };
    fs.unmount().unwrap();
    let image = dev.snapshot();
    fs.fsync_sync(logged).unwrap();
    fs.released(gone).unwrap();
    let refused = |what: &str, r: Result<(), ubtrfs_engine::Error>| match r {
        Err(ubtrfs_engine::Error::ReadOnly(m)) => assert!(m.contains("unmounted"), "{what}: {m}"),
        other => panic!("{what} after unmount: {other:?}"),
    };
    refused("write", fs.write(id, 0, &[6u8; 4096]).map(drop));
    refused(
        "create",
        fs.create(root, b"g", 0o100644, 0, (0, 0), None).map(drop),
    );
    refused("unlink", fs.unlink(root, b"f"));
    refused("commit", fs.commit());
    refused("direct write", fs.direct_write_begin(id, 0, 4096).map(drop));
    // Nothing changed since the final commit: fsync and sync answer from
    // it.
    assert!(fs.fsync(id).is_ok());
    assert!(fs.sync_fs().is_ok());
    fs.released(id).unwrap();
    fs.unmount().unwrap();
    assert_eq!(fs.read(id, 0, 10000).unwrap(), vec![5u8; 10000]);
    assert!(dev.snapshot() == image, "the image changed after unmount");
    drop(fs);
    btrfs_check(&dev, SUITE).unwrap();
    // What the final commit wrote is what a new mount reads.
    let d = Device::from_dev(std::path::Path::new("mem"), dev.clone()).unwrap();
    let reader = Filesystem::from_devices(vec![d], 16 << 20).unwrap();
    for (name, want) in [(&b"f"[..], vec![5u8; 10000]), (b"g", vec![8u8; 3000])] {
        let e = reader.lookup(root, name).unwrap().expect("name kept");
        let mut fh = FileHandle::open(&reader, e.target).unwrap();
        let mut buf = vec![0u8; want.len() + 1];
        let n = fh.read_at(&reader, 0, &mut buf).unwrap();
        assert_eq!(&buf[..n], &want[..]);
    }
    assert!(reader.lookup(root, b"o").unwrap().is_none());
}

/// Data accepted by write(2) keeps the space it was counted against when
/// metadata grows afterwards (fstests generic/269: fsstress beside a dd
/// that fills the filesystem). A large file written until ENOSPC, all of
/// it dirty, then small files with xattrs until ENOSPC: their tree
/// blocks must not take the unallocated space the dirty data was
/// counted against (a new metadata chunk is a tenth of the filesystem
/// here), or no commit could place the data and the mount would go
/// read-only, every change since the last commit lost. Everything
/// accepted is committed at unmount and reads back; the image checks
/// clean.
#[test]
fn vfs_metadata_growth_leaves_accepted_data_its_space() {
    let (dev, t) = fresh_image(1 << 30, 0x28);
    let opts = RwOptions {
        dirty_limit: 2 << 30,
        ..Default::default()
    };
    let mut fs = RwFs::with_trans(t, opts).unwrap();
    let root = TOP;
    let big = fs.create(root, b"big", 0o100644, 0, (0, 0), None).unwrap();
    let chunk: Vec<u8> = (0..(1u64 << 20)).map(|b| (b >> 9) as u8).collect();
    let mut size = 0u64;
    loop {
        match fs.write_buffered(big, size, &chunk) {
            Ok(_) => size += chunk.len() as u64,
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                break;
            }
        }
    }
    assert!(fs.dirty_bytes() > 256 << 20, "{} dirty", fs.dirty_bytes());
    let mut made = 0u64;
    for i in 0..200_000u64 {
        let name = format!("m{i:06}-{}", "x".repeat(200));
        let res = fs
            .create(root, name.as_bytes(), 0o100644, 0, (0, 0), None)
            .and_then(|id| fs.setxattr(id, b"user.pad", &[i as u8; 3000], 0, false));
        if let Err(e) = res {
            assert_eq!(e.errno(), libc::ENOSPC, "file {i}: {e}");
            break;
        }
        made += 1;
    }
    assert!(fs.aborted().is_none(), "read-only: {:?}", fs.aborted());
    assert!(made > 1000, "only {made} files made");
    fs.unmount().expect("the final commit of accepted data");
    let back = fs
        .read(big, size - chunk.len() as u64, chunk.len() as u32)
        .unwrap();
    assert_eq!(back, chunk);
    drop(fs);
    ubtrfs_engine::tools::check::check_dev(dev.clone()).unwrap();
    btrfs_check(&dev, SUITE).unwrap();
}

/// A commit that finds no room for dirty data (here another writer of
/// the transaction took every free data sector) is made without it: the
/// data stays dirty and readable, the commit and the next fsync say
/// ENOSPC, and the mount stays writable, where going read-only would lose
/// every change since the last commit. Once space is back, the data is
/// written.
#[test]
fn vfs_commit_without_room_for_dirty_data_keeps_it_dirty() {
    use ubtrfs_engine::inode::file::DataPolicy;
    let (dev, mut fs, root) = fresh_mount_fsid(0x29);
    let f = fs.create(root, b"f", 0o100644, 0, (0, 0), None).unwrap();
    let data: Vec<u8> = (0..(8u64 << 20)).map(|b| ((b * 7) >> 10) as u8).collect();
    fs.write_buffered(f, 0, &data).unwrap();
    let thief = fs
        .create(root, b"thief", 0o100644, 0, (0, 0), None)
        .unwrap();
    let policy = DataPolicy {
        csum: true,
        ..Default::default()
    };
    let t = fs.trans();
    let (mut at, mut step) = (0u64, 8usize << 20);
    while step >= SS as usize {
        match t
            .file(thief.subvol, thief.ino)
            .write_file(at, &vec![0x5a; step], policy)
        {
            Ok(i) => {
                t.put_inode(thief.subvol, thief.ino, &i).unwrap();
                at += step as u64;
            }
            Err(ubtrfs_engine::Error::NoSpace(_)) => step /= 2,
            Err(e) => panic!("taking the space: {e}"),
        }
    }
    match fs.commit() {
        Err(e) => assert_eq!(e.errno(), libc::ENOSPC, "{e}"),
        Ok(()) => panic!("committed dirty data that had no room"),
    }
    assert!(fs.aborted().is_none(), "read-only: {:?}", fs.aborted());
    assert_eq!(fs.read(f, 0, data.len() as u32).unwrap(), data);
    // The next fsync hears it as ENOSPC, not EIO.
    let e = fs.fsync(f).unwrap_err();
    assert_eq!(e.errno(), libc::ENOSPC, "{e}");
    fs.unlink(root, b"thief").unwrap();
    // The thief's space is free once a commit has made its removal
    // durable; the next writes the data.
    let _ = fs.commit();
    fs.unmount().expect("the final commit, with room again");
    assert_eq!(fs.read(f, 0, data.len() as u32).unwrap(), data);
    drop(fs);
    ubtrfs_engine::tools::check::check_dev(dev.clone()).unwrap();
    btrfs_check(&dev, SUITE).unwrap();
    let d = Device::from_dev(std::path::Path::new("mem"), dev.clone()).unwrap();
    let reader = Filesystem::from_devices(vec![d], 16 << 20).unwrap();
    let id = reader.resolve(b"f").unwrap();
    let mut fh = ubtrfs_engine::FileHandle::open(&reader, id).unwrap();
    let mut buf = vec![0u8; data.len()];
    assert_eq!(fh.read_at(&reader, 0, &mut buf).unwrap(), data.len());
    assert!(buf == data, "the committed file differs");
}

/// A full filesystem of 4 KiB files, every other one unlinked in one
/// transaction, then a 16 MiB file written (fstests generic/416): the
/// commit after the unlinks needs tree blocks for every extent freed
/// (extent, csum and free-space trees), so the unlinks commit for space
/// before the room runs out, and the commit is never left without it
/// (which made the mount read-only). The image checks clean.
#[test]
fn vfs_unlinks_of_many_files_leave_their_commit_room() {
    let (dev, t) = fresh_image(128 << 20, 0x2e);
    let mut fs = RwFs::with_trans(t, RwOptions::default()).unwrap();
    let root = TOP;
    let page = vec![0x3cu8; 4096];
    let mut n = 0u64;
    loop {
        let name = format!("{n:05}");
        let id = fs
            .create(root, name.as_bytes(), 0o100644, 0, (0, 0), None)
            .unwrap();
        let written = fs.write_buffered(id, 0, &page).is_ok()
            || (matches!(fs.commit_for_space(), Ok(true))
                && fs.write_buffered(id, 0, &page).is_ok());
        if !written {
            break;
        }
        n += 1;
    }
    assert!(n > 5000, "only {n} files");
    fs.unmount().unwrap();
    drop(fs);
    let t = Trans::open_dev(vec![dev.clone() as Arc<dyn BlockDev>], 16 << 20).unwrap();
    let mut fs = RwFs::with_trans(t, RwOptions::default()).unwrap();
    for i in (1..n).step_by(2) {
        fs.unlink(root, format!("{i:05}").as_bytes())
            .unwrap_or_else(|e| panic!("unlink {i}: {e}"));
    }
    fs.commit().unwrap();
    let big = fs
        .create(root, b"large", 0o100644, 0, (0, 0), None)
        .unwrap();
    fs.write_buffered(big, 0, &vec![0xcd; 16 << 20]).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    ubtrfs_engine::tools::check::check_dev(dev.clone()).unwrap();
    btrfs_check(&dev, SUITE).unwrap();
}
