//! A reader that reads ahead on its own thread: a receive reading its
//! stream from a cold file (or a pipe) waits for the disk between
//! commands otherwise, with one of the two jobs idle at any time.

use std::io::{self, Read};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};

/// Reads `inner` in chunks on a thread, up to `depth` chunks ahead.
pub struct ReadAhead {
    chunks: Receiver<io::Result<Vec<u8>>>,
    /// Chunks read out go back to the thread to be filled again (fresh
    /// ones would be pages mapped and zeroed each time).
    spent: Sender<Vec<u8>>,
    cur: Vec<u8>,
    pos: usize,
    done: bool,
}

impl ReadAhead {
    pub fn new(mut inner: impl Read + Send + 'static, chunk: usize, depth: usize) -> Self {
        let (tx, chunks) = sync_channel(depth);
        let (spent, recycled) = channel::<Vec<u8>>();
        std::thread::spawn(move || loop {
            let mut buf = recycled.try_recv().unwrap_or_default();
            buf.resize(chunk, 0);
            let mut n = 0;
            let res = loop {
                match inner.read(&mut buf[n..]) {
                    Ok(0) => break Ok(()),
                    Ok(k) => {
                        n += k;
                        if n == chunk {
                            break Ok(());
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            buf.truncate(n);
            // What was read before an error or the end goes first; a
            // dropped reader (the receive stopped) ends the thread.
            if n > 0 && tx.send(Ok(buf)).is_err() {
                return;
            }
            match res {
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
                Ok(()) if n < chunk => return,
                Ok(()) => {}
            }
        });
        ReadAhead {
            chunks,
            spent,
            cur: Vec::new(),
            pos: 0,
            done: false,
        }
    }
}

impl Read for ReadAhead {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.cur.len() {
            if self.done || out.is_empty() {
                return Ok(0);
            }
            match self.chunks.recv() {
                Ok(Ok(b)) => {
                    let old = std::mem::replace(&mut self.cur, b);
                    // The thread may have ended: then nobody wants it.
                    let _ = self.spent.send(old);
                    self.pos = 0;
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                // The thread ended: the end of the input.
                Err(_) => {
                    self.done = true;
                    return Ok(0);
                }
            }
        }
        let n = out.len().min(self.cur.len() - self.pos);
        out[..n].copy_from_slice(&self.cur[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_everything_in_order_whatever_the_chunk_size() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for chunk in [1, 7, 4096, 1 << 20] {
            let mut r = ReadAhead::new(io::Cursor::new(data.clone()), chunk, 3);
            let mut got = Vec::new();
            let mut buf = [0u8; 333];
            loop {
                let n = r.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            assert_eq!(got, data);
        }
    }

    #[test]
    fn an_error_comes_after_the_bytes_before_it() {
        struct Failing(usize);
        impl Read for Failing {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                if self.0 == 0 {
                    return Err(io::Error::other("bad sector"));
                }
                let n = out.len().min(self.0);
                out[..n].fill(1);
                self.0 -= n;
                Ok(n)
            }
        }
        let mut r = ReadAhead::new(Failing(10), 4, 2);
        let mut got = Vec::new();
        let err = r.read_to_end(&mut got).unwrap_err();
        assert_eq!(got, vec![1u8; 10]);
        assert_eq!(err.to_string(), "bad sector");
    }
}
