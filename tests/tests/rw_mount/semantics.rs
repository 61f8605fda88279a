//! (o) What root's mount allows, as the kernel's btrfs.

use super::*;

// ------------------------------------------------------------------ (o)

/// The steps of (o), run with the mount as the working directory; one
/// line per step: "ok: STEP" or "fail: STEP".
const KERNEL_SEMANTICS: &str = r#"
r() { if "$@" >/dev/null 2>&1; then echo "ok: $*"; else echo "fail: $*"; fi; }
mkdir d && touch d/f0 && chattr +a d
r touch d/f
r mkdir d/sub
r ln -s f d/l
r ln d/f d/h
r mknod d/p p
r rm d/f0
r mv d/l d/l2
r mv d/f ../f
r rmdir d/sub
touch g && chattr +a g
r touch g
r touch -d @0 g
r chmod 600 g
r truncate -s 0 g
r sh -c 'echo x >> g'
r sh -c 'echo x > g'
chattr -a g d
r mknod nulldev c 1 3
r head -c 1 nulldev
chmod 755 .
r setpriv --reuid=tests --regid=tests --clear-groups ls .
py() { python3 -c "import errno, os, sys
try:
    $1
except OSError as e: print(errno.errorcode[e.errno])"; }
mkdir d1 d2
py 'fd = os.open("d2", os.O_RDONLY); os.rename("d1", "d2"); print("nlink", os.fstat(fd).st_nlink)'
touch x
py 'os.setxattr("x", "user.big", b"a" * 16220); print("16220 ok")'
py 'os.setxattr("x", "user.big", b"a" * 16221)'
py 'os.setxattr("x", "user.big", b"a" * 65536)'
touch s && chown tests:root s && chmod 2755 s
setpriv --reuid=tests --regid=tests --clear-groups setfacl -m u::rwx,g::rwx,o::rwx s
stat -c %A s
py 'import time; open("at", "w").write("a"); a = [os.stat("at").st_atime_ns]; time.sleep(0.05); open("at").read(); a.append(os.stat("at").st_atime_ns); time.sleep(0.05); open("at").read(); a.append(os.stat("at").st_atime_ns); print("atime after reads", a[1] > a[0], a[2] > a[1])'
py 'import ctypes, mmap; open("rr", "wb").write(os.urandom(1 << 20)); f = open("rr", "rb"); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY); v = (ctypes.c_ubyte * 256)(); ctypes.CDLL(None).mincore(ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(m))), ctypes.c_size_t(1 << 20), v); print("pages just written cached at the next open", all(b & 1 for b in v))'
py 'import time; os.mkdir("ad"); open("ad/x", "w").close(); a = os.stat("ad").st_atime_ns; time.sleep(0.05); os.listdir("ad"); print("atime after listing", os.stat("ad").st_atime_ns > a)'
py 'import time; open("c", "w").close(); a = os.stat("c").st_ctime_ns; time.sleep(0.05); os.system("chattr +A c"); print("ctime after chattr", os.stat("c").st_ctime_ns > a)'
xfs_io -c 'chattr +x' c 2>&1 | sed 's/.*: //'
python3 -c 'import os, shutil, subprocess, time
shutil.copy("/usr/bin/sleep", "tx"); os.chmod("tx", 0o755)
p = subprocess.Popen(["./tx", "5"]); time.sleep(0.3)
try:
    os.close(os.open("tx", os.O_RDONLY | os.O_TRUNC)); r = "opened"
except OSError as e:
    r = os.strerror(e.errno)
time.sleep(0.2)
print("O_TRUNC open of a running program:", r, "size kept", os.stat("tx").st_size == os.stat("/usr/bin/sleep").st_size, "running", p.poll() is None)
p.kill(); p.wait()'
remount() { mount -o remount,"$1" "$PWD"; }
exec 3>>c
r remount ro
exec 3>&-
r remount ro
r touch rm
r cat c
r remount rw
r touch rm
mkdir rd && for i in $(seq 3000); do : > rd/$i; done
python3 -c 'import os
n = 0
for e in os.scandir("rd"):
    n += 1
    if n > 9000: break
    os.rename("rd/" + e.name, "rd/" + e.name + "_")
print("readdir while renaming ends", n <= 9000)'
python3 -c 'import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def linkat(fd, name):
    r = libc.linkat(-100, f"/proc/self/fd/{fd}".encode(), -100, name.encode(), 0x400)
    return "ok" if r == 0 else os.strerror(ctypes.get_errno())
fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
os.write(fd, b"tmp")
print("tmpfile nlink", os.fstat(fd).st_nlink)
print("link", linkat(fd, "named"), "nlink", os.fstat(fd).st_nlink, open("named").read())
fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600)
os.write(fd, b"gone")
os.fsync(fd)
os.close(fd)
fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_EXCL, 0o600)
print("O_EXCL link", linkat(fd, "excl"))'
python3 -c 'import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
open("fh", "w").write("handle")
h = ctypes.create_string_buffer(8 + 128)
ctypes.memmove(h, (128).to_bytes(4, "little"), 4)
mnt = ctypes.c_int()
print("handle", libc.name_to_handle_at(-100, b"fh", h, ctypes.byref(mnt), 0))
def by_handle():
    open("/proc/sys/vm/drop_caches", "w").write("3")
    fd = libc.open_by_handle_at(os.open(".", os.O_RDONLY), h, os.O_RDONLY)
    return os.read(fd, 10) if fd >= 0 else os.strerror(ctypes.get_errno())
