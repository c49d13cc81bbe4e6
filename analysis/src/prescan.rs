//! The words of every block that point among the blocks, read ahead of the mark in address order
//! by several threads, for a reader whose memory does not change (a core, a stopped process's
//! copy).
//!
//! The mark (`reach::Marker`) visits the blocks in the order its worklist pops them, and each
//! visit is a run of cache misses a few hundred bytes long. Read ahead, the same words come in
//! one stream per thread, which the processor's prefetchers follow, and the mark then visits only
//! the few words per block that `Blocks::spans` keeps: the answer is the same, since the mark
//! gets every word it would have looked at, in the same order. The exit report, inside the
//! program, starts no threads and reads as before.

use crate::blocks::{each_spanned, Blocks};

/// What was read ahead: for each part of the blocks (one per thread), each block's kept words.
#[derive(Default)]
pub struct Prescan {
    parts: Vec<Part>,
}

/// The blocks `first..first + ends.len()`: block `first + k`'s words are
/// `words[ends[k - 1]..ends[k]]` (from 0 for the first), unless `ends[k]` has `UNREAD` set.
struct Part {
    first: usize,
    ends: Vec<u32>,
    words: Vec<usize>,
}

/// Marks a block that was not read ahead (a read came up short, or the part ran out of room):
/// the mark reads it itself.
const UNREAD: u32 = 1 << 31;

impl Prescan {
    /// Reads every block of `blocks` with `read(start, end, emit)`, which calls `emit` with the
    /// words of `[start, end)` in order and returns false if it could not read them all. The
    /// blocks are split into `threads` parts of about equal bytes, each read by a thread of its
    /// own; a part keeps at most `room` words (fewer than 2^31), and the blocks past that are
    /// left to the mark.
    pub fn read<R>(blocks: &Blocks, threads: usize, room: usize, read: &R) -> Prescan
    where
        R: Fn(usize, usize, &mut dyn FnMut(&[usize])) -> bool + Sync,
    {
        let cuts = cuts(blocks, threads.max(1));
        let room = room.min(UNREAD as usize - 1);
        let parts = std::thread::scope(|s| {
            let handles: Vec<_> = cuts
                .windows(2)
                .map(|w| {
                    let (from, to) = (w[0], w[1]);
                    s.spawn(move || part(blocks, from, to, room, read))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join())
                .collect::<Result<Vec<_>, _>>()
        });
        // A thread that panicked read nothing the mark can trust: it reads every block itself.
        Prescan {
            parts: parts.unwrap_or_default(),
        }
    }

    /// Block `i`'s words that lie among the blocks, in order, if they were read ahead.
    #[inline]
    pub fn words(&self, i: usize) -> Option<&[usize]> {
        let p = self
            .parts
            .iter()
            .find(|p| i >= p.first && i - p.first < p.ends.len())?;
        let k = i - p.first;
        let end = p.ends[k];
        if end & UNREAD != 0 {
            return None;
        }
        let start = k.checked_sub(1).map_or(0, |j| p.ends[j] & !UNREAD);
        p.words.get(start as usize..end as usize)
    }
}

/// The first block of each of `threads` parts of about equal bytes, and the count at the end.
fn cuts(blocks: &Blocks, threads: usize) -> Vec<usize> {
    let n = blocks.len();
    let size = |i: usize| {
        let (s, e) = blocks.range(i);
        e - s
    };
    let total: usize = (0..n).map(size).sum();
    let mut cuts = vec![0];
    let mut sum = 0;
    for i in 0..n {
        if sum >= total / threads * cuts.len() && cuts.len() < threads && i > 0 {
            cuts.push(i);
        }
        sum += size(i);
    }
    cuts.push(n);
    cuts.dedup();
    cuts
}

/// Reads blocks `from..to`.
fn part<R>(blocks: &Blocks, from: usize, to: usize, room: usize, read: &R) -> Part
where
    R: Fn(usize, usize, &mut dyn FnMut(&[usize])) -> bool,
{
    let mut ends = Vec::with_capacity(to - from);
    let mut words = Vec::new();
    for i in from..to {
        let had = words.len();
        let (s, e) = blocks.range(i);
        let whole = had < room && read(s, e, &mut |ws| each_spanned(blocks, ws, |w| words.push(w)));
        if whole && words.len() <= room {
            ends.push(words.len() as u32);
        } else {
            words.truncate(had);
            ends.push(had as u32 | UNREAD);
        }
    }
    Part {
        first: from,
        ends,
        words,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks of 32 bytes every 64 bytes from 0x1000.
    fn world(n: usize) -> Blocks {
        let mut blocks = Blocks::with_capacity(n);
        for i in 0..n {
            blocks.push(0x1000 + 64 * i, 0x1000 + 64 * i + 32);
        }
        blocks.index();
        blocks
    }

    /// Each block's words are its index (below the blocks), the start of the next block and
    /// zeros, so one word of each lies among the blocks; block 7 cannot be read.
    fn read(s: usize, _e: usize, emit: &mut dyn FnMut(&[usize])) -> bool {
        let i = (s - 0x1000) / 64;
        if i == 7 {
            return false;
        }
        emit(&[i, s + 64, 0, 0]);
        true
    }

    #[test]
    fn every_part_keeps_the_words_among_the_blocks_and_leaves_what_it_could_not_read() {
        let n = 100;
        for threads in [1, 2, 3, 8] {
            let blocks = world(n);
            let pre = Prescan::read(&blocks, threads, 1 << 20, &read);
            for i in 0..n {
                let want: Vec<usize> = if i + 1 < n {
                    vec![0x1000 + 64 * (i + 1)]
                } else {
                    vec![]
                };
                match pre.words(i) {
                    _ if i == 7 => assert_eq!(pre.words(i), None, "{threads} threads"),
                    Some(ws) => assert_eq!(ws, &want[..], "block {i}, {threads} threads"),
                    None => panic!("block {i} not read with {threads} threads"),
                }
            }
            // No block past the last.
            assert_eq!(pre.words(n), None);
        }
    }

    #[test]
    fn a_part_out_of_room_leaves_the_rest_to_the_mark() {
        let blocks = world(10);
        let pre = Prescan::read(&blocks, 1, 3, &read);
        assert_eq!(pre.words(2), Some(&[0x1000 + 64 * 3][..]));
        assert_eq!(pre.words(3), None);
        assert_eq!(pre.words(9), None);
    }

    #[test]
    fn parts_are_cut_by_bytes() {
        let mut blocks = Blocks::with_capacity(4);
        // One block as big as the three after it.
        blocks.push(0x1000, 0x1000 + 3000);
        for i in 0..3 {
            blocks.push(0x2000 + 0x1000 * i, 0x2000 + 0x1000 * i + 1000);
        }
        assert_eq!(cuts(&blocks, 2), vec![0, 1, 4]);
        assert_eq!(cuts(&blocks, 1), vec![0, 4]);
    }
}
