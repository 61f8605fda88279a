//! Helpers for the send tests: mkfs, the kernel's and ubtrfs' `send`,
//! `btrfs receive`, and a send-stream reader to compare two streams.

use crate::run::{run, ubtrfs, ubtrfs_bin};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// `ubtrfs subvolume list --json` of an image.
pub fn subvolumes(image_args: &[String]) -> Vec<serde_json::Value> {
    let mut args = vec!["subvolume".to_string(), "list".into()];
    args.extend(image_args.iter().cloned());
    args.push("--json".into());
    let out = ubtrfs(&args);
    assert!(
        out.status.success(),
        "subvolume list: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .expect("subvolume list json")
        .as_array()
        .unwrap()
        .clone()
}

/// The read-only subvolumes of an image, by path, in id order.
pub fn readonly_snapshots(image_args: &[String]) -> Vec<String> {
    subvolumes(image_args)
        .iter()
        .filter(|s| s["readonly"] == true)
        .map(|s| s["path"].as_str().unwrap().to_string())
        .collect()
}

/// A command for [`build_stream`]: number, then (attribute, value) pairs.
pub type StreamCmd = (u16, Vec<(u16, Vec<u8>)>);

/// A send stream made of `cmds` ((command, [(attribute, value)])), framed
/// with lengths and crc32c, protocol `version` (the data attribute of v2
/// carries no length and must be last).
pub fn build_stream(version: u32, cmds: &[StreamCmd]) -> Vec<u8> {
    let mut out = b"btrfs-stream\0".to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    for (c, attrs) in cmds {
        let mut body = Vec::new();
        for (t, v) in attrs {
            body.extend_from_slice(&t.to_le_bytes());
            if !(version >= 2 && *t == A_DATA) {
                body.extend_from_slice(&(v.len() as u16).to_le_bytes());
            }
            body.extend_from_slice(v);
        }
        let mut hdr = Vec::new();
        hdr.extend_from_slice(&(body.len() as u32).to_le_bytes());
        hdr.extend_from_slice(&c.to_le_bytes());
        hdr.extend_from_slice(&[0; 4]);
        let crc = crc32c_raw(crc32c_raw(0, &hdr), &body);
        hdr[6..10].copy_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&hdr);
        out.extend_from_slice(&body);
    }
    out
}

/// A kernel-made image at `img` with the seeded scenarios `names` of
/// tests/fixtures/send_scenarios.py: `init`, then `steps` steps (each
/// snapshotted), each on a new mount with `mount_opts`.
pub fn scenario_image(img: &Path, names: &[String], steps: usize, mount_opts: &str) {
    mkfs(img, "2G", &[]);
    let script = crate::paths::repo_root().join("tests/fixtures/send_scenarios.py");
    for step in 0..=steps {
        // Remounting lets deleted inode numbers be used again.
        let m = crate::mounts::Mount::images(&[img.to_path_buf()], mount_opts, false);
        let mut cmd = Command::new("python3");
        cmd.arg(&script);
        if step == 0 {
            cmd.arg("init").arg(&m.dir);
        } else {
            cmd.arg("step").arg(&m.dir).arg(step.to_string());
        }
        run(cmd.args(names)).unwrap_or_else(|e| panic!("seeds {names:?} step {step}: {e}"));
        m.unmount();
    }
}

/// One batch of the seeded scenarios of [`scenario_image`], sent and
/// received step by step, then compared with the source.
#[derive(Default)]
pub struct ScenarioBatch {
    /// (seed, step) of every snapshot received.
    pub received: Vec<(u64, usize)>,
    /// (seed, what failed).
    pub failed: Vec<(u64, String)>,
    /// Streams sent (and received), failed ones too.
    pub streams: usize,
}

