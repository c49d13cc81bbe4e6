//! This process's memory as the exit report's mark reads it, while the other threads are
//! stopped: directly where the list locks and the stop keep it in place, through the kernel where
//! it may not be readable.

use super::stopworld;
use crate::analysis::arena::Words;
use crate::analysis::maps::{self, Mapping};
use crate::analysis::reach::{self, Source};

/// Whether `[start, end)` (8-byte aligned) can be read: inside one readable range of `maps`
/// (sorted; adjacent mappings with the same permissions are one range), or, with no maps at
/// hand (a report from a fatal signal reads none), as the kernel finds it when asked to copy the
/// range.
pub fn readable(maps: &[Mapping], start: usize, end: usize) -> bool {
    if !maps.is_empty() {
        return maps::readable(maps, start, end);
    }
    let mut got = 0;
    stopworld::read_words_checked(start, end, &mut |ws| got += 8 * ws.len());
    got == end - start
}

/// This process's memory as the shared analysis reads it: with `process_vm_readv`, so an address
/// that is not mapped (a bin's pair of words that is no bin points anywhere) reads as nothing
/// instead of faulting.
pub(super) struct OwnMemory;

impl Words for OwnMemory {
    fn read_words(&self, addr: usize, buf: &mut [usize]) -> usize {
        let mut n = 0;
        stopworld::read_words_checked(addr, addr + 8 * buf.len(), &mut |ws| {
            buf[n..n + ws.len()].copy_from_slice(ws);
            n += ws.len();
        });
        n
    }
}

/// Calls `emit` with the aligned words in `[start, end)` of this process's memory.
pub(super) fn scan_words(start: usize, end: usize, emit: &mut dyn FnMut(&[usize])) {
    let a = (start + 7) & !7;
    if a + 8 > end {
        return;
    }
    // SAFETY: callers pass only ranges a load reads without faulting: words near a stopped
    // thread's stack pointer, and (through `OwnScan`) ranges inside readable anonymous mappings
    // (`plain_ranges`), which stay mapped while the other threads are stopped and the lists are
    // locked; nothing writes them meanwhile, and the start is 8-byte aligned.
    emit(unsafe { core::slice::from_raw_parts(a as *const usize, (end - a) / 8) });
}

/// The stretches of `maps` (sorted) that a plain load reads without faulting: readable
/// anonymous mappings, adjacent ones joined. A file's mapping is left out, since the program may
/// have truncated the file under it (a load past the end raises SIGBUS), and so is every mapping
/// the program made unreadable. Made before the stop: it allocates.
pub(super) fn plain_ranges(maps: &[Mapping]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for m in maps.iter().filter(|m| m.readable && !m.file) {
        match out.last_mut() {
            Some(last) if last.1 == m.start => last.1 = m.end,
            _ => out.push((m.start, m.end)),
        }
    }
    out
}

/// Whether `[start, end)` lies inside one of `ranges` (sorted, not overlapping).
fn within(ranges: &[(usize, usize)], start: usize, end: usize) -> bool {
    let i = ranges.partition_point(|&(s, _)| s <= start);
    i > 0 && end <= ranges[i - 1].1
}

/// This process's memory as the classification reads it, while the other threads are stopped.
/// Memory known to be readable is read directly, at memory speed; anything else through the
/// kernel, a page that cannot be read skipped, as a debugger reads it.
pub(super) struct OwnScan<'a> {
    /// Ranges (sorted) that may not be readable whole: stacks of threads that could not be
    /// stopped, read through the kernel.
    pub(super) checked: &'a [(usize, usize)],
    /// What a plain load reads safely (see `plain_ranges`); empty in a report from a fatal
    /// signal, which reads no maps, so that everything goes through the kernel.
    pub(super) plain: &'a [(usize, usize)],
    /// The mappings, sorted, for memcheck's test of a vtable.
    pub(super) maps: &'a [Mapping],
}

impl Source for OwnScan<'_> {
    fn scan(&mut self, start: usize, end: usize, emit: &mut dyn FnMut(&[usize])) {
        if within(self.checked, start, end) {
            stopworld::read_words_checked(start, end, emit);
        } else if within(self.plain, start, end) {
            scan_words(start, end, emit);
        } else {
            stopworld::read_words_skipping(start, end, emit);
        }
    }

    /// Words of live blocks, which the list locks keep mapped, though the program may have
    /// made a page of one unreadable.
    fn word(&mut self, addr: usize) -> Option<usize> {
        let mut w = None;
        self.scan(addr, addr + 8, &mut |ws| w = ws.first().copied());
        w
    }

    /// Words of readable file-backed mappings only, by `is_vtable`'s rule.
    fn is_vtable(&mut self, addr: usize) -> bool {
        let maps = self.maps;
        reach::is_vtable(maps, addr, &mut |a| self.word(a))
    }
}
