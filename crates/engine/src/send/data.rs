//! File data in a send stream: writes (plain or encoded), clones of extents
//! the receiver already has, holes and update-extent commands.
//!
//! Clone sources are found as the kernel finds them: through the back
//! references of the data extent in the extent tree, kept when the
//! referencing file range exists in one of the clone roots (the sent
//! snapshot itself for inodes already sent, the parent, the -c sources).

use super::{CloneRoot, Sender};
use crate::ctree::{Cursor, Tree};
use crate::data::extent::{Extent, ExtentKind};
use crate::data::read::DataReader;
use crate::error::Result;
use crate::fs::file::FileHandle;
use crate::fs::InodeId;
use crate::tree::block::BlockExpect;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{ExtentRecord, InlineRef};
use ubtrfs_format::key::Key;
use ubtrfs_format::send_stream::{attr, cmd, max_write, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE};

/// Most references an extent may have for clones to be looked for (the
/// kernel's SEND_MAX_EXTENT_REFS).
const MAX_EXTENT_REFS: u64 = 1024;
const PAGE: u64 = 4096;

/// The attributes of an ENCODED_WRITE.
struct Encoded {
    offset: u64,
    unencoded_file_len: u64,
    unencoded_len: u64,
    unencoded_offset: u64,
    compression: u8,
    with_encryption: bool,
}

/// Where a clone reads from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CloneSrc {
    pub root: CloneRoot,
    pub ino: u64,
    pub offset: u64,
}

/// A file range that references a data extent (from a back reference).
#[derive(Debug, Clone, Copy)]
enum Cand {
    /// EXTENT_DATA_REF: inode and file offset minus extent offset.
    Direct { ino: u64, base: u64 },
    /// SHARED_DATA_REF: a leaf holding the referencing items.
    Shared { leaf: u64 },
}

fn encoded_compression(c: u8, sectorsize: u64) -> u32 {
    match c {
        COMPRESS_ZLIB => 1,
        COMPRESS_ZSTD => 2,
        // LZO_4K .. LZO_64K by sector size.
        COMPRESS_LZO => 3 + (sectorsize.trailing_zeros().saturating_sub(12)),
        _ => 0,
    }
}

/// A clone candidate of [`Sender::find_clone`]: (leaf, ino, file offset,
/// item length, clone root index).
type CloneCand = (u64, u64, u64, u64, usize);
impl Sender<'_, '_> {
    pub(crate) fn root_of(&self, r: CloneRoot) -> &super::RootInfo {
        match r {
            CloneRoot::Send => &self.send,
            CloneRoot::Parent => self.parent.as_ref().expect("parent root"),
            CloneRoot::Source(i) => &self.clones[i],
        }
    }

    /// The extent of a new inode (full send, new inode of an incremental).
    pub(crate) fn process_extent_new(&mut self, key: &Key, data: &[u8]) -> Result<()> {
        if self.cur.is_symlink() {
            return Ok(());
        }
        let ext = self.decode_extent(self.send.tree, key, data)?;
        // No prealloc command in the stream; holes need nothing.
        if matches!(ext.kind, ExtentKind::Prealloc { .. } | ExtentKind::Hole) {
            return Ok(());
        }
        self.send_extent(&ext)
    }

    /// Sends the data of extent item `ext` of the current inode: a clone
    /// when a source is found, else writes.
    pub(crate) fn send_extent(&mut self, ext: &Extent) -> Result<()> {
        let clone = self.find_clone(ext)?;
        self.send_write_or_clone(ext, clone)
    }

    fn send_write_or_clone(&mut self, ext: &Extent, clone: Option<CloneSrc>) -> Result<()> {
        let size = self.cur.ii.size;
        let offset = ext.start;
        let end = ext.end.min(size);
        if offset >= end {
            return Ok(());
        }
        let len = end - offset;
        let res = match clone {
            Some(src) if end & (self.sectorsize - 1) == 0 => {
                self.clone_range(ext, src, offset, len)
            }
            Some(src) if end == size => {
                // An unaligned extent can be cloned when it ends at the
                // i_size of both files.
                let src_size = self.clone_src_size(src)?;
                if src.offset + len == src_size {
                    if self.parent.is_some() {
                        self.send_truncate(offset)?;
                    }
                    self.clone_range(ext, src, offset, len)
                } else {
                    self.send_extent_data(Some(ext), offset, len)
                }
            }
            _ => self.send_extent_data(Some(ext), offset, len),
        };
        self.cur.next_write_offset = end;
        res
    }

