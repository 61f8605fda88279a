//! Transactions: the write side of the engine, as the kernel's
//! transaction.c, ctree.c (changes), extent-tree.c and free-space-tree.c.
//!
//! A [`Trans`] holds every tree block changed since the last commit,
//! decoded ([`ExtentBuffer`]), at addresses never reached by the committed
//! superblock (copy-on-write). Extent references are recorded as
//! delayed refs and applied to the extent tree at commit, together with
//! block group usage and the free-space tree, until nothing changes.
//! Commit writes the blocks, flushes, writes the superblock on every copy
//! of every device, and flushes again: until then the image on disk is the
//! old one, whole.
//!
//! * [`ctree`]: search, insert, delete and resize items, with COW, split
//!   and merge;
//! * [`delayed_ref`]: reference changes and the extent tree;
//! * [`free_space_tree`]: the free-space tree of changed block groups;
//! * [`commit`]: the commit itself, superblocks and backup roots;
//! * [`open`]: opening a committed image for writing.

pub mod commit;
pub mod compact;
pub mod cow;
pub mod csum_tree;
pub mod ctree;
pub mod delayed_ref;
pub mod devices;
pub(crate) mod durable;
pub mod free_space_tree;
pub mod open;
pub mod relocation;
pub mod trim;
pub mod volumes;

/// The kernel's default max_inline: the largest file kept in its
/// EXTENT_DATA item.
pub const MAX_INLINE: u64 = 2048;

use crate::alloc::{Allocator, SpaceKind};
use crate::disk_io::FsInfo;
use crate::error::{Error, Result};
use crate::tree::block::BlockExpect;
use crate::tree::buf::ExtentBuffer;
use delayed_ref::{Backref, DelayedRefs};
use std::collections::{BTreeMap, HashMap};
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{ChunkItem, DevItem, RootItem};
use ubtrfs_format::Key;

/// A tree as the transaction knows it: where its root is now.
#[derive(Debug, Clone)]
pub struct Root {
    pub id: u64,
    pub bytenr: u64,
    pub level: u8,
    /// The ROOT_ITEM (for the root and chunk trees, whose roots live in
    /// the superblock, a default one that is never written).
    pub item: RootItem,
    /// The root moved or the item changed: the ROOT_ITEM needs writing.
    pub dirty: bool,
    /// The ROOT_ITEM key's offset: 0, or for snapshots the transid that
    /// made them.
    pub key_offset: u64,
}

