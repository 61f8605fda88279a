//! The /dev/fuse transport (the kernel's fs/fuse/dev.c): mounting (mount(2)
//! as root, fusermount3 otherwise), the INIT handshake, serving threads
//! that read requests and write replies, and notifications.

use super::abi::{self, bytes, read, InHeader, InitIn, InitOut, OutHeader};
use super::dispatch::{dispatch, guarded, Acl, Conn};
use super::filesystem::{FuseFs, KernelConfig, Request, MAX_WRITE};
use super::readers::Readers;
use super::reply::{Sender, Transport};
use super::types::{INodeNo, InitFlags};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;

/// An open /dev/fuse connection.
pub(crate) struct DevChannel {
    fd: OwnedFd,
}

impl DevChannel {
    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Writes one message (header then the parts) in one writev.
    fn write(&self, unique: u64, error: i32, parts: &[&[u8]]) -> io::Result<()> {
        let len = std::mem::size_of::<OutHeader>() + parts.iter().map(|p| p.len()).sum::<usize>();
        let oh = OutHeader {
            len: len as u32,
            error,
            unique,
        };
        let mut iov = Vec::with_capacity(parts.len() + 1);
        for p in std::iter::once(bytes(&oh)).chain(parts.iter().copied()) {
            if !p.is_empty() {
                iov.push(libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: p.len(),
                });
            }
        }
        // SAFETY: the iovecs point at live buffers of the given lengths.
        let r = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), iov.len() as i32) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Transport for DevChannel {
    fn send(&self, _slot: usize, unique: u64, error: i32, parts: &[&[u8]]) {
        match self.write(unique, error, parts) {
            Ok(()) => {}
            // The request was interrupted and is gone: nothing to answer.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            // Unmounted meanwhile.
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {}
            Err(e) => crate::logging::error(&format!("replying to request {unique}: {e}")),
        }
    }
}

/// Sends notifications (FUSE_NOTIFY_STORE, FUSE_NOTIFY_INVAL_INODE) to
/// the kernel.
#[derive(Clone)]
pub struct Notifier(Arc<DevChannel>);

impl Notifier {
    /// Puts `data` into the kernel's page cache of `node` at `offset`,
    /// extending its size if the data ends past it.
    pub fn store(&self, node: INodeNo, offset: u64, data: &[u8]) -> io::Result<()> {
        let out = abi::NotifyStoreOut {
            nodeid: node.0,
            offset,
            size: data.len() as u32,
            padding: 0,
        };
        self.0
            .write(0, abi::FUSE_NOTIFY_STORE, &[bytes(&out), data])
    }

    /// [`Notifier::store`] of `data` in notifications of at most 1 MiB,
    /// stopping at the first that fails (the kernel forgot the node: only
    /// read-ahead is lost).
    pub fn store_all(&self, node: INodeNo, offset: u64, data: &[u8]) {
        for (i, piece) in data.chunks(1 << 20).enumerate() {
            if self.store(node, offset + (i << 20) as u64, piece).is_err() {
                break;
            }
        }
    }

    /// Drops the kernel's cached pages of `node` over `[offset, offset +
    /// len)`, and its cached attributes. Waits for the page locks of
    /// READs in flight: never sent from a thread those READs need.
    pub fn inval_range(&self, node: INodeNo, offset: u64, len: u64) -> io::Result<()> {
        let out = abi::NotifyInvalInodeOut {
            ino: node.0,
            off: offset.min(i64::MAX as u64) as i64,
            len: len.min(i64::MAX as u64) as i64,
        };
        self.0
            .write(0, abi::FUSE_NOTIFY_INVAL_INODE, &[bytes(&out)])
    }

    /// Drops the kernel's cached attributes of `node` (its pages stay):
    /// after a change the kernel did not make through SETATTR, such as
    /// an ioctl's. Takes no lock in the kernel, so a request handler may
    /// send it.
    pub fn inval_attr(&self, node: INodeNo) -> io::Result<()> {
        let out = abi::NotifyInvalInodeOut {
            ino: node.0,
            off: -1,
            len: 0,
        };
        self.0
            .write(0, abi::FUSE_NOTIFY_INVAL_INODE, &[bytes(&out)])
    }
}

impl Notifier {
    /// Drops the kernel's cached entry `name` of directory `parent` (and
    /// what is mounted on it): after a name the kernel did not change
    /// itself came or went, such as a subvolume an ioctl deleted. Takes
    /// the directory's lock in the kernel: never sent while a request
    /// that holds it waits for this thread.
    pub fn inval_entry(&self, parent: INodeNo, name: &[u8]) -> io::Result<()> {
        let out = abi::NotifyInvalEntryOut {
            parent: parent.0,
            namelen: name.len() as u32,
            flags: 0,
        };
        self.0
            .write(0, abi::FUSE_NOTIFY_INVAL_ENTRY, &[bytes(&out), name, &[0]])
    }
}

