//! Commands on a path inside a live mount: the command line as a client of
//! btrfs's ioctl ABI ([`ubtrfs_format::ioctl`]), which a ubtrfs mount's
//! daemon serves and the kernel's btrfs serves alike. The daemon carries
//! each request out in its running transaction; nothing here opens the
//! image (the daemon is its one writer).

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use ubtrfs_format::ioctl::{self as abi, VolArgs};

/// statfs f_type of a FUSE mount and of the kernel's btrfs.
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
const BTRFS_SUPER_MAGIC: i64 = 0x9123_683e;

/// What a command-line path names.
pub enum Target {
    /// An image file or block device: the offline command opens it.
    Image,
    /// A path inside a mount that serves btrfs's ioctls.
    Mounted,
}

/// The filesystem type of the mount holding `dir`.
fn fs_type(dir: &Path) -> io::Result<i64> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: statfs writes a struct statfs into `st`; `c` is a C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_type as i64)
}

/// Whether the mount holding `dir` serves btrfs's ioctls: the kernel's
/// btrfs, or a FUSE mount of ubtrfs's (type fuse.ubtrfs or
/// fuseblk.ubtrfs in the mount table: another FUSE filesystem's is not).
fn serves_btrfs_ioctls(dir: &Path) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    Ok(match fs_type(dir)? {
        BTRFS_SUPER_MAGIC => true,
        FUSE_SUPER_MAGIC => {
            let dev = std::fs::metadata(dir)?.dev();
            let st_dev = format!("{}:{}", libc::major(dev), libc::minor(dev));
            ubtrfs_engine::io::claim::mounts()
                .iter()
                .any(|m| m.st_dev == st_dev && m.fstype.ends_with(".ubtrfs"))
        }
        _ => false,
    })
}

/// The directory a new or removed name `path` lives in ("." for a bare
/// name).
pub fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Whether `path` is an image (an existing file or block device) or a
/// path inside a mount that takes btrfs's ioctls (it, or for a name to
/// make, its directory). A lone path (`alone`: no PATH inside an image
/// follows) that is a file inside such a mount is the mount's: its
/// request then says what is wrong with it. Anything else is refused
/// with what it is.
pub fn classify(path: &Path, alone: bool) -> Result<Target, String> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(m) = std::fs::metadata(path) {
        let in_mount = || matches!(serves_btrfs_ioctls(&parent_of(path)), Ok(true));
        if m.file_type().is_block_device() || m.is_file() && !(alone && in_mount()) {
            return Ok(Target::Image);
        }
    }
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        parent_of(path)
    };
    match serves_btrfs_ioctls(&dir) {
        Ok(true) => Ok(Target::Mounted),
        Ok(false) => Err(format!(
            "{}: neither an image nor a path inside a ubtrfs (or btrfs) mount",
            path.display()
        )),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Why directory `dir` is no image: inside a ubtrfs mount, where this
/// command is not served yet, or elsewhere.
pub fn not_an_image(dir: &Path) -> String {
    match serves_btrfs_ioctls(dir) {
        Ok(true) => format!(
            "{}: a directory inside a mount; this command reads an image (unmounted): \
             on a live mount, read its files (subvolume, send, property and filesystem \
             commands take a path inside it)",
            dir.display()
        ),
        _ => format!(
            "{}: a directory, not a btrfs image or device",
            dir.display()
        ),
    }
}

fn open_dir(dir: &Path) -> Result<File, String> {
    open_dir_io(dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))
}

fn open_dir_io(dir: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)
}

/// ioctl `cmd` on `f` with the argument `arg` (in and out).
fn ioctl(f: &File, cmd: u32, arg: &mut [u8]) -> io::Result<()> {
    // SAFETY: `arg` is as large as `cmd` encodes (each caller sizes it
    // from the same constants), and lives across the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), cmd as _, arg.as_mut_ptr()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOTTY) {
            // A read-only ubtrfs mount reads the image as committed and
            // serves none of these.
            return Err(io::Error::other(
                "not served by this mount (a read-only ubtrfs mount serves no btrfs ioctls: \
                 give the command its image instead)",
            ));
        }
        return Err(e);
    }
    Ok(())
}

/// The last component of `path`, which a request names in its directory.
fn name_of(path: &Path) -> Result<Vec<u8>, String> {
    match path.file_name() {
        Some(n) if n != "." && n != ".." => Ok(n.as_bytes().to_vec()),
        _ => Err(format!(
            "{}: not a name to create or delete",
            path.display()
        )),
    }
}

