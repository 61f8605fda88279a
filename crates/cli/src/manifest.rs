//! The manifest of a tree as the kernel-oracle tests record it: one JSON
//! object per path, sorted by raw path bytes, the same fields and encoding
//! as tests/oracle/manifest.py takes from a kernel mount.

use crate::output::{hex, pct, ts_ns};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use ubtrfs_engine::tools::walk::{walk, Descend};
use ubtrfs_engine::{FileHandle, Filesystem, InodeId, Result};

fn type_name(mode: u32) -> &'static str {
    match mode & 0o170000 {
        0o040000 => "dir",
        0o120000 => "symlink",
        0o020000 => "chr",
        0o060000 => "blk",
        0o010000 => "fifo",
        0o140000 => "sock",
        _ => "file",
    }
}

/// A manifest entry before hardlink groups are known: raw path, fields,
/// and the inode (for non-directories).
type Entry = (Vec<u8>, Map<String, Value>, Option<InodeId>);

/// Manifest lines for the tree under `root`.
pub fn manifest(fs: &Filesystem, root: InodeId) -> Result<Vec<String>> {
    let mut entries: Vec<Entry> = Vec::new();
    walk(
        fs,
        root,
        |v| {
            let st = v.stat;
            let mut path = b"/".to_vec();
            path.extend_from_slice(v.path);
            let mut m = Map::new();
            m.insert("path".into(), json!(pct(&path)));
            m.insert("type".into(), json!(type_name(st.mode)));
            m.insert("ino".into(), json!(st.ino));
            m.insert("mode".into(), json!(st.mode & 0o7777));
            m.insert("uid".into(), json!(st.uid));
            m.insert("gid".into(), json!(st.gid));
            m.insert("size".into(), json!(st.size));
            let special = matches!(st.mode & 0o170000, 0o020000 | 0o060000);
            m.insert("rdev".into(), json!(if special { st.rdev } else { 0 }));
            m.insert("mtime_ns".into(), json!(ts_ns(&st.mtime) as i64));
            let target = if st.is_symlink() {
                json!(pct(&ubtrfs_engine::fs::file::readlink(fs, v.id)?))
            } else {
                Value::Null
            };
            m.insert("target".into(), target);
            let mut x = Map::new();
            for (k, val) in fs.xattrs(v.id)? {
                x.insert(pct(&k), json!(hex(&val)));
            }
            m.insert("xattrs".into(), Value::Object(x));
            let (sha, data) = if st.is_reg() {
                let mut h = FileHandle::open(fs, v.id)?;
                let ranges = h.data_ranges(fs)?;
                (json!(content_sha256(fs, &mut h, &ranges)?), json!(ranges))
            } else {
                (Value::Null, Value::Null)
            };
            m.insert("sha256".into(), sha);
            m.insert("data".into(), data);
            let link_id = (!st.is_dir()).then_some(v.id);
            entries.push((path, m, link_id));
            Ok(Descend::Yes)
        },
        |_| Ok(()),
    )?;
    // Hardlink groups: paths sharing an inode point at the smallest one.
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut first: HashMap<InodeId, (Vec<u8>, usize)> = HashMap::new();
    for (p, _, id) in &entries {
        if let Some(id) = id {
            first.entry(*id).or_insert((p.clone(), 0)).1 += 1;
        }
    }
    Ok(entries
        .into_iter()
        .map(|(_, mut m, id)| {
            let link = id
                .and_then(|id| first.get(&id))
                .filter(|(_, n)| *n > 1)
                .map(|(p, _)| json!(pct(p)))
                .unwrap_or(Value::Null);
            m.insert("link".into(), link);
            // serde_json's Map is a BTreeMap: keys come out sorted, as the
            // Python side writes them.
            serde_json::to_string(&Value::Object(m)).expect("json")
        })
        .collect())
}

/// sha256 of the file content, reading only data ranges and feeding zeros
/// for holes.
fn content_sha256(fs: &Filesystem, h: &mut FileHandle, ranges: &[(u64, u64)]) -> Result<String> {
    let mut sha = Sha256::new();
    let zeros = vec![0u8; 1 << 16];
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    let feed_zeros = |sha: &mut Sha256, mut n: u64| {
        while n > 0 {
            let k = n.min(zeros.len() as u64) as usize;
            sha.update(&zeros[..k]);
            n -= k as u64;
        }
    };
    for &(s, e) in ranges {
        feed_zeros(&mut sha, s - pos);
        h.read_range(fs, (s, e), &mut buf, |_, data| {
            sha.update(data);
            Ok(())
        })?;
        pos = e;
    }
    feed_zeros(&mut sha, h.size - pos);
    Ok(hex(&sha.finalize()))
}
