#!/usr/bin/env bash
# A backup loop on ubtrfs's live mount, the full count of rw_mount (q)
# (tests/tests/rw_mount/subvols.rs, BACKUP_LOOP: 5 rounds, no fsstress):
#   sudo bash bench/backup_loop.sh [WORKDIR]
# ubtrfs mounts a fresh image at WORKDIR/m; the kernel mounts a fresh
# mkfs.btrfs image at WORKDIR/k (the receiver). fstests' fsstress runs the
# whole time in the subvolume m/data (run after run, each in a directory of
# its own, the one before removed). Each of ROUNDS rounds writes to data
# (appends, a new directory with a file, an xattr and a symlink, the one
# of two rounds before removed), takes `ubtrfs subvolume snapshot -r data
# snapN`, records snapN's manifest (every path: type, mode, nlink, size,
# mtime, uid, gid, rdev, symlink target, xattrs, content sha256; not the
# inode numbers, ctime or atime, which the receiver makes its own), sends
# it (`ubtrfs send -q`, incremental from snap(N-1) after the first round)
# into `btrfs receive -q k`, and deletes snap(N-2) on the sender. Then:
# every received k/snapN has its source's manifest, `btrfs check
# --readonly` is clean on both images, and the kernel mounts ubtrfs's
# image read-only, lists the subvolumes `ubtrfs subvolume list` gave
# before the unmount (ids, top levels, paths, uuids) and reads every
# remaining snapshot whole (each with its manifest). Exit 1, with the
# reason, on any difference.
# ROUNDS: rounds (20), each after a pause of INTERVAL seconds (1). SIZE:
# each sparse image (8G). PROCS, OPS: fsstress's processes (2) and
# operations per process and run (2000). SEED: the first fsstress run's
# seed (1; run i has SEED+i-1). fsstress comes from bench/fstests.sh's
# build (made here if it is missing). The work directory (default
# /var/tmp/bench-backup-loop) keeps the manifests and logs afterwards.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. bench/lib.sh
need_root "loop and FUSE mounts, btrfs receive"
build_ubtrfs
U=$UBTRFS_BIN
WORK=${1:-/var/tmp/bench-backup-loop}
ROUNDS=${ROUNDS:-20}
SIZE=${SIZE:-8G}
PROCS=${PROCS:-2}
OPS=${OPS:-2000}
SEED=${SEED:-1}
INTERVAL=${INTERVAL:-1}
FSSTRESS=${FSSTRESS:-$PWD/target/fstests/xfstests/ltp/fsstress}
if [[ ! -x $FSSTRESS ]]; then
  SIDES=ubtrfs bash bench/fstests.sh generic/001 >/dev/null
fi
MNT=$WORK/m
KM=$WORK/k
IMG=$WORK/img
KIMG=$WORK/kimg
MAN=$WORK/manifests
STOP=$WORK/stop
LOOP=
KLOOP=
stress=

fail() {
  echo "bench/backup_loop.sh: $*" >&2
  exit 1
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
median() {
  sort -n | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print int((a[NR / 2] + a[NR / 2 + 1]) / 2) }'
}
stop_stress() {
  touch "$STOP"
  if [[ -s $WORK/fsstress.pid ]]; then
    kill -TERM "$(cat "$WORK/fsstress.pid")" 2>/dev/null || true
  fi
  if [[ -n $stress ]]; then
    wait "$stress" 2>/dev/null || true
    stress=
  fi
}
cleanup() {
  set +e
  stop_stress
  mountpoint -q "$MNT" && umount "$MNT"
  mountpoint -q "$KM" && umount "$KM"
  [[ -n $LOOP ]] && losetup -d "$LOOP"
  [[ -n $KLOOP ]] && losetup -d "$KLOOP"
  true
}
trap cleanup EXIT