    fn clone_src_size(&self, src: CloneSrc) -> Result<u64> {
        let r = self.root_of(src.root);
        Ok(self
            .fs
            .inode_item_in(r.tree, src.ino)?
            .map(|i| i.size)
            .unwrap_or(0))
    }

    /// Data of the current file for `[offset, offset + len)`: an encoded
    /// write of the whole compressed extent when asked and it fits, else
    /// writes of at most 48K (v1) / 128K (v2).
    pub(crate) fn send_extent_data(
        &mut self,
        ext: Option<&Extent>,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        if self.opts.no_data {
            return self.send_update_extent(offset, len);
        }
        if let Some(e) = ext {
            if self.opts.compressed_data && e.compression != COMPRESS_NONE {
                match &e.kind {
                    ExtentKind::Inline { ram_bytes, data } if data.len() as u64 <= len => {
                        let (ram, data) = (*ram_bytes, data.clone());
                        let enc = Encoded {
                            offset,
                            unencoded_file_len: (e.start + ram - offset).min(len),
                            unencoded_len: ram,
                            unencoded_offset: offset - e.start,
                            compression: e.compression,
                            with_encryption: false,
                        };
                        return self.send_encoded(&enc, &data);
                    }
                    ExtentKind::Regular {
                        disk_bytenr,
                        disk_num_bytes,
                        offset: eoff,
                        num_bytes,
                        ram_bytes,
                    } if *disk_num_bytes <= len => {
                        let fs = self.fs;
                        let raw = self.reader().read_disk(fs, *disk_bytenr, *disk_num_bytes)?;
                        let enc = Encoded {
                            offset,
                            unencoded_file_len: (e.start + num_bytes - offset).min(len),
                            unencoded_len: *ram_bytes,
                            unencoded_offset: offset - e.start + eoff,
                            compression: e.compression,
                            with_encryption: true,
                        };
                        return self.send_encoded(&enc, &raw);
                    }
                    _ => {}
                }
            }
        }
        let max = max_write(self.w.proto());
        let mut sent = 0;
        while sent < len {
            let n = (len - sent).min(max);
            self.send_write(ext, offset + sent, n as usize)?;
            sent += n;
        }
        Ok(())
    }

    fn send_write(&mut self, ext: Option<&Extent>, offset: u64, len: usize) -> Result<()> {
        let p = self.cur_path()?;
        let mut buf = vec![0u8; len];
        self.read_file(ext, offset, &mut buf)?;
        self.w.begin(cmd::WRITE);
        self.w.put(attr::PATH, &p);
        self.w.put_u64(attr::FILE_OFFSET, offset);
        self.w.put_data(&buf);
        self.w.finish()
    }

    fn send_encoded(&mut self, e: &Encoded, data: &[u8]) -> Result<()> {
        let p = self.cur_path()?;
        self.w.begin(cmd::ENCODED_WRITE);
        self.w.put(attr::PATH, &p);
        self.w.put_u64(attr::FILE_OFFSET, e.offset);
        self.w
            .put_u64(attr::UNENCODED_FILE_LEN, e.unencoded_file_len);
        self.w.put_u64(attr::UNENCODED_LEN, e.unencoded_len);
        self.w.put_u64(attr::UNENCODED_OFFSET, e.unencoded_offset);
        self.w.put_u32(
            attr::COMPRESSION,
            encoded_compression(e.compression, self.sectorsize),
        );
        // The kernel leaves the (default) encryption out for inline extents.
        if e.with_encryption {
            self.w.put_u32(attr::ENCRYPTION, 0);
        }
        self.w.put_data(data);
        self.w.finish()
    }

    pub(crate) fn send_update_extent(&mut self, offset: u64, len: u64) -> Result<()> {
        let p = self.cur_path()?;
        self.w.begin(cmd::UPDATE_EXTENT);
        self.w.put(attr::PATH, &p);
        self.w.put_u64(attr::FILE_OFFSET, offset);
        self.w.put_u64(attr::SIZE, len);
        self.w.finish()
    }

