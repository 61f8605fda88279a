//! zstd extents, as the kernel's fs/btrfs/zstd.c writes and reads them: one
//! standard zstd frame, the padding after it ignored.

use super::err;
use crate::error::Result;

/// A zstd frame of `input` at `level` (clamped to 1..=15; its window is
/// bounded by the input, within the kernel's 128 KiB).
pub(super) fn compress(level: i32, input: &[u8]) -> Result<Vec<u8>> {
    ::zstd::bulk::compress(input, level.clamp(1, 15)).map_err(|x| err("zstd", x.to_string()))
}

/// zstd: one frame, decoded in one shot into `out` (the output buffer is the
/// window, so no other buffer grows with the input). Bytes after the frame
/// are ignored, as the kernel stops at the end of the first frame.
pub(super) fn decompress(input: &[u8], out: &mut [u8]) -> Result<()> {
    use ::zstd::zstd_safe;
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
    use super::super::decompress;
    use super::super::tests::{detail, text, SS};
    use crate::consts::COMPRESS_ZSTD;

    #[test]
    fn zstd_short_frame_zero_filled_padding_ignored_long_frame_rejected() {
        let data = text(7000);
        let mut c = ::zstd::bulk::compress(&data, 3).unwrap();
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
}
