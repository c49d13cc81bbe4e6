//! glibc's `main_arena`, found by its signature in libc's writable data.
//!
//! `main_arena` is not exported, but its `bins` array has a shape nothing else has: an empty
//! bin's pair of words (fd, bk) at address Q both hold Q - 16 (the bin poses as a chunk whose
//! fd and bk fields are at offsets 16 and 24). The longest run of such pairs, 16 bytes apart and
//! at least 32 long, is taken as `bins`; it is extended over bins that hold chunks, whose first
//! chunk's `bk` and last chunk's `fd` lead back to the bin, up to the 127 pairs of `bins`. The
//! struct runs from 112 bytes before `bins` (mutex, flags, have_fastchunks, fastbinsY[10], top,
//! last_remainder) to 96 bytes after its last pair (binmap, next, next_free, attached_threads
//! and the two system_mem counters, rounded up).
//!
//! Every leak analysis leaves it out of the roots: its `top` and its bins point at chunk
//! headers, and a chunk's header shares its first word with the end of the block before it, so
//! scanned as a root it would keep the last block allocated, and blocks next to free chunks,
//! reachable. The search only reads memory through `Words` and never allocates, so the exit
//! report can run it while the other threads are stopped.

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
/// Fewest empty bins in a row that count as the signature.
const MIN_RUN: usize = 32;

/// The `[start, end)` of `main_arena` within `segments` (libc's writable segments), or None
/// when no run of empty bins long enough is there.
pub fn main_arena(mem: &dyn Words, segments: &[(usize, usize)]) -> Option<(usize, usize)> {
    let mut best = (0usize, 0usize); // (pairs, first pair)
    let mut buf = [0usize; 512];
    for &(start, end) in segments {
        let start = (start + 7) & !7;
        // Pairs start on either 8-byte phase of the segment; carry the two runs across chunks.
        let mut runs = [(0usize, 0usize); 2];
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
                    let phase = ((q - start) / 8) % 2;
                    let run = &mut runs[phase];
                    if fd == q.wrapping_sub(16) && w == fd {
                        if run.0 == 0 {
                            run.1 = q;
                        }
                        run.0 += 1;
                        if run.0 > best.0 {
                            best = *run;
                        }
                    } else {
                        *run = (0, 0);
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
    let (pairs, mut first) = best;
    if pairs < MIN_RUN {
        return None;
    }
    let mut last = first + 16 * (pairs - 1);
    while last - first < 16 * (BIN_PAIRS - 1) && linked_bin(mem, first - 16) {
        first -= 16;
    }
    while last - first < 16 * (BIN_PAIRS - 1) && linked_bin(mem, last + 16) {
        last += 16;
    }
    Some((first - 96 - 16, last + 16 + 16 + 64))
}

/// Whether the pair of words at `q` is a glibc bin that holds chunks: its first chunk's `bk` and
/// its last chunk's `fd` both lead back to the bin, whose chunk-shaped address is `q - 16`.
fn linked_bin(mem: &dyn Words, q: usize) -> bool {
    let (Some(fd), Some(bk)) = (mem.word(q), mem.word(q + 8)) else {
        return false;
    };
    mem.word(fd.wrapping_add(24)) == Some(q - 16) && mem.word(bk.wrapping_add(16)) == Some(q - 16)
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

    /// A fake libc data segment at 0x10000 holding an arena whose bins start at `bins`, with the
    /// first `full` bins holding one chunk each (in a heap at 0x900000).
    fn libc_with_arena(bins: usize, full: usize) -> (Map, (usize, usize)) {
        let seg = (0x10000, 0x10000 + 0x4000);
        let mut m = HashMap::new();
        for a in (seg.0..seg.1).step_by(8) {
            m.insert(a, 0x1234);
        }
        for i in 0..BIN_PAIRS {
            let q = bins + 16 * i;
            if i < full {
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
        (Map(m), seg)
    }

    #[test]
    fn finds_the_arena_on_either_phase_and_over_full_bins() {
        for bins in [0x10400, 0x10408] {
            for full in [0, 3] {
                let (mem, seg) = libc_with_arena(bins, full);
                let got = main_arena(&mem, &[seg]);
                assert_eq!(
                    got,
                    Some((bins - 112, bins + 16 * (BIN_PAIRS - 1) + 96)),
                    "bins at {bins:#x}, {full} full"
                );
            }
        }
    }

    #[test]
    fn no_signature_no_arena() {
        let mut m = HashMap::new();
        for a in (0x10000..0x12000).step_by(8) {
            m.insert(a, a);
        }
        assert_eq!(main_arena(&Map(m), &[(0x10000, 0x12000)]), None);
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
