#!/usr/bin/env python3
"""Build a rich source tree for `mkfs --rootdir` tests (run as root).

Usage: python3 mkfs_source.py DIR [--big-mib N]

Every file type and the corner cases an image builder gets wrong:
regular files (empty, tiny/inline, exactly one sector, multi-extent larger
than 32 MiB, sparse with holes at start/middle/end, a sparse file past
4 GiB), fifo, socket, char and block devices, symlinks (short, long,
dangling), hard links (two names in one directory and across
directories), deep nesting, 255-byte names, non-UTF-8 names, a directory
with a few thousand entries including two names whose btrfs name hashes
collide (same crc32c, equal length), xattrs (user.*, trusted.*, POSIX
access and default ACLs via setfacl), setuid/setgid/sticky modes, several
uid/gid, nanosecond mtimes (set last, directories deepest first).

Deterministic: the same DIR content every run (data from a seeded PRNG).
"""

import argparse
import os
import random
import socket
import stat
import subprocess
import sys

SECTOR = 4096
MIB = 1 << 20


def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


# Two distinct equal-length names with the same crc32c, found once with
# find_collision() (a birthday search, too slow to repeat in every run).
# CRC is affine, so for equal lengths the collision holds for btrfs's name
# hash (crc32c seeded with ~1) too.
COLLIDING = (b"hc01371838", b"hc02000402")


def colliding_names():
    a, b = COLLIDING
    assert a != b and len(a) == len(b) and crc32c(a) == crc32c(b)
    return COLLIDING


def find_collision():
    seen = {}
    i = 0
    while True:
        n = b"hc%08d" % i
        h = crc32c(n)
        if h in seen:
            return seen[h], n
        seen[h] = n
        i += 1


def data(rng, n):
    return rng.randbytes(n)


def write(path, content, mode=0o644, uid=0, gid=0):
    with open(path, "wb") as f:
        f.write(content)
    os.chown(path, uid, gid)
    os.chmod(path, mode)


