//! The walk of every list for a report, with every list held: each link checked before it is
//! followed, so a list the program broke (a heap overflow over the next header) ends its walk
//! instead of the process.

use super::LISTS;
use crate::header::{Header, HEADER_SIZE, MAGIC_FREED, MAGIC_HANDED, MAGIC_LIVE};

/// Why a walk stopped before a list's end: a heap overflow or a stray write broke a link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Broken {
    /// The next header is not readable memory.
    Unreadable,
    /// The next header holds neither magic a header on a list can hold.
    BadMagic(u32),
    /// The next header's `prev` does not lead back: the list was rewired.
    PrevMismatch,
    /// The list is longer than its own count: it runs in a circle.
    TooLong,
}

/// The first break met by `walk_locked`, and how many lists were broken.
#[derive(Clone, Copy, Debug)]
pub struct Break {
    pub list: usize,
    /// The header whose `next` could not be followed, and where that `next` pointed.
    pub from: usize,
    pub to: usize,
    pub why: Broken,
    pub lists: usize,
}

/// Visits every header of a block that is not freed on every list, checking each link before
/// following it, so that a list broken by the program (the usual heap overflow writes over the
/// header after a block) ends the walk of that list instead of the process. `readable(start,
/// end)` says whether memory can be read. The caller holds every list (`lock_all`).
///
/// A linked header's magic is live, handed (freed by another thread, not yet unlinked: passed
/// over), or freed for the moment between a failed realloc's `restore` and its magic store (the
/// block is live again); anything else is a break.
pub fn walk_locked(readable: &dyn Fn(usize, usize) -> bool, visit: &mut dyn FnMut(&Header)) -> Option<Break> {
    walk_linked(readable, &mut |_, hr| {
        if hr.state() != MAGIC_HANDED {
            visit(hr)
        }
    })
}

/// As `walk_locked`, but visits every header linked on list `i` as `visit(i, header)`, handed
/// ones too (the list's counters still count them): for a reader that adds a list up.
pub fn walk_linked(
    readable: &dyn Fn(usize, usize) -> bool,
    visit: &mut dyn FnMut(usize, &Header),
) -> Option<Break> {
    let mut first: Option<Break> = None;
    for (i, list) in LISTS.iter().enumerate() {
        // SAFETY: the caller holds every list, so heads, links and counters are stable.
        let (mut h, count) = unsafe { (*list.head.get(), *list.live_blocks.get()) };
        let mut from: *mut Header = core::ptr::null_mut();
        let mut steps = 0u64;
        while !h.is_null() {
            let checked = if steps >= count {
                Err(Broken::TooLong)
            } else {
                checked_link(h, from, readable)
            };
            let hr = match checked {
                Ok(hr) => hr,
                Err(why) => {
                    match &mut first {
                        Some(b) => b.lists += 1,
                        None => {
                            first = Some(Break {
                                list: i,
                                from: from as usize,
                                to: h as usize,
                                why,
                                lists: 1,
                            })
                        }
                    }
                    break;
                }
            };
            visit(i, hr);
            steps += 1;
            from = h;
            h = hr.next;
        }
    }
    first
}

/// The header `h`, reached from `from`'s `next`, if it reads as a linked header.
fn checked_link<'a>(
    h: *mut Header,
    from: *mut Header,
    readable: &dyn Fn(usize, usize) -> bool,
) -> Result<&'a Header, Broken> {
    let a = h as usize;
    if !a.is_multiple_of(8) || !readable(a, a + HEADER_SIZE) {
        return Err(Broken::Unreadable);
    }
    // SAFETY: `h` is aligned and the whole header is readable (checked just above); the caller
    // holds every list, so nothing of ours changes it while it is looked at.
    let hr = unsafe { &*h };
    if ![MAGIC_LIVE, MAGIC_FREED, MAGIC_HANDED].contains(&hr.state()) {
        Err(Broken::BadMagic(hr.magic))
    } else if hr.prev != from {
        Err(Broken::PrevMismatch)
    } else {
        Ok(hr)
    }
}
