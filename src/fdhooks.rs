//! `close`, `dup2`, `dup3`, `close_range`, `closefrom`, `daemon` and `setsid`, exported so that
//! libdmem's private descriptors follow what the program does with its own (`sink.rs` keeps
//! them): a copy of standard error is let go when the program closes or replaces descriptor 2 or
//! becomes a daemon, so a daemon started from `out=$(prog 2>&1)` releases its caller's pipe as
//! it would bare; a private number the program closes or `dup2`s onto behaves as the free number
//! it would be bare.
//!
//! Each export calls the C library's own function for the program's request, so its contract
//! (cancellation points, errno, the return value) is glibc's; libdmem's bookkeeping before or
//! after leaves errno alone. glibc's internal calls (`fclose`, `daemon`'s own `dup2`) do not
//! come through here; `daemon` itself does. In a `vfork` child, whose descriptors are its own
//! but whose memory is its parent's, nothing is noted: the parent's bookkeeping must not change.

use crate::errno::{self, Keep};
use crate::finish::in_shared_memory_child;
use crate::next::{self, Next};
use crate::sink;
use libc::{c_int, c_uint, pid_t};

/// The next definition, as a function of C signature `F`, or None (errno ENOSYS).
fn next_fn<F: Copy>(next: &Next) -> Option<F> {
    let f = next.get();
    if f.is_null() {
        errno::set(libc::ENOSYS);
        return None;
    }
    // SAFETY: each caller names the C signature of the function it looked up; a function
    // pointer has the size of a data pointer.
    Some(unsafe { core::mem::transmute_copy::<*mut libc::c_void, F>(&f) })
}

/// Whether the bookkeeping applies: not in a vfork child.
fn noting() -> bool {
    !in_shared_memory_child()
}

/// # Safety
/// The C `close` contract.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if noting() && sink::is_private(fd) {
        // Bare, this number was never open: the program gets EBADF, and the descriptor it
        // meant to be rid of (a daemon closing everything) is let go.
        sink::program_closed_private(fd);
        errno::set(libc::EBADF);
        return -1;
    }
    let Some(f) = next_fn::<unsafe extern "C" fn(c_int) -> c_int>(&next::CLOSE) else {
        return -1;
    };
    // SAFETY: glibc's close, with the caller's argument.
    let r = unsafe { f(fd) };
    // Linux frees the number whatever close returns, EINTR included; EBADF says it was not open.
    if fd == 2 && noting() && !(r < 0 && errno::get() == libc::EBADF) {
        sink::stderr_closed();
    }
    r
}

/// Notes a successful `dup2`/`dup3` of `old` onto `new` made by the program.
fn duplicated(old: c_int, new: c_int, r: c_int) {
    if r == 2 && old != new && noting() {
        let _errno = Keep::new();
        sink::stderr_replaced();
    }
}

/// # Safety
/// The C `dup2` contract.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if noting() && old != new && sink::is_private(new) {
        sink::before_dup_onto(new);
    }
    let Some(f) = next_fn::<unsafe extern "C" fn(c_int, c_int) -> c_int>(&next::DUP2) else {
        return -1;
    };
    // SAFETY: glibc's dup2, with the caller's arguments.
    let r = unsafe { f(old, new) };
    duplicated(old, new, r);
    r
}

/// # Safety
/// The C `dup3` contract.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if noting() && old != new && sink::is_private(new) {
        sink::before_dup_onto(new);
    }
    let Some(f) = next_fn::<unsafe extern "C" fn(c_int, c_int, c_int) -> c_int>(&next::DUP3) else {
        return -1;
    };
    // SAFETY: glibc's dup3, with the caller's arguments.
    let r = unsafe { f(old, new, flags) };
    duplicated(old, new, r);
    r
}

/// # Safety
/// The C `close_range` contract.
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let Some(f) = next_fn::<unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int>(&next::CLOSE_RANGE) else {
        return -1;
    };
    // SAFETY: glibc's close_range, with the caller's arguments.
    let r = unsafe { f(first, last, flags) };
    if noting() {
        sink::many_closed();
    }
    r
}

/// # Safety
/// The C `closefrom` contract.
#[no_mangle]
pub unsafe extern "C" fn closefrom(lowfd: c_int) {
    if let Some(f) = next_fn::<unsafe extern "C" fn(c_int)>(&next::CLOSEFROM) {
        // SAFETY: glibc's closefrom, with the caller's argument.
        unsafe { f(lowfd) };
    }
    if noting() {
        sink::many_closed();
    }
}

/// # Safety
/// The C `daemon` contract.
#[no_mangle]
pub unsafe extern "C" fn daemon(nochdir: c_int, noclose: c_int) -> c_int {
    let Some(f) = next_fn::<unsafe extern "C" fn(c_int, c_int) -> c_int>(&next::DAEMON) else {
        return -1;
    };
    // SAFETY: glibc's daemon, with the caller's arguments; it returns only in the daemon.
    let r = unsafe { f(nochdir, noclose) };
    if r == 0 && noting() {
        sink::detached();
    }
    r
}

/// # Safety
/// The C `setsid` contract.
#[no_mangle]
pub unsafe extern "C" fn setsid() -> pid_t {
    let Some(f) = next_fn::<unsafe extern "C" fn() -> pid_t>(&next::SETSID) else {
        return -1;
    };
    // SAFETY: glibc's setsid.
    let r = unsafe { f() };
    if r >= 0 && noting() {
        sink::detached();
    }
    r
}
