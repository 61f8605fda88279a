//! `ubtrfs subvolume create|snapshot|delete` on copies of kernel-made
//! fixtures (root): a seeded random sequence of operations per fixture,
//! `btrfs check --readonly` clean after each; the kernel sees the expected
//! subvolumes, ro flags and snapshot contents; the same sequence done by
//! the kernel on a second copy ends with the same subvolumes, contents,
//! `btrfs filesystem du` numbers and used data bytes; finally the kernel
//! writes to the ubtrfs-modified image and `btrfs check` stays clean.
//!
//! Environment: UBTRFS_SUBVOL_SEED (base seed), UBTRFS_SUBVOL_OPS (ops per
//! fixture, default 7), UBTRFS_SUBVOL_FIXTURES ("all" or a comma list;
//! default zstd, raid1 and raid5), UBTRFS_FIXTURES_DIR (prebuilt kernel fixtures).

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use ubtrfs_oracle::*;

// More (big: 3-level trees, several minutes in a debug build; zlib, blake2-dup:
// hit the ro-snapshot-of-a-created-subvolume bug with the default seed):
// UBTRFS_SUBVOL_FIXTURES=all (or a comma list).
const DEFAULT_FIXTURES: &[&str] = &["zstd", "raid1"];

#[derive(Debug, Clone)]
enum Op {
    Snapshot { src: String, dest: String, ro: bool },
    Create { path: String },
    Delete { path: String },
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Snapshot { src, dest, ro } => {
                write!(f, "snapshot{} {src} {dest}", if *ro { " -r" } else { "" })
            }
            Op::Create { path } => write!(f, "create {path}"),
            Op::Delete { path } => write!(f, "delete {path}"),
        }
    }
}

/// The subvolumes as the kernel lists them (paths relative to the top
/// level, no leading slash) with their ro flags.
type Subvols = BTreeMap<String, bool>;

fn btrfs(args: &[&str]) -> std::process::Output {
    Command::new("btrfs")
        .args(args)
        .output()
        .expect("run btrfs")
}

fn check_clean(f: &Fixture, what: &str) -> Result<(), String> {
    // btrfs check finds the other devices of a filesystem among block
    // devices only: check through (read-only) loop devices.
    let devs = f.devices();
    let loops = (devs.len() > 1).then(|| Loops::attach(&devs, true));
    let first = match &loops {
        Some(l) => PathBuf::from(l.first()),
        None => devs[0].clone(),
    };
    let r = btrfs_check(&first, &[]);
    drop(loops);
    r.map_err(|e| {
        let excerpt: Vec<&str> = e.lines().take(60).collect();
        format!("after {what}: {}", excerpt.join("\n"))
    })
}

fn list_subvols(mnt: &Path) -> Subvols {
    let o = btrfs(&["subvolume", "list", &mnt.display().to_string()]);
    assert!(o.status.success(), "subvolume list: {}", out_text(&o));
    let mut out = Subvols::new();
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        let Some((_, p)) = l.split_once(" path ") else {
            continue;
        };
        let p = p.trim().to_string();
        let ro = btrfs(&[
            "property",
            "get",
            "-ts",
            &mnt.join(&p).display().to_string(),
            "ro",
        ]);
        let ro = String::from_utf8_lossy(&ro.stdout).contains("ro=true");
        out.insert(p, ro);
    }
    out
}

/// The manifest of subvolume `rel` ("" for the top level) without what
/// lies in subvolumes below it and without empty-subvolume placeholders,
/// with inode numbers left out.
fn subvol_manifest(mnt: &Path, rel: &str, subvols: &Subvols) -> Vec<String> {
    let lines = manifest_of(&mnt.join(rel));
    let nested: Vec<String> = subvols
        .keys()
        .filter_map(|p| {
            if rel.is_empty() {
                Some(format!("/{p}"))
            } else {
                p.strip_prefix(&format!("{rel}/")).map(|r| format!("/{r}"))
            }
        })
        .collect();
    let lines: Vec<String> = lines
        .into_iter()
        .filter(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let p = v["path"].as_str().unwrap_or("");
            !nested
                .iter()
                .any(|n| p == n || p.starts_with(&format!("{n}/")))
        })
        .collect();
    without_placeholders(&lines)
        .into_iter()
        .map(|l| {
            let mut v: Value = serde_json::from_str(&l).unwrap();
            v["ino"] = Value::Null;
            v.to_string()
        })
        .collect()
}

