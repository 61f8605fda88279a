#!/usr/bin/env bash
# Companion to bench/transport.sh: where the CPU goes in one lseek round
# trip, by placement. The client (fuseprobe walk) is pinned to CPU 0; the
# daemon runs unpinned, on CPU 0 (same CPU) or on CPU 1 (always a cross-CPU
# wakeup), and perf stat counts the daemon's task-clock, context switches
# and migrations over the walk. For uring, "pinned" is the default (queue
# thread n on CPU n; the client on CPU 0 talks to queue 0) and "unpinned"
# is --no-pin; uring-defer and uring-coop are pinned with the io_uring
# task-run modes of uring_floor --taskrun (see src/uring.rs Taskrun).
#
#   bench/transport_pin.sh [RUNS]   (default 3; medians printed)
#
# Root only. Sets enable_uring=Y for the run and restores it.
set -euo pipefail

RUNS=${1:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
MNT=/tmp/uring-pin-mnt
# shellcheck source=bench/transport_setup.sh
. "$HERE/transport_setup.sh"
D=""
cleanup() {
    if mounted; then umount "$MNT" 2>/dev/null || umount -l "$MNT" || true; fi
    if [ -n "$D" ] && kill -0 "$D" 2>/dev/null; then kill "$D" || true; fi
    echo "$OLD_PARAM" > "$PARAM"
}
trap cleanup EXIT INT TERM
echo Y > "$PARAM"
mkdir -p "$MNT"

# name: command line of the daemon (run in the foreground, backgrounded here)
declare -A CMD=(
    [libfuse-any]="$TGT/fuse_floor -f $MNT"
    [libfuse-cpu0]="taskset -c 0 $TGT/fuse_floor -f $MNT"
    [libfuse-cpu1]="taskset -c 1 $TGT/fuse_floor -f $MNT"
    [dev-any]="$UF --transport dev $MNT"
    [dev-cpu0]="taskset -c 0 $UF --transport dev $MNT"
    [dev-cpu1]="taskset -c 1 $UF --transport dev $MNT"
    [uring-pinned]="$UF --transport uring $MNT"
    [uring-unpinned]="$UF --transport uring --no-pin $MNT"
    [uring-defer]="$UF --transport uring --taskrun defer $MNT"
    [uring-coop]="$UF --transport uring --taskrun coop $MNT"
)
ORDER=${ORDER:-"libfuse-any libfuse-cpu0 libfuse-cpu1 dev-any dev-cpu0 dev-cpu1 uring-pinned uring-unpinned uring-defer uring-coop"}
RES=$TGT/transport-pin.tsv
echo -e "run\tside\tlseek_us\tdaemon_us_per_call\tcs_per_call\tmigr_per_call" > "$RES"
echo "load before: $(uptime)" >&2
for run in $(seq "$RUNS"); do
    for side in $ORDER; do
        # taskset execs the daemon, so $! is the daemon's pid either way.
        ${CMD[$side]} 2>"$TGT/transport-pin-$side.log" &
        D=$!
        for _ in $(seq 100); do mounted && break; sleep 0.05; done
        stat "$MNT/f" >/dev/null
        perf stat -x, -e task-clock,context-switches,cpu-migrations -p "$D" -o "$TGT/pin-perf.csv" &
        P=$!
        sleep 0.2
        out=$(taskset -c 0 "$PROBE" walk "$MNT/f")
        kill -INT "$P"; wait "$P" || true
        calls=$(echo "$out" | awk '{ print $2 }')
        us=$(echo "$out" | awk '{ print $6 / 1000 }')
        read -r tc cs mg < <(awk -F, '/task-clock/ { t = $1 } /context-switches/ { c = $1 } /cpu-migrations/ { m = $1 } END { print t, c, m }' "$TGT/pin-perf.csv")
        umount "$MNT"
        wait "$D" 2>/dev/null || true
        D=""
        # task-clock is in ms; per call in us.
        row=$(awk -v t="$tc" -v c="$cs" -v m="$mg" -v n="$calls" 'BEGIN { printf "%.2f\t%.3f\t%.3f", t * 1000 / n, c / n, m / n }')
        echo -e "$run\t$side\t$us\t$row" >> "$RES"
        echo "run $run $side: lseek $us us; daemon us/call, cs/call, migrations/call: $row" >&2
    done
done
echo "load after: $(uptime)" >&2
awk -F'\t' -v order="$ORDER" '
function median(arr, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = arr[i]; for (j = i - 1; j >= 1 && arr[j] > t; j--) arr[j + 1] = arr[j]; arr[j + 1] = t }
    return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
NR > 1 { n[$2]++; for (c = 3; c <= 6; c++) v[$2, c, n[$2]] = $c }
END {
    print "| daemon placement (client on CPU 0) | lseek us | daemon CPU us/call | ctx switches/call | migrations/call |"
    print "|---|---|---|---|---|"
    k = split(order, sides, " ")
    for (s = 1; s <= k; s++) {
        x = sides[s]; printf "| %s |", x
        for (c = 3; c <= 6; c++) { for (i = 1; i <= n[x]; i++) a[i] = v[x, c, i]; printf " %s |", median(a, n[x]) }
        printf "\n"
    }
}' "$RES"
