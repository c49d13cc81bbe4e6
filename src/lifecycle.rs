//! Process lifecycle: the library constructor, fork, and what happens at exit.

use crate::{bootstrap, lists, options, thread};
use libc::c_void;

extern "C" {
    fn __cxa_atexit(func: extern "C" fn(*mut c_void), arg: *mut c_void, dso: *mut c_void) -> libc::c_int;
}

/// Runs when the loader initialises libdmem: early, since a preloaded library comes before the
/// program's own dependencies. The first allocation may already have initialised us (from
/// another library's constructor); this makes sure it happens before `main` in any case.
extern "C" fn constructor() {
    if bootstrap::real().is_none() {
        return;
    }
    // SAFETY: the three handlers are plain functions that only take, release or reset our own
    // locks and thread-id cache, which is all pthread_atfork asks of them.
    unsafe {
        libc::pthread_atfork(Some(before_fork), Some(after_fork_parent), Some(after_fork_child));
    }
    if options::get().abort_shutdown {
        // Registered with no DSO handle, so it is not run early by our own __cxa_finalize, and
        // registered before __libc_start_main registers the loader's destructor runner: exit
        // handlers run last-in first-out, so this one runs after every ELF destructor and every
        // handler the program registered.
        // SAFETY: `at_exit` has the signature __cxa_atexit expects and ignores its argument.
        unsafe { __cxa_atexit(at_exit, core::ptr::null_mut(), core::ptr::null_mut()) };
    }
}

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

extern "C" fn before_fork() {
    lists::lock_all();
}

extern "C" fn after_fork_parent() {
    lists::unlock_all();
}

extern "C" fn after_fork_child() {
    lists::unlock_all();
    thread::reset_tid();
}

extern "C" fn at_exit(_: *mut c_void) {
    // stdio has not been flushed yet at this point of exit; do it so the program's output is not
    // lost, then abort so the kernel writes a core holding exactly the blocks never freed.
    // SAFETY: fflush(NULL) flushes every stream and allocates nothing; abort never returns.
    unsafe {
        libc::fflush(core::ptr::null_mut());
        libc::abort();
    }
}