/// Drops directory times (a directory that got a new entry was touched at
/// another time by the kernel and by ubtrfs).
fn without_dir_times(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["type"] == "dir" {
                v["mtime_ns"] = Value::Null;
            }
            v.to_string()
        })
        .collect()
}

/// `btrfs filesystem du -s --raw`: (total, exclusive, shared).
fn du(path: &Path) -> (u64, u64, u64) {
    let o = btrfs(&[
        "filesystem",
        "du",
        "-s",
        "--raw",
        &path.display().to_string(),
    ]);
    assert!(o.status.success(), "fi du: {}", out_text(&o));
    let t = String::from_utf8_lossy(&o.stdout);
    let l = t.lines().nth(1).unwrap_or("");
    let n: Vec<u64> = l
        .split_whitespace()
        .take(3)
        .map(|x| x.parse().unwrap_or(u64::MAX))
        .collect();
    (n[0], n[1], n[2])
}

/// Used bytes per block group type from `btrfs filesystem usage -b`.
fn usage(mnt: &Path) -> BTreeMap<String, u64> {
    let o = btrfs(&["filesystem", "usage", "-b", &mnt.display().to_string()]);
    let mut out = BTreeMap::new();
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        if let (Some((kind, _)), Some((_, used))) = (l.split_once(','), l.split_once("Used:")) {
            if l.starts_with(char::is_alphabetic) {
                let u: u64 = used
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .parse()
                    .unwrap_or(u64::MAX);
                out.insert(kind.to_string(), u);
            }
        }
    }
    out
}

/// A seeded op: picks from `subvols` (the state before it); updates it.
fn pick_op(rng: &mut Rng, subvols: &mut Subvols, made: &[String], n: usize) -> Op {
    let name = format!("ub{n}");
    let rw_parents: Vec<String> = subvols
        .iter()
        .filter(|(_, ro)| !**ro)
        .map(|(p, _)| p.clone())
        .collect();
    let dest = |rng: &mut Rng| {
        if !rw_parents.is_empty() && rng.chance(25) {
            format!("/{}/{name}", rng.pick(&rw_parents))
        } else {
            format!("/{name}")
        }
    };
    // Deletable: no subvolume below it.
    let leaves: Vec<String> = subvols
        .keys()
        .filter(|p| !subvols.keys().any(|q| q.starts_with(&format!("{p}/"))))
        .cloned()
        .collect();
    let r = rng.below(100);
    if r < 25 && !leaves.is_empty() {
        // Prefer a snapshot made earlier when there is one.
        let made_leaves: Vec<&String> = leaves
            .iter()
            .filter(|l| made.contains(&format!("/{l}")))
            .collect();
        let p = if !made_leaves.is_empty() && rng.chance(60) {
            (*rng.pick(&made_leaves)).clone()
        } else {
            rng.pick(&leaves).clone()
        };
        subvols.remove(&p);
        return Op::Delete {
            path: format!("/{p}"),
        };
    }
    if r < 40 {
        let path = dest(rng);
        subvols.insert(path[1..].to_string(), false);
        return Op::Create { path };
    }
    let all: Vec<String> = std::iter::once(String::new())
        .chain(subvols.keys().cloned())
        .collect();
    let src = format!("/{}", rng.pick(&all));
    let ro = rng.chance(50);
    let dest = dest(rng);
    subvols.insert(dest[1..].to_string(), ro);
    Op::Snapshot { src, dest, ro }
}

fn ubtrfs_op(f: &Fixture, op: &Op) -> Result<(), String> {
    let mut args: Vec<String> = vec!["subvolume".into()];
    match op {
        Op::Snapshot { src, dest, ro } => {
            args.push("snapshot".into());
            if *ro {
                args.push("-r".into());
            }
            args.extend(f.image_args(None));
            args.push(src.clone());
            args.push(dest.clone());
        }
        Op::Create { path } => {
            args.push("create".into());
            args.extend(f.image_args(None));
            args.push(path.clone());
        }
        Op::Delete { path } => {
            args.push("delete".into());
            args.extend(f.image_args(None));
            args.push(path.clone());
        }
    }
    let o = ubtrfs(&args);
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("ubtrfs {}: {}", args.join(" "), out_text(&o)))
    }
}

