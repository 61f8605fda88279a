//! The seeded workloads: (a) rw_ops then the kernel, (b) the same seed
//! through two mounts, (c) a snapshot kept, (d) kills in the middle of a
//! run.

use super::*;

// ------------------------------------------------------------------ (a)

pub(super) fn rw_ops_then_kernel(w: Writer, seed: u64, base: &Path) -> Result<String, String> {
    let dir = base.join(format!("{}-{seed}", w.name()));
    let (image, mnt) = fresh_image(&dir, &image_size())?;
    // Even seeds write compressed (zstd), on both mounts.
    let opts = if seed.is_multiple_of(2) {
        "compress=zstd"
    } else {
        ""
    };
    let m = RwMount::start_env(w, &image, &mnt, opts, SMALL_DIRTY_LIMIT)?;
    let log = match &m {
        RwMount::Ubtrfs(u) => Some(u.log.clone()),
        RwMount::Kernel(_) => None,
    };
    let t = mnt.join("t");
    std::fs::create_dir(&t).map_err(|e| format!("mkdir {}: {e}", t.display()))?;
    let ops = RwOps::new(seed, ops(), procs());
    let r = ops.run(&t, &dir);
    let m = m.check_run(&r, &format!("rw_ops through the {} mount", w.name()))?;
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    let mut note = String::new();
    if let Some(log) = log {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let what = " writebacks written outside the lock";
        match daemon_count(&text, what) {
            Some(n) if n > 0 => note = format!(", {n}{what}"),
            n => return Err(format!("{n:?}{what}: {}", tail(&text, 800))),
        }
    }
    check(&image, &format!("after the {} mount", w.name()))?;

    let k = RwMount::start(Writer::Kernel, &image, &mnt, "")?;
    let v = ops.verify(&t, &r, &dir);
    let k = k.check_run(
        &v,
        &format!("the kernel's view after the {} mount", w.name()),
    )?;
    kernel_writes_on_top(k, &t, &mnt)?;
    check(&image, "after the kernel wrote on top")?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!("rw_ops {}{note}", r.brief()))
}

// ------------------------------------------------------------------ (b)

/// The same rw_ops run through `a`'s and `b`'s mounts of two fresh
/// images: their manifests, live and read back by the kernel.
pub(super) fn same_seed_trees(
    a: Writer,
    b: Writer,
    seed: u64,
    base: &Path,
) -> Result<String, String> {
    let mut live = Vec::new();
    let mut ro = Vec::new();
    let mut runs = Vec::new();
    for (i, w) in [a, b].into_iter().enumerate() {
        let dir = base.join(format!("{seed}-{i}-{}", w.name()));
        let (image, mnt) = fresh_image(&dir, &image_size())?;
        let m = RwMount::start(w, &image, &mnt, "")?;
        let t = mnt.join("t");
        std::fs::create_dir(&t).map_err(|e| e.to_string())?;
        let r = RwOps::new(seed, ops(), procs()).run(&t, &dir);
        let m = m.check_run(&r, &format!("rw_ops through the {} mount", w.name()))?;
        live.push(manifest_of(&mnt));
        m.finish()
            .map_err(|e| format!("{} unmount: {e}", w.name()))?;
        check(&image, &format!("after the {} mount", w.name()))?;
        let k = kernel_ro(&image, &mnt);
        ro.push(manifest_of(&mnt));
        drop(k);
        runs.push(r);
        let _ = std::fs::remove_dir_all(&dir);
    }
    let refused: Vec<&serde_json::Value> = runs.iter().map(|r| &r.summary["eopnotsupp"]).collect();
    if refused[0] != refused[1] {
        return Err(format!(
            "the mounts refused different fallocate modes ({}: {}, {}: {}): the trees cannot match",
            a.name(),
            refused[0],
            b.name(),
            refused[1]
        ));
    }
    let explicit = runs[0].explicit_mtimes();
    let n = compare_rw_manifests(&live[0], &live[1], &explicit, "/t").map_err(|d| {
        format!(
            "live through the mounts, {} (expected) vs {}: {d}",
            a.name(),
            b.name()
        )
    })?;
    compare_rw_manifests(&ro[0], &ro[1], &explicit, "/t").map_err(|d| {
        format!(
            "read back by the kernel, {} (expected) vs {}: {d}",
            a.name(),
            b.name()
        )
    })?;
    Ok(format!(
        "{n} paths equal ({} mtimes compared); {} then {}",
        explicit.len(),
        runs[0].brief(),
        runs[1].brief()
    ))
}

// ------------------------------------------------------------------ (c)

/// Changes every regular file below `dir` (seeded): overwrite, truncate,
/// delete, append or chmod. Returns how many it changed.
pub(super) fn scribble(dir: &Path, seed: u64) -> Result<usize, String> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))? {
            let p = e.map_err(|e| e.to_string())?.path();
            let md = std::fs::symlink_metadata(&p).map_err(|e| e.to_string())?;
            if md.is_dir() {
                stack.push(p);
            } else if md.is_file() {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut rng = Rng::new(seed);
    let err = |p: &Path, e: std::io::Error| format!("scribble {}: {e}", p.display());
    for p in &files {
        let len = std::fs::metadata(p).map_err(|e| err(p, e))?.len();
        let data: Vec<u8> = (0..1 + rng.below(8192)).map(|_| rng.next() as u8).collect();
        match rng.below(5) {
            0 => {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(p)
                    .map_err(|e| err(p, e))?;
                f.seek(SeekFrom::Start(rng.below(len + 1)))
                    .and_then(|_| f.write_all(&data))
                    .map_err(|e| err(p, e))?;
            }
            1 => std::fs::OpenOptions::new()
                .write(true)
                .open(p)
                .and_then(|f| f.set_len(len / 2))
                .map_err(|e| err(p, e))?,
            2 => std::fs::remove_file(p).map_err(|e| err(p, e))?,
            3 => std::fs::OpenOptions::new()
                .append(true)
                .open(p)
                .and_then(|mut f| f.write_all(&data))
                .map_err(|e| err(p, e))?,
            _ => std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| err(p, e))?,
        }
    }
    Ok(files.len())
}

