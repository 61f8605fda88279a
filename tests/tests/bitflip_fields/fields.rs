//! Changes to the fields of tree blocks: each item type's payload fields,
//! which of them to change, and to what value.

use super::*;

/// A field of a tree block: where (from the block's start), how wide.
#[derive(Debug, Clone)]
pub(super) struct Field {
    pub(super) name: String,
    pub(super) at: usize,
    pub(super) width: usize,
}

/// Fields of an item's payload by item type: (name, offset, width).
pub(super) fn payload_fields(item_type: u8, len: usize) -> Vec<(&'static str, usize, usize)> {
    let v: &[(&str, usize, usize)] = match item_type {
        EXTENT_DATA if len >= 53 => &[
            ("generation", 0, 8),
            ("ram_bytes", 8, 8),
            ("compression", 16, 1),
            ("encryption", 17, 1),
            ("other_encoding", 18, 2),
            ("type", 20, 1),
            ("disk_bytenr", 21, 8),
            ("disk_num_bytes", 29, 8),
            ("offset", 37, 8),
            ("num_bytes", 45, 8),
            ("num_bytes", 45, 8),
            ("disk_num_bytes", 29, 8),
        ],
        EXTENT_DATA => &[
            ("ram_bytes", 8, 8),
            ("ram_bytes", 8, 8),
            ("compression", 16, 1),
            ("compression", 16, 1),
            ("encryption", 17, 1),
            ("type", 20, 1),
            ("inline data", 21, 1),
            ("inline data", 22, 1),
        ],
        INODE_ITEM => &[
            ("size", 16, 8),
            ("size", 16, 8),
            ("nbytes", 24, 8),
            ("nlink", 40, 4),
            ("uid", 44, 4),
            ("mode", 52, 4),
            ("mode", 52, 4),
            ("rdev", 56, 8),
            ("flags", 64, 8),
            ("flags", 64, 8),
            ("atime.nsec", 120, 4),
            ("mtime.sec", 136, 8),
            ("mtime.nsec", 144, 4),
        ],
        DIR_ITEM | DIR_INDEX | XATTR_ITEM => &[
            ("location.objectid", 0, 8),
            ("location.type", 8, 1),
            ("location.offset", 9, 8),
            ("transid", 17, 8),
            ("data_len", 25, 2),
            ("data_len", 25, 2),
            ("name_len", 27, 2),
            ("name_len", 27, 2),
            ("type", 29, 1),
            ("name", 30, 1),
        ],
        INODE_REF => &[
            ("index", 0, 8),
            ("name_len", 8, 2),
            ("name_len", 8, 2),
            ("name", 10, 1),
        ],
        INODE_EXTREF => &[("parent", 0, 8), ("index", 8, 8), ("name_len", 16, 2)],
        ROOT_ITEM => &[
            ("generation", 160, 8),
            ("root_dirid", 168, 8),
            ("bytenr", 176, 8),
            ("flags", 208, 8),
            ("refs", 216, 4),
            ("drop_level", 237, 1),
            ("level", 238, 1),
            ("generation_v2", 239, 8),
            ("ctransid", 295, 8),
        ],
        ROOT_REF | ROOT_BACKREF => &[
            ("dirid", 0, 8),
            ("sequence", 8, 8),
            ("name_len", 16, 2),
            ("name_len", 16, 2),
        ],
        EXTENT_ITEM | METADATA_ITEM => &[
            ("refs", 0, 8),
            ("generation", 8, 8),
            ("flags", 16, 8),
            ("inline ref type", 24, 1),
        ],
        CHUNK_ITEM => &[
            ("length", 0, 8),
            ("stripe_len", 16, 8),
            ("type", 24, 8),
            ("sector_size", 40, 4),
            ("num_stripes", 44, 2),
            ("sub_stripes", 46, 2),
            ("stripe0.devid", 48, 8),
            ("stripe0.offset", 56, 8),
        ],
        DEV_ITEM => &[("devid", 0, 8), ("total_bytes", 8, 8)],
        BLOCK_GROUP_ITEM => &[("used", 0, 8), ("flags", 16, 8)],
        DEV_EXTENT => &[("chunk_offset", 16, 8), ("length", 24, 8)],
        _ => &[],
    };
    v.iter()
        .copied()
        .filter(|&(_, o, w)| o + w <= len)
        .collect()
}

