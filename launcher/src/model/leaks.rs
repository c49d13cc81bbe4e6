//! The leak classes of every live block of an image, with the exit report's definition (the one
//! in `analysis::reach`), and the chains of references `dmem why` shows.

use crate::analysis::blocks::Blocks;
use crate::analysis::maps::Mapping;
use crate::analysis::prescan::Prescan;
use crate::analysis::reach::{self, Class, Heuristic, Marker, Source};
use crate::model::heap::Heap;
use crate::model::roots::{Kind, Roots};
use crate::source::memory::Memory;
use std::collections::VecDeque;

/// Calls `emit(at, words)` with the aligned words of `[start, end)` that can be read, in runs
/// (`at` is the first word's address); false if some of it could not be read.
pub fn scan_words(mem: &dyn Memory, start: u64, end: u64, emit: &mut dyn FnMut(u64, &[usize])) -> bool {
    let start = (start + 7) & !7;
    let end = end & !7;
    if end <= start {
        return true;
    }
    mem.pieces(start, end, &mut |at, bytes| {
        // A core's bytes, mapped and aligned, are the words themselves: no copy.
        if let Ok(words) = bytemuck::try_cast_slice::<u8, usize>(bytes) {
            emit(at, words);
            return;
        }
        // Made only here, where the bytes must be copied: zeroing it for every block scanned
        // cost a kilobyte of stores each.
        let mut run = [0usize; 128];
        // Pieces come whole from an aligned start, in multiples of 8 but for the last.
        for (k, chunk) in bytes.chunks(8 * run.len()).enumerate() {
            let n = chunk.len() / 8;
            for (slot, w) in run.iter_mut().zip(chunk.chunks_exact(8)) {
                *slot = u64::from_le_bytes(w.try_into().unwrap()) as usize;
            }
            emit(at + (8 * run.len() * k) as u64, &run[..n]);
        }
    })
}

/// Every block's class, and what could not be read on the way.
pub struct Classified {
    pub class: Vec<Class>,
    /// The heuristic that made each block still reachable, if one did.
    pub heuristic: Vec<Option<Heuristic>>,
    /// Each indirectly lost block with the definitely lost block whose loss record valgrind
    /// counts it in, as (block, head).
    pub head: Vec<(usize, usize)>,
    /// Roots (by index) that could not be read whole.
    pub unread_roots: Vec<usize>,
    /// Blocks whose contents could not be read whole.
    pub unread_blocks: usize,
}

/// An image's memory as the shared classification reads it.
struct Scan<'a> {
    mem: &'a dyn Memory,
    /// The mappings, sorted, read only when the multipleinheritance heuristic asks.
    maps: Option<Vec<Mapping>>,
    /// Ranges that could not be read whole.
    unread: Vec<(usize, usize)>,
    /// The mappings the program could not read (sorted): a page it made PROT_NONE, inside a
    /// block or a root, holds no reference the program could follow. A core holds such pages
    /// all the same (the kernel dumps them by force), so they are skipped by their protection,
    /// as the exit report's reads skip them, and as valgrind does.
    unreadable: Vec<(usize, usize)>,
}

impl Scan<'_> {
    fn scan_readable(&mut self, start: usize, end: usize, emit: &mut dyn FnMut(&[usize])) {
        if !scan_words(self.mem, start as u64, end as u64, &mut |_, ws| emit(ws)) {
            self.unread.push((start, end));
        }
    }
}

impl Source for Scan<'_> {
    fn scan(&mut self, start: usize, end: usize, emit: &mut dyn FnMut(&[usize])) {
        let mut at = start;
        let mut i = self.unreadable.partition_point(|&(_, e)| e <= start);
        while at < end {
            match self.unreadable.get(i).copied() {
                Some((s, e)) if s < end => {
                    if at < s {
                        self.scan_readable(at, s, emit);
                    }
                    at = at.max(e);
                    i += 1;
                }
                _ => {
                    self.scan_readable(at, end, emit);
                    break;
                }
            }
        }
    }

    fn word(&mut self, addr: usize) -> Option<usize> {
        let i = self.unreadable.partition_point(|&(_, e)| e <= addr);
        if self.unreadable.get(i).is_some_and(|&(s, _)| s <= addr) {
            return None;
        }
        self.mem.u64_at(addr as u64).ok().map(|w| w as usize)
    }

    /// The first lines of the block only: past that the processor's own prefetching follows
    /// the scan as a stream.
    fn prefetch(&mut self, start: usize, end: usize) {
        const AHEAD: usize = 1024;
        self.mem
            .prefetch(start as u64, end.saturating_sub(start).min(AHEAD) as u64);
    }

    fn is_vtable(&mut self, addr: usize) -> bool {
        let mem = self.mem;
        let maps = self.maps.get_or_insert_with(|| {
            let mut m = mem.regions();
            m.sort_unstable_by_key(|m| m.start);
            m
        });
        reach::is_vtable(maps, addr, &mut |a| mem.u64_at(a as u64).ok().map(|w| w as usize))
    }
}

