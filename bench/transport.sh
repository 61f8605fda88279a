#!/usr/bin/env bash
# FUSE transport floor: what a round trip costs over /dev/fuse read/write vs
# FUSE-over-io_uring, next to the libfuse floor daemon.
#
#   bench/transport.sh [RUNS]      (default 5)
#
# Three daemons serve the same file system (root + "f", 1 GiB, 4 KiB data /
# 4 KiB hole, lseek answered arithmetically, reads of 0xab, KEEP_CACHE):
#   libfuse  fuse_floor.c ($FLOOR_SRC: the workplace's, beside the project;
#            libfuse3 low level, 1 thread)
#   dev      bench/uring_floor --transport dev   (own protocol code, 1 thread)
#   uring    bench/uring_floor --transport uring (one ring + thread per CPU;
#            INIT/FORGET/INTERRUPT still over /dev/fuse)
#   uring-defer  the same with --taskrun defer (SINGLE_ISSUER|DEFER_TASKRUN)
# Each run mounts each daemon in turn (the order rotates from run to run),
# and measures, on a fresh mount:
#   lseek  fuseprobe walk: SEEK_DATA/SEEK_HOLE from 0 to EOF (262144 calls),
#          us per lseek, each one a FUSE_LSEEK round trip;
#   stat   fuseprobe stat: 100k statx(AT_STATX_FORCE_SYNC), us per call,
#          each one a FUSE_GETATTR round trip;
#   read   cat f > /dev/null, cold (READs of max_readahead = 128 KiB), s;
#   cp     cp --sparse=always f (warm page cache, KEEP_CACHE): 262144 lseeks
#          plus 512 MiB from the page cache to a file, s;
#   cpu    the daemon's user+sys CPU seconds over the whole mount.
# Then unmount and wait for the daemon to exit. Prints the medians as a
# markdown table, with the ratio to "dev" (the classic /dev/fuse transport
# with the same protocol code) for lseek, stat and cp. SIDES="dev uring"
# runs a subset (the table needs dev for its ratios).
#
# Root only: mounts, and sets /sys/module/fuse/parameters/enable_uring to Y
# for the run (restored on exit). Environment: CARGO_TARGET_DIR (default
# /work/tgt/uring), STAT_N (100000), OUT (where raw results go; default
# $CARGO_TARGET_DIR/transport-results.tsv).
set -euo pipefail

RUNS=${1:-5}
STAT_N=${STAT_N:-100000}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
OUT=${OUT:-${CARGO_TARGET_DIR:-/work/tgt/uring}/transport-results.tsv}
MNT=/tmp/uring-bench-mnt
CPOUT=/tmp/uring-bench-cp.out
# shellcheck source=bench/transport_setup.sh
. "$HERE/transport_setup.sh"

DAEMON=""
cleanup() {
    if mounted; then
        umount "$MNT" 2>/dev/null || umount -l "$MNT" || true
    fi
    if [ -n "$DAEMON" ] && kill -0 "$DAEMON" 2>/dev/null; then
        kill "$DAEMON" 2>/dev/null || true
    fi
    rm -f "$CPOUT"
    echo "$OLD_PARAM" > "$PARAM"
}
trap cleanup EXIT INT TERM
# Y for the whole run: the kernel offers FUSE_OVER_IO_URING in INIT only
# while it is set; libfuse 3.14 and "dev" do not take it, so their
# connections stay classic.
echo Y > "$PARAM"
mkdir -p "$MNT"

start_daemon() { # side log
    case $1 in
    libfuse) /usr/bin/time -f "%U %S" -o "$2.time" "$TGT/fuse_floor" -f "$MNT" 2>"$2" & ;;
    dev) /usr/bin/time -f "%U %S" -o "$2.time" "$UF" --transport dev "$MNT" 2>"$2" & ;;
    uring) /usr/bin/time -f "%U %S" -o "$2.time" "$UF" --transport uring "$MNT" 2>"$2" & ;;
    uring-defer) /usr/bin/time -f "%U %S" -o "$2.time" "$UF" --transport uring --taskrun defer "$MNT" 2>"$2" & ;;
    esac
    DAEMON=$!
    for _ in $(seq 100); do
        mounted && return 0
        kill -0 "$DAEMON" 2>/dev/null || break
        sleep 0.05
    done
    echo "transport.sh: $1 did not mount; its log:" >&2
    cat "$2" >&2
    exit 1
}

