//! Where the program entered the exit path, which decides where the exiting thread's stack is
//! scanned from, in the exit report and in a core of `abort-shutdown`.
//!
//! Below the program's last frame lie libdmem's frames (the report's own, whose dead slots hold
//! block addresses of earlier calls into malloc) and, for `exit`, glibc's exit path
//! (`exit`, `__run_exit_handlers`), whose frames were laid over the dead frames of whatever the
//! program ran before it called `exit`: a shell that longjmp'ed out of a deep evaluation leaves
//! block addresses in slots `__run_exit_handlers` never writes. memcheck skips such words as
//! uninitialised; dmem cannot know them, but it knows which frames belong to the exit path. So
//! the scan starts at the program's frame, and the program's callee-saved registers, which the
//! frames below saved for it, are roots in their place. The caller-saved ones are dead across the
//! call, and what the exiting thread's registers hold at the end (in a core, at the abort) is
//! libdmem's, never the program's.
//!
//! The descriptor's `exit_entry` field points at `EXIT_ENTRY`, so a core's reader does the same.

use crate::unwind::callers::{self, SAVED};
use core::sync::atomic::{AtomicUsize, Ordering};

/// The thread that entered the exit path (0 until one did), the program's stack pointer there,
/// and its callee-saved registers: the words the descriptor's `exit_entry` field describes.
pub static EXIT_ENTRY: [AtomicUsize; 2 + SAVED] = [const { AtomicUsize::new(0) }; 2 + SAVED];

/// Where the exit report was entered from.
pub struct Entry {
    /// The program's callee-saved registers: captured in the caller's frame (`capture`), whose
    /// stack scan then starts at this struct and covers them, or restored by unwinding to the
    /// program's frame (`at`, `after_exit_handlers`), when they are roots of their own.
    regs: [usize; SAVED],
    /// Where the stack scan starts instead, when the caller knows: the stack pointer of the
    /// program's code that called its way out. 0 to scan from this struct.
    from: usize,
}

impl Entry {
    /// Must be inlined into the caller, so the registers are the caller's; the stack is scanned
    /// from this struct up.
    #[inline(always)]
    pub fn capture() -> Entry {
        #[allow(unused_mut)]
        let mut regs = [0usize; SAVED];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: only copies registers into locals; touches no memory and no flags.
        unsafe {
            core::arch::asm!(
                "mov {0}, rbx", "mov {1}, rbp", "mov {2}, r12", "mov {3}, r13", "mov {4}, r14",
                "mov {5}, r15",
                out(reg) regs[0], out(reg) regs[1], out(reg) regs[2], out(reg) regs[3],
                out(reg) regs[4], out(reg) regs[5], options(nomem, nostack, preserves_flags),
            );
        }
        Entry { regs, from: 0 }
    }

    /// The program called a function of ours with its stack pointer at `sp` (just above the
    /// return address): the stack is scanned from `sp`, with the program's callee-saved
    /// registers as the unwinder restores them.
    pub fn at(sp: usize) -> Entry {
        let regs = program_frame(sp, 0, 0).map_or([0; SAVED], |f| f.regs);
        Entry { regs, from: sp }
    }

    /// Our exit handler was called from glibc's `__run_exit_handlers` with its stack pointer at
    /// `sp`, which `exit` called: the stack is scanned from the frame that called `exit`, past
    /// both. When the frames are not that (another C library), from `sp`. (libdmem's own `exit`
    /// leaves no frame: it jumps to glibc's with the stack as the program left it.)
    #[cfg(not(test))]
    pub fn after_exit_handlers(sp: usize) -> Entry {
        let exit = crate::next::EXIT.get() as usize;
        match program_frame(sp, 2, exit) {
            Some(f) => Entry {
                regs: f.regs,
                from: f.sp,
            },
            None => Entry::at(sp),
        }
    }

    /// Where the calling thread's stack scan starts.
    pub fn scan_from(&self) -> usize {
        match self.from {
            0 => core::hint::black_box(self) as *const Entry as usize,
            sp => sp,
        }
    }

    /// The program's callee-saved registers, as a range of memory to scan, when they are not
    /// on the stack that is scanned.
    pub fn registers(&self) -> Option<(usize, usize)> {
        let at = self.regs.as_ptr() as usize;
        (self.from != 0).then_some((at, at + 8 * SAVED))
    }

    /// Publishes this entry for a core's reader (see `EXIT_ENTRY`); the thread that finishes
    /// the process calls it once.
    pub fn record(&self) {
        let words = [crate::thread::gettid() as usize, self.scan_from()];
        for (slot, &w) in EXIT_ENTRY.iter().zip(words.iter().chain(&self.regs)) {
            slot.store(w, Ordering::Relaxed);
        }
    }
}

/// The program's frame above ours, through the reentrancy guard: the unwinder may allocate the
/// first time it runs.
fn program_frame(sp: usize, past: usize, through: usize) -> Option<callers::Frame> {
    let _guard = crate::thread::Guard::enter();
    callers::above(sp, past, through)
}