/// A request that names `path` in its directory (create, delete): the
/// v2 argument with that name, on the directory.
fn name_request(path: &Path, cmd: u32) -> io::Result<()> {
    let name = name_of(path).map_err(io::Error::other)?;
    let d = open_dir(&parent_of(path)).map_err(io::Error::other)?;
    let mut arg = VolArgs {
        fd: 0,
        flags: 0,
        name,
        subvolid: 0,
    }
    .to_v2_bytes();
    ioctl(&d, cmd, &mut arg)
}

/// `subvolume create PATH`: an empty subvolume, made by the mount.
pub fn create(path: &Path) -> Result<(), String> {
    name_request(path, abi::SUBVOL_CREATE_V2)
        .map_err(|e| format!("cannot create subvolume {}: {e}", path.display()))?;
    println!("Create subvolume '{}'", shown(path));
    Ok(())
}

/// `subvolume snapshot [-r] SOURCE DEST`: DEST is the new name, or an
/// existing directory to put a snapshot named as SOURCE in (as btrfs-progs).
pub fn snapshot(source: &Path, dest: &Path, readonly: bool) -> Result<(), String> {
    let src = open_dir(source)?;
    let (dir, name) = if dest.is_dir() {
        (
            dest.to_path_buf(),
            name_of(
                &std::fs::canonicalize(source).map_err(|e| format!("{}: {e}", source.display()))?,
            )?,
        )
    } else {
        (parent_of(dest), name_of(dest)?)
    };
    let d = open_dir(&dir)?;
    let mut arg = VolArgs {
        fd: src.as_raw_fd() as i64,
        flags: if readonly { abi::SUBVOL_RDONLY } else { 0 },
        name: name.clone(),
        subvolid: 0,
    }
    .to_v2_bytes();
    ioctl(&d, abi::SNAP_CREATE_V2, &mut arg).map_err(|e| {
        format!(
            "cannot snapshot {} as {}: {e}",
            source.display(),
            dest.display()
        )
    })?;
    println!(
        "Create {}snapshot of '{}' in '{}/{}'",
        if readonly { "a readonly " } else { "a " },
        source.display(),
        dir.display(),
        String::from_utf8_lossy(&name)
    );
    Ok(())
}

/// `subvolume delete PATH`, printed as btrfs-progs prints it: the full
/// path, and whether a commit follows.
pub fn delete(path: &Path, commit: bool) -> Result<(), String> {
    let full = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    name_request(path, abi::SNAP_DESTROY_V2)
        .map_err(|e| format!("cannot delete {}: {e}", path.display()))?;
    println!(
        "Delete subvolume ({}): '{}'",
        if commit { "commit" } else { "no-commit" },
        full.display()
    );
    Ok(())
}

/// INO_LOOKUP on `dir` of inode `objectid` in tree `tree` (0: the tree
/// `dir` is in): the tree, and the inode's path in it ("a/b/").
fn ino_lookup(dir: &Path, tree: u64, objectid: u64) -> Result<abi::InoLookup, String> {
    let d = open_dir(dir)?;
    let mut arg = abi::InoLookup {
        treeid: tree,
        objectid,
        name: Vec::new(),
    }
    .to_bytes()
    .unwrap_or_default();
    ioctl(&d, abi::INO_LOOKUP, &mut arg)
        .map_err(|e| format!("inode lookup on {}: {e}", dir.display()))?;
    abi::InoLookup::parse(&arg)
        .ok_or_else(|| format!("{}: a short INO_LOOKUP answer", dir.display()))
}

/// The subvolume id of directory `dir` (INO_LOOKUP of its tree's top:
/// the kernel and the daemon answer with the tree the file is in).
pub fn subvol_id(dir: &Path) -> Result<u64, String> {
    Ok(ino_lookup(dir, 0, ubtrfs_format::consts::FIRST_INODE)?.treeid)
}

