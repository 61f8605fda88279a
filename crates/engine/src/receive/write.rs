//! File data: writes buffered per file and written as the kernel's
//! writeback would, clones, encoded writes (the compressed data kept when
//! it fits the image), and the inode item held across the chown, chmod
//! and utimes that follow a write (see [`HeldInode`]).

use super::stream::Command;
use super::{lossy, uuid_str, HeldInode, PendingWrite, Receiver, S_IFMT, WRITE_BUFFER};
use crate::error::{Error, Result};
use crate::inode::file::{DataPolicy, INODE_COMPRESS};
use crate::inode::namei::XATTR_COMPRESSION;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::InodeItem;
use ubtrfs_format::send_stream::attr;

/// The btrfs compression type a `btrfs.compression` value asks for.
pub(super) fn compression_prop(v: &[u8]) -> Option<Option<u8>> {
    let algo = v.split(|&b| b == b':').next().unwrap_or(v);
    match algo {
        b"zlib" => Some(Some(COMPRESS_ZLIB)),
        b"lzo" => Some(Some(COMPRESS_LZO)),
        b"zstd" => Some(Some(COMPRESS_ZSTD)),
        b"no" | b"none" => Some(None),
        _ => None,
    }
}

impl Receiver<'_> {
    /// Writes the buffered writes.
    pub(super) fn flush(&mut self) -> Result<()> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        // write_file reads the inode from the tree.
        self.write_held()?;
        let policy = self.policy(p.tree, p.ino)?;
        let inode = self
            .t
            .inode_mut(p.tree, p.ino)
            .write_file(p.off, &p.data, policy)?;
        self.put_changed(p.tree, p.ino, inode, true)
    }

    /// The inode item of `ino` as the commands so far left it.
    pub(super) fn inode(&mut self, tree: u64, ino: u64) -> Result<InodeItem> {
        match &self.held {
            Some(h) if h.tree == tree && h.ino == ino => Ok(h.item),
            _ => self.t.inode_of(tree, ino),
        }
    }

    /// Writes the held inode item, if any.
    pub(super) fn write_held(&mut self) -> Result<()> {
        match self.held.take() {
            Some(h) => self.t.inode_mut(h.tree, h.ino).put(&h.item),
            None => Ok(()),
        }
    }

    /// How new data of `ino` is stored.
    pub(super) fn policy(&mut self, tree: u64, ino: u64) -> Result<DataPolicy> {
        let inode = self.inode(tree, ino)?;
        let algo = if inode.flags & INODE_COMPRESS != 0 {
            self.t
                .get_xattr(tree, ino, XATTR_COMPRESSION)?
                .and_then(|v| compression_prop(&v))
                .flatten()
        } else {
            None
        };
        Ok(DataPolicy::of_inode(&inode, algo))
    }

    /// Writes an inode changed now: ctime (and mtime for data changes).
    pub(super) fn put_changed(
        &mut self,
        tree: u64,
        ino: u64,
        mut i: InodeItem,
        data: bool,
    ) -> Result<()> {
        let now = self.opts.now;
        i.ctime = now;
        if data {
            i.mtime = now;
        }
        i.transid = self.t.transid;
        i.sequence += 1;
        if self
            .held
            .as_ref()
            .is_some_and(|h| (h.tree, h.ino) != (tree, ino))
        {
            self.write_held()?;
        }
        self.held = Some(HeldInode { tree, ino, item: i });
        Ok(())
    }

    pub(super) fn buffer_write(
        &mut self,
        tree: u64,
        ino: u64,
        off: u64,
        data: &[u8],
    ) -> Result<()> {
        if let Some(p) = &mut self.pending {
            if p.tree == tree
                && p.ino == ino
                && p.off + p.data.len() as u64 == off
                && p.data.len() + data.len() <= WRITE_BUFFER
            {
                p.data.extend_from_slice(data);
                return Ok(());
            }
        }
        self.flush()?;
        let i = self.inode(tree, ino)?;
        if i.mode & S_IFMT != 0o100000 {
            return Err(Error::Invalid(format!("inode {ino} is not a regular file")));
        }
        off.checked_add(data.len() as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| Error::Invalid(format!("write at {off}: past the largest file")))?;
        self.pending = Some(PendingWrite {
            tree,
            ino,
            off,
            data: data.to_vec(),
        });
        Ok(())
    }

    pub(super) fn clone_cmd(&mut self, c: &Command) -> Result<()> {
        let path = c.path(attr::PATH)?;
        let off = c.u64(attr::FILE_OFFSET)?;
        let len = c.u64(attr::CLONE_LEN)?;
        let src_uuid = c.uuid(attr::CLONE_UUID)?;
        let src_path = c.path(attr::CLONE_PATH)?;
        let src_off = c.u64(attr::CLONE_OFFSET)?;
        let cur = self.cur()?;
        let (tree, cur_uuid) = (cur.tree, cur.received_uuid);
        let src_tree = if src_uuid == cur_uuid {
            tree
        } else {
            self.find_subvol(&src_uuid)?.ok_or_else(|| {
                Error::NotFound(format!(
                    "clone: did not find source subvolume (uuid {})",
                    uuid_str(&src_uuid)
                ))
            })?
        };
        let ino = self.resolve(path)?;
        let src_ino = if src_tree == tree {
            self.resolve(src_path)?
        } else {
            self.lookup_path(src_tree, src_path)?
        };
        let policy = self.policy(tree, ino)?;
        let i = self
            .t
            .clone_range(src_tree, src_ino, src_off, len, tree, ino, off, policy)?;
        self.put_changed(tree, ino, i, true)
    }

    pub(super) fn encoded_write(&mut self, c: &Command) -> Result<()> {
        let path = c.path(attr::PATH)?;
        let off = c.u64(attr::FILE_OFFSET)?;
        let num = c.u64(attr::UNENCODED_FILE_LEN)?;
        let ram = c.u64(attr::UNENCODED_LEN)?;
        let offset = c.u64(attr::UNENCODED_OFFSET)?;
        let compression = c
            .get(attr::COMPRESSION)
            .map_or(Ok(0), |_| c.u32(attr::COMPRESSION))?;
        let encryption = c
            .get(attr::ENCRYPTION)
            .map_or(Ok(0), |_| c.u32(attr::ENCRYPTION))?;
        let data = c.bytes(attr::DATA)?;
        if encryption != 0 {
            return Err(Error::Unsupported(format!(
                "encrypted data (encryption {encryption})"
            )));
        }
        let tree = self.tree()?;
        let ino = self.resolve(path)?;
        let policy = self.policy(tree, ino)?;
        let ss = self.t.sectorsize();
        // BTRFS_ENCODED_IO_COMPRESSION_*: 1 zlib, 2 zstd, 3..7 lzo with
        // sectors of 4K..64K.
        let (algo, lzo_sector) = match compression {
            0 => (COMPRESS_NONE, ss),
            1 => (COMPRESS_ZLIB, ss),
            2 => (COMPRESS_ZSTD, ss),
            3..=7 => (COMPRESS_LZO, 4096u32 << (compression - 3)),
            n => return Err(Error::Invalid(format!("unknown encoded compression {n}"))),
        };
        let i = if algo == COMPRESS_NONE || lzo_sector != ss {
            let plain =
                ubtrfs_format::compress::decompress(algo, data, ram as usize, lzo_sector)
                    .map_err(|e| Error::format(format!("encoded data for {}", lossy(path)), e))?;
            if offset
                .checked_add(num)
                .is_none_or(|e| e > plain.len() as u64)
            {
                return Err(Error::Invalid(format!(
                    "encoded range {offset}+{num} past {} bytes",
                    plain.len()
                )));
            }
            let piece = &plain[offset as usize..(offset + num) as usize];
            self.t.inode_mut(tree, ino).write_file(off, piece, policy)?
        } else {
            self.t
                .inode_mut(tree, ino)
                .encoded_write(off, num, ram, offset, algo, data, policy)?
        };
        self.put_changed(tree, ino, i, true)
    }
}
