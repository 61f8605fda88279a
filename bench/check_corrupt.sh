#!/usr/bin/env bash
# The checker's seeded corruptor at full count: tests/tests/check_corrupt.rs
# with SEEDS seeds per kind of damage (default 20; CI runs 2), on
# kernel-made images with and without no-holes. Prints every case (btrfs
# check's exit, ubtrfs check's, the damage, ubtrfs's first line) and the
# counts; fails if ubtrfs check misses a case btrfs check flags. Then
# `check --repair` killed (SIGKILL) KILLS times (default 200; CI runs 8)
# at seeded moments of its writing: each time the image is as it was or
# repaired.
#   sudo bash bench/check_corrupt.sh [SEEDS [KILLS]]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
need_root "loop mounts"
UBTRFS_REQUIRE_KERNEL=1 UBTRFS_CORRUPT_SEEDS=${1:-20} UBTRFS_CRASH_KILLS=${2:-200} \
  cargo test --release -q -p ubtrfs-oracle --test check_corrupt -- --nocapture 2>&1 |
  grep -E '^ *(\^no-holes)? +[a-z-]+ +[0-9]+  progs|flagged|kills:|test result|panicked|FAILED'
