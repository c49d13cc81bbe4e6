//! Conservative reachability over the live blocks, in valgrind's four leak classes.
//!
//! This is memcheck's algorithm (mc_leakcheck.c), the one definition this exit report and the
//! gdb side (gdb/dmemlib/reach.py) share:
//!
//! 1. Mark from the roots. A *start pointer* (a word equal to a block's first byte) found in a
//!    root or in a still-reachable block makes the block **still reachable**. Any other pointer
//!    into a block, an *interior* one or any pointer found in a possibly-lost block, makes an
//!    unmarked block **possibly lost**; a possibly-lost block later reached by a start pointer
//!    from a root or a reachable block is upgraded and scanned again. A worklist runs this to a
//!    fixed point.
//! 2. What stays unmarked is lost. In address order, each unmarked block not yet claimed heads a
//!    clique: it is **definitely lost**, and every unclaimed block it reaches (through any
//!    pointer, transitively) is **indirectly lost**. A clique that reaches an earlier clique's
//!    head takes it over (it becomes indirect), so a chain built in any order has exactly one
//!    definitely-lost head, and a cycle with no way in has one definite block and the rest
//!    indirect.
//!
//! The gdb side implements the same rules over a core file; the two must agree on the same
//! process, and both agree with valgrind on the same program.

/// The class of one block, in valgrind's words.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub enum Class {
    DefinitelyLost,
    IndirectlyLost,
    PossiblyLost,
    StillReachable,
}

impl Class {
    /// Every class, in the order reports list them.
    pub const ALL: [Class; 4] = [
        Class::DefinitelyLost,
        Class::IndirectlyLost,
        Class::PossiblyLost,
        Class::StillReachable,
    ];

    /// The name valgrind prints.
    pub fn name(self) -> &'static str {
        match self {
            Class::DefinitelyLost => "definitely lost",
            Class::IndirectlyLost => "indirectly lost",
            Class::PossiblyLost => "possibly lost",
            Class::StillReachable => "still reachable",
        }
    }

    /// The bit for this class in a `leak-show` set.
    pub const fn bit(self) -> u8 {
        1 << self as u8
    }

    /// Whether the class counts as a leak (for `leak-exitcode`): all but still reachable.
    pub fn is_leak(self) -> bool {
        self != Class::StillReachable
    }
}

/// Live blocks sorted by start address, as `[start, end)` user ranges.
///
/// Every word of the roots and of the marked blocks is looked up here, so the lookup is the
/// inner loop of a leak scan: a word outside `[lo, hi)` is dismissed with one comparison, and
/// `index` builds tables of buckets (about one per block) that tell, for any address, the first
/// block that may hold it; a short linear step then finds it. Blocks sit in a few dense regions
/// far apart (the brk heap, arenas' heaps, blocks mapped on their own), so each region gets its
/// own table: one table over the whole span would put the dense heap into a handful of buckets
/// and make the linear step as long as the heap. Without the tables, `find` is a binary search.
pub struct Blocks {
    starts: Vec<usize>,
    ends: Vec<usize>,
    lo: usize,
    hi: usize,
    /// Dense runs of blocks, by address.
    regions: Vec<Region>,
    /// The regions' bucket tables end to end: entry k of a region is the first block whose end
    /// lies above the region's bucket k's first address.
    first: Vec<u32>,
}

struct Region {
    lo: usize,
    hi: usize,
    shift: u32,
    /// Where this region's buckets start in `first`.
    table: usize,
}

/// A gap between blocks wider than this starts a new region.
const REGION_GAP: usize = 1 << 20;

impl Blocks {
    /// Room for `n` blocks, filled with `push`: the exit report sizes it before it stops the other
    /// threads, since nothing may allocate while they are stopped.
    pub fn with_capacity(n: usize) -> Blocks {
        Blocks {
            starts: Vec::with_capacity(n),
            ends: Vec::with_capacity(n),
            lo: usize::MAX,
            hi: 0,
            regions: Vec::new(),
            first: Vec::new(),
        }
    }

    /// Appends a block; blocks must come in increasing address order and not overlap. A
    /// zero-sized block still owns its start address, so a pointer to it is seen.
    pub fn push(&mut self, start: usize, end: usize) {
        let end = end.max(start + 1);
        self.starts.push(start);
        self.ends.push(end);
        self.lo = self.lo.min(start);
        self.hi = self.hi.max(end);
    }

