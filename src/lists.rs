//! The live-block lists: doubly-linked lists, each owned by one thread, with counters.
//!
//! A thread takes a list of its own at its first allocation and changes it with plain stores:
//! linking a new block, unlinking a block it frees. No atomic read-modify-write and no lock is
//! on that path. A block freed by another thread is handed to the list's owner instead: the
//! freeing thread moves the block's magic to handed (one compare-and-swap, which decides between
//! racing frees) and pushes it on the list's inbox; the owner unlinks the inbox's blocks on its
//! next call and their memory goes back then.
//!
//! A list can be taken from its owner, under its lock, on the rare paths that need every list
//! still: a report, a fork, a free that finds the owner idle with much handed to it, the owner's
//! own exit. The owner marks itself busy around each change (a plain store) and then reads the
//! list's mode; a taker writes the mode, then makes every thread of the process pass a full
//! memory barrier (`membarrier`, the asymmetric half of the fence, so the owner's half costs
//! nothing), then waits for busy to clear. After that the list is changed under its lock by
//! anyone until the owner comes back and reclaims it. Where `membarrier` is missing, the owner
//! pays a real fence instead.
//!
//! Threads beyond `NOWNED` at once share the remaining lists under their locks. The lists are a
//! static array so that a debugger finds them through the layout descriptor; a sequence counter
//! per list lets a reader outside the process read one whole without stopping anything.

pub mod walk;

