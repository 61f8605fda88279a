#!/usr/bin/env python3
"""Compare two manifests produced by manifest.py (or by the Rust reader).

Usage: python3 compare.py EXPECTED ACTUAL [--ignore field,field]
                          [--ignore-dir-size] [--ignore-ino] [--max N]

Prints the first differences (missing path, extra path, field X: expected vs
actual) and exits 1 if the manifests differ, 0 if they are equal, 2 on a usage
or parse error.

Directories with ino 2 in EXPECTED are btrfs empty-subvolume placeholders (a
snapshot's view of a nested subvolume): the kernel reports the current time as
their mtime, so mtime_ns is never compared for them.

Importable: compare(expected_lines, actual_lines, ...) -> list[str] of
difference messages (empty when equal).
"""

import argparse
import json
import sys

FIELDS = ("type", "ino", "mode", "uid", "gid", "size", "rdev", "mtime_ns",
          "target", "xattrs", "link", "sha256", "data")
PLACEHOLDER_INO = 2


def load(path):
    recs = {}
    order = []
    with open(path, "r", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise SystemExit("%s:%d: bad JSON: %s" % (path, n, e))
            p = rec.get("path")
            if p is None:
                raise SystemExit("%s:%d: record without path" % (path, n))
            if p in recs:
                raise SystemExit("%s:%d: duplicate path %s" % (path, n, p))
            recs[p] = rec
            order.append(p)
    return recs, order


def _short(v, limit=160):
    s = json.dumps(v, sort_keys=True, separators=(",", ":"))
    if len(s) > limit:
        s = s[:limit] + "...(%d chars)" % len(s)
    return s


def _xattr_diff(e, a):
    e = e or {}
    a = a or {}
    parts = []
    for k in sorted(set(e) | set(a)):
        if k not in a:
            parts.append("missing xattr %s" % k)
        elif k not in e:
            parts.append("extra xattr %s" % k)
        elif e[k] != a[k]:
            parts.append("xattr %s: expected %s vs actual %s"
                         % (k, _short(e[k], 80), _short(a[k], 80)))
    return "; ".join(parts)


def compare_records(exp, act, ignore=(), ignore_dir_size=False,
                    ignore_ino=False):
    """Return a list of difference messages, one per differing field/path."""
    ignore = set(ignore)
    if ignore_ino:
        ignore.add("ino")
    diffs = []
    for p in sorted(set(exp) | set(act), key=lambda s: s.encode()):
        e = exp.get(p)
        a = act.get(p)
        if a is None:
            diffs.append("%s: missing (expected %s)" % (p, e.get("type")))
            continue
        if e is None:
            diffs.append("%s: extra (actual %s)" % (p, a.get("type")))
            continue
        keys = [k for k in FIELDS if k in e or k in a]
        keys += sorted((set(e) | set(a)) - set(FIELDS) - {"path"})
        for k in keys:
            if k in ignore:
                continue
            if k == "size" and ignore_dir_size and e.get("type") == "dir":
                continue
            if (k == "mtime_ns" and e.get("type") == "dir"
                    and e.get("ino") == PLACEHOLDER_INO):
                continue
            if k not in a:
                diffs.append("%s: field %s: missing in actual" % (p, k))
                continue
            if k not in e:
                diffs.append("%s: field %s: unexpected in actual" % (p, k))
                continue
            if e[k] != a[k]:
                if k == "xattrs":
                    diffs.append("%s: xattrs: %s" % (p, _xattr_diff(e[k], a[k])))
                else:
                    diffs.append("%s: field %s: expected %s vs actual %s"
                                 % (p, k, _short(e[k]), _short(a[k])))
    return diffs


def parse_lines(lines):
    """Manifest lines (JSON records) by path; blank lines are skipped."""
    out = {}
    for line in lines:
        line = line.strip()
        if line:
            r = json.loads(line)
            out[r["path"]] = r
    return out


def compare(expected_lines, actual_lines, **kw):
    return compare_records(parse_lines(expected_lines), parse_lines(actual_lines),
                           **kw)


def main(argv=None):
    ap = argparse.ArgumentParser(description="compare two manifests")
    ap.add_argument("expected")
    ap.add_argument("actual")
    ap.add_argument("--ignore", default="",
                    help="comma-separated fields not to compare")
    ap.add_argument("--ignore-dir-size", action="store_true",
                    help="do not compare size of directories")
    ap.add_argument("--ignore-ino", action="store_true",
                    help="do not compare inode numbers")
    ap.add_argument("--max", type=int, default=50,
                    help="show at most N differences (default 50)")
    args = ap.parse_args(argv)
    ignore = [f.strip() for f in args.ignore.split(",") if f.strip()]
    unknown = [f for f in ignore if f not in FIELDS]
    if unknown:
        print("compare.py: unknown field(s) in --ignore: %s (known: %s)"
              % (",".join(unknown), ",".join(FIELDS)), file=sys.stderr)
        return 2
    exp, _ = load(args.expected)
    act, _ = load(args.actual)
    diffs = compare_records(exp, act, ignore=ignore,
                            ignore_dir_size=args.ignore_dir_size,
                            ignore_ino=args.ignore_ino)
    if not diffs:
        print("OK: %d paths match (%s vs %s)" % (len(exp), args.expected,
                                                  args.actual))
        return 0
    paths = {d.split(": ", 1)[0] for d in diffs}
    for d in diffs[:args.max]:
        print(d)
    if len(diffs) > args.max:
        print("... and %d more differences" % (len(diffs) - args.max))
    print("DIFFERENT: %d differences in %d paths (expected %d paths, actual %d)"
          % (len(diffs), len(paths), len(exp), len(act)))
    return 1


if __name__ == "__main__":
    sys.exit(main())
