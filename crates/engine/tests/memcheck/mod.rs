//! Shared by the engine's integration tests: the tests' one seeded PRNG
//! and seed list, and btrfs-progs' `btrfs check --readonly`, from the
//! oracle crate's tests/src (included by path: the oracle crate depends
//! on the engine, so the engine's tests cannot depend on it); that check
//! of an in-memory image; zstd mounts and compressible data.

#![allow(dead_code)]

use ubtrfs_engine::io::dev::MemDev;

#[path = "../../../../tests/src/check.rs"]
pub mod check;

/// The engine's tests run the checker in-process ([`btrfs_check`]), not
/// the binary.
fn ubtrfs_checker() -> Option<std::path::PathBuf> {
    None
}
#[path = "../../../../tests/src/rng.rs"]
mod rng;
#[allow(unused_imports)]
pub use rng::{env_u64, seeds, Rng};

/// Whether btrfs-progs is here; without it the checks are skipped with a
/// line saying so, and fail under UBTRFS_REQUIRE_KERNEL=1.
pub fn btrfs_available(test: &str) -> bool {
    let have = check::btrfs_progs_here();
    if !have {
        assert!(
            std::env::var("UBTRFS_REQUIRE_KERNEL").as_deref() != Ok("1"),
            "{test}: btrfs-progs missing and UBTRFS_REQUIRE_KERNEL=1"
        );
        eprintln!("SKIPPED btrfs check in {test}: no btrfs-progs");
    }
    have
}

/// Writes `bytes` to `path` leaving all-zero 4 KiB blocks as holes: test
/// images are mostly unused space.
pub fn write_sparse(path: &std::path::Path, bytes: &[u8]) {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(bytes.len() as u64).unwrap();
    for (i, c) in bytes.chunks(4096).enumerate() {
        if c.iter().any(|&b| b != 0) {
            std::os::unix::fs::FileExt::write_all_at(&f, c, i as u64 * 4096).unwrap();
        }
    }
}

