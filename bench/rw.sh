#!/usr/bin/env bash
# Read-write mount benchmark: the kernel's btrfs (loop mount) vs `ubtrfs
# mount -o rw` (FUSE), side by side in one run, on a fresh 4 GiB sparse image
# per measurement (mkfs.btrfs for the kernel, `ubtrfs mkfs` for ubtrfs, the
# same size and profiles). The experiments are the ones of the btrfs patches
# the write path follows, scaled to a 2-core machine:
#
#   dbench   dbench CLIENTS clients (16) for DURATION s (30) on a nodatacow
#            mount (kernel: -o nodatacow; ubtrfs: -o rw,nodatacow);
#            throughput MB/s and max latency.
#   fsync    fio randwrite 4K, fsync=1, 4 jobs of FSYNC_MIB (256) MiB each,
#            time-based, in a `chattr +C` directory (NOCOW files, laid out
#            with data first so every write overwrites a written extent);
#            IOPS, bandwidth, write clat p99/max, fsync p99. ubtrfs runs
#            twice: as mounted by default (fsync writes a log tree) and
#            with -o notreelog (every fsync commits); the daemon's
#            UBTRFS_TRACE_FSYNC=1 lines count how each fsync was answered.
#   fsynccow the same fio job in a plain directory: COW files with data
#            checksums (every write makes a new extent and its checksum);
#            kernel, ubtrfs (log tree), ubtrfs -o notreelog.
#   bssplit  fio randwrite bssplit 4K-64K, O_DIRECT, io_uring, iodepth 16,
#            4 jobs on one fallocated NOCOW file of BSSPLIT_MIB (1024) MiB;
#            IOPS, bandwidth, clat p99, max latency. If the mount refuses
#            io_uring or O_DIRECT the script falls back (libaio, psync,
#            then buffered) and says so in the table.
#   randread fio randread 4K, O_DIRECT, psync, JOBS (4) jobs, each on a
#            file of its own of RANDREAD_MIB (256) MiB written through the
#            mount (COW, data checksums) and fsynced first; IOPS, clat
#            p99, max latency. Every read is a round trip to the daemon,
#            which reads the image and verifies the checksums: readers
#            that share the mount's lock run side by side.
#   sparse   a SPARSE_MIB (1024) MiB file of alternating 4 KiB data / 4 KiB
#            holes written through the mount (no fsync), then at once
#            `cp --sparse=always` to tmpfs while it is dirty, then fsync +
#            sync, then the same copy again; both copies are compared with
#            the file (cmp). "dirty MiB" is Dirty+Writeback of
#            /proc/meminfo just before the first copy: the kernel's btrfs
#            reserves metadata per outstanding delalloc extent and, with
#            131,072 separate 4 KiB extents, flushes much of the file while
#            it is being written, so its "dirty" copy varies a lot between
#            runs (the table shows min-max; use more RUNS for this one).
#
# Sides: kernel, kernel-datacow (exps dbench/fsync/bssplit without
# nodatacow/chattr +C: what NOCOW is worth to the kernel), ubtrfs,
# ubtrfs-commit (fsync, fsynccow: -o notreelog, a commit per fsync), and
# ubtrfs with one mechanism switched off through the daemon's environment:
#   dbench/fsync/bssplit: UBTRFS_NO_NOCOW=1,
#                         UBTRFS_CSUM_FULL_SCAN=1
#   fsync/fsynccow:       UBTRFS_NO_FSYNC_BATCH=1 (concurrent fsyncs not
#                         grouped into one log sync)
#   readwrite:            UBTRFS_NO_ORDERED=1 (writeback's device writes
#                         made under the lock)
#   sparse:               UBTRFS_NO_SEEK_CACHE=1,
#                         UBTRFS_NO_RW_PUSH=1 (small forward reads not
#                         answered with a read-ahead window pushed into
#                         the page cache)
#   bssplit:              UBTRFS_NO_DIRECT_IO=1 (O_DIRECT writes held dirty
#                         under the lock, not written in place outside it),
#                         UBTRFS_NO_PARALLEL_DIO=1 (O_DIRECT opens without
#                         FOPEN_DIRECT_IO|PARALLEL_DIRECT_WRITES: the kernel
#                         sends one write of the file at a time),
#                         UBTRFS_NO_ASYNC_DIO=1 (no FUSE_ASYNC_DIO)
#   dbench/sparse:        UBTRFS_NO_KEEP_CACHE=1 (every open drops the
#                         file's page cache)
#   URING=1:              -o nouring (/dev/fuse)
# Runs are interleaved (run 1 of every side, then run 2, ...). Caches are
# dropped after each setup, before the measured part. The ubtrfs daemon
# runs in the foreground (-f) under /usr/bin/time (peak RSS); "umount s" is
# umount until the daemon (or, for the kernel, umount) has exited, which
# includes the final commit.
#
#   sudo bash bench/rw.sh [WORKDIR] [RUNS]
#
# WORKDIR (default /var/tmp/ubtrfs-rwbench) keeps the raw output of every
# run in WORKDIR/run-DATE/ (dbench and fio output, fio JSON, daemon logs,
# results.tsv with every number, table.md). RUNS defaults to 3.
# Environment:
#   UBTRFS_RW_BENCH_KERNEL_ONLY=1  kernel sides only (no build, no FUSE)
#   EXPS="dbench fsync fsynccow bssplit randread sparse"   experiments to run
#                       (also: prealloc, readwrite, truncate, not run by
#                       default)
#   VARIANTS=1          ubtrfs with each mechanism off (0: plain ubtrfs only)
#   SIDES="kernel ubtrfs ..."  exactly these sides, for every experiment
#                       (ubtrfs@VAR=VALUE[,VAR=VALUE]...: ubtrfs with these
#                       in the daemon's environment)
#   KERNEL_COW=1        the kernel-datacow reference rows (0: skip)
#   DURATION=30 CLIENTS=16 JOBS=4 FSYNC_MIB=256 BSSPLIT_MIB=1024 SPARSE_MIB=1024
#   RANDREAD_MIB=256 PREALLOC_MIB=1024 RW_WRITE_MIB=1536 TRUNC_MIB=192
#   IMG_SIZE=4G  MKFS_ARGS="-m dup -d single" (given to both mkfs)
#   KERNEL_OPTS, UBTRFS_OPTS    extra mount options (comma-separated)
#   UBTRFS_BIN          ubtrfs binary (else cargo build --release -p ubtrfs)
#   UMOUNT_TIMEOUT=600  seconds to wait for the daemon to exit after umount
#   HALTPOLL_NS=N       guest halt polling of the cpuidle-haltpoll driver
#                       for the run (/sys/module/haltpoll/parameters/
#                       guest_halt_poll_ns; restored at the end). Every
#                       FUSE round trip wakes a vCPU twice; on a VM whose
#                       idle vCPUs halt at once (0, as on the machine of
#                       docs/rw-bench.md, "What a FUSE round trip costs on
#                       this machine") a wakeup costs what the host
#                       takes to run the vCPU again: an lseek through the
#                       mount measured 41-77 us with 0, 13.5-15.6 us with
#                       200000 (the driver's usual default). The value in
#                       effect is in the environment line either way.
#   URING=1             FUSE over io_uring for the run: sets /sys/module/
#                       fuse/parameters/enable_uring to Y (restored at the
#                       end), so ubtrfs mounts use it by default, and adds
#                       the ubtrfs-no-uring variant (-o nouring:
#                       /dev/fuse) to the variants. (A mount by root sets
#                       the parameter itself unless -o nouring.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
# shellcheck source=bench/lib.sh
. bench/lib.sh
need_root "mkfs, loop mounts, drop_caches"
WORK=${1:-/var/tmp/ubtrfs-rwbench}
RUNS=${2:-3}
KERNEL_ONLY=${UBTRFS_RW_BENCH_KERNEL_ONLY:-0}
EXPS=${EXPS:-"dbench fsync fsynccow bssplit randread sparse"}
VARIANTS=${VARIANTS:-1}
KERNEL_COW=${KERNEL_COW:-1}
DURATION=${DURATION:-30}
CLIENTS=${CLIENTS:-16}
JOBS=${JOBS:-4}
FSYNC_MIB=${FSYNC_MIB:-256}
BSSPLIT_MIB=${BSSPLIT_MIB:-1024}
SPARSE_MIB=${SPARSE_MIB:-1024}
RANDREAD_MIB=${RANDREAD_MIB:-256}
PREALLOC_MIB=${PREALLOC_MIB:-1024}
RW_WRITE_MIB=${RW_WRITE_MIB:-1536}
TRUNC_MIB=${TRUNC_MIB:-192}
IMG_SIZE=${IMG_SIZE:-4G}
MKFS_ARGS=${MKFS_ARGS:-"-m dup -d single"}
KERNEL_OPTS=${KERNEL_OPTS:-}
UBTRFS_OPTS=${UBTRFS_OPTS:-}
UMOUNT_TIMEOUT=${UMOUNT_TIMEOUT:-600}
TRACE_FSYNC=""

