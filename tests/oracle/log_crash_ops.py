#!/usr/bin/env python3
"""A seeded fsync workload for crash tests, with a journal of what each
fsync made durable, and the checker of a tree after the crash.

    python3 log_crash_ops.py setup SRC --seed S --procs P --journal J
    python3 log_crash_ops.py run DIR --seed S --procs P --journal J [--ops N] [--shadow SH]
    python3 log_crash_ops.py check DIR --journal J [--shadow SH]

setup makes the starting tree in SRC (an empty host directory, to be
turned into an image with `ubtrfs mkfs -r SRC`): for each worker I,
directories pI, pI/old0, pI/old1, pI/old1/deep with files of 0 bytes to
300 KiB (some inline-sized, some sparse), files in the directory shared,
and one "base" record per file in the journal (mkfs commits them).

run forks P workers in DIR (the mounted tree); worker I touches only its
own files: those setup made for it and new ones named pI-... or below pI.
Until it has done N operations (default: until killed) it picks, from its
RNG seeded with (S, I):

  * modify a journaled file: write (tiny to 64 KiB, aligned or not,
    anywhere, past EOF leaving holes), append, truncate down or up, punch
    a hole, zero a range (with and without KEEP_SIZE), fallocate (mode 0
    and KEEP_SIZE), open with O_TRUNC; then, often, fsync or fdatasync it;
  * create a journaled file in an existing directory, in shared, or in a
    new directory (nested new directories too), write it, often fsync it;
    one in ten is made NOCOW (chattr +C while empty) and is only ever
    appended to or extended (see below);
  * scratch work, on files that are never journaled: create, write,
    rename (across directories, into directories holding journaled files,
    into shared), hard links (of scratch files and of journaled files),
    unlink, scratch directories made, renamed and removed, and fsync of
    scratch files (the mount cannot log a renamed or linked inode: fsync
    commits);
  * fsync of a directory (commits);
  * fsync of another of its journaled files; read a journaled file back
    and compare it with the model.

After every fsync/fdatasync of a journaled file, the file is read back
through the mount and compared with the model (a live check).

The journal (JSON lines, appended with O_APPEND, one write per line):

  {"t":"base","w":I,"p":PATH,"h":SHA256,"s":SIZE}   setup's content
  {"t":"state","w":I,"p":PATH,"h":SHA256,"s":SIZE}  the content the file
        WILL have after the operation about to be made (written before the
        operation, so a kill between the operation and the line loses
        nothing); the first record of a new file is its empty state
  {"t":"sync","w":I,"p":PATH,"h":SHA256,"s":SIZE,"how":"fsync"|"fdatasync"}
        written (then the journal fsynced) after fsync(2) or fdatasync(2)
        of the file returned 0
  {"t":"dir","w":I,"p":PATH}                         setup's directories
  {"t":"error","w":I,"msg":TEXT}                     a call failed

The rule check applies (the crash is a SIGKILL of the file system between
any two instants; the journal is outside it). For each path, take its last
"sync" or "base" record and the "state" records after it: after the crash
the file must exist at that path as a regular file whose content is the
synced one or one of those later states (a commit after the fsync -- the
mount's commit interval, or another fsync that commits -- may have made a
later state durable). Each operation is one request to the file system,
under its lock, so nothing in between can be durable -- but for writes
not starting on a page boundary: the kernel's FUSE sends the first,
partial page as a request of its own when that page is not cached
(fuse_fill_write_pages), so the state after that page is journaled too.
Writes are at most 64 KiB: no other split. A path with no sync or base
record (created since and never fsynced) may also be missing.
Journaled files are never renamed or unlinked, nor are the directories
above them, so their names stay.

NOCOW files are overwritten in place: after an fsync, an in-place
overwrite of synced bytes followed by a crash that replays the log shows a
mix of old and new bytes (on the kernel's btrfs too), which no state
describes. So NOCOW journaled files are only appended to or extended:
their synced bytes never change.

check reads DIR (a mount, or a tree extracted from an image) and applies
the rule to every journaled path; with --shadow it names the first
differing offset against the last synced content. Prints a JSON summary;
exit 0 when every path passes and no worker reported an error, 1
otherwise, 2 on a usage error or a crash of this script.

Importable: Journal (the rule), check_tree.
"""

