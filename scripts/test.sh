#!/usr/bin/env bash
# Runs every test. As root (CI), kernel-backed tests build fresh fixtures
# with mkfs.btrfs and the kernel's btrfs through loop devices; with
# UBTRFS_REQUIRE_KERNEL=1 they fail if they cannot.
#   bash scripts/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
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
# build their fixtures once per process.
cargo test --release --workspace --locked -- --test-threads=1
