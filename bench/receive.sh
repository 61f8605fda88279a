#!/usr/bin/env bash
# Receive benchmark: the kernel's `btrfs receive` vs `ubtrfs receive`.
#
#   sudo bash bench/receive.sh [WORKDIR] [RUNS]
#
# Streams: the kernel's `btrfs send` of bench/send.sh's image (FILES files
# of 2000 bytes in snap1; snap2 adds ADD files and rewrites 20 bytes in
# every 50th), full (snap1) and incremental (snap1 -> snap2), made once.
# Each run starts from a fresh 16G sparse image with caches dropped:
#   kernel: mkfs.btrfs, loop mount, `btrfs receive -f STREAM`, then `sync`
#           (timed until sync returns);
#   ubtrfs: ubtrfs mkfs, `ubtrfs receive -f STREAM IMAGE /` (timed until it
#           exits: it commits, writes the superblock last and flushes).
# For the incremental stream the full one is received first, untimed.
# Prints a markdown table of medians of RUNS runs (default 3) with the
# ratio to the kernel's time and ubtrfs' peak RSS.
# Environment: FILES (200000), ADD (50000), UBTRFS_BIN (else built here).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
need_root "loop mount, drop_caches"
send_image_args "$@"
build_ubtrfs
BIN=$UBTRFS_BIN
SRC=$(BUILD_ONLY=1 bash bench/send.sh "$WORK" | tail -1)
MNT=$(mktemp -d)
DST=$WORK/receive-dst.img
LOOP=""
cleanup() {
  set +e
  release_mount
  rm -f "$DST"
}
trap cleanup EXIT

FULL=$WORK/stream-$FILES-$ADD.full
INCR=$WORK/stream-$FILES-$ADD.incr
if [[ ! -f $FULL || ! -f $INCR ]]; then
  LOOP=$(losetup -f --show -r "$SRC")
  mount -o ro "$LOOP" "$MNT"
  btrfs send -q -f "$FULL" "$MNT/snap1"
  btrfs send -q -f "$INCR" -p "$MNT/snap1" "$MNT/snap2"
  umount "$MNT"; losetup -d "$LOOP"; LOOP=""
fi

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
median() { python3 -c 'import sys,statistics; print("%.3f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }
now() { date +%s.%N; }
sub() { python3 -c "print('%.3f' % ($1 - $2))"; }
fresh() { rm -f "$DST"; truncate -s 16G "$DST"; }

# kernel_run full|incr: prints seconds.
kernel_run() {
  fresh
  mkfs.btrfs -q -f "$DST" >/dev/null
  LOOP=$(losetup -f --show "$DST")
  mount "$LOOP" "$MNT"
  [[ $1 == incr ]] && { btrfs receive -q -f "$FULL" "$MNT"; sync; }
  local stream=$FULL; [[ $1 == incr ]] && stream=$INCR
  drop
  local s e
  s=$(now)
  btrfs receive -q -f "$stream" "$MNT"
  sync
  e=$(now)
  umount "$MNT"; losetup -d "$LOOP"; LOOP=""
  sub "$e" "$s"
}

# ubtrfs_run full|incr: prints "seconds rss_kib".
ubtrfs_run() {
  fresh
  "$BIN" mkfs -q -f "$DST"
  [[ $1 == incr ]] && "$BIN" receive -q -f "$FULL" "$DST" /
  local stream=$FULL; [[ $1 == incr ]] && stream=$INCR
  drop
  local s e
  s=$(now)
  /usr/bin/time -f %M -o "$WORK/rss" "$BIN" receive -q -f "$stream" "$DST" /
  e=$(now)
  echo "$(sub "$e" "$s") $(cat "$WORK/rss")"
}

declare -A T R
for op in full incr; do
  times=()
  for i in $(seq "$RUNS"); do times+=("$(kernel_run $op)"); done
  T[$op,kernel]=$(median "${times[@]}")
  times=(); rss=()
  for i in $(seq "$RUNS"); do
    read -r t r < <(ubtrfs_run $op)
    times+=("$t"); rss+=("$r")
  done
  T[$op,ubtrfs]=$(median "${times[@]}")
  R[$op]=$(median "${rss[@]}")
done

echo
echo "Receive of the kernel's streams of bench/send.sh's image ($FILES files of 2000 bytes; incremental: +$ADD files, 20 bytes rewritten in every 50th). Streams: full $(du -h "$FULL" | cut -f1), incremental $(du -h "$INCR" | cut -f1). Fresh image per run, caches dropped, median of $RUNS runs; $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)."
echo
echo "| stream | tool | median s | ratio to kernel | peak RSS |"
echo "| --- | --- | --- | --- | --- |"
for op in full incr; do
  k=${T[$op,kernel]}
  u=${T[$op,ubtrfs]}
  echo "| $op | kernel \`btrfs receive\` + sync | $k | 1.00 | - |"
  echo "| $op | ubtrfs receive | $u | $(python3 -c "print('%.2f' % ($u/$k))") | $(( ${R[$op]%.*} / 1024 )) MiB |"
done
