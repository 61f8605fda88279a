//! Mixed block groups (mkfs -M, INCOMPAT_MIXED_GROUPS) in the write
//! engine, on in-memory images: mkfs refuses what mkfs.btrfs refuses;
//! every chunk made on demand, by the read-write mount's writeback and by
//! later writers of the reopened image, is DATA|METADATA (system stays
//! apart); a full filesystem is ENOSPC at write(2) with the metadata
//! reserve left for the commit; the images pass the engine's check and
//! `btrfs check --readonly`.

mod memcheck;

use std::sync::Arc;
use ubtrfs_engine::fs::InodeId;
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::mkfs::{build, make, MkfsOptions};
use ubtrfs_engine::rwfs::{RwFs, RwOptions};
use ubtrfs_engine::subvol::Place;
use ubtrfs_engine::tools::check::check_dev;
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::Timespec;

const MIB: u64 = 1 << 20;

fn mixed_opts(profile: u64, fsid: u8) -> MkfsOptions {
    MkfsOptions {
        nodesize: 4096,
        sectorsize: 4096,
        metadata_profile: profile,
        data_profile: profile,
        mixed: true,
        fsid: Some([fsid; 16]),
        ..Default::default()
    }
}

/// Every block group is SYSTEM or DATA|METADATA, with `profile`; returns
/// how many mixed ones there are.
fn assert_mixed(t: &Trans, profile: u64, what: &str) -> usize {
    assert!(
        t.info.sb.incompat_flags & INCOMPAT_MIXED_GROUPS != 0,
        "{what}: no MIXED_GROUPS"
    );
    let mut n = 0;
    for g in t.alloc.groups.values() {
        let kind = g.flags & (BG_DATA | BG_METADATA | BG_SYSTEM);
        assert!(
            kind == BG_SYSTEM || kind == BG_DATA | BG_METADATA,
            "{what}: block group {} has flags {:#x}",
            g.start,
            g.flags
        );
        assert_eq!(
            g.flags & BG_PROFILE_MASK,
            profile,
            "{what}: block group {} flags {:#x}",
            g.start,
            g.flags
        );
        n += usize::from(kind != BG_SYSTEM);
    }
    n
}

fn file_data(i: u64, len: usize) -> Vec<u8> {
    memcheck::Rng::new(i).bytes(len)
}

#[test]
fn mixed_mkfs_refuses_what_mkfs_btrfs_refuses() {
    let try_build = |o: &MkfsOptions, size: u64| -> String {
        let dev: Arc<dyn BlockDev> = Arc::new(MemDev::new(size));
        match build(vec![("m".into(), dev)], o) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    };
    let e = try_build(
        &MkfsOptions {
            nodesize: 16384,
            ..mixed_opts(0, 1)
        },
        64 * MIB,
    );
    assert!(e.contains("nodesize 16384"), "{e}");
    let e = try_build(
        &MkfsOptions {
            metadata_profile: BG_DUP,
            ..mixed_opts(0, 1)
        },
        64 * MIB,
    );
    assert!(e.contains("profiles must be the same"), "{e}");
    let e = try_build(&mixed_opts(0, 1), 16 * MIB);
    assert!(e.contains("too small"), "{e}");
    // Mixed images may be smaller than others.
    assert_eq!(try_build(&mixed_opts(BG_DUP, 1), 64 * MIB), "");
}

/// An empty mixed filesystem: one system and one mixed chunk, and what
/// statfs offers is the mixed space less the metadata reserve (counted
/// once: the groups serve data and metadata alike).
#[test]
fn mixed_empty_filesystem() {
    for (profile, size) in [(0, 64 * MIB), (BG_DUP, 96 * MIB), (0, 1024 * MIB)] {
        let dev = Arc::new(MemDev::new(size));
        let t = make(vec![("m".into(), dev.clone())], &mixed_opts(profile, 2)).unwrap();
        assert_eq!(assert_mixed(&t, profile, "mkfs"), 1);
        let copies = if profile == BG_DUP { 2 } else { 1 };
        let est = t.data_space_estimate();
        let logical = size / copies;
        // What the devices hold less the first MiB, the system chunk and
        // the reserve: nothing kept for separate metadata chunks.
        let reserve = t.mixed_meta_reserve();
        assert!(
            est < logical && est + reserve + 10 * MIB >= logical,
            "{size}/{profile:#x}: estimate {est} of {logical} (reserve {reserve})"
        );
        assert!(t.mixed_groups());
        drop(t);
        check_dev(dev.clone()).unwrap();
        memcheck::btrfs_check(&dev, "mixed").unwrap();
    }
}

