"""Tests of log_crash_ops.py: the rule its check applies, and a run on a
plain directory (no crash: every journaled file at its last state)."""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import log_crash_ops as lc  # noqa: E402

SCRIPT = os.path.join(HERE, "log_crash_ops.py")


def h(b):
    return hashlib.sha256(b).hexdigest()


def rec(t, p, data=None, **kw):
    r = {"t": t, "w": 0, "p": p}
    if data is not None:
        r["h"] = h(data)
        r["s"] = len(data)
    r.update(kw)
    return r


class RuleTest(unittest.TestCase):
    def tree(self, files):
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", d]))
        for p, data in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, p)), exist_ok=True)
            with open(os.path.join(d, p), "wb") as f:
                f.write(data)
        return d

    def test_synced_content_or_later_state(self):
        recs = [rec("base", "a", b"x"),
                rec("state", "a", b"xy"),
                rec("sync", "a", b"xy", how="fsync"),
                rec("state", "a", b"xyz"),
                rec("state", "b", b""),
                rec("state", "b", b"new")]
        j = lc.Journal(recs)
        for a, b, ok in [(b"xy", b"new", True), (b"xyz", None, True),
                         (b"x", b"", False), (b"xy", b"other", False)]:
            files = {"a": a}
            if b is not None:
                files["b"] = b
            errors, n = j.check(self.tree(files))
            self.assertEqual(not errors, ok, (a, b, errors))
        errors, n = j.check(self.tree({}))
        self.assertEqual(len(errors), 1)   # a is missing; b may be
        self.assertIn("a: missing", errors[0])

    def test_worker_errors_fail(self):
        j = lc.Journal([rec("base", "a", b"x"),
                        {"t": "error", "w": 1, "msg": "boom"}])
        errors, _ = j.check(self.tree({"a": b"x"}))
        self.assertEqual(errors, ["a worker failed: boom"])

    def test_torn_write_states(self):
        m = bytearray(b"a" * 5000)
        self.assertEqual(lc.torn_writes(m, 4096, b"b" * 9000), [])
        self.assertEqual(lc.torn_writes(m, 100, b"b" * 1000), [])
        t = lc.torn_writes(m, 100, b"b" * 9000)
        self.assertEqual(len(t), 1)
        self.assertEqual(bytes(t[0]), b"a" * 100 + b"b" * 3996 + b"a" * 904)
        t = lc.torn_writes(bytearray(b"a" * 10), 5000, b"b" * 9000)
        self.assertEqual(bytes(t[0]), b"a" * 10 + bytes(4990) + b"b" * 3192)


class RunTest(unittest.TestCase):
    def test_run_then_check_on_a_plain_directory(self):
        with tempfile.TemporaryDirectory() as d:
            j = os.path.join(d, "j")
            src = os.path.join(d, "src")
            subprocess.run([sys.executable, SCRIPT, "setup", src, "--seed",
                            "3", "--procs", "2", "--journal", j], check=True,
                           stdout=subprocess.DEVNULL)
            r = subprocess.run([sys.executable, SCRIPT, "run", src, "--seed",
                                "3", "--procs", "2", "--journal", j, "--ops",
                                "300", "--shadow", os.path.join(d, "sh")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            r = subprocess.run([sys.executable, SCRIPT, "check", src,
                                "--journal", j], capture_output=True,
                               text=True)
            v = json.loads(r.stdout)
            self.assertTrue(v["ok"], v["errors"])
            self.assertGreater(v["fsyncs"] + v["fdatasyncs"], 50)
            # One byte changed in the last file fsynced is found.
            with open(j) as f:
                last = [json.loads(x) for x in f if '"sync"' in x][-1]["p"]
            with open(os.path.join(src, last), "r+b") as f:
                b = f.read(1)
                f.seek(0)
                f.write(bytes([(b[0] if b else 0) ^ 1]))
            r = subprocess.run([sys.executable, SCRIPT, "check", src,
                                "--journal", j, "--shadow",
                                os.path.join(d, "sh")],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            v = json.loads(r.stdout)
            self.assertEqual(v["error_count"], 1, v["errors"])
            self.assertIn(last, v["errors"][0])


if __name__ == "__main__":
    unittest.main()
