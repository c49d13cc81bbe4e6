//! Process lifecycle: the library constructor, fork, and what happens at exit.

use crate::{bootstrap, leak_report, lists, options, thread};
use libc::c_void;

// SAFETY: glibc declares `int on_exit(void (*)(int, void *), void *)`; the libc crate lacks it.
unsafe extern "C" {
    fn on_exit(func: extern "C" fn(libc::c_int, *mut c_void), arg: *mut c_void) -> libc::c_int;
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
    let o = options::get();
    if o.abort_shutdown || o.leak_report {
        // on_exit handlers carry no DSO handle, so ours is not run early by our own
        // __cxa_finalize, and this one is registered before __libc_start_main registers the
        // loader's destructor runner: exit handlers run last-in first-out, so it runs after
        // every ELF destructor and every handler the program registered. on_exit, unlike
        // atexit, also hands us the exit status.
        // SAFETY: `at_exit` has the signature on_exit expects and ignores its argument.
        unsafe { on_exit(at_exit, core::ptr::null_mut()) };
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

extern "C" fn at_exit(status: libc::c_int, _: *mut c_void) {
    let o = options::get();
    // stdio is flushed only after the exit handlers; do it now so no output is lost whatever
    // follows.
    // SAFETY: fflush(NULL) flushes every stream.
    unsafe { libc::fflush(core::ptr::null_mut()) };
    if o.freeres {
        free_libc_buffers();
    }
    let mut code = status;
    if o.leak_report && leak_report::leak_report(&leak_report::Entry::capture()) > 0 {
        code = o.leak_exitcode.unwrap_or(status);
    }
    if o.abort_shutdown {
        scrub_stack();
        // SAFETY: abort never returns; the kernel then writes a core holding exactly the blocks
        // never freed.
        unsafe { libc::abort() };
    }
    // After __libc_freeres, libc's streams must not be touched again, so end the process here
    // rather than returning into the rest of exit(); ours is the last handler that matters.
    // SAFETY: _exit ends the process at once.
    unsafe { libc::_exit(code) };
}

/// Zeroes the stack below this frame. The leak report's frames left block addresses in dead
/// stack slots; a debugger scanning the core from abort's stack pointer would take them for live
/// references and disagree with the report.
#[inline(never)]
fn scrub_stack() {
    let mut area = [0usize; 8192];
    for w in area.iter_mut() {
        // SAFETY: a plain write to our own local array; volatile so it is not optimised away.
        unsafe { core::ptr::write_volatile(w, 0) };
    }
    core::hint::black_box(&area);
}

/// The C and C++ runtimes' own caches (stdio buffers, locale data, libstdc++'s emergency
/// exception pool) are never freed otherwise. valgrind calls these two, in this order, so that
/// they do not show up as the program's memory; so do we, so that the counts agree.
fn free_libc_buffers() {
    for name in [c"_ZN9__gnu_cxx9__freeresEv", c"__libc_freeres"] {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name; each symbol, when present,
        // is a `void f(void)` of glibc (`__libc_freeres`) or libstdc++ (`__gnu_cxx::__freeres`).
        unsafe {
            let f = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
            if !f.is_null() {
                let f: extern "C" fn() = core::mem::transmute::<*mut c_void, extern "C" fn()>(f);
                f();
            }
        }
    }
}