    /// A hole in the current file at `[start, end)` where the receiver has
    /// data: a punch (v2) or writes of zeros (v1).
    pub(crate) fn send_hole(&mut self, start: u64, end: u64) -> Result<()> {
        let end = end.min(self.cur.ii.size);
        if start >= end {
            return Ok(());
        }
        if self.opts.no_data {
            return self.send_update_extent(start, end - start);
        }
        let p = self.cur_path()?;
        if self.w.proto() >= 2 {
            self.w.begin(cmd::FALLOCATE);
            self.w.put(attr::PATH, &p);
            self.w.put_u32(
                attr::FALLOCATE_MODE,
                FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
            );
            self.w.put_u64(attr::FILE_OFFSET, start);
            self.w.put_u64(attr::SIZE, end - start);
            return self.w.finish();
        }
        let max = max_write(self.w.proto());
        let mut off = start;
        while off < end {
            let n = (end - off).min(max) as usize;
            self.w.begin(cmd::WRITE);
            self.w.put(attr::PATH, &p);
            self.w.put_u64(attr::FILE_OFFSET, off);
            self.w.data_slot(n);
            self.w.finish()?;
            off += n as u64;
        }
        Ok(())
    }

    // ------------------------------------------------------------ reading

    /// Decodes an EXTENT_DATA item of `tree` (the one validated decoder).
    pub(crate) fn decode_extent(&self, tree: Tree, key: &Key, data: &[u8]) -> Result<Extent> {
        Extent::decode(tree, key, data, self.sectorsize)
    }

    /// The data reader, set to the current inode.
    fn reader(&mut self) -> &mut DataReader {
        let nodatasum = self.cur.ii.flags & INODE_NODATASUM != 0;
        self.reader.set_inode(self.cur.ino, nodatasum);
        &mut self.reader
    }

    /// Reads `[offset, offset + out.len())` of the current file, from `ext`
    /// when it covers the range, else through the file's extent map.
    fn read_file(&mut self, ext: Option<&Extent>, offset: u64, out: &mut [u8]) -> Result<()> {
        let len = out.len() as u64;
        if let Some(e) = ext {
            if offset >= e.start && offset + len <= e.end {
                let fs = self.fs;
                let reader = self.reader();
                let mut done = 0;
                while done < out.len() {
                    let n = reader.read_extent(fs, e, offset + done as u64, &mut out[done..])?;
                    if n == 0 {
                        break;
                    }
                    done += n;
                }
                out[done..].fill(0);
                return Ok(());
            }
        }
        if self.cur.fh.is_none() {
            let id = InodeId {
                subvol: self.send.id,
                ino: self.cur.ino,
            };
            self.cur.fh = Some(FileHandle::open(self.fs, id)?);
        }
        let fh = self.cur.fh.as_mut().unwrap();
        let n = fh.read_at(self.fs, offset, out)?;
        out[n..].fill(0);
        Ok(())
    }

    // ------------------------------------------------------------ clones

    /// The clone roots in the kernel's order (by subvolume id).
    fn clone_roots(&self) -> Vec<CloneRoot> {
        let mut v: Vec<(u64, CloneRoot)> = vec![(self.send.id, CloneRoot::Send)];
        if let Some(p) = &self.parent {
            v.push((p.id, CloneRoot::Parent));
        }
        for (i, c) in self.clones.iter().enumerate() {
            v.push((c.id, CloneRoot::Source(i)));
        }
        v.sort_by_key(|x| x.0);
        v.into_iter().map(|x| x.1).collect()
    }

