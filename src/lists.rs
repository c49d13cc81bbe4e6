//! The live-block lists: many doubly-linked lists, each with its own lock and counters.
//!
//! A thread puts its blocks on its home list (threads are spread round-robin), and the list index
//! is stored in the header, so a free from any thread finds the right lock. A lock is held only
//! for the few pointer and counter writes of one link or unlink. The heads are a static array so
//! a debugger finds them through the layout descriptor.

use crate::header::Header;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, Ordering};

pub const NLISTS: usize = 64;

/// One list. Aligned to two cache lines so neighbouring lists never share one (adjacent-line
/// prefetch pairs lines on x86).
#[repr(C, align(128))]
pub struct List {
    pub head: UnsafeCell<*mut Header>,
    pub live_blocks: UnsafeCell<u64>,
    pub live_bytes: UnsafeCell<u64>,
    pub allocs: UnsafeCell<u64>,
    pub frees: UnsafeCell<u64>,
    lock: RawMutex,
}

// SAFETY: every field but the lock is read and written only with `lock` held (or, for a debugger,
// from outside the process).
unsafe impl Sync for List {}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: List = List {
    head: UnsafeCell::new(core::ptr::null_mut()),
    live_blocks: UnsafeCell::new(0),
    live_bytes: UnsafeCell::new(0),
    allocs: UnsafeCell::new(0),
    frees: UnsafeCell::new(0),
    lock: RawMutex::INIT,
};

pub static LISTS: [List; NLISTS] = [EMPTY; NLISTS];

/// A futex mutex (unlocked, locked, locked with waiters). It is written here rather than taken
/// from a crate because it must never allocate: parking_lot's slow path creates per-thread data
/// and registers a TLS destructor, which calls calloc, which would re-enter this very lock (the
/// fork handler's `lock_all` deadlocked on itself that way).
pub struct RawMutex(AtomicU32);

impl RawMutex {
    // Used only to build the static list array, where each use is a fresh mutex.
    #[allow(clippy::declare_interior_mutable_const)]
    pub const INIT: RawMutex = RawMutex(AtomicU32::new(0));

    pub fn lock(&self) {
        if self
            .0
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        // Hold times are a few stores, so spin briefly before sleeping.
        for _ in 0..100 {
            core::hint::spin_loop();
            if self.0.load(Ordering::Relaxed) == 0
                && self
                    .0
                    .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
        }
        while self.0.swap(2, Ordering::Acquire) != 0 {
            // SAFETY: FUTEX_WAIT on a word we own, with no timeout; it returns when woken or
            // when the word no longer holds 2.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.0.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    2,
                    0usize,
                );
            }
        }
    }

    /// # Safety
    /// The caller holds the lock (taken on any thread: `lock_all` and `unlock_all` straddle fork).
    pub unsafe fn unlock(&self) {
        if self.0.swap(0, Ordering::Release) == 2 {
            // SAFETY: FUTEX_WAKE on our own word wakes at most one waiter.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.0.as_ptr(),
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    1,
                )
            };
        }
    }
}

/// Holds a list's lock for a scope.
struct Locked<'a>(&'a List);

impl<'a> Locked<'a> {
    fn new(list: &'a List) -> Self {
        list.lock.lock();
        Locked(list)
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard took the lock in `new`, on this thread.
        unsafe { self.0.lock.unlock() };
    }
}

/// Puts a fully written header at the head of its list (the index in its size word).
///
/// # Safety
/// `hdr` must point to a writable header that is on no list.
pub unsafe fn link(hdr: *mut Header) {
    // SAFETY: the caller hands us a valid header that is on no list.
    let h = unsafe { &mut *hdr };
    // The index was stored by us and is below NLISTS; the modulo only lets the compiler see it.
    let list = &LISTS[h.list() % NLISTS];
    let size = h.size() as u64;
    let _g = Locked::new(list);
    // SAFETY: the list's lock is held, so its head and counters and the neighbouring header are
    // ours to write; every header on a list is a valid live header.
    unsafe {
        let head = *list.head.get();
        h.prev = core::ptr::null_mut();
        h.next = head;
        if !head.is_null() {
            (*head).prev = hdr;
        }
        *list.head.get() = hdr;
        *list.live_blocks.get() += 1;
        *list.live_bytes.get() += size;
        *list.allocs.get() += 1;
    }
}

/// Takes a header off its list.
///
/// # Safety
/// `hdr` must be a header currently on its list; the caller proves that by having won
/// `header::claim` on it, so no other thread can unlink it at the same time.
pub unsafe fn unlink(hdr: *mut Header) {
    // SAFETY: the caller guarantees a live header on its list.
    let h = unsafe { &mut *hdr };
    let Some(list) = LISTS.get(h.list()) else { return };
    let size = h.size() as u64;
    let _g = Locked::new(list);
    // SAFETY: lock held as in `link`; the neighbours of a header on the list are valid headers.
    unsafe {
        if h.prev.is_null() {
            *list.head.get() = h.next;
        } else {
            (*h.prev).next = h.next;
        }
        if !h.next.is_null() {
            (*h.next).prev = h.prev;
        }
        *list.live_blocks.get() -= 1;
        *list.live_bytes.get() -= size;
        *list.frees.get() += 1;
    }
    h.next = core::ptr::null_mut();
    h.prev = core::ptr::null_mut();
}

/// Before fork: take every lock so no other thread is half-way through a link when the child's
/// copy of memory is made.
pub fn lock_all() {
    for l in LISTS.iter() {
        l.lock.lock();
    }
}

/// After fork, in the parent and in the child (where the locks were taken by this very thread).
pub fn unlock_all() {
    for l in LISTS.iter() {
        // SAFETY: `lock_all` took every lock on this thread before the fork.
        unsafe { l.lock.unlock() };
    }
}
