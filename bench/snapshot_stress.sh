#!/usr/bin/env bash
# fstests' fsstress on ubtrfs's live mount while a read-only snapshot is
# taken every second, for SECS seconds (default 60): the full count of
# rw_mount (r), which runs rw_ops beside ten snapshots.
#   sudo bash bench/snapshot_stress.sh [WORKDIR]
# Then: the mount ends with exit 0, `btrfs check` is clean, the kernel
# mounts the image and reads every snapshot whole, deletes ten of them
# and writes, and `btrfs check` stays clean. SIZE: the image (16G). fsstress comes from bench/fstests.sh's build
# (made here if it is missing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
need_root "loop and FUSE mounts"
build_ubtrfs
WORK=${1:-/var/tmp/bench-snapshot-stress}
SECS=${SECS:-60}
FSSTRESS=${FSSTRESS:-$PWD/target/fstests/xfstests/ltp/fsstress}
if [[ ! -x $FSSTRESS ]]; then
  SIDES=ubtrfs bash bench/fstests.sh generic/001 >/dev/null
fi
rm -rf "$WORK"
mkdir -p "$WORK/m"
MNT=$WORK/m
cleanup() {
  [[ -n "${stress:-}" ]] && kill "$stress" 2>/dev/null
  mountpoint -q "$MNT" && umount "$MNT"
  true
}
trap cleanup EXIT
truncate -s "${SIZE:-16G}" "$WORK/img"
"$UBTRFS_BIN" mkfs -q "$WORK/img"
"$UBTRFS_BIN" mount "$WORK/img" "$MNT"
"$UBTRFS_BIN" subvolume create "$MNT/w" >/dev/null
# fsstress runs one after another (4 processes, 2,000 operations each),
# each in a directory of its own, the one before it removed: what the
# snapshots hold stays bounded, so the kernel can read them all after.
(
  i=0
  while :; do
    i=$((i + 1))
    "$FSSTRESS" -d "$MNT/w/fs$i" -p 4 -n 2000 -s "$i" >>"$WORK/fsstress.log" 2>&1 || exit 1
    rm -rf "$MNT/w/fs$((i - 1))"
  done
) &
stress=$!
n=0
end=$((SECONDS + SECS))
while ((SECONDS < end)); do
  sleep 1
  n=$((n + 1))
  "$UBTRFS_BIN" subvolume snapshot -r "$MNT/w" "$MNT/snap$n" >/dev/null
done
kill "$stress"
wait "$stress" 2>/dev/null || true
pkill -f "$FSSTRESS" || true
while pgrep -f "$FSSTRESS" >/dev/null; do sleep 0.2; done
stress=
umount "$MNT"
btrfs check --readonly "$WORK/img" >"$WORK/check.log" 2>&1 ||
  { tail "$WORK/check.log"; echo "btrfs check failed after the run" >&2; exit 1; }
mount -o loop "$WORK/img" "$MNT"
bytes=0
for s in "$MNT"/snap*; do
  b=$(tar cf - -C "$MNT" "$(basename "$s")" | wc -c)
  bytes=$((bytes + b))
done
# fsstress may have filled the image: the kernel deletes the first ten
# snapshots (its cleaner drops what ubtrfs's snapshots share), then writes.
for i in $(seq 1 10); do
  [[ -d $MNT/snap$i ]] && btrfs subvolume delete -c "$MNT/snap$i" >/dev/null
done
btrfs filesystem sync "$MNT"
rm -rf "$MNT"/w/fs*
btrfs filesystem sync "$MNT"
cp -a /usr/include/linux "$MNT/w/after"
umount "$MNT"
btrfs check --readonly "$WORK/img" >"$WORK/check.log" 2>&1 ||
  { tail "$WORK/check.log"; echo "btrfs check failed after the kernel wrote" >&2; exit 1; }
echo "fsstress for ${SECS} s with $n snapshots a second apart: btrfs check clean;"
echo "the kernel read every snapshot whole ($((bytes >> 20)) MiB of tar), deleted ten of them and wrote, check clean"
