//! Decompression of btrfs extents: zlib, lzo (btrfs per-sector framing), zstd.
//!
//! One entry point, [`decompress`], takes the on-disk bytes of one compressed
//! extent (regular: `disk_num_bytes` bytes at `disk_bytenr`; inline: the item
//! payload) and returns exactly `ram_bytes` bytes.
//!
//! Behaviour follows the kernel's `fs/btrfs/{zlib,lzo,zstd}.c` readers:
//!
//! * **zlib**: a zlib stream. As the kernel does, a valid 2-byte zlib header
//!   without a preset dictionary is skipped and the rest inflated as raw
//!   deflate, so the trailing adler32 is not checked. Bytes after the end of
//!   the deflate stream (the zero padding up to the sector) are ignored.
//! * **lzo**: a le32 total length (counting itself), then segments, each a le32
//!   compressed length and an LZO1X stream of at most one sector of output. A
//!   segment header never straddles a sector boundary: when fewer than 4 bytes
//!   are left before the next boundary (counted from the start of the extent)
//!   they are padding and the next header starts at the boundary.
//! * **zstd**: one standard zstd frame; bytes after it (the padding) are ignored.
//!
//! A stream that decodes to fewer than `out_len` bytes is zero-filled, as the
//! kernel does for a short extent; one that would decode to more is an error.
//!
//! Hostile input never panics, never loops without consuming input, and never
//! makes this module allocate more than the `out_len` output buffer plus the
//! decoders' fixed-size state (`out_len` itself is capped, see [`max_out_len`]).
//!
//! The codecs, each in the file named as the kernel's: [`zlib`] (zlib.c),
//! [`lzo`] (lzo.c), [`zstd`] (zstd.c); this file holds what compression.c
//! does for all of them (the entry points, the heuristic).
//!
//! Codecs: `flate2` with its pure-Rust backend (miniz_oxide) in raw-deflate
//! mode; `lzallright` for LZO1X (safe Rust, decodes into a caller-sized buffer
//! and returns the decoded length, which the short last segment of a file
//! needs); `zstd` (libzstd) decoding the frame in one shot into the output
//! buffer, so no window buffer is allocated.

mod lzo;
mod zlib;
mod zstd;

use crate::consts::{COMPRESS_LZO, COMPRESS_ZLIB, COMPRESS_ZSTD, MAX_UNCOMPRESSED};
use crate::error::{FormatError, Result};

/// Largest accepted `out_len` for a filesystem with this sector size: a
/// regular compressed extent holds at most 128 KiB, an inline extent at most
/// one sector.
pub fn max_out_len(sectorsize: u32) -> usize {
    MAX_UNCOMPRESSED as usize + sectorsize as usize
}

/// Decompresses one btrfs compressed extent (or compressed inline extent).
/// `algo` is the EXTENT_DATA compression byte (1 zlib, 2 lzo, 3 zstd);
/// `input` the on-disk bytes (disk_num_bytes for a regular extent, the inline payload for inline);
/// `out_len` the expected decompressed size (ram_bytes);
/// `sectorsize` the filesystem sector size (lzo framing depends on it).
/// Output is exactly out_len bytes: if the stream decodes to fewer bytes, the rest is zero-filled
/// (the kernel zero-fills a short decompression); more than out_len is an error.
pub fn decompress(algo: u8, input: &[u8], out_len: usize, sectorsize: u32) -> Result<Vec<u8>> {
    let name = algo_name(algo);
    if name == "unknown" {
        return Err(err(name, format!("unknown compression type {algo}")));
    }
    if !sectorsize.is_power_of_two() || !(512..=65536).contains(&sectorsize) {
        return Err(err(name, format!("invalid sector size {sectorsize}")));
    }
    if out_len > max_out_len(sectorsize) {
        return Err(err(
            name,
            format!(
                "decompressed size {out_len} exceeds the maximum {} (128 KiB + one sector)",
                max_out_len(sectorsize)
            ),
        ));
    }
    let mut out = vec![0u8; out_len];
    match algo {
        COMPRESS_ZLIB => zlib::decompress(input, &mut out)?,
        COMPRESS_LZO => lzo::decompress(input, &mut out, sectorsize as usize)?,
        _ => zstd::decompress(input, &mut out)?,
    }
    Ok(out)
}

