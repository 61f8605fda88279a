#!/usr/bin/env bash
# Readahead on a slow device: the send benchmark's image behind slowfile
# (bench/slowfile), a FUSE file that answers each read after a seek latency,
# read by the kernel through a loop device on that file and by ubtrfs
# through the same file. Cold cache for every run.
#
#   sudo bash bench/slowdev.sh [WORKDIR] [RUNS] [LATENCY_MS]
#
# The image is bench/send.sh's (FILES files of 2000 bytes, node size 16K,
# max_inline=2048, snapshot snap1; made with the kernel, kept in WORKDIR).
# slowfile serves it with LATENCY_MS (default 4) per read that does not
# continue one of the last 8 reads (MODEL=seek; or starts at most NEAR_KB
# past one's end; MODEL=every delays every read), QUEUE_DEPTH reads
# (default 8) waiting at the same time. With
# `echo 3 > /proc/sys/vm/drop_caches` before each run:
#   kernel: `losetup -r` on the slow file (LOOP_MODES: dio = --direct-io=on,
#           reads go to the file asynchronously, several at a time;
#           buffered = the loop driver's plain reads, one at a time),
#           mount -o ro (made before the caches are dropped, not timed),
#           `btrfs send -f /dev/null` of snap1, and `du -s` of snap1 (a stat
#           of every inode: every leaf of the tree is read);
#   ubtrfs: `ubtrfs send --reada MODE -f /dev/null` of snap1 and the
#           walk_tree example over snap1's tree with `-m MODE`, for MODE in
#           none, forward, always (forward-always), opening the image
#           through the slow file (times include opening the image).
# Prints a markdown table: medians of RUNS (default 3) runs, ratios to the
# kernel (first of LOOP_MODES) and to ubtrfs' `none`, and slowfile's counters
# for the median run's workload (reads, reads delayed by a seek, mean
# requests outstanding when a read arrived).
# Environment: FILES (50000), LOOP_MODES ("dio buffered"), MODEL (seek),
# QUEUE_DEPTH (8), NEAR_KB (0: slowfile --near-kb), UBTRFS_BIN, WALK_TREE_BIN, SLOWFILE_BIN (else built here),
# REBUILD=1 to make the image again.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ $(id -u) -eq 0 ]] || { echo "bench/slowdev.sh: needs root (loop mount, drop_caches)" >&2; exit 1; }
WORK=$(mkdir -p "${1:-$PWD/target/bench-slowdev}" && cd "${1:-$PWD/target/bench-slowdev}" && pwd)
RUNS=${2:-3}
LATENCY_MS=${3:-4}
FILES=${FILES:-50000}
LOOP_MODES=${LOOP_MODES:-"dio buffered"}
MODEL=${MODEL:-seek}
QUEUE_DEPTH=${QUEUE_DEPTH:-8}
NEAR_KB=${NEAR_KB:-0}
MODES="none forward always"
OUT=${CARGO_TARGET_DIR:-$PWD/target}/release
if [[ -z "${UBTRFS_BIN:-}" || -z "${SLOWFILE_BIN:-}" ]]; then
  cargo build --release -q -p ubtrfs -p slowfile
fi
if [[ -z "${WALK_TREE_BIN:-}" ]]; then
  cargo build --release -q -p ubtrfs-engine --example walk_tree
fi
UBTRFS_BIN=${UBTRFS_BIN:-$OUT/ubtrfs}
SLOWFILE_BIN=${SLOWFILE_BIN:-$OUT/slowfile}
WALK_TREE_BIN=${WALK_TREE_BIN:-$OUT/examples/walk_tree}

IMG=$(FILES=$FILES ADD=0 BUILD_ONLY=1 bash bench/send.sh "$WORK")
SNAP_ID=$("$UBTRFS_BIN" subvolume list "$IMG" | awk '$NF == "snap1" { print $2 }')
[[ -n $SNAP_ID ]] || { echo "bench/slowdev.sh: no snap1 in $IMG" >&2; exit 1; }

SMNT=$(mktemp -d)   # slowfile's mount: $SMNT/<image name> is the slow file
KMNT=$(mktemp -d)   # the kernel's btrfs mount
LOG=$WORK/slowfile.log
SLOWPID=""
LOOP=""
cleanup() {
  set +e
  mountpoint -q "$KMNT" && umount "$KMNT"
  [[ -n $LOOP ]] && losetup -d "$LOOP"
  if [[ -n $SLOWPID ]]; then
    kill -TERM "$SLOWPID" 2>/dev/null
    wait "$SLOWPID" 2>/dev/null
  fi
  mountpoint -q "$SMNT" && umount "$SMNT"
  rmdir "$SMNT" "$KMNT" 2>/dev/null
}
trap cleanup EXIT

: > "$LOG"
"$SLOWFILE_BIN" --latency-ms "$LATENCY_MS" --model "$MODEL" --queue-depth "$QUEUE_DEPTH" --near-kb "$NEAR_KB" \
  "$IMG" "$SMNT" 2>>"$LOG" &
