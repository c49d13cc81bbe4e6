//! A table of the library's own on pages of its own: mapped at its first use, zeroed by the
//! kernel, and published to every thread through one slot. The free history's rings and the
//! per-stack counts' tables are made this way, so a core carries them and the backend
//! allocator the library wraps never sees them.

use core::sync::atomic::{AtomicPtr, Ordering};

/// A table for `slot`, which the caller found empty: `bytes` of zeroed pages mapped, `init`
/// filling what must not stay zero, then published. When two threads race to map it, one
/// mapping wins and the other is given back. `None` when the kernel refuses the mapping.
#[cold]
#[inline(never)]
pub fn publish<T>(slot: &AtomicPtr<T>, bytes: usize, init: impl FnOnce(*mut T)) -> Option<*mut T> {
    // SAFETY: an anonymous private mapping; mmap takes no user-space lock and does not allocate.
    // Its pages are zero, and are only touched as the table fills.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let t = p.cast::<T>();
    init(t);
    match slot.compare_exchange(core::ptr::null_mut(), t, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(t),
        Err(theirs) => {
            // Two threads of a shared list raced: keep the other's.
            // SAFETY: the mapping made above, which nobody else has seen.
            unsafe { libc::munmap(p, bytes) };
            Some(theirs)
        }
    }
}
