//! The exit report for a process killed by a fatal signal (`leak-report`; `no-signal-report`
//! turns it off): a server stopped with SIGTERM or Ctrl-C, a crash. The report runs, then the
//! process dies of that same signal, so its exit status is what it would have been.
//!
//! The handler stands for the default action: it is installed for a fatal signal only while the
//! program has that signal at its default, and the program sees the default there, not our
//! handler (`sighooks.rs` keeps its view). A handler the program installs, or SIG_IGN, replaces
//! ours: the program's own always wins; one that puts the default back (a crash handler that
//! re-raises) puts ours back underneath, so the report still comes.
//!
//! The signal may interrupt a thread anywhere, inside malloc too. So the report made from the
//! handler never calls the real allocator (libdmem's own heap switches to pages of its own), and
//! skips `__libc_freeres`, which would. If the interrupted thread holds one of our list locks
//! it is in the middle of a link or unlink that it cannot finish while the handler runs: an
//! asynchronous signal (SIGTERM, SIGINT...) is then remembered and the report runs as soon as the
//! thread leaves the allocator (`deferred.rs`, on every allocation path); a crash there gets no
//! report. In every case a watchdog timer makes sure the process dies of the signal even if the
//! report cannot end.

use crate::finish::{self, Finisher, Way};
use crate::leak::Entry;
use crate::next::real_sigaction;
use crate::{lists, options, own_heap};
use core::sync::atomic::{AtomicI32, Ordering};
use libc::{c_int, c_void};

/// The signals whose default action ends the process and that a report is made for.
pub const FATAL: [c_int; 11] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGABRT,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGSEGV,
    libc::SIGSYS,
];

/// How long a report may take before the watchdog ends the process with the signal anyway.
const REPORT_SECONDS: i64 = 60;
/// How long an asynchronous signal waits for its report, which the interrupted thread runs once
/// it leaves the allocator, before the watchdog ends the process without one.
const DEFERRED_SECONDS: i64 = 2;
/// How long the handler waits for the list locks (held by other threads only for a few stores)
/// before it concludes that the interrupted thread holds one.
const LOCK_WAIT_NS: u64 = 50_000_000;

/// The signal the watchdog ends the process with.
static DYING_OF: AtomicI32 = AtomicI32::new(0);

/// The handler's address, as the kernel holds it in `sa_sigaction`.
pub fn handler_address() -> usize {
    on_fatal as *const () as usize
}

/// The action that installs the handler. SA_RESETHAND puts the default action back as the
/// handler starts, so a second such signal, or a crash inside the report, ends the process.
pub fn handler_action() -> libc::sigaction {
    // SAFETY: all-zero is a valid sigaction; sigemptyset only writes the mask.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = handler_address();
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND;
        libc::sigemptyset(&mut sa.sa_mask);
        sa
    }
}

/// Whether `sig` was raised by the kernel for the instruction the thread was running: returning
/// from the handler runs it again, which raises it again, now with the default action.
fn is_fault(sig: c_int, info: *const libc::siginfo_t) -> bool {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    code > 0
        && [
            libc::SIGILL,
            libc::SIGTRAP,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGSEGV,
        ]
        .contains(&sig)
}

/// Names a fault raised inside malloc or free: the address, the entry point and the header it
/// worked on. A header (the block's own, or a neighbour's on its list) whose page the program
/// made unreadable or unmapped faults there, and would otherwise end the process with no word.
fn name_fault_inside(sig: c_int, info: *const libc::siginfo_t) {
    let Some(f) = crate::thread::current().in_flight() else {
        return;
    };
    let name = match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        _ => "SIGTRAP",
    };
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; for these signals
    // si_addr is the faulting address.
    let at = unsafe { (*info).si_addr() } as *const u8;
    crate::sink::stderr()
        .str("dmem: ")
        .str(name)
        .str(" at ")
        .ptr(at)
        .str(" inside ")
        .str(f.entry())
        .str(", working on the header at ")
        .ptr(f.header as *const u8)
        .str(": the program made that header or its neighbour on the list unreadable (mprotect, munmap) or overwrote a link\n")
        .flush();
}

extern "C" fn on_fatal(sig: c_int, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    let fault = is_fault(sig, info);
    if fault {
        name_fault_inside(sig, info);
    }
    if finish::in_shared_memory_child() {
        finish::die(sig, fault);
        return;
    }
    match finish::finisher() {
        Finisher::This => {}
        // abort-shutdown's abort, a bad free's, or a crash inside the report itself.
        Finisher::Again => {
            finish::die(sig, fault);
            return;
        }
        Finisher::Other => finish::wait_for_the_end(),
    }
    own_heap::enter_emergency();
    DYING_OF.store(sig, Ordering::Relaxed);
    arm_watchdog(REPORT_SECONDS);
    if !lists::try_lock_all_within(LOCK_WAIT_NS) {
        if fault {
            crate::sink::stderr()
                .str("dmem: the program crashed inside the allocator; no leak report\n")
                .flush();
            finish::die(sig, fault);
            return;
        }
        // Finish the link or unlink first: the report runs when this thread leaves it.
        arm_watchdog(DEFERRED_SECONDS);
        crate::deferred::defer(sig, run_deferred);
        return;
    }
    lists::unlock_all();
    finish::report(0, Way::Signal, &Entry::capture());
    finish::die(sig, fault);
}

/// The report the handler deferred, run by the thread that leaves the allocator first
/// (`deferred.rs`).
fn run_deferred(sig: c_int) {
    // Usually the interrupted thread itself, now out of its link or unlink; any thread that gets
    // here first does as well, on behalf of the one that took the signal.
    arm_watchdog(REPORT_SECONDS);
    finish::report(0, Way::Signal, &Entry::capture());
    finish::die(sig, false);
}

/// After `seconds`, SIGALRM ends the process with the signal it is dying of, report or not.
fn arm_watchdog(seconds: i64) {
    // SAFETY: installing a handler of the SA_SIGINFO kind with zeroed structs, then a one-shot
    // real-time timer: plain system calls.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_watchdog as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        real_sigaction(libc::SIGALRM, &sa, core::ptr::null_mut());
        let t = libc::itimerval {
            it_interval: libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
            it_value: libc::timeval {
                tv_sec: seconds,
                tv_usec: 0,
            },
        };
        libc::setitimer(libc::ITIMER_REAL, &t, core::ptr::null_mut());
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGALRM);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, core::ptr::null_mut());
    }
}

extern "C" fn on_watchdog(_: c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    crate::sink::stderr()
        .str("dmem: the leak report did not finish in time; ending the process without it\n")
        .flush();
    finish::die(DYING_OF.load(Ordering::Relaxed), false);
}

/// Whether `leak-report` asks for the handlers: the constructor's question.
pub fn wanted() -> bool {
    let o = options::get();
    o.leak_report && o.signal_report
}