impl ScenarioBatch {
    /// Scenario `seed`'s snapshots `s{seed}.0` to `s{seed}.{steps}`, in
    /// turn, through `one(snapshot, send arguments)`: `base`, and from step
    /// 1 on `-p` and the previous snapshot as `parent(its name)` gives it.
    /// The first failure ends the scenario.
    pub fn send_steps(
        &mut self,
        seed: u64,
        steps: usize,
        base: &[&str],
        parent: impl Fn(&str) -> String,
        mut one: impl FnMut(&str, &[&str]) -> Result<(), String>,
    ) {
        for step in 0..=steps {
            let snap = format!("s{seed}.{step}");
            let mut args = base.to_vec();
            let parent = parent(&format!("s{seed}.{}", step.saturating_sub(1)));
            if step > 0 {
                args.extend(["-p", parent.as_str()]);
            }
            let r = one(&snap, &args);
            self.streams += 1;
            if let Err(e) = r {
                self.failed.push((seed, format!("step {step}: {e}")));
                break;
            }
            self.received.push((seed, step));
        }
    }

    /// Every snapshot received of a scenario that did not fail against
    /// the source's manifest of it (`source`, by "/snapshot"):
    /// `compare(seed, snapshot, source's manifest)`.
    pub fn compare(
        &mut self,
        source: &BTreeMap<String, Vec<String>>,
        mut compare: impl FnMut(u64, &str, &[String]) -> Result<(), String>,
    ) {
        for (seed, step) in std::mem::take(&mut self.received) {
            if self.failed.iter().any(|f| f.0 == seed) {
                continue;
            }
            let snap = format!("s{seed}.{step}");
            let Some(want) = source.get(&format!("/{snap}")) else {
                self.failed
                    .push((seed, format!("{snap} is not in the source manifest")));
                continue;
            };
            if let Err(d) = compare(seed, &snap, want) {
                self.failed.push((
                    seed,
                    format!("step {step} ({snap}): received != source: {d}"),
                ));
            }
        }
    }

    /// Prints the batch's failures and adds them to `failed`; adds its
    /// streams to `streams`.
    pub fn finish(self, failed: &mut Vec<(u64, String)>, streams: &mut usize) {
        for (seed, e) in self.failed {
            eprintln!("FAILED seed {seed}: {e}");
            failed.push((seed, e));
        }
        *streams += self.streams;
    }
}

