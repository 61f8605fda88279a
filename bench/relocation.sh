#!/usr/bin/env bash
# Chunk relocation on an unmounted image (ubtrfs) beside the kernel's
# (loop mount), side by side in one run, cold cache:
#
#   sudo bash bench/relocation.sh [WORKDIR] [RUNS]
#
# Two images, made once with the kernel and kept in WORKDIR
# (/var/tmp/bench-reloc) as the pristine ones; every run works on a fresh
# `cp --sparse=always` copy, made before the caches are dropped
# (sync; echo 3 > /proc/sys/vm/drop_caches) and removed after the run:
#
#   shrink   an 8 GiB image holding ~3 GiB of files (big random files of
#            112-288 MiB, 4000 files of 4-64 KiB, zstd-compressed text),
#            written after a filler that took whole data block groups and
#            was then deleted, so the content's block groups are full and
#            over half of them lie past 4 GiB. Resized to 4 GiB:
#              ubtrfs: ubtrfs filesystem resize 4G COPY (cuts the file)
#              kernel: losetup, mount, btrfs filesystem resize 4G MNT,
#                      umount, losetup -d, truncate -s 4G COPY
#   balance  a 7 GiB image with ~2 GiB of such files, data single.
#            Converted to DUP. ubtrfs keeps each chunk's size and holds
#            the old stripe until the copy is committed, so it needs twice
#            the allocated data (not the used) plus one chunk: 6 GiB, with
#            4 data chunks of 624 MiB, lacks 17 MiB for the last one.
#              ubtrfs: ubtrfs balance start -dconvert=dup COPY
#              kernel: losetup, mount, btrfs balance start -dconvert=dup
#                      MNT, umount, losetup -d
#
# Each is timed whole (wall clock). After each run, untimed: btrfs check
# --readonly must pass (and ubtrfs check, on ubtrfs' result); a shrunk
# image must be 4 GiB (file and device size), a balanced one must have only
# DUP data chunks. The script stops with the error otherwise. RUNS (3)
# pairs, kernel and ubtrfs taking turns at going first; prints a markdown
# table of the medians with the ratio ubtrfs/kernel, and every run's time.
# Environment: UBTRFS_BIN (else built here, in CARGO_TARGET_DIR, by default
# /var/tmp/benchtarget), REBUILD=1 to make the images again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
need_root "loop mounts, drop_caches"
WORK=${1:-/var/tmp/bench-reloc}
RUNS=${2:-3}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "bench/relocation.sh: RUNS must be 1 or more" >&2; exit 1; }
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/benchtarget}
build_ubtrfs
mkdir -p "$WORK"
SHRINK_IMG=$WORK/shrink-8g.img
BAL_IMG=$WORK/balance-7g.img
COPY=$WORK/copy.img
FILLER_MIB=${FILLER_MIB:-1792}
GIB=$((1 << 30))
MNT=$(mktemp -d)
LOOP=""
cleanup() {
  set +e
  release_mount
  rm -f "$COPY"
}
trap cleanup EXIT
die() { echo "bench/relocation.sh: $*" >&2; exit 1; }
attach() { LOOP=$(losetup -f --show "$1"); }
detach() { losetup -d "$LOOP"; LOOP=""; }

# gen_content DIR SEED BIG_MIB SMALL TEXT_MIB: deterministic files under
# DIR: big/ random files of 112-288 MiB, in steps of 16 MiB so that no
# extent is medium-sized (see make_shrink_img), BIG_MIB in all, each
# fsynced whole, small/ SMALL random files of 4-64 KiB, text/ TEXT_MIB MiB of text
# in 16 MiB files (text/ gets zstd compression first).
gen_content() {
  mkdir -p "$1/big" "$1/small" "$1/text"
  btrfs property set "$1/text" compression zstd
  python3 - "$@" <<'PY'
import os, random, sys
root, seed, big_mib, nsmall, text_mib = sys.argv[1], *map(int, sys.argv[2:])
r = random.Random(seed)
done = i = 0
while done < big_mib:
    mib = min(16 * r.randint(7, 18), big_mib - done)  # tails > 8 MiB: large
    with open(f"{root}/big/b{i:02d}", "wb") as f:
        for _ in range(0, mib, 4):
            f.write(r.randbytes(4 << 20))
        os.fsync(f.fileno())  # written whole: extents of 128 MiB
    done += mib; i += 1
for i in range(nsmall):
    d = f"{root}/small/d{i // 500:02d}"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/s{i:05d}", "wb") as f:
        f.write(r.randbytes(r.randint(4096, 65536)))
words = ["".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(2, 10))) for _ in range(3000)]
lines = [" ".join(r.choices(words, k=r.randint(4, 14))) + "\n" for _ in range(20000)]
for i in range(text_mib // 16):
    with open(f"{root}/text/t{i:02d}.txt", "w") as f:
        left = 16 << 20
        while left > 0:
            chunk = "".join(r.choices(lines, k=2000))[:left]
            f.write(chunk); left -= len(chunk)
PY
}

