#!/usr/bin/env python3
"""O_DIRECT writers on NOCOW and COW files, with a model.

    direct_io.py DIR SEED PROCS OPS          run, checking every read
    direct_io.py --verify DIR SEED PROCS OPS compare the files with the model

Run: makes DIR/nocow (chattr +C, then fallocated) and DIR/cow (written
whole, buffered), FILE_MIB MiB each, then forks PROCS workers of OPS
operations. Worker w owns the 64 KiB chunks c with c % PROCS == w of both
files (so the outcome does not depend on how the workers interleave) and
does, in them: O_DIRECT writes of 4-64 KiB (aligned), O_DIRECT reads and
buffered reads compared with its model, and now and then a buffered write
and an fsync (dirty data next to direct writes). The first half of each
worker's operations uses only O_DIRECT descriptors: while no descriptor
of a file uses the page cache, the kernel lets O_DIRECT writes of it run
in parallel (FOPEN_PARALLEL_DIRECT_WRITES, the inode lock shared); the
second half opens buffered descriptors as well (the kernel then takes
turns) and also reads through a shared mapping of the O_DIRECT
descriptor. Exit 0 when every read matched; else the first difference on
stderr and exit 1.

--verify recomputes the model from SEED (no I/O in between) and compares
both files whole: what a mount shows after the writer's mount is gone.
"""

import ctypes
import fcntl
import mmap
import os
import random
import struct
import sys

FILE_MIB = 16
CHUNK = 64 << 10
SS = 4096
FS_IOC_SETFLAGS = 0x40086602
FS_NOCOW_FL = 0x00800000
NAMES = ("nocow", "cow")


def fallocate(fd, off, length):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, 0, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def initial(name):
    """The file's bytes before the workers: zeros (preallocated) for
    nocow, a fixed pattern for cow."""
    size = FILE_MIB << 20
    if name == "nocow":
        return bytearray(size)
    return bytearray((i * 7 + 3) & 0xFF for i in range(256)) * (size // 256)


def plan(seed, procs, ops, w):
    """Worker w's operations: (kind, file, offset, length, data)."""
    rng = random.Random("%d-%d" % (seed, w))
    chunks = [c for c in range((FILE_MIB << 20) // CHUNK) if c % procs == w]
    for i in range(ops):
        name = NAMES[0] if rng.random() < 0.75 else NAMES[1]
        c = rng.choice(chunks)
        sectors = CHUNK // SS
        a = rng.randrange(sectors)
        n = rng.randint(1, sectors - a)
        off, length = c * CHUNK + a * SS, n * SS
        r = rng.random()
        if i < ops // 2:
            # O_DIRECT only (see the module's comment).
            if r < 0.7:
                yield ("dwrite", name, off, length, rng.randbytes(length))
            else:
                yield ("dread", name, off, length, b"")
            continue
        if r < 0.6:
            data = rng.randbytes(length)
            yield ("dwrite", name, off, length, data)
        elif r < 0.7:
            # Buffered, unaligned inside the range.
            s = rng.randrange(length)
            e = rng.randint(s + 1, length)
            yield ("bwrite", name, off + s, e - s, rng.randbytes(e - s))
        elif r < 0.75:
            yield ("fsync", name, 0, 0, b"")
        elif r < 0.85:
            yield ("dread", name, off, length, b"")
        elif r < 0.9:
            yield ("mread", name, off, length, b"")
        else:
            yield ("bread", name, off, length, b"")


def model(seed, procs, ops):
    files = {n: initial(n) for n in NAMES}
    for w in range(procs):
        for kind, name, off, length, data in plan(seed, procs, ops, w):
            if kind in ("dwrite", "bwrite"):
                files[name][off:off + length] = data
    return files


def aligned(n):
    return mmap.mmap(-1, max(n, SS))


def worker(top, seed, procs, ops, w):
    files = {n: initial(n) for n in NAMES}
    fds = {}
    dfds = {n: os.open(os.path.join(top, n), os.O_RDWR | os.O_DIRECT) for n in NAMES}
    for i, (kind, name, off, length, data) in enumerate(plan(seed, procs, ops, w)):
        if i == ops // 2:
            fds = {n: os.open(os.path.join(top, n), os.O_RDWR) for n in NAMES}
        what = "worker %d op %d: %s %s off=%d len=%d" % (w, i, kind, name, off, length)
        if kind == "dwrite":
            buf = aligned(length)
            buf[:length] = data
            n = os.pwritev(dfds[name], [memoryview(buf)[:length]], off)
            if n != length:
                raise SystemExit("%s: wrote %d" % (what, n))
            files[name][off:off + length] = data
        elif kind == "bwrite":
            if os.pwrite(fds[name], data, off) != length:
                raise SystemExit("%s: short write" % what)
            files[name][off:off + length] = data
        elif kind == "fsync":
            os.fsync(fds[name])
        else:
            if kind == "dread":
                buf = aligned(length)
                n = os.preadv(dfds[name], [memoryview(buf)[:length]], off)
                got = bytes(buf[:n])
            elif kind == "mread":
                with mmap.mmap(dfds[name], length, mmap.MAP_SHARED, mmap.PROT_READ,
                               offset=off) as m:
                    got = bytes(m[:length])
            else:
                got = os.pread(fds[name], length, off)
            want = bytes(files[name][off:off + length])
            if got != want:
                at = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]),
                          min(len(got), len(want)))
                raise SystemExit("%s: differs from the model at byte %d (got %d bytes)"
                                 % (what, off + at, len(got)))
    for fd in list(fds.values()) + list(dfds.values()):
        os.close(fd)


def setup(top):
    size = FILE_MIB << 20
    p = os.path.join(top, "nocow")
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", FS_NOCOW_FL))
    fallocate(fd, 0, size)
    os.close(fd)
    with open(os.path.join(top, "cow"), "wb") as f:
        f.write(initial("cow"))
        f.flush()
        os.fsync(f.fileno())


def main():
    args = sys.argv[1:]
    verify = bool(args) and args[0] == "--verify"
    if verify:
        args = args[1:]
    top, seed, procs, ops = args[0], int(args[1]), int(args[2]), int(args[3])
    if verify:
        want = model(seed, procs, ops)
        for name in NAMES:
            with open(os.path.join(top, name), "rb") as f:
                got = f.read()
            if got != want[name]:
                n = min(len(got), len(want[name]))
                at = next((j for j in range(n) if got[j] != want[name][j]), n)
                sys.exit("%s: differs from the model at byte %d (size %d, want %d)"
                         % (name, at, len(got), len(want[name])))
        return
    setup(top)
    pids = []
    for w in range(procs):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                worker(top, seed, procs, ops, w)
            except SystemExit as e:
                sys.stderr.write("%s\n" % e)
                code = 1
            except OSError as e:
                sys.stderr.write("worker %d: %s\n" % (w, e))
                code = 1
            os._exit(code)
        pids.append(pid)
    bad = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        if status != 0:
            bad += 1
    if bad:
        sys.exit("%d of %d workers failed" % (bad, procs))


if __name__ == "__main__":
    main()
