#!/usr/bin/env bash
# fstests' fsstress on ubtrfs's live mount while a read-only snapshot is
# taken every second, for SECS seconds (default 60): the full count of
# rw_mount (r), which runs rw_ops beside ten snapshots.
#   sudo bash bench/snapshot_stress.sh [WORKDIR]
# Then: the mount ends with exit 0, `btrfs check` is clean, the kernel
# mounts the image and reads every snapshot whole, writes beside them, and
# `btrfs check` stays clean. fsstress comes from bench/fstests.sh's build
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
truncate -s 4G "$WORK/img"
"$UBTRFS_BIN" mkfs -q "$WORK/img"
"$UBTRFS_BIN" mount "$WORK/img" "$MNT"
"$UBTRFS_BIN" subvolume create "$MNT/w" >/dev/null
"$FSSTRESS" -d "$MNT/w/fs" -p 4 -n 10000000 -l 0 -s 1 >"$WORK/fsstress.log" 2>&1 &
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
cp -a /usr/include/linux "$MNT/w/after"
umount "$MNT"
btrfs check --readonly "$WORK/img" >"$WORK/check.log" 2>&1 ||
  { tail "$WORK/check.log"; echo "btrfs check failed after the kernel wrote" >&2; exit 1; }
echo "fsstress for ${SECS} s with $n snapshots a second apart: btrfs check clean;"
echo "the kernel read every snapshot whole ($((bytes >> 20)) MiB of tar), wrote beside them, check clean"
