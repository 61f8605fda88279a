//! Tree blocks as the reader holds them, and their verification: the
//! bottom of the tree layer, used by demand reads, readahead and scrub
//! alike. Depends on the format crate only.

use crate::error::{Error, Result};
use ubtrfs_format::key::Key;
use ubtrfs_format::node::{Header, Node};
use ubtrfs_format::CsumType;

/// A tree block that passed checksum and structure validation.
#[derive(Debug)]
pub struct TreeBlock {
    pub bytenr: u64,
    pub header: Header,
    data: Box<[u8]>,
}

impl TreeBlock {
    pub fn new(bytenr: u64, header: Header, data: Box<[u8]>) -> Self {
        TreeBlock {
            bytenr,
            header,
            data,
        }
    }

    pub fn node(&self) -> Node<'_> {
        Node::from_validated(self.header, &self.data)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.data
    }
}

/// What a parent pointer says about the block it points to.
#[derive(Debug, Clone, Copy, Default)]
pub struct BlockExpect {
    pub level: Option<u8>,
    pub generation: Option<u64>,
    pub first_key: Option<Key>,
}

/// Verifies a tree block read from `bytenr`: checksum, bytenr, fsid (when
/// given: not while an fsid change is under way), structure, and what the
/// parent pointer promised. Every tree block read,
/// on demand or ahead, goes through here.
pub fn verify_tree_block(
    buf: Box<[u8]>,
    bytenr: u64,
    csum_type: CsumType,
    fsid: Option<&[u8; 16]>,
    expect: &BlockExpect,
) -> Result<TreeBlock> {
    let here = || format!("tree block {bytenr}");
    csum_type
        .verify(&buf[32..], &buf[..32])
        .map_err(|e| Error::format(here(), e))?;
    let header = Header::parse(&buf).map_err(|e| Error::format(here(), e))?;
    if header.bytenr != bytenr {
        return Err(Error::corrupt(
            here(),
            format!("header says bytenr {}", header.bytenr),
        ));
    }
    if fsid.is_some_and(|f| header.fsid != *f) {
        return Err(Error::corrupt(here(), "fsid does not match the superblock"));
    }
    let node = Node::parse(&buf).map_err(|e| Error::format(here(), e))?;
    check_expectations(&header, node, bytenr, expect)?;
    Ok(TreeBlock::new(bytenr, header, buf))
}

pub(crate) fn check_expectations(
    header: &Header,
    node: Node<'_>,
    bytenr: u64,
    e: &BlockExpect,
) -> Result<()> {
    let here = || format!("tree block {bytenr}");
    if let Some(l) = e.level {
        if header.level != l {
            return Err(Error::corrupt(
                here(),
                format!("level {} but parent expects {l}", header.level),
            ));
        }
    }
    if let Some(g) = e.generation {
        if header.generation != g {
            return Err(Error::corrupt(
                here(),
                format!("generation {} but parent expects {g}", header.generation),
            ));
        }
    }
    if let Some(k) = e.first_key {
        if node.nritems() > 0 && node.key(0) != k {
            return Err(Error::corrupt(
                here(),
                format!("first key {} but parent expects {k}", node.key(0)),
            ));
        }
    }
    Ok(())
}
