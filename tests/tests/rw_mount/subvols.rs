//! (p) Subvolumes on a live mount: one script, run with btrfs-progs on the
//! kernel's mount and with `ubtrfs subvolume` on ubtrfs's mount (the
//! daemon carries each request out through btrfs's ioctls), answers
//! equal step for step; then the kernel mounts each image (its default
//! subvolume, set by the script) and lists the same subvolumes (ids,
//! parents, paths, read-only flags) holding the same files; `btrfs check`
//! clean.

use super::*;

/// The steps, run with the mount as the working directory and `SV` the
/// subvolume command; one line per step ("ok: STEP" / "fail: STEP"), and
/// what stat shows.
const SUBVOL_STEPS: &str = r#"
r() { if "$@" >/dev/null 2>&1; then echo "ok: $*"; else echo "fail: $*"; fi; }
sv() { $SV "$@"; }
mkdir -p d && echo top > d/f && seq 100000 > d/big
r sv create a
r sv create a
r sv create d/b
echo x > a/x
# A snapshot holds every write that returned before it (dirty data).
seq 200000 300000 > d/late
r sv snapshot . snap
r cmp snap/d/late d/late
r cmp snap/d/big d/big
r test -d snap/a
r rmdir snap/a
r sv snapshot -r a ro
r sv snapshot ro snapofro
r sv snapshot -r snap snapro
r sv snapshot a d
r cat ro/x
r touch ro/y
r touch snapofro/y
r touch snapro/d/y
# The ro property both ways, as btrfs-progs' property set.
prop() { $PROP "$@"; }
prop get -ts ro ro
r prop set -ts ro ro false
r touch ro/y2
r prop set -ts ro ro true
r touch ro/y3
prop get -ts ro ro
stat -c '%n %a %U %G %F' a ro snap d/b
# show, as btrfs subvolume show prints it; UUIDs, times and generations
# are the image's own.
show() {
  sv show "$@" | sed -E 's/[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}/UUID/; s/[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} [+-][0-9]{4}/TIME/; s/^(.Gen[a-z ]*:).*/\1 G/'
}
show a; show ro; show -r 5 .; show -r 261 d; show snapro
(umask 027; sv create m027 >/dev/null 2>&1); stat -c '%n %a' m027
# A deleted subvolume's open file reads on until it is closed.
echo inside > d/b/in
exec 3<d/b/in
r sv delete d/b
r test -e d/b
cat <&3
exec 3<&-
r sv create e
r rmdir e
r sv create e2
touch e2/z
r rmdir e2
r sv create n
r sv create n/inner
r sv delete n
r sv delete n/inner
r sv delete n
r sv delete d
r sv delete nothere
r setpriv --reuid=tests --regid=tests --clear-groups sh -c "\$SV delete snapofro"
r sv delete snapofro
ls -a | sort | tr '\n' ' '; echo
sv list . | awk '{print "listed:", $2, $7, $NF}'
sv list d | awk '{print "listed from d:", $2, $7, $NF}'
# Without CAP_SYS_ADMIN, through the ioctls libbtrfsutil uses
# (GET_SUBVOL_ROOTREF, INO_LOOKUP_USER, GET_SUBVOL_INFO): ubtrfs's client
# on both mounts.
setpriv --reuid=tests --regid=tests --clear-groups $UB subvolume list . | awk '{print "listed by tests:", $2, $7, $NF}'
setpriv --reuid=tests --regid=tests --clear-groups $UB subvolume show snap | sed -E 's/[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}/UUID/; s/[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} [+-][0-9]{4}/TIME/; s/^(.Gen[a-z ]*:).*/\1 G/'
# The default subvolume: kept from deletion, and what the kernel mounts.
r sv set-default snapro
sv get-default . | awk '{print "default:", $2, $NF}'
r sv delete snapro
r sv set-default 5 .
sv get-default . | awk '{print "default:", $2, $NF}'
r sv set-default snapro
sync
"#;

