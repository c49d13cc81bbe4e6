//! Per-thread state: the cached kernel thread id, the thread's list, and the reentrancy guard.
//!
//! The state lives in the thread's static TLS area (`tls.rs`), reached without a call. Its fields
//! are plain integers whose zero means "not yet known", so a thread's fresh area needs no
//! initialisation and nothing registers a destructor: the state stays usable while other
//! libraries' thread-local destructors run and free memory during thread exit.

use crate::tls;
use core::cell::Cell;

/// The prefix of the thread's area that this file owns.
#[repr(C)]
pub struct State {
    tid: Cell<u32>,
    busy: Cell<bool>,
    /// The thread's home list plus one; zero before the first allocation.
    list: Cell<usize>,
    /// Whether the thread owns its home list (`lists.rs`).
    owns: Cell<bool>,
    /// Whether the thread's exit gave its list up: it never takes another.
    exited: Cell<bool>,
}

const _: () =
    assert!(core::mem::size_of::<State>() <= tls::THREAD_WORDS * 8 && core::mem::align_of::<State>() <= 8);

#[inline(always)]
fn state<'a>() -> &'a State {
    // SAFETY: the area is the calling thread's own and outlives any use of it on this thread;
    // its `thread` words are room for a `State` (asserted above), whose all-zero bytes are a
    // valid state, and only this thread touches them, through `Cell`s.
    unsafe { &*(*tls::area()).thread.as_ptr().cast::<State>() }
}

/// The calling thread's kernel thread id, from a cache filled by one syscall per thread.
#[inline(always)]
pub fn tid() -> u32 {
    let t = &state().tid;
    let cached = t.get();
    if cached != 0 {
        return cached;
    }
    let fresh = gettid();
    t.set(fresh);
    fresh
}

/// Refreshes the cached thread id; the child of a fork has a new one.
pub fn reset_tid() {
    state().tid.set(gettid());
}

/// The kernel thread id straight from the system call, without the cache: for a signal handler,
/// which may run before the thread's cache is filled or in a child whose cache is stale.
pub fn gettid() -> u32 {
    // SAFETY: gettid takes no arguments, cannot fail and touches no memory of ours; a raw system
    // call is async-signal-safe.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The thread's home list, if it has one yet, and whether it owns it.
#[inline(always)]
pub fn home() -> Option<(usize, bool)> {
    let st = state();
    match st.list.get() {
        0 => None,
        n => Some((n - 1, st.owns.get())),
    }
}

/// Sets the thread's home list (`lists.rs` decides which).
pub fn set_home(list: usize, owns: bool) {
    let st = state();
    st.list.set(list + 1);
    st.owns.set(owns);
}

/// Whether the thread gave its list up on its way out.
pub fn exited() -> bool {
    state().exited.get()
}

/// Marks the thread as on its way out.
pub fn set_exited() {
    state().exited.set(true);
}

/// Marks the thread as inside libdmem for its lifetime. Anything that may call back into malloc
/// (the unwinder's first use, dlsym, symbolisation) runs under a guard; a nested call sees
/// `entered` false and takes the plain path.
pub struct Guard {
    _private: (),
}

impl Guard {
    /// Enters, or returns None when the thread is already inside libdmem.
    #[inline(always)]
    pub fn enter() -> Option<Guard> {
        let b = &state().busy;
        if b.get() {
            None
        } else {
            b.set(true);
            Some(Guard { _private: () })
        }
    }
}

impl Drop for Guard {
    #[inline(always)]
    fn drop(&mut self) {
        state().busy.set(false);
    }
}
