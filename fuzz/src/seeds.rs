//! Well-formed inputs to start fuzzing from: a leaf holding one item of
//! every type the decoders know, an internal node, and a superblock with a
//! system chunk array. The cargo-fuzz corpus is seeded with these (see
//! README.md) and the plain tests mutate them.

use ubtrfs_format::checksum::{name_hash, CsumType};
use ubtrfs_format::consts::*;
use ubtrfs_format::key::Key;
use ubtrfs_format::node::{HEADER_SIZE, ITEM_SIZE};

pub const FSID: [u8; 16] = *b"ubtrfs-fuzz-fsid";

fn key_bytes(k: &Key) -> [u8; 17] {
    let mut b = [0u8; 17];
    b[0..8].copy_from_slice(&k.objectid.to_le_bytes());
    b[8] = k.item_type;
    b[9..17].copy_from_slice(&k.offset.to_le_bytes());
    b
}

fn header(buf: &mut [u8], bytenr: u64, owner: u64, nritems: u32, level: u8) {
    buf[0x20..0x30].copy_from_slice(&FSID);
    buf[0x30..0x38].copy_from_slice(&bytenr.to_le_bytes());
    buf[0x38..0x40].copy_from_slice(&(1u64 << 56 | 1).to_le_bytes());
    buf[0x50..0x58].copy_from_slice(&7u64.to_le_bytes());
    buf[0x58..0x60].copy_from_slice(&owner.to_le_bytes());
    buf[0x60..0x64].copy_from_slice(&nritems.to_le_bytes());
    buf[0x64] = level;
}

fn csum(buf: &mut [u8]) {
    let c = CsumType::Crc32c.compute(&buf[32..]);
    buf[..32].copy_from_slice(&c);
}

/// A leaf of `nodesize` bytes holding `items` (sorted by key here).
pub fn leaf(nodesize: usize, mut items: Vec<(Key, Vec<u8>)>) -> Vec<u8> {
    items.sort_by_key(|a| a.0);
    items.dedup_by_key(|a| a.0);
    let mut buf = vec![0u8; nodesize];
    let mut end = nodesize - HEADER_SIZE;
    let mut n = 0;
    for (i, (k, d)) in items.iter().enumerate() {
        let hdr_end = (i + 1) * ITEM_SIZE;
        if end < d.len() || end - d.len() < hdr_end {
            break;
        }
        let off = end - d.len();
        let at = HEADER_SIZE + i * ITEM_SIZE;
        buf[at..at + 17].copy_from_slice(&key_bytes(k));
        buf[at + 17..at + 21].copy_from_slice(&(off as u32).to_le_bytes());
        buf[at + 21..at + 25].copy_from_slice(&(d.len() as u32).to_le_bytes());
        buf[HEADER_SIZE + off..HEADER_SIZE + end].copy_from_slice(d);
        end = off;
        n += 1;
    }
    header(&mut buf, 0x1_0000_0000, FS_TREE_OBJECTID, n, 0);
    csum(&mut buf);
    buf
}

/// An internal node of `nodesize` bytes at `level` with `n` pointers.
pub fn node(nodesize: usize, level: u8, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; nodesize];
    let n = n.min((nodesize - HEADER_SIZE) / 33);
    for i in 0..n {
        let at = HEADER_SIZE + i * 33;
        let k = Key::new(256 + i as u64, INODE_ITEM, 0);
        buf[at..at + 17].copy_from_slice(&key_bytes(&k));
        buf[at + 17..at + 25].copy_from_slice(&(0x2000_0000 + i as u64 * 16384).to_le_bytes());
        buf[at + 25..at + 33].copy_from_slice(&7u64.to_le_bytes());
    }
    header(&mut buf, 0x1_0000_0000, ROOT_TREE_OBJECTID, n as u32, level);
    csum(&mut buf);
    buf
}

fn inode_item(mode: u32, size: u64) -> Vec<u8> {
    let mut d = vec![0u8; 160];
    d[0..8].copy_from_slice(&7u64.to_le_bytes());
    d[16..24].copy_from_slice(&size.to_le_bytes());
    d[40..44].copy_from_slice(&1u32.to_le_bytes());
    d[52..56].copy_from_slice(&mode.to_le_bytes());
    d
}

fn dir_entry(location: Key, name: &[u8], data: &[u8], ft: u8) -> Vec<u8> {
    let mut d = key_bytes(&location).to_vec();
    d.extend_from_slice(&7u64.to_le_bytes());
    d.extend_from_slice(&(data.len() as u16).to_le_bytes());
    d.extend_from_slice(&(name.len() as u16).to_le_bytes());
    d.push(ft);
    d.extend_from_slice(name);
    d.extend_from_slice(data);
    d
}

