//! File data changes (inode/file.rs: writes, truncate, punch, prealloc,
//! clone; inode/namei.rs: links and unlinks) against a model: seeded
//! sequences on a few files of an in-memory image, every file read back
//! after every operation equal to its model (a byte vector), then the
//! image checked by btrfs-progs' `btrfs check --readonly` (data extent
//! references, nbytes, csums, holes) after each commit and at the end,
//! with and without no-holes.
//!
//! UBTRFS_FILE_MODEL_SEEDS=N (default 40), UBTRFS_FILE_MODEL_SEED=S;
//! UBTRFS_FILE_MODEL_KEEP=PATH keeps the image a check failed on.

use std::sync::Arc;
use ubtrfs_engine::inode::file::DataPolicy;
use ubtrfs_engine::io::dev::MemDev;
use ubtrfs_engine::mkfs::{make, MkfsOptions};
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::consts::*;
use ubtrfs_format::items::{InodeItem, Timespec};

const SS: u64 = 4096;
const FILES: usize = 3;

mod memcheck;
use memcheck::{model_fallocate, model_write, offset, pattern, write_len, Rng};

/// fallocate(2)'s PUNCH_HOLE | KEEP_SIZE, as the model sees a punch.
const FALLOC_PUNCH_KEEP: i32 = 3;

const TREE: u64 = FS_TREE_OBJECTID;
const TIME: Timespec = Timespec { sec: 1, nsec: 0 };

/// A seed's in-memory image, its files, and each file's model.
struct Files {
    t: Trans,
    dev: Arc<MemDev>,
    inos: Vec<u64>,
    model: Vec<Vec<u8>>,
}

impl Files {
    /// [`FILES`] empty files in the top directory of a fresh image.
    fn new(seed: u64, no_holes: bool) -> Result<Files, String> {
        let dev = Arc::new(MemDev::new(160 << 20));
        let opts = MkfsOptions {
            nodesize: [4096, 16384][seed as usize % 2],
            fsid: Some([0x24; 16]),
            no_holes,
            ..Default::default()
        };
        let mut t: Trans =
            make(vec![("mem".into(), dev.clone())], &opts).map_err(|e| e.to_string())?;
        let mut inos = Vec::new();
        for i in 0..FILES {
            let ino = 257 + i as u64;
            let name = format!("f{i}");
            t.inode_mut(TREE, 256)
                .create_inode(name.as_bytes(), ino, 0o100644, 0, (0, 0), TIME)
                .map_err(|e| e.to_string())?;
            inos.push(ino);
        }
        Ok(Files {
            t,
            dev,
            inos,
            model: vec![Vec::new(); FILES],
        })
    }

    /// One seeded change of file `f` made in the model and on the image:
    /// what it was, and the inode it left (to be stored). None when the
    /// draw makes no change (a clone with nothing to clone).
    fn change(
        &mut self,
        rng: &mut Rng,
        f: usize,
        op: u64,
        policy: DataPolicy,
    ) -> Option<(String, ubtrfs_engine::Result<InodeItem>)> {
        let ino = self.inos[f];
        let size = self.model[f].len() as u64;
        let done = match op {
            0..=4 => {
                let off = offset(rng, size);
                let len = write_len(rng, 3000, 300_000);
                let data = pattern(rng, len, false);
                model_write(&mut self.model[f], off, &data);
                let what = format!("write f{f} at {off} len {len} {policy:?}");
                (
                    what,
                    self.t.inode_mut(TREE, ino).write_file(off, &data, policy),
                )
            }
            5 | 6 => {
                let n = offset(rng, size);
                self.model[f].resize(n as usize, 0);
                let what = format!("truncate f{f} to {n}");
                (what, self.t.inode_mut(TREE, ino).truncate_file(n, policy))
            }
            7 => {
                let off = offset(rng, size);
                let len = 1 + rng.below(size.max(SS));
                model_fallocate(&mut self.model[f], off, len, FALLOC_PUNCH_KEEP);
                let what = format!("punch f{f} at {off} len {len}");
                (
                    what,
                    self.t.inode_mut(TREE, ino).punch_hole(off, len, policy),
                )
            }
            8 => {
                let off = offset(rng, size);
                let len = 1 + rng.below(6 * SS);
                let keep = rng.below(2) == 0;
                model_fallocate(&mut self.model[f], off, len, i32::from(keep));
                let what = format!("prealloc f{f} at {off} len {len} keep {keep}");
                (
                    what,
                    self.t.inode_mut(TREE, ino).prealloc(off, len, keep, policy),
                )
            }
            _ => return self.clone_into(rng, f, policy),
        };
        Some(done)
    }

