//! The one way a process ends under libdmem: the exit report (`leak-report`), then
//! `abort-shutdown`'s abort or the exit itself, whichever way out the program took.
//!
//! Each way out reaches `finish` differently: `exit` and a return from `main` through the
//! `on_exit` handler (`lifecycle.rs`), `_exit`, `_Exit` and `quick_exit` through our exports of
//! them (`exits.rs`), a fatal signal through its handler (`signals.rs`). Only the first thread
//! to get here reports; the process ends here, with the raw `exit_group` system call, since
//! libc's `_exit` is now our own export.

use crate::leak::{self, Entry};
use crate::{options, sink};
use core::sync::atomic::{AtomicU32, Ordering};

/// How the program is leaving.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// `exit` or a return from `main`: the program's exit handlers and destructors have run and
    /// stdio is flushed, so the C and C++ runtimes' own buffers can be dropped first.
    Exit,
    /// `_exit`, `_Exit` or `quick_exit`: no stdio flush. The runtimes' buffers are kept (dropping
    /// them would flush stdio, printing twice what a forked child still holds of its parent's
    /// output), so they count as still reachable.
    Immediate,
    /// A fatal signal with its default action: the report runs inside the signal handler.
    Signal,
}

/// The kernel thread id of the thread that is finishing the process, 0 while none is.
static FINISHING: AtomicU32 = AtomicU32::new(0);
/// The process id libdmem started in (or forked into): a thread that sees another pid is in a
/// vfork or posix_spawn child, which shares our memory and must not report.
static PID: AtomicU32 = AtomicU32::new(0);

/// Records the process id; the constructor and the fork child handler call it.
pub fn set_pid() {
    PID.store(sink::getpid(), Ordering::Relaxed);
}

/// Whether this thread runs in a child that shares the parent's memory (vfork, posix_spawn,
/// clone with CLONE_VM): the pid is not the one our fork handler last recorded.
pub fn in_shared_memory_child() -> bool {
    let pid = PID.load(Ordering::Relaxed);
    pid != 0 && sink::getpid() != pid
}

/// Whether this process ends through `finish`: it has a leak report to make, or
/// `abort-shutdown` is for it. A forked child that has neither ends as it would bare.
pub fn has_an_end() -> bool {
    options::get().leak_report || options::aborts_here()
}

/// Which thread finishes the process, as `finisher` found it.
pub enum Finisher {
    /// This thread, from now on.
    This,
    /// This very thread, already (abort-shutdown's abort, or a crash in the report).
    Again,
    /// Another thread; this one must wait for the end.
    Other,
}

/// Makes this thread the one that finishes the process, unless one already is.
pub fn finisher() -> Finisher {
    let me = crate::thread::gettid();
    match FINISHING.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Finisher::This,
        Err(t) if t == me => Finisher::Again,
        Err(_) => Finisher::Other,
    }
}

/// Waits for the thread that finishes the process to end it.
pub fn wait_for_the_end() -> ! {
    loop {
        // SAFETY: pause only waits for a signal; the finishing thread ends the whole process.
        unsafe { libc::pause() };
    }
}

/// Ends the process now, with `status`, running nothing more.
pub fn exit_now(status: i32) -> ! {
    // SAFETY: exit_group ends every thread of the process and never returns.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    unreachable!("exit_group returned")
}

/// Runs the report for `way` and returns the status to exit with (the program's, or
/// `leak-exitcode` when the report found leaks). The caller has claimed the process. `entry`
/// holds the registers taken where the program left (in our export of `_exit`, in the exit
/// handler, in the signal handler): the calling thread's stack is scanned from there up, not
/// from here, since the frames between hold stale addresses of earlier calls into malloc.
/// Never inlined, and the report's frames die with it, below the stack `abort-shutdown` scrubs.
#[inline(never)]
pub fn report(status: i32, way: Way, entry: &Entry) -> i32 {
    let o = options::get();
    if way == Way::Exit {
        // stdio is flushed only after the exit handlers; do it now so no output is lost whatever
        // follows.
        // SAFETY: fflush(NULL) flushes every stream.
        unsafe { libc::fflush(core::ptr::null_mut()) };
        crate::exit_funcs::free_spent();
        if o.freeres {
            free_libc_buffers();
        }
    }
    if o.leak_report && leak::leak_report(entry) > 0 {
        return o.leak_exitcode.unwrap_or(status);
    }
    status
}

/// How long abort-shutdown waits for the lists before it aborts anyway.
const LISTS_WAIT_NS: u64 = 1_000_000_000;

/// The end of a normal way out: the report, then abort-shutdown's abort or the exit. `entry` is
/// taken by the caller in the frame where the program left (see `report`).
pub fn finish(status: i32, way: Way, entry: &Entry) -> ! {
    if in_shared_memory_child() {
        exit_now(status);
    }
    match finisher() {
        Finisher::This => {}
        Finisher::Again => exit_now(status),
        Finisher::Other => wait_for_the_end(),
    }
    entry.record();
    let code = report(status, way, entry);
    if options::aborts_here() {
        // No other thread may be half-way through a change of a list when the core is written:
        // take them all, waiting a little for an owner inside a change (one that never leaves
        // it, a thread stopped by a debugger, must not keep the core from being written).
        let held = crate::lists::try_lock_all_within(LISTS_WAIT_NS);
        // The floor is found while the library may still allocate (its map of memory), before
        // the emergency pages go; the zeroing after allocates nothing.
        let floor = scrub_floor(held);
        crate::own_heap::discard_emergency();
        zero_below(floor);
        // The kernel writes a core holding exactly the blocks never freed: SIGABRT at its default
        // action, whatever handler the program installed for its own aborts.
        die(libc::SIGABRT, false);
    }
    exit_now(code)
}

