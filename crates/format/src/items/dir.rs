//! Directory entries and extended attributes: DIR_ITEM, DIR_INDEX and
//! XATTR_ITEM share one entry layout (`btrfs_dir_item`).
//!
//! ```text
//! location key (17), transid u64, data_len u16, name_len u16, type u8   (30)
//! name (name_len), data (data_len: the value of an xattr, else empty)
//! ```

use crate::bytes::{le16, le64, put_u16, put_u64, slice};
use crate::checksum::name_hash;
use crate::consts::{DIR_INDEX, DIR_ITEM, XATTR_ITEM};
use crate::error::Result;
use crate::key::{Key, KEY_SIZE};

/// Bytes before the name in one entry.
pub const DIR_ITEM_HEADER: usize = KEY_SIZE + 8 + 2 + 2 + 1;

/// One entry of a DIR_ITEM, DIR_INDEX or XATTR_ITEM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntry<'a> {
    /// What the name points at: (ino, INODE_ITEM, 0), or (subvol id,
    /// ROOT_ITEM, -1) for a subvolume; zero for an xattr.
    pub location: Key,
    pub transid: u64,
    /// FT_* type (FT_XATTR for xattrs).
    pub file_type: u8,
    pub name: &'a [u8],
    /// The xattr value; empty for directory entries.
    pub data: &'a [u8],
}

fn len16(what: &str, b: &[u8]) -> u16 {
    u16::try_from(b.len()).unwrap_or_else(|_| panic!("{what} longer than 65535 bytes"))
}

impl DirEntry<'_> {
    pub fn encoded_len(&self) -> usize {
        DIR_ITEM_HEADER + self.name.len() + self.data.len()
    }

    /// Appends this entry. Entries whose name hashes collide share one
    /// DIR_ITEM / XATTR_ITEM: append the second to the first's bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.location.encode(out);
        put_u64(out, self.transid);
        put_u16(out, len16("xattr value", self.data));
        put_u16(out, len16("name", self.name));
        out.push(self.file_type);
        out.extend_from_slice(self.name);
        out.extend_from_slice(self.data);
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        self.encode(&mut v);
        v
    }
}

/// Key of the DIR_ITEM for `name` in directory `dir`.
pub fn dir_item_key(dir: u64, name: &[u8]) -> Key {
    Key::new(dir, DIR_ITEM, name_hash(name))
}

/// Key of the DIR_INDEX of directory `dir` at sequence `index`.
pub fn dir_index_key(dir: u64, index: u64) -> Key {
    Key::new(dir, DIR_INDEX, index)
}

/// Key of the XATTR_ITEM for attribute `name` of inode `ino`.
pub fn xattr_item_key(ino: u64, name: &[u8]) -> Key {
    Key::new(ino, XATTR_ITEM, name_hash(name))
}

/// Decodes every entry packed in a DIR_ITEM / DIR_INDEX / XATTR_ITEM (several
/// share an item when their name hashes collide).
pub fn parse_dir_entries(data: &[u8]) -> Result<Vec<DirEntry<'_>>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < data.len() {
        let h = slice(data, off, DIR_ITEM_HEADER, "DIR_ITEM header")?;
        let location = Key::parse(h, 0)?;
        let transid = le64(h, KEY_SIZE);
        let data_len = le16(h, KEY_SIZE + 8) as usize;
        let name_len = le16(h, KEY_SIZE + 10) as usize;
        let file_type = h[KEY_SIZE + 12];
        let name = slice(data, off + DIR_ITEM_HEADER, name_len, "DIR_ITEM name")?;
        let value = slice(
            data,
            off + DIR_ITEM_HEADER + name_len,
            data_len,
            "DIR_ITEM data",
        )?;
        out.push(DirEntry {
            location,
            transid,
            file_type,
            name,
            data: value,
        });
        off += DIR_ITEM_HEADER + name_len + data_len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::*;

    #[test]
    fn entries_round_trip_and_share_an_item() {
        let file = DirEntry {
            location: Key::new(257, INODE_ITEM, 0),
            transid: 7,
            file_type: FT_REG_FILE,
            name: b"hello",
            data: b"",
        };
        let xattr = DirEntry {
            location: Key::default(),
            transid: 8,
            file_type: FT_XATTR,
            name: b"user.k",
            data: b"value bytes",
        };
        let mut item = file.to_bytes();
        assert_eq!(item.len(), 30 + 5);
        xattr.encode(&mut item);
        assert_eq!(item.len(), file.encoded_len() + xattr.encoded_len());
        assert_eq!(parse_dir_entries(&item).unwrap(), [file, xattr]);
        for n in 1..item.len() {
            if n != file.encoded_len() {
                assert!(parse_dir_entries(&item[..n]).is_err(), "{n}");
            }
        }
        assert_eq!(dir_item_key(256, b"hello").offset, name_hash(b"hello"));
        assert_eq!(xattr_item_key(257, b"user.k").item_type, XATTR_ITEM);
        assert_eq!(dir_index_key(256, 2), Key::new(256, DIR_INDEX, 2));
    }
}
