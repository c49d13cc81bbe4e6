//! The one allocate, reallocate and release path behind every exported entry point.
//!
//! Order on the hot path: allocate from the backend, fill the header (the stack is captured here,
//! before the list is touched), then link it on the thread's list. Release claims the header and
//! unlinks it, or hands it to the thread that owns its list (or, when nothing is recorded, claims
//! it atomically), then frees. Blocks other threads handed over come back from the list
//! operations and are freed here too (`lists.rs`). errno is
//! left as the caller had it on success.

use crate::analysis::carried::op;
use crate::bootstrap::{self, Real};
use crate::corrupt::{self, Damage};
use crate::diag::{self, BadFree};
use crate::header::{
    self, Header, BASE_ALIGN, HEADER_SIZE, MAGIC_FREED, MAGIC_HANDED, MAGIC_LIVE, SIZE_BITS, SIZE_MASK,
};
use crate::lists::Refused;
use crate::stack_hint::{self, Hint};
use crate::unwind::Origin;
use crate::{deferred, history, lists, options, stack_counts, thread, unwind};

/// The calling thread's errno, found once per call: saved on entry and put back on success, since
/// the backend and our own slow paths may change it.
struct Errno(*mut i32, i32);

impl Errno {
    #[inline(always)]
    fn save() -> Errno {
        // SAFETY: the allocator is resolved (every caller found `bootstrap::real`), so the
        // offset of errno was learnt; the slot is the calling thread's, valid for its lifetime.
        unsafe {
            let slot = crate::tls::errno_slot();
            Errno(slot, *slot)
        }
    }

    #[inline(always)]
    fn restore(&self) {
        // SAFETY: the slot found in `save`, on this same thread.
        unsafe { *self.0 = self.1 }
    }

    fn fail(&self, code: i32) -> *mut u8 {
        // SAFETY: as in `restore`.
        unsafe { *self.0 = code };
        core::ptr::null_mut()
    }
}

/// After a list changed: a fatal signal's report that waited for this thread to leave its list
/// lock runs now (`deferred.rs`).
#[inline(always)]
fn after_change() {
    deferred::run_pending();
}

fn enomem() -> *mut u8 {
    // SAFETY: __errno_location always returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = libc::ENOMEM };
    core::ptr::null_mut()
}

/// The stack a new header gets: walked from an origin, or already taken (by realloc, before the
/// old block went away), with what the per-stack counts need of it.
enum Stack<'a> {
    From(Origin),
    Taken(&'a [usize; header::NFRAMES], Hint),
}

/// Walks the allocating stack into `frames` on the thread `cur` is the area of; returns what the
/// per-stack counts need of it.
#[inline(always)]
fn record(cur: thread::Current, from: Origin, frames: &mut [usize; header::NFRAMES]) -> Hint {
    #[cfg(feature = "bench-no-unwind")]
    {
        let _ = (cur, from);
        const ONES: [usize; header::NFRAMES] = [1; header::NFRAMES];
        *frames = ONES;
        return Hint::bare(const { stack_hint::key(&ONES) });
    }
    #[allow(unreachable_code)]
    match cur.enter() {
        Some(_g) => unwind::capture(cur, from, frames),
        // A nested call from inside libdmem (the unwinder's first use): no stack.
        None => {
            *frames = [0; header::NFRAMES];
            stack_hint::NO_STACK
        }
    }
}

/// Fills in a header for a block that is about to be handed out, and links it. `cur` is the
/// calling thread's area, whose record of the operation in flight already names `hdr`.
///
/// # Safety
/// `hdr` must be the header slot of a fresh backend block of at least `HEADER_SIZE + size` bytes.
unsafe fn publish(
    cur: thread::Current,
    hdr: *mut Header,
    size: usize,
    align_log2: u32,
    stack: Stack,
) -> *mut u8 {
    let opts = options::get();
    // SAFETY: the caller hands us exclusive use of the header slot.
    let h = unsafe { &mut *hdr };
    // `lists::link` writes the list's index.
    h.size_word = Header::pack_size_word(size, 0, align_log2);
    h.tid = cur.tid();
    h.magic = header::MAGIC_LIVE ^ header::tag(hdr);
    if opts.record {
        let hint = match stack {
            Stack::Taken(f, hint) => {
                h.frames = *f;
                hint
            }
            Stack::From(from) => record(cur, from, &mut h.frames),
        };
        if opts.count_allocs {
            stack_counts::allocated(hint, h, header::to_user(hdr));
        }
        // SAFETY: the header is fully written and on no list.
        bootstrap::give_back(unsafe { lists::link(cur, hdr) });
        if opts.history_allocs && history_on() {
            remember_alloc(h, hdr);
        }
    } else {
        h.next = core::ptr::null_mut();
        h.prev = core::ptr::null_mut();
        h.frames = [0; header::NFRAMES];
    }
    header::to_user(hdr)
}

