//! The bounds of the stack a walk runs on, which every stack read of the walker is checked
//! against, from a thread's small cache of the stacks it has walked on, else from the kernel's
//! list of mappings.

use crate::procmaps;
use core::sync::atomic::{AtomicBool, Ordering};

/// Stacks a thread remembers: its own, and a few alternate ones.
const STACKS: usize = 4;

/// The stacks a thread walked on lately, `[lo, hi)`, most recent first.
///
/// The thread's own stack is found on its first walk, and the other stacks a thread may allocate
/// on: a signal handler's alternate stack, a coroutine's stack (`makecontext`, green threads), a
/// main-thread stack that has grown below where it was first seen. Each is the mapping that held
/// the stack pointer when it was first seen.
///
/// The bounds come from `/proc/self/maps`, never from `pthread_getattr_np`: that holds the
/// thread's lock while it calls realloc, so asking it from inside realloc deadlocks any thread
/// that allocates from within it (the JVM and lld do, at thread start). A mapping may extend
/// above the stack's real top where the kernel merged it with a neighbour; the walk still reads
/// only mapped memory, and the outermost frame's unwind rule (clone's, `__start_context`'s) ends
/// the walk before it gets there.
pub(super) struct KnownStacks([(usize, usize); STACKS]);

/// Set once `/proc/self/maps` could not be opened, so a process without it does not pay a
/// failing system call per walk.
static NO_MAPS: AtomicBool = AtomicBool::new(false);

impl KnownStacks {
    pub(super) const EMPTY: KnownStacks = KnownStacks([(0, 0); STACKS]);

    /// The top of the stack that `sp` lies on. None when the mappings cannot be read; the caller
    /// then falls back to the platform unwinder.
    #[inline(always)]
    pub(super) fn top(&mut self, sp: usize) -> Option<usize> {
        let (lo, hi) = self.0[0];
        if sp >= lo && sp < hi {
            return Some(hi);
        }
        self.top_slow(sp)
    }

    #[cold]
    #[inline(never)]
    fn top_slow(&mut self, sp: usize) -> Option<usize> {
        if let Some(i) = self.0.iter().position(|&(lo, hi)| sp >= lo && sp < hi) {
            self.0[..=i].rotate_right(1);
            return Some(self.0[0].1);
        }
        if NO_MAPS.load(Ordering::Relaxed) {
            return None;
        }
        let Some(found) = procmaps::mapping_containing(sp) else {
            // The stack pointer is always mapped, so a miss means the file could not be read.
            NO_MAPS.store(true, Ordering::Relaxed);
            return None;
        };
        self.0.rotate_right(1);
        self.0[0] = found;
        Some(found.1)
    }
}
