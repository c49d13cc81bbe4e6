//! The sizes a walk found, checked: blocks whose size runs past the next header or out of
//! mapped memory are left out as problems, and each list read whole must add up to its counters.

use super::found::{Denied, Problem, Walk};
use super::layout::Layout;
use crate::analysis::fit::{self, Misfit};
use crate::source::memory::Memory;
use std::collections::HashSet;

/// Leaves out of `w.blocks` (and sorts by address) the blocks whose size cannot be believed
/// (see `analysis::fit`), each a problem naming its header; then, for every list read whole,
/// checks that its blocks add up to its counters, which a size overwritten to a plausible
/// number breaks. A running process's block that does not fit is read again first: one freed
/// and its memory reused under the walk is dropped as moved, not taken for corruption.
pub(super) fn check_sizes(mem: &dyn Memory, l: &Layout, w: &mut Walk, strict: bool) -> Result<(), Denied> {
    let misfit_lists = drop_misfits(mem, l, w, strict);
    // A list read whole must add up to its own counters, which the library keeps in step with
    // every link and unlink. (Without sequence counters a running process's list may have
    // moved between the two reads.)
    if strict || l.list_off_changes.is_some() {
        check_counters(w, &misfit_lists);
    }
    Ok(())
}

/// Leaves out of `w.blocks`, sorted by address, the blocks whose size cannot be believed, each
/// a problem naming its header (or, in a running process, dropped as moved); returns the lists
/// that held such a block.
fn drop_misfits(mem: &dyn Memory, l: &Layout, w: &mut Walk, strict: bool) -> HashSet<u16> {
    let hs = l.header_size;
    // Each list comes newest block first, and an allocator hands out addresses mostly in
    // order, so the blocks are a few long runs: a merge sort finds them and sorts a million
    // blocks in a few passes, where a quicksort partitions them all over again.
    w.blocks.sort_by_key(|b| b.addr);
    let mut regions = mem.regions();
    regions.sort_unstable_by_key(|m| m.start);
    // Any mapping, readable or not: the walk read every header, and a block may hold a page
    // the program made unreadable (which the scan skips).
    let mut region = |a: usize| crate::analysis::maps::find(&regions, a).map(|m| (m.start, m.end));
    let mut misfits = Vec::new();
    let blocks = &w.blocks;
    fit::check_sizes(
        blocks.len(),
        hs as usize,
        &|i| (blocks[i].addr as usize, blocks[i].size as usize),
        (!regions.is_empty()).then_some(&mut region as &mut dyn FnMut(usize) -> Option<(usize, usize)>),
        &mut |i, why| misfits.push((i, why)),
    );
    let mut dropped = vec![false; if misfits.is_empty() { 0 } else { blocks.len() }];
    let mut misfit_lists = HashSet::new();
    for (i, why) in misfits {
        let b = w.blocks[i];
        if !strict {
            // The block, and the one whose header it runs into, were read from lists walked one
            // after another: only while neither list has changed since its walk are both still
            // there as read. A list that changed may have freed one and reused its memory, so
            // its block is dropped as moved, not taken for corruption.
            let next = match why {
                Misfit::NextHeader(_) => w.blocks[i + 1..]
                    .iter()
                    .position(|n| n.addr != b.addr)
                    .map(|k| i + 1 + k),
                _ => None,
            };
            let mut moved = false;
            for k in std::iter::once(i).chain(next) {
                let list = w.blocks[k].list as usize;
                let now = l
                    .list_off_changes
                    .and_then(|o| mem.u64_fresh(w.lists[list].addr + o).ok());
                if w.lists[list].seq.is_none() || now != w.lists[list].seq {
                    dropped[k] = true;
                    w.lists[list].consistent = false;
                    moved = true;
                }
            }
            if moved {
                continue;
            }
        }
        dropped[i] = true;
        misfit_lists.insert(b.list);
        let h = b.addr - hs;
        let past = match why {
            Misfit::NextHeader(n) => format!("runs past the next block's header at {n:#x}"),
            Misfit::Memory(0) => "lies in no mapped memory".to_owned(),
            Misfit::Memory(end) => format!("runs past the mapped memory around it, which ends at {end:#x}"),
            Misfit::Overflow => "runs past the end of the address space".to_owned(),
        };
        w.size_problems.push(Problem {
            list: Some(b.list as u64),
            addr: Some(h),
            text: format!(
                "header {h:#x} was overwritten: its size, {} bytes, {past}; the block is left out",
                b.size
            ),
            header: Some(h),
        });
    }
    if !dropped.is_empty() {
        let mut k = dropped.iter();
        w.blocks.retain(|_| !*k.next().unwrap_or(&false));
    }
    misfit_lists
}

/// For every list read whole whose blocks were all believed, a problem when its blocks do not
/// add up to its counters: a size or a counter overwritten to a plausible number.
fn check_counters(w: &mut Walk, misfit_lists: &HashSet<u16>) {
    let mut walked = vec![(0u64, 0u64); w.lists.len()];
    for b in &w.blocks {
        let e = &mut walked[b.list as usize];
        e.0 += 1;
        e.1 = e.1.saturating_add(b.size);
    }
    for (i, li) in w.lists.iter().enumerate() {
        let (n, bytes) = walked[i];
        let c = &li.counters;
        if !li.consistent
            || li.problem.is_some()
            || li.mid_change
            || misfit_lists.contains(&(i as u16))
            || (n, bytes) == (c.live_blocks, c.live_bytes)
        {
            continue;
        }
        w.size_problems.push(Problem {
            list: Some(i as u64),
            addr: Some(li.addr),
            text: format!(
                "its blocks add up to {bytes} bytes in {n}, but its counters say {} bytes in {}: a \
                 size or a counter was overwritten, so totals may be off by {} bytes",
                c.live_bytes,
                c.live_blocks,
                bytes.abs_diff(c.live_bytes)
            ),
            header: None,
        });
    }
}
