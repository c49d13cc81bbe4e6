//! Work the exit path leaves for the allocation path to run: a fatal signal's report that could
//! not run in the handler, because the interrupted thread held a list lock, runs as soon as that
//! thread (or any other) leaves the allocator.
//!
//! The allocation path checks one word here and knows nothing of reports: the runner is a
//! function the signal handler (`signals.rs`) leaves with the signal, so the allocation path
//! imports only downward.

use core::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// The signal whose report waits; 0 for none.
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The function that runs it, as an address; stored before `SIGNAL`.
static RUNNER: AtomicUsize = AtomicUsize::new(0);

/// Leaves `run(sig)` for the next thread that leaves the allocator.
pub fn defer(sig: i32, run: fn(i32)) {
    RUNNER.store(run as usize, Ordering::Relaxed);
    SIGNAL.store(sig, Ordering::Release);
}

/// Runs what waits, if anything does: called on the way out of every allocation path, where no
/// list lock is held.
#[inline(always)]
pub fn run_pending() {
    if SIGNAL.load(Ordering::Relaxed) != 0 {
        run();
    }
}

#[cold]
#[inline(never)]
fn run() {
    let sig = SIGNAL.swap(0, Ordering::AcqRel);
    if sig == 0 {
        return;
    }
    let at = RUNNER.load(Ordering::Relaxed);
    // SAFETY: `defer` stored a `fn(i32)` before the signal, and the Acquire of the swap that
    // took the signal makes that store visible.
    let run: fn(i32) = unsafe { core::mem::transmute::<usize, fn(i32)>(at) };
    run(sig);
}
