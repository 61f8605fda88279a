//! Offline space management in process, on images in memory: moving
//! chunks (a conversion to DUP), compacting data and metadata block
//! groups and
//! rewriting the fsid, each with writes failing from each of its writes
//! on (a crash or a dying device), then the engine's check with data
//! checksums clean and the same operation run again to the end; and the
//! space picture against the chunks. The kernel-judged runs are
//! tests/tests/relocation.rs.

use std::sync::Arc;
use ubtrfs_engine::fs::{Filesystem, InodeId};
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::io::device::Device;
use ubtrfs_engine::io::fault::FaultDev;
use ubtrfs_engine::mkfs::{make, MkfsOptions};
use ubtrfs_engine::rwfs::{RwFs, RwOptions};
use ubtrfs_engine::tools::change_fsid::{change_fsid, FsidChange};
use ubtrfs_engine::tools::check::{check, CheckOptions};
use ubtrfs_engine::tools::space_map::*;
use ubtrfs_engine::tx::compact::Compacted;
use ubtrfs_engine::tx::relocation::RelocTarget;
use ubtrfs_engine::tx::Trans;
use ubtrfs_engine::Result;
use ubtrfs_format::consts::*;

/// A 256 MiB image with small chunks: files of every size through
/// the read-write mount, a snapshot sharing them, a reflinked copy.
fn image() -> Vec<u8> {
    let m = Arc::new(MemDev::new(256 << 20));
    let o = MkfsOptions {
        fsid: Some([7; 16]),
        small_chunks: true,
        ..Default::default()
    };
    let t = make(vec![("m".into(), m.clone())], &o).unwrap();
    let mut fs = RwFs::with_trans(t, RwOptions::default()).unwrap();
    let root = InodeId {
        subvol: FS_TREE_OBJECTID,
        ino: FIRST_FREE_OBJECTID,
    };
    for i in 0..48u64 {
        let id = fs
            .create(root, format!("f{i}").as_bytes(), 0o100644, 0, (0, 0), None)
            .unwrap();
        let len = [100, 5000, 300 << 10, 1 << 20][i as usize % 4] + i as usize;
        let data: Vec<u8> = (0..len).map(|j| (j as u64 * 31 + i) as u8).collect();
        fs.write(id, 0, &data).unwrap();
    }
    fs.unmount().unwrap();
    drop(fs);
    m.snapshot()
}

/// The problems a full check (data against checksums too) finds.
fn problems(img: &[u8]) -> Vec<String> {
    let d = Device::from_dev(
        std::path::Path::new("image"),
        Arc::new(MemDev::from_bytes(img.to_vec())),
    )
    .unwrap();
    let fs = Filesystem::from_devices(vec![d], 16 << 20).unwrap();
    let o = CheckOptions {
        check_data_csum: true,
    };
    check(&fs, &o, &mut |_, _| {})
        .unwrap()
        .problems
        .iter()
        .map(|p| p.to_string())
        .collect()
}

/// Every data and metadata chunk to DUP, one commit each.
fn to_dup(t: &mut Trans) -> Result<()> {
    let room = t.reloc_room();
    let moves = t.plan_relocation(|_, c| {
        (c.chunk_type & BG_SYSTEM == 0).then(|| RelocTarget {
            profile: Some(BG_DUP),
            room: room.clone(),
        })
    })?;
    t.run_relocation(&moves, &mut |_| {})
}

/// Writes failing from any one of a conversion's writes on (a crash
/// or a dying device) leave a clean image whose data verifies, and
/// the conversion run again on it finishes clean.
#[test]
fn interrupted_relocation_is_clean_and_resumes() {
    let img = image();
    assert_eq!(problems(&img), Vec::<String>::new());
    let run = |img: &[u8], fail_at| with_faults(img, fail_at, to_dup);
    let (r, ops, done) = run(&img, None);
    r.unwrap();
    assert_eq!(problems(&done), Vec::<String>::new());
    assert!(ops > 8, "{ops} writes");
    // Every write for the first few, then a spread of the rest.
    let picks: Vec<u64> = (0..ops)
        .filter(|k| *k < 8 || k % (ops / 10).max(1) == 0)
        .collect();
    for k in picks {
        let (r, _, cut) = run(&img, Some(k));
        assert!(
            r.is_err(),
            "writes failing from {k} of {ops} went unnoticed"
        );
        let p = problems(&cut);
        assert!(p.is_empty(), "writes failing from {k} of {ops}: {p:?}");
        let (r, _, again) = run(&cut, None);
        r.unwrap_or_else(|e| panic!("run again after {k}: {e}"));
        assert_eq!(
            problems(&again),
            Vec::<String>::new(),
            "run again after {k}"
        );
    }
}

