//! Manifests (one JSON record per path, as tests/oracle/manifest.py writes
//! them from a mounted tree and `ubtrfs inspect manifest` from an image):
//! taking them, re-rooting them, comparing them; and the SEEK_DATA /
//! SEEK_HOLE map of an open file (their `data` field), from Rust.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::paths::repo_root;
use crate::run::run;

pub fn read_lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(String::from)
        .collect()
}

/// tests/oracle/manifest.py of a directory (a kernel mount, a FUSE mount,
/// an extracted or received tree).
pub fn manifest_of(dir: &Path) -> Vec<String> {
    try_manifest_of(dir).unwrap_or_else(|e| panic!("{e}"))
}

/// [`manifest_of`], Err naming the directory when the walk fails (an
/// unreadable file: EIO), for a caller that reports and goes on.
pub fn try_manifest_of(dir: &Path) -> Result<Vec<String>, String> {
    let o = run(Command::new("python3")
        .arg(repo_root().join("tests/oracle/manifest.py"))
        .arg(dir))
    .map_err(|e| format!("manifest.py {}: {e}", dir.display()))?;
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect())
}

/// The records of a manifest by path.
pub fn records(lines: &[String]) -> BTreeMap<String, Value> {
    lines
        .iter()
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("bad manifest line {l}: {e}"));
            (v["path"].as_str().unwrap_or("").to_string(), v)
        })
        .collect()
}

/// The data ranges of a file's manifest record (its "data": pairs of
/// numbers).
pub fn record_data(v: &Value) -> Vec<(u64, u64)> {
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_u64().unwrap(), r[1].as_u64().unwrap()))
        .collect()
}