/// An open transaction on a filesystem opened for writing.
pub struct Trans {
    /// The committed filesystem: devices (writable), chunk map, verified
    /// reads of committed blocks, and the superblock being built.
    pub info: FsInfo,
    pub transid: u64,
    /// Blocks changed or made in this transaction, by address.
    bufs: BlockMap<ExtentBuffer>,
    /// Trees loaded or changed in this transaction.
    roots: BTreeMap<u64, Root>,
    pub alloc: Allocator,
    refs: DelayedRefs,
    /// The fsid tree blocks carry (metadata_uuid when set).
    fsid: [u8; 16],
    chunk_tree_uuid: [u8; 16],
    /// DEV_ITEMs by devid, as of this transaction.
    dev_items: BTreeMap<u64, DevItem>,
    /// Device space given to chunks.
    dev_space: volumes::DevSpace,
    /// Chunks made in this transaction whose items are still to write.
    pending_chunks: Vec<(u64, ChunkItem)>,
    /// Profile bits of new chunks, by [`SpaceKind`].
    profiles: [u64; 3],
    /// Largest new chunk `grow` makes (mkfs --shrink keeps them small).
    pub chunk_cap: Option<u64>,
    /// Device items changed outside a new chunk (a shrunk device).
    pub(crate) dev_items_dirty: bool,
    /// Data checksums not yet in the csum tree.
    pub(crate) csum_run: csum_tree::CsumRun,
    /// Data space that changes taking space at once (a partial sector
    /// rewritten, [`crate::inode::InodeMut::take_space`]) leave free: the
    /// mount's dirty data, which its writeback will need (the kernel's
    /// bytes_may_use).
    /// Set by the mount around such a change; 0 otherwise.
    pub(crate) data_kept: u64,
    /// Tree changes made so far (callers tell whether a failed
    /// operation changed anything).
    pub(crate) mutations: u64,
    /// Committed blocks read in this transaction, decoded. Behind a mutex
    /// of its own: readers sharing the mount's lock ([`Trans`]'s `&self`
    /// reads) decode and keep blocks side by side.
    decoded: std::sync::Mutex<BlockMap<std::sync::Arc<ExtentBuffer>>>,
    /// ROOT_ITEMs that readers sharing the transaction read from the root
    /// tree for trees it has not loaded ([`Trans::root_view`]), kept so
    /// that every lookup in such a tree (a file's extents, its checksums)
    /// is not two descents. Emptied when the root tree changes
    /// ([`Trans::search_mut`] of it: every item change starts there).
    root_items: std::sync::Mutex<HashMap<u64, Root>>,
    /// Largest file kept inline in its EXTENT_DATA item (the max_inline
    /// mount option; 0 keeps none).
    pub max_inline: u64,
    /// Next DIR_INDEX per (tree, directory) handed out since the writer
    /// opened: indexes only grow (the kernel's in-memory index_cnt), so a
    /// name made after another was removed never takes the removed one's
    /// index, which the committed trees (and a log replayed over them)
    /// still have.
    pub(crate) dir_index_next: HashMap<(u64, u64), u64>,
    /// The lowest subvolume id this writer may hand out next
    /// (`Trans::new_subvol_id`): ids are never given twice in one run.
    pub(crate) next_subvol_id: u64,
    /// A commit whose superblock is still to write.
    pub(crate) deferred: Option<DeferredSuper>,
    /// How descents read ahead committed leaves ([`Trans::set_readahead`]).
    pub(crate) readahead: crate::cache::reada::Readahead,
    /// Devices added by this writer ([`Trans::add_device`]): their
    /// superblocks are written before the others', so that a kill between
    /// leaves no superblock naming a device that has none.
    pub(crate) added_devices: Vec<u64>,
}

/// A commit whose blocks are written and whose superblock is not yet
/// ([`Trans::commit_deferred`]).
pub(crate) struct DeferredSuper {
    /// The thread making that commit durable.
    writer: durable::Background,
    /// That commit's blocks when its thread writes them: they are the
    /// committed blocks at their addresses, read from here rather than
    /// from a disk that may not have them yet.
    written: BlockMap<std::sync::Arc<ExtentBuffer>>,
    /// Space that commit freed: the superblock on disk still reaches it.
    pinned: Vec<(u64, u64)>,
}

/// Maps by block address, with a cheap integer mixer (SipHash's
/// resistance to chosen keys is not needed on this hot path).
pub(crate) type BlockMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<AddrHasher>>;

/// The hasher of [`BlockMap`].
#[derive(Default)]
pub(crate) struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        // murmur3's finalizer: every input bit reaches the low bits (the
        // bucket) and the top bits (the tag); addresses differ only above
        // bit 12.
        let mut x = v ^ (v >> 33);
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        self.0 = x ^ (x >> 33);
    }
}

/// Most decoded committed blocks kept (about 64 KiB each at most).
const DECODED_BLOCKS: usize = 4096;

/// Makes room in a full map of decoded blocks: an eighth of them goes
/// (whichever the map holds first; not all, which would read every block
/// in use again).
fn evict_some(d: &mut BlockMap<std::sync::Arc<ExtentBuffer>>) {
    let mut n = 0usize;
    d.retain(|_, _| {
        n += 1;
        !n.is_multiple_of(8)
    });
}

