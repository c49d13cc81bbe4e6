//! The shapes of a thread's recent walks (see `Shape`), which let a walk from the same code on
//! the same stack be answered by checking a few words that do not wait for each other instead of
//! walking; and the bounds of the stack every read of a walk or a replay stays within.

use super::thread_tables;
use crate::header::NFRAMES;
use crate::stack_hint::Hint;

/// A table of shapes in sets of `WAYS`: a walk may be answered by any shape of its set that
/// has its key, and a walk no shape answered replaces one that did not answer last, in turn.
/// Looking at a shape's key costs two compares, so a set can be wide; most walks are answered by
/// the shape that answered its set last, which is tried first.
pub(super) struct Shapes<const N: usize> {
    pub(super) shapes: [Shape; N],
    /// Per set, at the index of its first shape: the way that answered or was filled last, and
    /// next to it the way to replace next.
    pub(super) order: [u8; N],
}

/// Shapes in a set.
pub(super) const WAYS: usize = 4;

impl<const N: usize> Shapes<N> {
    pub(super) const EMPTY: Self = Shapes {
        shapes: [NO_SHAPE; N],
        order: [0; N],
    };

    pub(super) fn clear(&mut self) {
        for shape in self.shapes.iter_mut() {
            // No walk starts at address 0, so no key matches.
            shape.pc = 0;
        }
    }

    /// The index of the first shape of the set `hash` picks.
    #[inline(always)]
    pub(super) fn set(hash: u64) -> usize {
        // The product's top bits are the well-mixed ones.
        (hash >> (64 - N.trailing_zeros())) as usize & !(WAYS - 1)
    }

    /// Replays the shape of the set `hash` picks that has the walk's key and matches the stack,
    /// filling `out`, and returns what the per-stack counts need of it; none when no shape does.
    #[inline(always)]
    pub(super) fn replay(
        &mut self,
        hash: u64,
        key: &Key,
        bp0: usize,
        b: &Bounds,
        out: &mut [usize; NFRAMES],
    ) -> Option<Hint> {
        let set = Self::set(hash);
        let last = usize::from(self.order[set]);
        for i in 0..WAYS {
            let way = (last + i) % WAYS;
            let shape = &mut self.shapes[set + way];
            if shape.pc == key.pc && shape.ra == key.ra && shape.replay(b.lo, bp0, b, out) {
                self.order[set] = way as u8;
                return Some(Hint::kept(shape.count_key, &mut shape.memo));
            }
        }
        None
    }

    /// A shape of the set `hash` picks, other than the one that answered last, emptied for a
    /// walk to fill.
    pub(super) fn make_way(&mut self, hash: u64) -> &mut Shape {
        let set = Self::set(hash);
        let last = usize::from(self.order[set]) % WAYS;
        let mut way = usize::from(self.order[set + 1]) % WAYS;
        if way == last {
            way = (way + 1) % WAYS;
        }
        self.order[set] = way as u8;
        self.order[set + 1] = ((way + 1) % WAYS) as u8;
        let shape = &mut self.shapes[set + way];
        *shape = NO_SHAPE;
        shape
    }
}

/// Shapes in the thread-local table. A program's hot allocation paths are usually more than this
/// (CPython's evaluation loop has about a hundred), so a thread that keeps walking where a shape
/// could have answered borrows a larger table (see `borrow_large`); a thread that allocates
/// from a few places never needs one.
pub(super) const SMALL_SHAPES: usize = 8;
/// Shapes in a borrowed table: 128 answer 99% of CPython's walks where 32 answered 88%.
pub(super) const LARGE_SHAPES: usize = 128;
const _: () = assert!(core::mem::size_of::<Shapes<LARGE_SHAPES>>() <= thread_tables::TABLE_BYTES);
// Sets are picked by the top bits of a hash.
const _: () =
    assert!(SMALL_SHAPES.is_power_of_two() && LARGE_SHAPES.is_power_of_two() && SMALL_SHAPES >= WAYS);
const _: () = assert!(WAYS.is_power_of_two() && WAYS >= 2);

/// Words a shape checks at most: a return address per step and, for frames found through
/// %rbp, the word %rbp was restored from. A walk that needs more (frame pointers in every frame
/// and a deep start) is not kept; the bound keeps the small table within the thread's budget.
pub(super) const CHECKS: usize = 24;
// Replays check in pairs.
const _: () = assert!(CHECKS.is_multiple_of(2));