/// Writes 1 MiB files `prefix0`, `prefix1`, ... through the read-write
/// mount until `max` are written or write(2) is refused (ENOSPC, nothing
/// else), committing every 8; returns the accepted files.
fn fill(fs: &mut RwFs, prefix: &str, max: u64, what: &str) -> Vec<(InodeId, Vec<u8>)> {
    let root = InodeId {
        subvol: FS_TREE_OBJECTID,
        ino: FIRST_INODE,
    };
    let mut accepted = Vec::new();
    for i in 0..max {
        let name = format!("{prefix}{i}");
        let id = fs
            .create(root, name.as_bytes(), 0o100644, 0, (0, 0), None)
            .unwrap();
        let data = file_data(
            i + prefix.len() as u64 * 1000,
            (MIB + i * 4096 + 17) as usize,
        );
        match fs.write(id, 0, &data) {
            Ok(_) => accepted.push((id, data)),
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "{what}: {e}");
                break;
            }
        }
        if i % 8 == 7 {
            fs.commit()
                .unwrap_or_else(|e| panic!("{what}: commit: {e}"));
        }
    }
    accepted
}

fn reopen(dev: &Arc<MemDev>) -> Trans {
    let d: Arc<dyn BlockDev> = dev.clone();
    Trans::open_dev(vec![d], 16 << 20).unwrap()
}

/// Mixed images through the read-write mount (writeback allocates data
/// and tree blocks from the same groups): a first mount writes a little;
/// reopened (profiles and the mixed flag from the image), a snapshot and a
/// subvolume are made and deleted, then files are written until write(2)
/// is refused, new chunks made on the way; the accepted data is committed
/// and reads back, every chunk is mixed, and the image checks clean. Then
/// half the files are removed and their space written again.
#[test]
fn mixed_chunks_on_demand_and_enospc() {
    for (profile, size) in [(0u64, 128 * MIB), (BG_DUP, 160 * MIB)] {
        let what = format!("profile {profile:#x}, {} MiB", size / MIB);
        let copies = if profile == BG_DUP { 2 } else { 1 };
        let dev = Arc::new(MemDev::new(size));
        let t = make(vec![("m".into(), dev.clone())], &mixed_opts(profile, 3)).unwrap();
        let mut fs = RwFs::with_trans(t, RwOptions::default()).unwrap();
        let mut files = fill(&mut fs, "a", 4, &what);
        assert_eq!(files.len(), 4, "{what}");
        fs.unmount().unwrap();
        let first = assert_mixed(fs.trans(), profile, &what);
        drop(fs);
        check_dev(dev.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));

        let mut t = reopen(&dev);
        let time = Timespec::default();
        let place = |name| Place {
            tree: FS_TREE_OBJECTID,
            dir: FIRST_INODE,
            name,
        };
        let snap = t
            .snapshot(FS_TREE_OBJECTID, &place(b"snap"), [4; 16], false, time)
            .unwrap_or_else(|e| panic!("{what}: snapshot: {e}"));
        let sub = t
            .create_subvolume(&place(b"sub"), [5; 16], false, time)
            .unwrap_or_else(|e| panic!("{what}: create: {e}"));
        t.commit().unwrap();
        t.delete_subvolume(snap, time).unwrap();
        t.delete_subvolume(sub, time).unwrap();
        t.commit().unwrap();
        drop(t);
        check_dev(dev.clone()).unwrap_or_else(|e| panic!("{what}: after subvolumes: {e}"));

        let mut fs = RwFs::with_trans(reopen(&dev), RwOptions::default()).unwrap();
        files.extend(fill(&mut fs, "b", 400, &what));
        fs.unmount()
            .unwrap_or_else(|e| panic!("{what}: the final commit: {e}"));
        for (id, data) in &files {
            assert!(
                fs.read(*id, 0, data.len() as u32).unwrap() == *data,
                "{what}"
            );
        }
        let written: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
        // Most of the space went to data: no separate metadata chunks, a
        // bounded reserve.
        assert!(
            written > size / copies / 10 * 7,
            "{what}: only {written} bytes accepted"
        );
        let n = assert_mixed(fs.trans(), profile, &what);
        assert!(n >= first + 2, "{what}: {first} then {n} mixed chunks");
        eprintln!("{what}: {written} bytes accepted; {first} then {n} mixed chunks");
        drop(fs);
        check_dev(dev.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
        memcheck::btrfs_check(&dev, "mixed").unwrap_or_else(|e| panic!("{what}: {e}"));

        let mut fs = RwFs::with_trans(reopen(&dev), RwOptions::default()).unwrap();
        let root = InodeId {
            subvol: FS_TREE_OBJECTID,
            ino: FIRST_INODE,
        };
        let half = files.len() as u64 / 2;
        for i in 0..half {
            let name = if i < 4 {
                format!("a{i}")
            } else {
                format!("b{}", i - 4)
            };
            fs.unlink(root, name.as_bytes()).unwrap();
        }
        fs.commit().unwrap();
        let again = fill(&mut fs, "c", 400, &what).len() as u64;
        fs.unmount().unwrap();
        assert!(
            again + 2 >= half,
            "{what}: {again} MiB written again of {half}"
        );
        assert_mixed(fs.trans(), profile, &what);
        drop(fs);
        check_dev(dev.clone()).unwrap_or_else(|e| panic!("{what}: rewritten: {e}"));
        memcheck::btrfs_check(&dev, "mixed").unwrap_or_else(|e| panic!("{what}: rewritten: {e}"));
    }
}
