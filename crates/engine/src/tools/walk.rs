//! Depth-first walk of a directory tree, crossing into subvolumes as the
//! kernel shows them.

use crate::error::Result;
use crate::fs::{Filesystem, InodeId, Stat};
use std::collections::HashSet;
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
    let mut entered = HashSet::new();
    walk_inner(
        fs,
        root,
        &st,
        &mut Vec::new(),
        &mut visit,
        &mut post_dir,
        0,
        &mut entered,
    )
}

/// Deepest nesting followed; a deeper tree in a corrupt image is cut off
/// with an error instead of overflowing the stack.
const MAX_DEPTH: usize = 4096;

#[allow(clippy::too_many_arguments)]
fn walk_inner<V, P>(
    fs: &Filesystem,
    id: InodeId,
    st: &Stat,
    path: &mut Vec<u8>,
    visit: &mut V,
    post_dir: &mut P,
    depth: usize,
    entered: &mut HashSet<InodeId>,
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
    // Directories have exactly one parent entry (subvolume roots one
    // ROOT_REF), so a directory met twice means a corrupt image: entries
    // looping back to an ancestor, or several entries for one directory.
    // Without this check two such entries make the walk exponential (a
    // hang) long before MAX_DEPTH is reached. Placeholders for subvolumes
    // a snapshot does not hold are empty and may appear many times.
    if !id.is_placeholder() && !entered.insert(id) {
        return Err(crate::error::Error::corrupt(
            format!(
                "directory {} (subvolume {} inode {})",
                String::from_utf8_lossy(path),
                id.subvol,
                id.ino
            ),
            "reached a second time (directory entries loop or link one directory twice)",
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
        walk_inner(
            fs,
            e.target,
            &cst,
            path,
            visit,
            post_dir,
            depth + 1,
            entered,
        )?;
        path.truncate(len);
    }
    post_dir(&Visit { path, id, stat: st })
}
