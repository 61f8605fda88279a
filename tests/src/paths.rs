//! Where things are: the repository, scratch directories.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
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

/// A fresh directory under /tmp (removed by the caller or left for
/// inspection).
pub fn tempdir(prefix: &str) -> PathBuf {
    let o = Command::new("mktemp")
        .args(["-d", &format!("/tmp/{prefix}.XXXXXX")])
        .output()
        .expect("mktemp");
    PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
}

/// `cp --sparse=always FROM TO` (image files: holes stay holes).
pub fn sparse_copy(from: &Path, to: &Path) -> Result<(), String> {
    crate::run::run(Command::new("cp").arg("--sparse=always").arg(from).arg(to)).map(|_| ())
}

/// A directory removed (with what is in it) on drop.
pub struct Workdir(pub PathBuf);

impl Workdir {
    /// A fresh `scratch_dir(what)`, removed on drop.
    pub fn new(what: &str) -> Workdir {
        Workdir(scratch_dir(what))
    }
}

impl std::ops::Deref for Workdir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