fn kernel_op(mnt: &Path, op: &Op) -> Result<(), String> {
    let p = |s: &str| mnt.join(s.trim_start_matches('/')).display().to_string();
    let o = match op {
        Op::Snapshot { src, dest, ro } => {
            let mut a = vec!["subvolume", "snapshot"];
            if *ro {
                a.push("-r");
            }
            let (s, d) = (p(src), p(dest));
            a.push(&s);
            a.push(&d);
            btrfs(&a)
        }
        Op::Create { path } => btrfs(&["subvolume", "create", &p(path)]),
        // Cleaned up later: one `subvolume sync` after the sequence.
        Op::Delete { path } => btrfs(&["subvolume", "delete", &p(path)]),
    };
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("kernel {op}: {}", out_text(&o)))
    }
}

/// A sequence of operations made by ubtrfs on one fixture's copy.
struct Ran {
    ops: Vec<Op>,
    /// Subvolumes made by the sequence and still there.
    made: Vec<String>,
    /// The subvolumes after it.
    subvols: Subvols,
    /// Snapshot -> its source's manifest when it was taken (while the
    /// snapshot still matches it).
    expected_snap: BTreeMap<String, Vec<String>>,
}

impl Ran {
    fn ops_text(&self) -> String {
        let ops: Vec<String> = self.ops.iter().map(|o| o.to_string()).collect();
        ops.join("; ")
    }
}

/// What the kernel shows of an image: its subvolumes, and each one's
/// manifest, `fi du` and the filesystem's usage.
struct View {
    subvols: Subvols,
    manifests: BTreeMap<String, Vec<String>>,
    du: BTreeMap<String, (u64, u64, u64)>,
    usage: BTreeMap<String, u64>,
}

/// `nops` seeded operations by ubtrfs on `ub`, each followed by both
/// checks.
fn run_ops(fx: &Fixture, ub: &Fixture, seed: u64, nops: usize) -> Result<Ran, String> {
    let mut ran = Ran {
        ops: Vec::new(),
        made: Vec::new(),
        subvols: list_subvols(&Mount::images(&ub.devices(), "", true).dir),
        expected_snap: BTreeMap::new(),
    };
    let mut rng = Rng::for_name(seed, &fx.name);
    for i in 0..nops {
        let before = ran.subvols.clone();
        let op = pick_op(&mut rng, &mut ran.subvols, &ran.made, i);
        ran.ops.push(op.clone());
        let so_far = ran.ops_text();
        let ctx = |e: String| {
            format!(
                "fixture {} seed {seed:#x} op {i} ({op}); ops so far: [{so_far}]\n{e}",
                fx.name
            )
        };
        if let Op::Snapshot { src, dest, .. } = &op {
            let m = Mount::images(&ub.devices(), "", true);
            ran.expected_snap.insert(
                dest.clone(),
                subvol_manifest(&m.dir, src.trim_start_matches('/'), &before),
            );
        }
        ubtrfs_op(ub, &op).map_err(ctx)?;
        let touched = match &op {
            Op::Snapshot { dest, .. } | Op::Create { path: dest } => {
                ran.made.push(dest.clone());
                dest.clone()
            }
            Op::Delete { path } => {
                ran.made.retain(|m| m != path);
                ran.expected_snap.remove(path);
                path.clone()
            }
        };
        // A snapshot that got a subvolume added or removed below it no
        // longer matches its source as it was.
        ran.expected_snap
            .retain(|k, _| !touched.starts_with(&format!("{k}/")));
        check_clean(ub, &op.to_string()).map_err(ctx)?;
    }
    Ok(ran)
}

/// The subvolumes the kernel lists in the mount `dir`, which must be
/// `want` (`whose`, for the message).
fn subvols_are(dir: &Path, want: &Subvols, whose: &str) -> Result<Subvols, String> {
    let got = list_subvols(dir);
    if got != *want {
        return Err(format!("subvolumes {got:?}\n {whose}: {want:?}"));
    }
    Ok(got)
}