/// One BTRFS_IOC_SEND of read-only snapshot `snap` into `out` (the mount
/// writes the stream itself, into this process's descriptor). Clone
/// sources go as the kernel takes them (a pointer to their ids) to the
/// kernel's btrfs, and inline (SEND_CLONES) to a ubtrfs mount.
pub fn send_one(snap: &Path, args: &abi::SendArgs, out: &impl AsRawFd) -> Result<(), String> {
    let d = open_dir(snap)?;
    let err = |e: io::Error| format!("send {}: {e}", snap.display());
    let mut a = abi::SendArgs {
        send_fd: out.as_raw_fd() as i64,
        clone_sources_count: args.clone_sources.len() as u64,
        ..args.clone()
    };
    if a.clone_sources.is_empty() {
        return ioctl(&d, abi::SEND, &mut a.to_bytes()).map_err(err);
    }
    if fs_type(snap).map_err(err)? == BTRFS_SUPER_MAGIC {
        // The ids live in `a` across the call.
        a.clone_sources_ptr = a.clone_sources.as_ptr() as u64;
        return ioctl(&d, abi::SEND, &mut a.to_bytes()).map_err(err);
    }
    let mut b = a.to_clones_bytes().ok_or_else(|| {
        format!(
            "send {}: at most {} clone sources on a ubtrfs mount",
            snap.display(),
            abi::SEND_CLONES_MAX
        )
    })?;
    ioctl(&d, abi::SEND_CLONES, &mut b).map_err(err)
}

/// Every item of tree `tree` from `lo` to `hi`, by TREE_SEARCH on `dir`
/// (CAP_SYS_ADMIN), a batch at a time.
pub fn search_items(
    dir: &Path,
    tree: u64,
    lo: ubtrfs_format::Key,
    hi: ubtrfs_format::Key,
) -> Result<Vec<(ubtrfs_format::Key, Vec<u8>)>, String> {
    search_items_io(dir, tree, lo, hi).map_err(|e| format!("tree search on {}: {e}", dir.display()))
}

fn search_items_io(
    dir: &Path,
    tree: u64,
    lo: ubtrfs_format::Key,
    hi: ubtrfs_format::Key,
) -> io::Result<Vec<(ubtrfs_format::Key, Vec<u8>)>> {
    let d = open_dir(dir).map_err(io::Error::other)?;
    let mut out = Vec::new();
    let mut from = lo;
    loop {
        let key = abi::SearchKey {
            tree_id: tree,
            min_objectid: from.objectid,
            max_objectid: hi.objectid,
            min_type: from.item_type as u32,
            max_type: hi.item_type as u32,
            min_offset: from.offset,
            max_offset: hi.offset,
            min_transid: 0,
            max_transid: u64::MAX,
            nr_items: 4096,
        };
        let mut arg = key.to_args();
        ioctl(&d, abi::TREE_SEARCH, &mut arg)?;
        let n = abi::SearchKey::parse(&arg).map_or(0, |k| k.nr_items);
        let found = abi::search_results(&arg[abi::SEARCH_KEY_SIZE..], n);
        let Some(&(_, last, _)) = found.last() else {
            return Ok(out);
        };
        out.extend(found.into_iter().map(|(_, k, d)| (k, d.to_vec())));
        // The key after the last one found.
        from = match last.successor() {
            Some(k) => k,
            None => return Ok(out),
        };
        if from > hi {
            return Ok(out);
        }
    }
}

/// The path of directory `dirid` inside subvolume `tree` (relative, no
/// trailing '/'), by INO_LOOKUP on `dir`.
pub fn dir_path(dir: &Path, tree: u64, dirid: u64) -> Result<Vec<u8>, String> {
    let mut name = ino_lookup(dir, tree, dirid)?.name;
    if name.last() == Some(&b'/') {
        name.pop();
    }
    Ok(name)
}

/// The subvolumes of the filesystem `dir` is in, as an image's reader
/// lists them (the root tree's items through TREE_SEARCH). A caller
/// without CAP_SYS_ADMIN gets those it can reach under the subvolume
/// `dir` is the root of, with paths from it ([`subvolumes_below`]).
pub fn subvolumes(dir: &Path) -> Result<Vec<ubtrfs_engine::Subvolume>, String> {
    use ubtrfs_format::consts::*;
    let items = match search_items_io(
        dir,
        ROOT_TREE_OBJECTID,
        ubtrfs_format::Key::new(FS_TREE_OBJECTID, ROOT_ITEM, 0),
        ubtrfs_format::Key::new(LAST_FREE_OBJECTID, ROOT_BACKREF, u64::MAX),
    ) {
        Ok(items) => items,
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => return subvolumes_below(dir),
        Err(e) => return Err(format!("tree search on {}: {e}", dir.display())),
    };
    ubtrfs_engine::fs::subvolumes_of(&items, |tree, dirid| {
        dir_path(dir, tree, dirid).map_err(ubtrfs_engine::Error::Invalid)
    })
    .map_err(|e| format!("{}: {e}", dir.display()))
}

