#!/usr/bin/env python3
"""Regenerates the kernel-made btrfs compression test vectors in this folder.

Needs root, a kernel with btrfs, btrfs-progs (mkfs.btrfs, btrfs) and loop devices.
For each algorithm it makes a fresh 256 MiB image, mounts it with
compress-force=ALGO, writes deterministic text-like files, unmounts, mounts it
again read-only (so the page cache is cold and the kernel really decompresses),
reads the files back, then walks `btrfs inspect-internal dump-tree` for the
EXTENT_DATA items and copies out the raw compressed bytes:
  regular extent: disk_num_bytes bytes at disk_bytenr, mapped through the chunk
                  tree (single data profile: stripe 0 offset + (logical - chunk start));
  inline extent:  the item payload after the 21-byte file extent header, read from
                  the fs-tree leaf (metadata stripe 0).
vectors.tsv lists every vector with the sha256 of what the kernel returned for
that extent (file bytes from the extent's start, zero-filled up to ram_bytes).

Usage: sudo python3 make_vectors.py [WORKDIR]
"""
import hashlib, os, random, re, struct, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ALGOS = {"zlib": 1, "lzo": 2, "zstd": 3}
LEAF_HEADER = 101
FILE_EXTENT_INLINE_HEADER = 21

SVCS = ["sshd[1022]", "cron[977]", "kernel", "btrfs", "nginx[1401]", "systemd[1]"]
MSGS = ["session opened for user root", "job started", "checksum verified",
        "scrub finished without errors", "GET /index.html 200", "unit reached target",
        "balance completed", "connection closed by peer"]


