//! glibc's arenas: `main_arena`, found by its shape in libc's writable data, and the heaps of
//! the other arenas, found by the `heap_info` that starts each.
//!
//! `main_arena` is not exported, but its `bins` array has a shape nothing else has: 127 pairs
//! of words (fd, bk), 16 bytes apart, each of which is a bin posing as a chunk whose fd and bk
//! fields are at offsets 16 and 24. An empty bin's pair at address Q holds Q - 16 twice; a bin
//! that holds chunks points at its first and last chunk, whose `bk` and `fd` lead back to
//! Q - 16. A program that has freed much (perl, CPython, a forked shell) has chunks in most
//! bins, so the search asks every pair to be one or the other, never a run of empty ones: it
//! streams libc's data for 127 pairs in a row that could be bins (empty, or two 16-aligned
//! chunk addresses), then follows every full bin's chunks back to it, and asks the struct's
//! `next`, the ring of every arena of the process, to lead back to the struct. The struct runs
//! from 112 bytes before `bins` (mutex, flags, have_fastchunks, fastbinsY[10], top,
//! last_remainder) to its end, 2200 bytes from its start (binmap, next, next_free,
//! attached_threads and the two system_mem counters after `bins`).
//!
//! Every leak analysis leaves it out of the roots: its `top` and its bins point at chunk
//! headers, and a chunk's header shares its first word with the end of the block before it, so
//! scanned as a root it would keep the last block allocated, and blocks next to free chunks,
//! reachable. Its `top` also says which memory is the brk heap, whose free chunks are never
//! roots. The search only reads memory through `Words` and never allocates, so the exit report
//! can run it while the other threads are stopped.
//!
//! The other arenas need no search: glibc takes their heaps as mappings aligned to
//! `HEAP_MAX` (64 MiB), each starting with a `heap_info` (`heap_at`), and keeps their
//! `malloc_state` inside the first of them.

use crate::maps::{self, Mapping};

/// Memory read a word at a time, for code that must not know whether it runs inside the process
/// or over a core.
pub trait Words {
    /// Fills `buf` with the words from `addr` (8-byte aligned) on, and returns how many it could
    /// read: fewer than `buf.len()` when the range runs into unreadable memory.
    fn read_words(&self, addr: usize, buf: &mut [usize]) -> usize;

    /// One word, if readable.
    fn word(&self, addr: usize) -> Option<usize> {
        let mut w = [0usize; 1];
        (self.read_words(addr, &mut w) == 1).then_some(w[0])
    }
}

/// Pairs of words in glibc's `bins` array (`NBINS * 2 - 2` words).
const BIN_PAIRS: usize = 127;
/// Offsets in glibc's `struct malloc_state` (2.26 and later, 64-bit): `top`, the `bins` array,
/// `next` (the ring of arenas), and its size.
pub const TOP: usize = 96;
const BINS: usize = 112;
const NEXT: usize = 2160;
const STATE_LEN: usize = 2200;
/// Arenas a process has at most that the ring is followed through: glibc's own limit is eight
/// per processor.
const MAX_ARENAS: usize = 4096;
/// Candidate `bins` arrays checked at most per segment, so data that looks like bins for long
/// stretches cannot make the search slow.
const MAX_CANDIDATES: usize = 16;

/// glibc's non-main arenas take their heaps as mappings aligned to HEAP_MAX_SIZE (64 MiB on
/// 64-bit systems).
pub const HEAP_MAX: usize = 64 << 20;

/// The `[start, end)` of `main_arena` within `segments` (libc's writable segments), or None
/// when no struct of its shape is there (glibc's malloc never ran, or this is no glibc).
pub fn main_arena(mem: &dyn Words, segments: &[(usize, usize)]) -> Option<(usize, usize)> {
    let mut buf = [0usize; 512];
    for &(start, end) in segments {
        let start = (start + 7) & !7;
        // Pairs start on either 8-byte phase of the segment: one run of pairs that could be
        // bins per phase, carried across reads.
        let mut runs = [0usize; 2];
        let mut tried = 0;
        let mut at = start;
        let mut prev: Option<usize> = None;
        while at + 8 <= end {
            let want = ((end - at) / 8).min(buf.len());
            let got = mem.read_words(at, &mut buf[..want]);
            if got == 0 {
                break;
            }
            for (i, &w) in buf[..got].iter().enumerate() {
                let a = at + 8 * i;
                // The pair (fd, bk) at q = a - 8: fd is `prev`, bk is `w`.
                if let Some(fd) = prev {
                    let q = a - 8;
                    let run = &mut runs[((q - start) / 8) % 2];
                    *run = if may_be_bin(q, fd, w) { *run + 1 } else { 0 };
                    if *run >= BIN_PAIRS && tried < MAX_CANDIDATES {
                        tried += 1;
                        let bins = q - 16 * (BIN_PAIRS - 1);
                        if is_main_arena(mem, bins - BINS) {
                            return Some((bins - BINS, bins - BINS + STATE_LEN));
                        }
                    }
                }
                prev = Some(w);
            }
            at += 8 * got;
            if got < want {
                break;
            }
        }
    }
    None
}