/// Classifies every block of `heap` from `roots`, with the heuristics in `heuristics` (a set of
/// `Heuristic` bits).
pub fn classify(mem: &dyn Memory, heap: &Heap, roots: &Roots, heuristics: u8) -> Classified {
    let blocks = heap.analysis_blocks();
    let mut ranges = Vec::new();
    let mut values = Vec::new();
    for r in &roots.roots {
        match r.kind {
            Kind::Register(v) => values.push(v as usize),
            _ => ranges.push((r.start as usize, r.end as usize)),
        }
    }
    let mut unreadable: Vec<(usize, usize)> = mem
        .regions()
        .iter()
        .filter(|m| !m.readable)
        .map(|m| (m.start, m.end))
        .collect();
    unreadable.sort_unstable();
    let mut scan = Scan {
        mem,
        maps: None,
        unread: Vec::new(),
        unreadable,
    };
    let mut marker = Marker::new(blocks.len());
    marker.read_ahead(read_ahead(mem, blocks, &scan.unreadable));
    marker.classify(blocks, &ranges, &values, heuristics, &mut scan);
    let class: Vec<Class> = (0..blocks.len()).map(|i| marker.class(i)).collect();
    let heuristic = (0..blocks.len()).map(|i| marker.heuristic(i)).collect();
    let head = marker.heads();
    // The mark reads roots in pieces: a root is unread if some piece inside it was.
    let inside = |(s, e): (usize, usize), (rs, re): (usize, usize)| rs <= s && e <= re;
    let unread = scan.unread;
    let unread_roots = roots
        .roots
        .iter()
        .enumerate()
        .filter(|(_, r)| !matches!(r.kind, Kind::Register(_)))
        .filter(|(_, r)| {
            let root = (r.start as usize, r.end as usize);
            unread.iter().any(|&u| inside(u, root))
        })
        .map(|(i, _)| i)
        .collect();
    let unread_blocks = unread
        .iter()
        .filter(|&&u| blocks.find(u.0).is_some_and(|j| inside(u, blocks.range(j))))
        .filter(|&&u| !ranges.iter().any(|&r| inside(u, r)))
        .count();
    Classified {
        class,
        heuristic,
        head,
        unread_roots,
        unread_blocks,
    }
}

/// Most threads that read the blocks ahead of the mark.
const MOST_THREADS: usize = 8;

/// Most words the threads keep between them (256 MiB, a share each): on a heap where most words
/// point among the blocks, the blocks past it are read by the mark itself.
const ROOM: usize = 1 << 25;

/// Every block's words that point among the blocks, read ahead of the mark in address order by a
/// thread per processor (`analysis::prescan`), where `mem` holds its bytes in place. A block not
/// wholly in one run of them, or with a page the program could not read (which `Scan` skips),
/// is left to the mark.
fn read_ahead(mem: &dyn Memory, blocks: &Blocks, unreadable: &[(usize, usize)]) -> Prescan {
    let Some(runs) = mem.shared() else {
        return Prescan::default();
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(MOST_THREADS));
    let read = |start: usize, end: usize, emit: &mut dyn FnMut(&[usize])| {
        let u = unreadable.partition_point(|&(_, e)| e <= start);
        if unreadable.get(u).is_some_and(|&(s, _)| s < end) {
            return false;
        }
        let r = runs.partition_point(|&(at, _)| at as usize <= start);
        let Some(&(at, bytes)) = r.checked_sub(1).map(|r| &runs[r]) else {
            return false;
        };
        // The words `scan_words` reads: from the first aligned one, whole words only.
        let (from, to) = (((start + 7) & !7) - at as usize, (end & !7) - at as usize);
        match bytes
            .get(from..to.max(from))
            .map(bytemuck::try_cast_slice::<u8, usize>)
        {
            Some(Ok(words)) => {
                emit(words);
                true
            }
            _ => false,
        }
    };
    Prescan::read(blocks, threads, ROOM / threads, &read)
}

/// A reference found in memory: the word's address (None for a register), the block it points
/// into, and whether it points at the block's first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ref {
    pub word: Option<u64>,
    pub value: u64,
    pub target: usize,
    pub start: bool,
}

/// The pointers between blocks, for chains: block i's references, in the order of its words.
pub struct Graph {
    pub out: Vec<Vec<Ref>>,
    /// Each root's references, in root order.
    pub roots: Vec<Vec<Ref>>,
}

