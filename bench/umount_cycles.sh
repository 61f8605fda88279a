#!/usr/bin/env bash
# Plain umount/mount cycles through root's read-write mount, at full count:
# tests/tests/one_writer.rs plain_umount_keeps_everything with CYCLES
# (default 200; the test suite runs 20). Each cycle mounts, checks every
# byte of every file against the model, writes a file, appends to one,
# unlinks or renames one, runs a plain `umount` and `btrfs check` at once;
# the kernel reads the end state.
#   sudo bash bench/umount_cycles.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
UBTRFS_REQUIRE_KERNEL=1 UBTRFS_CYCLES=${CYCLES:-200} \
  cargo test --release --locked -p ubtrfs-oracle --test one_writer \
  plain_umount_keeps_everything -- --nocapture 2>&1 | grep -E "cycles in|test result|panicked|failed"
