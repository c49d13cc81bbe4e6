//! The chunks of glibc's heaps, walked by their size words, and the chunks glibc mapped on
//! their own (mmapped), found at the start of pages of anonymous memory.
//!
//! A chunk is `prev_size`, `size` (low bits: PREV_INUSE 1, IS_MMAPPED 2, NON_MAIN_ARENA 4), then
//! the program's bytes; it is in use when the next chunk's PREV_INUSE bit says so. Chunks in
//! the tcache and the fast bins keep that bit set: `free` takes them out.

use super::arenas::Arenas;
use crate::analysis::arena::Words;
use crate::analysis::maps::{self, Mapping};
use crate::source::memory::{prefetch_lines, Memory};

pub const PREV_INUSE: u64 = 1;
pub const IS_MMAPPED: u64 = 2;
pub const MINSIZE: u64 = 32;
const PAGE: u64 = 4096;
/// How many chunks ahead the walk asks for a header: a step takes a few nanoseconds and a miss
/// a hundred or more, so eight steps ahead came too late (a million chunks of 608 bytes: 23 to
/// 26 ms for the walk, 16 to 20 ms at 32 or 64).
const AHEAD: usize = 32;

/// One chunk: where its header is, its size, and whether the next chunk says it is in use.
#[derive(Clone, Copy, Debug)]
pub struct Chunk {
    pub at: u64,
    pub size: u64,
    pub in_use: bool,
    /// Mapped on its own: its usable size is 16 bytes less than its size, not 8.
    pub mmapped: bool,
    /// Index into `Arenas::list`; arenas' count for a mmapped chunk.
    pub arena: usize,
}

/// A heap walk that had to stop before its end, and why.
#[derive(Clone, Debug)]
pub struct Stop {
    pub at: u64,
    pub why: String,
}

/// One heap's walk, fed the heap's bytes piece by piece (`Memory::pieces`: a core's own bytes,
/// uncopied): the chunk whose header comes next, and the one before it, whose PREV_INUSE bit
/// that header holds.
struct HeapWalk<'a> {
    out: &'a mut Vec<Chunk>,
    stops: &'a mut Vec<Stop>,
    p: u64,
    prev: Option<usize>,
    top: u64,
    end: u64,
    arena: usize,
    done: bool,
}

impl HeapWalk<'_> {
    fn stop(&mut self, why: String) {
        self.stops.push(Stop { at: self.p, why });
        self.done = true;
    }

    /// Walks the chunks whose size words lie in `bytes`, the memory at `at`; a size word in a
    /// stretch the pieces skipped (unreadable) ends the walk there.
    fn piece(&mut self, at: u64, bytes: &[u8]) {
        let piece_end = at + bytes.len() as u64;
        while !self.done {
            let p = self.p;
            if p >= self.end && p != self.top {
                self.done = true;
                return;
            }
            let a = p + 8;
            if a < at {
                self.stop("its header cannot be read".into());
                return;
            }
            if a + 8 > piece_end {
                return;
            }
            let o = (a - at) as usize;
            let word = u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap_or_default());
            // The top chunk's PREV_INUSE bit says whether the last chunk is in use.
            if p == self.top {
                if let Some(i) = self.prev {
                    self.out[i].in_use = word & PREV_INUSE != 0;
                }
                self.done = true;
                return;
            }
            let size = word & !7;
            // The fence posts at the end of a heap that is not the arena's last: a chunk of 16
            // bytes, then one of none.
            if size == 16 || size == 0 {
                self.done = true;
                return;
            }
            if size < MINSIZE || !size.is_multiple_of(16) || p + size > self.end.max(self.top + 16) {
                self.stop(format!(
                    "its size word {word:#x} is no chunk size that fits the heap"
                ));
                return;
            }
            // This chunk's PREV_INUSE bit says whether the one before is in use.
            if let Some(i) = self.prev {
                self.out[i].in_use = word & PREV_INUSE != 0;
            }
            // The header AHEAD chunks on, were they all of this size (a heap holds runs of
            // blocks of one size): asked for now, it is in the cache when the walk gets there,
            // where each header's address depends on the size read before it.
            let ahead = o + AHEAD * size as usize;
            if ahead < bytes.len() {
                prefetch_lines(&bytes[ahead..ahead + 1]);
            }
            self.prev = Some(self.out.len());
            self.out.push(Chunk {
                at: p,
                size,
                in_use: true,
                mmapped: false,
                arena: self.arena,
            });
            self.p = p + size;
        }
    }
}

