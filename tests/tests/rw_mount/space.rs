//! Space: (l) overwriting preallocated space, (m) the first copy_file_range
//! calls, (n) space after unlink and metadata ENOSPC.

use super::*;

// ------------------------------------------------------------------ (l)

/// Used bytes of the filesystem mounted on `dir` (statvfs).
pub(super) fn used_bytes(dir: &Path) -> Result<u64, String> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a zeroed statvfs filled by the call; NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!(
            "statvfs {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok((st.f_blocks - st.f_bfree) * st.f_frsize)
}

pub(super) fn prealloc_overwrite_case(w: Writer, base: &Path) -> Result<String, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let (dir, image, mnt, m) = fresh_512m(w, base)?;
    let size: u64 = 240 << 20;
    let path = mnt.join("f");
    let f = std::fs::File::create(&path).map_err(|e| format!("create f: {e}"))?;
    // SAFETY: fallocate(2) on our own descriptor.
    if unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, size as i64) } != 0 {
        return Err(format!("fallocate: {}", std::io::Error::last_os_error()));
    }
    f.sync_all().map_err(|e| format!("fsync: {e}"))?;
    // The rest of the space taken by another file: a write into fallocated
    // space needs none (the kernel's btrfs_check_nocow_lock).
    let filler = std::fs::File::create(mnt.join("filler")).map_err(|e| format!("filler: {e}"))?;
    let mut at = 0u64;
    for chunk in [1usize << 20, 64 << 10] {
        let block = vec![0x77u8; chunk];
        while filler.write_all_at(&block, at).is_ok() {
            at += chunk as u64;
        }
        // Space a failed write held may come back at the fsync.
        let _ = filler.sync_all();
    }
    drop(filler);
    let before = used_bytes(&mnt)?;
    let mut rng = Rng::new(0x9e11);
    let mut model = vec![0u8; size as usize];
    let mut order: Vec<u64> = (0..size >> 20).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for (n, c) in order.into_iter().enumerate() {
        let (off, len) = if n % 5 == 4 {
            ((c << 20) + 1000, 70_000usize)
        } else {
            (c << 20, 1usize << 20)
        };
        let block = pseudo_block(n as u64, 0);
        let data = &block[..len];
        f.write_all_at(data, off)
            .map_err(|e| format!("write {n} at {off}: {e}"))?;
        model[off as usize..off as usize + len].copy_from_slice(data);
        if n % 32 == 31 {
            f.sync_all()
                .map_err(|e| format!("fsync after write {n}: {e}"))?;
        }
    }
    f.sync_all().map_err(|e| format!("fsync: {e}"))?;
    drop(f);
    let after = used_bytes(&mnt)?;
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    btrfs_check(&image, &["--check-data-csum"])
        .map_err(|e| format!("btrfs check --check-data-csum: {}", tail(&e, 2000)))?;
    let k = kernel_ro(&image, &dir.join("kmnt"));
    let got = std::fs::read(k.path("f")).map_err(|e| format!("kernel read of f: {e}"));
    k.unmount();
    if got? != model {
        return Err("the file differs from the model in the kernel's mount".into());
    }
    let grew = after.saturating_sub(before);
    if grew >= 16 << 20 {
        return Err(format!(
            "the overwrite of fallocated space took {} MiB more",
            grew >> 20
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!(
        "{} MiB of filler; used space grew by {} KiB",
        at >> 20,
        grew >> 10
    ))
}

// ------------------------------------------------------------------ (m)

/// copy_file_range(2) of `len` bytes, to the end; the count copied.
pub(super) fn copy_range(
    src: &std::fs::File,
    soff: u64,
    dst: &std::fs::File,
    doff: u64,
    len: usize,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let (mut so, mut dso) = (soff as i64, doff as i64);
    let mut done = 0;
    while done < len {
        // SAFETY: both descriptors are ours; the offsets are locals.
        let r = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut so,
                dst.as_raw_fd(),
                &mut dso,
                len - done,
                0,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if r == 0 {
            break;
        }
        done += r as usize;
    }
    Ok(done)
}

/// The first copy_file_range calls of a mount, made by 16 threads at
/// once, then a whole-file copy of a sparse file: the copy must be a
/// clone that keeps the hole, as the kernel's btrfs makes it. Linux 6.18
/// asks FUSE for COPY_FILE_RANGE_64 first; a mount that answered ENOSYS
/// to it lost copy_file_range for good when two first copies raced (the
/// kernel then falls back to a byte copy, holes written as zeros): the
/// cause of a flaky (b).
pub(super) fn first_copies_case(w: Writer, base: &Path) -> Result<String, String> {
    use std::os::unix::fs::FileExt;
    let (dir, image, mnt, m) = fresh_512m(w, base)?;
    let src_path = mnt.join("sparse");
    let src = std::fs::File::create(&src_path).map_err(|e| format!("create: {e}"))?;
    let block = pseudo_block(7, 0);
    src.write_all_at(&block[..4096], 0)
        .and_then(|_| src.write_all_at(&block[4096..8192], 1 << 20))
        .and_then(|_| src.sync_all())
        .map_err(|e| format!("write the source: {e}"))?;
    drop(src);
    let src = std::fs::File::open(&src_path).map_err(|e| format!("open: {e}"))?;
    let barrier = std::sync::Barrier::new(16);
    let firsts: Vec<Result<usize, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..16)
            .map(|i| {
                let (src, barrier, mnt) = (&src, &barrier, &mnt);
                s.spawn(move || {
                    let d = std::fs::File::create(mnt.join(format!("first{i}")))
                        .map_err(|e| e.to_string())?;
                    barrier.wait();
                    copy_range(src, 0, &d, 0, 4096).map_err(|e| format!("first copy {i}: {e}"))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in firsts {
        if r? != 4096 {
            return Err("a first copy was short".into());
        }
    }
    let dst = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(mnt.join("copy"))
        .map_err(|e| format!("create copy: {e}"))?;
    let size = (1 << 20) + 4096;
    let n = copy_range(&src, 0, &dst, 0, size).map_err(|e| format!("whole copy: {e}"))?;
    let map = data_ranges(&dst)?;
    let mut got = vec![0u8; size];
    dst.read_exact_at(&mut got, 0)
        .map_err(|e| format!("read copy: {e}"))?;
    drop((src, dst));
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    let mut want = vec![0u8; size];
    want[..4096].copy_from_slice(&block[..4096]);
    want[1 << 20..].copy_from_slice(&block[4096..8192]);
    if n != size || got != want {
        return Err(format!(
            "the copy differs from its source ({n} of {size} bytes copied)"
        ));
    }
    if map != [(0, 4096), (1 << 20, size as u64)] {
        return Err(format!(
            "the copy's data map is {map:?}: its hole was written as zeros (a byte copy, not a clone)"
        ));
    }
    check(&image, &format!("after copies on the {} mount", w.name()))?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(String::new())
}

// ------------------------------------------------------------------ (n)

/// Space freed by an unlink is free to write at once: a file fills the
/// image to ENOSPC and is fsynced, removed, and a file almost as large is
/// written right after, with no sync between. The freed extents stay
/// pinned until a commit (the superblock on disk still reaches them); the
/// kernel's flush_space commits before it answers ENOSPC, and so must
/// ours. Then `btrfs check`, and the kernel reads the new file whole.
pub(super) fn space_after_unlink_case(w: Writer, base: &Path) -> Result<String, String> {
    use std::io::Write;
    let (dir, image, mnt, m) = fresh_512m(w, base)?;
    let block = pseudo_block(0x5ace, 0);
    let mut a = std::fs::File::create(mnt.join("a")).map_err(|e| format!("create a: {e}"))?;
    let mut filled = 0u64;
    while a.write_all(&block).is_ok() {
        filled += block.len() as u64;
    }
    a.sync_all().map_err(|e| format!("fsync a: {e}"))?;
    drop(a);
    if filled < 256 << 20 {
        return Err(format!("only {} MiB written before ENOSPC", filled >> 20));
    }
    std::fs::remove_file(mnt.join("a")).map_err(|e| format!("unlink a: {e}"))?;
    let want = filled - (32 << 20);
    let mut b = std::fs::File::create(mnt.join("b")).map_err(|e| format!("create b: {e}"))?;
    let mut at = 0u64;
    while at < want {
        b.write_all(&block)
            .map_err(|e| format!("write b at {} MiB of {} MiB: {e}", at >> 20, want >> 20))?;
        at += block.len() as u64;
    }
    b.sync_all().map_err(|e| format!("fsync b: {e}"))?;
    drop(b);
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    check(&image, "after the writes")?;
    let k = kernel_ro(&image, &dir.join("kmnt"));
    let got = std::fs::read(k.path("b")).map_err(|e| format!("kernel read of b: {e}"));
    k.unmount();
    let got = got?;
    if got.len() as u64 != at || got.chunks(block.len()).any(|c| c != &block[..c.len()]) {
        return Err(format!(
            "b reads back {} bytes, not the {at} written",
            got.len()
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!(
        "{} MiB filled, {} MiB written after the unlink",
        filled >> 20,
        at >> 20
    ))
}

/// Metadata runs out: data fills the image, then 1 KiB xattrs go on one
/// file until ENOSPC, and 2,000 more must all fail too (a change that
/// ran out of tree blocks midway once left a transaction no commit could
/// write: later changes succeeded in memory and every one since the last
/// commit was lost). Then `btrfs check`, and the kernel reads the first
/// and the last xattr acknowledged, and not the next.
///
/// The filesystem is 512 MiB (mkfs -b) of a 2 GiB image file: new
/// chunks stay within the filesystem's size, not the file's (they once
/// went past it, and `btrfs check` found device extents beyond the
/// device's boundary; fstests generic/449 ran on for hours).
pub(super) fn metadata_enospc_case(w: Writer, base: &Path) -> Result<String, String> {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    let dir = base.join(w.name());
    std::fs::create_dir_all(&dir).unwrap();
    let image = dir.join("fs.img");
    let _ = std::fs::remove_file(&image);
    std::fs::File::create(&image)
        .and_then(|f| f.set_len(2 << 30))
        .map_err(|e| format!("{}: {e}", image.display()))?;
    run(Command::new(ubtrfs_bin())
        .args(["mkfs", "-q", "-f", "-b", "512M"])
        .arg(&image))?;
    let mnt = dir.join("mnt");
    let m = RwMount::start(w, &image, &mnt, "")?;
    let block = pseudo_block(0x3e7a, 0);
    let f = mnt.join("f");
    let mut a = std::fs::File::create(&f).map_err(|e| format!("create f: {e}"))?;
    while a.write_all(&block).is_ok() {}
    drop(a);
    let path = std::ffi::CString::new(f.as_os_str().as_bytes()).unwrap();
    let value = [0x61u8; 1024];
    let set = |i: u32| {
        let name = std::ffi::CString::new(format!("trusted.{i}")).unwrap();
        // SAFETY: NUL-terminated path and name; value of its length.
        let r = unsafe {
            libc::setxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        (r == 0)
            .then_some(())
            .ok_or_else(std::io::Error::last_os_error)
    };
    let mut last = 0;
    let first_err = loop {
        match set(last + 1) {
            Ok(()) => last += 1,
            Err(e) => break e,
        }
        if last > 2_000_000 {
            return Err("2,000,000 xattrs and no ENOSPC".into());
        }
    };
    if first_err.raw_os_error() != Some(libc::ENOSPC) || last < 1000 {
        return Err(format!("after {last} xattrs: {first_err}"));
    }
    if let Some(i) = (last + 2..last + 2002).find(|&i| set(i).is_ok()) {
        return Err(format!("xattr {i} set after ENOSPC at {}", last + 1));
    }
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    check(&image, "after metadata ran out")?;
    let k = kernel_ro(&image, &dir.join("kmnt"));
    let get = |i: u32| {
        Command::new("getfattr")
            .args(["--only-values", "-n", &format!("trusted.{i}")])
            .arg(k.path("f"))
            .output()
            .map(|o| o.stdout.len())
            .unwrap_or(0)
    };
    let seen = [get(1), get(last), get(last + 1)];
    k.unmount();
    if seen != [1024, 1024, 0] {
        return Err(format!(
            "the kernel reads xattrs 1, {last} and {} as {seen:?} bytes",
            last + 1
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!("{last} xattrs of 1 KiB before ENOSPC"))
}
