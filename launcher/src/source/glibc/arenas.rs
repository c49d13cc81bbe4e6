//! glibc's arenas and their heaps, found from memory alone: `main_arena` by its shape in libc's
//! writable data (`analysis::arena::main_arena`), the other arenas through the `heap_info` at the
//! start of every HEAP_MAX-aligned heap and through the ring of arenas (`next`), and the version
//! of the glibc the program ran, which decides the layout of the tcache and whether free lists
//! are safe-linked.

use crate::analysis::arena::{self, Words, HEAP_MAX};
use crate::analysis::maps::{self, Mapping};

/// Offsets in `struct malloc_state` (64-bit, glibc 2.27 and later; 2.26 has no
/// `have_fastchunks` word but the same offsets, the word having been padding).
pub const FASTBINS: u64 = 16;
pub const NFASTBINS: u64 = 10;
pub const TOP: u64 = 96;
pub const BINS: u64 = 112;
pub const NBINS: u64 = 127;
pub const NEXT: u64 = 2160;
/// `system_mem`: the bytes the arena took from the system.
pub const SYSTEM_MEM: u64 = 2184;
pub const STATE_LEN: u64 = 2200;
/// `flags`' bit saying the main arena's memory is not one contiguous stretch from sbrk.
const NONCONTIGUOUS: usize = 2;

/// One heap of an arena: the chunks from `first` up to `end` (or to the arena's top chunk).
#[derive(Clone, Debug)]
pub struct HeapRange {
    pub first: u64,
    pub end: u64,
    /// Index into `Arenas::list`.
    pub arena: usize,
}

#[derive(Clone, Debug)]
pub struct Arenas {
    /// `malloc_state` addresses, main_arena first.
    pub list: Vec<u64>,
    /// Each arena's top chunk.
    pub tops: Vec<u64>,
    pub heaps: Vec<HeapRange>,
    /// The ranges of memory (mappings, merged) that hold heaps: the main heap's range and each
    /// non-main heap's `[start, start + size)`, where no mmapped chunk is looked for.
    pub taken: Vec<(u64, u64)>,
}

/// Finds the arenas from main_arena (the `[start, end)` the search returned).
pub fn find(mem: &dyn Words, regions: &[Mapping], main: u64) -> Arenas {
    let mut list = vec![main];
    // The ring through `next`: every arena glibc made, main_arena first.
    let mut at = main;
    for _ in 0..4096 {
        match mem.word((at + NEXT) as usize) {
            Some(n) if n as u64 != main && n != 0 && n.is_multiple_of(8) && !list.contains(&(n as u64)) => {
                list.push(n as u64);
                at = n as u64;
            }
            _ => break,
        }
    }
    let tops: Vec<u64> = list
        .iter()
        .map(|&a| mem.word((a + TOP) as usize).unwrap_or(0) as u64)
        .collect();
    let mut heaps = Vec::new();
    let mut taken = Vec::new();
    // The main heap: the range of mappings holding main_arena's top chunk. Its first chunk is
    // where the brk heap starts: the range's start, whose chunk says the (absent) chunk before
    // it is in use, unless the kernel merged the heap with the program's .bss before it; then
    // the first start from which the chunks lead to the top chunk is it. A heap damaged after
    // its first chunk is walked from there, to report the damage, not from past it.
    if let Some((s, e)) = maps::range_of(regions, tops[0] as usize) {
        let (s, e) = (s as u64, e as u64);
        taken.push((s, e));
        let first = main_first(mem, main, tops[0], s);
        heaps.push(HeapRange {
            first,
            end: tops[0] + 16,
            arena: 0,
        });
    }
    // The non-main heaps: every HEAP_MAX-aligned address of every range whose heap_info names
    // one of the arenas.
    for r in maps::ranges(regions).iter().filter(|r| r.readable && r.writable) {
        let mut h = (r.start as u64).next_multiple_of(HEAP_MAX as u64);
        while h < r.end as u64 {
            if arena::heap_at(mem, h as usize) {
                let ar = mem.word(h as usize).unwrap_or(0) as u64;
                let size = mem.word(h as usize + 16).unwrap_or(0) as u64;
                if let Some(i) = list.iter().position(|&a| a == ar) {
                    // The arena's own malloc_state sits right after the heap_info of its first
                    // heap, which says how big a heap_info is (32 bytes before 2.35, 48 after).
                    let first = if (h..h + size).contains(&ar) {
                        (ar + STATE_LEN).next_multiple_of(16)
                    } else {
                        h + info_len(mem, &list, &heaps)
                    };
                    taken.push((h, h + size));
                    heaps.push(HeapRange {
                        first,
                        end: h + size,
                        arena: i,
                    });
                }
            }
            h += HEAP_MAX as u64;
        }
    }
    Arenas {
        list,
        tops,
        heaps,
        taken,
    }
}

