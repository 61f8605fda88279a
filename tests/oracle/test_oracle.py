#!/usr/bin/env python3
"""Self-tests for manifest.py and compare.py (no root, no btrfs needed).

Run: python3 -m unittest discover -s tests/oracle -p 'test_*.py'
  or python3 tests/oracle/test_oracle.py
"""

import errno
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare  # noqa: E402
import manifest  # noqa: E402

KEYS = {"path", "type", "ino", "mode", "uid", "gid", "size", "rdev",
        "mtime_ns", "target", "xattrs", "link", "sha256", "data"}


class PctTest(unittest.TestCase):
    def test_encoding(self):
        self.assertEqual(manifest.pct(b"/a b%c"), "/a%20b%25c")
        self.assertEqual(manifest.pct(b"\xff\x80\x00\x7f~!"), "%FF%80%00%7F~!")
        self.assertEqual(manifest.pct(b"\t\n"), "%09%0A")
        self.assertEqual(manifest.pct("caf\u00e9"), "caf%C3%A9")
        self.assertEqual(manifest.pct(bytes(range(0x21, 0x7f))),
                         bytes(range(0x21, 0x7f)).decode().replace("%", "%25"))

    def test_mountinfo_unescape(self):
        self.assertEqual(manifest._unescape_mountinfo(rb"/a\040b\011c\134d\012"),
                         b"/a b\tc\\d\n")
        self.assertEqual(manifest._unescape_mountinfo(rb"\04"), rb"\04")


class ManifestTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = os.fsencode(self.tmp.name)
        r = self.root
        os.mkdir(os.path.join(r, b"d"))
        with open(os.path.join(r, b"d", b"f"), "wb") as f:
            f.write(b"hello")
        os.link(os.path.join(r, b"d", b"f"), os.path.join(r, b"h\xff"))
        os.link(os.path.join(r, b"d", b"f"), os.path.join(r, b"a link"))
        os.symlink(b"d/f", os.path.join(r, b"s"))
        os.symlink(b"nowhere/\xfe", os.path.join(r, b"dangling"))
        os.mkfifo(os.path.join(r, b"fifo"))
        self.sock = socket.socket(socket.AF_UNIX)
        try:
            self.sock.bind(os.path.join(r, b"sock"))
        except OSError:
            pass  # path too long for AF_UNIX: skip the socket
        self.sparse = os.path.join(r, b"sparse")
        fd = os.open(self.sparse, os.O_WRONLY | os.O_CREAT, 0o600)
        os.ftruncate(fd, 1 << 28)
        os.pwrite(fd, b"x" * 4096, 1 << 20)
        os.pwrite(fd, b"end", (1 << 28) - 3)
        os.close(fd)
        os.utime(os.path.join(r, b"d", b"f"), ns=(5, 981173106123456789))
        try:
            os.setxattr(os.path.join(r, b"d"), "user.k\xff".encode("latin-1"),
                        b"\x00v")
            self.have_xattr = True
        except OSError:
            self.have_xattr = False

    def tearDown(self):
        self.sock.close()
        self.tmp.cleanup()

    def records(self):
        return [json.loads(l) for l in manifest.manifest_lines(self.root)]

    def test_structure(self):
        recs = self.records()
        paths = [r["path"] for r in recs]
        self.assertEqual(paths[0], "/")
        for r in recs:
            self.assertEqual(set(r), KEYS)
        by = {r["path"]: r for r in recs}
        self.assertEqual(by["/"]["type"], "dir")
        self.assertEqual(by["/d"]["type"], "dir")
        f = by["/d/f"]
        self.assertEqual(f["type"], "file")
        self.assertEqual(f["sha256"], hashlib.sha256(b"hello").hexdigest())
        self.assertEqual(f["data"], [[0, 5]])
        self.assertEqual(f["mtime_ns"], 981173106123456789)
        # hard links: smallest raw path of the group (" " < "/" < "h")
        self.assertEqual(f["link"], "/a%20link")
        self.assertEqual(by["/h%FF"]["link"], "/a%20link")
        self.assertEqual(by["/a%20link"]["link"], "/a%20link")
        self.assertIsNone(by["/d"]["link"])
        self.assertEqual(by["/s"]["type"], "symlink")
        self.assertEqual(by["/s"]["target"], "d/f")
        self.assertIsNone(by["/s"]["sha256"])
        self.assertEqual(by["/dangling"]["target"], "nowhere/%FE")
        self.assertEqual(by["/fifo"]["type"], "fifo")
        self.assertIsNone(by["/fifo"]["data"])
        if "/sock" in by:
            self.assertEqual(by["/sock"]["type"], "sock")
        if self.have_xattr:
            self.assertEqual(by["/d"]["xattrs"], {"user.k%FF": "0076"})

    def test_sorted_by_raw_bytes(self):
        recs = self.records()
        # decode the percent-encoding back to bytes and check the order
        def unpct(s):
            out = bytearray()
            i = 0
            while i < len(s):
                if s[i] == "%":
                    out.append(int(s[i + 1:i + 3], 16))
                    i += 3
                else:
                    out.append(ord(s[i]))
                    i += 1
            return bytes(out)
        raw = [unpct(r["path"]) for r in recs]
        self.assertEqual(raw, sorted(raw))
        self.assertEqual(len(raw), len(set(raw)))

    def test_sparse_hash(self):
        t0 = time.monotonic()
        recs = self.records()
        dt = time.monotonic() - t0
        s = {r["path"]: r for r in recs}["/sparse"]
        h = hashlib.sha256()
        with open(self.sparse, "rb") as f:
            while True:
                b = f.read(1 << 22)
                if not b:
                    break
                h.update(b)
        self.assertEqual(s["sha256"], h.hexdigest())
        self.assertEqual(s["size"], 1 << 28)
        self.assertEqual(s["data"][-1][1], 1 << 28)
        self.assertLess(dt, 20)

    def test_cli_out(self):
        out = os.path.join(self.tmp.name, "m.jsonl")
        # write outside the tree being walked
        with tempfile.TemporaryDirectory() as other:
            out = os.path.join(other, "m.jsonl")
            subprocess.run([sys.executable, os.path.join(HERE, "manifest.py"),
                            self.tmp.name, "--out", out], check=True)
            with open(out) as f:
                lines = f.read().splitlines()
        self.assertEqual(lines, manifest.manifest_lines(self.root))
        for l in lines:
            self.assertEqual(l, json.dumps(json.loads(l), sort_keys=True,
                                           separators=(",", ":")))


