//! One list followed header by header: each header checked before it is believed (alignment,
//! magic, list index, back link, a step cap), a header freed under the walk of a running
//! process stepped over, and the problem a bad link makes worded as `dmem verify` prints it.

use super::found::{Block, Problem};
use super::layout::{word_at, Layout};
use crate::source::memory::{AddrHash, Memory, ReadError};
use std::collections::{HashMap, HashSet};

/// Buffers reused from list to list.
#[derive(Default)]
pub(super) struct ListScratch {
    /// Each block's `stack` indexes `stacks`, this walk's own numbering.
    pub(super) blocks: Vec<Block>,
    /// Each distinct stack this walk met, in the order first met, trailing zero frames left out.
    pub(super) stacks: Vec<Box<[u64]>>,
    /// The index in `stacks` of each of them.
    ids: HashMap<Box<[u64]>, u32, AddrHash>,
    /// The frames of the header at hand, copied out of it when they are not the stack of the
    /// block before.
    frames: Vec<u64>,
}

impl ListScratch {
    pub(super) fn clear(&mut self) {
        self.blocks.clear();
        self.stacks.clear();
        self.ids.clear();
    }

    /// Keeps the block of the sound header at `h` on list `i`, whose bytes are `hd`, and its
    /// stack. The stack is looked up while the header is in the cache: a heap has far fewer
    /// stacks than blocks, so keeping each block's frames to intern later would write and
    /// read back 80 bytes a block.
    fn push(&mut self, l: &Layout, i: u64, h: u64, f: &HeaderFields, hd: &[u8]) {
        // The layout's check keeps the frames inside the header.
        let off = l.off_frames as usize;
        let raw = &hd[off..off + 8 * l.nframes as usize];
        let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap());
        let used = raw
            .chunks_exact(8)
            .rposition(|c| word(c) != 0)
            .map_or(0, |p| p + 1);
        let raw = &raw[..8 * used];
        // Blocks next to each other on a list mostly come from one stack: that one is compared
        // first, straight from the header's bytes, which costs less than copying the frames
        // out and hashing them.
        let same =
            |s: &[u64]| s.len() == used && s.iter().zip(raw.chunks_exact(8)).all(|(&a, c)| a == word(c));
        let last = self.blocks.last().map(|b| b.stack);
        let stack = match last.filter(|&id| same(&self.stacks[id as usize])) {
            Some(id) => id,
            None => {
                self.frames.clear();
                self.frames.extend(raw.chunks_exact(8).map(word));
                let frames = &self.frames[..];
                match self.ids.get(frames) {
                    Some(&id) => id,
                    None => {
                        let id = self.stacks.len() as u32;
                        self.stacks.push(frames.into());
                        self.ids.insert(frames.into(), id);
                        id
                    }
                }
            }
        };
        self.blocks.push(Block {
            addr: h + l.header_size,
            size: f.size,
            tid: f.tid,
            stack,
            list: i as u16,
            named_list: f.list as u16,
            align_log2: f.align_log2,
        });
    }

    /// Keeps the first of blocks read more than once (by a walk over a list that changed).
    pub(super) fn drop_repeats(&mut self) {
        let mut seen: HashSet<u64, AddrHash> = HashSet::default();
        self.blocks.retain(|b| seen.insert(b.addr));
    }
}

/// How one attempt's walk went.
pub(super) struct HeaderWalk {
    /// What ended it early, if something did.
    pub(super) problem: Option<Problem>,
    /// A header's back link did not name the header before it: the list changed under the walk
    /// (a block was unlinked next to where it was). The walk goes on, since the header itself
    /// is sound, but the attempt does not count as whole.
    pub(super) moved: bool,
    /// Handed headers walked past (freed by another thread, still linked), and their bytes.
    pub(super) handed: (u64, u64),
}

/// Why a header is not believed.
enum Bad {
    Misaligned,
    Unreadable,
    /// The state the magic named, and the word stored.
    Magic(u32, u32),
    /// A sound header that names another list: a walk of a running process met a block that
    /// was freed and allocated again since the link to it was read.
    OtherList(u64),
}

