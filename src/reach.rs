//! Conservative reachability over the live blocks: which are in use, which leaked.
//!
//! Any aligned word in a root range or in a reached block that points anywhere inside a live
//! block (interior pointers count) makes that block reached. Blocks never reached are leaks,
//! split as valgrind and LeakSanitizer do: *direct* when no other leaked block points to them,
//! *indirect* when one does. In a leaked cycle with no way in, the first block in address order
//! stands as the direct one, so every leaked structure shows at least one direct block.
//!
//! The gdb side (`gdb/dmem_core.py`) implements the same rules over a core file; the two must
//! agree on the same process.

/// The class of one block.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Class {
    Reachable,
    Direct,
    Indirect,
}

/// Live blocks sorted by start address, as `[start, end)` user ranges.
pub struct Blocks {
    starts: Vec<usize>,
    ends: Vec<usize>,
}

impl Blocks {
    /// `ranges` must be sorted by start and not overlap. A zero-sized block still owns its
    /// start address, so a pointer to it is seen.
    pub fn new(ranges: &[(usize, usize)]) -> Blocks {
        Blocks {
            starts: ranges.iter().map(|r| r.0).collect(),
            ends: ranges.iter().map(|r| r.1.max(r.0 + 1)).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// The block containing `addr`, if any.
    pub fn find(&self, addr: usize) -> Option<usize> {
        let i = self.starts.partition_point(|&s| s <= addr);
        (i > 0 && addr < self.ends[i - 1]).then(|| i - 1)
    }

    pub fn range(&self, i: usize) -> (usize, usize) {
        (self.starts[i], self.ends[i])
    }
}

/// Classifies every block. `scan(start, end, emit)` must call `emit` with each aligned word
/// stored in `[start, end)`; it is how memory is read, so the same rules work in-process and on
/// a core file.
pub fn classify<S>(blocks: &Blocks, roots: &[(usize, usize)], mut scan: S) -> Vec<Class>
where
    S: FnMut(usize, usize, &mut dyn FnMut(usize)),
{
    const UNSEEN: u8 = 0;
    const REACHED: u8 = 1;
    const DIRECT: u8 = 2;
    const INDIRECT: u8 = 3;
    let mut state = vec![UNSEEN; blocks.len()];
    let mut work = Vec::new();

    // Mark from the roots.
    for &(s, e) in roots {
        scan(s, e, &mut |w| {
            if let Some(i) = blocks.find(w) {
                if state[i] == UNSEEN {
                    state[i] = REACHED;
                    work.push(i);
                }
            }
        });
    }
    while let Some(i) = work.pop() {
        let (s, e) = blocks.range(i);
        scan(s, e, &mut |w| {
            if let Some(j) = blocks.find(w) {
                if state[j] == UNSEEN {
                    state[j] = REACHED;
                    work.push(j);
                }
            }
        });
    }

    // Every unreached block not yet claimed by another leaked block leads a flood that demotes
    // whatever it reaches to indirect.
    for lead in 0..blocks.len() {
        if state[lead] != UNSEEN {
            continue;
        }
        state[lead] = DIRECT;
        work.push(lead);
        while let Some(i) = work.pop() {
            let (s, e) = blocks.range(i);
            scan(s, e, &mut |w| {
                if let Some(j) = blocks.find(w) {
                    if j == lead {
                        return;
                    }
                    match state[j] {
                        UNSEEN => {
                            state[j] = INDIRECT;
                            work.push(j);
                        }
                        // An earlier lead turns out to hang off this structure; its own
                        // flood already covered what it points to.
                        DIRECT => state[j] = INDIRECT,
                        _ => {}
                    }
                }
            });
        }
    }

    state
        .into_iter()
        .map(|s| match s {
            REACHED => Class::Reachable,
            DIRECT => Class::Direct,
            _ => Class::Indirect,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A toy address space: each block or root is a list of words at consecutive addresses.
    struct Mem(HashMap<usize, usize>);

    impl Mem {
        fn scan(&self, s: usize, e: usize, emit: &mut dyn FnMut(usize)) {
            for a in (s..e).step_by(8) {
                if let Some(&w) = self.0.get(&a) {
                    emit(w);
                }
            }
        }
    }

    /// Builds `n` 16-byte blocks at 0x1000 + 0x100*i; `links` are (from, to, offset-into-to).
    fn world(n: usize, links: &[(usize, usize, usize)], root_to: &[usize]) -> Vec<Class> {
        let addr = |i: usize| 0x1000 + 0x100 * i;
        let ranges: Vec<_> = (0..n).map(|i| (addr(i), addr(i) + 16)).collect();
        let mut mem = HashMap::new();
        for &(from, to, off) in links {
            let slot = if mem.contains_key(&addr(from)) {
                addr(from) + 8
            } else {
                addr(from)
            };
            mem.insert(slot, addr(to) + off);
        }
        for (k, &to) in root_to.iter().enumerate() {
            mem.insert(0x100 + 8 * k, addr(to));
        }
        let mem = Mem(mem);
        let blocks = Blocks::new(&ranges);
        classify(&blocks, &[(0x100, 0x100 + 8 * root_to.len())], |s, e, f| {
            mem.scan(s, e, f)
        })
    }

    fn counts(c: &[Class]) -> (usize, usize, usize) {
        let n = |k| c.iter().filter(|&&x| x == k).count();
        (n(Class::Reachable), n(Class::Direct), n(Class::Indirect))
    }

    #[test]
    fn held_list_orphan_list_and_singles() {
        // 0..10 a list held by a root; 10..20 an orphaned list; 20..25 orphans.
        let mut links = vec![];
        for i in 0..9 {
            links.push((i, i + 1, 0));
        }
        for i in 10..19 {
            links.push((i, i + 1, 0));
        }
        let c = world(25, &links, &[0]);
        assert_eq!(counts(&c), (10, 6, 9));
        assert_eq!(c[10], Class::Direct);
    }

    #[test]
    fn interior_pointers_count() {
        let c = world(2, &[(0, 1, 12)], &[0]);
        assert_eq!(counts(&c), (2, 0, 0));
    }

    #[test]
    fn list_built_backwards_still_has_one_direct_head() {
        // Head is the highest address: the flood from block 0 runs first and is later demoted.
        let links: Vec<_> = (1..6).map(|i| (i, i - 1, 0)).collect();
        let c = world(6, &links, &[]);
        assert_eq!(counts(&c), (0, 1, 5));
        assert_eq!(c[5], Class::Direct);
    }

    #[test]
    fn orphaned_cycle_keeps_one_direct() {
        let c = world(3, &[(0, 1, 0), (1, 2, 0), (2, 0, 0)], &[]);
        assert_eq!(counts(&c), (0, 1, 2));
    }

    #[test]
    fn zero_sized_block_is_found_at_its_start() {
        let blocks = Blocks::new(&[(0x10, 0x10), (0x20, 0x30)]);
        assert_eq!(blocks.find(0x10), Some(0));
        assert_eq!(blocks.find(0x11), None);
        assert_eq!(blocks.find(0x2f), Some(1));
        assert_eq!(blocks.find(0x30), None);
    }
}