    /// A clone of a seeded range of a file into `f`, where the kernel
    /// allows one: aligned, not overlapping itself, ending at EOF if not
    /// whole sectors.
    fn clone_into(
        &mut self,
        rng: &mut Rng,
        f: usize,
        policy: DataPolicy,
    ) -> Option<(String, ubtrfs_engine::Result<InodeItem>)> {
        let size = self.model[f].len() as u64;
        let g = rng.below(FILES as u64) as usize;
        let gsize = self.model[g].len() as u64;
        if gsize == 0 {
            return None;
        }
        let src_off = rng.below(gsize) / SS * SS;
        let to_end = rng.below(2) == 0;
        let len = if to_end {
            gsize - src_off
        } else {
            ((1 + rng.below(8)) * SS).min((gsize - src_off) / SS * SS)
        };
        let dst_off = rng.below(size + 2 * SS) / SS * SS;
        if len == 0
            || (g == f
                && src_off < dst_off + len.next_multiple_of(SS)
                && dst_off < src_off + len.next_multiple_of(SS))
            || (len % SS != 0 && dst_off + len < size)
        {
            return None;
        }
        let piece = self.model[g][src_off as usize..(src_off + len) as usize].to_vec();
        model_write(&mut self.model[f], dst_off, &piece);
        let what = format!("clone f{g} {src_off}+{len} to f{f} at {dst_off}");
        let (src, dst) = (self.inos[g], self.inos[f]);
        let res = self
            .t
            .clone_range(TREE, src, src_off, len, TREE, dst, dst_off, policy);
        Some((what, res))
    }

    /// Every file reads as its model; Err says where the first one
    /// differs.
    fn reads_match(&mut self) -> Result<(), String> {
        for (i, &n) in self.inos.iter().enumerate() {
            let ii = self.t.inode(TREE, n).map_err(|e| e.to_string())?.unwrap();
            let got = self
                .t
                .read_file(TREE, n, 0, ii.size)
                .map_err(|e| format!("read f{i}: {e}"))?;
            let model = &self.model[i];
            if ii.size != model.len() as u64 || got != *model {
                let at = got.iter().zip(model).position(|(a, b)| a != b);
                return Err(format!(
                    "f{i} size {} (model {}), first difference at {at:?}",
                    ii.size,
                    model.len(),
                ));
            }
        }
        Ok(())
    }
}

fn run_seed(seed: u64, no_holes: bool, check: bool) -> Result<usize, String> {
    let mut rng = Rng::new(seed);
    let mut files = Files::new(seed, no_holes)?;
    let steps = 30 + rng.below(40) as usize;
    let mut log = Vec::new();
    // btrfs check after the first commit and at the end.
    let mut checked_mid = false;
    for step in 0..steps {
        let f = rng.below(FILES as u64) as usize;
        let policy = DataPolicy {
            csum: true,
            compress: (rng.below(4) == 0).then_some((COMPRESS_ZSTD, 1)),
            // Every piece tried, whatever the kernel's heuristic says.
            force: true,
        };
        let op = rng.below(12);
        if op == 11 {
            log.push("commit".to_string());
            files
                .t
                .commit()
                .map_err(|e| format!("step {step} commit: {e}"))?;
            if check && !checked_mid {
                let after = format!("seed {seed} step {step}\n{}", log.join("\n"));
                memcheck::btrfs_check(&files.dev, "file_model")
                    .map_err(|e| format!("{e}\nafter {after}"))?;
                checked_mid = true;
            }
            continue;
        }
        let Some((what, inode)) = files.change(&mut rng, f, op, policy) else {
            continue;
        };
        log.push(what.clone());
        let inode = inode.map_err(|e| format!("seed {seed} step {step} {what}: {e}"))?;
        files
            .t
            .inode_mut(TREE, files.inos[f])
            .put(&inode)
            .map_err(|e| e.to_string())?;
        files.reads_match().map_err(|e| {
            format!(
                "seed {seed} step {step} after {what}: {e}\n{}",
                log.join("\n")
            )
        })?;
    }
    // Unlink one file, keep a hard link of another.
    let (t, inos) = (&mut files.t, &files.inos);
    t.link(TREE, inos[1], 256, b"f1-link", TIME)
        .map_err(|e| e.to_string())?;
    t.inode_mut(TREE, 256)
        .unlink(b"f0", TIME)
        .map_err(|e| e.to_string())?;
    t.inode_mut(TREE, 256)
        .unlink(b"f1", TIME)
        .map_err(|e| e.to_string())?;
    t.commit().map_err(|e| e.to_string())?;
    if check {
        memcheck::btrfs_check(&files.dev, "file_model")
            .map_err(|e| format!("{e}\nafter seed {seed} end\n{}", log.join("\n")))?;
    }
    Ok(steps)
}

