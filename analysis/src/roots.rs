//! What memory is a root of the leak scan, for the exit report (in the process, over
//! /proc/self/maps, with the other threads stopped) and for the launcher (over a core's or a
//! stopped process's mappings): each side learns the facts its own way and asks here what they
//! make roots of. Roots are:
//!
//! * the writable segments of the loaded objects (`.data`, `.bss`, `.got`), less the
//!   allocator's own state and libdmem's own memory, which each side finds (see below);
//! * each thread's stack, from its stack pointer less the 128 bytes the x86-64 ABI lets a leaf
//!   function use below it (`RED_ZONE`) to the top of the memory that holds it: what lies
//!   further below is dead frames, whose stale pointers memcheck does not count either. The
//!   thread that entered the exit path (the exit report's, or a core of `abort-shutdown`) is
//!   scanned from where the program entered it, with nothing below: below lie libdmem's frames
//!   and the exit path's, which hold block addresses of their own. A thread running on a stack
//!   the program malloc'ed (a coroutine's, through makecontext) has no stack of its own to
//!   scan: the memory around its stack pointer is the heap, and the coroutine's stack is a
//!   block like any other, whose frames count once it is reached (`thread_ranges`);
//! * each thread's static TLS and descriptor, as one window around its thread pointer: the
//!   static TLS blocks lie right below it, and glibc's `struct pthread` (the TCB, with the dtv
//!   that reaches the dynamic TLS blocks and the first `pthread_setspecific` values) above it.
//!   The window is the loaded objects' TLS sizes with some to spare (`static_tls`), plus
//!   `TLS_SURPLUS` below and `TCB_SIZE` above, clamped to the memory that holds the thread
//!   pointer and, where the stack pointer lies below it in that memory (every thread but the
//!   main one, whose TLS the loader allocated at start-up), to the stack's scan. It is worked
//!   out from the thread pointer alone because that is all a reader of a core has: a core
//!   keeps no loader table of module offsets, and bare cores without libdmem are read too. The
//!   exit report follows the same rule, so that a program's report at exit and from its core
//!   are the same record for record;
//! * each thread's registers that may hold a pointer, and the block a thread's allocation in
//!   flight holds by its header alone (`carried`);
//! * the program's own writable memory that holds no block (`extra_roots`, below).
//!
//! Left out: the allocator's own state, which is not the program's memory (glibc's
//! `main_arena`, found by its shape in libc's data, whichever allocator the program uses, and
//! glibc's heaps, whose free chunks hold stale pointers; and all writable data of a jemalloc,
//! tcmalloc or mimalloc in use); libdmem's own data (its list heads point at headers, never
//! into blocks), each thread's area of its state in static TLS (`descriptor::TLS_AREA_BYTES`:
//! under `count-allocs` it keeps the thread's newest block, which valgrind, without libdmem,
//! sees only as the program keeps it) and the free history's rings; and, from a core, what the
//! kernel did not dump (memory nothing was ever written to holds no pointer).
//!
//! Beyond the program's data, thread stacks, TLS and registers, memcheck scans every client
//! mapping that is not a heap block, so the objects of an allocator of the program's own
//! (CPython's pymalloc arenas, a slab, JIT data) keep the malloc'd blocks they point to; so
//! does `extra_roots`.
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
use crate::blocks::Blocks;
use crate::maps::Mapping;

/// Calls `emit` with the parts of `maps[i]` (sorted by address) that are roots by the rule
/// of the program's own writable memory above. `sps` are the threads' stack pointers. With
/// glibc as the allocator, a mapping that holds blocks still counts for the rest of it: the
/// kernel merges neighbouring anonymous mappings, so a chunk glibc mapped for one large block
/// often shares a mapping with an allocator of the program's own; any other allocator may keep
/// freed memory with stale pointers beside its live blocks, so there a mapping with a block is
/// left out whole.
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

/// The x86-64 ABI lets a function use 128 bytes below its stack pointer without moving it.
pub const RED_ZONE: usize = 128;
/// Beyond the objects' own TLS images, glibc reserves a little static TLS for libraries loaded
/// later, below the thread pointer.
pub const TLS_SURPLUS: usize = 4096;
/// Room for glibc's thread descriptor (`struct pthread`, about 2.3 KiB) above the thread
/// pointer.
pub const TCB_SIZE: usize = 4096;

