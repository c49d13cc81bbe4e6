//! A stack walker for the allocation hot path that needs no frame pointers (x86_64).
//!
//! Debian's libc, libstdc++ and most distribution libraries are built without frame pointers, so
//! following %rbp loses the caller of `operator new` and everything above it. The unwind tables
//! every x86_64 object carries for C++ exceptions (`.eh_frame`, indexed by `.eh_frame_hdr`) say,
//! for each instruction, where the caller's stack pointer (the CFA), the return address and the
//! saved %rbp are. `_Unwind_Backtrace` searches and interprets those tables again for every frame
//! of every stack, which costs microseconds per allocation.
//!
//! Here they are interpreted once per return address. The result is a compact rule, such as "CFA
//! is %rsp + 24, the return address is at CFA - 8, %rbp is unchanged", kept in a process-wide
//! cache indexed by a hash of the address, and in front of it, per thread, the rules of the
//! previous walk by depth and a small memo. A walk is then one load of a rule and one or two
//! loads from the stack per frame. Each of those loads waits for the one before, so each thread
//! also keeps the shapes of its recent walks (see `Shape`): when the stack above the starting
//! point is found to be the same as before, which a few loads that do not wait for each other
//! can tell, the recorded frames are reused without walking.
//!
//! What the hot path relies on:
//! - No lock. Threads read and fill the cache with plain atomic loads and stores. A slot holds
//!   the key xor-ed with the rule, next to the rule, so a slot torn by two racing writers fails
//!   the key check instead of yielding a wrong rule. Slots are written only on a miss, so after
//!   warm-up every thread only reads them and the cache lines stay shared.
//! - No allocation and no syscall per call. A miss finds the object that holds the address with
//!   glibc's lock-free `_dl_find_object` and parses its tables in place with gimli, using storage
//!   on the stack. The first walk on a stack finds the stack's bounds once, from the kernel's list
//!   of mappings (see `stacks.rs`).
//! - Never a crash on a bad rule. Every stack read is bounded to the current thread's stack above
//!   the point where the walk started, and each frame's CFA must lie above the previous one, so
//!   a wrong rule ends the stack early at worst. A frame the rules cannot express (a signal
//!   frame, hand-written assembly with exotic CFI) ends the stack too.
//! - Objects loaded by dlopen need nothing: an address not yet in the cache is looked up afresh,
//!   and addresses that lie in no object are never cached. Unloading is what can make a cached
//!   rule wrong, when another object is later mapped at the same address; `invalidate` (called
//!   after every dlclose) bumps a generation that is part of every key.

use super::objects::with_object;
use super::rules::*;
use super::shapes::{Bounds, Key, Recorder, Shape, Shapes, LARGE_SHAPES, NO_SHAPE, RELATIVE, SMALL_SHAPES};
use super::stacks::KnownStacks;
use super::tables::rule_from_tables;
use super::thread_tables;
use crate::header::NFRAMES;
use crate::stack_hint::{self, Hint};
use crate::tls;
use core::arch::asm;
use core::sync::atomic::Ordering;

/// Frames walked at most, libdmem's own included, so a cyclic or corrupt stack ends.
const MAX_STEPS: usize = NFRAMES + OWN_SLOTS;

/// Slots of a thread's `prev` for libdmem's own frames, which lie between the walk's start and
/// the allocation function's caller: the exported function's own, and one more where an export
/// calls another (reallocarray, realloc).
const OWN_SLOTS: usize = 4;

/// log2 of the slots in each thread's own memo of rules, which sits in front of the shared cache.
const MEMO_BITS: u32 = 5;
const MEMO_SLOTS: usize = 1 << MEMO_BITS;