impl Graph {
    pub fn build(mem: &dyn Memory, heap: &Heap, roots: &Roots) -> Graph {
        let blocks = heap.analysis_blocks();
        let refs_in = |s: u64, e: u64| {
            let mut v = Vec::new();
            scan_words(mem, s, e, &mut |at, ws| {
                for (k, &w) in ws.iter().enumerate() {
                    if let Some(t) = blocks.find(w) {
                        v.push(Ref {
                            word: Some(at + 8 * k as u64),
                            value: w as u64,
                            target: t,
                            start: blocks.range(t).0 == w,
                        });
                    }
                }
            });
            v
        };
        let out = heap
            .blocks
            .iter()
            .map(|b| refs_in(b.addr, b.addr + b.size))
            .collect();
        let roots = roots
            .roots
            .iter()
            .map(|r| match r.kind {
                Kind::Register(v) => blocks
                    .find(v as usize)
                    .map(|t| Ref {
                        word: None,
                        value: v,
                        target: t,
                        start: blocks.range(t).0 == v as usize,
                    })
                    .into_iter()
                    .collect(),
                _ => refs_in(r.start, r.end),
            })
            .collect();
        Graph { out, roots }
    }

    /// A shortest chain from a root to block `k`, which is still reachable (`starts_only`:
    /// start pointers through still reachable blocks) or possibly lost (any pointer through
    /// blocks that are not lost): the root's index and reference, then the blocks from the first
    /// to `k`.
    pub fn chain_from_root(
        &self,
        k: usize,
        class: &[Class],
        starts_only: bool,
    ) -> Option<(usize, Ref, Vec<usize>)> {
        let n = class.len();
        let usable = |i: usize| match class[i] {
            Class::StillReachable => true,
            Class::PossiblyLost => !starts_only,
            _ => false,
        };
        // parent: the block (or, for a first hop, the root as usize::MAX - root) it came from.
        let mut parent: Vec<Option<(usize, Ref)>> = vec![None; n];
        let mut queue = VecDeque::new();
        for (r, refs) in self.roots.iter().enumerate() {
            for &rf in refs {
                if (rf.start || !starts_only) && usable(rf.target) && parent[rf.target].is_none() {
                    parent[rf.target] = Some((usize::MAX - r, rf));
                    queue.push_back(rf.target);
                }
            }
        }
        while let Some(u) = queue.pop_front() {
            if u == k {
                break;
            }
            for &rf in &self.out[u] {
                if (rf.start || !starts_only) && usable(rf.target) && parent[rf.target].is_none() {
                    parent[rf.target] = Some((u, rf));
                    queue.push_back(rf.target);
                }
            }
        }
        let mut chain = vec![k];
        let mut at = k;
        loop {
            let (p, rf) = parent[at]?;
            if p > n {
                chain.reverse();
                return Some((usize::MAX - p, rf, chain));
            }
            if chain.contains(&p) {
                return None;
            }
            chain.push(p);
            at = p;
        }
    }

    /// A shortest chain of lost blocks from a definitely lost one down to lost block `k`,
    /// searched backwards from `k`.
    pub fn chain_from_leak(&self, k: usize, class: &[Class]) -> Vec<usize> {
        let lost = |i: usize| matches!(class[i], Class::DefinitelyLost | Class::IndirectlyLost);
        if class[k] == Class::DefinitelyLost {
            return vec![k];
        }
        let n = class.len();
        let mut into: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (u, refs) in self.out.iter().enumerate() {
            if !lost(u) {
                continue;
            }
            for rf in refs {
                if lost(rf.target) && into[rf.target].last() != Some(&u) {
                    into[rf.target].push(u);
                }
            }
        }
        let mut came: Vec<Option<usize>> = vec![None; n];
        let mut seen = vec![false; n];
        seen[k] = true;
        let mut queue = VecDeque::from([k]);
        while let Some(v) = queue.pop_front() {
            for &u in &into[v] {
                if seen[u] {
                    continue;
                }
                seen[u] = true;
                came[u] = Some(v);
                if class[u] == Class::DefinitelyLost {
                    let mut out = vec![u];
                    while let Some(next) = came[*out.last().unwrap()] {
                        out.push(next);
                    }
                    return out;
                }
                queue.push_back(u);
            }
        }
        vec![k]
    }

    /// (offset in block a, offset into block b) of the word of `a` that points into `b`: its
    /// first start pointer, else its first pointer.
    pub fn link(&self, heap: &Heap, a: usize, b: usize) -> Option<(u64, u64)> {
        let base = heap.blocks[a].addr;
        let refs = self.out[a].iter().filter(|r| r.target == b);
        let best = refs.clone().find(|r| r.start).or_else(|| refs.clone().next())?;
        Some((best.word? - base, best.value - heap.blocks[b].addr))
    }
}
