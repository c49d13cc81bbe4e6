//! A line of libdmem's output assembled on the stack and written to a descriptor: no
//! allocation, no stdio, no locks beyond the kernel's, since it runs inside malloc and in signal
//! handlers. Which descriptor is `sink.rs`'s job, and so is where a line goes when its
//! descriptor cannot take it. A write leaves errno as it was, and a write to a pipe whose reader
//! has gone raises no SIGPIPE: neither is the program's doing.

const BUF: usize = 512;

/// What the chooser of a descriptor (`sink.rs`) knows that a write needs: whether the descriptor
/// may raise SIGPIPE, and where the rest of a line goes when a write to it fails (None: nowhere).
/// It is handed down with the descriptor, so this file imports nothing of the sinks.
pub struct Route {
    pub may_be_a_pipe: fn(fd: i32) -> bool,
    pub write_failed: fn(fd: i32, errno: i32) -> Option<i32>,
}

/// A line being assembled on the stack for one file descriptor. Output past the buffer is
/// flushed in pieces, so nothing is lost, only split across writes.
pub struct Out {
    fd: i32,
    route: &'static Route,
    len: usize,
    buf: [u8; BUF],
}

impl Out {
    pub fn to_fd(fd: i32, route: &'static Route) -> Out {
        Out {
            fd,
            route,
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
            let pipe = (self.route.may_be_a_pipe)(self.fd);
            if let Err(failed) = write_all(self.fd, &self.buf[..self.len], pipe) {
                // The sink says once why, and names where the rest goes (standard error), if
                // anywhere.
                match (self.route.write_failed)(self.fd, failed.errno) {
                    Some(fd) => {
                        self.fd = fd;
                        let pipe = (self.route.may_be_a_pipe)(fd);
                        let _ = write_all(fd, &self.buf[failed.written..self.len], pipe);
                    }
                    None => self.fd = -1,
                }
            }
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

/// A write that stopped short: the errno it failed with and how much went out before.
pub struct Failed {
    pub errno: i32,
    pub written: usize,
}

/// Writes all of `buf` to `fd` with the raw system call: libc's `write` is a cancellation point,
/// and malloc, which traces through here, must not be one. errno is left as it was.
pub fn write_all(fd: i32, buf: &[u8], may_be_a_pipe: bool) -> Result<(), Failed> {
    let _errno = crate::errno::Keep::new();
    let mut pipe = NoSigpipe::new(may_be_a_pipe);
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: buf[done..] is initialised memory we own; write only reads it.
        let n = unsafe { libc::syscall(libc::SYS_write, fd, buf[done..].as_ptr(), buf.len() - done) };
        if n > 0 {
            done += n as usize;
            continue;
        }
        let errno = if n == 0 { libc::EIO } else { crate::errno::get() };
        if errno == libc::EINTR {
            continue;
        }
        if errno == libc::EPIPE {
            pipe.swallow();
        }
        return Err(Failed { errno, written: done });
    }
    Ok(())
}

/// SIGPIPE blocked on this thread around a write to what may be a pipe or a socket, and the one
/// our write raised taken back, so the program is neither killed by our write nor handed a
/// signal it did not cause. Only raw system calls, as in a signal handler.
struct NoSigpipe {
    /// Whether SIGPIPE was blocked here already, and whether one was pending then.
    active: bool,
    was_blocked: bool,
    was_pending: bool,
}

impl NoSigpipe {
    fn new(may_be_a_pipe: bool) -> NoSigpipe {
        let mut guard = NoSigpipe {
            active: may_be_a_pipe,
            was_blocked: false,
            was_pending: false,
        };
        if !may_be_a_pipe {
            return guard;
        }
        let set = sigpipe_set();
        let mut old: u64 = 0;
        // SAFETY: rt_sigprocmask with 8-byte kernel sigsets on the stack.
        unsafe { libc::syscall(libc::SYS_rt_sigprocmask, libc::SIG_BLOCK, &set, &mut old, 8) };
        guard.was_blocked = old & set != 0;
        if guard.was_blocked {
            let mut pending: u64 = 0;
            // SAFETY: rt_sigpending writes one 8-byte kernel sigset.
            unsafe { libc::syscall(libc::SYS_rt_sigpending, &mut pending, 8) };
            guard.was_pending = pending & set != 0;
        }
        guard
    }

    /// After EPIPE: the SIGPIPE the write raised at this thread is taken back (unless the
    /// program had one pending already, which stays as it was).
    fn swallow(&mut self) {
        if !self.active || self.was_pending {
            return;
        }
        let set = sigpipe_set();
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: rt_sigtimedwait with a zero timeout only takes a pending SIGPIPE, if any
        // (none when the program ignores SIGPIPE), and writes no siginfo.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigtimedwait,
                &set,
                core::ptr::null_mut::<libc::siginfo_t>(),
                &zero,
                8,
            )
        };
    }
}

impl Drop for NoSigpipe {
    fn drop(&mut self) {
        if self.active && !self.was_blocked {
            let set = sigpipe_set();
            // SAFETY: as in `new`.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigprocmask,
                    libc::SIG_UNBLOCK,
                    &set,
                    core::ptr::null_mut::<u64>(),
                    8,
                )
            };
        }
    }
}

/// The kernel's sigset holding SIGPIPE alone.
fn sigpipe_set() -> u64 {
    1 << (libc::SIGPIPE - 1)
}
