#!/usr/bin/env python3
"""What hung, then an end to it: run by scripts/test.sh when the tests
pass their time limit, so that CI fails with the cause on record instead
of running into its own limit with nothing printed.

    python3 scripts/hang_report.py [--after SECONDS] PID

With --after it first waits that long, and exits quietly if PID ends
first (so it outlives nothing it watches).

Prints every process under PID (state, kernel wait channel, command line
when it can be read without blocking), the kernel stacks of tasks in D
state and the FUSE mounts; then aborts the FUSE connections of the
fuse.ubtrfs mounts (a daemon stuck in the kernel keeps its connection and
its clients waiting) and kills the processes under PID.

Only /proc files that never wait on a stuck task are read here (not
cmdline or environ of a process whose memory a stuck thread holds: ps
hangs there), each under a thread with a time limit.
"""

import ctypes
import os
import signal
import sys
import threading
import time


def read(path, limit=2.0):
    """The file's text, or None when it cannot be read within `limit` s."""
    out = []

    def go():
        try:
            with open(path, "rb") as f:
                out.append(f.read().decode("utf-8", "replace"))
        except OSError as e:
            out.append(f"<{e.strerror}>")

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(limit)
    return out[0] if out else None


def stat(pid):
    """(comm, state, ppid) of pid, or None."""
    s = read(f"/proc/{pid}/stat")
    if not s or ")" not in s:
        return None
    head, rest = s.rsplit(")", 1)
    comm = head.split("(", 1)[1]
    f = rest.split()
    return comm, f[0], int(f[1])


def tree(root):
    """Every pid under root (root included), parents before children."""
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            s = stat(int(d))
            if s:
                procs[int(d)] = s
    kids = {}
    for pid, (_, _, ppid) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    order, todo = [], [root]
    while todo:
        p = todo.pop()
        if p in procs:
            order.append(p)
        todo.extend(sorted(kids.get(p, []), reverse=True))
    return order, procs


def report(root):
    order, procs = tree(root)
    print(f"== hang report: {len(order)} processes under {root}", flush=True)
    for pid in order:
        comm, state, ppid = procs[pid]
        cmd = read(f"/proc/{pid}/cmdline", 1.0)
        cmd = cmd.replace("\0", " ").strip() if cmd is not None else "<unreadable>"
        print(f"{pid} ppid {ppid} {state} {comm}: {cmd[:300]}", flush=True)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            tasks = []
        for tid in tasks:
            s = stat(f"{pid}/task/{tid}")
            if not s:
                continue
            wchan = read(f"/proc/{pid}/task/{tid}/wchan", 1.0) or "?"
            line = f"    task {tid} {s[1]} {s[0]} wchan {wchan}"
            print(line, flush=True)
            if s[1] == "D":
                stack = read(f"/proc/{pid}/task/{tid}/stack", 1.0) or ""
                for frame in stack.splitlines()[:12]:
                    print(f"        {frame}", flush=True)
    mounts = read("/proc/self/mountinfo") or ""
    print("== FUSE and loop mounts:", flush=True)
    for line in mounts.splitlines():
        if " - fuse" in line or "/dev/loop" in line:
            print(f"    {line}", flush=True)
    return order


def ubtrfs_connections():
    """The FUSE connection numbers of the fuse.ubtrfs mounts (the tests'
    and benchmarks'; no other FUSE mount of the machine is touched)."""
    out = []
    for line in (read("/proc/self/mountinfo") or "").splitlines():
        head, _, tail = line.partition(" - ")
        if tail.startswith("fuse.ubtrfs "):
            major, _, minor = head.split(" ")[2].partition(":")
            out.append(str((int(major) << 20) | int(minor)))
    return out


def abort_fuse():
    ctl = "/sys/fs/fuse/connections"
    conns = ubtrfs_connections()
    if conns and not os.listdir(ctl):
        # mount(2) itself: mount(8) looks at the mounts, and would hang on
        # the stuck one.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount(b"fusectl", ctl.encode(), b"fusectl", 0, None)
    for c in conns:
        try:
            with open(f"{ctl}/{c}/abort", "w") as f:
                f.write("1")
            print(f"== aborted FUSE connection {c}", flush=True)
        except OSError as e:
            print(f"== FUSE connection {c}: {e}", flush=True)


def main():
    args = sys.argv[1:]
    after = 0.0
    if args[:1] == ["--after"]:
        after, args = float(args[1]), args[2:]
    root = int(args[0])
    deadline = time.monotonic() + after
    while time.monotonic() < deadline:
        if not os.path.exists(f"/proc/{root}"):
            return
        time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
    if after:
        print(f"{sys.argv[0]}: {root} still running after {after:.0f} s: a hang?", flush=True)
    order = report(root)
    try:
        abort_fuse()
    except OSError as e:
        print(f"== aborting FUSE connections: {e}", flush=True)
    # Not this report, nor the shell that started it.
    mine, p = set(), os.getpid()
    while p > 1 and p not in mine:
        mine.add(p)
        s = stat(p)
        p = s[2] if s else 0
    for pid in reversed(order):
        if pid != root and pid not in mine:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


if __name__ == "__main__":
    main()
