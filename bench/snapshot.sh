#!/usr/bin/env bash
# Snapshots and send on a live mount, beside the kernel's btrfs, in one run.
#   sudo bash bench/snapshot.sh [WORKDIR] [RUNS]
# Per run, on each side (the kernel's loop mount with btrfs-progs, and
# ubtrfs's mount with `ubtrfs subvolume`/`ubtrfs send` on the mount path):
#   - write MIB MiB (default 256) into a subvolume, left dirty, then time
#     `subvolume snapshot -r` (the snapshot writes back and commits first);
#   - time a full send of that snapshot to a file from the live mount,
#     the page cache dropped first.
# After the runs, ubtrfs's image is unmounted and the same snapshots are
# sent offline (`ubtrfs send IMAGE /snapN`): the live stream must be
# byte-identical, and the times are set side by side.
# Prints medians and ratios (ubtrfs / kernel, live / offline).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
need_root "loop and FUSE mounts"
build_ubtrfs
WORK=${1:-/var/tmp/bench-snapshot}
RUNS=${2:-5}
MIB=${MIB:-256}
rm -rf "$WORK"
mkdir -p "$WORK"
SRC=$WORK/src
head -c "${MIB}M" /dev/urandom >"$SRC"
KM=$WORK/km
UM=$WORK/um
mkdir -p "$KM" "$UM"
cleanup() {
  mountpoint -q "$KM" && umount "$KM"
  mountpoint -q "$UM" && umount "$UM"
  true
}
trap cleanup EXIT

now() { date +%s.%N; }
# Sends are timed cold (the page cache dropped): the ubtrfs mount writes
# large data past the host's page cache (O_DIRECT), the kernel's stays in
# its own, and an offline send after a live one would find the live
# one's reads cached.
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$2"; }

# side NAME SV SEND MNT: RUNS rounds of write + snapshot + send (each
# snapshot holds one file of MIB MiB).
side() {
  local name=$1 sv=$2 send=$3 mnt=$4
  $sv create "$mnt/data" >/dev/null
  for i in $(seq 1 "$RUNS"); do
    rm -f "$mnt/data/f$((i - 1))"
    cp "$SRC" "$mnt/data/f$i"
    local t0 t1
    t0=$(now)
    $sv snapshot -r "$mnt/data" "$mnt/snap$i" >/dev/null
    t1=$(now)
    echo "$name snapshot $(elapsed "$t0" "$t1")"
    cold
    t0=$(now)
    $send -f "$WORK/$name.live.$i" "$mnt/snap$i" 2>/dev/null
    t1=$(now)
    echo "$name send $(elapsed "$t0" "$t1")"
  done
}

RESULTS=$WORK/results
: >"$RESULTS"
truncate -s 8G "$WORK/k.img"
mkfs.btrfs -q -f "$WORK/k.img"
mount -o loop "$WORK/k.img" "$KM"
side kernel "btrfs subvolume" "btrfs send -q" "$KM" >>"$RESULTS"
umount "$KM"

truncate -s 8G "$WORK/u.img"
mkfs.btrfs -q -f "$WORK/u.img"
"$UBTRFS_BIN" mount "$WORK/u.img" "$UM"
side ubtrfs "$UBTRFS_BIN subvolume" "$UBTRFS_BIN send -q" "$UM" >>"$RESULTS"
umount "$UM"
for i in $(seq 1 "$RUNS"); do
  cold
  t0=$(now)
  "$UBTRFS_BIN" send -q -f "$WORK/ubtrfs.offline.$i" "$WORK/u.img" "/snap$i"
  t1=$(now)
  echo "offline send $(elapsed "$t0" "$t1")" >>"$RESULTS"
  cmp "$WORK/ubtrfs.live.$i" "$WORK/ubtrfs.offline.$i" ||
    { echo "snap$i: the live stream differs from the offline one" >&2; exit 1; }
done
btrfs check --readonly "$WORK/u.img" >/dev/null 2>&1 ||
  { echo "btrfs check failed on ubtrfs's image" >&2; exit 1; }

python3 - "$RESULTS" "$MIB" "$RUNS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    *what, t = line.split()
    rows.setdefault(" ".join(what), []).append(float(t))
med = {k: statistics.median(v) for k, v in rows.items()}
print(f"snapshot -r with {sys.argv[2]} MiB dirty, medians of {sys.argv[3]}:")
print(f"  kernel {med['kernel snapshot']:.3f} s, ubtrfs {med['ubtrfs snapshot']:.3f} s: "
      f"{med['ubtrfs snapshot'] / med['kernel snapshot']:.2f}x")
print("full send of that snapshot to a file:")
print(f"  kernel {med['kernel send']:.3f} s, ubtrfs live {med['ubtrfs send']:.3f} s, "
      f"ubtrfs offline {med['offline send']:.3f} s: live/kernel "
      f"{med['ubtrfs send'] / med['kernel send']:.2f}x, live/offline "
      f"{med['ubtrfs send'] / med['offline send']:.2f}x")
PY
echo "every live stream byte-identical to the offline send of the same snapshot"