/// GET_SUBVOL_INFO on `dir`: the subvolume it is in, with no path.
fn subvol_info(dir: &Path) -> io::Result<ubtrfs_engine::Subvolume> {
    let d = open_dir_io(dir)?;
    let mut arg = vec![0u8; abi::SUBVOL_INFO_SIZE];
    ioctl(&d, abi::GET_SUBVOL_INFO, &mut arg)?;
    let i = abi::SubvolInfo::parse(&arg)
        .ok_or_else(|| io::Error::other("a short GET_SUBVOL_INFO answer"))?;
    let root = ubtrfs_format::items::RootItem {
        generation: i.generation,
        flags: i.flags,
        uuid: i.uuid,
        parent_uuid: i.parent_uuid,
        received_uuid: i.received_uuid,
        ctransid: i.ctransid,
        otransid: i.otransid,
        stransid: i.stransid,
        rtransid: i.rtransid,
        ctime: i.ctime,
        otime: i.otime,
        stime: i.stime,
        rtime: i.rtime,
        refs: 1,
        ..Default::default()
    };
    Ok(ubtrfs_engine::Subvolume {
        id: i.treeid,
        parent_id: i.parent_id,
        dirid: i.dirid,
        name: i.name,
        path: Vec::new(),
        root,
    })
}

/// The subvolumes directly inside the one `root` is the root of: (id,
/// directory), GET_SUBVOL_ROOTREF a batch at a time.
fn root_refs(root: &File) -> io::Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut from = 0;
    loop {
        let mut arg = abi::Rootrefs {
            min_treeid: from,
            refs: Vec::new(),
        }
        .to_bytes();
        let more = match ioctl(root, abi::GET_SUBVOL_ROOTREF, &mut arg) {
            Ok(()) => false,
            Err(e) if e.raw_os_error() == Some(libc::EOVERFLOW) => true,
            Err(e) => return Err(e),
        };
        let r = abi::Rootrefs::parse(&arg)
            .ok_or_else(|| io::Error::other("a short GET_SUBVOL_ROOTREF answer"))?;
        // An answer that does not move on ends the walk (a count is not
        // trusted to end it).
        if !more || r.refs.is_empty() || r.min_treeid <= from {
            out.extend(r.refs);
            return Ok(out);
        }
        from = r.min_treeid;
        out.extend(r.refs);
    }
}

/// The subvolumes a caller without CAP_SYS_ADMIN reaches under the one
/// whose root is `dir` (as libbtrfsutil's iterator walks them):
/// GET_SUBVOL_ROOTREF for the subvolumes inside each, INO_LOOKUP_USER for
/// the path to each (every directory on the way readable and searchable),
/// GET_SUBVOL_INFO of each; paths from `dir`'s subvolume, which comes
/// first with an empty path. Subvolumes the caller may not reach are left
/// out.
fn subvolumes_below(dir: &Path) -> Result<Vec<ubtrfs_engine::Subvolume>, String> {
    let err = |what: &str, e: io::Error| format!("{what} on {}: {e}", dir.display());
    if !is_subvol_root(dir) {
        return Err(format!(
            "{}: listing without CAP_SYS_ADMIN starts at a subvolume's root",
            dir.display()
        ));
    }
    let mut out = vec![subvol_info(dir).map_err(|e| err("subvolume info", e))?];
    // (a root's path on this machine, its path in the listing).
    let mut todo = vec![(dir.to_path_buf(), Vec::new())];
    while let Some((at, prefix)) = todo.pop() {
        let root = open_dir(&at)?;
        let mut refs = root_refs(&root).map_err(|e| err("subvolume references", e))?;
        refs.sort_unstable();
        for (child, dirid) in refs.into_iter().rev() {
            let mut arg = abi::InoLookupUser {
                dirid,
                treeid: child,
                ..Default::default()
            }
            .to_bytes()
            .unwrap_or_default();
            match ioctl(&root, abi::INO_LOOKUP_USER, &mut arg) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EACCES) => continue,
                Err(e) => return Err(err("user inode lookup", e)),
            }
            let Some(l) = abi::InoLookupUser::parse(&arg) else {
                continue;
            };
            let mut rel = l.path.clone();
            rel.extend_from_slice(&l.name);
            let host = at.join(std::ffi::OsStr::from_bytes(&rel));
            let mut s = match subvol_info(&host) {
                Ok(s) => s,
                Err(e) if e.raw_os_error() == Some(libc::EACCES) => continue,
                Err(e) => return Err(err("subvolume info", e)),
            };
            let mut path = prefix.clone();
            path.extend_from_slice(&rel);
            s.path = path.clone();
            path.push(b'/');
            todo.push((host, path));
            out.push(s);
        }
    }
    out[1..].sort_by_key(|s| s.id);
    Ok(out)
}

