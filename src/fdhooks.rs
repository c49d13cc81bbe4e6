//! `close`, `dup2`, `dup3`, `fclose`, `daemon` and `setsid`, exported so that libdmem's
//! descriptors follow what the program does with its own (`sink.rs` keeps them): a private
//! number the program closes is let go and the program gets EBADF, as bare, which a daemon
//! closing every descriptor expects; one it `dup2`s onto is moved out of the way first; a file
//! it `dup2`s onto descriptor 2 is its standard error from then on. The copy of standard error
//! the leak report needs is taken as the program `fclose`s standard error (gnulib's
//! `close_stdout`, xz before `exit`), and let go when the program closes or replaces
//! descriptor 2 itself or becomes a daemon, so a daemon releases its caller's pipe as bare.
//!
//! Each export calls the C library's own function for the program's request, so its contract
//! (cancellation points, errno, the return value) is glibc's; libdmem's bookkeeping before or
//! after leaves errno alone. glibc's internal calls (`fclose`'s own `close`, `daemon`'s and
//! `freopen`'s `dup2`) do not come through here; a later write to descriptor 2 then finds
//! another file there than the one noted, and is dropped. In a `vfork` child, whose descriptors
//! are its own but whose memory is its parent's, nothing is noted: the parent's bookkeeping
//! must not change.

use crate::errno::{self, Keep};
use crate::finish::in_shared_memory_child;
use crate::next;
use crate::sink;
use libc::c_int;

/// Whether the bookkeeping applies: not in a vfork child. It asks the kernel for the pid, so
/// the checks of our own state come first.
fn noting() -> bool {
    !in_shared_memory_child()
}

/// # Safety
/// The C `close` contract.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if sink::is_private(fd) && noting() {
        // Bare, this number was never open: the program gets EBADF, and the descriptor it
        // meant to be rid of (a daemon closing everything) is let go.
        sink::program_closed_private(fd);
        errno::set(libc::EBADF);
        return -1;
    }
    let Some(f) = next::CLOSE.func::<unsafe extern "C" fn(c_int) -> c_int>() else {
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
    if old != new && sink::is_private(new) && noting() {
        sink::before_dup_onto(new);
    }
    let Some(f) = next::DUP2.func::<unsafe extern "C" fn(c_int, c_int) -> c_int>() else {
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
    if old != new && sink::is_private(new) && noting() {
        sink::before_dup_onto(new);
    }
    let Some(f) = next::DUP3.func::<unsafe extern "C" fn(c_int, c_int, c_int) -> c_int>() else {
        return -1;
    };
    // SAFETY: glibc's dup3, with the caller's arguments.
    let r = unsafe { f(old, new, flags) };
    duplicated(old, new, r);
    r
}

/// # Safety
/// The C `fclose` contract.
#[no_mangle]
pub unsafe extern "C" fn fclose(stream: *mut libc::FILE) -> c_int {
    // SAFETY: the caller passes an open stream, as fclose requires; fileno_unlocked only reads
    // its descriptor, without the stream's lock (the caller is closing it).
    if !stream.is_null() && unsafe { fileno_unlocked(stream) } == 2 && noting() {
        sink::keep_a_copy_of_stderr();
    }
    let Some(f) = next::FCLOSE.func::<unsafe extern "C" fn(*mut libc::FILE) -> c_int>() else {
        return libc::EOF;
    };
    // SAFETY: glibc's fclose, with the caller's stream.
    unsafe { f(stream) }
}

// SAFETY (of the declaration): glibc's `int fileno_unlocked(FILE *)`; the libc crate lacks it.
unsafe extern "C" {
    fn fileno_unlocked(stream: *mut libc::FILE) -> c_int;
}

/// # Safety
/// The C `daemon` contract.
#[no_mangle]
pub unsafe extern "C" fn daemon(nochdir: c_int, noclose: c_int) -> c_int {
    let Some(f) = next::DAEMON.func::<unsafe extern "C" fn(c_int, c_int) -> c_int>() else {
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
pub unsafe extern "C" fn setsid() -> libc::pid_t {
    let Some(f) = next::SETSID.func::<unsafe extern "C" fn() -> libc::pid_t>() else {
        return -1;
    };
    // SAFETY: glibc's setsid.
    let r = unsafe { f() };
    if r >= 0 && noting() {
        sink::detached();
    }
    r
}
