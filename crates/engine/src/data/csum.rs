//! Data checksums from the csum tree.

use crate::ctree::{Cursor, Tree};
use crate::disk_io::FsInfo;
use crate::error::{Error, Result};
use std::ops::ControlFlow;
use ubtrfs_format::consts::{CSUM_SIZE_MAX, EXTENT_CSUM, EXTENT_CSUM_OBJECTID};
use ubtrfs_format::key::Key;

/// One sector's checksum, as long as the longest checksum type.
pub use ubtrfs_format::consts::Csum;

/// Where the csum items come from: a cursor over the csum tree (tests use
/// a list).
trait CsumItems {
    fn item(&self) -> Option<(Key, &[u8])>;
    fn next(&mut self) -> Result<bool>;
}

impl CsumItems for Cursor<'_> {
    fn item(&self) -> Option<(Key, &[u8])> {
        Cursor::item(self)
    }
    fn next(&mut self) -> Result<bool> {
        Cursor::next(self)
    }
}

/// Calls `f(start, checksums)` for each csum item overlapping `[logical,
/// end)` (`start` is the address of the item's first sector), from the
/// item `items` is on, in order, until `f` breaks: no item after that is
/// read.
fn for_each_overlap<I: CsumItems>(
    items: &mut I,
    logical: u64,
    end: u64,
    ss: u64,
    cs: usize,
    mut f: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
) -> Result<()> {
    while let Some((k, d)) = items.item() {
        if k.objectid == EXTENT_CSUM_OBJECTID && k.item_type == EXTENT_CSUM {
            if k.offset >= end {
                break;
            }
            if d.len() % cs != 0 {
                return Err(Error::corrupt(
                    format!("csum tree key {k}"),
                    format!("item size {} not a multiple of {cs}", d.len()),
                ));
            }
            let item_end = k.offset.saturating_add((d.len() / cs) as u64 * ss);
            if item_end > logical && f(k.offset, d).is_break() {
                break;
            }
        } else if k.objectid > EXTENT_CSUM_OBJECTID {
            break;
        }
        if !items.next()? {
            break;
        }
    }
    Ok(())
}

/// Positions a cursor on the csum tree at the item that may cover
/// `logical` (the item covering it starts at or before it); false when
/// the tree is empty.
fn seek(fs: &FsInfo, csum_tree: Tree, logical: u64) -> Result<Option<Cursor<'_>>> {
    let mut c = Cursor::new(fs, csum_tree);
    let found = c.seek_floor(&Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, logical))?;
    Ok(found.then_some(c))
}

/// Checksums of the sectors of `[logical, logical + len)`, one per sector
/// (None where the csum tree has none). `logical` and `len` must be sector
/// aligned.
pub fn lookup_csums(
    fs: &FsInfo,
    csum_tree: Tree,
    logical: u64,
    len: u64,
) -> Result<Vec<Option<Csum>>> {
    let ss = fs.sectorsize as u64;
    let cs = fs.csum_type.size();
    let mut out = vec![None; len.div_ceil(ss) as usize];
    if let Some(mut c) = seek(fs, csum_tree, logical)? {
        fill_csums(&mut c, logical, len, ss, cs, &mut out)?;
    }
    Ok(out)
}

fn fill_csums<I: CsumItems>(
    items: &mut I,
    logical: u64,
    len: u64,
    ss: u64,
    cs: usize,
    out: &mut [Option<Csum>],
) -> Result<()> {
    let end = logical.saturating_add(len);
    for_each_overlap(items, logical, end, ss, cs, |start, d| {
        let item_end = start + (d.len() / cs) as u64 * ss;
        let mut s = logical.max(start);
        while s < end.min(item_end) {
            let i = ((s - start) / ss) as usize;
            let mut v = [0u8; CSUM_SIZE_MAX];
            v[..cs].copy_from_slice(&d[i * cs..(i + 1) * cs]);
            out[((s - logical) / ss) as usize] = Some(v);
            s += ss;
        }
        ControlFlow::Continue(())
    })
}

/// Whether any sector of `[logical, logical + len)` has a checksum. Stops
/// at the first csum item that covers a sector of the range: no later
/// item (or leaf) is read. This is the question a NOCOW write asks
/// before writing in place (data with checksums must be copied).
pub fn any_csum(fs: &FsInfo, csum_tree: Tree, logical: u64, len: u64) -> Result<bool> {
    let ss = fs.sectorsize as u64;
    let cs = fs.csum_type.size();
    match seek(fs, csum_tree, logical)? {
        Some(mut c) => any_csum_from(&mut c, logical, len, ss, cs),
        None => Ok(false),
    }
}

