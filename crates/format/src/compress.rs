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
//! Codecs: `flate2` with its pure-Rust backend (miniz_oxide) in raw-deflate
//! mode; `lzallright` for LZO1X (safe Rust, decodes into a caller-sized buffer
//! and returns the decoded length, which the short last segment of a file
//! needs); `zstd` (libzstd) decoding the frame in one shot into the output
//! buffer, so no window buffer is allocated.

use crate::consts::{COMPRESS_LZO, COMPRESS_ZLIB, COMPRESS_ZSTD, MAX_UNCOMPRESSED};
use crate::error::{FormatError, Result};

/// Size of the lzo total-length header and of each segment header.
const LZO_LEN: usize = 4;

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
        COMPRESS_ZLIB => zlib(input, &mut out)?,
        COMPRESS_LZO => lzo(input, &mut out, sectorsize as usize)?,
        _ => zstd(input, &mut out)?,
    }
    Ok(out)
}

/// The name of a compression type byte, as used in error messages.
/// Compresses one extent's data (at most 128 KiB, whole sectors) as the
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
        COMPRESS_ZLIB => {
            use std::io::Write;
            let lvl = flate2::Compression::new(level.clamp(1, 9) as u32);
            let mut e = flate2::write::ZlibEncoder::new(Vec::with_capacity(input.len()), lvl);
            e.write_all(input).map_err(|x| err(name, x.to_string()))?;
            e.finish().map_err(|x| err(name, x.to_string()))?
        }
        COMPRESS_ZSTD => {
            zstd::bulk::compress(input, level.clamp(1, 15)).map_err(|x| err(name, x.to_string()))?
        }
        COMPRESS_LZO => lzo_frame(input, sectorsize as usize)?,
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

/// btrfs's lzo framing of `input`.
fn lzo_frame(input: &[u8], ss: usize) -> Result<Vec<u8>> {
    let mut out = vec![0u8; LZO_LEN];
    let mut dict = lzallright::Dict::new();
    let mut seg = vec![0u8; lzallright::worst_case_len(ss)];
    for chunk in input.chunks(ss) {
        let n = lzallright::compress(chunk, &mut seg, &mut dict)
            .map_err(|e| err("lzo", format!("{e:?}")))?;
        // A segment header never straddles a sector: pad to the next one.
        let left = ss - out.len() % ss;
        if left < LZO_LEN {
            out.resize(out.len() + left, 0);
        }
        out.extend_from_slice(&(n as u32).to_le_bytes());
        out.extend_from_slice(&seg[..n]);
    }
    let total = out.len() as u32;
    out[..LZO_LEN].copy_from_slice(&total.to_le_bytes());
    Ok(out)
}

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