# data_bgs DEV: "LOGICAL LENGTH USED" of each data block group.
data_bgs() {
  [[ -b $1 ]] && blockdev --flushbufs "$1" # not what a past dump read
  btrfs inspect-internal dump-tree -t extent "$1" |
    awk '/BLOCK_GROUP_ITEM/ {gsub(/[()]/, ""); l = $4; len = $6} /block group used/ && $NF ~ /^DATA/ {print l, len, $4}'
}

# layout IMAGE: its data block groups (logical, device offset, length,
# used) and the share of the used bytes in block groups ending past 4 GiB.
layout() {
  python3 - "$1" <<'PY'
import re, subprocess, sys
img = sys.argv[1]
def dump(t):
    return subprocess.run(["btrfs", "inspect-internal", "dump-tree", "-t", t, img],
                          check=True, capture_output=True, text=True).stdout
phys = {}
for m in re.finditer(r"item \d+ key \(\d+ DEV_EXTENT (\d+)\)[^\n]*\n[^\n]*\n\s*chunk_objectid \d+ chunk_offset (\d+) length (\d+)", dump("dev")):
    phys.setdefault(int(m[2]), []).append((int(m[1]), int(m[3])))
past = total = 0
for m in re.finditer(r"item \d+ key \((\d+) BLOCK_GROUP_ITEM (\d+)\)[^\n]*\n\s*block group used (\d+) chunk_objectid \d+ flags (\S+)", dump("extent")):
    log, length, used, flags = int(m[1]), int(m[2]), int(m[3]), m[4]
    if not flags.startswith("DATA"):
        continue
    devs = phys.get(log, [])
    end = max(p + l for p, l in devs)
    print(f"  data bg {log:>11} at device {','.join(str(p) for p, _ in devs):>11} "
          f"len {length >> 20:4d} MiB used {used >> 20:4d} MiB{'  (past 4 GiB)' if end > 4 << 30 else ''}")
    total += used
    if end > 4 << 30:
        past += used
print(f"  data used {total >> 20} MiB, {past >> 20} MiB ({100 * past // max(total, 1)}%) in block groups past 4 GiB")
PY
}

