//! Items of a fixed layout, described once: [`crate::fixed_item!`] takes the
//! struct's fields in their on-disk order and makes the struct, its
//! `ENCODED_LEN`, `parse` and `encode` from that one list, so that the
//! reader and the writer of an item cannot disagree on an offset. Each
//! field's type says how it is stored ([`Field`]): little-endian
//! integers, 16-byte UUIDs, keys, and other fixed items nested.

use crate::bytes::uuid;
use crate::key::{Key, KEY_SIZE};

/// A value stored in a fixed number of bytes.
pub trait Field: Sized {
    /// Bytes on disk.
    const LEN: usize;
    /// Reads the value at `off` of `b`, which the caller has checked to
    /// hold `off + LEN` bytes.
    fn get(b: &[u8], off: usize) -> Self;
    /// Appends the value's bytes.
    fn put(&self, out: &mut Vec<u8>);
}

/// Little-endian integers.
macro_rules! int_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            const LEN: usize = std::mem::size_of::<$t>();
            fn get(b: &[u8], off: usize) -> Self {
                let mut v = [0u8; std::mem::size_of::<$t>()];
                v.copy_from_slice(&b[off..off + Self::LEN]);
                <$t>::from_le_bytes(v)
            }
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

int_field!(u8, u16, u32, u64);

impl Field for [u8; 16] {
    const LEN: usize = 16;
    fn get(b: &[u8], off: usize) -> Self {
        uuid(b, off)
    }
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

impl Field for Key {
    const LEN: usize = KEY_SIZE;
    fn get(b: &[u8], off: usize) -> Self {
        Key::decode(&b[off..off + KEY_SIZE])
    }
    fn put(&self, out: &mut Vec<u8>) {
        self.encode(out);
    }
}

/// Defines a struct of fixed layout from its fields in on-disk order,
/// with `ENCODED_LEN`, `parse` (a [`crate::FormatError`] naming the item
/// when the data is short; bytes past the layout are ignored, as the
/// kernel ignores them), `encode`, `to_bytes`, and [`Field`] so that it
/// can be a field of another.
#[macro_export]
macro_rules! fixed_item {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident ($what:literal) {
            $( $(#[$fmeta:meta])* $fvis:vis $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $( $(#[$fmeta])* $fvis $field: $ty ),*
        }

        impl $name {
            /// Bytes on disk: the fields, packed in order.
            pub const ENCODED_LEN: usize = 0 $( + <$ty as $crate::fixed::Field>::LEN )*;

            pub fn parse(data: &[u8]) -> $crate::error::Result<Self> {
                let b = $crate::bytes::slice(data, 0, Self::ENCODED_LEN, $what)?;
                Ok(<Self as $crate::fixed::Field>::get(b, 0))
            }

            pub fn encode(&self, out: &mut Vec<u8>) {
                $( $crate::fixed::Field::put(&self.$field, out); )*
            }

            pub fn to_bytes(&self) -> Vec<u8> {
                let mut v = Vec::with_capacity(Self::ENCODED_LEN);
                self.encode(&mut v);
                v
            }
        }

        impl $crate::fixed::Field for $name {
            const LEN: usize = $name::ENCODED_LEN;

            #[allow(unused_assignments)]
            fn get(b: &[u8], off: usize) -> Self {
                let mut at = off;
                $(
                    let $field = <$ty as $crate::fixed::Field>::get(b, at);
                    at += <$ty as $crate::fixed::Field>::LEN;
                )*
                $name { $( $field ),* }
            }

            fn put(&self, out: &mut Vec<u8>) {
                self.encode(out);
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use crate::items::*;
    use crate::Key;

    /// The sizes of the kernel's structs (ctree.h, `__packed`).
    #[test]
    fn fixed_items_have_the_kernels_sizes() {
        assert_eq!(ExtentItem::ENCODED_LEN, 24);
        assert_eq!(TreeBlockInfo::ENCODED_LEN, 18);
        assert_eq!(ExtentDataRef::ENCODED_LEN, 28);
        assert_eq!(FreeSpaceInfo::ENCODED_LEN, 8);
        assert_eq!(BlockGroupItem::ENCODED_LEN, 24);
        assert_eq!(DevExtent::ENCODED_LEN, 48);
        assert_eq!(DevItem::ENCODED_LEN, 98);
        assert_eq!(Stripe::ENCODED_LEN, 32);
    }

    /// Fields land at the kernel's offsets, and parse reads back what
    /// encode wrote; short data is an error naming the item.
    #[test]
    fn fixed_items_round_trip_at_the_kernels_offsets() {
        let d = DevItem::new(7, 1 << 30, 4096, [0xaa; 16], [0xbb; 16]);
        let b = d.to_bytes();
        assert_eq!(b.len(), 98);
        assert_eq!(&b[0..8], &7u64.to_le_bytes());
        assert_eq!(&b[32..36], &4096u32.to_le_bytes()); // sector_size
        assert_eq!(&b[66..82], &[0xaa; 16]); // uuid
        assert_eq!(&b[82..98], &[0xbb; 16]); // fsid
        assert_eq!(DevItem::parse(&b).unwrap(), d);
        let t = TreeBlockInfo {
            key: Key::new(5, 132, 9),
            level: 3,
        };
        let b = t.to_bytes();
        assert_eq!(b[17], 3);
        assert_eq!(TreeBlockInfo::parse(&b).unwrap(), t);
        let e = DevExtent::parse(&[0u8; 47]).unwrap_err().to_string();
        assert!(e.contains("DEV_EXTENT"), "{e}");
    }
}
