//! Everything libdmem writes: the call trace and the bad-free reports.
//!
//! The trace runs inside malloc, so it formats into a buffer on the stack and writes with one
//! `write(2)` per line: no allocation, no stdio, no locks beyond the kernel's.

use crate::header::{Header, NFRAMES};
use crate::{options, thread};
use core::fmt::Write;
use core::sync::atomic::{AtomicI32, Ordering};

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

    pub fn stderr() -> Out {
        Out::to_fd(2)
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

    pub fn dec(&mut self, mut v: u64) -> &mut Out {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.bytes(&digits[i..])
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
        let mut done = 0;
        while done < self.len {
            // The raw system call, not libc's `write`: that is a cancellation point, and malloc
            // (which traces through here) must not be one.
            // SAFETY: the slice buf[done..len] is initialised memory we own; write only reads it.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_write,
                    self.fd,
                    self.buf[done..].as_ptr(),
                    self.len - done,
                )
            };
            if n <= 0 {
                break;
            }
            done += n as usize;
        }
        self.len = 0;
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Where trace lines go: -1 while tracing is off.
static TRACE_FD: AtomicI32 = AtomicI32::new(-1);

/// Opens the trace destination the options ask for. Runs once at start-up.
pub fn init_trace() {
    let o = options::get();
    if o.trace_file[0] != 0 {
        // SAFETY: trace_file is NUL-terminated (the parser keeps the value shorter than the
        // buffer) and open does not retain the pointer.
        let fd = unsafe {
            libc::open(
                o.trace_file.as_ptr().cast(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_APPEND | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd < 0 {
            Out::stderr()
                .str("dmem: cannot open trace-file '")
                .bytes(cstr(&o.trace_file))
                .str("'; tracing to stderr\n")
                .flush();
            TRACE_FD.store(2, Ordering::Relaxed);
        } else {
            TRACE_FD.store(fd, Ordering::Relaxed);
        }
    } else if o.trace_stderr {
        TRACE_FD.store(2, Ordering::Relaxed);
    }
}

fn cstr(buf: &[u8]) -> &[u8] {
    &buf[..buf.iter().position(|&b| b == 0).unwrap_or(buf.len())]
}

/// Whether trace lines are written: one load, for the entry points' fast path.
#[inline(always)]
pub fn tracing() -> bool {
    TRACE_FD.load(Ordering::Relaxed) >= 0
}

/// A trace line in progress, or None when tracing is off.
pub fn trace() -> Option<Out> {
    let fd = TRACE_FD.load(Ordering::Relaxed);
    (fd >= 0).then(|| Out::to_fd(fd))
}

/// What went wrong with a pointer handed to free or realloc.
#[derive(Clone, Copy)]
pub enum BadFree {
    /// The header in front of it carries neither magic: not ours, or its header was overwritten.
    Foreign,
    /// The header says the block was already released.
    Double,
}

/// Reports a bad free in one line, naming the pointer and, for a double free, the stack that
/// allocated the block, then aborts unless `ignore-bad-free` is set. Returns when ignoring.
pub fn bad_free(func: &str, user: *const u8, kind: BadFree, hdr: Option<&Header>) {
    let mut out = Out::stderr();
    out.str("dmem: ").str(func).str("(").ptr(user).str("): ");
    match kind {
        BadFree::Foreign => {
            out.str(
                "pointer was not allocated by this allocator, or the bytes in front of it were overwritten",
            );
        }
        BadFree::Double => {
            out.str("double free");
        }
    }
    if let Some(h) = hdr {
        // The block went back to the backend with its first free, so symbolising (which
        // allocates) may reuse it: copy what we need first.
        let (size, tid, frames) = (h.size(), h.tid, h.frames);
        out.str(" of a ")
            .dec(size as u64)
            .str("-byte block from thread ")
            .dec(tid as u64);
        out.str(", allocated at");
        let _guard = thread::Guard::enter();
        for &pc in frames.iter().take(NFRAMES).take_while(|&&pc| pc != 0) {
            out.str(" ");
            describe_pc(&mut out, pc);
        }
    }
    out.str(if options::get().ignore_bad_free {
        " (ignored)\n"
    } else {
        "; aborting\n"
    });
    out.flush();
    if !options::get().ignore_bad_free {
        // SAFETY: abort never returns; raising SIGABRT is what glibc does on a detected bad free,
        // so a core file exists for the post-mortem.
        unsafe { libc::abort() };
    }
}

/// `function (file:line)` for a return address: the symbol tables and debug info are read with
/// the `backtrace` crate, falling back to the loader's dynamic symbols, then to the raw address. This
/// runs only on the way to an abort, so its allocations (on libdmem's own heap) are affordable.
fn describe_pc(out: &mut Out, pc: usize) {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: core::ptr::null(),
        dli_fbase: core::ptr::null_mut(),
        dli_sname: core::ptr::null(),
        dli_saddr: core::ptr::null_mut(),
    };
    // SAFETY: dladdr only writes the Dl_info we pass; its strings point into the loader's
    // tables, which stay valid while the object is loaded.
    let found = unsafe { libc::dladdr((pc - 1) as *const libc::c_void, &mut info) } != 0;
    let mut done = false;
    backtrace::resolve((pc - 1) as *mut libc::c_void, |sym| {
        if let (false, Some(name)) = (done, sym.name()) {
            let _ = write!(out, "{name:#}");
            if let (Some(file), Some(line)) = (sym.filename(), sym.lineno()) {
                let file = file.file_name().unwrap_or(file.as_os_str());
                let _ = write!(out, " ({}:{line})", file.to_string_lossy());
            }
            done = true;
        }
    });
    if done {
        return;
    }
    if found && !info.dli_sname.is_null() {
        // SAFETY: dli_sname is a NUL-terminated string from the loader (see above).
        let name = unsafe { core::ffi::CStr::from_ptr(info.dli_sname) }.to_bytes();
        out.bytes(name).str("+").hex(pc - info.dli_saddr as usize);
    } else {
        out.hex(pc);
    }
}

impl Write for Out {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.str(s);
        Ok(())
    }
}
