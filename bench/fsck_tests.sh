#!/bin/bash
# ubtrfs check beside btrfs check on btrfs-progs' own test images: the
# fixtures of tests/fsck-tests (each directory's expectation is in
# bench/fsck/expect.tsv) and the images of tests/fuzz-tests, from the
# pinned tarball (../shared/btrfs-progs-tests beside the repository, or
# PROGS_TESTS_TARBALL), unpacked and restored under WORK.
#
#   bash bench/fsck_tests.sh            every fixture and fuzz image
#   bash bench/fsck_tests.sh --sample   those of bench/fsck/sample.txt (CI)
#
# Prints a table (markdown) per fixture: progs' expectation, btrfs check's
# exit code, ubtrfs check's, for fail+repair fixtures what `ubtrfs check
# --repair` did to a copy (repaired: btrfs check and ubtrfs check clean
# after, and as root the kernel mounts it and reads it; or refused
# writing nothing), and ubtrfs's first problem line. Exits 1 when
# ubtrfs misses an expectation that is not in KNOWN below, when a repair
# neither succeeds nor refuses, or when any image makes it crash or hang
# (exit code other than 0 or 1, or 60 s).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
. bench/lib.sh
build_ubtrfs
WORK=${WORK:-/var/tmp/ubtrfs-fsck-tests}
PROGS_TESTS_TARBALL=${PROGS_TESTS_TARBALL:-$repo/../shared/btrfs-progs-tests/btrfs-progs-tests-10717dd7.tar.gz}
[[ -e $PROGS_TESTS_TARBALL ]] || PROGS_TESTS_TARBALL=/work/shared/btrfs-progs-tests/btrfs-progs-tests-10717dd7.tar.gz
# Expectations ubtrfs check does not meet, with why (directory, or
# directory/fixture).
declare -A KNOWN=(
  [058-bad-free-space-tree-entry/corrupt-free-space-tree2.img.xz]="its only damage is mkfs.btrfs 6.2's leftover free-space entries below the first block group, which mkfs.btrfs on this machine writes on every image: a warning"
)
sample=0
[[ ${1:-} == --sample ]] && sample=1
for t in btrfs btrfs-image xz tar; do
  command -v $t >/dev/null || { echo "bench/fsck_tests.sh: needs $t" >&2; exit 1; }
done
mkdir -p "$WORK"
src=$WORK/src/btrfs-progs-tests/tests
if [[ ! -d $src/fsck-tests ]]; then
  mkdir -p "$WORK/src"
  tar -xzf "$PROGS_TESTS_TARBALL" -C "$WORK/src"
fi

# restore FIXTURE OUT: the plain image of a fixture in any of its forms.
restore() {
  local f=$1 out=$2 tmp
  [[ -s $out ]] && return 0
  tmp=$(mktemp -d "$WORK/tmp.XXXXXX")
  case $f in
    *.img) btrfs-image -r "$f" "$out" >/dev/null 2>&1 ;;
    *.img.xz) xz -dc "$f" >"$tmp/i.img" && btrfs-image -r "$tmp/i.img" "$out" >/dev/null 2>&1 ;;
    *.raw.xz) xz -dc "$f" >"$out" ;;
    *.tar.xz) tar -xJf "$f" -C "$tmp" && mv "$tmp/$(ls "$tmp" | grep -v '^i.img$' | head -1)" "$out" ;;
    *) return 1 ;;
  esac
  local rc=$?
  rm -rf "$tmp"
  return $rc
}

# kernel_reads IMAGE: nothing when the kernel mounts IMAGE (read-only)
# and stats every name, and reads every file's data unless the image is a
# btrfs-image dump (METADUMP flags: its data was never kept); else what
# failed. Needs root; says so otherwise.
kernel_reads() {
  [[ $(id -u) == 0 ]] || { echo "not mounted: not root"; return; }
  local mnt=$WORK/mnt err="" flags
  mkdir -p "$mnt"
  mount -o ro,loop "$1" "$mnt" 2>/dev/null || { echo "the kernel does not mount it"; return; }
  flags=$(btrfs inspect-internal dump-super "$1" | awk '$1 == "flags" {print $2}')
  find "$mnt" -exec stat {} + >/dev/null 2>&1 || err="a name the kernel does not stat"
  if [[ -z $err ]] && (( (flags & 0x600000000) == 0 )); then
    find "$mnt" -type f -exec cat {} + >/dev/null 2>&1 || err="a file the kernel does not read"
  fi
  umount "$mnt"
  echo "$err"
}

selected() { # selected NAME: in the sample (or no sample asked for)
  [[ $sample == 0 ]] || grep -qx -- "$1" bench/fsck/sample.txt
}

