//! The operation in flight on a thread: what libdmem records, per thread, in the thread's own
//! area, around each change of the lists, and what every reader makes of it.
//!
//! Between linking a new block and returning its user pointer, an allocation holds the block by
//! its header's address alone (and may be in the backend meanwhile, giving back blocks other
//! threads freed, or waiting on its lock). memcheck, which puts no header in front, sees such a
//! thread hold the block it is allocating; so do dmem's readers. And a thread caught inside a
//! link or an unlink leaves its list half changed (counters a block apart from the links, a
//! back link not yet written): that is an operation in flight, not corruption.
//!
//! Nothing of this is guessed from a thread's stack: the library writes two words in the
//! thread's area (`OP` and `HEADER`), the header first, before it touches a list, and clears
//! the operation once the user pointer is in hand (or the block is given back). The exit report
//! reads them from each stopped thread's area, the launcher from a core or a live process at
//! the thread pointer (`fs_base`) plus the offset the layout descriptor publishes
//! (`descriptor::field::TLS_OFFSET`, `descriptor::field::INFLIGHT_OFF`).

/// The operations, as the library writes them in the thread's `OP` word. Zero: none.
pub mod op {
    pub const NONE: u64 = 0;
    pub const MALLOC: u64 = 1;
    pub const CALLOC: u64 = 2;
    /// Every aligned entry point: memalign, posix_memalign, aligned_alloc, valloc, pvalloc.
    pub const MEMALIGN: u64 = 3;
    pub const REALLOC: u64 = 4;
    pub const FREE: u64 = 5;
}

/// The words of a thread's record, in order: the operation, then the header it works on.
pub const WORDS: usize = 2;

/// The most blocks one thread can be found carrying. One today; kept as a bound for the
/// fixed-size room readers that must not allocate set aside.
pub const MOST: usize = 8;

/// One thread's record, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    pub op: u64,
    /// The address of the header the operation works on.
    pub header: u64,
}

impl InFlight {
    /// The record from its words; None when no operation is in flight (or the words are not a
    /// record this reader knows, which a reader of a core must not believe).
    pub fn from_words(words: [u64; WORDS]) -> Option<InFlight> {
        let [op, header] = words;
        (op != op::NONE && op <= op::FREE && header != 0 && header.is_multiple_of(8))
            .then_some(InFlight { op, header })
    }

    /// The entry point the operation came through, as the program called it.
    pub fn entry(&self) -> &'static str {
        match self.op {
            op::MALLOC => "malloc",
            op::CALLOC => "calloc",
            op::MEMALIGN => "memalign",
            op::REALLOC => "realloc",
            op::FREE => "free",
            _ => "?",
        }
    }

    /// Whether the operation hands a block out: its header, once live, is held by the thread.
    pub fn allocating(&self) -> bool {
        matches!(self.op, op::MALLOC | op::CALLOC | op::MEMALIGN | op::REALLOC)
    }

    /// The block the thread carries, as its start pointer: the block an allocation in flight
    /// works on, when `block_at(start)` says a live block starts there. A free in flight carries
    /// nothing: the program still holds the pointer it passed, or the block is gone.
    pub fn carried(&self, header_size: u64, block_at: impl Fn(u64) -> bool) -> Option<u64> {
        let start = self.header.checked_add(header_size)?;
        (self.allocating() && block_at(start)).then_some(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_recorded_allocation_carries_its_own_live_block() {
        let block_at = |a: u64| a == 0x1070 || a == 0x2070;
        assert_eq!(InFlight::from_words([op::NONE, 0x1000]), None);
        assert_eq!(InFlight::from_words([99, 0x1000]), None);
        assert_eq!(InFlight::from_words([op::MALLOC, 0]), None);
        assert_eq!(InFlight::from_words([op::MALLOC, 0x1003]), None);
        let m = InFlight::from_words([op::MALLOC, 0x1000]).unwrap();
        assert_eq!(m.carried(0x70, block_at), Some(0x1070));
        assert_eq!(m.entry(), "malloc");
        // A block not (or no longer) live is nobody's to carry.
        let gone = InFlight::from_words([op::MEMALIGN, 0x3000]).unwrap();
        assert_eq!(gone.carried(0x70, block_at), None);
        let f = InFlight::from_words([op::FREE, 0x2000]).unwrap();
        assert_eq!(f.carried(0x70, block_at), None);
        assert_eq!(f.entry(), "free");
    }
}
