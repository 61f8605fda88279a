#!/usr/bin/env python3
"""Adds real on-disk structures to the cargo-fuzz corpus:

  python3 fuzz/seed_from_images.py      (from anywhere; needs the zstd CLI)

- corpus/superblock, corpus/superblock_csum: the primary superblock of each
  committed fixture image (tests/fixtures/committed/*/dev*.img.zst);
- corpus/node: distinct tree blocks of those images (found by scanning for
  nodesize-aligned blocks whose header carries the filesystem's fsid);
- corpus/decompress: the codec vectors of crates/format/testdata/compress,
  framed as the decompress target reads its input.
"""
import hashlib
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(HERE, "corpus")
MAX_NODES_PER_IMAGE = 400


def put(target, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def image_seeds(img):
    with open(img, "rb") as f:
        f.seek(0x10000)
        sb = f.read(4096)
        if sb[0x40:0x48] != b"_BHRfS_M":
            return 0
        put("superblock", sb)
        put("superblock_csum", sb)
        nodesize = struct.unpack_from("<I", sb, 0x94)[0]
        incompat = struct.unpack_from("<Q", sb, 0xBC)[0]
        fsid = sb[0x23B:0x24B] if incompat & (1 << 10) else sb[0x20:0x30]
        size = os.fstat(f.fileno()).st_size
        seen, n, off = set(), 0, 0
        while off + nodesize <= size and n < MAX_NODES_PER_IMAGE:
            f.seek(off)
            blk = f.read(nodesize)
            if blk[0x20:0x30] == fsid:
                h = hashlib.sha1(blk).digest()
                if h not in seen:
                    seen.add(h)
                    put("node", blk)
                    n += 1
            off += nodesize
        return n


def main():
    fixtures = os.path.join(ROOT, "tests", "fixtures", "committed")
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(os.listdir(fixtures)):
            d = os.path.join(fixtures, name)
            for z in sorted(os.listdir(d)):
                if not z.endswith(".img.zst"):
                    continue
                out = os.path.join(tmp, name + "-" + z[:-4])
                subprocess.run(["zstd", "-q", "-d", "-f", "--sparse",
                                os.path.join(d, z), "-o", out], check=True)
                n = image_seeds(out)
                os.unlink(out)
                print(f"{name}/{z}: superblock + {n} tree blocks")
                total += n
    vec = os.path.join(ROOT, "crates", "format", "testdata", "compress")
    tsv = os.path.join(vec, "vectors.tsv")
    if os.path.exists(tsv):
        for line in open(tsv):
            if line.startswith("#") or not line.strip():
                continue
            f = line.split("\t")
            algo, ss, out_len = int(f[1]), int(f[2]), int(f[4])
            data = open(os.path.join(vec, f[0]), "rb").read()
            hdr = bytes([algo]) + struct.pack("<H", out_len // 4) + bytes([(ss // 512).bit_length() - 1])
            put("decompress", hdr + data)
    print(f"{total} tree blocks added under {CORPUS}")


if __name__ == "__main__":
    sys.exit(main())
