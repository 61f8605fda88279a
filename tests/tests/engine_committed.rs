//! The engine's API in-process on the committed kernel-made fixtures (no
//! root): what the CLI-level tests (committed.rs) see only through
//! `inspect manifest`, checked call by call.
//!
//! * ctree: a cursor's forward and backward walks equal a plain
//!   recursive walk of the blocks; `seek`, `seek_le`, `seek_floor` and
//!   `seek_last` land where a binary search of that listing says, for
//!   every key and the keys just around it;
//! * cache: a block cache never holds more than its capacity, keeps what
//!   is referenced over what is not, and gives back the blocks it holds;
//! * fs: every path of the kernel's manifest resolves, by `resolve` and by
//!   `lookup` from its parent, to an inode whose stat, symlink target,
//!   xattrs and names (`read_dir`, `inode_refs`, `dir_path`) agree with the
//!   manifest;
//! * fs/file: every regular file reads (in random-sized pieces at random
//!   offsets) to the kernel's sha256, and its SEEK_DATA/SEEK_HOLE map, and
//!   seek_data/seek_hole at random offsets, agree with the kernel's map.
//!
//! UBTRFS_ENGINE_SEED sets the seed of the random offsets and sizes.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use ubtrfs_engine::cache::block_cache::BlockCache;
use ubtrfs_engine::ctree::{Cursor, Tree};
use ubtrfs_engine::tree::block::{BlockExpect, TreeBlock};
use ubtrfs_engine::{FileHandle, Filesystem, InodeId, OpenOptions};
use ubtrfs_format::key::Key;
use ubtrfs_oracle::*;

type Items = Vec<(Key, Vec<u8>)>;

fn seed() -> u64 {
    env_u64("UBTRFS_ENGINE_SEED").unwrap_or(0xe46_19e5)
}

/// Every item of `tree` by a plain depth-first walk of its blocks (no
/// cursor), checking each child's first key against its parent pointer.
fn reference_items(fs: &Filesystem, tree: Tree) -> Items {
    fn visit(fs: &Filesystem, bytenr: u64, expect: BlockExpect, out: &mut Items) {
        let b = fs.info.read_tree_block(bytenr, expect).unwrap();
        let n = b.node();
        if n.is_leaf() {
            for i in 0..n.nritems() {
                let it = n.item(i);
                out.push((it.key, it.data.to_vec()));
            }
            return;
        }
        for i in 0..n.nritems() {
            let p = n.key_ptr(i);
            let e = BlockExpect {
                level: Some(n.level() - 1),
                generation: Some(p.generation),
                first_key: Some(p.key),
            };
            visit(fs, p.blockptr, e, out);
        }
    }
    let mut out = Vec::new();
    let e = BlockExpect {
        level: Some(tree.level),
        generation: Some(tree.generation),
        first_key: None,
    };
    visit(fs, tree.bytenr, e, &mut out);
    out
}

fn cursor_forward(fs: &Filesystem, tree: Tree) -> Items {
    let mut c = Cursor::new(&fs.info, tree);
    let mut out = Vec::new();
    let mut ok = c.seek(&Key::MIN).unwrap();
    while ok {
        let (k, d) = c.item().expect("positioned");
        out.push((k, d.to_vec()));
        ok = c.next().unwrap();
    }
    assert!(c.key().is_none(), "a cursor past the end shows a key");
    out
}

fn cursor_backward(fs: &Filesystem, tree: Tree) -> Items {
    let mut c = Cursor::new(&fs.info, tree);
    let mut out = Vec::new();
    let mut ok = c.seek_last().unwrap();
    while ok {
        let (k, d) = c.item().expect("positioned");
        out.push((k, d.to_vec()));
        ok = c.prev().unwrap();
    }
    out.reverse();
    out
}

/// The keys just before and after `k` in key order (where they exist).
fn neighbours(k: Key) -> Vec<Key> {
    let mut v = vec![k];
    if k.offset > 0 {
        v.push(Key::new(k.objectid, k.item_type, k.offset - 1));
    }
    if k.offset < u64::MAX {
        v.push(Key::new(k.objectid, k.item_type, k.offset + 1));
    }
    v.push(Key::new(k.objectid, k.item_type, 0));
    v.push(Key::new(k.objectid, k.item_type, u64::MAX));
    if k.item_type > 0 {
        v.push(Key::new(k.objectid, k.item_type - 1, u64::MAX));
    }
    if k.item_type < u8::MAX {
        v.push(Key::new(k.objectid, k.item_type + 1, 0));
    }
    v
}