/// The default subvolume of the filesystem `dir` is in: the root tree
/// directory's "default" entry, by TREE_SEARCH.
pub fn default_subvol(dir: &Path) -> Result<u64, String> {
    use ubtrfs_format::consts::*;
    let key = ubtrfs_format::items::dir_item_key(ROOT_TREE_DIR_OBJECTID, b"default");
    let items = search_items(dir, ROOT_TREE_OBJECTID, key, key)?;
    for (k, d) in &items {
        let entries = ubtrfs_format::items::parse_dir_entries(d)
            .map_err(|e| format!("{}: root tree key {k}: {e}", dir.display()))?;
        if let Some(e) = entries.iter().find(|e| e.name == b"default") {
            return Ok(e.location.objectid);
        }
    }
    Ok(FS_TREE_OBJECTID)
}

/// DEFAULT_SUBVOL: subvolume `id` mounted by default from now on.
pub fn set_default(dir: &Path, id: u64) -> Result<(), String> {
    let d = open_dir(dir)?;
    let mut arg = id.to_le_bytes();
    ioctl(&d, abi::DEFAULT_SUBVOL, &mut arg)
        .map_err(|e| format!("set-default {id} on {}: {e}", dir.display()))
}

/// Whether directory `path` is a subvolume's root (its inode number in
/// its tree is 256: the kernel shows 256, a ubtrfs mount keeps the low 40
/// bits).
pub fn is_subvol_root(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_dir() && m.ino() & ((1 << 40) - 1) == 256)
}

/// Property `name` of `path` inside a mount: None when the object has
/// none (compression not set).
pub fn property(path: &Path, name: &str) -> Result<Option<String>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    match name {
        "ro" => {
            let mut arg = [0u8; 8];
            ioctl(&f, abi::SUBVOL_GETFLAGS, &mut arg)
                .map_err(|e| format!("{}: subvolume flags: {e}", path.display()))?;
            Ok(Some(
                (u64::from_le_bytes(arg) & abi::SUBVOL_RDONLY != 0).to_string(),
            ))
        }
        "label" => {
            let mut arg = [0u8; abi::LABEL_SIZE];
            ioctl(&f, abi::GET_FSLABEL, &mut arg)
                .map_err(|e| format!("{}: label: {e}", path.display()))?;
            let n = arg.iter().position(|&b| b == 0).unwrap_or(255);
            Ok(Some(String::from_utf8_lossy(&arg[..n]).into_owned()))
        }
        _ => match xattr_get(path, "btrfs.compression")? {
            Some(v) => Ok(Some(String::from_utf8_lossy(&v).into_owned())),
            None => Ok(None),
        },
    }
}

/// Sets property `name` of `path` inside a mount.
pub fn set_property(path: &Path, name: &str, value: &str) -> Result<(), String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    match name {
        "ro" => {
            let ro = crate::cmd_property::parse_bool(value)?;
            let mut arg = (if ro { abi::SUBVOL_RDONLY } else { 0 }).to_le_bytes();
            ioctl(&f, abi::SUBVOL_SETFLAGS, &mut arg)
                .map_err(|e| format!("{}: set ro: {e}", path.display()))
        }
        "label" => {
            if value.len() >= abi::LABEL_SIZE {
                return Err(format!("a label of {} bytes: at most 255", value.len()));
            }
            let mut arg = [0u8; abi::LABEL_SIZE];
            arg[..value.len()].copy_from_slice(value.as_bytes());
            ioctl(&f, abi::SET_FSLABEL, &mut arg)
                .map_err(|e| format!("{}: set label: {e}", path.display()))
        }
        _ => xattr_set(path, "btrfs.compression", value.as_bytes()),
    }
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: NUL in path", path.display()))
}