# manifest DIR: one line per path under DIR (DIR itself as "."), sorted;
# symlinks are not followed.
manifest() {
  python3 - "$1" <<'PY'
import hashlib, os, stat, sys
root = sys.argv[1]
out = []
def describe(rel, path):
    st = os.lstat(path)
    m = st.st_mode
    kind = ("d" if stat.S_ISDIR(m) else "f" if stat.S_ISREG(m) else
            "l" if stat.S_ISLNK(m) else "c" if stat.S_ISCHR(m) else
            "b" if stat.S_ISBLK(m) else "p" if stat.S_ISFIFO(m) else
            "s" if stat.S_ISSOCK(m) else "?")
    f = [repr(rel), kind, "%o" % stat.S_IMODE(m),
         "nlink=%d" % (1 if kind == "d" else st.st_nlink),
         "size=%d" % st.st_size, "mtime=%d" % st.st_mtime_ns,
         "uid=%d" % st.st_uid, "gid=%d" % st.st_gid]
    if kind in "cb":
        f.append("rdev=%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev)))
    if kind == "l":
        f.append("target=%r" % os.readlink(path))
    xs = []
    for name in sorted(os.listxattr(path, follow_symlinks=False)):
        v = os.getxattr(path, name, follow_symlinks=False)
        xs.append("%s=%s" % (name, hashlib.sha256(v).hexdigest()[:16]))
    f.append("xattrs={%s}" % ",".join(xs))
    if kind == "f":
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            while True:
                b = fh.read(1 << 20)
                if not b:
                    break
                h.update(b)
        f.append("sha256=" + h.hexdigest())
    out.append(" ".join(f))
describe(".", root)
for d, dirs, files in os.walk(root):
    for name in dirs + files:
        p = os.path.join(d, name)
        describe(os.path.relpath(p, root), p)
out.sort()
sys.stdout.write("\n".join(out) + "\n")
PY
}

# same_manifest NAME WHERE: WHERE's manifest of snapshot NAME (KM/NAME or
# MNT/NAME) equals the one recorded on the sender.
same_manifest() {
  local name=$1 dir=$2 tag=$3
  manifest "$dir" >"$MAN/$name.$tag" || fail "manifest of $dir failed"
  if ! cmp -s "$MAN/$name.src" "$MAN/$name.$tag"; then
    diff "$MAN/$name.src" "$MAN/$name.$tag" | head -20 >&2
    fail "$dir differs from the manifest of its source $MNT/$name (diff above: < source, > $tag; $MAN)"
  fi
}

# subvols: "ID TOP_LEVEL PATH UUID PARENT_UUID" lines, sorted by id, from
# either list's output (`btrfs subvolume list -u -q`, `ubtrfs subvolume list`).
subvols() {
  awk '{
    id = ""; tl = ""; pu = ""; u = ""; p = ""
    for (i = 1; i <= NF; i++) {
      if ($i == "ID") id = $(i + 1)
      else if ($i == "top" && $(i + 1) == "level") tl = $(i + 2)
      else if ($i == "parent_uuid") pu = $(i + 1)
      else if ($i == "uuid") u = $(i + 1)
      else if ($i == "path") { p = $(i + 1); for (j = i + 2; j <= NF; j++) p = p " " $j; break }
    }
    sub(/^<FS_TREE>\//, "", p)
    print id, tl, p, u, pu
  }' | sort -n
}

start=$SECONDS
for m in "$MNT" "$KM"; do
  mountpoint -q "$m" && umount "$m"
done
rm -rf "$WORK"
mkdir -p "$MNT" "$KM" "$MAN"
truncate -s "$SIZE" "$IMG" "$KIMG"
"$U" mkfs -q "$IMG"
mkfs.btrfs -q "$KIMG" >"$WORK/mkfs.log" 2>&1 || { cat "$WORK/mkfs.log" >&2; fail "mkfs.btrfs $KIMG failed"; }
KLOOP=$(losetup -f --show "$KIMG")
mount "$KLOOP" "$KM"
"$U" mount "$IMG" "$MNT"
"$U" subvolume create "$MNT/data" >/dev/null
mkdir -p "$MNT/data/d" "$MNT/data/stress"
seq 100000 >"$MNT/data/d/big"
cp -a /usr/include/linux "$MNT/data/"

# fsstress run after run in data/stress/fsI until $STOP exists; a run that
# fails (not stopped) leaves its seed in fsstress.failed.
(
  set +e
  i=0
  while [[ ! -e $STOP ]]; do
    i=$((i + 1))
    seed=$((SEED + i - 1))
    echo "== run $i seed $seed" >>"$WORK/fsstress.log"
    "$FSSTRESS" -d "$MNT/data/stress/fs$i" -p "$PROCS" -n "$OPS" -s "$seed" >>"$WORK/fsstress.log" 2>&1 &
    echo $! >"$WORK/fsstress.pid"
    wait $!
    rc=$?
    if [[ $rc -ne 0 && ! -e $STOP ]]; then
      echo "fsstress run $i (seed $seed, -p $PROCS -n $OPS in $MNT/data/stress/fs$i) exited $rc" >"$WORK/fsstress.failed"
      exit 1
    fi
    if ! rm -rf "$MNT/data/stress/fs$((i - 1))" 2>>"$WORK/fsstress.log"; then
      echo "rm -rf $MNT/data/stress/fs$((i - 1)) failed after fsstress run $i (seed $seed)" >"$WORK/fsstress.failed"
      exit 1
    fi
    echo "$i" >"$WORK/fsstress.runs"
  done
) &
stress=$!

snap_ms=()
send_ms=()
del_ms=()
stream=()
for n in $(seq 1 "$ROUNDS"); do
  [[ -e $WORK/fsstress.failed ]] && fail "round $n: $(cat "$WORK/fsstress.failed")"
  kill -0 "$stress" 2>/dev/null || fail "round $n: the fsstress loop ended ($WORK/fsstress.log)"
  sleep "$INTERVAL"
  # What the round writes: an append, a new directory (file, xattr,
  # symlink), the directory of two rounds before removed.
  d=$MNT/data
  echo "round $n" >>"$d/d/big"
  mkdir "$d/r$n"
  cp -a /usr/include/stdio.h "$d/r$n/"
  setfattr -n user.round -v "$n" "$d/r$n/stdio.h"
  ln -s ../d/big "$d/r$n/big"
  rm -rf "$d/r$((n - 2))"

  t0=$(now_ms)
  "$U" subvolume snapshot -r "$MNT/data" "$MNT/snap$n" >/dev/null 2>"$WORK/err" ||
    { cat "$WORK/err" >&2; fail "round $n: ubtrfs subvolume snapshot -r $MNT/data $MNT/snap$n failed"; }
  t1=$(now_ms)
  manifest "$MNT/snap$n" >"$MAN/snap$n.src" || fail "round $n: the manifest of $MNT/snap$n failed"

  if ((n == 1)); then
    send=("$U" send -q "$MNT/snap$n")
  else
    send=("$U" send -q -p "$MNT/snap$((n - 1))" "$MNT/snap$n")
  fi
  rm -f "$WORK/bytes"
  t2=$(now_ms)
  set +e
  "${send[@]}" 2>"$WORK/send.err" | tee >(wc -c >"$WORK/bytes") | btrfs receive -q "$KM" 2>"$WORK/receive.err"
  st=("${PIPESTATUS[@]}")
  set -e
  t3=$(now_ms)
  if [[ ${st[0]} -ne 0 || ${st[2]} -ne 0 ]]; then
    cat "$WORK/send.err" "$WORK/receive.err" >&2
    fail "round $n: ${send[*]} | btrfs receive -q $KM: send exited ${st[0]}, receive ${st[2]}"
  fi
  while [[ ! -s $WORK/bytes ]]; do sleep 0.01; done
  bytes=$(cat "$WORK/bytes")
  same_manifest "snap$n" "$KM/snap$n" dst

  del=-
  if ((n > 2)); then
    t4=$(now_ms)
    "$U" subvolume delete "$MNT/snap$((n - 2))" >/dev/null 2>"$WORK/err" ||
      { cat "$WORK/err" >&2; fail "round $n: ubtrfs subvolume delete $MNT/snap$((n - 2)) failed"; }
    del=$(($(now_ms) - t4))
    del_ms+=("$del")
  fi
  snap_ms+=($((t1 - t0)))
  send_ms+=($((t3 - t2)))
  stream+=("$bytes")
  printf 'round %2d: snapshot %5d ms, send|receive %6d ms (%s stream %9d bytes), delete %4s ms, %5d paths, %s fsstress runs done\n' \
    "$n" $((t1 - t0)) $((t3 - t2)) "$([[ $n -eq 1 ]] && echo full || echo incr)" "$bytes" "$del" \
    "$(wc -l <"$MAN/snap$n.src")" "$(cat "$WORK/fsstress.runs" 2>/dev/null || echo 0)"
done

stop_stress
[[ -e $WORK/fsstress.failed ]] && fail "$(cat "$WORK/fsstress.failed")"
runs=$(cat "$WORK/fsstress.runs" 2>/dev/null || echo 0)
"$U" subvolume list "$MNT" >"$WORK/list.ubtrfs" || fail "ubtrfs subvolume list $MNT failed"
umount "$MNT" || fail "umount $MNT (ubtrfs) failed"

# Every received snapshot, read again now that the loop is over.
for n in $(seq 1 "$ROUNDS"); do
  same_manifest "snap$n" "$KM/snap$n" final
done
umount "$KM"
losetup -d "$KLOOP"
KLOOP=
for i in "$IMG" "$KIMG"; do
  btrfs check --readonly "$i" >"$WORK/check.log" 2>&1 ||
    { tail "$WORK/check.log" >&2; fail "btrfs check --readonly $i is not clean ($WORK/check.log)"; }
done

# The kernel on ubtrfs's image: the same subvolumes, every snapshot read whole.
LOOP=$(losetup -f --show "$IMG")
mount -o ro "$LOOP" "$MNT"
btrfs subvolume list -u -q "$MNT" >"$WORK/list.kernel"
subvols <"$WORK/list.ubtrfs" >"$WORK/subvols.ubtrfs"
subvols <"$WORK/list.kernel" >"$WORK/subvols.kernel"
if ! cmp -s "$WORK/subvols.ubtrfs" "$WORK/subvols.kernel"; then
  diff "$WORK/subvols.ubtrfs" "$WORK/subvols.kernel" >&2 || true
  fail "the kernel's subvolume list differs from ubtrfs's (< ubtrfs, > kernel: id, top level, path, uuid, parent uuid)"
fi
nsub=$(wc -l <"$WORK/subvols.kernel")
read_bytes=0
left=0
for s in "$MNT"/snap* "$MNT/data"; do
  b=$(tar cf - -C "$MNT" "$(basename "$s")" | wc -c) || fail "the kernel could not read $s whole"
  read_bytes=$((read_bytes + b))
  name=$(basename "$s")
  if [[ $name != data ]]; then
    same_manifest "$name" "$s" kernel
    left=$((left + 1))
  fi
done
umount "$MNT"
losetup -d "$LOOP"
LOOP=

ms=$(printf '%s\n' "${snap_ms[@]}" | median)
mr=$(printf '%s\n' "${send_ms[@]}" | median)
md=$( ((${#del_ms[@]})) && printf '%s\n' "${del_ms[@]}" | median || echo -)
mb=$(printf '%s\n' "${stream[@]:1}" | median)
echo "fsstress ($PROCS processes, $OPS operations a run, seeds $SEED..$((SEED + runs))) ran $runs whole runs beside the loop;"
echo "median delete $md ms; full stream ${stream[0]} bytes, median incremental stream ${mb:-0} bytes"
echo "btrfs check clean on both images; the kernel lists the same $nsub subvolumes as ubtrfs and read the $left remaining snapshots and data whole ($((read_bytes >> 20)) MiB of tar), each snapshot with its source's manifest"
echo "backup loop: $ROUNDS rounds in $((SECONDS - start)) s, median snapshot $ms ms, median send $mr ms (send | receive); all $ROUNDS received snapshots equal their sources"