/// kernel stores it: a zlib stream, a zstd frame (its window is bounded by
/// the input, within the kernel's 128 KiB), or lzo in btrfs's framing (a
/// total length, then one length-prefixed lzo1x segment per sector of
/// input, no segment header straddling a sector). Returns None when the
/// result, rounded up to the sector size, would not be smaller than the
/// input: the kernel stores such data uncompressed.
pub fn compress(algo: u8, level: i32, input: &[u8], sectorsize: u32) -> Result<Option<Vec<u8>>> {
    let name = algo_name(algo);
    if input.len() > MAX_UNCOMPRESSED as usize {
        return Err(err(
            name,
            format!("input of {} bytes exceeds 128 KiB", input.len()),
        ));
    }
    let out = match algo {
        COMPRESS_ZLIB => zlib::compress(level, input)?,
        COMPRESS_ZSTD => zstd::compress(level, input)?,
        COMPRESS_LZO => lzo::frame(input, sectorsize as usize)?,
        _ => return Err(err(name, format!("unknown compression type {algo}"))),
    };
    let ss = sectorsize as usize;
    Ok((out.len().next_multiple_of(ss) < input.len().next_multiple_of(ss)).then_some(out))
}

/// Whether `input` looks worth compressing, as the kernel decides before
/// it tries (compression.c, btrfs_compress_heuristic; skipped under
/// compress-force): a sample of 16 bytes every 256 of the first 128 KiB
/// (within each 4 KiB page) passes if its halves repeat, if it uses
/// fewer than 64 distinct byte values, if its most frequent values make
/// up 90% of it within the kernel's count of 64 (its loop's index: up
/// to 65 values), or else if its Shannon entropy (the kernel's integer
/// estimate) is under 80% of 8 bits per byte; 200 or more values making
/// up 90% fail it. Random or already compressed data fails, and is then
/// written without spending a compression on it.
pub fn worth_compressing(input: &[u8]) -> bool {
    const READ: usize = 16;
    const INTERVAL: usize = 256;
    const PAGE: usize = 4096;
    const BYTE_SET: usize = 64;
    const CORE_LOW: usize = 64;
    const CORE_HIGH: usize = 200;
    const ENTROPY_HIGH: u64 = 80;
    let window = &input[..input.len().min(MAX_UNCOMPRESSED as usize)];
    let mut sample = Vec::with_capacity(window.len() / INTERVAL * READ + READ);
    for page in (0..window.len()).step_by(PAGE) {
        for at in (page..page + PAGE - READ).step_by(INTERVAL) {
            // Nothing from past the end (the kernel keeps to start + 16
            // < the end).
            if at + READ >= window.len() {
                break;
            }
            sample.extend_from_slice(&window[at..at + READ]);
        }
    }
    let half = sample.len() / 2;
    if sample[..half] == sample[half..2 * half] {
        return true;
    }
    let mut counts = [0u64; 256];
    for &b in &sample {
        counts[b as usize] += 1;
    }
    if counts.iter().filter(|&&c| c > 0).count() < BYTE_SET {
        return true;
    }
    // The core set: the fewest values that make up 90% of the sample.
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let n = sample.len() as u64;
    let threshold = n * 90 / 100;
    let mut sum: u64 = counts[..CORE_LOW].iter().sum();
    let mut core = CORE_LOW;
    if sum <= threshold {
        while core < CORE_HIGH && counts[core] > 0 {
            sum += counts[core];
            if sum > threshold {
                break;
            }
            core += 1;
        }
    }
    if core <= CORE_LOW {
        return true;
    }
    if core >= CORE_HIGH {
        return false;
    }
    // log2 of x^4, rounded down: the kernel's fixed-point log.
    let log4 = |x: u64| 63 - (x * x * x * x).leading_zeros() as u64;
    let base = log4(n);
    let mut entropy: u64 = counts
        .iter()
        .take_while(|&&c| c > 0)
        .map(|&c| c * (base - log4(c)))
        .sum();
    entropy /= n;
    entropy * 100 / (8 * log4(2)) < ENTROPY_HIGH
}

/// The name of a compression type byte, as used in error messages.
pub fn algo_name(algo: u8) -> &'static str {
    match algo {
        COMPRESS_ZLIB => "zlib",
        COMPRESS_LZO => "lzo",
        COMPRESS_ZSTD => "zstd",
        _ => "unknown",
    }
}

fn err(algo: &'static str, detail: String) -> FormatError {
    FormatError::Decompress { algo, detail }
}

#[cfg(test)]
mod tests {