/// What to do after INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Negotiated {
    /// Serve requests from /dev/fuse.
    Dev,
    /// The kernel agreed to FUSE over io_uring: register the rings.
    Uring,
}

/// A mounted connection after INIT.
pub struct Session<F: FuseFs> {
    pub(crate) fs: Arc<F>,
    pub(crate) dev: Arc<DevChannel>,
    pub(crate) conn: Conn,
    pub(crate) config: KernelConfig,
    pub(crate) negotiated: Negotiated,
}

/// Request buffer: the largest write plus its header and argument.
const BUF: usize = MAX_WRITE as usize + 8192;

impl<F: FuseFs> Session<F> {
    /// Reads INIT from `fd`, lets `fs` choose within what the kernel
    /// offers, and answers. With `want_uring`, asks for FUSE_OVER_IO_URING
    /// when offered (see [`Session::negotiated`]).
    pub fn new(mut fs: F, fd: OwnedFd, acl: Acl, want_uring: bool) -> io::Result<Session<F>> {
        let dev = Arc::new(DevChannel { fd });
        let mut buf = vec![0u8; BUF];
        let n = loop {
            match read_request(dev.raw(), &mut buf) {
                Ok(n) => break n,
                Err(e) if retry(&e) => continue,
                Err(e) => return Err(e),
            }
        };
        let h = read::<InHeader>(&buf[..n])
            .ok_or_else(|| io::Error::other(format!("INIT: short message of {n} bytes")))?;
        if h.opcode != abi::FUSE_INIT {
            return Err(io::Error::other(format!(
                "expected INIT, got opcode {}",
                h.opcode
            )));
        }
        let body = &buf[std::mem::size_of::<InHeader>()..n];
        // Kernels before 7.36 send a 16-byte fuse_init_in: zero-pad it.
        let mut padded = [0u8; 64];
        let k = body.len().min(64);
        padded[..k].copy_from_slice(&body[..k]);
        let init = read::<InitIn>(&padded).unwrap_or_default();
        if k < 16 || init.major != abi::KERNEL_VERSION || init.minor < 12 {
            dev.send(0, h.unique, -libc::EPROTO, &[]);
            return Err(io::Error::other(format!(
                "kernel FUSE protocol {}.{} not supported (7.12 or later is)",
                init.major, init.minor
            )));
        }
        let mut offered = init.flags as u64;
        if offered & abi::FUSE_INIT_EXT != 0 {
            offered |= (init.flags2 as u64) << 32;
        }
        let mut config =
            KernelConfig::new(InitFlags::from_bits_retain(offered), init.max_readahead);
        let req = Request {
            unique: h.unique,
            uid: h.uid,
            gid: h.gid,
            pid: h.pid,
        };
        if let Err(e) = fs.init(&req, &mut config) {
            dev.send(0, h.unique, -libc::EIO, &[]);
            return Err(e);
        }
        let uring = want_uring && init.minor >= 42 && offered & abi::FUSE_OVER_IO_URING != 0;
        let mut flags = config.requested.bits() | abi::FUSE_INIT_EXT;
        if acl == Acl::All {
            // Idmapped mounts (mount_setattr, as for the kernel's btrfs):
            // the kernel checks permissions (default_permissions) and maps
            // the ids a creating request carries; nothing here reads the
            // ids of another request but the allow_root check, which
            // this mount does not make.
            flags |= abi::FUSE_ALLOW_IDMAP;
        }
        if uring {
            flags |= abi::FUSE_OVER_IO_URING;
        }
        let flags = flags & offered;
        let out = InitOut {
            major: abi::KERNEL_VERSION,
            minor: init.minor.min(abi::KERNEL_MINOR_VERSION),
            max_readahead: config.max_readahead,
            flags: flags as u32,
            max_background: config.max_background,
            congestion_threshold: config.congestion_threshold(),
            max_write: config.max_write,
            time_gran: config.time_gran,
            max_pages: config.max_pages(),
            flags2: (flags >> 32) as u32,
            ..InitOut::default()
        };
        // Before 7.23 the reply was 24 bytes.
        let reply = if init.minor < 23 {
            &bytes(&out)[..24]
        } else {
            bytes(&out)
        };
        dev.write(h.unique, 0, &[reply])?;
        // SAFETY: getuid has no preconditions.
        let owner = unsafe { libc::getuid() };
        Ok(Session {
            fs: Arc::new(fs),
            dev,
            conn: Conn {
                acl,
                owner,
                setxattr_ext: flags & abi::FUSE_SETXATTR_EXT != 0,
            },
            config,
            negotiated: if uring {
                Negotiated::Uring
            } else {
                Negotiated::Dev
            },
        })
    }