def sparse(path, size, pieces):
    """A file of `size` bytes with data only at the (offset, bytes) pieces."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for off, b in pieces:
            os.pwrite(fd, b, off)
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def build(root, big_mib):
    rng = random.Random(9)
    os.makedirs(root, exist_ok=True)
    j = lambda *p: os.path.join(root, *p)  # noqa: E731
    mtimes = []  # (path, ns), applied at the end

    # Regular files.
    os.makedirs(j("files"))
    write(j("files", "empty"), b"")
    write(j("files", "tiny"), b"hello, btrfs\n")
    write(j("files", "inline-max"), data(rng, 2048))
    write(j("files", "sector"), data(rng, SECTOR))
    write(j("files", "sector-plus-1"), data(rng, SECTOR + 1))
    write(j("files", "odd"), data(rng, 123457))
    # Multi-extent: larger than one 32 MiB extent would hold... and more
    # than one data chunk's worth of csum items.
    with open(j("files", "big"), "wb") as f:
        for _ in range(big_mib):
            f.write(data(rng, MIB))
    # Sparse: holes at the start, in the middle and at the end.
    sparse(j("files", "sparse"), 10 * MIB,
           [(1 * MIB, data(rng, 64 * 1024)), (5 * MIB, data(rng, 8192))])
    sparse(j("files", "hole-only"), 3 * MIB, [])
    sparse(j("files", "sparse-unaligned"), 2 * MIB + 17,
           [(SECTOR * 3 + 100, data(rng, 5000))])
    # Past 4 GiB (32-bit offsets overflow here).
    sparse(j("files", "huge-sparse"), (4 << 30) + 3 * SECTOR + 5,
           [(0, data(rng, SECTOR)), ((4 << 30) + SECTOR, data(rng, SECTOR))])

    # Special files.
    os.makedirs(j("special"))
    os.mkfifo(j("special", "fifo"), 0o640)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(j("special", "sock"))
    s.close()
    os.mknod(j("special", "null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mknod(j("special", "blk"), 0o660 | stat.S_IFBLK, os.makedev(7, 200))
    os.mknod(j("special", "bigdev"), 0o600 | stat.S_IFCHR,
             os.makedev(4095, 1048575))
    os.chown(j("special", "blk"), 0, 6)

    # Symlinks.
    os.makedirs(j("links"))
    os.symlink("../files/tiny", j("links", "rel"))
    os.symlink("/nonexistent/dangling", j("links", "dangling"))
    os.symlink("t" * 1000 + "/" + "u" * 2000, j("links", "long-target"))
    # The longest target a 4K-node filesystem holds (an inline extent in
    # one leaf: 4096 - 101 header - 25 item - 21 extent header); the
    # kernel refuses longer ones there (ENAMETOOLONG).
    os.symlink("x" * 3949, j("links", "max-target"))
    os.lchown(j("links", "rel"), 1234, 5678)

    # Hard links: two names in one directory, and across directories.
    os.makedirs(j("hard", "a"))
    os.makedirs(j("hard", "b"))
    write(j("hard", "a", "one"), data(rng, 10000))
    os.link(j("hard", "a", "one"), j("hard", "a", "two"))
    os.link(j("hard", "a", "one"), j("hard", "b", "three"))
    write(j("hard", "tiny"), b"inline and linked\n")
    os.link(j("hard", "tiny"), j("hard", "b", "tiny-too"))
    os.mkfifo(j("hard", "fifo"))
    os.link(j("hard", "fifo"), j("hard", "fifo-link"))

    # Deep nesting.
    d = j("deep")
    for i in range(40):
        d = os.path.join(d, "level%02d" % i)
    os.makedirs(d)
    write(os.path.join(d, "bottom"), b"at the bottom\n")

    # Long and non-UTF-8 names.
    os.makedirs(j("names"))
    rootb = os.fsencode(j("names"))
    for n in [b"L" * 255, b"\xff\xfe-latin1-\xe9t\xe9", b"\xc3(",
              "ünïcødé-名前-🙂".encode(), b"with space", b"new\nline",
              b"-dash", b".hidden", b"\x01ctrl"]:
        write(os.path.join(rootb, n), n)
    os.makedirs(os.path.join(rootb, b"D" * 255))
    write(os.path.join(rootb, b"D" * 255, b"E" * 255), b"long/long")

    # Many entries in one directory, with a name hash collision.
    os.makedirs(j("many"))
    for i in range(3000):
        write(j("many", "entry-%05d" % i), b"" if i % 3 else b"%d\n" % i)
    for n in colliding_names():
        write(os.path.join(os.fsencode(j("many")), n), n)

    # Xattrs and ACLs.
    os.makedirs(j("xattr", "acl-dir"))
    write(j("xattr", "plain"), b"x")
    os.setxattr(j("xattr", "plain"), "user.empty", b"")
    os.setxattr(j("xattr", "plain"), "user.short", b"v")
    os.setxattr(j("xattr", "plain"), "user.binary", bytes(range(256)))
    os.setxattr(j("xattr", "plain"), "user.big", data(rng, 1500))
    os.setxattr(j("xattr", "plain"), "trusted.t", b"trusted value")
    for i in range(20):
        os.setxattr(j("xattr", "plain"), "user.n%03d" % i, b"%d" % i)
    os.setxattr(j("xattr"), "user.on-dir", b"dir xattr")
    os.symlink("plain", j("xattr", "link"))
    os.setxattr(j("xattr", "link"), "trusted.on-symlink", b"s",
                follow_symlinks=False)
    write(j("xattr", "acl-file"), b"acl")
    subprocess.run(["setfacl", "-m", "u:1000:rw,g:2000:r,m::rw",
                    j("xattr", "acl-file")], check=True)
    subprocess.run(["setfacl", "-m", "u:1001:rwx", j("xattr", "acl-dir")],
                   check=True)
    subprocess.run(["setfacl", "-d", "-m", "u:1002:rx,g::r",
                    j("xattr", "acl-dir")], check=True)
    # Inherits the default ACL.
    write(j("xattr", "acl-dir", "inherited"), b"i")

    # Odd modes and owners.
    os.makedirs(j("modes"))
    for name, mode, uid, gid in [("setuid", 0o4755, 0, 0),
                                 ("setgid", 0o2711, 1, 2),
                                 ("all", 0o7777, 65534, 65534),
                                 ("none", 0o000, 4000000000, 3000000000),
                                 ("sticky-file", 0o1644, 42, 43)]:
        write(j("modes", name), name.encode())
        os.chown(j("modes", name), uid, gid)
        os.chmod(j("modes", name), mode)
    os.makedirs(j("modes", "sticky-dir"))
    os.chmod(j("modes", "sticky-dir"), 0o1777)
    os.makedirs(j("modes", "setgid-dir"))
    os.chown(j("modes", "setgid-dir"), 100, 100)
    os.chmod(j("modes", "setgid-dir"), 0o2775)

    # Nanosecond mtimes (and old/negative/future ones), children first.
    all_paths = []
    for dp, dns, fns in os.walk(root, topdown=False):
        for n in fns + dns:
            all_paths.append(os.path.join(dp, n))
    all_paths.append(root)
    for i, p in enumerate(all_paths):
        ns = 1_600_000_000_123_456_789 + i * 1_000_000_007
        if i % 97 == 5:
            ns = -86400 * 1_000_000_000 - 1
        if i % 89 == 7:
            ns = 4_102_444_800_999_999_999  # 2100
        mtimes.append((p, ns))
    for p, ns in mtimes:
        os.utime(p, ns=(ns, ns), follow_symlinks=False)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--big-mib", type=int, default=40)
    a = ap.parse_args(argv)
    if os.path.exists(a.dir) and os.listdir(a.dir):
        sys.exit("%s: exists and is not empty" % a.dir)
    build(a.dir, a.big_mib)


if __name__ == "__main__":
    main()
