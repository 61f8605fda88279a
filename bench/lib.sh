# Shell functions shared by the bench scripts; source it after the
# script has changed to the repo root: . bench/lib.sh
# shellcheck shell=bash

# need_root [WHY]: exits unless root, naming the script and why.
need_root() {
  [[ $(id -u) -eq 0 ]] && return 0
  echo "bench/$(basename "$0"): needs root${1:+ ($1)}" >&2
  exit 1
}

# build_ubtrfs: UBTRFS_BIN, the release ubtrfs built here unless given.
build_ubtrfs() {
  [[ -n "${UBTRFS_BIN:-}" ]] && return 0
  cargo build --release -q -p ubtrfs
  UBTRFS_BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/ubtrfs
}

# write_sparse FILE MIB [fsync]: 4 KiB of data (each block distinct) every
# 8 KiB, then ftruncate to MIB MiB; fsync only when asked.
write_sparse() {
  python3 - "$@" <<'PY'
import os, sys
path, mib = sys.argv[1], int(sys.argv[2])
size = mib << 20
block = bytearray(os.urandom(4096))
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for off in range(0, size, 8192):
    block[:8] = off.to_bytes(8, "little")  # every block distinct
    os.pwrite(fd, block, off)
os.ftruncate(fd, size)
if sys.argv[3:] == ["fsync"]:
    os.fsync(fd)
os.close(fd)
PY
}

# release_mount: for an EXIT trap: unmounts and removes the directory
# $MNT, and detaches the loop device $LOOP if one is attached.
release_mount() {
  mountpoint -q "$MNT" && umount "$MNT"
  rmdir "$MNT" 2>/dev/null
  if [[ -n "$LOOP" ]]; then losetup -d "$LOOP"; fi
}

# send_image_args [WORKDIR] [RUNS]: WORK, RUNS, and FILES and ADD
# (exported), which name bench/send.sh's image, for send.sh and the
# scripts that use its image.
send_image_args() {
  WORK=${1:-$PWD/target/bench-send}
  RUNS=${2:-3}
  export FILES=${FILES:-200000}
  export ADD=${ADD:-50000}
}