    /// Whether the kernel agreed to FUSE over io_uring.
    pub fn uring(&self) -> bool {
        self.negotiated == Negotiated::Uring
    }

    /// Registers the io_uring queues (after INIT agreed to them): from
    /// then on requests arrive there, and /dev/fuse carries only FORGET,
    /// INTERRUPT and our notifications.
    pub fn start_uring(&self) -> io::Result<super::dev_uring::Rings> {
        // What the kernel requires of each entry's payload buffer:
        // max(8 KiB, max_write, max_pages pages) (dev_uring.c).
        let payload = (self.config.max_write as usize)
            .max(self.config.max_pages() as usize * super::filesystem::page_size())
            .max(8192);
        super::dev_uring::start(self.fs.clone(), self.dev.raw(), self.conn, payload)
    }

    pub fn notifier(&self) -> Notifier {
        Notifier(self.dev.clone())
    }

    /// Serves requests from /dev/fuse on `threads` threads (this one
    /// among them) until the connection ends (unmount).
    pub fn run_dev(&self, threads: usize) -> io::Result<()> {
        let readers = Arc::new(Readers::default());
        let mut handles = Vec::new();
        for i in 1..threads.max(1) {
            let (fs, dev, conn) = (self.fs.clone(), self.dev.clone(), self.conn);
            let readers = readers.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("fuse-dev-{i}"))
                    .spawn(move || serve_dev(&*fs, &dev, conn, &readers))?,
            );
        }
        let res = serve_dev(&*self.fs, &self.dev, self.conn, &readers);
        for h in handles {
            let _ = h.join();
        }
        res
    }
}

fn retry(e: &io::Error) -> bool {
    // ENOENT: the request was interrupted before we read it.
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::EINTR | libc::EAGAIN)
    )
}

fn read_request(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is a live, writable buffer of buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// One serving thread: read (in its turn, [`Readers`]), dispatch, until
/// the device goes away.
fn serve_dev<F: FuseFs>(
    fs: &F,
    dev: &Arc<DevChannel>,
    conn: Conn,
    readers: &Readers,
) -> io::Result<()> {
    let mut buf = vec![0u8; BUF];
    loop {
        if !readers.enter() {
            return Ok(());
        }
        let res = read_request(dev.raw(), &mut buf);
        // Before anything else: a thread that ends here wakes another in
        // its place, which meets the same error and ends in turn.
        readers.left();
        let n = match res {
            Ok(n) => n,
            Err(e) if retry(&e) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
                readers.end();
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let msg = &buf[..n];
        let Some(h) = read::<InHeader>(msg) else {
            crate::logging::warn(&format!("/dev/fuse: short request of {n} bytes"));
            continue;
        };
        let body = &msg[std::mem::size_of::<InHeader>()..];
        let split = conn.arg_size(h.opcode).min(body.len());
        let (arg, data) = body.split_at(split);
        let s = Sender {
            transport: dev.clone(),
            slot: 0,
            unique: h.unique,
        };
        guarded(|| dispatch(fs, conn, &h, arg, data, s));
    }
}

/// Mounts through fusermount3 (not root): it opens /dev/fuse, mounts, and
/// passes the descriptor back over a socket (_FUSE_COMMFD), as libfuse's
/// fuse_mount does.
pub fn fusermount(mountpoint: &Path, options: &str) -> io::Result<OwnedFd> {
    let mut sv = [0; 2];
    // SAFETY: socketpair fills two descriptors we then own.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors from socketpair.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
    let child_fd = theirs.as_raw_fd();
    let mut last = None;
    for bin in ["fusermount3", "fusermount"] {
        let mut c = std::process::Command::new(bin);
        c.arg("-o")
            .arg(options)
            .arg("--")
            .arg(mountpoint)
            .env("_FUSE_COMMFD", child_fd.to_string());
        // SAFETY: in the child between fork and exec only fcntl, which is
        // async-signal-safe, runs: it lets the socket survive exec.
        unsafe {
            use std::os::unix::process::CommandExt;
            c.pre_exec(move || {
                if libc::fcntl(child_fd, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        match c.status() {
            Ok(st) if st.success() => {
                drop(theirs);
                return receive_fd(&ours);
            }
            Ok(st) => last = Some(io::Error::other(format!("{bin} -o {options}: {st}"))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                last = Some(io::Error::other(format!("{bin}: not found")))
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("fusermount3 failed")))
}

/// Receives one descriptor sent with SCM_RIGHTS.
fn receive_fd(sock: &OwnedFd) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one cmsghdr with one int, aligned as cmsghdr requires.
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain data; zeroed is a valid empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    // SAFETY: msg points at live buffers described by their lengths.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CMSG_FIRSTHDR/CMSG_DATA walk the control buffer recvmsg
    // filled, within msg_controllen.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_level != libc::SOL_SOCKET || (*c).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::other("fusermount3 sent no descriptor"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}
