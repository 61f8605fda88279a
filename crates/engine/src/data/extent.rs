//! The one validated decoder of EXTENT_DATA items. File reads, the FUSE
//! mount (through [`crate::fs::file::FileHandle`]) and send all take their
//! extents from [`Extent::decode`], which refuses what the kernel's
//! tree-checker refuses and whatever would make later arithmetic overflow
//! or size an allocation from an unchecked on-disk value:
//!
//! * encrypted or otherwise encoded extents (unsupported);
//! * compression above zstd;
//! * a key offset, `disk_bytenr`, `disk_num_bytes`, `offset` or
//!   `num_bytes` not sector aligned; a disk range or a file range that
//!   overflows;
//! * compressed extents with more than 128 KiB on disk or in memory, or
//!   whose `offset + num_bytes` is beyond `ram_bytes`; uncompressed regular
//!   extents whose `offset + num_bytes` is beyond `disk_num_bytes`;
//! * inline extents not at file offset 0, with more than a sector of data
//!   (uncompressed: item data length unequal to `ram_bytes`).
//!
//! So for every decoded extent `start <= end` holds without overflow,
//! every disk address a read computes stays inside `[disk_bytenr,
//! disk_bytenr + disk_num_bytes)`, and no buffer sized from the item is
//! larger than 128 KiB (compressed), a sector (inline) or the caller's
//! read chunk (uncompressed).

use crate::ctree::Tree;
use crate::error::{Error, FormatContext, Result};
use ubtrfs_format::consts::{COMPRESS_NONE, COMPRESS_ZSTD, MAX_UNCOMPRESSED};
use ubtrfs_format::items::{FileExtent, FileExtentKind};
use ubtrfs_format::key::Key;

/// What an EXTENT_DATA item maps its file range to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtentKind {
    /// Data inside the tree item (`data` as stored, compressed when the
    /// extent's compression is not none); `ram_bytes` is its uncompressed
    /// length (at most a sector).
    Inline { ram_bytes: u64, data: Vec<u8> },
    /// Data in an extent on disk (possibly compressed, possibly shared):
    /// the file range reads `[offset, offset + num_bytes)` of the extent's
    /// `ram_bytes` uncompressed bytes.
    Regular {
        disk_bytenr: u64,
        disk_num_bytes: u64,
        offset: u64,
        num_bytes: u64,
        ram_bytes: u64,
    },
    /// Allocated, never written: reads as zeros.
    Prealloc {
        disk_bytenr: u64,
        disk_num_bytes: u64,
        offset: u64,
        num_bytes: u64,
    },
    /// An explicit hole item (`disk_bytenr` 0; filesystems without
    /// no-holes).
    Hole,
}

/// One validated EXTENT_DATA item: the file range `[start, end)` it maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    /// File offset (the key offset).
    pub start: u64,
    /// End of the range; inline extents end at the sector boundary after
    /// their data (the kernel's btrfs_file_extent_end).
    pub end: u64,
    pub generation: u64,
    pub compression: u8,
    pub kind: ExtentKind,
}