def logtext(n, seed):
    """Syslog-like lines: compressible, deterministic."""
    r = random.Random(seed)
    out, size, i = [], 0, 0
    while size < n:
        k = r.randrange(48)
        line = "2024-03-01 %02d:%02d:%02d alpha %s: %s\n" % (
            (i // 3600) % 24, (i // 60) % 60, i % 60, SVCS[k % 6], MSGS[k % 8])
        out.append(line)
        size += len(line)
        i += 1
    return "".join(out).encode()[:n]


def padprobe(seed):
    """A first sector of m bytes of log text then zeros (m varies per file), then 7
    sectors of log text. Each lzo segment ends at a varying offset of the
    compressed stream, segment ends are ~860 bytes apart here, so about 1 file in
    290 has a segment ending in the last 3 bytes of a sector, where the kernel must
    pad before the next segment header. 2000 files give a few such extents."""
    m = (seed * 2039) % 4096
    return logtext(m, 5000 + seed) + bytes(4096 - m) + logtext(7 * 4096, 1000 + seed)


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def files_for(algo):
    files = {
        "big.log": logtext(300 * 1024 + 1235, 1),   # 3 extents, last one partial
        "partial.log": logtext(10000, 2),            # 1 extent, partial last sector
        "small.txt": logtext(1500, 3),               # compressed inline extent
    }
    if algo == "lzo":
        for k in range(2000):
            files["pad-%d.bin" % k] = padprobe(k)
    return files


def parse_chunks(text):
    chunks = []
    for m in re.finditer(r"CHUNK_ITEM (\d+)\) itemoff \d+ itemsize \d+\n\s+length (\d+) .*?"
                         r"stripe 0 devid 1 offset (\d+)", text, re.S):
        chunks.append(tuple(int(x) for x in m.groups()))
    return chunks


def to_phys(chunks, logical):
    for start, length, phys in chunks:
        if start <= logical < start + length:
            return phys + logical - start
    raise SystemExit("logical %d not in any chunk" % logical)


def parse_extents(text):
    """Yields dicts for every EXTENT_DATA item of the fs tree dump."""
    leaf = None
    lines = text.splitlines()
    names = {}
    for i, line in enumerate(lines):
        m = re.match(r"\s*leaf (\d+) items", line)
        if m:
            leaf = int(m.group(1))
        m = re.match(r"\s*item \d+ key \((\d+) INODE_REF \d+\)", line)
        if m:
            names[int(m.group(1))] = re.search(r"name: (.*)$", lines[i + 1]).group(1)
        m = re.match(r"\s*item \d+ key \((\d+) EXTENT_DATA (\d+)\) itemoff (\d+) itemsize (\d+)", line)
        if not m:
            continue
        ino, foff, itemoff, itemsize = map(int, m.groups())
        body = " ".join(lines[i + 1:i + 5])
        e = dict(ino=ino, foff=foff, leaf=leaf, itemoff=itemoff, itemsize=itemsize)
        mi = re.search(r"inline extent data size (\d+) ram_bytes (\d+) compression (\d+)", body)
        if mi:
            e.update(kind="inline", size=int(mi.group(1)), ram=int(mi.group(2)),
                     comp=int(mi.group(3)), eoff=0)
        else:
            mr = re.search(r"disk byte (\d+) nr (\d+)\s+extent data offset (\d+) nr (\d+) ram (\d+)"
                           r"\s+extent compression (\d+)", body)
            e.update(kind="regular", bytenr=int(mr.group(1)), size=int(mr.group(2)),
                     eoff=int(mr.group(3)), ram=int(mr.group(5)), comp=int(mr.group(6)))
        yield e, names


def lzo_has_padding(raw, sectorsize=4096):
    total = struct.unpack_from("<I", raw, 0)[0]
    pos = 4
    while pos < total:
        seg = struct.unpack_from("<I", raw, pos)[0]
        pos += 4 + seg
        left = sectorsize - pos % sectorsize
        if pos < total and left < 4:
            return True
        if left < 4:
            pos += left
    return False


def main():
    work = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ubtrfs-compress-vectors"
    os.makedirs(work, exist_ok=True)
    manifest = []
    for algo, code in ALGOS.items():
        img, mnt = os.path.join(work, algo + ".img"), os.path.join(work, "mnt")
        os.makedirs(mnt, exist_ok=True)
        with open(img, "wb") as f:
            f.truncate(256 << 20)
        run("mkfs.btrfs", "-q", "-f", "-s", "4096", img)
        files = files_for(algo)
        run("mount", "-o", "loop,compress-force=" + algo, img, mnt)
        for name, data in files.items():
            with open(os.path.join(mnt, name), "wb") as f:
                f.write(data)
        run("sync")
        run("umount", mnt)
        # Cold cache: what we read now went through the kernel's decompression.
        run("mount", "-o", "loop,ro", img, mnt)
        kernel = {}
        for name in files:
            with open(os.path.join(mnt, name), "rb") as f:
                kernel[name] = f.read()
            assert kernel[name] == files[name], name
        run("umount", mnt)
        fs = run("btrfs", "inspect-internal", "dump-tree", "-t", "5", img)
        chunks = parse_chunks(run("btrfs", "inspect-internal", "dump-tree", "-t", "chunk", img))
        pad_kept = False
        with open(img, "rb") as dev:
            for e, names in parse_extents(fs):
                name = names[e["ino"]]
                if e["comp"] != code:
                    print("skip (not compressed): %s %s @%d" % (algo, name, e["foff"]))
                    continue
                if e["kind"] == "inline":
                    dev.seek(to_phys(chunks, e["leaf"]) + LEAF_HEADER + e["itemoff"]
                             + FILE_EXTENT_INLINE_HEADER)
                else:
                    dev.seek(to_phys(chunks, e["bytenr"]))
                raw = dev.read(e["size"])
                start = e["foff"] - e["eoff"]
                content = kernel[name][start:start + e["ram"]]
                expected = content + bytes(e["ram"] - len(content))
                if name.startswith("pad-"):
                    # Keep the first probe whose stream has a padded sector end.
                    if pad_kept or not lzo_has_padding(raw):
                        continue
                    print("padding found in %s" % name)
                    pad_kept = True
                    name = "pad.bin"
                vec = "%s-%s-%d.bin" % (algo, name.split(".")[0], e["foff"])
                with open(os.path.join(HERE, vec), "wb") as out:
                    out.write(raw)
                if e["kind"] == "inline":
                    # The same small.txt on every filesystem: one shared file.
                    path = os.path.join(HERE, name.split(".")[0] + ".expected")
                    if algo != "zlib":
                        with open(path, "rb") as f:
                            assert f.read() == expected, path
                    with open(path, "wb") as out:
                        out.write(expected)
                manifest.append((vec, code, 4096, e["kind"], e["ram"], len(content),
                                 hashlib.sha256(expected).hexdigest()))
    with open(os.path.join(HERE, "vectors.tsv"), "w") as f:
        f.write("# file\talgo\tsectorsize\tkind\tout_len(ram_bytes)\tfile_bytes\tsha256(expected)\n")
        for row in manifest:
            f.write("\t".join(str(x) for x in row) + "\n")
    print("\n".join("\t".join(str(x) for x in row) for row in manifest))


if __name__ == "__main__":
    main()
