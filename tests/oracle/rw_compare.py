#!/usr/bin/env python3
"""Compare the manifests (manifest.py) of two trees made by the same
rw_ops.py run (same seed, ops, procs) on two file systems, without what
legitimately differs between them:

  ino       always (each file system numbers its own inodes)
  mtime_ns  except on the paths rw_ops.py set with utimensat and did not
            change since (the "explicit_mtime" list of its JSON summary):
            the other times are the clock's

Usage: python3 rw_compare.py EXPECTED ACTUAL --summary RUN.json [--prefix /t]
                             [--ignore field,field] [--max N]

--prefix is where rw_ops.py's DIR lies in the manifests' tree (the
manifests of a mount whose subdirectory "t" was DIR: --prefix /t; default:
the manifests are of DIR itself). Without --summary every mtime is masked.

Prints the differences (as compare.py does) and exits 1 if there are any,
0 if the manifests are equal once masked, 2 on a usage or parse error.

Importable: masked(records, explicit) and compare_runs(exp_lines,
act_lines, explicit, ignore=()).
"""

import argparse
import json
import sys
import os

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare  # noqa: E402


def explicit_paths(summary, prefix=""):
    """The manifest paths whose mtime is known, from a run's summary."""
    prefix = prefix.rstrip("/")
    return {prefix + p for p in summary.get("explicit_mtime", [])}


def masked(records, explicit):
    """Copies of manifest records without ino, and without mtime_ns
    unless their path is in `explicit`."""
    out = {}
    for p, r in records.items():
        r = dict(r)
        r.pop("ino", None)
        if p not in explicit:
            r.pop("mtime_ns", None)
        out[p] = r
    return out


def compare_runs(exp_lines, act_lines, explicit, ignore=()):
    """Differences between two manifests once masked (a list of
    messages, empty when equal)."""
    e = masked(compare.parse_lines(exp_lines), explicit)
    a = masked(compare.parse_lines(act_lines), explicit)
    return compare.compare_records(e, a, ignore=ignore)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("expected")
    ap.add_argument("actual")
    ap.add_argument("--summary", help="rw_ops.py's JSON summary of the run")
    ap.add_argument("--prefix", default="",
                    help="path of rw_ops.py's DIR in the manifests")
    ap.add_argument("--ignore", default="",
                    help="further fields not to compare (comma-separated)")
    ap.add_argument("--max", type=int, default=50)
    args = ap.parse_args(argv)
    explicit = set()
    if args.summary:
        with open(args.summary) as f:
            explicit = explicit_paths(json.load(f), args.prefix)
    ignore = [x for x in args.ignore.split(",") if x]
    unknown = [x for x in ignore if x not in compare.FIELDS]
    if unknown:
        print("rw_compare.py: unknown field(s): %s" % ",".join(unknown),
              file=sys.stderr)
        return 2
    with open(args.expected) as f:
        exp = f.readlines()
    with open(args.actual) as f:
        act = f.readlines()
    diffs = compare_runs(exp, act, explicit, ignore)
    if not diffs:
        print("OK: %d paths match (ino masked, mtime compared on %d paths)"
              % (len(compare.parse_lines(exp)), len(explicit)))
        return 0
    for d in diffs[:args.max]:
        print(d)
    if len(diffs) > args.max:
        print("... and %d more differences" % (len(diffs) - args.max))
    print("DIFFERENT: %d differences" % len(diffs))
    return 1


if __name__ == "__main__":
    sys.exit(main())
