#!/usr/bin/env bash
# Everyday work through a mount, side by side in one run, each step ending
# durable:
#   copy    cp -a SRC (default /usr/include) into the mount, then unmount
#   read    mount again, drop caches, tar cf - of the tree to /dev/null
#   rm      rm -rf the tree, then unmount
# on these sides (SIDES):
#   kernel          the kernel's btrfs on a loop device
#   ubtrfs          `ubtrfs mount` as root: a fuseblk mount, whose plain
#                   umount waits for the last commit, on the transport a
#                   root mount gets by default
#   ubtrfs-dev      the same over /dev/fuse (-o nouring)
#   ubtrfs-plain    `ubtrfs mount -o noblkdev`: a plain FUSE mount, unmounted
#                   with `ubtrfs umount` (a plain umount would return before
#                   the last commit)
# Runs are interleaved (run 1 of every side, then run 2, ...); the table
# shows medians (and ranges) in seconds, and each side's median over the
# kernel's.
#
#   sudo bash bench/everyday.sh [WORKDIR] [RUNS]
#
# WORKDIR defaults to /var/tmp/ubtrfs-everyday, RUNS to 3. Environment:
# SRC, SIDES, SIZE (image size, default 4G), UBTRFS_OPTS (extra -o options
# for both ubtrfs sides).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
[[ $(id -u) -eq 0 ]] || { echo "bench/everyday.sh: needs root" >&2; exit 1; }
WORK=${1:-/var/tmp/ubtrfs-everyday}
RUNS=${2:-3}
SRC=${SRC:-/usr/include}
SIDES=${SIDES:-kernel ubtrfs ubtrfs-plain}
SIZE=${SIZE:-4G}
BIN=${CARGO_TARGET_DIR:-$repo/target}/release/ubtrfs
cargo build --release --locked -q
mkdir -p "$WORK"
img=$WORK/fs.img
mnt=$WORK/mnt
mkdir -p "$mnt"
out=$WORK/results.tsv
: > "$out"
cleanup() { mountpoint -q "$mnt" && umount "$mnt" || true; }
trap cleanup EXIT

now() { date +%s.%N; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

fresh() { # SIDE
  rm -f "$img"
  truncate -s "$SIZE" "$img"
  case $1 in
    kernel) mkfs.btrfs -q -f "$img" 2>/dev/null ;;
    *) "$BIN" mkfs -q -f "$img" ;;
  esac
}
do_mount() { # SIDE
  local extra=${UBTRFS_OPTS:-}
  case $1 in
    kernel) mount -o loop "$img" "$mnt" ;;
    ubtrfs) "$BIN" mount -o "rw${extra:+,$extra}" "$img" "$mnt" ;;
    ubtrfs-dev) "$BIN" mount -o "rw,nouring${extra:+,$extra}" "$img" "$mnt" ;;
    ubtrfs-plain) "$BIN" mount -o "rw,noblkdev${extra:+,$extra}" "$img" "$mnt" ;;
  esac
}
do_umount() { # SIDE: returns once everything is on the image
  case $1 in
    ubtrfs-plain) "$BIN" umount "$mnt" ;;
    *) umount "$mnt" ;;
  esac
}

files=$(find "$SRC" | wc -l)
mib=$(du -sm "$SRC" | cut -f1)
echo "source: $SRC ($files entries, $mib MiB); $RUNS runs; sides: $SIDES" >&2
for run in $(seq 1 "$RUNS"); do
  for side in $SIDES; do
    fresh "$side"
    do_mount "$side"
    drop
    t0=$(now)
    cp -a "$SRC" "$mnt/tree"
    do_umount "$side"
    t1=$(now)
    do_mount "$side"
    drop
    t2=$(now)
    # Through a pipe: GNU tar writing to /dev/null reads no file's data.
    tar cf - -C "$mnt" tree | cat > /dev/null
    t3=$(now)
    rm -rf "$mnt/tree"
    do_umount "$side"
    t4=$(now)
    # Every byte made it through the remount and the removal was durable.
    btrfs check --readonly "$img" > "$WORK/check.$side.$run" 2>&1 ||
      { echo "btrfs check failed after $side run $run" >&2; exit 1; }
    printf '%s\t%s\tcopy\t%s\n' "$side" "$run" "$(echo "$t1 - $t0" | bc)" >> "$out"
    printf '%s\t%s\tread\t%s\n' "$side" "$run" "$(echo "$t3 - $t2" | bc)" >> "$out"
    printf '%s\t%s\trm\t%s\n' "$side" "$run" "$(echo "$t4 - $t3" | bc)" >> "$out"
    echo "run $run $side: copy $(echo "$t1 - $t0" | bc) read $(echo "$t3 - $t2" | bc) rm $(echo "$t4 - $t3" | bc)" >&2
  done
done
rm -f "$img"

python3 - "$out" $SIDES <<'EOF'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
sides = sys.argv[2:]
steps = ["copy", "read", "rm"]
t = {}
for side, run, step, secs in rows:
    t.setdefault((side, step), []).append(float(secs))
print("| step | " + " | ".join(sides) + " |")
print("|---|" + "---|" * len(sides))
for step in steps:
    cells = []
    base = statistics.median(t[("kernel", step)]) if ("kernel", step) in t else None
    for s in sides:
        v = t.get((s, step), [])
        if not v:
            cells.append("-")
            continue
        m = statistics.median(v)
        ratio = f", {m / base:.2f}x" if base and s != "kernel" else ""
        cells.append(f"{m:.2f} s ({min(v):.2f}-{max(v):.2f}{ratio})")
    print(f"| {step} | " + " | ".join(cells) + " |")
EOF
