//! `munmap`, interposed so that the stack walker drops the bounds of stacks that are gone.
//!
//! The walker caches the mapping each stack lies in (see `unwind/stacks.rs`). The kernel merges
//! neighbouring anonymous mappings, so coroutine stacks a program maps side by side read as one
//! mapping; once the program unmaps one of them, a walk on another, trusting the cached bounds,
//! could read the unmapped part and fault. Each `munmap` is therefore noted before it is made.
//! glibc's own unmaps (its malloc's large chunks, its thread-stack cache) do not come through
//! here; thread stacks have a guard page below them and are never merged with a neighbour.

use crate::unwind;
use core::ffi::{c_int, c_void};

/// Notes the range, then unmaps with the system call, as glibc's `munmap` does (-1 and errno on
/// failure).
///
/// # Safety
/// As for glibc's `munmap`: nothing may use the range afterwards.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    let start = addr as usize;
    unwind::note_unmap(start, start.saturating_add(len));
    // SAFETY: the caller's contract is munmap's; libc's syscall() sets errno and returns -1 on
    // failure.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
}