#[test]
fn cursor_walks_and_seeks_agree_with_a_plain_walk() {
    let mut trees_checked = 0;
    let mut seeks = 0;
    for f in committed_fixtures() {
        let fs = open_fixture(f);
        for t in all_trees(&fs) {
            let what = format!("{} {}", f.name, t.describe());
            let want = reference_items(&fs, t);
            assert!(
                want.windows(2).all(|w| w[0].0 < w[1].0),
                "{what}: keys not strictly increasing across blocks"
            );
            assert!(
                cursor_forward(&fs, t) == want,
                "{what}: forward walk differs"
            );
            assert!(
                cursor_backward(&fs, t) == want,
                "{what}: backward walk differs"
            );
            let keys: Vec<Key> = want.iter().map(|(k, _)| *k).collect();
            let mut probes: BTreeSet<Key> = keys.iter().flat_map(|&k| neighbours(k)).collect();
            probes.insert(Key::MIN);
            probes.insert(Key::new(u64::MAX, u8::MAX, u64::MAX));
            let mut c = Cursor::new(&fs.info, t);
            for p in probes {
                // Index of the first key >= p, and of the last key <= p.
                let ge = keys.partition_point(|k| *k < p);
                let le = keys.partition_point(|k| *k <= p).checked_sub(1);
                assert_eq!(c.seek(&p).unwrap(), ge < keys.len(), "{what}: seek {p}");
                assert_eq!(c.key(), keys.get(ge).copied(), "{what}: seek {p}");
                if ge < keys.len() {
                    assert_eq!(
                        c.item().map(|(_, d)| d.to_vec()).as_ref(),
                        Some(&want[ge].1),
                        "{what}: seek {p}: data"
                    );
                }
                assert_eq!(c.seek_le(&p).unwrap(), le.is_some(), "{what}: seek_le {p}");
                assert_eq!(c.key(), le.map(|i| keys[i]), "{what}: seek_le {p}");
                assert!(c.seek_floor(&p).unwrap() || keys.is_empty());
                assert_eq!(
                    c.key(),
                    le.or((!keys.is_empty()).then_some(0)).map(|i| keys[i]),
                    "{what}: seek_floor {p}"
                );
                // One step each way from the seek_le position.
                if let Some(i) = le {
                    c.seek_le(&p).unwrap();
                    assert_eq!(c.next().unwrap(), i + 1 < keys.len(), "{what}: next");
                    assert_eq!(c.key(), keys.get(i + 1).copied(), "{what}: next after {p}");
                    c.seek_le(&p).unwrap();
                    assert_eq!(c.prev().unwrap(), i > 0, "{what}: prev");
                    if i > 0 {
                        assert_eq!(c.key(), Some(keys[i - 1]), "{what}: prev before {p}");
                    }
                }
                seeks += 1;
            }
            assert_eq!(c.seek_last().unwrap(), !keys.is_empty());
            assert_eq!(c.key(), keys.last().copied(), "{what}: seek_last");
            trees_checked += 1;
        }
    }
    eprintln!("{trees_checked} trees walked both ways, {seeks} probe keys sought");
    assert!(trees_checked >= 4 * 6);
}

// ------------------------------------------------------------------ cache

