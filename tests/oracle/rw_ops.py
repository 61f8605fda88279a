#!/usr/bin/env python3
"""Seeded POSIX operations on a mounted file system, checked against an
in-memory model (in the spirit of fstests' fsx and fsstress).

    python3 rw_ops.py DIR --seed S --ops N --procs P [--log FILE]
    python3 rw_ops.py DIR --seed S --ops N --procs P --verify-only [--summary RUN.json]

P worker processes (fork), each doing N operations in its own directory
DIR/pI with its own RNG, seeded from (S, I), plus names of its own
("pI-...") in DIR/shared, a directory all workers change at once. Every
choice is made from the RNG and the model, never from what the file system
answers, so the final tree depends only on (seed, ops, procs) -- and on
which fallocate modes the file system refuses with EOPNOTSUPP: those calls
are recorded (by operation number, in the summary) and leave the model
unchanged.

Operations: buffered writes (tiny, 4 KiB-aligned, at EOF, past EOF leaving
holes, anywhere), O_APPEND writes, reads (every one compared with the
model), mmap reads (compared) and mmap writes, SEEK_DATA/SEEK_HOLE walks
(checked), truncate up and down, open
with O_TRUNC, fallocate (mode 0, KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE,
ZERO_RANGE, ZERO_RANGE|KEEP_SIZE), copy_file_range, create, mkdir, rmdir,
unlink, link (also of symlinks and fifos), symlink, mknod (fifo), rename
(to a new name, over an existing file or empty directory, across
directories, in and out of the shared directory, RENAME_NOREPLACE,
RENAME_EXCHANGE), chmod (all 12 bits), utimensat with explicit
nanosecond times (before 1970 and after 2038 too), user.* xattrs (set with
XATTR_CREATE / XATTR_REPLACE, removed), fsync and fdatasync (files and
directories), files kept open across operations (also after their last
name is unlinked: read, written and checked through the descriptor), and
calls that must fail with a given errno (EEXIST, ENOTEMPTY, ENOTDIR,
EISDIR, EINVAL, ENAMETOOLONG, ENODATA, ENOENT, EPERM).

Checked as it runs: every read, mmap read, SEEK_DATA/SEEK_HOLE walk,
readlink, stat and directory listing the workload does, and the errno of every call meant to fail. At
the end each worker checks every path of its model: type, mode, size,
content, symlink target, user.* xattrs, link count of non-directories, the
same inode behind every name of a hard link and distinct inodes otherwise,
SEEK_DATA/SEEK_HOLE (no hole over bytes that are not zero), directory
listings (exactly, or its own names in DIR/shared), mtime where
it was set explicitly and not changed since, and directory link counts
(btrfs's 1 or POSIX's 2 + subdirectories, one style throughout).

--verify-only replays the RNG without touching DIR (the model only), then
checks DIR as above: the tree a run left, read back after unmount and
remount, or through another mount. Give it the run's JSON summary
(--summary) when the run's file system refused fallocate modes.

Prints a JSON summary on stdout. Exit status: 0 all checks passed; 1 a
check failed or a call failed unexpectedly (the message names the worker,
operation number, operation, path and offset); 2 usage error or a crash of
this script.

Importable: the model functions (model_write, model_truncate,
model_fallocate, model_copy), Worker (live=False replays without I/O).
"""

import argparse
import contextlib
import ctypes
import errno
import json
import mmap
import os
import random
import stat
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from manifest import pct  # noqa: E402

UMASK = 0o022
PAGE = mmap.PAGESIZE

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
FALLOC_MODES = {
    "alloc": 0,
    "keep_size": FALLOC_FL_KEEP_SIZE,
    "punch_hole": FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
    "zero_range": FALLOC_FL_ZERO_RANGE,
    "zero_range_keep": FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
}
FALLOC_NAMES = sorted(FALLOC_MODES)

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
AT_FDCWD = -100

XATTR_CREATE = getattr(os, "XATTR_CREATE", 1)
XATTR_REPLACE = getattr(os, "XATTR_REPLACE", 2)

_LIBC = None


def libc():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.fallocate.argtypes = [ctypes.c_int, ctypes.c_int,
                                    ctypes.c_int64, ctypes.c_int64]
        _LIBC.fallocate.restype = ctypes.c_int
        _LIBC.syscall.restype = ctypes.c_long
    return _LIBC


def fallocate(fd, mode, off, length):
    if libc().fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


# renameat2(2) by system call number (glibc's wrapper is not everywhere).
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276, "riscv64": 276,
                  "ppc64le": 357, "s390x": 347, "i686": 353, "armv7l": 382}


def renameat2(old, new, flags):
    nr = _SYS_RENAMEAT2.get(os.uname().machine)
    if nr is None:
        raise OSError(errno.ENOSYS, "renameat2: unknown system call number")
    c = ctypes.c_char_p
    r = libc().syscall(ctypes.c_long(nr), ctypes.c_int(AT_FDCWD), c(old),
                       ctypes.c_int(AT_FDCWD), c(new), ctypes.c_uint(flags))
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


# ---------------------------------------------------------------- the model


def _zero(data, a, b):
    if b > a:
        data[a:b] = bytes(b - a)


def model_write(data, off, buf):
    """pwrite(buf, off) on a file whose content is `data` (a bytearray)."""
    if off > len(data):
        data.extend(bytes(off - len(data)))
    data[off:off + len(buf)] = buf


def model_truncate(data, size):
    if size < len(data):
        del data[size:]
    else:
        data.extend(bytes(size - len(data)))


def model_fallocate(data, mode, off, length):
    """fallocate(mode, off, length) as Linux defines it for content and
    size (what is allocated is not modelled)."""
    end = off + length
    size = len(data)
    keep = mode & FALLOC_FL_KEEP_SIZE
    if mode & FALLOC_FL_PUNCH_HOLE:
        _zero(data, off, min(end, size))
        return
    if mode & FALLOC_FL_ZERO_RANGE:
        _zero(data, off, min(end, size))
    if not keep and end > size:
        data.extend(bytes(end - size))


def model_copy(src, soff, dst, doff, length):
    """copy_file_range: returns the bytes copied (short at the source's
    EOF; nothing past it)."""
    n = max(0, min(length, len(src) - soff))
    if n:
        model_write(dst, doff, bytes(src[soff:soff + n]))
    return n


class Node:
    """An inode of the model. kind: file, dir, symlink, fifo. links: its
    names as (directory node, name); a directory has one. fd: an open
    descriptor kept across operations (an int; -1 when only replaying)."""

    __slots__ = ("nid", "kind", "mode", "data", "target", "xattrs", "mtime",
                 "entries", "links", "partial", "fd")

    def __init__(self, nid, kind, mode):
        self.nid = nid
        self.kind = kind
        self.mode = mode
        self.data = bytearray() if kind == "file" else None
        self.target = None
        self.xattrs = {}
        self.mtime = None  # set explicitly and not changed since, else None
        self.entries = {} if kind == "dir" else None
        self.links = []
        self.partial = False  # directory shared with other workers
        self.fd = None

    def size(self):
        if self.kind == "file":
            return len(self.data)
        if self.kind == "symlink":
            return len(self.target)
        return 0


class Failure(Exception):
    """A check failed or a call failed unexpectedly."""


class Skip(Exception):
    """An operation found nothing to work on (counted as skipped)."""


def _errname(e):
    return errno.errorcode.get(e, str(e))


def first_difference(expected, got):
    n = min(len(expected), len(got))
    for i in range(n):
        if expected[i] != got[i]:
            return i
    return n


