#!/usr/bin/env python3
"""Read-ahead pushed into the page cache vs writers of the same file.

    push_race.py FILE SECONDS READERS

The read-write mount answers a small forward READ with a window of the
file and pushes what lies past the request into the kernel's page cache,
and pushes the next window once an lseek lands well into what was pushed
(crates/fuse/src/readahead.rs, rw_push.rs). A push landing after a write to the same
pages would put older bytes over newer ones. This provokes exactly that
order: a writer rewrites the even 4 KiB blocks of FILE with a new
generation (each block says (generation, index)), closes, and publishes
the generation as complete; READERS processes drop the file's page cache
(POSIX_FADV_DONTNEED, so their reads miss and READs reach the daemon) and
walk every other block with small reads from a random place (the odd
readers with SEEK_DATA before each read, as cp does), each noting the
complete generation before it reads a block and requiring the block to
be at least that new, and the odd blocks zeros. Exit 0 with the
counts when every read was right, else the first wrong one and exit 1.
"""

import mmap
import os
import random
import struct
import sys
import time

BLOCK = 4096
MIB = 4


def block(gen, i):
    return struct.pack("<QQ", gen, i) * (BLOCK // 16)


def main():
    path, seconds, readers = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    size = MIB << 20
    n = size // BLOCK
    done = mmap.mmap(-1, 8)

    def write_generation(gen):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        for i in range(0, n, 2):
            os.pwrite(fd, block(gen, i), i * BLOCK)
        os.close(fd)
        done[:8] = struct.pack("<Q", gen)

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, size)
    os.close(fd)
    write_generation(1)
    deadline = time.time() + seconds
    pids = []
    writer = os.fork()
    if writer == 0:
        gen = 1
        rng = random.Random(1)
        while time.time() < deadline:
            gen += 1
            write_generation(gen)
            time.sleep(rng.random() * 0.02)
        os._exit(0)
    for r in range(readers):
        pid = os.fork()
        if pid == 0:
            checked = 0
            rng = random.Random(100 + r)
            try:
                while time.time() < deadline:
                    fd = os.open(path, os.O_RDONLY)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    # Every other block, as cp over the holes: reads the
                    # kernel's readahead takes for random ones.
                    start = rng.randrange(0, n // 2) * 2 + rng.randrange(2)
                    for i in range(start, n, 2):
                        if r % 2:
                            try:
                                os.lseek(fd, i * BLOCK, os.SEEK_DATA)
                            except OSError:
                                pass  # ENXIO: no data after the last hole
                        want = struct.unpack("<Q", done[:8])[0]
                        got = os.pread(fd, 16, i * BLOCK)
                        if i % 2:
                            if got != bytes(16):
                                raise SystemExit("reader %d: block %d (a hole) reads %r"
                                                 % (r, i, got))
                        else:
                            gen, idx = struct.unpack("<QQ", got)
                            if idx != i or gen < want:
                                raise SystemExit(
                                    "reader %d: block %d reads generation %d index %d, "
                                    "after generation %d was complete" % (r, i, gen, idx, want))
                        checked += 1
                    os.close(fd)
            except SystemExit as e:
                sys.stderr.write("%s\n" % e)
                os._exit(1)
            sys.stdout.write("reader %d: %d blocks checked\n" % (r, checked))
            sys.stdout.flush()
            os._exit(0)
        pids.append(pid)
    bad = 0
    for pid in [writer] + pids:
        _, status = os.waitpid(pid, 0)
        bad += status != 0
    gens = struct.unpack("<Q", done[:8])[0]
    print("writer: %d generations" % gens)
    if bad:
        sys.exit("%d processes failed" % bad)


if __name__ == "__main__":
    main()
