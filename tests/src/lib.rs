//! Kernel-oracle test harness: locate the `ubtrfs` binary, get fixtures
//! (committed ones, or fresh kernel-made ones through tests/fixtures/build.sh)
//! and compare what ubtrfs reports with the manifest the kernel produced.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub mod mkfs_support;
pub mod send_support;

/// The workspace root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The `ubtrfs` binary: $UBTRFS_BIN, or built now with the release profile.
pub fn ubtrfs_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("UBTRFS_BIN") {
            return PathBuf::from(p);
        }
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "--release",
                "-p",
                "ubtrfs",
                "--message-format=json",
            ])
            .current_dir(repo_root())
            .output()
            .expect("run cargo build");
        assert!(
            out.status.success(),
            "cargo build failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                if v["reason"] == "compiler-artifact" && v["target"]["name"] == "ubtrfs" {
                    if let Some(exe) = v["executable"].as_str() {
                        return PathBuf::from(exe);
                    }
                }
            }
        }
        panic!("cargo build did not report the ubtrfs executable");
    })
}

/// Runs ubtrfs with `args`; returns the output.
pub fn ubtrfs(args: &[&str]) -> Output {
    Command::new(ubtrfs_bin())
        .args(args)
        .output()
        .expect("run ubtrfs")
}

/// A fixture directory as build.sh / unpack.sh write it.
#[derive(Debug, Clone)]
pub struct Fixture {
    pub name: String,
    pub dir: PathBuf,
    pub meta: Value,
}

impl Fixture {
    pub fn load(dir: &Path) -> Fixture {
        let meta: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("meta.json"))
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display())),
        )
        .expect("meta.json");
        Fixture {
            name: dir.file_name().unwrap().to_string_lossy().into_owned(),
            dir: dir.to_path_buf(),
            meta,
        }
    }

    /// Device image paths, first one first.
    pub fn devices(&self) -> Vec<PathBuf> {
        self.meta["devices"]
            .as_array()
            .expect("devices")
            .iter()
            .map(|d| self.dir.join(d.as_str().unwrap()))
            .collect()
    }

    /// `IMAGE -d DEV ...` arguments, leaving out device `skip` if given.
    pub fn image_args(&self, skip: Option<usize>) -> Vec<String> {
        let devs: Vec<_> = self
            .devices()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != skip)
            .map(|(_, d)| d.display().to_string())
            .collect();
        let mut args = vec![devs[0].clone()];
        for d in &devs[1..] {
            args.push("-d".into());
            args.push(d.clone());
        }
        args
    }

    pub fn kernel_manifest(&self) -> Vec<String> {
        read_lines(&self.dir.join("manifest.jsonl"))
    }

    /// ubtrfs' manifest of the whole image (optionally without a device).
    pub fn ubtrfs_manifest(&self, skip: Option<usize>) -> Result<Vec<String>, String> {
        let mut args = vec!["inspect".to_string(), "manifest".to_string()];
        args.extend(self.image_args(skip));
        let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let out = ubtrfs(&a);
        if !out.status.success() {
            return Err(format!(
                "ubtrfs {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect())
    }
}

pub fn read_lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(String::from)
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

fn by_path(lines: &[String]) -> BTreeMap<String, Value> {
    lines
        .iter()
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("bad manifest line {l}: {e}"));
            (v["path"].as_str().unwrap_or("").to_string(), v)
        })
        .collect()
}

/// Compares two manifests; Err lists the first differences. Empty-subvolume
/// placeholders (dirs with ino 2 in `expected`) carry the kernel's current
/// time, so their mtime is not compared.
pub fn compare_manifests(
    expected: &[String],
    actual: &[String],
    ignore: &Ignore,
) -> Result<usize, String> {
    let e = by_path(expected);
    let a = by_path(actual);
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

/// Whether kernel-backed tests can run here (root, btrfs, loop devices).
/// When they cannot: with UBTRFS_REQUIRE_KERNEL=1 (CI) this panics, so the
/// run fails; otherwise it says loudly on stderr that the test is skipped.
pub fn kernel_available(test: &str) -> bool {
    let root = unsafe_geteuid() == 0;
    let btrfs = std::fs::read_to_string("/proc/filesystems").is_ok_and(|s| s.contains("btrfs"));
    let tools = Command::new("mkfs.btrfs")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if root && btrfs && tools {
        return true;
    }
    let why = format!("root={root} kernel btrfs={btrfs} mkfs.btrfs={tools}");
    if std::env::var("UBTRFS_REQUIRE_KERNEL").is_ok_and(|v| v == "1") {
        panic!("{test}: kernel-backed test cannot run ({why}) and UBTRFS_REQUIRE_KERNEL=1");
    }
    eprintln!("SKIPPED {test}: needs root, the kernel's btrfs and btrfs-progs ({why})");
    false
}

fn unsafe_geteuid() -> u32 {
    // Avoids a libc dependency: /proc/self/status has the effective uid.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| {
                l.split_whitespace()
                    .nth(2)
                    .map(|x| x.parse().unwrap_or(u32::MAX))
            })
        })
        .unwrap_or(u32::MAX)
}

/// Unpacks the committed (kernel-made, zstd-compressed) fixtures once per
/// test process into a temp directory; returns their directories.
pub fn committed_fixtures() -> &'static [Fixture] {
    static F: OnceLock<Vec<Fixture>> = OnceLock::new();
    F.get_or_init(|| {
        let out = scratch_dir("committed");
        let st = Command::new("bash")
            .arg(repo_root().join("tests/fixtures/unpack.sh"))
            .arg(&out)
            .status()
            .expect("run unpack.sh");
        assert!(st.success(), "unpack.sh failed");
        list_fixtures(&out)
    })
}

/// Fixtures built fresh by the kernel for this test process (or reused from
/// $UBTRFS_FIXTURES_DIR when set, for local iteration).
pub fn kernel_fixtures() -> &'static [Fixture] {
    static F: OnceLock<Vec<Fixture>> = OnceLock::new();
    F.get_or_init(|| {
        if let Ok(d) = std::env::var("UBTRFS_FIXTURES_DIR") {
            return list_fixtures(Path::new(&d));
        }
        let out = scratch_dir("kernel");
        let st = Command::new("bash")
            .arg(repo_root().join("tests/fixtures/build.sh"))
            .arg(&out)
            .status()
            .expect("run build.sh");
        assert!(st.success(), "tests/fixtures/build.sh failed");
        list_fixtures(&out)
    })
}

pub fn list_fixtures(dir: &Path) -> Vec<Fixture> {
    let mut v: Vec<Fixture> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("meta.json").exists())
        .map(|e| Fixture::load(&e.path()))
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// A fresh directory under the target dir for this test process.
pub fn scratch_dir(what: &str) -> PathBuf {
    let base = std::env::var("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("target/tmp"));
    let d = base.join(format!("ubtrfs-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// sha256 of a file (via sha256sum, to keep the harness dependency-light).
pub fn sha256_file(p: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(p)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}
