#!/usr/bin/env python3
"""Self-tests for rw_ops.py and rw_compare.py.

The model and the replay need nothing; the live runs (in a temporary
directory of whatever file system holds it) need root (files of mode 000
are opened) and user.* xattrs there, and are skipped, saying so, without.

Run: python3 -m unittest discover -s tests/oracle -p 'test_*.py'
"""

import errno
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import rw_compare  # noqa: E402
import rw_ops  # noqa: E402
from rw_ops import (FALLOC_MODES, model_copy, model_fallocate,  # noqa: E402
                    model_truncate, model_write)

SCRIPT = os.path.join(HERE, "rw_ops.py")


def replay(seed, ops, index=0, eop=None):
    w = rw_ops.Worker(b"/nonexistent", seed, index, live=False,
                      replay_eopnotsupp=eop)
    w.run(ops)
    return w


class ModelTest(unittest.TestCase):
    def test_write_past_eof_leaves_zeros(self):
        d = bytearray(b"abc")
        model_write(d, 6, b"xy")
        self.assertEqual(d, b"abc\0\0\0xy")
        model_write(d, 1, b"Q")
        self.assertEqual(d, b"aQc\0\0\0xy")
        model_write(d, 7, b"123")
        self.assertEqual(d, b"aQc\0\0\0x123")
        model_write(d, 10, b"")
        self.assertEqual(len(d), 10)

    def test_truncate(self):
        d = bytearray(b"abcdef")
        model_truncate(d, 2)
        self.assertEqual(d, b"ab")
        model_truncate(d, 5)
        self.assertEqual(d, b"ab\0\0\0")
        model_truncate(d, 0)
        self.assertEqual(d, b"")

    def test_fallocate_modes(self):
        def fa(name, off, n, data=b"abcdefgh"):
            d = bytearray(data)
            model_fallocate(d, FALLOC_MODES[name], off, n)
            return bytes(d)
        # mode 0 extends with zeros, never changes data
        self.assertEqual(fa("alloc", 2, 3), b"abcdefgh")
        self.assertEqual(fa("alloc", 6, 4), b"abcdefgh\0\0")
        # KEEP_SIZE changes nothing that can be read
        self.assertEqual(fa("keep_size", 6, 100), b"abcdefgh")
        # PUNCH_HOLE|KEEP_SIZE zeroes inside the size only
        self.assertEqual(fa("punch_hole", 2, 3), b"ab\0\0\0fgh")
        self.assertEqual(fa("punch_hole", 6, 10), b"abcdef\0\0")
        self.assertEqual(fa("punch_hole", 20, 10), b"abcdefgh")
        # ZERO_RANGE zeroes and extends; with KEEP_SIZE it does not extend
        self.assertEqual(fa("zero_range", 6, 4), b"abcdef\0\0\0\0")
        self.assertEqual(fa("zero_range", 1, 2), b"a\0\0defgh")
        self.assertEqual(fa("zero_range_keep", 6, 4), b"abcdef\0\0")
        self.assertEqual(fa("zero_range", 10, 2), b"abcdefgh\0\0\0\0")

    def test_copy_is_short_at_eof(self):
        src = bytearray(b"0123456789")
        dst = bytearray(b"ab")
        self.assertEqual(model_copy(src, 8, dst, 4, 100), 2)
        self.assertEqual(dst, b"ab\0\x0089")
        self.assertEqual(model_copy(src, 10, dst, 0, 5), 0)
        self.assertEqual(model_copy(src, 50, dst, 20, 5), 0)
        self.assertEqual(dst, b"ab\0\x0089")  # nothing copied: no growth

    def test_first_difference(self):
        self.assertEqual(rw_ops.first_difference(b"abc", b"abd"), 2)
        self.assertEqual(rw_ops.first_difference(b"abc", b"ab"), 2)
        self.assertEqual(rw_ops.first_difference(b"", b""), 0)


