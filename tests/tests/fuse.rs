//! The FUSE mount (`ubtrfs mount`) judged by the kernel: every fixture's
//! manifest taken through the mount must equal the kernel's; cp, tar
//! --sparse and rsync -S out of the mount must give what they give out of
//! the kernel's mount; concurrent readers; a corrupted block gives EIO for
//! its file only; the mount is read-only, has a mount(8) helper, honours
//! subvol=/subvolid=, and its process exits when unmounted.
//!
//! Needs root, the kernel's btrfs, btrfs-progs, /dev/fuse, and the tools in
//! tests/fixtures/APT_PACKAGES (fuse3, rsync, tar). In CI
//! (UBTRFS_REQUIRE_KERNEL=1) a missing prerequisite fails the run.
//!
//! Inode numbers: a FUSE mount has one st_dev, so numbers must be unique
//! across subvolumes. The top-level subvolume shows the kernel's numbers;
//! subvolume S shows ((S - 255) << 40) | ino. The manifests are compared
//! without "ino", and the mapping is checked separately: low 40 bits equal
//! to the kernel's everywhere, the whole number equal in the top level.
//! Hardlink groups ("link") are compared as they are.

use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use ubtrfs_oracle::*;

const INO_BITS: u32 = 40;

/// Checks the inode number mapping against the kernel's numbers.
fn check_inos(expected: &[String], actual: &[String]) -> Result<(), String> {
    let e = records(expected);
    let a = records(actual);
    // Subvolume roots below the top: directories the kernel numbers 256.
    let roots: Vec<&String> = e
        .iter()
        .filter(|(p, v)| p.as_str() != "/" && v["type"] == "dir" && v["ino"] == 256)
        .map(|(p, _)| p)
        .collect();
    let mut bad = Vec::new();
    for (p, ev) in &e {
        let (Some(k), Some(u)) = (ev["ino"].as_u64(), a.get(p).and_then(|v| v["ino"].as_u64()))
        else {
            continue;
        };
        let in_subvol = roots
            .iter()
            .any(|r| p == *r || p.starts_with(&format!("{r}/")));
        let ok = if in_subvol {
            u & ((1 << INO_BITS) - 1) == k && u >> INO_BITS != 0
        } else {
            u == k
        };
        if !ok {
            bad.push(format!(
                "{p}: kernel ino {k}, mount ino {u} (in a subvolume: {in_subvol})"
            ));
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        bad.truncate(20);
        Err(bad.join("\n  "))
    }
}

fn no_ino() -> Ignore {
    Ignore {
        fields: vec!["ino"],
        dir_size: false,
    }
}

/// Manifest through the mount vs the kernel's, for each fixture.
fn check_fixtures(fixtures: &[Fixture], base: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for f in fixtures {
        let t = Instant::now();
        let dir = base.join(&f.name);
        let m = FuseMount::of(f, &[], &dir);
        let actual = manifest_of(&dir);
        drop(m);
        let expected = f.kernel_manifest();
        match compare_manifests(&expected, &actual, &no_ino()) {
            Ok(n) => eprintln!(
                "{}: {n} paths through the mount match the kernel ({:.1?})",
                f.name,
                t.elapsed()
            ),
            Err(d) => failures.push(format!("{}: {d}", f.name)),
        }
        if let Err(d) = check_inos(&expected, &actual) {
            failures.push(format!("{}: inode numbers:\n  {d}", f.name));
        }
    }
    failures
}

#[test]
fn fuse_kernel_fixtures_match_kernel_manifests() {
    skip_unless!(fuse_available);
    let failures = check_fixtures(kernel_fixtures(), &scratch_dir("fuse-manifest"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn fuse_committed_fixtures_match_kernel_manifests() {
    skip_unless!(fuse_available);
    let failures = check_fixtures(committed_fixtures(), &scratch_dir("fuse-committed"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Regular files of a manifest that have holes (data ranges short of the
/// size), as (path without the leading '/', record).
fn sparse_files(manifest: &[String]) -> Vec<(String, Value)> {
    records(manifest)
        .into_iter()
        .filter(|(_, v)| {
            v["type"] == "file"
                && v["link"].is_null()
                && v["path"].as_str().is_some_and(|p| !p.contains('%'))
                && v["data"].as_array().is_some_and(|d| {
                    let covered: u64 = d
                        .iter()
                        .map(|r| r[1].as_u64().unwrap() - r[0].as_u64().unwrap())
                        .sum();
                    covered < v["size"].as_u64().unwrap()
                })
        })
        .map(|(p, v)| (p.trim_start_matches('/').to_string(), v))
        .collect()
}

/// cp, tar --sparse and rsync -S of each sparse file, out of `src` into
/// `dst/{cp,tar,rsync}`; the tar archive is kept as `dst/archive.tar`.
fn copy_out(src: &Path, files: &[String], dst: &Path) {
    for t in ["cp", "tar", "rsync"] {
        std::fs::create_dir_all(dst.join(t)).unwrap();
    }
    for (i, f) in files.iter().enumerate() {
        let name = format!("{i:03}");
        run_ok(
            Command::new("cp")
                .arg(src.join(f))
                .arg(dst.join("cp").join(&name)),
            "cp",
        );
        run_ok(
            Command::new("rsync")
                .arg("-S")
                .arg(src.join(f))
                .arg(dst.join("rsync").join(&name)),
            "rsync -S",
        );
    }
    run_ok(
        Command::new("tar")
            .args(["--sparse", "--format=gnu", "-cf"])
            .arg(dst.join("archive.tar"))
            .arg("-C")
            .arg(src)
            .args(files),
        "tar --sparse -c",
    );
    run_ok(
        Command::new("tar")
            .arg("-xf")
            .arg(dst.join("archive.tar"))
            .arg("-C")
            .arg(dst.join("tar")),
        "tar -x",
    );
}

#[test]
fn fuse_sparse_copies_match_kernel() {
    skip_unless!(fuse_available);
    let base = scratch_dir("fuse-sparse");
    let mut failures = Vec::new();
    let mut files_checked = 0;
    for f in kernel_fixtures() {
        let files: Vec<String> = sparse_files(&f.kernel_manifest())
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        if files.is_empty() {
            continue;
        }
        let work = base.join(&f.name);
        let (kout, uout) = (work.join("out-kernel"), work.join("out-ubtrfs"));
        {
            let k = Mount::fixture(f, &work.join("kernel"));
            copy_out(&k.dir, &files, &kout);
        }
        {
            let u = FuseMount::of(f, &[], &work.join("ubtrfs"));
            copy_out(&u.dir, &files, &uout);
        }
        // Same tar archive byte for byte (names, sizes, times, owners and
        // the sparse map are all in it).
        if sha256_file(&kout.join("archive.tar")) != sha256_file(&uout.join("archive.tar")) {
            failures.push(format!("{}: tar --sparse archives differ", f.name));
        }
        for t in ["cp", "tar", "rsync"] {
            let ignore = Ignore {
                fields: vec!["ino", "mtime_ns"],
                dir_size: true,
            };
            let (a, b) = (manifest_of(&kout.join(t)), manifest_of(&uout.join(t)));
            // Content and the SEEK_DATA/SEEK_HOLE map of every output file.
            if let Err(d) = compare_manifests(&a, &b, &ignore) {
                failures.push(format!("{} {t}: {d}", f.name));
            }
        }
        files_checked += files.len();
        eprintln!(
            "{}: cp, tar --sparse, rsync -S of {} sparse files agree",
            f.name,
            files.len()
        );
        let _ = std::fs::remove_dir_all(&work);
    }
    assert!(files_checked > 0, "no sparse fixture files found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn fuse_concurrent_readers() {
    skip_unless!(fuse_available);
    let f = kernel_fixture("big");
    let expected: HashMap<String, String> = records(&f.kernel_manifest())
        .into_iter()
        .filter(|(_, v)| v["type"] == "file" && v["size"].as_u64().unwrap() <= 64 << 20)
        .map(|(p, v)| (p, v["sha256"].as_str().unwrap().to_string()))
        .collect();
    let dir = scratch_dir("fuse-concurrent").join("mnt");
    let m = FuseMount::of(f, &[], &dir);
    let t = Instant::now();
    let readers: Vec<_> = (0..8)
        .map(|i| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                // find + cat (sha256sum reads every byte); half the readers
                // go through the files in reverse order.
                let order = if i % 2 == 0 { "sort -z" } else { "sort -zr" };
                let out = Command::new("sh")
                    .arg("-c")
                    .arg(format!("cd '{}' && find . -type f -size -65M -print0 | {order} | xargs -0 -n 2000 sha256sum", dir.display()))
                    .output()
                    .expect("reader");
                (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
            })
        })
        .collect();
    let mut failures = Vec::new();
    for (i, r) in readers.into_iter().enumerate() {
        let (ok, out, err) = r.join().unwrap();
        if !ok {
            failures.push(format!("reader {i} failed: {err}"));
        }
        let mut seen = 0;
        for line in out.lines() {
            // sha256sum marks lines with escaped names with a backslash.
            let (line, escaped) = match line.strip_prefix('\\') {
                Some(l) => (l, true),
                None => (line, false),
            };
            let (hash, path) = line.split_once("  ").unwrap();
            let path = if escaped {
                path.replace("\\n", "\n").replace("\\\\", "\\")
            } else {
                path.to_string()
            };
            let path = &path[1..]; // "./x" -> "/x"
            match expected.get(path) {
                Some(h) if h == hash => seen += 1,
                Some(h) => failures.push(format!("reader {i}: {path}: sha256 {hash}, kernel {h}")),
                // Names the manifest percent-encodes are compared by count.
                None if path.bytes().any(|b| b <= 0x20 || b >= 0x7f || b == b'%') => seen += 1,
                None => failures.push(format!("reader {i}: unexpected {path}")),
            }
        }
        if seen != expected.len() {
            failures.push(format!(
                "reader {i}: read {seen} files, expected {}",
                expected.len()
            ));
        }
    }
    eprintln!(
        "8 readers of {} files each: {:.1?}",
        expected.len(),
        t.elapsed()
    );
    assert!(is_mounted(&dir), "the mount went away under the readers");
    assert!(
        dir.join("big").is_dir(),
        "the mount does not answer after the readers"
    );
    drop(m);
    failures.truncate(20);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The first "extent data disk byte N" of inode `ino` in the fs tree.
fn first_data_extent(image: &Path, ino: u64) -> Option<u64> {
    let out = Command::new("btrfs")
        .args(["inspect-internal", "dump-tree", "-t", "5"])
        .arg(image)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let key = format!("key ({ino} EXTENT_DATA ");
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if l.contains(&key) {
            for l in lines.by_ref().take(3) {
                if let Some(rest) = l.trim().strip_prefix("extent data disk byte ") {
                    return rest
                        .split_whitespace()
                        .next()?
                        .parse()
                        .ok()
                        .filter(|&b| b != 0);
                }
            }
            return None;
        }
    }
    None
}

#[test]
fn fuse_corrupt_block_gives_eio_for_its_file_only() {
    skip_unless!(fuse_available);
    let single = |f: &&Fixture| {
        f.devices().len() == 1
            && f.profile("data") == "single"
            && f.meta["mount"]
                .as_str()
                .is_some_and(|m| !m.contains("compress"))
    };
    let f = kernel_fixtures()
        .iter()
        .filter(single)
        .find(|f| f.name != "big")
        .expect("a single-copy fixture");
    let base = scratch_dir("fuse-corrupt");
    let image = f.copy_to(&base).devices()[0].clone();
    let manifest = records(&f.kernel_manifest());
    // A top-level file with data of its own: an extent no other file
    // (snapshot, reflink) refers to.
    let dump = Command::new("btrfs")
        .args(["inspect-internal", "dump-tree"])
        .arg(&image)
        .output()
        .unwrap();
    let dump = String::from_utf8_lossy(&dump.stdout).into_owned();
    let (target, bytenr) = manifest
        .iter()
        .filter(|(p, v)| {
            v["type"] == "file"
                && v["link"].is_null()
                && v["size"].as_u64().unwrap() >= 8192
                && !p.contains('%')
                && v["data"]
                    .as_array()
                    .is_some_and(|d| d.first().is_some_and(|r| r[0] == 0))
                && v["ino"].as_u64().is_some()
        })
        .filter_map(|(p, v)| {
            let b = first_data_extent(&image, v["ino"].as_u64().unwrap())?;
            let refs = dump.matches(&format!("extent data disk byte {b} ")).count();
            (refs == 1 && !p.starts_with("/snap") && !p.contains("/subv")).then(|| (p.clone(), b))
        })
        .next()
        .expect("no file with an extent of its own");
    let out = Command::new("btrfs-map-logical")
        .args(["-l", &bytenr.to_string()])
        .arg(&image)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let physical: u64 = text
        .lines()
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() >= 6 && w[0] == "mirror" && w[1] == "1").then(|| w[5].parse().unwrap())
        })
        .unwrap_or_else(|| panic!("btrfs-map-logical {bytenr}: {text}"));
    {
        use std::os::unix::fs::FileExt;
        let img = std::fs::OpenOptions::new()
            .write(true)
            .open(&image)
            .unwrap();
        img.write_all_at(b"ubtrfs-fuse-corruption-test", physical + 100)
            .unwrap();
    }
    eprintln!("{}: corrupted {target} (data at logical {bytenr})", f.name);

    let log = base.join("mount.log");
    let dir = base.join("mnt");
    let log_opt = format!("log={}", log.display());
    let m = FuseMount::new(&[image.display().to_string()], &[&log_opt], &dir, false);
    let err =
        std::fs::read(dir.join(&target[1..])).expect_err("reading the corrupted file succeeded");
    assert_eq!(
        err.raw_os_error(),
        Some(5),
        "{target}: expected EIO, got {err}"
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.lines()
            .any(|l| l.contains("error") && l.contains(&target)),
        "no log line names {target}:\n{text}"
    );
    // Everything else reads as the kernel read it.
    let mut checked = 0;
    for (p, v) in &manifest {
        if v["type"] != "file" || *p == target || p.contains('%') {
            continue;
        }
        let got = sha256_file(&dir.join(&p[1..]));
        assert_eq!(
            got,
            v["sha256"].as_str().unwrap(),
            "{p} after corrupting {target}"
        );
        checked += 1;
    }
    assert!(is_mounted(&dir), "the mount went away after the EIO");
    drop(m);
    eprintln!("{}: EIO for {target}, {checked} other files intact", f.name);
}

#[test]
fn fuse_is_read_only_and_exits_on_unmount() {
    skip_unless!(fuse_available);
    let f = kernel_fixture("zstd");
    let base = scratch_dir("fuse-lifecycle");
    let file = records(&f.kernel_manifest())
        .into_iter()
        .find(|(p, v)| v["type"] == "file" && !p.contains('%'))
        .map(|(p, _)| p[1..].to_string())
        .expect("a file in the fixture");
    // Foreground: the process exits 0 when fusermount3 -u unmounts.
    let dir = base.join("fg");
    let mut m = FuseMount::new(&f.image_args(None), &[], &dir, true);
    let erofs = |r: std::io::Result<()>, what: &str| {
        let e = r.expect_err(&format!("{what} succeeded on a read-only mount"));
        assert_eq!(
            e.raw_os_error(),
            Some(30),
            "{what}: expected EROFS, got {e}"
        );
    };
    erofs(
        std::fs::File::create(dir.join("new-file")).map(|_| ()),
        "create",
    );
    erofs(std::fs::create_dir(dir.join("new-dir")), "mkdir");
    erofs(std::fs::remove_file(dir.join(&file)), "unlink");
    erofs(
        std::fs::rename(dir.join(&file), dir.join("renamed")),
        "rename",
    );
    erofs(
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(&file))
            .map(|_| ()),
        "open for writing",
    );
    let out = Command::new("setfattr")
        .args(["-n", "user.x", "-v", "1"])
        .arg(dir.join(&file))
        .output();
    if let Ok(out) = out {
        assert!(
            !out.status.success(),
            "setfattr succeeded on a read-only mount"
        );
    }
    unmount_cmd(Command::new("fusermount3").arg("-u").arg(&dir))
        .unwrap_or_else(|e| panic!("fusermount3 -u: {e}"));
    let status = m.unmount().expect("foreground child");
    assert!(
        status.success(),
        "ubtrfs mount -f exited with {status} after fusermount3 -u"
    );

    // Background (the default): umount ends the daemon.
    let dir = base.join("bg");
    let mut m = FuseMount::of(f, &[], &dir);
    assert!(
        !processes_with(&dir.display().to_string()).is_empty(),
        "no daemon serving the mount"
    );
    unmount_cmd(Command::new("umount").arg(&dir)).unwrap_or_else(|e| panic!("umount: {e}"));
    m.unmount();
    assert!(
        processes_with(&dir.display().to_string()).is_empty(),
        "the daemon did not exit on umount"
    );

    // A signal unmounts too.
    let dir = base.join("sig");
    let mut m = FuseMount::new(&f.image_args(None), &[], &dir, true);
    let pid = m.child.as_ref().unwrap().id();
    run_ok(
        Command::new("kill").args(["-TERM", &pid.to_string()]),
        "kill -TERM",
    );
    wait_until("unmount on SIGTERM", Duration::from_secs(20), || {
        !is_mounted(&dir)
    });
    let status = m.unmount().expect("foreground child");
    assert!(
        status.success(),
        "ubtrfs mount -f exited with {status} on SIGTERM"
    );
}

#[test]
fn fuse_subvol_options_and_mount_helper() {
    skip_unless!(fuse_available);
    let f = kernel_fixture("zstd");
    let base = scratch_dir("fuse-subvol");
    let expected = sub_manifest(&f.kernel_manifest(), "/snap1");
    assert!(expected.len() > 3, "fixture has no /snap1 subvolume");
    let list = ubtrfs(&[
        "subvolume",
        "list",
        "--json",
        &f.devices()[0].display().to_string(),
    ]);
    let list: Value = serde_json::from_slice(&list.stdout).expect("subvolume list --json");
    let id = list
        .as_array()
        .or_else(|| list["subvolumes"].as_array())
        .and_then(|a| a.iter().find(|s| s["path"] == "snap1"))
        .and_then(|s| s["id"].as_u64())
        .expect("id of snap1");
    let subvolid = format!("subvolid={id}");
    for opts in [
        vec!["subvol=/snap1"],
        vec![subvolid.as_str()],
        vec!["subvol=snap1", subvolid.as_str()],
    ] {
        let dir = base.join("mnt");
        let m = FuseMount::of(f, &opts, &dir);
        let actual = manifest_of(&dir);
        drop(m);
        if let Err(d) = compare_manifests(&expected, &actual, &no_ino()) {
            panic!("-o {}: {d}", opts.join(","));
        }
    }
    // subvol and subvolid naming different subvolumes is an error.
    let out = Command::new(ubtrfs_bin())
        .args(["mount", "-o", "subvol=snap1,subvolid=5"])
        .arg(&f.devices()[0])
        .arg(base.join("mnt"))
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "conflicting subvol= and subvolid= accepted"
    );
    assert!(!is_mounted(&base.join("mnt")));

    // mount -t fuse.ubtrfs through the mount.fuse.ubtrfs helper (a
    // symlink to ubtrfs). Unless it already points to the binary under
    // test, ours is installed for the test and whatever was there (another
    // build's, or a dangling link: mount then falls back to mount.fuse,
    // which looks for `ubtrfs` in PATH) is put back after.
    let helper = Path::new("/sbin/mount.fuse.ubtrfs");
    let saved = Path::new("/sbin/mount.fuse.ubtrfs.saved-by-ubtrfs-test");
    struct Restore {
        helper: &'static Path,
        saved: Option<&'static Path>,
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(self.helper);
            if let Some(s) = self.saved {
                let _ = std::fs::rename(s, self.helper);
            }
        }
    }
    let _cleanup = if std::fs::read_link(helper).is_ok_and(|t| t == ubtrfs_bin()) {
        None
    } else {
        let had = helper.symlink_metadata().is_ok();
        if had {
            std::fs::rename(helper, saved).expect("move the installed helper aside");
        }
        let r = Restore {
            helper,
            saved: had.then_some(saved),
        };
        std::os::unix::fs::symlink(ubtrfs_bin(), helper).expect("install the helper symlink");
        Some(r)
    };
    let dir = base.join("helper");
    std::fs::create_dir_all(&dir).unwrap();
    run_ok(
        Command::new("mount")
            .args(["-t", "fuse.ubtrfs", "-o", "ro,subvol=snap1"])
            .arg(&f.devices()[0])
            .arg(&dir),
        "mount -t fuse.ubtrfs",
    );
    let mut m = FuseMount {
        dir: dir.clone(),
        child: None,
    };
    let actual = manifest_of(&dir);
    m.unmount();
    if let Err(d) = compare_manifests(&expected, &actual, &no_ino()) {
        panic!("mount -t fuse.ubtrfs: {d}");
    }
}

/// Every path of `dir` (not following symlinks), relative, sorted.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(dir.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            let r = rel.join(e.file_name());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(r.clone());
            }
            out.push(r);
        }
    }
    out.sort();
    out
}