stop_daemon() { # side
    local t0 t1
    t0=$(date +%s%N)
    if ! umount "$MNT"; then
        echo "transport.sh: umount $MNT failed; lazy unmount" >&2
        umount -l "$MNT"
    fi
    # The daemon should see the device close and exit; give it 20 s.
    for _ in $(seq 400); do
        kill -0 "$DAEMON" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$DAEMON" 2>/dev/null; then
        echo "transport.sh: $1 daemon $DAEMON still alive 20 s after umount; killing it" >&2
        kill "$DAEMON"
    fi
    wait "$DAEMON" 2>/dev/null || true
    t1=$(date +%s%N)
    DAEMON=""
    EXIT_MS=$(( (t1 - t0) / 1000000 ))
}

secs() { # command... -> seconds elapsed, on stdout
    local t0 t1
    t0=$(date +%s%N)
    "$@"
    t1=$(date +%s%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'
}

nspc() { awk '{ for (i = 1; i < NF; i++) if ($i == "ns_per_call") print $(i + 1) / 1000 }'; }

SIDES=(${SIDES:-libfuse dev uring uring-defer})
echo -e "run\tside\tlseek_us\tstat_us\tread_s\tcp_s\tcpu_s\tumount_ms" > "$OUT"
echo "load before: $(uptime)" >&2
for run in $(seq "$RUNS"); do
    for k in "${!SIDES[@]}"; do
        side=${SIDES[$(( (k + run - 1) % ${#SIDES[@]} ))]}
        log=$TGT/transport-$side.log
        start_daemon "$side" "$log"
        stat "$MNT/f" >/dev/null
        lseek=$("$PROBE" walk "$MNT/f" | nspc)
        st=$("$PROBE" stat "$MNT/f" "$STAT_N" | nspc)
        rd=$(secs sh -c "cat '$MNT/f' > /dev/null")
        cps=$(secs cp --sparse=always "$MNT/f" "$CPOUT")
        rm -f "$CPOUT"
        stop_daemon "$side"
        cpu=$(awk '{ printf "%.2f", $1 + $2 }' "$log.time" 2>/dev/null || echo NA)
        echo -e "$run\t$side\t$lseek\t$st\t$rd\t$cps\t$cpu\t$EXIT_MS" >> "$OUT"
        echo "run $run $side: lseek ${lseek} us, stat ${st} us, read ${rd} s, cp ${cps} s, daemon cpu ${cpu} s, umount+exit ${EXIT_MS} ms" >&2
    done
done
echo "load after: $(uptime)" >&2
echo "raw results: $OUT" >&2

# Medians per side and the ratio to dev, as markdown.
awk -F'\t' -v runs="$RUNS" -v order="${SIDES[*]}" '
function median(arr, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = arr[i]; for (j = i - 1; j >= 1 && arr[j] > t; j--) arr[j + 1] = arr[j]; arr[j + 1] = t }
    return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
NR > 1 { n[$2]++; for (c = 3; c <= 8; c++) v[$2, c, n[$2]] = $c }
END {
    k = split(order, sides, " ")
    for (s = 1; s <= k; s++) for (c = 3; c <= 8; c++) {
        for (i = 1; i <= n[sides[s]]; i++) a[i] = v[sides[s], c, i]
        m[sides[s], c] = median(a, n[sides[s]])
    }
    printf "| side (median of %d) | lseek us | vs dev | stat us | vs dev | cold read 1 GiB s | warm cp s | vs dev | daemon CPU s | umount+exit ms |\n", runs
    print "|---|---|---|---|---|---|---|---|---|---|"
    for (s = 1; s <= k; s++) {
        x = sides[s]
        printf "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %d |\n", x,
            m[x, 3], m[x, 3] / m["dev", 3], m[x, 4], m[x, 4] / m["dev", 4],
            m[x, 5], m[x, 6], m[x, 6] / m["dev", 6], m[x, 7], m[x, 8]
    }
}' "$OUT"
