//! The four checksum algorithms btrfs uses for metadata and data.

use crate::error::{FormatError, Result};
use blake2::digest::consts::U32;
use blake2::{Blake2b, Digest};
use sha2::Sha256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsumType {
    Crc32c,
    Xxhash64,
    Sha256,
    Blake2b,
}

impl CsumType {
    pub fn from_raw(v: u16) -> Result<Self> {
        Ok(match v {
            0 => CsumType::Crc32c,
            1 => CsumType::Xxhash64,
            2 => CsumType::Sha256,
            3 => CsumType::Blake2b,
            other => return Err(FormatError::UnknownCsumType(other)),
        })
    }

    /// The superblock's csum_type value.
    pub fn to_raw(self) -> u16 {
        match self {
            CsumType::Crc32c => 0,
            CsumType::Xxhash64 => 1,
            CsumType::Sha256 => 2,
            CsumType::Blake2b => 3,
        }
    }

    /// Bytes each checksum takes in trees and the csum tree.
    pub fn size(self) -> usize {
        match self {
            CsumType::Crc32c => 4,
            CsumType::Xxhash64 => 8,
            CsumType::Sha256 | CsumType::Blake2b => 32,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CsumType::Crc32c => "crc32c",
            CsumType::Xxhash64 => "xxhash64",
            CsumType::Sha256 => "sha256",
            CsumType::Blake2b => "blake2b",
        }
    }

    /// Computes the checksum of `data` into a 32-byte buffer (unused tail
    /// zeroed, as stored on disk).
    pub fn compute(self, data: &[u8]) -> [u8; 32] {
        let mut out = [0u8; 32];
        match self {
            CsumType::Crc32c => out[..4].copy_from_slice(&crc32c::crc32c(data).to_le_bytes()),
            CsumType::Xxhash64 => {
                out[..8].copy_from_slice(&xxhash_rust::xxh64::xxh64(data, 0).to_le_bytes())
            }
            CsumType::Sha256 => out.copy_from_slice(&Sha256::digest(data)),
            CsumType::Blake2b => out.copy_from_slice(&Blake2b::<U32>::digest(data)),
        }
        out
    }

    /// Checks `stored` (at least `size()` bytes) against the checksum of `data`.
    pub fn verify(self, data: &[u8], stored: &[u8]) -> Result<()> {
        let n = self.size();
        let computed = self.compute(data);
        if stored.len() < n || stored[..n] != computed[..n] {
            return Err(FormatError::CsumMismatch {
                stored: hex(&stored[..n.min(stored.len())]),
                computed: hex(&computed[..n]),
            });
        }
        Ok(())
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The hash btrfs uses for DIR_ITEM and XATTR_ITEM key offsets: crc32c seeded
/// with ~1, without the final inversion.
pub fn name_hash(name: &[u8]) -> u64 {
    // crc32c_append(c, d) is the standard (inverted in and out) update, so
    // inverting around it gives the raw update seeded with ~1.
    (!crc32c::crc32c_append(!0xFFFF_FFFEu32, name)) as u64
}

/// The hash of an INODE_EXTREF key offset: crc32c of the name seeded with the
/// parent inode number (raw update, as the kernel computes it).
pub fn extref_hash(parent: u64, name: &[u8]) -> u64 {
    (!crc32c::crc32c_append(!(parent as u32), name)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_vector() {
        // RFC 3720 test vector: 32 bytes of zeros.
        let c = CsumType::Crc32c.compute(&[0u8; 32]);
        assert_eq!(&c[..4], &0x8a9136aau32.to_le_bytes());
    }

    #[test]
    fn sizes() {
        assert_eq!(CsumType::from_raw(3).unwrap().size(), 32);
        assert!(CsumType::from_raw(9).is_err());
        for v in 0..4 {
            assert_eq!(CsumType::from_raw(v).unwrap().to_raw(), v);
        }
    }
}
