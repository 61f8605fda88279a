//! The format crate's encoders against kernel-made bytes: every item of
//! every tree of every committed fixture is decoded and encoded again, and
//! must come out byte for byte as the kernel wrote it. Along the way the
//! hashes and counts the kernel derives are checked: DIR_ITEM / XATTR_ITEM
//! key offsets against name_hash, INODE_EXTREF against extref_hash, keyed
//! EXTENT_DATA_REF offsets against hash_extent_data_ref, inline ref order,
//! extent reference counts, and free space extent counts (which also pins
//! the bitmap bit order).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use ubtrfs_engine::ctree::{for_each_item, Tree};
use ubtrfs_engine::{Filesystem, OpenOptions};
use ubtrfs_format::checksum::name_hash;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::*;
use ubtrfs_format::key::Key;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The unpacked devices of a fixture, removed when dropped.
struct Images(Vec<PathBuf>);

impl Drop for Images {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn unpack(name: &str) -> Images {
    let src = repo_root().join("tests/fixtures/committed").join(name);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reencode");
    std::fs::create_dir_all(&dir).unwrap();
    let mut out = Vec::new();
    for i in 0.. {
        let zst = src.join(format!("dev{i}.img.zst"));
        if !zst.exists() {
            break;
        }
        let img = dir.join(format!("{name}-dev{i}-{}.img", std::process::id()));
        let mut dec = zstd::stream::Decoder::new(File::open(&zst).unwrap()).unwrap();
        let mut bytes = Vec::new();
        dec.read_to_end(&mut bytes).unwrap();
        std::fs::write(&img, bytes).unwrap();
        out.push(img);
    }
    Images(out)
}

fn fixtures() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(repo_root().join("tests/fixtures/committed"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The chunk tree, the root tree, and every tree with a ROOT_ITEM.
fn all_trees(fs: &Filesystem) -> Vec<Tree> {
    let sb = &fs.info.sb;
    let chunk = Tree::chunk(sb);
    let mut ids = Vec::new();
    for_each_item(&fs.info, fs.root_tree, Key::MIN, Key::MAX, |k, _| {
        if k.item_type == ROOT_ITEM && ids.last() != Some(&k.objectid) {
            ids.push(k.objectid);
        }
        Ok(ControlFlow::Continue(()))
    })
    .unwrap();
    let mut trees = vec![chunk, fs.root_tree];
    trees.extend(ids.into_iter().filter_map(|id| fs.tree_opt(id).unwrap()));
    trees
}

fn enc(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut v = Vec::new();
    f(&mut v);
    v
}

/// Running checks that span several items of one tree.
#[derive(Default)]
struct Checker {
    csum_size: usize,
    counts: BTreeMap<u8, usize>,
    /// Extent being summed: (bytenr, refs it declares, refs found so far).
    extent: Option<(u64, u64, u64)>,
    /// Block group whose free space is being counted: (start, extent_count
    /// it declares, free extents found, end of the last free run).
    free: Option<(u64, u32, u32, u64)>,
}

impl Checker {
    fn finish(&mut self) -> Result<(), String> {
        if let Some((bytenr, declared, found)) = self.extent.take() {
            if declared != found {
                return Err(format!(
                    "extent {bytenr}: refs {declared}, back references add up to {found}"
                ));
            }
        }
        if let Some((start, declared, found, _)) = self.free.take() {
            if declared != found {
                return Err(format!(
                    "block group {start}: extent_count {declared}, found {found} free extents"
                ));
            }
        }
        Ok(())
    }

    fn add_refs(&mut self, bytenr: u64, n: u64) -> Result<(), String> {
        match &mut self.extent {
            Some((b, _, found)) if *b == bytenr => {
                *found += n;
                Ok(())
            }
            _ => Err(format!(
                "keyed back reference of {bytenr} without its extent item"
            )),
        }
    }

    /// Counts a free range, merging it with the previous one when adjacent
    /// (a run continuing across two bitmap items is one extent).
    fn add_free(&mut self, start: u64, len: u64) -> Result<(), String> {
        let Some((_, _, found, end)) = &mut self.free else {
            return Err(format!("free space at {start} outside any block group"));
        };
        if start != *end || *found == 0 {
            *found += 1;
        }
        *end = start + len;
        Ok(())
    }

    /// Decodes and re-encodes one item; returns the re-encoded bytes.
    fn reencode(&mut self, k: &Key, d: &[u8], sectorsize: u64) -> Result<Vec<u8>, String> {
        let e = |e: ubtrfs_format::FormatError| e.to_string();
        Ok(match k.item_type {
            INODE_ITEM => InodeItem::parse(d).map_err(e)?.to_bytes(),
            INODE_REF => {
                let refs = parse_inode_refs(k, d).map_err(e)?;
                enc(|o| refs.iter().for_each(|r| r.encode_ref(o)))
            }
            INODE_EXTREF => {
                let refs = parse_inode_extrefs(d).map_err(e)?;
                for r in &refs {
                    if r.extref_key(k.objectid) != *k {
                        return Err("INODE_EXTREF key offset is not extref_hash".into());
                    }
                }
                enc(|o| refs.iter().for_each(|r| r.encode_extref(o)))
            }
            DIR_ITEM | DIR_INDEX | XATTR_ITEM => {
                let entries = parse_dir_entries(d).map_err(e)?;
                if k.item_type != DIR_INDEX {
                    for x in &entries {
                        if name_hash(x.name) != k.offset {
                            return Err("key offset is not name_hash(name)".into());
                        }
                    }
                }
                enc(|o| entries.iter().for_each(|x| x.encode(o)))
            }
            EXTENT_DATA => FileExtent::parse(d).map_err(e)?.to_bytes(),
            EXTENT_CSUM => {
                let sums = csum_item_entries(d, self.csum_size).map_err(e)?;
                enc(|o| sums.for_each(|s| o.extend_from_slice(s)))
            }
            ROOT_ITEM => RootItem::parse(d).map_err(e)?.to_bytes(),
            ROOT_REF | ROOT_BACKREF => RootRef::parse(d).map_err(e)?.to_bytes(),
            EXTENT_ITEM | METADATA_ITEM => self.extent_record(k, d)?,
            TREE_BLOCK_REF | SHARED_BLOCK_REF | EXTENT_DATA_REF | SHARED_DATA_REF => {
                let r = InlineRef::from_keyed(k, d).map_err(e)?;
                let (key, data) = r.to_keyed(k.objectid).unwrap();
                if key != *k {
                    return Err(format!("re-keyed as {key}"));
                }
                self.add_refs(k.objectid, r.count())?;
                data
            }
            BLOCK_GROUP_ITEM => BlockGroupItem::parse(d).map_err(e)?.to_bytes(),
            FREE_SPACE_INFO => {
                self.finish()?;
                let info = FreeSpaceInfo::parse(d).map_err(e)?;
                self.free = Some((k.objectid, info.extent_count, 0, 0));
                info.to_bytes()
            }
            FREE_SPACE_EXTENT => {
                self.add_free(k.objectid, k.offset)?;
                Vec::new()
            }
            FREE_SPACE_BITMAP => {
                for (first, n) in bitmap_runs(d, k.offset / sectorsize).map_err(e)? {
                    self.add_free(k.objectid + first * sectorsize, n * sectorsize)?;
                }
                d.to_vec()
            }
            DEV_EXTENT => DevExtent::parse(d).map_err(e)?.to_bytes(),
            DEV_ITEM => DevItem::parse(d).map_err(e)?.to_bytes(),
            CHUNK_ITEM => ChunkItem::parse(d).map_err(e)?.to_bytes(),
            UUID_KEY_SUBVOL | UUID_KEY_RECEIVED_SUBVOL => {
                let ids = parse_uuid_item(d).map_err(e)?;
                enc(|o| encode_uuid_item(&ids, o))
            }
            ORPHAN_ITEM => Vec::new(),
            PERSISTENT_ITEM if k.objectid == DEV_STATS_OBJECTID => {
                enc(|o| DevStats::parse(d).unwrap().encode(o))
            }
            t => return Err(format!("no decoder/encoder pair for item type {t}")),
        })
    }

    fn extent_record(&mut self, k: &Key, d: &[u8]) -> Result<Vec<u8>, String> {
        self.finish()?;
        let rec = ExtentRecord::parse(k, d).map_err(|e| e.to_string())?;
        let mut sorted = rec.clone();
        sorted.sort_refs();
        if sorted != rec {
            return Err(format!("inline refs not in kernel order: {:?}", rec.refs));
        }
        let found = rec.refs.iter().map(InlineRef::count).sum();
        self.extent = Some((k.objectid, rec.item.refs, found));
        Ok(rec.to_bytes())
    }
}

#[test]
fn every_item_of_every_fixture_reencodes_byte_identically() {
    let mut totals: BTreeMap<u8, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for name in fixtures() {
        let imgs = unpack(&name);
        let opts = OpenOptions {
            devices: imgs.0[1..].to_vec(),
            ..Default::default()
        };
        let fs = Filesystem::open(&imgs.0[0], &opts).unwrap();
        let sectorsize = fs.info.sectorsize as u64;
        for tree in all_trees(&fs) {
            let mut ck = Checker {
                csum_size: fs.info.csum_type.size(),
                ..Default::default()
            };
            for_each_item(&fs.info, tree, Key::MIN, Key::MAX, |k, d| {
                *ck.counts.entry(k.item_type).or_default() += 1;
                match ck.reencode(&k, d, sectorsize) {
                    Ok(b) if b == d => {}
                    Ok(b) => failures.push(format!(
                        "{name} tree {} {k}: re-encoded {} bytes differ from the kernel's {}",
                        tree.id,
                        b.len(),
                        d.len()
                    )),
                    Err(m) => failures.push(format!("{name} tree {} {k}: {m}", tree.id)),
                }
                Ok(ControlFlow::Continue(()))
            })
            .unwrap();
            if let Err(m) = ck.finish() {
                failures.push(format!("{name} tree {}: {m}", tree.id));
            }
            for (t, n) in ck.counts {
                *totals.entry(t).or_default() += n;
            }
        }
    }
    let named: Vec<String> = totals
        .iter()
        .map(|(t, n)| format!("{} {n}", item_type_name(*t)))
        .collect();
    eprintln!("items re-encoded: {}", named.join(", "));
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures[..failures.len().min(40)].join("\n")
    );
    // The fixtures exercise at least these; if one disappears the test
    // has lost coverage, not passed.
    for t in [
        INODE_ITEM,
        INODE_REF,
        XATTR_ITEM,
        DIR_ITEM,
        DIR_INDEX,
        EXTENT_DATA,
        EXTENT_CSUM,
        ROOT_ITEM,
        ROOT_BACKREF,
        ROOT_REF,
        EXTENT_ITEM,
        METADATA_ITEM,
        EXTENT_DATA_REF,
        BLOCK_GROUP_ITEM,
        FREE_SPACE_INFO,
        FREE_SPACE_EXTENT,
        FREE_SPACE_BITMAP,
        DEV_EXTENT,
        DEV_ITEM,
        CHUNK_ITEM,
        UUID_KEY_SUBVOL,
    ] {
        assert!(
            totals.contains_key(&t),
            "no {} item in any fixture",
            item_type_name(t)
        );
    }
}