/// Allocates `size` bytes aligned to `1 << align_log2` (0 for the ordinary 16), zeroed if asked,
/// recording the stack above `from`. Returns null with errno ENOMEM on failure.
#[inline(always)]
pub fn allocate(size: usize, align_log2: u32, zeroed: bool, from: Origin) -> *mut u8 {
    let Some(real) = bootstrap::real() else {
        return arena(size, 1 << align_log2);
    };
    if size as u64 > SIZE_MASK {
        return enomem();
    }
    let saved = Errno::save();
    // Alignments past 2^47 are refused like the sizes; glibc fails them with ENOMEM too.
    if align_log2 >= SIZE_BITS {
        return saved.fail(libc::ENOMEM);
    }
    let total = if align_log2 == 0 {
        size.max(MIN_USABLE) + HEADER_SIZE
    } else {
        size.max(MIN_USABLE) + header::aligned_extra(align_log2)
    };
    // SAFETY: calling the next allocator with sizes that cannot overflow (size and alignment
    // below 2^48).
    let base = unsafe {
        if zeroed {
            (real.calloc)(1, total)
        } else {
            (real.malloc)(total)
        }
    };
    if base.is_null() {
        return saved.fail(libc::ENOMEM);
    }
    let hdr = if align_log2 == 0 {
        header::from_base(base.cast())
    } else {
        // SAFETY: a fresh backend block of `size + aligned_extra` bytes or more.
        unsafe { header::place_aligned(base.cast(), align_log2) }
    };
    // Found once for the record, the thread id, the walk and the list.
    let cur = thread::current();
    // Inside a realloc (which moves a block through here) the realloc's record goes on, now on
    // the new block; otherwise this allocation's own begins.
    let outer = cur.op() != op::NONE;
    if outer {
        cur.step(hdr.cast());
    } else {
        let op = if align_log2 != 0 {
            op::MEMALIGN
        } else if zeroed {
            op::CALLOC
        } else {
            op::MALLOC
        };
        cur.begin(op, hdr.cast());
    }
    // SAFETY: a fresh backend block of `total` bytes, so the header slot and user bytes are ours.
    let user = unsafe { publish(cur, hdr, size, align_log2, Stack::From(from)) };
    saved.restore();
    after_change();
    if !outer {
        done(cur, user);
    }
    user
}

/// Ends the record of an allocation once its user pointer is in hand: from here on the thread
/// holds the block by that pointer (in a register), as the program will.
#[inline(always)]
fn done(cur: thread::Current, user: *mut u8) {
    // Makes the compiler have the user pointer in a register before the record is cleared,
    // rather than keep only the header's address and add the header's size after. No code.
    // SAFETY: an empty instruction that reads a register and touches nothing.
    unsafe { core::arch::asm!("/* {0} */", in(reg) user, options(nostack, preserves_flags)) };
    cur.end();
}

/// The least a block can hold: glibc's smallest chunk (32 bytes) less its size word. Asking the
/// backend for at least this much past the header gives every block at least glibc's usable
/// size, as a program that reads `malloc_usable_size(malloc(0))` finds bare (24); larger
/// requests already match glibc's, since the header is a whole number of its 16-byte steps.
const MIN_USABLE: usize = 24;

fn arena(size: usize, align: usize) -> *mut u8 {
    let p = bootstrap::arena_alloc(size, align);
    if p.is_null() {
        enomem()
    } else {
        p
    }
}

