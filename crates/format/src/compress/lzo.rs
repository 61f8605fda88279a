//! lzo extents, as the kernel's fs/btrfs/lzo.c writes and reads them: a
//! le32 total length, then per sector of data a le32 segment length and an
//! LZO1X stream of at most one sector of output; a segment header never
//! straddles a sector boundary (fewer than 4 bytes left before one are
//! padding).

use super::err;
use crate::consts::MAX_UNCOMPRESSED;
use crate::error::Result;

/// Size of the lzo total-length header and of each segment header.
pub(super) const LZO_LEN: usize = 4;

/// btrfs's lzo framing of `input`.
pub(super) fn frame(input: &[u8], ss: usize) -> Result<Vec<u8>> {
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

pub(super) fn le32(input: &[u8], off: usize) -> Option<usize> {
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
pub(super) fn decompress(input: &[u8], out: &mut [u8], sectorsize: usize) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::super::decompress;
    use super::super::tests::{detail, text, SS};
    use super::{le32, LZO_LEN};
    use crate::consts::COMPRESS_LZO;

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
}