/// What the kernel shows of the image after (p): the subvolumes (id,
/// parent, path, ro) and every file (path, type, size, mode, content).
fn kernel_view(image: &Path, mnt: &Path) -> Result<String, String> {
    // What a mount without options shows: the default subvolume.
    let k = RwMount::start(Writer::Kernel, image, mnt, "")?;
    let default = run(Command::new("sh")
        .args([
            "-c",
            "find . -printf 'default mount: %P %y %s %m\\n' | sort",
        ])
        .current_dir(mnt));
    let fin = k.finish();
    let default = default.map_err(|e| format!("the kernel's default mount: {e}"))?;
    fin.map_err(|e| format!("kernel unmount: {e}"))?;
    let k = RwMount::start(Writer::Kernel, image, mnt, "subvolid=5")?;
    let script = r#"
btrfs subvolume list . | awk '{print $2, $7, $9}' | while read id top p; do
  echo "subvolume $id top $top $p ro=$(btrfs property get -ts "$p" ro | cut -d= -f2)"
done
find . -printf '%P %y %s %m\n' | sort
find . -type f -print0 | sort -z | xargs -0 md5sum
"#;
    let out = run(Command::new("sh").args(["-c", script]).current_dir(mnt));
    let fin = k.finish();
    let out = out.map_err(|e| format!("the kernel's view: {e}"))?;
    fin.map_err(|e| format!("kernel unmount: {e}"))?;
    Ok(format!(
        "{}{}",
        String::from_utf8_lossy(&default.stdout),
        String::from_utf8_lossy(&out.stdout)
    ))
}

pub(super) fn live_subvol_case(w: Writer, base: &Path) -> Result<(String, String), String> {
    let (_dir, image, mnt, m) = fresh_512m(w, base)?;
    let (sv, prop) = match w {
        Writer::Kernel => ("btrfs subvolume".to_string(), "btrfs property".to_string()),
        Writer::Ubtrfs => (
            format!("{} subvolume", ubtrfs_bin().display()),
            format!("{} property", ubtrfs_bin().display()),
        ),
    };
    let out = run(Command::new("sh")
        .args(["-c", SUBVOL_STEPS])
        .env("SV", sv)
        .env("PROP", prop)
        .env("UB", ubtrfs_bin())
        .current_dir(&mnt));
    let fin = m.finish();
    let out = out.map_err(|e| format!("the script on the {} mount: {e}", w.name()))?;
    fin.map_err(|e| format!("unmount: {e}"))?;
    check(
        &image,
        &format!("after the script on the {} mount", w.name()),
    )?;
    let mut view = kernel_view(&image, &mnt)?;
    check(
        &image,
        &format!("after the kernel read the {} image", w.name()),
    )?;
    // The writer's own mount without options shows the default too.
    let own = RwMount::start(w, &image, &mnt, "")?;
    let listing = run(Command::new("sh")
        .args([
            "-c",
            "find . -printf 'own default mount: %P %y %s %m\\n' | sort",
        ])
        .current_dir(&mnt));
    let fin = own.finish();
    view.push_str(&String::from_utf8_lossy(
        &listing
            .map_err(|e| format!("the {} mount's default: {e}", w.name()))?
            .stdout,
    ));
    fin.map_err(|e| format!("unmount: {e}"))?;
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), view))
}

