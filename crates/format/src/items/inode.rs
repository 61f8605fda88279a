//! Inode items and the names linking an inode into directories:
//! INODE_ITEM, INODE_REF, INODE_EXTREF.

use crate::bytes::{le32, le64, put_u16, put_u32, put_u64, slice, u16_at, u64_at};
use crate::checksum::extref_hash;
use crate::consts::{INODE_EXTREF, INODE_ITEM, INODE_REF};
use crate::error::Result;
use crate::key::Key;

pub const INODE_ITEM_SIZE: usize = 160;
/// Bytes before the name in one INODE_REF entry: index u64, name_len u16.
pub const INODE_REF_HEADER: usize = 10;
/// Bytes before the name in one INODE_EXTREF entry: parent u64, index u64,
/// name_len u16.
pub const INODE_EXTREF_HEADER: usize = 18;

/// `btrfs_timespec`: seconds (signed) and nanoseconds, 12 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    pub const ENCODED_LEN: usize = 12;

    /// Reads from a slice already checked to hold it.
    pub(crate) fn at(b: &[u8], off: usize) -> Self {
        Timespec {
            sec: le64(b, off) as i64,
            nsec: le32(b, off + 8),
        }
    }

    pub fn parse(data: &[u8]) -> Result<Self> {
        Ok(Self::at(slice(data, 0, Self::ENCODED_LEN, "timespec")?, 0))
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.sec as u64);
        put_u32(out, self.nsec);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InodeItem {
    pub generation: u64,
    pub transid: u64,
    pub size: u64,
    pub nbytes: u64,
    pub block_group: u64,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub rdev: u64,
    pub flags: u64,
    pub sequence: u64,
    pub atime: Timespec,
    pub ctime: Timespec,
    pub mtime: Timespec,
    pub otime: Timespec,
}

impl InodeItem {
    pub const ENCODED_LEN: usize = INODE_ITEM_SIZE;
    /// The four reserved u64s at offset 80, which the kernel zeroes.
    const RESERVED_LEN: usize = 32;

    pub fn parse(data: &[u8]) -> Result<Self> {
        let b = slice(data, 0, INODE_ITEM_SIZE, "INODE_ITEM")?;
        Ok(InodeItem {
            generation: le64(b, 0),
            transid: le64(b, 8),
            size: le64(b, 16),
            nbytes: le64(b, 24),
            block_group: le64(b, 32),
            nlink: le32(b, 40),
            uid: le32(b, 44),
            gid: le32(b, 48),
            mode: le32(b, 52),
            rdev: le64(b, 56),
            flags: le64(b, 64),
            sequence: le64(b, 72),
            atime: Timespec::at(b, 112),
            ctime: Timespec::at(b, 124),
            mtime: Timespec::at(b, 136),
            otime: Timespec::at(b, 148),
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        for v in [
            self.generation,
            self.transid,
            self.size,
            self.nbytes,
            self.block_group,
        ] {
            put_u64(out, v);
        }
        for v in [self.nlink, self.uid, self.gid, self.mode] {
            put_u32(out, v);
        }
        put_u64(out, self.rdev);
        put_u64(out, self.flags);
        put_u64(out, self.sequence);
        out.extend_from_slice(&[0u8; Self::RESERVED_LEN]);
        for t in [self.atime, self.ctime, self.mtime, self.otime] {
            t.encode(out);
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(INODE_ITEM_SIZE);
        self.encode(&mut v);
        v
    }

    /// The key of an inode's INODE_ITEM.
    pub fn key(ino: u64) -> Key {
        Key::new(ino, INODE_ITEM, 0)
    }
}

/// One name of an inode in a parent directory, from INODE_REF or
/// INODE_EXTREF. Several are packed back to back in one item: an INODE_REF
/// item holds every name in one parent (key offset = parent); an
/// INODE_EXTREF item holds the names whose (parent, name) hash collide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeRef<'a> {
    pub parent: u64,
    pub index: u64,
    pub name: &'a [u8],
}

/// Name length as stored; names are at most 255 bytes in practice, longer
/// than u16 is a caller bug.
fn name_len(name: &[u8]) -> u16 {
    u16::try_from(name.len()).expect("name longer than 65535 bytes")
}

impl InodeRef<'_> {
    /// Bytes this name takes as an INODE_REF entry.
    pub fn ref_len(&self) -> usize {
        INODE_REF_HEADER + self.name.len()
    }

    /// Appends this name as an INODE_REF entry (the parent is the key
    /// offset, not stored). Appending to an existing item's bytes adds a
    /// name to it.
    pub fn encode_ref(&self, out: &mut Vec<u8>) {
        put_u64(out, self.index);
        put_u16(out, name_len(self.name));
        out.extend_from_slice(self.name);
    }

    /// Bytes this name takes as an INODE_EXTREF entry.
    pub fn extref_len(&self) -> usize {
        INODE_EXTREF_HEADER + self.name.len()
    }

    /// Appends this name as an INODE_EXTREF entry.
    pub fn encode_extref(&self, out: &mut Vec<u8>) {
        put_u64(out, self.parent);
        put_u64(out, self.index);
        put_u16(out, name_len(self.name));
        out.extend_from_slice(self.name);
    }

    /// Key of the INODE_REF item of inode `ino` holding this name.
    pub fn ref_key(&self, ino: u64) -> Key {
        Key::new(ino, INODE_REF, self.parent)
    }

    /// Key of the INODE_EXTREF item of inode `ino` holding this name.
    pub fn extref_key(&self, ino: u64) -> Key {
        Key::new(ino, INODE_EXTREF, extref_hash(self.parent, self.name))
    }
}

/// Decodes all refs packed in an INODE_REF item (key offset = parent).
pub fn parse_inode_refs<'a>(key: &Key, data: &'a [u8]) -> Result<Vec<InodeRef<'a>>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < data.len() {
        let index = u64_at(data, off, "INODE_REF index")?;
        let len = u16_at(data, off + 8, "INODE_REF name_len")? as usize;
        let name = slice(data, off + INODE_REF_HEADER, len, "INODE_REF name")?;
        out.push(InodeRef {
            parent: key.offset,
            index,
            name,
        });
        off += INODE_REF_HEADER + len;
    }
    Ok(out)
}