/// A block being read: this transaction's copy, or a decoded committed
/// one.
pub(crate) enum BlockRef<'a> {
    Tx(&'a ExtentBuffer),
    Committed(std::sync::Arc<ExtentBuffer>),
}

impl std::ops::Deref for BlockRef<'_> {
    type Target = ExtentBuffer;
    fn deref(&self) -> &ExtentBuffer {
        match self {
            BlockRef::Tx(b) => b,
            BlockRef::Committed(b) => b,
        }
    }
}

impl BlockRef<'_> {
    pub(crate) fn into_owned(self) -> ExtentBuffer {
        match self {
            BlockRef::Tx(b) => b.clone(),
            BlockRef::Committed(b) => {
                std::sync::Arc::try_unwrap(b).unwrap_or_else(|b| (*b).clone())
            }
        }
    }
}

impl Trans {
    pub fn nodesize(&self) -> u32 {
        self.info.nodesize
    }

    /// The extent tree key of tree block `bytenr` at `level`: its
    /// METADATA_ITEM, or on an image without skinny metadata its
    /// EXTENT_ITEM (which holds the level in a tree block info).
    pub fn tree_block_key(&self, bytenr: u64, level: u8) -> Key {
        if self.info.sb.incompat_flags & INCOMPAT_SKINNY_METADATA != 0 {
            Key::new(bytenr, METADATA_ITEM, level as u64)
        } else {
            Key::new(bytenr, EXTENT_ITEM, self.nodesize() as u64)
        }
    }

    pub fn sectorsize(&self) -> u32 {
        self.info.sectorsize
    }

    /// The tree `id`, loading its ROOT_ITEM from the root tree the first
    /// time; NotFound when there is none.
    pub fn root(&mut self, id: u64) -> Result<&Root> {
        if !self.roots.contains_key(&id) {
            let r = self.read_root(id)?;
            self.roots.insert(id, r);
        }
        Ok(&self.roots[&id])
    }

