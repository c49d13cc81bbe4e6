//! The ways out that skip `exit`'s handlers: `_exit`, `_Exit` and `quick_exit`, exported so the
//! exit report and `abort-shutdown`'s abort run for them too (`finish.rs`); and `exit` itself,
//! exported so that threads calling it at once go through one at a time.
//!
//! glibc's own internal calls to `_exit` (at the end of `exit`, in a `posix_spawn` child) do not
//! come through these exports; a program's calls do. A direct `exit_group` system call reaches
//! nobody: the kernel ends the process without running any code of it.

use crate::finish::{self, Way};
use crate::leak::Entry;
use crate::next;
use core::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use libc::{c_int, c_void};

/// The thread let into glibc's `exit` first; 0 while none is.
static EXITING: AtomicU32 = AtomicU32::new(0);

/// `exit`, passed on to glibc's with the stack exactly as the program called it (no frame of
/// ours stays in between), once `exit_gate` lets the thread through.
///
/// # Safety
/// None beyond C's: `exit` ends the process.
#[no_mangle]
#[unsafe(naked)]
pub unsafe extern "C" fn exit(status: c_int) -> ! {
    // The status is kept across the call, which also aligns the stack for it; the gate returns
    // glibc's exit, which is then entered as if the program had called it.
    core::arch::naked_asm!("push rdi", "call {}", "pop rdi", "jmp rax", sym exit_gate)
}

/// glibc 2.36's `exit` lets several threads run the exit handlers at once, and the first to
/// find the list empty ends the process: with two threads calling `exit`, the one that runs our
/// handler (the report, abort-shutdown's abort) is killed by the other, and the report is lost.
/// When the process ends through `finish`, a thread that calls `exit` while another is in it
/// waits there instead, for good, as musl's `exit` and Rust's `std::process::exit` make it wait;
/// the same thread calling it again (from an exit handler) goes on, as glibc allows. Returns the
/// address of glibc's `exit`.
extern "C" fn exit_gate() -> usize {
    // A vfork child shares our memory: what it notes here would hold its parent's exit.
    if finish::has_an_end() && !finish::in_shared_memory_child() {
        let me = crate::thread::gettid();
        if let Err(other) = EXITING.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            if other != me {
                finish::wait_for_the_end();
            }
        }
        // Before the exit handlers, some of which close standard error.
        crate::sink::keep_a_copy_of_stderr();
    }
    let real = next::EXIT.get();
    if real.is_null() {
        return exit_without_glibc as *const () as usize;
    }
    real as usize
}

/// Where `exit` goes should glibc's be missing: the process ends with the status.
extern "C" fn exit_without_glibc(status: c_int) -> ! {
    finish::exit_now(status)
}

/// In a forked child: the thread that was in `exit` in the parent does not exist here.
pub fn forget_exiting() {
    EXITING.store(0, Ordering::Relaxed);
}

// `_exit` and `_Exit` hand the caller's stack pointer (just above the return address) to
// `immediate`, so the report scans the program's stack from there: our frames, and the dead
// slots below the caller, hold stale block addresses of earlier calls into malloc.

/// # Safety
/// None beyond C's: `_exit` ends the process.
#[no_mangle]
#[unsafe(naked)]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    core::arch::naked_asm!("lea rsi, [rsp + 8]", "jmp {}", sym immediate)
}

/// # Safety
/// None beyond C's: `_Exit` is `_exit`.
#[no_mangle]
#[unsafe(naked)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    core::arch::naked_asm!("lea rsi, [rsp + 8]", "jmp {}", sym immediate)
}

extern "C" fn immediate(status: c_int, caller_sp: usize) -> ! {
    finish::finish(status, Way::Immediate, &Entry::at(caller_sp))
}

/// The status `quick_exit` was called with, for our `at_quick_exit` handler.
static QUICK_STATUS: AtomicI32 = AtomicI32::new(0);

// SAFETY: glibc exports `int __cxa_at_quick_exit(void (*)(void), void *dso)`, which its
// `at_quick_exit` calls with the caller's DSO handle; null means no DSO.
unsafe extern "C" {
    fn __cxa_at_quick_exit(func: extern "C" fn(), dso: *mut c_void) -> c_int;
}

/// # Safety
/// None beyond C's: `quick_exit` runs the `at_quick_exit` handlers, then ends the process.
#[no_mangle]
pub unsafe extern "C" fn quick_exit(status: c_int) -> ! {
    QUICK_STATUS.store(status, Ordering::Relaxed);
    if finish::has_an_end() {
        // Before the at_quick_exit handlers, which may close standard error.
        crate::sink::keep_a_copy_of_stderr();
    }
    // The next quick_exit runs the program's handlers, newest first, and ours last, which then
    // ends the process.
    if let Some(next) = next::QUICK_EXIT.func::<unsafe extern "C" fn(c_int)>() {
        // SAFETY: glibc's `void quick_exit(int)`.
        unsafe { next(status) };
    }
    finish::finish(status, Way::Immediate, &Entry::capture())
}

/// Called by quick_exit after the program's handlers; hands its caller's stack pointer on, as
/// `_exit` does.
#[unsafe(naked)]
extern "C" fn after_quick_exit_handlers() {
    core::arch::naked_asm!("lea rdi, [rsp + 8]", "jmp {}", sym quick_exit_end)
}

extern "C" fn quick_exit_end(caller_sp: usize) -> ! {
    finish::finish(
        QUICK_STATUS.load(Ordering::Relaxed),
        Way::Immediate,
        &Entry::at(caller_sp),
    )
}

/// Registers the handler that runs after the program's `at_quick_exit` handlers: registered by
/// the constructor, before `main`, it runs last.
pub fn register() {
    // SAFETY: a plain function of the expected type, no DSO handle.
    unsafe { __cxa_at_quick_exit(after_quick_exit_handlers, core::ptr::null_mut()) };
}