/// Whether the pair (fd, bk) at `q` can be a bin, from its own words: empty (both hold the
/// bin's chunk-shaped address, `q - 16`), or two chunk addresses (16-aligned, not null).
fn may_be_bin(q: usize, fd: usize, bk: usize) -> bool {
    let me = q.wrapping_sub(16);
    (fd == me && bk == me) || (fd != me && bk != me && chunk_like(fd) && chunk_like(bk))
}

fn chunk_like(p: usize) -> bool {
    p != 0 && p.is_multiple_of(16)
}

/// Whether a `malloc_state` starts at `state`: every bin empty or holding chunks that lead back
/// to it, and the ring of arenas through `next` leading back to it.
fn is_main_arena(mem: &dyn Words, state: usize) -> bool {
    let mut bins = [0usize; 2 * BIN_PAIRS];
    if mem.read_words(state + BINS, &mut bins) < bins.len() {
        return false;
    }
    for (i, pair) in bins.chunks_exact(2).enumerate() {
        let me = state + BINS + 16 * i - 16;
        let (fd, bk) = (pair[0], pair[1]);
        let empty = fd == me && bk == me;
        let linked =
            || mem.word(fd.wrapping_add(24)) == Some(me) && mem.word(bk.wrapping_add(16)) == Some(me);
        if !empty && !linked() {
            return false;
        }
    }
    let mut at = state;
    for _ in 0..MAX_ARENAS {
        match mem.word(at + NEXT) {
            Some(next) if next == state => return true,
            Some(next) if next != 0 && next.is_multiple_of(8) => at = next,
            _ => return false,
        }
    }
    false
}

/// The address `main_arena.top` holds: glibc's top chunk, at the end of the brk heap.
pub fn top(mem: &dyn Words, arena: (usize, usize)) -> Option<usize> {
    mem.word(arena.0 + TOP).filter(|&t| chunk_like(t))
}

/// Whether a heap of a non-main glibc arena starts at `at` (HEAP_MAX-aligned): its `heap_info`
/// names its arena, the heap before it of the same arena (or none), and how much of the
/// reservation is in use.
pub fn heap_at(mem: &dyn Words, at: usize) -> bool {
    let mut w = [0usize; 4];
    if !at.is_multiple_of(HEAP_MAX) || mem.read_words(at, &mut w) < 4 {
        return false;
    }
    // heap_info: ar_ptr (the arena, in this heap or in the arena's first heap), prev (another
    // heap or null), size (the heap's readable part), mprotect_size.
    w[0] != 0
        && w[0].is_multiple_of(8)
        && w[2] > 0
        && w[2] <= HEAP_MAX
        && w[2].is_multiple_of(4096)
        && w[3] >= w[2]
        && (w[1] == 0 || w[1].is_multiple_of(HEAP_MAX))
}

/// Calls `emit` with the parts of `[start, end)` that hold no heap of a non-main arena: each
/// heap's whole 64 MiB reservation is cut out, wherever it lies in the range (the kernel merges
/// a heap with anonymous memory mapped just below it, so a heap need not start a mapping).
pub fn outside_heaps(mem: &dyn Words, (start, end): (usize, usize), emit: &mut dyn FnMut(usize, usize)) {
    let mut from = start;
    let mut at = start.next_multiple_of(HEAP_MAX);
    while at < end {
        if heap_at(mem, at) {
            if from < at {
                emit(from, at);
            }
            from = end.min(at + HEAP_MAX);
        }
        at += HEAP_MAX;
    }
    if from < end {
        emit(from, end);
    }
}

/// glibc's chunk size word's flags: the chunk was mapped on its own, or belongs to an arena
/// other than the main one.
const IS_MMAPPED: usize = 2;
const NON_MAIN_ARENA: usize = 4;