/// The value of xattr `name` of `path`, None when it has none.
fn xattr_get(path: &Path, name: &str) -> Result<Option<Vec<u8>>, String> {
    let (p, n) = (c_path(path)?, CString::new(name).unwrap_or_default());
    let mut buf = vec![0u8; 256];
    // SAFETY: `buf` has the length passed; both strings are C strings.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENODATA) {
            return Ok(None);
        }
        return Err(format!("{}: {name}: {e}", path.display()));
    }
    buf.truncate(r as usize);
    Ok(Some(buf))
}

/// Sets xattr `name` of `path` (an empty value removes it, as
/// btrfs-progs' property set compression "").
fn xattr_set(path: &Path, name: &str, value: &[u8]) -> Result<(), String> {
    let (p, n) = (c_path(path)?, CString::new(name).unwrap_or_default());
    // SAFETY: `value` has the length passed; both strings are C strings.
    let r = if value.is_empty() {
        unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) }
    } else {
        unsafe {
            libc::setxattr(
                p.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        }
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if value.is_empty() && e.raw_os_error() == Some(libc::ENODATA) {
            return Ok(());
        }
        return Err(format!("{}: {name}: {e}", path.display()));
    }
    Ok(())
}

/// The space by kind and profile of the filesystem `dir` is in, and last
/// the global reserve (flags SPACE_INFO_GLOBAL_RSV): the kernel's
/// SPACE_INFO (asked twice: the count, then the slots) on the
/// kernel's btrfs, ubtrfs's fixed-size one on a FUSE mount.
pub fn space(dir: &Path) -> Result<Vec<ubtrfs_engine::fs::space::SpaceInfo>, String> {
    let d = open_dir(dir)?;
    let err = |e: io::Error| format!("space of {}: {e}", dir.display());
    let slots = if fs_type(dir).map_err(err)? == BTRFS_SUPER_MAGIC {
        let mut head = [0u8; abi::SPACE_HEAD_SIZE];
        ioctl(&d, abi::SPACE_INFO, &mut head).map_err(err)?;
        let n = u64::from_le_bytes(head[8..16].try_into().unwrap_or([0; 8])) as usize;
        // As many as the kernel counted, and some room for one made
        // between the two calls (bounded: a count is not an allocation).
        let room = (n + 4).min(1024);
        let mut b = vec![0u8; abi::SPACE_HEAD_SIZE + room * 24];
        b[..8].copy_from_slice(&(room as u64).to_le_bytes());
        // `b` holds the head and `room` slots, as the head says: the
        // kernel writes past the 16 bytes its command encodes.
        ioctl(&d, abi::SPACE_INFO, &mut b).map_err(err)?;
        abi::decode_space(&b)
    } else {
        let mut b = vec![0u8; abi::SPACE_FIXED_SIZE];
        b[..8].copy_from_slice(&(abi::SPACE_SLOTS as u64).to_le_bytes());
        ioctl(&d, abi::SPACE_INFO_FIXED, &mut b).map_err(err)?;
        abi::decode_space(&b)
    };
    Ok(slots
        .into_iter()
        .map(
            |(flags, total_bytes, used_bytes)| ubtrfs_engine::fs::space::SpaceInfo {
                flags,
                total_bytes,
                used_bytes,
            },
        )
        .collect())
}

/// The devices of the filesystem `dir` is in (FS_INFO's highest devid,
/// then DEV_INFO for each id up to it; the ids not in use answer ENODEV).
pub fn devices(dir: &Path) -> Result<(abi::FsInfo, Vec<abi::DevInfo>), String> {
    let d = open_dir(dir)?;
    let mut arg = abi::FsInfo::default().to_bytes();
    ioctl(&d, abi::FS_INFO, &mut arg)
        .map_err(|e| format!("filesystem info of {}: {e}", dir.display()))?;
    let fs = abi::FsInfo::parse(&arg)
        .ok_or_else(|| format!("{}: a short FS_INFO answer", dir.display()))?;
    let mut out = Vec::new();
    // Bounded by the device count: max_id comes from the mount.
    for devid in 0..=fs.max_id {
        if out.len() as u64 >= fs.num_devices {
            break;
        }
        let mut arg = abi::DevInfo {
            devid,
            ..Default::default()
        }
        .to_bytes();
        match ioctl(&d, abi::DEV_INFO, &mut arg) {
            Ok(()) => out.extend(abi::DevInfo::parse(&arg)),
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {}
            Err(e) => return Err(format!("device {devid} of {}: {e}", dir.display())),
        }
    }
    Ok((fs, out))
}