impl Extent {
    /// Decodes and validates the EXTENT_DATA item `key` of `tree`; errors
    /// name the tree and key.
    pub fn decode(tree: Tree, key: &Key, data: &[u8], sectorsize: u64) -> Result<Extent> {
        let here = || format!("{} inode {} key {key}", tree.describe(), key.objectid);
        let fe = FileExtent::parse(data).at(here)?;
        let bad = |d: String| Error::corrupt(here(), d);
        if fe.encryption != 0 || fe.other_encoding != 0 {
            return Err(Error::Unsupported(format!(
                "{}: encrypted or encoded extent",
                here()
            )));
        }
        if fe.compression > COMPRESS_ZSTD {
            return Err(bad(format!("unknown compression {}", fe.compression)));
        }
        let ss = sectorsize;
        let compressed = fe.compression != COMPRESS_NONE;
        let (kind, end) = match fe.kind {
            FileExtentKind::Inline { data } => {
                if key.offset != 0 {
                    return Err(bad(format!(
                        "inline extent at file offset {} (must be 0)",
                        key.offset
                    )));
                }
                let ram = fe.ram_bytes;
                if !compressed && data.len() as u64 != ram {
                    return Err(bad(format!(
                        "inline extent holds {} bytes but ram_bytes is {ram}",
                        data.len()
                    )));
                }
                if ram > ss || data.len() as u64 > ss {
                    return Err(bad(format!(
                        "inline extent of {ram} bytes ({} stored) is larger than a sector",
                        data.len()
                    )));
                }
                let kind = ExtentKind::Inline {
                    ram_bytes: ram,
                    data: data.to_vec(),
                };
                (kind, ram.div_ceil(ss) * ss)
            }
            FileExtentKind::Extent {
                prealloc,
                disk_bytenr,
                disk_num_bytes,
                offset,
                num_bytes,
            } => {
                for (what, v) in [
                    ("key offset", key.offset),
                    ("disk_bytenr", disk_bytenr),
                    ("disk_num_bytes", disk_num_bytes),
                    ("offset", offset),
                    ("num_bytes", num_bytes),
                ] {
                    if !v.is_multiple_of(ss) {
                        return Err(bad(format!("{what} {v} is not sector aligned")));
                    }
                }
                if disk_bytenr.checked_add(disk_num_bytes).is_none() {
                    return Err(bad(format!(
                        "extent disk range {disk_bytenr}+{disk_num_bytes} overflows"
                    )));
                }
                let data_end = offset.checked_add(num_bytes).ok_or_else(|| {
                    bad(format!("offset {offset} + num_bytes {num_bytes} overflows"))
                })?;
                let end = key.offset.checked_add(num_bytes).ok_or_else(|| {
                    bad(format!(
                        "file range {} + num_bytes {num_bytes} overflows",
                        key.offset
                    ))
                })?;
                let kind = if disk_bytenr == 0 {
                    ExtentKind::Hole
                } else if prealloc {
                    ExtentKind::Prealloc {
                        disk_bytenr,
                        disk_num_bytes,
                        offset,
                        num_bytes,
                    }
                } else {
                    if compressed
                        && (data_end > fe.ram_bytes
                            || fe.ram_bytes > MAX_UNCOMPRESSED
                            || disk_num_bytes > MAX_UNCOMPRESSED)
                    {
                        return Err(bad(format!(
                            "compressed extent offset {offset} num_bytes {num_bytes} ram_bytes {} disk_num_bytes {disk_num_bytes}",
                            fe.ram_bytes
                        )));
                    }
                    if !compressed && data_end > disk_num_bytes {
                        return Err(bad(format!(
                            "extent offset {offset} + num_bytes {num_bytes} beyond disk_num_bytes {disk_num_bytes}"
                        )));
                    }
                    ExtentKind::Regular {
                        disk_bytenr,
                        disk_num_bytes,
                        offset,
                        num_bytes,
                        ram_bytes: fe.ram_bytes,
                    }
                };
                (kind, end)
            }
        };
        Ok(Extent {
            start: key.offset,
            end,
            generation: fe.generation,
            compression: fe.compression,
            kind,
        })
    }

    /// Whether reading the range gives stored data (inline or regular),
    /// what SEEK_DATA counts as data.
    pub fn is_data(&self) -> bool {
        matches!(
            self.kind,
            ExtentKind::Inline { .. } | ExtentKind::Regular { .. }
        )
    }

    pub fn is_inline(&self) -> bool {
        matches!(self.kind, ExtentKind::Inline { .. })
    }

    /// A regular extent with data: (disk_bytenr, disk_num_bytes, offset,
    /// num_bytes).
    pub fn regular(&self) -> Option<(u64, u64, u64, u64)> {
        match self.kind {
            ExtentKind::Regular {
                disk_bytenr,
                disk_num_bytes,
                offset,
                num_bytes,
                ..
            } => Some((disk_bytenr, disk_num_bytes, offset, num_bytes)),
            _ => None,
        }
    }

    /// The disk extent a regular or preallocated extent references:
    /// (disk_bytenr, disk_num_bytes, offset into it); None for inline
    /// extents and holes.
    pub fn disk_extent(&self) -> Option<(u64, u64, u64)> {
        match self.kind {
            ExtentKind::Regular {
                disk_bytenr,
                disk_num_bytes,
                offset,
                ..
            }
            | ExtentKind::Prealloc {
                disk_bytenr,
                disk_num_bytes,
                offset,
                ..
            } => Some((disk_bytenr, disk_num_bytes, offset)),
            _ => None,
        }
    }

