//! The fuzz harness of `ubtrfs check`: an image ubtrfs's mkfs makes in
//! memory (files inline and in extents, compressed, hard links, a
//! symlink, an xattr, a subvolume) has bytes of its tree blocks changed
//! as the input says, each changed block's checksum recomputed on every
//! copy, so that the checker's logic (not a checksum) meets the damage.
//! The check must end, with problems or an error, never a panic.
//!
//! Used by the cargo-fuzz target `check` (fuzz/, which includes this file
//! by path) and by the seeded test tests/tests/check_fuzz.rs.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use ubtrfs_engine::ctree::{for_each_item, Tree};
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::io::device::Device;
use ubtrfs_engine::io::volumes::Placement;
use ubtrfs_engine::mkfs::rootdir::{populate, RootdirOptions, SubvolKind};
use ubtrfs_engine::mkfs::{build, MkfsOptions};
use ubtrfs_engine::Filesystem;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::RootItem;
use ubtrfs_format::node::{HEADER_SIZE, ITEM_SIZE, KEY_PTR_SIZE};
use ubtrfs_format::Key;

/// The base image and where its tree blocks are.
pub struct Base {
    dev: Arc<MemDev>,
    nodesize: usize,
    csum: ubtrfs_format::checksum::CsumType,
    /// Every tree block: the physical offsets of its copies, and the byte
    /// ranges it uses (header, item headers or key pointers, item data):
    /// a change in a leaf's free space is no damage.
    blocks: Vec<(Vec<u64>, Vec<Range>)>,
}

/// Bytes `start..end` of a block.
type Range = (usize, usize);

fn make_base() -> Base {
    let src = std::env::temp_dir().join(format!("ubtrfs-check-fuzz-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&src);
    let w = |p: &str, n: usize, b: u8| {
        let path = src.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, vec![b; n]).unwrap();
    };
    for i in 0..30 {
        w(&format!("d/f{i}"), 100 + i * 1500, i as u8);
    }
    w("d/e/big", 300_000, 7);
    w("sv/inner", 9000, 3);
    std::fs::hard_link(src.join("d/f1"), src.join("d/e/hard")).unwrap();
    std::os::unix::fs::symlink("../f2", src.join("d/e/link")).unwrap();
    let _ = xattr_set(&src.join("d/f3"));
    let dev = Arc::new(MemDev::new(128 << 20));
    let o = MkfsOptions {
        fsid: Some([9; 16]),
        ..Default::default()
    };
    let d: Arc<dyn BlockDev> = dev.clone();
    let mut t = build(vec![(PathBuf::from("fuzz"), d)], &o).unwrap();
    let ro = RootdirOptions {
        dir: src.clone(),
        subvols: vec![(PathBuf::from("sv"), SubvolKind::Rw)],
        compress: None,
        uuid_seed: Some([9; 16]),
        threads: 1,
        ..Default::default()
    };
    populate(&mut t, &ro, &mut |_| {}).unwrap();
    t.commit().unwrap();
    drop(t);
    let _ = std::fs::remove_dir_all(&src);
    // Where every tree block is.
    let d2: Arc<dyn BlockDev> = dev.clone();
    let fs = Filesystem::from_devices(
        vec![Device::from_dev(std::path::Path::new("fuzz"), d2).unwrap()],
        16 << 20,
    )
    .unwrap();
    let mut trees = vec![fs.root_tree, Tree::chunk(&fs.info.sb)];
    for_each_item(&fs.info, fs.root_tree, Key::MIN, Key::MAX, |k, d| {
        if k.item_type == ROOT_ITEM {
            trees.push(Tree::of_root_item(k.objectid, &RootItem::parse(d).unwrap()));
        }
        Ok(ControlFlow::Continue(()))
    })
    .unwrap();
    let mut logical = BTreeMap::new();
    for t in trees {
        let mut stack = vec![t.read_root(&fs.info).unwrap()];
        while let Some(b) = stack.pop() {
            let node = b.node();
            let n = node.nritems();
            let used = if node.is_leaf() {
                let low = (0..n)
                    .map(|i| node.item(i).data.as_ptr() as usize - node.bytes().as_ptr() as usize)
                    .min();
                let mut v = vec![(32, HEADER_SIZE + n * ITEM_SIZE)];
                if let Some(low) = low {
                    v.push((low, node.bytes().len()));
                }
                v
            } else {
                vec![(32, HEADER_SIZE + n * KEY_PTR_SIZE)]
            };
            logical.insert(b.bytenr, used);
            if !node.is_leaf() {
                for i in 0..node.nritems() {
                    stack.push(t.read_child(&fs.info, &b, i).unwrap());
                }
            }
        }
    }
    let nodesize = fs.info.nodesize as usize;
    let blocks = logical
        .into_iter()
        .map(
            |(l, used)| match fs.info.chunks.map(l, nodesize as u64).unwrap().placement {
                Placement::Mirrors(m) => (m.iter().map(|c| c.physical).collect(), used),
                _ => unreachable!("single device"),
            },
        )
        .collect();
    Base {
        dev,
        nodesize,
        csum: fs.info.csum_type,
        blocks,
    }
}

fn xattr_set(p: &std::path::Path) -> std::io::Result<()> {
    let status = std::process::Command::new("setfattr")
        .args(["-n", "user.fuzz", "-v", "1"])
        .arg(p)
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other("setfattr"))
    }
}

