//! `ubtrfs check` against `btrfs check` on damage neither finds by a
//! checksum: a kernel-made image (files, hard links, symlinks, xattrs,
//! reflinks, a subvolume and snapshots, a compressed directory, quota
//! groups, one of them above two subvolumes) gets one
//! seeded change per case (tests/src/corrupt.rs: a field of an inode, an
//! extent or block group item, a dropped item, a flipped bit, a file
//! pointed at another's extent, a data reference count, a device's
//! bytes_used, a quota group's count), its block's checksum recomputed. Every case btrfs check
//! flags, ubtrfs check must flag; it may flag more. The clean image passes
//! both. Seeds per kind: UBTRFS_CORRUPT_SEEDS (CI: 2;
//! bench/check_corrupt.sh runs more). `check --repair` is also killed
//! (SIGKILL) at seeded moments of its writing: UBTRFS_CRASH_KILLS kills
//! (CI: 8).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use ubtrfs_oracle::corrupt::{corrupt, KINDS};
use ubtrfs_oracle::mkfs_support::crash_kills;
use ubtrfs_oracle::*;

fn sh(dir: &Path, script: &str) {
    let out = Command::new("bash")
        .args(["-euc", script])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The base image: made and filled by the kernel.
fn base_image(dir: &Path, features: &str) -> PathBuf {
    let image = dir.join(format!("base{features}.img"));
    std::fs::File::create(&image)
        .unwrap()
        .set_len(256 << 20)
        .unwrap();
    let mut mkfs = Command::new("mkfs.btrfs");
    mkfs.args(["-q", "-f"]);
    if !features.is_empty() {
        mkfs.args(["-O", features]);
    }
    assert!(mkfs.arg(&image).status().unwrap().success());
    let m = Mount::images(std::slice::from_ref(&image), "", false);
    sh(
        &m.dir,
        r#"
        btrfs quota enable .
        mkdir -p d/e/f z
        for i in $(seq 1 40); do head -c $((i * 3001)) /dev/urandom > d/file$i; done
        for i in $(seq 1 30); do echo small $i > d/e/s$i; done
        head -c 300000 /dev/urandom > d/e/f/big
        ln d/file1 d/hard1; ln d/file1 d/e/hard2
        ln -s ../file2 d/e/link
        setfattr -n user.a -v 1 d/file3; setfattr -n user.b -v "$(head -c 200 /dev/zero | tr '\0' x)" d/e
        cp --reflink=always d/file40 d/reflink40
        truncate -s 1M d/sparse; dd if=/dev/urandom of=d/sparse bs=4k count=2 seek=100 conv=notrunc status=none
        chattr +c z; for i in $(seq 1 10); do yes zzz | head -c 50000 > z/c$i; done
        btrfs -q subvolume create sv
        cp -a d sv/
        btrfs -q subvolume snapshot sv snap1
        btrfs -q subvolume snapshot -r . topsnap
        echo changed >> sv/d/file5; rm sv/d/file6
        btrfs qgroup create 1/100 .
        btrfs qgroup assign --no-rescan 0/256 1/100 .
        btrfs qgroup assign --no-rescan 0/257 1/100 .
        btrfs quota rescan -w . >/dev/null
        sync
        "#,
    );
    m.unmount();
    image
}

/// A sparse copy of image `from` at `to`.
fn copy(from: &Path, to: &Path) {
    let ok = Command::new("cp")
        .arg("--sparse=always")
        .arg(from)
        .arg(to)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cp {} {}", from.display(), to.display());
}

fn run(cmd: &mut Command) -> (i32, String) {
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn check_flags_what_btrfs_check_flags() {
    skip_unless!(kernel_available);
    let seeds = env_u64("UBTRFS_CORRUPT_SEEDS").unwrap_or(2);
    let dir = scratch_dir("check-corrupt");
    let mut table = Vec::new();
    let mut failures = Vec::new();
    let (mut flagged_progs, mut flagged_both, mut more) = (0, 0, 0);
    for features in ["", "^no-holes"] {
        let base = base_image(&dir, features);
        btrfs_check(&base, &["--check-data-csum"]).unwrap_or_else(|e| panic!("clean image: {e}"));
        for kind in KINDS {
            for seed in 0..seeds {
                let img = dir.join("case.img");
                copy(&base, &img);
                let Some(what) = corrupt(&img, kind, seed) else {
                    continue;
                };
                let (prc, _) = run(Command::new("btrfs")
                    .args(["check", "--readonly"])
                    .arg(&img));
                let (urc, text) = run(Command::new(ubtrfs_bin()).arg("check").arg(&img));
                let first = text
                    .lines()
                    .find(|l| l.starts_with("ERROR") || l.starts_with("ubtrfs: error"))
                    .unwrap_or("")
                    .to_string();
                if urc != 0 && urc != 1 {
                    failures.push(format!(
                        "{kind} seed {seed} ({what}): ubtrfs check exit {urc}:\n{text}"
                    ));
                }
                if prc != 0 {
                    flagged_progs += 1;
                    if urc == 1 {
                        flagged_both += 1;
                    } else {
                        failures.push(format!("{kind} seed {seed} ({what}): btrfs check flags it, ubtrfs check does not"));
                    }
                } else if urc == 1 {
                    more += 1;
                }
                table.push(format!(
                    "{features:10} {kind:16} {seed:3}  progs {prc}  ubtrfs {urc}  {what}  | {first}"
                ));
            }
        }
    }
    eprintln!("{}", table.join("\n"));
    eprintln!(
        "btrfs check flagged {flagged_progs} cases, ubtrfs check {flagged_both} of them; \
         ubtrfs check flagged {more} more"
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The files and their content as the kernel shows them (a read-only
/// mount): every path with its type, size and sha256.
fn kernel_listing(image: &Path) -> String {
    let m = Mount::images(&[image.to_path_buf()], "", true);
    let out = Command::new("bash")
        .args([
            "-c",
            "find . -printf '%p %y %s %n\\n' | sort; find . -type f -print0 | sort -z | xargs -0 sha256sum",
        ])
        .current_dir(&m.dir)
        .output()
        .unwrap();
    m.unmount();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split(' ')
        .next()
        .unwrap()
        .to_string()
}

/// The corruptor's kinds of damage to a counter, which the repair always
/// mends.
const COUNTERS: [&str; 8] = [
    "nlink",
    "dir-isize",
    "nbytes",
    "bg-used",
    "dev-bytes-used",
    "extent-refs",
    "data-ref",
    "qgroup-rfer",
];

/// `ubtrfs check --repair` mends the counters the corruptor breaks (an
/// inode's nlink, size or nbytes, a block group's or a device's usage, an
/// extent item's refs, a data back reference's count; a quota group's
/// count is marked inconsistent for a rescan, as the kernel marks it):
/// then btrfs check and ubtrfs check pass, the kernel shows every file as
/// before the damage, writes on top, and both checks pass again. Dropped
/// names and inode items are made again; damage it cannot repair yet (a
/// file extent dropped, an extent duplicated) is named and the image is
/// left byte for byte as it was.
#[test]
fn repair_mends_counters_and_refuses_the_rest() {
    skip_unless!(kernel_available);
    let dir = scratch_dir("check-repair");
    let base = base_image(&dir, "");
    let before = kernel_listing(&base);
    for kind in COUNTERS {
        for seed in 0..2 {
            let img = dir.join("case.img");
            copy(&base, &img);
            let what = corrupt(&img, kind, seed).unwrap();
            let (rc, text) = run(Command::new(ubtrfs_bin())
                .args(["check", "--repair"])
                .arg(&img));
            assert_eq!(rc, 0, "{what}: repair:\n{text}");
            assert!(text.contains("repaired"), "{what}: {text}");
            judge_repaired(&img, &what, Some(&before));
        }
    }
    // A dropped item: of an fs tree, names and inode items are made
    // again from what agrees on them (the kernel's view the same when only
    // a name item went; a made inode item has new times and mode bits, so
    // only both checks and a kernel write on top are asked of it); of the
    // extent tree, extent items from the references found (the kernel's
    // view the same). What it cannot make (a file extent, a block group
    // item) is refused, writing nothing.
    for kind in ["drop-fs-item", "drop-extent-item"] {
        let mut made = 0;
        for seed in 0..4 {
            let img = dir.join("case.img");
            copy(&base, &img);
            let what = corrupt(&img, kind, seed).unwrap();
            let hash = sha256(&img);
            let (rc, text) = run(Command::new(ubtrfs_bin())
                .args(["check", "--repair"])
                .arg(&img));
            if rc == 1 {
                assert_refused(&what, &text, &img, &hash);
                eprintln!("{what}: refused");
                continue;
            }
            assert_eq!(rc, 0, "{what}: repair:\n{text}");
            made += 1;
            let same_view = kind == "drop-extent-item"
                || ["DIR_ITEM", "DIR_INDEX", "INODE_REF"]
                    .iter()
                    .any(|t| what.contains(&format!(" {t} ")));
            judge_repaired(&img, &what, same_view.then_some(before.as_str()));
        }
        assert!(made > 0, "{kind}: no dropped item was repaired");
    }
    let img = dir.join("case.img");
    copy(&base, &img);
    let what = corrupt(&img, "dup-extent", 0).unwrap();
    let hash = sha256(&img);
    let (rc, text) = run(Command::new(ubtrfs_bin())
        .args(["check", "--repair"])
        .arg(&img));
    assert_eq!(rc, 1, "{what}: {text}");
    assert_refused(&what, &text, &img, &hash);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A repaired image: btrfs check passes, the kernel shows what it showed
/// before the damage (`before`, when the repair keeps it), writes on top
/// (a new file, a copy of an old one), and btrfs check passes again.
fn judge_repaired(img: &Path, what: &str, before: Option<&str>) {
    btrfs_check(img, &[]).unwrap_or_else(|e| panic!("{what}: after repair: {e}"));
    if let Some(before) = before {
        assert_eq!(
            kernel_listing(img),
            before,
            "{what}: the kernel's view changed"
        );
    }
    let m = Mount::images(&[img.to_path_buf()], "", false);
    sh(
        &m.dir,
        "echo after > d/after; cp d/file7 d/file7.copy; sync",
    );
    m.unmount();
    btrfs_check(img, &[]).unwrap_or_else(|e| panic!("{what}: after the kernel wrote: {e}"));
    eprintln!("{what}: repaired");
}

/// A repair that refused: it names what it cannot repair, and the image
/// is byte for byte as it was (`hash`).
fn assert_refused(what: &str, text: &str, img: &Path, hash: &str) {
    assert!(
        text.contains("cannot repair") && text.contains("nothing was written"),
        "{what}: {text}"
    );
    assert_eq!(
        sha256(img),
        hash,
        "{what}: a refused repair changed the image"
    );
}

/// The problem lines of `ubtrfs check` on `img` (its exit code first):
/// what a killed repair must leave either as it was or gone.
fn problems(img: &Path) -> (i32, Vec<String>) {
    let (rc, text) = run(Command::new(ubtrfs_bin()).arg("check").arg(img));
    let lines = text
        .lines()
        .filter(|l| l.starts_with("ERROR") || l.starts_with("WARNING"))
        .map(str::to_string)
        .collect();
    (rc, lines)
}

/// Runs `ubtrfs check --repair` on `img` until the first check's report
/// has ended (its "found ... bytes used" line), then `after` it: SIGKILL
/// (`after` None: to its end). Returns how long the repair's writing
/// took from that line to its "repaired" line, when it got there.
fn repair_killed(img: &Path, after: Option<Duration>) -> Option<Duration> {
    let mut child = Command::new(ubtrfs_bin())
        .args(["check", "--repair"])
        .arg(img)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for l in lines.by_ref() {
        if l.unwrap().starts_with("found ") {
            break;
        }
    }
    let t0 = Instant::now();
    if let Some(after) = after {
        std::thread::sleep(after);
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        return None;
    }
    let took = lines
        .map_while(Result::ok)
        .find(|l| l.starts_with("repaired "))
        .map(|_| t0.elapsed());
    child.wait().unwrap();
    took
}

/// A repair killed (SIGKILL) at a seeded moment of its writing leaves the
/// image as it was (the same problems, btrfs check failing) or repaired
/// (both checks clean), never between; the repair run again then finishes
/// it. The repair is one transaction whose superblock is written last.
#[test]
fn killed_repair_leaves_it_as_it_was_or_repaired() {
    skip_unless!(kernel_available);
    let dir = scratch_dir("check-repair-kill");
    let base = base_image(&dir, "");
    let kinds = COUNTERS;
    let mut rng = Rng::new(0xc4ec_4e9a);
    let (mut as_it_was, mut repaired) = (0, 0);
    for i in 0..crash_kills() {
        let (kind, seed) = (kinds[i as usize % kinds.len()], i / kinds.len() as u64);
        let img = dir.join("case.img");
        copy(&base, &img);
        let what = corrupt(&img, kind, seed).unwrap();
        let (rc, before) = problems(&img);
        assert_eq!(rc, 1, "{what}: not flagged");
        // The length of the writing, from a whole run on a copy.
        let whole = dir.join("whole.img");
        copy(&img, &whole);
        let window = repair_killed(&whole, None)
            .unwrap_or_else(|| panic!("{what}: the whole repair did not repair"));
        let delay = Duration::from_micros(rng.below(window.as_micros() as u64 * 5 / 4 + 1));
        repair_killed(&img, Some(delay));
        let what = format!("{what}, killed {delay:?} into a {window:?} repair");
        let (rc, after) = problems(&img);
        if rc == 0 {
            btrfs_check(&img, &[]).unwrap_or_else(|e| panic!("{what}: repaired: {e}"));
            repaired += 1;
        } else {
            assert_eq!(after, before, "{what}: neither as it was nor repaired");
            let (prc, _) = run(Command::new("btrfs")
                .args(["check", "--readonly"])
                .arg(&img));
            assert_ne!(prc, 0, "{what}: btrfs check passes but ubtrfs check fails");
            as_it_was += 1;
            let (rc, text) = run(Command::new(ubtrfs_bin())
                .args(["check", "--repair"])
                .arg(&img));
            assert_eq!(rc, 0, "{what}: the repair run again:\n{text}");
            btrfs_check(&img, &[]).unwrap_or_else(|e| panic!("{what}: repaired again: {e}"));
        }
    }
    eprintln!(
        "check --repair: {} kills: {as_it_was} left it as it was, {repaired} repaired",
        crash_kills()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
