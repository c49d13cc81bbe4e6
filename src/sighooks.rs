//! `sigaction`, `signal` and every other way into a signal's disposition, exported so the
//! program sees the dispositions it set, whatever libdmem keeps underneath.
//!
//! With `leak-report`, libdmem's fatal-signal handler (`signals.rs`) is installed for each fatal
//! signal whose disposition is the default, and only then: it stands for the default. The
//! program must not be able to tell. CPython, for one, installs its KeyboardInterrupt handler
//! only when it finds SIGINT at its default. So for those signals the program's view is kept
//! here, exactly as the kernel would hold it bare, and:
//!
//! - a query returns that view;
//! - any change is made on the view itself: the view goes back into the kernel, the C library's
//!   own function runs on it, so its return value, errno and side effects are glibc's (`signal`'s
//!   SA_RESTART, `sigset`'s SIG_HOLD, `siginterrupt`'s memory of interrupting signals), and then,
//!   if the disposition is the default again, the view is kept and libdmem's handler goes back
//!   underneath. A handler the program installs, or SIG_IGN, replaces ours outright: the
//!   program's own always wins, and a signal it ignores is never taken.
//!
//! glibc's `signal`, `sigset`, `sysv_signal`, `sigignore` and `siginterrupt` call its
//! `sigaction` internally, past our export, so each of them is exported here too, along with
//! `__sigaction` and `__sysv_signal` (what `signal` names under strict ISO C). The obsolete
//! `sigvec` (not linkable since glibc 2.21) and a raw `rt_sigaction` system call are not seen.
//!
//! The view is read and written under a lock with every signal blocked on the calling thread, so
//! a handler that calls `sigaction` cannot interrupt it; the C library's function runs between,
//! with the thread's own mask, which `sigset` reads and changes. Between the view going into the
//! kernel and libdmem's handler coming back (a few system calls), a fatal signal ends the
//! process without a report, as the default would.

use crate::next::{self, real_sigaction, Next};
use crate::signals;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};
use libc::{c_int, sighandler_t};

/// The program's view of each of `signals::FATAL`, valid while libdmem's handler is installed
/// for that signal.
struct Views(UnsafeCell<[libc::sigaction; signals::FATAL.len()]>);
// SAFETY: read and written only under `LOCK` (see `Locked`).
unsafe impl Sync for Views {}
// SAFETY: an all-zero sigaction is valid plain data (SIG_DFL, no flags, an empty mask).
static VIEWS: Views = Views(UnsafeCell::new(unsafe { core::mem::zeroed() }));

/// Held while a managed signal's disposition is read or changed.
static LOCK: AtomicBool = AtomicBool::new(false);

/// The lock, taken with every signal blocked on this thread, and the mask it had.
struct Locked {
    mask: libc::sigset_t,
}

impl Locked {
    fn take() -> Locked {
        // SAFETY: sigset_t is plain data; the calls only fill and apply the sets we pass.
        let mask = unsafe {
            let mut all: libc::sigset_t = core::mem::zeroed();
            let mut old: libc::sigset_t = core::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            old
        };
        while LOCK
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        Locked { mask }
    }

    /// The view of `signals::FATAL[i]`.
    fn view(&mut self, i: usize) -> &mut libc::sigaction {
        // SAFETY: the lock is held by this `Locked`, the only way to the views; the reference
        // does not outlive it.
        unsafe { &mut (*VIEWS.0.get())[i] }
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        LOCK.store(false, Ordering::Release);
        // SAFETY: restores the mask saved in `take`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.mask, core::ptr::null_mut()) };
    }
}

/// The lock taken across a fork, and the forking thread's mask.
struct ForkHold(UnsafeCell<Option<Locked>>);
// SAFETY: written by the forking thread in `before_fork` once it holds the lock, and taken back
// by the same thread on both sides of the fork; no other thread touches it meanwhile.
unsafe impl Sync for ForkHold {}
static FORK_HOLD: ForkHold = ForkHold(UnsafeCell::new(None));

/// Takes the lock before a fork (the lifecycle's fork handlers), so a child never starts with
/// it held by a thread that does not exist there, nor with a view half written.
pub fn before_fork() {
    let lock = Locked::take();
    // SAFETY: see `ForkHold`: this thread holds the lock.
    unsafe { *FORK_HOLD.0.get() = Some(lock) };
}

/// Gives the lock back, and the forking thread's mask, on either side of a fork.
pub fn after_fork() {
    // SAFETY: see `ForkHold`: the thread that stored it, holding the lock.
    drop(unsafe { (*FORK_HOLD.0.get()).take() });
}

/// The index of `sig` in `signals::FATAL` when libdmem may keep its handler under it.
fn managed(sig: c_int) -> Option<usize> {
    if !signals::wanted() {
        return None;
    }
    signals::FATAL.iter().position(|&s| s == sig)
}

/// What the kernel holds for `sig` now.
fn current(sig: c_int) -> libc::sigaction {
    // SAFETY: all-zero is a valid sigaction, filled by the query.
    let mut now: libc::sigaction = unsafe { core::mem::zeroed() };
    let _errno = crate::errno::Keep::new();
    real_sigaction(sig, core::ptr::null(), &mut now);
    now
}

fn is_ours(a: &libc::sigaction) -> bool {
    a.sa_sigaction == signals::handler_address()
}

