//! The seeded workload: the files and directories it made, with their
//! model contents, one method per operation, and the durable states each
//! fsync or commit left.

use super::*;

/// A file of the workload.
pub(super) struct File {
    pub(super) id: InodeId,
    pub(super) path: String,
    pub(super) data: Vec<u8>,
    pub(super) xattrs: Xattrs,
    /// Renamed, linked or unlinked: a scratch file, never fsynced after.
    pub(super) scratch: bool,
}

pub(super) fn fill(rng: &mut Rng, len: usize) -> Vec<u8> {
    let seed = rng.next() | 1;
    (0..len)
        .map(|i| (seed.wrapping_mul(i as u64 / 7 + 1) >> 31) as u8)
        .collect()
}

/// The workload's state, carried from the unrecorded part to the
/// recorded one.
pub(super) struct World {
    pub(super) rng: Rng,
    pub(super) files: Vec<File>,
    pub(super) dirs: Vec<(InodeId, String)>,
    pub(super) log: Vec<String>,
    pub(super) n: u32,
    /// Durable states, each with the device events recorded when the
    /// fsync or commit that made it returned.
    pub(super) states: Vec<(usize, Durable)>,
    /// What the last fsync or commit made durable (set from every file
    /// when a part of the workload begins).
    pub(super) durable: Durable,
    /// While an fsync or commit runs: the states it may leave on disk if
    /// it fails half way.
    pub(super) attempt: Vec<Durable>,
    /// fsyncs of two files that shared one log sync.
    pub(super) grouped: u64,
    /// Log syncs whose superblock was written while another file changed.
    pub(super) in_flight: u64,
}

/// fsyncs logged while a log sync was in flight (every seed's).
pub(super) static PIPELINED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Every file's content and xattrs: what a commit makes durable.
pub(super) fn durable_all(files: &[File]) -> Durable {
    files.iter().map(note).collect()
}

/// A file's entry in a durable state.
pub(super) fn note(f: &File) -> (String, (Vec<u8>, Xattrs)) {
    (f.path.clone(), (f.data.clone(), f.xattrs.clone()))
}

/// Runs `steps` seeded operations, noting each in `w.log` and every
/// durable state in `w.states` with the number of device events
/// recorded when the call that made it returned.
pub(super) fn workload(
    fs: &mut RwFs,
    rec: &RecordDev,
    w: &mut World,
    steps: usize,
) -> Result<(), String> {
    w.durable = durable_all(&w.files);
    for step in 0..steps {
        let pick = w.rng.below(100);
        let live: Vec<usize> = (0..w.files.len())
            .filter(|&i| !w.files[i].scratch)
            .collect();
        let what = if pick < 12 || live.is_empty() {
            w.create(fs)?
        } else {
            let fi = if pick < 80 {
                live[w.rng.below(live.len() as u64) as usize]
            } else {
                w.rng.below(w.files.len() as u64) as usize
            };
            match pick {
                40..=42 => w.setxattr(fs, fi)?,
                43..=44 => match w.removexattr(fs, fi)? {
                    Some(what) => what,
                    None => continue,
                },
                12..=39 => w.write(fs, fi)?,
                45..=50 => w.truncate(fs, fi)?,
                51..=58 => w.fallocate(fs, fi)?,
                59..=84 => w.fsync(fs, rec, fi)?,
                85..=87 => w.commit(fs, rec)?,
                88..=92 => w.rename(fs, fi)?,
                93..=95 => w.link(fs, fi)?,
                _ => w.unlink(fs, fi)?,
            }
        };
        w.log.push(format!("{step}: {what}"));
    }
    Ok(())
}

/// One method per operation of the workload: each draws what it needs
/// from the seed, makes the call, follows it in the model, and returns
/// what it did, for the log.
impl World {
    /// A new file, sometimes in a new (nested) directory.
    fn create(&mut self, fs: &mut RwFs) -> Result<String, String> {
        let mut di = self.rng.below(self.dirs.len() as u64) as usize;
        if self.rng.below(3) == 0 {
            let dir = self.make(fs, di, 'd', 0o040755)?;
            self.dirs.push(dir);
            di = self.dirs.len() - 1;
        }
        let (id, path) = self.make(fs, di, 'f', 0o100644)?;
        let what = format!("create {path}");
        self.files.push(File {
            id,
            path,
            data: Vec::new(),
            xattrs: Xattrs::new(),
            scratch: false,
        });
        Ok(what)
    }