    /// A place the receiver already has the data of `ext` (a regular
    /// extent of the current inode), as the kernel's find_extent_clone.
    fn find_clone(&mut self, ext: &Extent) -> Result<Option<CloneSrc>> {
        let Some((disk_bytenr, disk_num, eoff, num_bytes)) = ext.regular() else {
            return Ok(None);
        };
        let size = self.cur.ii.size;
        if ext.start >= size {
            return Ok(None);
        }
        let Some(extent_tree) = self.fs.tree_opt(EXTENT_TREE_OBJECTID)? else {
            return Ok(None);
        };
        let Some((refs, backrefs)) = self.extent_backrefs(extent_tree, disk_bytenr)? else {
            return Ok(None);
        };
        if refs > MAX_EXTENT_REFS {
            return Ok(None);
        }
        let roots = self.clone_roots();
        // Only our own reference and no other clone root: nothing to do.
        if refs <= 1 && roots.len() == 1 {
            return Ok(None);
        }
        let extent_len = if ext.start + num_bytes >= size {
            size - ext.start
        } else {
            num_bytes
        };
        let compressed = ext.compression != COMPRESS_NONE;
        let ram = match ext.kind {
            ExtentKind::Regular { ram_bytes, .. } if compressed => ram_bytes,
            _ => disk_num,
        };
        // A referencing item is a candidate when it covers our position in
        // the extent (uncompressed), or always (compressed): where its file
        // range maps that position, and its length.
        let cand = |key_off: u64, o: u64, n: u64| -> Option<(u64, u64)> {
            if compressed {
                Some((key_off, n))
            } else if o <= eoff && eoff < o + n {
                Some((key_off + eoff - o, n))
            } else {
                None
            }
        };
        let mut cands: Vec<CloneCand> = Vec::new();
        for br in backrefs {
            match br {
                Cand::Direct { ino, base } => {
                    // With no other clone root the walk skips our own data
                    // reference (all our items with the same base).
                    if roots.len() == 1
                        && ino == self.cur.ino
                        && base == ext.start.wrapping_sub(eoff)
                    {
                        continue;
                    }
                    for (ri, r) in roots.iter().enumerate() {
                        let tree = self.root_of(*r).tree;
                        for (leaf, k_off, fe) in
                            self.items_in(tree, ino, base, base.saturating_add(ram))?
                        {
                            if let Some((d, _, o, n)) = fe.regular() {
                                if d == disk_bytenr && k_off.wrapping_sub(o) == base {
                                    if let Some((off, nb)) = cand(k_off, o, n) {
                                        cands.push((leaf, ino, off, nb, ri));
                                    }
                                }
                            }
                        }
                    }
                }
                Cand::Shared { leaf } => {
                    self.shared_leaf_cands(leaf, disk_bytenr, &roots, &cand, &mut cands)?
                }
            }
        }
        // The kernel's walk meets leaves in the order of their first
        // reference (by inode), and the references of one leaf last first.
        let mut leaf_first: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
        for c in &cands {
            let e = leaf_first.entry(c.0).or_insert(c.1);
            *e = (*e).min(c.1);
        }
        cands.sort_unstable_by(|a, b| {
            (leaf_first[&a.0], a.0, b.1, b.2, a.4).cmp(&(leaf_first[&b.0], b.0, a.1, a.2, b.4))
        });
        cands.dedup();
        // As the kernel's iterate_backrefs: per clone root the reference
        // with the longest file extent item wins; one covering the whole
        // range ends the search.
        let mut best: Vec<Option<(u64, u64, u64)>> = vec![None; roots.len()];
        for &(_, ino, off, nb, ri) in &cands {
            if roots[ri] == CloneRoot::Send {
                if ino == self.cur.ino && off == ext.start {
                    continue;
                }
                if ino > self.cur.ino {
                    continue;
                }
                if ino == self.cur.ino && off + extent_len > self.cur.next_write_offset {
                    continue;
                }
            }
            if best[ri].is_none_or(|b| nb > b.2) {
                best[ri] = Some((ino, off, nb));
                if nb >= extent_len {
                    break;
                }
            }
        }
        let mut pick: Option<(CloneSrc, u64)> = None;
        for (ri, r) in roots.iter().enumerate() {
            if let Some((ino, offset, nb)) = best[ri] {
                if pick.is_none_or(|p| nb > p.1) {
                    pick = Some((
                        CloneSrc {
                            root: *r,
                            ino,
                            offset,
                        },
                        nb,
                    ));
                    if nb >= extent_len {
                        break;
                    }
                }
            }
        }
        Ok(pick.map(|p| p.0))
    }

    /// The candidates of [`Sender::find_clone`] in `leaf`, a leaf that
    /// references extent `disk_bytenr` as a whole (shared back reference):
    /// its items of the extent that `cand` takes, in each clone root that
    /// has the same item.
    fn shared_leaf_cands(
        &self,
        leaf: u64,
        disk_bytenr: u64,
        roots: &[CloneRoot],
        cand: &impl Fn(u64, u64, u64) -> Option<(u64, u64)>,
        cands: &mut Vec<CloneCand>,
    ) -> Result<()> {
        let Ok(b) = self.fs.info.read_tree_block(
            leaf,
            BlockExpect {
                level: Some(0),
                ..Default::default()
            },
        ) else {
            return Ok(());
        };
        let node = b.node();
        for i in 0..node.nritems() {
            let it = node.item(i);
            if it.key.item_type != EXTENT_DATA {
                continue;
            }
            let Ok(fe) = self.decode_extent(self.send.tree, &it.key, it.data) else {
                continue;
            };
            let Some((d, _, o, n)) = fe.regular() else {
                continue;
            };
            if d != disk_bytenr {
                continue;
            }
            let Some((off, nb)) = cand(it.key.offset, o, n) else {
                continue;
            };
            for (ri, r) in roots.iter().enumerate() {
                let tree = self.root_of(*r).tree;
                let same = self
                    .items_in(tree, it.key.objectid, it.key.offset, it.key.offset + 1)?
                    .into_iter()
                    .any(|(_, ko, f)| {
                        ko == it.key.offset
                            && f.regular().is_some_and(|(d2, _, o2, _)| d2 == d && o2 == o)
                    });
                if same {
                    cands.push((leaf, it.key.objectid, off, nb, ri));
                }
            }
        }
        Ok(())
    }