use crate::clock::now_ns;
use crate::corrupt::{self, Damage};
use crate::header::{self, Header, MAGIC_FREED, MAGIC_HANDED, MAGIC_LIVE};
use crate::spinlock::RawMutex;
use crate::thread;
use core::cell::UnsafeCell;
use core::sync::atomic::{
    compiler_fence, fence, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

pub const NLISTS: usize = 256;
/// Lists a thread can own; the rest are shared by the threads beyond that many.
pub const NOWNED: usize = 192;

/// Changed under the lock by any thread; an ownable list in this mode has no owner.
const LOCKED: u32 = 0;
/// Changed by its owner alone, without the lock; other threads hand their frees over.
const OWNED: u32 = 1;
/// Taken from its owner: changed under the lock until the owner reclaims it on its next call.
const TAKEN: u32 = 2;

/// Blocks or bytes handed to an owner, not yet unlinked, past which the next free from another
/// thread takes the list over: an owner that sleeps must not keep memory from the backend.
const TAKE_OVER_BLOCKS: u64 = 4096;
const TAKE_OVER_BYTES: u64 = 64 << 20;

/// One list. The owner's fields fill the first cache line and what other threads write when
/// they hand a block over the second, so a hand-over does not take the owner's line away;
/// aligned to two lines so that neighbouring lists never share one (adjacent-line prefetch
/// pairs lines on x86).
#[repr(C, align(128))]
pub struct List {
    pub head: UnsafeCell<*mut Header>,
    pub live_blocks: UnsafeCell<u64>,
    pub live_bytes: UnsafeCell<u64>,
    pub allocs: UnsafeCell<u64>,
    pub frees: UnsafeCell<u64>,
    /// A sequence counter for readers outside the process (`dmem top` reads a running process's
    /// lists without stopping it): odd while a change is under way, bumped again when it is
    /// done. A reader that sees the same even value before and after walking a list saw it
    /// whole. One thread changes a list at a time, so a plain load and store suffice; it is
    /// atomic only so the stores are ordered around the pointer writes they bracket.
    pub changes: AtomicU64,
    mode: AtomicU32,
    /// Set by the owner around each change it makes without the lock.
    busy: AtomicU32,
    /// Kernel thread id of the owner, 0 when there is none.
    pub owner: AtomicU32,
    lock: RawMutex,
    pub hand: Hand,
}

/// A list's hand-over side. The live counters include handed blocks until they are unlinked;
/// readers count `handed - drained` of them as freed.
#[repr(C, align(64))]
pub struct Hand {
    /// Blocks freed by other threads while the list was owned, linked through `inbox_next`.
    inbox: AtomicPtr<Header>,
    /// Blocks handed over, and their bytes, ever (by the handing threads).
    pub handed_blocks: AtomicU64,
    pub handed_bytes: AtomicU64,
    /// Of those, unlinked (by the thread changing the list).
    pub drained_blocks: AtomicU64,
    pub drained_bytes: AtomicU64,
}

const _: () = assert!(core::mem::size_of::<List>() == 128);
const _: () = assert!(core::mem::offset_of!(List, hand) == 64);

// SAFETY: the plain fields are written by one thread at a time: the owner while the list is
// owned, a holder of the lock otherwise (see the module comment); the rest are atomics.
unsafe impl Sync for List {}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: List = List {
    head: UnsafeCell::new(core::ptr::null_mut()),
    live_blocks: UnsafeCell::new(0),
    live_bytes: UnsafeCell::new(0),
    allocs: UnsafeCell::new(0),
    frees: UnsafeCell::new(0),
    changes: AtomicU64::new(0),
    mode: AtomicU32::new(LOCKED),
    busy: AtomicU32::new(0),
    owner: AtomicU32::new(0),
    lock: RawMutex::INIT,
    hand: Hand {
        inbox: AtomicPtr::new(core::ptr::null_mut()),
        handed_blocks: AtomicU64::new(0),
        handed_bytes: AtomicU64::new(0),
        drained_blocks: AtomicU64::new(0),
        drained_bytes: AtomicU64::new(0),
    },
};

pub static LISTS: [List; NLISTS] = [EMPTY; NLISTS];

/// Where lists are handed out from, round-robin.
static NEXT_LIST: AtomicUsize = AtomicUsize::new(0);

/// How a taker makes owners' stores visible: not yet chosen, `membarrier`, or a fence on the
/// owner's side too.
static BARRIER: AtomicU8 = AtomicU8::new(0);
const BARRIER_MEMBARRIER: u8 = 1;
const BARRIER_FENCE: u8 = 2;
static SETUP: RawMutex = RawMutex::INIT;
/// The key whose destructor gives an exiting thread's list up; valid once KEY_READY is set.
static KEY: AtomicU32 = AtomicU32::new(0);
static KEY_READY: AtomicU8 = AtomicU8::new(0);

/// Blocks unlinked from an inbox, whose memory the caller gives back to the backend; linked
/// through `inbox_next`.
#[must_use]
pub struct Drained(*mut Header);

impl Drained {
    pub const NONE: Drained = Drained(core::ptr::null_mut());
}

impl Iterator for Drained {
    type Item = *mut Header;

    fn next(&mut self) -> Option<*mut Header> {
        let h = self.0;
        if h.is_null() {
            return None;
        }
        // SAFETY: every header of a drained chain was handed (its inbox slot written) and is now
        // the caller's alone. The slot is cleared, so that a later double free's message does
        // not show the link as the outermost allocation frame.
        unsafe {
            self.0 = header::inbox_next(h);
            header::set_inbox_next(h, core::ptr::null_mut());
        }
        Some(h)
    }
}

/// What a free did with a live block.
pub enum Claimed {
    /// The block is off its list and the caller's to give back.
    Mine(Drained),
    /// The block went to its list's owner, which gives it back.
    Handed(Drained),
}

/// Why a block could not be claimed.
#[derive(Debug)]
pub enum Refused {
    /// Its magic says it is not live: freed, handed, or never ours.
    Magic(u32),
    /// Its header names no list: a foreign pointer.
    Foreign,
    /// It is on a list another thread owns, and the caller asked not to hand it over.
    Elsewhere,
}

/// The sequence counter's bracket around a change, by the one thread changing the list.
#[inline(always)]
fn changing(l: &List) {
    let c = &l.changes;
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    // The odd value must be visible before any pointer write of the change.
    fence(Ordering::Release);
}

#[inline(always)]
fn changed(l: &List) {
    let c = &l.changes;
    // Release: the change's pointer writes are visible before the even value.
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
}

/// Owner side of the barrier: marks the owner busy, then says whether it still owns the list.
#[inline(always)]
fn enter_owned(l: &List) -> bool {
    l.busy.store(1, Ordering::Relaxed);
    if BARRIER.load(Ordering::Relaxed) == BARRIER_MEMBARRIER {
        // The taker's membarrier stands in for a fence here.
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
    if l.mode.load(Ordering::Relaxed) == OWNED {
        return true;
    }
    l.busy.store(0, Ordering::Release);
    false
}

#[inline(always)]
fn leave_owned(l: &List) {
    l.busy.store(0, Ordering::Release);
}

/// Holds a list's lock for a scope.
struct Locked<'a>(&'a List);

impl<'a> Locked<'a> {
    fn new(list: &'a List) -> Self {
        list.lock.lock();
        Locked(list)
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: this guard took the lock in `new`, on this thread.
        unsafe { self.0.lock.unlock() };
    }
}

/// Links `hdr` at the head; the caller changes the list (owner or lock holder) and brackets.
///
/// # Safety
/// `hdr` is a fully written header on no list.
#[inline(always)]
unsafe fn push_front(l: &List, hdr: *mut Header) {
    // SAFETY: passed on; every header on the list is valid, and this thread alone changes it.
    unsafe {
        let h = &mut *hdr;
        let head = *l.head.get();
        h.prev = core::ptr::null_mut();
        h.next = head;
        if !head.is_null() {
            (*head).prev = hdr;
        }
        *l.head.get() = hdr;
        *l.live_blocks.get() += 1;
        *l.live_bytes.get() += h.size() as u64;
        *l.allocs.get() += 1;
    }
}

/// Bits a header's address never has: its 16-byte alignment, and the top byte, which no
/// user-space address has on x86-64 (even with 5-level page tables) or aarch64.
const NO_HEADER: usize = 0xff00_0000_0000_000f;

/// Unlinks `hdr`; as for `push_front`, inside the caller's bracket. Counts it as freed when
/// `count`.
///
/// The links are checked before anything is written through them, as glibc's safe unlinking
/// does: each must be an address a header can have and must lead back to `hdr` (the previous
/// header's `next`, or the list's head for the first; the next header's `prev`). A heap overflow
/// into the header, or forged links, end in one line and SIGABRT, never in a write to wherever
/// they point; the bracket is closed first, so a core of the abort shows the list as the damage
/// left it, not half changed. The reads are of the words the unlink writes anyway.
///
/// # Safety
/// `hdr` is an accessible header whose list index is `l`'s, and no other thread changes `l`.
#[inline(always)]
unsafe fn unlink(l: &List, hdr: *mut Header, count: bool) {
    // SAFETY: passed on; a neighbour is read only once its address passed the check, and an
    // intact list's neighbours are live headers on it, which this thread alone changes.
    unsafe {
        let h = &mut *hdr;
        let (next, prev) = (h.next, h.prev);
        if (next as usize | prev as usize) & NO_HEADER != 0 {
            broken(l, hdr);
        }
        let before = if prev.is_null() {
            l.head.get()
        } else {
            core::ptr::addr_of_mut!((*prev).next)
        };
        if *before != hdr || (!next.is_null() && (*next).prev != hdr) {
            broken(l, hdr);
        }
        *before = next;
        if !next.is_null() {
            (*next).prev = prev;
        }
        h.next = core::ptr::null_mut();
        h.prev = core::ptr::null_mut();
        if count {
            *l.live_blocks.get() -= 1;
            *l.live_bytes.get() -= h.size() as u64;
            *l.frees.get() += 1;
        }
    }
}

/// `unlink` found `hdr`'s links broken: closes the bracket (nothing was written) and aborts.
#[cold]
#[inline(never)]
fn broken(l: &List, hdr: *mut Header) -> ! {
    changed(l);
    corrupt::abort(hdr.cast(), Damage::Links)
}

/// Unlinks every block waiting in the inbox; by the thread that changes the list, inside its
/// bracket or not (this makes its own).
#[inline(always)]
fn drain(l: &List) -> Drained {
    if l.hand.inbox.load(Ordering::Relaxed).is_null() {
        return Drained::NONE;
    }
    drain_slow(l)
}

#[cold]
#[inline(never)]
fn drain_slow(l: &List) -> Drained {
    let first = l.hand.inbox.swap(core::ptr::null_mut(), Ordering::Acquire);
    let (mut n, mut bytes) = (0u64, 0u64);
    changing(l);
    let mut h = first;
    while !h.is_null() {
        // SAFETY: a handed header is still on this list (only its owner or a lock holder, which
        // this thread is, unlinks it), and its inbox slot links the next.
        unsafe {
            let next = header::inbox_next(h);
            bytes += (*h).size() as u64;
            unlink(l, h, true);
            header::magic(h).store(MAGIC_FREED, Ordering::Relaxed);
            h = next;
        }
        n += 1;
    }
    // Single writer: plain read and write of the monotonic counters, inside the bracket, so a
    // reader never sees the list and these counters disagree under an even sequence value.
    l.hand.drained_blocks.store(
        l.hand.drained_blocks.load(Ordering::Relaxed) + n,
        Ordering::Relaxed,
    );
    l.hand.drained_bytes.store(
        l.hand.drained_bytes.load(Ordering::Relaxed) + bytes,
        Ordering::Relaxed,
    );
    changed(l);
    Drained(first)
}

/// Chooses the calling thread's home list at its first allocation: a free one to own when one
/// is left, else a shared one.
#[cold]
#[inline(never)]
fn choose_home() -> (usize, bool) {
    let start = NEXT_LIST.fetch_add(1, Ordering::Relaxed);
    if !thread::exited() && setup() {
        for k in 0..NOWNED {
            let i = (start + k) % NOWNED;
            let l = &LISTS[i];
            if l.mode.load(Ordering::Relaxed) != LOCKED || !l.lock.try_lock() {
                continue;
            }
            let free = l.mode.load(Ordering::Relaxed) == LOCKED;
            if free {
                l.owner.store(thread::tid(), Ordering::Relaxed);
                l.mode.store(OWNED, Ordering::Relaxed);
            }
            // SAFETY: taken just above, on this thread.
            unsafe { l.lock.unlock() };
            if free {
                thread::set_home(i, true);
                // SAFETY: KEY was created by `setup`. A non-null value arms its destructor. For
                // the first 32 keys glibc keeps the value in the thread's descriptor; a later key
                // may calloc, which is a nested call that finds the home already set.
                unsafe {
                    libc::pthread_setspecific(
                        KEY.load(Ordering::Relaxed),
                        core::ptr::dangling::<libc::c_void>(),
                    )
                };
                return (i, true);
            }
        }
    }
    let i = NOWNED + start % (NLISTS - NOWNED);
    thread::set_home(i, false);
    (i, false)
}

/// Chooses how takers make owners' stores visible and creates the exit key, once. False when
/// the key cannot be had: then no thread owns a list (an owner must give it up at its exit).
#[cold]
fn setup() -> bool {
    if KEY_READY.load(Ordering::Acquire) != 0 {
        return KEY_READY.load(Ordering::Relaxed) == 1;
    }
    SETUP.lock();
    if KEY_READY.load(Ordering::Relaxed) == 0 {
        BARRIER.store(register_membarrier(), Ordering::Relaxed);
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: a valid out-pointer and destructor; pthread_key_create neither allocates nor
        // takes a lock a thread inside malloc could hold.
        let ok = unsafe { libc::pthread_key_create(&mut key, Some(on_thread_exit)) } == 0;
        KEY.store(key, Ordering::Relaxed);
        KEY_READY.store(if ok { 1 } else { 2 }, Ordering::Release);
    }
    // SAFETY: taken above, on this thread.
    unsafe { SETUP.unlock() };
    KEY_READY.load(Ordering::Relaxed) == 1
}

fn register_membarrier() -> u8 {
    // SAFETY: the membarrier system call takes plain integers and touches no memory of ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            libc::MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
            0,
            0,
        )
    };
    if r == 0 {
        BARRIER_MEMBARRIER
    } else {
        BARRIER_FENCE
    }
}