# Tools: install what is missing (Debian package names).
need_pkg() { # command package
  command -v "$1" >/dev/null && return 0
  echo "bench/rw.sh: installing $2" >&2
  apt-get install -y -q "$2" >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1; apt-get install -y -q "$2" >/dev/null; }
  command -v "$1" >/dev/null || { echo "bench/rw.sh: $1 still missing after installing $2" >&2; exit 1; }
}
need_pkg fio fio
need_pkg dbench dbench
need_pkg mkfs.btrfs btrfs-progs
need_pkg chattr e2fsprogs
need_pkg fallocate util-linux
need_pkg python3 python3
[[ -x /usr/bin/time ]] || need_pkg /usr/bin/time time
# Debian's dbench package puts its loadfile here (dbench 4.0).
LOADFILE=${LOADFILE:-}
if [[ -z $LOADFILE ]]; then
  for f in /usr/share/dbench/client.txt /usr/local/share/client.txt /usr/share/dbench/client_enterprise.txt; do
    [[ -f $f ]] && { LOADFILE=$f; break; }
  done
fi
[[ -f $LOADFILE ]] || { echo "bench/rw.sh: dbench loadfile client.txt not found (set LOADFILE)" >&2; exit 1; }

if [[ $KERNEL_ONLY != 1 ]]; then
  command -v fusermount3 >/dev/null || command -v fusermount >/dev/null || need_pkg fusermount3 fuse3
  if [[ -z "${UBTRFS_BIN:-}" ]]; then
    cargo build --release -q -p ubtrfs
    UBTRFS_BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/ubtrfs
  fi
fi
BIN=${UBTRFS_BIN:-}

mkdir -p "$WORK"
OUT=$WORK/run-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
RES=$OUT/results.tsv
NOTES=$OUT/notes.txt
: > "$RES"; : > "$NOTES"
IMG=$WORK/rw.img
MNT=$WORK/mnt
TMPFS=$WORK/tmpfs
mkdir -p "$MNT" "$TMPFS"
LOOP=""
UPID=""
CUR_SIDE=""
CUR_TAG=""

HALTPOLL=/sys/module/haltpoll/parameters/guest_halt_poll_ns
HALTPOLL_WAS=""
if [[ -n ${HALTPOLL_NS:-} ]]; then
  [[ -w $HALTPOLL ]] || { echo "bench/rw.sh: HALTPOLL_NS set but $HALTPOLL is not writable (no cpuidle-haltpoll)" >&2; exit 1; }
  HALTPOLL_WAS=$(cat "$HALTPOLL")
  echo "$HALTPOLL_NS" > "$HALTPOLL"
fi
URING_PARAM=/sys/module/fuse/parameters/enable_uring
URING_WAS=""
if [[ ${URING:-0} == 1 ]]; then
  [[ -w $URING_PARAM ]] || { echo "bench/rw.sh: URING=1 but $URING_PARAM is not writable (kernel before 6.14, or not root)" >&2; exit 1; }
  URING_WAS=$(cat "$URING_PARAM")
  echo Y > "$URING_PARAM"