/// The main heap's first chunk, in the range of mappings from `s` that holds the top chunk
/// `top`: `s` itself, unless the kernel merged the heap with the program's .bss before it (see
/// `find`).
fn main_first(mem: &dyn Words, main: u64, top: u64, s: u64) -> u64 {
    let looks_first = |c: u64| {
        mem.word((c + 8) as usize)
            .is_some_and(|w| w & 7 == 1 && (w & !7) >= 32 && c + (w as u64 & !7) <= top)
    };
    let mut first = s;
    if !looks_first(s) {
        // glibc's own account first: a contiguous main arena holds `system_mem` bytes from
        // where sbrk first gave it memory up to the end of its top chunk, so its first chunk
        // is that far below the end (a walk of every chunk from each candidate, below, costs
        // as much as the heap's walk itself).
        let contiguous = mem
            .word(main as usize)
            .is_some_and(|w| (w >> 32) & NONCONTIGUOUS == 0);
        let top_end = mem
            .word((top + 8) as usize)
            .map(|w| top.wrapping_add(w as u64 & !7));
        let base = mem
            .word((main + SYSTEM_MEM) as usize)
            .zip(top_end)
            .map(|(sys, end)| end.wrapping_sub(sys as u64))
            .filter(|&c| contiguous && c > s && c < top && c.is_multiple_of(16) && looks_first(c));
        if let Some(c) = base {
            first = c;
        }
    }
    if !looks_first(first) {
        let mut c = s;
        while c < top && c < s + (1 << 20) {
            if looks_first(c) && reaches(mem, c, top) {
                return c;
            }
            c += 16;
        }
    }
    first
}

/// The size of a heap_info, learnt from an arena whose state follows its first heap's.
fn info_len(mem: &dyn Words, list: &[u64], _heaps: &[HeapRange]) -> u64 {
    for &a in &list[1..] {
        let h = a & !(HEAP_MAX as u64 - 1);
        if mem.word(h as usize) == Some(a as usize) {
            return a - h;
        }
    }
    48
}

/// Whether the chunks from `first` on lead, size by size, exactly to `top`.
fn reaches(mem: &dyn Words, first: u64, top: u64) -> bool {
    let mut p = first;
    while p < top {
        let Some(size) = mem.word((p + 8) as usize) else {
            return false;
        };
        let size = (size & !7) as u64;
        if size < 32 || !size.is_multiple_of(16) {
            return false;
        }
        p += size;
    }
    p == top
}

/// glibc's version, `(major, minor)`, from the text every libc carries ("release version
/// 2.36"), in the file the process mapped or, when that is gone, in the image's copy of it.
pub fn version(libc: Option<&std::path::Path>) -> Option<(u32, u32)> {
    let bytes = std::fs::read(libc?).ok()?;
    version_in(&bytes)
}

pub fn version_in(bytes: &[u8]) -> Option<(u32, u32)> {
    let key = b"release version ";
    let at = bytes.windows(key.len()).position(|w| w == key)? + key.len();
    let text: String = bytes[at..]
        .iter()
        .take(12)
        .take_while(|b| b.is_ascii_digit() || **b == b'.')
        .map(|&b| b as char)
        .collect();
    let mut it = text.split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_version_line() {
        let text = b"xxGNU C Library (Debian GLIBC 2.36-9+deb12u4) stable release version 2.36.\n";
        assert_eq!(version_in(text), Some((2, 36)));
        assert_eq!(version_in(b"no such words"), None);
    }
}
