//! The 112-byte header that sits in front of every block we hand out.
//!
//! The header is the whole per-block cost of the tool, and a debugger reads it out of a core file
//! with nothing but the layout descriptor, so its shape is fixed and versioned (see `layout.rs`).
//! All raw pointer arithmetic between the backend's block, the header and the user pointer lives
//! in this file.

use crate::analysis::descriptor::header_tag;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Return addresses kept per block.
pub const NFRAMES: usize = 10;
/// Bytes in front of every user pointer.
pub const HEADER_SIZE: usize = 112;
/// Low bits of `size_word` that hold the requested size; requests above this fail with ENOMEM.
pub const SIZE_BITS: u32 = 48;
pub const SIZE_MASK: u64 = (1 << SIZE_BITS) - 1;
/// Where the list index and the alignment's log2 sit in `size_word`; the layout descriptor
/// publishes all four, so readers never assume them.
pub const LIST_SHIFT: u32 = 48;
pub const LIST_BITS: u32 = 8;
pub const ALIGN_SHIFT: u32 = 56;
pub const ALIGN_BITS: u32 = 8;
const LIST_MASK: u64 = (1 << LIST_BITS) - 1;

/// A header's `magic` is stored sealed: one of the states below xored with `tag` of the header's
/// address, bound to `KEY`. A header forged elsewhere, or copied to another address, carries no
/// state at all, so free never believes it.
///
/// `magic` of a block that is live and on a list.
pub const MAGIC_LIVE: u32 = 0xd3e3_a11c;
/// `magic` of a block that was released; a second free sees this while the backend has not yet
/// reused the memory.
pub const MAGIC_FREED: u32 = 0xd3e3_f4ee;

/// `magic` of a block another thread freed and handed to its list's owner, still on the list
/// until the owner unlinks it (see `lists.rs`): freed, for every reader.
pub const MAGIC_HANDED: u32 = 0xd3e3_f4ed;

/// The frame slot that links a handed block to the next in its list's inbox: the block is freed,
/// so its outermost frame is no longer needed.
const INBOX_SLOT: usize = NFRAMES - 1;

/// The alignment every user pointer has without asking: glibc's `MALLOC_ALIGNMENT` on x86_64 and
/// aarch64. The header size is a multiple of it, so an ordinary block keeps it.
pub const BASE_ALIGN: usize = 16;

#[repr(C)]
pub struct Header {
    /// Next and previous header on the same list; null ends the list.
    pub next: *mut Header,
    pub prev: *mut Header,
    /// Return addresses of the allocating stack, innermost first, starting at the caller of the
    /// allocation function; unused slots are zero.
    pub frames: [usize; NFRAMES],
    /// Requested size (low 48 bits), list index (bits 48..56) and log2 of the alignment asked
    /// for (bits 56..64, zero for an ordinary block).
    pub size_word: u64,
    /// Kernel thread id of the allocating thread (the LWP gdb shows).
    pub tid: u32,
    pub magic: u32,
}

const _: () = assert!(core::mem::size_of::<Header>() == HEADER_SIZE);
const _: () = assert!(HEADER_SIZE.is_multiple_of(BASE_ALIGN));

impl Header {
    /// The state its magic holds (live, freed, handed), or anything else for a header that is
    /// not one of ours or was overwritten.
    pub fn state(&self) -> u32 {
        self.magic ^ tag(self)
    }

    pub fn size(&self) -> usize {
        (self.size_word & SIZE_MASK) as usize
    }

    pub fn list(&self) -> usize {
        ((self.size_word >> LIST_SHIFT) & LIST_MASK) as usize
    }

    pub fn align_log2(&self) -> u32 {
        (self.size_word >> ALIGN_SHIFT) as u32
    }

    /// Puts the block on list `list` in its size word.
    pub fn set_list(&mut self, list: usize) {
        self.size_word =
            (self.size_word & !(LIST_MASK << LIST_SHIFT)) | ((list as u64 & LIST_MASK) << LIST_SHIFT);
    }

    pub fn pack_size_word(size: usize, list: usize, align_log2: u32) -> u64 {
        (size as u64 & SIZE_MASK) | ((list as u64) << LIST_SHIFT) | ((align_log2 as u64) << ALIGN_SHIFT)
    }
}

/// The per-process secret headers are sealed with (`analysis::descriptor::header_tag`), chosen at
/// start-up before the first header is written; the descriptor publishes its address, so a reader
/// of a core or a process has it and an attacker inside the process must first read it.
pub static KEY: AtomicU64 = AtomicU64::new(0);

/// The same secret, for the allocation path's own use: a static the descriptor does not point
/// at is reached with one load relative to the instruction pointer, where one whose address the
/// descriptor holds goes through the global offset table.
static SECRET: AtomicU64 = AtomicU64::new(0);