fi
cleanup() {
  set +e
  [[ -n $HALTPOLL_WAS ]] && echo "$HALTPOLL_WAS" > "$HALTPOLL"
  [[ -n $URING_WAS ]] && echo "$URING_WAS" > "$URING_PARAM"
  if mountpoint -q "$MNT"; then umount "$MNT" || umount -l "$MNT"; fi
  if [[ -n $UPID ]]; then
    for _ in $(seq 100); do kill -0 "$UPID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$UPID" 2>/dev/null && kill "$UPID"
    wait "$UPID" 2>/dev/null
  fi
  [[ -n $LOOP ]] && losetup -d "$LOOP"
  mountpoint -q "$TMPFS" && umount "$TMPFS"
  rm -f "$IMG"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
note() { echo "$*" >> "$NOTES"; log "note: $*"; }
now() { date +%s.%N; }
sub() { python3 -c "print('%.3f' % ($1 - $2))"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# record EXP SIDE RUN KEY VALUE
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >> "$RES"; }

# Sides. kernel and kernel-datacow share the kernel; ubtrfs* differ in the
# daemon's environment.
side_env() {
  case $1 in
    ubtrfs-no-nocow) echo UBTRFS_NO_NOCOW=1 ;;
    ubtrfs-csum-full-scan) echo UBTRFS_CSUM_FULL_SCAN=1 ;;
    ubtrfs-no-seek-cache) echo UBTRFS_NO_SEEK_CACHE=1 ;;
    ubtrfs-no-rw-push) echo UBTRFS_NO_RW_PUSH=1 ;;
    ubtrfs-no-fsync-batch) echo UBTRFS_NO_FSYNC_BATCH=1 ;;
    ubtrfs-no-direct-io) echo UBTRFS_NO_DIRECT_IO=1 ;;
    ubtrfs-no-parallel-dio) echo UBTRFS_NO_PARALLEL_DIO=1 ;;
    ubtrfs-no-async-dio) echo UBTRFS_NO_ASYNC_DIO=1 ;;
    ubtrfs-no-keep-cache) echo UBTRFS_NO_KEEP_CACHE=1 ;;
    ubtrfs-no-ordered) echo UBTRFS_NO_ORDERED=1 ;;
    ubtrfs@*) echo "${1#ubtrfs@}" | tr , ' ' ;;  # ad hoc: ubtrfs@VAR=VALUE[,VAR=VALUE]
    *) echo "" ;;
  esac
}
# Mount options of a side (after the experiment's).
side_opts() {
  case $1 in
    ubtrfs-commit) echo notreelog ;;
    ubtrfs-no-uring) echo nouring ;;
    *) echo "" ;;
  esac
}
is_kernel() { [[ $1 == kernel* ]]; }
# NOCOW wanted for this experiment's and side's data? (kernel-datacow: the
# COW reference; fsynccow: COW everywhere)
wants_nocow() { [[ $1 != fsynccow && $1 != prealloc && $2 != kernel-datacow ]]; }
sides_for() {
  if [[ -n ${SIDES:-} ]]; then echo "$SIDES"; return; fi
  local s="kernel"
  case $1 in
    sparse)
      [[ $KERNEL_ONLY == 1 ]] || { s="$s ubtrfs"; [[ $VARIANTS == 1 ]] && s="$s ubtrfs-no-seek-cache ubtrfs-no-keep-cache ubtrfs-no-rw-push"; } ;;
    fsync)
      [[ $KERNEL_COW == 1 ]] && s="$s kernel-datacow"
      [[ $KERNEL_ONLY == 1 ]] || { s="$s ubtrfs ubtrfs-commit"; [[ $VARIANTS == 1 ]] && s="$s ubtrfs-no-fsync-batch ubtrfs-no-nocow ubtrfs-csum-full-scan"; } ;;
    fsynccow)
      [[ $KERNEL_ONLY == 1 ]] || { s="$s ubtrfs ubtrfs-commit"; [[ $VARIANTS == 1 ]] && s="$s ubtrfs-no-fsync-batch"; } ;;
    randread)
      [[ $KERNEL_ONLY == 1 ]] || s="$s ubtrfs" ;;
    prealloc)
      [[ $KERNEL_ONLY == 1 ]] || { s="$s ubtrfs"; [[ $VARIANTS == 1 ]] && s="$s ubtrfs-no-nocow"; } ;;
    readwrite)
      [[ $KERNEL_ONLY == 1 ]] || { s="$s ubtrfs"; [[ $VARIANTS == 1 ]] && s="$s ubtrfs-no-ordered"; } ;;
    truncate)
      [[ $KERNEL_ONLY == 1 ]] || s="$s ubtrfs" ;;
    *)
      local more=""
      case $1 in
        bssplit) more=" ubtrfs-no-direct-io ubtrfs-no-parallel-dio ubtrfs-no-async-dio" ;;
        dbench) more=" ubtrfs-no-keep-cache" ;;
      esac
      [[ $KERNEL_COW == 1 ]] && s="$s kernel-datacow"
      [[ $KERNEL_ONLY == 1 ]] || { s="$s ubtrfs"; [[ $VARIANTS == 1 ]] && s="$s ubtrfs-no-nocow ubtrfs-csum-full-scan$more"; } ;;
  esac
  [[ ${URING:-0} == 1 && $VARIANTS == 1 && $KERNEL_ONLY != 1 ]] && s="$s ubtrfs-no-uring"
  echo "$s"
}