class ReplayTest(unittest.TestCase):
    def test_same_seed_same_model(self):
        a, b = replay(11, 1500), replay(11, 1500)
        self.assertTrue(a.snapshot() == b.snapshot(), "replays differ")
        self.assertEqual(a.counts, b.counts)
        self.assertEqual(a.explicit_mtimes(), b.explicit_mtimes())
        self.assertGreater(len(a.snapshot()), 20)

    def test_other_seed_or_worker_other_model(self):
        a = replay(11, 800)
        self.assertFalse(a.snapshot() == replay(12, 800).snapshot())
        self.assertFalse(a.snapshot() == replay(11, 800, index=1).snapshot())

    def test_every_operation_runs(self):
        w = replay(3, 3000)
        missing = set(rw_ops.WEIGHTS) - set(w.counts)
        self.assertEqual(missing, set(), "operations never chosen")
        self.assertGreater(w.expected_errors, 50)

    def test_names(self):
        w = replay(5, 2000, index=3)
        for path in w.snapshot():
            for comp in path.split(b"/")[1:]:
                self.assertLessEqual(len(comp), 255, path)
                self.assertNotIn(b"\0", comp)
            first = path.split(b"/")[1]
            self.assertIn(first, (b"p3", b"shared"))
            if first == b"shared":
                self.assertTrue(path.split(b"/")[2].startswith(b"p3-"), path)

    def test_refused_fallocate_leaves_model(self):
        # Find a fallocate that changes the model, then replay it as
        # refused (EOPNOTSUPP): the model must differ only through it.
        base = replay(21, 600)
        log = []
        orig = rw_ops.model_fallocate

        def spy(data, mode, off, n):
            before = bytes(data)
            orig(data, mode, off, n)
            log.append(bytes(data) != before)
        rw_ops.model_fallocate = spy
        try:
            w = rw_ops.Worker(b"/nonexistent", 21, 0, live=False)
            ks = []
            real_op = w.op_fallocate

            def op(ents):
                n = len(log)
                r = real_op(ents)
                if len(log) > n and log[-1]:
                    ks.append(w.k)
                return r
            w.op_fallocate = op
            w.run(600)
        finally:
            rw_ops.model_fallocate = orig
        self.assertTrue(ks, "no fallocate changed anything in 600 ops")
        self.assertTrue(w.snapshot() == base.snapshot(), "spy changed the run")
        eop = {name: ks for name in FALLOC_MODES}
        self.assertFalse(replay(21, 600, eop=eop).snapshot() == base.snapshot(),
                         "refused fallocates changed nothing")


def live_ok(d):
    """Root, and user.* xattrs in `d`."""
    if os.geteuid() != 0:
        return "needs root (files of mode 000 are opened)"
    p = os.path.join(d, "probe")
    open(p, "w").close()
    try:
        os.setxattr(p, "user.probe", b"1")
    except OSError as e:
        return "no user xattrs in %s (%s)" % (d, errno.errorcode.get(e.errno))
    finally:
        os.unlink(p)
    return None


def run(args):
    p = subprocess.run([sys.executable, SCRIPT] + args, capture_output=True)
    summary = json.loads(p.stdout) if p.stdout.strip() else None
    return p.returncode, summary, p.stderr.decode()


class LiveTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "t")
        os.mkdir(self.dir)
        why = live_ok(self.tmp.name)
        if why:
            print("SKIPPED LiveTest: %s" % why, file=sys.stderr)
            self.skipTest(why)

    def tearDown(self):
        self.tmp.cleanup()

    def test_run_then_verify_then_catch_changes(self):
        args = [self.dir, "--seed", "4", "--ops", "400", "--procs", "2"]
        log = os.path.join(self.tmp.name, "log")
        code, s, err = run(args + ["--log", log])
        self.assertEqual(code, 0, err)
        self.assertTrue(s["ok"])
        self.assertEqual(s["mode"], "run")
        self.assertEqual(len(s["workers"]), 2)
        self.assertGreater(s["reads_checked"], 50)
        with open(log) as f:
            lines = f.readlines()
        self.assertGreater(len(lines), 500)
        summ = os.path.join(self.tmp.name, "run.json")
        with open(summ, "w") as f:
            json.dump(s, f)
        verify = args + ["--verify-only", "--summary", summ]
        code, v, err = run(verify)
        self.assertEqual(code, 0, err)
        self.assertEqual(v["mode"], "verify")
        self.assertEqual(v["explicit_mtime"], s["explicit_mtime"])

        # One byte changed in a file: named with its offset.
        files = []
        for root, _dirs, names in os.walk(self.dir):
            for n in names:
                p = os.path.join(root, n)
                st = os.lstat(p)
                if stat.S_ISREG(st.st_mode) and st.st_size > 100 \
                        and st.st_nlink == 1:
                    files.append(p)
        victim = sorted(files)[0]
        with open(victim, "r+b") as f:
            f.seek(50)
            b = f.read(1)
            f.seek(50)
            f.write(bytes([b[0] ^ 0xFF]))
        code, v, err = run(verify)
        self.assertEqual(code, 1, err)
        self.assertIn("offset 50", err)
        self.assertIn(rw_ops.pct(os.fsencode(os.path.basename(victim))), err)
        with open(victim, "r+b") as f:
            f.seek(50)
            f.write(b)
        self.assertEqual(run(verify)[0], 0)

        # An extra name is found.
        extra = os.path.join(self.dir, "p1", "extra")
        open(extra, "w").close()
        code, v, err = run(verify)
        self.assertEqual(code, 1)
        self.assertIn("extra", err)
        os.unlink(extra)

        # Another seed does not verify.
        code, v, err = run([self.dir, "--seed", "5", "--ops", "400",
                            "--procs", "2", "--verify-only"])
        self.assertEqual(code, 1)

    def test_refused_fallocate_is_recorded(self):
        # The run's file system refuses PUNCH_HOLE: recorded, model kept;
        # the replay needs the summary to agree.
        orig = rw_ops.fallocate

        def refuse(fd, mode, off, n):
            if mode == FALLOC_MODES["punch_hole"]:
                raise OSError(errno.EOPNOTSUPP, "refused")
            orig(fd, mode, off, n)
        rw_ops.fallocate = refuse
        try:
            os.umask(rw_ops.UMASK)
            os.mkdir(os.path.join(self.dir, "shared"), 0o755)
            w = rw_ops.Worker(self.dir, 9, 0)
            w.run(800)
        finally:
            rw_ops.fallocate = orig
        self.assertEqual(set(w.eopnotsupp), {"punch_hole"})
        good = replay(9, 800, eop=w.eopnotsupp)
        self.assertTrue(good.snapshot() == w.snapshot(),
                        "the replay with the run's refusals differs from the run")
        # Every punch_hole of the replay is one the run recorded.
        punches = [line for line in self.replay_log(9, 800)
                   if " fallocate " in line and " punch_hole " in line]
        self.assertEqual(len(punches), len(w.eopnotsupp["punch_hole"]))

    def replay_log(self, seed, ops):
        path = os.path.join(self.tmp.name, "replay.log")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            rw_ops.Worker(b"/nonexistent", seed, 0, live=False,
                          log_fd=fd).run(ops)
        finally:
            os.close(fd)
        with open(path) as f:
            return f.readlines()


class CompareTest(unittest.TestCase):
    def rec(self, path, **kw):
        r = {"path": path, "type": "file", "ino": 257, "mode": 0o644,
             "uid": 0, "gid": 0, "size": 1, "rdev": 0, "mtime_ns": 5,
             "target": None, "xattrs": {}, "link": None, "sha256": "aa",
             "data": [[0, 1]]}
        r.update(kw)
        return json.dumps(r)

    def test_masks(self):
        a = [self.rec("/"), self.rec("/t/x"), self.rec("/t/y")]
        b = [self.rec("/", ino=300, mtime_ns=9), self.rec("/t/x", ino=1),
             self.rec("/t/y", mtime_ns=6)]
        explicit = rw_compare.explicit_paths({"explicit_mtime": ["/x"]}, "/t")
        self.assertEqual(explicit, {"/t/x"})
        self.assertEqual(rw_compare.compare_runs(a, b, explicit), [])
        # an explicit mtime that differs is a difference
        b[1] = self.rec("/t/x", mtime_ns=7)
        self.assertEqual(len(rw_compare.compare_runs(a, b, explicit)), 1)
        # content is never masked
        b[1] = self.rec("/t/x", sha256="bb")
        self.assertEqual(len(rw_compare.compare_runs(a, b, explicit)), 1)


if __name__ == "__main__":
    unittest.main()