    /// A new inode of `mode` in directory `di`, named `prefix` and the
    /// next number: its id and path.
    fn make(
        &mut self,
        fs: &mut RwFs,
        di: usize,
        prefix: char,
        mode: u32,
    ) -> Result<(InodeId, String), String> {
        self.n += 1;
        let name = format!("{prefix}{}", self.n);
        let (pid, ppath) = self.dirs[di].clone();
        let id = fs
            .create(pid, name.as_bytes(), mode, 0, (0, 0), None)
            .map_err(|e| format!("create {ppath}/{name}: {e}"))?;
        Ok((id, format!("{ppath}/{name}")))
    }

    fn setxattr(&mut self, fs: &mut RwFs, fi: usize) -> Result<String, String> {
        let name = format!("user.x{}", self.rng.below(4)).into_bytes();
        let len = self.rng.below(200) as usize;
        let value = fill(&mut self.rng, len);
        let f = &mut self.files[fi];
        let what = format!("setxattr {} {}", f.path, String::from_utf8_lossy(&name));
        fs.setxattr(f.id, &name, &value, 0, false)
            .map_err(|e| format!("{what}: {e}"))?;
        f.xattrs.insert(name, value);
        Ok(what)
    }

    /// None when the file has no xattr to remove.
    fn removexattr(&mut self, fs: &mut RwFs, fi: usize) -> Result<Option<String>, String> {
        let f = &mut self.files[fi];
        let Some(name) = f.xattrs.keys().next().cloned() else {
            return Ok(None);
        };
        let what = format!("removexattr {} {}", f.path, String::from_utf8_lossy(&name));
        fs.removexattr(f.id, &name)
            .map_err(|e| format!("{what}: {e}"))?;
        f.xattrs.remove(&name);
        Ok(Some(what))
    }

    /// An append, an overwrite at a sector, or a write anywhere up to
    /// three sectors past the end.
    fn write(&mut self, fs: &mut RwFs, fi: usize) -> Result<String, String> {
        let size = self.files[fi].data.len() as u64;
        let rng = &mut self.rng;
        let off = match rng.below(3) {
            0 => size,
            1 => rng.below(size + 1) / SS * SS,
            _ => rng.below(size + 3 * SS),
        };
        let max = [3 * SS, 40 * SS][rng.below(2) as usize];
        let len = 1 + rng.below(max) as usize;
        let d = fill(rng, len);
        let f = &mut self.files[fi];
        let what = format!("write {} at {off} len {len}", f.path);
        fs.write(f.id, off, &d)
            .map_err(|e| format!("{what}: {e}"))?;
        model_write(&mut f.data, off, &d);
        Ok(what)
    }

    fn truncate(&mut self, fs: &mut RwFs, fi: usize) -> Result<String, String> {
        let f = &mut self.files[fi];
        let to = self.rng.below(f.data.len() as u64 + 2 * SS);
        let what = format!("truncate {} to {to}", f.path);
        let a = SetAttr {
            size: Some(to),
            ..Default::default()
        };
        fs.setattr(f.id, &a).map_err(|e| format!("{what}: {e}"))?;
        f.data.resize(to as usize, 0);
        Ok(what)
    }

    /// A punch (keeping the size), a zero range, or a preallocation
    /// (past the end, or not).
    fn fallocate(&mut self, fs: &mut RwFs, fi: usize) -> Result<String, String> {
        let f = &mut self.files[fi];
        let off = self.rng.below(f.data.len() as u64 + SS);
        let len = 1 + self.rng.below(12 * SS);
        let mode = [3, 0x10, 1, 0][self.rng.below(4) as usize];
        let what = format!("fallocate {} at {off} len {len} mode {mode:#x}", f.path);
        fs.fallocate(f.id, off, len, mode)
            .map_err(|e| format!("{what}: {e}"))?;
        model_fallocate(&mut f.data, off, len, mode);
        Ok(what)
    }