# mount_side SIDE EXTRA_OPTS TAG: a fresh image, mkfs'ed by the side's tool,
# mounted on $MNT.
mount_side() {
  local side=$1 extra=$2 tag=$3
  rm -f "$IMG"
  truncate -s "$IMG_SIZE" "$IMG"
  CUR_SIDE=$side
  if is_kernel "$side"; then
    # shellcheck disable=SC2086
    mkfs.btrfs -q -f $MKFS_ARGS "$IMG" >/dev/null
    LOOP=$(losetup -f --show "$IMG")
    local o=${extra}${KERNEL_OPTS:+,$KERNEL_OPTS}
    o=${o#,}
    mount ${o:+-o "$o"} "$LOOP" "$MNT"
  else
    # shellcheck disable=SC2086
    "$BIN" mkfs -q -f $MKFS_ARGS "$IMG"
    remount_ubtrfs "$side" "$extra" "$tag"
  fi
}
# (Re)mount an existing ubtrfs image: the daemon in the foreground, as our
# child, with the side's environment.
remount_ubtrfs() {
  local side=$1 extra=$2 tag=$3
  local so; so=$(side_opts "$side")
  local o="rw${extra:+,$extra}${so:+,$so}${UBTRFS_OPTS:+,$UBTRFS_OPTS}"
  local envs; envs="$(side_env "$side") ${TRACE_FSYNC:+UBTRFS_TRACE_FSYNC=1}"
  CUR_TAG=$tag
  # shellcheck disable=SC2086
  env $envs /usr/bin/time -f %M -o "$OUT/$tag.rss" "$BIN" mount -f -o "$o" "$IMG" "$MNT" \
    > "$OUT/$tag.daemon.log" 2>&1 &
  UPID=$!
  for _ in $(seq 300); do
    mountpoint -q "$MNT" && break
    if ! kill -0 "$UPID" 2>/dev/null; then
      wait "$UPID" || true; UPID=""
      echo "bench/rw.sh: \`ubtrfs mount -o $o\` failed:" >&2
      tail -5 "$OUT/$tag.daemon.log" >&2
      echo "(the read-write mount may not exist yet: UBTRFS_RW_BENCH_KERNEL_ONLY=1 runs the kernel side only)" >&2
      exit 1
    fi
    sleep 0.1
  done
  mountpoint -q "$MNT" || { echo "bench/rw.sh: ubtrfs mount did not appear in 30 s" >&2; exit 1; }
  if ! (: > "$MNT/.rwbench-probe" && rm -f "$MNT/.rwbench-probe") 2>"$OUT/$tag.probe.err"; then
    echo "bench/rw.sh: \`ubtrfs mount -o $o\` is not writable: $(cat "$OUT/$tag.probe.err")" >&2
    echo "(the read-write mount may not exist yet: UBTRFS_RW_BENCH_KERNEL_ONLY=1 runs the kernel side only)" >&2
    exit 1
  fi
}
# umount_side EXP RUN TAG: unmount, wait for the end (the daemon's exit), and
# record the time it took.
umount_side() {
  local exp=$1 run=$2 tag=$3 side=$CUR_SIDE s e
  s=$(now)
  if is_kernel "$side"; then
    umount "$MNT"
    e=$(now)
    losetup -d "$LOOP"; LOOP=""
  else
    umount "$MNT"
    local rc=0 waited=0
    while kill -0 "$UPID" 2>/dev/null; do
      sleep 0.05; waited=$((waited + 1))
      if (( waited > UMOUNT_TIMEOUT * 20 )); then
        note "$exp/$side run $run: daemon still running ${UMOUNT_TIMEOUT}s after umount, killed"
        kill "$UPID"; break
      fi
    done
    wait "$UPID" || rc=$?
    e=$(now)
    UPID=""
    (( rc == 0 )) || note "$exp/$side run $run: daemon exited with status $rc (log $OUT/$tag.daemon.log)"
    [[ -s $OUT/$CUR_TAG.rss ]] && record "$exp" "$side" "$run" rss_mib "$(tail -1 "$OUT/$CUR_TAG.rss" | awk '{ printf "%.0f", $1 / 1024 }')"
    # Time requests spent waiting for the daemon's filesystem lock, over
    # the whole mount (its unmount line), in s.
    local lw; lw=$(sed -n 's/.*filesystem lock: taken [0-9]* times, \([0-9.]*\) ms waited.*/\1/p' "$OUT/$tag.daemon.log" | tail -1)
    [[ -n $lw ]] && record "$exp" "$side" "$run" lock_wait_s "$(python3 -c "print('%.1f' % ($lw / 1000))")"
    # Time the lock was held alone (requests that change the filesystem,
    # commits), in s: with the run's length, how much of it readers and
    # writers could not pass.
    local lh; lh=$(sed -n 's/.*filesystem lock: .* held alone \([0-9.]*\) ms in all.*/\1/p' "$OUT/$tag.daemon.log" | tail -1)
    [[ -n $lh ]] && record "$exp" "$side" "$run" lock_held_s "$(python3 -c "print('%.1f' % ($lh / 1000))")"
    # The longest hold of the lock by an interval commit, in ms.
    local ch; ch=$(sed -n 's/.*commits held it [0-9]* times, [0-9.]* ms in all, at most \([0-9.]*\) ms.*/\1/p' "$OUT/$tag.daemon.log" | tail -1)
    [[ -n $ch ]] && record "$exp" "$side" "$run" commit_max_ms "$ch"
  fi
  record "$exp" "$side" "$run" umount_s "$(sub "$e" "$s")"
}
# How many fsyncs the daemon answered by a log tree it synced (log), by a
# log another fsync synced with its own (grouped), a commit (commit) or
# with nothing to write (nothing: a commit for another fsync had covered
# it) so far: its UBTRFS_TRACE_FSYNC=1 lines.
trace_count() { # log|grouped|commit|nothing
  local pat='log in'
  [[ $1 == grouped ]] && pat='grouped log'
  [[ $1 == commit ]] && pat='commit ('
  [[ $1 == nothing ]] && pat='nothing to write'
  grep -a -c "trace: fsync.*: $pat" "$OUT/$CUR_TAG.daemon.log" || true
}

# A directory for NOCOW files: chattr +C before any file is in it. On a
# mount that refuses FS_IOC_SETFLAGS, ubtrfs is remounted with nodatacow
# instead (noted).
nocow_dir() { # EXP SIDE RUN TAG
  local exp=$1 side=$2 run=$3 tag=$4 d=$MNT/nocow
  mkdir "$d"
  wants_nocow "$exp" "$side" || return 0
  if ! chattr +C "$d" 2>"$OUT/$tag.chattr.err"; then
    note "$exp/$side: chattr +C refused ($(head -1 "$OUT/$tag.chattr.err")); remounted with nodatacow instead"
    if is_kernel "$side"; then exit 1; fi
    umount "$MNT"; wait "$UPID" || true; UPID=""
    remount_ubtrfs "$side" nodatacow "$tag.2"
  fi
}
# Are the files NOCOW (lsattr shows C)? Recorded once per side.
check_nocow() { # EXP SIDE RUN FILE...
  local exp=$1 side=$2 run=$3; shift 3
  local a
  if a=$(lsattr "$@" 2>&1); then
    # yes: every file shows C; no: none; partly: some.
    local n c
    n=$(grep -c . <<< "$a"); c=$(grep -c '^[^ ]*C' <<< "$a" || true)
    if (( c == n )); then record "$exp" "$side" "$run" nocow yes
    elif (( c == 0 )); then record "$exp" "$side" "$run" nocow no
    else record "$exp" "$side" "$run" nocow partly; fi
  else
    record "$exp" "$side" "$run" nocow "lsattr-failed"
    [[ $run == 1 ]] && note "$exp/$side: lsattr failed: $(head -1 <<< "$a")"
  fi
}

# fio JSON -> "key value" lines (group_reporting: one job).
fio_parse() {
  python3 - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
j = d["jobs"][0]
# The direction the job did (randread: read; the others: write).
w = j["read"] if j["read"].get("total_ios", 0) and not j["write"].get("total_ios", 0) else j["write"]
print("iops %.0f" % w["iops"])
print("mib_s %.2f" % (w["bw"] / 1024.0))
clat = w.get("clat_ns", {})
pct = clat.get("percentile", {})
p99 = pct.get("99.000000")
print("clat_p99_ms %.3f" % ((p99 or 0) / 1e6))
print("clat_max_ms %.3f" % (clat.get("max", 0) / 1e6))
print("lat_max_ms %.3f" % (w.get("lat_ns", {}).get("max", 0) / 1e6))
s = j.get("sync", {})
slat = s.get("lat_ns", {})
if s.get("total_ios", 0):
    sp = slat.get("percentile", {}).get("99.000000", 0)
    print("fsync_p99_ms %.3f" % (sp / 1e6))
    print("fsync_max_ms %.3f" % (slat.get("max", 0) / 1e6))
print("errors %d" % j.get("error", 0))
EOF
}
record_fio() { # EXP SIDE RUN JSON
  local k v
  while read -r k v; do record "$1" "$2" "$3" "$k" "$v"; done < <(fio_parse "$4")
}

exp_dbench() { # SIDE RUN
  local side=$1 run=$2 tag=dbench-$1-$2 opts=""
  wants_nocow dbench "$side" && opts=nodatacow
  mount_side "$side" "$opts" "$tag"
  mkdir "$MNT/dbench"
  drop_caches
  if dbench -c "$LOADFILE" -D "$MNT/dbench" -t "$DURATION" "$CLIENTS" > "$OUT/$tag.out" 2>&1; then
    local tp ml
    tp=$(sed -n 's/^Throughput \([0-9.]*\) MB\/sec.*/\1/p' "$OUT/$tag.out")
    ml=$(sed -n 's/^Throughput .*max_latency=\([0-9.]*\) ms.*/\1/p' "$OUT/$tag.out")
    record dbench "$side" "$run" mb_s "${tp:-0}"
    record dbench "$side" "$run" max_lat_ms "${ml:-0}"
  else
    note "dbench/$side run $run: dbench failed (see $OUT/$tag.out)"
  fi
  umount_side dbench "$run" "$tag"
}

exp_fsync() { # SIDE RUN
  fsync_job fsync "$@"
}
exp_fsynccow() { # SIDE RUN
  fsync_job fsynccow "$@"
}
# fio randwrite 4K fsync=1: in a chattr +C directory (fsync) or a plain one
# (fsynccow: nocow_dir leaves it COW).
fsync_job() { # EXP SIDE RUN
  local exp=$1 side=$2 run=$3 tag=$1-$2-$3 pre_log=0 pre_commit=0 pre_nothing=0
  TRACE_FSYNC=1
  mount_side "$side" "" "$tag"
  nocow_dir "$exp" "$side" "$run" "$tag"
  local job=(--name=fsync --directory="$MNT/nocow" --rw=randwrite --bs=4k
             --fsync=1 --size="${FSYNC_MIB}M" --numjobs="$JOBS" --ioengine=psync
             --overwrite=1 --fallocate=none --group_reporting)
  # Lay the files out (written data, so writes overwrite in place), untimed.
  if ! fio "${job[@]}" --create_only=1 > "$OUT/$tag.layout.out" 2>&1; then
    note "$exp/$side run $run: fio layout failed (see $OUT/$tag.layout.out)"
    umount_side "$exp" "$run" "$tag"; TRACE_FSYNC=""; return
  fi
  check_nocow "$exp" "$side" "$run" "$MNT"/nocow/fsync.*
  # The layout committed, as the kernel's is by drop_caches' sync(2), which
  # does not reach a FUSE daemon: an fsync of the directory commits there.
  sync "$MNT/nocow"
  # The layout's own fsyncs are not counted.
  if ! is_kernel "$side"; then
    pre_log=$(trace_count log); pre_grouped=$(trace_count grouped)
    pre_commit=$(trace_count commit); pre_nothing=$(trace_count nothing)
  fi
  drop_caches
  if fio "${job[@]}" --time_based --runtime="$DURATION" --output-format=json \
       --output="$OUT/$tag.json" > "$OUT/$tag.out" 2>&1; then
    record_fio "$exp" "$side" "$run" "$OUT/$tag.json"
  else
    note "$exp/$side run $run: fio failed (see $OUT/$tag.out)"
  fi
  umount_side "$exp" "$run" "$tag"
  if ! is_kernel "$side"; then
    record "$exp" "$side" "$run" fsync_by_log $(( $(trace_count log) - pre_log ))
    record "$exp" "$side" "$run" fsync_grouped $(( $(trace_count grouped) - pre_grouped ))
    record "$exp" "$side" "$run" fsync_by_commit $(( $(trace_count commit) - pre_commit ))
    record "$exp" "$side" "$run" fsync_nothing $(( $(trace_count nothing) - pre_nothing ))
  fi
  TRACE_FSYNC=""
}

exp_bssplit() { # SIDE RUN
  local side=$1 run=$2 tag=bssplit-$1-$2
  mount_side "$side" "" "$tag"
  nocow_dir bssplit "$side" "$run" "$tag"
  local f=$MNT/nocow/file
  if ! fallocate -l "${BSSPLIT_MIB}M" "$f" 2>"$OUT/$tag.falloc.err"; then
    [[ $run == 1 ]] && note "bssplit/$side: fallocate refused ($(head -1 "$OUT/$tag.falloc.err")); the file was written with zeros instead"
    record bssplit "$side" "$run" prealloc zeros
    dd if=/dev/zero of="$f" bs=1M count="$BSSPLIT_MIB" conv=fsync status=none
  else
    record bssplit "$side" "$run" prealloc fallocate
  fi
  check_nocow bssplit "$side" "$run" "$f"
  sync
  # The engine: io_uring + O_DIRECT as the experiment asks, else the first
  # that the mount takes (a 256 KiB probe at the start of the file).
  local eng="" direct="" cand
  for cand in io_uring:1 libaio:1 psync:1 io_uring:0 psync:0; do
    if fio --name=probe --filename="$f" --rw=write --bs=4k --io_size=256k --size="${BSSPLIT_MIB}M" \
         --ioengine="${cand%:*}" --direct="${cand#*:}" --iodepth=4 --fallocate=none \
         --allow_file_create=0 > "$OUT/$tag.probe-${cand/:/-}.out" 2>&1; then
      eng=${cand%:*}; direct=${cand#*:}; break
    fi
  done
  if [[ -z $eng ]]; then
    note "bssplit/$side run $run: no fio engine worked (see $OUT/$tag.probe-*.out)"
    umount_side bssplit "$run" "$tag"; return
  fi
  if [[ $eng != io_uring || $direct != 1 ]]; then
    note "bssplit/$side run $run: io_uring with O_DIRECT refused, fell back to $eng direct=$direct (see $OUT/$tag.probe-*.out)"
  fi
  record bssplit "$side" "$run" engine "$eng$([[ $direct == 1 ]] && echo +direct || echo +buffered)"
  drop_caches
  if fio --name=bssplit --filename="$f" --rw=randwrite \
       --bssplit=4k/20:8k/20:16k/20:32k/20:64k/20 --direct="$direct" \
       --ioengine="$eng" --iodepth=16 --numjobs="$JOBS" --size="${BSSPLIT_MIB}M" \
       --fallocate=none --allow_file_create=0 --group_reporting \
       --time_based --runtime="$DURATION" --output-format=json \
       --output="$OUT/$tag.json" > "$OUT/$tag.out" 2>&1; then
    record_fio bssplit "$side" "$run" "$OUT/$tag.json"
  else
    note "bssplit/$side run $run: fio failed (see $OUT/$tag.out)"
  fi
  umount_side bssplit "$run" "$tag"
}

# fio randwrite bssplit, buffered, over one fallocated COW file
# (checksums on), each block written once (JOBS jobs, a slice each), then
# fsync: the kernel writes an inode's preallocated extents in place, and
# so does ubtrfs (UBTRFS_NO_NOCOW=1: copy-on-write); "used MiB" is what
# the run added to df's used space (copy-on-write adds what it wrote).
# Timed until fio ends (wall_s).
exp_prealloc() { # SIDE RUN
  local side=$1 run=$2 tag=prealloc-$1-$2 f u0 u1 slice=$((PREALLOC_MIB / JOBS))
  mount_side "$side" "" "$tag"
  nocow_dir prealloc "$side" "$run" "$tag"
  f=$MNT/nocow/file
  if ! fallocate -l "${PREALLOC_MIB}M" "$f" 2>"$OUT/$tag.falloc.err"; then
    note "prealloc/$side run $run: fallocate refused ($(head -1 "$OUT/$tag.falloc.err"))"
    umount_side prealloc "$run" "$tag"; return
  fi
  sync "$f"
  drop_caches
  u0=$(df -B1M --output=used "$MNT" | tail -1)
  local t0; t0=$(now)
  if fio --name=prealloc --filename="$f" --rw=randwrite \
       --bssplit=4k/20:8k/20:16k/20:32k/20:64k/20 --direct=0 \
       --ioengine=psync --numjobs="$JOBS" --size="${slice}M" --offset_increment="${slice}M" \
       --fallocate=none --allow_file_create=0 --group_reporting --end_fsync=1 \
       --output-format=json --output="$OUT/$tag.json" > "$OUT/$tag.out" 2>&1; then
    record prealloc "$side" "$run" fio_s "$(sub "$(now)" "$t0")"
    record_fio prealloc "$side" "$run" "$OUT/$tag.json"
  else
    note "prealloc/$side run $run: fio failed (see $OUT/$tag.out)"
  fi
  u1=$(df -B1M --output=used "$MNT" | tail -1)
  record prealloc "$side" "$run" used_mib $(( u1 - u0 ))
  umount_side prealloc "$run" "$tag"
}

# randread_layout EXP SIDE RUN TAG: JOBS files of RANDREAD_MIB each in
# $MNT/rr (fio's random buffers), fsynced, caches dropped; untimed.
randread_job() {
  RR_JOB=(--name=randread --directory="$MNT/rr" --bs=4k --size="${RANDREAD_MIB}M"
          --numjobs="$JOBS" --ioengine=psync --group_reporting)
}
randread_layout() {
  mkdir "$MNT/rr"
  randread_job
  if ! fio "${RR_JOB[@]}" --rw=write --bs=1M --end_fsync=1 > "$OUT/$4.layout.out" 2>&1; then
    note "$1/$2 run $3: fio layout failed (see $OUT/$4.layout.out)"
    return 1
  fi
  sync
  drop_caches
}
# randread_run EXP SIDE RUN TAG: O_DIRECT 4K random reads of those files
# for DURATION s, recorded.
randread_run() {
  randread_job
  if fio "${RR_JOB[@]}" --rw=randread --direct=1 --time_based --runtime="$DURATION" \
       --output-format=json --output="$OUT/$4.json" > "$OUT/$4.out" 2>&1; then
    record_fio "$1" "$2" "$3" "$OUT/$4.json"
  else
    note "$1/$2 run $3: fio failed (see $OUT/$4.out)"
  fi
}

exp_randread() { # SIDE RUN
  local side=$1 run=$2 tag=randread-$1-$2
  mount_side "$side" "" "$tag"
  randread_layout randread "$side" "$run" "$tag" && randread_run randread "$side" "$run" "$tag"
  umount_side randread "$run" "$tag"
}

# Readers beside a writer: randread's readers (JOBS jobs, O_DIRECT, so
# every read reaches the filesystem) for DURATION s, while, from the
# second second, one writer writes RW_WRITE_MIB sequentially, buffered,
# in 1 MiB writes, no fsync (ubtrfs writes everything back each time 256
# MiB are dirty, its bytes written outside the mount's lock; with
# UBTRFS_NO_ORDERED=1 under it; the kernel's flusher threads write in the
# background). The readers' latency shows whether they wait for the
# writeback.
exp_readwrite() { # SIDE RUN
  local side=$1 run=$2 tag=readwrite-$1-$2 rpid t0
  mount_side "$side" "" "$tag"
  if randread_layout readwrite "$side" "$run" "$tag"; then
    randread_run readwrite "$side" "$run" "$tag" &
    rpid=$!
    sleep 1
    t0=$(now)
    if fio --name=writer --filename="$MNT/big" --rw=write --bs=1M --size="${RW_WRITE_MIB}M" --fallocate=none \
         --ioengine=psync > "$OUT/$tag.writer.out" 2>&1; then
      record readwrite "$side" "$run" write_s "$(sub "$(now)" "$t0")"
    else
      note "readwrite/$side run $run: the writer failed (see $OUT/$tag.writer.out)"
    fi
    wait "$rpid" || true
  fi
  umount_side readwrite "$run" "$tag"
}

# A file of TRUNC_MIB written with 1 MiB buffered writes and no fsync (all
# of it dirty: under ubtrfs's 256 MiB dirty limit), then truncated to 0:
# the truncate's time, then the file's fsync (sync FILE: what was left to
# write; syncfs never reaches a FUSE daemon).
exp_truncate() { # SIDE RUN
  local side=$1 run=$2 tag=truncate-$1-$2 t0 f
  mount_side "$side" "" "$tag"
  f=$MNT/t
  if dd if=/dev/urandom of="$f" bs=1M count="$TRUNC_MIB" status=none 2>"$OUT/$tag.dd.err"; then
    t0=$(now)
    truncate -s 0 "$f"
    record truncate "$side" "$run" truncate_s "$(sub "$(now)" "$t0")"
    t0=$(now)
    sync "$f"
    record truncate "$side" "$run" sync_s "$(sub "$(now)" "$t0")"
  else
    note "truncate/$side run $run: the write failed ($(head -1 "$OUT/$tag.dd.err"))"
  fi
  umount_side truncate "$run" "$tag"
}

# The sparse file: bench/lib.sh's write_sparse (no fsync).
# time_cp EXP SIDE RUN KEY FILE: cp --sparse=always to tmpfs, timed; then
# compared with the file and the copy's allocated size recorded.
time_cp() {
  local exp=$1 side=$2 run=$3 key=$4 f=$5 s e
  rm -f "$TMPFS/copy"
  s=$(now)
  cp --sparse=always "$f" "$TMPFS/copy"
  e=$(now)
  record "$exp" "$side" "$run" "${key}_s" "$(sub "$e" "$s")"
  if cmp -s "$f" "$TMPFS/copy"; then
    record "$exp" "$side" "$run" "${key}_same" yes
  else
    record "$exp" "$side" "$run" "${key}_same" NO
    note "$exp/$side run $run: the $key copy differs from the file"
  fi
  record "$exp" "$side" "$run" "${key}_copy_mib" "$(( $(du -k "$TMPFS/copy" | cut -f1) / 1024 ))"
  rm -f "$TMPFS/copy"
}

exp_sparse() { # SIDE RUN
  local side=$1 run=$2 tag=sparse-$1-$2 f s e
  mount_side "$side" "" "$tag"
  f=$MNT/sparse
  drop_caches
  s=$(now); write_sparse "$f" "$SPARSE_MIB"; e=$(now)
  record sparse "$side" "$run" write_s "$(sub "$e" "$s")"
  # How much the kernel's page cache holds dirty or under writeback (all of
  # the machine): for the kernel side, whether the file is still delalloc.
  record sparse "$side" "$run" dirty_mib "$(awk '/^(Dirty|Writeback):/ { k += $2 } END { printf "%.0f", k / 1024 }' /proc/meminfo)"
  time_cp sparse "$side" "$run" cp_dirty "$f"
  # fsync of the file (FUSE: FUSE_FSYNC; a plain sync(2) does not reach a
  # FUSE daemon), then sync for the kernel's other dirty state.
  s=$(now); sync "$f"; sync; e=$(now)
  record sparse "$side" "$run" sync_s "$(sub "$e" "$s")"
  time_cp sparse "$side" "$run" cp_clean "$f"
  umount_side sparse "$run" "$tag"
}

log "results in $OUT"
{
  echo "date: $(date -Is)"
  echo "kernel: $(uname -r); $(nproc) CPUs; $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "guest_halt_poll_ns: $(cat "$HALTPOLL" 2>/dev/null || echo "- (no cpuidle-haltpoll)")"
  echo "fuse enable_uring: $(cat "$URING_PARAM" 2>/dev/null || echo "- (no FUSE over io_uring)")"
  echo "fio: $(fio --version); dbench: $(dbench --help 2>&1 | head -1 | sed 's/ - .*//'); btrfs-progs: $(mkfs.btrfs --version 2>&1 | head -1)"
  [[ -n $BIN ]] && echo "ubtrfs: $BIN ($(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null))"
  echo "RUNS=$RUNS DURATION=$DURATION CLIENTS=$CLIENTS JOBS=$JOBS FSYNC_MIB=$FSYNC_MIB BSSPLIT_MIB=$BSSPLIT_MIB RANDREAD_MIB=$RANDREAD_MIB SPARSE_MIB=$SPARSE_MIB IMG_SIZE=$IMG_SIZE MKFS_ARGS=$MKFS_ARGS KERNEL_ONLY=$KERNEL_ONLY"
} > "$OUT/env.txt"

if [[ " $EXPS " == *" sparse "* ]]; then
  mount -t tmpfs -o size=$((SPARSE_MIB + 256))M rwbench-tmpfs "$TMPFS"
fi
T0=$(now)
for exp in $EXPS; do
  case $exp in dbench|fsync|fsynccow|bssplit|randread|sparse|prealloc|readwrite|truncate) ;; *) echo "bench/rw.sh: unknown experiment $exp" >&2; exit 1 ;; esac
  for run in $(seq "$RUNS"); do
    for side in $(sides_for "$exp"); do
      log "$exp: $side, run $run/$RUNS"
      t=$(now)
      "exp_$exp" "$side" "$run"
      record "$exp" "$side" "$run" wall_s "$(sub "$(now)" "$t")"
    done
  done