/// Puts libdmem's handler under `sig` if its disposition is now the default, keeping what the
/// kernel held as the program's view. With the lock held.
fn keep_ours_under(lock: &mut Locked, i: usize) {
    let sig = signals::FATAL[i];
    let now = current(sig);
    if now.sa_sigaction != libc::SIG_DFL || crate::finish::in_shared_memory_child() {
        return;
    }
    *lock.view(i) = now;
    let _errno = crate::errno::Keep::new();
    real_sigaction(sig, &signals::handler_action(), core::ptr::null_mut());
}

/// Installs libdmem's handler for every fatal signal at its default: the constructor's call.
pub fn install_under_defaults() {
    let mut lock = Locked::take();
    for i in 0..signals::FATAL.len() {
        keep_ours_under(&mut lock, i);
    }
}

/// Runs `call`, the C library's own function changing `sig`'s disposition, on the program's
/// view (see the module comment) and returns what it returns. The call itself runs outside the
/// lock, with the thread's own signal mask, which it may read or change (`sigset`).
fn on_the_view<R>(i: usize, call: impl FnOnce() -> R) -> R {
    let sig = signals::FATAL[i];
    {
        let mut lock = Locked::take();
        if is_ours(&current(sig)) {
            let _errno = crate::errno::Keep::new();
            real_sigaction(sig, lock.view(i), core::ptr::null_mut());
        }
    }
    let result = call();
    keep_ours_under(&mut Locked::take(), i);
    result
}

type HandlerFn = unsafe extern "C" fn(c_int, sighandler_t) -> sighandler_t;
type IntFn = unsafe extern "C" fn(c_int) -> c_int;
type IntIntFn = unsafe extern "C" fn(c_int, c_int) -> c_int;

/// # Safety
/// The C `sigaction` contract.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let Some(i) = managed(sig) else {
        return real_sigaction(sig, act, old);
    };
    if act.is_null() {
        // A query: the view while ours is underneath, else what the kernel holds.
        let mut lock = Locked::take();
        let now = current(sig);
        if !old.is_null() {
            let shown = if is_ours(&now) { *lock.view(i) } else { now };
            // SAFETY: the caller passes a writable sigaction.
            unsafe { *old = shown };
        }
        return 0;
    }
    on_the_view(i, || real_sigaction(sig, act, old))
}

/// # Safety
/// As `sigaction`, which glibc exports under this name too.
#[no_mangle]
pub unsafe extern "C" fn __sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { sigaction(sig, act, old) }
}

/// Runs `call`, one of the C library's calls for `sig`'s disposition: on the program's view when
/// libdmem keeps its handler under that signal, else as it is.
fn for_signal<R>(sig: c_int, call: impl FnOnce() -> R) -> R {
    match managed(sig) {
        None => call(),
        Some(i) => on_the_view(i, call),
    }
}

/// A `(int, sighandler_t) -> sighandler_t` function of the C library, on the view.
fn handler_call(next: &Next, sig: c_int, handler: sighandler_t) -> sighandler_t {
    for_signal(sig, || match next.func::<HandlerFn>() {
        // SAFETY: the C function of that signature, with the caller's arguments.
        Some(f) => unsafe { f(sig, handler) },
        None => libc::SIG_ERR,
    })
}

/// # Safety
/// The C `signal` contract.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    handler_call(&next::SIGNAL, sig, handler)
}

/// # Safety
/// As `signal`, which it is in glibc.
#[no_mangle]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    handler_call(&next::BSD_SIGNAL, sig, handler)
}

/// # Safety
/// As `signal`, which it is in glibc.
#[no_mangle]
pub unsafe extern "C" fn ssignal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    handler_call(&next::SSIGNAL, sig, handler)
}

/// # Safety
/// The C `sysv_signal` contract (SA_RESETHAND, no SA_RESTART).
#[no_mangle]
pub unsafe extern "C" fn sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    handler_call(&next::SYSV_SIGNAL, sig, handler)
}

/// # Safety
/// As `sysv_signal`: what `signal` names when a program is built for strict ISO C.
#[no_mangle]
pub unsafe extern "C" fn __sysv_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    handler_call(&next::SYSV_SIGNAL, sig, handler)
}

/// # Safety
/// The C `sigset` contract (SIG_HOLD blocks the signal).
#[no_mangle]
pub unsafe extern "C" fn sigset(sig: c_int, disp: sighandler_t) -> sighandler_t {
    handler_call(&next::SIGSET, sig, disp)
}

/// # Safety
/// The C `sigignore` contract.
#[no_mangle]
pub unsafe extern "C" fn sigignore(sig: c_int) -> c_int {
    for_signal(sig, || match next::SIGIGNORE.func::<IntFn>() {
        // SAFETY: glibc's `int sigignore(int)`.
        Some(f) => unsafe { f(sig) },
        None => -1,
    })
}

/// # Safety
/// The C `siginterrupt` contract.
#[no_mangle]
pub unsafe extern "C" fn siginterrupt(sig: c_int, flag: c_int) -> c_int {
    for_signal(sig, || match next::SIGINTERRUPT.func::<IntIntFn>() {
        // SAFETY: glibc's `int siginterrupt(int, int)`.
        Some(f) => unsafe { f(sig, flag) },
        None => -1,
    })
}
