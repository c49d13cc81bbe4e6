//! The live-block lists: many doubly-linked lists, each with its own lock and counters.
//!
//! A thread puts its blocks on its home list (threads are spread round-robin), and the list index
//! is stored in the header, so a free from any thread finds the right lock. A lock is held only
//! for the few pointer and counter writes of one link or unlink (the lock itself is in
//! `spinlock.rs`). The heads are a static array so a debugger finds them through the layout
//! descriptor.

use crate::header::{self, Header, HEADER_SIZE, MAGIC_FREED, MAGIC_LIVE};
use crate::spinlock::RawMutex;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, Ordering};

pub const NLISTS: usize = 64;

/// One list. Aligned to two cache lines so neighbouring lists never share one (adjacent-line
/// prefetch pairs lines on x86).
#[repr(C, align(128))]
pub struct List {
    pub head: UnsafeCell<*mut Header>,
    pub live_blocks: UnsafeCell<u64>,
    pub live_bytes: UnsafeCell<u64>,
    pub allocs: UnsafeCell<u64>,
    pub frees: UnsafeCell<u64>,
    /// A sequence counter for readers outside the process (`dmem top` reads a running process's
    /// lists without stopping it): odd while a link or unlink is under way, bumped again when it
    /// is done. A reader that sees the same even value before and after walking a list saw it
    /// whole. Written only under the lock, so a plain load and store suffice; it is atomic only
    /// so the stores are ordered around the pointer writes they bracket.
    pub changes: AtomicU64,
    lock: RawMutex,
}

// SAFETY: every field but the lock is read and written only with `lock` held (or, for a debugger,
// from outside the process).
unsafe impl Sync for List {}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: List = List {
    head: UnsafeCell::new(core::ptr::null_mut()),
    live_blocks: UnsafeCell::new(0),
    live_bytes: UnsafeCell::new(0),
    allocs: UnsafeCell::new(0),
    frees: UnsafeCell::new(0),
    changes: AtomicU64::new(0),
    lock: RawMutex::INIT,
};

pub static LISTS: [List; NLISTS] = [EMPTY; NLISTS];

/// Holds a list's lock for a scope.
struct Locked<'a>(&'a List);

impl<'a> Locked<'a> {
    fn new(list: &'a List) -> Self {
        list.lock.lock();
        Locked(list)
    }

    /// Marks the list as changing (the sequence counter goes odd) for the writes that follow;
    /// dropping the guard marks it whole again.
    #[inline(always)]
    fn changing(&self) {
        let c = &self.0.changes;
        c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        // The odd value must be visible before any pointer write of the change.
        core::sync::atomic::fence(Ordering::Release);
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let c = &self.0.changes;
        let seq = c.load(Ordering::Relaxed);
        if seq & 1 == 1 {
            // Release: the change's pointer writes are visible before the even value.
            c.store(seq.wrapping_add(1), Ordering::Release);
        }
        // SAFETY: this guard took the lock in `new`, on this thread.
        unsafe { self.0.lock.unlock() };
    }
}

/// Puts a fully written header at the head of its list (the index in its size word).
///
/// # Safety
/// `hdr` must point to a writable header that is on no list.
#[inline(always)]
pub unsafe fn link(hdr: *mut Header) {
    // SAFETY: the caller hands us a valid header that is on no list.
    let h = unsafe { &mut *hdr };
    // The index was stored by us and is below NLISTS; the modulo only lets the compiler see it.
    let list = &LISTS[h.list() % NLISTS];
    let size = h.size() as u64;
    let g = Locked::new(list);
    g.changing();
    // SAFETY: the list's lock is held, so its head and counters and the neighbouring header are
    // ours to write; every header on a list is a valid live header.
    unsafe {
        let head = *list.head.get();
        h.prev = core::ptr::null_mut();
        h.next = head;
        if !head.is_null() {
            (*head).prev = hdr;
        }
        *list.head.get() = hdr;
        *list.live_blocks.get() += 1;
        *list.live_bytes.get() += size;
        *list.allocs.get() += 1;
    }
}

