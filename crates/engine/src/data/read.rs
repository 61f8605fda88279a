//! Reads of file data through validated extents ([`Extent`]): checksummed
//! reads of disk ranges, decompression with a one-extent cache, inline
//! data. Written once over where the checksums come from
//! ([`ItemSource`]): committed file reads ([`crate::fs::file::FileHandle`])
//! and send read the committed csum tree, a transaction's reads
//! ([`crate::tx::Trans::read_file`]) its running one.

use crate::data::extent::{Extent, ExtentKind};
use crate::disk_io::MAX_DATA_READ;
use crate::error::{Error, FormatContext, Result};
use crate::items::{describe_tree, ItemSource};
use std::sync::Arc;
use ubtrfs_format::compress::decompress;
use ubtrfs_format::consts::COMPRESS_NONE;

/// Most bytes one read of an uncompressed extent fetches at once.
pub const READ_CHUNK: u64 = 1 << 20;

/// Reads the data of one inode's extents (the inode can be changed with
/// [`DataReader::set_inode`]; the decompressed-extent cache is kept).
pub struct DataReader {
    tree: u64,
    ino: u64,
    nodatasum: bool,
    /// The last decompressed extent: (disk_bytenr, ram_bytes, data).
    decompressed: Option<(u64, u64, Arc<Vec<u8>>)>,
}

impl DataReader {
    /// A reader of inode `ino` of tree `tree`; `nodatasum` reads without
    /// checksums.
    pub fn new(tree: u64, ino: u64, nodatasum: bool) -> Self {
        DataReader {
            tree,
            ino,
            nodatasum,
            decompressed: None,
        }
    }

    /// Reads for inode `ino` of the same tree from now on.
    pub fn set_inode(&mut self, ino: u64, nodatasum: bool) {
        self.ino = ino;
        self.nodatasum = nodatasum;
    }

    fn here(&self) -> String {
        format!("{} inode {}", describe_tree(self.tree), self.ino)
    }

    /// Verified bytes of the sector-aligned range `[logical, logical +
    /// len)`, from whichever copy has them right (a sector no copy of
    /// which matches its checksum is an error, as the kernel's EIO);
    /// errors name the inode.
    pub fn read_verified<S: ItemSource + ?Sized>(
        &self,
        src: &S,
        logical: u64,
        len: u64,
    ) -> Result<Vec<u8>> {
        // The length comes from an extent item: bounded before the
        // checksum list is sized by it.
        if len > MAX_DATA_READ as u64 {
            return Err(Error::corrupt(
                format!("data at logical {logical} ({})", self.here()),
                format!("read of {len} bytes is larger than {MAX_DATA_READ}"),
            ));
        }
        let mut csums = match self.nodatasum {
            false => src.data_csums(logical, len)?,
            true => Vec::new(),
        };
        if csums.iter().all(Option::is_none) {
            csums.clear();
        }
        src.fs_info()
            .read_data(logical, len as usize, &csums)
            .map_err(|e| match e {
                Error::Corrupt { at, detail } => Error::Corrupt {
                    at: format!("{at} ({})", self.here()),
                    detail,
                },
                other => other,
            })
    }

    /// Verified bytes of `[logical, logical + len)` at any alignment (the
    /// sectors around it are read and checked).
    pub fn read_disk<S: ItemSource + ?Sized>(
        &self,
        src: &S,
        logical: u64,
        len: u64,
    ) -> Result<Vec<u8>> {
        let ss = src.fs_info().sectorsize as u64;
        let a0 = logical / ss * ss;
        let a1 = logical
            .checked_add(len)
            .and_then(|e| e.checked_next_multiple_of(ss))
            .ok_or_else(|| {
                Error::corrupt(self.here(), format!("data range {logical}+{len} overflows"))
            })?;
        let mut data = self.read_verified(src, a0, a1 - a0)?;
        let skip = (logical - a0) as usize;
        data.truncate(skip + len as usize);
        data.drain(..skip);
        Ok(data)
    }