pub(super) fn snapshot_kept(w: Writer, seed: u64, base: &Path) -> Result<String, String> {
    let dir = base.join(format!("{}-{seed}", w.name()));
    let (image, mnt) = fresh_image(&dir, &image_size())?;
    // The origin's files, written by the kernel.
    let k = RwMount::start(Writer::Kernel, &image, &mnt, "")?;
    std::fs::create_dir(mnt.join("t")).map_err(|e| e.to_string())?;
    let fill = RwOps::new(seed, ops() / 2, 2).run(&mnt.join("t"), &dir);
    k.finish()?;
    if !fill.ok() {
        return Err(format!("filling the origin: {}", fill.describe()));
    }
    run(Command::new(ubtrfs_bin())
        .args(["subvolume", "snapshot", "-r"])
        .arg(&image)
        .args(["/", "/snap"]))?;
    let k = kernel_ro(&image, &mnt);
    let before = manifest_of(&mnt.join("snap"));
    let origin_before = manifest_of(&mnt.join("t"));
    drop(k);

    let m = RwMount::start(w, &image, &mnt, "")?;
    let snap_write = std::fs::write(mnt.join("snap/new-file"), b"x");
    let changed = scribble(&mnt.join("t"), seed);
    std::fs::create_dir(mnt.join("t2")).map_err(|e| e.to_string())?;
    let beside = RwOps::new(seed + 1000, ops() / 2, 2).run(&mnt.join("t2"), &dir);
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    match snap_write {
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => {}
        other => {
            return Err(format!(
                "writing into the read-only snapshot: {other:?}, expected EROFS"
            ))
        }
    }
    let changed = changed?;
    if !beside.ok() {
        return Err(format!("rw_ops beside the snapshot: {}", beside.describe()));
    }
    check(&image, &format!("after the {} mount", w.name()))?;
    let k = kernel_ro(&image, &mnt);
    let after = manifest_of(&mnt.join("snap"));
    let origin_after = manifest_of(&mnt.join("t"));
    drop(k);
    let n = compare_manifests(&before, &after, &Ignore::default())
        .map_err(|d| format!("the snapshot changed: {d}"))?;
    if origin_after == origin_before || changed == 0 {
        return Err("the origin did not change: the test shows nothing".into());
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!(
        "{n} snapshot paths unchanged after {changed} shared files were changed; {}",
        beside.brief()
    ))
}

// ------------------------------------------------------------------ (d)

pub(super) fn kills() -> u64 {
    env_u64("UBTRFS_RW_KILLS").unwrap_or(3)
}

/// Kills in the middle of workloads on one image, at seeded moments, with
/// a commit every second; after each: check, kernel mount, read all,
/// write, check.
pub(super) fn kill_mid_run(w: Writer, seed: u64, base: &Path) -> Result<String, String> {
    let dir = base.join(format!("{}-{seed}", w.name()));
    let (image, mnt) = fresh_image(&dir, &image_size())?;
    let mut rng = Rng::new(seed);
    let mut notes = Vec::new();
    for k in 0..kills() {
        let delay = Duration::from_millis(300 + rng.below(2700));
        let when = format!("kill {k} after {delay:?}");
        let m = RwMount::start_env(w, &image, &mnt, "commit=1", SMALL_DIRTY_LIMIT)?;
        let t = mnt.join(format!("t{k}"));
        std::fs::create_dir(&t).map_err(|e| e.to_string())?;
        let work = RwOps::new(seed * 1000 + k, 1_000_000, procs()).spawn(&t, &dir);
        std::thread::sleep(delay);
        match m {
            RwMount::Ubtrfs(mut u) => {
                let killed = u.kill9();
                kill_group(work);
                killed.map_err(|e| format!("{when}: {e}"))?;
            }
            RwMount::Kernel(km) => {
                kill_group(work);
                km.try_unmount()
                    .map_err(|e| format!("{when}: unmount: {e}"))?;
            }
        }
        check(&image, &format!("after {when}"))?;
        let km = RwMount::start(Writer::Kernel, &image, &mnt, "")
            .map_err(|e| format!("{when}: the kernel cannot mount it: {e}"))?;
        let lines = manifest_of(&mnt);
        let wrote = std::fs::write(mnt.join(format!("kernel-{k}")), vec![k as u8; 100_000]);
        km.finish()
            .map_err(|e| format!("{when}: kernel unmount: {e}"))?;
        wrote.map_err(|e| format!("{when}: kernel write: {e}"))?;
        check(&image, &format!("after {when} and a kernel mount"))?;
        notes.push(format!("{delay:?}: {} paths", lines.len()));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(notes.join(", "))
}