/// `btrfs check --readonly` of the image in `dev` (written to a sparse
/// scratch file) for the test file `suite` ("rwfs_model"): Ok unchecked
/// when btrfs-progs is missing ([`btrfs_available`]); on failure the image
/// is copied to the path in $UBTRFS_<SUITE>_KEEP, if set.
pub fn btrfs_check(dev: &MemDev, suite: &str) -> Result<(), String> {
    if !btrfs_available(suite) {
        return Ok(());
    }
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("ubtrfs-memcheck-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let img = dir.join("img");
    write_sparse(&img, &dev.snapshot());
    let r = check::btrfs_check(&img, &[]).and_then(|()| {
        ubtrfs_engine::tools::check::check_consistency(&dev.snapshot())
            .map(|_| ())
            .map_err(|e| format!("ubtrfs check: {e}"))
    });
    let keep_var = format!("UBTRFS_{}_KEEP", suite.to_uppercase());
    if let (true, Ok(keep)) = (r.is_err(), std::env::var(keep_var)) {
        let _ = std::fs::copy(&img, keep);
    }
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// File content for the model tests (file_model, rwfs_model), as `rng`
/// picks: zeros (still data when written), a compressible pattern (with
/// `nonzero`, none of its bytes 0), or bytes from a seed.
pub fn pattern(rng: &mut Rng, len: usize, nonzero: bool) -> Vec<u8> {
    match rng.below(4) {
        0 => vec![0; len],
        1 => (0..len)
            .map(|i| (i / 512) as u8 | u8::from(nonzero))
            .collect(),
        _ => {
            let seed = rng.next();
            (0..len)
                .map(|i| (seed.wrapping_mul(i as u64 + 1) >> 29) as u8)
                .collect()
        }
    }
}

/// A write's length for the model tests (file_model, rwfs_model), as `rng`
/// picks: up to 100 bytes, up to `mid`, whole sectors (up to 40), or up to
/// `most`.
pub fn write_len(rng: &mut Rng, mid: u64, most: u64) -> usize {
    const SS: u64 = 4096;
    (match rng.below(4) {
        0 => 1 + rng.below(100),
        1 => 1 + rng.below(mid),
        2 => SS * (1 + rng.below(40)),
        _ => 1 + rng.below(most),
    }) as usize
}

/// A new filesystem for a seeded model test on `dev`: nodesize 4096 or
/// 16384 by the seed's parity, no-holes unless `seed % 3 == holes`, every
/// fsid byte `fsid`.
pub fn seeded_mkfs(
    dev: std::sync::Arc<MemDev>,
    seed: u64,
    fsid: u8,
    holes: u64,
) -> Result<ubtrfs_engine::tx::Trans, String> {
    let mkopts = ubtrfs_engine::mkfs::MkfsOptions {
        nodesize: [4096, 16384][seed as usize % 2],
        fsid: Some([fsid; 16]),
        no_holes: seed % 3 != holes,
        ..Default::default()
    };
    ubtrfs_engine::mkfs::make(vec![("mem".into(), dev)], &mkopts).map_err(|e| e.to_string())
}

/// The top directory of the default subvolume.
pub const TOP: ubtrfs_engine::fs::InodeId = ubtrfs_engine::fs::InodeId {
    subvol: ubtrfs_format::consts::FS_TREE_OBJECTID,
    ino: ubtrfs_format::consts::FIRST_INODE,
};

/// An offset for an operation on a file of `size` bytes, as `rng` picks:
/// in the first 4 KiB sector, a sector boundary up to two sectors past
/// the end, or anywhere up to three sectors past it.
pub fn offset(rng: &mut Rng, size: u64) -> u64 {
    const SS: u64 = 4096;
    match rng.below(4) {
        0 => rng.below(SS),
        1 => rng.below(size + 2 * SS) / SS * SS,
        _ => rng.below(size + 3 * SS),
    }
}

/// A model file's bytes with `data` written at `off` (growing the file
/// where it ends past it, the gap zeros).
pub fn model_write(m: &mut Vec<u8>, off: u64, data: &[u8]) {
    let end = off as usize + data.len();
    if m.len() < end {
        m.resize(end, 0);
    }
    m[off as usize..end].copy_from_slice(data);
}

/// A model file's bytes after fallocate(2) of `mode` over `len` bytes at
/// `off`: grown to the range's end unless FALLOC_FL_KEEP_SIZE (1), the
/// range read as zeros after FALLOC_FL_PUNCH_HOLE (2) or
/// FALLOC_FL_ZERO_RANGE (0x10); preallocation changes no byte.
pub fn model_fallocate(m: &mut Vec<u8>, off: u64, len: u64, mode: i32) {
    let end = (off + len) as usize;
    if mode & 1 == 0 && m.len() < end {
        m.resize(end, 0);
    }
    if mode & 0x12 != 0 {
        let e = end.min(m.len());
        if (off as usize) < e {
            m[off as usize..e].fill(0);
        }
    }
}

/// A read-write mount with compress=zstd over `t`, and the top directory
/// of its default subvolume.
pub fn zstd_mount(
    t: ubtrfs_engine::tx::Trans,
) -> (ubtrfs_engine::rwfs::RwFs, ubtrfs_engine::fs::InodeId) {
    zstd_mount_forced(t, false)
}

/// [`zstd_mount`], with compress-force=zstd when `force`.
pub fn zstd_mount_forced(
    t: ubtrfs_engine::tx::Trans,
    force: bool,
) -> (ubtrfs_engine::rwfs::RwFs, ubtrfs_engine::fs::InodeId) {
    use ubtrfs_format::consts::{COMPRESS_ZSTD, FIRST_INODE, FS_TREE_OBJECTID};
    let opts = ubtrfs_engine::rwfs::RwOptions {
        compress: Some((COMPRESS_ZSTD, 1)),
        compress_force: force,
        ..Default::default()
    };
    let root = ubtrfs_engine::fs::InodeId {
        subvol: FS_TREE_OBJECTID,
        ino: FIRST_INODE,
    };
    (
        ubtrfs_engine::rwfs::RwFs::with_trans(t, opts).unwrap(),
        root,
    )
}

/// `len` bytes of `line` repeated, changed every `1 << shift` bytes:
/// data that compresses well but not to nothing.
pub fn compressible(line: &[u8], len: usize, shift: u32) -> Vec<u8> {
    (0..len)
        .map(|i| line[i % line.len()] ^ (i >> shift) as u8)
        .collect()
}