done
echo "total: $(sub "$(now)" "$T0") s; load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/env.txt"

python3 - "$RES" "$RUNS" "$OUT/env.txt" "$NOTES" "$CLIENTS" "$DURATION" <<'EOF' | tee "$OUT/table.md"
import sys, statistics
from collections import defaultdict
res, runs, envf, notesf, clients, duration = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
vals = defaultdict(list)       # (exp, side, key) -> [value]
order = defaultdict(list)      # exp -> [side] in run order
for line in open(res):
    exp, side, run, key, v = line.rstrip("\n").split("\t")
    vals[exp, side, key].append(v)
    if side not in order[exp]:
        order[exp].append(side)

def med(exp, side, key):
    xs = []
    for v in vals.get((exp, side, key), []):
        try:
            xs.append(float(v))
        except ValueError:
            pass
    return statistics.median(xs) if xs else None

def spread(exp, side, key, nd=3):
    """median, and (min-max) when there are several runs"""
    xs = []
    for v in vals.get((exp, side, key), []):
        try:
            xs.append(float(v))
        except ValueError:
            pass
    if not xs:
        return "-"
    m = "%.*f" % (nd, statistics.median(xs))
    if len(xs) > 1:
        m += " (%.*f-%.*f)" % (nd, min(xs), nd, max(xs))
    return m

