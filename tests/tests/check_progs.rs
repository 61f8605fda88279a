//! `ubtrfs check` against btrfs-progs' own fsck tests: a sample of their
//! fixtures and fuzz images (bench/fsck/sample.txt), through
//! bench/fsck_tests.sh, which restores them from the pinned tarball and
//! judges each by what its test directory expects of `btrfs check`
//! (bench/fsck/expect.tsv): reports errors where progs' test wants check
//! to fail, passes where it wants a pass, and never crashes or hangs on a
//! fuzz image. `bash bench/fsck_tests.sh` runs every fixture.

use std::process::Command;
use ubtrfs_oracle::*;

#[test]
fn progs_fsck_tests_sample() {
    if !btrfs_progs_available("check_progs") {
        return;
    }
    let work = scratch_dir("check-progs");
    let out = Command::new("bash")
        .arg(repo_root().join("bench/fsck_tests.sh"))
        .arg("--sample")
        .env("UBTRFS_BIN", ubtrfs_bin())
        .env("WORK", &work)
        .output()
        .expect("run bench/fsck_tests.sh");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "bench/fsck_tests.sh --sample: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The sample ran: every line of it has a row.
    let sample = std::fs::read_to_string(repo_root().join("bench/fsck/sample.txt")).unwrap();
    for name in sample
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let row = name.trim_start_matches("fuzz:");
        assert!(
            text.contains(&format!("| {row}")),
            "no result for {name}:\n{text}"
        );
    }
    // The sample's repairs that work stay working: names made (004's
    // missing DIR_INDEX on an image without skinny metadata, 026's
    // misplaced DIR_ITEM), a leaf's item data put back in place and the
    // index it lost made again (005), outdated root items pointed at their
    // newer root (006), a leaf that does not read taken out and the
    // inodes its loss leaves nameless made again (012), modes and
    // lost+found (039), an extent item made again (027), counters (016,
    // 047, 050), free-space entries of no block group removed, mkfs.btrfs's
    // leftovers below every block group too (058).
    for dir in [
        "004-no-dir-index",
        "005-bad-item-offset",
        "006-bad-root-items",
        "012-leaf-corruption",
        "016-wrong-inode-nbytes",
        "026-bad-dir-item-name",
        "027-bad-extent-inline-ref-type",
        "039-bad-inode-mode",
        "047-dev-bytes-used",
        "050-invalid-block-group-used",
        "058-bad-free-space-tree-entry",
    ] {
        for row in text
            .lines()
            .filter(|l| l.starts_with(&format!("| {dir} |")))
        {
            assert!(
                row.contains("repaired, btrfs check clean, kernel reads it"),
                "{dir}: the repair no longer works: {row}"
            );
        }
    }
}
