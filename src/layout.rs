//! The layout descriptor: the one exported symbol a debugger needs.
//!
//! A release build ships without debug info and is often stripped, but `.dynsym` survives `strip`,
//! so `dmem_layout` is always findable. Everything a reader (the launcher, which the gdb commands
//! run) needs to walk the lists of a core file or a process is here as plain 64-bit words: the
//! header's field offsets, where the list heads are and the offsets of their counters, each
//! under its name (`analysis::descriptor` defines the format and the names for the readers too).
//! A new field is only appended; a change in the meaning of
//! one bumps `descriptor::VERSION`.
//!
//! The descriptor checks itself: at start-up `seal` writes a check of its head and of every
//! entry into `CHECKS`, whose address is the field `checks`; readers recompute them. The
//! descriptor itself stays where the loader put it (read-only after relocation), so the checks
//! live apart, and cover whatever fields the descriptor has.

use crate::analysis::descriptor::{self, field, Entry};
use crate::bootstrap;
use crate::header::{
    self, Header, ALIGN_BITS, ALIGN_SHIFT, HEADER_SIZE, LIST_BITS, LIST_SHIFT, MAGIC_FREED, MAGIC_HANDED,
    MAGIC_LIVE, NFRAMES, SIZE_BITS,
};
use crate::history::{self, Event, Ring};
use crate::lists::{self, Hand, List, NLISTS};
use crate::stack_counts::{self, Entry as Counts, Table};
use core::mem::offset_of;
use core::sync::atomic::{AtomicU64, Ordering};

/// The descriptor: its head, then one named entry per field (see `analysis::descriptor`).
#[repr(C)]
pub struct Layout {
    pub magic: u64,
    pub version: u64,
    pub nfields: u64,
    pub fields: [Entry; NFIELDS],
}

const NFIELDS: usize = 67;

/// The checks `seal` writes: the head's, then one per entry, in order.
pub static CHECKS: [AtomicU64; NFIELDS + 1] = [const { AtomicU64::new(0) }; NFIELDS + 1];

/// The word of flags the descriptor points at, set once at start-up.
pub static FLAGS: AtomicU64 = AtomicU64::new(0);

/// Recording was on: blocks carry stacks and sit on the lists.
pub const FLAG_RECORDING: u64 = 1;

// SAFETY: the descriptor is immutable after link time; its pointers are addresses for a debugger
// to read, never dereferenced through this type.
unsafe impl Sync for Layout {}

const fn n(name: &str, value: usize) -> Entry {
    Entry::number(name, value as u64)
}