/// What a thread keeps for its walks, in the thread's TLS area (`tls.rs`).
struct Local {
    /// Whether the rest is initialised: false in the thread's fresh area, whose bytes are zero.
    ready: bool,
    /// Stacks this thread walked on lately.
    stacks: KnownStacks,
    /// The generation the memo, `prev` and the shapes were filled in.
    generation: u64,
    /// (address, rule) pairs this thread used lately, in a table small enough to stay in the
    /// core's first-level cache; the shared cache's slots are often evicted between two
    /// allocations.
    memo: [(usize, u64); MEMO_SLOTS],
    /// The (address, rule) pairs of the previous walk, by depth (see `full_walk`). Consecutive
    /// allocations often come from stacks that share frames (a loop, an interpreter's evaluation
    /// loop), and a slot found by depth needs no hash.
    prev: [(usize, u64); MAX_STEPS],
    /// Shapes of recent walks, by a hash of where they started (see `Key`), until the
    /// thread borrows a larger table.
    small: Shapes<SMALL_SHAPES>,
    /// The larger table of shapes this thread borrowed, or null (see `thread_tables.rs`).
    large: *mut Shapes<LARGE_SHAPES>,
    /// Walks this thread could not replay while it had no large table.
    unreplayed: u32,
    /// The program counters walks started at lately, each with the distance from the stack
    /// pointer to the return address into the first caller plus one, or 0 where that is not a
    /// fixed distance (see `first_return`). Walks start in a handful of entry points (malloc,
    /// free, realloc, operator new...), so a few compares find one without a hash.
    origins: [(usize, usize); ORIGINS],
    /// Which of `origins` is replaced next.
    next_origin: usize,
}

/// Entry points a thread's walks start in that it remembers.
const ORIGINS: usize = 4;

/// Walks a thread makes without a replay before it borrows a large table.
const BORROW_AFTER: u32 = 256;

// Every thread carries this in its static TLS area (`tls.rs`), which glibc places at the top of
// the thread's stack: keep it small.
const _: () = assert!(core::mem::size_of::<Local>() <= tls::WALKER_WORDS * 8);
const _: () = assert!(core::mem::align_of::<Local>() <= 8);

const LOCAL_INIT: Local = Local {
    ready: true,
    stacks: KnownStacks::EMPTY,
    generation: 0,
    memo: [(0, 0); MEMO_SLOTS],
    prev: [(0, 0); MAX_STEPS],
    small: Shapes::EMPTY,
    large: core::ptr::null_mut(),
    unreplayed: 0,
    origins: [(0, 0); ORIGINS],
    next_origin: 0,
};

/// The calling thread's `Local`, in its TLS area `area`, initialised on the thread's first use.
///
/// # Safety
/// `area` must be the calling thread's, and the caller must not hold another reference to the
/// thread's `Local` (no walk is running on this thread: walks are never re-entered, see
/// `capture`).
#[inline(always)]
unsafe fn local<'a>(area: *mut tls::Area) -> &'a mut Local {
    // SAFETY: the area is this thread's own (the caller's word), its walker room holds a `Local`
    // (asserted above), and the caller guarantees no other reference to it. Only `ready` is read
    // before the room is known to hold a whole `Local`: a bool, whose zero (the fresh area's) is
    // false, and which is true only once the room was written with a whole `Local`.
    unsafe {
        let at = (*area).walker.as_mut_ptr().cast::<Local>();
        if !core::ptr::addr_of!((*at).ready).read() {
            at.write(LOCAL_INIT);
        }
        &mut *at
    }
}

/// The registers a walk carries from frame to frame.
#[derive(Clone, Copy)]
struct Regs {
    pc: usize,
    sp: usize,
    bp: usize,
}

/// One step's result: the caller's registers and where their values were read.
struct Step {
    regs: Regs,
    ra_at: usize,
    /// Where %rbp was restored from, if it was.
    bp_at: Option<usize>,
    /// Where the CFA was loaded from, for `CFA_DEREF_RBP`.
    cfa_at: Option<usize>,
}

/// Applies one rule: the caller's registers, or None when the rule leads off the stack.
#[inline(always)]
fn step(rule: Rule, r: &Regs, b: &Bounds) -> Option<Step> {
    // Written to compile to conditional moves rather than jumps on the rule's kinds: which kinds
    // a frame has varies from frame to frame, so such jumps are often mispredicted.
    let base = if rule.cfa_base() == CFA_RSP { r.sp } else { r.bp };
    let mut cfa = base.wrapping_add_signed(rule.cfa_off());
    let mut cfa_at = None;
    if rule.cfa_base() == CFA_DEREF_RBP {
        cfa_at = Some(cfa);
        cfa = b.read(cfa)?;
    }
    // The caller's frame lies strictly above ours: this also guarantees the walk ends.
    if cfa <= r.sp || cfa > b.hi {
        return None;
    }
    let ra_at = cfa.wrapping_add_signed(rule.ra_off());
    let pc = b.read(ra_at)?;
    // Where the caller's %rbp was saved; when it was not, a word known to be readable (the
    // return address) is read instead and its value not used.
    let kind = rule.bp_kind();
    let bp_base = if kind == BP_AT_RBP { r.bp } else { cfa };
    let restored = kind == BP_AT_CFA || kind == BP_AT_RBP;
    let saved_at = if restored {
        bp_base.wrapping_add_signed(rule.bp_off())
    } else {
        ra_at
    };
    let saved = b.read(saved_at)?;
    let bp = match kind {
        BP_SAME => r.bp,
        BP_LOST => 0,
        _ => saved,
    };
    Some(Step {
        regs: Regs { pc, sp: cfa, bp },
        ra_at,
        bp_at: restored.then_some(saved_at),
        cfa_at,
    })
}

