//! The chunks that are free although the next chunk says they are in use: those in a thread's
//! tcache and those in an arena's fast bins, found by following their lists; and the tcaches
//! themselves (`tcache_perthread_struct`), which are glibc's own chunks, not the program's.
//!
//! Since glibc 2.32 both kinds of list are safe-linked: a chunk's link is stored as
//! `(where_the_link_is >> 12) ^ next`. A tcache is `counts[64]` (16-bit since 2.30, bytes
//! before) then `entries[64]`, each the user address of the first chunk of that size class
//! (`32 + 16 * i` bytes), unprotected; each tcache chunk holds its link, then the `key` word
//! (since 2.29) that marks it as in a tcache.

use super::chunks::Chunk;
use crate::analysis::arena::Words;
use crate::source::memory::AddrHash;
use std::collections::HashSet;

const TCACHE_BINS: usize = 64;
/// The chunk size of a tcache with 16-bit counts (2.30 and later) and with byte counts.
pub const TCACHE_CHUNK: u64 = 16 + 2 * 64 + 8 * 64;
pub const TCACHE_CHUNK_OLD: u64 = 16 + 64 + 8 * 64;

/// Whether the free lists are safe-linked, and how counts are kept, from glibc's version; an
/// unknown version tries both.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    pub safe_linked: Option<bool>,
}

impl Rules {
    pub fn of(version: Option<(u32, u32)>) -> Rules {
        Rules {
            safe_linked: version.map(|v| v >= (2, 32)),
        }
    }
}

fn reveal(at: u64, stored: u64, safe: bool) -> u64 {
    if safe {
        (at >> 12) ^ stored
    } else {
        stored
    }
}

/// The chunks of a tcache's lists, if the chunk at `at` (in use, of a tcache's size) is one:
/// every list holds exactly as many chunks of its size class as its count says, and ends.
/// `first_of_heap`: a tcache whose lists are all empty is believed only where glibc puts the
/// tcache of the thread that made a heap, its first chunk.
pub fn tcache_at(
    mem: &dyn Words,
    sizes: &dyn Fn(u64) -> Option<u64>,
    at: u64,
    size: u64,
    rules: Rules,
    first_of_heap: bool,
    free: &mut Vec<u64>,
) -> bool {
    let wide = size == TCACHE_CHUNK;
    let counts_len = if wide { 16 } else { 8 };
    let mut w = [0usize; 16 + TCACHE_BINS];
    if mem.read_words((at + 16) as usize, &mut w[..counts_len + TCACHE_BINS]) < counts_len + TCACHE_BINS {
        return false;
    }
    let count = |i: usize| -> u64 {
        if wide {
            (w[i / 4] as u64 >> (16 * (i % 4))) & 0xffff
        } else {
            (w[i / 8] as u64 >> (8 * (i % 8))) & 0xff
        }
    };
    let entries = &w[counts_len..counts_len + TCACHE_BINS];
    if entries.iter().all(|&e| e == 0) {
        return first_of_heap && (0..TCACHE_BINS).all(|i| count(i) == 0);
    }
    let tries: &[bool] = match rules.safe_linked {
        Some(true) => &[true],
        Some(false) => &[false],
        None => &[true, false],
    };
    'safe: for &safe in tries {
        let mark = free.len();
        for (i, &e) in entries.iter().enumerate() {
            let mut e = e as u64;
            let want = 32 + 16 * i as u64;
            for _ in 0..count(i) {
                if e == 0 || !e.is_multiple_of(16) || sizes(e - 16) != Some(want) {
                    free.truncate(mark);
                    continue 'safe;
                }
                free.push(e - 16);
                match mem.word(e as usize) {
                    Some(n) => e = reveal(e, n as u64, safe),
                    None => {
                        free.truncate(mark);
                        continue 'safe;
                    }
                }
            }
            if e != 0 {
                free.truncate(mark);
                continue 'safe;
            }
        }
        return true;
    }
    false
}

/// The chunks on the fast bins of the arena at `state`, each checked to be of its bin's size;
/// a list that leads anywhere else ends there, with a line saying so.
pub fn fastbins(
    mem: &dyn Words,
    sizes: &dyn Fn(u64) -> Option<u64>,
    state: u64,
    rules: Rules,
    free: &mut HashSet<u64, AddrHash>,
    problems: &mut Vec<String>,
) {
    for i in 0..super::arenas::NFASTBINS {
        let Some(head) = mem.word((state + super::arenas::FASTBINS + 8 * i) as usize) else {
            continue;
        };
        let want = 32 + 16 * i;
        // With the version unknown, the list is read both ways and the reading that stays on
        // chunks of the bin's size longer wins.
        let tries: &[bool] = match rules.safe_linked {
            Some(s) => {
                if s {
                    &[true]
                } else {
                    &[false]
                }
            }
            None => &[true, false],
        };
        let mut best: (Vec<u64>, Option<String>) = (Vec::new(), None);
        for &safe in tries {
            let mut got = Vec::new();
            let mut trouble = None;
            let mut p = head as u64;
            let mut seen = HashSet::new();
            while p != 0 {
                if !p.is_multiple_of(16) || sizes(p) != Some(want) || !seen.insert(p) {
                    trouble = Some(format!(
                        "fast bin {i} of the arena at {state:#x} leads to {p:#x}, which is no free \
                         chunk of {want} bytes"
                    ));
                    break;
                }
                got.push(p);
                match mem.word((p + 16) as usize) {
                    Some(n) => p = reveal(p + 16, n as u64, safe),
                    None => break,
                }
            }
            if best.0.is_empty() || got.len() > best.0.len() {
                best = (got, trouble);
            }
        }
        free.extend(best.0);
        problems.extend(best.1);
    }
}

/// Where a chunk of `size` bytes is in the sorted `chunks`, by its header address.
pub fn size_of(chunks: &[Chunk], at: u64) -> Option<u64> {
    let i = chunks.binary_search_by_key(&at, |c| c.at).ok()?;
    let c = &chunks[i];
    (c.in_use && !c.mmapped).then_some(c.size)
}
