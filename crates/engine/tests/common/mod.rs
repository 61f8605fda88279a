//! Shared by the write engine's model and crash tests: random operations
//! on scratch trees, a model of them, and comparisons of the model with
//! the transaction and with the committed image read back.

#![allow(dead_code)]

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use ubtrfs_engine::ctree::for_each_item;
use ubtrfs_engine::fs::Filesystem;
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::io::device::Device;
use ubtrfs_engine::io::fault::{Log, RecordDev};
use ubtrfs_engine::mkfs::{make, MkfsOptions};
use ubtrfs_engine::tree::buf::max_item_data;
use ubtrfs_engine::tx::Trans;
use ubtrfs_engine::Error;
use ubtrfs_format::items::RootItem;
use ubtrfs_format::Key;

/// The tests' one PRNG, for picks that do not need shrinking (test files
/// using this module also declare `mod memcheck`).
pub use super::memcheck::Rng;

/// Scratch trees: ids no btrfs tool gives a meaning to (below the first
/// subvolume id, above the well-known trees), so that `btrfs check` and
/// the kernel accept images holding them.
pub const SCRATCH: [u64; 3] = [100, 101, 102];
/// Objectids of the scratch keys: a few, so that keys cluster.
const OBJ_BASE: u64 = 1 << 20;
/// Item types used (none that a tool interprets).
const TYPES: [u8; 3] = [1, 84, 250];

pub const DEV_SIZE: u64 = 128 << 20;

/// Cases per proptest: $UBTRFS_PROPTEST_CASES, else `default`.
pub fn cases(default: u32) -> u32 {
    super::memcheck::env_u64("UBTRFS_PROPTEST_CASES").map_or(default, |n| n as u32)
}

/// One tree's items.
pub type TreeModel = BTreeMap<Key, Vec<u8>>;
/// The scratch trees' items, by tree id.
pub type Model = BTreeMap<u64, TreeModel>;

pub fn empty_model() -> Model {
    SCRATCH.iter().map(|&t| (t, TreeModel::new())).collect()
}

#[derive(Debug, Clone, Copy)]
pub struct KeyGen {
    obj: u8,
    typ: u8,
    off: u64,
}

impl KeyGen {
    pub fn key(&self) -> Key {
        Key::new(
            OBJ_BASE + self.obj as u64,
            TYPES[self.typ as usize],
            self.off,
        )
    }
}

/// An item size: small, middling, or near the largest that fits a leaf.
#[derive(Debug, Clone, Copy)]
pub enum LenGen {
    Small(u16),
    Mid(u16),
    NearMax(u16),
}

