//! Per-thread state: the cached kernel thread id, the thread's list, and the reentrancy guard.
//!
//! Every field is a `Cell` of a plain integer with a const initialiser, so the thread-locals need
//! no lazy initialisation and register no destructor: they stay usable while other libraries'
//! thread-local destructors run and free memory during thread exit.

use core::cell::Cell;
use core::sync::atomic::{AtomicUsize, Ordering};

thread_local! {
    static TID: Cell<u32> = const { Cell::new(0) };
    static LIST: Cell<usize> = const { Cell::new(usize::MAX) };
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

static NEXT_LIST: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's kernel thread id, from a cache filled by one syscall per thread.
pub fn tid() -> u32 {
    TID.with(|t| {
        let cached = t.get();
        if cached != 0 {
            return cached;
        }
        let fresh = gettid();
        t.set(fresh);
        fresh
    })
}

/// Refreshes the cached thread id; the child of a fork has a new one.
pub fn reset_tid() {
    TID.with(|t| t.set(gettid()));
}

/// The kernel thread id straight from the system call, without the cache: for a signal handler,
/// which may run before the thread's cache is filled or in a child whose cache is stale.
pub fn gettid() -> u32 {
    // SAFETY: gettid takes no arguments, cannot fail and touches no memory of ours; a raw system
    // call is async-signal-safe.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The list this thread puts its blocks on: threads are spread round-robin over the lists, so
/// threads share a lock only when there are more of them than lists.
pub fn home_list(nlists: usize) -> usize {
    LIST.with(|l| {
        let cur = l.get();
        if cur != usize::MAX {
            return cur;
        }
        let fresh = NEXT_LIST.fetch_add(1, Ordering::Relaxed) % nlists;
        l.set(fresh);
        fresh
    })
}

/// Marks the thread as inside libdmem for its lifetime. Anything that may call back into malloc
/// (the unwinder's first use, dlsym, symbolisation) runs under a guard; a nested call sees
/// `entered` false and takes the plain path.
pub struct Guard {
    _private: (),
}

impl Guard {
    /// Enters, or returns None when the thread is already inside libdmem.
    pub fn enter() -> Option<Guard> {
        BUSY.with(|b| {
            if b.get() {
                None
            } else {
                b.set(true);
                Some(Guard { _private: () })
            }
        })
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        BUSY.with(|b| b.set(false));
    }
}
