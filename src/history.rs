//! The free history (`DMEM_OPTS=history=N`): the last N frees per list, each with the block's
//! address, size, thread, time, the stack of the free and the block's allocation stack, kept in
//! the process's memory so that every core carries them (libumem's transaction log, read by
//! mdb's `::umalog`, is the model). With `history-allocs`, allocations are recorded too.
//!
//! There is one ring per list, mapped at the first event, and a thread writes the ring of its
//! home list: an owned list's ring has one writer, which claims a slot with a plain load and
//! store; a shared list's ring is claimed with an atomic add. Each event carries a sequence number
//! written last, the slot's index plus one, zero while it is written: a reader (the launcher,
//! on a core or a running process; a double free's message here) believes a slot only when that
//! number matches where it found it, read before and after the rest. Rings stay mapped for the
//! life of the process, so a thread that exited leaves its frees behind.

use crate::clock::now_ns;
use crate::header::{Header, NFRAMES};
use crate::lists::{NLISTS, NOWNED};
use crate::table_pages;
use crate::thread;
use core::ptr::NonNull;
use core::sync::atomic::{fence, AtomicPtr, AtomicU64, Ordering};

/// What an event records.
pub const KIND_FREE: u32 = 1;
pub const KIND_ALLOC: u32 = 2;

/// One event. Plain words, read by the launcher through the descriptor's offsets.
#[repr(C)]
pub struct Event {
    /// The slot's index plus one once the event is whole; 0 while it is written.
    pub seq: AtomicU64,
    /// The address the program was given, and the size it asked for.
    pub addr: u64,
    pub size: u64,
    /// CLOCK_MONOTONIC, in nanoseconds.
    pub time_ns: u64,
    /// Kernel thread id of the thread that freed (or allocated) the block, and of the one that
    /// allocated it.
    pub tid: u32,
    pub alloc_tid: u32,
    pub kind: u32,
    _pad: u32,
    /// The allocation stack, copied from the block's header.
    pub alloc_frames: [usize; NFRAMES],
    /// The stack of the free (zero for an allocation).
    pub free_frames: [usize; NFRAMES],
}

/// A ring's head, followed by `capacity` events.
#[repr(C)]
pub struct Ring {
    /// Events ever claimed in this ring; slot `k % capacity` holds event `k`. The capacity is a
    /// power of two (readers need not know: they take the remainder).
    pub count: AtomicU64,
    pub capacity: u64,
}

pub const RING_HEAD: usize = core::mem::size_of::<Ring>();
const _: () = assert!(RING_HEAD.is_multiple_of(core::mem::align_of::<Event>()));

/// Per list, its ring or null. Found by readers through the layout descriptor.
#[allow(clippy::declare_interior_mutable_const)]
const NO_RING: AtomicPtr<Ring> = AtomicPtr::new(core::ptr::null_mut());
pub static RINGS: [AtomicPtr<Ring>; NLISTS] = [NO_RING; NLISTS];

fn events(ring: *mut Ring) -> *mut Event {
    ring.cast::<u8>().wrapping_add(RING_HEAD).cast()
}

/// The ring of list `i`, mapped on first use; None when it cannot be mapped.
#[inline(always)]
fn ring(i: usize, capacity: usize) -> Option<*mut Ring> {
    let r = RINGS[i].load(Ordering::Acquire);
    if !r.is_null() {
        return Some(r);
    }
    map_ring(i, capacity)
}

/// Maps the ring of list `i` for at least `capacity` events: the next power of two, so that a
/// writer finds an event's slot with a mask rather than a division.
#[cold]
#[inline(never)]
fn map_ring(i: usize, capacity: usize) -> Option<*mut Ring> {
    let capacity = capacity.next_power_of_two();
    let bytes = RING_HEAD + capacity * core::mem::size_of::<Event>();
    table_pages::publish(&RINGS[i], bytes, |r| {
        // SAFETY: a fresh zeroed mapping large enough for the head; ours alone until published.
        unsafe { (*r).capacity = capacity as u64 }
    })
}

/// Calls `emit` with the `[start, end)` of every ring mapped: libdmem's own memory, whose
/// events hold the addresses of blocks freed and allocated, which the leak report must not take
/// for references.
pub fn mapped(emit: &mut dyn FnMut(usize, usize)) {
    for r in &RINGS {
        let r = r.load(Ordering::Acquire);
        if !r.is_null() {
            // SAFETY: a ring mapped by `map_ring` and never unmapped; its capacity never changes.
            let cap = unsafe { (*r).capacity } as usize;
            emit(
                r as usize,
                r as usize + RING_HEAD + cap * core::mem::size_of::<Event>(),
            );
        }
    }
}

/// What the caller knows of an event before it is written, for the events recorded away from
/// the free path (an allocation, a realloc that moved a block).
pub struct Pending {
    pub addr: usize,
    pub size: usize,
    pub alloc_tid: u32,
    pub kind: u32,
    pub alloc_frames: [usize; NFRAMES],
    pub free_frames: [usize; NFRAMES],
}

