//! The live blocks as the exit report sees them: copied out of the lists while every list is
//! taken (`lists::lock_all`: every lock held and no owner inside a change), with a walk that
//! stops at a list the program broke, sizes believed only where they fit (`analysis::fit`),
//! and every list added up against its own counters.

use super::memory::readable;
use crate::analysis::fit::{self, Misfit};
use crate::analysis::maps::{self, Mapping};
use crate::analysis::words::plural;
use crate::diag;
use crate::header::{self, Header, HEADER_SIZE, MAGIC_HANDED, NFRAMES};
use crate::lists::walk::{walk_linked, Break, Broken};
use crate::lists::{LISTS, NLISTS};
use crate::out::Out;
use crate::procmaps;
use core::fmt::Write;

/// A live block: where it starts, its size, its allocation stack and the list it was on.
pub(super) struct Live {
    pub(super) start: usize,
    pub(super) size: usize,
    pub(super) frames: [usize; NFRAMES],
    pub(super) list: u16,
}

/// A header whose size was not believed: its block is not in the report.
pub(super) struct Overwritten {
    header: usize,
    size: usize,
    list: u16,
    why: Misfit,
    /// The live block in front of it (start, size, stack), which an overflow runs out of.
    front: Option<(usize, usize, [usize; NFRAMES])>,
}

/// What the program broke in the lists, for the report to say.
pub(super) struct Breaks {
    /// The first list whose links broke, and how many did.
    list: Option<Break>,
    overwritten: Vec<Overwritten>,
    /// Lists walked whole whose blocks do not add up to their counters: (list, bytes and
    /// blocks walked, bytes and blocks counted).
    sums: Vec<(usize, u64, u64, u64, u64)>,
}

/// Copies every live block out of the lists, sorted by address, and says what the program
/// broke: a list whose links stopped the copy, headers whose size cannot be true (left out, so
/// the mark never reads past a block), lists that do not add up. The caller has taken every
/// list, so the copy is consistent and stays true until the lists are released.
pub(super) fn snapshot(maps: &[Mapping]) -> (Vec<Live>, Breaks) {
    let n: u64 = LISTS
        .iter()
        // SAFETY: every list is taken (see above), so the counters are stable.
        .map(|l| unsafe { *l.live_blocks.get() })
        .sum();
    // The counters are words the program could have overwritten too: a hint, never a size.
    let mut out = Vec::with_capacity(n.min(1 << 20) as usize);
    let mut linked = [(0u64, 0u64); NLISTS];
    let list = walk_linked(&|s, e| readable(maps, s, e), &mut |i, hr| {
        linked[i].0 += 1;
        linked[i].1 = linked[i].1.wrapping_add(hr.size() as u64);
        if hr.state() != MAGIC_HANDED {
            out.push(Live {
                start: header::to_user(hr as *const Header as *mut Header) as usize,
                size: hr.size(),
                frames: hr.frames,
                list: i as u16,
            })
        }
    });
    out.sort_unstable_by_key(|b| b.start);
    let mut breaks = Breaks {
        list,
        overwritten: Vec::new(),
        sums: Vec::new(),
    };
    let mut bad = Vec::new();
    {
        let live = &out;
        let block = |i: usize| (live[i].start, live[i].size);
        // The mappings read at the report's start; without them (a report from a fatal signal
        // reads none), the one mapping around an address, found without allocating. Whether
        // they can be read does not matter here: the walk read every header, and a block may
        // hold a page the program made unreadable (the mark skips it).
        let mut listed = |a: usize| maps::find(maps, a).map(|m| (m.start, m.end));
        let mut found = procmaps::mapping_containing;
        let region: &mut dyn FnMut(usize) -> Option<(usize, usize)> =
            if maps.is_empty() { &mut found } else { &mut listed };
        fit::check_sizes(live.len(), HEADER_SIZE, &block, Some(region), &mut |i, why| {
            bad.push((i, why))
        });
    }
    let mut misfit_lists = [false; NLISTS];
    let mut dropped = vec![false; if bad.is_empty() { 0 } else { out.len() }];
    for &(i, _) in &bad {
        dropped[i] = true;
    }
    for &(i, why) in &bad {
        let b = &out[i];
        misfit_lists[b.list as usize] = true;
        let header = b.start - HEADER_SIZE;
        // The block in front: the nearest below whose size was believed, ending within a page.
        let front = (0..i)
            .rev()
            .find(|&k| !dropped[k])
            .map(|k| &out[k])
            .filter(|f| f.start + f.size <= header && header - (f.start + f.size) < 4096)
            .map(|f| (f.start, f.size, f.frames));
        breaks.overwritten.push(Overwritten {
            header,
            size: b.size,
            list: b.list,
            why,
            front,
        });
    }
    if !bad.is_empty() {
        let mut k = dropped.iter();
        out.retain(|_| !*k.next().unwrap_or(&false));
    }
    // Each list the walk read to its end must add up to its own counters, which every link and
    // unlink keeps in step: a size overwritten to a number that fits shows here.
    let mut broken_lists = [false; NLISTS];
    if let Some(b) = list {
        broken_lists[b.list] = true;
    }
    for (i, l) in LISTS.iter().enumerate() {
        if misfit_lists[i] || broken_lists[i] {
            continue;
        }
        // SAFETY: every list is taken, so its counters are stable.
        let counted = unsafe { (*l.live_blocks.get(), *l.live_bytes.get()) };
        let (n, bytes) = linked[i];
        if (n, bytes) != counted {
            breaks.sums.push((i, bytes, n, counted.1, counted.0));
        }
    }
    (out, breaks)
}

