//! libdmem's own Rust heap, not the program's heap it tracks. Whatever Rust code inside the
//! library allocates (the unwinder's caches, symbolisation at exit) goes straight to the real
//! allocator, untracked, so it can never recurse into the tracked path or show up as the
//! program's memory.

use crate::bootstrap;
use core::alloc::{GlobalAlloc, Layout};

pub struct RealHeap;

// SAFETY: every block comes from the next allocator (or the bootstrap arena before it is known)
// with at least the requested size and alignment, and goes back to the allocator it came from.
unsafe impl GlobalAlloc for RealHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(real) = bootstrap::real() else {
            return bootstrap::arena_alloc(layout.size(), layout.align());
        };
        // SAFETY: plain calls into the next allocator.
        unsafe {
            if layout.align() <= 16 {
                (real.malloc)(layout.size()).cast()
            } else {
                let mut p = core::ptr::null_mut();
                if (real.posix_memalign)(&mut p, layout.align(), layout.size()) != 0 {
                    return core::ptr::null_mut();
                }
                p.cast()
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        if bootstrap::arena_contains(ptr) {
            return;
        }
        if let Some(real) = bootstrap::real() {
            // SAFETY: a non-arena block of ours came from this allocator's malloc/posix_memalign.
            unsafe { (real.free)(ptr.cast()) };
        }
    }
}