/// Whether the glibc chunk whose memory starts at `mem_start` (what malloc returned) and holds
/// `need` bytes is carved from the main arena's heap: its size word, just before it, is a
/// plausible size for that many bytes, and says neither "mapped alone" nor "another arena".
/// None when the word is not a chunk's size (the block was aligned, and its chunk starts
/// further down).
pub fn in_main_heap(mem: &dyn Words, mem_start: usize, need: usize) -> Option<bool> {
    let size_word = mem.word(mem_start.checked_sub(8)?)?;
    let size = size_word & !7;
    // A chunk holds its bytes, the next chunk's first word (its prev_size field, which an
    // allocated chunk lends to the one before it), rounded up to 16, at least 32 bytes.
    let least = (need + 8).next_multiple_of(16).max(32);
    let plausible = size >= least && size < least + 64 * 1024 && size.is_multiple_of(16);
    plausible.then_some(size_word & (IS_MMAPPED | NON_MAIN_ARENA) == 0)
}

/// The ranges of glibc's main heap, whose gaps between blocks are glibc's free chunks and never
/// roots: the range (of `maps`, sorted; see `maps::ranges`) that holds `top`, main_arena's top
/// chunk, and every range in which a block's chunk says the main arena carved it (a core does
/// not name the brk heap, a forked child's is two mappings, and where brk fails glibc maps more
/// of the main heap elsewhere). `chunks` gives, in address order, each block's chunk memory
/// (the address malloc returned) and the bytes it asked for; a few are asked per range.
pub fn main_heap(
    mem: &dyn Words,
    maps: &[Mapping],
    top: Option<usize>,
    chunks: &mut dyn Iterator<Item = (usize, usize)>,
) -> Vec<(usize, usize)> {
    const ASKED: usize = 16;
    let mut out: Vec<(usize, usize)> = top.and_then(|t| maps::range_of(maps, t)).into_iter().collect();
    let mut chunks = chunks.peekable();
    for r in maps::ranges(maps) {
        while chunks.next_if(|&(at, _)| at < r.start).is_some() {}
        let mut asked = 0;
        let mut main = false;
        while let Some((at, need)) = chunks.next_if(|&(at, _)| at < r.end) {
            if !main && asked < ASKED {
                asked += 1;
                main = in_main_heap(mem, at, need) == Some(true);
            }
        }
        if main && !out.contains(&(r.start, r.end)) {
            out.push((r.start, r.end));
        }
    }
    out
}

