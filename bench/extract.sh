#!/usr/bin/env bash
# Reader benchmark: copy a whole kernel-made image out, cold cache.
#   kernel: loop mount -o ro, `cp -a MNT/. OUT`
#   ubtrfs: `ubtrfs extract IMAGE / OUT` (no mount, no kernel btrfs)
# OUT is on tmpfs so the destination costs the same for both. Caches are
# dropped before every run. Prints a markdown table of medians, the ratio
# to the kernel, and ubtrfs' peak RSS.
#   sudo bash bench/extract.sh [FIXTURE_DIR] [RUNS]
# FIXTURE_DIR defaults to a fresh `big` fixture (tests/fixtures/build.sh):
# 100,000-entry directory, 4 GiB sparse file, 64 MiB striped sparse file,
# extended refs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=${2:-3}
[[ $(id -u) -eq 0 ]] || { echo "needs root (loop mount, drop_caches)" >&2; exit 1; }
if [[ -z "${UBTRFS_BIN:-}" ]]; then
  cargo build --release -q -p ubtrfs
  UBTRFS_BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/ubtrfs
fi
BIN=$UBTRFS_BIN
FIX=${1:-}
if [[ -z "$FIX" ]]; then
  FIX=$PWD/target/bench-fixtures/big
  [[ -f $FIX/dev0.img ]] || bash tests/fixtures/build.sh "$PWD/target/bench-fixtures" big
fi
IMG=$FIX/dev0.img
OUT=/dev/shm/ubtrfs-bench-out
MNT=$(mktemp -d)
cleanup() { mountpoint -q "$MNT" && umount "$MNT"; rmdir "$MNT"; rm -rf "$OUT"; }
trap cleanup EXIT

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
secs() { python3 -c 'import sys; print(sys.argv[1])' "$1"; }
median() { python3 -c 'import sys,statistics; print("%.3f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }

kernel=(); ub=(); rss=()
for i in $(seq "$RUNS"); do
  rm -rf "$OUT"; drop
  s=$(date +%s.%N)
  mount -o ro,loop "$IMG" "$MNT"
  cp -a "$MNT/." "$OUT"
  umount "$MNT"
  e=$(date +%s.%N); kernel+=("$(python3 -c "print($e-$s)")")
  rm -rf "$OUT"; drop
  s=$(date +%s.%N)
  /usr/bin/time -f %M -o /tmp/ubtrfs-bench-rss "$BIN" extract "$IMG" / "$OUT" 2>/dev/null
  e=$(date +%s.%N); ub+=("$(python3 -c "print($e-$s)")")
  rss+=("$(cat /tmp/ubtrfs-bench-rss)")
done
k=$(median "${kernel[@]}"); u=$(median "${ub[@]}"); r=$(median "${rss[@]}")
echo
echo "| cold copy-out of $(basename "$FIX") ($RUNS runs) | median s | ratio to kernel | peak RSS |"
echo "| --- | --- | --- | --- |"
echo "| kernel: mount -o ro + cp -a | $k | 1.00 | - |"
echo "| ubtrfs extract | $u | $(python3 -c "print('%.2f' % ($u/$k))") | $((${r%.*} / 1024)) MiB |"