def rec(path, **kw):
    r = {"path": path, "type": "file", "ino": 257, "mode": 0o644, "uid": 0,
         "gid": 0, "size": 1, "rdev": 0, "mtime_ns": 1, "target": None,
         "xattrs": {}, "link": None, "sha256": "00", "data": [[0, 1]]}
    r.update(kw)
    return json.dumps(r, sort_keys=True, separators=(",", ":"))


class CompareTest(unittest.TestCase):
    def test_equal(self):
        a = [rec("/"), rec("/x")]
        self.assertEqual(compare.compare(a, list(a)), [])

    def test_missing_extra_field(self):
        d = compare.compare([rec("/"), rec("/x")],
                            [rec("/", size=2), rec("/y")])
        self.assertIn("/x: missing (expected file)", d)
        self.assertIn("/y: extra (actual file)", d)
        self.assertTrue(any(s.startswith("/: field size") for s in d))

    def test_placeholder_mtime(self):
        e = [rec("/p", type="dir", ino=2, mtime_ns=1, sha256=None, data=None)]
        a = [rec("/p", type="dir", ino=2, mtime_ns=999, sha256=None, data=None)]
        self.assertEqual(compare.compare(e, a), [])
        e2 = [rec("/p", type="dir", ino=300, mtime_ns=1)]
        a2 = [rec("/p", type="dir", ino=300, mtime_ns=999)]
        self.assertEqual(len(compare.compare(e2, a2)), 1)

    def test_ignores(self):
        e = [rec("/d", type="dir", size=10, ino=5)]
        a = [rec("/d", type="dir", size=12, ino=6)]
        self.assertEqual(len(compare.compare(e, a)), 2)
        self.assertEqual(len(compare.compare(e, a, ignore_ino=True)), 1)
        self.assertEqual(compare.compare(e, a, ignore_ino=True,
                                         ignore_dir_size=True), [])
        self.assertEqual(compare.compare(e, a, ignore=["size", "ino"]), [])

    def test_xattr_diff(self):
        d = compare.compare([rec("/f", xattrs={"user.a": "01", "user.b": ""})],
                            [rec("/f", xattrs={"user.a": "02", "user.c": ""})])
        self.assertEqual(len(d), 1)
        self.assertIn("missing xattr user.b", d[0])
        self.assertIn("extra xattr user.c", d[0])

    def test_cli_exit_codes(self):
        with tempfile.TemporaryDirectory() as t:
            e = os.path.join(t, "e")
            a = os.path.join(t, "a")
            with open(e, "w") as f:
                f.write(rec("/") + "\n")
            with open(a, "w") as f:
                f.write(rec("/") + "\n")
            cmd = [sys.executable, os.path.join(HERE, "compare.py"), e, a]
            self.assertEqual(subprocess.run(cmd, capture_output=True).returncode, 0)
            with open(a, "w") as f:
                f.write(rec("/", uid=1) + "\n")
            p = subprocess.run(cmd, capture_output=True, text=True)
            self.assertEqual(p.returncode, 1)
            self.assertIn("field uid: expected 0 vs actual 1", p.stdout)
            p = subprocess.run(cmd + ["--ignore", "uid"], capture_output=True)
            self.assertEqual(p.returncode, 0)


if __name__ == "__main__":
    unittest.main()