/// A regular file's record in a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// The regular files of a manifest, in its order (lines that do not
/// parse are passed over).
pub fn regular_files(lines: &[String]) -> Vec<FileRecord> {
    lines
        .iter()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            (v["type"] == "file").then(|| FileRecord {
                path: v["path"].as_str().unwrap_or("").to_string(),
                size: v["size"].as_u64().unwrap_or(0),
                sha256: v["sha256"].as_str().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// The regular files of a manifest: path -> sha256.
pub fn file_sums(lines: &[String]) -> BTreeMap<String, String> {
    regular_files(lines)
        .into_iter()
        .map(|f| (f.path, f.sha256))
        .collect()
}

/// What to leave out of a comparison.
#[derive(Debug, Clone, Default)]
pub struct Ignore {
    /// Fields never compared.
    pub fields: Vec<&'static str>,
    /// Directory sizes (another filesystem's directories differ).
    pub dir_size: bool,
}

impl Ignore {
    /// Leave out `fields`.
    pub fn fields(fields: &[&'static str]) -> Ignore {
        Ignore {
            fields: fields.to_vec(),
            dir_size: false,
        }
    }
}

/// Compares two manifests; Err lists the first differences. Empty-subvolume
/// placeholders (dirs with ino 2 in `expected`) carry the kernel's current
/// time, so their mtime is not compared.
pub fn compare_manifests(
    expected: &[String],
    actual: &[String],
    ignore: &Ignore,
) -> Result<usize, String> {
    let e = records(expected);
    let a = records(actual);
    let mut diffs = Vec::new();
    for (p, ev) in &e {
        let Some(av) = a.get(p) else {
            diffs.push(format!("{p}: missing"));
            continue;
        };
        let placeholder = ev["type"] == "dir" && ev["ino"] == 2;
        for (k, x) in ev.as_object().unwrap() {
            if ignore.fields.contains(&k.as_str())
                || (placeholder && k == "mtime_ns")
                || (ignore.dir_size && k == "size" && ev["type"] == "dir")
            {
                continue;
            }
            if av.get(k) != Some(x) {
                diffs.push(format!(
                    "{p}: {k}: expected {x}, got {}",
                    av.get(k).unwrap_or(&Value::Null)
                ));
            }
        }
    }
    for p in a.keys() {
        if !e.contains_key(p) {
            diffs.push(format!("{p}: unexpected extra path"));
        }
    }
    if diffs.is_empty() {
        Ok(e.len())
    } else {
        let n = diffs.len();
        diffs.truncate(40);
        Err(format!("{n} differences:\n  {}", diffs.join("\n  ")))
    }
}

/// A manifest without the empty-subvolume placeholders (directories with
/// inode 2) and what lies below them: a stream does not carry them.
pub fn without_placeholders(lines: &[String]) -> Vec<String> {
    let mut holes: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for l in lines {
        let v: Value = serde_json::from_str(l).expect("manifest line");
        let p = v["path"].as_str().unwrap_or("").to_string();
        if holes.iter().any(|h| p.starts_with(&format!("{h}/"))) {
            continue;
        }
        if v["type"] == "dir" && v["ino"] == 2 {
            holes.push(p);
            continue;
        }
        out.push(l.clone());
    }
    out
}

/// Re-roots record `v` found below `prefix` at "/" (its path, and a hard
/// link group name inside the prefix).
fn reroot(mut v: Value, prefix: &str, rel: String) -> String {
    v["path"] = Value::String(rel);
    if let Some(link) = v["link"].as_str() {
        if let Some(r) = link.strip_prefix(&format!("{prefix}/")) {
            v["link"] = Value::String(format!("/{r}"));
        }
    }
    serde_json::to_string(&sort_keys(v)).unwrap()
}

/// The manifest lines below `prefix` ("/vol-ro"), re-rooted at "/".
pub fn sub_manifest(lines: &[String], prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for l in lines {
        let v: Value = serde_json::from_str(l).expect("manifest line");
        let p = v["path"].as_str().unwrap_or("").to_string();
        let rel = if p == prefix {
            "/".to_string()
        } else if let Some(r) = p.strip_prefix(&format!("{prefix}/")) {
            format!("/{r}")
        } else {
            continue;
        };
        out.push(reroot(v, prefix, rel));
    }
    out
}

/// Splits a manifest of a directory holding subvolumes into the manifests
/// of the directories `depth` levels down ("/a" or "/a/b"), each re-rooted
/// at "/" (as [`sub_manifest`] for each of them, in one pass).
pub fn split_manifest(lines: &[String], depth: usize) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in lines {
        let v: Value = serde_json::from_str(l).expect("manifest line");
        let p = v["path"].as_str().unwrap_or("").to_string();
        let parts: Vec<&str> = p.split('/').skip(1).collect();
        if parts.len() < depth || parts.iter().any(|c| c.is_empty()) {
            continue;
        }
        let prefix = format!("/{}", parts[..depth].join("/"));
        let rel = format!("/{}", parts[depth..].join("/"));
        let line = reroot(v, &prefix, rel);
        out.entry(prefix).or_default().push(line);
    }
    out
}

fn sort_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let b: BTreeMap<String, Value> = m.into_iter().collect();
            Value::Object(b.into_iter().collect())
        }
        other => other,
    }
}

/// The data ranges `(start, end)` of `f` in order, by SEEK_DATA and
/// SEEK_HOLE from its start (what manifests record as `data`).
pub fn data_ranges(f: &std::fs::File) -> Result<Vec<(u64, u64)>, String> {
    use std::os::fd::AsRawFd;
    let size = f.metadata().map_err(|e| e.to_string())?.len();
    let mut out = Vec::new();
    let mut at = 0u64;
    while at < size {
        // SAFETY: lseek(2) on a descriptor `f` owns.
        let d = unsafe { libc::lseek(f.as_raw_fd(), at as i64, libc::SEEK_DATA) };
        if d < 0 {
            break; // ENXIO: no data after `at`
        }
        // SAFETY: as above.
        let h = unsafe { libc::lseek(f.as_raw_fd(), d, libc::SEEK_HOLE) };
        if h < 0 {
            return Err(format!(
                "SEEK_HOLE from {d}: {}",
                std::io::Error::last_os_error()
            ));
        }
        out.push((d as u64, h as u64));
        at = h as u64;
    }
    Ok(out)
}