/// What became of a pointer given to free or realloc.
enum Claim {
    /// Its header is claimed and off its list: the block is the caller's to give back.
    Mine(*mut Header),
    /// Handed to the thread that owns its list, which gives it back.
    Handed,
    /// Live on a list another thread owns, left there (a realloc asked not to hand it over).
    Elsewhere(*mut Header),
    /// A bad free, reported and ignored.
    Bad,
}

/// Whether `user` can be a pointer we handed out: aligned as every one of ours, with room for a
/// header in front.
fn plausible(user: *mut u8) -> bool {
    (user as usize).is_multiple_of(BASE_ALIGN) && (user as usize) >= HEADER_SIZE
}

/// Whether frees (and, with `history-allocs`, allocations) go into the free history.
fn history_on() -> bool {
    let opts = options::get();
    opts.history != 0 && opts.record
}

/// Validates a pointer given to free or realloc by the thread whose area is `cur` and claims its
/// header: when recording, also takes it off its list, or hands it to the list's owner when
/// `hand_over`.
#[inline(always)]
fn claim(cur: thread::Current, func: &str, user: *mut u8, hand_over: bool) -> Claim {
    let opts = options::get();
    if !plausible(user) {
        diag::bad_free(func, user, BadFree::Foreign, None, opts.ignore_bad_free);
        return Claim::Bad;
    }
    let hdr = header::from_user(user);
    let refused = if opts.record {
        // SAFETY: a pointer we handed out has a header right before it; for a foreign pointer
        // the read may see anything (its magic then fails) and the check above kept it aligned.
        match unsafe { lists::claim(cur, hdr, hand_over) } {
            Ok(lists::Claimed::Mine(d)) => {
                bootstrap::give_back(d);
                return Claim::Mine(hdr);
            }
            Ok(lists::Claimed::Handed(d)) => {
                bootstrap::give_back(d);
                return Claim::Handed;
            }
            Err(Refused::Elsewhere) => return Claim::Elsewhere(hdr),
            Err(Refused::Magic(m)) => m,
            Err(Refused::Foreign) => MAGIC_LIVE,
        }
    } else {
        // SAFETY: as above.
        match unsafe { header::claim(hdr) } {
            Ok(()) => return Claim::Mine(hdr),
            Err(m) => m,
        }
    };
    if refused == MAGIC_FREED || refused == MAGIC_HANDED {
        // SAFETY: the magic says this was our header; its other fields are still readable.
        diag::bad_free(
            func,
            user,
            BadFree::Double,
            Some(unsafe { &*hdr }),
            opts.ignore_bad_free,
        );
    } else {
        diag::bad_free(func, user, BadFree::Foreign, None, opts.ignore_bad_free);
    }
    Claim::Bad
}

/// Undoes a claim when a realloc fails and the old block stays live.
fn unclaim(hdr: *mut Header) {
    // SAFETY: we hold the claim, so no other thread touches this header.
    unsafe {
        if options::get().record {
            bootstrap::give_back(lists::restore(hdr));
        } else {
            header::magic(hdr).store(header::MAGIC_LIVE, core::sync::atomic::Ordering::Release);
        }
    }
}

/// An allocation, for the history (`history-allocs`).
#[cold]
#[inline(never)]
fn remember_alloc(h: &Header, hdr: *mut Header) {
    let p = history::Pending {
        addr: header::to_user(hdr) as usize,
        size: h.size(),
        alloc_tid: h.tid,
        kind: history::KIND_ALLOC,
        alloc_frames: h.frames,
        free_frames: [0; header::NFRAMES],
    };
    history::record(&p, options::get().history);
}

/// A free the history will record if the block turns out to be live: its event written in place
/// in the thread's ring, from the header while the block is surely there and with the stack of
/// the free walked from `from` straight into it, for the caller to publish once the block is
/// claimed. None for a pointer that has no live header, or when there is no ring.
#[cold]
#[inline(never)]
fn pending_free(user: *mut u8, from: Origin) -> Option<history::Slot> {
    if !plausible(user) {
        return None;
    }
    let hdr = header::from_user(user);
    // SAFETY: as in `claim`: a pointer of ours has its header right before it, and the magic
    // says whether it does.
    if unsafe { header::magic(hdr) }.load(core::sync::atomic::Ordering::Relaxed) != MAGIC_LIVE {
        return None;
    }
    // Found once for the slot's list and thread, the guard and the walk.
    let cur = thread::current();
    let mut slot = history::Slot::claim(cur, options::get().history)?;
    // SAFETY: a live header (checked just above).
    slot.free_of(unsafe { &*hdr }, user);
    record(cur, from, &mut slot.event().free_frames);
    Some(slot)
}