/// Every chunk of every heap of `arenas`, in each heap's order, and where a walk stopped short.
pub fn walk(mem: &dyn Memory, arenas: &Arenas, out: &mut Vec<Chunk>) -> Vec<Stop> {
    let mut stops = Vec::new();
    for h in &arenas.heaps {
        let mut w = HeapWalk {
            out: &mut *out,
            stops: &mut stops,
            p: h.first,
            prev: None,
            top: arenas.tops[h.arena],
            end: h.end,
            arena: h.arena,
            done: false,
        };
        // Every header of the heap, the top chunk's too, lies in [first, end).
        mem.pieces(h.first, h.end, &mut |at, bytes| w.piece(at, bytes));
        if !w.done && w.p < h.end && w.p != w.top {
            w.stop("its header cannot be read".into());
        }
    }
    stops
}

/// The chunks glibc mapped on their own: at the start of a page of anonymous writable memory
/// outside every heap, a `prev_size` of 0 and a size word with only IS_MMAPPED set, a whole
/// number of pages that fits the mapping; the next one may follow right after it. A chunk that
/// memalign (aligned_alloc, posix_memalign) carved out of a mapping starts further in.
pub fn mmapped(mem: &dyn Words, regions: &[Mapping], arenas: &Arenas, out: &mut Vec<Chunk>) {
    let n = arenas.list.len();
    for r in maps::ranges(regions) {
        if !(r.readable && r.writable) || r.file || r.special {
            continue;
        }
        let (start, end) = (r.start as u64, r.end as u64);
        let mut p = start;
        while p + PAGE <= end {
            if arenas.taken.iter().any(|&(s, e)| s <= p && p < e) {
                p += PAGE;
                continue;
            }
            let mut w = [0usize; 2];
            if mem.read_words(p as usize, &mut w) < 2 {
                p += PAGE;
                continue;
            }
            let size = w[1] as u64 & !7;
            let chunk = w[0] == 0
                && w[1] as u64 & 7 == IS_MMAPPED
                && size >= PAGE
                && size.is_multiple_of(PAGE)
                && p + size <= end;
            if chunk {
                // memalign's mapped chunk starts inside its mapping (see `aligned_within`).
                let lead = aligned_within(mem, p, size).unwrap_or(0);
                out.push(Chunk {
                    at: p + lead,
                    size: size - lead,
                    in_use: true,
                    mmapped: true,
                    arena: n,
                });
                p += size;
            } else {
                p += PAGE;
            }
        }
    }
}

/// Where, `lead` bytes into the mapped chunk of `size` bytes at `p`, memalign put the chunk it
/// returned, if it moved it. glibc's `_int_memalign` maps `size` for the request plus the
/// alignment, and when the block it got is not aligned moves the chunk up to the first aligned
/// place at least MINSIZE bytes in, writing there `prev_size = lead` (how `free` finds the
/// mapping's start) and `size - lead` with IS_MMAPPED; the mapping's first header stays as it
/// was. The alignment is a power of two from 32 up, so the places to look are one per power.
fn aligned_within(mem: &dyn Words, p: u64, size: u64) -> Option<u64> {
    let block = p + 16;
    let mut align = 32u64;
    while align < size {
        let mut at = block.next_multiple_of(align) - 16;
        if at - p < MINSIZE {
            at += align;
        }
        let lead = at - p;
        if lead < size {
            let mut w = [0usize; 2];
            if mem.read_words(at as usize, &mut w) == 2
                && w[0] as u64 == lead
                && w[1] as u64 == (size - lead) | IS_MMAPPED
            {
                return Some(lead);
            }
        }
        align *= 2;
    }
    None
}