impl Breaks {
    /// The report's lines on what the program broke: one per broken list, overwritten header
    /// (with the block in front of it and its stack) and list that does not add up.
    pub(super) fn write(&self, out: &mut Out) {
        if let Some(b) = self.list {
            let why = match b.why {
                Broken::Unreadable => "which is not readable".to_string(),
                Broken::BadMagic(m) => format!("whose magic is {m:#x}"),
                Broken::PrevMismatch => "whose prev does not lead back".to_string(),
                Broken::TooLong => "past the list's count of blocks (a cycle)".to_string(),
            };
            let from = match b.from {
                0 => format!("the head of list {}", b.list),
                h => format!("header {h:#x} on list {}", b.list),
            };
            let _ = writeln!(
                out,
                "dmem: the heap was overwritten: {from} leads to {:#x}, {why}; the blocks past it{} are not in this report",
                b.to,
                match b.lists {
                    1 => String::new(),
                    n => format!(" and past breaks in {} more", plural(n as u64 - 1, "list")),
                }
            );
        }
        for o in &self.overwritten {
            let past = match o.why {
                Misfit::NextHeader(n) => format!("runs past the next block's header at {n:#x}"),
                Misfit::Memory(0) => "lies in no mapped memory".to_string(),
                Misfit::Memory(end) => {
                    format!("runs past the mapped memory around it, which ends at {end:#x}")
                }
                Misfit::Overflow => "runs past the end of the address space".to_string(),
            };
            let _ = writeln!(
                out,
                "dmem: the heap was overwritten: header {:#x} on list {} says its block holds {} bytes, which {past}; the block is not in this report",
                o.header, o.list, o.size
            );
            if let Some((start, size, frames)) = o.front {
                let _ = writeln!(
                    out,
                    "dmem: perhaps written past the end of the {size}-byte block {start:#x} in front of it ({} before the header), allocated at:",
                    plural((o.header - (start + size)) as u64, "byte")
                );
                for (i, &pc) in frames.iter().take_while(|&&pc| pc != 0).enumerate() {
                    let _ = write!(out, "    #{i} {pc:#x} ");
                    diag::describe_pc(out, pc);
                    let _ = writeln!(out);
                }
            }
        }
        for &(list, bytes, n, counted_bytes, counted) in &self.sums {
            let _ = writeln!(
                out,
                "dmem: the heap was overwritten: the blocks of list {list} add up to {bytes} bytes in {}, but the list counted {counted_bytes} bytes in {counted}; a size or a count was changed, so the totals may be off by {} bytes",
                plural(n, "block"),
                bytes.abs_diff(counted_bytes)
            );
        }
    }
}
