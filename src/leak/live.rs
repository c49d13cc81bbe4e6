//! The live blocks as the exit report sees them: copied out of the lists while every list is
//! taken (`lists::lock_all`: every lock held and no owner inside a change), with a walk that
//! stops at a list the program broke.

use super::memory::readable;
use crate::analysis::maps::Mapping;
use crate::header::{self, Header, NFRAMES};
use crate::lists::{self, LISTS};

/// A live block: where it starts, its size and its allocation stack.
pub(super) struct Live {
    pub(super) start: usize,
    pub(super) size: usize,
    pub(super) frames: [usize; NFRAMES],
}

/// Copies every live block out of the lists, sorted by address, and says where a list broken by
/// the program stopped the copy. The caller has taken every list, so the copy is consistent and
/// stays true until the lists are released.
pub(super) fn snapshot(maps: &[Mapping]) -> (Vec<Live>, Option<lists::Break>) {
    let n: u64 = LISTS
        .iter()
        // SAFETY: every list is taken (see above), so the counters are stable.
        .map(|l| unsafe { *l.live_blocks.get() })
        .sum();
    let mut out = Vec::with_capacity(n as usize);
    let broken = lists::walk_locked(&|s, e| readable(maps, s, e), &mut |hr| {
        out.push(Live {
            start: header::to_user(hr as *const Header as *mut Header) as usize,
            size: hr.size(),
            frames: hr.frames,
        })
    });
    out.sort_unstable_by_key(|b| b.start);
    (out, broken)
}