fn compact_all(t: &mut Trans) -> Result<Compacted> {
    let data: Vec<u64> = t
        .alloc
        .groups
        .values()
        .filter(|g| g.flags & BG_DATA != 0 && g.used > 0)
        .map(|g| g.start)
        .collect();
    t.compact_data_groups(&data, &mut |_| {})
}

fn compact_trees(t: &mut Trans) -> Result<Compacted> {
    let groups: Vec<u64> = t
        .alloc
        .groups
        .values()
        .filter(|g| g.flags & BG_DATA == 0)
        .map(|g| g.start)
        .collect();
    t.compact_tree_groups(&groups, &mut |_| {})
}

/// Writes failing from a spread of `op`'s writes on leave a clean image,
/// and `op` run again on it finishes clean; returns what a full run did.
fn cut_and_resume(img: &[u8], op: fn(&mut Trans) -> Result<Compacted>) -> Compacted {
    let run = |img: &[u8], fail_at| with_faults(img, fail_at, op);
    let (r, ops, done) = run(img, None);
    let c = r.unwrap();
    assert_eq!(problems(&done), Vec::<String>::new());
    for k in (0..ops).filter(|k| *k < 4 || k % (ops / 6).max(1) == 0) {
        let (r, _, cut) = run(img, Some(k));
        assert!(
            r.is_err(),
            "writes failing from {k} of {ops} went unnoticed"
        );
        assert_eq!(problems(&cut), Vec::<String>::new(), "cut at {k} of {ops}");
        let (r, _, again) = run(&cut, None);
        r.unwrap_or_else(|e| panic!("run again after {k}: {e}"));
        assert_eq!(problems(&again), Vec::<String>::new(), "again after {k}");
    }
    c
}

/// Every data extent moves and its data verifies; writes failing from
/// any one on leave a clean image, and compacting again finishes.
#[test]
fn interrupted_compaction_is_clean_and_resumes() {
    let c = cut_and_resume(&image(), compact_all);
    assert!(c.extents >= 30 && c.groups >= 1, "{c:?}");
}

/// The same for tree blocks: every metadata and system group's blocks
/// move (to other block groups, or new chunks), and the
/// emptied groups go.
#[test]
fn interrupted_tree_compaction_is_clean_and_resumes() {
    let img = image();
    let c = cut_and_resume(&img, compact_trees);
    assert!(c.extents >= 4 && c.groups >= 2, "{c:?}");
}

fn run(
    img: &[u8],
    want: Option<[u8; 16]>,
    fail_at: Option<u64>,
) -> (Result<FsidChange>, u64, Vec<u8>) {
    with_faults(img, fail_at, |t| change_fsid(t, want, &mut |_, _| {}))
}

/// Runs `op` on a writer over a copy of `img` whose writes fail from the
/// `fail_at`-th on (none: all succeed): its result, the writes it made,
/// and the image after.
fn with_faults<T>(
    img: &[u8],
    fail_at: Option<u64>,
    op: impl FnOnce(&mut Trans) -> Result<T>,
) -> (Result<T>, u64, Vec<u8>) {
    let m = Arc::new(MemDev::from_bytes(img.to_vec()));
    let f = Arc::new(FaultDev::new(m.clone(), fail_at));
    let dev: Arc<dyn BlockDev> = f.clone();
    let r = Trans::open_dev(vec![dev], 16 << 20).and_then(|mut t| op(&mut t));
    (r, f.ops(), m.snapshot())
}