def fmt(x, nd=3):
    if x is None:
        return "-"
    if nd == 0:
        return "%.0f" % x
    return "%.*f" % (nd, x)

def ratio(a, b):
    return "%.2f" % (a / b) if a is not None and b else "-"

def text(exp, side, key):
    vs = sorted(set(vals.get((exp, side, key), [])))
    return "/".join(vs) if vs else "-"

LABEL = {
    "kernel": "kernel",
    "kernel-datacow": "kernel, datacow (reference)",
    "ubtrfs": "ubtrfs",
    "ubtrfs-commit": "ubtrfs -o notreelog (commit per fsync)",
    "ubtrfs-no-nocow": "ubtrfs UBTRFS_NO_NOCOW=1",
    "ubtrfs-csum-full-scan": "ubtrfs UBTRFS_CSUM_FULL_SCAN=1",
    "ubtrfs-no-seek-cache": "ubtrfs UBTRFS_NO_SEEK_CACHE=1",
    "ubtrfs-no-rw-push": "ubtrfs UBTRFS_NO_RW_PUSH=1 (no read-ahead pushed)",
    "ubtrfs-no-fsync-batch": "ubtrfs UBTRFS_NO_FSYNC_BATCH=1 (each fsync syncs the log itself)",
    "ubtrfs-no-direct-io": "ubtrfs UBTRFS_NO_DIRECT_IO=1 (O_DIRECT writes held dirty)",
    "ubtrfs-no-parallel-dio": "ubtrfs UBTRFS_NO_PARALLEL_DIO=1 (the kernel sends one O_DIRECT write of a file at a time)",
    "ubtrfs-no-async-dio": "ubtrfs UBTRFS_NO_ASYNC_DIO=1 (no FUSE_ASYNC_DIO)",
    "ubtrfs-no-keep-cache": "ubtrfs UBTRFS_NO_KEEP_CACHE=1 (page cache dropped at open)",
    "ubtrfs-no-uring": "ubtrfs -o nouring (FUSE over /dev/fuse, not io_uring)",
    "ubtrfs-no-ordered": "ubtrfs UBTRFS_NO_ORDERED=1 (writeback's device writes under the lock)",
}
def label(side):
    return LABEL.get(side, side.replace("@", " "))