#[test]
fn file_changes_match_the_model_and_btrfs_check() {
    let check = memcheck::btrfs_available("file_model");
    let seeds = memcheck::seeds(
        "UBTRFS_FILE_MODEL_SEED",
        Some("UBTRFS_FILE_MODEL_SEEDS"),
        40,
    );
    let mut failures = Vec::new();
    let mut steps = 0;
    for &seed in &seeds {
        for no_holes in [true, false] {
            match run_seed(seed, no_holes, check) {
                Ok(n) => steps += n,
                Err(e) => failures.push(format!("no_holes={no_holes}: {e}")),
            }
        }
    }
    eprintln!("{} seeds, {steps} operations", seeds.len());
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// A full filesystem is ENOSPC, and the file stays as it was: a write into
/// part of a sector, a hole punched in part of one, a preallocation and a
/// truncate to inside a sector all need new data space, which they take
/// before dropping anything (a
/// sector dropped before the space for its new copy was found read back
/// as a hole, and nbytes still counted it: btrfs check's "nbytes wrong",
/// seen on fstests generic/269 through the mount). The image checks clean
/// after a commit.
#[test]
fn full_filesystem_leaves_files_as_they_were() {
    let dev = Arc::new(MemDev::new(160 << 20));
    // Seed 0: nodesize 4096, no-holes.
    let mut t = memcheck::seeded_mkfs(dev.clone(), 0, 0x25, 1).unwrap();
    let (tree, time) = (FS_TREE_OBJECTID, Timespec { sec: 1, nsec: 0 });
    let policy = DataPolicy {
        csum: true,
        ..Default::default()
    };
    for (ino, name) in [(257, "f"), (258, "filler")] {
        t.inode_mut(tree, 256)
            .create_inode(name.as_bytes(), ino, 0o100644, 0, (0, 0), time)
            .unwrap();
    }
    let bytes = |len: usize, seed: u64| -> Vec<u8> {
        let mut r = Rng::new(seed);
        (0..len).map(|_| r.below(256) as u8).collect()
    };
    let data = bytes(3 * SS as usize, 7);
    let i = t.inode_mut(tree, 257).write_file(0, &data, policy).unwrap();
    t.inode_mut(tree, 257).put(&i).unwrap();
    t.commit().unwrap();
    // Every byte of data space taken, down to the last sector.
    let (mut at, mut step) = (0u64, 8usize << 20);
    while step >= SS as usize {
        match t
            .inode_mut(tree, 258)
            .write_file(at, &bytes(step, at), policy)
        {
            Ok(i) => {
                t.inode_mut(tree, 258).put(&i).unwrap();
                at += step as u64;
            }
            Err(ubtrfs_engine::Error::NoSpace(_)) => step /= 2,
            Err(e) => panic!("filling: {e}"),
        }
    }
    let before = t.inode(tree, 257).unwrap().unwrap();
    for what in ["write", "punch", "prealloc", "truncate"] {
        let res = match what {
            "write" => t.inode_mut(tree, 257).write_file(100, b"xyz", policy),
            "punch" => t.inode_mut(tree, 257).punch_hole(100, 10, policy),
            "truncate" => t.inode_mut(tree, 257).truncate_file(SS + 100, policy),
            _ => t
                .inode_mut(tree, 257)
                .prealloc(3 * SS, 4 * SS, true, policy),
        };
        match res {
            Err(ubtrfs_engine::Error::NoSpace(_)) => {}
            other => panic!("{what} on a full filesystem: {other:?}"),
        }
        assert!(
            t.read_file(tree, 257, 0, 3 * SS).unwrap() == data,
            "{what} on a full filesystem changed the file"
        );
        assert_eq!(t.inode(tree, 257).unwrap().unwrap(), before, "{what}");
    }
    t.commit().unwrap();
    drop(t);
    ubtrfs_engine::tools::check::check_dev(dev.clone()).unwrap();
    if memcheck::btrfs_available("file_model") {
        memcheck::btrfs_check(&dev, "file_model").unwrap();
    }
}
