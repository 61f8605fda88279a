#!/usr/bin/env bash
# Everyday work through a mount, side by side in one run, each step ending
# durable:
#   copy    cp -a SRC (default /usr/include) into the mount, then unmount
#   stat    mount again, drop caches, lstat every entry of the tree (find
#           -printf of size and mtime: what `git status` does)
#   restat  the same walk again at once (the kernel's cached attributes)
#   write   write WRITE_MIB (1024) MiB of random bytes in 1 MiB writes with
#           an fsync at the end (dd conv=fsync, from tmpfs)
#   reread  cat the file just written to /dev/null at once (no remount:
#           what the caches keep of data just written)
#   read    mount again, drop caches, tar cf - of the tree to /dev/null
#   untar   tar xf of a source tree (TARBALL, default the pinned fstests
#           tarball beside the repository, unpacked to tmpfs first), then
#           unmount
#   rm      mount again, rm -rf all of it, then unmount
# on these sides (SIDES):
#   kernel          the kernel's btrfs on a loop device
#   ubtrfs          `ubtrfs mount` as root: a fuseblk mount, whose plain
#                   umount waits for the last commit, on the transport a
#                   root mount gets by default
#   ubtrfs-dev      the same over /dev/fuse (-o nouring)
#   ubtrfs-no-killpriv  ubtrfs with UBTRFS_NO_KILLPRIV=1: the kernel drops
#                   set-ID bits itself and asks for security.capability
#                   before every write (FUSE_HANDLE_KILLPRIV_V2 not offered)
#   floor           the floor: fuse-passthrough (bench/uring_floor), a FUSE
#                   server over the same protocol layer that serves a
#                   directory on tmpfs as it is, over io_uring (setting
#                   enable_uring as root's ubtrfs mount does): what FUSE
#                   itself costs
#   floor-dev       the floor over /dev/fuse
#   ubtrfs-plain    `ubtrfs mount -o noblkdev`: a plain FUSE mount, unmounted
#                   with `ubtrfs umount` (a plain umount would return before
#                   the last commit)
# Runs are interleaved (run 1 of every side, then run 2, ...); the table
# shows medians (and ranges) in seconds, and each side's median over the
# kernel's. A second table counts the FUSE requests of each step of the
# FUSE sides by opcode, with the mean time from the kernel's sending each
# to its answer (run 1, from the kernel's fuse:fuse_request_send and
# fuse_request_end tracepoints in a tracefs instance of this script's
# own); a third sets each step's time in requests beside the floor's.
#
#   sudo bash bench/everyday.sh [WORKDIR] [RUNS]
#
# WORKDIR defaults to /var/tmp/ubtrfs-everyday, RUNS to 3. Environment:
# SRC, TARBALL, SIDES, SIZE (image size, default 4G), UBTRFS_OPTS (extra -o
# options for both ubtrfs sides), UBTRFS_BIN (the ubtrfs binary; default:
# built here).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
# shellcheck source=bench/lib.sh
. bench/lib.sh
need_root
WORK=${1:-/var/tmp/ubtrfs-everyday}
RUNS=${2:-3}
SRC=${SRC:-/usr/include}
SIDES=${SIDES:-kernel ubtrfs ubtrfs-plain}
SIZE=${SIZE:-4G}
WRITE_MIB=${WRITE_MIB:-1024}
TARBALL=${TARBALL:-$repo/../shared/fstests/xfstests-63a29724.tar.gz}
build_ubtrfs
BIN=$UBTRFS_BIN
cargo build --release --locked -q -p uring-floor --bin fuse_passthrough
FLOOR=${CARGO_TARGET_DIR:-$repo/target}/release/fuse_passthrough
floor_dir=/dev/shm/ubtrfs-everyday-floor
floor_pid=""
mkdir -p "$WORK"
img=$WORK/fs.img
mnt=$WORK/mnt
mkdir -p "$mnt"
out=$WORK/results.tsv
: > "$out"
rand=/dev/shm/ubtrfs-everyday-rand
head -c "$((WRITE_MIB << 20))" /dev/urandom > "$rand"
# The untar step's tarball, uncompressed on tmpfs: the step times the
# filesystem, not gzip.
srctar=/dev/shm/ubtrfs-everyday-src.tar
gzip -dc "$TARBALL" > "$srctar"
reqs=$WORK/requests.tsv
: > "$reqs"
tr=/sys/kernel/tracing/instances/ubtrfs-everyday
cleanup() {
  mountpoint -q "$mnt" && umount "$mnt" || true
  [[ -d $tr ]] && rmdir "$tr" 2>/dev/null || true
  rm -f "$rand" "$srctar"
}
trap cleanup EXIT