    /// Builds the bucket tables, after the last `push`. It allocates, so the exit report calls it
    /// before it stops the other threads.
    pub fn index(&mut self) {
        let n = self.starts.len();
        if n == 0 || n > u32::MAX as usize {
            return;
        }
        self.regions.clear();
        self.first.clear();
        let mut from = 0;
        while from < n {
            let mut to = from + 1;
            while to < n && self.starts[to] - self.ends[to - 1] <= REGION_GAP {
                to += 1;
            }
            self.add_region(from, to);
            from = to;
        }
    }

    /// The bucket table of blocks `from..to`: power-of-two buckets, about one per block.
    fn add_region(&mut self, from: usize, to: usize) {
        let lo = self.starts[from];
        let hi = self.ends[to - 1];
        let count = to - from;
        let mut shift = 0;
        while ((hi - lo) >> shift) > count {
            shift += 1;
        }
        let buckets = ((hi - lo) >> shift) + 1;
        let table = self.first.len();
        self.first.reserve(buckets);
        let mut i = from;
        for k in 0..buckets {
            let at = lo + (k << shift);
            while i < to && self.ends[i] <= at {
                i += 1;
            }
            self.first.push(i as u32);
        }
        self.regions.push(Region { lo, hi, shift, table });
    }

    /// The block containing `addr`, if any.
    #[inline]
    pub fn find(&self, addr: usize) -> Option<usize> {
        if addr.wrapping_sub(self.lo) >= self.hi.wrapping_sub(self.lo) {
            return None;
        }
        if self.regions.is_empty() {
            let i = self.starts.partition_point(|&s| s <= addr);
            return (i > 0 && addr < self.ends[i - 1]).then(|| i - 1);
        }
        let region = match self.regions.len() {
            1 => &self.regions[0],
            _ => {
                let r = self.regions.partition_point(|g| g.lo <= addr);
                &self.regions[r.checked_sub(1)?]
            }
        };
        if addr >= region.hi {
            return None;
        }
        let mut i = self.first[region.table + ((addr - region.lo) >> region.shift)] as usize;
        // Blocks do not overlap, so the first one ending above `addr` is the only candidate;
        // the region's last block ends at its `hi`, so the step stays inside the region.
        while self.ends[i] <= addr {
            i += 1;
        }
        (self.starts[i] <= addr).then_some(i)
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Block `i`'s first byte.
    pub fn start(&self, i: usize) -> usize {
        self.starts[i]
    }

    pub fn range(&self, i: usize) -> (usize, usize) {
        (self.starts[i], self.ends[i])
    }
}

const UNSEEN: u8 = 0;
const REACHABLE: u8 = 1;
const POSSIBLE: u8 = 2;
const DEFINITE: u8 = 3;
const INDIRECT: u8 = 4;

/// The working state of one classification, allocated up front: the exit report makes it before
/// it stops the other threads, and `classify` then allocates nothing.
pub struct Marker {
    state: Vec<u8>,
    work: Vec<usize>,
}

impl Marker {
    /// Room for `n` blocks. A block enters the worklist at most twice in the mark (once possibly
    /// lost, once reachable) and once in the clique pass, so 2n entries never grow it.
    pub fn new(n: usize) -> Marker {
        Marker {
            state: Vec::with_capacity(n),
            work: Vec::with_capacity(2 * n + 1),
        }
    }

