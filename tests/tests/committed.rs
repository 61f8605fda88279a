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
        let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let out = ubtrfs(&a);
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
            let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
            let _ = ubtrfs(&a);
        }
        let after: Vec<String> = f.devices().iter().map(|d| sha256_file(d)).collect();
        assert_eq!(before, after, "{}: image changed by reading it", f.name);
    }
}