/// The taker's half of the barrier, after it changed modes: every owner that had not yet read
/// the mode will see it, and every owner that had is marked busy.
fn barrier() {
    if BARRIER.load(Ordering::Relaxed) == BARRIER_MEMBARRIER {
        // SAFETY: as in `register_membarrier`.
        let r = unsafe { libc::syscall(libc::SYS_membarrier, libc::MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) };
        if r == 0 {
            return;
        }
        // The process registered, so this does not fail; should it anyway, owners fence from
        // their next change on, as where membarrier was refused from the start.
        BARRIER.store(BARRIER_FENCE, Ordering::SeqCst);
    }
    fence(Ordering::SeqCst);
}

/// Waits for a list's owner to leave the change it is in; false if `deadline` (a
/// `clock::now_ns` time) passed first.
fn wait_idle(l: &List, deadline: Option<u64>) -> bool {
    let mut spins = 0u32;
    while l.busy.load(Ordering::Acquire) != 0 {
        if let Some(d) = deadline {
            if now_ns() > d {
                return false;
            }
        }
        spins = spins.saturating_add(1);
        if spins < 100 {
            core::hint::spin_loop();
        } else {
            // SAFETY: sched_yield takes nothing and cannot fail on Linux.
            unsafe { libc::sched_yield() };
        }
    }
    true
}