MOUNT = {
    "dbench": {"kernel": "-o nodatacow", "kernel-datacow": "(defaults)", "ubtrfs": "-o rw,nodatacow"},
    "fsync": {"kernel": "chattr +C dir", "kernel-datacow": "(COW dir)", "ubtrfs": "-o rw, chattr +C dir",
              "ubtrfs-commit": "-o rw,notreelog, chattr +C dir"},
    "fsynccow": {"kernel": "(COW dir)", "ubtrfs": "-o rw (COW dir)", "ubtrfs-commit": "-o rw,notreelog (COW dir)"},
    "bssplit": {"kernel": "chattr +C dir", "kernel-datacow": "(COW dir)", "ubtrfs": "-o rw, chattr +C dir"},
    "randread": {"kernel": "(defaults)", "ubtrfs": "-o rw"},
    "prealloc": {"kernel": "(COW dir)", "ubtrfs": "-o rw (COW dir)"},
    "readwrite": {"kernel": "(defaults)", "ubtrfs": "-o rw"},
    "truncate": {"kernel": "(defaults)", "ubtrfs": "-o rw"},
    "sparse": {"kernel": "(defaults)", "ubtrfs": "-o rw"},
}
def mount_of(exp, side):
    m = MOUNT[exp]
    return m.get(side, m.get("ubtrfs") if side.startswith("ubtrfs") else "")

