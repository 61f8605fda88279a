//! Fuzz harnesses for `ubtrfs-format`, shared by the cargo-fuzz targets in
//! `fuzz_targets/` (nightly + libFuzzer) and by the plain tests in
//! `tests/random.rs` (stable `cargo test`, seeded random and mutated inputs).
//!
//! Each harness must never panic, whatever the bytes: every decoder answers
//! a hostile input with a `FormatError`. A harness also checks a few
//! invariants the engine relies on (an accepted node's items lie inside the
//! block, a decoded chunk's encoded length is what `sys_chunks` stepped over).

use ubtrfs_format::checksum::{extref_hash, name_hash, CsumType};
use ubtrfs_format::compress::{decompress as decompress_extent, max_out_len};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::*;
use ubtrfs_format::key::{fmt_objectid, Key};
use ubtrfs_format::node::{Header, Node, HEADER_SIZE, ITEM_SIZE, KEY_PTR_SIZE};
use ubtrfs_format::Superblock;

pub mod seeds;

// The harness of `ubtrfs check` (target `check`): the oracle crate's, by
// path, as its seeded test runs it (tests/tests/check_fuzz.rs).
#[path = "../../tests/src/check_fuzz.rs"]
mod check_fuzz;

/// Target `check`: tree blocks of an image changed as `data` says (their
/// checksums redone), then `ubtrfs check`: problems or an error, never a
/// panic.
pub fn check_image(data: &[u8]) {
    let _ = check_fuzz::check_mutated(data);
}

/// Target `node`: [`Node::parse`] on arbitrary bytes; when it accepts them,
/// walk every key, item and key pointer and decode every item with the
/// decoder its key type calls for.
pub fn node(data: &[u8]) {
    // The header parser alone, and the flags byte readers, take any length.
    let _ = Header::parse(data);
    let _ = Header::backref_rev(data);
    let Ok(n) = Node::parse(data) else { return };
    let nr = n.nritems();
    assert_eq!(n.bytes().len(), data.len());
    if n.is_leaf() {
        assert!(HEADER_SIZE + nr * ITEM_SIZE <= data.len());
        for i in 0..nr {
            let it = n.item(i);
            assert_eq!(it.key, n.key(i));
            // The item's data is a sub-slice of the block, after the headers.
            let start = it.data.as_ptr() as usize - data.as_ptr() as usize;
            assert!(start >= HEADER_SIZE + nr * ITEM_SIZE || it.data.is_empty());
            assert!(start + it.data.len() <= data.len());
            let _ = it.key.to_string();
            decode_item(&it.key, it.data);
        }
    } else {
        assert!(nr > 0);
        assert!(HEADER_SIZE + nr * KEY_PTR_SIZE <= data.len());
        for i in 0..nr {
            let p = n.key_ptr(i);
            assert_eq!(p.key, n.key(i));
            let _ = p.key.to_string();
        }
    }
    // Binary search must agree with the (validated, ascending) key order.
    for probe in probe_keys(&n) {
        let (slot, exact) = n.search(&probe);
        if let Some(s) = slot {
            assert!(s < nr);
            assert!(n.key(s) <= probe);
            assert_eq!(exact, n.key(s) == probe);
        }
        if let Some(next) = slot.map_or(Some(0), |s| s.checked_add(1)) {
            if next < nr {
                assert!(n.key(next) > probe);
            }
        }
    }
}

/// Keys to search for: every key of the node, its successor, and the ends.
fn probe_keys(n: &Node<'_>) -> Vec<Key> {
    let mut v = vec![Key::MIN, Key::MAX];
    for i in 0..n.nritems().min(64) {
        let k = n.key(i);
        v.push(k);
        v.extend(k.successor());
    }
    v
}