    /// The uncompressed data of a compressed extent (kept for the next
    /// call: reads of one extent in pieces decompress it once).
    pub fn decompressed<S: ItemSource + ?Sized>(
        &mut self,
        src: &S,
        disk_bytenr: u64,
        disk_num_bytes: u64,
        compression: u8,
        ram_bytes: u64,
    ) -> Result<Arc<Vec<u8>>> {
        if let Some((b, r, d)) = &self.decompressed {
            if *b == disk_bytenr && *r == ram_bytes {
                return Ok(d.clone());
            }
        }
        let raw = self.read_verified(src, disk_bytenr, disk_num_bytes)?;
        let ss = src.fs_info().sectorsize;
        let plain = decompress(compression, &raw, ram_bytes as usize, ss).at(|| {
            format!(
                "compressed extent at logical {disk_bytenr} ({})",
                self.here()
            )
        })?;
        let plain = Arc::new(plain);
        self.decompressed = Some((disk_bytenr, ram_bytes, plain.clone()));
        Ok(plain)
    }

    /// Fills the start of `out` from extent `e` at file offset `pos`
    /// (inside `e`); returns how many bytes (fewer than `out.len()` at the
    /// end of `e`, or after [`READ_CHUNK`] of uncompressed data).
    pub fn read_extent<S: ItemSource + ?Sized>(
        &mut self,
        src: &S,
        e: &Extent,
        pos: u64,
        out: &mut [u8],
    ) -> Result<usize> {
        let n = out.len().min(e.end.saturating_sub(pos) as usize);
        let rel = pos - e.start;
        match &e.kind {
            ExtentKind::Hole | ExtentKind::Prealloc { .. } => out[..n].fill(0),
            ExtentKind::Inline { ram_bytes, data } => {
                let plain;
                let src: &[u8] = if e.compression == COMPRESS_NONE {
                    data
                } else {
                    let ss = src.fs_info().sectorsize;
                    plain = decompress(e.compression, data, *ram_bytes as usize, ss)
                        .at(|| format!("{} inline extent", self.here()))?;
                    &plain
                };
                copy_or_zero(&mut out[..n], src, rel);
            }
            ExtentKind::Regular {
                disk_bytenr,
                disk_num_bytes,
                offset,
                ram_bytes,
                ..
            } => {
                if e.compression == COMPRESS_NONE {
                    let n = (n as u64).min(READ_CHUNK);
                    // Inside the extent: the decoder checked offset +
                    // num_bytes <= disk_num_bytes.
                    let data = self.read_disk(src, disk_bytenr + offset + rel, n)?;
                    out[..n as usize].copy_from_slice(&data);
                    return Ok(n as usize);
                }
                let plain = self.decompressed(
                    src,
                    *disk_bytenr,
                    *disk_num_bytes,
                    e.compression,
                    *ram_bytes,
                )?;
                copy_or_zero(&mut out[..n], &plain, offset + rel);
            }
        }
        Ok(n)
    }
}

/// Copies `src[from..]` into `out`, zero-filling what `src` does not have.
pub fn copy_or_zero(out: &mut [u8], src: &[u8], from: u64) {
    let from = from.min(src.len() as u64) as usize;
    let k = (src.len() - from).min(out.len());
    out[..k].copy_from_slice(&src[from..from + k]);
    out[k..].fill(0);
}

#[cfg(test)]
mod tests {
    use super::copy_or_zero;

    #[test]
    fn copy_or_zero_pads() {
        let mut out = [9u8; 6];
        copy_or_zero(&mut out, b"abcd", 2);
        assert_eq!(&out, b"cd\0\0\0\0");
        copy_or_zero(&mut out, b"abcd", 10);
        assert_eq!(out, [0; 6]);
        copy_or_zero(&mut out[..2], b"abcd", 0);
        assert_eq!(&out[..2], b"ab");
    }
}
