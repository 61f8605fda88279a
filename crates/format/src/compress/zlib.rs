//! zlib extents, as the kernel's fs/btrfs/zlib.c writes and reads them: a
//! zlib stream whose 2-byte header is checked and skipped, the rest
//! inflated as raw deflate (the trailing adler32 is not checked), the
//! padding after the stream ignored.

use super::err;
use crate::error::Result;

/// A zlib stream of `input` at `level` (clamped to 1..=9).
pub(super) fn compress(level: i32, input: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write;
    let name = "zlib";
    let lvl = flate2::Compression::new(level.clamp(1, 9) as u32);
    let mut e = flate2::write::ZlibEncoder::new(Vec::with_capacity(input.len()), lvl);
    e.write_all(input).map_err(|x| err(name, x.to_string()))?;
    e.finish().map_err(|x| err(name, x.to_string()))
}

/// zlib: check the header, then inflate the raw deflate data after it into
/// `out`. Returns once the deflate stream ends or `out` is full (the kernel
/// stops reading there too); more output than that is an error.
pub(super) fn decompress(input: &[u8], out: &mut [u8]) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::super::decompress;
    use super::super::tests::{detail, text, SS};
    use crate::consts::COMPRESS_ZLIB;
    use std::io::Write;

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
}
