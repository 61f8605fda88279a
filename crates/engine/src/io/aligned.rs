//! Memory aligned for O_DIRECT, and a few large buffers of it kept for
//! reuse. mkfs reads file data into these (its pieces go to the image
//! with O_DIRECT from where they were read), and [`super::dev::FileDev`]
//! copies unaligned file data through them: a buffer already faulted in
//! costs less than a fresh one, whose every page is faulted and zeroed.

use std::sync::Mutex;

/// What O_DIRECT asks of the memory, the offset and the length: the
/// logical block size of every device ubtrfs writes (4 KiB covers 512 and
/// 4096).
pub const DIRECT_ALIGN: usize = 4096;

/// Bytes whose start is aligned to 4 KiB (file data goes to the image with
/// O_DIRECT where it can, which wants aligned memory).
pub struct AlignedBuf {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

/// Large buffers given back once written, for the next writes: a fresh
/// 32 MiB buffer costs as many page faults and zeroed pages as a read
/// into it costs copies.
#[derive(Debug, Default)]
pub struct Spare(Mutex<Vec<AlignedBuf>>);

/// Buffers kept for reuse at most, and the smallest kept.
const SPARE_MAX: usize = 2;
const SPARE_MIN: usize = 1 << 20;

impl Spare {
    /// A buffer of `len` bytes, zero from `want` on (the caller fills the
    /// first `want`).
    pub fn take(&self, len: usize, want: usize) -> AlignedBuf {
        if len >= SPARE_MIN {
            let mut spare = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = spare.iter().position(|b| b.capacity() >= len) {
                let mut b = spare.swap_remove(i);
                drop(spare);
                b.len = len;
                b[want..].fill(0);
                return b;
            }
        }
        AlignedBuf::zeroed(len)
    }

    /// Keeps `b` for a later piece, if it is worth keeping.
    pub fn give(&self, b: AlignedBuf) {
        if b.off != usize::MAX && b.capacity() >= SPARE_MIN {
            let mut spare = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if spare.len() < SPARE_MAX {
                spare.push(b);
            }
        }
    }
}

impl AlignedBuf {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> AlignedBuf {
        let v = vec![0u8; len + DIRECT_ALIGN];
        let off = v.as_ptr().align_offset(DIRECT_ALIGN);
        AlignedBuf { v, off, len }
    }

    /// `v` as it is (not aligned: small data, written buffered; never
    /// reused).
    pub fn from_vec(v: Vec<u8>) -> AlignedBuf {
        let len = v.len();
        AlignedBuf {
            v,
            off: usize::MAX,
            len,
        }
    }

    fn start(&self) -> usize {
        if self.off == usize::MAX {
            0
        } else {
            self.off
        }
    }

    /// Bytes it can hold from its aligned start.
    fn capacity(&self) -> usize {
        self.v.len() - self.start()
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let o = self.start();
        &self.v[o..o + self.len]
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        let o = self.start();
        &mut self.v[o..o + self.len]
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}
