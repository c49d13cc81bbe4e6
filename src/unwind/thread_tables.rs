//! Per-thread tables too large for thread-local storage, lent from a pool and taken back when the
//! thread exits.
//!
//! Static TLS is carved out of every thread's stack, so the walker keeps only a small table of
//! stack shapes there; a thread that allocates from many places borrows a larger one (see
//! `fast.rs`). The tables come from `mmap`, never from the backend allocator the library
//! wraps, and a thread-specific key's destructor puts a thread's table back on a free list when
//! the thread exits, so there are never more tables than threads alive at once that asked for
//! one. Neither lending nor returning waits for a lock: when the pool's lock is busy (or was held
//! by another thread at a fork, in the child) a table is mapped or unmapped instead.

use crate::spinlock::RawMutex;
use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

/// Bytes of every table: one size for all, so any free table fits any borrower.
pub const TABLE_BYTES: usize = 48 * 1024;

/// Tables given back by threads that exited, linked through their first word.
struct Pool {
    lock: RawMutex,
    free: UnsafeCell<*mut *mut u8>,
}

// SAFETY: `free` is read and written only with `lock` held.
unsafe impl Sync for Pool {}

static POOL: Pool = Pool {
    lock: RawMutex::INIT,
    free: UnsafeCell::new(core::ptr::null_mut()),
};

/// The key whose destructor returns a thread's table; valid once READY is set.
static KEY: AtomicU32 = AtomicU32::new(0);
static READY: AtomicBool = AtomicBool::new(false);
/// What the borrower does when its thread exits, before the table goes back: given by `init`,
/// so that this pool knows nothing of who borrows from it.
static ON_RETURN: AtomicUsize = AtomicUsize::new(0);

/// Creates the key. Called once while the library initialises, before any thread can borrow;
/// `on_return` runs on an exiting thread before its table goes back to the pool.
pub fn init(on_return: fn()) {
    ON_RETURN.store(on_return as usize, Ordering::Relaxed);
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: a valid out-pointer and destructor; pthread_key_create neither allocates nor takes
    // a lock that a thread inside malloc could hold.
    if unsafe { libc::pthread_key_create(&mut key, Some(give_back)) } == 0 {
        KEY.store(key, Ordering::Relaxed);
        READY.store(true, Ordering::Release);
    }
}

/// A table of `TABLE_BYTES` for the calling thread, zero-filled when fresh and as its last owner
/// left it when reused; None when none can be had. The thread keeps it until it exits.
pub fn lend() -> Option<*mut u8> {
    if !READY.load(Ordering::Acquire) {
        return None;
    }
    let table = take_free().or_else(map)?;
    // SAFETY: KEY was created (READY). For the first 32 keys, which ours is when the library
    // initialises early, glibc stores the value in the thread's own descriptor; for a later key
    // it may calloc a block, a nested allocation that the caller's reentrancy guard records
    // without a stack.
    if unsafe { libc::pthread_setspecific(KEY.load(Ordering::Relaxed), table.cast()) } != 0 {
        put_free(table);
        return None;
    }
    Some(table)
}

fn take_free() -> Option<*mut u8> {
    if !POOL.lock.try_lock() {
        return None;
    }
    // SAFETY: the lock is held; every entry of the free list is a table of ours whose first word
    // links to the next.
    let table = unsafe {
        let head = *POOL.free.get();
        if !head.is_null() {
            *POOL.free.get() = *head.cast::<*mut *mut u8>();
        }
        head
    };
    // SAFETY: taken above, on this thread.
    unsafe { POOL.lock.unlock() };
    (!table.is_null()).then_some(table.cast())
}

fn put_free(table: *mut u8) {
    if !POOL.lock.try_lock() {
        // SAFETY: a mapping of TABLE_BYTES made by `map`, which nobody uses any more.
        unsafe { libc::munmap(table.cast(), TABLE_BYTES) };
        return;
    }
    // SAFETY: the lock is held and the table is ours alone; its first word becomes the link.
    unsafe {
        *table.cast::<*mut *mut u8>() = *POOL.free.get();
        *POOL.free.get() = table.cast();
        POOL.lock.unlock();
    }
}

fn map() -> Option<*mut u8> {
    // SAFETY: an anonymous private mapping; mmap takes no user-space lock and is not a
    // cancellation point.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            TABLE_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast())
}

/// The key's destructor, on the exiting thread: the thread forgets its table, which goes back to
/// the pool. An allocation later in the thread's exit walks with the small table again.
unsafe extern "C" fn give_back(table: *mut c_void) {
    let f = ON_RETURN.load(Ordering::Relaxed);
    if f != 0 {
        // SAFETY: `init` stored a `fn()` here; function pointers round-trip through usize.
        let f = unsafe { core::mem::transmute::<usize, fn()>(f) };
        f();
    }
    put_free(table.cast());
}