/// Decodes all refs packed in an INODE_EXTREF item.
pub fn parse_inode_extrefs(data: &[u8]) -> Result<Vec<InodeRef<'_>>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < data.len() {
        let parent = u64_at(data, off, "INODE_EXTREF parent")?;
        let index = u64_at(data, off + 8, "INODE_EXTREF index")?;
        let len = u16_at(data, off + 16, "INODE_EXTREF name_len")? as usize;
        let name = slice(data, off + INODE_EXTREF_HEADER, len, "INODE_EXTREF name")?;
        out.push(InodeRef {
            parent,
            index,
            name,
        });
        off += INODE_EXTREF_HEADER + len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_item_layout() {
        let i = InodeItem {
            generation: 1,
            transid: 2,
            size: 3,
            nbytes: 4,
            block_group: 5,
            nlink: 6,
            uid: 7,
            gid: 8,
            mode: 0o100644,
            rdev: 9,
            flags: 10,
            sequence: 11,
            atime: Timespec { sec: -1, nsec: 12 },
            ctime: Timespec { sec: 13, nsec: 14 },
            mtime: Timespec { sec: 15, nsec: 16 },
            otime: Timespec { sec: 17, nsec: 18 },
        };
        let b = i.to_bytes();
        assert_eq!(b.len(), INODE_ITEM_SIZE);
        assert_eq!(le32(&b, 52), 0o100644);
        assert_eq!(le64(&b, 72), 11);
        assert!(b[80..112].iter().all(|&x| x == 0));
        assert_eq!(le64(&b, 112), u64::MAX);
        assert_eq!(le32(&b, 156), 18);
        assert_eq!(InodeItem::parse(&b).unwrap(), i);
    }

    #[test]
    fn refs_append_into_one_item() {
        let a = InodeRef {
            parent: 256,
            index: 2,
            name: b"a",
        };
        let b = InodeRef {
            parent: 256,
            index: 3,
            name: b"second",
        };
        let mut item = Vec::new();
        a.encode_ref(&mut item);
        b.encode_ref(&mut item);
        assert_eq!(item.len(), a.ref_len() + b.ref_len());
        let key = a.ref_key(257);
        assert_eq!(parse_inode_refs(&key, &item).unwrap(), [a, b]);

        let mut ext = Vec::new();
        a.encode_extref(&mut ext);
        b.encode_extref(&mut ext);
        assert_eq!(ext.len(), a.extref_len() + b.extref_len());
        assert_eq!(parse_inode_extrefs(&ext).unwrap(), [a, b]);
        assert_eq!(a.extref_key(257).offset, extref_hash(256, b"a"));
        // Truncations never panic.
        for n in 0..ext.len() {
            let _ = parse_inode_extrefs(&ext[..n]);
            let _ = parse_inode_refs(&key, &item[..n.min(item.len())]);
        }
    }
}