static BASE: OnceLock<Mutex<Base>> = OnceLock::new();

/// Changes the base image as `data` says, runs `f` on it, and puts the
/// bytes back. `data` is read 5 bytes at a time: a tree block (2 bytes,
/// modulo their number), an offset among the bytes it uses past the
/// checksum (2 bytes, modulo their number), and a byte XORed there (its
/// low bit set, so that something changes).
fn with_mutated<R>(data: &[u8], f: impl FnOnce(Arc<MemDev>) -> R) -> R {
    let base = BASE.get_or_init(|| Mutex::new(make_base()));
    let b = base.lock().unwrap_or_else(|e| e.into_inner());
    let ns = b.nodesize;
    // The blocks changed, with their bytes before.
    let mut saved: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
    let mut bufs: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
    for c in data.chunks_exact(5) {
        let which = u16::from_le_bytes([c[0], c[1]]) as usize % b.blocks.len();
        let used = &b.blocks[which].1;
        let total: usize = used.iter().map(|(s, e)| e - s).sum();
        let mut off = u16::from_le_bytes([c[2], c[3]]) as usize % total.max(1);
        for (s, e) in used {
            if off < e - s {
                off += s;
                break;
            }
            off -= e - s;
        }
        let buf = bufs.entry(which).or_insert_with(|| {
            let mut v = vec![0u8; ns];
            b.dev.read_at(&mut v, b.blocks[which].0[0]).unwrap();
            saved.insert(which, v.clone());
            v
        });
        buf[off] ^= c[4] | 1;
    }
    for (which, buf) in &mut bufs {
        let sum = b.csum.compute(&buf[32..]);
        buf[..32].copy_from_slice(&sum);
        for &phys in &b.blocks[*which].0 {
            b.dev.write_at(buf, phys).unwrap();
        }
    }
    let r = f(b.dev.clone());
    for (which, old) in &saved {
        for &phys in &b.blocks[*which].0 {
            b.dev.write_at(old, phys).unwrap();
        }
    }
    r
}

/// Changes the base image as `data` says ([`with_mutated`]) and checks
/// it. Returns how many problems the check found, or None when it refused
/// the image as a whole.
pub fn check_mutated(data: &[u8]) -> Option<usize> {
    let r = with_mutated(data, |dev| {
        let d: Arc<dyn BlockDev> = dev;
        ubtrfs_engine::tools::check::check_dev(d)
    });
    match r {
        Ok(_) => Some(0),
        Err(e) => {
            let s = e.to_string();
            s.split_once(" problems:")
                .and_then(|(h, _)| h.rsplit(' ').next()?.parse().ok())
                .or(None)
        }
    }
}

/// What `--repair` made of a damaged image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairOutcome {
    /// The check found nothing, or refused the image as a whole.
    Nothing,
    /// Some problem has no repair: nothing was written.
    Refused,
    /// Repaired: the check after found `after` problems (none, mostly;
    /// else, `again`, problems the first hid that a second run repairs).
    Repaired {
        before: usize,
        after: usize,
        again: bool,
    },
    /// The repair's transaction failed (nothing committed).
    Failed(String),
}

/// Changes the base image as `data` says ([`with_mutated`]), then repairs
/// a copy of it as `ubtrfs check --repair` does (one transaction) and
/// checks it again.
pub fn repair_mutated(data: &[u8]) -> RepairOutcome {
    use ubtrfs_engine::tools::check::{check, repair, CheckOptions};
    let copy = with_mutated(data, |dev| Arc::new(MemDev::from_bytes(dev.snapshot())));
    let open = |dev: &Arc<MemDev>| {
        let d: Arc<dyn BlockDev> = dev.clone();
        Device::from_dev(std::path::Path::new("fuzz"), d)
            .and_then(|d| Filesystem::from_devices(vec![d], 16 << 20))
    };
    let Ok(fs) = open(&copy) else {
        return RepairOutcome::Nothing;
    };
    let Ok(report) = check(&fs, &CheckOptions::default(), &mut |_, _| {}) else {
        return RepairOutcome::Nothing;
    };
    drop(fs);
    if !report.repairable() {
        return RepairOutcome::Nothing;
    }
    let Ok(fixes) = report.fixes() else {
        return RepairOutcome::Refused;
    };
    let d: Arc<dyn BlockDev> = copy.clone();
    let prepare = |i: &ubtrfs_engine::disk_io::FsInfo| repair::prepare(i, &fixes);
    let r =
        ubtrfs_engine::tx::Trans::open_dev_with(vec![d], 16 << 20, &prepare).and_then(|mut t| {
            repair::apply(&mut t, &fixes)?;
            t.commit()
        });
    if let Err(e) = r {
        return RepairOutcome::Failed(e.to_string());
    }
    let (after, again) = open(&copy)
        .and_then(|fs| check(&fs, &CheckOptions::default(), &mut |_, _| {}))
        .map_or((usize::MAX, false), |r| {
            (r.problem_count, r.fixes().is_ok())
        });
    RepairOutcome::Repaired {
        before: report.problem_count,
        after,
        again,
    }
}