/// The calling thread's home list, chosen at its first call, and whether the thread owns it.
#[inline(always)]
pub fn home() -> (usize, bool) {
    home_of(thread::current())
}

/// `home`, for a caller that found the thread's area already.
#[inline(always)]
pub fn home_of(cur: thread::Current) -> (usize, bool) {
    match cur.home() {
        Some(h) => h,
        None => choose_home(),
    }
}

/// Runs `f` on list `i` under its lock, reclaiming the list first when the caller is its owner.
/// None when the list turned out to be owned by another thread (the caller hands over instead).
#[cold]
#[inline(never)]
fn under_lock<R>(i: usize, mine: bool, f: impl FnOnce(&List) -> R) -> Option<R> {
    let l = &LISTS[i];
    let _g = Locked::new(l);
    if mine {
        // Taken while we were away: ours again. No one else changes it while we hold the lock,
        // and a thread that takes the lock later sees it owned and hands over.
        l.mode.store(OWNED, Ordering::Relaxed);
    } else if l.mode.load(Ordering::Relaxed) == OWNED {
        return None;
    }
    Some(f(l))
}

/// Puts a fully written header at the head of the calling thread's list (`cur` is its area),
/// writing the list's index in its size word. Returns blocks other threads handed over, for the
/// caller to free.
///
/// # Safety
/// `hdr` must point to a writable header that is on no list.
#[inline(always)]
pub unsafe fn link(cur: thread::Current, hdr: *mut Header) -> Drained {
    let (mut i, mut mine) = home_of(cur);
    loop {
        // SAFETY: the caller hands us a header that is on no list.
        unsafe { (*hdr).set_list(i) };
        let l = &LISTS[i];
        let op = |l: &List| {
            let d = drain(l);
            changing(l);
            // SAFETY: as above; this thread changes the list (owner, or lock holder).
            unsafe { push_front(l, hdr) };
            changed(l);
            d
        };
        if mine && enter_owned(l) {
            let d = op(l);
            leave_owned(l);
            return d;
        }
        if let Some(d) = under_lock(i, mine, op) {
            return d;
        }
        // Our home was given to another thread (only after this thread's exit gave it up):
        // use a shared list from now on.
        i = NOWNED + i % (NLISTS - NOWNED);
        mine = false;
        thread::set_home(i, false);
    }
}