    /// Extent items of `ino` in `tree` starting in `[from, to)`, with the
    /// leaf holding each.
    fn items_in(
        &self,
        tree: Tree,
        ino: u64,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, u64, Extent)>> {
        let mut out = Vec::new();
        let mut c = Cursor::new(&self.fs.info, tree);
        let mut ok = c.seek(&Key::new(ino, EXTENT_DATA, from))?;
        while ok {
            let Some((k, d)) = c.item() else { break };
            if k.objectid != ino || k.item_type != EXTENT_DATA || k.offset >= to {
                break;
            }
            let leaf = c.leaf().map(|(b, _)| b.bytenr).unwrap_or(0);
            out.push((leaf, k.offset, self.decode_extent(tree, &k, d)?));
            if out.len() > 4096 {
                break;
            }
            ok = c.next()?;
        }
        Ok(out)
    }

    /// The reference count and back references of a data extent (the
    /// format crate's decoder of extent records: inline refs, then the
    /// keyed ones).
    fn extent_backrefs(&self, extent_tree: Tree, bytenr: u64) -> Result<Option<(u64, Vec<Cand>)>> {
        let mut c = Cursor::new(&self.fs.info, extent_tree);
        if !c.seek(&Key::new(bytenr, EXTENT_ITEM, 0))? {
            return Ok(None);
        }
        let Some((k, d)) = c.item() else {
            return Ok(None);
        };
        if k.objectid != bytenr || k.item_type != EXTENT_ITEM {
            return Ok(None);
        }
        let Ok((item, _, inline)) = ExtentRecord::split(&k, d) else {
            return Ok(None);
        };
        if item.is_tree_block() {
            return Ok(None);
        }
        let mut out = Vec::new();
        if item.refs > MAX_EXTENT_REFS {
            return Ok(Some((item.refs, out)));
        }
        let cand = |r: InlineRef| match r {
            InlineRef::ExtentData(d) => Some(Cand::Direct {
                ino: d.objectid,
                base: d.offset,
            }),
            InlineRef::SharedData { parent, .. } => Some(Cand::Shared { leaf: parent }),
            _ => None,
        };
        // A damaged ref ends the list, as the kernel's walk stops there.
        out.extend(inline.map_while(|r| r.ok()).filter_map(cand));
        while c.next()? {
            let Some((k, d)) = c.item() else { break };
            if k.objectid != bytenr {
                break;
            }
            if matches!(k.item_type, EXTENT_DATA_REF | SHARED_DATA_REF) {
                if let Some(r) = InlineRef::from_keyed(&k, d).ok().and_then(cand) {
                    out.push(r);
                }
            }
        }
        Ok(Some((item.refs, out)))
    }