#[test]
pub(super) fn subvolumes_on_a_live_mount_as_the_kernels() {
    let test = fn_name!();
    skip_unless!(user_available, "tests");
    one_case(test, Writer::Ubtrfs, |base| {
        if !ready(test, Writer::Kernel) {
            return Ok(String::new());
        }
        let (kernel, kview) = live_subvol_case(Writer::Kernel, base)?;
        let (ours, oview) = live_subvol_case(Writer::Ubtrfs, base)?;
        if kernel != ours {
            return Err(format!(
                "the kernel's answers:\n{kernel}\nubtrfs's:\n{ours}"
            ));
        }
        if kview != oview {
            return Err(format!(
                "the kernel's view of its image:\n{kview}\nof ubtrfs's:\n{oview}"
            ));
        }
        let subvols = kview
            .lines()
            .filter(|l| l.starts_with("subvolume "))
            .count();
        let files = kview
            .lines()
            .filter(|l| l.len() > 34 && l.as_bytes()[32] == b' ')
            .count();
        if subvols < 5 || files < 5 {
            return Err(format!("the kernel's view lists too little:\n{kview}"));
        }
        // The default mount is snapro's tree (a snapshot of a snapshot of
        // the top level taken after d/late was written), not the top.
        let default: Vec<&str> = kview
            .lines()
            .filter_map(|l| l.strip_prefix("default mount: "))
            .collect();
        let own = kview
            .lines()
            .filter(|l| l.starts_with("own default mount: d/late "))
            .count();
        if own != 1
            || !default.contains(&"d/late f 700007 644")
            || default.iter().any(|l| l.starts_with("snapro "))
        {
            return Err(format!(
                "the kernel's default mount is not snapro:\n{kview}"
            ));
        }
        Ok(format!(
            "{} steps answered as the kernel's; the kernel lists the same {subvols} subvolumes and {files} files on both images",
            kernel.lines().count()
        ))
    });
}

/// (q): the backup loop, run in the ubtrfs mount with `KM` a kernel
/// mount to receive into and `UB` the ubtrfs binary.
const BACKUP_LOOP: &str = r#"
set -e
$UB subvolume create data >/dev/null
$UB subvolume create w >/dev/null
mkdir -p data/d && seq 100000 > data/d/big && cp -a /usr/include/linux data/
( while [ ! -e "$STOP" ]; do cp -a /usr/include/linux w/x; rm -rf w/x; done ) &
writer=$!
prev=
for i in 1 2 3 4 5; do
  echo "round $i" >> data/d/big
  mkdir -p data/r$i && cp /usr/include/stdio.h data/r$i/ && rm -rf data/r$((i - 2)) data/linux/netfilter$i
  $UB subvolume snapshot -r data snap$i >/dev/null
  if [ -z "$prev" ]; then $UB send -q snap$i; else $UB send -q -p $prev snap$i; fi | btrfs receive -q "$KM"
  if [ $i -gt 2 ]; then $UB subvolume delete snap$((i - 2)) >/dev/null; fi
  prev=snap$i
done
$UB send -q -f "$FULL" snap5
$UB send -q -c snap4 -f "$FULL.c" snap4 snap5
touch "$STOP"
wait $writer
for s in snap4 snap5; do
  for root in "$s" "$KM/$s"; do
    (cd "$root" && find . -printf '%P %y %m %s %T@ %U %G\n' | sort && find . -type f -print0 | sort -z | xargs -0 md5sum) > "$root.manifest.$(echo "$root" | tr / _)"
  done
  cmp "$s.manifest.$(echo "$s" | tr / _)" "$KM/$s.manifest.$(echo "$KM/$s" | tr / _)"
  echo "$s received whole"
done
"#;

