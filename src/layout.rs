//! The layout descriptor: the one exported symbol a debugger needs.
//!
//! A release build ships without debug info and is often stripped, but `.dynsym` survives `strip`,
//! so `dmem_layout` is always findable. Everything the gdb side needs to walk the lists of a core
//! file is here as plain 64-bit words: the header's field offsets, where the list heads are and
//! the offsets of their counters. Any change to the header or the list structure bumps `VERSION`.

use crate::bootstrap;
use crate::header::{
    self, Header, ALIGN_BITS, ALIGN_SHIFT, HEADER_SIZE, LIST_BITS, LIST_SHIFT, MAGIC_FREED, MAGIC_LIVE,
    NFRAMES, SIZE_BITS,
};
use crate::lists::{self, List, NLISTS};
use core::mem::offset_of;
use core::sync::atomic::AtomicU64;

/// "DMEMLAYT" read as a little-endian word.
pub const MAGIC: u64 = u64::from_le_bytes(*b"DMEMLAYT");
/// Version 2 appended the size word's list and alignment fields and the lists' sequence
/// counters; a reader of version 1 derives the former from `size_bits` and has no counters.
pub const VERSION: u64 = 2;

/// Field order is part of the format: only ever append, and bump `VERSION` when a meaning
/// changes.
#[repr(C)]
pub struct Layout {
    pub magic: u64,
    pub version: u64,
    pub header_size: u64,
    pub nframes: u64,
    pub off_next: u64,
    pub off_prev: u64,
    pub off_frames: u64,
    pub off_size: u64,
    pub size_bits: u64,
    pub off_tid: u64,
    pub off_magic: u64,
    pub magic_live: u64,
    pub magic_freed: u64,
    pub lists: *const List,
    pub nlists: u64,
    pub list_stride: u64,
    pub list_off_head: u64,
    pub list_off_live_blocks: u64,
    pub list_off_live_bytes: u64,
    pub list_off_allocs: u64,
    pub list_off_frees: u64,
    pub arena_start: *const u8,
    pub arena_end: *const u8,
    /// Points at the word of `FLAG_*` bits describing how the process ran.
    pub flags: *const u64,
    // Version 2.
    /// The size word's list index: `(size_word >> size_list_shift) & ((1 << size_list_bits) - 1)`.
    pub size_list_shift: u64,
    pub size_list_bits: u64,
    /// log2 of the alignment asked for, 0 for an ordinary block, in the same way.
    pub size_align_shift: u64,
    pub size_align_bits: u64,
    /// Offset in a list of its sequence counter: odd while a link or unlink is under way.
    pub list_off_changes: u64,
}

/// The word of flags the descriptor points at, set once at start-up.
pub static FLAGS: AtomicU64 = AtomicU64::new(0);

/// Recording was on: blocks carry stacks and sit on the lists.
pub const FLAG_RECORDING: u64 = 1;

// SAFETY: the descriptor is immutable after link time; its pointers are addresses for a debugger
// to read, never dereferenced through this type.
unsafe impl Sync for Layout {}

#[no_mangle]
#[used]
pub static dmem_layout: Layout = Layout {
    magic: MAGIC,
    version: VERSION,
    header_size: HEADER_SIZE as u64,
    nframes: NFRAMES as u64,
    off_next: offset_of!(Header, next) as u64,
    off_prev: offset_of!(Header, prev) as u64,
    off_frames: offset_of!(Header, frames) as u64,
    off_size: offset_of!(Header, size_word) as u64,
    size_bits: SIZE_BITS as u64,
    off_tid: offset_of!(Header, tid) as u64,
    off_magic: offset_of!(Header, magic) as u64,
    magic_live: MAGIC_LIVE as u64,
    magic_freed: MAGIC_FREED as u64,
    lists: lists::LISTS.as_ptr(),
    nlists: NLISTS as u64,
    list_stride: core::mem::size_of::<List>() as u64,
    list_off_head: offset_of!(List, head) as u64,
    list_off_live_blocks: offset_of!(List, live_blocks) as u64,
    list_off_live_bytes: offset_of!(List, live_bytes) as u64,
    list_off_allocs: offset_of!(List, allocs) as u64,
    list_off_frees: offset_of!(List, frees) as u64,
    arena_start: bootstrap::ARENA_RANGE.0,
    arena_end: bootstrap::ARENA_RANGE.1,
    flags: FLAGS.as_ptr(),
    size_list_shift: LIST_SHIFT as u64,
    size_list_bits: LIST_BITS as u64,
    size_align_shift: ALIGN_SHIFT as u64,
    size_align_bits: ALIGN_BITS as u64,
    list_off_changes: offset_of!(List, changes) as u64,
};

// The size word's fields are disjoint, fit in 64 bits, and the list index field holds every list.
const _: () = assert!(SIZE_BITS <= LIST_SHIFT);
const _: () = assert!(LIST_SHIFT + LIST_BITS <= ALIGN_SHIFT);
const _: () = assert!(ALIGN_SHIFT + ALIGN_BITS <= 64);
const _: () = assert!(NLISTS <= 1 << LIST_BITS);

const _: () = assert!(header::HEADER_SIZE == 112);