    /// The heuristic passes text, zeros and repeated blocks, and fails
    /// random bytes and what zstd already compressed; it never reads past
    /// a short input.
    #[test]
    fn heuristic_tells_compressible_from_random() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let random: Vec<u8> = (0..128 * 1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        assert!(!worth_compressing(&random));
        let packed = ::zstd::bulk::compress(&random, 3).unwrap();
        assert!(!worth_compressing(&packed[..packed.len().min(64 * 1024)]));
        let text: Vec<u8> = b"The quick brown fox jumps over the lazy dog; "
            .iter()
            .cycle()
            .take(128 * 1024)
            .copied()
            .collect();
        assert!(worth_compressing(&text));
        assert!(worth_compressing(&vec![0u8; 128 * 1024]));
        let mut block = random[..4096].to_vec();
        block.extend_from_within(..);
        assert!(worth_compressing(&block), "two equal halves");
        // Words of a 40-letter alphabet: few values, high enough entropy
        // only by the byte-set rule.
        let words: Vec<u8> = random
            .iter()
            .map(|b| b"abcdefghijklmnopqrstuvwxyz0123456789 .,;"[(*b % 40) as usize])
            .collect();
        assert!(worth_compressing(&words));
        for n in [0, 1, 15, 16, 17, 300, 4097] {
            let _ = worth_compressing(&random[..n]);
        }
        // Only the first 128 KiB is looked at.
        let mut tail = text.clone();
        tail.extend_from_slice(&random);
        assert!(worth_compressing(&tail));
    }

    use super::lzo::{le32, LZO_LEN};
    use super::*;
    use sha2::{Digest, Sha256};
    use std::io::Write;

    pub(super) const SS: u32 = 4096;

    struct Vector {
        file: String,
        algo: u8,
        sectorsize: u32,
        kind: String,
        out_len: usize,
        file_bytes: usize,
        sha256: String,
        input: Vec<u8>,
    }

    fn testdata(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/compress")
            .join(name)
    }