/// Chooses `KEY`: from the kernel's random bytes, or, where getrandom is refused, from the 16
/// bytes the kernel gave the process at exec (AT_RANDOM), mixed so that it is not glibc's stack
/// or pointer guard. Never zero.
pub fn choose_key() {
    let mut key = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into the word it is given; GRND_NONBLOCK keeps a
    // start-up before the pool is ready from blocking.
    let got = unsafe { libc::getrandom((&raw mut key).cast(), 8, libc::GRND_NONBLOCK) };
    if got != 8 {
        // SAFETY: AT_RANDOM's value is the address of 16 bytes the kernel placed on the initial
        // stack, readable for the process's life; 0 when absent.
        let at = unsafe { libc::getauxval(libc::AT_RANDOM) } as *const [u64; 2];
        if !at.is_null() {
            // SAFETY: as above; an unaligned read, as the bytes need not be 8-aligned.
            let [a, b] = unsafe { at.read_unaligned() };
            key = (a.rotate_left(23) ^ b).wrapping_mul(0xff51_afd7_ed55_8ccd);
        }
    }
    SECRET.store(key | 1 << 63, Ordering::Relaxed);
    KEY.store(key | 1 << 63, Ordering::Relaxed);
}

/// What `hdr`'s stored magic is xored with.
#[inline(always)]
pub fn tag(hdr: *const Header) -> u32 {
    header_tag(hdr as u64, SECRET.load(Ordering::Relaxed))
}

/// A header's magic word, read and written as the states above: the tag is taken off on every
/// load and put on at every store. Atomic, as frees of one block may race, and the loser must
/// see the winner's store.
#[derive(Clone, Copy)]
pub struct Magic<'a> {
    word: &'a AtomicU32,
    tag: u32,
}

impl Magic<'_> {
    #[inline(always)]
    pub fn load(&self, order: Ordering) -> u32 {
        self.word.load(order) ^ self.tag
    }

    #[inline(always)]
    pub fn store(&self, state: u32, order: Ordering) {
        self.word.store(state ^ self.tag, order)
    }

    #[inline(always)]
    pub fn compare_exchange(
        &self,
        current: u32,
        new: u32,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u32, u32> {
        let t = self.tag;
        self.word
            .compare_exchange(current ^ t, new ^ t, success, failure)
            .map(|v| v ^ t)
            .map_err(|v| v ^ t)
    }
}

/// The header's magic, as states.
///
/// # Safety
/// `hdr` must be readable and writable for HEADER_SIZE bytes and 4-byte aligned, for `'a`.
#[inline(always)]
pub unsafe fn magic<'a>(hdr: *mut Header) -> Magic<'a> {
    Magic {
        // SAFETY: the caller guarantees the header is accessible and aligned; AtomicU32 has the
        // same layout as u32.
        word: unsafe { AtomicU32::from_ptr(core::ptr::addr_of_mut!((*hdr).magic)) },
        tag: tag(hdr),
    }
}

/// The next handed block after `hdr` in an inbox.
///
/// # Safety
/// `hdr` must be a handed header (its inbox slot written by `set_inbox_next`).
pub unsafe fn inbox_next(hdr: *mut Header) -> *mut Header {
    // SAFETY: passed on from the caller.
    unsafe { (*hdr).frames[INBOX_SLOT] as *mut Header }
}

/// Links `hdr` in front of `next` in an inbox.
///
/// # Safety
/// `hdr` must be a header this thread just moved to `MAGIC_HANDED`, so no one else writes it.
pub unsafe fn set_inbox_next(hdr: *mut Header, next: *mut Header) {
    // SAFETY: passed on from the caller.
    unsafe { (*hdr).frames[INBOX_SLOT] = next as usize };
}

/// Moves a header from live to freed, atomically, so of two racing frees of one block exactly
/// one proceeds. On failure says what the header held instead. (Recorded blocks are claimed
/// under their list's lock instead, by `lists::take`.)
///
/// # Safety
/// As for `magic`.
pub unsafe fn claim(hdr: *mut Header) -> Result<(), u32> {
    // SAFETY: passed on from the caller.
    unsafe { magic(hdr) }
        .compare_exchange(MAGIC_LIVE, MAGIC_FREED, Ordering::AcqRel, Ordering::Acquire)
        .map(|_| ())
}

/// How much an aligned block asks of the backend beyond its size: room for the header, for the
/// word in front of it that holds the backend's address, and for moving the user pointer up to
/// the alignment from wherever the backend's block starts.
///
/// An aligned block is an ordinary backend block with the user pointer placed at the first
/// multiple of the alignment that leaves room in front, not the backend's own aligned
/// allocation: that would need the alignment twice (once for the lead that keeps the user
/// pointer aligned behind the header, once inside the backend to align its block), and a
/// `memalign` of 1 GiB would map 2 GiB.
pub fn aligned_extra(align_log2: u32) -> usize {
    HEADER_SIZE + BASE_WORD + (1usize << align_log2) - 1
}

