//! Little-endian field readers over byte slices, all bounds checked.

use crate::error::{FormatError, Result};

/// Returns `buf[off..off + len]` or a [`FormatError::Short`] naming `what`.
#[inline]
pub fn slice<'a>(buf: &'a [u8], off: usize, len: usize, what: &'static str) -> Result<&'a [u8]> {
    match off.checked_add(len) {
        Some(end) if end <= buf.len() => Ok(&buf[off..end]),
        _ => Err(FormatError::Short {
            what,
            offset: off,
            need: len,
            have: buf.len().saturating_sub(off),
        }),
    }
}

#[inline]
pub fn u8_at(buf: &[u8], off: usize, what: &'static str) -> Result<u8> {
    Ok(slice(buf, off, 1, what)?[0])
}

#[inline]
pub fn u16_at(buf: &[u8], off: usize, what: &'static str) -> Result<u16> {
    let s = slice(buf, off, 2, what)?;
    Ok(u16::from_le_bytes([s[0], s[1]]))
}

#[inline]
pub fn u32_at(buf: &[u8], off: usize, what: &'static str) -> Result<u32> {
    let s = slice(buf, off, 4, what)?;
    Ok(u32::from_le_bytes(s.try_into().unwrap()))
}

#[inline]
pub fn u64_at(buf: &[u8], off: usize, what: &'static str) -> Result<u64> {
    let s = slice(buf, off, 8, what)?;
    Ok(u64::from_le_bytes(s.try_into().unwrap()))
}

#[inline]
pub fn uuid_at(buf: &[u8], off: usize, what: &'static str) -> Result<[u8; 16]> {
    Ok(slice(buf, off, 16, what)?.try_into().unwrap())
}

/// Little-endian reads from a slice already known to be long enough
/// (they panic otherwise; use the checked readers above on untrusted input).
/// Used by fixed-size structures after one up-front length check.
#[inline]
pub fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
#[inline]
pub fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}
#[inline]
pub fn le64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}
#[inline]
pub fn uuid(b: &[u8], off: usize) -> [u8; 16] {
    b[off..off + 16].try_into().unwrap()
}

/// Little-endian appenders, the encoders' counterpart of the readers above.
#[inline]
pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
#[inline]
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
#[inline]
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Formats a UUID the usual 8-4-4-4-12 way.
pub fn format_uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}
