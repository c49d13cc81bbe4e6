//! The walk over every list: each list read between two loads of its sequence counter, again
//! while it moved under the read, and the blocks' stacks interned.

use super::found::{Denied, ListRead, Problem, Walk, WalkOptions};
use super::headers::{walk_headers, ListScratch};
use super::layout::{word_at, Counters, Layout};
use super::sizes::check_sizes;
use crate::source::memory::{AddrHash, Memory, ReadError};
use std::collections::HashMap;

/// Walks every list. Only a refusal from the system stops it; bad headers end one attempt.
pub fn walk(mem: &dyn Memory, layout: &Layout, opts: WalkOptions) -> Result<Walk, Denied> {
    let mut out = Walk::default();
    let mut interned: HashMap<Box<[u64]>, u32, AddrHash> = HashMap::default();
    let (mut scratch, mut best) = (ListScratch::default(), ListScratch::default());
    // A list's own count says how long it is, but a count is a word of the image like any
    // other: no list is longer than the image has room for headers.
    let room = mem.bound() / layout.header_size.max(1) + 1;
    for i in 0..layout.nlists {
        let mut read = ListRead {
            addr: layout.list_addr(i),
            ..ListRead::default()
        };
        best.clear();
        let attempts = if opts.strict { 1 } else { opts.attempts.max(1) };
        for attempt in 1..=attempts {
            read.attempts = attempt;
            scratch.clear();
            let r = read_list(mem, layout, i, &mut scratch, opts.strict, room)?;
            // Of attempts that were not whole, the one that read the most blocks is kept: an
            // attempt is cut short where the list changed under it.
            if r.whole || attempt == 1 || scratch.blocks.len() > best.blocks.len() {
                std::mem::swap(&mut scratch, &mut best);
                read.counters = r.counters;
                read.problem = r.problem;
                read.consistent = r.whole;
                read.mid_change = r.mid_change;
                read.seq = r.seq;
                read.blocks = best.blocks.len() as u64;
            }
            if r.whole {
                break;
            }
        }
        let scratch = &mut best;
        if !read.consistent {
            scratch.drop_repeats();
        }
        // The walk's own stack numbers become the image's, numbered in the order the kept
        // blocks first name them.
        let mut ids: Vec<Option<u32>> = vec![None; scratch.stacks.len()];
        for b in &mut scratch.blocks {
            let id = &mut ids[b.stack as usize];
            b.stack = *id.get_or_insert_with(|| {
                let frames = &scratch.stacks[b.stack as usize];
                *interned.entry(frames.clone()).or_insert_with(|| {
                    out.stacks.push(frames.clone());
                    out.stacks.len() as u32 - 1
                })
            });
        }
        if out.blocks.is_empty() {
            // Moved, not copied: on a heap of a million blocks the first list may be all of
            // them, and a copy would be as much memory again, fresh, to fault in and zero.
            std::mem::swap(&mut out.blocks, &mut scratch.blocks);
        } else {
            out.blocks.extend_from_slice(&scratch.blocks);
        }
        out.counters.add(&read.counters);
        out.lists.push(read);
    }
    check_sizes(mem, layout, &mut out, opts.strict)?;
    Ok(out)
}

struct ListOutcome {
    counters: Counters,
    whole: bool,
    problem: Option<Problem>,
    mid_change: bool,
    seq: Option<u64>,
}

/// How long a sequence counter may stay odd before an attempt goes ahead anyway: a writer holds
/// it odd only for a few stores under the list's lock, so a handful of re-reads sees it even
/// unless the writer was preempted.
const ODD_SPINS: u32 = 64;

/// One attempt at list `i`.
fn read_list(
    mem: &dyn Memory,
    l: &Layout,
    i: u64,
    s: &mut ListScratch,
    strict: bool,
    room: u64,
) -> Result<ListOutcome, Denied> {
    let fatal = |e: ReadError| match e {
        ReadError::Denied(e) => Some(Denied(e)),
        ReadError::Unmapped => None,
    };
    let base = l.list_addr(i);
    // The counter is read on its own, before anything of the list and again after all of it:
    // the seqlock protocol. Words copied in one read are not ordered among themselves, so the
    // counter must never share a read with what it guards.
    let seq_addr = l.list_off_changes.map(|o| base + o);
    let read_seq = || -> Result<Option<u64>, ReadError> { seq_addr.map(|a| mem.u64_fresh(a)).transpose() };
    let unreadable = |e: ReadError| match fatal(e) {
        Some(d) => Err(d),
        None => Ok(ListOutcome {
            counters: Counters::default(),
            whole: false,
            problem: Some(Problem {
                list: Some(i),
                addr: Some(base),
                text: format!("the list at {base:#x} cannot be read"),
                header: None,
            }),
            mid_change: false,
            seq: None,
        }),
    };
    let mut before = read_seq();
    let mut spins = 0;
    while !strict && matches!(before, Ok(Some(v)) if v & 1 == 1) && spins < ODD_SPINS {
        spins += 1;
        std::thread::yield_now();
        before = read_seq();
    }
    let before = match before {
        Ok(v) => v,
        Err(e) => return unreadable(e),
    };
    // Nothing read before the counter may be used after it.
    mem.forget();
    let mut raw = vec![0u8; l.list_stride as usize];
    if let Err(e) = mem.read(base, &mut raw) {
        return unreadable(e);
    }
    let walked = walk_headers(
        mem,
        l,
        i,
        base + l.list_off_head,
        word_at(&raw, l.list_off_head),
        word_at(&raw, l.list_off_live_blocks),
        s,
        strict,
        room,
    )
    .map_err(Denied)?;
    let after = match read_seq() {
        Ok(v) => v,
        Err(e) => match fatal(e) {
            Some(d) => return Err(d),
            None => None,
        },
    };
    // Memory that cannot change is whole whatever its counter says (a core taken while a
    // thread was half-way through a link shows an odd one).
    let steady = strict
        || match (before, after) {
            (Some(b), Some(a)) => b == a && b & 1 == 0,
            (None, None) => true,
            _ => false,
        };
    // The handed blocks this walk passed over are the ones to count as freed: the hand-over
    // counters may be a block ahead or behind of the list in memory caught mid-hand-over (a
    // core of a process whose threads were running).
    let counters = Counters::of_walked_list(l, &raw, walked.handed);
    Ok(ListOutcome {
        counters,
        whole: steady && walked.problem.is_none() && !walked.moved,
        // What ended a walk of a list that changed meanwhile is the change (a block freed, a
        // link rewritten under the walk), not a list the program broke: that list moved.
        problem: walked.problem.filter(|_| steady),
        mid_change: before.is_some_and(|b| b & 1 == 1),
        seq: before.filter(|_| steady && before == after),
    })
}
