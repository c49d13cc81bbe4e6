//! The lock of each live-block list, taken only when no thread owns the list (see `lists.rs`): a
//! spin lock that never allocates and is released by a plain store.

use core::sync::atomic::{AtomicBool, Ordering};

/// A spin lock whose release is a plain store.
///
/// It never allocates (parking_lot's slow path creates per-thread data and registers a TLS
/// destructor, which calls calloc, which re-entered this very lock from the fork handler). A list
/// is held for a few stores, and threads are spread over the lists, so the lock is nearly always
/// free: what it costs is then one atomic exchange to take it, and a release that needs no atomic
/// read-modify-write (a futex mutex pays a second exchange there, to learn whether to wake
/// anyone). A waiter spins briefly, then yields the processor, then sleeps, so a holder that was
/// preempted gets to run even when the waiter has a real-time priority.
pub struct RawMutex(AtomicBool);

impl RawMutex {
    // Used only to build the static list array, where each use is a fresh lock.
    #[allow(clippy::declare_interior_mutable_const)]
    pub const INIT: RawMutex = RawMutex(AtomicBool::new(false));

    #[inline(always)]
    pub fn lock(&self) {
        if self
            .0
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) {
        let mut waits = 0u32;
        loop {
            while self.0.load(Ordering::Relaxed) {
                waits = waits.saturating_add(1);
                if waits < 100 {
                    core::hint::spin_loop();
                } else if waits < 200 {
                    // SAFETY: sched_yield takes nothing and cannot fail on Linux.
                    unsafe { libc::sched_yield() };
                } else {
                    let pause = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 50_000,
                    };
                    // The raw system call: libc's nanosleep is a cancellation point, and a
                    // thread must not be cancelled inside malloc while it waits for a list.
                    // SAFETY: a valid timespec and no remainder slot. errno may be set to EINTR,
                    // which the allocation paths restore.
                    unsafe { libc::syscall(libc::SYS_nanosleep, &pause as *const libc::timespec, 0usize) };
                }
            }
            if self
                .0
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Takes the lock if it is free, without waiting.
    pub fn try_lock(&self) -> bool {
        self.0
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// # Safety
    /// The caller holds the lock (taken on any thread: `lock_all` and `unlock_all` straddle fork).
    #[inline(always)]
    pub unsafe fn unlock(&self) {
        self.0.store(false, Ordering::Release);
    }
}