#[test]
fn block_cache_stays_within_its_capacity() {
    let f = committed_fixture("small-crc32c");
    let fs = open_fixture(f);
    // Every tree block of every tree, read through the filesystem.
    let blocks: Vec<Arc<TreeBlock>> = tree_blocks(&fs, &all_trees(&fs))
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    let nodesize = fs.info.nodesize;
    assert!(blocks.len() > 24, "only {} tree blocks", blocks.len());
    let held = |c: &BlockCache| blocks.iter().filter(|x| c.contains(x.bytenr)).count();
    for cap in [16usize, 17, 20] {
        let cache = BlockCache::new(cap as u64 * nodesize as u64, nodesize);
        assert_eq!(cache.capacity(), cap);
        // A hot set looked up between inserts stays (CLOCK gives it a
        // second chance each sweep); the cache never holds more than its
        // capacity.
        let hot: Vec<u64> = blocks[..cap / 4].iter().map(|b| b.bytenr).collect();
        for b in &blocks[..cap / 4] {
            cache.insert(b.clone());
        }
        for (i, b) in blocks.iter().enumerate().skip(cap / 4) {
            for h in &hot {
                let got = cache.get(*h);
                assert!(
                    got.is_some_and(|x| x.bytenr == *h),
                    "cap {cap}: hot block {h} evicted after {i} inserts"
                );
            }
            cache.insert(b.clone());
            assert!(
                held(&cache) <= cap,
                "cap {cap}: {} blocks held",
                held(&cache)
            );
            assert!(cache.contains(b.bytenr), "cap {cap}: just inserted, gone");
        }
        assert_eq!(
            held(&cache),
            cap,
            "cap {cap}: a full cache holds its capacity"
        );
        for h in &hot {
            let got = cache.get(*h).unwrap();
            let orig = blocks.iter().find(|b| b.bytenr == *h).unwrap();
            assert_eq!(got.bytes(), orig.bytes(), "cap {cap}: different bytes back");
        }
        let (hits, misses) = cache.stats();
        assert_eq!(misses, 0, "cap {cap}");
        assert!(hits >= ((blocks.len() - cap / 4) * hot.len()) as u64);

        // Blocks read ahead and never used are evicted first and counted.
        let cache = BlockCache::new(cap as u64 * nodesize as u64, nodesize);
        for b in &blocks {
            assert!(cache.insert_prefetched(b.clone()));
            assert!(held(&cache) <= cap);
        }
        assert!(!cache.insert_prefetched(blocks.last().unwrap().clone()));
        assert_eq!(cache.prefetch_unused(), (blocks.len() - cap) as u64);
        let last = blocks.last().unwrap().bytenr;
        assert!(cache.get(last).is_some());
        assert!(cache.get(last).is_some());
        assert_eq!(
            cache.prefetch_hits(),
            1,
            "a second use is not a prefetch hit"
        );
    }
    // A filesystem opened with a tiny budget reads everything through a
    // cache of the minimum size.
    let small = Filesystem::open(
        &f.devices()[0],
        &OpenOptions {
            cache_bytes: 1,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(small.info.cache.capacity(), 16);
    for t in all_trees(&small) {
        assert!(cursor_forward(&small, t) == reference_items(&fs, t));
    }
    let held = blocks
        .iter()
        .filter(|x| small.info.cache.contains(x.bytenr))
        .count();
    assert!(held <= 16, "{held} blocks in a 16-block cache");
}

// --------------------------------------------------------------------- fs

/// A manifest path (percent-encoded, see tests/oracle/manifest.py) as bytes.
fn decode(p: &str) -> Vec<u8> {
    let b = p.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 3 <= b.len() {
            let h = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(h, 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

fn parent_and_name(p: &[u8]) -> (&[u8], &[u8]) {
    let i = p.iter().rposition(|&c| c == b'/').unwrap();
    (if i == 0 { b"/" } else { &p[..i] }, &p[i + 1..])
}

/// Checks one manifest record against the engine; Err says what differs.
fn check_path(fs: &Filesystem, v: &Value, ids: &BTreeMap<Vec<u8>, InodeId>) -> Result<(), String> {
    let path = decode(v["path"].as_str().unwrap());
    let id = ids[&path];
    if path != b"/" {
        let (parent, name) = parent_and_name(&path);
        let e = fs
            .lookup(ids[parent], name)
            .map_err(|e| format!("lookup: {e}"))?
            .ok_or("lookup: not found")?;
        if e.target != id {
            return Err(format!("lookup gives {:?}, resolve {id:?}", e.target));
        }
    }
    let st = fs.stat(id).map_err(|e| format!("stat: {e}"))?;
    let want = |k: &str| v[k].as_u64();
    let checks = [
        ("ino", Some(st.ino), want("ino")),
        ("mode", Some((st.mode & 0o7777) as u64), want("mode")),
        ("uid", Some(st.uid as u64), want("uid")),
        ("gid", Some(st.gid as u64), want("gid")),
        ("rdev", Some(st.rdev), want("rdev")),
    ];
    for (k, got, want) in checks {
        if got != want {
            return Err(format!("{k}: {got:?}, manifest {want:?}"));
        }
    }
    let ty = v["type"].as_str().unwrap();
    let kind_ok = match ty {
        "dir" => st.is_dir(),
        "file" => st.is_reg(),
        "symlink" => st.is_symlink(),
        _ => true,
    };
    if !kind_ok {
        return Err(format!("type {ty}, mode {:o}", st.mode));
    }
    if ty != "dir" && Some(st.size) != want("size") {
        return Err(format!("size {}, manifest {:?}", st.size, want("size")));
    }
    if !id.is_placeholder() {
        let mt = st.mtime.sec as i128 * 1_000_000_000 + st.mtime.nsec as i128;
        if Some(mt) != v["mtime_ns"].as_i64().map(|x| x as i128) {
            return Err(format!("mtime_ns {mt}, manifest {}", v["mtime_ns"]));
        }
    }
    if ty == "symlink" {
        let t = ubtrfs_engine::fs::file::readlink(fs, id).map_err(|e| format!("readlink: {e}"))?;
        if t != decode(v["target"].as_str().unwrap()) {
            return Err(format!("readlink {:?}", String::from_utf8_lossy(&t)));
        }
    }
    let xattrs: BTreeMap<Vec<u8>, Vec<u8>> = fs
        .xattrs(id)
        .map_err(|e| format!("xattrs: {e}"))?
        .into_iter()
        .collect();
    let want_x = v["xattrs"].as_object().map_or(0, |m| m.len());
    if xattrs.len() != want_x {
        return Err(format!("{} xattrs, manifest {want_x}", xattrs.len()));
    }
    for name in xattrs.keys() {
        let one = fs.xattr(id, name).map_err(|e| format!("xattr: {e}"))?;
        if one.as_ref() != xattrs.get(name) {
            return Err(format!(
                "xattr {:?} by name differs",
                String::from_utf8_lossy(name)
            ));
        }
    }
    Ok(())
}

#[test]
fn every_manifest_path_resolves_and_stats_as_the_kernel_showed() {
    let mut checked = 0;
    for f in committed_fixtures() {
        let fs = open_fixture(f);
        let recs: Vec<Value> = f
            .kernel_manifest()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let mut ids: BTreeMap<Vec<u8>, InodeId> = BTreeMap::new();
        let mut failures = Vec::new();
        for v in &recs {
            let p = decode(v["path"].as_str().unwrap());
            match fs.resolve(&p) {
                Ok(id) => {
                    ids.insert(p, id);
                }
                Err(e) => failures.push(format!("{}: resolve: {e}", v["path"])),
            }
        }
        assert!(failures.is_empty(), "{}:\n{}", f.name, failures.join("\n"));
        // Children by directory, as the manifest lists them.
        let mut children: BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>> = BTreeMap::new();
        for p in ids.keys().filter(|p| p.as_slice() != b"/") {
            let (parent, name) = parent_and_name(p);
            children
                .entry(parent.to_vec())
                .or_default()
                .insert(name.to_vec());
        }
        for v in &recs {
            let path = decode(v["path"].as_str().unwrap());
            if let Err(e) = check_path(&fs, v, &ids) {
                failures.push(format!("{}: {e}", v["path"]));
                continue;
            }
            let id = ids[&path];
            if v["type"] == "dir" {
                let names: BTreeSet<Vec<u8>> = match fs.read_dir(id) {
                    Ok(es) => es.into_iter().map(|e| e.name).collect(),
                    Err(e) => {
                        failures.push(format!("{}: read_dir: {e}", v["path"]));
                        continue;
                    }
                };
                if names != children.remove(&path).unwrap_or_default() {
                    failures.push(format!("{}: read_dir names differ", v["path"]));
                }
                // dir_path walks the INODE_REFs up to the subvolume root.
                if !id.is_placeholder() && v["ino"] != 256 {
                    let dp = fs.dir_path(id.subvol, id.ino).unwrap_or_default();
                    if !path.ends_with(&dp) || dp.is_empty() {
                        failures.push(format!(
                            "{}: dir_path {:?}",
                            v["path"],
                            String::from_utf8_lossy(&dp)
                        ));
                    }
                }
            }
            if path != b"/" && v["ino"] != 256 && !id.is_placeholder() {
                // The inode's back references include this name.
                let (parent, name) = parent_and_name(&path);
                let refs = fs.inode_refs(id).unwrap_or_default();
                if !refs
                    .iter()
                    .any(|(dir, n)| *dir == ids[parent].ino && n.as_slice() == name)
                {
                    failures.push(format!("{}: not in inode_refs {refs:?}", v["path"]));
                }
            }
            checked += 1;
        }
        failures.truncate(30);
        assert!(failures.is_empty(), "{}:\n{}", f.name, failures.join("\n"));
    }
    eprintln!("{checked} paths resolved, looked up and checked");
}

// -------------------------------------------------------------- fs/file

/// Where seek_data/seek_hole must land for `off`, from the kernel's map.
fn expected_seek(ranges: &[(u64, u64)], size: u64, off: u64) -> (Option<u64>, Option<u64>) {
    if off >= size {
        return (None, None);
    }
    let data = ranges
        .iter()
        .find(|&&(_, e)| e > off)
        .map(|&(s, _)| s.max(off));
    let hole = match ranges.iter().find(|&&(s, e)| s <= off && off < e) {
        Some(&(_, e)) => e.min(size),
        None => off,
    };
    (data, Some(hole))
}

#[test]
fn every_file_reads_and_maps_as_the_kernel_showed() {
    let mut files = 0;
    let mut bytes = 0u64;
    for f in committed_fixtures() {
        let fs = open_fixture(f);
        let mut rng = Rng::for_name(seed(), &f.name);
        let mut failures = Vec::new();
        for l in f.kernel_manifest() {
            let v: Value = serde_json::from_str(&l).unwrap();
            if v["type"] != "file" {
                continue;
            }
            let tag = v["path"].as_str().unwrap();
            let id = fs.resolve(&decode(tag)).unwrap();
            let size = v["size"].as_u64().unwrap();
            let ranges: Vec<(u64, u64)> = record_data(&v);
            let mut h = FileHandle::open(&fs, id).unwrap();
            match h.data_ranges(&fs) {
                Ok(got) if got == ranges => {}
                other => failures.push(format!("{tag}: data ranges {other:?}, kernel {ranges:?}")),
            }
            // Reads in random pieces, from a fresh handle.
            let mut h = FileHandle::open(&fs, id).unwrap();
            let mut sha = Sha256::new();
            let mut off = 0u64;
            let mut buf = vec![0u8; 300_000];
            while off < size {
                let n = [1, 511, 4096, 4097, 65536, 300_000][rng.index(6)];
                let n = (rng.below(n as u64) + 1) as usize;
                match h.read_at(&fs, off, &mut buf[..n]) {
                    Ok(0) => {
                        failures.push(format!("{tag}: read at {off} gave 0 bytes before EOF"));
                        break;
                    }
                    Ok(k) => {
                        sha.update(&buf[..k]);
                        off += k as u64;
                    }
                    Err(e) => {
                        failures.push(format!("{tag}: read at {off}: {e}"));
                        break;
                    }
                }
            }
            if off >= size && format!("{:x}", sha.finalize()) != v["sha256"].as_str().unwrap() {
                failures.push(format!("{tag}: sha256 differs from the kernel's"));
            }
            // Past the end: nothing.
            assert_eq!(h.read_at(&fs, size, &mut buf[..10]).unwrap(), 0, "{tag}");
            // A random read equals the same bytes read by a fresh handle.
            if size > 0 {
                let at = rng.below(size);
                let n = rng.below(70_000) as usize + 1;
                let mut a = vec![0u8; n];
                let mut b = vec![0u8; n];
                let ka = h.read_at(&fs, at, &mut a).unwrap();
                let kb = FileHandle::open(&fs, id)
                    .unwrap()
                    .read_at(&fs, at, &mut b)
                    .unwrap();
                assert!(
                    ka == kb && a[..ka] == b[..kb],
                    "{tag}: read at {at} differs"
                );
            }
            // seek_data / seek_hole at the map's edges and random offsets,
            // in random order on one handle (its cursor moves both ways).
            let mut offs: Vec<u64> = ranges
                .iter()
                .flat_map(|&(s, e)| [s, e, s.saturating_sub(1), e.saturating_sub(1)])
                .chain([0, size, size.saturating_sub(1), size + 4096])
                .chain((0..8).map(|_| rng.below(size + 1)))
                .collect();
            for i in (1..offs.len()).rev() {
                offs.swap(i, rng.index(i + 1));
            }
            for o in offs {
                let want = expected_seek(&ranges, size, o);
                let got = (h.seek_data(&fs, o).unwrap(), h.seek_hole(&fs, o).unwrap());
                if got != want {
                    failures.push(format!(
                        "{tag}: at {o}: (seek_data, seek_hole) {got:?}, kernel map says {want:?}"
                    ));
                }
            }
            files += 1;
            bytes += size;
        }
        failures.truncate(30);
        assert!(failures.is_empty(), "{}:\n{}", f.name, failures.join("\n"));
    }
    eprintln!("{files} files read ({bytes} bytes) and mapped");
}