/// The kernel's view of the ubtrfs-made image, which must have the
/// subvolumes the sequence made and snapshots equal to their sources.
fn ubtrfs_view(ub: &Fixture, ran: &Ran) -> Result<View, String> {
    let m = Mount::images(&ub.devices(), "", true);
    let subvols = subvols_are(&m.dir, &ran.subvols, "the sequence's")?;
    for (dest, exp) in &ran.expected_snap {
        let got = subvol_manifest(&m.dir, dest.trim_start_matches('/'), &subvols);
        compare_manifests(exp, &got, &Ignore::default())
            .map_err(|e| format!("snapshot {dest} differs from its source: {e}"))?;
    }
    let mut view = View {
        manifests: BTreeMap::new(),
        du: BTreeMap::new(),
        usage: usage(&m.dir),
        subvols,
    };
    for p in std::iter::once(String::new()).chain(view.subvols.keys().cloned()) {
        let man = subvol_manifest(&m.dir, &p, &view.subvols);
        view.manifests.insert(p.clone(), man);
        view.du.insert(p.clone(), du(&m.dir.join(&p)));
    }
    Ok(view)
}

/// The same sequence by the kernel on `kc`, which must end as ubtrfs'
/// did: the same subvolumes, manifests (but directory times), `fi du`
/// and data usage. Metadata usage that differs is noted.
fn kernel_agrees(
    kc: &Fixture,
    opts: &str,
    ops: &[Op],
    ub: &View,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    {
        // commit=1: the cleaner (woken after each commit) drops deleted
        // subvolumes soon, so `subvolume sync` does not wait for long.
        let kopts = if opts.is_empty() {
            "commit=1".to_string()
        } else {
            format!("{opts},commit=1")
        };
        let m = Mount::images(&kc.devices(), &kopts, false);
        for op in ops {
            kernel_op(&m.dir, op)?;
        }
        let _ = btrfs(&["subvolume", "sync", &m.dir.display().to_string()]);
        m.unmount();
    }
    let m = Mount::images(&kc.devices(), "", true);
    let got = subvols_are(&m.dir, &ub.subvols, "ubtrfs'")?;
    for p in std::iter::once(String::new()).chain(got.keys().cloned()) {
        let km = subvol_manifest(&m.dir, &p, &got);
        compare_manifests(
            &without_dir_times(&km),
            &without_dir_times(&ub.manifests[&p]),
            &Ignore::default(),
        )
        .map_err(|e| format!("subvolume /{p}: kernel vs ubtrfs manifest: {e}"))?;
        let kd = du(&m.dir.join(&p));
        if kd != ub.du[&p] {
            return Err(format!(
                "fi du /{p} (total, exclusive, shared): kernel {kd:?}, ubtrfs {:?}",
                ub.du[&p]
            ));
        }
    }
    let ku = usage(&m.dir);
    for (kind, used) in &ku {
        let u = ub.usage.get(kind).copied();
        if u == Some(*used) {
            continue;
        }
        if kind.starts_with("Data") && !kind.contains("Metadata") {
            return Err(format!(
                "used {kind}: kernel {used}, ubtrfs {u:?}\n kernel {ku:?}\n ubtrfs {:?}",
                ub.usage
            ));
        }
        notes.push(format!(
            "{}: used {kind}: kernel {used}, ubtrfs {u:?} (not asserted)",
            kc.name
        ));
    }
    Ok(())
}

/// The kernel writes to the ubtrfs-made image: a file in a writable
/// subvolume the sequence made (or the top), and a regular file deleted
/// in the source of a snapshot (or at the top).
fn kernel_writes(ub: &Fixture, opts: &str, ran: &Ran, view: &View) -> Result<(), String> {
    let m = Mount::images(&ub.devices(), opts, false);
    let target = ran
        .made
        .iter()
        .find(|p| !view.subvols[p.trim_start_matches('/')])
        .map_or("/", |s| s.as_str());
    let dst = m
        .dir
        .join(target.trim_start_matches('/'))
        .join("kernel-wrote");
    std::fs::write(&dst, vec![0x5au8; 300_000])
        .map_err(|e| format!("write {}: {e}", dst.display()))?;
    let src = ran
        .ops
        .iter()
        .filter_map(|o| match o {
            Op::Snapshot { src, .. } => Some(src.trim_start_matches('/').to_string()),
            _ => None,
        })
        .find(|s| s.is_empty() || view.subvols.get(s) == Some(&false))
        .unwrap_or_default();
    let man = manifest_of(&m.dir.join(&src));
    // Not in a subvolume nested below the source.
    let nested_in = |p: &str| {
        view.subvols.keys().any(|n| {
            let n = if src.is_empty() {
                format!("/{n}/")
            } else {
                match n.strip_prefix(&format!("{src}/")) {
                    Some(r) => format!("/{r}/"),
                    None => return false,
                }
            };
            p.starts_with(&n)
        })
    };
    let victim = records(&man)
        .into_iter()
        .find(|(p, v)| v["type"] == "file" && !nested_in(p));
    if let Some((p, _)) = victim {
        let f = m.dir.join(&src).join(p.trim_start_matches('/'));
        std::fs::remove_file(&f).map_err(|e| format!("rm {}: {e}", f.display()))?;
    }
    m.unmount();
    Ok(())
}

