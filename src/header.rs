//! The 112-byte header that sits in front of every block we hand out.
//!
//! The header is the whole per-block cost of the tool, and a debugger reads it out of a core file
//! with nothing but the layout descriptor, so its shape is fixed and versioned (see `layout.rs`).
//! All raw pointer arithmetic between the backend's block, the header and the user pointer lives
//! in this file.

use core::sync::atomic::{AtomicU32, Ordering};

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

/// The header's magic as an atomic: frees of one block may race, and the loser must see the
/// winner's store.
///
/// # Safety
/// `hdr` must be readable and writable for HEADER_SIZE bytes and 4-byte aligned, for `'a`.
#[inline(always)]
pub unsafe fn magic<'a>(hdr: *mut Header) -> &'a AtomicU32 {
    // SAFETY: the caller guarantees the header is accessible and aligned; AtomicU32 has the same
    // layout as u32.
    unsafe { AtomicU32::from_ptr(core::ptr::addr_of_mut!((*hdr).magic)) }
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
    unsafe { hdr.cast::<*mut u8>().sub(1).write(base) };
    hdr
}

/// The header in front of a user pointer.
pub fn from_user(user: *mut u8) -> *mut Header {
    user.wrapping_sub(HEADER_SIZE).cast()
}

/// The user pointer behind a header.
pub fn to_user(hdr: *mut Header) -> *mut u8 {
    hdr.cast::<u8>().wrapping_add(HEADER_SIZE)
}

/// The backend block that holds a header, which is what the backend's free wants back.
///
/// # Safety
/// `hdr` must be the header of a block of ours with this alignment, still allocated.
pub unsafe fn base_of(hdr: *mut Header, align_log2: u32) -> *mut u8 {
    if align_log2 == 0 {
        return hdr.cast();
    }
    // SAFETY: `place_aligned` wrote the base word right in front of an aligned block's header.
    unsafe { hdr.cast::<*mut u8>().sub(1).read() }
}

/// How far the user pointer lies from the start of the backend's block.
///
/// # Safety
/// As for `base_of`.
pub unsafe fn lead_of(hdr: *mut Header, align_log2: u32) -> usize {
    // SAFETY: passed on from the caller.
    to_user(hdr) as usize - unsafe { base_of(hdr, align_log2) } as usize
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
                assert_eq!(unsafe { base_of(hdr, log2) }, base);
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