fail=0
printf '| directory | fixture | progs expects | btrfs check | ubtrfs check | ubtrfs check --repair | ubtrfs says first |\n'
printf '|---|---|---|---|---|---|---|\n'
while IFS=$'\t' read -r dir expect note; do
  [[ $dir == \#* || -z $dir || $expect == built ]] && continue
  selected "$dir" || continue
  for f in "$src/fsck-tests/$dir"/*.img "$src/fsck-tests/$dir"/*.img.xz "$src/fsck-tests/$dir"/*.raw.xz "$src/fsck-tests/$dir"/*.tar.xz; do
    [[ -e $f ]] || continue
    name=$(basename "$f"); base=${name%%.*}
    img=$WORK/img/$dir/$base.raw
    mkdir -p "$WORK/img/$dir"
    if ! restore "$f" "$img"; then
      printf '| %s | %s | %s | - | - | - | could not restore |\n' "$dir" "$name" "$expect"
      continue
    fi
    if [[ $dir == 012-leaf-corruption ]]; then # the test damages its good image first
      cp --sparse=always "$img" "$img.damaged"
      for off in 4206592 20905984; do
        dd if=/dev/zero of="$img.damaged" bs=1 count=32 seek=$off conv=notrunc status=none
      done
      img=$img.damaged
    fi
    set +e
    timeout 60 btrfs check --readonly "$img" >/dev/null 2>&1; prc=$?
    out=$(timeout 60 "$UBTRFS_BIN" check "$img" 2>&1); urc=$?
    set -e
    first=$(grep -m1 -E '^ERROR|^ubtrfs: error' <<<"$out" | cut -c1-160 | tr '|' '/' || true)
    ok=1
    case $expect in
      pass) [[ $urc == 0 ]] || ok=0 ;;
      fail*) [[ $urc == 1 ]] || ok=0 ;;
    esac
    # fail+repair: ubtrfs's repair on a copy, judged by btrfs check after;
    # also where ubtrfs passes it with a warning that --repair mends.
    rep=-
    if [[ $expect == fail+repair ]] && { [[ $urc == 1 ]] || grep -q '^WARNING: .*--repair removes it' <<<"$out"; }; then
      cp --sparse=always "$img" "$WORK/repair.img"
      set +e
      rout=$(timeout 120 "$UBTRFS_BIN" check --repair "$WORK/repair.img" 2>&1); rrc=$?
      timeout 60 btrfs check --readonly "$WORK/repair.img" >/dev/null 2>&1; arc=$?
      after=$(timeout 60 "$UBTRFS_BIN" check "$WORK/repair.img" 2>&1); brc=$?
      # What --repair mends is gone after it, warnings included.
      [[ $brc == 0 ]] && grep -q '^WARNING: .*--repair removes it' <<<"$after" && brc=warned
      kern=""
      [[ $rrc == 0 && $arc == 0 ]] && kern=$(kernel_reads "$WORK/repair.img")
      set -e
      if [[ $rrc == 0 && $arc == 0 && $brc == 0 && -z $kern ]]; then rep="repaired, btrfs check clean, kernel reads it"
      elif [[ $rrc == 0 && $arc == 0 && $brc == 0 && $kern == "not mounted: not root" ]]; then rep="repaired, btrfs check clean (not mounted: not root)"
      elif grep -q 'nothing was written' <<<"$rout"; then rep="refused (not repairable yet)"
      else rep="**exit $rrc, btrfs check after: $arc, ubtrfs check after: $brc${kern:+, $kern}; restored image md5 $(md5sum <"$img" | cut -c1-32)**"; fail=1; fi
      rm -f "$WORK/repair.img"
    fi
    mark=""
    if [[ $ok == 0 ]]; then
      known=${KNOWN[$dir/$name]:-${KNOWN[$dir]:-}}
      if [[ -n $known ]]; then mark=" (known: $known)"; else mark=" **MISSED** (restored image md5 $(md5sum <"$img" | cut -c1-32))"; fail=1; fi
    fi
    printf '| %s | %s | %s | %s | %s%s | %s | %s |\n' "$dir" "$name" "$expect" "$prc" "$urc" "$mark" "$rep" "${first:-}"
  done
done < bench/fsck/expect.tsv

printf '\n| fuzz image | btrfs check | ubtrfs check | ubtrfs says first |\n|---|---|---|---|\n'
for f in "$src"/fuzz-tests/images/*.xz "$src"/fuzz-tests/images/*.img; do
  [[ -e $f ]] || continue
  name=$(basename "$f"); base=${name%%.*}
  selected "fuzz:$base" || continue
  img=$WORK/img/fuzz/$base.raw
  mkdir -p "$WORK/img/fuzz"
  restore "$f" "$img" || { printf '| %s | - | - | could not restore |\n' "$name"; continue; }
  set +e
  timeout 60 btrfs check --readonly "$img" >/dev/null 2>&1; prc=$?
  out=$(timeout 60 "$UBTRFS_BIN" check "$img" 2>&1); urc=$?
  set -e
  first=$(grep -m1 -E '^ERROR|^ubtrfs: error' <<<"$out" | cut -c1-160 | tr '|' '/' || true)
  mark=""
  if [[ $urc != 0 && $urc != 1 ]]; then mark=" **CRASH OR HANG**"; fail=1; fi
  printf '| %s | %s | %s%s | %s |\n' "$name" "$prc" "$urc" "$mark" "${first:-}"
done
exit $fail