/// zlib: check the header, then inflate the raw deflate data after it into
/// `out`. Returns once the deflate stream ends or `out` is full (the kernel
/// stops reading there too); more output than that is an error.
fn zlib(input: &[u8], out: &mut [u8]) -> Result<()> {
    use flate2::{Decompress, FlushDecompress, Status};
    const A: &str = "zlib";
    let (cmf, flg) = match input {
        [cmf, flg, ..] => (*cmf, *flg),
        _ => {
            return Err(err(
                A,
                format!(
                    "input of {} bytes is too short for a zlib header",
                    input.len()
                ),
            ))
        }
    };
    // CM (low nibble) must be 8 = deflate, CINFO (window log - 8) at most 7,
    // the header a multiple of 31, and no preset dictionary (FDICT, bit 5).
    if cmf & 0x0f != 8 || cmf >> 4 > 7 || (u16::from(cmf) << 8 | u16::from(flg)) % 31 != 0 {
        return Err(err(
            A,
            format!("invalid zlib header {cmf:#04x} {flg:#04x} at input offset 0"),
        ));
    }
    if flg & 0x20 != 0 {
        return Err(err(
            A,
            "zlib header at input offset 0 asks for a preset dictionary".into(),
        ));
    }
    let data = &input[2..];
    let mut d = Decompress::new(false);
    // Each round either makes progress or returns: the loop cannot spin.
    loop {
        let (inp, outp) = (d.total_in() as usize, d.total_out() as usize);
        let status = d
            .decompress(&data[inp..], &mut out[outp..], FlushDecompress::None)
            .map_err(|e| {
                err(
                    A,
                    format!(
                        "invalid deflate data near input offset {} (after {} output bytes): {e}",
                        2 + d.total_in(),
                        d.total_out()
                    ),
                )
            })?;
        let (inp2, outp2) = (d.total_in() as usize, d.total_out() as usize);
        if status == Status::StreamEnd {
            return Ok(());
        }
        if outp2 == out.len() {
            break;
        }
        if inp2 == data.len() || (inp2 == inp && outp2 == outp) {
            return Err(err(
                A,
                format!(
                    "deflate stream truncated at input offset {} after {outp2} of {} output bytes",
                    2 + inp2,
                    out.len()
                ),
            ));
        }
    }
    // `out` is full. The stream may still end here (end-of-block code, final
    // empty block), or be cut right after the last byte (the kernel accepts
    // that); it must not produce more.
    let mut extra = [0u8; 1];
    let inp = d.total_in() as usize;
    match d.decompress(&data[inp..], &mut extra, FlushDecompress::None) {
        Ok(_) if d.total_out() as usize > out.len() => Err(err(
            A,
            format!(
                "stream decompresses to more than {} bytes (input offset {})",
                out.len(),
                2 + inp
            ),
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(err(
            A,
            format!(
                "invalid deflate data near input offset {} (after {} output bytes): {e}",
                2 + d.total_in(),
                d.total_out()
            ),
        )),
    }
}

fn le32(input: &[u8], off: usize) -> Option<usize> {
    let b = input.get(off..off.checked_add(LZO_LEN)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
}

/// Largest compressed segment: LZO1X's worst case for one sector, the size of
/// the kernel's segment buffer (`lzo1x_worst_compress(sectorsize)`).
fn lzo_max_segment(sectorsize: usize) -> usize {
    sectorsize + sectorsize / 16 + 64 + 3
}

/// btrfs lzo: le32 total length, then segments (le32 length + LZO1X data),
/// each decompressing to at most one sector, headers never crossing a sector.
fn lzo(input: &[u8], out: &mut [u8], sectorsize: usize) -> Result<()> {
    const A: &str = "lzo";
    let total = le32(input, 0).ok_or_else(|| {
        err(
            A,
            format!(
                "input of {} bytes is too short for the lzo header",
                input.len()
            ),
        )
    })?;
    if total > input.len() {
        return Err(err(
            A,
            format!(
                "total length {total} at input offset 0 exceeds the input length {}",
                input.len()
            ),
        ));
    }
    if total > MAX_UNCOMPRESSED as usize {
        return Err(err(
            A,
            format!("total length {total} at input offset 0 exceeds the 128 KiB extent limit"),
        ));
    }
    if total < LZO_LEN {
        return Err(err(
            A,
            format!("total length {total} at input offset 0 is smaller than its own header"),
        ));
    }
    // The kernel rejects an extent with a whole unused sector after the data.
    if total.div_ceil(sectorsize) * sectorsize < input.len() {
        return Err(err(
            A,
            format!(
                "total length {total} at input offset 0 leaves unused sectors in {} input bytes",
                input.len()
            ),
        ));
    }
    let mut pos = LZO_LEN;
    let mut produced = 0usize;
    // Every round consumes at least a segment header: bounded by total / 4.
    while pos < total {
        if sectorsize - pos % sectorsize < LZO_LEN {
            // Cannot happen after the padding skip below; kept as a guard.
            return Err(err(
                A,
                format!("segment header at input offset {pos} crosses a sector boundary"),
            ));
        }
        let seg_len = match le32(input, pos) {
            Some(n) if pos + LZO_LEN <= total => n,
            _ => {
                return Err(err(
                    A,
                    format!(
                        "segment header at input offset {pos} runs past the total length {total}"
                    ),
                ))
            }
        };
        let data_start = pos + LZO_LEN;
        if seg_len > lzo_max_segment(sectorsize) {
            return Err(err(
                A,
                format!(
                    "segment length {seg_len} at input offset {pos} exceeds the maximum {}",
                    lzo_max_segment(sectorsize)
                ),
            ));
        }
        if seg_len > total - data_start {
            return Err(err(
                A,
                format!(
                    "segment at input offset {pos} of length {seg_len} runs past the total length {total}"
                ),
            ));
        }
        let seg = &input[data_start..data_start + seg_len];
        let room = (out.len() - produced).min(sectorsize);
        let dst = &mut out[produced..produced + room];
        let n = lzallright::decompress(seg, dst).map_err(|e| {
            let what = if *e.kind() == lzallright::ErrorKind::OutputOverrun {
                if room < sectorsize {
                    format!(
                        "decompresses past the expected size {} (at output offset {produced})",
                        out.len()
                    )
                } else {
                    "decompresses to more than one sector".to_string()
                }
            } else {
                format!("is corrupt: {e}")
            };
            err(
                A,
                format!("segment at input offset {pos} (length {seg_len}) {what}"),
            )
        })?;
        produced += n;
        pos = data_start + seg_len;
        let left = sectorsize - pos % sectorsize;
        if left < LZO_LEN {
            // Padding: the next header starts at the sector boundary.
            pos += left;
        }
    }
    Ok(())
}

/// zstd: one frame, decoded in one shot into `out` (the output buffer is the
/// window, so no other buffer grows with the input). Bytes after the frame
/// are ignored, as the kernel stops at the end of the first frame.
fn zstd(input: &[u8], out: &mut [u8]) -> Result<()> {
    use zstd::zstd_safe;
    const A: &str = "zstd";
    let frame_len = zstd_safe::find_frame_compressed_size(input).map_err(|code| {
        err(
            A,
            format!(
                "no complete zstd frame at input offset 0 in {} bytes: {}",
                input.len(),
                zstd_safe::get_error_name(code)
            ),
        )
    })?;
    let frame = input.get(..frame_len).ok_or_else(|| {
        err(
            A,
            format!(
                "frame length {frame_len} exceeds the input length {}",
                input.len()
            ),
        )
    })?;
    let mut dctx = zstd_safe::DCtx::try_create()
        .ok_or_else(|| err(A, "cannot create a decompression context".into()))?;
    let n = dctx.decompress(out, frame).map_err(|code| {
        err(
            A,
            format!(
                "frame at input offset 0 (length {frame_len}) does not decompress into {} bytes: {}",
                out.len(),
                zstd_safe::get_error_name(code)
            ),
        )
    })?;
    // libzstd may use the unused end of `out` as scratch space: re-zero it.
    out.get_mut(n..).unwrap_or_default().fill(0);
    Ok(())
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
        let packed = zstd::bulk::compress(&random, 3).unwrap();
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

    use super::*;
    use sha2::{Digest, Sha256};
    use std::io::Write;

    const SS: u32 = 4096;

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

    fn detail(e: FormatError) -> (&'static str, String) {
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
    fn text(n: usize) -> Vec<u8> {
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

    // ---- zlib ----

    fn zlib_compress(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(3));
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn zlib_short_stream_is_zero_filled_and_padding_ignored() {
        let data = text(5000);
        let mut c = zlib_compress(&data);
        c.resize(c.len().div_ceil(4096) * 4096, 0); // as on disk
        let out = decompress(COMPRESS_ZLIB, &c, 8192, SS).unwrap();
        assert_eq!(&out[..5000], &data[..]);
        assert!(out[5000..].iter().all(|&b| b == 0));
        // Exactly out_len.
        assert_eq!(decompress(COMPRESS_ZLIB, &c, 5000, SS).unwrap(), data);
    }

    #[test]
    fn zlib_longer_than_out_len_is_an_error() {
        let data = text(9000);
        let c = zlib_compress(&data);
        for out_len in [0, 1, 4096, 8999] {
            let (_, d) = detail(decompress(COMPRESS_ZLIB, &c, out_len, SS).unwrap_err());
            assert!(d.contains("more than"), "{out_len}: {d}");
        }
    }

    #[test]
    fn zlib_adler32_is_not_checked_like_the_kernel() {
        let data = text(3000);
        let mut c = zlib_compress(&data);
        let n = c.len();
        c[n - 1] ^= 0xff;
        assert_eq!(decompress(COMPRESS_ZLIB, &c, 3000, SS).unwrap(), data);
    }

    #[test]
    fn zlib_bad_headers() {
        let data = text(3000);
        let c = zlib_compress(&data);
        // Preset dictionary flag (FDICT), header re-balanced to stay % 31 == 0.
        let mut h = [c[0], 0x20];
        while (u16::from(h[0]) << 8 | u16::from(h[1])) % 31 != 0 {
            h[1] += 1;
        }
        let mut dict = c.clone();
        dict[..2].copy_from_slice(&h);
        let (_, d) = detail(decompress(COMPRESS_ZLIB, &dict, 3000, SS).unwrap_err());
        assert!(d.contains("preset dictionary"), "{d}");
        // Not deflate / bad check bits / window too large.
        for h in [[0x79, 0x9c], [0x78, 0x9d], [0x88, 0x98]] {
            let mut bad = c.clone();
            bad[..2].copy_from_slice(&h);
            let (_, d) = detail(decompress(COMPRESS_ZLIB, &bad, 3000, SS).unwrap_err());
            assert!(d.contains("invalid zlib header"), "{d}");
        }
    }

    #[test]
    fn zlib_truncated_stream_names_the_offset() {
        let data = text(20000);
        let c = zlib_compress(&data);
        let (_, d) = detail(decompress(COMPRESS_ZLIB, &c[..c.len() / 2], 20000, SS).unwrap_err());
        assert!(d.contains("truncated at input offset"), "{d}");
    }

    // ---- zstd ----

    #[test]
    fn zstd_short_frame_zero_filled_padding_ignored_long_frame_rejected() {
        let data = text(7000);
        let mut c = zstd::bulk::compress(&data, 3).unwrap();
        let frame_len = c.len();
        c.resize(c.len().div_ceil(4096) * 4096, 0);
        let out = decompress(COMPRESS_ZSTD, &c, 8192, SS).unwrap();
        assert_eq!(&out[..7000], &data[..]);
        assert!(out[7000..].iter().all(|&b| b == 0));
        assert_eq!(decompress(COMPRESS_ZSTD, &c, 7000, SS).unwrap(), data);
        let (_, d) = detail(decompress(COMPRESS_ZSTD, &c, 6999, SS).unwrap_err());
        assert!(d.contains("does not decompress into 6999"), "{d}");
        let (_, d) = detail(decompress(COMPRESS_ZSTD, &c[..frame_len - 1], 7000, SS).unwrap_err());
        assert!(d.contains("no complete zstd frame"), "{d}");
    }

    // ---- lzo ----

    /// An LZO1X stream of literals only (first instruction a long literal run).
    fn lzo_literals(d: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        if (4..=238).contains(&d.len()) {
            v.push(17 + d.len() as u8);
        } else {
            assert!(d.len() >= 19);
            v.push(0);
            let mut r = d.len() - 18;
            while r > 255 {
                v.push(0);
                r -= 255;
            }
            v.push(r as u8);
        }
        v.extend_from_slice(d);
        v.extend_from_slice(&[0x11, 0, 0]);
        v
    }

    fn lzo_compress(d: &[u8]) -> Vec<u8> {
        let mut dict = Box::new(lzallright::Dict::new());
        let mut out = vec![0; lzallright::worst_case_len(d.len())];
        let n = lzallright::compress(d, &mut out, &mut dict).unwrap();
        out.truncate(n);
        out
    }

    /// btrfs lzo framing around already compressed segments, padded to whole
    /// sectors as on disk. Returns the extent and how many paddings it has.
    fn lzo_frame(segments: &[Vec<u8>], ss: usize) -> (Vec<u8>, usize) {
        let mut v = vec![0u8; LZO_LEN];
        let mut pads = 0;
        for s in segments {
            assert!(ss - v.len() % ss >= LZO_LEN);
            v.extend_from_slice(&(s.len() as u32).to_le_bytes());
            v.extend_from_slice(s);
            let left = ss - v.len() % ss;
            if left < LZO_LEN {
                v.resize(v.len() + left, 0);
                pads += 1;
            }
        }
        let total = v.len() as u32;
        v[..LZO_LEN].copy_from_slice(&total.to_le_bytes());
        v.resize(v.len().div_ceil(ss) * ss, 0);
        (v, pads)
    }

    #[test]
    fn lzo_framing_for_several_sector_sizes() {
        for ss in [4096usize, 16384, 65536] {
            let data = text(128 * 1024 - 1000); // last segment is short
            let segs: Vec<Vec<u8>> = data.chunks(ss).map(lzo_compress).collect();
            let (extent, _) = lzo_frame(&segs, ss);
            let out = decompress(COMPRESS_LZO, &extent, 128 * 1024, ss as u32).unwrap();
            assert_eq!(&out[..data.len()], &data[..], "ss {ss}");
            assert!(out[data.len()..].iter().all(|&b| b == 0));
            // Decoded with the wrong sector size the framing does not line up
            // (one-segment-per-sector no longer holds, or headers are misread).
            if ss > 4096 {
                assert!(decompress(COMPRESS_LZO, &extent, 128 * 1024, 4096).is_err());
            }
        }
    }

    #[test]
    fn lzo_padding_before_a_sector_boundary_is_skipped() {
        for ss in [4096usize, 8192] {
            for gap in 1..=3usize {
                // Segment 1 ends `gap` bytes before the first sector boundary:
                // 4 (total) + 4 (header) + compressed = ss - gap. A literal-only
                // stream of n >= 19 bytes (n - 18 < 255 * 16) is n + 5 + zeros.
                let mut n = ss - gap - 8 - 5;
                let zeros = |n: usize| (n - 18 - 1) / 255;
                while n + 5 + zeros(n) > ss - gap - 8 {
                    n -= 1;
                }
                let a: Vec<u8> = (0..n).map(|i| (i * 7 + gap) as u8).collect();
                let b = text(ss);
                let segs = vec![lzo_literals(&a), lzo_compress(&b)];
                assert_eq!(segs[0].len(), ss - gap - 8, "ss {ss} gap {gap}");
                let (extent, pads) = lzo_frame(&segs, ss);
                assert_eq!(pads, 1);
                let out = decompress(COMPRESS_LZO, &extent, 2 * ss, ss as u32).unwrap();
                // Segment outputs are contiguous, as in the kernel.
                assert_eq!(&out[..n], &a[..]);
                assert_eq!(&out[n..n + ss], &b[..]);
                assert!(out[n + ss..].iter().all(|&x| x == 0));
            }
        }
    }

    #[test]
    fn lzo_inline_layout() {
        // Inline: total == payload length, one segment, no sector padding.
        let data = text(1500);
        let seg = lzo_compress(&data);
        let mut v = ((seg.len() + 8) as u32).to_le_bytes().to_vec();
        v.extend_from_slice(&(seg.len() as u32).to_le_bytes());
        v.extend_from_slice(&seg);
        assert_eq!(decompress(COMPRESS_LZO, &v, 1500, SS).unwrap(), data);
        let out = decompress(COMPRESS_LZO, &v, 2000, SS).unwrap();
        assert_eq!(&out[..1500], &data[..]);
    }

    #[test]
    fn lzo_length_errors_name_the_offset() {
        let data = text(3 * 4096);
        let segs: Vec<Vec<u8>> = data.chunks(4096).map(lzo_compress).collect();
        let (good, _) = lzo_frame(&segs, 4096);
        let out_len = 3 * 4096;
        assert_eq!(decompress(COMPRESS_LZO, &good, out_len, SS).unwrap(), data);
        let e = |v: &[u8], out_len: usize| {
            detail(decompress(COMPRESS_LZO, v, out_len, SS).unwrap_err()).1
        };

        let mut bad = good.clone();
        bad[..4].copy_from_slice(&(good.len() as u32 + 1).to_le_bytes());
        let d = e(&bad, out_len);
        assert!(d.contains("total length") && d.contains("offset 0"), "{d}");

        let mut bad = good.clone();
        bad[..4].copy_from_slice(&2u32.to_le_bytes());
        assert!(e(&bad, out_len).contains("smaller than its own header"));

        // A total that leaves a whole unused sector behind.
        let mut longer = good.clone();
        longer.resize(good.len() + 4096, 0);
        assert!(e(&longer, out_len).contains("unused sectors"));

        // Second segment header: length past the total, and past the maximum.
        let second = 8 + segs[0].len();
        let mut bad = good.clone();
        bad[second..second + 4].copy_from_slice(&4400u32.to_le_bytes());
        let d = e(&bad, out_len);
        assert!(
            d.contains(&format!("offset {second}")) && d.contains("runs past"),
            "{d}"
        );
        bad[second..second + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let d = e(&bad, out_len);
        assert!(
            d.contains(&format!("offset {second}")) && d.contains("exceeds the maximum"),
            "{d}"
        );

        // More output than out_len.
        let d = e(&good, 2 * 4096 + 100);
        assert!(d.contains("past the expected size"), "{d}");
        // A segment of more than one sector.
        let (two, _) = lzo_frame(&[lzo_compress(&text(8192))], 4096);
        assert!(e(&two, 8192).contains("more than one sector"));
        // A corrupt segment.
        let mut bad = good.clone();
        bad[8] = 0x10; // an M4 match into an empty window
        let d = e(&bad, out_len);
        assert!(d.contains("offset 4") && d.contains("corrupt"), "{d}");
    }

    #[test]
    fn lzo_truncation_sweep_on_synthetic_extent() {
        let data = text(10 * 4096 + 123);
        let segs: Vec<Vec<u8>> = data.chunks(4096).map(lzo_compress).collect();
        let (good, _) = lzo_frame(&segs, 4096);
        let total = le32(&good, 0).unwrap();
        for cut in 0..good.len() {
            let r = decompress(COMPRESS_LZO, &good[..cut], 11 * 4096, SS);
            if cut < total {
                assert!(r.is_err(), "cut {cut}");
            } else {
                assert_eq!(&r.unwrap()[..data.len()], &data[..]);
            }
        }
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
