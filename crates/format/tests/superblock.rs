//! Superblock encoding against real superblocks: every copy on every device
//! of every committed kernel-made fixture (crc32c, xxhash64, sha256) and a
//! btrfs-progs-made one for blake2b with a metadata_uuid and a label
//! (tests/data/progs-blake2-metadata-uuid.super: the primary superblock of
//! `mkfs.btrfs --csum blake2 -L "ubtrfs blake2 label"` then `btrfstune -m`,
//! btrfs-progs 6.2, as no committed fixture uses blake2b).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use ubtrfs_format::consts::{INCOMPAT_METADATA_UUID, SUPER_OFFSETS, SUPER_SIZE};
use ubtrfs_format::{CsumType, Superblock};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every superblock copy of a compressed image: (offset, 4096 bytes).
/// Decompresses only as far as the last copy that fits.
fn superblocks(zst: &Path) -> Vec<(u64, Vec<u8>)> {
    let mut dec = zstd::stream::Decoder::new(File::open(zst).unwrap()).unwrap();
    let mut out = Vec::new();
    let mut at = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for &off in &SUPER_OFFSETS {
        // Skip to the copy, then read it; stop at the end of the image.
        let mut skip = off - at;
        while skip > 0 {
            let n = skip.min(buf.len() as u64) as usize;
            if dec.read_exact(&mut buf[..n]).is_err() {
                return out;
            }
            skip -= n as u64;
        }
        let mut sb = vec![0u8; SUPER_SIZE];
        if dec.read_exact(&mut sb).is_err() {
            return out;
        }
        at = off + SUPER_SIZE as u64;
        out.push((off, sb));
    }
    out
}

fn fixture_superblocks() -> Vec<(String, Vec<u8>)> {
    let dir = repo_root().join("tests/fixtures/committed");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let mut out = Vec::new();
    for fx in names {
        for i in 0.. {
            let zst = fx.join(format!("dev{i}.img.zst"));
            if !zst.exists() {
                break;
            }
            for (off, sb) in superblocks(&zst) {
                out.push((format!("{} dev{i} @{off:#x}", fx.display()), sb));
            }
        }
    }
    let progs =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/progs-blake2-metadata-uuid.super");
    out.push((progs.display().to_string(), std::fs::read(&progs).unwrap()));
    out
}

#[test]
fn parse_then_to_bytes_is_identical_for_every_real_superblock() {
    let all = fixture_superblocks();
    let mut csum_types = BTreeSet::new();
    for (what, raw) in &all {
        let sb = Superblock::parse(raw).unwrap_or_else(|e| panic!("{what}: {e}"));
        let out = sb.to_bytes();
        assert!(out[..] == raw[..], "{what}: to_bytes differs");
        assert_eq!(sb.leafsize, sb.nodesize, "{what}");
        csum_types.insert(sb.csum_type.to_raw());
    }
    // crc32c, xxhash64 and sha256 from the kernel, blake2b from progs.
    assert_eq!(
        csum_types.len(),
        4,
        "checksum types covered: {csum_types:?}"
    );
    assert!(all.len() >= 8, "only {} superblocks found", all.len());
}

#[test]
fn every_field_comes_from_the_fields_not_the_raw_bytes() {
    // Re-encoding on a zeroed base must still give the real bytes, except
    // where the kernel leaves bytes no field covers: checks that the
    // fields, not the raw copy, produce the output.
    let mut stale = 0;
    for (what, raw) in fixture_superblocks() {
        let mut sb = Superblock::parse(&raw).unwrap();
        sb.raw = Default::default();
        if !sb.has_incompat(INCOMPAT_METADATA_UUID) {
            // The unused stored field: zero in these images.
            assert!(raw[0x23b..0x24b].iter().all(|&b| b == 0), "{what}");
        }
        // Past the end of the system chunk array the images hold stale
        // bytes of chunks removed since (mkfs's temporary ones): only the
        // raw copy keeps those, and the checksum covers them.
        let array_end = 0x32b + sb.sys_chunk_array.len();
        let got = sb.to_bytes();
        let diff: Vec<usize> = (32..SUPER_SIZE).filter(|&i| got[i] != raw[i]).collect();
        assert!(
            diff.iter().all(|&i| (array_end..0x32b + 2048).contains(&i)),
            "{what}: bytes outside the fields at {diff:x?}"
        );
        stale += usize::from(!diff.is_empty());
    }
    eprintln!("{stale} superblocks carry stale bytes after their sys_chunk_array");
}

#[test]
fn modified_fields_are_written_with_a_valid_checksum() {
    for (what, raw) in fixture_superblocks() {
        let mut sb = Superblock::parse(&raw).unwrap();
        sb.generation += 1;
        sb.label = b"relabelled".to_vec();
        sb.backups[1].fs_root_level ^= 1;
        sb.dev_item.bytes_used += 4096;
        let out = sb.to_bytes();
        let back = Superblock::parse(&out).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(back.generation, sb.generation);
        assert_eq!(back.label, b"relabelled");
        assert_eq!(back.backups[1], sb.backups[1]);
        assert_eq!(back.dev_item, sb.dev_item);
        let n = sb.csum_type.size();
        assert_eq!(back.csum[..n], sb.csum_type.compute(&out[0x20..])[..n]);
        // A flipped bit after encoding fails verification.
        let mut bad = out;
        bad[0x48] ^= 1;
        assert!(Superblock::parse(&bad).is_err(), "{what}");
    }
    // Changing the checksum type re-checksums with the new one.
    let (_, raw) = &fixture_superblocks()[0];
    let mut sb = Superblock::parse(raw).unwrap();
    sb.csum_type = CsumType::Sha256;
    assert_eq!(
        Superblock::parse(&sb.to_bytes()).unwrap().csum_type,
        CsumType::Sha256
    );
}

#[test]
fn sys_chunk_array_re_encodes_identically() {
    for (what, raw) in fixture_superblocks() {
        let sb = Superblock::parse(&raw).unwrap();
        let chunks = sb.sys_chunks().unwrap();
        assert!(!chunks.is_empty(), "{what}");
        let mut again = sb.clone();
        again.set_sys_chunks(&chunks).unwrap();
        assert_eq!(again.sys_chunk_array, sb.sys_chunk_array, "{what}");
        assert!(again.to_bytes()[..] == raw[..], "{what}");
    }
}