/// free(): null is a no-op, arena blocks are never freed. With a history, the free is recorded
/// with the stack above `from`.
#[inline(always)]
pub fn release(user: *mut u8, from: Origin) {
    if user.is_null() || bootstrap::arena_contains(user) {
        return;
    }
    let Some(real) = bootstrap::real() else { return };
    let saved = Errno::save();
    let pending = if history_on() {
        pending_free(user, from)
    } else {
        None
    };
    let cur = thread::current();
    cur.begin(op::FREE, header::from_user(user).cast());
    let claimed = claim(cur, "free", user, true);
    if let (Some(slot), Claim::Mine(_) | Claim::Handed) = (pending, &claimed) {
        slot.publish();
    }
    if let Claim::Mine(hdr) = claimed {
        if options::get().count_allocs {
            // SAFETY: claimed, so ours, and not yet given back.
            stack_counts::freed(unsafe { &*hdr }, user);
        }
        bootstrap::dispose(real, hdr);
    }
    cur.end();
    saved.restore();
    after_change();
}

/// The usable size of a block we handed out: what the backend grants minus our lead.
pub fn usable_size(user: *mut u8) -> usize {
    if user.is_null() {
        return 0;
    }
    if bootstrap::arena_contains(user) {
        return bootstrap::arena_size(user);
    }
    let Some(real) = bootstrap::real() else { return 0 };
    if !(user as usize).is_multiple_of(BASE_ALIGN) {
        return 0;
    }
    let hdr = header::from_user(user);
    // SAFETY: as in `claim`, the header of one of our blocks precedes it; its magic is read as
    // an atomic since a racing free may be storing to it.
    if unsafe { header::magic(hdr) }.load(core::sync::atomic::Ordering::Relaxed) != header::MAGIC_LIVE {
        return 0;
    }
    usable_of(real, hdr)
}

/// What the backend grants a block beyond our lead, never less than was asked for.
fn usable_of(real: &Real, hdr: *mut Header) -> usize {
    // SAFETY: `hdr` is a header of ours (live, or claimed by the caller).
    let h = unsafe { &*hdr };
    match real.usable_size {
        // SAFETY: the base pointer is what the backend returned for this block, still
        // allocated.
        Some(f) => {
            // SAFETY: as above.
            let Some(base) = (unsafe { header::base_of(hdr, h.align_log2()) }) else {
                corrupt::abort(hdr.cast(), Damage::BaseWord)
            };
            let lead = header::to_user(hdr) as usize - base as usize;
            // SAFETY: the base pointer is what the backend returned for this block, still
            // allocated.
            unsafe { f(base.cast()) }.saturating_sub(lead).max(h.size())
        }
        None => h.size(),
    }
}

/// realloc of a live block on a list another thread owns: the block moves to a new one on this
/// thread's list, and the old one is freed (handed over) once copied.
fn move_from_elsewhere(real: &Real, hdr: *mut Header, user: *mut u8, size: usize, from: Origin) -> *mut u8 {
    let new = allocate(size, 0, false, from);
    if new.is_null() {
        return new;
    }
    let keep = usable_of(real, hdr).min(size);
    // SAFETY: the old block is live and holds `usable_size` bytes, the new one `size`; they are
    // distinct.
    unsafe { core::ptr::copy_nonoverlapping(user, new, keep) };
    release(user, from);
    new
}

