//! Root tree items: ROOT_ITEM (where a tree is, and a subvolume's identity)
//! and ROOT_REF / ROOT_BACKREF (where a subvolume is linked).

use crate::bytes::{le16, le32, le64, put_u16, put_u32, put_u64, slice, uuid};
use crate::consts::*;
use crate::error::Result;
use crate::items::inode::{InodeItem, Timespec};
use crate::key::Key;

/// A ROOT_ITEM: where a tree's root block is and, for subvolumes, their
/// identity and times. Old items lack everything after `level`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RootItem {
    pub inode: InodeItem,
    pub generation: u64,
    pub root_dirid: u64,
    pub bytenr: u64,
    pub byte_limit: u64,
    pub bytes_used: u64,
    pub last_snapshot: u64,
    pub flags: u64,
    pub refs: u32,
    pub drop_progress: Key,
    pub drop_level: u8,
    pub level: u8,
    /// As read; [`RootItem::encode`] always writes `generation` here.
    pub generation_v2: u64,
    pub uuid: [u8; 16],
    pub parent_uuid: [u8; 16],
    pub received_uuid: [u8; 16],
    pub ctransid: u64,
    pub otransid: u64,
    pub stransid: u64,
    pub rtransid: u64,
    pub ctime: Timespec,
    pub otime: Timespec,
    pub stime: Timespec,
    pub rtime: Timespec,
}

/// Size of the items written before the extended fields existed.
pub const ROOT_ITEM_V1_SIZE: usize = 239;
/// Size of a current ROOT_ITEM (ending in 64 reserved bytes).
pub const ROOT_ITEM_SIZE: usize = 439;
const ROOT_ITEM_RESERVED: usize = 64;

impl RootItem {
    pub const ENCODED_LEN: usize = ROOT_ITEM_SIZE;

    pub fn parse(data: &[u8]) -> Result<Self> {
        let b = slice(data, 0, ROOT_ITEM_V1_SIZE, "ROOT_ITEM")?;
        let mut r = RootItem {
            inode: InodeItem::parse(b)?,
            generation: le64(b, 160),
            root_dirid: le64(b, 168),
            bytenr: le64(b, 176),
            byte_limit: le64(b, 184),
            bytes_used: le64(b, 192),
            last_snapshot: le64(b, 200),
            flags: le64(b, 208),
            refs: le32(b, 216),
            drop_progress: Key::parse(b, 220)?,
            drop_level: b[237],
            level: b[238],
            ..Default::default()
        };
        // The extended fields are trusted only when generation_v2 matches,
        // as the kernel does: an old kernel may have updated the item
        // without knowing about them.
        if data.len() >= ROOT_ITEM_SIZE {
            let b = &data[..ROOT_ITEM_SIZE];
            r.generation_v2 = le64(b, 239);
            if r.generation_v2 == r.generation {
                r.uuid = uuid(b, 247);
                r.parent_uuid = uuid(b, 263);
                r.received_uuid = uuid(b, 279);
                r.ctransid = le64(b, 295);
                r.otransid = le64(b, 303);
                r.stransid = le64(b, 311);
                r.rtransid = le64(b, 319);
                r.ctime = Timespec::at(b, 327);
                r.otime = Timespec::at(b, 339);
                r.stime = Timespec::at(b, 351);
                r.rtime = Timespec::at(b, 363);
            }
        }
        Ok(r)
    }

    /// Appends the full 439-byte form. generation_v2 is set to generation
    /// so that readers trust the extended fields written with it.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.inode.encode(out);
        for v in [
            self.generation,
            self.root_dirid,
            self.bytenr,
            self.byte_limit,
            self.bytes_used,
            self.last_snapshot,
            self.flags,
        ] {
            put_u64(out, v);
        }
        put_u32(out, self.refs);
        self.drop_progress.encode(out);
        out.push(self.drop_level);
        out.push(self.level);
        put_u64(out, self.generation);
        for u in [&self.uuid, &self.parent_uuid, &self.received_uuid] {
            out.extend_from_slice(u);
        }
        for v in [self.ctransid, self.otransid, self.stransid, self.rtransid] {
            put_u64(out, v);
        }
        for t in [self.ctime, self.otime, self.stime, self.rtime] {
            t.encode(out);
        }
        out.extend_from_slice(&[0u8; ROOT_ITEM_RESERVED]);
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(ROOT_ITEM_SIZE);
        self.encode(&mut v);
        v
    }

    pub fn is_readonly(&self) -> bool {
        self.flags & ROOT_SUBVOL_RDONLY != 0
    }
}

