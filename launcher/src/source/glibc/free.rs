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

/// How far below a thread pointer glibc's `tcache` variable is looked for: the static TLS of the
/// program and of the libraries loaded with it sits right below it, a few KiB at most.
const TLS_SPAN: u64 = 16 * 1024;

/// The tcaches the threads' `tcache` variables point to, beyond those in `known`. The variable
/// is at the same offset from every thread's pointer (glibc's static TLS); that offset is
/// learnt where a thread's TLS holds the address of a tcache found by its lists (or as its
/// heap's first chunk), then read in every thread: each word there that is the user address of
/// an in-use chunk of a tcache's size names that thread's tcache, empty or not. With no tcache
/// known the offset is not guessed and nothing is returned.
pub fn tcaches_of_threads(
    mem: &dyn Words,
    tps: &[u64],
    known: &HashSet<u64, AddrHash>,
    sizes: &dyn Fn(u64) -> Option<u64>,
) -> Vec<u64> {
    // Read backwards from the thread pointer in pieces, as far as memory goes.
    const PIECE: usize = 64;
    let mut slot = None;
    'learn: for &tp in tps.iter().filter(|&&tp| tp >= TLS_SPAN) {
        let mut buf = [0usize; PIECE];
        let mut below = 0u64;
        while below < TLS_SPAN {
            let from = tp - below - 8 * PIECE as u64;
            if mem.read_words(from as usize, &mut buf) < PIECE {
                break;
            }
            for (i, &w) in buf.iter().enumerate().rev() {
                if w >= 16 && known.contains(&(w as u64 - 16)) {
                    slot = Some(below + 8 * (PIECE - i) as u64);
                    break 'learn;
                }
            }
            below += 8 * PIECE as u64;
        }
    }
    let Some(below) = slot else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for &tp in tps {
        let Some(w) = tp.checked_sub(below).and_then(|a| mem.word(a as usize)) else {
            continue;
        };
        let at = (w as u64).wrapping_sub(16);
        if w != 0 && !known.contains(&at) && !out.contains(&at) && sizes(at) == Some(TCACHE_CHUNK) {
            out.push(at);
        }
    }
    out
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

/// glibc's own rule for the regular bins (unsorted, small, large) of the arena at `state`:
/// every chunk on a bin is a free chunk of the walk, and its `fd`'s `bk` leads back to it. Each
/// broken link is a line; the bins' chunks are free by their neighbour's bit already, so this
/// only checks. `free_at` says whether the walk found a free chunk there.
pub fn check_bins(
    mem: &dyn Words,
    free_at: &dyn Fn(u64) -> bool,
    state: u64,
    limit: usize,
    problems: &mut Vec<String>,
) {
    for i in 1..super::arenas::NBINS + 1 {
        let bin = state + super::arenas::BINS + 16 * (i - 1) - 16;
        let mut p = bin;
        for _ in 0..limit {
            let Some(fd) = mem.word((p + 16) as usize).map(|w| w as u64) else {
                problems.push(format!(
                    "bin {i} of the arena at {state:#x}: the chunk at {p:#x} cannot be read"
                ));
                break;
            };
            if mem.word((fd + 24) as usize).map(|w| w as u64) != Some(p) {
                problems.push(format!(
                    "bin {i} of the arena at {state:#x}: the chunk at {fd:#x} after {p:#x} does not link back to it (its bk is not {p:#x})"
                ));
                break;
            }
            if fd == bin {
                break;
            }
            if !free_at(fd) {
                problems.push(format!(
                    "bin {i} of the arena at {state:#x} holds {fd:#x}, which the heap's chunks do not show free"
                ));
                break;
            }
            p = fd;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Memory as a map of words.
    struct Fake(HashMap<usize, usize>);

    impl Words for Fake {
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

    /// An arena at `state` whose bins are all empty.
    fn empty_arena(state: u64) -> HashMap<usize, usize> {
        let mut m = HashMap::new();
        for i in 1..=super::super::arenas::NBINS {
            let at = state + super::super::arenas::BINS + 16 * (i - 1);
            m.insert(at as usize, (at - 16) as usize);
            m.insert(at as usize + 8, (at - 16) as usize);
        }
        m
    }

    #[test]
    fn bins_are_checked_by_their_links() {
        let state = 0x10000u64;
        let bin = state + super::super::arenas::BINS - 16; // the unsorted bin
        let chunk = 0x90000u64;
        let mut m = empty_arena(state);
        m.insert(bin as usize + 16, chunk as usize);
        m.insert(bin as usize + 24, chunk as usize);
        m.insert(chunk as usize + 16, bin as usize);
        m.insert(chunk as usize + 24, bin as usize);
        let free = |at: u64| at == chunk;
        let mut problems = Vec::new();
        check_bins(&Fake(m.clone()), &free, state, 10, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        // An overflow wrote the chunk's bk.
        m.insert(chunk as usize + 24, 0x4141_4141);
        check_bins(&Fake(m.clone()), &free, state, 10, &mut problems);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("does not link back"), "{problems:?}");
        // A bin that holds a chunk the walk found in use.
        m.insert(chunk as usize + 24, bin as usize);
        problems.clear();
        check_bins(&Fake(m), &|_| false, state, 10, &mut problems);
        assert!(problems[0].contains("do not show free"), "{problems:?}");
    }

    #[test]
    fn a_tcache_is_believed_when_its_lists_hold_its_counts() {
        // A tcache chunk at 0x1000 (16-bit counts) with one chunk of 48 bytes (class 1) at
        // 0x2000, safe-linked, then none.
        let tc = 0x1000u64;
        let e = 0x2010u64;
        let mut m = HashMap::new();
        for i in 0..(16 + 64) {
            m.insert((tc + 16 + 8 * i) as usize, 0usize);
        }
        m.insert((tc + 16) as usize, 1 << 16); // counts[1] = 1
        m.insert((tc + 16 + 128 + 8) as usize, e as usize); // entries[1]
        m.insert(e as usize, (e >> 12) as usize); // next: null, protected
        let sizes = |at: u64| (at == e - 16).then_some(48);
        let rules = Rules::of(Some((2, 36)));
        let mut free = Vec::new();
        assert!(tcache_at(
            &Fake(m.clone()),
            &sizes,
            tc,
            TCACHE_CHUNK,
            rules,
            false,
            &mut free
        ));
        assert_eq!(free, [e - 16]);
        // Unprotected, the link reads as a pointer to nowhere: not a tcache of 2.36.
        m.insert(e as usize, 0x1);
        free.clear();
        assert!(!tcache_at(
            &Fake(m),
            &sizes,
            tc,
            TCACHE_CHUNK,
            rules,
            false,
            &mut free
        ));
        assert!(free.is_empty());
    }
}
