#!/usr/bin/env bash
# Send benchmark (the btrfs send readahead patches' experiment), cold cache.
#
#   sudo bash bench/send.sh [WORKDIR] [RUNS]
#
# Builds once, with the kernel, an image (node size 16K, max_inline=2048):
# subvolume vol with FILES files of 2000 bytes (in directories of 2000),
# read-only snapshot snap1, then ADD more files and 20 bytes rewritten in
# every 50th original file, snapshot snap2; unmounted. Then, with caches
# dropped before every run (echo 3 > /proc/sys/vm/drop_caches):
#   kernel: the image loop-mounted read-only, `btrfs send` to /dev/null
#           (the mount is made before the caches are dropped and not timed)
#   ubtrfs: `ubtrfs send --reada MODE` from the unmounted image to
#           /dev/null, for MODE in none, back, forward, always
# for the full send of snap1 and the incremental snap1 -> snap2. Prints a
# markdown table of medians of RUNS runs (default 3), each with its ratio to
# the kernel's time and ubtrfs' peak RSS.
# Environment: FILES (200000), ADD (50000), UBTRFS_BIN (else built here),
# REBUILD=1 to make the image again, BUILD_ONLY=1 to make (or keep) the image
# and stop (bench/slowdev.sh uses it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
need_root "loop mount, drop_caches"
send_image_args "$@"
[[ -n "${BUILD_ONLY:-}" ]] || build_ubtrfs
BIN=${UBTRFS_BIN:-}
mkdir -p "$WORK"
IMG=$WORK/send-$FILES-$ADD.img
MNT=$(mktemp -d)
LOOP=""
cleanup() {
  set +e
  release_mount
}
trap cleanup EXIT

attach() { LOOP=$(losetup -f --show "$@" "$IMG"); }
detach() { losetup -d "$LOOP"; LOOP=""; }

if [[ ! -f $IMG || -n "${REBUILD:-}" ]]; then
  echo "building $IMG: $FILES files + $ADD ..." >&2
  rm -f "$IMG"
  truncate -s 16G "$IMG"
  mkfs.btrfs -q -f -n 16k "$IMG" >/dev/null
  attach
  mount -o max_inline=2048 "$LOOP" "$MNT"
  btrfs -q subvolume create "$MNT/vol"
  python3 - "$MNT/vol" "$FILES" "$ADD" <<'EOF'
import os, sys, hashlib
vol, files, add = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per_dir = 2000
ndirs = (files + per_dir - 1) // per_dir
def data(i):
    return hashlib.shake_256(b"bench-%d" % i).digest(2000)
flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
for d in range(ndirs):
    os.mkdir(os.path.join(vol, "d%04d" % d))
for i in range(files):
    fd = os.open(os.path.join(vol, "d%04d" % (i // per_dir), "f%07d" % i), flags, 0o644)
    os.write(fd, data(i))
    os.close(fd)
EOF
  btrfs filesystem sync "$MNT"
  btrfs -q subvolume snapshot -r "$MNT/vol" "$MNT/snap1"
  python3 - "$MNT/vol" "$FILES" "$ADD" <<'EOF'
import os, sys, hashlib
vol, files, add = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per_dir = 2000
ndirs = (files + per_dir - 1) // per_dir
flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
for j in range(add):
    fd = os.open(os.path.join(vol, "d%04d" % (j % ndirs), "n%07d" % j), flags, 0o644)
    os.write(fd, hashlib.shake_256(b"bench-new-%d" % j).digest(2000))
    os.close(fd)
for i in range(0, files, 50):
    fd = os.open(os.path.join(vol, "d%04d" % (i // per_dir), "f%07d" % i), os.O_WRONLY)
    os.pwrite(fd, b"R" * 20, 1000)
    os.close(fd)
EOF
  btrfs filesystem sync "$MNT"
  btrfs -q subvolume snapshot -r "$MNT/vol" "$MNT/snap2"
  umount "$MNT"
  detach
fi
if [[ -n "${BUILD_ONLY:-}" ]]; then
  echo "$IMG"
  exit 0
fi

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
median() { python3 -c 'import sys,statistics; print("%.3f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }
now() { date +%s.%N; }
sub() { python3 -c "print('%.3f' % ($1 - $2))"; }

# kernel_run ARGS...: one cold `btrfs send` of the mounted image; prints seconds.
kernel_run() {
  attach -r
  mount -o ro "$LOOP" "$MNT"
  drop
  local s e
  s=$(now)
  btrfs send -q -f /dev/null "$@"
  e=$(now)
  umount "$MNT"
  detach
  sub "$e" "$s"
}

# ubtrfs_run MODE ARGS...: one cold `ubtrfs send`; prints "seconds rss_kib".
ubtrfs_run() {
  local mode=$1; shift
  drop
  local s e
  s=$(now)
  /usr/bin/time -f %M -o "$WORK/rss" "$BIN" send --reada "$mode" -f /dev/null "$IMG" "$@" 2>/dev/null
  e=$(now)
  echo "$(sub "$e" "$s") $(cat "$WORK/rss")"
}

declare -A T R
row_names=()
for op in full incremental; do
  if [[ $op == full ]]; then kargs=("$MNT/snap1"); uargs=(snap1); else kargs=(-p "$MNT/snap1" "$MNT/snap2"); uargs=(-p snap1 snap2); fi
  times=()
  for i in $(seq "$RUNS"); do times+=("$(kernel_run "${kargs[@]}")"); done
  T[$op,kernel]=$(median "${times[@]}")
  for mode in none back forward always; do
    times=(); rss=()
    for i in $(seq "$RUNS"); do
      read -r t r < <(ubtrfs_run "$mode" "${uargs[@]}")
      times+=("$t"); rss+=("$r")
    done
    T[$op,$mode]=$(median "${times[@]}")
    R[$op,$mode]=$(median "${rss[@]}")
  done
done

echo
echo "Send of a snapshot with $FILES files of 2000 bytes (node size 16K, max_inline=2048); incremental: +$ADD files, 20 bytes rewritten in every 50th file. Cold cache, median of $RUNS runs, stream to /dev/null."
echo
echo "| send | tool | median s | ratio to kernel | peak RSS |"
echo "| --- | --- | --- | --- | --- |"
for op in full incremental; do
  k=${T[$op,kernel]}
  echo "| $op | kernel \`btrfs send\` | $k | 1.00 | - |"
  for mode in none back forward always; do
    u=${T[$op,$mode]}
    echo "| $op | ubtrfs --reada $mode | $u | $(python3 -c "print('%.2f' % ($u/$k))") | $(( ${R[$op,$mode]%.*} / 1024 )) MiB |"
  done
done
