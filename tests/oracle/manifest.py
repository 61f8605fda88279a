#!/usr/bin/env python3
"""Produce a JSON Lines manifest of a directory tree (the "kernel oracle").

Usage: python3 manifest.py ROOT [--out FILE]

One JSON object per path, sorted by the raw path bytes, the root included as
"/".  Keys (serialised with sort_keys=True, separators=(",", ":")):

  path      path relative to ROOT, starting with "/", percent-encoded
  type      dir | file | symlink | fifo | sock | chr | blk
  ino       st_ino
  mode      st_mode & 0o7777
  uid, gid  owner
  size      st_size
  rdev      st_rdev for chr/blk, else 0
  mtime_ns  st_mtime_ns
  target    percent-encoded symlink target, else null
  xattrs    {percent-encoded name: lowercase hex value}
  link      for non-directories whose (st_dev, st_ino) occurs at several
            paths: the smallest such path (raw bytes), percent-encoded; else null
  sha256    hex sha256 of a regular file's content, else null
  data      regular files: [[start, end], ...] from SEEK_DATA/SEEK_HOLE, else null

Percent-encoding: bytes 0x21..0x7e other than '%' are kept, every other byte
is written as %XX (uppercase hex).

The walk never follows symlinks.  Btrfs subvolumes (which show a different
st_dev) are descended into; real mount points below ROOT (as listed in
/proc/self/mountinfo) are not.

Importable: manifest_lines(root) -> list[str], manifest_records(root) -> list[dict].
"""

import argparse
import errno
import hashlib
import json
import os
import stat
import sys

__all__ = ["pct", "manifest_records", "manifest_lines", "file_data_ranges",
           "hash_file"]

_KEEP = frozenset(b for b in range(0x21, 0x7F) if b != 0x25)
_ENC = [chr(b) if b in _KEEP else "%%%02X" % b for b in range(256)]

CHUNK = 1 << 20          # read size for data ranges
_ZEROS = bytes(4 << 20)  # shared zero buffer for holes


def pct(raw):
    """Percent-encode raw bytes (or str, via os.fsencode)."""
    if isinstance(raw, str):
        raw = os.fsencode(raw)
    return "".join(_ENC[b] for b in raw)