print()
print("Environment: " + "; ".join(l.strip() for l in open(envf)))
print()
print("Medians of %d runs; \"vs kernel\" = side / kernel (for throughput and IOPS higher is better, for times lower); \"off/on\" = a switched-off mechanism against plain ubtrfs." % runs)

def rows(exp):
    return order.get(exp, [])

def table(exp, title, cols):
    """exp's table, when it ran: a row a side, a column a (header, cell),
    cell(exp, side) -> text."""
    if not rows(exp):
        return
    print()
    print(title)
    print()
    print("| " + " | ".join(h for h, _ in cols) + " |")
    print("|" + " --- |" * len(cols))
    for s in rows(exp):
        print("| " + " | ".join(cell(exp, s) for _, cell in cols) + " |")

def num(key, nd=3):
    """The median of key."""
    return lambda exp, s: fmt(med(exp, s, key), nd)

def txt(key):
    return lambda exp, s: text(exp, s, key)

def is_off(s):
    """A side with a mechanism switched off, against plain ubtrfs."""
    return s != "ubtrfs" and s.startswith("ubtrfs")

def vs(key, ref, when=lambda s: True):
    """key's median / ref's (for the sides `when` takes)."""
    return lambda exp, s: ratio(med(exp, s, key), med(exp, ref, key)) if when(s) else ""

def compared(head, key, nd=3):
    """key's median, against the kernel's and (off/on) plain ubtrfs's."""
    return [(head, num(key, nd)), ("vs kernel", vs(key, "kernel")),
            ("off/on", vs(key, "ubtrfs", is_off))]

SIDE = [("side", lambda exp, s: label(s)), ("mount", mount_of)]
TAIL = [("umount s", num("umount_s")), ("daemon RSS MiB", num("rss_mib", 0))]

table("dbench", "dbench %s clients for %s s, loadfile client.txt, fresh image each run:" % (clients, duration),
      SIDE + compared("MB/s", "mb_s", 2) + [("max latency ms", num("max_lat_ms", 1))] + TAIL)

def fsyncs_by(exp, s):
    """How the fsyncs were made, where the daemon counted them."""
    if med(exp, s, "fsync_by_log") is None:
        return "-"
    return " / ".join(fmt(med(exp, s, k), 0) for k in ("fsync_by_log", "fsync_grouped", "fsync_by_commit", "fsync_nothing"))

FSYNC = SIDE + compared("IOPS", "iops", 0) + [
    ("MiB/s", num("mib_s", 2)), ("write clat p99 ms", num("clat_p99_ms")), ("write clat max ms", num("clat_max_ms", 1)),
    ("fsync p99 ms", num("fsync_p99_ms")), ("fsync max ms", num("fsync_max_ms", 1)),
    ("fsyncs by log / grouped log / commit / nothing to write", fsyncs_by), ("NOCOW", txt("nocow"))] + TAIL

table("fsync", "fio randwrite 4K, fsync=1, psync, NOCOW files laid out with data (\"off/on\" = against plain ubtrfs, whose fsync writes a log tree):", FSYNC)

table("fsynccow", "fio randwrite 4K, fsync=1, psync, COW files with data checksums, laid out with data:", FSYNC)

table("bssplit", "fio randwrite bssplit 4k/20:8k/20:16k/20:32k/20:64k/20, iodepth 16, one preallocated NOCOW file:",
      SIDE + [("engine", txt("engine")), ("prealloc", txt("prealloc"))] + compared("IOPS", "iops", 0) + [
          ("MiB/s", num("mib_s", 2)), ("clat p99 ms", num("clat_p99_ms")), ("max latency ms", num("lat_max_ms", 1)),
          ("NOCOW", txt("nocow"))] + TAIL)

table("randread", "fio randread 4K, O_DIRECT, psync, JOBS jobs (see the environment line), each on a file of its own, written and fsynced first:",
      SIDE + compared("IOPS", "iops", 0) + [
          ("MiB/s", num("mib_s", 2)), ("clat p99 ms", num("clat_p99_ms")), ("max latency ms", num("lat_max_ms", 1)),
          ("lock wait s", num("lock_wait_s", 1))] + TAIL)

table("readwrite", "Readers beside a writer: fio randread 4K, O_DIRECT, psync, JOBS jobs for the duration, while one writer writes a file sequentially (1 MiB buffered writes, no fsync) from the second second:",
      SIDE + compared("read IOPS", "iops", 0) + [
          ("read clat p99 ms", num("clat_p99_ms")), ("read max latency ms", num("lat_max_ms", 1)), ("writer s", num("write_s")),
          ("lock wait s", num("lock_wait_s", 1)), ("longest commit hold ms", num("commit_max_ms", 1))] + TAIL)

table("prealloc", "fio randwrite bssplit 4k/20:8k/20:16k/20:32k/20:64k/20, buffered, psync, JOBS jobs (a slice each), every block of one fallocated COW file written once, then fsync:",
      SIDE + [("fio s", num("fio_s"))] + compared("IOPS", "iops", 0) + [
          ("MiB/s", num("mib_s", 2)), ("clat p99 ms", num("clat_p99_ms")), ("max latency ms", num("lat_max_ms", 1)),
          ("used MiB added", num("used_mib", 0))] + TAIL)

table("truncate", "A file written with 1 MiB buffered writes, no fsync (all dirty), then truncated to 0; then fsync of the file:",
      SIDE + compared("truncate s", "truncate_s") + [("fsync s", num("sync_s"))] + TAIL)

def cp_same(exp, s):
    """Whether the copies were identical (dirty and clean)."""
    return "/".join(sorted(set(vals.get((exp, s, "cp_dirty_same"), []) + vals.get((exp, s, "cp_clean_same"), [])))) or "-"

def cp(state):
    """A cp's time (median and spread), against the kernel's and plain ubtrfs's."""
    key = "cp_%s_s" % state
    return [("cp %s s (min-max)" % state, lambda exp, s: spread(exp, s, key)), ("vs kernel", vs(key, "kernel")),
            ("off/on", vs(key, "ubtrfs", lambda s: s.startswith("ubtrfs-")))]

table("sparse", "Sparse file, 4 KiB data / 4 KiB holes, written without fsync; cp --sparse=always to tmpfs while dirty, then fsync + sync, then again:",
      SIDE[:1] + [("write s", num("write_s")), ("dirty MiB", num("dirty_mib", 0))] + cp("dirty") + [("fsync+sync s", num("sync_s"))] + cp("clean") + [
          ("copies identical", cp_same)] + TAIL)

notes = [l.rstrip() for l in open(notesf) if l.strip()]
if notes:
    print()
    print("Notes:")
    for l in notes:
        print("- " + l)
EOF
log "raw results and table in $OUT"
