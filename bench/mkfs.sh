#!/usr/bin/env bash
# mkfs --rootdir benchmark (issue 9), warm source cache, side by side:
#   ubtrfs:     ubtrfs mkfs -f -q -r SRC IMG (data threads: one per CPU)
#   ubtrfs-1t:  the same with --threads 1 (reading, compression and
#               checksums in the walking thread; the same image)
#   mkfs.btrfs: mkfs.btrfs -f -q -r SRC IMG
#   kernel:     mkfs.btrfs -f -q IMG; mount -o loop; cp -a SRC/. MNT; umount
# each followed by `sync IMG` inside the timing (so page-cache write-back is
# paid by everyone), on two sources:
#   usr-share: /usr/share (or $SRC_SHARE)
#   large:     16 files of 128 MiB (pseudo-random data, made once in WORKDIR)
# The image is a sparse file of IMG_SIZE (default 4G), made afresh per run,
# default options (nodesize 16K, metadata DUP, data single, crc32c).
# Prints a markdown table: median time of RUNS runs (default 3), its ratio
# to mkfs.btrfs, peak RSS (/usr/bin/time -v; for `kernel`, of the cp), the
# filesystem's bytes_used (superblock) and the image file's disk usage (du).
#
#   sudo bash bench/mkfs.sh [WORKDIR] [RUNS]
#
# Environment: UBTRFS_BIN (else built here), SRC_SHARE, IMG_SIZE,
# PERF=1 to also record `perf record -g` of one ubtrfs run on usr-share and
# print the top of `perf report --stdio` (to WORKDIR/perf.txt).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ $(id -u) -eq 0 ]] || { echo "bench/mkfs.sh: needs root (loop mount)" >&2; exit 1; }
WORK=${1:-$PWD/target/bench-mkfs}
RUNS=${2:-3}
IMG_SIZE=${IMG_SIZE:-4G}
SRC_SHARE=${SRC_SHARE:-/usr/share}
if [[ -z "${UBTRFS_BIN:-}" ]]; then
  cargo build --release -q -p ubtrfs
  UBTRFS_BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/ubtrfs
fi
BIN=$UBTRFS_BIN
mkdir -p "$WORK"
IMG=$WORK/bench.img
MNT=$(mktemp -d)
cleanup() {
  set +e
  mountpoint -q "$MNT" && umount "$MNT"
  rmdir "$MNT" 2>/dev/null
  rm -f "$IMG"
}
trap cleanup EXIT

LARGE=$WORK/large
if [[ ! -f $LARGE/.done ]]; then
  rm -rf "$LARGE"; mkdir -p "$LARGE"
  for i in $(seq -w 1 16); do
    # Pseudo-random, incompressible-looking, fast: AES-CTR keystream of
    # exactly 128 MiB of zeros (so no SIGPIPE fails the pipeline).
    head -c $((128 << 20)) /dev/zero \
      | openssl enc -aes-128-ctr -nosalt -pass pass:"$i" 2>/dev/null >"$LARGE/f$i"
  done
  touch "$LARGE/.done"
fi

warm() { tar -cf - "$1" 2>/dev/null | cat >/dev/null; }

# run_one METHOD SRC -> prints "SECONDS RSS_KIB"
run_one() {
  local m=$1 src=$2 tv=$WORK/time.txt t0 t1
  rm -f "$IMG"; truncate -s "$IMG_SIZE" "$IMG"
  sync
  t0=$(date +%s.%N)
  case $m in
    ubtrfs) /usr/bin/time -v -o "$tv" "$BIN" mkfs -f -q -r "$src" "$IMG" >/dev/null ;;
    ubtrfs-1t) /usr/bin/time -v -o "$tv" "$BIN" mkfs -f -q --threads 1 -r "$src" "$IMG" >/dev/null ;;
    mkfs.btrfs) /usr/bin/time -v -o "$tv" mkfs.btrfs -f -q -r "$src" "$IMG" >/dev/null ;;
    kernel)
      mkfs.btrfs -f -q "$IMG" >/dev/null
      mount -o loop "$IMG" "$MNT"
      /usr/bin/time -v -o "$tv" cp -a "$src/." "$MNT"
      umount "$MNT" ;;
  esac
  sync "$IMG"
  t1=$(date +%s.%N)
  echo "$(echo "$t1 - $t0" | bc) $(awk -F': ' '/Maximum resident/{print $2}' "$tv")"
}

median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }

echo "load before: $(uptime | sed 's/.*load/load/')"
echo
echo "| source | method | time (s, median of $RUNS) | vs mkfs.btrfs | peak RSS (MiB) | bytes_used (MiB) | image du (MiB) |"
echo "|---|---|---|---|---|---|---|"
for name in usr-share large; do
  if [[ $name == usr-share ]]; then src=$SRC_SHARE; else src=$LARGE; fi
  warm "$src"
  declare -A T=() R=() U=() D=()
  for m in ubtrfs ubtrfs-1t mkfs.btrfs kernel; do
    ts=(); rss=()
    for _ in $(seq "$RUNS"); do
      read -r t r < <(run_one "$m" "$src")
      ts+=("$t"); rss+=("$r")
    done
    T[$m]=$(printf '%s\n' "${ts[@]}" | median)
    R[$m]=$(printf '%s\n' "${rss[@]}" | sort -n | tail -1)
    U[$m]=$(btrfs inspect-internal dump-super "$IMG" | awk '$1=="bytes_used"{printf "%.1f", $2/1048576}')
    D[$m]=$(du -k "$IMG" | awk '{printf "%.1f", $1/1024}')
  done
  for m in ubtrfs ubtrfs-1t mkfs.btrfs kernel; do
    ratio=$(echo "scale=2; ${T[$m]} / ${T[mkfs.btrfs]}" | bc)
    printf '| %s | %s | %.2f | %sx | %.0f | %s | %s |\n' "$name" "$m" "${T[$m]}" "$ratio" \
      "$(echo "${R[$m]} / 1024" | bc -l)" "${U[$m]}" "${D[$m]}"
  done
done

if [[ -n "${PERF:-}" ]] && command -v perf >/dev/null; then
  rm -f "$IMG"; truncate -s "$IMG_SIZE" "$IMG"
  perf record -g -o "$WORK/perf.data" "$BIN" mkfs -f -q -r "$SRC_SHARE" "$IMG" >/dev/null 2>&1
  perf report -i "$WORK/perf.data" --stdio --no-children 2>/dev/null | grep -v '^$' | head -60 >"$WORK/perf.txt"
  echo
  echo "perf (ubtrfs mkfs -r $SRC_SHARE), top of perf report --no-children: $WORK/perf.txt"
fi
