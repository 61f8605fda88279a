//! The kernel's own suites on the mount: (e) pjdfstest, (f) fsx.

use super::*;

// ------------------------------------------------------------------ (e)

/// Cases the kernel's btrfs fails with tests/oracle/pjdfstest.toml:
/// directories keep one link on btrfs, so rename::updates_link_parent
/// (the parent's link count after moving a directory in) fails.
const KERNEL_PJDFSTEST_FAILURES: &[&str] = &["rename::updates_link_parent"];

/// pjdfstest on `w`'s mount of a fresh image, in a directory every user
/// can reach (under /tmp, mode 755). ubtrfs mounts with allow_other:
/// pjdfstest runs cases as nobody and tests. Returns the result and, for
/// ubtrfs, the daemon's error and warning lines (its log goes with the
/// mount's directory).
pub(super) fn pjdfstest_on(
    w: Writer,
    bin: &Path,
    tmp: &Path,
    patterns: &[&str],
) -> Result<(PjdResult, String), String> {
    // Removed on return (after the mount, declared later, is dropped).
    let top = Workdir(tempdir("ubtrfs-pjd"));
    std::fs::set_permissions(&*top, std::fs::Permissions::from_mode(0o755)).unwrap();
    let image = tmp.join(format!("{}.img", w.name()));
    mkfs_image(&image, &image_size())?;
    let mnt = top.join("mnt");
    let extra = if w == Writer::Ubtrfs {
        "allow_other"
    } else {
        ""
    };
    let m = RwMount::start(w, &image, &mnt, extra)?;
    let dir = mnt.join("pjd");
    std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let secondary = top.join("secondary");
    std::fs::create_dir(&secondary).unwrap();
    let r = run_pjdfstest(bin, &dir, &secondary, tmp, patterns);
    let log = match &m {
        RwMount::Ubtrfs(u) => u.log.clone(),
        RwMount::Kernel(_) => PathBuf::new(),
    };
    let fin = m.finish();
    let notes: String = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("error") || l.contains("warn"))
        .take(40)
        .map(|l| format!("{l}\n"))
        .collect();
    let r = r?;
    fin.map_err(|e| format!("unmount after pjdfstest: {e}"))?;
    check(
        &image,
        &format!("after pjdfstest on the {} mount", w.name()),
    )?;
    let _ = std::fs::remove_file(&image);
    Ok((r, notes))
}

/// For `test` through `w`'s mount (None when that mount, pjdfstest or
/// its users are missing here): pjdfstest, a scratch directory, and the
/// results on the kernel's mount (the reference), printed.
pub(super) fn pjdfstest_on_kernel(test: &str, w: Writer) -> Option<(PathBuf, Workdir, PjdResult)> {
    if !ready(test, w) || !user_available(test, "tests") || !user_available(test, "nobody") {
        return None;
    }
    let bin = cargo_tool(test, "pjdfstest")?;
    let tmp = Workdir::new(&format!("rw-pjd-{}", w.name()));
    let (r, _) = pjdfstest_on(Writer::Kernel, &bin, &tmp, &[]).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{test}: kernel: {} ({:.1?})", r.counts(), r.elapsed);
    Some((bin, tmp, r))
}

#[test]
pub(super) fn pjdfstest_reference_on_kernel() {
    let test = "pjdfstest_reference_on_kernel";
    let Some((_, _, r)) = pjdfstest_on_kernel(test, Writer::Kernel) else {
        return;
    };
    let failed = r.with(PjdStatus::Failed);
    let unknown: Vec<&&str> = failed
        .iter()
        .filter(|n| !KERNEL_PJDFSTEST_FAILURES.contains(n))
        .collect();
    assert!(
        unknown.is_empty(),
        "{test}: the kernel's btrfs fails cases it did not: {unknown:?} ({})",
        r.counts()
    );
    assert!(
        r.passed >= 300,
        "{test}: only {} cases passed: is the configuration read? ({})",
        r.passed,
        r.counts()
    );
}

#[test]
pub(super) fn pjdfstest_on_ubtrfs_mount() {
    let test = "pjdfstest_on_ubtrfs_mount";
    let Some((bin, tmp, kernel)) = pjdfstest_on_kernel(test, Writer::Ubtrfs) else {
        return;
    };
    let (ours, notes) =
        pjdfstest_on(Writer::Ubtrfs, &bin, &tmp, &[]).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{test}: ubtrfs: {} ({:.1?})", ours.counts(), ours.elapsed);
    let worse = ours.regressions_from(&kernel);
    assert!(
        worse.is_empty() && ours.passed >= kernel.passed,
        "{test}: {} cases pass on the kernel's mount and not on ubtrfs's (kernel: {}; ubtrfs: {}):\n  {}\nthe daemon's errors and warnings:\n{notes}",
        worse.len(),
        kernel.counts(),
        ours.counts(),
        worse.join("\n  ")
    );
}