/// A chunk item (header + stripes) as stored in the chunk tree.
pub fn chunk_item(length: u64, chunk_type: u64, stripes: &[(u64, u64)], sub: u16) -> Vec<u8> {
    let mut d = Vec::new();
    d.extend_from_slice(&length.to_le_bytes());
    d.extend_from_slice(&CHUNK_TREE_OBJECTID.to_le_bytes());
    d.extend_from_slice(&65536u64.to_le_bytes());
    d.extend_from_slice(&chunk_type.to_le_bytes());
    d.extend_from_slice(&65536u32.to_le_bytes());
    d.extend_from_slice(&65536u32.to_le_bytes());
    d.extend_from_slice(&4096u32.to_le_bytes());
    d.extend_from_slice(&(stripes.len() as u16).to_le_bytes());
    d.extend_from_slice(&sub.to_le_bytes());
    for &(devid, off) in stripes {
        d.extend_from_slice(&devid.to_le_bytes());
        d.extend_from_slice(&off.to_le_bytes());
        d.extend_from_slice(&[0x11; 16]);
    }
    d
}

/// A leaf with one item of every type the decoders handle.
pub fn rich_leaf(nodesize: usize) -> Vec<u8> {
    let ino = 257u64;
    let name = b"file.txt";
    let mut items = vec![
        (Key::new(ino, INODE_ITEM, 0), inode_item(0o100644, 5000)),
        (Key::new(ino, INODE_REF, 256), {
            let mut d = 3u64.to_le_bytes().to_vec();
            d.extend_from_slice(&(name.len() as u16).to_le_bytes());
            d.extend_from_slice(name);
            d
        }),
        (Key::new(ino, INODE_EXTREF, 1234), {
            let mut d = 256u64.to_le_bytes().to_vec();
            d.extend_from_slice(&4u64.to_le_bytes());
            d.extend_from_slice(&(name.len() as u16).to_le_bytes());
            d.extend_from_slice(name);
            d
        }),
        (
            Key::new(ino, XATTR_ITEM, name_hash(b"user.a")),
            dir_entry(Key::default(), b"user.a", b"value", 8),
        ),
        (
            Key::new(256, DIR_ITEM, name_hash(name)),
            dir_entry(Key::new(ino, INODE_ITEM, 0), name, b"", FT_REG_FILE),
        ),
        (
            Key::new(256, DIR_INDEX, 3),
            dir_entry(Key::new(ino, INODE_ITEM, 0), name, b"", FT_REG_FILE),
        ),
        (Key::new(ino, EXTENT_DATA, 0), {
            // Regular extent.
            let mut d = vec![0u8; 53];
            d[8..16].copy_from_slice(&4096u64.to_le_bytes());
            d[20] = FILE_EXTENT_REG;
            d[21..29].copy_from_slice(&0x1_0000_0000u64.to_le_bytes());
            d[29..37].copy_from_slice(&4096u64.to_le_bytes());
            d[45..53].copy_from_slice(&4096u64.to_le_bytes());
            d
        }),
        (Key::new(ino, EXTENT_DATA, 4096), {
            // Inline extent, zstd compressed "hello" (a raw frame).
            let mut d = vec![0u8; 21];
            d[8..16].copy_from_slice(&5u64.to_le_bytes());
            d[16] = COMPRESS_ZSTD;
            d[20] = FILE_EXTENT_INLINE;
            d.extend_from_slice(&[
                0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x05, 0x29, 0x00, 0x00, b'h', b'e', b'l', b'l', b'o',
            ]);
            d
        }),
        (Key::new(258, ROOT_ITEM, 0), {
            let mut d = vec![0u8; 439];
            d[..160].copy_from_slice(&inode_item(0o40755, 3));
            d[160..168].copy_from_slice(&7u64.to_le_bytes());
            d[168..176].copy_from_slice(&256u64.to_le_bytes());
            d[176..184].copy_from_slice(&0x1_0000_4000u64.to_le_bytes());
            d[216..220].copy_from_slice(&1u32.to_le_bytes());
            d[239..247].copy_from_slice(&7u64.to_le_bytes());
            d
        }),
        (Key::new(5, ROOT_REF, 258), {
            let mut d = 256u64.to_le_bytes().to_vec();
            d.extend_from_slice(&4u64.to_le_bytes());
            d.extend_from_slice(&3u16.to_le_bytes());
            d.extend_from_slice(b"sub");
            d
        }),
        (Key::new(258, ROOT_BACKREF, 5), {
            let mut d = 256u64.to_le_bytes().to_vec();
            d.extend_from_slice(&4u64.to_le_bytes());
            d.extend_from_slice(&3u16.to_le_bytes());
            d.extend_from_slice(b"sub");
            d
        }),
        (
            Key::new(FIRST_CHUNK_TREE_OBJECTID, CHUNK_ITEM, 0x100_0000),
            chunk_item(
                0x800_0000,
                BG_METADATA | BG_DUP,
                &[(1, 0x10_0000), (1, 0x900_0000)],
                0,
            ),
        ),
        (
            Key::new(DEV_ITEMS_OBJECTID, DEV_ITEM, 1),
            placed(98, &[(0, &le(1)), (8, &le(1 << 30))]),
        ),
        (
            Key::new(1, DEV_EXTENT, 0x10_0000),
            placed(
                48,
                &[
                    (0, &le(CHUNK_TREE_OBJECTID)),
                    (8, &le(FIRST_CHUNK_TREE_OBJECTID)),
                    (16, &le(0x100_0000)),
                    (24, &le(0x800_0000)),
                ],
            ),
        ),
        (
            Key::new(0x100_0000, BLOCK_GROUP_ITEM, 0x800_0000),
            placed(24, &[(16, &le(BG_METADATA | BG_DUP))]),
        ),
        (
            Key::new(0x100_4000, METADATA_ITEM, 0),
            extent_item(2, TREE_BLOCK_REF, &[5], 24 + 9),
        ),
        (
            Key::new(0x1_0000_0000, EXTENT_ITEM, 4096),
            extent_item(1, EXTENT_DATA_REF, &[5, 257], 24 + 29),
        ),
        (
            Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, 0x1_0000_0000),
            vec![0xab; 8],
        ),
    ];
    items.sort_by_key(|a| a.0);
    leaf(nodesize, items)
}

