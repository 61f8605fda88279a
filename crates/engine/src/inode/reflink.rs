//! Clones: a range of one file's extents shared into another file
//! (BTRFS_IOC_CLONE_RANGE, and receive's clone command), as the kernel's
//! reflink.c does it: the destination's old extents in the range are
//! dropped, the source's pieces are inserted with a new reference each,
//! and inline source data is copied, since an inline extent cannot be
//! shared.

use super::file::{round_up, DataPolicy};
use crate::data::extent::ExtentKind;
use crate::error::{Error, Result};
use crate::tx::Trans;
use ubtrfs_format::items::InodeItem;

impl Trans {
    /// Clones `[src_off, src_off + len)` of `src_ino` in `src_tree` to
    /// `dst_off` of `dst_ino` in `dst_tree`, sharing the extents
    /// (BTRFS_IOC_CLONE_RANGE). `len` 0 means to the source's end.
    /// Offsets are sector aligned, and so is `len` unless the range ends
    /// at the source's end of file.
    #[allow(clippy::too_many_arguments)]
    pub fn clone_range(
        &mut self,
        src_tree: u64,
        src_ino: u64,
        src_off: u64,
        len: u64,
        dst_tree: u64,
        dst_ino: u64,
        dst_off: u64,
        policy: DataPolicy,
    ) -> Result<InodeItem> {
        let ss = self.sectorsize() as u64;
        let src = self.inode_of(src_tree, src_ino)?;
        let len = if len == 0 {
            src.size.saturating_sub(src_off)
        } else {
            len
        };
        let here = || {
            format!("clone of {len} bytes from tree {src_tree} inode {src_ino} offset {src_off} to tree {dst_tree} inode {dst_ino} offset {dst_off}")
        };
        let src_end = src_off
            .checked_add(len)
            .ok_or_else(|| Error::Invalid(here()))?;
        if !src_off.is_multiple_of(ss)
            || !dst_off.is_multiple_of(ss)
            || src_end > src.size
            || (len % ss != 0 && src_end != src.size)
            || dst_off.checked_add(len).is_none_or(|e| e > i64::MAX as u64)
        {
            return Err(Error::Invalid(format!(
                "{}: unaligned or past the source's end ({} bytes)",
                here(),
                src.size
            )));
        }
        if src_tree == dst_tree
            && src_ino == dst_ino
            && src_off < dst_off + round_up(len, ss)
            && dst_off < src_off + round_up(len, ss)
        {
            return Err(Error::Invalid(format!("{}: the ranges overlap", here())));
        }
        let mut dst = self.inode_of(dst_tree, dst_ino)?;
        if len == 0 {
            return Ok(dst);
        }
        let alen = round_up(len, ss);
        let pieces = self.file_extents(src_tree, src_ino, src_off, src_off + alen)?;
        // Inline source data is copied, not shared.
        let mut inline_data = Vec::new();
        for (_, e) in &pieces {
            if e.is_inline() {
                inline_data = self.read_file(src_tree, src_ino, 0, ss)?;
                inline_data.truncate(src.size.min(ss) as usize);
            }
        }
        let new_size = dst.size.max(dst_off + len);
        if dst_off > 0 || pieces.iter().any(|(_, e)| !e.is_inline()) {
            self.inode_mut(dst_tree, dst_ino)
                .uninline(&mut dst, policy)?;
        }
        let removed = self
            .inode_mut(dst_tree, dst_ino)
            .drop_extents(dst_off, dst_off + alen)?;
        dst.nbytes = dst.nbytes.saturating_sub(removed);
        let placed = self.place_pieces(
            &pieces,
            (src_off, alen),
            (dst_tree, dst_ino, dst_off),
            &mut dst,
            (&inline_data, new_size),
            policy,
        );
        if let Err(e) = placed {
            // The destination's extents changed: its item must count
            // them (nbytes) even though the clone failed part way.
            let _ = self.inode_mut(dst_tree, dst_ino).put(&dst);
            return Err(e);
        }
        self.inode_mut(dst_tree, dst_ino)
            .fill_holes(0, round_up(new_size, ss))?;
        dst.size = new_size;
        dst.transid = self.transid;
        Ok(dst)
    }

    /// The source's `pieces` in `[src_off, src_off + alen)` placed at
    /// `dst_off` of the destination: shared, or inline data copied.
    fn place_pieces(
        &mut self,
        pieces: &[(ubtrfs_format::Key, crate::data::extent::Extent)],
        (src_off, alen): (u64, u64),
        (dst_tree, dst_ino, dst_off): (u64, u64, u64),
        dst: &mut InodeItem,
        (inline_data, new_size): (&[u8], u64),
        policy: DataPolicy,
    ) -> Result<()> {
        let ss = self.sectorsize() as u64;
        for (_, e) in pieces {
            let s = e.start.max(src_off);
            let en = e.end.min(src_off + alen);
            if s >= en {
                continue;
            }
            let at = dst_off + (s - src_off);
            match e.kind {
                ExtentKind::Hole => {}
                ExtentKind::Inline { .. } => {
                    let mut buf = inline_data.to_vec();
                    buf.resize(ss as usize, 0);
                    let isize = new_size.max(dst.size);
                    self.inode_mut(dst_tree, dst_ino)
                        .rewrite(dst, at, &buf, isize, policy)?;
                }
                _ => {
                    self.inode_mut(dst_tree, dst_ino).insert_extent_piece(
                        at,
                        e,
                        s - e.start,
                        en - s,
                    )?;
                    dst.nbytes += en - s;
                }
            }
        }
        Ok(())
    }
}
