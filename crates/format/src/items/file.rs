//! EXTENT_DATA items (`btrfs_file_extent_item`): how a file range maps to
//! data, inline or in an extent.
//!
//! ```text
//! generation u64, ram_bytes u64, compression u8, encryption u8,
//! other_encoding u16, type u8                                          (21)
//! inline:        the (possibly compressed) data to the end of the item
//! regular/prealloc: disk_bytenr u64, disk_num_bytes u64, offset u64,
//!                num_bytes u64                                          (53)
//! ```

use crate::bytes::{le16, le64, put_u16, put_u64, slice};
use crate::consts::*;
use crate::error::{invalid, Result};

/// Bytes of an EXTENT_DATA item before inline data.
pub const FILE_EXTENT_INLINE_HEADER: usize = 21;
/// Bytes of a regular or preallocated EXTENT_DATA item.
pub const FILE_EXTENT_SIZE: usize = 53;

/// An EXTENT_DATA item: one mapping of a file range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileExtent<'a> {
    pub generation: u64,
    /// Uncompressed size of the whole extent (inline: of the inline data).
    pub ram_bytes: u64,
    pub compression: u8,
    pub encryption: u8,
    pub other_encoding: u16,
    pub kind: FileExtentKind<'a>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileExtentKind<'a> {
    /// Data stored in the item itself (possibly compressed).
    Inline { data: &'a [u8] },
    /// Regular (type 1) or preallocated (type 2) extent. `disk_bytenr` 0
    /// is an explicit hole.
    Extent {
        prealloc: bool,
        disk_bytenr: u64,
        disk_num_bytes: u64,
        offset: u64,
        num_bytes: u64,
    },
}

impl<'a> FileExtent<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        let b = slice(data, 0, FILE_EXTENT_INLINE_HEADER, "EXTENT_DATA")?;
        let t = b[20];
        let kind = match t {
            FILE_EXTENT_INLINE => FileExtentKind::Inline {
                data: &data[FILE_EXTENT_INLINE_HEADER..],
            },
            FILE_EXTENT_REG | FILE_EXTENT_PREALLOC => {
                let e = slice(data, 0, FILE_EXTENT_SIZE, "EXTENT_DATA (regular)")?;
                FileExtentKind::Extent {
                    prealloc: t == FILE_EXTENT_PREALLOC,
                    disk_bytenr: le64(e, 21),
                    disk_num_bytes: le64(e, 29),
                    offset: le64(e, 37),
                    num_bytes: le64(e, 45),
                }
            }
            other => return Err(invalid("EXTENT_DATA", format!("unknown type {other}"))),
        };
        Ok(FileExtent {
            generation: le64(b, 0),
            ram_bytes: le64(b, 8),
            compression: b[16],
            encryption: b[17],
            other_encoding: le16(b, 18),
            kind,
        })
    }

    /// The type byte: FILE_EXTENT_INLINE, _REG or _PREALLOC.
    pub fn extent_type(&self) -> u8 {
        match self.kind {
            FileExtentKind::Inline { .. } => FILE_EXTENT_INLINE,
            FileExtentKind::Extent {
                prealloc: false, ..
            } => FILE_EXTENT_REG,
            FileExtentKind::Extent { prealloc: true, .. } => FILE_EXTENT_PREALLOC,
        }
    }

    /// The data sectors whose checksums go with this item (what the
    /// kernel's log replay copies, and what a read verifies): the part of
    /// the extent it refers to, or a compressed extent whole, whose
    /// checksums cover its bytes on disk. None for inline data and holes;
    /// Err when the range would pass 2^64.
    pub fn csum_range(&self) -> Result<Option<(u64, u64)>> {
        let FileExtentKind::Extent {
            disk_bytenr,
            disk_num_bytes,
            offset,
            num_bytes,
            ..
        } = self.kind
        else {
            return Ok(None);
        };
        if disk_bytenr == 0 {
            return Ok(None);
        }
        let (start, len) = if self.compression != 0 {
            (Some(disk_bytenr), disk_num_bytes)
        } else {
            (disk_bytenr.checked_add(offset), num_bytes)
        };
        start
            .and_then(|s| Some(s).zip(s.checked_add(len)))
            .map(Some)
            .ok_or_else(|| {
                invalid(
                    "EXTENT_DATA",
                    format!("extent {disk_bytenr}+{offset}+{num_bytes} passes 2^64"),
                )
            })
    }

    pub fn encoded_len(&self) -> usize {
        match self.kind {
            FileExtentKind::Inline { data } => FILE_EXTENT_INLINE_HEADER + data.len(),
            FileExtentKind::Extent { .. } => FILE_EXTENT_SIZE,
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.generation);
        put_u64(out, self.ram_bytes);
        out.push(self.compression);
        out.push(self.encryption);
        put_u16(out, self.other_encoding);
        out.push(self.extent_type());
        match self.kind {
            FileExtentKind::Inline { data } => out.extend_from_slice(data),
            FileExtentKind::Extent {
                disk_bytenr,
                disk_num_bytes,
                offset,
                num_bytes,
                ..
            } => {
                for v in [disk_bytenr, disk_num_bytes, offset, num_bytes] {
                    put_u64(out, v);
                }
            }
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        self.encode(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_regular_round_trip() {
        let inline = FileExtent {
            generation: 9,
            ram_bytes: 5,
            compression: COMPRESS_NONE,
            encryption: 0,
            other_encoding: 0,
            kind: FileExtentKind::Inline { data: b"hello" },
        };
        let b = inline.to_bytes();
        assert_eq!(b.len(), 26);
        assert_eq!(b[20], FILE_EXTENT_INLINE);
        assert_eq!(FileExtent::parse(&b).unwrap(), inline);
        for prealloc in [false, true] {
            let e = FileExtent {
                generation: 10,
                ram_bytes: 1 << 17,
                compression: COMPRESS_ZSTD,
                encryption: 0,
                other_encoding: 0,
                kind: FileExtentKind::Extent {
                    prealloc,
                    disk_bytenr: 1 << 30,
                    disk_num_bytes: 8192,
                    offset: 4096,
                    num_bytes: 4096,
                },
            };
            let b = e.to_bytes();
            assert_eq!(b.len(), FILE_EXTENT_SIZE);
            assert_eq!(FileExtent::parse(&b).unwrap(), e);
            assert!(FileExtent::parse(&b[..52]).is_err());
        }
    }
}