fn le(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

/// `len` zero bytes with `fields` written at their offsets: an item laid
/// out by hand, as a fuzz seed wants it.
fn placed(len: usize, fields: &[(usize, &[u8])]) -> Vec<u8> {
    let mut d = vec![0u8; len];
    for (at, v) in fields {
        d[*at..*at + v.len()].copy_from_slice(v);
    }
    d
}

/// An extent item of `len` bytes: one reference, `flags`, and one inline
/// reference of type `kind` whose u64 fields start with `fields` (the rest
/// zero).
fn extent_item(flags: u64, kind: u8, fields: &[u64], len: usize) -> Vec<u8> {
    let mut d = placed(len, &[(0, &le(1)), (16, &le(flags)), (24, &[kind])]);
    for (i, f) in fields.iter().enumerate() {
        d[25 + 8 * i..33 + 8 * i].copy_from_slice(&le(*f));
    }
    d
}

/// A superblock (crc32c) with a system chunk array of `nchunks` chunks.
pub fn superblock(nchunks: usize) -> Vec<u8> {
    let mut b = vec![0u8; SUPER_SIZE];
    b[0x20..0x30].copy_from_slice(&FSID);
    b[0x30..0x38].copy_from_slice(&0x1_0000u64.to_le_bytes());
    b[0x40..0x48].copy_from_slice(SUPER_MAGIC);
    b[0x48..0x50].copy_from_slice(&7u64.to_le_bytes());
    b[0x50..0x58].copy_from_slice(&0x1_0000_4000u64.to_le_bytes());
    b[0x58..0x60].copy_from_slice(&0x100_0000u64.to_le_bytes());
    b[0x70..0x78].copy_from_slice(&(1u64 << 30).to_le_bytes());
    b[0x80..0x88].copy_from_slice(&6u64.to_le_bytes());
    b[0x88..0x90].copy_from_slice(&1u64.to_le_bytes());
    b[0x90..0x94].copy_from_slice(&4096u32.to_le_bytes());
    b[0x94..0x98].copy_from_slice(&16384u32.to_le_bytes());
    b[0x9c..0xa0].copy_from_slice(&4096u32.to_le_bytes());
    b[0xbc..0xc4]
        .copy_from_slice(&(INCOMPAT_MIXED_BACKREF | INCOMPAT_SKINNY_METADATA).to_le_bytes());
    b[0xc9..0xd1].copy_from_slice(&1u64.to_le_bytes());
    let mut arr = Vec::new();
    for i in 0..nchunks as u64 {
        let k = Key::new(FIRST_CHUNK_TREE_OBJECTID, CHUNK_ITEM, 0x100_0000 * (i + 1));
        arr.extend_from_slice(&key_bytes(&k));
        arr.extend_from_slice(&chunk_item(
            0x80_0000,
            BG_SYSTEM | if i % 2 == 0 { BG_DUP } else { 0 },
            if i % 2 == 0 {
                &[(1, 0x10_0000), (1, 0x90_0000)]
            } else {
                &[(1, 0x200_0000)]
            },
            0,
        ));
    }
    b[0xa0..0xa4].copy_from_slice(&(arr.len() as u32).to_le_bytes());
    b[0x32b..0x32b + arr.len()].copy_from_slice(&arr);
    b[0x12b..0x130].copy_from_slice(b"label");
    let c = CsumType::Crc32c.compute(&b[0x20..]);
    b[..32].copy_from_slice(&c);
    b
}

/// Every seed for a target, by target name.
pub fn for_target(target: &str) -> Vec<Vec<u8>> {
    match target {
        "node" => vec![
            rich_leaf(4096),
            rich_leaf(16384),
            leaf(4096, Vec::new()),
            node(4096, 1, 3),
            node(16384, 2, 100),
        ],
        "superblock" | "superblock_csum" => vec![superblock(1), superblock(3)],
        "decompress" => {
            let frame = [
                0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x05, 0x29, 0x00, 0x00, b'h', b'e', b'l', b'l', b'o',
            ];
            let mut z = vec![COMPRESS_ZSTD, 2, 0, 3];
            z.extend_from_slice(&frame);
            vec![z]
        }
        _ => Vec::new(),
    }
}
