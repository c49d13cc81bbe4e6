//! Which memory besides the program's data, thread stacks, TLS and registers is a root: memcheck
//! scans every client mapping that is not a heap block, so the objects of an allocator of the
//! program's own (CPython's pymalloc arenas, a slab, JIT data) keep the malloc'd blocks they
//! point to. The same rule serves the exit report (over /proc/self/maps) and the launcher (over a
//! core's or a process's mappings).
//!
//! A mapping is such a root, less the live blocks in it, when it is readable and writable, is no
//! kernel region, no brk heap and no main thread stack, holds no thread's stack pointer (stacks
//! are scanned from the stack pointer up, not below it), does not sit just above a guard page (a
//! thread stack, perhaps of a thread that has exited, whose dead frames hold stale pointers: only
//! the thread descriptor at its top is a root); and
//! no heap of a non-main glibc arena is, wherever it lies in the mapping (`arena::heap_at`). The
//! parts of it that are roots already are left to those roots, and libdmem's own memory is left
//! out by its callers.

use crate::arena::{self, Words};
use crate::maps::Mapping;
use crate::reach::Blocks;

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
    if after_guard {
        // The stack of a thread that has ended but was not joined, or of one in glibc's stack
        // cache: its frames are dead, but its descriptor at the top is glibc's record of the
        // thread still, and holds the thread's dtv (as valgrind, which scans it, finds).
        if let Some(pd) = descriptor_at_top(mem, m.start, m.end) {
            emit(pd, m.end);
        }
        return;
    }
    if !glibc && blocks.any_in(m.start, m.end) {
        return;
    }
    // A heap of a non-main glibc arena holds its free chunks, with stale pointers, between the
    // blocks: never a root, wherever it lies in the mapping.
    arena::outside_heaps(mem, (m.start, m.end), &mut |s, e| blocks.gaps(s, e, emit));
}

/// Marks as special (never a root) every mapping of `maps` inside one of `heaps`: glibc's main
/// heap as `arena::main_heap` finds it.
pub fn mark_heaps(maps: &mut [Mapping], heaps: &[(usize, usize)]) {
    for m in maps.iter_mut() {
        if heaps.iter().any(|&(s, e)| s <= m.start && m.end <= e) {
            m.special = true;
        }
    }
}

/// How far below the top of a thread's stack mapping glibc's descriptor (`struct pthread`, a
/// few KiB, with the TCB at its start) may begin.
const DESCRIPTOR_SPAN: usize = 16 << 10;

/// The start of glibc's thread descriptor at the top of `[start, end)`, if one is there: a
/// 64-byte aligned address whose TCB's first word (`tcb`) and third (`self`) both hold the
/// address itself, as glibc writes them for every thread.
fn descriptor_at_top(mem: &dyn Words, start: usize, end: usize) -> Option<usize> {
    let from = end.saturating_sub(DESCRIPTOR_SPAN).max(start) & !63;
    let mut words = vec![0usize; (end - from) / 8];
    let n = mem.read_words(from, &mut words);
    (0..n.saturating_sub(2))
        .step_by(8)
        .rev()
        .map(|k| (k, from + 8 * k))
        .find(|&(k, at)| words[k] == at && words[k + 2] == at)
        .map(|(_, at)| at)
}
