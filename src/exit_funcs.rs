//! glibc's lists of exit handlers, as `exit` would leave them after ours.
//!
//! glibc keeps the handlers of `atexit`, `on_exit` and `__cxa_atexit` in blocks of 32
//! (`struct exit_function_list`): a static first block, then one calloc'd block per further
//! 32, each pushed in front of the older ones. `exit` runs them newest first and frees each
//! calloc'd block once it is spent. Our handler was registered from libdmem's constructor, which
//! the loader runs after the constructors of the libraries loaded after it; a C++ library with
//! many static objects has registered more than 32 destructors by then, so our handler sits in
//! a calloc'd block with older blocks behind it. Those older blocks' entries were spent already
//! by `__cxa_finalize` when the loader ran the libraries' destructors, and `exit` would free the
//! blocks right after our handler returned; but ours never returns (the process ends in
//! `finish`). Freeing them here, as `exit` would, makes the report and the core hold what
//! valgrind sees after `exit` is done.

use crate::header::Header;
use crate::lists;
use crate::{engine, header, leak, procmaps};

/// The argument our `on_exit` handler is registered with: its address marks our entries. There
/// are two (see `lifecycle.rs`): the one running, and an older one that only ever makes a second
/// exiting thread wait, so it counts as spent in our own list (nothing that runs it returns to
/// exit), which is freed as exit would free it. An older list that still holds it is not:
/// another exiting thread may yet take it from there.
pub static MARKER: u8 = 0;

/// `sizeof(struct exit_function_list)`: `next`, `idx`, then 32 entries of four words (`flavor`,
/// then for `on_exit` the mangled function and its argument).
const LIST_BYTES: usize = 16 + 32 * 32;
const ENTRIES: usize = 32;
/// `enum { ef_free, ef_us, ef_on, ef_at, ef_cxa }`.
const EF_FREE: u64 = 0;
const EF_ON: u64 = 2;

/// Words of a block of `LIST_BYTES`.
type ListWords = [u64; LIST_BYTES / 8];

fn words(user: u64) -> &'static ListWords {
    // SAFETY: only called on live blocks of exactly LIST_BYTES, 16-aligned, that glibc wrote
    // as exit_function_list; nobody frees them but exit, which is running our handler.
    unsafe { &*(user as *const ListWords) }
}

fn entry(w: &ListWords, i: usize) -> (u64, u64) {
    (w[2 + 4 * i], w[2 + 4 * i + 2])
}

/// Whether entry `i` of a list is one of ours.
fn is_ours(w: &ListWords, i: usize) -> bool {
    entry(w, i) == (EF_ON, &MARKER as *const u8 as u64)
}

/// Whether entries `0..idx` of a list are all spent (`exit` has nothing left to run there),
/// counting our own entries as spent when `ours_spent`.
fn spent_below(w: &ListWords, idx: usize, ours_spent: bool) -> bool {
    idx <= ENTRIES && (0..idx).all(|i| entry(w, i).0 == EF_FREE || (ours_spent && is_ours(w, i)))
}

/// Blocks of LIST_BYTES looked at, at most: a program has a handful of exit lists.
const MAX_LISTS: usize = 256;

/// The live blocks of LIST_BYTES (the calloc'd exit lists among them), and which of them holds
/// our entry, found by our marker.
struct Candidates {
    blocks: [u64; MAX_LISTS],
    n: usize,
    ours: Option<u64>,
}

impl Candidates {
    fn gather() -> Candidates {
        let mut c = Candidates {
            blocks: [0; MAX_LISTS],
            n: 0,
            ours: None,
        };
        let mut marked = [0u64; 2];
        lists::lock_all();
        // A list the program broke ends its walk there (the report says so later).
        let maps = procmaps::all();
        lists::walk::walk_locked(&|s, e| leak::readable(&maps, s, e), &mut |hdr| {
            if c.n < MAX_LISTS && hdr.size() == LIST_BYTES && hdr.align_log2() == 0 {
                let user = header::to_user(hdr as *const Header as *mut Header) as u64;
                c.blocks[c.n] = user;
                c.n += 1;
                let w = words(user);
                if (0..ENTRIES).any(|i| is_ours(w, i)) {
                    marked[usize::from(marked[0] != 0)] = user;
                }
            }
        });
        lists::unlock_all();
        // Our two entries may straddle two lists: ours is the newer, which leads to the other.
        c.ours = match marked {
            [0, _] => None,
            [a, 0] => Some(a),
            [a, b] => Some(if words(b)[0] == a { b } else { a }),
        };
        c
    }

    /// Whether `p` is one of them: glibc's static first list, which ends the chain, is not.
    fn has(&self, p: u64) -> bool {
        self.blocks[..self.n].contains(&p)
    }
}

/// Frees the spent lists behind ours, as `exit` would after our handler; to be called from our
/// `on_exit` handler only.
pub fn free_spent() {
    let c = Candidates::gather();
    let Some(ours) = c.ours else {
        // Our entry is in glibc's static first list: nothing is behind it.
        return;
    };
    let w = words(ours);
    let idx = w[1] as usize;
    if !spent_below(w, idx, true) {
        return;
    }
    let mut next = w[0];
    while c.has(next) {
        let older = words(next);
        if !spent_below(older, older[1] as usize, false) {
            break;
        }
        let after = older[0];
        // SAFETY: unlinking a spent list from the chain as exit would; `ours` is a live list
        // block whose first word is `next`.
        unsafe { *(ours as *mut u64) = after };
        engine::release(next as *mut u8, crate::unwind::here());
        next = after;
    }
    if !c.has(next) {
        // Every list behind ours is spent and gone, and so is ours: exit would free it too,
        // leaving its own pointer to it dangling, which nothing reads after our handler.
        engine::release(ours as *mut u8, crate::unwind::here());
    }
}