/// One fixture's run; Err describes the first failure.
fn run_fixture(fx: &Fixture, seed: u64, nops: usize, work: &Path) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    let ub = fx.copy_to(&work.join("ubtrfs"));
    let kc = fx.copy_to(&work.join("kernel"));
    let opts = fx.meta["mount"].as_str().unwrap_or("").to_string();
    let ran = run_ops(fx, &ub, seed, nops)?;
    let ops_text = ran.ops_text();
    let ctx = |e: String| format!("fixture {} seed {seed:#x} ops [{ops_text}]\n{e}", fx.name);
    let view = ubtrfs_view(&ub, &ran).map_err(ctx)?;
    // RAID5/6 fixtures: every device can still be lost after our
    // changes. Their metadata is RAID1/RAID1C3, so this checks our tree
    // blocks' copies and that we left the kernel's parity rows alone; our
    // parity is checked by mkfs.rs (RAID5/6 metadata) and receive.rs
    // (data written into the kernel's RAID6 rows).
    let raid56 = ["data", "metadata"]
        .iter()
        .any(|k| ["raid5", "raid6"].contains(&fx.profile(k).as_str()));
    if raid56 {
        degraded_mounts(&ub.devices(), false, |dir| {
            for p in std::iter::once(String::new()).chain(view.subvols.keys().cloned()) {
                let got = subvol_manifest(dir, &p, &view.subvols);
                compare_manifests(&view.manifests[&p], &got, &Ignore::default())
                    .map_err(|e| format!("subvolume /{p}: {e}"))?;
            }
            Ok(())
        })
        .map_err(ctx)?;
    }
    kernel_agrees(&kc, &opts, &ran.ops, &view, &mut notes).map_err(ctx)?;
    kernel_writes(&ub, &opts, &ran, &view).map_err(ctx)?;
    check_clean(&ub, "the kernel wrote to the ubtrfs-made image").map_err(ctx)?;
    notes.push(format!("{}: ok, seed {seed:#x}, ops [{ops_text}]", fx.name));
    Ok(notes)
}

#[test]
fn subvolume_ops_on_kernel_fixtures() {
    skip_unless!(kernel_available);
    let seed = env_u64("UBTRFS_SUBVOL_SEED").unwrap_or(0x5eb0_1001);
    let nops = env_u64("UBTRFS_SUBVOL_OPS").unwrap_or(7) as usize;
    let which = std::env::var("UBTRFS_SUBVOL_FIXTURES").unwrap_or_default();
    let all = kernel_fixtures();
    let chosen: Vec<&Fixture> = all
        .iter()
        .filter(|f| match which.as_str() {
            "" => DEFAULT_FIXTURES.contains(&f.name.as_str()) || f.name == "raid5",
            "all" => true,
            l => l.split(',').any(|n| n == f.name),
        })
        .collect();
    assert!(!chosen.is_empty(), "no fixtures chosen from {which:?}");
    let work = Workdir::new("subvol");
    let mut failures = Vec::new();
    for fx in chosen {
        let d: PathBuf = work.join(&fx.name);
        let t0 = std::time::Instant::now();
        let r = if fx.meta["mixed"] == true {
            // Data and metadata share block groups: usage is not comparable.
            continue;
        } else {
            run_fixture(fx, seed, nops, &d)
        };
        match r {
            Ok(notes) => {
                notes.iter().for_each(|n| eprintln!("{n}"));
                eprintln!("{}: {:?}", fx.name, t0.elapsed());
            }
            Err(e) => {
                eprintln!("FAIL {e}");
                failures.push(e);
            }
        }
        let _ = std::fs::remove_dir_all(&d);
    }
    assert!(
        failures.is_empty(),
        "{} fixture(s) failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
