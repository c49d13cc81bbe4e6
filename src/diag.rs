//! Everything libdmem writes: the call trace, the bad-free reports and the one way frames are
//! described (also used by the exit report). Where it goes is `sink.rs`'s job.
//!
//! The trace runs inside malloc, so it formats into a buffer on the stack and writes with one
//! `write(2)` per line: no allocation, no stdio, no locks beyond the kernel's.

use crate::header::{Header, NFRAMES};
use crate::{sink, thread};
use core::fmt::Write;

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

    /// Output meant for the program's standard error, through libdmem's private copy of it;
    /// dropped when that is gone (see `sink.rs`).
    pub fn stderr() -> Out {
        Out::to_fd(sink::stderr_fd().unwrap_or(-1))
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
            sink::write_all(self.fd, &self.buf[..self.len]);
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

/// Whether trace lines are written: one load, for the entry points' fast path.
#[inline(always)]
pub fn tracing() -> bool {
    sink::tracing()
}

/// A trace line in progress, or None when tracing is off or its destination is gone.
pub fn trace() -> Option<Out> {
    sink::trace_fd().map(Out::to_fd)
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
/// allocated the block, then aborts unless `ignore` (`ignore-bad-free`) is set. Returns when
/// ignoring.
pub fn bad_free(func: &str, user: *const u8, kind: BadFree, hdr: Option<&Header>, ignore: bool) {
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
        out.str(", allocated at ");
        let _guard = thread::Guard::enter();
        for (i, &pc) in frames.iter().take(NFRAMES).take_while(|&&pc| pc != 0).enumerate() {
            if i > 0 {
                out.str(", ");
            }
            describe_pc(&mut out, pc);
        }
    }
    out.str(if ignore { " (ignored)\n" } else { "; aborting\n" });
    out.flush();
    if !ignore {
        // SAFETY: abort never returns; raising SIGABRT is what glibc does on a detected bad free,
        // so a core file exists for the post-mortem.
        unsafe { libc::abort() };
    }
}

/// Describes a return address the one way libdmem prints frames, in the bad-free line and in
/// the exit report alike: `function (file:line) in object`. Names (demangled), files and lines
/// come from the symbol tables and debug info through the `backtrace` crate, falling back to the
/// loader's dynamic symbols (`symbol+0xOFF`), then to the raw address; the object is the loaded
/// file that holds the address. It allocates (on libdmem's own heap) and takes the
/// loader's lock in `dladdr`, so it runs only at exit or on the way to an abort, with the
/// reentrancy guard held and never from inside the loader.
pub fn describe_pc(out: &mut Out, pc: usize) {
    // A return address points after the call; the call itself is one byte earlier.
    let at = pc.wrapping_sub(1) as *mut libc::c_void;
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: core::ptr::null(),
        dli_fbase: core::ptr::null_mut(),
        dli_sname: core::ptr::null(),
        dli_saddr: core::ptr::null_mut(),
    };
    // SAFETY: dladdr only writes the Dl_info we pass; its strings point into the loader's
    // tables, which stay valid while the object is loaded.
    let found = unsafe { libc::dladdr(at, &mut info) } != 0;
    let mut done = false;
    backtrace::resolve(at, |sym| {
        if let (false, Some(name)) = (done, sym.name()) {
            let _ = write!(out, "{name:#}");
            if let (Some(file), Some(line)) = (sym.filename(), sym.lineno()) {
                let file = file.file_name().unwrap_or(file.as_os_str());
                let _ = write!(out, " ({}:{line})", file.to_string_lossy());
            }
            done = true;
        }
    });
    if !done {
        if found && !info.dli_sname.is_null() {
            // SAFETY: dli_sname is a NUL-terminated string from the loader (see above).
            let name = unsafe { core::ffi::CStr::from_ptr(info.dli_sname) }.to_bytes();
            out.bytes(name).str("+").hex(pc - info.dli_saddr as usize);
        } else {
            out.hex(pc);
        }
    }
    if found && !info.dli_fname.is_null() {
        // SAFETY: as for dli_sname.
        let path = unsafe { core::ffi::CStr::from_ptr(info.dli_fname) }.to_bytes();
        let base = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        if !base.is_empty() {
            out.str(" in ").bytes(base);
        }
    }
}

impl Write for Out {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.str(s);
        Ok(())
    }
}
