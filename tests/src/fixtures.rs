//! Fixtures: directories as tests/fixtures/build.sh and unpack.sh write
//! them (`dev*.img`, `meta.json`, `manifest.jsonl`): the committed ones
//! (unpacked once per test process, no root), fresh kernel-made ones
//! (root), and private copies to corrupt.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::manifest::read_lines;
use crate::paths::{repo_root, scratch_dir, sparse_copy};
use crate::run::{run_ok, ubtrfs_lines};

/// A fixture directory as build.sh / unpack.sh write it.
#[derive(Debug, Clone)]
pub struct Fixture {
    pub name: String,
    pub dir: PathBuf,
    pub meta: Value,
}

/// `IMAGE -d DEV ...` arguments for a list of device images.
pub fn image_args<P: AsRef<Path>>(devices: &[P]) -> Vec<String> {
    let mut args = vec![devices[0].as_ref().display().to_string()];
    for d in &devices[1..] {
        args.push("-d".into());
        args.push(d.as_ref().display().to_string());
    }
    args
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
        let devs: Vec<PathBuf> = self
            .devices()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != skip)
            .map(|(_, d)| d)
            .collect();
        image_args(&devs)
    }

    /// The profile of `kind` ("data", "metadata"), lower case.
    pub fn profile(&self, kind: &str) -> String {
        self.meta["profile"][kind]
            .as_str()
            .unwrap_or("single")
            .to_lowercase()
    }

    pub fn kernel_manifest(&self) -> Vec<String> {
        read_lines(&self.dir.join("manifest.jsonl"))
    }

    /// ubtrfs' manifest of the whole image (optionally without a device).
    pub fn ubtrfs_manifest(&self, skip: Option<usize>) -> Result<Vec<String>, String> {
        let mut args = vec!["inspect".to_string(), "manifest".to_string()];
        args.extend(self.image_args(skip));
        ubtrfs_lines(&args)
    }

    /// A private copy in `dir` (sparse images, meta.json, manifest.jsonl),
    /// to corrupt without disturbing other tests.
    pub fn copy_to(&self, dir: &Path) -> Fixture {
        std::fs::create_dir_all(dir).unwrap();
        for d in self.devices() {
            sparse_copy(&d, dir).unwrap_or_else(|e| panic!("copy a fixture image: {e}"));
        }
        for f in ["meta.json", "manifest.jsonl"] {
            std::fs::copy(self.dir.join(f), dir.join(f)).unwrap();
        }
        let mut copy = Fixture::load(dir);
        copy.name = self.name.clone();
        copy
    }
}

/// Unpacks committed fixtures `names` (all when empty) into `out` with
/// tests/fixtures/unpack.sh (zstd, sparse); returns them by name.
pub fn unpack_committed(out: &Path, names: &[&str]) -> Vec<Fixture> {
    run_ok(
        Command::new("bash")
            .arg(repo_root().join("tests/fixtures/unpack.sh"))
            .arg(out)
            .args(names),
        "tests/fixtures/unpack.sh (needs zstd)",
    );
    if names.is_empty() {
        list_fixtures(out)
    } else {
        names.iter().map(|n| Fixture::load(&out.join(n))).collect()
    }
}

/// The committed (kernel-made, zstd-compressed) fixtures, unpacked once
/// per test process. Shared: tests that corrupt one take a private copy
/// ([`Fixture::copy_to`], [`committed_fixture_copy`]).
pub fn committed_fixtures() -> &'static [Fixture] {
    static F: OnceLock<Vec<Fixture>> = OnceLock::new();
    F.get_or_init(|| unpack_committed(&scratch_dir("committed"), &[]))
}

/// The committed fixture `name`.
pub fn committed_fixture(name: &str) -> &'static Fixture {
    committed_fixtures()
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no committed fixture {name}"))
}

/// A private copy of committed fixture `name` in `dir`.
pub fn committed_fixture_copy(name: &str, dir: &Path) -> Fixture {
    committed_fixture(name).copy_to(dir)
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
        run_ok(
            Command::new("bash")
                .arg(repo_root().join("tests/fixtures/build.sh"))
                .arg(&out),
            "tests/fixtures/build.sh",
        );
        list_fixtures(&out)
    })
}

/// The kernel fixture `name`.
pub fn kernel_fixture(name: &str) -> &'static Fixture {
    kernel_fixtures()
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no kernel fixture {name}"))
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

/// sha256 of a file's content (read through stdin: sha256sum escapes odd
/// names in its output).
pub fn sha256_file(p: &Path) -> String {
    let f = std::fs::File::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let out = run_ok(Command::new("sha256sum").stdin(f), "sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}
