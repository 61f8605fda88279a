//! The engine's view of a fixture for in-process tests: opening it, its
//! trees, every tree block and which trees reach it, and the image files
//! opened for writing (to corrupt a private copy).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use ubtrfs_engine::ctree::{for_each_item, Tree};
use ubtrfs_engine::tree::block::{BlockExpect, TreeBlock};
use ubtrfs_engine::{Filesystem, OpenOptions};
use ubtrfs_format::consts::ROOT_ITEM;
use ubtrfs_format::key::Key;

use crate::fixtures::Fixture;

/// Opens fixture `f` (every device) with the default cache.
pub fn open_fixture(f: &Fixture) -> Filesystem {
    let devs = f.devices();
    let opts = OpenOptions {
        devices: devs[1..].to_vec(),
        ..Default::default()
    };
    Filesystem::open(&devs[0], &opts).unwrap_or_else(|e| panic!("{}: open: {e}", f.name))
}

/// The root tree and every tree it has a ROOT_ITEM for.
pub fn all_trees(fs: &Filesystem) -> Vec<Tree> {
    let mut ids = BTreeSet::new();
    for_each_item(&fs.info, fs.root_tree, Key::MIN, Key::MAX, |k, _| {
        if k.item_type == ROOT_ITEM {
            ids.insert(k.objectid);
        }
        Ok(ControlFlow::Continue(()))
    })
    .unwrap();
    let mut trees = vec![fs.root_tree];
    trees.extend(ids.into_iter().filter_map(|id| fs.tree_opt(id).unwrap()));
    trees
}

/// Every block of `trees` (read and verified once each), with the ids of
/// the trees that reach it (a snapshot shares blocks with its source).
pub fn tree_blocks(fs: &Filesystem, trees: &[Tree]) -> Vec<(Arc<TreeBlock>, BTreeSet<u64>)> {
    let mut out: BTreeMap<u64, (Arc<TreeBlock>, BTreeSet<u64>)> = BTreeMap::new();
    for t in trees {
        let mut stack = vec![(t.bytenr, t.level)];
        while let Some((bytenr, level)) = stack.pop() {
            if let Some((_, ids)) = out.get_mut(&bytenr) {
                if !ids.insert(t.id) {
                    continue;
                }
            }
            let b = match out.get(&bytenr) {
                Some((b, _)) => b.clone(),
                None => fs
                    .info
                    .read_tree_block(
                        bytenr,
                        BlockExpect {
                            level: Some(level),
                            ..Default::default()
                        },
                    )
                    .unwrap(),
            };
            let n = b.node();
            if !n.is_leaf() {
                for i in 0..n.nritems() {
                    stack.push((n.key_ptr(i).blockptr, level - 1));
                }
            }
            out.entry(bytenr)
                .or_insert_with(|| (b.clone(), BTreeSet::new()))
                .1
                .insert(t.id);
        }
    }
    out.into_values().collect()
}

/// Image files opened for reading and writing.
pub fn open_rw<P: AsRef<Path>>(images: &[P]) -> Vec<File> {
    images
        .iter()
        .map(|p| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .unwrap_or_else(|e| panic!("{}: {e}", p.as_ref().display()))
        })
        .collect()
}
