//! The live blocks of one walk, in address order, and what every command does with them:
//! find the block holding an address, pick blocks by size, thread or stack, group them by
//! stack.

use crate::model::frames::Namer;
use crate::model::text::plural;
use crate::source::heapwalk::{self, Block, Counters, ListRead, Problem, Walk};

/// The live blocks of one walk of an image.
pub struct Heap {
    /// Sorted by address.
    pub blocks: Vec<Block>,
    /// Distinct stacks, as the walk interned them (`Block::stack` indexes this).
    pub stacks: Vec<Box<[u64]>>,
    pub lists: Vec<ListRead>,
    pub counters: Counters,
    pub header_size: u64,
    /// Sizes the walk did not believe, and lists that do not add up (see `Walk`).
    pub size_problems: Vec<Problem>,
    /// Where blocks have no stacks (see `model::bare`): what each group of `stacks` stands for.
    pub labels: Vec<String>,
    /// The blocks as the shared analysis sees them, made on first need: the roots and the
    /// classification both look addresses up in it.
    analysis: std::cell::OnceCell<crate::analysis::blocks::Blocks>,
}

/// Where an address falls in a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Within {
    /// In the bytes the program was given.
    Block,
    /// In libdmem's header in front of them.
    Header,
}

impl Heap {
    /// The blocks as the shared analysis sees them (the same order: by address), made once
    /// and shared by its callers: a heap's blocks do not change once it is made.
    pub fn analysis_blocks(&self) -> &crate::analysis::blocks::Blocks {
        self.analysis.get_or_init(|| {
            let mut blocks = crate::analysis::blocks::Blocks::with_capacity(self.blocks.len());
            for b in &self.blocks {
                blocks.push(b.addr as usize, (b.addr + b.size) as usize);
            }
            blocks.index();
            blocks
        })
    }

    pub fn new(mut walk: Walk, header_size: u64) -> Heap {
        walk.blocks.sort_unstable_by_key(|b| b.addr);
        Heap {
            blocks: walk.blocks,
            stacks: walk.stacks,
            lists: walk.lists,
            counters: walk.counters,
            header_size,
            size_problems: walk.size_problems,
            labels: Vec::new(),
            analysis: std::cell::OnceCell::new(),
        }
    }

    /// The block holding `addr` (its header counts too), by index, and where in it.
    pub fn find(&self, addr: u64) -> Option<(usize, Within)> {
        // The first block whose header starts after addr; the one before may hold it.
        let i = self
            .blocks
            .partition_point(|b| b.addr - self.header_size <= addr)
            .checked_sub(1)?;
        let b = &self.blocks[i];
        if addr < b.addr {
            return Some((i, Within::Header));
        }
        // A zero-sized block still owns its first byte.
        (addr < b.addr + b.size.max(1)).then_some((i, Within::Block))
    }

    /// What ended a list's walk early, then the sizes not believed.
    pub fn problems(&self) -> Vec<&Problem> {
        heapwalk::problems(&self.lists, &self.size_problems)
    }

    /// Lists a running process changed throughout the walk.
    pub fn moving(&self) -> usize {
        heapwalk::moving(&self.lists)
    }

    /// (blocks, bytes) of a selection.
    pub fn totals(&self, sel: &[usize]) -> (u64, u64) {
        (sel.len() as u64, sel.iter().map(|&i| self.blocks[i].size).sum())
    }

    /// Every block's index.
    pub fn everything(&self) -> Vec<usize> {
        (0..self.blocks.len()).collect()
    }
}

/// The live block in front of the header at `header` among `blocks` (sorted by address): the
/// nearest below it, when it ends within a page before it. An overflow of that block is what
/// reaches the header first.
pub fn in_front_of(blocks: &[Block], header: u64) -> Option<&Block> {
    let i = blocks.partition_point(|b| b.addr < header).checked_sub(1)?;
    let b = &blocks[i];
    let end = b.addr.saturating_add(b.size);
    (end <= header && header - end < 4096).then_some(b)
}

/// Each problem on a line of its own after `indent`, and under one that names the header a
/// write changed, the block in front of it and where it was allocated: the same words in a
/// core and in a running process, for every command.
pub fn problem_lines(
    problems: &[&Problem],
    blocks: &[Block],
    stacks: &[Box<[u64]>],
    namer: &mut Namer,
    indent: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for p in problems {
        out.push(format!("{indent}{p}"));
        let Some(b) = p.header.and_then(|h| in_front_of(blocks, h)) else {
            continue;
        };
        let header = p.header.unwrap_or(0);
        out.push(format!(
            "{indent}  perhaps written past the end of the {}-byte block {:#x} in front of it ({} \
             before the header), allocated by thread {} at:",
            b.size,
            b.addr,
            plural(header - (b.addr + b.size), "byte"),
            b.tid
        ));
        out.extend(namer.lines(&stacks[b.stack as usize], &format!("{indent}    ")));
    }
    out
}

