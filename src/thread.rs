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
    current().state()
}

/// The calling thread's area, found once for a path that would otherwise find it again for each
/// of its thread id, home list, guard and walker (the free history's path needs all four). Valid
/// on the thread that found it only.
#[derive(Clone, Copy)]
pub struct Current(*mut tls::Area);

/// The calling thread's area (see `Current`).
#[inline(always)]
pub fn current() -> Current {
    Current(tls::area())
}

impl Current {
    #[inline(always)]
    fn state<'a>(self) -> &'a State {
        // SAFETY: the area is the calling thread's own (a `Current` is not passed to another
        // thread) and outlives any use of it on this thread; its `thread` words are room for a
        // `State` (asserted above), whose all-zero bytes are a valid state, and only this thread
        // touches them, through `Cell`s.
        unsafe { &*(*self.0).thread.as_ptr().cast::<State>() }
    }

    /// The thread's whole area, for the walker's room in it.
    #[inline(always)]
    pub fn area(self) -> *mut tls::Area {
        self.0
    }

    /// The thread's kernel thread id, from a cache filled by one syscall per thread.
    #[inline(always)]
    pub fn tid(self) -> u32 {
        let t = &self.state().tid;
        let cached = t.get();
        if cached != 0 {
            return cached;
        }
        let fresh = gettid();
        t.set(fresh);
        fresh
    }

    /// The thread's home list, if it has one yet, and whether it owns it.
    #[inline(always)]
    pub fn home(self) -> Option<(usize, bool)> {
        let st = self.state();
        match st.list.get() {
            0 => None,
            n => Some((n - 1, st.owns.get())),
        }
    }

    /// Enters libdmem (see `Guard`), or returns None when the thread is already inside.
    #[inline(always)]
    pub fn enter<'a>(self) -> Option<Guard<'a>> {
        let busy = &self.state().busy;
        if busy.get() {
            None
        } else {
            busy.set(true);
            Some(Guard { busy })
        }
    }
}

/// The calling thread's kernel thread id, from a cache filled by one syscall per thread.
#[inline(always)]
pub fn tid() -> u32 {
    current().tid()
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
    current().home()
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
pub struct Guard<'a> {
    /// The thread's flag, found on entry, so that leaving does not look for it again.
    busy: &'a Cell<bool>,
}

impl Guard<'_> {
    /// Enters, or returns None when the thread is already inside libdmem.
    #[inline(always)]
    pub fn enter<'a>() -> Option<Guard<'a>> {
        current().enter()
    }
}

impl Drop for Guard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.busy.set(false);
    }
}