impl LenGen {
    pub fn len(&self, nodesize: u32) -> usize {
        let max = max_item_data(nodesize);
        match *self {
            LenGen::Small(n) => n as usize,
            LenGen::Mid(n) => (n as usize).min(max),
            LenGen::NearMax(n) => max - (n as usize).min(max),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub enum Op {
    Insert(u8, KeyGen, LenGen, u8),
    Put(u8, KeyGen, LenGen, u8),
    Update(u8, KeyGen, LenGen, u8),
    Delete(u8, KeyGen),
    DeleteRange(u8, KeyGen, KeyGen),
    /// Inserts `n` items at consecutive offsets from the key (those not
    /// there yet): trees grow deep fast.
    InsertRun(u8, KeyGen, u16, LenGen, u8),
    Commit,
    /// Commit, drop the writer and open the image again.
    Reopen,
}

fn key_gen(objs: u8) -> impl Strategy<Value = KeyGen> {
    (
        0..objs,
        0..TYPES.len() as u8,
        prop_oneof![6 => 0..48u64, 3 => 0..2048u64, 1 => any::<u64>()],
    )
        .prop_map(|(obj, typ, off)| KeyGen { obj, typ, off })
}

fn len_gen() -> impl Strategy<Value = LenGen> {
    prop_oneof![
        6 => (0..64u16).prop_map(LenGen::Small),
        3 => (0..1500u16).prop_map(LenGen::Mid),
        1 => (0..600u16).prop_map(LenGen::NearMax),
    ]
}

/// Operations on `trees` scratch trees with keys from `objs` objectids;
/// commits about one op in `commit_every`.
pub fn op_strategy(trees: u8, objs: u8, commit_every: u32) -> impl Strategy<Value = Op> {
    let t = 0..trees;
    prop_oneof![
        30 => (t.clone(), key_gen(objs), len_gen(), any::<u8>())
            .prop_map(|(t, k, l, f)| Op::Insert(t, k, l, f)),
        8 => (t.clone(), key_gen(objs), len_gen(), any::<u8>())
            .prop_map(|(t, k, l, f)| Op::Put(t, k, l, f)),
        10 => (t.clone(), key_gen(objs), len_gen(), any::<u8>())
            .prop_map(|(t, k, l, f)| Op::Update(t, k, l, f)),
        15 => (t.clone(), key_gen(objs)).prop_map(|(t, k)| Op::Delete(t, k)),
        2 => (t.clone(), key_gen(objs), key_gen(objs))
            .prop_map(|(t, a, b)| Op::DeleteRange(t, a, b)),
        2 => (t.clone(), key_gen(objs), 0..400u16, len_gen(), any::<u8>())
            .prop_map(|(t, k, n, l, f)| Op::InsertRun(t, k, n, l, f)),
        (100 / commit_every.max(1)).max(1) => Just(Op::Commit),
        1 => Just(Op::Reopen),
    ]
}

/// `n` operations drawn from `seed` (for tests that are not proptests).
pub fn seeded_ops(seed: u64, n: usize, trees: u8, objs: u8, commit_every: u32) -> Vec<Op> {
    let mut s = [0u8; 32];
    s[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &s);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let st = proptest::collection::vec(op_strategy(trees, objs, commit_every), n);
    st.new_tree(&mut runner).unwrap().current()
}

/// Item data: recognisable per key and write.
pub fn data(key: &Key, len: usize, fill: u8) -> Vec<u8> {
    let mut v = vec![fill; len];
    for (i, b) in key.offset.to_le_bytes().iter().enumerate().take(len) {
        v[i] ^= b;
    }
    v
}

/// A fresh filesystem on a MemDev with the scratch trees made and
/// committed.
pub fn setup(nodesize: u32) -> (Arc<MemDev>, Trans) {
    let m = Arc::new(MemDev::new(DEV_SIZE));
    let t = setup_on(m.clone(), nodesize).unwrap();
    (m, t)
}

pub fn mkfs_options(nodesize: u32) -> MkfsOptions {
    MkfsOptions {
        nodesize,
        fsid: Some([0x42; 16]),
        ..Default::default()
    }
}

/// mkfs on `dev`, then the scratch trees (committed).
pub fn setup_on(dev: Arc<dyn BlockDev>, nodesize: u32) -> ubtrfs_engine::Result<Trans> {
    let mut t = make(vec![("mem".into(), dev)], &mkfs_options(nodesize))?;
    for id in SCRATCH {
        t.create_tree(id, RootItem::default())?;
    }
    t.commit()?;
    Ok(t)
}

/// Applies `op` to the writer and the model; an error is a test failure
/// (except the ones the model predicts). Commit and Reopen are the
/// caller's.
pub fn apply(t: &mut Trans, m: &mut Model, op: &Op, step: usize) -> Result<(), String> {
    let ns = t.nodesize();
    let tid = |i: u8| SCRATCH[i as usize % SCRATCH.len()];
    let fill = |f: u8| f ^ (step as u8);
    let e = |e: Error| format!("step {step} {op:?}: {e}");
    match *op {
        Op::Insert(ti, k, l, f) => {
            let (tree, key) = (tid(ti), k.key());
            let d = data(&key, l.len(ns), fill(f));
            let had = m[&tree].contains_key(&key);
            match t.insert_item(tree, key, d.clone()) {
                Ok(()) if !had => {
                    m.get_mut(&tree).unwrap().insert(key, d);
                }
                Err(Error::Exists(_)) if had => {}
                Ok(()) => return Err(format!("step {step} {op:?}: inserted over an item")),
                Err(x) => return Err(e(x)),
            }
        }
        Op::Put(ti, k, l, f) => {
            let (tree, key) = (tid(ti), k.key());
            let d = data(&key, l.len(ns), fill(f));
            t.put_item(tree, key, d.clone()).map_err(e)?;
            m.get_mut(&tree).unwrap().insert(key, d);
        }
        Op::Update(ti, k, l, f) => {
            let (tree, key) = (tid(ti), k.key());
            let d = data(&key, l.len(ns), fill(f));
            let d2 = d.clone();
            let found = t.update_item(tree, &key, |x| *x = d2).map_err(e)?;
            let had = m.get_mut(&tree).unwrap().get_mut(&key).map(|x| *x = d);
            if found != had.is_some() {
                return Err(format!("step {step} {op:?}: found {found}"));
            }
        }
        Op::Delete(ti, k) => {
            let (tree, key) = (tid(ti), k.key());
            let found = t.delete_item(tree, &key).map_err(e)?;
            let had = m.get_mut(&tree).unwrap().remove(&key).is_some();
            if found != had {
                return Err(format!("step {step} {op:?}: found {found}, model {had}"));
            }
        }
        Op::DeleteRange(ti, a, b) => {
            let tree = tid(ti);
            let (lo, hi) = if a.key() <= b.key() {
                (a.key(), b.key())
            } else {
                (b.key(), a.key())
            };
            let n = t.delete_range(tree, &lo, &hi).map_err(e)?;
            let tm = m.get_mut(&tree).unwrap();
            let keys: Vec<Key> = tm.range(lo..=hi).map(|(k, _)| *k).collect();
            for k in &keys {
                tm.remove(k);
            }
            if n != keys.len() {
                return Err(format!(
                    "step {step} {op:?}: deleted {n}, model {}",
                    keys.len()
                ));
            }
        }
        Op::InsertRun(ti, k, n, l, f) => {
            let tree = tid(ti);
            let k0 = k.key();
            for i in 0..n as u64 {
                let Some(off) = k0.offset.checked_add(i) else {
                    break;
                };
                let key = Key::new(k0.objectid, k0.item_type, off);
                if m[&tree].contains_key(&key) {
                    continue;
                }
                // Mostly the given size, every 8th item small.
                let len = if i % 8 == 7 { 8 } else { l.len(ns).min(600) };
                let d = data(&key, len, fill(f));
                t.insert_item(tree, key, d.clone()).map_err(e)?;
                m.get_mut(&tree).unwrap().insert(key, d);
            }
        }
        Op::Commit | Op::Reopen => {}
    }
    Ok(())
}

/// The writer's view of the touched tree agrees with the model: the key
/// of `op`, the first item from it, and (when `full`) every item.
pub fn check_trans(t: &mut Trans, m: &Model, op: &Op, full: bool) -> Result<(), String> {
    let (ti, key) = match *op {
        Op::Insert(ti, k, ..) | Op::Put(ti, k, ..) | Op::Update(ti, k, ..) | Op::Delete(ti, k) => {
            (ti, k.key())
        }
        Op::DeleteRange(ti, a, _) | Op::InsertRun(ti, a, ..) => (ti, a.key()),
        Op::Commit | Op::Reopen => (0, Key::MIN),
    };
    let tree = SCRATCH[ti as usize % SCRATCH.len()];
    let tm = &m[&tree];
    let got = t.lookup(tree, &key).map_err(|e| e.to_string())?;
    if got.as_ref() != tm.get(&key) {
        return Err(format!("{op:?}: lookup {key} differs from the model"));
    }
    let first = t.search_first(tree, &key).map_err(|e| e.to_string())?;
    let want = tm.range(key..).next().map(|(k, d)| (*k, d.clone()));
    if first != want {
        return Err(format!(
            "{op:?}: search_first {key}: {:?} but model {:?}",
            first.map(|x| x.0),
            want.map(|x| x.0)
        ));
    }
    if full {
        for (&tree, tm) in m {
            let all = t
                .items_in(tree, &Key::MIN, &Key::MAX)
                .map_err(|e| e.to_string())?;
            compare(tree, all.into_iter(), tm).map_err(|e| format!("{op:?}: writer: {e}"))?;
        }
    }
    Ok(())
}

fn compare(
    tree: u64,
    got: impl Iterator<Item = (Key, Vec<u8>)>,
    want: &TreeModel,
) -> Result<(), String> {
    let mut w = want.iter();
    let mut n = 0;
    for (k, d) in got {
        match w.next() {
            Some((wk, wd)) if *wk == k && *wd == d => {}
            Some((wk, wd)) => {
                return Err(format!(
                    "tree {tree} item {n}: {k} ({} bytes) but model {wk} ({} bytes)",
                    d.len(),
                    wd.len()
                ))
            }
            None => return Err(format!("tree {tree}: extra item {k}")),
        }
        n += 1;
    }
    if let Some((wk, _)) = w.next() {
        return Err(format!("tree {tree}: item {wk} missing (after {n})"));
    }
    Ok(())
}

/// Opens the image on `dev` with the read side: its generation, and the
/// scratch trees compared with `m` (those that exist in it).
pub fn read_back(dev: Arc<dyn BlockDev>) -> Result<(u64, Model), String> {
    read_back_devs(vec![dev])
}

/// As [`read_back`] for a filesystem on several devices (those left out
/// are missing: reads fall back to other copies or parity).
pub fn read_back_devs(devs: Vec<Arc<dyn BlockDev>>) -> Result<(u64, Model), String> {
    let devs = devs
        .into_iter()
        .map(|d| Device::from_dev(Path::new("mem"), d))
        .collect::<ubtrfs_engine::Result<Vec<_>>>()
        .map_err(|e| e.to_string())?;
    let fs = Filesystem::from_devices(devs, 16 << 20).map_err(|e| e.to_string())?;
    let mut out = Model::new();
    for id in SCRATCH {
        let Some(tree) = fs.tree_opt(id).map_err(|e| e.to_string())? else {
            continue;
        };
        let mut tm = TreeModel::new();
        for_each_item(&fs.info, tree, Key::MIN, Key::MAX, |k, d| {
            tm.insert(k, d.to_vec());
            Ok(ControlFlow::Continue(()))
        })
        .map_err(|e| e.to_string())?;
        out.insert(id, tm);
    }
    Ok((fs.info.sb.generation, out))
}

/// The committed image equals `m` and passes the consistency check.
pub fn check_image(dev: Arc<dyn BlockDev>, m: &Model) -> Result<u64, String> {
    let (gen, got) = read_back(dev.clone())?;
    for (tree, tm) in m {
        let g = got
            .get(tree)
            .ok_or_else(|| format!("tree {tree} missing from the image"))?;
        compare(*tree, g.clone().into_iter(), tm).map_err(|e| format!("image: {e}"))?;
    }
    // A mkfs cut before its primary superblock: the kernel sees no
    // filesystem yet, the engine opens the mirror it wrote; the checker
    // says the primary is missing, which is all that is wrong.
    let mut primary = vec![0u8; 4096];
    dev.read_at(&mut primary, ubtrfs_format::consts::SUPER_OFFSETS[0])
        .map_err(|e| e.to_string())?;
    let primary_absent = primary.iter().all(|&b| b == 0);
    let d = ubtrfs_engine::io::device::Device::from_dev(std::path::Path::new("image"), dev)
        .map_err(|e| e.to_string())?;
    let fs =
        ubtrfs_engine::Filesystem::from_devices(vec![d], 64 << 20).map_err(|e| e.to_string())?;
    let r = ubtrfs_engine::tools::check::check(&fs, &Default::default(), &mut |_, _| {})
        .map_err(|e| e.to_string())?;
    let problems: Vec<String> = r
        .problems
        .iter()
        .filter(|p| !(primary_absent && p.place.contains("superblock copy 0")))
        .map(|p| p.to_string())
        .collect();
    if !problems.is_empty() {
        return Err(format!("check (generation {gen}): {}", problems.join("\n")));
    }
    Ok(gen)
}

/// Runs the workload of `seed` on a recording device: its log, and the
/// model of each committed generation.
pub fn record(seed: u64, nodesize: u32, n: usize) -> Result<(Log, BTreeMap<u64, Model>), String> {
    record_with(seed, nodesize, n, false)
}

/// [`record`]; with `deferred`, some commits (picked by the seed) leave
/// their superblock to the next commit (`Trans::commit_deferred`), and a
/// reopen first writes it (as receive does before it stops).
pub fn record_with(
    seed: u64,
    nodesize: u32,
    n: usize,
    deferred: bool,
) -> Result<(Log, BTreeMap<u64, Model>), String> {
    let mut pick = Rng::new(seed ^ 0x5eed_defe);
    let r = Arc::new(RecordDev::new(Arc::new(MemDev::new(DEV_SIZE))));
    let rd: Arc<dyn BlockDev> = r.clone();
    let mut t = make(vec![("rec".into(), rd.clone())], &mkfs_options(nodesize))
        .map_err(|e| e.to_string())?;
    let mut models = BTreeMap::new();
    models.insert(t.transid - 1, Model::new());
    for id in SCRATCH {
        t.create_tree(id, ubtrfs_format::items::RootItem::default())
            .map_err(|e| e.to_string())?;
    }
    let mut model = empty_model();
    let mut ops = seeded_ops(seed, n, 3, 4, 12);
    ops.insert(0, Op::Commit);
    ops.push(Op::Commit);
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Commit | Op::Reopen => {
                let g = t.transid;
                let last = step + 1 == ops.len();
                if deferred && !last && pick.below(2) == 0 {
                    t.commit_deferred()
                } else {
                    t.commit()
                }
                .map_err(|e| format!("step {step}: commit: {e}"))?;
                models.insert(g, model.clone());
                if matches!(op, Op::Reopen) {
                    t.finish_deferred()
                        .map_err(|e| format!("step {step}: finish_deferred: {e}"))?;
                    drop(t);
                    t = ubtrfs_engine::tx::Trans::open_dev(vec![rd.clone()], 16 << 20)
                        .map_err(|e| e.to_string())?;
                }
            }
            _ => apply(&mut t, &mut model, op, step)?,
        }
    }
    Ok((r.log(), models))
}