/// The lines every command that walks the lists prints about its problems (up to five, each
/// with the block in front of the header it names), worded the same for a core and a running
/// process.
pub fn warnings(
    problems: &[&Problem],
    blocks: &[Block],
    stacks: &[Box<[u64]>],
    namer: &mut Namer,
) -> Vec<String> {
    let mut out = Vec::new();
    if problems.is_empty() {
        return out;
    }
    out.push(format!(
        "warning: {} in the lists; the answer is incomplete (see 'dmem verify'):",
        plural(problems.len() as u64, "problem")
    ));
    out.extend(problem_lines(
        &problems[..problems.len().min(5)],
        blocks,
        stacks,
        namer,
        "warning:   ",
    ));
    if problems.len() > 5 {
        out.push(format!("warning:   ... and {} more", problems.len() - 5));
    }
    out
}

/// For a running process only: the lists it changed too fast to be read whole, if any.
pub fn moving_note(moving: usize, lists: usize, name: &str) -> Option<String> {
    (moving > 0).then(|| {
        format!(
            "note: {moving} of {lists} lists changed too fast to read whole: {name} runs on while it is read"
        )
    })
}

/// The live blocks of one stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackGroup {
    /// Index into the walk's stacks.
    pub stack: u32,
    pub bytes: u64,
    pub blocks: u64,
    /// The threads that allocated them, ascending, each once.
    pub tids: Vec<u32>,
    /// The lowest address among them.
    pub example: u64,
}

/// Groups blocks by stack: the most bytes first, then the most blocks, then by the return
/// addresses themselves, so equal groups always come in the same order.
pub fn group<'a>(blocks: impl IntoIterator<Item = &'a Block>, stacks: &[Box<[u64]>]) -> Vec<StackGroup> {
    let mut groups: Vec<StackGroup> = (0..stacks.len() as u32)
        .map(|stack| StackGroup {
            stack,
            bytes: 0,
            blocks: 0,
            tids: Vec::new(),
            example: u64::MAX,
        })
        .collect();
    for b in blocks {
        let g = &mut groups[b.stack as usize];
        g.bytes += b.size;
        g.blocks += 1;
        g.example = g.example.min(b.addr);
        // Blocks of one thread come in runs (a thread links onto its own list), so this keeps
        // the vector short before the final dedup.
        if g.tids.last() != Some(&b.tid) {
            g.tids.push(b.tid);
        }
    }
    groups.retain(|g| g.blocks > 0);
    for g in &mut groups {
        g.tids.sort_unstable();
        g.tids.dedup();
    }
    groups.sort_by(|a, b| {
        (b.bytes, b.blocks)
            .cmp(&(a.bytes, a.blocks))
            .then_with(|| stacks[a.stack as usize].cmp(&stacks[b.stack as usize]))
    });
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(addr: u64, size: u64, tid: u32, stack: u32) -> Block {
        Block {
            addr,
            size,
            tid,
            stack,
            list: 0,
            named_list: 0,
            align_log2: 0,
        }
    }

    #[test]
    fn sums_per_stack_biggest_first() {
        let blocks = [
            block(0x1000, 10, 1, 0),
            block(0x2000, 500, 2, 1),
            block(0x900, 20, 3, 0),
            block(0x3000, 30, 1, 0),
        ];
        let stacks: Vec<Box<[u64]>> = vec![vec![1u64].into(), vec![2u64].into(), vec![3u64].into()];
        let g = group(&blocks, &stacks);
        assert_eq!(g.len(), 2, "a stack with no live block is left out");
        assert_eq!(
            (g[0].stack, g[0].bytes, g[0].blocks, g[0].example),
            (1, 500, 1, 0x2000)
        );
        assert_eq!(
            (g[1].stack, g[1].bytes, g[1].blocks, &g[1].tids[..], g[1].example),
            (0, 60, 3, &[1, 3][..], 0x900)
        );
    }

    #[test]
    fn ties_go_by_the_stacks_themselves() {
        let blocks = [block(0x1000, 8, 1, 0), block(0x2000, 8, 1, 1)];
        let stacks: Vec<Box<[u64]>> = vec![vec![9u64].into(), vec![2u64].into()];
        let g = group(&blocks, &stacks);
        assert_eq!((g[0].stack, g[1].stack), (1, 0));
    }

    #[test]
    fn finds_blocks_headers_and_gaps() {
        let walk = Walk {
            blocks: vec![block(0x2070, 32, 1, 0), block(0x1070, 0, 1, 0)],
            stacks: vec![vec![1u64].into()],
            ..Walk::default()
        };
        let h = Heap::new(walk, 0x70);
        assert_eq!(h.blocks[0].addr, 0x1070, "sorted by address");
        assert_eq!(h.find(0x1000), Some((0, Within::Header)));
        assert_eq!(
            h.find(0x1070),
            Some((0, Within::Block)),
            "a zero-sized block owns its start"
        );
        assert_eq!(h.find(0x1071), None);
        assert_eq!(h.find(0x208f), Some((1, Within::Block)));
        assert_eq!(h.find(0x2090), None);
        assert_eq!(h.find(0xfff), None);
    }
}