    /// Clones `[offset, offset + len)` of the current file from `src`,
    /// writing the parts the source does not share (the kernel's
    /// clone_range).
    fn clone_range(
        &mut self,
        ext: &Extent,
        src: CloneSrc,
        mut offset: u64,
        mut len: u64,
    ) -> Result<()> {
        let Some((disk_byte, _, mut data_offset, _)) = ext.regular() else {
            return self.send_extent_data(Some(ext), offset, len);
        };
        if src.offset == 0 && len == self.sectorsize {
            return self.send_extent_data(Some(ext), offset, len);
        }
        let root = self.root_of(src.root).clone();
        let src_size = self
            .fs
            .inode_item_in(root.tree, src.ino)?
            .map(|i| i.size)
            .unwrap_or(0);
        let mut src_off = src.offset;
        // Source extent items from the one covering src_off.
        let mut items: Vec<Extent> = Vec::new();
        {
            let mut c = Cursor::new(&self.fs.info, root.tree);
            let mut ok = c.seek_le(&Key::new(src.ino, EXTENT_DATA, src_off))?;
            if ok {
                if let Some(k) = c.key() {
                    if k.objectid != src.ino || k.item_type != EXTENT_DATA {
                        ok = c.seek(&Key::new(src.ino, EXTENT_DATA, src_off))?;
                    }
                }
            } else {
                ok = c.seek(&Key::new(src.ino, EXTENT_DATA, src_off))?;
            }
            while ok {
                let Some((k, d)) = c.item() else { break };
                if k.objectid != src.ino || k.item_type != EXTENT_DATA {
                    break;
                }
                if k.offset >= src_off + len {
                    break;
                }
                items.push(self.decode_extent(root.tree, &k, d)?);
                ok = c.next()?;
            }
        }
        for it in items {
            let mut ext_len = match &it.kind {
                ExtentKind::Inline { ram_bytes, .. } => ram_bytes.div_ceil(PAGE) * PAGE,
                _ => it.end - it.start,
            };
            if it.start + ext_len <= src_off {
                continue;
            }
            if it.start > src_off {
                // Implicit hole in the source.
                let hole = (it.start - src_off).min(len);
                self.send_extent_data(Some(ext), offset, hole)?;
                len -= hole;
                if len == 0 {
                    break;
                }
                offset += hole;
                src_off += hole;
                data_offset += hole;
            }
            if it.start >= src_off + len {
                break;
            }
            if it.start >= src_size {
                break;
            }
            let mut crossed_src_i_size = false;
            if it.start + ext_len > src_size {
                ext_len = src_size - it.start;
                crossed_src_i_size = true;
            }
            let (it_disk, mut clone_data_offset) = match it.kind {
                ExtentKind::Inline { .. } => (u64::MAX, 0),
                _ => it.disk().unwrap_or((0, 0)),
            };
            if it_disk == disk_byte {
                src_off = it.start;
                if clone_data_offset < data_offset && clone_data_offset + ext_len > data_offset {
                    let skip = data_offset - clone_data_offset;
                    ext_len -= skip;
                    clone_data_offset += skip;
                    src_off += skip;
                }
            }
            let clone_len = ext_len.min(len);
            if it_disk == disk_byte && clone_data_offset == data_offset {
                let src_end = src_off + clone_len;
                const ALIGN: u64 = 64 * 1024;
                if src_end == src_size
                    && src_end & (ALIGN - 1) != 0
                    && offset + clone_len < self.cur.ii.size
                {
                    // The unaligned EOF block of the source cannot be cloned
                    // into the middle of a file.
                    let slen = (src_end - src_off) / ALIGN * ALIGN;
                    if slen > 0 {
                        self.send_clone(offset, slen, src.root, src.ino, src_off)?;
                    }
                    self.send_extent_data(Some(ext), offset + slen, clone_len - slen)?;
                } else {
                    self.send_clone(offset, clone_len, src.root, src.ino, src_off)?;
                }
            } else if crossed_src_i_size && clone_len < len {
                // The source ends inside this extent: write the rest.
                break;
            } else {
                self.send_extent_data(Some(ext), offset, clone_len)?;
            }
            len -= clone_len;
            if len == 0 {
                break;
            }
            offset += clone_len;
            src_off += clone_len;
            if src.root == super::CloneRoot::Send
                && src.ino == self.cur.ino
                && src_off >= self.cur.next_write_offset
            {
                break;
            }
            data_offset += clone_len;
        }
        if len > 0 {
            self.send_extent_data(Some(ext), offset, len)?;
        }
        Ok(())
    }

    fn send_clone(
        &mut self,
        offset: u64,
        len: u64,
        root: CloneRoot,
        ino: u64,
        src_off: u64,
    ) -> Result<()> {
        let p = self.cur_path()?;
        let src_path = if root == CloneRoot::Send {
            self.path(ino)?
        } else {
            let r = self.root_of(root);
            self.fs.path_in(r.tree, ino)?
        };
        let r = self.root_of(root);
        let uuid = r.stream_uuid();
        let ctransid = r.item.ctransid;
        self.w.begin(cmd::CLONE);
        self.w.put_u64(attr::FILE_OFFSET, offset);
        self.w.put_u64(attr::CLONE_LEN, len);
        self.w.put(attr::PATH, &p);
        self.w.put_uuid(attr::CLONE_UUID, &uuid);
        self.w.put_u64(attr::CLONE_CTRANSID, ctransid);
        self.w.put(attr::CLONE_PATH, &src_path);
        self.w.put_u64(attr::CLONE_OFFSET, src_off);
        self.w.finish()
    }
}