    /// Classifies every block; `classes()` then reads the result. `scan(start, end, emit)` must
    /// call `emit` with the aligned words stored in `[start, end)`, in runs as long as it can
    /// read at once (one call per run rather than per word keeps the scan at memory speed): it
    /// is how memory is read, so the same rules serve in-process and over a core. `values` are roots that are not in
    /// memory (a core's registers).
    pub fn classify<S>(&mut self, blocks: &Blocks, roots: &[(usize, usize)], values: &[usize], mut scan: S)
    where
        S: FnMut(usize, usize, &mut dyn FnMut(&[usize])),
    {
        let state = &mut self.state;
        let work = &mut self.work;
        state.clear();
        state.resize(blocks.len(), UNSEEN);
        work.clear();

        // A pointer found in memory whose owner is a root or a reachable block (`sure`), or in a
        // possibly-lost block.
        let mark = |w: usize, sure: bool, state: &mut Vec<u8>, work: &mut Vec<usize>| {
            let Some(j) = blocks.find(w) else { return };
            if sure && w == blocks.start(j) {
                if state[j] != REACHABLE {
                    state[j] = REACHABLE;
                    work.push(j);
                }
            } else if state[j] == UNSEEN {
                state[j] = POSSIBLE;
                work.push(j);
            }
        };
        for &(s, e) in roots {
            scan(s, e, &mut |ws| {
                ws.iter().for_each(|&w| mark(w, true, state, work))
            });
        }
        for &w in values {
            mark(w, true, state, work);
        }
        while let Some(i) = work.pop() {
            let (s, e) = blocks.range(i);
            // A block queued as possibly lost and upgraded since is queued again; scanning it
            // with its current class covers both entries.
            let sure = state[i] == REACHABLE;
            scan(s, e, &mut |ws| {
                ws.iter().for_each(|&w| mark(w, sure, state, work))
            });
        }

        // Cliques over what is left, in address order.
        for head in 0..blocks.len() {
            if state[head] != UNSEEN {
                continue;
            }
            state[head] = DEFINITE;
            work.push(head);
            while let Some(i) = work.pop() {
                let (s, e) = blocks.range(i);
                scan(s, e, &mut |ws| {
                    for &w in ws {
                        let Some(j) = blocks.find(w) else { continue };
                        match state[j] {
                            UNSEEN => {
                                state[j] = INDIRECT;
                                work.push(j);
                            }
                            // An earlier clique's head hangs off this one. Its own clique
                            // already claimed what it reaches, so it need not be scanned again.
                            DEFINITE if j != head => state[j] = INDIRECT,
                            _ => {}
                        }
                    }
                });
            }
        }
    }

