//! Read-ahead pushed into the kernel's page cache: when, where and how
//! much, for both mounts (each pushes in its own way: the read-only mount
//! at once, the read-write mount kept coherent with its writes,
//! [`crate::rw_push`]).
//!
//! A reader that jumps over holes with SEEK_DATA (cp, tar --sparse) reads
//! a page here and a page there: the kernel's readahead takes that for
//! random reads, and each page cache miss is a READ round trip. The btrfs
//! kernel driver's own readahead is as small then, but its reads reach a
//! disk (or loop device) that reads ahead itself. Here a small READ that
//! moves forward is answered and the window after it (256 KiB, doubling
//! to 4 MiB) is read and pushed into the page cache (FUSE_NOTIFY_STORE),
//! so the reader's next pages need no request at all.
//!
//! With the window in the page cache, lseek is all the mount hears of such
//! a reader. Once an lseek lands in the second half of what was pushed,
//! the next window is read and pushed by another thread
//! ([`ReadAhead::seeked_to`]), so the disk works while the reader is busy
//! in the pages it has, and its next page is there when it gets to it.

/// Reads up to this size count as small (the kernel's readahead is not
/// doing its work for them), and windows grow from and to these.
pub const SMALL_READ: u32 = 128 << 10;
pub const WINDOW_MIN: usize = 256 << 10;
pub const WINDOW_MAX: usize = 4 << 20;
/// The kernel's page size: pushes begin on a page (a partial page is not
/// marked up to date).
pub const PAGE: u64 = 4096;

/// A handle's read pattern: where its last READ ended, its window's size
/// (0: not moving forward), and the end of what has been pushed ahead of
/// it (landed or not).
#[derive(Default, Clone, Copy)]
pub struct ReadAhead {
    last_end: u64,
    size: usize,
    ahead: u64,
}

/// A window to read and push: `len` bytes from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: u64,
    pub len: usize,
}

impl ReadAhead {
    /// For a READ of `size` bytes at `offset`: the window to push beside
    /// its answer (None: just the request).
    ///
    /// A READ inside what was pushed already finds a push that has not
    /// landed yet (the reader outran the pushing thread): it is answered
    /// alone, and the next window goes out only once the reader is within
    /// half its last window of the end of the pushed part. Pushing from the
    /// request again would copy the same window into the page cache
    /// several times over (3.6 GiB pushed for a 1 GiB sparse file) and
    /// slow the pushing thread further.
    pub fn window(&self, offset: u64, size: u32) -> Option<Window> {
        // Forward: at or after the last READ's end, and at most a window
        // past it or past what was pushed (a window continued from the
        // pushed end lands beyond the last READ by more than its size).
        let gap = self.size.max(WINDOW_MIN) as u64;
        let forward =
            offset >= self.last_end && offset.saturating_sub(self.last_end.max(self.ahead)) <= gap;
        if size > SMALL_READ || !forward {
            return None;
        }
        let end = (offset + size as u64).next_multiple_of(PAGE);
        if end <= self.ahead {
            return self.near_the_end(offset);
        }
        Some(Window {
            start: end,
            len: self.next_len(),
        })
    }

    /// After a READ of `[offset, end)` that pushed `pushed`.
    pub fn read_to(&mut self, offset: u64, end: u64, pushed: Option<Window>) {
        let inside = offset >= self.last_end && end <= self.ahead;
        self.last_end = end;
        match pushed {
            Some(w) => self.pushing(w),
            None if inside => {}
            None => {
                self.size = 0;
                self.ahead = 0;
            }
        }
    }

    /// An lseek took the reader to `pos`: the next window, once `pos` is
    /// within half the last window of the end of what was pushed (counted
    /// as pushed from now on: the caller reads and pushes it). None when
    /// the reader is not moving forward through pushed windows, or the
    /// pushed part reaches `file_size`.
    pub fn seeked_to(&mut self, pos: u64, file_size: u64) -> Option<Window> {
        if self.size == 0 || pos < self.last_end || pos >= self.ahead || self.ahead >= file_size {
            return None;
        }
        let w = self.near_the_end(pos)?;
        self.pushing(w);
        Some(w)
    }

    /// The window after what was pushed, if the reader at `pos` is within
    /// half the last window of its end.
    fn near_the_end(&self, pos: u64) -> Option<Window> {
        (self.ahead - pos <= self.size as u64 / 2).then_some(Window {
            start: self.ahead,
            len: self.next_len(),
        })
    }