# Operation weights (relative). Creation stops above --max-entries names.
WEIGHTS = {
    "write": 18, "read": 10, "mmap_read": 3, "mmap_write": 3, "append": 4,
    "truncate": 5, "open_trunc": 1, "fallocate": 7, "copy_range": 4,
    "create": 7, "mkdir": 3, "rmdir": 2, "unlink": 4, "link": 3,
    "symlink": 2, "mknod": 1, "rename": 4, "rename_over": 2,
    "rename_noreplace": 2, "rename_exchange": 2, "chmod": 3, "utime": 4,
    "setxattr": 4, "removexattr": 2, "fsync": 2, "fdatasync": 2,
    "open_fd": 3, "close_fd": 3, "stat": 3, "listdir": 2, "readlink": 1,
    "seek": 2,
    "expect_error": 3,
}
CREATING = ("create", "mkdir", "link", "symlink", "mknod")
MAX_FDS = 6


class Worker:
    """One worker: its RNG, its model, its operations. live=False replays
    the operations on the model only (--verify-only)."""

    def __init__(self, top, seed, index, live=True, max_size=1 << 20,
                 max_entries=150, log_fd=None, replay_eopnotsupp=None):
        self.top = top if isinstance(top, bytes) else os.fsencode(top)
        self.index = index
        self.rng = random.Random("rw_ops:%d:%d" % (seed, index))
        self.live = live
        self.max_size = max_size
        self.max_entries = max_entries
        self.log_fd = log_fd
        self.replay_eop = {m: set(v) for m, v in
                           (replay_eopnotsupp or {}).items()}
        self.prefix = b"p%d-" % index
        self.next_id = 0
        self.ctr = 0
        self.k = 0
        self.opname = "setup"
        self.counts = {}
        self.eopnotsupp = {}
        self.expected_errors = 0
        self.reads_checked = 0
        self.bytes_written = 0
        self.fds = []
        self.dir_nlink = set()
        self.root = self._node("dir", 0o755)
        self.shared = self._node("dir", 0o755)
        self.shared.partial = True
        self.root.partial = True
        self.own = self._node("dir", 0o755)
        self._link(self.root, b"shared", self.shared)
        self._link(self.root, b"p%d" % index, self.own)

    # ------------------------------------------------------------ helpers

    def _node(self, kind, mode):
        self.next_id += 1
        return Node(self.next_id, kind, mode)

    def _link(self, d, name, n):
        d.entries[name] = n
        n.links.append((d, name))

    def _unlink(self, d, name):
        n = d.entries.pop(name)
        n.links.remove((d, name))
        return n

    def dpath(self, d):
        parts = []
        while d is not self.root:
            p, name = d.links[0]
            parts.append(name)
            d = p
        return b"/".join([self.top] + parts[::-1])

    def path(self, d, name):
        return self.dpath(d) + b"/" + name

    def rel(self, p):
        if p is None:
            return "(fd)"
        return pct(p[len(self.top):] or b"/")

    def note(self, text):
        if self.log_fd is not None:
            os.write(self.log_fd, ("p%d %d %s\n" % (self.index, self.k, text))
                     .encode("utf-8", "replace"))

    def fail(self, msg):
        raise Failure("worker %d op #%d %s: %s" % (self.index, self.k,
                                                  self.opname, msg))

    def call(self, what, fn, *a, **kw):
        """A live system call that must succeed."""
        try:
            return fn(*a, **kw)
        except OSError as e:
            self.fail("%s: unexpected %s (%s)" % (what, _errname(e.errno),
                                                  e.strerror))

    def expect(self, what, errnos, fn, *a, **kw):
        """A live system call that must fail with one of `errnos`."""
        self.expected_errors += 1
        if not self.live:
            return
        try:
            fn(*a, **kw)
        except OSError as e:
            if e.errno in errnos:
                return
            self.fail("%s: expected %s, got %s" % (
                what, "/".join(_errname(x) for x in errnos),
                _errname(e.errno)))
        self.fail("%s: expected %s, the call succeeded" % (
            what, "/".join(_errname(x) for x in errnos)))

    def check_bytes(self, what, path, off, expected, got):
        self.reads_checked += 1
        if bytes(got) != bytes(expected):
            i = first_difference(expected, got)
            e = "%#04x" % expected[i] if i < len(expected) else "EOF"
            g = "%#04x" % got[i] if i < len(got) else "EOF"
            self.fail("%s %s: offset %d: expected %s, got %s (asked %d bytes "
                      "at %d: expected %d, got %d)" % (
                          what, self.rel(path), off + i, e, g,
                          len(expected), off, len(expected), len(got)))

    def entries(self):
        """Every (directory, name, node) this worker owns."""
        out = []
        stack = [self.own, self.shared]
        while stack:
            d = stack.pop()
            for name, n in d.entries.items():
                out.append((d, name, n))
                if n.kind == "dir":
                    stack.append(n)
        return out

    def dirs(self, ents=None):
        ents = self.entries() if ents is None else ents
        return [self.own, self.shared] + [n for _, _, n in ents
                                          if n.kind == "dir"]

    def chain(self, d):
        """d and the directories above it."""
        out = set()
        while True:
            out.add(d.nid)
            if d is self.root or not d.links:
                return out
            d = d.links[0][0]

    def pick(self, seq):
        return seq[self.rng.randrange(len(seq))] if seq else None

    def pick_or_skip(self, seq):
        """pick(seq), or skip the operation when seq is empty."""
        if not seq:
            raise Skip()
        return self.pick(seq)

    def new_name(self, kind):
        self.ctr += 1
        base = self.prefix + kind + b"%d" % self.ctr
        r = self.rng.random()
        if r < 0.03:
            want = self.rng.randint(200, 255)
            base += b"_" + b"L" * (want - len(base) - 1)
        elif r < 0.06:
            base += "_\u00e9\u65e5\u672c sp".encode()
        elif r < 0.07:
            base += b"_\xff\x01x"
        return base

    def gen_data(self, n):
        r = self.rng.random()
        if r < 0.5:
            return self.rng.randbytes(n)
        if r < 0.8:
            pat = self.rng.randbytes(self.rng.randint(1, 32))
            return (pat * (n // len(pat) + 1))[:n]
        return bytes([self.rng.randrange(256)]) * n

    def gen_time(self):
        r = self.rng.random()
        if r < 0.1:
            sec = -self.rng.randint(1, 1 << 31)
        elif r < 0.2:
            sec = self.rng.randint(1 << 31, 1 << 34)
        else:
            sec = self.rng.randint(0, (1 << 31) - 1)
        return sec * 1_000_000_000 + self.rng.randrange(1_000_000_000)

    def files(self, ents):
        """Files to work on: (node, path) by each name, and (node, None)
        for open files with no name left."""
        out = [(n, self.path(d, name)) for d, name, n in ents
               if n.kind == "file"]
        out += [(n, None) for n in self.fds if not n.links]
        return out

    def use_fd(self, node, path):
        """Whether to use the node's kept descriptor (decided by the RNG
        in live and replay runs alike)."""
        if node.fd is None:
            return False
        return path is None or self.rng.random() < 0.7

    def live_call(self, what, path, fn, *a, **kw):
        """call() in live runs only, named `what` and the path's name."""
        if self.live:
            return self.call(what + " " + self.rel(path), fn, *a, **kw)
        return None

    @contextlib.contextmanager
    def opened(self, node, path, cached, flags=os.O_RDWR):
        """The node's kept descriptor (cached), or path opened for the
        block and closed after it."""
        if cached:
            yield node.fd
            return
        fd = self.call("open " + self.rel(path), os.open, path, flags)
        try:
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def mapped(self, fd, path, off, n, access):
        """A mapping of fd from the page of `off` to off + n, and where
        `off` lies in it."""
        base = off - off % PAGE
        m = self.call("mmap " + self.rel(path), mmap.mmap, fd, off + n - base,
                      offset=base, access=access)
        try:
            yield m, off - base
        finally:
            m.close()

    def gen_range(self, size):
        """A write's (offset, length)."""
        rng = self.rng
        mx = self.max_size
        r = rng.random()
        if r < 0.2:
            off, n = rng.randint(0, size + 16), rng.randint(1, 16)
        elif r < 0.45:
            off = rng.randint(0, (size + 65536) // 4096) * 4096
            n = 4096 * rng.randint(1, 16)
        elif r < 0.6:
            off, n = size, rng.randint(1, 65536)
        elif r < 0.75:
            off, n = size + rng.randint(1, 262144), rng.randint(1, 32768)
        else:
            off, n = rng.randint(0, max(size, 1)), rng.randint(1, 65536)
        if off >= mx:
            off = rng.randint(0, mx - 1)
        return off, min(n, mx - off)

    def gen_size(self, size):
        rng = self.rng
        r = rng.random()
        if r < 0.1:
            return 0
        if r < 0.5:
            return rng.randint(0, size)
        if r < 0.7:
            return min(self.max_size, (rng.randint(0, size + 65536) // 4096) * 4096)
        return min(self.max_size, size + rng.randint(1, 262144))

    def pwrite_all(self, fd, buf, off, path):
        done = 0
        while done < len(buf):
            n = self.call("pwrite " + self.rel(path), os.pwrite, fd,
                          buf[done:], off + done)
            if n <= 0:
                self.fail("pwrite %s: wrote %d" % (self.rel(path), n))
            done += n
        self.bytes_written += len(buf)

    def forget_if_gone(self, n):
        """A node with no name and no descriptor is gone."""
        return not n.links and n.fd is None

    # --------------------------------------------------------- operations

    def op_write(self, ents):
        node, path = self.pick_or_skip(self.files(ents))
        cached = self.use_fd(node, path)
        off, n = self.gen_range(len(node.data))
        buf = self.gen_data(n)
        self.note("write %s off=%d len=%d" % (self.rel(path), off, n))
        if self.live:
            with self.opened(node, path, cached) as fd:
                self.pwrite_all(fd, buf, off, path)
        model_write(node.data, off, buf)
        node.mtime = None
        return True

    def op_append(self, ents):
        node, path = self.pick_or_skip([f for f in self.files(ents)
                                        if f[1] is not None])
        n = min(self.rng.randint(1, 20000), self.max_size - len(node.data))
        if n <= 0:
            return False
        buf = self.gen_data(n)
        self.note("append %s len=%d" % (self.rel(path), n))
        if self.live:
            fd = self.call("open O_APPEND " + self.rel(path), os.open, path,
                           os.O_WRONLY | os.O_APPEND)
            try:
                done = 0
                while done < n:
                    done += self.call("write", os.write, fd, buf[done:])
                self.bytes_written += n
            finally:
                os.close(fd)
        model_write(node.data, len(node.data), buf)
        node.mtime = None
        return True

    def op_read(self, ents):
        node, path = self.pick_or_skip(self.files(ents))
        cached = self.use_fd(node, path)
        size = len(node.data)
        if self.rng.random() < 0.15:
            off, n = 0, size + 1
        else:
            off, n = self.rng.randint(0, size + 4096), self.rng.randint(1, 65536)
        self.note("read %s off=%d len=%d" % (self.rel(path), off, n))
        if self.live:
            with self.opened(node, path, cached, os.O_RDONLY) as fd:
                got = self.call("pread " + self.rel(path), os.pread, fd, n, off)
            self.check_bytes("read", path, off, node.data[off:off + n], got)
        return True

    def pick_span(self, ents, most):
        """A file with data, whether to use its kept descriptor, and a
        span (off, n) of at most `most` bytes inside it."""
        node, path = self.pick_or_skip([f for f in self.files(ents) if f[0].data])
        cached = self.use_fd(node, path)
        size = len(node.data)
        off = self.rng.randrange(size)
        return node, path, cached, off, self.rng.randint(1, min(size - off, most))

    def op_mmap_read(self, ents):
        node, path, cached, off, n = self.pick_span(ents, 131072)
        self.note("mmap_read %s off=%d len=%d" % (self.rel(path), off, n))
        if self.live:
            with self.opened(node, path, cached, os.O_RDONLY) as fd:
                with self.mapped(fd, path, off, n, mmap.ACCESS_READ) as (m, at):
                    got = m[at:at + n]
            self.check_bytes("mmap read", path, off, node.data[off:off + n], got)
        return True

    def op_mmap_write(self, ents):
        node, path, cached, off, n = self.pick_span(ents, 65536)
        buf = self.gen_data(n)
        sync = self.rng.random() < 0.5
        self.note("mmap_write %s off=%d len=%d msync=%d" % (
            self.rel(path), off, n, sync))
        if self.live:
            with self.opened(node, path, cached) as fd:
                with self.mapped(fd, path, off, n, mmap.ACCESS_WRITE) as (m, at):
                    m[at:at + n] = buf
                    if sync:
                        self.call("msync", m.flush)
            self.bytes_written += n
        model_write(node.data, off, buf)
        node.mtime = None
        return True

    def op_truncate(self, ents):
        node, path = self.pick_or_skip(self.files(ents))
        cached = self.use_fd(node, path)
        size = self.gen_size(len(node.data))
        self.note("truncate %s %d -> %d" % (self.rel(path), len(node.data), size))
        if self.live:
            if cached:
                self.call("ftruncate", os.ftruncate, node.fd, size)
            else:
                self.call("truncate " + self.rel(path), os.truncate, path, size)
        model_truncate(node.data, size)
        node.mtime = None
        return True

    def op_open_trunc(self, ents):
        node, path = self.pick_or_skip([f for f in self.files(ents)
                                        if f[1] is not None])
        self.note("open O_TRUNC %s" % self.rel(path))
        if self.live:
            fd = self.call("open O_TRUNC " + self.rel(path), os.open, path,
                           os.O_WRONLY | os.O_TRUNC)
            os.close(fd)
        model_truncate(node.data, 0)
        node.mtime = None
        return True

    def op_fallocate(self, ents):
        node, path = self.pick_or_skip(self.files(ents))
        cached = self.use_fd(node, path)
        name = self.pick(FALLOC_NAMES)
        mode = FALLOC_MODES[name]
        size = len(node.data)
        if self.rng.random() < 0.5:
            off = self.rng.randint(0, (size + 65536) // 4096) * 4096
            n = 4096 * self.rng.randint(1, 32)
        else:
            off = self.rng.randint(0, size + 65536)
            n = self.rng.randint(1, 131072)
        off = min(off, self.max_size - 1)
        n = min(n, self.max_size - off)
        self.note("fallocate %s %s off=%d len=%d" % (self.rel(path), name, off, n))
        if self.live:
            with self.opened(node, path, cached) as fd:
                try:
                    fallocate(fd, mode, off, n)
                except OSError as e:
                    if e.errno != errno.EOPNOTSUPP:
                        self.fail("fallocate %s %s off=%d len=%d: unexpected %s" % (
                            name, self.rel(path), off, n, _errname(e.errno)))
                    self.eopnotsupp.setdefault(name, []).append(self.k)
                    return True
        elif self.k in self.replay_eop.get(name, ()):
            return True
        model_fallocate(node.data, mode, off, n)
        node.mtime = None
        return True

    def op_copy_range(self, ents):
        fl = self.files(ents)
        src, spath = self.pick_or_skip(fl)
        dst, dpath = self.pick(fl)
        scached = self.use_fd(src, spath)
        dcached = self.use_fd(dst, dpath)
        ssize = len(src.data)
        soff = self.rng.randint(0, ssize + 4096)
        if self.rng.random() < 0.3:
            soff = (soff // 4096) * 4096
        want = self.rng.randint(1, 131072)
        doff = self.rng.randint(0, len(dst.data) + 65536)
        if self.rng.random() < 0.3:
            doff = (doff // 4096) * 4096
        n = max(0, min(want, ssize - soff))
        if src is dst and n and doff < soff + n and soff < doff + n:
            doff = soff + n  # no overlap within one file (EINVAL)
        if doff + want > self.max_size:
            return False
        self.note("copy_range %s off=%d -> %s off=%d len=%d" % (
            self.rel(spath), soff, self.rel(dpath), doff, want))
        if self.live:
            with self.opened(src, spath, scached, os.O_RDONLY) as sfd, \
                    self.opened(dst, dpath, dcached) as dfd:
                # Within one file, what is copied past the source's old
                # EOF would be copied again: ask for what the model
                # copies, not more.
                ask = n if src is dst else want
                done = 0
                while done < ask:
                    r = self.call("copy_file_range", os.copy_file_range,
                                  sfd, dfd, ask - done, soff + done,
                                  doff + done)
                    if r == 0:
                        break
                    done += r
            if done != n:
                self.fail("copy_file_range %s -> %s: copied %d bytes, expected "
                          "%d (source size %d, offset %d)" % (
                              self.rel(spath), self.rel(dpath), done, n, ssize,
                              soff))
        model_copy(src.data, soff, dst.data, doff, n if src is dst else want)
        dst.mtime = None
        return True

    def pick_dir(self, ents):
        if self.rng.random() < 0.2:
            return self.shared
        return self.pick(self.dirs(ents))

    def new_child(self, d, node, name):
        self._link(d, name, node)
        d.mtime = None

    def inherit(self, d, mode, is_dir):
        if is_dir and d.mode & stat.S_ISGID:
            mode |= stat.S_ISGID
        return mode

    def op_create(self, ents):
        d = self.pick_dir(ents)
        name = self.new_name(b"f")
        req = self.pick([0o644, 0o600, 0o666, 0o755, 0o400, 0o000, 0o640])
        n0 = self.rng.randint(1, 20000) if self.rng.random() < 0.5 else 0
        buf = self.gen_data(n0)
        keep = len(self.fds) < MAX_FDS and self.rng.random() < 0.3
        path = self.path(d, name)
        self.note("create %s mode=%o len=%d keep=%d" % (self.rel(path), req, n0, keep))
        node = self._node("file", req & ~UMASK & 0o7777)
        if self.live:
            fd = self.call("create " + self.rel(path), os.open, path,
                           os.O_CREAT | os.O_EXCL | os.O_RDWR, req)
            if buf:
                self.pwrite_all(fd, buf, 0, path)
            if keep:
                node.fd = fd
            else:
                os.close(fd)
        elif keep:
            node.fd = -1
        if keep:
            self.fds.append(node)
        node.data[:] = buf
        self.new_child(d, node, name)
        return True

    def op_mkdir(self, ents):
        d = self.pick_dir(ents)
        name = self.new_name(b"d")
        req = self.pick([0o755, 0o700, 0o777, 0o750, 0o1777, 0o2755])
        path = self.path(d, name)
        self.note("mkdir %s mode=%o" % (self.rel(path), req))
        self.live_call("mkdir", path, os.mkdir, path, req)
        mode = self.inherit(d, req & 0o1777 & ~UMASK, True)
        self.new_child(d, self._node("dir", mode), name)
        return True

    def op_rmdir(self, ents):
        return self.remove(ents, "rmdir", os.rmdir,
                           lambda n: n.kind == "dir" and not n.entries)

    def op_unlink(self, ents):
        return self.remove(ents, "unlink", os.unlink, lambda n: n.kind != "dir")

    def remove(self, ents, what, fn, which):
        """rmdir or unlink (`what`, `fn`) of a name whose node passes
        `which`."""
        d, name, _ = self.pick_or_skip([e for e in ents if which(e[2])])
        path = self.path(d, name)
        self.note("%s %s" % (what, self.rel(path)))
        self.live_call(what, path, fn, path)
        self._unlink(d, name)
        d.mtime = None
        return True

    def op_link(self, ents):
        sd, sname, node = self.pick_or_skip([e for e in ents if e[2].kind != "dir"])
        d = self.pick_dir(ents)
        name = self.new_name(b"h")
        src, dst = self.path(sd, sname), self.path(d, name)
        self.note("link %s %s" % (self.rel(src), self.rel(dst)))
        self.live_call("link", src, os.link, src, dst,
                       follow_symlinks=False)
        self.new_child(d, node, name)
        return True

    def gen_target(self, ents):
        r = self.rng.random()
        if r < 0.4 and ents:
            d, name, _ = self.pick(ents)
            return b"../" * self.rng.randint(0, 3) + name
        if r < 0.6:
            return b"/nonexistent/" + self.rng.randbytes(4).hex().encode()
        if r < 0.95:
            n = self.rng.randint(1, 100)
        else:
            n = self.rng.randint(1000, 3000)
        return bytes(self.rng.choice(b"abcdefgh/._- \xc3\xa9\xff")
                     for _ in range(n)).replace(b"\x00", b"z") or b"x"

    def op_symlink(self, ents):
        d = self.pick_dir(ents)
        name = self.new_name(b"s")
        target = self.gen_target(ents)
        path = self.path(d, name)
        self.note("symlink %s (%d bytes)" % (self.rel(path), len(target)))
        self.live_call("symlink", path, os.symlink, target, path)
        node = self._node("symlink", 0o777)
        node.target = target
        self.new_child(d, node, name)
        return True

    def op_mknod(self, ents):
        d = self.pick_dir(ents)
        name = self.new_name(b"q")
        req = self.pick([0o644, 0o600, 0o666, 0o620])
        path = self.path(d, name)
        self.note("mknod fifo %s mode=%o" % (self.rel(path), req))
        self.live_call("mknod", path, os.mknod, path,
                       stat.S_IFIFO | req)
        self.new_child(d, self._node("fifo", req & ~UMASK), name)
        return True

    def can_move(self, node, into):
        """Whether directory entry `node` may go into directory `into`."""
        return node.kind != "dir" or node.nid not in self.chain(into)

    def do_rename(self, sd, sname, dd, dname):
        """The model of rename(sd/sname, dd/dname) (dd/dname may exist)."""
        node = sd.entries[sname]
        target = dd.entries.get(dname)
        if target is node:
            return  # the same inode: rename does nothing
        if target is not None:
            self._unlink(dd, dname)
        self._unlink(sd, sname)
        self._link(dd, dname, node)
        sd.mtime = None
        dd.mtime = None

    def rename_to(self, what, sd, sname, dd, dname, fn, *flags):
        """Notes and makes (live) fn(sd/sname, dd/dname, *flags), `what`
        in the log ("rename over" is a rename), and renames in the model."""
        src, dst = self.path(sd, sname), self.path(dd, dname)
        self.note("%s %s %s" % (what, self.rel(src), self.rel(dst)))
        self.live_call(what.replace(" over", ""), src, fn, src, dst, *flags)
        self.do_rename(sd, sname, dd, dname)
        return True

    def op_rename(self, ents):
        sd, sname, node = self.pick_or_skip(ents)
        dd = self.pick_dir(ents) if self.rng.random() < 0.7 else sd
        if not self.can_move(node, dd):
            return False
        dname = self.new_name(b"r") if self.rng.random() < 0.5 else sname
        if dname in dd.entries and dd.entries[dname] is not node:
            dname = self.new_name(b"r")
        return self.rename_to("rename", sd, sname, dd, dname, os.rename)

    def op_rename_over(self, ents):
        sd, sname, node = self.pick_or_skip(ents)
        if node.kind == "dir":
            cands = [e for e in ents if e[2].kind == "dir" and not e[2].entries
                     and e[2] is not node and self.can_move(node, e[0])]
        else:
            cands = [e for e in ents if e[2].kind != "dir"
                     and (e[0], e[1]) != (sd, sname)]
        dd, dname, _ = self.pick_or_skip(cands)
        return self.rename_to("rename over", sd, sname, dd, dname, os.rename)

    def op_rename_noreplace(self, ents):
        sd, sname, node = self.pick_or_skip(ents)
        dd = self.pick_dir(ents)
        if not self.can_move(node, dd):
            return False
        dname = self.new_name(b"n")
        return self.rename_to("renameat2 NOREPLACE", sd, sname, dd, dname,
                              renameat2, RENAME_NOREPLACE)

    def op_rename_exchange(self, ents):
        a = self.pick(ents)
        b = self.pick(ents)
        if a is None or (a[0], a[1]) == (b[0], b[1]):
            return False
        (ad, aname, an), (bd, bname, bn) = a, b
        if not (self.can_move(an, bd) and self.can_move(bn, ad)):
            return False
        pa, pb = self.path(ad, aname), self.path(bd, bname)
        self.note("renameat2 EXCHANGE %s %s" % (self.rel(pa), self.rel(pb)))
        self.live_call("renameat2 EXCHANGE", pa, renameat2, pa, pb,
                       RENAME_EXCHANGE)
        if an is bn:
            return True
        self._unlink(ad, aname)
        self._unlink(bd, bname)
        self._link(ad, aname, bn)
        self._link(bd, bname, an)
        ad.mtime = None
        bd.mtime = None
        return True

    def op_chmod(self, ents):
        d, name, node = self.pick_or_skip([e for e in ents if e[2].kind != "symlink"])
        if self.rng.random() < 0.5:
            mode = self.rng.getrandbits(12)
        else:
            mode = self.pick([0o644, 0o755, 0o600, 0o700, 0o444, 0o2755,
                              0o4755, 0o1777, 0o000])
        path = self.path(d, name)
        self.note("chmod %s %o" % (self.rel(path), mode))
        self.live_call("chmod", path, os.chmod, path, mode)
        node.mode = mode
        return True

    def op_utime(self, ents):
        d, name, node = self.pick_or_skip(ents)
        at, mt = self.gen_time(), self.gen_time()
        path = self.path(d, name)
        self.note("utimensat %s atime=%d mtime=%d" % (self.rel(path), at, mt))
        self.live_call("utimensat", path, os.utime, path,
                       ns=(at, mt), follow_symlinks=False)
        node.mtime = mt
        return True

    def op_setxattr(self, ents):
        d, name, node = self.pick_or_skip([e for e in ents
                                           if e[2].kind in ("file", "dir")])
        key = b"user.k%d" % self.rng.randrange(8)
        if self.rng.random() < 0.9:
            val = self.gen_data(self.rng.randint(0, 200))
        else:
            val = self.gen_data(self.rng.randint(201, 2000))
        flags = 0
        r = self.rng.random()
        if r < 0.2:
            flags = XATTR_REPLACE if key in node.xattrs else XATTR_CREATE
        path = self.path(d, name)
        self.note("setxattr %s %s len=%d flags=%d" % (
            self.rel(path), key.decode(), len(val), flags))
        self.live_call("setxattr", path, os.setxattr, path, key,
                       val, flags, follow_symlinks=False)
        node.xattrs[key] = val
        return True

    def op_removexattr(self, ents):
        d, name, node = self.pick_or_skip([e for e in ents if e[2].xattrs])
        key = self.pick(sorted(node.xattrs))
        path = self.path(d, name)
        self.note("removexattr %s %s" % (self.rel(path), key.decode()))
        self.live_call("removexattr", path, os.removexattr, path,
                       key, follow_symlinks=False)
        del node.xattrs[key]
        return True

    def op_fsync(self, ents):
        if self.rng.random() < 0.25:
            d = self.pick(self.dirs(ents))
            path = self.dpath(d)
            self.note("fsync dir %s" % self.rel(path))
            if self.live:
                fd = self.call("open dir " + self.rel(path), os.open, path,
                               os.O_RDONLY | os.O_DIRECTORY)
                try:
                    self.call("fsync dir " + self.rel(path), os.fsync, fd)
                finally:
                    os.close(fd)
            return True
        return self._sync(ents, os.fsync, "fsync")

    def op_fdatasync(self, ents):
        return self._sync(ents, os.fdatasync, "fdatasync")

    def _sync(self, ents, fn, what):
        node, path = self.pick_or_skip(self.files(ents))
        cached = self.use_fd(node, path)
        self.note("%s %s" % (what, self.rel(path)))
        if self.live:
            with self.opened(node, path, cached) as fd:
                self.call(what + " " + self.rel(path), fn, fd)
        return True

    def op_open_fd(self, ents):
        if len(self.fds) >= MAX_FDS:
            return False
        node, path = self.pick_or_skip([f for f in self.files(ents)
                                        if f[1] is not None and f[0].fd is None])
        self.note("open (kept) %s" % self.rel(path))
        node.fd = self.call("open " + self.rel(path), os.open, path,
                            os.O_RDWR) if self.live else -1
        self.fds.append(node)
        return True

    def op_close_fd(self, ents):
        node = self.pick_or_skip(self.fds)
        self.note("close (kept) %s" % ("open, no name" if not node.links
                                       else self.rel(self.path(*node.links[0]))))
        if self.live:
            if not node.links:
                self.check_orphan(node)
            os.close(node.fd)
        node.fd = None
        self.fds.remove(node)
        return True

    def op_stat(self, ents):
        d, name, node = self.pick_or_skip(ents)
        path = self.path(d, name)
        self.note("lstat %s" % self.rel(path))
        if self.live:
            st = self.call("lstat " + self.rel(path), os.lstat, path)
            self.check_stat(path, node, st)
        return True

    def op_listdir(self, ents):
        d = self.pick(self.dirs(ents))
        self.note("listdir %s" % self.rel(self.dpath(d)))
        if self.live:
            self.check_listing(d)
        return True

    def op_readlink(self, ents):
        d, name, node = self.pick_or_skip([e for e in ents if e[2].kind == "symlink"])
        path = self.path(d, name)
        self.note("readlink %s" % self.rel(path))
        if self.live:
            got = self.call("readlink " + self.rel(path), os.readlink, path)
            self.check_bytes("readlink", path, 0, node.target, got)
        return True

    def op_seek(self, ents):
        node, path = self.pick_or_skip(self.files(ents))
        cached = self.use_fd(node, path)
        self.note("seek_data/seek_hole %s" % self.rel(path))
        if self.live:
            with self.opened(node, path, cached, os.O_RDONLY) as fd:
                self.check_holes(fd, path, node)
        return True

    def check_holes(self, fd, path, node):
        """SEEK_DATA/SEEK_HOLE from 0 to EOF: increasing, inside the
        file, and every byte of every hole zero in the model (where the
        data lies is the file system's choice; a hole over data is not);
        SEEK_DATA at EOF is ENXIO."""
        data = node.data
        size = len(data)
        r = self.rel(path)
        pos = 0
        while pos < size:
            try:
                d = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    self.fail("SEEK_DATA %s at %d: unexpected %s" % (
                        r, pos, _errname(e.errno)))
                d = size
            if d < pos or d > size:
                self.fail("SEEK_DATA %s at %d gave %d (size %d)" % (r, pos, d, size))
            if data.count(0, pos, d) != d - pos:
                i = pos + first_difference(bytes(d - pos), data[pos:d])
                self.fail("%s: SEEK_DATA from %d skips to %d, but offset %d holds "
                          "%#04x" % (r, pos, d, i, data[i]))
            if d == size:
                break
            h = self.call("SEEK_HOLE", os.lseek, fd, d, os.SEEK_HOLE)
            if h <= d or h > size:
                self.fail("SEEK_HOLE %s at %d gave %d (size %d)" % (r, d, h, size))
            pos = h
        try:
            x = os.lseek(fd, size, os.SEEK_DATA)
            self.fail("SEEK_DATA %s at EOF (%d) gave %d, expected ENXIO" % (
                r, size, x))
        except OSError as e:
            if e.errno != errno.ENXIO:
                self.fail("SEEK_DATA %s at EOF: %s, expected ENXIO" % (
                    r, _errname(e.errno)))

    def op_expect_error(self, ents):
        """A call that must fail, chosen among those the model allows."""
        rng = self.rng
        cases = ["enametoolong", "enoent_open", "enoent_rmdir"]
        nondirs = [e for e in ents if e[2].kind != "dir"]
        files = [e for e in ents if e[2].kind == "file"]
        dirs = [e for e in ents if e[2].kind == "dir"]
        full = [e for e in dirs if e[2].entries]
        if ents:
            cases += ["eexist_mkdir", "eexist_create", "eexist_symlink",
                      "eexist_mknod", "eexist_noreplace"]
        if nondirs:
            cases += ["enotdir_rmdir", "eexist_link"]
        if files:
            cases += ["enotdir_lookup"]
        if dirs:
            cases += ["eisdir_unlink", "eperm_link_dir", "eisdir_open"]
        if full:
            cases += ["enotempty_rmdir", "einval_into_self"]
        if dirs and nondirs:
            cases += ["eisdir_rename", "enotdir_rename"]
        if full and len(dirs) > 1:
            cases += ["enotempty_rename"]
        if [e for e in ents if e[2].kind in ("file", "dir")]:
            cases += ["eexist_xattr", "enodata_replace", "enodata_remove"]
        case = cases[rng.randrange(len(cases))]
        self.note("expect_error %s" % case)
        p = self.path
        E = errno
        # case: (names to pick from, call, errnos, fn, arguments after the path)
        one_name = {
            "enotdir_rmdir": (nondirs, "rmdir non-directory", (E.ENOTDIR,),
                              os.rmdir, ()),
            "eisdir_unlink": (dirs, "unlink directory", (E.EISDIR, E.EPERM),
                              os.unlink, ()),
            "eisdir_open": (dirs, "open directory O_RDWR", (E.EISDIR,),
                            os.open, (os.O_RDWR,)),
            "enotempty_rmdir": (full, "rmdir non-empty",
                                (E.ENOTEMPTY, E.EEXIST), os.rmdir, ()),
        }
        if case == "enametoolong":
            d = self.pick_dir(ents)
            name = self.prefix + b"x" * (256 - len(self.prefix))
            self.expect("create 256-byte name", (E.ENAMETOOLONG,), os.open,
                        p(d, name), os.O_CREAT | os.O_RDWR, 0o644)
        elif case == "enoent_open":
            d = self.pick_dir(ents)
            self.expect("open missing", (E.ENOENT,), os.open,
                        p(d, self.prefix + b"missing"), os.O_RDONLY)
        elif case == "enoent_rmdir":
            d = self.pick_dir(ents)
            self.expect("rmdir missing", (E.ENOENT,), os.rmdir,
                        p(d, self.prefix + b"missing"))
        elif case.startswith("eexist_") and case[7:] in (
                "mkdir", "create", "symlink", "mknod", "link", "noreplace"):
            d, name, node = self.pick(nondirs if case == "eexist_link" else ents)
            path = p(d, name)
            what = case[7:]
            if what == "mkdir":
                self.expect("mkdir existing", (E.EEXIST,), os.mkdir, path)
            elif what == "create":
                self.expect("O_EXCL existing", (E.EEXIST,), os.open, path,
                            os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
            elif what == "symlink":
                self.expect("symlink existing", (E.EEXIST,), os.symlink,
                            b"x", path)
            elif what == "mknod":
                self.expect("mknod existing", (E.EEXIST,), os.mknod, path,
                            stat.S_IFIFO | 0o644)
            elif what == "link":
                od, oname, _ = self.pick(ents)
                self.expect("link onto existing", (E.EEXIST,), os.link, path,
                            p(od, oname), follow_symlinks=False)
            else:
                od, oname, _ = self.pick(ents)
                self.expect("renameat2 NOREPLACE onto existing", (E.EEXIST,),
                            renameat2, p(od, oname), path, RENAME_NOREPLACE)
        elif case in one_name:
            pool, what, errnos, fn, extra = one_name[case]
            d, name, _ = self.pick(pool)
            self.expect(what, errnos, fn, p(d, name), *extra)
        elif case == "enotdir_lookup":
            d, name, _ = self.pick(files)
            self.expect("lookup through a file", (E.ENOTDIR,), os.lstat,
                        p(d, name) + b"/x")
        elif case == "eperm_link_dir":
            d, name, _ = self.pick(dirs)
            self.expect("link directory", (E.EPERM,), os.link, p(d, name),
                        p(d, self.prefix + b"dirlink"), follow_symlinks=False)
        elif case == "einval_into_self":
            d, name, node = self.pick(full)
            inner = [x for x in self.dirs(ents) if not self.can_move(node, x)
                     and x is not node]
            into = self.pick(inner) or node
            self.expect("rename directory into itself", (E.EINVAL,), os.rename,
                        p(d, name), p(into, self.prefix + b"inside"))
        elif case in ("eisdir_rename", "enotdir_rename"):
            self.expect_rename_file_dir(nondirs, dirs, case == "eisdir_rename")
        elif case == "enotempty_rename":
            od, oname, onode = self.pick(full)
            srcs = [e for e in dirs if e[2] is not onode
                    and self.can_move(e[2], od) and self.can_move(onode, e[0])
                    and e[2].nid not in self.chain(onode)]
            s = self.pick(srcs)
            if s is None:
                self.expected_errors += 1  # nothing to try: count it alike
                return True
            self.expect("rename directory over non-empty directory",
                        (E.ENOTEMPTY, E.EEXIST), os.rename, p(s[0], s[1]),
                        p(od, oname))
        else:
            d, name, node = self.pick([e for e in ents
                                       if e[2].kind in ("file", "dir")])
            path = p(d, name)
            have = sorted(node.xattrs)
            if case == "eexist_xattr" and have:
                key = self.pick(have)
                self.expect("setxattr XATTR_CREATE existing", (E.EEXIST,),
                            os.setxattr, path, key, b"v", XATTR_CREATE,
                            follow_symlinks=False)
            elif case == "enodata_replace":
                key = b"user.missing%d" % rng.randrange(4)
                self.expect("setxattr XATTR_REPLACE missing", (E.ENODATA,),
                            os.setxattr, path, key, b"v", XATTR_REPLACE,
                            follow_symlinks=False)
            else:
                key = b"user.missing%d" % rng.randrange(4)
                self.expect("removexattr missing", (E.ENODATA,),
                            os.removexattr, path, key, follow_symlinks=False)
        return True

    def expect_rename_file_dir(self, nondirs, dirs, file_over_dir):
        """rename of a non-directory over a directory (EISDIR) or, not
        file_over_dir, of a directory over a non-directory (ENOTDIR). A
        directory above the file would fail otherwise (ENOTEMPTY as the
        target, EINVAL as the source): only the others are picked, and
        with none the expected error is counted all the same."""
        fd, fname, _ = self.pick(nondirs)
        dd, dname, _ = self.pick([e for e in dirs if self.can_move(e[2], fd)]
                                 or [(None, None, None)])
        if dd is None:
            self.expected_errors += 1
            return
        f, d = self.path(fd, fname), self.path(dd, dname)
        if file_over_dir:
            self.expect("rename file over directory", (errno.EISDIR,),
                        os.rename, f, d)
        else:
            self.expect("rename directory over file", (errno.ENOTDIR,),
                        os.rename, d, f)

    # -------------------------------------------------------------- checks

    KIND = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink",
            stat.S_IFIFO: "fifo"}

    def check_stat(self, path, node, st, fd=False):
        r = self.rel(path)
        kind = self.KIND.get(stat.S_IFMT(st.st_mode), oct(stat.S_IFMT(st.st_mode)))
        if kind != node.kind:
            self.fail("%s: type %s, expected %s" % (r, kind, node.kind))
        if node.kind != "symlink" and stat.S_IMODE(st.st_mode) != node.mode:
            self.fail("%s: mode %04o, expected %04o" % (
                r, stat.S_IMODE(st.st_mode), node.mode))
        if node.kind != "dir" and st.st_size != node.size():
            self.fail("%s: size %d, expected %d" % (r, st.st_size, node.size()))
        if node.kind != "dir" and st.st_nlink != len(node.links):
            self.fail("%s: %d links, expected %d" % (r, st.st_nlink,
                                                     len(node.links)))
        if node.kind == "dir" and not node.partial:
            subdirs = sum(1 for c in node.entries.values() if c.kind == "dir")
            if st.st_nlink == 1:
                self.dir_nlink.add("one")
            elif st.st_nlink == 2 + subdirs:
                self.dir_nlink.add("posix")
            else:
                self.fail("%s: directory with %d subdirectories has %d links "
                          "(neither 1 nor %d)" % (r, subdirs, st.st_nlink,
                                                  2 + subdirs))
            if len(self.dir_nlink) > 1:
                self.fail("%s: directory link counts mix btrfs's 1 and "
                          "POSIX's 2 + subdirectories" % r)
        if node.mtime is not None and st.st_mtime_ns != node.mtime:
            self.fail("%s: mtime %d ns, expected %d (set by utimensat)" % (
                r, st.st_mtime_ns, node.mtime))

    def check_listing(self, d):
        path = self.dpath(d)
        names = set(self.call("readdir " + self.rel(path), os.listdir, path))
        if d.partial:
            names = {n for n in names if n.startswith(self.prefix)}
        want = set(d.entries)
        if names != want:
            miss = sorted(want - names)[:5]
            extra = sorted(names - want)[:5]
            self.fail("readdir %s: missing %s, unexpected %s" % (
                self.rel(path), [pct(x) for x in miss], [pct(x) for x in extra]))

    def check_content(self, fd, path, node):
        size = len(node.data)
        off = 0
        while off < size:
            got = self.call("read " + self.rel(path), os.pread, fd,
                            min(1 << 20, size - off), off)
            if not got:
                break
            self.check_bytes("content", path, off, node.data[off:off + len(got)], got)
            off += len(got)
        tail = self.call("read " + self.rel(path), os.pread, fd, 4096, size)
        if off != size or tail:
            self.fail("content %s: %d bytes readable, expected %d" % (
                self.rel(path), off + len(tail), size))

    def check_orphan(self, node):
        st = self.call("fstat", os.fstat, node.fd)
        if st.st_nlink != 0:
            self.fail("open file with no name left has %d links" % st.st_nlink)
        if st.st_size != len(node.data):
            self.fail("open file with no name left: size %d, expected %d" % (
                st.st_size, len(node.data)))
        self.check_content(node.fd, None, node)

    def check_xattrs(self, path, node):
        names = self.call("listxattr " + self.rel(path), os.listxattr, path,
                          follow_symlinks=False)
        have = {os.fsencode(n) for n in names if n.startswith("user.")}
        if have != set(node.xattrs):
            self.fail("%s: user xattrs %s, expected %s" % (
                self.rel(path), sorted(have), sorted(node.xattrs)))
        for k, v in node.xattrs.items():
            got = self.call("getxattr " + self.rel(path), os.getxattr, path, k,
                            follow_symlinks=False)
            if got != v:
                self.fail("%s: xattr %s: %d bytes differ from the expected %d" % (
                    self.rel(path), k.decode(), len(got), len(v)))

    def verify(self):
        """Checks every path of the model (and open files with no name)."""
        self.opname = "verify"
        for n in self.fds:
            if not n.links and self.live:
                self.check_orphan(n)
        inos = {}
        own = self.dpath(self.own)
        st = self.call("lstat " + self.rel(own), os.lstat, own)
        self.check_stat(own, self.own, st)
        stack = [self.own, self.shared]
        counts = {"file": 0, "dir": 0, "symlink": 0, "fifo": 0, "bytes": 0,
                  "names": 0}
        while stack:
            d = stack.pop()
            self.check_listing(d)
            for name, node in d.entries.items():
                path = self.path(d, name)
                st = self.call("lstat " + self.rel(path), os.lstat, path)
                self.check_stat(path, node, st)
                prev = inos.get(node.nid)
                if prev is None:
                    inos[node.nid] = st.st_ino
                    counts[node.kind] += 1
                    counts["bytes"] += len(node.data or b"")
                elif prev != st.st_ino:
                    self.fail("%s: inode %d, but another name of the same file "
                              "has inode %d" % (self.rel(path), st.st_ino, prev))
                counts["names"] += 1
                if node.kind == "file":
                    fd = self.call("open " + self.rel(path), os.open, path,
                                   os.O_RDONLY | os.O_NOFOLLOW)
                    try:
                        self.check_content(fd, path, node)
                        self.check_holes(fd, path, node)
                    finally:
                        os.close(fd)
                elif node.kind == "symlink":
                    got = self.call("readlink " + self.rel(path), os.readlink, path)
                    self.check_bytes("readlink", path, 0, node.target, got)
                if node.kind in ("file", "dir"):
                    self.check_xattrs(path, node)
                if node.kind == "dir":
                    stack.append(node)
        if len(set(inos.values())) != len(inos):
            self.fail("two files of the model share an inode number")
        return counts

    def model_counts(self):
        counts = {"file": 0, "dir": 0, "symlink": 0, "fifo": 0, "bytes": 0,
                  "names": 0}
        seen = set()
        for _, _, n in self.entries():
            counts["names"] += 1
            if n.nid not in seen:
                seen.add(n.nid)
                counts[n.kind] += 1
                counts["bytes"] += len(n.data or b"")
        return counts

    def snapshot(self):
        """The model as plain values: {path from DIR: (kind, mode, content
        or target, xattrs, mtime, names of the inode)} (tests compare
        replays with it)."""
        out = {}
        for d, name, n in self.entries():
            body = bytes(n.data) if n.kind == "file" else n.target
            out[self.path(d, name)[len(self.top):]] = (
                n.kind, n.mode, body, tuple(sorted(n.xattrs.items())),
                n.mtime, len(n.links))
        return out

    def explicit_mtimes(self):
        """Paths (percent-encoded, from DIR, with a leading /) whose mtime
        the model knows: set by utimensat and not changed since."""
        out = []
        for d, name, n in self.entries():
            if n.mtime is not None:
                out.append(pct(self.path(d, name)[len(self.top):]))
        return sorted(out)

    # ----------------------------------------------------------------- run

    def choose(self, ents):
        ops = []
        total = 0
        crowded = len(ents) >= self.max_entries
        for op, w in WEIGHTS.items():
            if crowded and op in CREATING:
                continue
            total += w
            ops.append((total, op))
        x = self.rng.randrange(total)
        for acc, op in ops:
            if x < acc:
                return op
        return ops[-1][1]

    def setup(self):
        if self.live:
            p = self.dpath(self.own)
            self.call("mkdir " + self.rel(p), os.mkdir, p, 0o755)

    def run(self, nops):
        self.setup()
        for k in range(1, nops + 1):
            self.k = k
            ents = self.entries()
            op = self.choose(ents)
            self.opname = op
            try:
                done = getattr(self, "op_" + op)(ents)
            except Skip:
                done = False
            key = op if done else "skipped"
            self.counts[key] = self.counts.get(key, 0) + 1
        self.k = nops
        return self.finish()

    def finish(self):
        """Checks everything, then closes the kept descriptors (a file with
        no name left goes with its last one)."""
        counts = self.verify() if self.live else self.model_counts()
        for n in self.fds:
            if self.live:
                os.close(n.fd)
            n.fd = None
        self.fds = []
        return counts


# ------------------------------------------------------------------ driver


def worker_main(args, index, top, replay):
    log_fd = None
    if args.log and not args.verify_only:
        log_fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    w = Worker(top, args.seed, index, live=not args.verify_only,
               max_size=args.max_size, max_entries=args.max_entries,
               log_fd=log_fd, replay_eopnotsupp=replay)
    t = time.monotonic()
    res = {"index": index, "ok": False, "error": None}
    code = 1
    try:
        if args.verify_only:
            w.run(args.ops)
            w.live = True
            res["final"] = w.verify()
        else:
            res["final"] = w.run(args.ops)
        res["ok"] = True
        code = 0
    except Failure as e:
        res["error"] = str(e)
    except Exception:  # a crash of this script, not a finding
        res["error"] = "worker %d op #%d %s: crashed: %s" % (
            index, w.k, w.opname, traceback.format_exc())
        code = 2
    res.update({
        "ops_done": w.k,
        "elapsed_s": round(time.monotonic() - t, 3),
        "counts": w.counts,
        "eopnotsupp": w.eopnotsupp,
        "expected_errors": w.expected_errors,
        "reads_checked": w.reads_checked,
        "bytes_written": w.bytes_written,
        "dir_nlink": sorted(w.dir_nlink),
        "explicit_mtime": w.explicit_mtimes(),
    })
    return code, res


def check_top(top, procs):
    """DIR holds shared and p0..pP-1, and shared only names of workers."""
    want = {b"shared"} | {b"p%d" % i for i in range(procs)}
    have = set(os.listdir(top))
    errs = []
    if have != want:
        errs.append("%s: entries %s, expected %s" % (
            pct(top), sorted(pct(x) for x in have), sorted(pct(x) for x in want)))
    if b"shared" in have:
        prefixes = tuple(b"p%d-" % i for i in range(procs))
        stray = [pct(n) for n in os.listdir(top + b"/shared")
                 if not n.startswith(prefixes)]
        if stray:
            errs.append("shared: names of no worker: %s" % stray[:5])
    return errs


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="seeded POSIX operations checked against a model")
    ap.add_argument("dir", help="an existing, empty directory")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--ops", type=int, required=True,
                    help="operations per worker")
    ap.add_argument("--procs", type=int, default=1, help="worker processes")
    ap.add_argument("--log", help="append one line per operation to FILE")
    ap.add_argument("--verify-only", action="store_true",
                    help="replay the model without touching DIR, then check DIR")
    ap.add_argument("--summary", help="with --verify-only: the run's JSON "
                    "summary (its EOPNOTSUPP fallocate calls)")
    ap.add_argument("--max-size", type=int, default=1 << 20,
                    help="largest file size (default 1 MiB)")
    ap.add_argument("--max-entries", type=int, default=150,
                    help="names per worker above which nothing is created")
    args = ap.parse_args(argv)
    if args.procs < 1 or args.ops < 0 or args.max_size < 4096:
        ap.error("--procs >= 1, --ops >= 0, --max-size >= 4096")
    top = os.fsencode(os.path.abspath(args.dir))
    if not os.path.isdir(top):
        ap.error("%s is not a directory" % args.dir)
    replays = [{} for _ in range(args.procs)]
    if args.summary:
        with open(args.summary) as f:
            prev = json.load(f)
        if (prev.get("seed"), prev.get("ops"), prev.get("procs")) != (
                args.seed, args.ops, args.procs):
            ap.error("--summary is of another run (seed, ops, procs)")
        for p in prev["workers"]:
            replays[p["index"]] = p.get("eopnotsupp", {})
    os.umask(UMASK)
    t = time.monotonic()
    if not args.verify_only:
        os.mkdir(top + b"/shared", 0o755)
    sys.stdout.flush()
    sys.stderr.flush()
    kids = []
    for i in range(args.procs):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 2
            try:
                code, res = worker_main(args, i, top, replays[i])
                data = json.dumps(res).encode()
                while data:
                    data = data[os.write(w, data):]
            finally:
                os._exit(code)
        os.close(w)
        kids.append((pid, r))
    workers = []
    errors = []
    worst = 0
    for i, (pid, r) in enumerate(kids):
        chunks = []
        while True:
            b = os.read(r, 1 << 16)
            if not b:
                break
            chunks.append(b)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        try:
            res = json.loads(b"".join(chunks))
        except ValueError:
            res = {"index": i, "ok": False,
                   "error": "worker %d died (wait status %#x)" % (i, status)}
        code = os.waitstatus_to_exitcode(status)
        worst = max(worst, 2 if code not in (0, 1) else code)
        if res.get("error"):
            errors.append(res["error"])
        workers.append(res)
    if not errors:
        errors += check_top(top, args.procs)
        if errors:
            worst = max(worst, 1)
    totals = {}
    for res in workers:
        for k, v in res.get("counts", {}).items():
            totals[k] = totals.get(k, 0) + v
    nlink = sorted({s for res in workers for s in res.get("dir_nlink", [])})
    summary = {
        "ok": not errors,
        "mode": "verify" if args.verify_only else "run",
        "seed": args.seed,
        "ops": args.ops,
        "procs": args.procs,
        "elapsed_s": round(time.monotonic() - t, 3),
        "errors": errors,
        "op_counts": totals,
        "reads_checked": sum(r.get("reads_checked", 0) for r in workers),
        "expected_errors": sum(r.get("expected_errors", 0) for r in workers),
        "bytes_written": sum(r.get("bytes_written", 0) for r in workers),
        "eopnotsupp": {m: sum(len(r.get("eopnotsupp", {}).get(m, []))
                              for r in workers)
                       for m in FALLOC_NAMES
                       if any(r.get("eopnotsupp", {}).get(m) for r in workers)},
        "dir_nlink": nlink,
        "explicit_mtime": sorted(p for r in workers
                                 for p in r.get("explicit_mtime", [])),
        "workers": workers,
    }
    json.dump(summary, sys.stdout, sort_keys=True, indent=1)
    sys.stdout.write("\n")
    for e in errors:
        print("rw_ops: " + e, file=sys.stderr)
    return 0 if not errors else (worst or 1)


if __name__ == "__main__":
    sys.exit(main())