now() { date +%s.%N; }
# Request counting (ubtrfs sides, run 1): trace_on before a step, trace_off
# SIDE STEP after it.
counting=0
trace_on() {
  [[ $counting == 1 ]] || return 0
  echo 0 > "$tr/tracing_on"
  echo > "$tr/trace"
  echo 1 > "$tr/tracing_on"
}
trace_off() { # SIDE STEP: appends SIDE STEP OPCODE COUNT MICROSECONDS
  [[ $counting == 1 ]] || return 0
  echo 0 > "$tr/tracing_on"
  python3 - "$1" "$2" "$tr/trace" >> "$reqs" <<'PY'
import re, sys
side, step, path = sys.argv[1:4]
sent, n, us = {}, {}, {}
pat = re.compile(r" (\d+\.\d+): fuse_request_(send|end): connection \d+ req (\d+)"
                 r"(?: opcode \d+ \(FUSE_(\w+)\))?")
for line in open(path):
    m = pat.search(line)
    if not m:
        continue
    t, kind, req, op = float(m[1]), m[2], m[3], m[4]
    if kind == "send":
        sent[req] = (t, op)
        n[op] = n.get(op, 0) + 1
    elif req in sent:
        t0, op = sent.pop(req)
        us[op] = us.get(op, 0.0) + (t - t0) * 1e6
for op in n:
    print(f"{side}\t{step}\t{op}\t{n[op]}\t{us.get(op, 0.0):.0f}")
PY
}
# tracefs is not always mounted (a fresh boot of this machine has it empty).
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
if [[ -d /sys/kernel/tracing/events/fuse/fuse_request_send ]]; then
  mkdir -p "$tr"
  echo 65536 > "$tr/buffer_size_kb"
  echo 1 > "$tr/events/fuse/fuse_request_send/enable"
  echo 1 > "$tr/events/fuse/fuse_request_end/enable"
  echo 0 > "$tr/tracing_on"
else
  echo "bench/everyday.sh: no fuse:fuse_request_send tracepoint: requests not counted" >&2
fi
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

fresh() { # SIDE
  rm -f "$img"
  rm -rf "$floor_dir"
  case $1 in
    floor*) mkdir -p "$floor_dir"; return ;;
  esac
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
    floor*)
      local t=dev
      if [[ $1 == floor ]]; then
        echo Y > /sys/module/fuse/parameters/enable_uring
        t=uring
      fi
      "$FLOOR" --transport "$t" "$floor_dir" "$mnt" 2> "$WORK/floor.log" &
      floor_pid=$!
      for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
      mountpoint -q "$mnt" || { echo "the floor did not mount: $(cat "$WORK/floor.log")" >&2; exit 1; }
      ;;
    ubtrfs-dev) "$BIN" mount -o "rw,nouring${extra:+,$extra}" "$img" "$mnt" ;;
    ubtrfs-no-killpriv) UBTRFS_NO_KILLPRIV=1 "$BIN" mount -o "rw${extra:+,$extra}" "$img" "$mnt" ;;
    ubtrfs-plain) "$BIN" mount -o "rw,noblkdev${extra:+,$extra}" "$img" "$mnt" ;;
  esac
}
do_umount() { # SIDE: returns once everything is on the image
  case $1 in
    ubtrfs-plain) "$BIN" umount "$mnt" ;;
    floor*) umount "$mnt"; wait "$floor_pid" ;;
    *) umount "$mnt" ;;
  esac
}