make_shrink_img() {
  echo "building $SHRINK_IMG ..." >&2
  rm -f "$SHRINK_IMG"
  truncate -s 8G "$SHRINK_IMG"
  mkfs.btrfs -q -f "$SHRINK_IMG" >/dev/null
  attach "$SHRINK_IMG"
  mount "$LOOP" "$MNT"
  # The kernel (6.1 on) gives each data block group a size class by its
  # first extent (small <= 128 KiB, medium <= 8 MiB, large) and makes a new
  # block group rather than put an extent in one of another class. The
  # filler: FILLER_MIB in 128 MiB extents, which leave 64 MiB free at the
  # end of each block group, then pad files of 16 MiB (large too) until the
  # filler's block groups are full. No content may land in one: deleting
  # the filler would leave it half empty, which ubtrfs does not compact (it
  # moves whole chunks).
  mkdir "$MNT/filler"
  python3 -c "
import os, random
r = random.Random(99)
with open('$MNT/filler/big', 'wb') as f:
    for _ in range($FILLER_MIB // 4): f.write(r.randbytes(4 << 20))
    os.fsync(f.fileno())"
  sync
  local keep pad n=0 rounds=0 u=$((16 << 20))
  keep=" $(data_bgs "$LOOP" | awk '{printf "%s ", $1}')"
  while :; do
    keep=" $(data_bgs "$LOOP" | awk -v k="$keep" 'index(k, " " $1 " ") || $3 > 0 {printf "%s ", $1}')"
    pad=$(data_bgs "$LOOP" | awk -v k="$keep" -v u=$u 'index(k, " " $1 " ") {s += int(($2 - $3) / u) * u} END {print s + 0}')
    ((pad > 0 && rounds < 8)) || break
    ((++rounds))
    for ((; pad > 0; pad -= u, n++)); do
      head -c $u /dev/zero >"$MNT/filler/pad$n"
    done
    sync
  done
  echo "  filler: $FILLER_MIB MiB + $n pad files of 16 MiB in $rounds rounds; its block groups:" >&2
  data_bgs "$LOOP" | awk -v k="$keep" 'index(k, " " $1 " ") {printf "    %s len %d MiB used %d MiB\n", $1, $2 / 2^20, $3 / 2^20}' >&2
  gen_content "$MNT/data" 1 2200 4000 768
  sync
  rm -r "$MNT/filler"
  sync
  btrfs balance start -dusage=0 "$MNT" >/dev/null # the filler's block groups, now empty, go
  umount "$MNT"
  detach
  layout "$SHRINK_IMG" >&2
}

make_balance_img() {
  echo "building $BAL_IMG ..." >&2
  rm -f "$BAL_IMG"
  truncate -s 7G "$BAL_IMG"
  mkfs.btrfs -q -f "$BAL_IMG" >/dev/null
  attach "$BAL_IMG"
  mount "$LOOP" "$MNT"
  gen_content "$MNT/data" 2 1700 3000 256
  sync
  umount "$MNT"
  detach
  layout "$BAL_IMG" >&2
}

[[ -f $SHRINK_IMG && -z "${REBUILD:-}" ]] || make_shrink_img
[[ -f $BAL_IMG && -z "${REBUILD:-}" ]] || make_balance_img

# Timed bodies; output goes to $WORK/run.out.
k_shrink() {
  attach "$COPY"
  mount "$LOOP" "$MNT"
  btrfs filesystem resize 4G "$MNT"
  umount "$MNT"
  detach
  truncate -s 4G "$COPY"
}
u_shrink() { "$UBTRFS_BIN" filesystem resize 4G "$COPY"; }
k_balance() {
  attach "$COPY"
  mount "$LOOP" "$MNT"
  btrfs balance start -dconvert=dup "$MNT"
  umount "$MNT"
  detach
}
u_balance() { "$UBTRFS_BIN" balance start -dconvert=dup "$COPY"; }

verify() { # verify SIDE OP: the checks on $COPY after a run
  btrfs check --readonly "$COPY" >"$WORK/check.out" 2>&1 ||
    { tail -20 "$WORK/check.out" >&2; die "$2 by $1: btrfs check failed"; }
  if [[ $1 == ubtrfs ]]; then
    "$UBTRFS_BIN" check "$COPY" >"$WORK/check.out" 2>&1 ||
      { tail -20 "$WORK/check.out" >&2; die "$2 by $1: ubtrfs check failed"; }
  fi
  if [[ $2 == shrink ]]; then
    local size dev
    size=$(stat -c %s "$COPY")
    dev=$(btrfs inspect-internal dump-super "$COPY" | awk '$1 == "dev_item.total_bytes" {print $2}')
    [[ $size == $((4 * GIB)) && $dev == $((4 * GIB)) ]] ||
      die "shrink by $1: file is $size bytes, device $dev, not $((4 * GIB))"
  else
    local all dup
    all=$(btrfs inspect-internal dump-tree -t chunk "$COPY" | grep -c 'type DATA') || true
    dup=$(btrfs inspect-internal dump-tree -t chunk "$COPY" | grep -c 'type DATA|DUP') || true
    [[ $all -gt 0 && $all == "$dup" ]] || die "balance by $1: $dup of $all data chunks DUP"
  fi
}

declare -A T
run() { # run SIDE OP: one timed run on a fresh copy, then the checks
  local side=$1 op=$2 src t0 t1 t
  [[ $op == shrink ]] && src=$SHRINK_IMG || src=$BAL_IMG
  cp --sparse=always "$src" "$COPY"
  sync
  echo 3 >/proc/sys/vm/drop_caches
  t0=$EPOCHREALTIME
  if ! "${side:0:1}_$op" >"$WORK/run.out" 2>&1; then
    cat "$WORK/run.out" >&2
    die "$op by $side failed (output above)"
  fi
  t1=$EPOCHREALTIME
  verify "$side" "$op"
  rm -f "$COPY"
  t=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
  T[$side.$op]="${T[$side.$op]:+${T[$side.$op]} }$t"
  echo "run $((i + 1)): $op $side $t s" >&2
}
for ((i = 0; i < RUNS; i++)); do
  for op in shrink balance; do
    if ((i % 2 == 0)); then run kernel $op; run ubtrfs $op; else run ubtrfs $op; run kernel $op; fi
  done
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo
echo "chunk relocation, unmounted image (ubtrfs) vs loop mount (kernel $(uname -r)), cold cache, median of $RUNS (s)"
echo "| operation | kernel | ubtrfs | ubtrfs/kernel |"
echo "| --- | --- | --- | --- |"
for op in shrink balance; do
  # shellcheck disable=SC2086 # the run times, one word each
  k=$(median ${T[kernel.$op]}) u=$(median ${T[ubtrfs.$op]})
  [[ $op == shrink ]] && what="shrink 8 GiB -> 4 GiB (~3 GiB of files)" || what="balance -dconvert=dup (~2 GiB data)"
  echo "| $what | $k | $u | $(awk -v a="$u" -v b="$k" 'BEGIN {printf "%.2fx", a / b}') |"
done
for op in shrink balance; do
  echo "runs (s): $op kernel ${T[kernel.$op]}; ubtrfs ${T[ubtrfs.$op]}"
done
echo "reproduce: sudo bash bench/relocation.sh $WORK $RUNS"
