//! Process lifecycle: the library constructor, fork, and the hooks of every way out (what each
//! does is `finish.rs`'s job).

use crate::finish::{self, Way};
use crate::leak::Entry;
use crate::{bootstrap, exits, layout, lists, next, options, sighooks, signals, sink, thread};
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
    // Before anything can call our exports of them from a signal handler.
    next::resolve_all();
    // SAFETY: the three handlers are plain functions that only take, release or reset our own
    // locks and thread-id cache, which is all pthread_atfork asks of them.
    unsafe {
        libc::pthread_atfork(Some(before_fork), Some(after_fork_parent), Some(after_fork_child));
    }
    finish::set_pid();
    options::note_started_process();
    // Readers of the descriptor (a core, `dmem top`) refuse a process that records nothing.
    if options::get().record {
        layout::FLAGS.fetch_or(layout::FLAG_RECORDING, core::sync::atomic::Ordering::Relaxed);
    }
    tell_descendants();
    if options::get().leak_report {
        crate::leak::suppress::load();
    }
    if finish::has_an_end() {
        exits::register();
        // Done already at the first allocation, unless that came on another thread.
        sink::catch_the_main_threads_exit();
        if signals::wanted() {
            sighooks::install_under_defaults();
        }
        // on_exit handlers carry no DSO handle, so ours is not run early by our own
        // __cxa_finalize, and this one is registered before __libc_start_main registers the
        // loader's destructor runner: exit handlers run last-in first-out, so it runs after
        // every ELF destructor and every handler the program registered. on_exit, unlike
        // atexit, also hands us the exit status.
        // It is registered twice. Two threads may run exit's handlers at once (one that called
        // exit and main returning: our export of exit lets one caller through at a time, but
        // main's return reaches glibc's exit directly); whichever takes one of ours first ends
        // the process there, and the other, taking the second, waits in it instead of finding
        // the list empty and ending the process before the report is out.
        // Its argument marks our entries in glibc's lists of exit handlers (see exit_funcs.rs).
        let marker = &crate::exit_funcs::MARKER as *const u8 as *mut c_void;
        for _ in 0..2 {
            // SAFETY: `at_exit` has the signature on_exit expects and never reads its argument.
            unsafe { on_exit(at_exit, marker) };
        }
    }
}

// SAFETY: glibc's `char **environ`, the process's environment array.
unsafe extern "C" {
    static mut environ: *mut *mut libc::c_char;
}

/// `DMEM_OPTS=` followed by the options and what the descendants must be told.
struct OptsBuf(core::cell::UnsafeCell<[u8; 8192]>);
// SAFETY: written once, by the constructor, before any descendant can be started.
unsafe impl Sync for OptsBuf {}
static OPTS_BUF: OptsBuf = OptsBuf(core::cell::UnsafeCell::new([0; 8192]));

/// Tells the descendants, exec'd ones too, what this process knows: that the shared trace and
/// report files exist (`append-files`, so they append instead of truncating what this process
/// created), and which process `abort-shutdown` is for (`abort-pid`, so they do not abort).
/// The environment's `DMEM_OPTS` entry is pointed at a copy with those added: only the array's
/// slot changes, since setenv would allocate, and its blocks would show in the report as the
/// program's. Nothing changes when there is nothing to tell.
fn tell_descendants() {
    let append = sink::created_shared_files();
    let o = options::get();
    let abort_pid = (o.abort_shutdown == options::AbortIn::Started && o.abort_pid == 0).then(sink::getpid);
    if !append && abort_pid.is_none() {
        return;
    }
    let prefix = b"DMEM_OPTS=";
    // SAFETY: the constructor runs before main, while the environment is only read; each entry
    // is a NUL-terminated string, and the array ends with a null pointer.
    unsafe {
        let mut slot = environ;
        if slot.is_null() {
            return;
        }
        while !(*slot).is_null() {
            let entry = core::ffi::CStr::from_ptr(*slot).to_bytes();
            if entry.starts_with(prefix) {
                let buf = &mut *OPTS_BUF.0.get();
                let mut len = 0;
                let mut push = |part: &[u8]| {
                    if len + part.len() + 1 > buf.len() {
                        return false;
                    }
                    buf[len..len + part.len()].copy_from_slice(part);
                    len += part.len();
                    true
                };
                let mut fits = push(entry);
                if append {
                    fits &= push(b",append-files");
                }
                if let Some(pid) = abort_pid {
                    fits &= push(b",abort-pid=") && push(crate::out::decimal(pid.into(), &mut [0; 20]));
                }
                if fits {
                    buf[len] = 0;
                    *slot = buf.as_mut_ptr().cast();
                }
                return;
            }
            slot = slot.add(1);
        }
    }
}

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

extern "C" fn before_fork() {
    sighooks::before_fork();
    lists::lock_all();
}

extern "C" fn after_fork_parent() {
    lists::unlock_all();
    sighooks::after_fork();
}

extern "C" fn after_fork_child() {
    thread::reset_tid();
    lists::unlock_all_in_child();
    finish::set_pid();
    exits::forget_exiting();
    sink::after_fork_child();
    sighooks::after_fork();
}

/// The `on_exit` handler: hands its caller's stack pointer on (see `exits.rs`).
#[unsafe(naked)]
extern "C" fn at_exit(status: libc::c_int, arg: *mut c_void) {
    core::arch::naked_asm!("lea rdx, [rsp + 8]", "jmp {}", sym exit_end)
}

extern "C" fn exit_end(status: libc::c_int, _: *mut c_void, caller_sp: usize) {
    // A forked child that neither reports nor aborts lets exit finish as it would bare.
    if finish::has_an_end() {
        finish::finish(status, Way::Exit, &Entry::after_exit_handlers(caller_sp))
    }
}
