//! Small items: checksum items, UUID tree items, orphan items.

use crate::bytes::{le64, put_u64};
use crate::checksum::CsumType;
use crate::consts::{EXTENT_CSUM, EXTENT_CSUM_OBJECTID, ORPHAN_ITEM, ORPHAN_OBJECTID};
use crate::error::{invalid, Result};
use crate::key::Key;

/// Key of the EXTENT_CSUM item whose first checksum covers the data sector
/// at logical address `logical`.
pub fn csum_item_key(logical: u64) -> Key {
    Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, logical)
}

/// The checksums of an EXTENT_CSUM item (one per data sector, back to
/// back): errors unless the item is a whole number of `csum_size` entries.
pub fn csum_item_entries(data: &[u8], csum_size: usize) -> Result<std::slice::ChunksExact<'_, u8>> {
    if csum_size == 0 || !data.len().is_multiple_of(csum_size) {
        return Err(invalid(
            "EXTENT_CSUM",
            format!("{} bytes is not a multiple of {csum_size}", data.len()),
        ));
    }
    Ok(data.chunks_exact(csum_size))
}

/// Appends one checksum as stored in an EXTENT_CSUM item: the first
/// `csum_type.size()` bytes of [`CsumType::compute`]'s output.
pub fn push_csum(out: &mut Vec<u8>, csum_type: CsumType, csum: &[u8; 32]) {
    out.extend_from_slice(&csum[..csum_type.size()]);
}

/// The UUID tree key of `uuid`: its two halves as little-endian u64s, as
/// objectid and offset. `item_type` is UUID_KEY_SUBVOL or
/// UUID_KEY_RECEIVED_SUBVOL.
pub fn uuid_key(uuid: &[u8; 16], item_type: u8) -> Key {
    Key::new(le64(uuid, 0), item_type, le64(uuid, 8))
}

/// The UUID a UUID tree key stands for (inverse of [`uuid_key`]).
pub fn key_uuid(key: &Key) -> [u8; 16] {
    let mut u = [0u8; 16];
    u[..8].copy_from_slice(&key.objectid.to_le_bytes());
    u[8..].copy_from_slice(&key.offset.to_le_bytes());
    u
}

/// The subvolume ids in a UUID tree item (little-endian u64s).
pub fn parse_uuid_item(data: &[u8]) -> Result<Vec<u64>> {
    if !data.len().is_multiple_of(8) {
        return Err(invalid(
            "UUID item",
            format!("{} bytes is not a multiple of 8", data.len()),
        ));
    }
    Ok(data.chunks_exact(8).map(|c| le64(c, 0)).collect())
}

/// Appends subvolume ids to a UUID tree item's bytes.
pub fn encode_uuid_item(ids: &[u64], out: &mut Vec<u8>) {
    for &id in ids {
        put_u64(out, id);
    }
}

/// Key of the (empty) orphan item for inode `ino` in an fs tree, or for a
/// dead subvolume `ino` in the root tree.
pub fn orphan_key(ino: u64) -> Key {
    Key::new(ORPHAN_OBJECTID, ORPHAN_ITEM, ino)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::UUID_KEY_SUBVOL;

    #[test]
    fn uuid_items() {
        let u: [u8; 16] = std::array::from_fn(|i| i as u8 + 1);
        let k = uuid_key(&u, UUID_KEY_SUBVOL);
        assert_eq!(k.objectid, 0x0807060504030201);
        assert_eq!(key_uuid(&k), u);
        let mut b = Vec::new();
        encode_uuid_item(&[256, 257], &mut b);
        assert_eq!(parse_uuid_item(&b).unwrap(), [256, 257]);
        assert!(parse_uuid_item(&b[..9]).is_err());
    }

    #[test]
    fn csum_items() {
        let mut b = Vec::new();
        for d in [&b"a"[..], b"b"] {
            push_csum(&mut b, CsumType::Crc32c, &CsumType::Crc32c.compute(d));
        }
        assert_eq!(b.len(), 8);
        let e: Vec<&[u8]> = csum_item_entries(&b, 4).unwrap().collect();
        assert_eq!(e[1], &CsumType::Crc32c.compute(b"b")[..4]);
        assert!(csum_item_entries(&b, 3).is_err());
        assert!(csum_item_entries(&b, 0).is_err());
        assert_eq!(csum_item_key(4096).offset, 4096);
        assert_eq!(orphan_key(257).objectid, ORPHAN_OBJECTID);
    }
}