/// Claims a live header for a free or realloc by the thread whose area is `cur`: of racing
/// frees of one block exactly one succeeds, the others see a magic that is not live. On the
/// calling thread's own list, or a list no one owns, the block is unlinked at once; on a list
/// another thread owns, it is handed to the owner when `hand_over`, else refused as `Elsewhere`.
///
/// # Safety
/// `hdr` must be readable and writable for `HEADER_SIZE` bytes and 8-byte aligned.
#[inline(always)]
pub unsafe fn claim(cur: thread::Current, hdr: *mut Header, hand_over: bool) -> Result<Claimed, Refused> {
    // SAFETY: the caller guarantees an accessible header; a live one is ours to inspect.
    let magic = unsafe { header::magic(hdr) };
    let seen = magic.load(Ordering::Relaxed);
    if seen != MAGIC_LIVE {
        return Err(Refused::Magic(seen));
    }
    // SAFETY: as above; the size word of a live header does not change while it is live.
    let i = unsafe { (*hdr).list() };
    if i >= NLISTS {
        return Err(Refused::Foreign);
    }
    let l = &LISTS[i];
    let mine = cur.home() == Some((i, true));
    if mine && enter_owned(l) {
        // SAFETY: this thread changes the list it owns; the header was live on it.
        let r = unsafe { take_claimed(l, hdr, magic) };
        leave_owned(l);
        return r;
    }
    if l.mode.load(Ordering::Acquire) != OWNED || mine {
        // SAFETY: as above, under the list's lock.
        if let Some(r) = under_lock(i, mine, |l| unsafe { take_claimed(l, hdr, magic) }) {
            return r;
        }
    }
    if !hand_over {
        return Err(Refused::Elsewhere);
    }
    hand(l, hdr)
}