/// Birth times (statx STATX_BTIME: btrfs's otime) through the mount equal
/// the kernel's for every path of a fixture. The kernel asks a FUSE
/// daemon for them with FUSE_STATX; without it statx reports none.
#[test]
fn fuse_birth_times_match_kernel() {
    let test = "fuse_birth_times_match_kernel";
    if !fuse_available(test) || !kernel_available(test) {
        return;
    }
    let f = kernel_fixture("zstd");
    let base = scratch_dir("fuse-btime");
    let k = Mount::fixture(f, &base.join("kernel"));
    let dir = base.join("fuse");
    let m = FuseMount::of(f, &[], &dir);
    let paths = walk(&k.dir);
    let mut bad = Vec::new();
    let mut with_birth = 0;
    for p in &paths {
        let born = |root: &Path| {
            std::fs::symlink_metadata(root.join(p))
                .and_then(|md| md.created())
                .map_err(|e| e.to_string())
        };
        let (want, got) = (born(&k.dir), born(&dir));
        // The kernel has none for the placeholder of a subvolume a
        // snapshot does not hold: neither must the mount.
        if want != got {
            bad.push(format!("{}: kernel {want:?}, mount {got:?}", p.display()));
        } else if want.is_ok() {
            with_birth += 1;
        }
    }
    drop(m);
    k.unmount();
    assert!(
        paths.len() > 10,
        "only {} paths in the fixture",
        paths.len()
    );
    bad.truncate(10);
    assert!(bad.is_empty(), "{test}:\n  {}", bad.join("\n  "));
    eprintln!(
        "{test}: {} paths ({with_birth} with a birth time): equal",
        paths.len()
    );
}
