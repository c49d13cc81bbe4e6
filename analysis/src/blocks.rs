//! The live blocks by address, and the search of an address among them: the inner loop of every
//! leak scan (`reach`) and of the words read ahead for it (`prescan`).

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
        if !self.spans(addr) {
            return None;
        }
        self.find_spanned(addr)
    }

    /// Whether `addr` lies between the lowest block's start and the highest block's end. Most
    /// words a scan reads are not addresses at all and fail this test, so it is kept apart
    /// from the table lookup and inlined into the scan loops: those words cost no call.
    #[inline(always)]
    pub fn spans(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.lo) < self.hi.wrapping_sub(self.lo)
    }

    /// `find` for an address that `spans` accepted.
    #[inline(never)]
    pub(crate) fn find_spanned(&self, addr: usize) -> Option<usize> {
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

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Whether any block lies (even in part) in `[start, end)`.
    pub fn any_in(&self, start: usize, end: usize) -> bool {
        let i = self.starts.partition_point(|&s| s < end);
        i > 0 && self.ends[i - 1] > start
    }

    /// The address ranges of the tables of block addresses this holds, which a scan of the
    /// process that holds them must not take for references to the blocks.
    pub fn buffers(&self) -> [(usize, usize); 2] {
        let range = |v: &Vec<usize>| (v.as_ptr() as usize, v.as_ptr() as usize + 8 * v.capacity());
        [range(&self.starts), range(&self.ends)]
    }

    /// Calls `emit` with the stretches of `[start, end)` that no block covers.
    pub fn gaps(&self, start: usize, end: usize, emit: &mut dyn FnMut(usize, usize)) {
        let mut i = self.starts.partition_point(|&s| s < start);
        let mut at = if i > 0 { self.ends[i - 1].max(start) } else { start };
        while i < self.starts.len() && self.starts[i] < end {
            if self.starts[i] > at {
                emit(at, self.starts[i]);
            }
            at = at.max(self.ends[i]);
            i += 1;
        }
        if at < end {
            emit(at, end);
        }
    }

    pub fn range(&self, i: usize) -> (usize, usize) {
        (self.starts[i], self.ends[i])
    }

    /// The block that starts exactly at `addr`, if any.
    pub fn starting_at(&self, addr: usize) -> Option<usize> {
        self.find(addr).filter(|&i| self.starts[i] == addr)
    }
}

/// Calls `f` with the words of `ws` that `blocks.spans`, in order. Nearly every word a scan
/// reads fails that test, so words are tested eight at a time without a branch for each, and
/// only a group with a word in range is looked at word by word.
#[inline(always)]
pub(crate) fn each_spanned(blocks: &Blocks, ws: &[usize], mut f: impl FnMut(usize)) {
    let mut groups = ws.chunks_exact(8);
    for g in &mut groups {
        if g.iter().fold(false, |any, &w| any | blocks.spans(w)) {
            for &w in g.iter().filter(|&&w| blocks.spans(w)) {
                f(w);
            }
        }
    }
    for &w in groups.remainder().iter().filter(|&&w| blocks.spans(w)) {
        f(w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
