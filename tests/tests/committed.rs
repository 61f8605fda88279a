//! The committed kernel-made fixtures (no root needed): ubtrfs must show
//! exactly what the kernel showed when the images were made.

use ubtrfs_oracle::*;

#[test]
fn committed_fixtures_match_kernel_manifests() {
    let fixtures = committed_fixtures();
    assert!(!fixtures.is_empty(), "no committed fixtures found");
    let mut failures = Vec::new();
    for f in fixtures {
        match f.ubtrfs_manifest(None) {
            Ok(actual) => {
                match compare_manifests(&f.kernel_manifest(), &actual, &Ignore::default()) {
                    Ok(n) => eprintln!("{}: {n} paths match the kernel", f.name),
                    Err(d) => failures.push(format!("{}: {d}", f.name)),
                }
            }
            Err(e) => failures.push(format!("{}: {e}", f.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn committed_raid1_reads_with_a_device_missing() {
    for f in committed_fixtures()
        .iter()
        .filter(|f| f.devices().len() > 1)
    {
        for skip in 0..f.devices().len() {
            let actual = f
                .ubtrfs_manifest(Some(skip))
                .unwrap_or_else(|e| panic!("{} without device {skip}: {e}", f.name));
            if let Err(d) = compare_manifests(&f.kernel_manifest(), &actual, &Ignore::default()) {
                panic!("{} without device {skip}: {d}", f.name);
            }
        }
    }
}

#[test]
fn committed_fixtures_scrub_clean() {
    for f in committed_fixtures() {
        let mut args = vec!["scrub".to_string()];
        args.extend(f.image_args(None));
        let out = ubtrfs(&args);
        assert!(
            out.status.success(),
            "{}: scrub of a clean image failed: {}{}",
            f.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn opening_never_changes_the_image() {
    for f in committed_fixtures() {
        let before: Vec<String> = f.devices().iter().map(|d| sha256_file(d)).collect();
        for cmd in [
            vec!["inspect", "manifest"],
            vec!["scrub"],
            vec!["inspect", "dump-tree"],
            vec!["subvolume", "list"],
        ] {
            let mut args: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
            args.extend(f.image_args(None));
            let _ = ubtrfs(&args);
        }
        let after: Vec<String> = f.devices().iter().map(|d| sha256_file(d)).collect();
        assert_eq!(before, after, "{}: image changed by reading it", f.name);
    }
}

#[test]
fn unknown_incompat_flags_are_refused_clearly() {
    use std::os::unix::fs::FileExt;
    let dir = Workdir::new("incompat");
    let img = committed_fixture_copy("small-crc32c", &dir).devices()[0].clone();
    // Set bit 13 (extent-tree-v2) in every superblock copy present and
    // re-checksum, as a newer kernel would have written it.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&img)
        .unwrap();
    let size = file.metadata().unwrap().len();
    for off in [0x1_0000u64, 0x400_0000, 0x40_0000_0000] {
        if off + 4096 > size {
            continue;
        }
        let mut sb = vec![0u8; 4096];
        file.read_exact_at(&mut sb, off).unwrap();
        if &sb[0x40..0x48] != b"_BHRfS_M" {
            continue;
        }
        let flags = u64::from_le_bytes(sb[0xbc..0xc4].try_into().unwrap()) | 1 << 13;
        sb[0xbc..0xc4].copy_from_slice(&flags.to_le_bytes());
        let csum = ubtrfs_format::CsumType::Crc32c.compute(&sb[0x20..]);
        sb[..32].copy_from_slice(&csum);
        file.write_all_at(&sb, off).unwrap();
    }
    let out = ubtrfs(&["ls", img.to_str().unwrap(), "/"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("extent_tree_v2") && err.contains("not supported"),
        "unclear refusal: {err}"
    );
}

#[test]
fn bad_primary_superblock_falls_back_to_a_mirror_and_scrub_reports_it() {
    use std::os::unix::fs::FileExt;
    let dir = Workdir::new("badsuper");
    let f = committed_fixture_copy("small-crc32c", &dir);
    let img = f.devices()[0].clone();
    let file = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    file.write_all_at(b"garbage in the primary superblock", 0x1_0000 + 0x100)
        .unwrap();
    let out = ubtrfs(&["inspect", "manifest", img.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let actual: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    compare_manifests(&f.kernel_manifest(), &actual, &Ignore::default()).unwrap();
    let out = ubtrfs(&["scrub", img.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "scrub missed the bad superblock: {text}"
    );
    assert!(text.contains("superblock copy at 65536"), "{text}");
}