import argparse
import errno
import fcntl
import hashlib
import json
import os
import random
import stat
import struct
import sys
import time
import traceback

# fallocate(2) through ctypes, shared with the rw workload generator.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rw_ops import fallocate  # noqa: E402

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602
FS_NOCOW_FL = 0x00800000

PAGE = 4096
MAX_SIZE = 768 << 10
MAX_WRITE = 64 << 10   # one FUSE write request at most: one operation
MAX_FILES = 60         # journaled files per worker in one run

def sha(data):
    return hashlib.sha256(data).hexdigest()


def read_all(path):
    with open(path, "rb") as f:
        return f.read()


def shadow_name(path):
    return path.replace("/", "%2F")


class Failure(Exception):
    pass


# ------------------------------------------------------------------ setup


def setup(src, seed, procs, journal):
    rng = random.Random("setup-%d" % seed)
    recs = []

    def content(rng):
        kind = rng.randrange(5)
        if kind == 0:
            return b""
        if kind == 1:
            return rng.randbytes(rng.randrange(1, 2000))
        if kind == 2:
            return rng.randbytes(rng.randrange(4096, 300 << 10))
        # sparse: data, a hole, data
        a = rng.randbytes(rng.randrange(1, 40 << 10))
        gap = rng.randrange(4096, 200 << 10)
        b = rng.randbytes(rng.randrange(1, 40 << 10))
        return a + bytes(gap) + b

    def put(rel, data, w):
        p = os.path.join(src, rel)
        with open(p, "wb") as f:
            # Holes stay holes: zero runs of 4 KiB-aligned blocks are skipped.
            off = 0
            while off < len(data):
                blk = data[off:off + 4096]
                if blk.count(0) != len(blk):
                    f.seek(off)
                    f.write(blk)
                off += 4096
            f.truncate(len(data))
        recs.append({"t": "base", "w": w, "p": rel, "h": sha(data),
                     "s": len(data)})

    os.makedirs(os.path.join(src, "shared"))
    recs.append({"t": "dir", "w": -1, "p": "shared"})
    for i in range(procs):
        for d in ("p%d" % i, "p%d/old0" % i, "p%d/old1" % i,
                  "p%d/old1/deep" % i):
            os.makedirs(os.path.join(src, d))
            recs.append({"t": "dir", "w": i, "p": d})
            for n in range(rng.randrange(2, 5)):
                put("%s/base%d" % (d, n), content(rng), i)
        for n in range(2):
            put("shared/p%d-base%d" % (i, n), content(rng), i)
    with open(journal, "a") as j:
        for r in recs:
            j.write(json.dumps(r, sort_keys=True) + "\n")
    return {"files": sum(1 for r in recs if r["t"] == "base"),
            "dirs": sum(1 for r in recs if r["t"] == "dir")}


# ------------------------------------------------------------------- run