    /// Where the range is on disk: (disk_bytenr, offset into the extent)
    /// for regular and preallocated extents.
    pub fn disk(&self) -> Option<(u64, u64)> {
        match self.kind {
            ExtentKind::Prealloc {
                disk_bytenr,
                offset,
                ..
            } => Some((disk_bytenr, offset)),
            _ => self.regular().map(|(db, _, off, _)| (db, off)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ubtrfs_format::consts::{COMPRESS_ZLIB, EXTENT_DATA};

    const SS: u64 = 4096;

    fn tree() -> Tree {
        Tree {
            id: 257,
            bytenr: 0,
            level: 0,
            generation: 1,
        }
    }

    fn item(c: u8, ram: u64, kind: FileExtentKind<'_>) -> Vec<u8> {
        let fe = FileExtent {
            generation: 7,
            ram_bytes: ram,
            compression: c,
            encryption: 0,
            other_encoding: 0,
            kind,
        };
        fe.to_bytes()
    }

    fn regular(c: u8, db: u64, dn: u64, off: u64, nb: u64, ram: u64) -> Vec<u8> {
        let kind = FileExtentKind::Extent {
            prealloc: false,
            disk_bytenr: db,
            disk_num_bytes: dn,
            offset: off,
            num_bytes: nb,
        };
        item(c, ram, kind)
    }

    fn inline(c: u8, ram: u64, data: &[u8]) -> Vec<u8> {
        item(c, ram, FileExtentKind::Inline { data })
    }

    fn decode_at(off: u64, item: &[u8]) -> Result<Extent> {
        Extent::decode(tree(), &Key::new(260, EXTENT_DATA, off), item, SS)
    }

    fn refused(off: u64, item: &[u8], why: &str) {
        let e = decode_at(off, item).expect_err(why);
        let msg = e.to_string();
        assert!(
            msg.contains("subvolume 257 tree inode 260 key"),
            "{why}: {msg}"
        );
    }

    #[test]
    fn good_items_decode() {
        let e = decode_at(8192, &regular(0, 1 << 20, 3 * SS, SS, SS, 3 * SS)).unwrap();
        assert_eq!((e.start, e.end), (8192, 8192 + SS));
        assert_eq!(e.regular(), Some((1 << 20, 3 * SS, SS, SS)));
        let e = decode_at(0, &regular(COMPRESS_ZLIB, 1 << 20, SS, 0, 32 * SS, 32 * SS)).unwrap();
        assert_eq!(e.end, 32 * SS);
        let e = decode_at(0, &inline(0, 5, b"hello")).unwrap();
        assert_eq!((e.start, e.end), (0, SS));
        assert!(e.is_inline() && e.is_data());
        let e = decode_at(SS, &regular(0, 0, 0, 0, 2 * SS, 0)).unwrap();
        assert_eq!((e.kind.clone(), e.end), (ExtentKind::Hole, 3 * SS));
        assert!(!e.is_data());
    }

    #[test]
    fn hostile_items_are_refused() {
        // A length near u64::MAX: unaligned, and beyond the extent.
        refused(
            0,
            &regular(0, 1 << 20, SS, 0, u64::MAX - 10, SS),
            "num_bytes",
        );
        // Aligned but overflowing the file range.
        refused(2 * SS, &regular(0, 0, 0, 0, u64::MAX / SS * SS, 0), "end");
        // An aligned hole-sized num_bytes beyond the disk extent.
        refused(0, &regular(0, 1 << 20, SS, 0, 1 << 40, SS), "beyond disk");
        // Unknown compression.
        refused(0, &regular(9, 1 << 20, SS, 0, SS, SS), "compression 9");
        // Unaligned disk_bytenr, disk_num_bytes, offset, key offset.
        refused(0, &regular(0, (1 << 20) + 1, SS, 0, SS, SS), "bytenr");
        refused(0, &regular(0, 1 << 20, SS + 3, 0, SS, SS), "disk_num_bytes");
        refused(0, &regular(0, 1 << 20, 2 * SS, 7, SS, SS), "offset");
        refused(5, &regular(0, 1 << 20, SS, 0, SS, SS), "key offset");
        // A disk range running past the end of the address space.
        let top = u64::MAX / SS * SS;
        refused(0, &regular(0, top, 2 * SS, 0, SS, SS), "disk overflow");
        // Compressed extents are at most 128 KiB either way.
        refused(
            0,
            &regular(COMPRESS_ZLIB, 1 << 20, 1 << 30, 0, SS, SS),
            "disk size",
        );
        refused(
            0,
            &regular(COMPRESS_ZLIB, 1 << 20, SS, 0, SS, 1 << 30),
            "ram size",
        );
        refused(
            0,
            &regular(COMPRESS_ZLIB, 1 << 20, SS, SS, SS, SS),
            "past ram",
        );
        // Inline: length mismatch, too large, not at offset 0.
        refused(0, &inline(0, 6, b"hello"), "inline length");
        refused(0, &inline(0, 4, b"hello"), "inline length");
        refused(0, &inline(COMPRESS_ZLIB, 1 << 20, b"xx"), "inline ram");
        refused(SS, &inline(0, 5, b"hello"), "inline offset");
        // Truncated item.
        refused(0, &regular(0, 1 << 20, SS, 0, SS, SS)[..40], "short");
    }
}
