//! What an unmount and a sync leave: (g) `ubtrfs umount` waits for the last
//! commit, and a plain umount frees the device; (i) `btrfs filesystem sync`
//! is durable.

use super::*;

// ------------------------------------------------------------------ (g)

/// 1 MiB blocks of seeded bytes: block `i` of file seed `seed`.
pub(super) fn pseudo_block(seed: u64, i: u64) -> Vec<u8> {
    Rng::new(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).bytes(1 << 20)
}

/// Writes 200 MiB (left dirty: under the mount's 256 MiB writeback
/// limit), runs `ubtrfs umount`, and requires the process gone at once,
/// the image clean and the file whole in the kernel's mount.
pub(super) fn umount_case(base: &Path, seed: u64) -> Result<(), String> {
    let how = "ubtrfs umount";
    let dir = base.join("umount");
    let (image, mnt) = fresh_image(&dir, "1G")?;
    let m = UbtrfsMount::start(&image, &mnt, "")?;
    let mib = 200;
    {
        let mut f = std::fs::File::create(mnt.join("big")).map_err(|e| e.to_string())?;
        for i in 0..mib {
            f.write_all(&pseudo_block(seed, i))
                .map_err(|e| e.to_string())?;
        }
    }
    let t = Instant::now();
    let out = Command::new(ubtrfs_bin())
        .arg("umount")
        .arg(&mnt)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{how}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let took = t.elapsed();
    let status = m
        .ended()
        .map_err(|e| format!("{how} returned after {took:?}: {e}"))?;
    if !status.success() {
        return Err(format!("{how}: the mount's process exited with {status}"));
    }
    check(&image, &format!("right after {how}"))?;
    let k = kernel_ro(&image, &dir.join("kmnt"));
    let mut f = std::fs::File::open(k.path("big")).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..mib {
        std::io::Read::read_exact(&mut f, &mut buf)
            .map_err(|e| format!("{how}: kernel read of MiB {i}: {e}"))?;
        if buf != pseudo_block(seed, i) {
            return Err(format!(
                "{how}: MiB {i} of the file differs in the kernel's mount"
            ));
        }
    }
    k.unmount();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Root's read-write mount of a loop device (a fuseblk mount), a file
/// written, a plain `umount`: as on the kernel's btrfs, the device is let
/// go the moment umount returns. The daemon may still be ending, but none
/// of its descriptors is the device (it held it until it exited, 1-2 s
/// later, and `losetup -d` waited for that: fstests generic/361 found the
/// filesystem under the loop's file busy).
pub(super) fn device_free_case(base: &Path) -> Result<(), String> {
    let dir = base.join("device-free");
    let (image, mnt) = fresh_image(&dir, "1G")?;
    let lo = LoopDev::attach(&image, false);
    let m = UbtrfsMount::start(Path::new(&lo.dev), &mnt, "")?;
    let pid = m.pid().ok_or("the mount has no process")?;
    std::fs::write(mnt.join("f"), vec![7u8; 8 << 20]).map_err(|e| e.to_string())?;
    unmount_cmd(Command::new("umount").arg(&mnt))?;
    let held: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == Path::new(&lo.dev)))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    m.exit_within(Duration::from_secs(30))?;
    if !held.is_empty() {
        return Err(format!(
            "right after a plain umount, the mount's process still has {} open (fd {})",
            lo.dev,
            held.join(", ")
        ));
    }
    drop(lo);
    check(&image, "after a plain umount")?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

// ------------------------------------------------------------------ (i)

pub(super) fn filesystem_sync_case(base: &Path, seed: u64) -> Result<(), String> {
    let dir = base.join("fs-sync");
    let (image, mnt) = fresh_image(&dir, "1G")?;
    let mut m = UbtrfsMount::start(&image, &mnt, "commit=300")?;
    let write = |name: &str, data: &[u8]| {
        std::fs::write(mnt.join(name), data).map_err(|e| format!("write {name}: {e}"))
    };
    let mib = 64;
    let big: Vec<u8> = (0..mib).flat_map(|i| pseudo_block(seed, i)).collect();
    write("big", &big)?;
    std::fs::create_dir(mnt.join("d")).map_err(|e| e.to_string())?;
    for i in 0..100 {
        write(&format!("d/{i}"), format!("small file {i}\n").as_bytes())?;
    }
    let out = Command::new("btrfs")
        .args(["filesystem", "sync"])
        .arg(&mnt)
        .output()
        .map_err(|e| format!("btrfs filesystem sync: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "btrfs filesystem sync: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    write("after", b"written after the sync")?;
    m.kill9()?;
    check(&image, "after btrfs filesystem sync and SIGKILL")?;
    let k = kernel_ro(&image, &dir.join("kmnt"));
    let got = std::fs::read(k.path("big")).map_err(|e| format!("kernel read of big: {e}"));
    let small: Result<Vec<_>, String> = (0..100)
        .map(|i| {
            std::fs::read(k.path(&format!("d/{i}")))
                .map_err(|e| format!("kernel read of d/{i}: {e}"))
                .and_then(|b| {
                    (b == format!("small file {i}\n").as_bytes())
                        .then_some(())
                        .ok_or(format!("d/{i} differs in the kernel's mount"))
                })
        })
        .collect();
    k.unmount();
    if got? != big {
        return Err("big differs in the kernel's mount".into());
    }
    small?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