pub(super) fn live_send_case(_w: Writer, base: &Path) -> Result<String, String> {
    let (dir, image, mnt, m) = fresh_512m(Writer::Ubtrfs, base)?;
    let kdir = base.join("receiver");
    let (kimage, kmnt) = fresh_image(&kdir, "512M")?;
    let k = RwMount::start(Writer::Kernel, &kimage, &kmnt, "")?;
    let full = dir.join("full5.live");
    let out = run(Command::new("sh")
        .args(["-c", BACKUP_LOOP])
        .env("UB", ubtrfs_bin())
        .env("KM", &kmnt)
        .env("STOP", dir.join("stop"))
        .env("FULL", &full)
        .current_dir(&mnt));
    let kfin = k.finish();
    let fin = m.finish();
    let out = out.map_err(|e| format!("the backup loop: {e}"))?;
    fin.map_err(|e| format!("unmount: {e}"))?;
    kfin.map_err(|e| format!("kernel unmount: {e}"))?;
    check(&image, "the sender's image after the backup loop")?;
    check(&kimage, "the receiver's image after the backup loop")?;
    // The streams sent from the live mount (full; with a clone source,
    // two snapshots) are the ones an offline send of the same snapshots
    // gives.
    for (live, opts, paths) in [
        (full.clone(), &[][..], &["/snap5"][..]),
        (
            dir.join("full5.live.c"),
            &["-c", "/snap4"][..],
            &["/snap4", "/snap5"][..],
        ),
    ] {
        let offline = live.with_extension("offline");
        let args = [opts, paths].concat();
        let mut cmd = Command::new(ubtrfs_bin());
        cmd.args(["send", "-q", "-f"]).arg(&offline);
        cmd.args(opts).arg(&image).args(paths);
        run(&mut cmd).map_err(|e| format!("offline send {args:?}: {e}"))?;
        match (std::fs::read(&live), std::fs::read(&offline)) {
            (Ok(a), Ok(b)) if a == b && !a.is_empty() => {}
            (a, b) => {
                return Err(format!(
                    "the live stream of {args:?} ({:?} bytes) differs from the offline one ({:?} bytes)",
                    a.map(|v| v.len()),
                    b.map(|v| v.len())
                ))
            }
        }
    }
    // The kernel lists what the loop left.
    let k = RwMount::start(Writer::Kernel, &image, &mnt, "")?;
    let list = run(Command::new("btrfs").args(["subvolume", "list"]).arg(&mnt));
    let kfin = k.finish();
    let list = String::from_utf8_lossy(&list?.stdout).into_owned();
    kfin.map_err(|e| format!("kernel unmount: {e}"))?;
    let paths: Vec<&str> = list.lines().filter_map(|l| l.rsplit(' ').next()).collect();
    if paths != ["data", "w", "snap4", "snap5"] {
        return Err(format!("the kernel lists {paths:?}:\n{list}"));
    }
    Ok(format!(
        "{}; the full stream and one with -c equal the offline sends ({} bytes)",
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .replace('\n', ", "),
        std::fs::metadata(&full).map(|m| m.len()).unwrap_or(0)
    ))
}

