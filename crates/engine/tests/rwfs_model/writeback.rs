//! Writeback: in flight and failing, the interval commit, compression,
//! the layout of what it writes, checksums on read, direct writes, unmount.

use super::*;

/// A writeback whose device writes fail while in flight (the mount's
/// lock let go, [`ubtrfs_engine::rwfs::ordered`]) loses nothing: reads see
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
/// ([`ubtrfs_engine::rwfs::ordered`]): each 128 KiB piece gets space for
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
    checks_clean(&dev);
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

/// O_DIRECT writes of NOCOW files (rwfs::direct): begun and ended under a
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
    checks_clean(&dev);
    let got = read_through(&reader_of(&dev), id, SIZE as usize);
    assert!(got == model, "the committed file differs from the model");
}

/// After the final commit (unmount) the filesystem is closed: a request
/// still running when the mount ended is refused (EROFS) and writes
/// nothing, and a second unmount does nothing; reads go on.
#[test]
fn vfs_unmount_closes_the_filesystem() {
    let (dev, mut fs, root, id) = fresh_file(0x31);
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