/// Where a walk starts: the registers of one instant in a frame that is still active when the
/// walk runs. Taken in the exported allocation function itself, so that libdmem's inner frames
/// cost no steps.
#[derive(Clone, Copy)]
pub struct Origin(Regs);

/// The calling function's registers, for a walk started from within a function it calls. The
/// function that takes them must not return, nor end in a tail call, before the walk: the walk
/// reads its frame.
#[inline(always)]
pub fn here() -> Origin {
    let (pc, sp, bp): (usize, usize, usize);
    // SAFETY: copies three registers into outputs and touches neither memory nor the stack. The
    // three values describe one instant: the program counter is that of the instruction after
    // the `lea`, inside this same block, for which the unwind tables give this frame's CFA in
    // terms of the %rsp read here.
    unsafe {
        asm!(
            "lea {pc}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            pc = out(reg) pc,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    Origin(Regs { pc, sp, bp })
}

/// Fills `out` with return addresses, innermost first, from the frame `from` was taken in on the
/// calling thread, whose TLS area is `area`, skipping the leading ones for which `skip` is true
/// (libdmem's own frames), and zeroes the entries past the last frame found; returns what the
/// per-stack counts need of the stack.
/// Returns a hint of key 0 (no key is), having written nothing, when the walk cannot be bounded
/// to this thread's stack; the caller then uses another unwinder.
///
/// This is the replay of a remembered shape, which answers nearly every walk; everything else
/// (a walk by the rules, a new generation, borrowing a table) is out of line, so that the replay
/// keeps few registers and a short prologue.
#[inline(never)]
pub fn capture(
    area: *mut tls::Area,
    from: Origin,
    out: &mut [usize; NFRAMES],
    skip: impl Fn(usize) -> bool,
) -> Hint {
    // SAFETY: `area` is the calling thread's (the caller's word); only `capture` and
    // `forget_table` touch the thread's `Local`, and a walk is never re-entered on one thread:
    // its caller holds the reentrancy guard, and a nested allocation takes the untracked path.
    let local = unsafe { local(area) };
    let regs = from.0;
    let Some(at) = Start::of(local, &regs) else {
        return Hint::bare(0);
    };
    // SAFETY: a borrowed table is this thread's alone (see `borrow_large`).
    let replayed = match unsafe { local.large.as_mut() } {
        Some(large) => large.replay(at.hash, &at.key, regs.bp, &at.bounds, out),
        None => local.small.replay(at.hash, &at.key, regs.bp, &at.bounds, out),
    };
    if let Some(hint) = replayed {
        #[cfg(test)]
        tests::REPLAYS.with(|r| r.set(r.get() + 1));
        return hint;
    }
    // What the walk needs is found again there rather than kept here, where it would take
    // registers the replay needs.
    walk_and_keep(local, &regs, out, skip)
}

/// Where a walk starts, as a replay and a walk by the rules both need it.
struct Start {
    bounds: Bounds,
    generation: u64,
    key: Key,
    /// Picks the set of shapes the walk's shape is in.
    hash: u64,
}

impl Start {
    /// None when the stack cannot be bounded (see `capture`).
    #[inline(always)]
    fn of(local: &mut Local, regs: &Regs) -> Option<Start> {
        let hi = local.stacks.top(regs.sp)?.get();
        let bounds = Bounds { lo: regs.sp, hi };
        let generation = GENERATION.load(Ordering::Relaxed);
        if local.generation != generation {
            local.renew(generation);
        }
        let key = Key {
            pc: regs.pc,
            ra: first_return(local, regs, &bounds, generation),
        };
        let hash = ((regs.sp as u64) ^ (key.ra as u64).rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Some(Start {
            bounds,
            generation,
            key,
            hash,
        })
    }
}

impl Local {
    /// Empties every cache filled in an earlier generation: their rules may be of code that was
    /// unloaded.
    #[cold]
    #[inline(never)]
    fn renew(&mut self, generation: u64) {
        self.memo = [(0, 0); MEMO_SLOTS];
        self.origins = [(0, 0); ORIGINS];
        self.prev = [(0, 0); MAX_STEPS];
        self.small.clear();
        // SAFETY: a borrowed table is this thread's alone (see `borrow_large`).
        if let Some(large) = unsafe { self.large.as_mut() } {
            large.clear();
        }
        self.generation = generation;
    }
}

/// The return address into the first caller when the rule of the walk's first program counter
/// puts it at a fixed distance from the stack pointer, else 0.
#[inline(always)]
fn first_return(local: &mut Local, regs: &Regs, b: &Bounds, generation: u64) -> usize {
    let mut known = None;
    for &(pc, at) in &local.origins {
        if pc == regs.pc {
            known = Some(at);
            break;
        }
    }
    let at = match known {
        Some(at) => at,
        None => local.learn_origin(regs.pc, generation),
    };
    if at == 0 {
        return 0;
    }
    b.read_above(at - 1).unwrap_or(0)
}

impl Local {
    /// Remembers where the walks starting at `pc` find their first return address (see
    /// `origins`), and returns it.
    #[cold]
    #[inline(never)]
    fn learn_origin(&mut self, pc: usize, generation: u64) -> usize {
        let m = &mut self.memo[memo_index(pc)];
        let rule = if m.0 == pc && m.1 != 0 {
            Rule(m.1)
        } else {
            let rule = cached(pc, generation).unwrap_or_else(|| miss(pc, generation));
            *m = (pc, rule.0);
            rule
        };
        // The end mark has no CFA base, so it is not CFA_RSP either.
        let at = match rule.cfa_base() == CFA_RSP {
            true => usize::try_from(rule.cfa_off() + rule.ra_off()).map_or(0, |at| at + 1),
            false => 0,
        };
        self.origins[self.next_origin % ORIGINS] = (pc, at);
        self.next_origin = (self.next_origin + 1) % ORIGINS;
        at
    }
}

/// A walk no shape answered: walks by the rules into a shape of its set (see `make_way`),
/// and borrows a large table once the small one has missed often enough. Returns the walk's
/// hint for the per-stack counts.
#[cold]
#[inline(never)]
fn walk_and_keep(
    local: &mut Local,
    regs: &Regs,
    out: &mut [usize; NFRAMES],
    skip: impl Fn(usize) -> bool,
) -> Hint {
    // `capture` found the same a moment ago, so the stack is bounded.
    let Some(Start {
        bounds,
        generation,
        key,
        hash,
    }) = Start::of(local, regs)
    else {
        return Hint::bare(0);
    };
    let (prev, memo) = (&mut local.prev, &mut local.memo);
    // SAFETY: as in `capture`.
    let shape = match unsafe { local.large.as_mut() } {
        Some(large) => large.make_way(hash),
        None => local.small.make_way(hash),
    };
    full_walk(shape, key, prev, memo, *regs, &bounds, generation, out, skip);
    // A shape kept for replays (one with a key) keeps the memo of its counts too.
    let hint = if shape.pc != 0 {
        Hint::kept(shape.count_key, &mut shape.memo)
    } else {
        Hint::bare(stack_hint::key(out))
    };
    if local.large.is_null() {
        local.unreplayed += 1;
        if local.unreplayed == BORROW_AFTER {
            borrow_large(local);
        }
    }
    hint
}

/// Gives the thread a large table of shapes, if one can be had; its small table's shapes stay
/// behind, unused until the thread exits.
#[cold]
#[inline(never)]
fn borrow_large(local: &mut Local) {
    if let Some(table) = thread_tables::lend() {
        let large = table.cast::<Shapes<LARGE_SHAPES>>();
        // SAFETY: a table of TABLE_BYTES (asserted to hold a `Shapes<LARGE_SHAPES>`), page
        // aligned, now this thread's alone. Every bit pattern is a valid `Shapes` (integers and
        // arrays of them), and clearing every shape's span empties one a previous owner used.
        unsafe { (*large).clear() };
        local.large = large;
    } else {
        // Try again after as many more walks.
        local.unreplayed = 0;
    }
}

/// Called on an exiting thread when its large table goes back to the pool: later walks on the
/// thread use the small table again, and it never borrows another (one set during the key's
/// destruction would be destroyed again, or after the last round not at all).
pub fn forget_table() {
    // The area has no destructor, so it is still there while the thread's keys are destroyed.
    // SAFETY: no walk runs on this thread while its thread-specific data is destroyed.
    let local = unsafe { local(tls::area()) };
    local.large = core::ptr::null_mut();
    // Past the count that borrows, which is only ever met counting up to it.
    local.unreplayed = BORROW_AFTER;
}

/// Walks the stack by the unwind rules, filling `out` and recording in `shape` (empty) what the
/// walk depended on, under `key`, or leaving it empty when the walk cannot be replayed.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn full_walk(
    shape: &mut Shape,
    key: Key,
    prev: &mut [(usize, u64); MAX_STEPS],
    memo: &mut [(usize, u64); MEMO_SLOTS],
    mut regs: Regs,
    bounds: &Bounds,
    generation: u64,
    out: &mut [usize; NFRAMES],
    skip: impl Fn(usize) -> bool,
) {
    let sp0 = regs.sp;
    let mut rec = Recorder {
        shape,
        ok: true,
        bp_from: None,
        bp_checked: false,
    };
    // The innermost program counter is exact; every later one is a return address, which may be
    // the first byte of the next function when the call was the last instruction (a noreturn
    // callee), so its rule is looked up one byte earlier, inside the call.
    let mut lookup = regs.pc;
    let mut n = 0;
    for depth in 0..MAX_STEPS {
        // libdmem's own frames differ in number between entry points (malloc, realloc, ...), so
        // they have their own slots of `prev` and the caller's frames are counted from the first
        // one recorded: consecutive walks then meet the same frames at the same slots.
        let slot = if n == 0 {
            depth.min(OWN_SLOTS - 1)
        } else {
            OWN_SLOTS - 1 + n
        };
        let rule = rule_for(prev, memo, slot, lookup, generation);
        if rule.is_end() {
            break;
        }
        if rule.cfa_base() != CFA_RSP || rule.bp_kind() == BP_AT_RBP {
            rec.uses_bp(regs.bp, sp0);
        }
        let Some(next) = step(rule, &regs, bounds) else {
            // Where a step fails depends on where the stack ends, not only on the words read.
            rec.ok = false;
            break;
        };
        if let Some(at) = next.cfa_at {
            rec.push(at, sp0, next.regs.sp, true);
        }
        // The first return address is the key's, when the key has one: the lookup found it by
        // the same rule, at the same place.
        if depth > 0 || key.ra == 0 {
            rec.push(next.ra_at, sp0, next.regs.pc, false);
        }
        rec.reach(next.regs.sp - sp0);
        if let Some(at) = next.bp_at {
            rec.bp_from = Some(at);
            rec.bp_checked = false;
        } else if rule.bp_kind() == BP_LOST {
            // A rule based on a lost %rbp fails its step, so nothing more is needed.
            rec.bp_checked = true;
        }
        regs = next.regs;
        if regs.pc == 0 {
            break;
        }
        if n > 0 || !skip(regs.pc) {
            out[n] = regs.pc;
            n += 1;
            if n == NFRAMES {
                break;
            }
        }
        lookup = regs.pc - 1;
    }
    out[n..].fill(0);
    if rec.ok {
        let shape = rec.shape;
        shape.frames = *out;
        shape.count_key = stack_hint::key(out);
        shape.pc = key.pc;
        shape.ra = key.ra;
        let mut len = usize::from(shape.len);
        // Replays check in pairs (see `replay`): an odd last check is made twice, which costs a
        // load that cannot fail once the first one matched.
        if len % 2 == 1 {
            shape.at[len] = shape.at[len - 1];
            shape.want[len] = shape.want[len - 1];
            len += 1;
            shape.len += 1;
        }
        shape.plain = shape.bp0.is_none() && shape.at[..len].iter().all(|&at| at & RELATIVE == 0);
    } else {
        *rec.shape = NO_SHAPE;
    }
}

/// The rule for `pc` at `slot` of a walk: from the previous walk at the same slot, else the
/// thread's memo, else the shared cache, else the unwind tables.
#[inline(always)]
fn rule_for(
    prev: &mut [(usize, u64); MAX_STEPS],
    memo: &mut [(usize, u64); MEMO_SLOTS],
    slot: usize,
    pc: usize,
    generation: u64,
) -> Rule {
    let p = prev[slot];
    if p.0 == pc && p.1 != 0 {
        return Rule(p.1);
    }
    let m = &mut memo[memo_index(pc)];
    let rule = if m.0 == pc && m.1 != 0 {
        Rule(m.1)
    } else {
        let rule = match cached(pc, generation) {
            Some(rule) => rule,
            None => miss(pc, generation),
        };
        *m = (pc, rule.0);
        rule
    };
    prev[slot] = (pc, rule.0);
    rule
}

fn memo_index(pc: usize) -> usize {
    ((pc as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - MEMO_BITS)) as usize
}

/// Finds, caches and returns the rule for `pc`. An address in no loaded object ends the stack
/// without being cached, since an object may be loaded there later.
#[cold]
#[inline(never)]
fn miss(pc: usize, generation: u64) -> Rule {
    match with_object(pc, |obj| rule_from_tables(pc, obj).unwrap_or(Rule::END)) {
        Some(rule) => {
            remember(pc, generation, rule);
            rule
        }
        None => Rule::END,
    }
}

#[cfg(test)]
mod tests {
    use super::super::objects::*;
    use super::super::tables::*;
    use super::*;
    use core::ffi::c_void;

    thread_local! {
        /// Walks this thread answered by replaying a shape.
        pub static REPLAYS: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
    }

    /// Read by the tests that count replays, written by the one that bumps the generation: a
    /// generation bumped in the middle of another test empties its thread's shapes, and its
    /// replays fall short (seen once under a loaded machine: 8 of 32 walks replayed).
    static GENERATION_USE: std::sync::RwLock<()> = std::sync::RwLock::new(());

    #[test]
    fn rule_round_trips() {
        let r = Rule::new(CFA_RBP, -123_456, BP_AT_CFA, -16, -8).unwrap();
        assert_eq!(
            (r.cfa_base(), r.cfa_off(), r.bp_kind(), r.bp_off(), r.ra_off()),
            (CFA_RBP, -123_456, BP_AT_CFA, -16, -8)
        );
        assert!(!r.is_end());
        assert!(Rule::END.is_end());
        assert!(Rule::new(CFA_RSP, 8, BP_SAME, 0, -4).is_none());
    }

    #[test]
    fn expressions() {
        assert_eq!(rbp_expression(&[0x76, 0x78, 0x06]), Some((-8, true)));
        assert_eq!(rbp_expression(&[0x76, 0x00]), Some((0, false)));
        assert_eq!(rbp_expression(&[0x77, 0x08]), None);
    }

    #[inline(never)]
    fn nest(depth: usize, out: &mut [usize; NFRAMES]) -> bool {
        if depth == 0 {
            capture(tls::area(), here(), out, |_| false).key != 0
        } else {
            let r = nest(depth - 1, out);
            core::hint::black_box(depth);
            r
        }
    }

    #[test]
    fn walks_own_stack() {
        let mut out = [0; NFRAMES];
        assert!(nest(12, &mut out));
        assert!(out.iter().all(|&pc| pc != 0), "{out:x?}");
        // The same frames again, now from the cache.
        let mut again = [0; NFRAMES];
        assert!(nest(12, &mut again));
        assert_eq!(out, again);
    }

    #[test]
    fn threads_walk_too() {
        let h = std::thread::spawn(|| {
            let mut out = [0; NFRAMES];
            assert!(nest(3, &mut out));
            out
        });
        let out = h.join().unwrap();
        // nest x4, the closure, std's thread start, start_thread, clone3: at least 6 frames.
        assert!(out.iter().take(6).all(|&pc| pc != 0), "{out:x?}");
    }

    /// Both walks from one call site: `fast` by this walker, `slow` by the platform unwinder.
    #[inline(never)]
    fn both(depth: usize, fast: &mut [usize; NFRAMES], slow: &mut Vec<usize>) {
        if depth > 0 {
            both(depth - 1, fast, slow);
            core::hint::black_box(depth);
            return;
        }
        for which in 0..2 {
            if which == 0 {
                assert!(capture(tls::area(), here(), fast, |_| false).key != 0);
            } else {
                backtrace::trace(|f| {
                    slow.push(f.ip() as usize);
                    slow.len() < 64
                });
            }
        }
    }

    #[test]
    fn agrees_with_the_platform_unwinder() {
        for depth in [0, 3, 9] {
            let mut fast = [0; NFRAMES];
            let mut slow = Vec::new();
            both(depth, &mut fast, &mut slow);
            // The walk starts in `both`'s own frame, so its frames are the platform unwinder's
            // from the return address into the caller of `both` on: a contiguous run of them.
            // Below `both` lie the test, the harness and the thread's start, six frames at least.
            let k = fast.iter().position(|&pc| pc == 0).unwrap_or(NFRAMES);
            assert!(
                k >= 6 && fast[k..].iter().all(|&pc| pc == 0),
                "depth {depth}: {fast:x?}"
            );
            assert!(
                slow.windows(k).any(|w| w == &fast[..k]),
                "depth {depth}: {fast:x?} not a run of {slow:x?}"
            );
        }
    }

    /// The `dl_iterate_phdr` fallback for older glibc finds the same rules as `_dl_find_object`.
    #[test]
    fn both_object_lookups_agree() {
        let mut out = [0; NFRAMES];
        assert!(nest(3, &mut out));
        let mut compared = 0;
        for pc in out.into_iter().filter(|&pc| pc != 0) {
            let rule = |obj: &Object| rule_from_tables(pc - 1, obj).unwrap_or(Rule::END);
            let a = with_object(pc - 1, rule);
            let b = with_object_iterate(pc - 1, rule);
            assert_eq!(a, b, "{pc:#x}");
            compared += a.is_some() as usize;
        }
        assert!(compared >= 5);
        // `_dl_find_object` plus the ELF header answered, not the fallback.
        let find = find_object_fn().expect("glibc 2.35 or later");
        for pc in out.into_iter().filter(|&pc| pc != 0) {
            let mut r = core::mem::MaybeUninit::<DlFindObject>::uninit();
            // SAFETY: as in `with_object`.
            assert_eq!(unsafe { find(pc as *mut c_void, r.as_mut_ptr()) }, 0);
            // SAFETY: filled by the call above.
            let r = unsafe { r.assume_init() };
            let obj = object_from_header(r.map_start as usize, r.map_end as usize);
            assert!(obj.is_some_and(|o| o.segment_end(pc).is_some()), "{pc:#x}");
        }
        // An address in no object.
        assert_eq!(with_object_iterate(16, |_| Rule::END), None);
    }

    #[test]
    fn walks_after_invalidation() {
        let _alone = GENERATION_USE.write().unwrap_or_else(|e| e.into_inner());
        let mut out = [0; NFRAMES];
        assert!(nest(5, &mut out));
        invalidate();
        let mut again = [0; NFRAMES];
        assert!(nest(5, &mut again));
        // The same frames but one: the two calls of `nest` above return to different places.
        assert_eq!(out[..5], again[..5]);
        assert_ne!(out[5], again[5]);
        assert_eq!(out[6..], again[6..]);
    }

    /// Walks from a stack `level` calls deep, each call through `left` or `right` as the bits of
    /// `path` say.
    #[inline(never)]
    fn fork_path(path: usize, level: usize, out: &mut [usize; NFRAMES]) -> bool {
        if level == 0 {
            capture(tls::area(), here(), out, |_| false).key != 0
        } else if path & 1 == 0 {
            left(path >> 1, level - 1, out)
        } else {
            right(path >> 1, level - 1, out)
        }
    }

    #[inline(never)]
    fn left(path: usize, level: usize, out: &mut [usize; NFRAMES]) -> bool {
        let r = fork_path(path, level, out);
        core::hint::black_box(1);
        r
    }

    #[inline(never)]
    fn right(path: usize, level: usize, out: &mut [usize; NFRAMES]) -> bool {
        let r = fork_path(path, level, out);
        core::hint::black_box(2);
        r
    }

    #[inline(never)]
    fn nest_then_fork(depth: usize, path: usize, out: &mut [usize; NFRAMES]) -> bool {
        if depth == 0 {
            fork_path(path, 2, out)
        } else {
            let r = nest_then_fork(depth - 1, path, out);
            core::hint::black_box(depth);
            r
        }
    }

    /// Walks from `sites` distinct call stacks (at most 32), `rounds` times over, on a new
    /// thread; returns the replays of the last round and the address of the thread's large table
    /// then (0 for none). Stack `i` is `i % 8` calls of `nest_then_fork` and two of `left` or
    /// `right` below: all differ within their innermost ten frames, and they start from eight
    /// stack depths with two first callers, so they spread over the table as a program's do.
    fn many_sites(sites: usize, rounds: usize) -> (usize, usize) {
        #[inline(never)]
        fn walk_at(i: usize) -> [usize; NFRAMES] {
            let mut out = [0; NFRAMES];
            assert!(nest_then_fork(i % 8, i / 8, &mut out));
            out
        }
        std::thread::spawn(move || {
            let mut first = [[0; NFRAMES]; 32];
            let mut replays = 0;
            for round in 0..rounds {
                let before = REPLAYS.get();
                // One call site for every round, so every round walks the same stacks, from a
                // loop that keeps nothing of the heap in its registers: a heap address left in
                // %rbp, which a frame's rule may read, would make each round's stack differ.
                let mut got = [[0; NFRAMES]; 32];
                for (i, g) in got.iter_mut().enumerate().take(sites) {
                    *g = walk_at(i);
                }
                replays = REPLAYS.get() - before;
                if round == 0 {
                    first = got;
                } else {
                    assert_eq!(got, first, "round {round}");
                }
            }
            // SAFETY: no walk runs on this thread meanwhile.
            let large = unsafe { local(tls::area()) }.large as usize;
            (replays, large)
        })
        .join()
        .unwrap()
    }

    /// A thread that walks from more stacks than its small table holds borrows a large one, which
    /// then answers nearly every walk; when it exits, the next thread gets the same table.
    #[test]
    fn busy_threads_borrow_a_large_table() {
        let _same = GENERATION_USE.read().unwrap_or_else(|e| e.into_inner());
        thread_tables::init(forget_table);
        // Thirty-two shapes, too many for the small table. It replays up to SMALL_SHAPES of
        // them a round (as many as its sets happen to keep, which the stack's address decides),
        // so the borrow can take BORROW_AFTER / (32 - SMALL_SHAPES) rounds; then one round fills
        // the large table and the last replays from it.
        let rounds = 3 + BORROW_AFTER as usize / (32 - SMALL_SHAPES);
        let (replays, table) = many_sites(32, rounds);
        assert!(table != 0, "no large table");
        // The large table's sets keep four shapes each, picked by a hash of the stack pointer,
        // which the thread's (random) stack address decides: a set given more shapes than it
        // holds misses them in turn every round, so how many replay varies from run to run
        // (14 to 32 here). More than the small table has room for shows the large one answers.
        assert!(replays > SMALL_SHAPES, "{replays} of 32 walks replayed");
        // A thread that walks from one stack never borrows.
        let (replays, large) = many_sites(1, 2 * BORROW_AFTER as usize);
        assert!(large == 0 && replays == 1);
        // The first thread's table went back to the pool at its exit and is lent again, its
        // old shapes emptied: the walks are still right (checked inside) and replayed.
        let (replays, again) = many_sites(32, rounds);
        assert!(again != 0 && replays > SMALL_SHAPES, "{replays}");
        assert_eq!(again, table);
    }

    #[inline(never)]
    fn site_a(out: &mut [usize; NFRAMES]) -> bool {
        let r = nest(4, out);
        core::hint::black_box(1);
        r
    }

    #[inline(never)]
    fn site_b(out: &mut [usize; NFRAMES]) -> bool {
        let r = nest(4, out);
        core::hint::black_box(2);
        r
    }

    /// Walks from the same stack depth through different callers, alternating, so each walk
    /// starts where the previous one did, with the same first caller: both shapes have the same
    /// key and share a set, and a replay of the other walk's shape must notice the changed
    /// return address.
    #[test]
    fn replay_notices_a_changed_caller() {
        let _same = GENERATION_USE.read().unwrap_or_else(|e| e.into_inner());
        let (mut a, mut b) = ([0; NFRAMES], [0; NFRAMES]);
        assert!(site_a(&mut a));
        assert!(site_b(&mut b));
        // Frames 0..4 are in `nest`, 4 in `site_a` or `site_b`, 5 in this function (at a call
        // site of its own for each call).
        assert_ne!(a[4], b[4]);
        let replays = REPLAYS.get();
        for i in 0..core::hint::black_box(100) {
            let mut out = [0; NFRAMES];
            if i % 2 == 0 {
                assert!(site_a(&mut out));
                assert_eq!(out[..5], a[..5], "walk {i}");
            } else {
                assert!(site_b(&mut out));
                assert_eq!(out[..5], b[..5], "walk {i}");
            }
        }
        // Both shapes stay in their set, so after the first two walks each is answered by a
        // replay, having first been offered the other's shape about half the time; the frames
        // checked above show that shape was never taken.
        assert!(
            REPLAYS.get() >= replays + 90,
            "{} replays",
            REPLAYS.get() - replays
        );
        let replays = REPLAYS.get();
        // Walks from the same caller are (black_box keeps the loop a loop, with one call site).
        for _ in 0..core::hint::black_box(10) {
            let mut out = [0; NFRAMES];
            assert!(site_a(&mut out));
            assert_eq!(out[..5], a[..5]);
        }
        assert!(
            REPLAYS.get() >= replays + 9,
            "{} replays",
            REPLAYS.get() - replays
        );
    }
}