    /// The tree `id` as it is now, for a reader that shares the
    /// transaction (`&self`): the loaded root, or else its ROOT_ITEM in the
    /// root tree (a tree not loaded has not changed in this transaction,
    /// so that item is current), read once and kept in `root_items` until
    /// the root tree changes.
    pub fn root_view(&self, id: u64) -> Result<std::borrow::Cow<'_, Root>> {
        if let Some(r) = self.roots.get(&id) {
            return Ok(std::borrow::Cow::Borrowed(r));
        }
        let kept = || self.root_items.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = kept().get(&id) {
            return Ok(std::borrow::Cow::Owned(r.clone()));
        }
        let r = self.read_root(id)?;
        kept().insert(id, r.clone());
        Ok(std::borrow::Cow::Owned(r))
    }

    /// The root tree is about to change: the ROOT_ITEMs read from it
    /// before may not be current any more.
    pub(crate) fn root_tree_changing(&mut self) {
        self.root_items
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Tree `id`'s ROOT_ITEM, read from the root tree (always loaded).
    fn read_root(&self, id: u64) -> Result<Root> {
        let key = Key::new(id, ROOT_ITEM, 0);
        let (k, data) = self
            .search_first(ROOT_TREE_OBJECTID, &key)?
            .filter(|(k, _)| k.objectid == id && k.item_type == ROOT_ITEM)
            .ok_or_else(|| Error::NotFound(format!("tree {id}: no ROOT_ITEM")))?;
        let item =
            RootItem::parse(&data).map_err(|e| Error::format(format!("root tree key {k}"), e))?;
        Ok(Root {
            id,
            bytenr: item.bytenr,
            level: item.level,
            item,
            dirty: false,
            key_offset: k.offset,
        })
    }

    /// The ROOT_ITEM of tree `id`, to change; it is written at commit.
    pub fn root_item_mut(&mut self, id: u64) -> Result<&mut RootItem> {
        self.root(id)?;
        let r = self.roots.get_mut(&id).unwrap();
        r.dirty = true;
        Ok(&mut r.item)
    }

    /// The filesystem's label, in the superblock this transaction writes
    /// (at most 255 bytes, no NUL).
    pub fn set_label(&mut self, label: &[u8]) -> Result<()> {
        if label.len() >= 256 || label.contains(&0) {
            return Err(Error::Invalid(format!(
                "a label of {} bytes: at most 255, without NUL",
                label.len()
            )));
        }
        self.info.sb.label = label.to_vec();
        // The superblock alone changed: the commit must still be made.
        self.mutations += 1;
        Ok(())
    }

    /// Sets the fsid every DEV_ITEM names (`tune -U`: the superblocks'
    /// copies; the chunk tree's are rewritten in place).
    pub(crate) fn set_dev_items_fsid(&mut self, fsid: [u8; 16]) {
        for d in self.dev_items.values_mut() {
            d.fsid = fsid;
        }
        self.fsid = fsid;
    }

    /// A new filesystem UUID (btrfstune -M): the superblock's fsid is
    /// `fsid`, and the tree blocks keep the UUID they carry, named by the
    /// superblock's metadata_uuid (INCOMPAT_METADATA_UUID), or by the fsid
    /// itself again when `fsid` is that UUID (the flag goes). The device
    /// items keep it too, as the kernel checks.
    pub fn set_fsid(&mut self, fsid: [u8; 16]) -> Result<()> {
        let sb = &mut self.info.sb;
        if fsid == [0; 16] {
            return Err(Error::Invalid("a filesystem UUID of zeros".into()));
        }
        if fsid == sb.metadata_uuid {
            sb.incompat_flags &= !INCOMPAT_METADATA_UUID;
        } else {
            sb.incompat_flags |= INCOMPAT_METADATA_UUID;
        }
        sb.fsid = fsid;
        // The superblock alone changed: the commit must still be made.
        self.mutations += 1;
        Ok(())
    }

    /// Whether tree `id` exists.
    pub fn has_tree(&self, id: u64) -> Result<bool> {
        match self.root_view(id) {
            Ok(_) => Ok(true),
            Err(Error::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Makes tree `id` with an empty leaf as root and `item` as its
    /// ROOT_ITEM (bytenr, level and generation are filled in at commit).
    pub fn create_tree(&mut self, id: u64, item: RootItem) -> Result<()> {
        self.create_tree_at(id, item, 0, 0)
    }

    /// Makes tree `id` whose root block holds `content` at `level` (a
    /// snapshot's copy of its source's root), the ROOT_ITEM keyed at
    /// `key_offset`. The caller gives the references of what the block
    /// points to.
    pub fn create_tree_from(
        &mut self,
        id: u64,
        item: RootItem,
        key_offset: u64,
        level: u8,
        content: crate::tree::buf::Content,
    ) -> Result<()> {
        self.create_tree_at(id, item, key_offset, level)?;
        let b = self.roots[&id].bytenr;
        self.buf_mut(b).content = content;
        Ok(())
    }

    /// Removes tree `id`'s ROOT_ITEM (its blocks are the caller's).
    pub fn forget_tree(&mut self, id: u64) -> Result<()> {
        let r = self
            .roots
            .remove(&id)
            .ok_or_else(|| Error::NotFound(format!("tree {id}")))?;
        self.delete_item(ROOT_TREE_OBJECTID, &Key::new(id, ROOT_ITEM, r.key_offset))?;
        Ok(())
    }

    /// A block as it is now (this transaction's copy or the committed one).
    pub fn load_block(&self, bytenr: u64, expect: BlockExpect) -> Result<ExtentBuffer> {
        Ok(self.load(bytenr, expect)?.into_owned())
    }

    /// A reference change on an existing tree block (one node).
    pub fn add_tree_ref(&mut self, bytenr: u64, level: u8, backref: Backref, delta: i64) {
        let ns = self.nodesize() as u64;
        self.refs
            .add_tree_block(bytenr, ns, level, backref, delta, false);
    }

    /// Gives committed tree block `bytenr` an extent item with `refs` (a
    /// repair: the block is in use, its extent item missing). Its space
    /// leaves the free ranges first, so that nothing is allocated over it.
    pub fn claim_tree_block(
        &mut self,
        bytenr: u64,
        level: u8,
        refs: &[(Backref, u64)],
    ) -> Result<()> {
        let ns = self.nodesize() as u64;
        self.take_space(bytenr, ns, "tree block")?;
        for (i, &(b, c)) in refs.iter().enumerate() {
            self.refs
                .add_tree_block(bytenr, ns, level, b, c as i64, i == 0);
        }
        // The item keeps the block's generation, as the kernel wrote it
        // when it made the block (root items and parents name it so).
        let expect = crate::tree::block::BlockExpect {
            level: Some(level),
            ..Default::default()
        };
        let generation = self.info.read_tree_block(bytenr, expect)?.header.generation;
        self.refs.set_generation(bytenr, generation);
        Ok(())
    }

    /// Gives data extent `bytenr` (`len` bytes), which file extent items
    /// refer to but the extent tree lacks, its extent item with `refs`
    /// (check's repair): its space is taken out of the free space; its
    /// block group's `used` already counts it.
    pub fn claim_data_extent(
        &mut self,
        bytenr: u64,
        len: u64,
        refs: &[(Backref, u64)],
    ) -> Result<()> {
        self.take_space(bytenr, len, "data extent")?;
        for (i, &(b, c)) in refs.iter().enumerate() {
            self.refs.add_data(bytenr, len, b, c as i64, i == 0);
        }
        Ok(())
    }

    /// Takes `[bytenr, bytenr+len)` (a `what` the extent tree lacks) out
    /// of its block group's free space, where it is still listed; the
    /// group's `used` already counts it.
    fn take_space(&mut self, bytenr: u64, len: u64, what: &str) -> Result<()> {
        let g = self
            .alloc
            .group_of(bytenr)
            .ok_or_else(|| Error::NotFound(format!("{what} {bytenr}: in no block group")))?;
        g.remove_free(bytenr, len);
        g.item_dirty = true;
        Ok(())
    }

    /// Like [`Trans::create_tree`], the ROOT_ITEM keyed at `key_offset`,
    /// the root an empty block at `level`.
    fn create_tree_at(
        &mut self,
        id: u64,
        mut item: RootItem,
        key_offset: u64,
        level: u8,
    ) -> Result<()> {
        if id != ROOT_TREE_OBJECTID && id != CHUNK_TREE_OBJECTID && self.has_tree(id)? {
            return Err(Error::Invalid(format!("tree {id} exists")));
        }
        let bytenr = self.alloc_tree_block(id, level, None)?;
        item.generation = self.transid;
        self.roots.insert(
            id,
            Root {
                id,
                bytenr,
                level,
                item,
                dirty: true,
                key_offset,
            },
        );
        Ok(())
    }

    /// How many tree blocks this transaction holds changed (writers
    /// commit when it grows, to bound memory).
    /// How many tree changes this transaction has made.
    pub fn mutations(&self) -> u64 {
        self.mutations
    }

    pub fn dirty_blocks(&self) -> usize {
        self.bufs.len()
    }

    /// Extents whose reference changes the commit applies to the extent
    /// tree (and, for data freed, to the csum and free-space trees).
    pub fn pending_ref_heads(&self) -> usize {
        self.refs.len()
    }

    /// Ids of the trees changed in this transaction.
    pub fn dirty_roots(&self) -> Vec<u64> {
        self.roots
            .values()
            .filter(|r| r.dirty)
            .map(|r| r.id)
            .collect()
    }

    /// A block joined (`grew`) or left tree `id`: its ROOT_ITEM's
    /// bytes_used follows, one node size each (the kernel's
    /// root_add_used_bytes / root_sub_used_bytes, on splits, new roots and
    /// removed blocks; a COW replaces a block and changes nothing). The
    /// kernel sizes its global block reserve from these and subtracts as
    /// it removes blocks: a count left at mkfs's one block wraps there
    /// below zero, and the reserve becomes 512 MiB.
    pub(crate) fn tree_blocks_changed(&mut self, id: u64, grew: bool) {
        let ns = self.nodesize() as u64;
        if let Some(r) = self.roots.get_mut(&id) {
            r.item.bytes_used = if grew {
                r.item.bytes_used.saturating_add(ns)
            } else {
                r.item.bytes_used.saturating_sub(ns)
            };
            r.dirty = true;
        }
    }

    /// Points tree `id`'s root item at another root block that the extent
    /// tree already accounts for (check's repair of an outdated root item:
    /// no reference changes).
    pub(crate) fn repoint_root(
        &mut self,
        id: u64,
        bytenr: u64,
        level: u8,
        generation: u64,
    ) -> Result<()> {
        self.root(id)?;
        self.set_root(id, bytenr, level, generation);
        Ok(())
    }

    fn set_root(&mut self, id: u64, bytenr: u64, level: u8, generation: u64) {
        let r = self.roots.get_mut(&id).expect("root loaded before change");
        r.bytenr = bytenr;
        r.level = level;
        r.item.generation = generation;
        r.dirty = true;
    }

    /// The decoded committed blocks (a panic elsewhere while holding them
    /// leaves a map that is still whole: every change is one insert or
    /// remove).
    fn decoded(&self) -> std::sync::MutexGuard<'_, BlockMap<std::sync::Arc<ExtentBuffer>>> {
        self.decoded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The decoded committed blocks, for a caller that holds the
    /// transaction alone (no lock taken).
    fn decoded_mut(&mut self) -> &mut BlockMap<std::sync::Arc<ExtentBuffer>> {
        self.decoded.get_mut().unwrap_or_else(|p| p.into_inner())
    }

    /// The block at `bytenr`: this transaction's copy, or the committed
    /// one read and verified against what its parent pointer promised
    /// (decoded once and kept until the commit: committed blocks do not
    /// change, and their addresses stay pinned until then).
    fn load(&self, bytenr: u64, expect: BlockExpect) -> Result<BlockRef<'_>> {
        if let Some(b) = self.bufs.get(&bytenr) {
            return Ok(BlockRef::Tx(b));
        }
        if let Some(b) = self.decoded().get(&bytenr) {
            return Ok(BlockRef::Committed(b.clone()));
        }
        if let Some(b) = self.deferred_block(bytenr) {
            return Ok(BlockRef::Committed(b.clone()));
        }
        let eb = std::sync::Arc::new(self.read_committed(bytenr, expect)?);
        let mut d = self.decoded();
        if d.len() >= DECODED_BLOCKS {
            evict_some(&mut d);
        }
        d.insert(bytenr, eb.clone());
        Ok(BlockRef::Committed(eb))
    }

    /// Reads the committed block at `bytenr` whatever generation its
    /// header holds (its parent's pointer wanting another: a repair, which
    /// copies it on write next) and keeps it decoded for that copy.
    pub fn accept_block(&self, bytenr: u64, level: u8) -> Result<()> {
        let expect = BlockExpect {
            level: Some(level),
            generation: None,
            first_key: None,
        };
        let eb = std::sync::Arc::new(self.read_committed(bytenr, expect)?);
        self.decoded().insert(bytenr, eb);
        Ok(())
    }

    /// The committed block at `bytenr`, read, verified and decoded.
    fn read_committed(&self, bytenr: u64, expect: BlockExpect) -> Result<ExtentBuffer> {
        let tb = self.info.read_tree_block(bytenr, expect)?;
        let h = tb.header;
        Ok(ExtentBuffer::decode(
            tb.node(),
            bytenr,
            h.generation,
            h.owner,
            h.flags,
        ))
    }

    /// The block at `bytenr` to change: taken out of the decoded blocks
    /// (the committed copy is not read through this address again in this
    /// transaction), else read.
    pub(crate) fn take_committed(
        &mut self,
        bytenr: u64,
        expect: BlockExpect,
    ) -> Result<ExtentBuffer> {
        match self.decoded_mut().remove(&bytenr) {
            Some(b) => Ok(std::sync::Arc::try_unwrap(b).unwrap_or_else(|b| (*b).clone())),
            None => match self.deferred_block(bytenr) {
                Some(b) => Ok((**b).clone()),
                None => self.read_committed(bytenr, expect),
            },
        }
    }

    /// The block at `bytenr` of a deferred commit whose thread writes it.
    pub(crate) fn deferred_block(&self, bytenr: u64) -> Option<&std::sync::Arc<ExtentBuffer>> {
        self.deferred.as_ref()?.written.get(&bytenr)
    }

    /// At commit: the decoded committed blocks are forgotten (what the
    /// commit freed may be reused from now on), and the blocks just
    /// written are kept decoded in their place (they are the committed
    /// blocks at their addresses now), up to the cap, nodes first: the
    /// next transaction goes on changing the same leaves (a directory
    /// receiving files) and need not read them back.
    pub(crate) fn keep_written_decoded(
        &mut self,
        written: Vec<(u64, std::sync::Arc<ExtentBuffer>)>,
    ) {
        let d = self.decoded_mut();
        d.clear();
        let mut leaves = Vec::new();
        for (a, eb) in written {
            if eb.is_leaf() {
                leaves.push((a, eb));
            } else if d.len() < DECODED_BLOCKS {
                d.insert(a, eb);
            }
        }
        for (a, eb) in leaves {
            if d.len() >= DECODED_BLOCKS {
                break;
            }
            d.insert(a, eb);
        }
    }

    fn buf(&self, bytenr: u64) -> &ExtentBuffer {
        &self.bufs[&bytenr]
    }

    fn buf_mut(&mut self, bytenr: u64) -> &mut ExtentBuffer {
        self.bufs
            .get_mut(&bytenr)
            .expect("block changed in this transaction")
    }

    /// Allocates a new tree block for tree `owner` at `level`, empty, and
    /// records its reference. `near`: not used yet (allocation is in
    /// address order).
    fn alloc_tree_block(&mut self, owner: u64, level: u8, _near: Option<u64>) -> Result<u64> {
        let ns = self.nodesize() as u64;
        let kind = if owner == CHUNK_TREE_OBJECTID {
            SpaceKind::System
        } else {
            SpaceKind::Metadata
        };
        let bytenr = match self.alloc.alloc(kind, ns, ns) {
            Some(b) => b,
            None => {
                self.grow(kind)?;
                self.alloc.alloc(kind, ns, ns).ok_or_else(|| {
                    Error::NoSpace(format!(
                        "no {kind:?} space for a tree block of tree {owner}"
                    ))
                })?
            }
        };
        let mut eb = ExtentBuffer::new_leaf(bytenr, self.transid, owner);
        eb.level = level;
        if level > 0 {
            eb.content = crate::tree::buf::Content::Node(Vec::new());
        }
        self.bufs.insert(bytenr, eb);
        self.refs
            .add_tree_block(bytenr, ns, level, Backref::Tree { root: owner }, 1, true);
        Ok(bytenr)
    }

    /// Frees tree block `bytenr` of tree `owner`: at once when it was made
    /// in this transaction, else at commit (pinned until then).
    fn free_tree_block(&mut self, bytenr: u64, owner: u64, level: u8) {
        let ns = self.nodesize() as u64;
        self.bufs.remove(&bytenr);
        self.refs
            .add_tree_block(bytenr, ns, level, Backref::Tree { root: owner }, -1, false);
    }
}
