//! What the walker (`unwind/`) hands the per-stack counts (`stack_counts.rs`) with a stack it
//! captured: the stack's key and, for a shape the walker keeps, where that stack's counts went
//! last. Below both, so the walker does not import the counts, nor the counts the walker.

use crate::header::NFRAMES;

/// Where a stack's counts went last, as one word: the entry's address, the list whose table
/// holds it plus one in the bits above user-space addresses, and `SHARED` in its low bit (free,
/// since entries are 64-byte aligned) when threads share that table. Zero is none.
pub type Memo = usize;
/// What the walker knows of a stack it captured: its key, and, for a stack shape it keeps, the
/// shape's memo of where its counts go. The walker keeps a memo per shape (`unwind/fast.rs`), so
/// a walk answered from a shape, nearly every walk, brings the entry to count in with its key,
/// and counting is a check and two additions. Two words, so it travels in registers.
#[derive(Clone, Copy)]
pub struct Hint {
    pub key: u64,
    pub slot: *mut Memo,
}

impl Hint {
    /// A stack with no shape to remember its entry by.
    pub const fn bare(key: u64) -> Hint {
        Hint {
            key,
            slot: core::ptr::null_mut(),
        }
    }

    /// A stack whose shape keeps its memo in `slot`.
    pub fn kept(key: u64, slot: &mut Memo) -> Hint {
        Hint { key, slot }
    }

    /// The memo, or none.
    #[inline(always)]
    pub fn memo(&self) -> Memo {
        if self.slot.is_null() {
            return 0;
        }
        // SAFETY: a field of a stack shape in the thread's TLS area or its borrowed table, which
        // live as long as the thread (see `stack_counts::remember`).
        unsafe { *self.slot }
    }
}

/// The key of a stack: its frames hashed, made odd.
#[inline]
pub const fn key(frames: &[usize; NFRAMES]) -> u64 {
    let mut h: u64 = 0x243f_6a88_85a3_08d3;
    let mut i = 0;
    while i < NFRAMES {
        h = (h.rotate_left(23) ^ frames[i] as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        i += 1;
    }
    (h ^ (h >> 29)) | 1
}

/// The empty stack, which an allocation made from inside libdmem records.
pub const NO_STACK: Hint = Hint::bare(key(&[0; NFRAMES]));
