#!/usr/bin/env bash
# The lseek experiment of issue 3, kernel vs ubtrfs mount.
#
# With the kernel, write files where every 4 KiB of data is followed by a
# 4 KiB hole (128 MiB, 512 MiB, 1 GiB by default), unmount. Then, from the
# kernel's read-only loop mount and from the ubtrfs FUSE mount:
#   - cp FILE /dev/null with caches dropped (both mounts made fresh, then
#     echo 3 > /proc/sys/vm/drop_caches) and with a warm cache;
#   - bench/seekwalk.c: a walk with alternating SEEK_DATA/SEEK_HOLE,
#     nanoseconds per lseek call (warm).
# Medians of RUNS runs (default 3); a markdown table on stdout.
#
# Root only (mkfs, loop mount, drop_caches). Environment:
#   SIZES="128 512 1024"  file sizes in MiB
#   RUNS=3                runs per measurement
#   WORK=/var/tmp/ubtrfs-bench   scratch directory (image ~1.5 GiB, sparse)
#   UBTRFS_BIN=...        ubtrfs binary (default: cargo build --release)
#   ENGINE_SEEKWALK=...   crates/fuse/examples/engine_seekwalk.rs binary
#   KEEP_IMAGE=1          reuse $WORK/bench.img if its files exist
set -euo pipefail

SIZES=${SIZES:-"128 512 1024"}
RUNS=${RUNS:-3}
WORK=${WORK:-/var/tmp/ubtrfs-bench}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)

# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"
need_root "mkfs, loop mounts, drop_caches"
for t in mkfs.btrfs mount umount cc python3; do
    command -v "$t" >/dev/null || { echo "lseek.sh: $t not found" >&2; exit 1; }
done

if [ -z "${UBTRFS_BIN:-}" ]; then
    (cd "$REPO" && cargo build --release -q -p ubtrfs)
    UBTRFS_BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/ubtrfs
fi
# The same walk on the engine, no FUSE: what the mount adds is the rest.
if [ -z "${ENGINE_SEEKWALK:-}" ]; then
    (cd "$REPO" && cargo build --release -q -p ubtrfs-fuse --example engine_seekwalk)
    ENGINE_SEEKWALK=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/engine_seekwalk
fi
mkdir -p "$WORK"
cc -O2 -Wall -o "$WORK/seekwalk" "$HERE/seekwalk.c"

IMG=$WORK/bench.img
KMNT=$WORK/kernel
UMNT=$WORK/ubtrfs
mkdir -p "$KMNT" "$UMNT"

cleanup() {
    umount "$UMNT" 2>/dev/null || true
    umount "$KMNT" 2>/dev/null || true
}
trap cleanup EXIT

total=0
for s in $SIZES; do total=$((total + s)); done

have_files() {
    [ -f "$IMG" ] || return 1
    mount -o ro,loop "$IMG" "$KMNT" || return 1
    local ok=0
    for s in $SIZES; do [ -f "$KMNT/sparse-${s}m" ] || ok=1; done
    umount "$KMNT"
    return $ok
}

if [ "${KEEP_IMAGE:-0}" = 1 ] && have_files; then
    echo "reusing $IMG" >&2
else
    rm -f "$IMG"
    # Half of each file is data; room for metadata and slack.
    truncate -s $(( (total / 2 + 768) ))M "$IMG"
    mkfs.btrfs -q -f "$IMG"
    mount -o loop "$IMG" "$KMNT"
    for s in $SIZES; do
        echo "writing sparse-${s}m with the kernel" >&2
        write_sparse "$KMNT/sparse-${s}m" "$s" fsync
    done
    sync
    umount "$KMNT"
fi

mount_side() {
    case $1 in
        kernel) mount -o ro,loop "$IMG" "$KMNT" ;;
        ubtrfs) "$UBTRFS_BIN" mount -o ro "$IMG" "$UMNT" ;;
    esac
}
umount_side() {
    case $1 in
        kernel) umount "$KMNT" ;;
        ubtrfs) umount "$UMNT" ;;
    esac
    # The FUSE daemon exits on unmount; wait until it has.
    for _ in $(seq 50); do
        pgrep -f "ubtrfs mount $IMG" >/dev/null || break
        sleep 0.1
    done
}
mnt_of() { [ "$1" = kernel ] && echo "$KMNT" || echo "$UMNT"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# Seconds taken by a command (stdout discarded).
seconds() {
    local t0 t1
    t0=$(date +%s%N)
    "$@" >/dev/null
    t1=$(date +%s%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "-" }'; }

declare -A COLD WARM SEEK ENGINE
for s in $SIZES; do
    ENGINE[$s]=$("$ENGINE_SEEKWALK" "$IMG" "/sparse-${s}m" "$RUNS" | awk '/^median_ns_per_call/ { print $2 } /^calls/ { last = $NF } END { if (NR == 1) print last }')
    echo "engine ${s} MiB: lseek ${ENGINE[$s]} ns/call" >&2
    for side in kernel ubtrfs; do
        f=$(mnt_of $side)/sparse-${s}m
        cold=""
        for _ in $(seq "$RUNS"); do
            mount_side $side
            drop_caches
            cold="$cold $(seconds cp "$f" /dev/null)"
            umount_side $side
        done
        mount_side $side
        cp "$f" /dev/null
        warm=""
        for _ in $(seq "$RUNS"); do
            warm="$warm $(seconds cp "$f" /dev/null)"
        done
        seek=$("$WORK/seekwalk" "$f" "$RUNS" | awk '/^median_ns_per_call/ { print $2 } /^calls/ { last = $NF } END { if (NR == 1) print last }')
        umount_side $side
        COLD[$side,$s]=$(echo "$cold" | median)
        WARM[$side,$s]=$(echo "$warm" | median)
        SEEK[$side,$s]=$seek
        echo "$side ${s} MiB: cold [$cold ] warm [$warm ] lseek ${seek} ns/call" >&2
    done
done

echo
echo "Sparse file, 4 KiB data / 4 KiB hole; medians of $RUNS runs; ratio = ubtrfs / kernel."
echo
echo "| file | cp cold kernel (s) | cp cold ubtrfs (s) | ratio | cp warm kernel (s) | cp warm ubtrfs (s) | ratio | lseek kernel (ns/call) | lseek ubtrfs (ns/call) | ratio | lseek engine, no FUSE (ns/call) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for s in $SIZES; do
    echo "| ${s} MiB | ${COLD[kernel,$s]} | ${COLD[ubtrfs,$s]} | $(ratio "${COLD[kernel,$s]}" "${COLD[ubtrfs,$s]}") | ${WARM[kernel,$s]} | ${WARM[ubtrfs,$s]} | $(ratio "${WARM[kernel,$s]}" "${WARM[ubtrfs,$s]}") | ${SEEK[kernel,$s]} | ${SEEK[ubtrfs,$s]} | $(ratio "${SEEK[kernel,$s]}" "${SEEK[ubtrfs,$s]}") | ${ENGINE[$s]} |"
done
first=${SIZES%% *}
last=${SIZES##* }
echo
echo "lseek cost per call at ${last} MiB vs ${first} MiB: kernel $(ratio "${SEEK[kernel,$first]}" "${SEEK[kernel,$last]}")x, ubtrfs $(ratio "${SEEK[ubtrfs,$first]}" "${SEEK[ubtrfs,$last]}")x, engine $(ratio "${ENGINE[$first]}" "${ENGINE[$last]}")x"
