//! Space: a full filesystem is ENOSPC at the write, fallocated space is
//! written in place, and commits keep the room they need.

use super::*;

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
    checks_clean(&dev);
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
    let (dev, mut fs, root, id) = fresh_file(0x29);
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
    checks_clean(&dev);
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
    let (dev, mut fs, root, id) = fresh_file(0x2a);
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
    checks_clean(&dev);
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
    checks_clean(&dev);
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
    let (dev, mut fs, root, f) = fresh_file(0x29);
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
            .inode_mut(thief.subvol, thief.ino)
            .write_file(at, &vec![0x5a; step], policy)
        {
            Ok(i) => {
                t.inode_mut(thief.subvol, thief.ino).put(&i).unwrap();
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
    checks_clean(&dev);
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
    checks_clean(&dev);
}
