#!/usr/bin/env bash
# The long seeded suites at their full counts (CI runs each with a small
# count to stay within its time budget). Root: the kernel judges crash
# images and mounts; run on a quiet machine, it takes hours.
#
#   sudo bash bench/soak.sh [WORKDIR]
#
# Each suite's output goes to WORKDIR/run-DATE/SUITE.log (default WORKDIR
# /var/tmp/ubtrfs-soak); a summary (suite, counts, seconds, pass/FAIL) is
# printed and kept in summary.txt. SUITES="..." runs a subset; the counts
# below can be overridden through the same environment variables.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
WORK=${1:-/var/tmp/ubtrfs-soak}
OUT="$WORK/run-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
export UBTRFS_REQUIRE_KERNEL=1
# Full counts (CI's defaults in brackets).
export UBTRFS_LOG_WRITE_SEEDS=${UBTRFS_LOG_WRITE_SEEDS:-200}               # [8]
export UBTRFS_LOG_WRITE_KERNEL_SEEDS=${UBTRFS_LOG_WRITE_KERNEL_SEEDS:-30}  # [3]
export UBTRFS_LOGCRASH_KILLS=${UBTRFS_LOGCRASH_KILLS:-300}                 # [6]
export UBTRFS_LOGCRASH_SEED=${UBTRFS_LOGCRASH_SEED:-1000}
export UBTRFS_RWFS_MODEL_SEEDS=${UBTRFS_RWFS_MODEL_SEEDS:-300}                   # [40]
SUITES=${SUITES:-"log_write log_crash rwfs_model"}

cargo build --release --workspace --locked >/dev/null || exit 1
run() { # NAME PACKAGE TEST
  local name=$1 pkg=$2 test=$3 s e rc
  s=$(date +%s)
  cargo test --release --locked -p "$pkg" --test "$test" -- --test-threads=1 --nocapture \
    > "$OUT/$name.log" 2>&1
  rc=$?
  e=$(date +%s)
  printf '%-10s %6d s  %s\n' "$name" $((e - s)) "$([[ $rc == 0 ]] && echo pass || echo FAIL)" \
    | tee -a "$OUT/summary.txt"
  return $rc
}
status=0
for s in $SUITES; do
  case $s in
    log_write) run log_write ubtrfs-engine log_write || status=1 ;;
    log_crash) run log_crash ubtrfs-oracle log_crash || status=1 ;;
    rwfs_model) run rwfs_model ubtrfs-engine rwfs_model || status=1 ;;
    *) echo "unknown suite $s" >&2; status=1 ;;
  esac
done
{
  echo "counts: log_write seeds $UBTRFS_LOG_WRITE_SEEDS (kernel $UBTRFS_LOG_WRITE_KERNEL_SEEDS)," \
    "log_crash kills $UBTRFS_LOGCRASH_KILLS from seed $UBTRFS_LOGCRASH_SEED," \
    "rwfs_model seeds $UBTRFS_RWFS_MODEL_SEEDS; logs in $OUT"
} | tee -a "$OUT/summary.txt"
exit $status