files=$(find "$SRC" | wc -l)
mib=$(du -sm "$SRC" | cut -f1)
echo "source: $SRC ($files entries, $mib MiB); $RUNS runs; sides: $SIDES" >&2
for run in $(seq 1 "$RUNS"); do
  for side in $SIDES; do
    counting=0
    [[ $run == 1 && $side != kernel && -d $tr ]] && counting=1
    fresh "$side"
    do_mount "$side"
    drop
    trace_on
    t0=$(now)
    cp -a "$SRC" "$mnt/tree"
    do_umount "$side"
    t1=$(now)
    trace_off "$side" copy
    do_mount "$side"
    drop
    trace_on
    s0=$(now)
    find "$mnt/tree" -printf '%s %T@\n' > /dev/null
    s1=$(now)
    trace_off "$side" stat
    trace_on
    find "$mnt/tree" -printf '%s %T@\n' > /dev/null
    s2=$(now)
    trace_off "$side" restat
    trace_on
    w0=$(now)
    dd if="$rand" of="$mnt/big" bs=1M conv=fsync status=none
    w1=$(now)
    trace_off "$side" write
    trace_on
    c0=$(now)
    cat "$mnt/big" > /dev/null
    c1=$(now)
    trace_off "$side" reread
    do_umount "$side"
    do_mount "$side"
    drop
    trace_on
    t2=$(now)
    # Through a pipe: GNU tar writing to /dev/null reads no file's data.
    tar cf - -C "$mnt" tree | cat > /dev/null
    t3=$(now)
    trace_off "$side" read
    trace_on
    u0=$(now)
    mkdir "$mnt/src"
    tar xf "$srctar" -C "$mnt/src"
    do_umount "$side"
    u1=$(now)
    trace_off "$side" untar
    do_mount "$side"
    trace_on
    r0=$(now)
    rm -rf "$mnt/tree" "$mnt/big" "$mnt/src"
    do_umount "$side"
    t4=$(now)
    trace_off "$side" rm
    # Every byte made it through the remount and the removal was durable.
    if [[ $side != floor* ]]; then
      btrfs check --readonly "$img" > "$WORK/check.$side.$run" 2>&1 ||
        { echo "btrfs check failed after $side run $run" >&2; exit 1; }
    fi
    for step in "copy $t0 $t1" "stat $s0 $s1" "restat $s1 $s2" "write $w0 $w1" \
                "reread $c0 $c1" "read $t2 $t3" "untar $u0 $u1" "rm $r0 $t4"; do
      read -r name a b <<< "$step"
      printf '%s\t%s\t%s\t%s\n' "$side" "$run" "$name" "$(echo "$b - $a" | bc)" >> "$out"
    done
    echo "run $run $side: $(awk -F'\t' -v s="$side" -v r="$run" '$1 == s && $2 == r {printf "%s %.2f ", $3, $4}' "$out")" >&2
  done
done
rm -f "$img"
rm -rf "$floor_dir" "$rand" "$srctar"

python3 - "$out" "$reqs" $SIDES <<'EOF'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
reqs = [l.split("\t") for l in open(sys.argv[2]).read().splitlines()]
sides = sys.argv[3:]
steps = ["copy", "stat", "restat", "write", "reread", "read", "untar", "rm"]
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
pairs = [(a, b) for a, b in [("ubtrfs", "floor"), ("ubtrfs-dev", "floor-dev")]
         if a in sides and b in sides]


def by_step(title, cell):
    """A table of one column per (ubtrfs side, its floor) pair."""
    if not pairs:
        return
    print()
    print("| step | " + " | ".join(title(a, b) for a, b in pairs) + " |")
    print("|---|" + "---|" * len(pairs))
    for step in steps:
        print(f"| {step} | " + " | ".join(cell(a, b, step) for a, b in pairs) + " |")


def ratio(a, b, step):
    if (a, step) not in t or (b, step) not in t:
        return "-"
    return f"{statistics.median(t[(a, step)]) / statistics.median(t[(b, step)]):.2f}x"


by_step(lambda a, b: f"{a} / {b}", ratio)
counts = {}
for side, step, op, n, us in reqs:
    counts.setdefault((side, step), []).append((int(n), op, float(us)))
if counts:
    print()
    print("| side | step | FUSE requests (run 1): count (mean µs from send to answer) |")
    print("|---|---|---|")
    for (side, step), ops in counts.items():
        ops.sort(reverse=True)
        total = sum(n for n, _, _ in ops)
        print(f"| {side} | {step} | {total:,}: "
              + ", ".join(f"{op} {n:,} ({us / n:.0f})" for n, op, us in ops) + " |")

    def over_floor(a, b, step):
        """ms in requests (the floor's), and the opcodes most over it."""
        ms = lambda side: {op: us / 1000 for _, op, us in counts.get((side, step), [])}
        ta, tb = ms(a), ms(b)
        if not ta or not tb:
            return "-"
        over = sorted(((ta.get(op, 0) - tb.get(op, 0), op) for op in set(ta) | set(tb)), reverse=True)
        top = ", ".join(f"{op} {d:+.0f}" for d, op in over[:3] if d >= 0.5)
        return f"{sum(ta.values()):.0f} ({sum(tb.values()):.0f}){'; ' + top if top else ''}"

    by_step(lambda a, b: f"{a}: ms in requests ({b}'s), most over it", over_floor)
EOF