/// The end of a seeded scenario test: what ran, and a panic naming the
/// failed seeds (rerun one with `seed_var`=N) and every failure.
pub fn assert_scenarios(seeds: usize, streams: usize, failed: &[(u64, String)], seed_var: &str) {
    eprintln!("{seeds} seeded scenarios, {streams} streams received");
    assert!(
        failed.is_empty(),
        "{} of {seeds} scenarios failed (rerun one with {seed_var}=N): seeds {:?}\n{}",
        failed.len(),
        {
            let mut v: Vec<u64> = failed.iter().map(|f| f.0).collect();
            v.dedup();
            v
        },
        failed
            .iter()
            .map(|(s, e)| format!("seed {s}: {e}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A sparse image file with a new btrfs.
pub fn mkfs(img: &Path, size: &str, opts: &[&str]) {
    let _ = std::fs::remove_file(img);
    run(Command::new("truncate").args(["-s", size]).arg(img)).unwrap_or_else(|e| panic!("{e}"));
    run(Command::new("mkfs.btrfs")
        .args(["-q", "-f"])
        .args(opts)
        .arg(img))
    .unwrap_or_else(|e| panic!("{e}"));
}

/// The kernel's `btrfs send` of the mounted snapshot `snap` into `out`.
pub fn kernel_send(snap: &Path, args: &[&str], out: &Path) -> Result<(), String> {
    run(Command::new("btrfs")
        .args(["send", "-q"])
        .args(args)
        .arg("-f")
        .arg(out)
        .arg(snap))
    .map(|_| ())
}

/// `ubtrfs send IMAGE... ARGS... SNAP -f OUT`.
pub fn ubtrfs_send(
    image_args: &[String],
    args: &[&str],
    snap: &str,
    out: &Path,
) -> Result<(), String> {
    run(Command::new(ubtrfs_bin())
        .arg("send")
        .args(image_args)
        .args(args)
        .arg("-f")
        .arg(out)
        .arg(snap))
    .map(|_| ())
}

pub fn receive(stream: &Path, dest: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dest).map_err(|e| e.to_string())?;
    run(Command::new("btrfs")
        .args(["receive", "-q", "-f"])
        .arg(stream)
        .arg(dest))
    .map(|_| ())
}

/// `btrfs receive --dump`: parses the whole stream without a filesystem.
pub fn receive_dump(stream: &Path) -> Result<String, String> {
    run(Command::new("btrfs")
        .args(["receive", "--dump", "-f"])
        .arg(stream))
    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
}

// ---------------------------------------------------------------- streams

/// One command of a send stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmd {
    pub cmd: u16,
    pub attrs: Vec<(u16, Vec<u8>)>,
}

impl Cmd {
    pub fn attr(&self, t: u16) -> Option<&[u8]> {
        self.attrs
            .iter()
            .find(|(a, _)| *a == t)
            .map(|(_, v)| v.as_slice())
    }
    pub fn u64(&self, t: u16) -> u64 {
        self.attr(t)
            .filter(|v| v.len() == 8)
            .map(|v| u64::from_le_bytes(v.try_into().unwrap()))
            .unwrap_or(0)
    }
}

pub const C_WRITE: u16 = 15;
pub const C_CLONE: u16 = 16;
pub const C_UPDATE_EXTENT: u16 = 22;
pub const C_ENCODED_WRITE: u16 = 25;
pub const A_PATH: u16 = 15;
pub const A_FILE_OFFSET: u16 = 18;
pub const A_DATA: u16 = 19;
pub const A_SIZE: u16 = 4;
pub const A_CLONE_LEN: u16 = 24;
pub const A_UNENCODED_FILE_LEN: u16 = 27;

fn crc32c_raw(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Parses a stream (one or more concatenated subvolumes), checking the
/// magic, every command's length and crc32c.
pub fn parse_stream(b: &[u8]) -> Result<(u32, Vec<Cmd>), String> {
    if b.len() < 17 || &b[..13] != b"btrfs-stream\0" {
        return Err("no stream header".into());
    }
    let version = u32::from_le_bytes(b[13..17].try_into().unwrap());
    let mut p = 17;
    let mut cmds = Vec::new();
    while p < b.len() {
        if p + 10 > b.len() {
            return Err(format!("truncated command header at {p}"));
        }
        let len = u32::from_le_bytes(b[p..p + 4].try_into().unwrap()) as usize;
        let cmd = u16::from_le_bytes(b[p + 4..p + 6].try_into().unwrap());
        let crc = u32::from_le_bytes(b[p + 6..p + 10].try_into().unwrap());
        if p + 10 + len > b.len() {
            return Err(format!("command {cmd} at {p} runs past the end"));
        }
        let mut hdr = b[p..p + 10].to_vec();
        hdr[6..10].fill(0);
        let c = crc32c_raw(crc32c_raw(0, &hdr), &b[p + 10..p + 10 + len]);
        if c != crc {
            return Err(format!(
                "command {cmd} at {p}: crc {crc:#x}, computed {c:#x}"
            ));
        }
        let body = &b[p + 10..p + 10 + len];
        let mut q = 0;
        let mut attrs = Vec::new();
        while q < body.len() {
            if q + 2 > body.len() {
                return Err(format!("truncated attribute in command {cmd} at {p}"));
            }
            let t = u16::from_le_bytes(body[q..q + 2].try_into().unwrap());
            q += 2;
            if version >= 2 && t == A_DATA {
                attrs.push((t, body[q..].to_vec()));
                q = body.len();
                continue;
            }
            if q + 2 > body.len() {
                return Err(format!("truncated attribute in command {cmd} at {p}"));
            }
            let l = u16::from_le_bytes(body[q..q + 2].try_into().unwrap()) as usize;
            q += 2;
            if q + l > body.len() {
                return Err(format!(
                    "attribute {t} of command {cmd} at {p} runs past the command"
                ));
            }
            attrs.push((t, body[q..q + l].to_vec()));
            q += l;
        }
        cmds.push(Cmd { cmd, attrs });
        p += 10 + len;
    }
    Ok((version, cmds))
}

fn render(c: &Cmd) -> String {
    let mut s = format!("{}", c.cmd);
    for (t, v) in &c.attrs {
        s.push_str(&format!(
            " {t}={}",
            v.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ));
    }
    s
}

fn data_ranges(cmds: &[Cmd]) -> BTreeMap<Vec<u8>, Vec<(u64, u64)>> {
    let mut m: BTreeMap<Vec<u8>, Vec<(u64, u64)>> = BTreeMap::new();
    for c in cmds {
        let len = match c.cmd {
            C_WRITE => c.attr(A_DATA).map(|d| d.len() as u64).unwrap_or(0),
            C_CLONE => c.u64(A_CLONE_LEN),
            C_ENCODED_WRITE => c.u64(A_UNENCODED_FILE_LEN),
            C_UPDATE_EXTENT => c.u64(A_SIZE),
            _ => continue,
        };
        let off = c.u64(A_FILE_OFFSET);
        m.entry(c.attr(A_PATH).unwrap_or_default().to_vec())
            .or_default()
            .push((off, off + len));
    }
    for v in m.values_mut() {
        v.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for &(a, b) in v.iter() {
            match merged.last_mut() {
                Some(l) if a <= l.1 => l.1 = l.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        *v = merged;
    }
    m
}

/// How a stream of ours compares with the kernel's for the same snapshot.
#[derive(Debug, Default)]
pub struct StreamMatch {
    /// Byte for byte the same.
    pub identical: bool,
    /// Commands whose data differs in kind only (a clone where the kernel
    /// wrote, or the reverse).
    pub clone_vs_write: usize,
}

/// Compares two streams of the same snapshot: the same commands apart
/// from order, and the same data ranges per file (a range written by one
/// may be cloned by the other).
pub fn compare_streams(kernel: &[u8], ours: &[u8]) -> Result<StreamMatch, String> {
    if kernel == ours {
        return Ok(StreamMatch {
            identical: true,
            clone_vs_write: 0,
        });
    }
    let (kv, k) = parse_stream(kernel).map_err(|e| format!("kernel stream: {e}"))?;
    let (ov, o) = parse_stream(ours).map_err(|e| format!("our stream: {e}"))?;
    if kv != ov {
        return Err(format!("stream versions {kv} (kernel) and {ov} (ours)"));
    }
    let is_data = |c: &Cmd| matches!(c.cmd, C_WRITE | C_CLONE | C_ENCODED_WRITE | C_UPDATE_EXTENT);
    let mut km: Vec<String> = k.iter().filter(|c| !is_data(c)).map(render).collect();
    let mut om: Vec<String> = o.iter().filter(|c| !is_data(c)).map(render).collect();
    km.sort();
    om.sort();
    let mut problems = Vec::new();
    if km != om {
        let only_k: Vec<&String> = km.iter().filter(|x| !om.contains(x)).take(5).collect();
        let only_o: Vec<&String> = om.iter().filter(|x| !km.contains(x)).take(5).collect();
        problems.push(format!(
            "metadata commands differ: {} kernel, {} ours; only kernel: {only_k:?}; only ours: {only_o:?}",
            km.len(),
            om.len()
        ));
    }
    let kd = data_ranges(&k);
    let od = data_ranges(&o);
    if kd != od {
        for (p, r) in &kd {
            if od.get(p) != Some(r) {
                problems.push(format!(
                    "data ranges of {}: kernel {r:?}, ours {:?}",
                    String::from_utf8_lossy(p),
                    od.get(p)
                ));
            }
        }
        for p in od.keys().filter(|p| !kd.contains_key(*p)) {
            problems.push(format!(
                "data for {} only in ours",
                String::from_utf8_lossy(p)
            ));
        }
    }
    if !problems.is_empty() {
        problems.truncate(10);
        return Err(problems.join("\n  "));
    }
    let kc: Vec<String> = k.iter().filter(|c| is_data(c)).map(render).collect();
    let oc: Vec<String> = o.iter().filter(|c| is_data(c)).map(render).collect();
    let diff = kc.iter().filter(|x| !oc.contains(x)).count();
    Ok(StreamMatch {
        identical: false,
        clone_vs_write: diff,
    })
}
