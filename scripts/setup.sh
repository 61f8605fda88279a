#!/usr/bin/env bash
# One command for a fresh machine: install what ubtrfs and its tests need,
# build ubtrfs, and run it on the sample image shipped in the repository.
#   bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

# System packages: btrfs-progs and the kernel-oracle tools, FUSE, zstd.
if command -v apt-get >/dev/null; then
  pkgs=$(grep -v '^#' tests/fixtures/APT_PACKAGES | tr '\n' ' ')
  $SUDO apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $pkgs fuse3 >/dev/null
else
  echo "setup.sh: no apt-get; install by hand: $(tr '\n' ' ' < tests/fixtures/APT_PACKAGES) fuse3" >&2
fi

# Rust toolchain.
if ! command -v cargo >/dev/null; then
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  # shellcheck disable=SC1091
  source "$HOME/.cargo/env"
fi

# The read-write mount's test tools (tests/tests/rw_mount/), built by
# cargo into ~/.cargo/bin when the wanted version is not there (about a
# minute each on 2 CPUs): pjdfstest (POSIX conformance; libacl1-dev to
# build, and the users nobody and tests to switch to) and fsx
# (asomers/fsx-rs).
install_tool() { # NAME VERSION
  local bin="${CARGO_HOME:-$HOME/.cargo}/bin/$1"
  if [[ -x $bin ]] && [[ $("$bin" --version 2>/dev/null) == "$1 $2" ]]; then
    return
  fi
  echo "setup.sh: cargo install $1 $2"
  cargo install --locked --quiet --force "$1" --version "$2"
}
install_tool pjdfstest 0.2.2
install_tool fsx 0.3.2
if ! getent passwd tests >/dev/null; then
  $SUDO useradd -U -M -d / -s /usr/sbin/nologin -c "pjdfstest dummy user" tests
fi

cargo build --release --locked
BIN=${CARGO_TARGET_DIR:-target}/release/ubtrfs

# Man pages (`man ubtrfs`, `man ubtrfs-mount`, ...) and bash, zsh and fish
# completions, made from the command line's definition, under PREFIX
# (default /usr/local).
PREFIX=${PREFIX:-/usr/local}
DOCS=target/docs
rm -rf "$DOCS"
$BIN gen-docs --man "$DOCS/man1" --completions "$DOCS/completions"
$SUDO install -d "$PREFIX/share/man/man1" "$PREFIX/share/bash-completion/completions" \
  "$PREFIX/share/zsh/site-functions" "$PREFIX/share/fish/vendor_completions.d"
$SUDO install -m 644 "$DOCS"/man1/*.1 "$PREFIX/share/man/man1/"
$SUDO install -m 644 "$DOCS/completions/ubtrfs.bash" "$PREFIX/share/bash-completion/completions/ubtrfs"
$SUDO install -m 644 "$DOCS/completions/_ubtrfs" "$PREFIX/share/zsh/site-functions/_ubtrfs"
$SUDO install -m 644 "$DOCS/completions/ubtrfs.fish" "$PREFIX/share/fish/vendor_completions.d/ubtrfs.fish"
echo "setup.sh: man pages and completions installed under $PREFIX/share"

# The sample: a small image made by the kernel (see tests/fixtures).
SAMPLE=target/sample/sample.img
mkdir -p target/sample
zstd -q -d -f tests/fixtures/committed/small-crc32c/dev0.img.zst -o "$SAMPLE"
echo "== ubtrfs subvolume list $SAMPLE"
$BIN subvolume list "$SAMPLE"
echo "== ubtrfs ls -l $SAMPLE /"
$BIN ls -l "$SAMPLE" /
rm -rf target/sample/extracted
echo "== ubtrfs extract $SAMPLE / target/sample/extracted"
$BIN extract "$SAMPLE" / target/sample/extracted
echo "== ubtrfs scrub $SAMPLE"
$BIN scrub "$SAMPLE"
echo "setup done: $BIN"
