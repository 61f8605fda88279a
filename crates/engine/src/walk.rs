//! Depth-first walk of a directory tree, crossing into subvolumes as the
//! kernel shows them.

use crate::error::Result;
use crate::fs::{Filesystem, InodeId, Stat};
use std::ops::ControlFlow;

/// One path met by [`walk`].
pub struct Visit<'a> {
    /// Path relative to the walk's root ("" for the root itself).
    pub path: &'a [u8],
    pub id: InodeId,
    pub stat: &'a Stat,
}

/// What the visitor wants after seeing a directory.
pub enum Descend {
    Yes,
    No,
}

/// Walks the tree under `root` depth-first, parents before children,
/// entries in directory index order. `post_dir` is called after a
/// directory's children (for setting directory times last).
pub fn walk<V, P>(fs: &Filesystem, root: InodeId, mut visit: V, mut post_dir: P) -> Result<()>
where
    V: FnMut(&Visit<'_>) -> Result<Descend>,
    P: FnMut(&Visit<'_>) -> Result<()>,
{
    let st = fs.stat(root)?;
    walk_inner(fs, root, &st, &mut Vec::new(), &mut visit, &mut post_dir, 0)
}

/// Deepest nesting followed; a deeper tree in a corrupt image is cut off
/// with an error instead of overflowing the stack.
const MAX_DEPTH: usize = 4096;

fn walk_inner<V, P>(
    fs: &Filesystem,
    id: InodeId,
    st: &Stat,
    path: &mut Vec<u8>,
    visit: &mut V,
    post_dir: &mut P,
    depth: usize,
) -> Result<()>
where
    V: FnMut(&Visit<'_>) -> Result<Descend>,
    P: FnMut(&Visit<'_>) -> Result<()>,
{
    let v = Visit { path, id, stat: st };
    let descend = visit(&v)?;
    if !st.is_dir() || matches!(descend, Descend::No) {
        return Ok(());
    }
    if depth >= MAX_DEPTH {
        return Err(crate::error::Error::corrupt(
            format!("directory {}", String::from_utf8_lossy(path)),
            format!("nested deeper than {MAX_DEPTH}"),
        ));
    }
    let mut entries = Vec::new();
    fs.for_each_dir_entry(id, 0, |e| {
        entries.push(e);
        Ok(ControlFlow::Continue(()))
    })?;
    for e in entries {
        let len = path.len();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(&e.name);
        let cst = fs.stat(e.target)?;
        walk_inner(fs, e.target, &cst, path, visit, post_dir, depth + 1)?;
        path.truncate(len);
    }
    post_dir(&Visit { path, id, stat: st })
}
