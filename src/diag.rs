//! Everything libdmem writes: the call trace, the bad-free reports and the one way frames are
//! described (also used by the exit report). Where it goes is `sink.rs`'s job.
//!
//! The trace runs inside malloc, so it formats into a buffer on the stack and writes with one
//! `write(2)` per line: no allocation, no stdio, no locks beyond the kernel's.

use crate::header::{Header, NFRAMES};
use crate::out::Out;
use crate::{sink, thread};
use core::fmt::Write;
use core::sync::atomic::{AtomicPtr, Ordering};

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
    let mut out = sink::stderr();
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
        describe_stack(&mut out, &frames);
        // With a history, the first free is there too, unless newer events wrote over it.
        if let (BadFree::Double, Some((tid, freed))) = (kind, crate::history::last_free_of(user as usize)) {
            out.str("; first freed by thread ").dec(tid as u64).str(" at ");
            describe_stack(&mut out, &freed);
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

/// A stack as one line: its frames, innermost first, comma-separated.
fn describe_stack(out: &mut Out, frames: &[usize; NFRAMES]) {
    for (i, &pc) in frames.iter().take_while(|&&pc| pc != 0).enumerate() {
        if i > 0 {
            out.str(", ");
        }
        describe_pc(out, pc);
    }
}

/// A loaded object's name (the file's last component) and the address ranges of its segments.
struct Object {
    name: Vec<u8>,
    ranges: Vec<(usize, usize)>,
}

/// The loaded objects, taken by `name_without_the_loader`; null until then.
static OBJECTS: AtomicPtr<Vec<Object>> = AtomicPtr::new(core::ptr::null_mut());

/// Takes what naming frames needs from the loader, while its lock can be taken: the exit report
/// names frames after it has stopped every other thread for good, and one of them may hold that
/// lock, which `dladdr` and `dl_iterate_phdr` take. The loaded objects' names and segments are
/// kept, and the `backtrace` crate lists them too now (once per process).
pub fn name_without_the_loader() {
    if !OBJECTS.load(Ordering::Acquire).is_null() {
        return;
    }
    let mut objects: Vec<Object> = Vec::new();
    crate::unwind::each_object(&mut |path, bias, phdrs| {
        let ranges = phdrs
            .iter()
            .filter(|p| p.p_type == libc::PT_LOAD)
            .map(|p| (bias + p.p_vaddr as usize, bias + (p.p_vaddr + p.p_memsz) as usize))
            .collect();
        let name = match path.rsplit(|&b| b == b'/').next() {
            // The main program is listed with an empty name: named as the loader would.
            Some([]) | None => program_name(),
            Some(base) => base.to_vec(),
        };
        objects.push(Object { name, ranges });
        false
    });
    OBJECTS.store(Box::into_raw(Box::new(objects)), Ordering::Release);
    // An address in no object: the crate lists the objects once, and finds nothing to parse.
    backtrace::resolve(core::ptr::null_mut(), |_| {});
}

// SAFETY (of the declaration): glibc's `char *program_invocation_name`, the program's argv[0],
// set before any constructor runs.
unsafe extern "C" {
    static program_invocation_name: *const libc::c_char;
}

/// The program's name as `dladdr` gives it: the last component of argv[0].
fn program_name() -> Vec<u8> {
    // SAFETY: glibc sets the pointer before constructors run, to a NUL-terminated string (or
    // leaves it null), and never frees it.
    let path = unsafe {
        if program_invocation_name.is_null() {
            &b""[..]
        } else {
            core::ffi::CStr::from_ptr(program_invocation_name).to_bytes()
        }
    };
    path.rsplit(|&b| b == b'/').next().unwrap_or(path).to_vec()
}

/// The name of the object that holds `at`, from the table `name_without_the_loader` took.
fn object_named(objects: &[Object], at: usize) -> Option<&[u8]> {
    objects
        .iter()
        .find(|o| o.ranges.iter().any(|&(s, e)| s <= at && at < e))
        .map(|o| &o.name[..])
}

/// Describes a return address the one way libdmem prints frames, in the bad-free line and in
/// the exit report alike: `function (file:line) in object`. Names (demangled), files and lines
/// come from the symbol tables and debug info through the `backtrace` crate, falling back to the
/// loader's dynamic symbols (`symbol+0xOFF`), then to the raw address; the object is the loaded
/// file that holds the address. It allocates (on libdmem's own heap), so it runs only at exit or
/// on the way to an abort, with the reentrancy guard held and never from inside the loader.
/// Once `name_without_the_loader` has run it takes no lock of the loader's (the exit report's
/// case); before, it asks `dladdr`.
pub fn describe_pc(out: &mut Out, pc: usize) {
    // A return address points after the call; the call itself is one byte earlier.
    let at = pc.wrapping_sub(1) as *mut libc::c_void;
    let objects = OBJECTS.load(Ordering::Acquire);
    if !objects.is_null() {
        let mut done = false;
        backtrace::resolve(at, |sym| {
            if !done {
                done = name_symbol(out, sym);
            }
        });
        if !done {
            out.hex(pc);
        }
        // SAFETY: the table is leaked, never freed, once published.
        if let Some(name) = object_named(unsafe { &*objects }, at as usize).filter(|n| !n.is_empty()) {
            out.str(" in ").bytes(name);
        }
        return;
    }
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
        if !done {
            done = name_symbol(out, sym);
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

/// `function (file:line)` of a symbol the `backtrace` crate found; false when it has no name.
fn name_symbol(out: &mut Out, sym: &backtrace::Symbol) -> bool {
    let Some(name) = sym.name() else { return false };
    let _ = write!(out, "{name:#}");
    if let (Some(file), Some(line)) = (sym.filename(), sym.lineno()) {
        let file = file.file_name().unwrap_or(file.as_os_str());
        let _ = write!(out, " ({}:{line})", file.to_string_lossy());
    }
    true
}

impl Write for Out {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.str(s);
        Ok(())
    }
}
