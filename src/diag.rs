//! Everything libdmem writes: the call trace, the bad-free reports and the one way frames are
//! described (also used by the exit report). Where it goes is `sink.rs`'s job.
//!
//! The trace runs inside malloc, so it formats into a buffer on the stack and writes with one
//! `write(2)` per line: no allocation, no stdio, no locks beyond the kernel's.

use crate::header::{Header, NFRAMES};
use crate::out::Out;
use crate::{sink, thread};
use core::fmt::Write;

/// Whether trace lines are written: one load, for the entry points' fast path.
#[inline(always)]
pub fn tracing() -> bool {
    sink::tracing()
}

/// A trace line in progress, or None when tracing is off or its destination is gone.
pub fn trace() -> Option<Out> {
    sink::trace_fd().map(|fd| Out::to_fd(fd, &sink::ROUTE))
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

/// Describes a return address the one way libdmem prints frames, in the bad-free line and in
/// the exit report alike (`analysis::frame::Frame::text`: `function+0xOFF (file:line) in
/// object`, as the launcher writes frames), from its innermost frame as `frames.rs` names it
/// (through `analysis::symbolize`, as the launcher names frames from a core), else the raw
/// address; the object is the file mapped there. It allocates (on libdmem's own heap), so it
/// runs only at exit or on the way to an abort, with the reentrancy guard held and never from
/// inside the loader. Once `name_without_the_loader` has run it takes no lock of the loader's
/// (the exit report's case); before, it lists the loaded objects with `dl_iterate_phdr`.
pub fn describe_pc(out: &mut Out, pc: usize) {
    let frames = crate::frames::frames(pc, &mut Default::default());
    describe_frame(out, &frames[0]);
}

/// A frame as `describe_pc` writes it: `Frame::text`, as the launcher writes frames too.
pub fn describe_frame(out: &mut Out, f: &crate::analysis::frame::Frame) {
    // Names come from the program's symbols and paths: shown escaped, never raw to a terminal.
    out.escaped(f.text().as_bytes());
}

impl Write for Out {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.str(s);
        Ok(())
    }
}