#[test]
pub(super) fn pjdfstest_output_parses() {
    let out = "\
unlink::remove_type::fifo                                                     ok
rename::updates_link_parent                                               FAILED
\tassertion `left == right` failed
  left: 1
 right: 3
Backtrace:
   0: std::backtrace::Backtrace::create
rename::exdev_target                                                     skipped
\trequires features: secondary_fs
utimensat::y2038                                             failed as expected
chmod::eperm                                                 PASSED UNEXPECTEDLY

Summary: 2 failed, 1 skipped, 1 passed, 1 expected failures, 5 total
";
    let r = parse_pjdfstest(out).unwrap();
    assert_eq!(
        (r.passed, r.failed, r.skipped, r.expected_failures, r.total),
        (1, 2, 1, 1, 5)
    );
    assert_eq!(
        r.with(PjdStatus::Failed),
        vec!["rename::updates_link_parent"]
    );
    assert_eq!(r.with(PjdStatus::UnexpectedPass), vec!["chmod::eperm"]);
    assert!(r.messages["rename::updates_link_parent"].contains("left == right"));
    // A summary that does not match the cases is an error, as is none.
    let bad = out.replace("1 passed", "2 passed");
    assert!(parse_pjdfstest(&bad).is_err());
    assert!(parse_pjdfstest("chmod::eperm ok\n").is_err());
    // Colours are stripped.
    let coloured = "\u{1b}[34mchmod::x\u{1b}[0m \u{1b}[32mok\u{1b}[0m\n\
                    Summary: 0 failed, 0 skipped, 1 passed, 0 expected failures, 1 total\n";
    assert_eq!(
        parse_pjdfstest(coloured).unwrap().with(PjdStatus::Passed),
        vec!["chmod::x"]
    );
    // Regressions: passes on the reference, not here.
    let mut reference = PjdResult::default();
    reference.cases.insert("a::b".into(), PjdStatus::Passed);
    reference.cases.insert("a::c".into(), PjdStatus::Failed);
    let mut ours = PjdResult::default();
    ours.cases.insert("a::b".into(), PjdStatus::Failed);
    ours.cases.insert("a::c".into(), PjdStatus::Passed);
    assert_eq!(
        ours.regressions_from(&reference),
        vec!["a::b (Some(Failed))"]
    );
}

#[test]
pub(super) fn rw_manifests_are_masked() {
    let rec = |path: &str, ino: u64, mtime: u64, sha: &str| {
        format!(
            r#"{{"path":"{path}","type":"file","ino":{ino},"mode":420,"uid":0,"gid":0,"size":1,"rdev":0,"mtime_ns":{mtime},"target":null,"xattrs":{{}},"link":null,"sha256":"{sha}","data":[[0,1]]}}"#
        )
    };
    let a = vec![rec("/t/x", 1, 5, "a"), rec("/t/y", 2, 5, "a")];
    let explicit = vec!["/x".to_string()];
    let same = vec![rec("/t/x", 9, 5, "a"), rec("/t/y", 8, 6, "a")];
    assert_eq!(compare_rw_manifests(&a, &same, &explicit, "/t"), Ok(2));
    let mtime = vec![rec("/t/x", 1, 6, "a"), rec("/t/y", 2, 5, "a")];
    assert!(compare_rw_manifests(&a, &mtime, &explicit, "/t").is_err());
    let content = vec![rec("/t/x", 1, 5, "a"), rec("/t/y", 2, 5, "b")];
    assert!(compare_rw_manifests(&a, &content, &explicit, "/t").is_err());
}

// ------------------------------------------------------------------ (f)

pub(super) fn fsx_on(w: Writer, bin: &Path, base: &Path) -> Result<String, String> {
    let dir = base.join(w.name());
    let (image, mnt) = fresh_image(&dir, &image_size())?;
    let m = RwMount::start_env(w, &image, &mnt, "", SMALL_DIRTY_LIMIT)?;
    let n = env_u64("UBTRFS_FSX_OPS").unwrap_or(5000);
    let mut notes = Vec::new();
    for seed in rw_seeds() {
        let r = run_fsx(
            bin,
            &mnt.join(format!("fsx-{seed}")),
            seed,
            n,
            &dir.join(format!("fsx-artifacts-{seed}")),
            &dir,
        );
        if !r.ok {
            let _ = m.finish();
            return Err(format!(
                "fsx -S {seed} -N {n} on the {} mount: exit {:?}; output ends: {}",
                w.name(),
                r.code,
                tail(&r.output, 3000)
            ));
        }
        notes.push(format!("seed {seed}: {n} ops in {:.1?}", r.elapsed));
    }
    m.finish().map_err(|e| format!("unmount: {e}"))?;
    check(&image, &format!("after fsx on the {} mount", w.name()))?;
    let k = kernel_ro(&image, &mnt);
    let lines = manifest_of(&mnt);
    drop(k);
    if lines.len() != rw_seeds().len() + 1 {
        return Err(format!("the kernel sees {} paths after fsx", lines.len()));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(notes.join(", "))
}

/// (f) through `w`'s mount, when fsx is here.
pub(super) fn fsx_test(test: &str, w: Writer) {
    if !ready(test, w) {
        return;
    }
    let Some(bin) = cargo_tool(test, "fsx") else {
        return;
    };
    let base = Workdir::new(&format!("rw-fsx-{}", w.name()));
    let r = fsx_on(w, &bin, &base).unwrap_or_else(|e| panic!("{test}: {e}"));
    eprintln!("{test}: {r}");
}

#[test]
pub(super) fn fsx_reference_on_kernel() {
    fsx_test("fsx_reference_on_kernel", Writer::Kernel);
}

#[test]
pub(super) fn fsx_on_ubtrfs_mount() {
    fsx_test("fsx_on_ubtrfs_mount", Writer::Ubtrfs);
}
