//! The btrfs key: (objectid, type, offset), ordered in that order.

use crate::bytes::{le64, put_u64, slice};
use crate::consts::item_type_name;
use crate::error::Result;
use std::fmt;

pub const KEY_SIZE: usize = 17;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Key {
    pub objectid: u64,
    pub item_type: u8,
    pub offset: u64,
}

impl Key {
    pub const MIN: Key = Key::new(0, 0, 0);
    pub const MAX: Key = Key::new(u64::MAX, u8::MAX, u64::MAX);

    pub const fn new(objectid: u64, item_type: u8, offset: u64) -> Self {
        Key {
            objectid,
            item_type,
            offset,
        }
    }

    /// Decodes a disk key from its 17 bytes at `off` in `buf`.
    pub fn parse(buf: &[u8], off: usize) -> Result<Self> {
        slice(buf, off, KEY_SIZE, "key").map(Key::decode)
    }

    /// The key held by `b`, which is at least [`KEY_SIZE`] bytes long
    /// (the caller has checked the length).
    pub(crate) fn decode(b: &[u8]) -> Self {
        Key {
            objectid: le64(b, 0),
            item_type: b[8],
            offset: le64(b, 9),
        }
    }

    /// Appends the 17-byte disk form (objectid, type, offset; little endian).
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.objectid);
        out.push(self.item_type);
        put_u64(out, self.offset);
    }

    /// The 17-byte disk form.
    pub fn to_bytes(&self) -> [u8; KEY_SIZE] {
        let mut v = Vec::with_capacity(KEY_SIZE);
        self.encode(&mut v);
        v.try_into().expect("a key encodes to 17 bytes")
    }

    /// The smallest key greater than this one.
    pub fn successor(self) -> Option<Key> {
        if let Some(o) = self.offset.checked_add(1) {
            return Some(Key { offset: o, ..self });
        }
        if let Some(t) = self.item_type.checked_add(1) {
            return Some(Key::new(self.objectid, t, 0));
        }
        self.objectid.checked_add(1).map(|o| Key::new(o, 0, 0))
    }
}

/// Prints object ids that are negative constants as signed, like btrfs-progs.
pub fn fmt_objectid(id: u64) -> String {
    if id >= (-255i64) as u64 {
        format!("{}", id as i64)
    } else {
        id.to_string()
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let off = if self.offset == u64::MAX {
            "-1".to_string()
        } else {
            self.offset.to_string()
        };
        write!(
            f,
            "({} {} {})",
            fmt_objectid(self.objectid),
            item_type_name(self.item_type),
            off
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_round_trip() {
        let k = Key::new(0x0102_0304_0506_0708, 0x54, u64::MAX - 3);
        let b = k.to_bytes();
        assert_eq!(b[8], 0x54);
        assert_eq!(Key::parse(&b, 0).unwrap(), k);
    }
}