/// The static TLS the loaded objects take, from the sizes of their `PT_TLS` segments: each
/// with 64 bytes to spare for its alignment.
pub fn static_tls(sizes: impl IntoIterator<Item = usize>) -> usize {
    sizes.into_iter().filter(|&n| n > 0).map(|n| n + 64).sum()
}

/// What a side knows of one thread, to find its stack and TLS roots by the rule above.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadFacts<'a> {
    /// Where its live frames begin: its stack pointer, or for the thread that entered the exit
    /// path, the stack pointer where the program entered it. 0 when unknown.
    pub sp: usize,
    /// Whether this is the thread that entered the exit path (scanned from `sp`, no red zone).
    pub entered: bool,
    /// Whether `sp` lies in a live heap block (a coroutine's stack).
    pub sp_in_block: bool,
    /// The readable memory (mapping, or a core's dumped segment) that holds `sp`.
    pub stack: Option<(usize, usize)>,
    /// Its thread pointer (`fs_base`, glibc's `pthread_self`); 0 when unknown.
    pub tp: usize,
    /// The readable memory that holds `tp`.
    pub tp_memory: Option<(usize, usize)>,
    /// The loaded objects' static TLS (`static_tls`).
    pub static_tls: usize,
    /// The thread's area of libdmem state (`descriptor::TLS_AREA_BYTES` from the thread
    /// pointer plus the offset the descriptor gives), when libdmem is loaded: its own memory,
    /// cut out of the stack and the TLS window.
    pub own_area: Option<(usize, usize)>,
    /// libdmem's own memory besides: the readable memory around `sp` and `tp` ends where it
    /// begins (the kernel merges neighbouring anonymous mappings, so the buffers of the exit
    /// report may lie in one mapping with the loader's TLS of the main thread).
    pub own_memory: &'a [(usize, usize)],
}

/// A thread's memory roots: its stack and its TLS window, each when it has one, and each in at
/// most two parts (libdmem's area cut out). Allocates nothing: the exit report asks with the
/// other threads stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadRanges {
    pub stack: [Option<(usize, usize)>; 2],
    pub tls: [Option<(usize, usize)>; 2],
}

/// The ranges of a thread's memory to scan, by the rule of the module doc.
pub fn thread_ranges(t: &ThreadFacts) -> ThreadRanges {
    let below = if t.entered { 0 } else { RED_ZONE };
    let from = t.sp.saturating_sub(below);
    let around = |at: usize, memory: Option<(usize, usize)>| memory.map(|m| clamp(m, at, t.own_memory));
    let stack = match around(t.sp, t.stack) {
        Some((lo, hi)) if t.sp != 0 && !t.sp_in_block => Some((lo.max(from), hi)),
        _ => None,
    };
    let tls = match around(t.tp, t.tp_memory) {
        Some((lo, hi)) if t.tp != 0 => {
            let mut start = lo.max(t.tp.saturating_sub(t.static_tls + TLS_SURPLUS));
            // Below the stack pointer lie dead frames, no root, even where the window reaches.
            if lo <= t.sp && t.sp < t.tp {
                start = start.max(from);
            }
            Some((start, hi.min(t.tp.saturating_add(TCB_SIZE))))
        }
        _ => None,
    };
    ThreadRanges {
        stack: cut(stack, t.own_area),
        tls: cut(tls, t.own_area),
    }
}

/// The part of `memory` around `at` that none of `holes` covers.
fn clamp((mut lo, mut hi): (usize, usize), at: usize, holes: &[(usize, usize)]) -> (usize, usize) {
    for &(s, e) in holes {
        if e <= at && e > lo {
            lo = e.min(hi);
        } else if s > at && s < hi {
            hi = s.max(lo);
        }
    }
    (lo, hi)
}