SLOWPID=$!
for _ in $(seq 100); do mountpoint -q "$SMNT" && break; sleep 0.1; done
mountpoint -q "$SMNT" || { echo "bench/slowdev.sh: slowfile did not mount:" >&2; cat "$LOG" >&2; exit 1; }
SLOW=$SMNT/$(basename "$IMG")

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }

# counters: slowfile's cumulative "reads delayed outstanding_sum", asked for
# with SIGUSR1 (the line is written by slowfile's signal thread).
counters() {
  local n
  n=$(grep -c '^slowfile: reads=' "$LOG" || true)
  kill -USR1 "$SLOWPID"
  for _ in $(seq 200); do
    [[ $(grep -c '^slowfile: reads=' "$LOG" || true) -gt $n ]] && break
    sleep 0.01
  done
  grep '^slowfile: reads=' "$LOG" | tail -1 |
    sed -E 's/.*reads=([0-9]+) .*delayed=([0-9]+) .*outstanding_sum=([0-9]+) .*/\1 \2 \3/'
}

# timed CMD...: runs CMD (stdout discarded) after dropping caches; prints
# "seconds reads delayed mean_outstanding" for it.
timed() {
  drop
  local c0 c1 s e
  c0=$(counters)
  s=$(now)
  "$@" >/dev/null
  e=$(now)
  c1=$(counters)
  python3 - "$s" "$e" $c0 $c1 <<'EOF'
import sys
s, e, r0, d0, o0, r1, d1, o1 = map(float, sys.argv[1:])
r = r1 - r0
print("%.3f %d %d %.2f" % (e - s, r, d1 - d0, (o1 - o0) / r if r else 0))
EOF
}

kernel_run() { # LOOPMODE WORKLOAD
  local dio=off
  [[ $1 == dio ]] && dio=on
  LOOP=$(losetup -r --direct-io="$dio" -f --show "$SLOW")
  mount -o ro "$LOOP" "$KMNT"
  case $2 in
    send) timed btrfs send -q -f /dev/null "$KMNT/snap1" ;;
    walk) timed du -s "$KMNT/snap1" ;;
  esac
  umount "$KMNT"
  losetup -d "$LOOP"
  LOOP=""
}

ubtrfs_run() { # MODE WORKLOAD
  case $2 in
    send) timed "$UBTRFS_BIN" send --reada "$1" -f /dev/null "$SLOW" snap1 2>/dev/null ;;
    walk) timed "$WALK_TREE_BIN" "$SLOW" -t "$SNAP_ID" -m "$1" ;;
  esac
}

declare -A T C
rows=()
for w in send walk; do
  for k in $LOOP_MODES; do rows+=("$w kernel-$k"); done
  for m in $MODES; do rows+=("$w $m"); done
done
for row in "${rows[@]}"; do
  read -r w tool <<<"$row"
  res=()
  for _ in $(seq "$RUNS"); do
    if [[ $tool == kernel-* ]]; then
      res+=("$(kernel_run "${tool#kernel-}" "$w")")
    else
      res+=("$(ubtrfs_run "$tool" "$w")")
    fi
    echo "$w $tool: ${res[-1]}" >&2
  done
  # The median time, and the counters of the run closest to it.
  pick=$(python3 - "${res[@]}" <<'EOF'
import sys, statistics
runs = [r.split() for r in sys.argv[1:]]
m = statistics.median(float(r[0]) for r in runs)
near = min(runs, key=lambda r: abs(float(r[0]) - m))
print("%.3f" % m, " ".join(near[1:]))
EOF
)
  T[$w,$tool]=${pick%% *}
  C[$w,$tool]=${pick#* }
done

k0=${LOOP_MODES%% *}
echo
echo "Slow device: slowfile, $LATENCY_MS ms per read (model $MODEL, near $NEAR_KB KiB, queue depth $QUEUE_DEPTH); image of $FILES files of 2000 bytes (node size 16K, max_inline=2048), snapshot snap1. Cold cache, median of $RUNS runs. send: full send of snap1 to /dev/null (kernel: btrfs send); walk: kernel du -s of snap1, ubtrfs walk_tree of snap1's tree (id $SNAP_ID). Kernel: loop device on the slow file, dio = --direct-io=on, buffered = --direct-io=off."
echo
echo "| workload | tool | median s | ratio to kernel ($k0) | ratio to none | reads | delayed reads | mean queue |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
ratio() { python3 -c "print('%.2f' % ($1 / $2))"; }
for row in "${rows[@]}"; do
  read -r w tool <<<"$row"
  t=${T[$w,$tool]}
  read -r reads delayed queue <<<"${C[$w,$tool]}"
  if [[ $tool == kernel-* ]]; then
    name="kernel, loop ${tool#kernel-}"
    [[ $w == send ]] && name="$name, \`btrfs send\`" || name="$name, \`du -s\`"
    rn="-"
  else
    [[ $w == send ]] && name="ubtrfs send --reada $tool" || name="ubtrfs walk_tree -m $tool"
    rn=$(ratio "$t" "${T[$w,none]}")
  fi
  echo "| $w | $name | $t | $(ratio "$t" "${T[$w,kernel-$k0]}") | $rn | $reads | $delayed | $queue |"
done