    /// An fsync of the file; now and then of two files, whose fsyncs
    /// share one log sync, as the mount groups concurrent fsyncs.
    fn fsync(&mut self, fs: &mut RwFs, rec: &RecordDev, fi: usize) -> Result<String, String> {
        let gi = self.rng.below(self.files.len() as u64) as usize;
        let group: Vec<usize> = if gi != fi && self.rng.below(4) == 0 {
            vec![fi, gi]
        } else {
            vec![fi]
        };
        let paths: Vec<&str> = group.iter().map(|&i| self.files[i].path.as_str()).collect();
        let what = format!("fsync {}", paths.join(" + "));
        let (commits, batched) = (fs.stats.fsync_commits, fs.stats.fsync_batched);
        let mut one = self.durable.clone();
        self.attempt = vec![durable_all(&self.files)];
        for &i in &group {
            one.extend([note(&self.files[i])]);
            self.attempt.push(one.clone());
        }
        let seqs = self.log_group(fs, &group, &mut one, &what)?;
        // The last logged syncs for all; the others find their files
        // durable. Now and then that sync is made as the mount makes it.
        for (j, &n) in seqs.iter().rev().enumerate() {
            if j > 0 || self.rng.below(3) != 0 {
                fs.fsync_sync(n).map_err(|e| format!("{what}: {e}"))?;
                continue;
            }
            self.sync_while_writing(fs, rec, n, &mut one, &what)?;
        }
        if seqs.len() == 2 && fs.stats.fsync_commits == commits {
            if fs.stats.fsync_batched == batched {
                return Err(format!("{what}: the group was synced twice"));
            }
            self.grouped += 1;
        }
        self.attempt.clear();
        // Renamed files' fsyncs commit; their names are not followed by
        // the model.
        if group.iter().any(|&i| self.files[i].scratch) && fs.stats.fsync_commits == commits {
            return Err(format!("{what}: a renamed file was logged"));
        }
        if fs.stats.fsync_commits != commits {
            self.durable = durable_all(&self.files);
            self.files.iter_mut().for_each(|f| f.scratch = false);
        } else {
            self.durable = one;
        }
        self.states
            .push((rec.log().events.len(), self.durable.clone()));
        Ok(what)
    }

    /// Logs each file of an fsync's group, returning the log syncs to
    /// make. Now and then, between the two, as other requests run while
    /// a grouped fsync waits: the first file punched (the extents its log
    /// points to freed) and the second written (new extents, maybe where
    /// those were).
    fn log_group(
        &mut self,
        fs: &mut RwFs,
        group: &[usize],
        one: &mut Durable,
        what: &str,
    ) -> Result<Vec<u64>, String> {
        let commits = fs.stats.fsync_commits;
        let mut seqs = Vec::new();
        let between = group.len() == 2 && self.rng.below(2) == 0;
        for (k, &i) in group.iter().enumerate() {
            if k == 1 && between && seqs.len() == 1 && fs.stats.fsync_commits == commits {
                let (a, b) = (group[0], group[1]);
                let len = self.files[a].data.len() as u64;
                if len > 0 {
                    fs.fallocate(self.files[a].id, 0, len, 3)
                        .map_err(|e| format!("{what}: punch between: {e}"))?;
                    self.files[a].data.fill(0);
                }
                let n_add = (1 + self.rng.below(8) * SS) as usize;
                let add = fill(&mut self.rng, n_add);
                let at = self.files[b].data.len() as u64;
                fs.write(self.files[b].id, at, &add)
                    .map_err(|e| format!("{what}: write between: {e}"))?;
                self.files[b].data.extend_from_slice(&add);
                one.extend([note(&self.files[b])]);
                self.attempt.push(one.clone());
                self.attempt.push(durable_all(&self.files));
            }
            match fs
                .fsync_log(self.files[i].id)
                .map_err(|e| format!("{what}: {e}"))?
            {
                FsyncStage::Logged(n) => seqs.push(n),
                FsyncStage::Durable => {}
                FsyncStage::Commit(why) => {
                    return Err(format!(
                        "{what}: a commit left to the caller with no log sync in flight ({why})"
                    ))
                }
            }
        }
        Ok(seqs)
    }