/// `claim`'s change of list `l`, which the caller may change (its owner, or the lock holder):
/// the block is freed and unlinked, unless it stopped being live meanwhile. Inlined into the
/// owner's path, which is every free of a thread's own block.
///
/// # Safety
/// `hdr` is an accessible header whose list index is `l`'s, `magic` its magic (as
/// `header::magic` gives it, the tag found once per claim), and no other thread changes `l`.
#[inline(always)]
unsafe fn take_claimed(l: &List, hdr: *mut Header, magic: header::Magic) -> Result<Claimed, Refused> {
    // The owner alone (or the lock holder) changes the magic of a block on the list from live,
    // except for a thread handing it over, which does so with a compare-and-swap: look again
    // now.
    let seen = magic.load(Ordering::Relaxed);
    if seen != MAGIC_LIVE {
        return Err(Refused::Magic(seen));
    }
    let d = drain(l);
    // The magic changes inside the bracket: a reader that saw the same even counter on both
    // sides of its walk must never meet a freed header still linked. After the unlink, whose
    // checks may abort with the block still live.
    changing(l);
    // SAFETY: the header is live, so it is on this list, which this thread changes.
    unsafe { unlink(l, hdr, true) };
    magic.store(MAGIC_FREED, Ordering::Relaxed);
    changed(l);
    Ok(Claimed::Mine(d))
}

/// Hands a live block on a list another thread owns to that owner.
#[cold]
#[inline(never)]
fn hand(l: &List, hdr: *mut Header) -> Result<Claimed, Refused> {
    // SAFETY: the caller checked the header is accessible.
    let magic = unsafe { header::magic(hdr) };
    if let Err(seen) = magic.compare_exchange(MAGIC_LIVE, MAGIC_HANDED, Ordering::AcqRel, Ordering::Relaxed) {
        return Err(Refused::Magic(seen));
    }
    // SAFETY: the magic is ours now; the size word does not change.
    let size = unsafe { (*hdr).size() } as u64;
    // Counted before it is pushed, so that `handed - drained` never goes below zero.
    let handed = l.hand.handed_blocks.fetch_add(1, Ordering::Relaxed) + 1;
    let handed_bytes = l.hand.handed_bytes.fetch_add(size, Ordering::Relaxed) + size;
    let mut top = l.hand.inbox.load(Ordering::Relaxed);
    loop {
        // SAFETY: the header is handed, ours alone to write until it is pushed.
        unsafe { header::set_inbox_next(hdr, top) };
        match l
            .hand
            .inbox
            .compare_exchange_weak(top, hdr, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => break,
            Err(now) => top = now,
        }
    }
    // The other half of the owner's giving up (mode, fence, drain): either its drain saw this
    // push, or this sees that the list is no longer owned and drains it here.
    fence(Ordering::SeqCst);
    let waiting = handed.saturating_sub(l.hand.drained_blocks.load(Ordering::Relaxed));
    let waiting_bytes = handed_bytes.saturating_sub(l.hand.drained_bytes.load(Ordering::Relaxed));
    if l.mode.load(Ordering::Relaxed) != OWNED
        || waiting > TAKE_OVER_BLOCKS
        || waiting_bytes > TAKE_OVER_BYTES
    {
        return Ok(Claimed::Handed(take_over(l)));
    }
    Ok(Claimed::Handed(Drained::NONE))
}

/// Takes a list from its owner, if it has one, and unlinks its inbox.
#[cold]
#[inline(never)]
fn take_over(l: &List) -> Drained {
    let _g = Locked::new(l);
    if l.mode.load(Ordering::Relaxed) == OWNED {
        l.mode.store(TAKEN, Ordering::Relaxed);
        barrier();
        wait_idle(l, None);
    }
    drain(l)
}

/// Undoes a `claim` when a realloc fails and the old block stays live: the header goes back on
/// the calling thread's list, live again. Returns handed blocks to free, as `link` does.
///
/// # Safety
/// `hdr` must be a header this thread claimed with `claim` (as `Mine`) and has not released.
pub unsafe fn restore(hdr: *mut Header) -> Drained {
    // SAFETY: we hold the claim, so the header is ours alone until it is live again; it is
    // linked before it reads as live, so a (wrong) concurrent free meets a freed block.
    unsafe {
        let d = link(thread::current(), hdr);
        header::magic(hdr).store(MAGIC_LIVE, Ordering::Release);
        d
    }
}