/// (r): rw_ops (4 workers, seed after seed) in one subvolume of ubtrfs's
/// mount while ten read-only snapshots of it are taken a second apart;
/// every read of the workload matches its model, then `btrfs check`
/// clean, and the kernel reads every snapshot whole (each file's bytes,
/// each listing).
pub(super) fn snapshot_every_second_case(_w: Writer, base: &Path) -> Result<String, String> {
    let (dir, image, mnt, m) = fresh_512m(Writer::Ubtrfs, base)?;
    let ub = ubtrfs_bin();
    run(Command::new(ub)
        .args(["subvolume", "create"])
        .arg(mnt.join("w")))
    .map_err(|e| format!("subvolume create: {e}"))?;
    // Ten snapshots a second apart; the workload runs seed after seed
    // (each in a directory of its own) until they are taken.
    const SNAPS: u32 = 10;
    let done = std::sync::atomic::AtomicBool::new(false);
    let (runs, snaps) = std::thread::scope(|s| {
        let taker = s.spawn(|| -> Result<u32, String> {
            let r = (1..=SNAPS).try_for_each(|n| {
                std::thread::sleep(Duration::from_secs(1));
                run(Command::new(ub)
                    .args(["subvolume", "snapshot", "-r"])
                    .arg(mnt.join("w"))
                    .arg(mnt.join(format!("snap{n}"))))
                .map(|_| ())
                .map_err(|e| format!("snapshot {n} during the workload: {e}"))
            });
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            r.map(|()| SNAPS)
        });
        let mut runs = Vec::new();
        for seed in 1.. {
            if done.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            let d = mnt.join("w").join(format!("run{seed}"));
            if let Err(e) = std::fs::create_dir(&d) {
                runs.push(Err(format!("mkdir {}: {e}", d.display())));
                break;
            }
            let r = RwOps::new(seed, ops(), procs()).run(&d, &dir);
            let failed = !r.ok();
            runs.push(if failed {
                Err(format!("rw_ops seed {seed}: {}", r.describe()))
            } else {
                Ok(())
            });
            if failed {
                break;
            }
        }
        (runs, taker.join().expect("the snapshot thread"))
    });
    let fin = m.finish();
    let workloads = runs.len();
    runs.into_iter().collect::<Result<Vec<()>, String>>()?;
    fin.map_err(|e| format!("unmount: {e}"))?;
    let snaps = snaps?;
    check(&image, "after snapshots every second")?;
    let k = RwMount::start(Writer::Kernel, &image, &mnt, "")?;
    let read = run(Command::new("sh")
        .args([
            "-c",
            "for s in snap*; do tar cf - \"$s\" | wc -c >/dev/null || exit 1; done; ls -d snap* | wc -l",
        ])
        .current_dir(&mnt));
    let fin = k.finish();
    let read = read.map_err(|e| format!("the kernel reading the snapshots: {e}"))?;
    fin.map_err(|e| format!("kernel unmount: {e}"))?;
    let listed: u32 = String::from_utf8_lossy(&read.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    if listed != snaps {
        return Err(format!(
            "{snaps} snapshots taken, the kernel lists {listed}"
        ));
    }
    check(&image, "after the kernel read every snapshot")?;
    Ok(format!(
        "{snaps} snapshots during {workloads} rw_ops runs, each read whole by the kernel"
    ))
}

/// (s): what SIGKILL leaves of subvolume work on the live mount. The
/// loop makes subvolumes, snapshots them and the top level, deletes
/// snapshots (one with a file open in it); killed at seeded moments.
const SUBVOL_WORK: &str = r#"
fail() { echo "$1" >"$FAILED"; exit 1; }
i=0
while :; do
  i=$((i + 1))
  $UB subvolume create s$i >/dev/null || fail "create s$i"
  head -c 300000 /dev/urandom >s$i/f && mkdir s$i/d && echo x >s$i/d/g || fail "write s$i"
  $UB subvolume snapshot s$i s$i.snap >/dev/null || fail "snapshot s$i"
  $UB subvolume snapshot -r . top$i >/dev/null || fail "snapshot -r . top$i"
  echo y >>s$i/f || fail "append s$i/f"
  exec 3<s$i.snap/f
  $UB subvolume delete s$i.snap >/dev/null || fail "delete s$i.snap"
  exec 3<&-
  if [ $i -gt 2 ]; then
    $UB subvolume delete top$((i - 2)) >/dev/null || fail "delete top$((i - 2))"
    rm -rf s$((i - 2))/d s$((i - 2))/f && rmdir s$((i - 2)) || fail "rmdir s$((i - 2))"
  fi
done
"#;

pub(super) fn kill9_subvol_work_case(_w: Writer, seed: u64, base: &Path) -> Result<String, String> {
    let dir = base.join(format!("kill-{seed}"));
    let (image, mnt) = fresh_image(&dir, "512M")?;
    let mut rng = Rng::new(seed);
    let mut notes = Vec::new();
    for k in 0..kills() {
        let delay = Duration::from_millis(500 + rng.below(3000));
        let when = format!("kill {k} after {delay:?}");
        let mut m = RwMount::start(Writer::Ubtrfs, &image, &mnt, "commit=1")?;
        let t = mnt.join(format!("k{k}"));
        run(Command::new(ubtrfs_bin())
            .args(["subvolume", "create"])
            .arg(&t))
        .map_err(|e| format!("subvolume create: {e}"))?;
        let failed = dir.join(format!("failed-{k}"));
        let mut c = Command::new("sh");
        c.args(["-c", SUBVOL_WORK])
            .env("UB", ubtrfs_bin())
            .env("FAILED", &failed)
            .current_dir(&t);
        let work = spawn_limited(
            c,
            &dir,
            Limits {
                timeout: Duration::from_secs(300),
                address_space: None,
                file_size: None,
            },
        );
        std::thread::sleep(delay);
        let RwMount::Ubtrfs(u) = &mut m else {
            return Err("not ubtrfs's mount".into());
        };
        // A step that failed before the kill (after it, every step
        // fails: the mount is gone).
        let before = std::fs::read_to_string(&failed);
        let killed = u.kill9();
        kill_group(work);
        killed.map_err(|e| format!("{when}: {e}"))?;
        if let Ok(step) = before {
            return Err(format!("{when}: the loop failed before the kill: {step}"));
        }
        check(&image, &format!("after {when}"))?;
        // The kernel mounts it (its cleaner drops what a delete left
        // unlinked), lists it, writes; then ubtrfs's mount does the same
        // (it drops them itself).
        for w in [Writer::Kernel, Writer::Ubtrfs] {
            let m = RwMount::start(w, &image, &mnt, "")
                .map_err(|e| format!("{when}: the {} cannot mount it: {e}", w.name()))?;
            let listed = run(Command::new(ubtrfs_bin())
                .args(["subvolume", "list"])
                .arg(&mnt));
            let wrote = std::fs::write(
                mnt.join(format!("{}-{k}", w.name())),
                vec![k as u8; 100_000],
            );
            let fin = m.finish();
            let listed =
                listed.map_err(|e| format!("{when}: list on the {} mount: {e}", w.name()))?;
            fin.map_err(|e| format!("{when}: {} unmount: {e}", w.name()))?;
            wrote.map_err(|e| format!("{when}: {} write: {e}", w.name()))?;
            check(&image, &format!("after {when} and a {} mount", w.name()))?;
            if w == Writer::Ubtrfs {
                notes.push(format!(
                    "{delay:?}: {} subvolumes",
                    String::from_utf8_lossy(&listed.stdout).lines().count()
                ));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(notes.join(", "))
}

/// `ubtrfs scrub` on the live mount at `mnt` of `image`: clean, then a
/// data sector changed behind the mount's back (in the image file) is
/// one bad copy, and the scrub fails.
fn scrub_finds_a_bad_copy(image: &Path, mnt: &Path) -> Result<(), String> {
    let scrub = |want_ok: bool| -> Result<String, String> {
        let o = Command::new(ubtrfs_bin())
            .args(["scrub"])
            .arg(mnt)
            .output()
            .map_err(|e| format!("scrub: {e}"))?;
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        if o.status.success() != want_ok {
            return Err(format!("scrub ended {} : {text}", o.status));
        }
        Ok(text)
    };
    let clean = scrub(true)?;
    let pattern = b"scrub-me:".repeat(1000);
    std::fs::write(mnt.join("scrubbed"), &pattern).map_err(|e| format!("write: {e}"))?;
    run(Command::new(ubtrfs_bin())
        .args(["filesystem", "sync"])
        .arg(mnt))?;
    let mut img = std::fs::read(image).map_err(|e| format!("read {}: {e}", image.display()))?;
    let at = img
        .windows(pattern.len())
        .position(|w| w == &pattern[..])
        .ok_or("the file's data is not in the image")?;
    img[at] ^= 0xff;
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(image)
            .map_err(|e| format!("open {}: {e}", image.display()))?;
        f.seek(SeekFrom::Start(at as u64))
            .and_then(|_| f.write_all(&img[at..at + 1]))
            .map_err(|e| format!("corrupt {}: {e}", image.display()))?;
    }
    let bad = scrub(false)?;
    if !clean.contains("(0 bad), 0 unreadable") || !bad.contains("data sector copies (1 bad)") {
        return Err(format!("scrub before: {clean}\nafter: {bad}"));
    }
    std::fs::remove_file(mnt.join("scrubbed")).map_err(|e| format!("rm: {e}"))
}

/// (t): `ubtrfs scrub` of the live mount finds a bad copy; `ubtrfs
/// filesystem df`, `usage` and `show` on ubtrfs's live mount (after
/// `ubtrfs filesystem sync`), offline on the image, and on the
/// kernel's mount of it (the kernel's own ioctls) print what btrfs-progs
/// prints there (the devices' paths aside: the kernel's is its loop
/// device); a label set on the live mount is the kernel's.
pub(super) fn filesystem_df_case(_w: Writer, base: &Path) -> Result<String, String> {
    let (_dir, image, mnt, m) = fresh_512m(Writer::Ubtrfs, base)?;
    let ub = |args: &[&str], path: &Path| -> Result<String, String> {
        run(Command::new(ubtrfs_bin()).args(args).arg(path))
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    const WHAT: [&str; 3] = ["df", "usage", "show"];
    let all = |path: &Path| -> Result<String, String> {
        let mut out = String::new();
        for w in WHAT {
            out.push_str(&ub(&["filesystem", w], path)?);
        }
        Ok(out)
    };
    let live = (|| {
        run(Command::new("cp")
            .args(["-a", "/usr/include/linux"])
            .arg(mnt.join("linux")))?;
        scrub_finds_a_bad_copy(&image, &mnt)?;
        run(Command::new(ubtrfs_bin())
            .args(["filesystem", "label"])
            .arg(&mnt)
            .arg("live-label"))?;
        ub(&["filesystem", "sync"], &mnt)?;
        all(&mnt)
    })();
    let fin = m.finish();
    let live = live.map_err(|e| format!("on the live mount: {e}"))?;
    fin.map_err(|e| format!("unmount: {e}"))?;
    let offline = all(&image)?;
    // Read-write, as statfs counts free space on a writable mount.
    let k = RwMount::start(Writer::Kernel, &image, &mnt, "")?;
    let kernel = (|| {
        let mut out = String::new();
        for w in WHAT {
            let o = run(Command::new("btrfs").args(["filesystem", w]).arg(&mnt))?;
            out.push_str(&String::from_utf8_lossy(&o.stdout));
        }
        Ok::<_, String>(out)
    })();
    let through_kernel = all(&mnt);
    let label = run(Command::new("btrfs")
        .args(["filesystem", "label"])
        .arg(&mnt));
    let fin = k.finish();
    let through_kernel = through_kernel?;
    let kernel = kernel?;
    let label = String::from_utf8_lossy(&label?.stdout).trim().to_string();
    fin.map_err(|e| format!("kernel unmount: {e}"))?;
    // The device's path: the image's, or the kernel's loop device.
    let masked = |s: &str| -> String {
        s.lines()
            .map(|l| {
                let l = match l.split_once(" path ") {
                    Some((a, _)) => format!("{a} path DEV"),
                    None => l.to_string(),
                };
                match l.strip_prefix("   ").and_then(|r| r.split_once('\t')) {
                    Some((_, size)) => format!("   DEV\t{size}\n"),
                    None => format!("{l}\n"),
                }
            })
            .collect()
    };
    let kernel = masked(&kernel);
    if kernel.lines().count() < 20 || !kernel.contains("GlobalReserve") {
        return Err(format!("the kernel's df, usage and show:\n{kernel}"));
    }
    for (what, ours) in [
        ("the live mount", &live),
        ("the image", &offline),
        ("the kernel's mount", &through_kernel),
    ] {
        let ours = masked(ours);
        if ours != kernel {
            return Err(format!(
                "df, usage and show of {what}:\n{ours}\nthe kernel's:\n{kernel}"
            ));
        }
    }
    if label != "live-label" {
        return Err(format!("the kernel reads the label {label:?}"));
    }
    Ok(format!(
        "{} lines as the kernel's, three ways",
        kernel.lines().count()
    ))
}
