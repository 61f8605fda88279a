//! Readers sharing the read-write filesystem (`&RwFs` behind a read lock,
//! as the mount's request threads share it) while a writer changes it
//! under the write lock: every reader's look at a file, taken in one
//! read section, is one whole version of it (lookup, stat, readdir and
//! read agree), through writes held dirty, writebacks, commits (after
//! which reads load committed blocks into the cache readers fill side by
//! side), renames over a name, and writebacks in flight (the write lock
//! let go while their bytes are written, as the mount does: readers must
//! have looked during flights). Readers must also have been inside the
//! lock together: the lock is shared, not taken in turn.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use ubtrfs_engine::fs::InodeId;
use ubtrfs_engine::io::dev::MemDev;
use ubtrfs_engine::mkfs::{make, MkfsOptions};
use ubtrfs_engine::rwfs::attr::SetAttr;
use ubtrfs_engine::rwfs::{RwFs, RwOptions};
use ubtrfs_format::consts::*;

mod memcheck;

const FILES: u64 = 6;
const READERS: usize = 4;
const WRITES: u64 = 600;

fn name(i: u64) -> Vec<u8> {
    format!("f{i}").into_bytes()
}

/// Version `v` of a file: its length and its one byte value (the length
/// follows from the byte, so a reader tells a torn look from a whole one).
fn version(v: u64) -> (usize, u8) {
    let fill = (v % 251) as u8 + 1;
    (length_of(fill), fill)
}

fn length_of(fill: u8) -> usize {
    [1, 4095, 4096, 9000, 65536, 200_000, 131_072 + 17][fill as usize % 7]
}

/// One reader's look at every file, in one read section: Err says what
/// did not agree.
fn look(fs: &RwFs, root: InodeId) -> Result<u64, String> {
    let listed = fs
        .readdir(root, 0, 64)
        .map_err(|e| format!("readdir: {e}"))?;
    let names: Vec<&[u8]> = listed.iter().map(|e| e.name.as_slice()).collect();
    let mut bytes = 0;
    for i in 0..FILES {
        let n = name(i);
        if !names.contains(&n.as_slice()) {
            return Err(format!("f{i} not listed ({} entries)", names.len()));
        }
        let id = fs
            .lookup(root, &n)
            .map_err(|e| format!("lookup f{i}: {e}"))?
            .ok_or_else(|| format!("f{i}: lookup found nothing"))?;
        if listed.iter().find(|e| e.name == n).map(|e| e.id) != Some(id) {
            return Err(format!("f{i}: readdir and lookup name other inodes"));
        }
        let size = fs.stat(id).map_err(|e| format!("stat f{i}: {e}"))?.size;
        let mut data = Vec::new();
        while (data.len() as u64) < size {
            let part = fs
                .read(id, data.len() as u64, 128 << 10)
                .map_err(|e| format!("read f{i}: {e}"))?;
            if part.is_empty() {
                return Err(format!("f{i}: read ended at {} of {size}", data.len()));
            }
            data.extend_from_slice(&part);
        }
        let first = data.first().copied().unwrap_or(0);
        if first == 0
            || data.iter().any(|&b| b != first)
            || data.len() as u64 != size
            || size != length_of(first) as u64
        {
            return Err(format!(
                "f{i}: {} bytes not one version (size {size}, first byte {first})",
                data.len()
            ));
        }
        bytes += size;
    }
    Ok(bytes)
}

/// A mount over a fresh in-memory image, its device and its top
/// directory.
fn fresh(nodesize: u32, fsid: u8) -> (RwFs, Arc<MemDev>, InodeId) {
    let dev = Arc::new(MemDev::new(192 << 20));
    let mkopts = MkfsOptions {
        nodesize,
        fsid: Some([fsid; 16]),
        ..Default::default()
    };
    let t = make(vec![("mem".into(), dev.clone())], &mkopts).unwrap();
    let root = InodeId {
        subvol: FS_TREE_OBJECTID,
        ino: FIRST_INODE,
    };
    (
        RwFs::with_trans(t, RwOptions::default()).unwrap(),
        dev,
        root,
    )
}