class Worker:
    def __init__(self, top, index, seed, journal, shadow):
        self.top = top
        self.i = index
        self.rng = random.Random("%d-%d" % (seed, index))
        self.jfd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                           0o644)
        self.shadow = shadow
        self.files = {}      # journaled path -> bytearray (the model)
        self.nocow = set()   # journaled NOCOW paths (append-only)
        self.dirs = []       # directories journaled files may go in
        self.scratch = {}    # scratch path -> "file" | "link"
        self.scratch_dirs = []
        self.n = 0           # names made
        self.k = 0           # operations done
        self.op = "start"
        self.counts = {}

    # -- journal
    def rec(self, t, path, data=None, how=None, durable=False):
        r = {"t": t, "w": self.i, "p": path}
        if data is not None:
            r["h"] = sha(data)
            r["s"] = len(data)
        if how:
            r["how"] = how
        os.write(self.jfd, (json.dumps(r, sort_keys=True) + "\n").encode())
        if durable:
            os.fsync(self.jfd)

    def count(self, what):
        self.counts[what] = self.counts.get(what, 0) + 1

    def abs(self, rel):
        return os.path.join(self.top, rel)

    def name(self, prefix):
        self.n += 1
        return "%s%d" % (prefix, self.n)

    def load(self, records):
        for r in records:
            if r.get("w") != self.i:
                continue
            if r["t"] == "dir":
                self.dirs.append(r["p"])
            elif r["t"] == "base":
                data = read_all(self.abs(r["p"]))
                if sha(data) != r["h"]:
                    raise Failure("%s: the mount shows %d bytes (sha256 %s), "
                                  "setup wrote %d (%s)" % (
                                      r["p"], len(data), sha(data)[:12],
                                      r["s"], r["h"][:12]))
                self.files[r["p"]] = bytearray(data)
        self.dirs.append("shared")

    # -- journaled files
    def apply(self, path, new, op, torn=()):
        """Journals `new` as the content `op` (a function of an fd) gives,
        and `torn`, the states a crash may show half way, then does it.
        EOPNOTSUPP leaves the model as it was."""
        for t in torn:
            self.rec("state", path, t)
        self.rec("state", path, new)
        fd = os.open(self.abs(path), os.O_RDWR)
        try:
            op(fd)
        except OSError as e:
            if e.errno == errno.EOPNOTSUPP:
                self.count("eopnotsupp")
                return
            raise
        finally:
            os.close(fd)
        self.files[path] = new

    def sync(self, path, how):
        fd = os.open(self.abs(path), os.O_RDONLY)
        try:
            (os.fsync if how == "fsync" else os.fdatasync)(fd)
        finally:
            os.close(fd)
        data = self.files[path]
        self.rec("sync", path, data, how=how, durable=True)
        self.count(how)
        got = read_all(self.abs(path))
        if got != data:
            raise Failure("%s: after %s the mount shows %d bytes (sha256 %s), "
                          "the model has %d (%s)%s" % (
                              path, how, len(got), sha(got)[:12], len(data),
                              sha(data)[:12], first_diff(got, data)))
        if self.shadow:
            tmp = os.path.join(self.shadow, ".tmp-%d" % self.i)
            with open(tmp, "wb") as f:
                f.write(data)
            os.rename(tmp, os.path.join(self.shadow, shadow_name(path)))

    def maybe_sync(self, path):
        x = self.rng.random()
        if x < 0.35:
            self.sync(path, "fsync")
        elif x < 0.5:
            self.sync(path, "fdatasync")

    def modify(self, path):
        rng = self.rng
        m = self.files[path]
        size = len(m)
        kinds = ["write", "write", "write", "append", "overwrite", "trunc_down",
                 "trunc_up", "punch", "zero", "zero_keep", "falloc",
                 "falloc_keep", "otrunc"]
        if path in self.nocow:
            kinds = ["append", "append", "extend_write", "trunc_up"]
        kind = rng.choice(kinds)
        self.op = "%s %s" % (kind, path)
        self.count(kind)
        new = bytearray(m)

        def wsize():
            if rng.random() < 0.5:
                return 4096 * rng.randrange(1, MAX_WRITE // 4096 + 1)
            return rng.randrange(1, MAX_WRITE + 1)

        def write_at(off, n):
            n = max(0, min(n, MAX_SIZE - off))
            if n == 0:
                return  # a write of nothing does not extend the file
            data = rng.randbytes(n)
            torn = torn_writes(new, off, data)
            put(new, off, data)
            self.apply(path, new, lambda fd: os.pwrite(fd, data, off), torn)

        if kind == "write":
            end = min(size + (128 << 10), MAX_SIZE - 1)
            off = rng.randrange(0, end + 1)
            if rng.random() < 0.5:
                off &= ~4095
            write_at(off, wsize())
        elif kind == "append":
            write_at(size, wsize() if size < MAX_SIZE else 0)
        elif kind == "extend_write":
            write_at(min(size + rng.randrange(0, 64 << 10), MAX_SIZE),
                     wsize())
        elif kind == "overwrite":
            off = rng.randrange(0, size) if size else 0
            write_at(off, min(wsize(), max(size - off, 1)))
        elif kind in ("trunc_down", "trunc_up", "otrunc"):
            if kind == "trunc_down":
                n = rng.randrange(0, size + 1)
            elif kind == "trunc_up":
                n = min(size + rng.randrange(1, 256 << 10), MAX_SIZE)
            else:
                n = 0
            if n < len(new):
                del new[n:]
            else:
                new.extend(bytes(n - len(new)))
            if kind == "otrunc":
                self.rec("state", path, new)
                os.close(os.open(self.abs(path), os.O_WRONLY | os.O_TRUNC))
                self.files[path] = new
            else:
                self.apply(path, new, lambda fd: os.ftruncate(fd, n))
        else:
            off = rng.randrange(0, size + (64 << 10))
            if rng.random() < 0.5:
                off &= ~4095
            n = rng.randrange(1, 256 << 10)
            if kind in ("falloc",) or kind == "zero":
                n = min(n, MAX_SIZE - off)
                if n <= 0:
                    return
            mode = {"punch": FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    "zero": FALLOC_FL_ZERO_RANGE,
                    "zero_keep": FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                    "falloc": 0,
                    "falloc_keep": FALLOC_FL_KEEP_SIZE}[kind]
            if kind in ("punch", "zero", "zero_keep"):
                lo, hi = min(off, len(new)), min(off + n, len(new))
                new[lo:hi] = bytes(hi - lo)
            if mode & FALLOC_FL_KEEP_SIZE == 0 and off + n > len(new):
                new.extend(bytes(off + n - len(new)))
            self.apply(path, new, lambda fd: fallocate(fd, mode, off, n))
        if kind != "otrunc" or rng.random() < 0.5:
            self.maybe_sync(path)

    def new_dir(self):
        parent = self.rng.choice([d for d in self.dirs if d != "shared"]
                                 + ["shared"])
        prefix = "p%d-d" % self.i if parent == "shared" else "d"
        path = "%s/%s" % (parent, self.name(prefix))
        self.op = "mkdir " + path
        os.mkdir(self.abs(path))
        self.dirs.append(path)
        self.count("mkdir")
        return path

    def create(self):
        rng = self.rng
        x = rng.random()
        if x < 0.3:
            d = self.new_dir()
            for _ in range(rng.randrange(0, 3)):
                if rng.random() < 0.6:
                    self.dirs.append("%s/%s" % (d, self.name("d")))
                    self.op = "mkdir " + self.dirs[-1]
                    os.mkdir(self.abs(self.dirs[-1]))
                    d = self.dirs[-1]
        else:
            d = rng.choice(self.dirs)
        prefix = "p%d-f" % self.i if d == "shared" else "f"
        path = "%s/%s" % (d, self.name(prefix))
        self.op = "create " + path
        self.count("create")
        self.rec("state", path, b"")
        fd = os.open(self.abs(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                     0o644)
        self.files[path] = bytearray()
        try:
            if rng.random() < 0.1:
                try:
                    flags = bytearray(8)
                    fcntl.ioctl(fd, FS_IOC_GETFLAGS, flags)
                    f = struct.unpack("<q", bytes(flags))[0] | FS_NOCOW_FL
                    fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("<q", f))
                    self.nocow.add(path)
                    self.count("nocow")
                except OSError as e:
                    if e.errno not in (errno.EOPNOTSUPP, errno.ENOTTY,
                                       errno.EINVAL):
                        raise
        finally:
            os.close(fd)
        for _ in range(rng.randrange(1, 4)):
            self.modify_append_or_write(path)
        self.maybe_sync(path)
        if rng.random() < 0.4:
            self.sync(path, "fsync")

    def modify_append_or_write(self, path):
        m = self.files[path]
        n = self.rng.randrange(1, MAX_WRITE + 1)
        off = len(m) if path in self.nocow or self.rng.random() < 0.7 else \
            self.rng.randrange(0, len(m) + 8192)
        n = max(0, min(n, MAX_SIZE - off))
        if n == 0:
            return
        data = self.rng.randbytes(n)
        new = bytearray(m)
        torn = torn_writes(new, off, data)
        put(new, off, data)
        self.op = "write %s at %d" % (path, off)
        self.apply(path, new, lambda fd: os.pwrite(fd, data, off), torn)

    # -- scratch
    def scratch_op(self):
        rng = self.rng
        places = [d for d in self.dirs] + self.scratch_dirs
        # Weights: create 30, rename 15, link 10, unlink 15, fsync 5,
        # mkdir 10, rename a directory 8, rmdir 7.
        x = rng.choices(range(10), [30, 0, 0, 15, 10, 15, 5, 10, 8, 7])[0]
        names = sorted(self.scratch)
        if x <= 2 or not names:
            d = rng.choice(places)
            path = "%s/%s" % (d, self.name("p%d-s" % self.i
                                           if d == "shared" else "s"))
            self.op = "scratch create " + path
            with open(self.abs(path), "wb") as f:
                f.write(rng.randbytes(rng.randrange(0, 40 << 10)))
            self.scratch[path] = "file"
            self.count("scratch_create")
        elif x == 3:
            src = rng.choice(names)
            d = rng.choice(places)
            dst = "%s/%s" % (d, self.name("p%d-s" % self.i
                                          if d == "shared" else "s"))
            self.op = "rename %s %s" % (src, dst)
            os.rename(self.abs(src), self.abs(dst))
            self.scratch[dst] = self.scratch.pop(src)
            self.count("rename")
        elif x == 4:
            if rng.random() < 0.25 and self.files:
                src = rng.choice(sorted(self.files))
                kind = "link"
            else:
                src = rng.choice(names)
                kind = self.scratch[src]
            d = rng.choice(places)
            dst = "%s/%s" % (d, self.name("p%d-s" % self.i
                                          if d == "shared" else "s"))
            self.op = "link %s %s" % (src, dst)
            os.link(self.abs(src), self.abs(dst))
            self.scratch[dst] = kind
            self.count("link")
        elif x == 5:
            links = [p for p in names if self.scratch[p] == "link"]
            victim = rng.choice(links if links and rng.random() < 0.6
                                else names)
            self.op = "unlink " + victim
            os.unlink(self.abs(victim))
            del self.scratch[victim]
            self.count("unlink")
        elif x == 6:
            victim = rng.choice(names)
            self.op = "scratch fsync " + victim
            if self.scratch[victim] == "file":
                with open(self.abs(victim), "ab") as f:
                    f.write(rng.randbytes(rng.randrange(1, 8192)))
                    os.fsync(f.fileno())
                self.count("scratch_fsync")
        elif x == 7:
            parent = rng.choice([d for d in self.dirs if d != "shared"])
            path = "%s/%s" % (parent, self.name("sd"))
            self.op = "scratch mkdir " + path
            os.mkdir(self.abs(path))
            self.scratch_dirs.append(path)
            self.count("scratch_mkdir")
        elif x == 8 and self.scratch_dirs:
            src = rng.choice(self.scratch_dirs)
            parent = rng.choice([d for d in self.dirs if d != "shared"])
            dst = "%s/%s" % (parent, self.name("sd"))
            self.op = "rename dir %s %s" % (src, dst)
            os.rename(self.abs(src), self.abs(dst))
            self.scratch_dirs[self.scratch_dirs.index(src)] = dst
            for p in list(self.scratch):
                if p.startswith(src + "/"):
                    self.scratch[dst + p[len(src):]] = self.scratch.pop(p)
            self.count("rename_dir")
        elif x == 9 and self.scratch_dirs:
            d = rng.choice(self.scratch_dirs)
            inside = [p for p in self.scratch if p.startswith(d + "/")]
            self.op = "empty and rmdir " + d
            for p in inside:
                os.unlink(self.abs(p))
                del self.scratch[p]
            os.rmdir(self.abs(d))
            self.scratch_dirs.remove(d)
            self.count("rmdir")

    def dir_fsync(self):
        d = self.rng.choice(self.dirs)
        self.op = "fsync dir " + d
        fd = os.open(self.abs(d), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.count("dir_fsync")

    def verify_one(self):
        path = self.rng.choice(sorted(self.files))
        self.op = "read " + path
        got = read_all(self.abs(path))
        data = self.files[path]
        if got != data:
            raise Failure("%s: the mount shows %d bytes (sha256 %s), the "
                          "model has %d (%s)%s" % (
                              path, len(got), sha(got)[:12], len(data),
                              sha(data)[:12], first_diff(got, data)))
        self.count("read_checked")

    def step(self):
        x = self.rng.random()
        mine = len(self.files)
        if x < 0.55 and self.files:
            self.modify(self.rng.choice(sorted(self.files)))
        elif x < 0.67 and mine < MAX_FILES:
            self.create()
        elif x < 0.87:
            self.scratch_op()
        elif x < 0.877:
            self.dir_fsync()
        elif x < 0.95 and self.files:
            p = self.rng.choice(sorted(self.files))
            self.op = "fsync " + p
            self.sync(p, self.rng.choice(["fsync", "fdatasync"]))
        elif self.files:
            self.verify_one()

    def run(self, ops, log=None):
        while ops is None or self.k < ops:
            self.step()
            if log is not None:
                os.write(log, b"%d %d %s\n" % (self.i, self.k,
                                                self.op.encode()))
            self.k += 1


def put(model, off, data):
    if off > len(model):
        model.extend(bytes(off - len(model)))
    model[off:off + len(data)] = data


def torn_writes(model, off, data):
    """The states a crash may show in the middle of pwrite(data, off): the
    kernel's FUSE sends a write whose first page is partial and not
    cached as two requests, that page first (fuse_fill_write_pages), and
    the file system may commit between them."""
    mid = (off + PAGE - 1) // PAGE * PAGE
    if off % PAGE == 0 or off + len(data) <= mid:
        return []
    t = bytearray(model)
    put(t, off, data[:mid - off])
    return [t]


def first_diff(got, want):
    n = min(len(got), len(want))
    for at in range(0, n, 4096):
        if got[at:at + 4096] != want[at:at + 4096]:
            for i in range(at, min(at + 4096, n)):
                if got[i] != want[i]:
                    end = i
                    while end < n and got[end] != want[end]:
                        end += 1
                    zero = got[i:end].count(0) == end - i
                    return "; first difference at %d (%d bytes differ there%s)" % (
                        i, end - i, ", read as zeros" if zero else "")
    if len(got) != len(want):
        return "; equal up to %d, sizes differ" % n
    return ""


def read_journal(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    # A kill can cut a line only if a write is cut: none are
                    # (one write each), but be explicit.
                    out.append({"t": "error", "w": -1,
                                "msg": "journal line unparsable: %r" % line})
    return out


def run(top, seed, procs, journal, ops, shadow, log=None):
    records = read_journal(journal)
    sys.stdout.flush()
    kids = []
    for i in range(procs):
        pid = os.fork()
        if pid == 0:
            code = 2
            w = None
            try:
                w = Worker(top, i, seed, journal, shadow)
                w.load(records)
                lfd = None
                if log:
                    lfd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                                  0o644)
                w.run(ops, lfd)
                code = 0
            except BaseException as e:  # noqa: B902 (report everything)
                code = 1
                msg = "worker %d op #%d (%s): %s" % (
                    i, w.k if w else 0, w.op if w else "start",
                    e if isinstance(e, (Failure, OSError))
                    else traceback.format_exc())
                try:
                    fd = os.open(journal, os.O_WRONLY | os.O_APPEND)
                    os.write(fd, (json.dumps({"t": "error", "w": i, "msg": msg})
                                  + "\n").encode())
                    os.close(fd)
                except OSError:
                    pass
                print("log_crash_ops: " + msg, file=sys.stderr)
            finally:
                if w is not None:
                    try:
                        with open(journal + ".counts.%d" % i, "w") as f:
                            json.dump(w.counts, f)
                    except OSError:
                        pass
                os._exit(code)
        kids.append(pid)
    worst = 0
    for pid in kids:
        _, status = os.waitpid(pid, 0)
        worst = max(worst, os.waitstatus_to_exitcode(status) & 0xff)
    return worst


# ----------------------------------------------------------------- check


class Journal:
    """The rule: per path, the acceptable contents after a crash."""

    def __init__(self, records):
        self.accept = {}   # path -> set of sha256 (None: missing)
        self.size = {}     # path -> {sha: size}
        self.synced = {}   # path -> the last sync/base record
        self.errors = []
        self.syncs = {"fsync": 0, "fdatasync": 0}
        self.states = 0
        for r in records:
            t = r.get("t")
            if t == "error":
                self.errors.append(r.get("msg", "?"))
            elif t in ("base", "sync"):
                self.accept[r["p"]] = {r["h"]}
                self.size.setdefault(r["p"], {})[r["h"]] = r["s"]
                self.synced[r["p"]] = r
                if t == "sync":
                    self.syncs[r["how"]] += 1
            elif t == "state":
                self.states += 1
                s = self.accept.setdefault(r["p"], {None})
                s.add(r["h"])
                self.size.setdefault(r["p"], {})[r["h"]] = r["s"]

    def check(self, top, shadow=None):
        errors = list("a worker failed: %s" % e for e in self.errors)
        n = {"paths": 0, "exact": 0, "in_flight": 0, "absent": 0,
             "later_state": 0}
        for path in sorted(self.accept):
            ok = self.accept[path]
            n["paths"] += 1
            full = os.path.join(top, path)
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                if None in ok:
                    n["absent"] += 1
                    continue
                errors.append("%s: missing (%s)" % (path, self.describe(path)))
                continue
            if not stat.S_ISREG(st.st_mode):
                errors.append("%s: not a regular file (mode %o)" % (
                    path, st.st_mode))
                continue
            data = read_all(full)
            h = sha(data)
            if len(ok - {None}) == 1 and None not in ok:
                n["exact"] += 1
            else:
                n["in_flight"] += 1
            if h in ok:
                last = self.synced.get(path)
                if last is not None and h != last["h"]:
                    n["later_state"] += 1
                continue
            msg = "%s: %d bytes, sha256 %s: %s" % (
                path, len(data), h[:12], self.describe(path))
            last = self.synced.get(path)
            if shadow and last is not None and last["t"] == "sync":
                try:
                    want = read_all(os.path.join(shadow, shadow_name(path)))
                    if sha(want) == last["h"]:
                        msg += "; against the last synced content" + \
                            (first_diff(data, want) or ": equal?")
                except OSError:
                    pass
            errors.append(msg)
        return errors, n

    def describe(self, path):
        last = self.synced.get(path)
        ok = self.accept[path]
        s = []
        if last is not None:
            s.append("last %s: %d bytes, sha256 %s" % (
                last.get("how", last["t"]), last["s"], last["h"][:12]))
        else:
            s.append("never synced")
        later = len(ok - {None}) - (1 if last is not None else 0)
        if later > 0:
            s.append("%d later states (sizes %s)" % (
                later, sorted({self.size[path][h] for h in ok - {None}})[:8]))
        return ", ".join(s)


def check_tree(top, journal, shadow=None):
    j = Journal(read_journal(journal))
    errors, n = j.check(top, shadow)
    n.update({"ok": not errors, "errors": errors[:40],
              "error_count": len(errors), "fsyncs": j.syncs["fsync"],
              "fdatasyncs": j.syncs["fdatasync"], "states": j.states})
    return n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup", help="the starting tree, on the host")
    s.add_argument("dir")
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--procs", type=int, default=3)
    s.add_argument("--journal", required=True)
    r = sub.add_parser("run", help="the workload, in the mount")
    r.add_argument("dir")
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--procs", type=int, default=3)
    r.add_argument("--journal", required=True)
    r.add_argument("--ops", type=int, help="operations per worker "
                   "(default: until killed)")
    r.add_argument("--shadow", help="a host directory for the last synced "
                   "content of each file (for check's messages)")
    r.add_argument("--log", help="append 'WORKER OP-NUMBER OPERATION' to "
                   "FILE after each operation")
    c = sub.add_parser("check", help="a tree after the crash")
    c.add_argument("dir")
    c.add_argument("--journal", required=True)
    c.add_argument("--shadow")
    args = ap.parse_args(argv)
    if args.cmd == "setup":
        if os.path.exists(args.dir) and os.listdir(args.dir):
            ap.error("%s is not empty" % args.dir)
        os.makedirs(args.dir, exist_ok=True)
        print(json.dumps(setup(args.dir, args.seed, args.procs,
                               args.journal)))
        return 0
    if args.cmd == "run":
        if args.shadow:
            os.makedirs(args.shadow, exist_ok=True)
        t = time.monotonic()
        code = run(os.path.abspath(args.dir), args.seed, args.procs,
                   args.journal, args.ops, args.shadow, args.log)
        print(json.dumps({"ok": code == 0,
                          "elapsed_s": round(time.monotonic() - t, 3)}))
        return code
    res = check_tree(os.path.abspath(args.dir), args.journal, args.shadow)
    print(json.dumps(res, sort_keys=True))
    for e in res["errors"]:
        print("log_crash_ops: " + e, file=sys.stderr)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.exit(2)
