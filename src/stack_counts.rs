//! Allocations counted per allocation stack, exactly (`DMEM_OPTS=count-allocs`): how many
//! blocks each stack allocated and how many bytes, and how many of those its thread freed again
//! before allocating anything else (heaptrack's "temporary allocations"). The launcher turns them
//! into allocations per second and temporary allocations per stack (`dmem top`), pprof's
//! `alloc_objects` and `alloc_space` (`dmem snapshot`, `dmem serve`) and rates in the timeline.
//! Frees per stack need no counter of their own: they are the stack's allocations less its live
//! blocks, which the lists hold.
//!
//! Each list has a table of counters, mapped at its first count, and a thread counts in its home
//! list's table, so the thread that owns a list is its table's only writer and counts with plain
//! loads and stores; the threads that share one of the last lists add atomically. A reader sums
//! every table's entries by stack, as it sums the lists. Tables stay mapped for the life of the
//! process, so a thread that exited leaves its counts behind. Entries are handed out in order,
//! so a thread touches a page of them per 32 stacks it allocates from.
//!
//! A stack's entry is found through an index by a 64-bit key hashed from its ten frames; but
//! the walker keeps, with each stack shape it remembers (`unwind/fast.rs`), the key and a memo
//! of the entry its counts went to, so a walk answered from a shape, nearly every walk, brings
//! both and the allocation path checks the memo and adds twice. The key is odd, so an entry whose
//! key is still 0 is being written; readers believe an entry once its key is odd. Stacks that
//! find no room are counted together in the table's overflow entry, which a reader reports.
//!
//! It is an option because it is not free: about 40 instructions more per allocation, and as
//! many on a free that is a temporary allocation (bench/instructions.sh measures it).

use crate::header::{Header, NFRAMES};
use crate::lists::{NLISTS, NOWNED};
use crate::stack_hint::{Hint, Memo};
use crate::table_pages;
use crate::thread;
use core::cell::Cell;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

/// Stacks a table holds; the stacks of a busy CPython thread number about 8,000.
pub const CAPACITY: usize = 1 << 14;
/// log2 of a table's index buckets: twice the entries, so probes stay short.
const BUCKET_BITS: u32 = 15;
const BUCKETS: usize = 1 << BUCKET_BITS;
/// Buckets tried from a stack's own before it is counted in the overflow entry.
const PROBES: usize = 64;

/// One stack's counters. Two cache lines, so the three counters share one.
#[repr(C, align(64))]
pub struct Entry {
    /// The stack's key (odd) once `frames` is written; 0 before.
    pub key: AtomicU64,
    /// Blocks allocated from the stack, and their bytes (as asked for), ever.
    pub allocs: AtomicU64,
    pub bytes: AtomicU64,
    /// Of those, freed by the allocating thread before it allocated again.
    pub temporary: AtomicU64,
    pub frames: [usize; NFRAMES],
}

/// A list's table. Entries are handed out in order, so a thread with few stacks touches few
/// pages; the index, a bucket per hash of the key holding an entry's number plus one, finds a
/// stack's entry on the rare paths that do not know it already (see `Hint`).
#[repr(C)]
pub struct Table {
    pub capacity: u64,
    /// Entries handed out (may pass the capacity where threads share the table).
    pub used: AtomicU64,
    /// What found no room.
    pub overflow: Entry,
    index: [AtomicU32; BUCKETS],
    pub entries: [Entry; CAPACITY],
}

/// Per list, its table or null. Found by readers through the layout descriptor.
#[allow(clippy::declare_interior_mutable_const)]
const NO_TABLE: AtomicPtr<Table> = AtomicPtr::new(core::ptr::null_mut());
pub static TABLES: [AtomicPtr<Table>; NLISTS] = [NO_TABLE; NLISTS];

/// Where counts go when no table can be mapped at all: kept for the count's sake, never read.
static NOWHERE: Entry = Entry {
    key: AtomicU64::new(0),
    allocs: AtomicU64::new(0),
    bytes: AtomicU64::new(0),
    temporary: AtomicU64::new(0),
    frames: [0; NFRAMES],
};

const TAG_SHIFT: u32 = 48;
const SHARED: usize = 1;
const ADDRESS: usize = ((1 << TAG_SHIFT) - 1) & !63;

#[inline(always)]
fn tag(list: usize) -> usize {
    (list + 1) << TAG_SHIFT
}

#[inline(always)]
fn entry_of<'a>(memo: Memo) -> &'a Entry {
    // SAFETY: a memo is only ever made by `remember` from an entry of a table that is never
    // unmapped (or NOWHERE), and only read after its tag was checked, which a zero memo fails.
    unsafe { &*((memo & ADDRESS) as *const Entry) }
}

/// What a thread keeps between an allocation and the next call: its newest block, the memo of
/// the entry it was counted in and the thread id in its header. Zero is "none", so a thread's
/// fresh TLS area needs no initialisation.
#[repr(C)]
pub struct Local {
    last: Cell<usize>,
    memo: Cell<Memo>,
    /// The thread id the newest block's header carries (this thread's, or its parent's before a
    /// fork).
    tid: Cell<u32>,
}