#[no_mangle]
#[used]
pub static dmem_layout: Layout = Layout {
    magic: descriptor::MAGIC,
    version: descriptor::VERSION,
    nfields: NFIELDS as u64,
    fields: [
        n(field::HEADER_SIZE, HEADER_SIZE),
        n(field::NFRAMES, NFRAMES),
        n(field::OFF_NEXT, offset_of!(Header, next)),
        n(field::OFF_PREV, offset_of!(Header, prev)),
        n(field::OFF_FRAMES, offset_of!(Header, frames)),
        n(field::OFF_SIZE, offset_of!(Header, size_word)),
        n(field::SIZE_BITS, SIZE_BITS as usize),
        n(field::OFF_TID, offset_of!(Header, tid)),
        n(field::OFF_MAGIC, offset_of!(Header, magic)),
        n(field::MAGIC_LIVE, MAGIC_LIVE as usize),
        n(field::MAGIC_FREED, MAGIC_FREED as usize),
        Entry::address(field::LISTS, lists::LISTS.as_ptr()),
        n(field::NLISTS, NLISTS),
        n(field::LIST_STRIDE, core::mem::size_of::<List>()),
        n(field::LIST_OFF_HEAD, offset_of!(List, head)),
        n(field::LIST_OFF_LIVE_BLOCKS, offset_of!(List, live_blocks)),
        n(field::LIST_OFF_LIVE_BYTES, offset_of!(List, live_bytes)),
        n(field::LIST_OFF_ALLOCS, offset_of!(List, allocs)),
        n(field::LIST_OFF_FREES, offset_of!(List, frees)),
        n(field::LIST_OFF_CHANGES, offset_of!(List, changes)),
        Entry::address(field::ARENA_START, bootstrap::ARENA_RANGE.0),
        Entry::address(field::ARENA_END, bootstrap::ARENA_RANGE.1),
        Entry::address(field::FLAGS, FLAGS.as_ptr()),
        n(field::SIZE_LIST_SHIFT, LIST_SHIFT as usize),
        n(field::SIZE_LIST_BITS, LIST_BITS as usize),
        n(field::SIZE_ALIGN_SHIFT, ALIGN_SHIFT as usize),
        n(field::SIZE_ALIGN_BITS, ALIGN_BITS as usize),
        n(field::MAGIC_HANDED, MAGIC_HANDED as usize),
        n(field::LIST_OFF_OWNER, offset_of!(List, owner)),
        n(
            field::LIST_OFF_HANDED_BLOCKS,
            offset_of!(List, hand) + offset_of!(Hand, handed_blocks),
        ),
        n(
            field::LIST_OFF_HANDED_BYTES,
            offset_of!(List, hand) + offset_of!(Hand, handed_bytes),
        ),
        n(
            field::LIST_OFF_DRAINED_BLOCKS,
            offset_of!(List, hand) + offset_of!(Hand, drained_blocks),
        ),
        n(
            field::LIST_OFF_DRAINED_BYTES,
            offset_of!(List, hand) + offset_of!(Hand, drained_bytes),
        ),
        Entry::address(field::HISTORY_RINGS, history::RINGS.as_ptr()),
        n(field::HISTORY_NRINGS, NLISTS),
        n(field::RING_OFF_COUNT, offset_of!(Ring, count)),
        n(field::RING_OFF_CAPACITY, offset_of!(Ring, capacity)),
        n(field::RING_OFF_EVENTS, history::RING_HEAD),
        n(field::EVENT_SIZE, history::EVENT_SIZE),
        n(field::EVENT_OFF_SEQ, offset_of!(Event, seq)),
        n(field::EVENT_OFF_ADDR, offset_of!(Event, addr)),
        n(field::EVENT_OFF_SIZE, offset_of!(Event, size)),
        n(field::EVENT_OFF_TIME, offset_of!(Event, time_ns)),
        n(field::EVENT_OFF_TID, offset_of!(Event, tid)),
        n(field::EVENT_OFF_ALLOC_TID, offset_of!(Event, alloc_tid)),
        n(field::EVENT_OFF_KIND, offset_of!(Event, kind)),
        n(field::EVENT_OFF_ALLOC_FRAMES, offset_of!(Event, alloc_frames)),
        n(field::EVENT_OFF_FREE_FRAMES, offset_of!(Event, free_frames)),
        n(field::EVENT_KIND_FREE, history::KIND_FREE as usize),
        n(field::EVENT_KIND_ALLOC, history::KIND_ALLOC as usize),
        Entry::address(field::CHECKS, CHECKS.as_ptr()),
        Entry::address(field::EXIT_ENTRY, crate::exit_entry::EXIT_ENTRY.as_ptr()),
        Entry::address(field::STACK_TABLES, stack_counts::TABLES.as_ptr()),
        n(field::STACK_NTABLES, NLISTS),
        n(field::STAB_OFF_CAPACITY, offset_of!(Table, capacity)),
        n(field::STAB_OFF_USED, offset_of!(Table, used)),
        n(field::STAB_OFF_OVERFLOW, offset_of!(Table, overflow)),
        n(field::STAB_OFF_ENTRIES, offset_of!(Table, entries)),
        n(field::SENT_SIZE, stack_counts::ENTRY_SIZE),
        n(field::SENT_OFF_KEY, offset_of!(Counts, key)),
        n(field::SENT_OFF_ALLOCS, offset_of!(Counts, allocs)),
        n(field::SENT_OFF_BYTES, offset_of!(Counts, bytes)),
        n(field::SENT_OFF_TEMPORARY, offset_of!(Counts, temporary)),
        n(field::SENT_OFF_FRAMES, offset_of!(Counts, frames)),
        Entry::address(field::TLS_OFFSET, crate::tls::OFFSET.as_ptr()),
        n(field::INFLIGHT_OFF, offset_of!(crate::tls::Area, inflight)),
        Entry::address(field::MAGIC_KEY, header::KEY.as_ptr()),
    ],
};

