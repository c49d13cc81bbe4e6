//! Per-thread state: the cached kernel thread id, the thread's list, and the reentrancy guard.
//!
//! The state lives in the thread's static TLS area (`tls.rs`), reached without a call. Its fields
//! are plain integers whose zero means "not yet known", so a thread's fresh area needs no
//! initialisation and nothing registers a destructor: the state stays usable while other
//! libraries' thread-local destructors run and free memory during thread exit.

use crate::tls;
use core::cell::Cell;
use core::sync::atomic::{compiler_fence, Ordering};

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

    /// The thread's record of the operation in flight (`analysis::carried`).
    #[inline(always)]
    fn inflight(self) -> *mut u64 {
        // SAFETY: the area is the calling thread's own; `inflight` is a field of it.
        unsafe { core::ptr::addr_of_mut!((*self.0).inflight).cast::<u64>() }
    }

    /// Records that operation `op` now works on the header `hdr`, before any list is changed
    /// for it: the header word first, so that a reader never pairs the operation with a stale
    /// header. The stores are volatile and fenced for the compiler, so they stand where they
    /// are written against the list's stores, as a debugger or a stopping signal sees them.
    #[inline(always)]
    pub fn begin(self, op: u64, hdr: *mut u8) {
        let w = self.inflight();
        // SAFETY: two words of the thread's own area, written by this thread alone; readers
        // only read them while the thread is stopped or gone.
        unsafe {
            w.add(1).write_volatile(hdr as u64);
            compiler_fence(Ordering::SeqCst);
            w.write_volatile(op);
        }
        compiler_fence(Ordering::SeqCst);
    }

    /// The operation in flight, if any (`analysis::carried::op`).
    #[inline(always)]
    pub fn op(self) -> u64 {
        // SAFETY: as in `begin`.
        unsafe { self.inflight().read_volatile() }
    }

    /// The whole record of the operation in flight, if one is: for a fatal signal's handler on
    /// this thread, which interrupted it.
    pub fn in_flight(self) -> Option<crate::analysis::carried::InFlight> {
        // SAFETY: as in `begin`.
        let hdr = unsafe { self.inflight().add(1).read_volatile() };
        crate::analysis::carried::InFlight::from_words([self.op(), hdr])
    }

    /// The operation in flight moves on to another header (a realloc to its new block).
    #[inline(always)]
    pub fn step(self, hdr: *mut u8) {
        compiler_fence(Ordering::SeqCst);
        // SAFETY: as in `begin`.
        unsafe { self.inflight().add(1).write_volatile(hdr as u64) };
        compiler_fence(Ordering::SeqCst);
    }

    /// No operation is in flight any more.
    #[inline(always)]
    pub fn end(self) {
        compiler_fence(Ordering::SeqCst);
        // SAFETY: as in `begin`.
        unsafe { self.inflight().write_volatile(0) };
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

/// The record (`analysis::carried::WORDS` words) of the operation in flight on the thread whose
/// thread pointer is `tp`; for the exit report, which reads it while that thread is stopped.
pub fn inflight_at(tp: usize) -> Option<[u64; 2]> {
    let area = tls::area_at(tp)?;
    // SAFETY: `tp` is a live (stopped) thread's pointer, so its static TLS area lies at the
    // same offset from it as ours does from ours; the two words are plain integers.
    unsafe {
        let w = core::ptr::addr_of!((*area).inflight).cast::<u64>();
        Some([w.read_volatile(), w.add(1).read_volatile()])
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
