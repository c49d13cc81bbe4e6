//! Which memory besides the program's data, thread stacks, TLS and registers is a root: memcheck
//! scans every client mapping that is not a heap block, so the objects of an allocator of the
//! program's own (CPython's pymalloc arenas, a slab, JIT data) keep the malloc'd blocks they
//! point to. The same rule serves the exit report (over /proc/self/maps) and the launcher (over a
//! core's or a process's mappings).
//!
//! A mapping is such a root, less the live blocks in it, when it is readable and writable, is no
//! kernel region, no brk heap and no main thread stack, holds no thread's stack pointer (stacks
//! are scanned from the stack pointer up, not below it), does not sit just above a guard page (a
//! thread stack, perhaps of a thread that has exited, whose dead frames hold stale pointers), and
//! is no heap of a non-main glibc arena (its `heap_info` first). The parts of it that are roots
//! already are left to those roots, and the exit report leaves out its own buffers.

use crate::analysis::arena::Words;
use crate::analysis::maps::Mapping;
use crate::analysis::reach::Blocks;

/// glibc's non-main arenas take their heaps as mappings aligned to HEAP_MAX_SIZE (64 MiB on
/// 64-bit systems).
const HEAP_MAX: usize = 64 << 20;

/// Calls `emit` with the parts of `maps[i]` (sorted by address) that are roots by the rule
/// above. `sps` are the threads' stack pointers. With glibc as the allocator, a mapping that
/// holds blocks still counts for the rest of it: the kernel merges neighbouring anonymous
/// mappings, so a chunk glibc mapped for one large block often shares a mapping with an
/// allocator of the program's own; any other allocator may keep freed memory with stale
/// pointers beside its live blocks, so there a mapping with a block is left out whole.
pub fn extra_roots(
    maps: &[Mapping],
    i: usize,
    blocks: &Blocks,
    sps: &[usize],
    mem: &dyn Words,
    glibc: bool,
    emit: &mut dyn FnMut(usize, usize),
) {
    let m = maps[i];
    if !m.readable || !m.writable || m.special || m.end <= m.start {
        return;
    }
    if sps.iter().any(|&sp| m.start <= sp && sp < m.end) {
        return;
    }
    let after_guard = i > 0 && {
        let below = maps[i - 1];
        below.end == m.start && !below.readable && !below.writable
    };
    if after_guard || glibc_heap(m, mem) {
        return;
    }
    if !blocks.any_in(m.start, m.end) {
        emit(m.start, m.end);
    } else if glibc {
        blocks.gaps(m.start, m.end, emit);
    }
}

/// A heap of a non-main glibc arena: free chunks there hold stale pointers.
fn glibc_heap(m: Mapping, mem: &dyn Words) -> bool {
    let mut w = [0usize; 4];
    if mem.read_words(m.start, &mut w) < 4 {
        return false;
    }
    // heap_info: ar_ptr (the arena, in this heap or in the arena's first heap), prev (another
    // heap or null), size (the heap's readable part), mprotect_size.
    m.start.is_multiple_of(HEAP_MAX)
        && w[0] != 0
        && w[0].is_multiple_of(8)
        && w[2] > 0
        && w[2] <= HEAP_MAX
        && w[2].is_multiple_of(4096)
        && w[3] >= w[2]
        && (w[1] == 0 || w[1].is_multiple_of(HEAP_MAX))
}