fn any_csum_from<I: CsumItems>(
    items: &mut I,
    logical: u64,
    len: u64,
    ss: u64,
    cs: usize,
) -> Result<bool> {
    let mut found = false;
    let end = logical.saturating_add(len);
    for_each_overlap(items, logical, end, ss, cs, |_, _| {
        found = true;
        ControlFlow::Break(())
    })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SS: u64 = 4096;
    const CS: usize = 4;

    /// A list of csum tree items standing for the tree, counting moves.
    struct List {
        items: Vec<(Key, Vec<u8>)>,
        pos: usize,
        moves: usize,
    }

    impl CsumItems for List {
        fn item(&self) -> Option<(Key, &[u8])> {
            self.items.get(self.pos).map(|(k, d)| (*k, &d[..]))
        }
        fn next(&mut self) -> Result<bool> {
            self.moves += 1;
            self.pos += 1;
            Ok(self.pos < self.items.len())
        }
    }

    /// Items at 0 (2 sectors), 1 MiB (2 sectors) and 2 MiB (1 sector),
    /// then an item of another tree object; positioned at `pos`.
    fn list(pos: usize) -> List {
        let csum = |start: u64, n: u8| {
            let d: Vec<u8> = (0..n as usize * CS).map(|i| i as u8 + n).collect();
            (Key::new(EXTENT_CSUM_OBJECTID, EXTENT_CSUM, start), d)
        };
        List {
            items: vec![
                csum(0, 2),
                csum(1 << 20, 2),
                csum(2 << 20, 1),
                (Key::new(EXTENT_CSUM_OBJECTID + 1, 0, 0), vec![]),
            ],
            pos,
            moves: 0,
        }
    }

    #[test]
    fn any_csum_stops_at_the_first_checksum() {
        // The first item covers the range: not one move further.
        let mut l = list(0);
        assert!(any_csum_from(&mut l, 0, 4 << 20, SS, CS).unwrap());
        assert_eq!(l.moves, 0);
        // The range starts after the first item: one move to the second.
        let mut l = list(0);
        assert!(any_csum_from(&mut l, 3 * SS, 4 << 20, SS, CS).unwrap());
        assert_eq!((l.moves, l.pos), (1, 1));
        // A gap between items: stops at the first item past the range.
        let mut l = list(0);
        assert!(!any_csum_from(&mut l, 2 * SS, (1 << 20) - 2 * SS, SS, CS).unwrap());
        assert_eq!(l.pos, 1);
        // Past every item; a range reaching the end of the address space.
        let mut l = list(2);
        assert!(!any_csum_from(&mut l, (2 << 20) + SS, u64::MAX, SS, CS).unwrap());
        let mut l = list(2);
        assert!(any_csum_from(&mut l, 2 << 20, u64::MAX, SS, CS).unwrap());
        assert_eq!(l.moves, 0);
    }

    #[test]
    fn any_csum_agrees_with_lookup() {
        for (start, len) in [
            (0, SS),
            (SS, 2 * SS),
            (2 * SS, SS),
            ((1 << 20) - SS, 2 * SS),
            ((1 << 20) + SS, SS),
            ((1 << 20) + 2 * SS, 64 * SS),
            ((2 << 20) - SS, SS),
            (2 << 20, SS),
        ] {
            let mut out = vec![None; (len / SS) as usize];
            fill_csums(&mut list(0), start, len, SS, CS, &mut out).unwrap();
            let any = any_csum_from(&mut list(0), start, len, SS, CS).unwrap();
            assert_eq!(any, out.iter().any(Option::is_some), "{start}+{len}");
        }
        // The checksums land on their sectors.
        let mut out = vec![None; 3];
        fill_csums(&mut list(0), (1 << 20) - SS, 3 * SS, SS, CS, &mut out).unwrap();
        assert!(out[0].is_none());
        assert_eq!(&out[1].unwrap()[..CS], &[2, 3, 4, 5]);
        assert_eq!(&out[2].unwrap()[..CS], &[6, 7, 8, 9]);
    }

    #[test]
    fn misaligned_csum_item_is_corrupt() {
        let mut l = list(0);
        l.items[0].1.push(0);
        let e = any_csum_from(&mut l, 0, SS, SS, CS).unwrap_err();
        assert!(e.to_string().contains("not a multiple of 4"), "{e}");
    }
}