/// The problem a header that is not believed makes, worded as `dmem verify` prints it; `prev`
/// is the header the walk came from (0 for the list's head).
fn bad_link(l: &Layout, i: u64, h: u64, prev: u64, bad: &Bad) -> Problem {
    let from = if prev != 0 {
        format!("next of {prev:#x}")
    } else {
        "the list head".to_owned()
    };
    let came = if prev != 0 {
        format!("{prev:#x}")
    } else {
        "the list head".to_owned()
    };
    let text = match bad {
        Bad::Misaligned => format!("{from} points to misaligned {h:#x}; rest of the list lost"),
        Bad::Unreadable => format!("{from} points to {h:#x}, which is unreadable; rest of the list lost"),
        Bad::Magic(m, _) if *m == l.magic_freed => format!(
            "header {h:#x}, reached from {came}: freed block (magic {m:#x}) still on the list; rest of the list lost"
        ),
        Bad::Magic(_, stored) => {
            format!("header {h:#x}, reached from {came}: bad magic {stored:#010x}; rest of the list lost")
        }
        Bad::OtherList(o) => {
            format!("header {h:#x}, reached from {came}: it names list {o}; rest of the list lost")
        }
    };
    // What a write changed: the header whose `next` leads nowhere, or the one that does not
    // read as a header of this list.
    let header = match bad {
        Bad::Misaligned | Bad::Unreadable => (prev != 0).then_some(prev),
        Bad::Magic(..) | Bad::OtherList(_) => Some(h),
    };
    Problem {
        list: Some(i),
        addr: Some(h),
        text,
        header,
    }
}

/// Where a walk goes on after the header it was at was freed under it: whatever now follows the
/// header before it, read afresh, or the list's head if it was the first.
fn after_freed(
    mem: &dyn Memory,
    l: &Layout,
    i: u64,
    head_addr: u64,
    s: &mut ListScratch,
    strict: bool,
) -> Result<Option<u64>, std::io::Error> {
    let hs = l.header_size;
    Ok(match s.blocks.last() {
        Some(b) => {
            let p = b.addr - hs;
            mem.forget_range(p, hs);
            let mut buf = vec![0u8; hs as usize];
            read_header(mem, l, i, p, &mut buf, strict, None)?
                .ok()
                .map(|(f, _)| f.next)
        }
        None => mem.u64_fresh(head_addr).ok(),
    })
}

/// The problem of a header whose back link does not name the header the walk came from.
fn prev_mismatch(i: u64, h: u64, came_from: u64, its_prev: u64, seen: bool) -> Problem {
    let came = if came_from != 0 {
        format!("{came_from:#x}")
    } else {
        "the list head".to_owned()
    };
    Problem {
        list: Some(i),
        addr: Some(h),
        text: format!(
            "header {h:#x}, reached from {came}: its prev is {its_prev:#x}, not {came_from:#x}{}; rest of the list lost",
            if seen {
                " (it was walked already: the list loops back)"
            } else {
                ""
            }
        ),
        header: Some(h),
    }
}

/// Follows one list from `head`, appending what it finds to `s`. An `Err` only when the system
/// refused a read.
///
/// A header is believed when it is aligned, readable and carries the live magic. A strict walk
/// (memory that does not change) also wants its back link to name the header it came from; that
/// alone keeps it from looping (to reach a header twice it would have to come twice from its
/// recorded predecessor, and so on back to the head), and the first bad link ends the list as a
/// problem. A running process changes the list while it is walked, so there a header that fails
/// is read again from the process (what was read may be older than the link that led to it), and
/// if it still fails (it was freed under the walk), the walk goes on from a fresh read of the
/// header before it, whose next link now skips the freed one; a bounded number of times per
/// walk. The back link is checked but only marks the walk as moved, and a header that names
/// another list is not believed.
///
/// A walk over a list that did not move cannot meet a header twice (each back link named the
/// header before it); one that moved may (a block freed and linked again at the head while the
/// walk was past it), so a loop ends at the step cap, or sooner when it comes back to the head,
/// and the caller drops repeats. Remembering every header in a set instead would cost a cache
/// miss per block, most of the walk's time on a large heap.
#[allow(clippy::too_many_arguments)]
pub(super) fn walk_headers(
    mem: &dyn Memory,
    l: &Layout,
    i: u64,
    head_addr: u64,
    head: u64,
    counted: u64,
    s: &mut ListScratch,
    strict: bool,
    room: u64,
) -> Result<HeaderWalk, std::io::Error> {
    // `room`: as many headers as the image can hold, whatever the list's count says.
    let cap = counted
        .min(room)
        .saturating_add(64 + counted.min(room) / 8)
        .min(1 << 32);
    let hs = l.header_size;
    let mut walk = HeaderWalk {
        problem: None,
        moved: false,
        handed: (0, 0),
    };
    let mut buf = vec![0u8; hs as usize];
    let (mut h, mut prev, mut steps, mut recoveries) = (head, 0u64, 0u64, 0u32);
    while h != 0 {
        if steps >= cap {
            walk.problem = Some(Problem {
                list: Some(i),
                addr: Some(h),
                text: format!(
                    "list goes on past {cap} blocks though its live count is {counted}; stopped there"
                ),
                header: None,
            });
            break;
        }
        let mut fields = read_header(mem, l, i, h, &mut buf, strict, Some(prev))?;
        if fields.is_err() && !strict && recoveries < MAX_RECOVERIES {
            recoveries += 1;
            walk.moved = true;
            mem.forget_range(h, hs);
            fields = read_header(mem, l, i, h, &mut buf, strict, Some(prev))?;
            if fields.is_err() {
                if let Some(next) = after_freed(mem, l, i, head_addr, s, strict)?.filter(|&n| n != h) {
                    h = next;
                    continue;
                }
            }
        }
        let (f, hd) = match fields {
            Ok(found) => found,
            Err(bad) => {
                walk.problem = Some(bad_link(l, i, h, prev, &bad));
                break;
            }
        };
        // Each header's address comes from the one before, so every step waits for memory.
        // Blocks allocated one after another lie one after another, and a list runs newest
        // first: the header as far on as four more steps of this one's stride is asked for
        // now, a guess that costs nothing where it is wrong.
        if prev != 0 {
            let stride = h.wrapping_sub(prev);
            mem.prefetch(h.wrapping_add(stride.wrapping_mul(4)), hs);
        }
        // The head's back link is whatever the last link put in front of it since the head
        // was read; further on it must name the header we came from.
        if (strict || prev != 0) && f.prev != prev {
            if strict {
                let seen = s.blocks.iter().any(|b| b.addr == h + hs);
                walk.problem = Some(prev_mismatch(i, h, prev, f.prev, seen));
                break;
            }
            walk.moved = true;
        }
        if h == head && steps > 0 {
            walk.problem = Some(Problem {
                list: Some(i),
                addr: Some(h),
                text: format!("comes back to header {h:#x}"),
                header: None,
            });
            break;
        }
        if f.handed {
            walk.handed.0 += 1;
            walk.handed.1 += f.size;
            prev = h;
            h = f.next;
            steps += 1;
            continue;
        }
        s.push(l, i, h, &f, hd);
        prev = h;
        h = f.next;
        steps += 1;
    }
    Ok(walk)
}