/// ROOT_REF / ROOT_BACKREF payload: where a subvolume is linked. Both have
/// this layout: a ROOT_REF is keyed (parent tree, ROOT_REF, child) and a
/// ROOT_BACKREF (child, ROOT_BACKREF, parent tree).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootRef<'a> {
    /// Directory inode (in the parent tree) holding the entry.
    pub dirid: u64,
    /// DIR_INDEX sequence of the entry.
    pub sequence: u64,
    pub name: &'a [u8],
}

/// A ROOT_BACKREF decodes and encodes exactly like a ROOT_REF.
pub type RootBackref<'a> = RootRef<'a>;

/// Bytes before the name: dirid u64, sequence u64, name_len u16.
pub const ROOT_REF_HEADER: usize = 18;

impl<'a> RootRef<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        let b = slice(data, 0, ROOT_REF_HEADER, "ROOT_REF")?;
        let len = le16(b, 16) as usize;
        Ok(RootRef {
            dirid: le64(b, 0),
            sequence: le64(b, 8),
            name: slice(data, ROOT_REF_HEADER, len, "ROOT_REF name")?,
        })
    }

    pub fn encoded_len(&self) -> usize {
        ROOT_REF_HEADER + self.name.len()
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.dirid);
        put_u64(out, self.sequence);
        put_u16(
            out,
            u16::try_from(self.name.len()).expect("name longer than 65535 bytes"),
        );
        out.extend_from_slice(self.name);
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

    fn sample() -> RootItem {
        RootItem {
            inode: InodeItem {
                generation: 1,
                size: 3,
                nbytes: 16384,
                nlink: 1,
                mode: 0o40755,
                ..Default::default()
            },
            generation: 42,
            root_dirid: 256,
            bytenr: 30 << 20,
            bytes_used: 16384,
            last_snapshot: 40,
            flags: ROOT_SUBVOL_RDONLY,
            refs: 1,
            drop_progress: Key::new(257, EXTENT_DATA, 4096),
            drop_level: 1,
            level: 2,
            generation_v2: 42,
            uuid: [1; 16],
            parent_uuid: [2; 16],
            received_uuid: [3; 16],
            ctransid: 41,
            otransid: 40,
            stransid: 39,
            rtransid: 38,
            ctime: Timespec { sec: 5, nsec: 6 },
            otime: Timespec { sec: 7, nsec: 8 },
            stime: Timespec { sec: 9, nsec: 10 },
            rtime: Timespec { sec: 11, nsec: 12 },
            ..Default::default()
        }
    }

    #[test]
    fn root_item_round_trip() {
        let r = sample();
        let b = r.to_bytes();
        assert_eq!(b.len(), ROOT_ITEM_SIZE);
        assert_eq!(le64(&b, 239), 42);
        assert_eq!(le32(&b, 371), 12);
        assert_eq!(RootItem::parse(&b).unwrap(), r);
        // A stale generation_v2 is rewritten.
        let stale = RootItem {
            generation_v2: 1,
            ..sample()
        };
        assert_eq!(stale.to_bytes(), b);
    }

    #[test]
    fn root_ref_round_trip() {
        let r = RootRef {
            dirid: 256,
            sequence: 3,
            name: b"snap",
        };
        let b = r.to_bytes();
        assert_eq!(b.len(), 22);
        assert_eq!(RootBackref::parse(&b).unwrap(), r);
        assert!(RootRef::parse(&b[..21]).is_err());
    }
}