#[test]
fn readers_share_the_filesystem_and_see_whole_versions() {
    let (mut fs, dev, root) = fresh(4096, 0x31);
    let mut ids = HashMap::new();
    for i in 0..FILES {
        let id = fs
            .create(root, &name(i), 0o100644, 0, (0, 0), None)
            .unwrap();
        let (len, fill) = version(i);
        fs.write(id, 0, &vec![fill; len]).unwrap();
        ids.insert(i, id);
    }
    fs.commit().unwrap();

    let fs = Arc::new(RwLock::new(fs));
    let done = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(AtomicU64::new(0));
    let most_inside = Arc::new(AtomicU64::new(0));
    // Flights begun, and looks made wholly inside one.
    let flight = Arc::new(AtomicU64::new(0));
    let flying = Arc::new(AtomicBool::new(false));
    let looks_in_flight = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let (fs, done, inside, most) = (
                fs.clone(),
                done.clone(),
                inside.clone(),
                most_inside.clone(),
            );
            let (flight, flying, in_flight) =
                (flight.clone(), flying.clone(), looks_in_flight.clone());
            std::thread::spawn(move || -> Result<(u64, u64), String> {
                let (mut looks, mut bytes) = (0u64, 0u64);
                while !done.load(Ordering::SeqCst) || looks == 0 {
                    let g = fs.read().unwrap();
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    let f0 = (flying.load(Ordering::SeqCst), flight.load(Ordering::SeqCst));
                    let res = look(&g, root);
                    let f1 = (flying.load(Ordering::SeqCst), flight.load(Ordering::SeqCst));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(g);
                    if f0.0 && f0 == f1 {
                        in_flight.fetch_add(1, Ordering::SeqCst);
                    }
                    bytes += res?;
                    looks += 1;
                }
                Ok((looks, bytes))
            })
        })
        .collect();

    // The writer: each step one whole new version of a file, in one write
    // section; now and then a writeback, a commit, or a new inode renamed
    // over the name.
    let mut rng = memcheck::Rng::new(0x2545_F491_4F6C_DD1D);
    let mut flights = 0u64;
    for v in FILES..FILES + WRITES {
        let r = rng.next();
        let i = r % FILES;
        let (len, fill) = version(v);
        let mut g = fs.write().unwrap();
        if r.is_multiple_of(5) {
            let tmp = g.create(root, b"tmp", 0o100644, 0, (0, 0), None).unwrap();
            g.write(tmp, 0, &vec![fill; len]).unwrap();
            g.rename(root, b"tmp", root, &name(i), 0, (0, 0)).unwrap();
            ids.insert(i, tmp);
        } else {
            let id = ids[&i];
            let a = SetAttr {
                size: Some(0),
                ..Default::default()
            };
            g.setattr(id, &a).unwrap();
            g.write(id, 0, &vec![fill; len]).unwrap();
        }
        match r % 11 {
            0 | 1 => g.commit().unwrap(),
            2 | 3 => g.writeback(ids[&i]).unwrap(),
            4 => {
                // A writeback in flight: the lock let go until a reader
                // has looked (or a while has passed).
                let mut o = g.writeback_all_begin().unwrap();
                flight.fetch_add(1, Ordering::SeqCst);
                flying.store(true, Ordering::SeqCst);
                drop(g);
                let seen = looks_in_flight.load(Ordering::SeqCst);
                let t = std::time::Instant::now();
                while looks_in_flight.load(Ordering::SeqCst) == seen
                    && t.elapsed() < std::time::Duration::from_millis(200)
                {
                    std::thread::yield_now();
                }
                let res = o.write();
                g = fs.write().unwrap();
                flying.store(false, Ordering::SeqCst);
                g.writeback_all_end(o, res).unwrap();
                flights += 1;
            }
            _ => {}
        }
        drop(g);
        std::thread::yield_now();
    }
    done.store(true, Ordering::SeqCst);
    let mut total = 0;
    for r in readers {
        let (looks, bytes) = r.join().unwrap().unwrap_or_else(|e| panic!("{e}"));
        assert!(looks > 0);
        total += bytes;
    }
    let most = most_inside.load(Ordering::SeqCst);
    let in_flight = looks_in_flight.load(Ordering::SeqCst);
    eprintln!(
        "rwfs_shared_reads: {WRITES} writes, {total} bytes read, at most {most} readers at once, {in_flight} looks during {flights} writebacks in flight"
    );
    assert!(
        flights > 0 && in_flight > 0,
        "no reader looked while a writeback was in flight ({flights} flights)"
    );
    assert!(
        most >= 2,
        "readers never held the read lock together ({most} at most)"
    );
    let mut g = fs.write().unwrap();
    g.unmount().unwrap();
    drop(g);
    memcheck::btrfs_check(&dev, "rwfs_shared_reads").unwrap_or_else(|e| panic!("{e}"));
}

/// A close under the shared lock that was the last of an orphan leaves
/// the deletion to the exclusive lock; a handle opened in between (the
/// kernel opens an unlinked file again through /proc/PID/fd) keeps it.
#[test]
fn last_close_of_an_orphan_deletes_it_unless_reopened() {
    let (mut fs, dev, root) = fresh(16384, 0x32);
    let id = fs.create(root, b"gone", 0o100644, 0, (0, 0), None).unwrap();
    fs.write(id, 0, b"still here").unwrap();
    fs.opened(id);
    fs.opened(id);
    fs.unlink(root, b"gone").unwrap();
    assert!(!fs.release_shared(id), "one handle is still open");
    assert!(fs.release_shared(id), "the last close of an orphan");
    // Opened again before the exclusive lock was taken: kept.
    fs.opened(id);
    fs.drop_orphan_if_closed(id).unwrap();
    assert_eq!(fs.read(id, 0, 64).unwrap(), b"still here");
    fs.commit().unwrap();
    assert!(fs.release_shared(id));
    fs.drop_orphan_if_closed(id).unwrap();
    assert!(fs.stat(id).is_err(), "the orphan outlived its last close");
    fs.unmount().unwrap();
    memcheck::btrfs_check(&dev, "rwfs_shared_reads").unwrap_or_else(|e| panic!("orphan: {e}"));
}