/// Decodes one leaf item the way the engine and `dump-tree` do, by key type.
pub fn decode_item(key: &Key, d: &[u8]) {
    let _ = fmt_objectid(key.objectid);
    let _ = item_type_name(key.item_type);
    match key.item_type {
        INODE_ITEM => {
            let _ = InodeItem::parse(d);
        }
        INODE_REF => {
            if let Ok(refs) = parse_inode_refs(key, d) {
                for r in refs {
                    let _ = name_hash(r.name);
                }
            }
        }
        INODE_EXTREF => {
            if let Ok(refs) = parse_inode_extrefs(d) {
                for r in refs {
                    let _ = extref_hash(r.parent, r.name);
                }
            }
        }
        DIR_ITEM | DIR_INDEX | XATTR_ITEM => {
            if let Ok(es) = parse_dir_entries(d) {
                for e in es {
                    let _ = e.location.to_string();
                    let _ = name_hash(e.name);
                }
            }
        }
        EXTENT_DATA => {
            if let Ok(fe) = FileExtent::parse(d) {
                if let FileExtentKind::Inline { data } = fe.kind {
                    // Inline payloads are what the engine decompresses; the
                    // untrusted ram_bytes must be refused before allocating.
                    let out = usize::try_from(fe.ram_bytes).unwrap_or(usize::MAX);
                    let _ = decompress_extent(fe.compression, data, out, 4096);
                }
            }
        }
        ROOT_ITEM => {
            if let Ok(r) = RootItem::parse(d) {
                let _ = r.is_readonly();
            }
        }
        ROOT_REF | ROOT_BACKREF => {
            let _ = RootRef::parse(d);
        }
        CHUNK_ITEM => {
            if let Ok(c) = ChunkItem::parse(d) {
                assert!(c.encoded_len() <= d.len());
                assert_eq!(c.stripes.len(), c.num_stripes as usize);
                let _ = profile_name(c.chunk_type);
                let _ = block_group_kind(c.chunk_type);
            }
        }
        DEV_ITEM => {
            let _ = DevItem::parse(d);
        }
        DEV_EXTENT => {
            let _ = DevExtent::parse(d);
        }
        BLOCK_GROUP_ITEM => {
            if let Ok(bg) = BlockGroupItem::parse(d) {
                let _ = profile_name(bg.flags);
                let _ = block_group_kind(bg.flags);
            }
        }
        EXTENT_ITEM | METADATA_ITEM => {
            let _ = ExtentItem::parse(d);
        }
        _ => {}
    }
}

/// Target `superblock`: [`Superblock::parse`] on arbitrary bytes (almost all
/// inputs stop at the magic or the checksum), then the system chunk array.
pub fn superblock(data: &[u8]) {
    if let Ok(sb) = Superblock::parse(data) {
        after_parse(&sb);
    }
}

/// Target `superblock_csum`: the input is made into a superblock that passes
/// the magic and checksum checks (4096 bytes, zero padded; the magic set; a
/// valid csum type chosen from the input; the checksum recomputed), so the
/// parser behind the checksum and `sys_chunks()` see the fuzzer's bytes.
pub fn superblock_csum(data: &[u8]) {
    let buf = fix_superblock(data);
    match Superblock::parse(&buf) {
        Ok(sb) => after_parse(&sb),
        Err(e) => {
            // With magic and checksum made right, only the field checks
            // behind them may reject the block.
            let s = e.to_string();
            assert!(
                !s.contains("magic") && !s.contains("checksum mismatch"),
                "fixed-up superblock rejected for {s}"
            );
        }
    }
}

/// Pads/truncates `data` to one superblock, sets the magic, picks a valid
/// checksum type from the input's csum_type field and writes the checksum.
pub fn fix_superblock(data: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; SUPER_SIZE];
    let n = data.len().min(SUPER_SIZE);
    buf[..n].copy_from_slice(&data[..n]);
    buf[0x40..0x48].copy_from_slice(SUPER_MAGIC);
    let t = u16::from_le_bytes([buf[0xc4], buf[0xc5]]) % 4;
    buf[0xc4..0xc6].copy_from_slice(&t.to_le_bytes());
    let ct = CsumType::from_raw(t).expect("0..4 are valid");
    let c = ct.compute(&buf[0x20..]);
    buf[..32].copy_from_slice(&c);
    buf
}

fn after_parse(sb: &Superblock) {
    assert!(sb.sys_chunk_array.len() <= 2048);
    let _ = sb.tree_fsid();
    let _ = sb.unsupported_incompat();
    let _ = flag_names(sb.incompat_flags, INCOMPAT_NAMES);
    let _ = flag_names(sb.compat_ro_flags, COMPAT_RO_NAMES);
    if let Ok(chunks) = sb.sys_chunks() {
        let mut total = 0;
        for (k, c) in &chunks {
            assert_eq!(k.item_type, CHUNK_ITEM);
            assert_eq!(c.stripes.len(), c.num_stripes as usize);
            total += ubtrfs_format::key::KEY_SIZE + c.encoded_len();
        }
        assert_eq!(total, sb.sys_chunk_array.len());
    }
}

/// Target `decompress`: one compressed extent. Input: byte 0 picks the
/// algorithm (1..=3), bytes 1..3 the output length (capped at what the
/// engine may ask for), byte 3 the sector size; the rest is the extent.
pub fn decompress(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    let algo = data[0] % 4;
    let sectorsize = 512u32 << (data[3] % 8);
    let out_len = u16::from_le_bytes([data[1], data[2]]) as usize * 4;
    let out_len = out_len.min(max_out_len(sectorsize));
    if let Ok(out) = decompress_extent(algo, &data[4..], out_len, sectorsize) {
        assert_eq!(out.len(), out_len);
    }
}
