//! libdmem's own Rust heap, not the program's heap it tracks. Whatever Rust code inside the
//! library allocates (the unwinder's caches, symbolisation at exit) goes straight to the real
//! allocator, untracked, so it can never recurse into the tracked path or show up as the
//! program's memory.
//!
//! A report made inside a fatal signal's handler cannot use the real allocator: the interrupted
//! thread, or a thread stopped for the report, may hold its lock. `enter_emergency` switches the
//! heap, for good, to pages mapped for it alone, handed out by a bump pointer and never freed.

use crate::bootstrap;
use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static EMERGENCY: AtomicBool = AtomicBool::new(false);
/// The emergency pages: the next free byte and the end of the current mapping.
static BUMP: AtomicUsize = AtomicUsize::new(0);
static BUMP_END: AtomicUsize = AtomicUsize::new(0);
/// Held while a new mapping is installed.
static REFILL: AtomicBool = AtomicBool::new(false);
/// Each emergency mapping's size at least; reserved lazily by the kernel, so only what is
/// touched costs memory.
const CHUNK: usize = 64 << 20;
/// The emergency mappings made, start and length, for `discard_emergency`.
const MAX_CHUNKS: usize = 64;
static CHUNK_START: [AtomicUsize; MAX_CHUNKS] = [const { AtomicUsize::new(0) }; MAX_CHUNKS];
static CHUNK_LEN: [AtomicUsize; MAX_CHUNKS] = [const { AtomicUsize::new(0) }; MAX_CHUNKS];
static CHUNKS: AtomicUsize = AtomicUsize::new(0);

/// From now on the heap never calls the real allocator (see the module comment).
pub fn enter_emergency() {
    EMERGENCY.store(true, Ordering::SeqCst);
}

/// Whether the heap has switched to the emergency pages (a report from a fatal signal).
pub fn in_emergency() -> bool {
    EMERGENCY.load(Ordering::Relaxed)
}

/// Unmaps the emergency pages, for good: the exit report is done, and a core written next must
/// not hold its copies of block addresses in memory that, being no heap, a reader of the core
/// would scan as the program's. Nothing may be allocated afterwards.
pub fn discard_emergency() {
    let n = CHUNKS.load(Ordering::Acquire).min(MAX_CHUNKS);
    for i in 0..n {
        let (start, len) = (
            CHUNK_START[i].load(Ordering::Relaxed),
            CHUNK_LEN[i].load(Ordering::Acquire),
        );
        if len != 0 {
            // SAFETY: a mapping this file made and nothing uses any more (see above).
            unsafe { libc::syscall(libc::SYS_munmap, start, len) };
        }
    }
}

fn emergency_alloc(layout: Layout) -> *mut u8 {
    loop {
        let cur = BUMP.load(Ordering::Acquire);
        let start = (cur + layout.align() - 1) & !(layout.align() - 1);
        let end = start.wrapping_add(layout.size());
        if cur != 0 && end <= BUMP_END.load(Ordering::Acquire) && end >= start {
            if BUMP
                .compare_exchange(cur, end, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return start as *mut u8;
            }
            continue;
        }
        if REFILL.swap(true, Ordering::Acquire) {
            core::hint::spin_loop();
            continue;
        }
        if BUMP.load(Ordering::Acquire) != cur {
            // Another thread installed a mapping meanwhile.
            REFILL.store(false, Ordering::Release);
            continue;
        }
        let len = CHUNK.max(layout.size() + layout.align());
        // SAFETY: an anonymous private mapping; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            REFILL.store(false, Ordering::Release);
            return core::ptr::null_mut();
        }
        let n = CHUNKS.fetch_add(1, Ordering::AcqRel);
        if n < MAX_CHUNKS {
            CHUNK_START[n].store(p as usize, Ordering::Relaxed);
            CHUNK_LEN[n].store(len, Ordering::Release);
        }
        BUMP_END.store(p as usize + len, Ordering::Release);
        BUMP.store(p as usize, Ordering::Release);
        REFILL.store(false, Ordering::Release);
    }
}

pub struct RealHeap;

// SAFETY: every block comes from the next allocator (or the bootstrap arena before it is known)
// with at least the requested size and alignment, and goes back to the allocator it came from.
unsafe impl GlobalAlloc for RealHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if EMERGENCY.load(Ordering::Relaxed) {
            return emergency_alloc(layout);
        }
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
        // In an emergency nothing goes back: not the bump pages, and not the real allocator's
        // blocks either, whose free would take its lock.
        if EMERGENCY.load(Ordering::Relaxed) {
            return;
        }
        if bootstrap::arena_contains(ptr) {
            return;
        }
        if let Some(real) = bootstrap::real() {
            // SAFETY: a non-arena block of ours came from this allocator's malloc/posix_memalign.
            unsafe { (real.free)(ptr.cast()) };
        }
    }
}
