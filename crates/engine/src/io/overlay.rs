//! A device that reads through to another and keeps every write in
//! memory: a writer (log replay for readers) works on it as on a real
//! device while the device below is never changed.

use super::dev::BlockDev;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, RwLock};

/// Granularity of the kept writes.
const PAGE: u64 = 4096;

/// `inner` as read, with the writes made through this device on top.
#[derive(Debug)]
pub struct OverlayDev {
    inner: Arc<dyn BlockDev>,
    pages: RwLock<BTreeMap<u64, Box<[u8]>>>,
}

impl OverlayDev {
    pub fn new(inner: Arc<dyn BlockDev>) -> OverlayDev {
        OverlayDev {
            inner,
            pages: RwLock::new(BTreeMap::new()),
        }
    }

    /// Bytes held in memory.
    pub fn held_bytes(&self) -> u64 {
        self.pages.read().unwrap().len() as u64 * PAGE
    }

    fn check(&self, off: u64, len: usize) -> io::Result<()> {
        match off.checked_add(len as u64) {
            Some(e) if e <= self.inner.size() => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{len} bytes at {off} beyond device size {}",
                    self.inner.size()
                ),
            )),
        }
    }
}

impl BlockDev for OverlayDev {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.check(off, buf.len())?;
        let pages = self.pages.read().unwrap();
        let end = off + buf.len() as u64;
        let first = off / PAGE;
        let last = (end - 1) / PAGE;
        if buf.is_empty() || pages.range(first..=last).next().is_none() {
            return self.inner.read_at(buf, off);
        }
        // Runs of untouched pages come from below, held pages from memory.
        let mut pos = off;
        while pos < end {
            let p = pos / PAGE;
            let page_end = ((p + 1) * PAGE).min(end);
            let dst = &mut buf[(pos - off) as usize..(page_end - off) as usize];
            match pages.get(&p) {
                Some(data) => {
                    let from = (pos - p * PAGE) as usize;
                    dst.copy_from_slice(&data[from..from + dst.len()]);
                }
                None => self.inner.read_at(dst, pos)?,
            }
            pos = page_end;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.check(off, buf.len())?;
        let mut pages = self.pages.write().unwrap();
        let end = off + buf.len() as u64;
        let mut pos = off;
        while pos < end {
            let p = pos / PAGE;
            let page_end = ((p + 1) * PAGE).min(end);
            let page = match pages.entry(p) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    let mut data = vec![0u8; PAGE as usize];
                    let n = PAGE.min(self.inner.size() - p * PAGE) as usize;
                    self.inner.read_at(&mut data[..n], p * PAGE)?;
                    e.insert(data.into_boxed_slice())
                }
            };
            let from = (pos - p * PAGE) as usize;
            let src = &buf[(pos - off) as usize..(page_end - off) as usize];
            page[from..from + src.len()].copy_from_slice(src);
            pos = page_end;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn writable(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::dev::MemDev;

    #[test]
    fn overlay_keeps_writes_and_never_touches_the_device_below() {
        let mut bytes = vec![0u8; 3 * 4096 + 100];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let below = Arc::new(MemDev::from_bytes(bytes.clone()));
        let o = OverlayDev::new(below.clone());
        o.write_at(b"hello", 4094).unwrap();
        o.write_at(&[9u8; 50], 3 * 4096 + 40).unwrap();
        let mut want = bytes.clone();
        want[4094..4099].copy_from_slice(b"hello");
        want[3 * 4096 + 40..3 * 4096 + 90].copy_from_slice(&[9u8; 50]);
        let mut got = vec![0u8; want.len()];
        o.read_at(&mut got, 0).unwrap();
        assert_eq!(got, want);
        let mut part = [0u8; 7];
        o.read_at(&mut part, 4093).unwrap();
        assert_eq!(&part, &want[4093..4100]);
        assert_eq!(below.snapshot(), bytes);
        assert!(o.write_at(b"x", want.len() as u64).is_err());
        assert_eq!(o.held_bytes(), 3 * 4096);
    }
}