/// Headers read again from the process, per walk, when one read from the cache does not hold
/// up: enough for the frees a busy process makes during a walk, and a bound on the extra reads.
const MAX_RECOVERIES: u32 = 4096;

/// A header's fields, once it has been found sound.
struct HeaderFields {
    /// Freed by another thread and not yet unlinked: walked past, not a block.
    handed: bool,
    next: u64,
    prev: u64,
    size: u64,
    tid: u32,
    list: u64,
    align_log2: u8,
}

/// Reads the header at `h` and checks it: aligned, readable, live, and (unless `strict`, which
/// reports it later instead) on list `i`; gives its fields and its bytes, where the memory
/// holds them (a core's), else copied into `buf`. The inner `Err` says why it is not believed. A header that names another list but whose back link is `came_from` is linked
/// right here whatever its size word says (a write changed that word, which `verify` reports
/// and the size check judges), so it is believed as a strict walk believes it: the same answer
/// in a core and in a running process.
fn read_header<'a>(
    mem: &'a dyn Memory,
    l: &Layout,
    i: u64,
    h: u64,
    buf: &'a mut [u8],
    strict: bool,
    came_from: Option<u64>,
) -> Result<Result<(HeaderFields, &'a [u8]), Bad>, std::io::Error> {
    // Headers are at least 8-aligned (the user pointer is 16-aligned, the header 112 bytes).
    if !h.is_multiple_of(8) {
        return Ok(Err(Bad::Misaligned));
    }
    let buf: &[u8] = match mem.borrow(h, buf.len() as u64) {
        Some(bytes) => bytes,
        None => match mem.read(h, buf) {
            Ok(()) => buf,
            Err(ReadError::Unmapped) => return Ok(Err(Bad::Unreadable)),
            Err(ReadError::Denied(e)) => return Err(e),
        },
    };
    let u64_at = |off: u64| word_at(buf, off);
    let u32_at = |off: u64| u32::from_le_bytes(buf[off as usize..off as usize + 4].try_into().unwrap());
    let stored = u32_at(l.off_magic);
    let magic = l.magic_state(h, stored);
    let handed = Some(magic) == l.magic_handed;
    if magic != l.magic_live && !handed {
        return Ok(Err(Bad::Magic(magic, stored)));
    }
    let word = u64_at(l.off_size);
    let field = |shift: u64, bits: u64| {
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        (word >> shift) & mask
    };
    let list = field(l.size_list_shift, l.size_list_bits);
    if list != i && !strict && came_from != Some(u64_at(l.off_prev)) {
        return Ok(Err(Bad::OtherList(list)));
    }
    let fields = HeaderFields {
        handed,
        next: u64_at(l.off_next),
        prev: u64_at(l.off_prev),
        size: word & ((1u64 << l.size_bits) - 1),
        tid: u32_at(l.off_tid),
        list,
        align_log2: field(l.size_align_shift, l.size_align_bits) as u8,
    };
    Ok(Ok((fields, buf)))
}
