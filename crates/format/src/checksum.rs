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

    /// The checksums of `data`'s sectors of `sectorsize` bytes, each
    /// `size()` bytes, one after another (as csum items hold them).
    pub fn sector_sums(self, data: &[u8], sectorsize: usize) -> Vec<u8> {
        let mut sums = Vec::with_capacity(data.len().div_ceil(sectorsize) * self.size());
        for sector in data.chunks(sectorsize) {
            sums.extend_from_slice(&self.compute(sector)[..self.size()]);
        }
        sums
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

/// The hash btrfs uses for DIR_ITEM and XATTR_ITEM key offsets: the
/// kernel's `btrfs_name_hash`, `crc32c((u32)~1, name, len)`, where the
/// kernel's crc32c is the bare update (no inversion in or out).
pub fn name_hash(name: &[u8]) -> u64 {
    // crc32c_append(c, d) is the standard (inverted in and out) update, so
    // inverting around it gives the raw update seeded with ~1.
    (!crc32c::crc32c_append(!0xFFFF_FFFEu32, name)) as u64
}

/// The hash of an INODE_EXTREF key offset: the kernel's `btrfs_extref_hash`,
/// `crc32c(parent, name, len)` with the bare update, the u64 parent passed
/// as the u32 seed (so only its low 32 bits count).
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
    fn sector_sums_are_each_sectors_checksum_in_turn() {
        let data: Vec<u8> = (0..3 * 4096).map(|i| (i / 7) as u8).collect();
        let ct = CsumType::Xxhash64;
        let sums = ct.sector_sums(&data, 4096);
        assert_eq!(sums.len(), 3 * 8);
        for (i, s) in sums.chunks(8).enumerate() {
            assert_eq!(s, &ct.compute(&data[i * 4096..(i + 1) * 4096])[..8]);
        }
    }

    #[test]
    fn name_hash_matches_kernel_made_keys() {
        // DIR_ITEM / XATTR_ITEM key offsets in the committed kernel-made
        // small-crc32c image (crates/engine/tests/reencode.rs checks all).
        assert_eq!(name_hash(b"prealloc"), 80324327);
        assert_eq!(name_hash(b"times"), 202599670);
        assert_eq!(name_hash(b"snap2-ro"), 226513673);
        assert_eq!(name_hash(b"files"), 1448230915);
        assert_eq!(name_hash(b"user.on-dir"), 3280583798);
    }

    #[test]
    fn extref_hash_matches_progs_made_keys() {
        // No committed image has INODE_EXTREF items. These key offsets come
        // from btrfs-progs 6.2 (`mkfs.btrfs --rootdir` of a directory with
        // 120 hard links named nNNN_ + 180 'x', which overflow INODE_REF),
        // whose hashing code is the kernel's.
        let name = |n: &str| {
            let mut v = format!("n{n}_").into_bytes();
            v.extend_from_slice(&[b'x'; 180]);
            v
        };
        assert_eq!(extref_hash(256, &name("021")), 75038791);
        assert_eq!(extref_hash(256, &name("095")), 380780330);
        // Only the low 32 bits of the parent seed the hash.
        assert_eq!(
            extref_hash(256 | (7 << 32), &name("021")),
            extref_hash(256, &name("021"))
        );
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