/// Ends the process of `sig`: the default action is back (SA_RESETHAND, or set here), so a fault
/// returns to the faulting instruction and an asynchronous signal is raised again and unblocked.
/// `abort-shutdown`'s abort comes here too, with SIGABRT: the program's own SIGABRT handler is
/// for its own aborts, and one that allocates (while the lists are held for the core), blocks,
/// calls `_exit` or jumps away would leave no core.
pub fn die(sig: libc::c_int, fault: bool) {
    // The default action may write a core: it must not hold the report's copies (a vfork
    // child's memory is its parent's, whose they would be).
    if !in_shared_memory_child() {
        crate::own_heap::discard_emergency();
    }
    // SAFETY: setting the default action, raising the signal at this thread and unblocking it:
    // plain system calls on valid arguments.
    unsafe {
        let mut dfl: libc::sigaction = core::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        crate::next::real_sigaction(sig, &dfl, core::ptr::null_mut());
        if fault {
            return;
        }
        libc::syscall(libc::SYS_tgkill, libc::getpid(), crate::thread::gettid(), sig);
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, core::ptr::null_mut());
    }
    // A signal the process blocks everywhere else, or one that did not kill: end it the way a
    // signal would be seen, 128 + the signal.
    exit_now(128 + sig)
}

/// How deep below the frame that finishes the process the report's frames may have reached.
const SCRUB_BYTES: usize = 64 << 10;

/// Where zeroing the dead stack below this frame must stop. The leak report's frames left block
/// addresses in dead stack slots; a debugger scanning the core from abort's stack pointer would
/// take them for live references and disagree with the report, so `zero_below` clears them.
///
/// Only this thread's own stack is zeroed: never below the mapping that holds the stack
/// pointer, and, for a thread running on a stack the program malloc'ed (a coroutine's, through
/// makecontext), never below that block's first byte. Below it lie the block's header and other
/// blocks, which the core must show as they were. With the lists not held (another thread kept
/// one past the wait) the block cannot be told safely, and nothing is zeroed.
fn scrub_floor(lists_held: bool) -> usize {
    let here = stack_pointer();
    if !lists_held {
        return here;
    }
    let Some((mut floor, end)) = crate::procmaps::mapping_containing(here) else {
        return here;
    };
    // The main thread's own stack holds no block: the walk that finds the block a coroutine
    // runs on is needed only elsewhere (a pass over every header, a tenth of a second on a
    // million blocks).
    if !(floor..end).contains(&main_stack_end()) {
        let maps = crate::procmaps::all();
        crate::lists::walk::walk_locked(&|s, e| leak::readable(&maps, s, e), &mut |hdr| {
            let user = crate::header::to_user(hdr as *const crate::header::Header as *mut _) as usize;
            if user <= here && here < user + hdr.size() {
                floor = floor.max(user);
            }
        });
    }
    here.saturating_sub(SCRUB_BYTES).max(floor).next_multiple_of(8)
}

/// An address in the main thread's stack: the top of it as the program started, which the
/// dynamic loader keeps.
fn main_stack_end() -> usize {
    unsafe extern "C" {
        static __libc_stack_end: usize;
    }
    // SAFETY: ld.so defines `__libc_stack_end`, a pointer-sized word it sets once before any
    // program code runs and never changes after.
    unsafe { __libc_stack_end }
}

fn stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: reads the stack pointer register into a general register; no memory is touched.
    unsafe { core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
    sp
}

/// Zeroes `[floor, stack pointer)`: every dead frame below the running one, down to `floor`.
/// It allocates nothing, so it may run after the emergency pages are gone.
#[inline(never)]
fn zero_below(floor: usize) {
    // SAFETY: `floor` is 8-aligned and no lower than the start of this thread's stack (its
    // mapping, or the block it runs on; `scrub_floor`), so every word written lies in this
    // thread's stack below its stack pointer: dead frames that nothing refers to. The block
    // skips itself when `floor` is not below the stack pointer. Without `nostack` the compiler
    // keeps nothing in the red zone across the block, so clearing it too is sound; the
    // direction flag is clear by the ABI.
    unsafe {
        core::arch::asm!(
            "mov rcx, rsp",
            "sub rcx, rdi",
            "jbe 2f",
            "shr rcx, 3",
            "rep stosq",
            "2:",
            inout("rdi") floor => _,
            out("rcx") _,
            in("rax") 0usize,
        );
    }
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
                let f: extern "C" fn() = core::mem::transmute::<*mut libc::c_void, extern "C" fn()>(f);
                f();
            }
        }
    }
}