print("open by handle", by_handle())'
mkdir w && touch w/foo w/bar
python3 -c 'import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for a, b, f in [("foo", "bar", 4), ("bar", "baz", 1), ("foo", "baz", 2), ("foo", "baz", 6)]:
    r = libc.renameat2(-100, ("w/" + a).encode(), -100, ("w/" + b).encode(), f)
    print("renameat2", a, b, f, "ok" if r == 0 else os.strerror(ctypes.get_errno()))'
stat -c '%n %F %t:%T %a' w/*
xfs_io -c 'label -s semantics' . && xfs_io -c label .
setpriv --reuid=tests --regid=tests --clear-groups xfs_io -c 'label -s no' . 2>&1 | sed 's/.*: //'
as_tests() { setpriv --reuid=tests --regid=tests --clear-groups "$@" >/dev/null 2>&1; }
for m in 6666 6676 6766; do
  for cmd in 'falloc 0 64k' 'fpunch 0 4k' 'fzero 0 4k' 'pwrite 0 4k'; do
    rm -f k && xfs_io -f -c 'pwrite 0 64k' k >/dev/null && chmod $m k
    as_tests xfs_io -c "$cmd" k
    echo "$m $cmd: $(stat -c %a k)"
  done
  rm -f k2 && touch k2 && chmod $m k2 && as_tests xfs_io -d -c 'pwrite 0 4k' k2
  echo "$m direct write: $(stat -c %a k2)"
  rm -f k2 && touch k2 && chmod $m k2 && xfs_io -d -c 'pwrite 0 4k' k2 >/dev/null
  echo "$m direct write by root: $(stat -c %a k2)"
done
for m in 6777 6767; do
  rm -f t && echo a > t && chmod $m t && as_tests sh -c ': > t'
  echo "$m O_TRUNC open by a user: $(stat -c %a t)"
  rm -f t && echo a > t && chmod $m t && as_tests truncate -s 1 t
  echo "$m truncate by a user: $(stat -c %a t)"
  rm -f t && echo a > t && chmod $m t && chown tests t
  echo "$m chown by root: $(stat -c %a t)"
done
stat -c 'root inode %i' .
mkdir dots && ls -ai dots | awk '$2 == ".." {print "root as ..", $1}'
caps() { getcap "$1" | awk '{print $2}'; }
rm -f c1 && echo a > c1 && echo b >> c1 && setcap cap_net_raw+ep c1 && echo c >> c1
echo "capabilities after a write: $(caps c1)"
rm -f c1 && echo a > c1 && setcap cap_net_raw+ep c1 && truncate -s 0 c1
echo "capabilities after a truncate: $(caps c1)"
rm -f c1 && echo a > c1 && setcap cap_net_raw+ep c1 && chown tests c1
echo "capabilities after a chown: $(caps c1)"
blocks() { echo "$1 blocks $(stat -c %b "$2")"; }
head -c 10000 /dev/zero > b1 && blocks "new, dirty" b1
fallocate -l 64K b2 && dd if=/dev/zero of=b2 bs=4K count=1 conv=notrunc status=none && blocks "preallocated, written" b2
dd if=/dev/zero of=b3 bs=4K count=1 seek=256 status=none && blocks "sparse, dirty" b3
truncate -s 1M b4 && blocks "truncated up" b4 && chmod 600 b4 && blocks "then chmod" b4
sync && dd if=/dev/zero of=b1 bs=4K count=1 seek=16 conv=notrunc status=none && blocks "synced, one more block" b1
"#;

pub(super) fn kernel_semantics_case(w: Writer, base: &Path) -> Result<String, String> {
    let (_dir, image, mnt, m) = fresh_512m(w, base)?;
    let out = run(Command::new("sh")
        .args(["-c", KERNEL_SEMANTICS])
        .current_dir(&mnt));
    let fin = m.finish();
    let out = out.map_err(|e| format!("the script on the {} mount: {e}", w.name()))?;
    fin.map_err(|e| format!("unmount: {e}"))?;
    check(
        &image,
        &format!("after the script on the {} mount", w.name()),
    )?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
pub(super) fn root_mount_allows_what_the_kernels_does() {
    let test = fn_name!();
    skip_unless!(user_available, "tests");
    one_case(test, Writer::Ubtrfs, |base| {
        if !ready(test, Writer::Kernel) {
            return Ok(String::new());
        }
        let kernel = kernel_semantics_case(Writer::Kernel, base)?;
        let ours = kernel_semantics_case(Writer::Ubtrfs, base)?;
        if kernel != ours {
            return Err(format!(
                "the kernel's answers:\n{kernel}\nubtrfs's:\n{ours}"
            ));
        }
        Ok(format!(
            "{} steps answered as the kernel's",
            kernel.lines().count()
        ))
    });
}
