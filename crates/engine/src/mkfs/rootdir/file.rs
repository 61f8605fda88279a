//! A regular file's data: planned (its data ranges asked of the worker
//! pipe, a little ahead of the walk), then written by the walker in file
//! order as extents (inline when small, split when a chunk is smaller
//! than a piece, shared from the source with `--reflink`), holes kept.
//! The walker alone allocates and changes trees, so the image does not
//! depend on the threads.

use super::source::{data_ranges, in_path, io_err};
use super::{Ahead, Dir, Walker, INODE_NOCOMPRESS, INODE_NODATASUM};
use crate::error::{Error, Result};
use crate::inode::file_item::COMPRESSED_CHUNK;
use crate::mkfs::data::{Job, Piece, Slot};
use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use ubtrfs_format::consts::*;

/// Size of the pieces a file's data is read and written in: each is one
/// extent (the kernel's extents go up to 128 MiB; smaller ones bound the
/// memory used).
const EXTENT_CHUNK: u64 = 32 << 20;

/// Lookahead: entries of a directory planned ahead of the walk, and files
/// open for it at most.
const LOOKAHEAD_ENTRIES: usize = 64;
const LOOKAHEAD_FILES: usize = 256;

impl Walker<'_> {
    /// Plans the data of regular file `path` (`size` bytes, inode flags
    /// `flags`): opens it, finds its data ranges and asks the pipe for its
    /// pieces, `front` when needed now, else as lookahead. A file that
    /// compresses asks for its first piece only: whether the rest is
    /// compressed (and in which piece size) depends on it.
    pub(super) fn plan_file(
        &mut self,
        path: &Path,
        size: u64,
        flags: u64,
        front: bool,
    ) -> Result<FilePlan> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOATIME)
            .open(path)
            .or_else(|_| File::open(path))
            .map_err(|e| io_err(path, "open", e))?;
        let ss = self.t.sectorsize() as u64;
        let csum = flags & INODE_NODATASUM == 0;
        let mut plan = FilePlan {
            path: Arc::new(path.to_path_buf()),
            file: Arc::new(f),
            size,
            csum,
            compress: self.o.compress.filter(|_| csum && self.o.reflink.is_none()),
            undecided: false,
            inline: None,
            ranges: Vec::new(),
            slots: VecDeque::new(),
        };
        // Small files live in their EXTENT_DATA item, as mkfs.btrfs keeps
        // them: under one sector.
        let max_inline = crate::tree::buf::max_item_data(self.t.nodesize()) - 21;
        if size < ss && (size as usize) <= max_inline {
            let job = self.job(&plan, 0, 0, size as usize, true);
            plan.inline = self.pipe.ask(vec![job], front).pop();
            return Ok(plan);
        }
        let end_aligned = size.next_multiple_of(ss);
        let mut covered = 0u64;
        for (s, e) in data_ranges(&plan.file, size) {
            let s = s / ss * ss;
            let e = e.next_multiple_of(ss).min(end_aligned);
            if s < covered {
                continue;
            }
            plan.ranges.push((s, e));
            covered = e;
        }
        plan.undecided = plan.compress.is_some();
        let mut jobs = self.jobs_from(&plan, 0);
        if plan.undecided {
            jobs.truncate(1);
        }
        plan.slots = self.pipe.ask(jobs, front).into();
        Ok(plan)
    }

    fn job(&self, plan: &FilePlan, at: u64, n: u64, want: usize, inline: bool) -> Job {
        Job {
            path: plan.path.clone(),
            file: plan.file.clone(),
            at,
            n,
            want,
            compress: plan.compress,
            csum: plan.csum.then_some(self.t.info.csum_type),
            sectorsize: self.t.sectorsize(),
            inline,
            reflink: self.o.reflink.is_some(),
        }
    }

    /// Writes a piece of file data: one extent, or, when the piece is
    /// larger than a new chunk (chunks smaller than a piece: mixed or
    /// small filesystems), several: the largest free range filled first
    /// when it is 1 MiB or more, else a new chunk's worth; and when an
    /// extent still finds no room, extents of halving size, as the
    /// kernel's allocator retries smaller (uncompressed data only: a
    /// compressed extent is at most 128 KiB).
    /// Returns (offset in the piece, disk address, disk length, length)
    /// per extent.
    fn write_piece(
        &mut self,
        file: &File,
        piece: &Piece,
        path: &Path,
    ) -> Result<Vec<(u64, u64, u64, u64)>> {
        let ss = self.t.sectorsize() as u64;
        let n = piece.n;
        let splittable = piece.algo == 0 && piece.cloned + piece.data.len() as u64 == n;
        let csum_size = self.t.info.csum_type.size() as u64;
        let mut out = Vec::new();
        let (mut o, mut step) = (0u64, n);
        while o < n {
            let mut k = step.min(n - o);
            let chunk = self.t.new_chunk_size(crate::alloc::SpaceKind::Data);
            if splittable && k > chunk {
                // Larger than a new chunk: fill the largest free range
                // first when it is sizable, else take a new chunk's worth.
                let hole = self.t.alloc.largest_free(crate::alloc::SpaceKind::Data) / ss * ss;
                k = k.min(if hole >= (1 << 20) {
                    hole
                } else {
                    chunk / ss * ss
                });
            }
            let r = if k == n {
                self.write_extent(
                    file,
                    piece.at,
                    piece.cloned,
                    &piece.data,
                    piece.sums.clone(),
                )
            } else {
                // [o, o+k) of the piece: its cloned part, then its written part.
                let cloned = piece.cloned.saturating_sub(o).min(k);
                let d0 = (o + cloned - piece.cloned) as usize;
                let d1 = (o + k).saturating_sub(piece.cloned) as usize;
                let sums = piece.sums.as_ref().map(|s| {
                    s[(o / ss * csum_size) as usize..((o + k) / ss * csum_size) as usize].to_vec()
                });
                self.write_extent(
                    file,
                    piece.at + o,
                    cloned,
                    &piece.data[d0..d1.max(d0)],
                    sums,
                )
            };
            match r {
                Ok((disk, len)) => {
                    out.push((o, disk, len, k));
                    o += k;
                }
                Err(Error::NoSpace(_)) if splittable && k > ss => {
                    step = (k / 2).div_ceil(ss) * ss;
                }
                Err(e) if self.o.reflink.is_some() => {
                    return Err(Error::Invalid(format!("{}: {e}", path.display())))
                }
                Err(e) => return Err(in_path(path, e)),
            }
        }
        Ok(out)
    }

    /// One data extent: `cloned` bytes of the file from `at`
    /// (`--reflink`), then `data`.
    fn write_extent(
        &mut self,
        file: &File,
        at: u64,
        cloned: u64,
        data: &[u8],
        sums: Option<Vec<u8>>,
    ) -> Result<(u64, u64)> {
        if self.o.reflink.is_some() {
            self.t
                .write_data_extent_cloned(file, at, cloned, data, sums)
        } else {
            self.t.write_data_extent_summed(data, sums)
        }
    }

    /// The pieces of `plan`'s data ranges from file offset `from` on: one
    /// extent each (compressed extents hold at most 128 KiB).
    fn jobs_from(&self, plan: &FilePlan, from: u64) -> Vec<Job> {
        let step = if plan.compress.is_some() {
            COMPRESSED_CHUNK
        } else {
            EXTENT_CHUNK
        };
        let mut jobs = Vec::new();
        for &(s, e) in &plan.ranges {
            let mut at = s.max(from);
            while at < e {
                let n = (e - at).min(step);
                let want = n.min(plan.size.saturating_sub(at)) as usize;
                jobs.push(self.job(plan, at, n, want, false));
                at += n;
            }
        }
        jobs
    }

    /// Takes back the pieces of a plan that is not used (the file turned
    /// out to be another link to an inode already written).
    pub(super) fn discard(&mut self, plan: FilePlan) {
        for slot in plan.inline.iter().chain(plan.slots.iter()) {
            let _ = self.pipe.take(slot);
        }
    }

    /// Plans files of a directory ahead of the walk (names from `from`
    /// on), so that workers read and checksum them while the walker
    /// writes those before.
    pub(super) fn look_ahead(
        &mut self,
        src: &Path,
        rel: &Path,
        here: Dir,
        ahead: &mut Ahead,
        from: usize,
    ) {
        if self.pipe.threads() < 2 {
            return;
        }
        ahead.next = ahead.next.max(from);
        while ahead.next < ahead.names.len()
            && ahead.next < from + LOOKAHEAD_ENTRIES
            && self.plans.len() < LOOKAHEAD_FILES
        {
            let i = ahead.next;
            ahead.next += 1;
            let path = src.join(&ahead.names[i]);
            let Ok(m) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            // Small files with nothing to compress are read by the walker
            // itself (see data::SMALL).
            let ok = m.is_file()
                && m.len() > 0
                && (m.len() >= crate::mkfs::data::SMALL || self.o.compress.is_some());
            ahead.metas[i] = Some(m.clone());
            if !ok {
                continue;
            }
            if m.nlink() > 1 {
                let id = (here.tree, m.dev(), m.ino());
                if self.links.contains_key(&id) || !self.ahead_links.insert(id) {
                    continue;
                }
            }
            let flags = self.flags_for(&rel.join(&ahead.names[i]), here.flags);
            let plan = self.plan_file(&path, m.len(), flags, false);
            self.plans.insert(path, plan);
        }
    }

    /// Writes the data of file `path` as inode `ino`; returns (size,
    /// nbytes). Sets NOCOMPRESS in `flags` when its data does not
    /// compress, as the kernel does.
    pub(super) fn copy_file(
        &mut self,
        path: &Path,
        tree: u64,
        ino: u64,
        size: u64,
        flags: &mut u64,
    ) -> Result<(u64, u64)> {
        if size == 0 {
            return Ok((0, 0));
        }
        let mut plan = match self.plans.remove(path) {
            Some(p) => p?,
            None => self.plan_file(path, size, *flags, true)?,
        };
        if let Some(slot) = plan.inline.take() {
            let piece = self.pipe.take(&slot)?;
            self.t
                .inode_mut(tree, ino)
                .insert_inline_extent(&piece.data, size, piece.algo)
                .map_err(|e| in_path(path, e))?;
            self.stats.inline_files += 1;
            self.stats.data_bytes += size;
            return Ok((size, size));
        }
        let ss = self.t.sectorsize() as u64;
        let no_holes = self.t.info.sb.incompat_flags & INCOMPAT_NO_HOLES != 0;
        let end_aligned = size.next_multiple_of(ss);
        let mut nbytes = 0;
        let mut covered = 0u64;
        for (s, e) in plan.ranges.clone() {
            if !no_holes && s > covered {
                self.t.inode_mut(tree, ino).insert_file_extent(
                    covered,
                    0,
                    0,
                    0,
                    s - covered,
                    s - covered,
                    0,
                    false,
                    false,
                )?;
            }
            let mut at = s;
            while at < e {
                let slot = plan.slots.pop_front().expect("a piece for every range");
                let piece = self.pipe.take(&slot)?;
                debug_assert_eq!(piece.at, at);
                let n = piece.n;
                if plan.undecided {
                    // The first piece does not compress: neither will the
                    // file, as the kernel judges it.
                    if piece.algo == 0 {
                        *flags |= INODE_NOCOMPRESS;
                        plan.compress = None;
                    }
                    plan.undecided = false;
                    let rest = self.jobs_from(&plan, at + n);
                    plan.slots = self.pipe.ask(rest, true).into();
                }
                for (off, disk, len, k) in self.write_piece(&plan.file, &piece, path)? {
                    self.t
                        .inode_mut(tree, ino)
                        .insert_file_extent(at + off, disk, len, 0, k, k, piece.algo, false, true)
                        .map_err(|e| in_path(path, e))?;
                }
                self.pipe.give_back(piece.data);
                nbytes += n;
                self.stats.data_bytes += piece.want as u64;
                at += n;
            }
            covered = e;
        }
        if !no_holes && covered < end_aligned {
            let n = end_aligned - covered;
            self.t
                .inode_mut(tree, ino)
                .insert_file_extent(covered, 0, 0, 0, n, n, 0, false, false)?;
        }
        Ok((size, nbytes))
    }
}

/// A regular file's data as asked of the pipe.
#[derive(Debug)]
pub(super) struct FilePlan {
    path: Arc<PathBuf>,
    file: Arc<File>,
    size: u64,
    csum: bool,
    compress: Option<(u8, i32)>,
    /// Compression asked and only the first piece planned: the rest waits
    /// for its result.
    undecided: bool,
    /// The whole file as an inline extent.
    inline: Option<Arc<Slot>>,
    /// Data ranges, sector-aligned, in order.
    ranges: Vec<(u64, u64)>,
    /// Pieces asked for, in file order.
    slots: VecDeque<Arc<Slot>>,
}