/// Claims a live header and takes it off its list, under the list's lock: of two racing frees of
/// one block exactly one succeeds, the other sees the freed magic. On failure the header is left
/// as it was and the error says what its magic held (or `MAGIC_LIVE` for a header whose list
/// index is not ours, which only a foreign pointer has).
///
/// # Safety
/// `hdr` must be readable and writable for `HEADER_SIZE` bytes and 4-byte aligned.
#[inline(always)]
pub unsafe fn take(hdr: *mut Header) -> Result<(), u32> {
    // SAFETY: the caller guarantees an accessible header; a live one is ours to inspect.
    let magic = unsafe { header::magic(hdr) };
    let seen = magic.load(Ordering::Relaxed);
    if seen != MAGIC_LIVE {
        return Err(seen);
    }
    // SAFETY: as above; the size word of a live header does not change while it is live.
    let h = unsafe { &mut *hdr };
    let Some(list) = LISTS.get(h.list()) else {
        return Err(MAGIC_LIVE);
    };
    let size = h.size() as u64;
    let g = Locked::new(list);
    // Every free of a block takes the same list's lock (the index is fixed while the block is
    // live), so this second look decides between racing frees.
    let seen = magic.load(Ordering::Relaxed);
    if seen != MAGIC_LIVE {
        return Err(seen);
    }
    g.changing();
    magic.store(MAGIC_FREED, Ordering::Relaxed);
    // SAFETY: lock held as in `link`; the header is live, so it and its neighbours are on the
    // list and valid.
    unsafe {
        if h.prev.is_null() {
            *list.head.get() = h.next;
        } else {
            (*h.prev).next = h.next;
        }
        if !h.next.is_null() {
            (*h.next).prev = h.prev;
        }
        *list.live_blocks.get() -= 1;
        *list.live_bytes.get() -= size;
        *list.frees.get() += 1;
    }
    h.next = core::ptr::null_mut();
    h.prev = core::ptr::null_mut();
    Ok(())
}

/// Undoes a `take` when a realloc fails and the old block stays live: the header goes back on
/// its list, live again.
///
/// # Safety
/// `hdr` must be a header this thread took with `take` and has not released.
pub unsafe fn restore(hdr: *mut Header) {
    // SAFETY: we hold the claim, so the header is ours alone until it is live again; it is
    // linked before it reads as live, so a (wrong) concurrent free meets a freed block.
    unsafe {
        link(hdr);
        header::magic(hdr).store(MAGIC_LIVE, Ordering::Release);
    }
}

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

/// Visits every header on every list, checking each link before following it, so that a list
/// broken by the program (the usual heap overflow writes over the header after a block) ends
/// the walk of that list instead of the process. `readable(start, end)` says whether memory can
/// be read. The caller holds every list lock (`lock_all`).
///
/// A linked header's magic is live, or freed for the moment between a failed realloc's
/// `restore` and its magic store; anything else is a break.
pub fn walk_locked(readable: &dyn Fn(usize, usize) -> bool, visit: &mut dyn FnMut(&Header)) -> Option<Break> {
    let mut first: Option<Break> = None;
    for (i, list) in LISTS.iter().enumerate() {
        // SAFETY: the caller holds every list lock, so heads, links and counters are stable.
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
            visit(hr);
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
    // holds every list lock, so nothing of ours changes it while it is looked at.
    let hr = unsafe { &*h };
    if hr.magic != MAGIC_LIVE && hr.magic != MAGIC_FREED {
        Err(Broken::BadMagic(hr.magic))
    } else if hr.prev != from {
        Err(Broken::PrevMismatch)
    } else {
        Ok(hr)
    }
}

/// Before fork: take every lock so no other thread is half-way through a link when the child's
/// copy of memory is made.
pub fn lock_all() {
    for l in LISTS.iter() {
        l.lock.lock();
    }
}

/// Takes every lock, waiting at most `wait_ns` in all, for a report in a signal handler: a lock
/// still taken after that is most likely held by the very thread the signal interrupted, which
/// can never release it while the handler runs. On failure nothing stays locked.
#[cfg(not(test))]
pub fn try_lock_all_within(wait_ns: u64) -> bool {
    let deadline = crate::leak::stopworld::now_ns() as u64 + wait_ns;
    for (i, l) in LISTS.iter().enumerate() {
        while !l.lock.try_lock() {
            if crate::leak::stopworld::now_ns() as u64 > deadline {
                for taken in &LISTS[..i] {
                    // SAFETY: taken by this loop just above, on this thread.
                    unsafe { taken.lock.unlock() };
                }
                return false;
            }
            core::hint::spin_loop();
        }
    }
    true
}

/// After fork, in the parent and in the child (where the locks were taken by this very thread).
pub fn unlock_all() {
    for l in LISTS.iter() {
        // SAFETY: `lock_all` took every lock on this thread before the fork.
        unsafe { l.lock.unlock() };
    }
}