/// `range` less `hole`, in at most two parts; an empty part is none.
fn cut(range: Option<(usize, usize)>, hole: Option<(usize, usize)>) -> [Option<(usize, usize)>; 2] {
    let nonempty = |(s, e): (usize, usize)| (s < e).then_some((s, e));
    match (range, hole) {
        (None, _) => [None, None],
        (Some(r), None) => [nonempty(r), None],
        (Some((s, e)), Some((hs, he))) if he <= s || e <= hs => [nonempty((s, e)), None],
        (Some((s, e)), Some((hs, he))) => [nonempty((s, hs)), nonempty((he, e))],
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// A thread made by pthread_create: its stack, static TLS and descriptor in one mapping.
    fn thread(sp: usize, tp: usize) -> ThreadFacts<'static> {
        ThreadFacts {
            sp,
            stack: Some((MIB, 2 * MIB)),
            tp,
            tp_memory: Some((MIB, 2 * MIB)),
            static_tls: static_tls([0, 100]),
            ..ThreadFacts::default()
        }
    }

    #[test]
    fn a_stack_is_scanned_from_its_red_zone_up_and_tls_stops_at_the_stack_pointer() {
        let tp = 2 * MIB - 0x1000;
        let r = thread(tp - 0x200, tp);
        let got = thread_ranges(&r);
        assert_eq!(got.stack, [Some((tp - 0x200 - RED_ZONE, 2 * MIB)), None]);
        // The window would reach 164 + TLS_SURPLUS below the thread pointer; the stack pointer,
        // less its red zone, is closer.
        assert_eq!(got.tls, [Some((tp - 0x200 - RED_ZONE, 2 * MIB)), None]);
        assert_eq!(static_tls([0, 100]), 164);
    }

    #[test]
    fn the_thread_that_entered_the_exit_path_has_no_red_zone() {
        let tp = 2 * MIB - 0x1000;
        let got = thread_ranges(&ThreadFacts {
            entered: true,
            ..thread(MIB + 0x800, tp)
        });
        assert_eq!(got.stack, [Some((MIB + 0x800, 2 * MIB)), None]);
        assert_eq!(got.tls, [Some((tp - 164 - TLS_SURPLUS, 2 * MIB)), None]);
    }

    #[test]
    fn the_main_threads_tls_is_a_window_around_its_thread_pointer() {
        // The loader's allocation, far from the stack: clamped to its memory and to TCB_SIZE.
        let tp = 0x7000_0000_0100;
        let got = thread_ranges(&ThreadFacts {
            tp,
            tp_memory: Some((0x7000_0000_0000, 0x7000_0001_0000)),
            ..thread(MIB + 0x800, 0)
        });
        assert_eq!(got.stack, [Some((MIB + 0x800 - RED_ZONE, 2 * MIB)), None]);
        assert_eq!(got.tls, [Some((0x7000_0000_0000, tp + TCB_SIZE)), None]);
    }

    #[test]
    fn a_coroutine_has_no_stack_and_unknown_memory_no_root() {
        let got = thread_ranges(&ThreadFacts {
            sp_in_block: true,
            tp: 0,
            ..thread(MIB + 0x800, 0)
        });
        assert_eq!(got, ThreadRanges::default());
        let got = thread_ranges(&ThreadFacts {
            stack: None,
            tp_memory: None,
            ..thread(MIB + 0x800, 2 * MIB - 0x1000)
        });
        assert_eq!(got, ThreadRanges::default());
    }

    #[test]
    fn libdmems_area_is_cut_out_of_the_stack_and_the_window() {
        let tp = 2 * MIB - 0x1000;
        let area = (tp - 0x1000, tp - 0x800);
        let got = thread_ranges(&ThreadFacts {
            own_area: Some(area),
            ..thread(tp - 0x2000, tp)
        });
        let sp = tp - 0x2000 - RED_ZONE;
        assert_eq!(got.stack, [Some((sp, area.0)), Some((area.1, 2 * MIB))]);
        let window = tp - 164 - TLS_SURPLUS;
        assert_eq!(got.tls, [Some((window, area.0)), Some((area.1, 2 * MIB))]);
    }

    #[test]
    fn libdmems_buffers_end_the_memory_around_the_thread_pointer() {
        // The main thread's TLS, with a buffer of libdmem's merged into its mapping below.
        let tp = 0x7000_0000_3000;
        let own = [(0x7000_0000_0000, 0x7000_0000_2000)];
        let got = thread_ranges(&ThreadFacts {
            tp,
            tp_memory: Some((0x7000_0000_0000, 0x7000_0000_8000)),
            own_memory: &own,
            ..thread(MIB + 0x800, 0)
        });
        assert_eq!(got.tls, [Some((0x7000_0000_2000, tp + TCB_SIZE)), None]);
        assert_eq!(clamp((0, 100), 50, &[(60, 70), (10, 20)]), (20, 60));
    }
}
