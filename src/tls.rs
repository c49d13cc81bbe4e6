//! The thread's state, found from the thread pointer with no call.
//!
//! Rust's thread-locals in a shared library cost a call to `__tls_get_addr` per access, and the
//! hot path used to make three or four. `tls_area.c` reserves one area per thread in static TLS
//! (the initial-exec model), which lies at the same offset from the thread pointer in every
//! thread: the offset is learnt once, from the C helper, and each access after that is a read of
//! the thread pointer and an add.

use core::sync::atomic::{AtomicUsize, Ordering};

unsafe extern "C" {
    fn dmem_tls_area() -> *mut u8;
    fn dmem_tls_bytes() -> usize;
}

/// What a thread keeps in its area: room for the state of `thread.rs`, room the walker uses for
/// its caches (`unwind/fast.rs`) and room for the newest block of the per-stack counts
/// (`stack_counts.rs`), each laid out and initialised by its owner on the thread's first use,
/// since the area starts as zero bytes. This file knows none of them, so the modules above it
/// import it and it imports none of them.
#[repr(C, align(64))]
pub struct Area {
    /// `thread::State`.
    pub thread: [u64; THREAD_WORDS],
    /// The walker's per-thread caches.
    pub walker: [u64; WALKER_WORDS],
    /// `stack_counts::Local`, whose zero means none.
    pub counts: [u64; COUNTS_WORDS],
    /// The operation in flight on the thread (`thread::InFlight`), read by the exit report and
    /// by readers of cores and processes at `dmem_layout`'s `inflight_off` into the area.
    pub inflight: [u64; INFLIGHT_WORDS],
}

// Readers leave the area out of the roots by this size (see `analysis::roots`).
const _: () = assert!(core::mem::size_of::<Area>() <= crate::analysis::descriptor::TLS_AREA_BYTES);

/// Room for `thread::State`, asserted where it is defined.
pub const THREAD_WORDS: usize = 3;
/// Room for the walker's `Local`, asserted where it is defined.
pub const WALKER_WORDS: usize = 496;
/// Room for `stack_counts::Local`, asserted where it is defined.
pub const COUNTS_WORDS: usize = 3;
/// Room for `thread::InFlight`: the operation, then the header it works on.
pub const INFLIGHT_WORDS: usize = 2;

/// The area's offset from the thread pointer; zero until learnt (it is never zero: the area lies
/// below the thread pointer on x86_64 and above its reserved words on aarch64).
/// Public so that the layout descriptor can give its address to readers of other threads' areas.
pub static OFFSET: AtomicUsize = AtomicUsize::new(0);

/// The same offset for this file's own reads: a static the descriptor does not point at is read
/// with one load relative to the instruction pointer, not through the global offset table.
static OWN_OFFSET: AtomicUsize = AtomicUsize::new(0);

/// The offset of errno from the thread pointer: libc's errno lies in static TLS too, at the same
/// offset in every thread. Learnt once, before the first allocation is served (`learn_errno`).
static ERRNO_OFFSET: AtomicUsize = AtomicUsize::new(0);

#[inline(always)]
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: reads the thread pointer, which every thread has; nothing is written.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        core::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nostack, nomem, preserves_flags))
    };
    tp
}

/// The area of the thread whose thread pointer is `tp`, or None before any area was found.
pub fn area_at(tp: usize) -> Option<*mut Area> {
    match OWN_OFFSET.load(Ordering::Relaxed) {
        0 => None,
        off => Some(tp.wrapping_add(off) as *mut Area),
    }
}

/// The calling thread's area.
#[inline(always)]
pub fn area() -> *mut Area {
    let off = OWN_OFFSET.load(Ordering::Relaxed);
    if off != 0 {
        return thread_pointer().wrapping_add(off) as *mut Area;
    }
    learn()
}

#[cold]
#[inline(never)]
fn learn() -> *mut Area {
    // SAFETY: the C helper returns the calling thread's area and its size; it neither allocates
    // nor takes a lock.
    let (at, bytes) = unsafe { (dmem_tls_area(), dmem_tls_bytes()) };
    if bytes < core::mem::size_of::<Area>() || !(at as usize).is_multiple_of(core::mem::align_of::<Area>()) {
        // Only a build whose two halves disagree gets here; go on would write past the area.
        // SAFETY: abort takes nothing and does not return.
        unsafe { libc::abort() };
    }
    let off = (at as usize).wrapping_sub(thread_pointer());
    OWN_OFFSET.store(off, Ordering::Relaxed);
    OFFSET.store(off, Ordering::Relaxed);
    at.cast()
}

/// Learns where errno lies from the thread pointer, once, before the allocation path uses
/// `errno_slot`.
pub fn learn_errno() {
    // SAFETY: __errno_location returns the calling thread's errno slot; only its address is used.
    let slot = unsafe { libc::__errno_location() } as usize;
    ERRNO_OFFSET.store(slot.wrapping_sub(thread_pointer()), Ordering::Relaxed);
}

/// The calling thread's errno, with no call: a read of the thread pointer and an add.
/// `learn_errno` must have run.
#[inline(always)]
pub fn errno_slot() -> *mut i32 {
    thread_pointer().wrapping_add(ERRNO_OFFSET.load(Ordering::Relaxed)) as *mut i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_finds_its_own_area_at_the_same_offset() {
        // SAFETY: the helper's size is read only.
        assert!(unsafe { dmem_tls_bytes() } >= core::mem::size_of::<Area>());
        let here = area() as usize;
        // SAFETY: as above, on this thread.
        assert_eq!(here, unsafe { dmem_tls_area() } as usize);
        let there = std::thread::spawn(|| {
            // SAFETY: as above, on the spawned thread.
            (area() as usize, unsafe { dmem_tls_area() } as usize)
        })
        .join()
        .unwrap();
        assert_eq!(there.0, there.1);
        assert_ne!(there.0, here);
    }

    #[test]
    fn errno_is_found_from_the_thread_pointer_in_every_thread() {
        learn_errno();
        // SAFETY: only addresses are compared.
        assert_eq!(errno_slot(), unsafe { libc::__errno_location() });
        let there = std::thread::spawn(|| {
            // SAFETY: as above, on the spawned thread.
            let libc_slot = unsafe { libc::__errno_location() };
            (errno_slot() as usize, libc_slot as usize)
        })
        .join()
        .unwrap();
        assert_eq!(there.0, there.1);
    }
}