    /// Log sync `n` made as the mount makes it: its superblock written
    /// without the lock, while another file changes in between (written
    /// back, or fsynced into the log the next sync writes), which this
    /// log must not see.
    fn sync_while_writing(
        &mut self,
        fs: &mut RwFs,
        rec: &RecordDev,
        n: u64,
        one: &mut Durable,
        what: &str,
    ) -> Result<(), String> {
        let sync = match fs.fsync_sync_begin(n).map_err(|e| format!("{what}: {e}"))? {
            SyncStep::Done => return Ok(()),
            SyncStep::Write(sync) => sync,
        };
        let k = self.rng.below(self.files.len() as u64) as usize;
        let at = self.rng.below(self.files[k].data.len() as u64 + SS);
        let len = 1 + self.rng.below(3 * SS) as usize;
        let d = fill(&mut self.rng, len);
        fs.write(self.files[k].id, at, &d)
            .map_err(|e| format!("{what}: write during the log sync: {e}"))?;
        model_write(&mut self.files[k].data, at, &d);
        let mut next = None;
        if self.rng.below(2) == 0 {
            fs.writeback(self.files[k].id)
                .map_err(|e| format!("{what}: writeback during the log sync: {e}"))?;
        } else {
            next = Some(
                fs.fsync_log(self.files[k].id)
                    .map_err(|e| format!("{what}: fsync_log during the log sync: {e}"))?,
            );
            PIPELINED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if fs.commit().is_ok() {
            return Err(format!("{what}: a commit ran during a log sync"));
        }
        // A failed log write commits instead: everything.
        self.attempt.push(durable_all(&self.files));
        self.in_flight += 1;
        let res = sync.write();
        let ended = match fs.fsync_sync_end(sync, res) {
            Ok(()) => one.clone(),
            Err(why) => {
                fs.fsync_fallback(why).map_err(|e| format!("{what}: {e}"))?;
                durable_all(&self.files)
            }
        };
        if next.is_some() {
            // Another sync follows: a crash between the two finds this
            // one's state.
            self.states.push((rec.log().events.len(), ended));
        }
        match next {
            Some(FsyncStage::Logged(n2)) => {
                // The next sync: the group's files and this one's new
                // bytes.
                one.extend([note(&self.files[k])]);
                self.attempt.push(one.clone());
                fs.fsync_sync(n2).map_err(|e| format!("{what}: {e}"))?;
            }
            Some(FsyncStage::Commit(why)) => {
                fs.fsync_fallback(why).map_err(|e| format!("{what}: {e}"))?;
            }
            Some(FsyncStage::Durable) | None => {}
        }
        Ok(())
    }

    fn commit(&mut self, fs: &mut RwFs, rec: &RecordDev) -> Result<String, String> {
        self.attempt = vec![durable_all(&self.files)];
        fs.commit().map_err(|e| format!("commit: {e}"))?;
        self.attempt.clear();
        self.durable = durable_all(&self.files);
        self.files.iter_mut().for_each(|f| f.scratch = false);
        self.states
            .push((rec.log().events.len(), self.durable.clone()));
        Ok("commit".into())
    }

    /// A rename into another directory (the file becomes a scratch
    /// file: the model forgets its names).
    fn rename(&mut self, fs: &mut RwFs, fi: usize) -> Result<String, String> {
        let (did, dpath) = self.dirs[self.rng.below(self.dirs.len() as u64) as usize].clone();
        self.n += 1;
        let f = &mut self.files[fi];
        let (pdir, pname) = parent_of(&self.dirs, &f.path);
        let name = format!("r{}", self.n);
        let what = format!("rename {} to {dpath}/{name}", f.path);
        fs.rename(pdir, pname.as_bytes(), did, name.as_bytes(), 0, (0, 0))
            .map_err(|e| format!("{what}: {e}"))?;
        f.path = format!("{dpath}/{name}");
        f.scratch = true;
        Ok(what)
    }

    /// A second name, made and removed (the file becomes a scratch
    /// file).
    fn link(&mut self, fs: &mut RwFs, fi: usize) -> Result<String, String> {
        let f = &mut self.files[fi];
        let (pdir, _) = parent_of(&self.dirs, &f.path);
        self.n += 1;
        let name = format!("l{}", self.n);
        let what = format!("link {} as {name}", f.path);
        fs.link(f.id, pdir, name.as_bytes())
            .map_err(|e| format!("{what}: {e}"))?;
        fs.unlink(pdir, name.as_bytes())
            .map_err(|e| format!("{what}: unlink: {e}"))?;
        f.scratch = true;
        Ok(what)
    }

    fn unlink(&mut self, fs: &mut RwFs, fi: usize) -> Result<String, String> {
        let (pdir, pname) = parent_of(&self.dirs, &self.files[fi].path);
        let what = format!("unlink {}", self.files[fi].path);
        fs.unlink(pdir, pname.as_bytes())
            .map_err(|e| format!("{what}: {e}"))?;
        self.files.remove(fi);
        Ok(what)
    }
}

/// The directory and name of `path`.
pub(super) fn parent_of(dirs: &[(InodeId, String)], path: &str) -> (InodeId, String) {
    let (p, name) = path.rsplit_once('/').unwrap();
    let d = dirs.iter().find(|(_, dp)| dp == p).unwrap().0;
    (d, name.to_string())
}
