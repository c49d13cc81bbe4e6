//! A line of libdmem's output assembled on the stack and written to a descriptor: no
//! allocation, no stdio, no locks beyond the kernel's, since it runs inside malloc and in signal
//! handlers. Which descriptor is `sink.rs`'s job.

const BUF: usize = 512;

/// A line being assembled on the stack for one file descriptor. Output past the buffer is
/// flushed in pieces, so nothing is lost, only split across writes.
pub struct Out {
    fd: i32,
    len: usize,
    buf: [u8; BUF],
}

impl Out {
    pub fn to_fd(fd: i32) -> Out {
        Out {
            fd,
            len: 0,
            buf: [0; BUF],
        }
    }

    pub fn bytes(&mut self, b: &[u8]) -> &mut Out {
        for chunk in b.chunks(BUF) {
            if self.len + chunk.len() > BUF {
                self.flush();
            }
            self.buf[self.len..self.len + chunk.len()].copy_from_slice(chunk);
            self.len += chunk.len();
        }
        self
    }

    pub fn str(&mut self, s: &str) -> &mut Out {
        self.bytes(s.as_bytes())
    }

    /// Input echoed back (an option, a path), its control characters made visible.
    pub fn escaped(&mut self, b: &[u8]) -> &mut Out {
        crate::analysis::escape::escape(b, &mut |piece| {
            self.bytes(piece);
        });
        self
    }

    pub fn dec(&mut self, v: u64) -> &mut Out {
        self.bytes(decimal(v, &mut [0; 20]))
    }

    pub fn hex(&mut self, v: usize) -> &mut Out {
        let mut digits = [0u8; 18];
        let mut i = digits.len();
        let mut v = v;
        loop {
            i -= 1;
            digits[i] = b"0123456789abcdef"[v & 15];
            v >>= 4;
            if v == 0 {
                break;
            }
        }
        i -= 2;
        digits[i] = b'0';
        digits[i + 1] = b'x';
        self.bytes(&digits[i..])
    }

    /// A pointer the way glibc's `%p` prints it: `(nil)` for null.
    pub fn ptr(&mut self, p: *const u8) -> &mut Out {
        if p.is_null() {
            self.str("(nil)")
        } else {
            self.hex(p as usize)
        }
    }

    pub fn flush(&mut self) {
        if self.fd >= 0 {
            write_all(self.fd, &self.buf[..self.len]);
        }
        self.len = 0;
    }
}

/// `v` in decimal, written into the end of `buf`, without allocating.
pub fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[i..]
}

impl Drop for Out {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Writes all of `buf` to `fd` with the raw system call: libc's `write` is a cancellation point,
/// and malloc, which traces through here, must not be one.
pub fn write_all(fd: i32, buf: &[u8]) {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: buf[done..] is initialised memory we own; write only reads it.
        let n = unsafe { libc::syscall(libc::SYS_write, fd, buf[done..].as_ptr(), buf.len() - done) };
        // SAFETY: errno of the calling thread, just set by the failed call.
        if n < 0 && unsafe { *libc::__errno_location() } == libc::EINTR {
            continue;
        }
        if n <= 0 {
            break;
        }
        done += n as usize;
    }
}
