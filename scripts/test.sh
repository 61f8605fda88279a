#!/usr/bin/env bash
# Runs every test. As root (CI), kernel-backed tests build fresh fixtures
# with mkfs.btrfs and the kernel's btrfs through loop devices; with
# UBTRFS_REQUIRE_KERNEL=1 they fail if they cannot.
#   bash scripts/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# A hang fails the run with what hung (scripts/hang_report.py), instead of
# running into CI's 90-minute limit with nothing on record:
# UBTRFS_TEST_TIME_LIMIT seconds for this whole script (default 70 min;
# it takes ~40 here).
limit=${UBTRFS_TEST_TIME_LIMIT:-4200}
python3 scripts/hang_report.py --after "$limit" $$ >&2 &
monitor=$!
trap 'kill $monitor 2>/dev/null || true' EXIT
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
python3 -m unittest discover -s tests/oracle -p 'test_*.py'
python3 scripts/modgraph.py
# Kernel-made fixtures, built fresh once for all test binaries.
if [[ -z "${UBTRFS_FIXTURES_DIR:-}" && $(id -u) -eq 0 ]]; then
  export UBTRFS_FIXTURES_DIR="$PWD/target/kernel-fixtures"
  rm -rf "$UBTRFS_FIXTURES_DIR"
  bash tests/fixtures/build.sh "$UBTRFS_FIXTURES_DIR"
fi
# One test thread per binary: the kernel tests share loop devices and
# build their fixtures once per process. Every ubtrfs mount of this pass
# goes over /dev/fuse (-o nouring), whatever the machine's setting.
UBTRFS_FUSE_TRANSPORT=dev cargo test --release --workspace --locked -- --test-threads=1
# fstests' generic suite through the mount: the list in bench/fstests/ci.list
# (each passes on the kernel's btrfs here) must pass; the whole quick group
# on both is bench/fstests.sh's.
if [[ $(id -u) -eq 0 ]]; then
  bash bench/fstests.sh --ci
elif [[ ${UBTRFS_REQUIRE_KERNEL:-} == 1 ]]; then
  echo "scripts/test.sh: fstests needs root" >&2
  exit 1
fi
# FUSE over io_uring (Linux 6.14+): the mount suites again, every ubtrfs
# mount required to use it (-o uring: the mount fails otherwise). The
# kernel offers it only while enable_uring is Y: set for this pass, then
# restored.
if [[ $(id -u) -eq 0 ]]; then
  param=/sys/module/fuse/parameters/enable_uring
  if [[ -w $param ]]; then
    was=$(cat "$param")
    trap 'echo "$was" > "$param"; kill $monitor 2>/dev/null || true' EXIT
    echo Y > "$param"
    UBTRFS_FUSE_TRANSPORT=uring cargo test --release -p ubtrfs-oracle --locked \
      --test rw_mount --test fuse --test log_crash -- --test-threads=1
    echo "$was" > "$param"
    trap 'kill $monitor 2>/dev/null || true' EXIT
  elif [[ ${UBTRFS_REQUIRE_KERNEL:-} == 1 ]]; then
    echo "scripts/test.sh: $param is missing or not writable: no FUSE over io_uring to test" >&2
    exit 1
  fi
fi