fn fsid_of(img: &[u8]) -> ([u8; 16], u64) {
    let sb =
        ubtrfs_format::Superblock::parse(&img[SUPER_OFFSETS[0] as usize..][..SUPER_SIZE]).unwrap();
    (sb.fsid, sb.flags)
}

/// Writes failing from any one on leave an image that reads (the old
/// fsid, or the change under way), and the change run again finishes
/// with every block and device item on the new fsid, clean.
#[test]
fn interrupted_fsid_change_resumes() {
    let img = image();
    let new = [0x5a; 16];
    let (r, ops, done) = run(&img, Some(new), None);
    let r = r.unwrap();
    assert!(r.blocks > 5 && !r.resumed, "{r:?}");
    assert_eq!(fsid_of(&done).0, new);
    assert_eq!(fsid_of(&done).1 & SUPER_FLAG_CHANGING_FSID, 0);
    assert_eq!(problems(&done), Vec::<String>::new());
    for k in (0..ops).filter(|k| *k < 6 || k % (ops / 6).max(1) == 0) {
        let (r, _, cut) = run(&img, Some(new), Some(k));
        assert!(
            r.is_err(),
            "writes failing from {k} of {ops} went unnoticed"
        );
        let (fsid, flags) = fsid_of(&cut);
        if flags & SUPER_FLAG_CHANGING_FSID == 0 {
            assert_eq!(problems(&cut), Vec::<String>::new(), "cut at {k}");
        } else {
            assert_eq!(fsid, new);
            // Another UUID is refused while this change is under way.
            assert!(run(&cut, Some([1; 16]), None).0.is_err());
        }
        let (r, _, again) = run(&cut, None, None);
        let r = r.unwrap_or_else(|e| panic!("run again after {k}: {e}"));
        let (fsid, flags) = fsid_of(&again);
        assert_eq!(flags & SUPER_FLAG_CHANGING_FSID, 0);
        if r.resumed {
            assert_eq!(fsid, new, "resumed after {k}");
        }
        assert_eq!(problems(&again), Vec::<String>::new(), "after {k}");
    }
}

/// Each type's pixels cover its chunks' device bytes (to a pixel per
/// stripe end), and the rest is unallocated or past the end.
#[test]
fn pixels_follow_the_chunks() {
    let img = image();
    let d = Device::from_dev(
        std::path::Path::new("image"),
        Arc::new(MemDev::from_bytes(img)),
    )
    .unwrap();
    let fs = Filesystem::from_devices(vec![d], 16 << 20).unwrap();
    let m = space_map(&fs, 128).unwrap();
    assert_eq!(m.rgb.len(), (m.width * m.height * 3) as usize);
    let (devid, _, _, per) = m.bands[0];
    assert_eq!(devid, 1);
    // A pixel's type: the colour it is a dimmed copy of.
    let kind = |p: &[u8]| {
        [DATA_RGB, METADATA_RGB, SYSTEM_RGB].iter().position(|c| {
            let k = p[0] as f64 / c[0] as f64;
            (0.19..=1.01).contains(&k)
                && c.iter()
                    .zip(p)
                    .all(|(&c, &v)| (c as f64 * k - v as f64).abs() < 2.0)
        })
    };
    let mut count = [0u64; 3];
    for p in m.rgb.chunks(3) {
        if let Some(i) = kind(p) {
            count[i] += 1;
        }
    }
    let mut want = [0u64; 3];
    let mut stripes = 0;
    for (_, c) in fs.info.chunks.iter() {
        let i = if c.chunk_type & BG_DATA != 0 {
            0
        } else if c.chunk_type & BG_METADATA != 0 {
            1
        } else {
            2
        };
        want[i] += c.length * c.num_stripes as u64;
        stripes += c.num_stripes as u64;
    }
    for i in 0..3 {
        let got = count[i] * per;
        assert!(
            got + stripes * per >= want[i] && got <= want[i] + stripes * per,
            "type {i}: {got} bytes of pixels for {} of chunks",
            want[i]
        );
    }
}
