//! The bounds of the stack a walk runs on, which every stack read of the walker is checked
//! against, from a thread's small cache of the stacks it has walked on, else from what the
//! kernel says can be read above the stack pointer.
//!
//! A cached mapping can shrink: the kernel merges neighbouring anonymous mappings, so stacks a
//! program maps for its coroutines side by side read as one mapping, and when it unmaps one of
//! them the others' cached bounds cover memory that is gone; a read there would fault. So every
//! `munmap` is noted here (see `unmaps.rs`) in a small ring, and a thread drops the cached
//! stacks an unmapped range touches before it walks again.

use crate::procmaps;
use core::num::NonZeroUsize;
use core::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Stacks a thread remembers: its own, and a few alternate ones.
const STACKS: usize = 4;

/// The stacks a thread walked on lately, `[lo, hi)`, most recent first.
///
/// The thread's own stack is found on its first walk, and the other stacks a thread may allocate
/// on: a signal handler's alternate stack, a coroutine's stack (`makecontext`, green threads), a
/// main-thread stack that has grown below where it was first seen. Each is the mapping that held
/// the stack pointer when it was first seen.
///
/// The top of a stack is where the run of readable pages above the stack pointer ends
/// (`procmaps::readable_above`), else the end of its mapping in `/proc/self/maps`; never
/// `pthread_getattr_np`: that holds the thread's lock while it calls realloc, so asking it from
/// inside realloc deadlocks any thread that allocates from within it (the JVM and lld do, at
/// thread start). The run, like a mapping the kernel merged with a neighbour, may extend above
/// the stack's real top; the walk still reads only readable memory, and the outermost frame's
/// unwind rule (clone's, `__start_context`'s) ends the walk before it gets there.
pub(super) struct KnownStacks {
    stacks: [(usize, usize); STACKS],
    /// How many unmaps this thread has taken into account (`UNMAPS`).
    seen: u64,
}

/// Unmapped ranges, the last `RING` of them.
const RING: usize = 64;

/// One unmapped range; `tag` is its number plus one once `start` and `end` are written, zero
/// while they are being written.
struct Unmapped {
    tag: AtomicU64,
    start: AtomicUsize,
    end: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const NONE: Unmapped = Unmapped {
    tag: AtomicU64::new(0),
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
};

static RANGES: [Unmapped; RING] = [NONE; RING];

/// How many unmaps there have been, on a cache line of its own: every walk reads it, and only an
/// unmap writes it.
#[repr(align(128))]
struct Count(AtomicU64);
static UNMAPS: Count = Count(AtomicU64::new(0));

/// Notes that `[start, end)` is about to be unmapped.
pub fn note_unmap(start: usize, end: usize) {
    let n = UNMAPS.0.fetch_add(1, Ordering::AcqRel);
    let r = &RANGES[n as usize % RING];
    r.tag.store(0, Ordering::Relaxed);
    fence(Ordering::Release);
    r.start.store(start, Ordering::Relaxed);
    r.end.store(end, Ordering::Relaxed);
    r.tag.store(n + 1, Ordering::Release);
}

/// Set once `/proc/self/maps` could not be opened, so a process without it does not pay a
/// failing system call per walk.
static NO_MAPS: AtomicBool = AtomicBool::new(false);

impl KnownStacks {
    pub(super) const EMPTY: KnownStacks = KnownStacks {
        stacks: [(0, 0); STACKS],
        seen: 0,
    };

    /// The top of the stack that `sp` lies on. None when the mappings cannot be read; the caller
    /// then falls back to the platform unwinder. Never zero (it lies above `sp`), which lets the
    /// answer travel in one register, with no flag beside it for the caller to test.
    #[inline(always)]
    pub(super) fn top(&mut self, sp: usize) -> Option<NonZeroUsize> {
        let (lo, hi) = self.stacks[0];
        if sp >= lo && sp < hi && UNMAPS.0.load(Ordering::Relaxed) == self.seen {
            return NonZeroUsize::new(hi);
        }
        self.top_slow(sp).and_then(NonZeroUsize::new)
    }

