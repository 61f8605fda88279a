//! The free space tree: FREE_SPACE_INFO per block group, and free space as
//! FREE_SPACE_EXTENT items (key = start, length; no payload) or as
//! FREE_SPACE_BITMAP items (key = start, length; one bit per sector, set =
//! free).

use crate::error::{FormatError, Result};
use crate::fixed_item;

/// FREE_SPACE_INFO flag: this block group's free space is kept in bitmaps.
pub const FREE_SPACE_USING_BITMAPS: u32 = 1 << 0;

fixed_item! {
    /// FREE_SPACE_INFO, keyed (block group start, FREE_SPACE_INFO, length).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct FreeSpaceInfo ("FREE_SPACE_INFO") {
        /// Number of free extents (runs of free sectors) in the block group,
        /// however they are stored.
        pub extent_count: u32,
        pub flags: u32,
    }
}

impl FreeSpaceInfo {
    pub fn uses_bitmaps(&self) -> bool {
        self.flags & FREE_SPACE_USING_BITMAPS != 0
    }
}

// Bitmaps use the kernel's little-endian bit order (as its
// extent_buffer_*_bit helpers): bit `i` is bit `i % 8` (LSB first) of
// byte `i / 8`.

/// Byte index and mask of bit `i`, or an error when it is past `len` bytes.
fn bit_pos(len: usize, i: u64) -> Result<(usize, u8)> {
    let byte = usize::try_from(i / 8).unwrap_or(usize::MAX);
    if byte >= len {
        return Err(FormatError::Short {
            what: "free space bitmap",
            offset: byte,
            need: 1,
            have: 0,
        });
    }
    Ok((byte, 1u8 << (i % 8)))
}

/// Bytes a bitmap of `nbits` bits takes.
pub fn bitmap_bytes(nbits: u64) -> u64 {
    nbits.div_ceil(8)
}

pub fn bitmap_test(bits: &[u8], i: u64) -> Result<bool> {
    let (b, m) = bit_pos(bits.len(), i)?;
    Ok(bits[b] & m != 0)
}

pub fn bitmap_set(bits: &mut [u8], i: u64) -> Result<()> {
    let (b, m) = bit_pos(bits.len(), i)?;
    bits[b] |= m;
    Ok(())
}

pub fn bitmap_clear(bits: &mut [u8], i: u64) -> Result<()> {
    let (b, m) = bit_pos(bits.len(), i)?;
    bits[b] &= !m;
    Ok(())
}

/// Sets bits `start..start + n` (checked up front: nothing changes on error).
pub fn bitmap_set_range(bits: &mut [u8], start: u64, n: u64) -> Result<()> {
    range_fits(bits.len(), start, n)?;
    (start..start + n).try_for_each(|i| bitmap_set(bits, i))
}

/// Clears bits `start..start + n` (checked up front: nothing changes on error).
pub fn bitmap_clear_range(bits: &mut [u8], start: u64, n: u64) -> Result<()> {
    range_fits(bits.len(), start, n)?;
    (start..start + n).try_for_each(|i| bitmap_clear(bits, i))
}

fn range_fits(len: usize, start: u64, n: u64) -> Result<()> {
    match n {
        0 => Ok(()),
        _ => bit_pos(len, start.saturating_add(n - 1)).map(|_| ()),
    }
}

/// The runs of set bits among the first `nbits`, as (first bit, count):
/// the free extents a bitmap describes.
pub fn bitmap_runs(bits: &[u8], nbits: u64) -> Result<Vec<(u64, u64)>> {
    if nbits > 0 {
        bit_pos(bits.len(), nbits - 1)?;
    }
    let mut runs = Vec::new();
    let mut start = None;
    for i in 0..nbits {
        match (bitmap_test(bits, i)?, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                runs.push((s, i - s));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        runs.push((s, nbits - s));
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_round_trip() {
        let i = FreeSpaceInfo {
            extent_count: 3,
            flags: FREE_SPACE_USING_BITMAPS,
        };
        let b = i.to_bytes();
        assert_eq!(b, [3, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(FreeSpaceInfo::parse(&b).unwrap(), i);
        assert!(FreeSpaceInfo::parse(&b[..7]).is_err());
    }

    #[test]
    fn bit_order_is_lsb_first() {
        let mut b = [0u8; 3];
        bitmap_set(&mut b, 0).unwrap();
        bitmap_set(&mut b, 9).unwrap();
        assert_eq!(b, [0x01, 0x02, 0]);
        bitmap_set_range(&mut b, 6, 4).unwrap();
        assert_eq!(b, [0xc1, 0x03, 0]);
        assert!(bitmap_test(&b, 7).unwrap());
        assert!(!bitmap_test(&b, 10).unwrap());
        bitmap_clear(&mut b, 0).unwrap();
        bitmap_clear_range(&mut b, 7, 2).unwrap();
        assert_eq!(b, [0x40, 0x02, 0]);
        assert_eq!(bitmap_runs(&b, 24).unwrap(), [(6, 1), (9, 1)]);
        assert_eq!(bitmap_runs(&[0xff, 0x01], 9).unwrap(), [(0, 9)]);
        // Out of range: errors, and ranges change nothing.
        assert!(bitmap_test(&b, 24).is_err());
        assert!(bitmap_set_range(&mut b, 20, 5).is_err());
        assert_eq!(b, [0x40, 0x02, 0]);
        assert!(bitmap_set_range(&mut b, u64::MAX, 2).is_err());
        assert!(bitmap_runs(&b, 25).is_err());
        assert_eq!(bitmap_bytes(9), 2);
    }
}