def _unescape_mountinfo(field):
    """Undo mountinfo's \\ooo octal escapes (space, tab, newline, backslash)."""
    out = bytearray()
    i = 0
    n = len(field)
    while i < n:
        oct3 = field[i + 1:i + 4]
        if (field[i] == 0x5C and len(oct3) == 3
                and all(0x30 <= d <= 0x37 for d in oct3)):
            out.append(int(oct3, 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return bytes(out)


def _mount_points():
    """Set of mount point paths (bytes) from /proc/self/mountinfo."""
    points = set()
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            for line in f:
                parts = line.split(b" ")
                if len(parts) > 4:
                    points.add(_unescape_mountinfo(parts[4]))
    except OSError:
        pass
    return points


def file_data_ranges(fd, size):
    """Data ranges of an open file via SEEK_DATA / SEEK_HOLE."""
    ranges = []
    pos = 0
    while True:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:
                break
            raise
        end = os.lseek(fd, start, os.SEEK_HOLE)
        if end <= start:  # defensive: should not happen
            break
        ranges.append([start, end])
        pos = end
    return ranges


def _feed_zeros(h, n):
    zb = memoryview(_ZEROS)
    while n > 0:
        k = min(n, len(_ZEROS))
        h.update(zb[:k])
        n -= k


def hash_file(fd, size, ranges):
    """sha256 of the content: read the data ranges, feed zeros for holes.

    Reads are bounded to CHUNK bytes so memory stays small.  If the file turns
    out to be shorter than st_size (should not happen on a quiescent tree) the
    hash covers what was read.
    """
    h = hashlib.sha256()
    pos = 0
    for start, end in ranges:
        start = min(start, size)
        end = min(end, size)
        if start > pos:
            _feed_zeros(h, start - pos)
            pos = start
        while pos < end:
            buf = os.pread(fd, min(CHUNK, end - pos), pos)
            if not buf:
                return h.hexdigest()
            h.update(buf)
            pos += len(buf)
    if pos < size:
        # Trailing hole: verify quickly that the kernel agrees it is a hole by
        # trusting SEEK_DATA (it returned ENXIO / no more ranges).
        _feed_zeros(h, size - pos)
    return h.hexdigest()


def _open_ro(path):
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    noatime = getattr(os, "O_NOATIME", 0)
    try:
        return os.open(path, flags | noatime)
    except PermissionError:
        return os.open(path, flags)


def _xattrs(path):
    out = {}
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return out
        raise
    for name in names:
        bname = os.fsencode(name)
        try:
            val = os.getxattr(path, name, follow_symlinks=False)
        except OSError as e:
            if e.errno == errno.ENODATA:  # vanished between list and get
                continue
            raise
        out[pct(bname)] = val.hex()
    return out


_FTYPES = {
    stat.S_IFDIR: "dir",
    stat.S_IFREG: "file",
    stat.S_IFLNK: "symlink",
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "sock",
    stat.S_IFCHR: "chr",
    stat.S_IFBLK: "blk",
}


def _ftype(m):
    t = _FTYPES.get(stat.S_IFMT(m))
    if t is None:
        raise ValueError("unknown file type %o" % m)
    return t


def _walk(root):
    """Yield (relpath_bytes, abspath_bytes, stat_result) for every path."""
    mounts = _mount_points()
    root = os.fsencode(root)
    real_root = os.path.realpath(root)
    st = os.lstat(root)
    yield b"/", root, st
    if not stat.S_ISDIR(st.st_mode):
        return
    stack = [(b"", root, real_root)]
    while stack:
        rel, absdir, realdir = stack.pop()
        with os.scandir(absdir) as it:
            entries = [e.name for e in it]
        for name in entries:
            a = os.path.join(absdir, name)
            r = rel + b"/" + name
            st = os.lstat(a)
            yield r, a, st
            if stat.S_ISDIR(st.st_mode):
                real = os.path.join(realdir, name)
                if real in mounts:
                    # A real mount point below ROOT.  Btrfs subvolumes are not
                    # mount points, so they are descended into; other mounts
                    # are listed but not entered.
                    continue
                stack.append((r, a, real))


def manifest_records(root):
    items = list(_walk(root))
    items.sort(key=lambda t: t[0])

    groups = {}
    for rel, _a, st in items:
        if not stat.S_ISDIR(st.st_mode):
            groups.setdefault((st.st_dev, st.st_ino), []).append(rel)
    link_of = {}
    for paths in groups.values():
        if len(paths) > 1:
            first = pct(min(paths))
            for p in paths:
                link_of[p] = first

    records = []
    for rel, a, st in items:
        m = st.st_mode
        t = _ftype(m)
        rec = {
            "path": pct(rel),
            "type": t,
            "ino": st.st_ino,
            "mode": stat.S_IMODE(m),
            "uid": st.st_uid,
            "gid": st.st_gid,
            "size": st.st_size,
            "rdev": st.st_rdev if t in ("chr", "blk") else 0,
            "mtime_ns": st.st_mtime_ns,
            "target": pct(os.readlink(a)) if t == "symlink" else None,
            "xattrs": _xattrs(a),
            "link": link_of.get(rel),
            "sha256": None,
            "data": None,
        }
        if t == "file":
            fd = _open_ro(a)
            try:
                size = os.fstat(fd).st_size
                ranges = file_data_ranges(fd, size)
                rec["data"] = ranges
                rec["sha256"] = hash_file(fd, size, ranges)
            finally:
                os.close(fd)
        records.append(rec)
    return records


def dumps(rec):
    return json.dumps(rec, sort_keys=True, separators=(",", ":"))


def manifest_lines(root):
    return [dumps(r) for r in manifest_records(root)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--out", help="write to FILE instead of stdout")
    args = ap.parse_args(argv)
    lines = manifest_lines(args.root)
    text = "".join(l + "\n" for l in lines)
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(text)
        os.replace(tmp, args.out)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
