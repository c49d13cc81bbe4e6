//! The ways out that skip `exit`'s handlers: `_exit`, `_Exit` and `quick_exit`, exported so the
//! exit report and `abort-shutdown`'s abort run for them too (`finish.rs`).
//!
//! glibc's own internal calls to `_exit` (at the end of `exit`, in a `posix_spawn` child) do not
//! come through these exports; a program's calls do. A direct `exit_group` system call reaches
//! nobody: the kernel ends the process without running any code of it.

use crate::finish::{self, Way};
use crate::leak::Entry;
use core::sync::atomic::{AtomicI32, Ordering};
use libc::{c_int, c_void};

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
    // The next quick_exit runs the program's handlers, newest first, and ours last, which then
    // ends the process. dlsym takes the loader's lock, which is recursive, and nothing of ours
    // holds it here.
    // SAFETY: RTLD_NEXT lookup of a NUL-terminated name.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, c"quick_exit".as_ptr()) };
    if !next.is_null() {
        // SAFETY: the next definition of quick_exit, `void quick_exit(int)`.
        unsafe {
            let next: extern "C" fn(c_int) = core::mem::transmute::<*mut c_void, extern "C" fn(c_int)>(next);
            next(status);
        }
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
