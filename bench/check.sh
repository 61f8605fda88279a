#!/usr/bin/env bash
# ubtrfs check beside btrfs check (btrfs-progs), cold cache:
#
#   sudo bash bench/check.sh [WORKDIR] [RUNS]
#
# On bench/send.sh's image (made here once with the kernel if missing:
# subvolume vol with FILES files of 2000 bytes, node size 16K, snapshots
# snap1 and snap2 with ADD more files and every 50th file rewritten
# between them: FILES + ADD files, three trees sharing most blocks), runs
# in turn, RUNS times (default 3), each after echo 3 > drop_caches:
#   btrfs check --readonly IMAGE
#   ubtrfs check IMAGE
# and prints the medians, the ratio, and each one's peak RSS (the most of
# its runs). Both must report the image clean.
# Environment: FILES (200000), ADD (50000), UBTRFS_BIN (else built here).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
need_root "drop_caches; the kernel makes the image"
send_image_args "$@"
build_ubtrfs
IMG=$WORK/send-$FILES-$ADD.img
[[ -e $IMG ]] || BUILD_ONLY=1 bash bench/send.sh "$WORK" >&2
declare -a T_PROGS T_UBTRFS
M_PROGS=0 M_UBTRFS=0
run() { # run NAME CMD...: appends the time; keeps the peak RSS
  local name=$1; shift
  sync
  echo 3 >/proc/sys/vm/drop_caches
  /usr/bin/time -f "%e %M" -o "$WORK/check.time" "$@" >"$WORK/check.$name.out" 2>&1 ||
    { echo "bench/check.sh: $name reported errors:" >&2; tail -5 "$WORK/check.$name.out" >&2; exit 1; }
  read -r t m <"$WORK/check.time"
  if [[ $name == progs ]]; then T_PROGS+=("$t"); ((m > M_PROGS)) && M_PROGS=$m; else T_UBTRFS+=("$t"); ((m > M_UBTRFS)) && M_UBTRFS=$m; fi
  return 0
}
for ((i = 0; i < RUNS; i++)); do
  run progs btrfs check --readonly "$IMG"
  run ubtrfs "$UBTRFS_BIN" check "$IMG"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mp=$(median "${T_PROGS[@]}"); mu=$(median "${T_UBTRFS[@]}")
inodes=$(grep -o 'inodes checked: [0-9]*' "$WORK/check.ubtrfs.out" | grep -o '[0-9]*$')
echo "check of $IMG ($((FILES + ADD)) files, vol + 2 snapshots, $inodes inodes over the trees), cold cache, median of $RUNS"
echo "| | time (s) | peak RSS (MiB) |"
echo "| --- | --- | --- |"
echo "| btrfs check --readonly | $mp | $((M_PROGS / 1024)) |"
echo "| ubtrfs check | $mu | $((M_UBTRFS / 1024)) |"
echo "| ratio | $(awk -v a="$mu" -v b="$mp" 'BEGIN {printf "%.2fx", a / b}') | $(awk -v a="$M_UBTRFS" -v b="$M_PROGS" 'BEGIN {printf "%.2fx", a / b}') |"
echo "runs (s): progs ${T_PROGS[*]}; ubtrfs ${T_UBTRFS[*]}"