/// realloc(): glibc's contract, including realloc(NULL, n) and realloc(p, 0) freeing p. A moved
/// or resized block records the stack above `from`.
pub fn reallocate(user: *mut u8, size: usize, from: Origin) -> *mut u8 {
    if user.is_null() {
        return allocate(size, 0, false, from);
    }
    if size == 0 {
        release(user, from);
        return core::ptr::null_mut();
    }
    if bootstrap::arena_contains(user) {
        let new = allocate(size, 0, false, from);
        if !new.is_null() {
            let n = bootstrap::arena_size(user).min(size);
            // SAFETY: both blocks hold at least n bytes and are distinct.
            unsafe { core::ptr::copy_nonoverlapping(user, new, n) };
        }
        return new;
    }
    let Some(real) = bootstrap::real() else {
        return core::ptr::null_mut();
    };
    let cur = thread::current();
    cur.begin(op::REALLOC, header::from_user(user).cast());
    let hdr = match claim(cur, "realloc", user, false) {
        Claim::Mine(hdr) => hdr,
        Claim::Elsewhere(hdr) => {
            cur.end();
            return move_from_elsewhere(real, hdr, user, size, from);
        }
        Claim::Handed | Claim::Bad => {
            cur.end();
            return core::ptr::null_mut();
        }
    };
    let new = realloc_claimed(real, cur, hdr, user, size, from);
    done(cur, new);
    new
}

/// realloc of a block this thread claimed (off its list), with the realloc's record begun on
/// `cur`, the calling thread's area: the block moves or grows in place, or goes back on the list
/// when that fails.
#[inline(always)]
fn realloc_claimed(
    real: &Real,
    cur: thread::Current,
    hdr: *mut Header,
    user: *mut u8,
    size: usize,
    from: Origin,
) -> *mut u8 {
    // SAFETY: we own the claimed header.
    let align_log2 = unsafe { (*hdr).align_log2() };
    let saved = Errno::save();
    if align_log2 != 0 {
        // The backend's realloc would not keep the alignment or our lead: move by hand.
        let new = allocate(size, 0, false, from);
        if new.is_null() {
            cur.step(hdr.cast());
            unclaim(hdr);
            return new;
        }
        // glibc keeps what was written up to malloc_usable_size, not just the requested size.
        let keep = usable_of(real, hdr).min(size);
        // SAFETY: the old block holds `usable_size` bytes, the new one `size`; they are distinct.
        unsafe { core::ptr::copy_nonoverlapping(user, new, keep) };
        if history_on() {
            // SAFETY: we own the claimed header; `new` is a live block of ours, whose header
            // holds this realloc's stack.
            let (old, frames) = unsafe {
                (
                    history::Pending::free_of(&*hdr, user),
                    (*header::from_user(new)).frames,
                )
            };
            remember_moved(old, &frames);
        }
        bootstrap::dispose(real, hdr);
        saved.restore();
        return new;
    }
    if size as u64 > SIZE_MASK {
        unclaim(hdr);
        return saved.fail(libc::ENOMEM);
    }
    // The stack is taken before the backend's realloc, while no lock is held and the old block is
    // still intact should the realloc fail.
    let mut frames = [0usize; header::NFRAMES];
    let hint = if options::get().record {
        record(thread::current(), from, &mut frames)
    } else {
        stack_hint::NO_STACK
    };
    // The old block's header as it was, for the history, should the block move.
    let old = history_on().then(|| {
        // SAFETY: we own the claimed header.
        history::Pending::free_of(unsafe { &*hdr }, user)
    });
    // SAFETY: hdr is the base of an ordinary block from this backend.
    let base = unsafe { (real.realloc)(hdr.cast(), size.max(MIN_USABLE) + HEADER_SIZE) };
    if base.is_null() {
        // The old block is untouched: put it back as it was.
        cur.step(hdr.cast());
        unclaim(hdr);
        return saved.fail(libc::ENOMEM);
    }
    cur.step(base.cast());
    // SAFETY: a fresh (or resized) backend block of size + HEADER_SIZE bytes.
    let new = unsafe { publish(cur, base.cast(), size, 0, Stack::Taken(&frames, hint)) };
    if let (Some(old), true) = (old, new != user) {
        // A block that moved was freed where it was, by this realloc.
        remember_moved(old, &frames);
    }
    saved.restore();
    after_change();
    new
}

/// A realloc that moved a block: the old block's free, for the history, at the realloc's stack.
fn remember_moved(mut old: history::Pending, frames: &[usize; header::NFRAMES]) {
    old.free_frames = *frames;
    history::record(&old, options::get().history);
}
