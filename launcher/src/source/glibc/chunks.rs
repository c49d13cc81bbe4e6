//! The chunks of glibc's heaps, walked by their size words, and the chunks glibc mapped on
//! their own (mmapped), found at the start of pages of anonymous memory.
//!
//! A chunk is `prev_size`, `size` (low bits: PREV_INUSE 1, IS_MMAPPED 2, NON_MAIN_ARENA 4), then
//! the program's bytes; it is in use when the next chunk's PREV_INUSE bit says so. Chunks in
//! the tcache and the fast bins keep that bit set: `free` takes them out.

use super::arenas::Arenas;
use crate::analysis::arena::Words;
use crate::analysis::maps::{self, Mapping};
use crate::source::memory::Memory;

pub const PREV_INUSE: u64 = 1;
pub const IS_MMAPPED: u64 = 2;
pub const MINSIZE: u64 = 32;
const PAGE: u64 = 4096;

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

/// Size words read through a window of the heap: one read of the image per 64 KiB instead of one
/// per chunk.
struct Window<'a> {
    mem: &'a dyn Memory,
    start: u64,
    buf: Vec<u8>,
}

impl Window<'_> {
    const LEN: u64 = 64 * 1024;

    fn word(&mut self, at: u64) -> Option<u64> {
        let off = at
            .checked_sub(self.start)
            .filter(|&o| o + 8 <= self.buf.len() as u64);
        let off = match off {
            Some(o) => o,
            None => {
                self.start = at;
                self.buf.resize(Self::LEN as usize, 0);
                if self.mem.read(at, &mut self.buf).is_err() {
                    // Near the end of what can be read: this word alone.
                    self.buf.truncate(8);
                    if self.mem.read(at, &mut self.buf).is_err() {
                        self.buf.clear();
                        return None;
                    }
                }
                0
            }
        } as usize;
        Some(u64::from_le_bytes(self.buf[off..off + 8].try_into().ok()?))
    }
}

/// Every chunk of every heap of `arenas`, in each heap's order, and where a walk stopped short.
pub fn walk(mem: &dyn Memory, arenas: &Arenas, out: &mut Vec<Chunk>) -> Vec<Stop> {
    let mut stops = Vec::new();
    let mut win = Window {
        mem,
        start: 0,
        buf: Vec::new(),
    };
    for h in &arenas.heaps {
        let top = arenas.tops[h.arena];
        let mut p = h.first;
        let mut prev: Option<usize> = None;
        while p < h.end {
            if p == top {
                break;
            }
            let Some(word) = win.word(p + 8) else {
                stops.push(Stop {
                    at: p,
                    why: "its header cannot be read".into(),
                });
                break;
            };
            let size = word & !7;
            // The fence posts at the end of a heap that is not the arena's last: a chunk of 16
            // bytes, then one of none.
            if size == 16 || size == 0 {
                break;
            }
            if size < MINSIZE || !size.is_multiple_of(16) || p + size > h.end.max(top + 16) {
                stops.push(Stop {
                    at: p,
                    why: format!("its size word {word:#x} is no chunk size that fits the heap"),
                });
                break;
            }
            // This chunk's PREV_INUSE bit says whether the one before is in use.
            if let Some(i) = prev {
                out[i].in_use = word & PREV_INUSE != 0;
            }
            prev = Some(out.len());
            out.push(Chunk {
                at: p,
                size,
                in_use: true,
                mmapped: false,
                arena: h.arena,
            });
            p += size;
        }
        // The last chunk before the top chunk: the top's PREV_INUSE says.
        if let (Some(i), true) = (prev, p == top) {
            if let Some(w) = win.word(top + 8) {
                out[i].in_use = w & PREV_INUSE != 0;
            }
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