impl Pending {
    /// A free of the block behind `hdr`, read before the block is claimed (afterwards another
    /// thread may give it back).
    pub fn free_of(hdr: &Header, user: *const u8) -> Pending {
        Pending {
            addr: user as usize,
            size: hdr.size(),
            alloc_tid: hdr.tid,
            kind: KIND_FREE,
            alloc_frames: hdr.frames,
            free_frames: [0; NFRAMES],
        }
    }
}

/// A slot of the calling thread's ring, claimed for one event and written in place: its
/// sequence number stays zero until `publish`. A slot never published (a free that turned out
/// to be bad) stays zero, so readers skip it, until the ring comes round to it again.
pub struct Slot {
    event: NonNull<Event>,
    seq: u64,
}

impl Slot {
    /// Claims the next slot of the calling thread's ring (`capacity` events, the `history`
    /// option) and stamps it with the thread and the time; None when the ring cannot be mapped.
    #[inline(always)]
    pub fn claim(cur: thread::Current, capacity: usize) -> Option<Slot> {
        // A thread whose first call is a free has no list yet: it gets one here.
        let (i, owned) = crate::lists::home_of(cur);
        let r = ring(i, capacity)?;
        // SAFETY: a ring mapped by `ring` and never unmapped; its capacity never changes.
        let (count, cap) = unsafe { (&(*r).count, (*r).capacity) };
        // Counted before the event is written, so that an event recorded meanwhile on this
        // thread (a free nested in the walk of the stack) takes the next slot.
        let k = if owned && i < NOWNED {
            // The list's owner is the ring's only writer.
            let k = count.load(Ordering::Relaxed);
            count.store(k + 1, Ordering::Relaxed);
            k
        } else {
            count.fetch_add(1, Ordering::Relaxed)
        };
        // SAFETY: the slot is inside the ring (the capacity is a power of two, see `map_ring`,
        // so k & (cap - 1) is k % cap, below cap) and, for this round, ours alone.
        let e = unsafe { &mut *events(r).add((k & cap.wrapping_sub(1)) as usize) };
        e.seq.store(0, Ordering::Relaxed);
        // The zero must be visible before the fields change.
        fence(Ordering::Release);
        e.time_ns = now_ns();
        e.tid = cur.tid();
        Some(Slot {
            event: NonNull::from(e),
            seq: k + 1,
        })
    }

    /// The event, for the caller to fill.
    #[inline(always)]
    pub fn event(&mut self) -> &mut Event {
        // SAFETY: the slot claimed in `claim`, ours alone until published, in a ring that is
        // never unmapped.
        unsafe { self.event.as_mut() }
    }

    /// A free of the block behind `hdr`, read before the block is claimed (afterwards another
    /// thread may give it back). The stack of the free is the caller's to write.
    #[inline(always)]
    pub fn free_of(&mut self, hdr: &Header, user: *const u8) {
        let e = self.event();
        e.addr = user as u64;
        e.size = hdr.size() as u64;
        e.alloc_tid = hdr.tid;
        e.kind = KIND_FREE;
        e.alloc_frames = hdr.frames;
    }

    /// Makes the event whole for readers.
    #[inline(always)]
    pub fn publish(self) {
        // SAFETY: as in `event`.
        unsafe { self.event.as_ref() }
            .seq
            .store(self.seq, Ordering::Release);
    }
}

/// Writes an event in the calling thread's ring (`capacity` events, the `history` option).
pub fn record(p: &Pending, capacity: usize) {
    let Some(mut slot) = Slot::claim(thread::current(), capacity) else {
        return;
    };
    let e = slot.event();
    e.addr = p.addr as u64;
    e.size = p.size as u64;
    e.alloc_tid = p.alloc_tid;
    e.kind = p.kind;
    e.alloc_frames = p.alloc_frames;
    e.free_frames = p.free_frames;
    slot.publish();
}

/// The newest recorded free of the block at `addr`, for a double free's message: its thread
/// and stack.
pub fn last_free_of(addr: usize) -> Option<(u32, [usize; NFRAMES])> {
    let mut best: Option<(u64, u32, [usize; NFRAMES])> = None;
    for slot in RINGS.iter() {
        let r = slot.load(Ordering::Acquire);
        if r.is_null() {
            continue;
        }
        // SAFETY: as in `record`.
        let (count, cap) = unsafe { ((*r).count.load(Ordering::Acquire), (*r).capacity) };
        for k in count.saturating_sub(cap)..count {
            // SAFETY: a slot inside the ring; other threads may be writing it, which its sequence
            // number, read before and after, tells.
            let e = unsafe { &*events(r).add((k % cap) as usize) };
            if e.seq.load(Ordering::Acquire) != k + 1 || e.kind != KIND_FREE || e.addr != addr as u64 {
                continue;
            }
            let got = (e.time_ns, e.tid, e.free_frames);
            fence(Ordering::Acquire);
            if e.seq.load(Ordering::Relaxed) == k + 1 && best.is_none_or(|b| b.0 < got.0) {
                best = Some(got);
            }
        }
    }
    best.map(|(_, tid, frames)| (tid, frames))
}

/// Bytes of one event and offsets of its fields, for the descriptor.
pub const EVENT_SIZE: usize = core::mem::size_of::<Event>();
