#!/usr/bin/env bash
# What log tree replay costs, ubtrfs and the kernel side by side, on
# kernel-made crash images (tests/fixtures/make-logtrees.sh, seeds 1..8,
# 40 ops) and one fsync-heavy image (3,000 new 4 KiB files in one directory
# and 2,000 random 4 KiB overwrites of a 64 MiB file, each fsynced, on a
# commit=300 mount; copied while mounted).
#   sudo bash bench/logreplay.sh [WORKDIR] [RUNS]
# Per image, medians of RUNS (default 3), page cache warm:
#   replay-log  `ubtrfs rescue replay-log` on a copy (its own open / replay /
#               commit split, commit including the image file's fdatasync)
#   ls+replay   `ubtrfs ls IMAGE /` (the in-memory replay every reader pays)
#   ls raw      `ubtrfs ls --no-log-replay IMAGE /`
#   kernel      `mount` read-write of a copy (the kernel replays) and,
#               for scale, `mount` of the replayed copy.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ $(id -u) -eq 0 ]] || { echo "needs root (loop mounts)" >&2; exit 1; }
WORK=${1:-$PWD/target/bench-logreplay}
RUNS=${2:-3}
if [[ -z "${UBTRFS_BIN:-}" ]]; then
  cargo build --release -q -p ubtrfs
  UBTRFS_BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/ubtrfs
fi
BIN=$UBTRFS_BIN
mkdir -p "$WORK"
MNT=$(mktemp -d)
LOOP=""
cleanup() {
  mountpoint -q "$MNT" && umount "$MNT"
  [[ -n "$LOOP" ]] && losetup -d "$LOOP" 2>/dev/null
  rmdir "$MNT"
}
trap cleanup EXIT

[[ -f $WORK/log-8/dev0.img ]] || bash tests/fixtures/make-logtrees.sh "$WORK" 1 2 3 4 5 6 7 8 >/dev/null
if [[ ! -f $WORK/heavy/dev0.img ]]; then
  mkdir -p "$WORK/heavy"
  truncate -s 1G "$WORK/heavy/live.img"
  mkfs.btrfs -q -f "$WORK/heavy/live.img"
  LOOP=$(losetup -f --show "$WORK/heavy/live.img")
  mount -o commit=300 "$LOOP" "$MNT"
  mkdir "$MNT/d"
  head -c 64M /dev/urandom >"$MNT/big"
  sync
  python3 - "$MNT" <<'EOF'
import os, random, sys
m = sys.argv[1]
r = random.Random(1)
for i in range(3000):
    with open("%s/d/f%05d" % (m, i), "wb") as f:
        f.write(r.randbytes(4096)); f.flush(); os.fsync(f.fileno())
fd = os.open(m + "/big", os.O_WRONLY)
for i in range(2000):
    os.pwrite(fd, r.randbytes(4096), r.randrange(16384) * 4096)
    os.fsync(fd)
os.close(fd)
EOF
  cp --sparse=always "$WORK/heavy/live.img" "$WORK/heavy/dev0.img"
  umount "$MNT"; losetup -d "$LOOP"; LOOP=""
  rm -f "$WORK/heavy/live.img"
fi

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1; t1=$(date +%s.%N); printf '%.3f\n' "$(echo "$t1 - $t0" | bc)"; }

echo "| image | log items | logged extents | replay-log s (open / replay / commit) | ls+replay s | ls raw s | kernel rw mount s (replays) | kernel mount after replay s |"
echo "|---|---|---|---|---|---|---|---|"
for dir in "$WORK"/log-* "$WORK/heavy"; do
  img=$dir/dev0.img
  name=$(basename "$dir")
  copy=$WORK/.copy.img
  rl=() ; items="" ; ext=""
  for ((i = 0; i < RUNS; i++)); do
    cp --sparse=always "$img" "$copy"
    out=$("$BIN" rescue replay-log "$copy")
    items=$(sed -E 's/.*\(([0-9]+) items.*/\1/' <<<"$out")
    ext=$(sed -E 's/.*, ([0-9]+) logged data extent.*/\1/' <<<"$out")
    rl+=("$(sed -E 's/.* in ([0-9.]+)s \(open ([0-9.]+)s, replay ([0-9.]+)s, commit ([0-9.]+)s\)/\1 (\2 \/ \3 \/ \4)/' <<<"$out")")
  done
  rlm=$(printf '%s\n' "${rl[@]}" | sort -n | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}')
  lsr=$(for ((i = 0; i < RUNS; i++)); do secs "$BIN" ls "$img" /; done | median)
  lsraw=$(for ((i = 0; i < RUNS; i++)); do secs "$BIN" ls --no-log-replay "$img" /; done | median)
  km=() ; ka=()
  for ((i = 0; i < RUNS; i++)); do
    cp --sparse=always "$img" "$copy"
    LOOP=$(losetup -f --show "$copy")
    km+=("$(secs mount -t btrfs "$LOOP" "$MNT")")
    umount "$MNT"
    ka+=("$(secs mount -t btrfs "$LOOP" "$MNT")")
    umount "$MNT"
    losetup -d "$LOOP"; LOOP=""
  done
  kmm=$(printf '%s\n' "${km[@]}" | median)
  kam=$(printf '%s\n' "${ka[@]}" | median)
  echo "| $name | $items | $ext | $rlm | $lsr | $lsraw | $kmm | $kam |"
  rm -f "$copy"
done