    #[cold]
    #[inline(never)]
    fn top_slow(&mut self, sp: usize) -> Option<usize> {
        let now = UNMAPS.0.load(Ordering::Acquire);
        if now != self.seen {
            self.forget_unmapped(now);
        }
        if let Some(i) = self.stacks.iter().position(|&(lo, hi)| sp >= lo && sp < hi) {
            self.stacks[..=i].rotate_right(1);
            return Some(self.stacks[0].1);
        }
        // Above the stack pointer the pages were written already, so reading a byte of each
        // commits nothing. Below it nothing is probed: a page there may never have been
        // touched, and a guard page would end the run anyway. The range starts at the stack
        // pointer's page, so a deeper call later probes again and the entry grows down.
        if let Some(hi) = procmaps::readable_above(sp) {
            let lo = sp & !4095;
            if let Some(i) = self.stacks.iter().position(|&(_, h)| h == hi) {
                self.stacks[i].0 = self.stacks[i].0.min(lo);
                self.stacks[..=i].rotate_right(1);
            } else {
                self.stacks.rotate_right(1);
                self.stacks[0] = (lo, hi);
            }
            return Some(hi);
        }
        if NO_MAPS.load(Ordering::Relaxed) {
            return None;
        }
        let Some(found) = procmaps::mapping_containing(sp) else {
            // The stack pointer is always mapped, so a miss means the file could not be read.
            NO_MAPS.store(true, Ordering::Relaxed);
            return None;
        };
        self.stacks.rotate_right(1);
        self.stacks[0] = found;
        Some(found.1)
    }

    /// Drops the cached stacks that the unmaps numbered `seen..now` touched; all of them when
    /// some of those ranges are no longer in the ring or are still being written.
    fn forget_unmapped(&mut self, now: u64) {
        let all = now - self.seen > RING as u64
            || (self.seen..now).any(|n| {
                let r = &RANGES[n as usize % RING];
                if r.tag.load(Ordering::Acquire) != n + 1 {
                    return true;
                }
                let (start, end) = (r.start.load(Ordering::Relaxed), r.end.load(Ordering::Relaxed));
                fence(Ordering::Acquire);
                if r.tag.load(Ordering::Relaxed) != n + 1 {
                    return true;
                }
                for s in self.stacks.iter_mut() {
                    if s.0 < end && start < s.1 {
                        *s = (0, 0);
                    }
                }
                false
            });
        if all {
            self.stacks = [(0, 0); STACKS];
        }
        self.seen = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapping cached whole, then cut short by an unmap the ring noted: the next lookup gives
    /// the mapping as it is now, not the cached bounds over memory that is gone.
    #[test]
    fn an_unmapped_part_of_a_cached_stack_is_forgotten() {
        let page = 4096;
        // Four pages between two inaccessible ones, so the kernel merges them with no neighbour.
        // SAFETY: a fresh anonymous mapping of our own, checked below.
        let g = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                6 * page,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(g, libc::MAP_FAILED);
        let m = g as usize + page;
        // SAFETY: the middle four pages of the mapping just made.
        let rw = unsafe {
            libc::mprotect(
                m as *mut libc::c_void,
                4 * page,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        assert_eq!(rw, 0);
        let mut k = KnownStacks::EMPTY;
        assert_eq!(k.top(m + 100).map(NonZeroUsize::get), Some(m + 4 * page));
        note_unmap(m + 2 * page, m + 4 * page);
        // SAFETY: the upper half of the mapping made above, which nothing uses.
        let cut = unsafe { libc::munmap((m + 2 * page) as *mut libc::c_void, 2 * page) };
        assert_eq!(cut, 0);
        assert_eq!(k.top(m + 100).map(NonZeroUsize::get), Some(m + 2 * page));
        // More unmaps than the ring holds, none of them ours: everything cached is dropped and
        // found again.
        for _ in 0..=RING {
            note_unmap(1, 2);
        }
        assert_eq!(k.top(m + 100).map(NonZeroUsize::get), Some(m + 2 * page));
        // SAFETY: the rest of the mapping, guards included.
        assert_eq!(unsafe { libc::munmap(g, 3 * page) }, 0);
        // SAFETY: as above.
        let top_guard = unsafe { libc::munmap((m + 4 * page) as *mut libc::c_void, page) };
        assert_eq!(top_guard, 0);
    }
}