/// The destructor of the exit key, on an exiting thread that owns a list: the list becomes
/// everyone's, under its lock, and a later thread may own it. Allocations the thread still
/// makes (later destructors) go to a shared list.
unsafe extern "C" fn on_thread_exit(_: *mut libc::c_void) {
    thread::set_exited();
    let Some((i, true)) = thread::home() else {
        return;
    };
    let l = &LISTS[i];
    let d = {
        let _g = Locked::new(l);
        l.mode.store(LOCKED, Ordering::Relaxed);
        l.owner.store(0, Ordering::Relaxed);
        // The other half of `hand`'s fence: a push this drain misses sees the list unowned.
        fence(Ordering::SeqCst);
        drain(l)
    };
    thread::set_home(NOWNED + i % (NLISTS - NOWNED), false);
    crate::bootstrap::give_back(d);
}

/// Lists taken from their owners by `take_all`, to give back on failure.
struct Taken([u64; NLISTS / 64]);

/// Takes every list: every lock, and every owned list from its owner, waiting at most until
/// `deadline` (None: as long as it takes). On failure nothing stays locked and every list is
/// as it was.
fn take_all(deadline: Option<u64>) -> bool {
    let mut taken = Taken([0; NLISTS / 64]);
    for (i, l) in LISTS.iter().enumerate() {
        match deadline {
            None => l.lock.lock(),
            Some(d) => {
                while !l.lock.try_lock() {
                    if now_ns() > d {
                        release_all(i, &taken);
                        return false;
                    }
                    core::hint::spin_loop();
                }
            }
        }
        if l.mode.load(Ordering::Relaxed) == OWNED {
            l.mode.store(TAKEN, Ordering::Relaxed);
            taken.0[i / 64] |= 1 << (i % 64);
        }
    }
    if taken.0.iter().any(|&w| w != 0) {
        barrier();
    }
    for l in LISTS.iter() {
        // An owner still busy past the deadline is most likely the very thread a signal
        // interrupted, which can never finish while the handler runs.
        if !wait_idle(l, deadline) {
            release_all(NLISTS, &taken);
            return false;
        }
    }
    true
}

/// Gives back the first `n` locks, and ownership of the lists taken, after a failed `take_all`.
fn release_all(n: usize, taken: &Taken) {
    for (i, l) in LISTS[..n].iter().enumerate() {
        if taken.0[i / 64] & (1 << (i % 64)) != 0 {
            // The owner may be inside a change it began before the list was taken; it must
            // find it still owned, and no one else may change it meanwhile.
            l.mode.store(OWNED, Ordering::Relaxed);
        }
        // SAFETY: taken by `take_all`, on this thread.
        unsafe { l.lock.unlock() };
    }
}

/// Before fork and for a report: takes every list so no thread is half-way through a change
/// when the child's copy of memory is made or the lists are walked.
pub fn lock_all() {
    take_all(None);
}

/// Takes every list, waiting at most `wait_ns` in all, for a report in a signal handler: a
/// list still busy after that is most likely the very thread the signal interrupted, which can
/// never leave it while the handler runs. On failure nothing stays taken.
pub fn try_lock_all_within(wait_ns: u64) -> bool {
    take_all(Some(now_ns() + wait_ns))
}

/// After `lock_all`, in the parent: the owners reclaim their lists on their next calls.
pub fn unlock_all() {
    for l in LISTS.iter() {
        // SAFETY: `lock_all` took every lock on this thread.
        unsafe { l.lock.unlock() };
    }
}

/// After fork, in the child, where `lock_all` took every list on this very thread before the
/// fork: only this thread lives on, so every other thread's list becomes everyone's. The
/// child registers for `membarrier` again, which it may not inherit.
pub fn unlock_all_in_child() {
    let own = match thread::home() {
        Some((i, true)) => Some(i),
        _ => None,
    };
    for (i, l) in LISTS.iter().enumerate() {
        if Some(i) == own {
            l.owner.store(thread::tid(), Ordering::Relaxed);
        } else if l.mode.load(Ordering::Relaxed) != LOCKED {
            l.mode.store(LOCKED, Ordering::Relaxed);
            l.owner.store(0, Ordering::Relaxed);
        }
    }
    if BARRIER.load(Ordering::Relaxed) == BARRIER_MEMBARRIER {
        BARRIER.store(register_membarrier(), Ordering::Relaxed);
    }
    unlock_all();
}
