#!/usr/bin/env python3
"""The kernel judges crash images with log trees (root).

For every IMAGE.img in DIR with its IMAGE.want (lines: path, size,
FNV-1a 64 of the content, user xattrs as name=hexvalue joined by commas;
tab-separated), as written by the engine's
crash test (UBTRFS_LOG_WRITE_EXPORT=DIR cargo test -p ubtrfs-engine --test
log_write): mount a copy read-write with the kernel (which replays the
log), check that every listed file has that size and content, unmount,
and run `btrfs check --readonly`. Prints one line per image and a
summary; exits 1 when any image fails.

    sudo python3 tests/oracle/kernel_replay.py DIR
"""
import os
import subprocess
import sys
import tempfile


def fnv(path):
    h = 0xCBF29CE484222325
    with open(path, "rb") as f:
        data = f.read()
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return len(data), h


def judge(img, want, work):
    copy = os.path.join(work, "copy.img")
    # Sparse: the images are mostly holes.
    subprocess.run(["cp", "--sparse=always", img, copy], check=True)
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    r = subprocess.run(["mount", "-o", "loop", copy, mnt], capture_output=True, text=True)
    if r.returncode != 0:
        return "kernel mount failed: " + r.stderr.strip()
    errors = []
    try:
        for line in open(want):
            path, size, sum_, xattrs = line.rstrip("\n").split("\t")
            p = os.path.join(mnt, path.lstrip("/"))
            if not os.path.isfile(p):
                errors.append(f"{path}: missing")
                continue
            n, h = fnv(p)
            if n != int(size) or h != int(sum_, 16):
                errors.append(f"{path}: {n} bytes, want {size}; content {'same' if h == int(sum_, 16) else 'differs'}")
            got = ",".join(
                f"{x}={os.getxattr(p, x).hex()}" for x in sorted(os.listxattr(p)) if x.startswith("user.")
            )
            if got != xattrs:
                errors.append(f"{path}: xattrs {got!r}, want {xattrs!r}")
    finally:
        subprocess.run(["umount", mnt], check=True)
    r = subprocess.run(["btrfs", "check", "--readonly", copy], capture_output=True, text=True)
    if r.returncode != 0:
        errors.append("btrfs check: " + (r.stdout + r.stderr).strip().splitlines()[-1])
    return "; ".join(errors)


def main():
    d = sys.argv[1]
    imgs = sorted(f[:-4] for f in os.listdir(d) if f.endswith(".img"))
    bad = 0
    files = 0
    with tempfile.TemporaryDirectory(prefix="ubtrfs-kreplay-") as work:
        for name in imgs:
            want = os.path.join(d, name + ".want")
            files += sum(1 for _ in open(want))
            err = judge(os.path.join(d, name + ".img"), want, work)
            if err:
                bad += 1
                print(f"{name}: FAIL {err}")
    print(f"{len(imgs)} crash images, {files} durable files checked by the kernel, {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