    fn next_len(&self) -> usize {
        (self.size * 2).clamp(WINDOW_MIN, WINDOW_MAX)
    }

    fn pushing(&mut self, w: Window) {
        self.size = w.len;
        self.ahead = w.start + w.len as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_grows_while_reads_move_forward() {
        let mut p = ReadAhead::default();
        let w = p.window(0, 4096);
        assert_eq!(
            w,
            Some(Window {
                start: 4096,
                len: WINDOW_MIN
            })
        );
        p.read_to(0, 4096, w);
        // Past what was pushed: the next window, twice the size.
        let at = 4096 + WINDOW_MIN as u64;
        let w = p.window(at, 4096);
        assert_eq!(
            w,
            Some(Window {
                start: at + 4096,
                len: 2 * WINDOW_MIN
            })
        );
        p.read_to(at, at + 4096, w);
        // A jump back is not forward; a large read is not small.
        assert_eq!(p.window(0, 4096), None);
        assert_eq!(p.window(at + 8192, SMALL_READ + 1), None);
        p.read_to(1 << 30, (1 << 30) + 4096, None);
        assert_eq!(
            p.window((1 << 30) + 8192, 4096),
            Some(Window {
                start: (1 << 30) + 12288,
                len: WINDOW_MIN
            })
        );
    }

    #[test]
    fn a_read_inside_a_push_in_flight_does_not_push_it_again() {
        let mut p = ReadAhead::default();
        let w = p.window(0, 4096);
        p.read_to(0, 4096, w);
        let ahead = 4096 + WINDOW_MIN as u64;
        // The push has not landed: the reader misses at 8 KiB and 64 KiB.
        assert_eq!(p.window(8192, 4096), None);
        p.read_to(8192, 12288, None);
        assert_eq!(p.window(65536, 4096), None);
        p.read_to(65536, 69632, None);
        // Within half the last window (128 KiB) of its end: the next
        // window goes out from where the last one ended.
        let w = p.window(ahead - 8192, 4096);
        assert_eq!(
            w,
            Some(Window {
                start: ahead,
                len: 2 * WINDOW_MIN
            })
        );
        p.read_to(ahead - 8192, ahead - 4096, w);
        assert_eq!(p.window(ahead + 4096, 4096), None);
        // That push landed: the next miss is where it ended, more than a
        // window past the last READ, and still forward.
        let end = ahead + 2 * WINDOW_MIN as u64;
        assert_eq!(
            p.window(end, 4096),
            Some(Window {
                start: end + 4096,
                len: 4 * WINDOW_MIN
            })
        );
    }

    #[test]
    fn lseek_past_half_a_window_reads_the_next_once() {
        let mut p = ReadAhead::default();
        let size = 1 << 30;
        // Nothing pushed yet: an lseek reads nothing ahead.
        assert_eq!(p.seeked_to(8192, size), None);
        let w = p.window(0, 4096);
        p.read_to(0, 4096, w);
        let ahead = 4096 + WINDOW_MIN as u64;
        // In the first half of the window: not yet.
        assert_eq!(p.seeked_to(8192, size), None);
        // In its second half: the next window, twice the size, once.
        let at = ahead - WINDOW_MIN as u64 / 2;
        assert_eq!(
            p.seeked_to(at, size),
            Some(Window {
                start: ahead,
                len: 2 * WINDOW_MIN
            })
        );
        assert_eq!(p.seeked_to(at + 4096, size), None);
        // A READ inside it now is answered alone (its push is in flight).
        assert_eq!(p.window(ahead + 4096, 4096), None);
        // The reader goes on by lseek: half way through the second
        // window, the third.
        let ahead2 = ahead + 2 * WINDOW_MIN as u64;
        assert_eq!(
            p.seeked_to(ahead2 - WINDOW_MIN as u64, size),
            Some(Window {
                start: ahead2,
                len: 4 * WINDOW_MIN
            })
        );
        // Not past the end of the file, nor from behind the last READ.
        let mut q = ReadAhead::default();
        let w = q.window(0, 4096);
        q.read_to(0, 4096, w);
        assert_eq!(q.seeked_to(ahead - 4096, ahead), None);
        q.read_to(65536, 69632, None);
        assert_eq!(q.seeked_to(8192, size), None);
    }
}