    /// The kernel-made vectors listed in testdata/compress/vectors.tsv.
    fn vectors() -> Vec<Vector> {
        let tsv = std::fs::read_to_string(testdata("vectors.tsv")).unwrap();
        tsv.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                assert_eq!(f.len(), 7, "bad line {l:?}");
                Vector {
                    file: f[0].to_string(),
                    algo: f[1].parse().unwrap(),
                    sectorsize: f[2].parse().unwrap(),
                    kind: f[3].to_string(),
                    out_len: f[4].parse().unwrap(),
                    file_bytes: f[5].parse().unwrap(),
                    sha256: f[6].to_string(),
                    input: std::fs::read(testdata(f[0])).unwrap(),
                }
            })
            .collect()
    }

    fn sha256_hex(b: &[u8]) -> String {
        Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    }

    pub(super) fn detail(e: FormatError) -> (&'static str, String) {
        match e {
            FormatError::Decompress { algo, detail } => (algo, detail),
            other => panic!("unexpected error kind {other:?}"),
        }
    }

    #[test]
    fn kernel_vectors_decompress_to_what_the_kernel_read() {
        let vs = vectors();
        assert_eq!(vs.len(), 16);
        for v in &vs {
            let out = decompress(v.algo, &v.input, v.out_len, v.sectorsize)
                .unwrap_or_else(|e| panic!("{}: {e}", v.file));
            assert_eq!(out.len(), v.out_len, "{}", v.file);
            assert_eq!(sha256_hex(&out), v.sha256, "{}", v.file);
            // Past the end of the file the extent holds zeros.
            assert!(out[v.file_bytes..].iter().all(|&b| b == 0), "{}", v.file);
            if v.kind == "inline" {
                let expected = std::fs::read(testdata("small.expected")).unwrap();
                assert_eq!(out, expected, "{}", v.file);
            }
        }
    }

    #[test]
    fn kernel_vectors_cover_the_interesting_cases() {
        let vs = vectors();
        for algo in [COMPRESS_ZLIB, COMPRESS_LZO, COMPRESS_ZSTD] {
            let of = |kind: &str| {
                vs.iter()
                    .filter(|v| v.algo == algo && v.kind == kind)
                    .count()
            };
            assert!(of("inline") >= 1 && of("regular") >= 4, "algo {algo}");
            // A 128 KiB extent, and a last extent whose tail is past EOF.
            assert!(vs.iter().any(|v| v.algo == algo && v.out_len == 128 * 1024));
            assert!(vs
                .iter()
                .any(|v| v.algo == algo && v.kind == "regular" && v.file_bytes < v.out_len));
        }
        // The lzo "pad" vector really has a segment ending 1..3 bytes before a
        // sector boundary, followed by zero padding and a header at the boundary.
        let pad = vs.iter().find(|v| v.file == "lzo-pad-0.bin").unwrap();
        let total = le32(&pad.input, 0).unwrap();
        let mut pos = LZO_LEN;
        let mut padded = 0;
        while pos < total {
            pos += LZO_LEN + le32(&pad.input, pos).unwrap();
            let left = 4096 - pos % 4096;
            if left < LZO_LEN {
                assert!(pad.input[pos..pos + left].iter().all(|&b| b == 0));
                padded += 1;
                pos += left;
            }
        }
        assert_eq!(pos, total);
        assert!(padded >= 1);
    }

    #[test]
    fn truncated_kernel_vectors_fail_cleanly() {
        for v in vectors() {
            let expected_sha = &v.sha256;
            let n = v.input.len();
            // Every length near both ends, a stride through the middle.
            let cuts = (0..n.min(64))
                .chain((64..n).step_by(61))
                .chain(n.saturating_sub(64)..n);
            let mut errors = 0;
            for cut in cuts {
                match decompress(v.algo, &v.input[..cut], v.out_len, v.sectorsize) {
                    Err(e) => {
                        let (algo, _) = detail(e);
                        assert_eq!(algo, algo_name(v.algo));
                        errors += 1;
                    }
                    // Only cutting bytes the decoder never needed (sector
                    // padding, a zlib adler32) may succeed, with the same data.
                    Ok(out) => {
                        assert_eq!(&sha256_hex(&out), expected_sha, "{} cut to {cut}", v.file);
                        assert!(cut > n / 4, "{} cut to {cut} decoded", v.file);
                    }
                }
            }
            assert!(errors > 0, "{}", v.file);
        }
    }

    #[test]
    fn corrupted_kernel_vectors_never_panic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut failures = 0;
        for v in vectors() {
            let n = v.input.len();
            // Every bit of the first 12 bytes (headers), then random bits.
            let flips: Vec<usize> = (0..96.min(n * 8))
                .chain((0..48).map(|_| (next() as usize) % (n * 8)))
                .collect();
            for bit in flips {
                let mut bad = v.input.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                match decompress(v.algo, &bad, v.out_len, v.sectorsize) {
                    Ok(out) => assert_eq!(out.len(), v.out_len),
                    Err(_) => failures += 1,
                }
            }
            // Random bytes at random places, several at once.
            for _ in 0..16 {
                let mut bad = v.input.clone();
                for _ in 0..4 {
                    let at = (next() as usize) % n;
                    bad[at] = next() as u8;
                }
                if let Ok(out) = decompress(v.algo, &bad, v.out_len, v.sectorsize) {
                    assert_eq!(out.len(), v.out_len);
                }
            }
        }
        assert!(failures > 100, "corruption should mostly be detected");
    }

    #[test]
    fn rejects_bad_parameters() {
        let max = 128 * 1024 + 4096;
        assert_eq!(max_out_len(SS), max);
        for algo in [COMPRESS_ZLIB, COMPRESS_LZO, COMPRESS_ZSTD] {
            let (name, d) = detail(decompress(algo, &[0; 16], max + 1, SS).unwrap_err());
            assert_eq!(name, algo_name(algo));
            assert!(d.contains("exceeds the maximum"), "{d}");
            for ss in [0, 3, 256, 4095, 131072] {
                let (_, d) = detail(decompress(algo, &[0; 16], 100, ss).unwrap_err());
                assert!(d.contains("sector size"), "{d}");
            }
            // Empty and tiny inputs.
            for len in 0..4 {
                let e = decompress(algo, &vec![0; len], 100, SS).unwrap_err();
                assert_eq!(detail(e).0, algo_name(algo));
            }
        }
        for algo in [0, 4, 255] {
            let (name, d) = detail(decompress(algo, &[0; 16], 100, SS).unwrap_err());
            assert_eq!(name, "unknown");
            assert!(d.contains(&format!("type {algo}")), "{d}");
        }
    }

    /// Log-like test data: compressible, not trivially so.
    pub(super) fn text(n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 64);
        let mut i = 0u64;
        while v.len() < n {
            let k = (i.wrapping_mul(2654435761) >> 7) % 13;
            writeln!(v, "{i:06} host{k} service[{}]: event {}", k * 7, i * k).unwrap();
            i += 1;
        }
        v.truncate(n);
        v
    }

    #[test]
    fn compress_round_trips_through_our_decoder() {
        let mut data = Vec::new();
        for i in 0..(128 * 1024 / 16) {
            data.extend_from_slice(format!("line {:08} ab\n", i % 977).as_bytes());
        }
        data.truncate(128 * 1024);
        for algo in [COMPRESS_ZLIB, COMPRESS_LZO, COMPRESS_ZSTD] {
            for ss in [4096u32, 65536] {
                let c = compress(algo, 3, &data, ss)
                    .unwrap()
                    .expect("text compresses");
                let back = decompress(algo, &c, data.len(), ss).unwrap();
                assert_eq!(back, data, "{}", algo_name(algo));
            }
        }
        // Random data does not shrink: stored plain.
        let mut x = 0x9e3779b97f4a7c15u64;
        let noise: Vec<u8> = (0..65536)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for algo in [COMPRESS_ZLIB, COMPRESS_LZO, COMPRESS_ZSTD] {
            assert!(compress(algo, 3, &noise, 4096).unwrap().is_none());
        }
    }
}
