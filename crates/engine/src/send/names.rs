//! Where an inode is at the receiver, as send.c's get_cur_path finds it:
//! its name in the send or the parent snapshot (whichever the receiver
//! has now), or where this stream put it (an orphan name, an early move),
//! and the paths made of those names.

use super::Sender;
use crate::error::{Error, Result};
use ubtrfs_format::consts::FIRST_INODE;

impl Sender<'_, '_> {
    fn send_first_ref(&mut self, ino: u64) -> Result<Option<(u64, Vec<u8>)>> {
        if let Some(r) = self.send_ref_cache.get(&ino) {
            return Ok(r.clone());
        }
        let r = self.fs.first_ref(self.send.tree, ino)?;
        if self.send_ref_cache.len() > 1 << 16 {
            self.send_ref_cache.clear();
        }
        self.send_ref_cache.insert(ino, r.clone());
        Ok(r)
    }

    fn parent_first_ref(&mut self, ino: u64) -> Result<Option<(u64, Vec<u8>)>> {
        let Some(p) = &self.parent else {
            return Ok(None);
        };
        if let Some(r) = self.parent_ref_cache.get(&ino) {
            return Ok(r.clone());
        }
        let r = self.fs.first_ref(p.tree, ino)?;
        if self.parent_ref_cache.len() > 1 << 16 {
            self.parent_ref_cache.clear();
        }
        self.parent_ref_cache.insert(ino, r.clone());
        Ok(r)
    }

    /// Where `ino` is at the receiver right now: (parent, name).
    pub fn location(&mut self, ino: u64) -> Result<(u64, Vec<u8>)> {
        if let Some(l) = self.loc.get(&ino) {
            return Ok((l.parent, l.name.clone()));
        }
        let r = if self.parent.is_none() || ino < self.progress || !self.ref_changed.contains(&ino)
        {
            self.send_first_ref(ino)?
        } else {
            self.parent_first_ref(ino)?
        };
        r.ok_or_else(|| {
            Error::corrupt(
                format!("{} inode {ino}", self.send.tree.describe()),
                "inode has no name (INODE_REF) to send it under",
            )
        })
    }

    /// The path of `ino` at the receiver, relative to the subvolume.
    pub fn path(&mut self, ino: u64) -> Result<Vec<u8>> {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let mut cur = ino;
        for _ in 0..4096 {
            if cur == FIRST_INODE {
                let mut out = Vec::new();
                for (i, p) in parts.iter().rev().enumerate() {
                    if i > 0 {
                        out.push(b'/');
                    }
                    out.extend_from_slice(p);
                }
                return Ok(out);
            }
            let (p, name) = self.location(cur)?;
            parts.push(name);
            cur = p;
        }
        Err(Error::corrupt(
            format!("{} inode {ino}", self.send.tree.describe()),
            "directory chain does not reach the subvolume root",
        ))
    }

    pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(dir.len() + name.len() + 1);
        if !dir.is_empty() {
            v.extend_from_slice(dir);
            v.push(b'/');
        }
        v.extend_from_slice(name);
        v
    }

    pub fn cur_path(&mut self) -> Result<Vec<u8>> {
        if let Some(p) = &self.cur.path {
            return Ok(p.clone());
        }
        let p = self.path(self.cur.ino)?;
        self.cur.path = Some(p.clone());
        Ok(p)
    }

    /// An orphan name for (ino, gen) that neither snapshot has in its top
    /// directory: `o<ino>-<gen>-<idx>`.
    pub fn orphan_name(&mut self, ino: u64, gen: u64) -> Result<Vec<u8>> {
        for idx in 0u64.. {
            let name = format!("o{ino}-{gen}-{idx}").into_bytes();
            if self
                .fs
                .dir_lookup_in(self.send.tree, FIRST_INODE, &name)?
                .is_some()
            {
                continue;
            }
            if let Some(p) = &self.parent {
                if self.fs.dir_lookup_in(p.tree, FIRST_INODE, &name)?.is_some() {
                    continue;
                }
            }
            return Ok(name);
        }
        unreachable!()
    }
}