const _: () = assert!(
    core::mem::size_of::<Local>() <= crate::tls::COUNTS_WORDS * 8 && core::mem::align_of::<Local>() <= 8
);

#[inline(always)]
fn local<'a>() -> &'a Local {
    // SAFETY: the area is the calling thread's own and outlives any use of it on this thread;
    // its `counts` words are room for a `Local` (asserted above), whose all-zero bytes are a
    // valid one, and only this thread touches them, through `Cell`s.
    unsafe { &*(*crate::tls::area()).counts.as_ptr().cast::<Local>() }
}

/// Adds `n` to a counter: with a plain load and store where the caller's thread is the table's
/// only writer, atomically where threads share it.
#[inline(always)]
fn add(counter: &AtomicU64, n: u64, alone: bool) {
    if alone {
        counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    } else {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Counts the block of header `h` at `user`, about to be linked on the calling thread's home
/// list, allocated from the stack that `hint` describes. It is counted before it is linked, so
/// that nothing of the count lives across the link: with the counts off, the hint dies here.
#[inline(always)]
pub fn allocated(hint: Hint, h: &Header, user: *mut u8) {
    let (list, owns) = crate::lists::home();
    let mut memo = hint.memo();
    // The memo counts for this thread's table, and its entry still holds this stack (a signal
    // handler's walk may have reused the shape in between).
    if memo & !(SHARED | ADDRESS) != tag(list) || entry_of(memo).key.load(Ordering::Relaxed) != hint.key {
        memo = remember(&hint, list, owns, &h.frames);
    }
    let e = entry_of(memo);
    let alone = memo & SHARED == 0;
    add(&e.allocs, 1, alone);
    add(&e.bytes, h.size() as u64, alone);
    let l = local();
    l.last.set(user as usize);
    l.memo.set(memo);
    l.tid.set(h.tid);
}

/// Counts a free of the block at `user`, whose header is `hdr`, if it is the newest block its
/// thread allocated: a temporary allocation.
#[inline(always)]
pub fn freed(hdr: &Header, user: *mut u8) {
    let l = local();
    // Another thread may have freed this thread's newest block and allocated one at the same
    // address since: its header says whose it is.
    if l.last.get() != user as usize || hdr.tid != l.tid.get() {
        return;
    }
    l.last.set(0);
    temporary(l.memo.get());
}

/// Counts a temporary allocation in the entry `memo` names, unless the thread's home changed
/// since (its exit gave its list up): the entry is only the thread's to count in while it is.
#[cold]
#[inline(never)]
fn temporary(memo: Memo) {
    if thread::home().map(|(list, _)| tag(list)) == Some(memo & !(SHARED | ADDRESS)) {
        add(&entry_of(memo).temporary, 1, memo & SHARED == 0);
    }
}

/// Finds or makes the entry of the stack `frames` in list `list`'s table and remembers it in
/// the hint's shape: the memo to count with.
#[cold]
#[inline(never)]
fn remember(hint: &Hint, list: usize, owns: bool, frames: &[usize; NFRAMES]) -> Memo {
    let alone = owns && list < NOWNED;
    let e = match table(list) {
        Some(t) => find(t, alone, hint.key, frames),
        None => &NOWHERE,
    };
    let at = e as *const Entry as usize;
    let memo = if at & !ADDRESS != 0 {
        // Beyond the addresses a memo can hold: count there anyway, never remembered.
        0
    } else {
        at | tag(list) | if alone { 0 } else { SHARED }
    };
    if !hint.slot.is_null() && memo != 0 {
        // SAFETY: the slot is a field of a stack shape in the thread's TLS area or its borrowed
        // table, which live as long as the thread, and no walk ran on this thread since the
        // capture that gave the hint (a signal handler's could have reused the shape, which the
        // key check above catches on its next replay).
        unsafe { *hint.slot = memo };
    }
    if memo == 0 {
        // Counted through the shared path, each time.
        return (&NOWHERE as *const Entry as usize & ADDRESS) | tag(list) | SHARED;
    }
    memo
}

/// The entry of the stack `frames` (key `key`) in table `t`, found through the index or made;
/// the overflow entry when the table is full or no bucket is free within `PROBES`. `alone` when
/// the calling thread is the table's only writer.
fn find<'a>(t: *mut Table, alone: bool, key: u64, frames: &[usize; NFRAMES]) -> &'a Entry {
    // SAFETY: a table mapped by `table` and never unmapped.
    let t = unsafe { &*t };
    let mut made: Option<usize> = None;
    let start = (key >> (64 - BUCKET_BITS)) as usize;
    for b in start..start + PROBES {
        let bucket = &t.index[b % BUCKETS];
        let v = bucket.load(Ordering::Acquire) as usize;
        if v != 0 {
            let e = &t.entries[(v - 1) % CAPACITY];
            if e.key.load(Ordering::Acquire) == key {
                return e;
            }
            continue;
        }
        let i = match made {
            Some(i) => i,
            None => {
                let i = if alone {
                    let u = t.used.load(Ordering::Relaxed);
                    t.used.store(u + 1, Ordering::Relaxed);
                    u
                } else {
                    t.used.fetch_add(1, Ordering::Relaxed)
                } as usize;
                if i >= CAPACITY {
                    break;
                }
                let e = &t.entries[i];
                // SAFETY: entry `i` was handed to this thread alone; its frames are plain words
                // that no reader in the process looks at before its key is published.
                unsafe { (*(e as *const Entry as *mut Entry)).frames = *frames };
                e.key.store(key, Ordering::Release);
                made = Some(i);
                i
            }
        };
        let number = i as u32 + 1;
        if alone {
            bucket.store(number, Ordering::Release);
            return &t.entries[i];
        }
        // Threads that share the table decide a bucket with a compare-and-swap; a loser tries
        // the next bucket with the entry it made (or finds its stack there, made twice: the
        // reader sums by stack).
        match bucket.compare_exchange(0, number, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return &t.entries[i],
            Err(theirs) => {
                let e = &t.entries[(theirs as usize - 1) % CAPACITY];
                if e.key.load(Ordering::Acquire) == key {
                    return &t.entries[i];
                }
            }
        }
    }
    match made {
        // Made but never indexed: its counts are still read.
        Some(i) => &t.entries[i],
        None => &t.overflow,
    }
}

/// List `list`'s table, mapped on first use; None when it cannot be mapped.
fn table(list: usize) -> Option<*mut Table> {
    let t = TABLES[list].load(Ordering::Acquire);
    if !t.is_null() {
        return Some(t);
    }
    let bytes = core::mem::size_of::<Table>();
    table_pages::publish(&TABLES[list], bytes, |t| {
        // SAFETY: a fresh zeroed mapping large enough for a table; ours alone until published.
        // Zero is an empty table, and its pages are only touched as stacks are counted.
        unsafe { (*t).capacity = CAPACITY as u64 }
    })
}

/// Bytes of an entry, for the descriptor.
pub const ENTRY_SIZE: usize = core::mem::size_of::<Entry>();
const _: () = assert!(ENTRY_SIZE == 128);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack_hint::{key, NO_STACK};

    #[test]
    fn keys_are_odd_and_tell_stacks_apart() {
        let a = [0x1000, 0x2000, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut b = a;
        b[1] = 0x2001;
        assert_eq!(key(&a) & 1, 1);
        assert_ne!(key(&a), key(&b));
        assert_ne!(key(&a), NO_STACK.key);
        // Two stacks whose frames only swap places.
        let mut c = a;
        c.swap(0, 1);
        assert_ne!(key(&a), key(&c));
    }

    #[test]
    fn a_thread_counts_each_stack_in_its_own_entry_and_its_temporaries() {
        std::thread::spawn(|| {
            // A shared list's table, as a thread beyond the owned lists would use.
            let list = NLISTS - 1;
            thread::set_home(list, false);
            let frames = [0x7000_1234, 0x7000_5678, 0, 0, 0, 0, 0, 0, 0, 0];
            let k = Hint::bare(key(&frames));
            let mut other = frames;
            other[0] += 1;
            let mut h: Header = blank_header();
            h.tid = thread::tid();
            h.set_list(list);
            h.size_word |= 100;
            h.frames = frames;
            for i in 0..10 {
                allocated(k, &h, (0x1000 + i * 16) as *mut u8);
            }
            // The newest block freed before the next allocation: temporary; an older one: not.
            freed(&h, 0x1000 as *mut u8);
            freed(&h, (0x1000 + 9 * 16) as *mut u8);
            freed(&h, (0x1000 + 9 * 16) as *mut u8);
            let mut g: Header = blank_header();
            g.set_list(list);
            g.size_word |= 7;
            g.frames = other;
            allocated(Hint::bare(key(&other)), &g, 0x9000 as *mut u8);
            let t = TABLES[list].load(Ordering::Acquire);
            assert!(!t.is_null());
            // SAFETY: mapped above and never unmapped.
            let t = unsafe { &*t };
            let find = |k: u64| {
                t.entries
                    .iter()
                    .find(|e| e.key.load(Ordering::Relaxed) == k)
                    .unwrap()
            };
            let e = find(k.key);
            assert_eq!(e.frames, frames);
            let counts = |e: &Entry| {
                (
                    e.allocs.load(Ordering::Relaxed),
                    e.bytes.load(Ordering::Relaxed),
                    e.temporary.load(Ordering::Relaxed),
                )
            };
            assert_eq!(counts(e), (10, 1000, 1));
            assert_eq!(counts(find(key(&other))), (1, 7, 0));
        })
        .join()
        .unwrap();
    }

    /// A header with every field zero, for the tests.
    fn blank_header() -> Header {
        Header {
            next: core::ptr::null_mut(),
            prev: core::ptr::null_mut(),
            frames: [0; NFRAMES],
            size_word: 0,
            tid: 0,
            magic: 0,
        }
    }
}
