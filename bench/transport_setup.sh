# Sourced by bench/transport.sh and bench/transport_pin.sh: builds the
# floor daemons and the probe, and sets what both scripts use (HERE, REPO,
# TGT, PARAM, UF, PROBE, OLD_PARAM, MNT must be set before; mounted).
#
# FLOOR_SRC: the libfuse floor daemon's source (the workplace's
# fuse_floor.c, beside the project by default).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/tgt/uring}
TGT=$CARGO_TARGET_DIR
PARAM=/sys/module/fuse/parameters/enable_uring
FLOOR_SRC=${FLOOR_SRC:-$REPO/../shared/tools/fuse_floor.c}
if [ "$(id -u)" != 0 ]; then
    echo "$(basename "$0"): needs root (mount, $PARAM)" >&2
    exit 1
fi
[ -w "$PARAM" ] || { echo "$(basename "$0"): $PARAM not writable: no FUSE-over-io_uring here" >&2; exit 1; }
[ -f "$FLOOR_SRC" ] || { echo "$(basename "$0"): no $FLOOR_SRC (set FLOOR_SRC to fuse_floor.c)" >&2; exit 1; }
# The libfuse floor needs libfuse3's headers (Debian: libfuse3-dev).
if ! pkg-config --exists fuse3 2>/dev/null; then
    echo "$(basename "$0"): installing libfuse3-dev and pkg-config (the libfuse floor daemon)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q libfuse3-dev pkg-config >/dev/null
fi
(cd "$REPO" && cargo build --release -q -p uring-floor)
gcc -O2 -Wall -o "$TGT/fuse_floor" "$FLOOR_SRC" $(pkg-config --cflags --libs fuse3)
UF=$TGT/release/uring-floor
PROBE=$TGT/release/fuseprobe
OLD_PARAM=$(cat "$PARAM")
# Mounted? Read /proc/mounts rather than stat the directory: a mount whose
# daemon died answers ENOTCONN, and one not yet initialised blocks.
mounted() { grep -q " $MNT " /proc/mounts; }