/// The word in front of an aligned block's header holds the backend block's address.
const BASE_WORD: usize = core::mem::size_of::<usize>();

/// The header of an ordinary block the backend returned at `base`.
pub fn from_base(base: *mut u8) -> *mut Header {
    base.cast()
}

/// The header of an aligned block placed in the backend block at `base` (of at least
/// `size + aligned_extra(align_log2)` bytes): its user pointer is the first multiple of the
/// alignment with room for the header and the base word in front, and the base word is written.
///
/// # Safety
/// `base` must be a fresh backend block of that many bytes, ours alone.
pub unsafe fn place_aligned(base: *mut u8, align_log2: u32) -> *mut Header {
    let align = 1usize << align_log2;
    let at = (base as usize + HEADER_SIZE + BASE_WORD).next_multiple_of(align);
    let user = base.wrapping_add(at - base as usize);
    let hdr = from_user(user);
    // SAFETY: the word lies in front of the header, inside the caller's block (`at` is at least
    // HEADER_SIZE + BASE_WORD past `base`); the header is 16-aligned, so the word is 8-aligned.
    unsafe { hdr.cast::<usize>().sub(1).write(base as usize ^ base_seal(hdr)) };
    hdr
}

/// What the base word is xored with: bound to the header's address and the secret, so that a
/// forged word decodes to an address `base_of` refuses rather than one free would hand to the
/// backend.
#[inline(always)]
fn base_seal(hdr: *mut Header) -> usize {
    (SECRET.load(Ordering::Relaxed) as usize ^ hdr as usize).rotate_left(17)
}

/// The header in front of a user pointer.
pub fn from_user(user: *mut u8) -> *mut Header {
    user.wrapping_sub(HEADER_SIZE).cast()
}

/// The user pointer behind a header.
pub fn to_user(hdr: *mut Header) -> *mut u8 {
    hdr.cast::<u8>().wrapping_add(HEADER_SIZE)
}

/// The backend block that holds a header, which is what the backend's free wants back; None when
/// an aligned block's base word was overwritten: it does not decode to the one place
/// `place_aligned` puts the user pointer for that base and alignment.
///
/// # Safety
/// `hdr` must be the header of a block of ours with this alignment, still allocated.
pub unsafe fn base_of(hdr: *mut Header, align_log2: u32) -> Option<*mut u8> {
    if align_log2 == 0 {
        return Some(hdr.cast());
    }
    // SAFETY: `place_aligned` wrote the base word right in front of an aligned block's header.
    let base = unsafe { hdr.cast::<usize>().sub(1).read() } ^ base_seal(hdr);
    let user = to_user(hdr) as usize;
    let placed = base
        .checked_add(HEADER_SIZE + BASE_WORD)
        .and_then(|at| at.checked_next_multiple_of(1usize.checked_shl(align_log2)?));
    (placed == Some(user)).then_some(base as *mut u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aligned_block_keeps_its_alignment_room_and_base() {
        for log2 in 5..14 {
            for offset in [0usize, 8, 16, 24, 48] {
                let size = 100;
                let mut backing = vec![0u8; size + aligned_extra(log2) + 64];
                // A backend block at any 8-byte boundary.
                let base = backing.as_mut_ptr().wrapping_add(offset.min(backing.len() - 1));
                let base = base.wrapping_add(base.align_offset(8));
                // SAFETY: `backing` holds `size + aligned_extra` bytes from `base` on.
                let hdr = unsafe { place_aligned(base, log2) };
                let user = to_user(hdr);
                assert_eq!(user as usize % (1 << log2), 0);
                assert!(hdr as usize >= base as usize + BASE_WORD);
                assert!(user as usize + size <= base as usize + size + aligned_extra(log2));
                // SAFETY: the base word was just written.
                assert_eq!(unsafe { base_of(hdr, log2) }, Some(base));
                // A word overwritten by an overflow is refused, not followed.
                // SAFETY: the word lies inside `backing`, in front of the header.
                unsafe { hdr.cast::<usize>().sub(1).write(0x4141_4141_4141_4141) };
                // SAFETY: as above.
                assert_eq!(unsafe { base_of(hdr, log2) }, None);
            }
        }
    }

    #[test]
    fn size_word_round_trips() {
        let w = Header::pack_size_word(123_456_789, 63, 12);
        let h = Header {
            next: core::ptr::null_mut(),
            prev: core::ptr::null_mut(),
            frames: [0; NFRAMES],
            size_word: w,
            tid: 1,
            magic: MAGIC_LIVE,
        };
        assert_eq!((h.size(), h.list(), h.align_log2()), (123_456_789, 63, 12));
    }
}