/// Picks the field(s) of block `blk` (bytes `buf`) to change.
pub(super) fn pick_fields(rng: &mut Rng, buf: &[u8]) -> Vec<Field> {
    let node = Node::parse(buf).expect("pristine block parses");
    let n = node.nritems();
    let hdr = |name: &str, at, width| Field {
        name: format!("header.{name}"),
        at,
        width,
    };
    if rng.chance(8) || n == 0 {
        return vec![[
            hdr("nritems", 96, 4),
            hdr("level", 100, 1),
            hdr("owner", 88, 8),
            hdr("generation", 80, 8),
            hdr("flags", 56, 8),
        ][rng.index(5)]
        .clone()];
    }
    let i = rng.index(n);
    if !node.is_leaf() {
        let at = HEADER_SIZE + i * KEY_PTR_SIZE;
        let (name, off, width) = *rng.pick(&[
            ("key.objectid", 0, 8),
            ("key.type", 8, 1),
            ("key.offset", 9, 8),
            ("blockptr", 17, 8),
            ("generation", 25, 8),
        ]);
        return vec![Field {
            name: format!("ptr[{i}].{name}"),
            at: at + off,
            width,
        }];
    }
    let at = HEADER_SIZE + i * ITEM_SIZE;
    let it = node.item(i);
    let ty = it.key.item_type;
    let data_at = it.data.as_ptr() as usize - buf.as_ptr() as usize;
    let fields = payload_fields(ty, it.data.len());
    if rng.chance(25) || it.data.is_empty() {
        let (name, off, width) = *rng.pick(&[
            ("key.objectid", 0, 8),
            ("key.type", 8, 1),
            ("key.offset", 9, 8),
            ("offset", 17, 4),
            ("size", 21, 4),
            ("size", 21, 4),
        ]);
        return vec![Field {
            name: format!("item[{i}] ({}).{name}", it.key),
            at: at + off,
            width,
        }];
    }
    let (name, off, width) = if fields.is_empty() || rng.chance(10) {
        ("byte", rng.index(it.data.len()), 1)
    } else {
        *rng.pick(&fields)
    };
    vec![Field {
        name: format!("item[{i}] ({}).{name}", it.key),
        at: data_at + off,
        width,
    }]
}

pub(super) fn get(buf: &[u8], f: &Field) -> u64 {
    let mut b = [0u8; 8];
    b[..f.width].copy_from_slice(&buf[f.at..f.at + f.width]);
    u64::from_le_bytes(b)
}

pub(super) fn put(buf: &mut [u8], f: &Field, v: u64) {
    buf[f.at..f.at + f.width].copy_from_slice(&v.to_le_bytes()[..f.width]);
}

/// A new value for a field holding `old`: edges, neighbours, flipped
/// bits, sizes that matter to btrfs, or random.
pub(super) fn new_value(rng: &mut Rng, old: u64, width: usize) -> u64 {
    let bits = 8 * width as u32;
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    };
    let v = match rng.below(12) {
        0 => 0,
        1 => 1,
        2 => max,
        3 => max >> 1,
        4 => 1 << (bits - 1),
        5 | 6 => old ^ (1 << rng.below(bits as u64)),
        7 => old.wrapping_add(1),
        8 => old.wrapping_sub(1),
        9 => old.wrapping_add(*rng.pick(&[4096, 16384, 1 << 20])),
        10 => *rng.pick(&[
            4095,
            4096,
            16384,
            65536,
            128 << 10,
            1 << 20,
            u32::MAX as u64,
            1 << 32,
            1 << 40,
            i64::MAX as u64,
        ]),
        _ => rng.next(),
    } & max;
    if v == old {
        old ^ 1
    } else {
        v
    }
}

/// One seed's change: which block, and each field's (old, new) value.
pub(super) struct Change {
    pub(super) block: Block,
    pub(super) fields: Vec<(Field, u64, u64)>,
    /// An inode's size made huge (see HUGE_FILE).
    pub(super) huge_file: bool,
}

impl Change {
    pub(super) fn describe(&self) -> String {
        let f: Vec<String> = self
            .fields
            .iter()
            .map(|(f, o, n)| format!("{} {o:#x} -> {n:#x}", f.name))
            .collect();
        format!(
            "block {} (owner {}, level {}): {}",
            self.block.bytenr,
            self.block.owner,
            self.block.level,
            f.join(", ")
        )
    }
}

/// Chooses and applies the change of `seed`; returns it and the pristine
/// block to put back.
pub(super) fn apply(img: &Image, seed: u64) -> (Change, Vec<u8>) {
    let mut rng = Rng::for_name(seed, &img.name);
    // Mostly subvolume trees (the fs decoders), often the ones send
    // reads, and every other tree.
    let fs_tree = |b: &&Block| b.owner == 5 || (256..u64::MAX - 255).contains(&b.owner);
    let sent = |b: &&Block| b.trees.iter().any(|t| img.snap_trees.contains(t));
    let r = rng.below(100);
    let pool: Vec<&Block> = img
        .blocks
        .iter()
        .filter(|b| match r {
            0..=39 => sent(b),
            40..=74 => fs_tree(b),
            _ => !fs_tree(b),
        })
        .collect();
    let leaves: Vec<&Block> = pool.iter().copied().filter(|b| b.level == 0).collect();
    let block = if leaves.is_empty() || rng.chance(10) {
        (*rng.pick(&pool)).clone()
    } else {
        (*rng.pick(&leaves)).clone()
    };
    let pristine = img.read_block(&block);
    let mut buf = pristine.clone();
    let n = if rng.chance(15) { 2 + rng.index(2) } else { 1 };
    let mut fields = Vec::new();
    let mut huge_file = false;
    for _ in 0..n {
        // Fields are picked from the pristine layout.
        for f in pick_fields(&mut rng, &pristine) {
            let old = get(&buf, &f);
            let new = new_value(&mut rng, old, f.width);
            put(&mut buf, &f, new);
            huge_file |= f.name.ends_with(").size") && f.width == 8 && new > HUGE_FILE;
            fields.push((f, old, new));
        }
    }
    let c = img.csum.compute(&buf[32..]);
    buf[..32].copy_from_slice(&c);
    img.write_block(&block, &buf);
    (
        Change {
            block,
            fields,
            huge_file,
        },
        pristine,
    )
}
