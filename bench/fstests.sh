#!/usr/bin/env bash
# fstests (xfstests) through ubtrfs's mount and on the kernel's btrfs, side
# by side: the same tests on both, then a table of test, kernel result,
# ubtrfs result, and for every difference what ubtrfs's run said.
#
#   bash bench/fstests.sh [TEST...]      # default: generic/030 033 071 097 098 412 567
#   bash bench/fstests.sh -g generic/quick
#   bash bench/fstests.sh --table        # the table of the last run in WORK
#   bash bench/fstests.sh --ci           # bench/fstests/ci.list on ubtrfs only:
#                                        # fails unless every test there passes
#
# Root only. fstests is an external tool: it is built out of tree from the
# pinned tarball (../shared/fstests beside the repository, or
# FSTESTS_TARBALL) into FSTESTS_DIR (default target/fstests), with local
# changes (bench/fstests/fuse-ubtrfs.patch) so that it knows a FUSE
# filesystem with a maker and a type of its own:
# - fstests compares the type df shows with FSTYP, and a FUSE mount shows
#   as fuse.ubtrfs (fuseblk.ubtrfs on a block device), not "fuse";
# - for FSTYP=fuse its _scratch_mkfs only empties the scratch mount while
#   check wipes a block-device SCRATCH_DEV before every test, so
#   _scratch_mkfs (and _scratch_mkfs_sized) run MKFS_FUSE_PROG ("ubtrfs
#   mkfs -q -f") when set;
# - tests that mount with -t $FSTYP get -t fuse$FUSE_SUBTYP (mount.fuse
#   would take the device for a program);
# - limits it keys on FSTYP=fuse for FUSE servers in general are btrfs's
#   for ubtrfs: the largest xattr (generic/020), timestamps, names as bytes.
# - after each test, fstests checks the filesystems as it does the
#   kernel's btrfs: unmounted, `btrfs check`, mounted again (for FSTYP=fuse
#   it checks nothing). The kernel's side gets the commit of that unmount
#   too, so space freed by a test's cleanup is free for the next
#   (generic/701 after 694).
#
# Each side gets two loop devices over sparse images of SIZE (default 8G):
# TEST_DEV and SCRATCH_DEV. The kernel's are made with mkfs.btrfs (FSTYP
# btrfs); ubtrfs's with `ubtrfs mkfs`, mounted by mount(8) through
# /sbin/mount.fuse.ubtrfs (FSTYP fuse, FUSE_SUBTYP .ubtrfs): a block device
# source makes root's read-write mount a fuseblk mount of that device.
#
# Tests listed in bench/fstests/expunge (with the reason) are not run on
# ubtrfs: what the kernel's FUSE cannot carry.
#
# Environment: FSTESTS_DIR, FSTESTS_TARBALL, SIZE, WORK (where the images
# and mount points go; default /var/tmp/ubtrfs-fstests), SIDES ("kernel
# ubtrfs"), UBTRFS_MOUNT_OPTIONS (mount options for ubtrfs's side, such as
# noblkdev).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
[[ $(id -u) -eq 0 ]] || { echo "bench/fstests.sh: needs root" >&2; exit 1; }

mode=run
case ${1:-} in
  --table) mode=table; shift ;;
  --ci) mode=ci; shift ;;
esac
tests=("$@")
if [[ $mode == ci ]]; then
  mapfile -t tests < <(grep -v '^#' bench/fstests/ci.list | awk 'NF {print $1}')
  SIDES=ubtrfs
  WORK=${WORK:-/var/tmp/ubtrfs-fstests-ci}
  SIZE=${SIZE:-4G}