/// Marks a check of a word that holds a stack address, compared relative to the walk's start.
pub(super) const RELATIVE: u16 = 1 << 15;

/// What a walk depended on, relative to the stack pointer it started from, so that a later walk
/// from the same code can find the same stack by checking those words, all at once, instead of
/// one dependent load after another.
///
/// A walk is a function of the words it reads: each return address selects the next rule, and
/// the rules say where to read next, from the CFA, itself %rsp or %rbp plus an offset. Words
/// that are return addresses must be equal. Values of %rbp that a rule used as a base are stack
/// addresses: what must be equal is their distance from the starting stack pointer, so the same
/// stack found at another depth still matches. Other values of %rbp (a general register in code
/// without frame pointers) decide nothing and are not checked. A walk that ended on a failed
/// step is not kept, since where the stack ends is not relative.
///
/// A shape is found by its key: the program counter the walk started at (which entry point, so
/// which first frame) and, when the first frame's return address lies at a fixed distance from
/// the stack pointer (its rule puts the CFA at %rsp plus an offset, as in every function built
/// without frame pointers), that return address. The key's return address is then checked by
/// the lookup and is not among the shape's checks.
#[derive(Clone, Copy)]
pub(super) struct Shape {
    /// The key (see `Key`); `pc` is 0 for no shape.
    pub(super) pc: usize,
    pub(super) ra: usize,
    pub(super) want: [usize; CHECKS],
    /// The frames the walk recorded, zero past the last: what a replay copies out.
    pub(super) frames: [usize; NFRAMES],
    /// Their key in the per-stack counts (`stack_counts.rs`), hashed once when the shape was
    /// recorded, and where their counts went last: what a replay gives back with them.
    pub(super) count_key: u64,
    pub(super) memo: usize,
    /// Offsets from the starting stack pointer of the words to check, with `RELATIVE` set for
    /// stack addresses.
    pub(super) at: [u16; CHECKS],
    /// When some rule used the %rbp the walk started with: its required distance from %rsp.
    pub(super) bp0: Option<usize>,
    /// How far above the starting stack pointer the stack must reach: past the highest CFA and
    /// every word checked.
    pub(super) span: u32,
    /// Checks, an even number (see `full_walk`).
    pub(super) len: u8,
    /// Whether every check is of a return address and the walk used no %rbp it started with:
    /// the shape of a stack of code without frame pointers, replayed by the shortest loop.
    pub(super) plain: bool,
}

pub(super) const NO_SHAPE: Shape = Shape {
    pc: 0,
    ra: 0,
    want: [0; CHECKS],
    frames: [0; NFRAMES],
    count_key: 0,
    memo: 0,
    at: [0; CHECKS],
    bp0: None,
    span: 0,
    len: 0,
    plain: false,
};

/// What a walk's shape is looked up by: where it started and, when its first step reads it at a
/// fixed distance from the stack pointer, the return address into the first caller (else 0).
/// Distinct allocation sites often call from the same stack depth; the return address tells
/// them apart, and the stack pointer (only hashed) tells one site's depths apart.
pub(super) struct Key {
    pub(super) pc: usize,
    pub(super) ra: usize,
}

/// A shape being recorded by a walk.
pub(super) struct Recorder<'a> {
    /// Filled in place, so a walk that is not kept costs no copy.
    pub(super) shape: &'a mut Shape,
    /// False once the walk depends on something a shape cannot express.
    pub(super) ok: bool,
    /// Where the current %rbp was loaded from; None while it is the register the walk started
    /// with.
    pub(super) bp_from: Option<usize>,
    /// Whether the current %rbp is already checked (or needs no check).
    pub(super) bp_checked: bool,
}

impl Recorder<'_> {
    pub(super) fn push(&mut self, addr: usize, sp0: usize, value: usize, relative: bool) {
        let off = addr.wrapping_sub(sp0);
        let k = usize::from(self.shape.len);
        if off >= usize::from(RELATIVE) || k == CHECKS {
            self.ok = false;
            return;
        }
        self.shape.at[k] = off as u16 | if relative { RELATIVE } else { 0 };
        self.shape.want[k] = if relative { value.wrapping_sub(sp0) } else { value };
        self.shape.len += 1;
        self.reach(off + 8);
    }

    /// Notes that the stack must extend to `off` bytes above the starting stack pointer.
    pub(super) fn reach(&mut self, off: usize) {
        self.shape.span = self.shape.span.max(off as u32);
    }

    /// Notes that a rule used the current %rbp as a base.
    pub(super) fn uses_bp(&mut self, bp: usize, sp0: usize) {
        if self.bp_checked {
            return;
        }
        self.bp_checked = true;
        match self.bp_from {
            None => self.shape.bp0 = Some(bp.wrapping_sub(sp0)),
            Some(addr) => self.push(addr, sp0, bp, true),
        }
    }
}