/// The chunks of the filesystem `dir` is in (the chunk tree's
/// CHUNK_ITEMs, by TREE_SEARCH: CAP_SYS_ADMIN).
pub fn chunks(dir: &Path) -> Result<Vec<ubtrfs_format::items::ChunkItem>, String> {
    use ubtrfs_format::consts::*;
    let items = search_items(
        dir,
        CHUNK_TREE_OBJECTID,
        ubtrfs_format::Key::new(FIRST_CHUNK_TREE_OBJECTID, CHUNK_ITEM, 0),
        ubtrfs_format::Key::new(FIRST_CHUNK_TREE_OBJECTID, CHUNK_ITEM, u64::MAX),
    )?;
    items
        .iter()
        .map(|(k, d)| {
            ubtrfs_format::items::ChunkItem::parse(d)
                .map_err(|e| format!("{}: chunk tree key {k}: {e}", dir.display()))
        })
        .collect()
}

/// What statfs(2) says is available on the mount `dir` is in, in bytes
/// (f_bavail times f_bsize, as `df` shows it).
pub fn statfs_avail(dir: &Path) -> Result<u64, String> {
    let c = CString::new(dir.as_os_str().as_bytes()).map_err(|_| "NUL in path".to_string())?;
    // SAFETY: statfs writes a struct statfs into `st`; `c` is a C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!(
            "statfs {}: {}",
            dir.display(),
            io::Error::last_os_error()
        ));
    }
    Ok(st.f_bavail as u64 * st.f_bsize as u64)
}

/// A read-only scrub of the filesystem `dir` is in (BTRFS_IOC_SCRUB): one
/// request on a ubtrfs mount (any device names the whole filesystem);
/// one per device on the kernel's btrfs, the counts summed.
pub fn scrub(dir: &Path) -> Result<ubtrfs_engine::tools::scrub::ScrubReport, String> {
    let (fs, devs) = devices(dir)?;
    let d = open_dir(dir)?;
    let kernel = fs_type(dir).map_err(|e| format!("{}: {e}", dir.display()))? == BTRFS_SUPER_MAGIC;
    let mut r = ubtrfs_engine::tools::scrub::ScrubReport::default();
    for dev in devs.iter().take(if kernel { devs.len() } else { 1 }) {
        let mut arg = abi::ScrubArgs {
            devid: dev.devid,
            end: u64::MAX,
            flags: abi::SCRUB_READONLY,
            ..Default::default()
        }
        .to_bytes();
        ioctl(&d, abi::SCRUB, &mut arg)
            .map_err(|e| format!("scrub of {} (device {}): {e}", dir.display(), dev.devid))?;
        let a = abi::ScrubArgs::parse(&arg)
            .ok_or_else(|| format!("{}: a short SCRUB answer", dir.display()))?;
        let [supers, skipped, sectors] = a.ubtrfs;
        r.superblocks_checked += if kernel { 1 } else { supers };
        r.skipped_copies += skipped;
        r.data_sectors_checked += if kernel {
            a.counter("data_bytes_scrubbed") / fs.sectorsize.max(1) as u64
        } else {
            sectors
        };
        r.tree_blocks_checked += a.counter("tree_extents_scrubbed");
        r.tree_block_errors += a.counter("verify_errors");
        r.data_errors += a.counter("csum_errors");
        r.unreadable += a.counter("read_errors");
    }
    Ok(r)
}

/// BTRFS_IOC_SYNC: everything written back and committed.
pub fn sync(dir: &Path) -> Result<(), String> {
    let d = open_dir(dir)?;
    // BTRFS_IOC_SYNC takes no argument: an empty one is passed.
    ioctl(&d, abi::SYNC, &mut []).map_err(|e| format!("sync {}: {e}", dir.display()))
}

/// A path as btrfs-progs prints a new name: with its directory ("./a"
/// for a bare name).
fn shown(path: &Path) -> String {
    let dir = parent_of(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    format!("{}/{}", dir.display(), name)
}