fi
[[ ${#tests[@]} -gt 0 ]] || tests=(generic/030 generic/033 generic/071 generic/097 generic/098 generic/412 generic/567)
FSTESTS_DIR=${FSTESTS_DIR:-$repo/target/fstests}
FSTESTS_TARBALL=${FSTESTS_TARBALL:-$repo/../shared/fstests/xfstests-63a29724.tar.gz}
[[ -e $FSTESTS_TARBALL ]] || FSTESTS_TARBALL=/work/shared/fstests/xfstests-63a29724.tar.gz
SIZE=${SIZE:-8G}
WORK=${WORK:-/var/tmp/ubtrfs-fstests}
SIDES=${SIDES:-kernel ubtrfs}
BIN=${CARGO_TARGET_DIR:-$repo/target}/release/ubtrfs

src=$FSTESTS_DIR/xfstests
if [[ $mode != table ]]; then
# --- build fstests once (its packages, its users).
patch_sum=$(sha256sum < "$repo/bench/fstests/fuse-ubtrfs.patch")
if [[ ! -x $src/check || ! -e $src/ltp/fsstress || $(cat "$FSTESTS_DIR/patch.sum" 2>/dev/null) != "$patch_sum" ]]; then
  if command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential autoconf automake \
      libtool pkg-config uuid-dev libattr1-dev libacl1-dev libaio-dev liburing-dev xfslibs-dev \
      libgdbm-dev libssl-dev libinih-dev gawk attr acl bc dbench fio psmisc quota xfsprogs \
      e2fsprogs btrfs-progs >/dev/null
  fi
  [[ -e $FSTESTS_TARBALL ]] ||
    { echo "bench/fstests.sh: no fstests tarball at $FSTESTS_TARBALL" >&2; exit 1; }
  rm -rf "$FSTESTS_DIR"
  mkdir -p "$FSTESTS_DIR"
  tar xzf "$FSTESTS_TARBALL" -C "$FSTESTS_DIR"
  patch -d "$src" -p1 -s < "$repo/bench/fstests/fuse-ubtrfs.patch"
  make -C "$src" -j"$(nproc)" >"$FSTESTS_DIR/build.log" 2>&1 ||
    { tail -30 "$FSTESTS_DIR/build.log"; exit 1; }
  echo "$patch_sum" > "$FSTESTS_DIR/patch.sum"
fi
for u in fsgqa fsgqa2; do getent passwd $u >/dev/null || useradd -m $u; done
getent passwd 123456-fsgqa >/dev/null || useradd 123456-fsgqa

# Always built (nothing to do when it is up to date): a binary left from
# an older commit would be tested in place of the checkout's.
cargo build --release --locked -q
ln -sf "$BIN" /sbin/mount.fuse.ubtrfs

# --- the devices of each side.
mkdir -p "$WORK"
cleanup() {
  for d in "$WORK"/*/test "$WORK"/*/scratch; do
    mountpoint -q "$d" && umount "$d" 2>/dev/null || true
  done
  # Every loop device over an image here, this run's or a killed run's.
  losetup -l -n -O NAME,BACK-FILE | awk -v w="$WORK/" 'index($2, w) == 1 {print $1}' |
    xargs -r -n1 losetup -d 2>/dev/null || true
}
cleanup
trap cleanup EXIT
attach() { # IMAGE -> loop device
  rm -f "$1"
  truncate -s "$SIZE" "$1"
  losetup -f --show "$1"
}

config() { # SIDE TEST_DEV SCRATCH_DEV
  local side=$1 dir=$WORK/$1
  mkdir -p "$dir/test" "$dir/scratch" "$dir/results"
  {
    if [[ $side == kernel ]]; then
      echo "export FSTYP=btrfs"
    else
      echo "export FSTYP=fuse"
      echo "export FUSE_SUBTYP=.ubtrfs"
      echo "export MKFS_FUSE_PROG=\"$BIN mkfs -q -f\""
      if [[ -n ${UBTRFS_MOUNT_OPTIONS:-} ]]; then
        echo "export MOUNT_OPTIONS=\"-o $UBTRFS_MOUNT_OPTIONS\""
        echo "export TEST_FS_MOUNT_OPTS=\"-o $UBTRFS_MOUNT_OPTIONS\""
      fi
    fi
    echo "export TEST_DEV=$2"
    echo "export TEST_DIR=$dir/test"
    echo "export SCRATCH_DEV=$3"
    echo "export SCRATCH_MNT=$dir/scratch"
    echo "export RESULT_BASE=$dir/results"
  } > "$dir/local.config"
}

expunge=$WORK/ubtrfs.expunge
grep -v '^#' "$repo/bench/fstests/expunge" | awk 'NF {print $1}' > "$expunge" || true

for side in $SIDES; do
  dir=$WORK/$side
  mkdir -p "$dir"
  td=$(attach "$dir/test.img")
  sd=$(attach "$dir/scratch.img")
  if [[ $side == kernel ]]; then
    mkfs.btrfs -q -f "$td"
    mkfs.btrfs -q -f "$sd"
  else
    "$BIN" mkfs -q -f "$td"
    "$BIN" mkfs -q -f "$sd"
  fi
  config "$side" "$td" "$sd"
  rm -rf "$dir/results"
  mkdir -p "$dir/results"
  args=("${tests[@]}")
  [[ $side == ubtrfs ]] && args=(-E "$expunge" "${args[@]}")
  echo "== $side: ./check ${args[*]}" >&2
  (cd "$src" && HOST_OPTIONS=$dir/local.config ./check "${args[@]}") \
    > "$dir/check.out" 2>&1 || true
  tail -5 "$dir/check.out" >&2
  mountpoint -q "$dir/test" && umount "$dir/test" || true
  mountpoint -q "$dir/scratch" && umount "$dir/scratch" || true
done

fi

# --- the table: one line per test, the cause of every difference.
python3 - "$mode" "$WORK" "$src" "$repo/bench/fstests/expunge" $SIDES <<'EOF'
import difflib, os, re, sys
mode, work, src, expunge_file, sides = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
expunged = {}
for line in open(expunge_file):
    if line.strip() and not line.startswith("#"):
        t, _, why = line.strip().partition(" ")
        expunged[t] = why.strip()
def results(side):
    out = open(os.path.join(work, side, "check.out"), errors="replace").read()
    res = {}
    for line in out.splitlines():
        m = re.match(r"^(Ran|Not run|Failures):(.*)$", line)
        if not m:
            continue
        kind = {"Ran": "pass", "Not run": "notrun", "Failures": "fail"}[m.group(1)]
        for t in m.group(2).split():
            res[t] = kind
    return res
def cause(side, t):
    """The .notrun reason, or the first line where the output differs."""
    base = os.path.join(work, side, "results", t)
    if os.path.exists(base + ".notrun"):
        return open(base + ".notrun", errors="replace").read().strip()[:120]
    if os.path.exists(base + ".out.bad"):
        bad = open(base + ".out.bad", errors="replace").read().splitlines()
        golden = os.path.join(src, "tests", t + ".out")
        good = open(golden, errors="replace").read().splitlines() if os.path.exists(golden) else []
        for d in difflib.unified_diff(good, bad, lineterm="", n=0):
            if d[:1] in "+-" and not d.startswith(("+++", "---")):
                return "output: " + d[:120]
    return "see " + base + ".full"
r = {s: results(s) for s in sides}
if "ubtrfs" in r and "kernel" in r:
    # Expunged on ubtrfs: check does not list them.
    for t in r["kernel"]:
        if t not in r["ubtrfs"] and t in expunged:
            r["ubtrfs"][t] = "expunged"
names = sorted(set().union(*[set(v) for v in r.values()]))
kinds = ("pass", "fail", "notrun", "expunged")
counts = {s: {k: 0 for k in kinds} for s in sides}
rows = []
for t in names:
    row = [r[s].get(t, "-") for s in sides]
    for s in sides:
        if t in r[s]:
            counts[s][r[s][t]] += 1
    why = ""
    mine = r.get("ubtrfs", {}).get(t)
    if mine == "expunged":
        why = "expunged: " + expunged[t]
    elif mine in ("fail", "notrun") and (len(set(row)) > 1 or mode == "ci"):
        why = cause("ubtrfs", t)
    rows.append((t, row, why))
if mode == "ci":
    # Every test of the list passes, or the run fails.
    bad = [(t, row, why) for t, row, why in rows if row != ["pass"]]
    listed = [l.split()[0] for l in open(os.path.join(os.path.dirname(expunge_file), "ci.list"))
              if l.strip() and not l.startswith("#")]
    bad += [(t, ["missing"], "not in check's output") for t in listed if t not in names]
    for t, row, why in bad:
        print(f"{t}: {row[0]}: {why}")
    c = counts["ubtrfs"]
    print(f"ubtrfs: {c['pass']} passed, {c['fail']} failed, {c['notrun']} not run")
    sys.exit(1 if bad or not rows else 0)
print("| test | " + " | ".join(sides) + " | cause (ubtrfs) |")
print("|---|" + "---|" * len(sides) + "---|")
for t, row, why in rows:
    print(f"| {t} | " + " | ".join(row) + f" | {why} |")
for s in sides:
    c = counts[s]
    extra = f", {c['expunged']} expunged" if c["expunged"] else ""
    print(f"{s}: {c['pass']} passed, {c['fail']} failed, {c['notrun']} not run{extra}")
EOF