/// `[start, end)` less `cut`, as up to two ranges appended to `out`.
pub fn subtract((start, end): (usize, usize), (cs, ce): (usize, usize), out: &mut Vec<(usize, usize)>) {
    if ce <= start || cs >= end {
        out.push((start, end));
        return;
    }
    if start < cs {
        out.push((start, cs));
    }
    if ce < end {
        out.push((ce, end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Map(HashMap<usize, usize>);

    impl Words for Map {
        fn read_words(&self, addr: usize, buf: &mut [usize]) -> usize {
            for (i, w) in buf.iter_mut().enumerate() {
                match self.0.get(&(addr + 8 * i)) {
                    Some(&v) => *w = v,
                    None => return i,
                }
            }
            buf.len()
        }
    }

    /// A fake libc data segment at 0x10000 holding an arena whose bins start at `bins`, with
    /// every bin `full` picks holding one chunk (in a heap at 0x900000), and its `next` leading
    /// back to it, through a second arena when `ring` is set.
    fn libc_with_arena(bins: usize, full: impl Fn(usize) -> bool, ring: bool) -> (Map, (usize, usize)) {
        let seg = (0x10000, 0x10000 + 0x4000);
        let mut m = HashMap::new();
        for a in (seg.0..seg.1).step_by(8) {
            m.insert(a, 0x1234);
        }
        for i in 0..BIN_PAIRS {
            let q = bins + 16 * i;
            if full(i) {
                let chunk = 0x900000 + 0x100 * i;
                m.insert(q, chunk);
                m.insert(q + 8, chunk);
                m.insert(chunk + 16, q - 16);
                m.insert(chunk + 24, q - 16);
            } else {
                m.insert(q, q - 16);
                m.insert(q + 8, q - 16);
            }
        }
        let state = bins - BINS;
        if ring {
            let other = 0x7000_0000_0020;
            m.insert(state + NEXT, other);
            m.insert(other + NEXT, state);
        } else {
            m.insert(state + NEXT, state);
        }
        (Map(m), seg)
    }

    #[test]
    fn finds_the_arena_on_either_phase_however_many_bins_hold_chunks() {
        for bins in [0x10400, 0x10408] {
            for (what, full) in [
                ("no bin", &(|_| false) as &dyn Fn(usize) -> bool),
                ("the first three bins", &|i| i < 3),
                // As in perl at exit: no run of even three empty bins.
                ("all but every third bin", &|i| i % 3 != 0),
                ("every bin", &|_| true),
            ] {
                for ring in [false, true] {
                    let (mem, seg) = libc_with_arena(bins, full, ring);
                    assert_eq!(
                        main_arena(&mem, &[seg]),
                        Some((bins - 112, bins - 112 + 2200)),
                        "bins at {bins:#x}, chunks in {what}, ring of two: {ring}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_bin_that_does_not_lead_back_or_a_broken_ring_is_no_arena() {
        let (mut mem, seg) = libc_with_arena(0x10400, |i| i < 3, false);
        // The second bin's chunk now links elsewhere.
        mem.0.insert(0x900000 + 0x100 + 24, 0x4242);
        assert_eq!(main_arena(&mem, &[seg]), None);
        let (mut mem, seg) = libc_with_arena(0x10400, |i| i < 3, false);
        mem.0.insert(0x10400 - BINS + NEXT, 0);
        assert_eq!(main_arena(&mem, &[seg]), None);
    }

    #[test]
    fn no_signature_no_arena() {
        let mut m = HashMap::new();
        for a in (0x10000..0x12000).step_by(8) {
            m.insert(a, a);
        }
        assert_eq!(main_arena(&Map(m), &[(0x10000, 0x12000)]), None);
        // Zeroes: glibc's malloc never ran.
        let zeros: HashMap<usize, usize> = (0x10000..0x12000).step_by(8).map(|a| (a, 0)).collect();
        assert_eq!(main_arena(&Map(zeros), &[(0x10000, 0x12000)]), None);
    }

    #[test]
    fn heaps_of_other_arenas_are_cut_out_wherever_they_lie() {
        let heap = 3 * HEAP_MAX;
        let mut m = HashMap::new();
        for (i, w) in [heap + 0x30, 0, 0x21000, 0x21000].into_iter().enumerate() {
            m.insert(heap + 8 * i, w);
        }
        let mem = Map(m);
        assert!(heap_at(&mem, heap));
        assert!(!heap_at(&mem, heap + 4096));
        let mut parts = vec![];
        // A mapping that starts below the heap and runs past it, as the kernel merges them.
        outside_heaps(&mem, (heap - 0x5000, heap + HEAP_MAX + 0x3000), &mut |s, e| {
            parts.push((s, e))
        });
        assert_eq!(
            parts,
            vec![(heap - 0x5000, heap), (heap + HEAP_MAX, heap + HEAP_MAX + 0x3000)]
        );
        parts.clear();
        outside_heaps(&mem, (heap + 0x1000, heap + 0x8000), &mut |s, e| {
            parts.push((s, e))
        });
        assert_eq!(
            parts,
            vec![(heap + 0x1000, heap + 0x8000)],
            "no aligned address inside"
        );
    }

    #[test]
    fn a_chunks_size_word_tells_the_main_heap() {
        let mut m = HashMap::new();
        m.insert(0x1000 - 8, 0x90 | 1); // 130 bytes asked: a 144-byte chunk, previous in use
        m.insert(0x2000 - 8, 0x90 | 4 | 1); // the same from another arena
        m.insert(0x3000 - 8, 0x2000 | 2); // mapped alone
        m.insert(0x4000 - 8, 0); // an aligned block's lead
        let mem = Map(m);
        assert_eq!(in_main_heap(&mem, 0x1000, 130), Some(true));
        assert_eq!(in_main_heap(&mem, 0x2000, 130), Some(false));
        assert_eq!(in_main_heap(&mem, 0x3000, 5000), Some(false));
        assert_eq!(in_main_heap(&mem, 0x4000, 130), None);
        assert_eq!(
            in_main_heap(&mem, 0x1000, 4000),
            None,
            "too small a chunk for the block"
        );
    }

    #[test]
    fn subtract_cuts_out_the_middle() {
        let mut out = vec![];
        subtract((0, 100), (10, 20), &mut out);
        subtract((0, 100), (200, 300), &mut out);
        subtract((0, 100), (0, 100), &mut out);
        assert_eq!(out, vec![(0, 10), (20, 100), (0, 100)]);
    }
}
