//! Live blocks grouped by allocation stack: what `dmem top` ranks and a heap profile's samples
//! are made of.

use crate::heapwalk::Walk;

/// The live blocks of one stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackGroup {
    /// Index into `Walk::stacks`.
    pub stack: u32,
    pub bytes: u64,
    pub blocks: u64,
    /// The threads that allocated them, ascending, each once.
    pub tids: Vec<u32>,
}

/// Every stack with live blocks, the most bytes first (then the most blocks, then the stack's
/// index, so equal groups keep a stable order).
pub fn group(walk: &Walk) -> Vec<StackGroup> {
    let mut groups: Vec<StackGroup> = (0..walk.stacks.len() as u32)
        .map(|stack| StackGroup {
            stack,
            bytes: 0,
            blocks: 0,
            tids: Vec::new(),
        })
        .collect();
    for b in &walk.blocks {
        let g = &mut groups[b.stack as usize];
        g.bytes += b.size;
        g.blocks += 1;
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
    groups.sort_by(|a, b| (b.bytes, b.blocks, a.stack).cmp(&(a.bytes, a.blocks, b.stack)));
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heapwalk::Block;

    #[test]
    fn sums_per_stack_biggest_first() {
        let block = |size, tid, stack| Block {
            addr: 0,
            size,
            tid,
            stack,
        };
        let walk = Walk {
            blocks: vec![
                block(10, 1, 0),
                block(500, 2, 1),
                block(20, 3, 0),
                block(30, 1, 0),
            ],
            stacks: vec![vec![1u64].into(), vec![2u64].into(), vec![3u64].into()],
            ..Walk::default()
        };
        let g = group(&walk);
        assert_eq!(g.len(), 2, "a stack with no live block is left out");
        assert_eq!((g[0].stack, g[0].bytes, g[0].blocks), (1, 500, 1));
        assert_eq!(
            (g[1].stack, g[1].bytes, g[1].blocks, &g[1].tids[..]),
            (0, 60, 3, &[1, 3][..])
        );
    }
}