/// Writes the descriptor's checks, once the loader has relocated its addresses: at start-up,
/// from an initialiser of its own, before anything could overwrite the descriptor. It reads
/// only the static descriptor, so the order among the library's initialisers does not matter.
extern "C" fn seal() {
    let l = &dmem_layout;
    CHECKS[0].store(descriptor::head_check(l.version, l.nfields), Ordering::Relaxed);
    for (i, e) in l.fields.iter().enumerate() {
        let check = descriptor::entry_check(i as u64, &e.name, e.value.addr() as u64);
        CHECKS[i + 1].store(check, Ordering::Relaxed);
    }
}

#[used]
#[link_section = ".init_array"]
static SEAL: extern "C" fn() = seal;

// The size word's fields are disjoint, fit in 64 bits, and the list index field holds every list.
const _: () = assert!(SIZE_BITS <= LIST_SHIFT);
const _: () = assert!(LIST_SHIFT + LIST_BITS <= ALIGN_SHIFT);
const _: () = assert!(ALIGN_SHIFT + ALIGN_BITS <= 64);
const _: () = assert!(NLISTS <= 1 << LIST_BITS);

const _: () = assert!(header::HEADER_SIZE == 112);
const _: () = assert!(crate::exit_entry::EXIT_ENTRY.len() == 2 + descriptor::EXIT_ENTRY_REGS);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::descriptor::{Fields, OLD_ORDER};

    #[test]
    fn the_descriptor_reads_back_by_name_with_every_older_field() {
        // SAFETY: the descriptor is a plain repr(C) static of words and pointers, read as bytes.
        let bytes = unsafe {
            core::slice::from_raw_parts(
                (&dmem_layout as *const Layout).cast::<u8>(),
                core::mem::size_of::<Layout>(),
            )
        };
        seal();
        let mut read_checks = |addr: u64, buf: &mut [u8]| {
            assert_eq!(addr, CHECKS.as_ptr() as u64);
            for (b, c) in buf.chunks_exact_mut(8).zip(&CHECKS) {
                b.copy_from_slice(&c.load(Ordering::Relaxed).to_le_bytes());
            }
            true
        };
        assert_eq!(
            descriptor::verify(bytes, &mut read_checks),
            Ok(descriptor::Sealed::Verified)
        );
        let f = Fields::parse(bytes).expect("the library's own descriptor parses");
        assert_eq!(f.version, descriptor::VERSION);
        assert_eq!(f.iter().count(), NFIELDS);
        for name in OLD_ORDER {
            assert!(f.get(name).is_some(), "{name} missing");
        }
        assert_eq!(f.get(field::HEADER_SIZE), Some(112));
        assert_eq!(f.get(field::OFF_MAGIC), Some(offset_of!(Header, magic) as u64));
        assert_eq!(f.get(field::LISTS), Some(lists::LISTS.as_ptr() as u64));
        assert_eq!(f.get(field::FLAGS), Some(FLAGS.as_ptr() as u64));
        let mut names: Vec<_> = f.iter().map(|(n, _)| n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NFIELDS, "a field is written twice");
    }
}