/// The part of the thread's stack a walk may read: from where the walk started up to the top.
pub(super) struct Bounds {
    pub(super) lo: usize,
    pub(super) hi: usize,
}

impl Bounds {
    /// The word `off` bytes above the low end, when it lies within the bounds; `off` is below
    /// 2^32 (a rule's offsets are).
    #[inline(always)]
    pub(super) fn read_above(&self, off: usize) -> Option<usize> {
        if off + 8 <= self.hi - self.lo {
            // SAFETY: as in `read`: [lo + off, lo + off + 8) lies within [lo, hi).
            Some(unsafe { ((self.lo + off) as *const usize).read_unaligned() })
        } else {
            None
        }
    }

    #[inline(always)]
    pub(super) fn read(&self, addr: usize) -> Option<usize> {
        if addr >= self.lo && addr <= self.hi - 8 {
            // SAFETY: [lo, hi) lies within the mapping that holds the stack the calling thread
            // runs on (see `stacks.rs`), and lo is at or above this function's own stack
            // pointer, so the word is mapped and readable, and the stack under our own frames
            // is not unmapped while we run on it.
            Some(unsafe { (addr as *const usize).read_unaligned() })
        } else {
            None
        }
    }
}

impl Shape {
    /// Checks whether the stack above `sp0` (the bounds' low end), where a walk with this
    /// shape's key starts, has this shape, and if so fills `out` from it.
    #[inline(always)]
    pub(super) fn replay(&self, sp0: usize, bp0: usize, b: &Bounds, out: &mut [usize; NFRAMES]) -> bool {
        if self.span as usize > b.hi - sp0 {
            return false;
        }
        let len = usize::from(self.len);
        if len > CHECKS {
            return false;
        }
        debug_assert!(len.is_multiple_of(2));
        // Checks go in pairs, so that the loop's own count and jump are paid once per two
        // (`full_walk` makes the number even).
        let (at, _) = self.at[..len].as_chunks::<2>();
        let (want, _) = self.want[..len].as_chunks::<2>();
        // The checks go in the order the walk read the words and stop at the first that
        // differs: while they match, the next word is one the walk itself would read, on this
        // stack. Read further, a word could lie above the stack's real top when the mapping its
        // bounds came from has since changed (the JVM turns the pages above one thread's stack
        // into another's guard pages after the first walk). The loads still do not depend on
        // each other: predicting each check to pass, the processor has them all under way at
        // once.
        let matches = if self.plain {
            // No check is marked relative.
            at.iter().zip(want).all(|(at, want)| {
                self.word(sp0, at[0].into()) == want[0] && self.word(sp0, at[1].into()) == want[1]
            })
        } else {
            let check = |at: u16, want: usize| {
                let base = if at & RELATIVE != 0 { sp0 } else { 0 };
                self.word(sp0, (at & !RELATIVE).into()).wrapping_sub(base) == want
            };
            self.bp0.is_none_or(|rel| bp0.wrapping_sub(sp0) == rel)
                && at
                    .iter()
                    .zip(want)
                    .all(|(at, want)| check(at[0], want[0]) && check(at[1], want[1]))
        };
        if matches {
            *out = self.frames;
        }
        matches
    }

    /// The word a check reads, `off` bytes above `sp0`: the offset of a check, less its mark.
    #[inline(always)]
    pub(super) fn word(&self, sp0: usize, off: usize) -> usize {
        debug_assert!(off + 8 <= self.span as usize);
        // SAFETY: the recorder keeps every checked word below the span (`Recorder::push`), and
        // `replay` checked that the span lies within the bounds: [sp0, hi) is within the
        // mapping that holds the stack the calling thread runs on (see `Bounds::read`).
        unsafe { ((sp0 + off) as *const usize).read_unaligned() }
    }
}