    /// The class of block `i` after `classify`.
    pub fn class(&self, i: usize) -> Class {
        match self.state[i] {
            REACHABLE => Class::StillReachable,
            POSSIBLE => Class::PossiblyLost,
            DEFINITE => Class::DefinitelyLost,
            _ => Class::IndirectlyLost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Builds `n` 16-byte blocks at 0x1000 + 0x100*i; `links` are (from, to, offset-into-to),
    /// stored in consecutive words of `from`; `root_to` are (block, offset) pointers in a root.
    fn world(n: usize, links: &[(usize, usize, usize)], root_to: &[(usize, usize)]) -> Vec<Class> {
        let addr = |i: usize| 0x1000 + 0x100 * i;
        let mut mem = HashMap::new();
        let mut used = vec![0; n];
        for &(from, to, off) in links {
            mem.insert(addr(from) + 8 * used[from], addr(to) + off);
            used[from] += 1;
        }
        for (k, &(to, off)) in root_to.iter().enumerate() {
            mem.insert(0x100 + 8 * k, addr(to) + off);
        }
        let mut blocks = Blocks::with_capacity(n);
        for (i, &words) in used.iter().enumerate() {
            blocks.push(addr(i), addr(i) + 8 * words.max(2));
        }
        let mut m = Marker::new(n);
        let roots = [(0x100, 0x100 + 8 * root_to.len())];
        m.classify(&blocks, &roots, &[], |s, e, f| {
            for a in (s..e).step_by(8) {
                if let Some(&w) = mem.get(&a) {
                    f(&[w]);
                }
            }
        });
        (0..n).map(|i| m.class(i)).collect()
    }

    /// Blocks per class: definitely, indirectly, possibly lost, still reachable.
    fn counts(c: &[Class]) -> [usize; 4] {
        Class::ALL.map(|k| c.iter().filter(|&&x| x == k).count())
    }

    #[test]
    fn held_list_orphan_list_and_singles() {
        // 0..10 a list held by a root; 10..20 an orphaned list; 20..25 orphans.
        let mut links = vec![];
        for i in (0..9).chain(10..19) {
            links.push((i, i + 1, 0));
        }
        let c = world(25, &links, &[(0, 0)]);
        assert_eq!(counts(&c), [6, 9, 0, 10]);
        assert_eq!(c[10], Class::DefinitelyLost);
    }

    #[test]
    fn interior_pointer_makes_possibly_lost_and_so_does_what_it_holds() {
        // Root -> 0 (interior) -> 1 (start) -> 2 (start); root -> 3 (start) -> 4 (interior).
        let c = world(5, &[(0, 1, 0), (1, 2, 0), (3, 4, 8)], &[(0, 8), (3, 0)]);
        use Class::*;
        assert_eq!(
            c,
            [
                PossiblyLost,
                PossiblyLost,
                PossiblyLost,
                StillReachable,
                PossiblyLost
            ]
        );
    }

    #[test]
    fn possibly_lost_is_upgraded_by_a_later_start_pointer() {
        // The interior pointer comes first in the root; the start pointer to 0 is found later,
        // through block 1, and must also upgrade 2, which 0 holds.
        let c = world(3, &[(1, 0, 0), (0, 2, 0)], &[(0, 8), (1, 0)]);
        assert_eq!(c, [Class::StillReachable; 3]);
    }

    #[test]
    fn list_built_backwards_still_has_one_definite_head() {
        // The head is the highest address: block 0's clique runs first and is taken over.
        let links: Vec<_> = (1..6).map(|i| (i, i - 1, 0)).collect();
        let c = world(6, &links, &[]);
        assert_eq!(counts(&c), [1, 5, 0, 0]);
        assert_eq!(c[5], Class::DefinitelyLost);
    }

    #[test]
    fn orphaned_cycle_keeps_one_definite() {
        let c = world(3, &[(0, 1, 0), (1, 2, 0), (2, 0, 0)], &[]);
        assert_eq!(counts(&c), [1, 2, 0, 0]);
        assert_eq!(c[0], Class::DefinitelyLost);
    }

    #[test]
    fn head_allocated_after_its_cycle_takes_the_cycle_over() {
        // 0 <-> 1 is a cycle; 2 points into it from a higher address.
        let c = world(3, &[(0, 1, 0), (1, 0, 0), (2, 0, 0)], &[]);
        use Class::*;
        assert_eq!(c, [IndirectlyLost, IndirectlyLost, DefinitelyLost]);
    }

    #[test]
    fn claimed_block_stays_with_its_first_clique() {
        // 0 and 2 are heads that both reach 1; 1 stays with 0's clique, and 2 stays definite.
        let c = world(3, &[(0, 1, 0), (2, 1, 0)], &[]);
        use Class::*;
        assert_eq!(c, [DefinitelyLost, IndirectlyLost, DefinitelyLost]);
    }

    #[test]
    fn zero_sized_block_is_found_at_its_start() {
        let mut blocks = Blocks::with_capacity(2);
        blocks.push(0x10, 0x10);
        blocks.push(0x20, 0x30);
        for indexed in [false, true] {
            if indexed {
                blocks.index();
            }
            assert_eq!(blocks.find(0x10), Some(0));
            assert_eq!(blocks.find(0x11), None);
            assert_eq!(blocks.find(0x2f), Some(1));
            assert_eq!(blocks.find(0x30), None);
            assert_eq!(blocks.find(0xf), None);
        }
    }

    /// The bucket table answers as the binary search does, for every address around blocks of
    /// all sizes and gaps.
    #[test]
    fn the_bucket_table_finds_what_the_search_finds() {
        let mut plain = Blocks::with_capacity(0);
        let mut at = 0x1000usize;
        let mut seed = 12345u64;
        for _ in 0..500 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let gap = (seed >> 33) as usize % 64;
            let size = (seed >> 40) as usize % 300;
            plain.push(at + gap, at + gap + size);
            at += gap + size.max(1);
        }
        // Regions far apart (a brk heap and blocks mapped on their own): each gets its table.
        let mut probes: Vec<usize> = (0xff0..at + 16).collect();
        for far in [at + (3 << 20), at + (1 << 40), at + (1 << 40) + (5 << 20)] {
            plain.push(far, far + 4096);
            plain.push(far + 5000, far + 5008);
            probes.extend(far - 16..far + 5024);
        }
        let mut fast = Blocks::with_capacity(0);
        for i in 0..plain.len() {
            let (s, e) = plain.range(i);
            fast.push(s, e);
        }
        fast.index();
        for a in probes {
            assert_eq!(fast.find(a), plain.find(a), "at {a:#x}");
        }
    }
}
