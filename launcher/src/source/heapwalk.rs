//! The list walk: from the layout descriptor's address and any `Memory`, every live block with
//! its size, thread and stack, plus how far each list could be trusted.
//!
//! Only the descriptor and raw memory are read, never debug info, so a stripped library will do.
//! The lists may change while they are read (a running process goes on allocating), so each list is
//! read between two loads of its sequence counter (layout version 2): the same even value on
//! both sides means the list was whole. A list whose counter was odd or moved is read again, a
//! bounded number of times, and counted as inconsistent if it never came out whole; its blocks
//! from the attempt that read the most are still returned. Every header is checked before it is
//! believed (alignment, magic, list index, back link, a step cap), so a torn read is read again
//! or stepped over (see `walk_headers`) instead of leading the walk into a loop or off into the
//! weeds.
//!
//! Use: `locate(&mem, &maps)` finds the descriptor through the mapped objects' dynamic symbols,
//! then `walk(&mem, &layout, WalkOptions::default())` gives the blocks, the distinct stacks they
//! point into, and how each list was read; `stacks::group` sums them by stack. `mem` is any
//! `Memory`: a running process (`LiveMemory`), or a core file's segments, which never change, so
//! every list comes out whole on the first attempt (unless the core was taken mid-update).
//!
//! The parts: `layout` reads the descriptor and finds it, `walk` reads each list under its
//! sequence counter, `headers` follows one list header by header, `sizes` checks the sizes and
//! counters of what was found, and `found` holds what a walk returns.

mod found;
mod headers;
mod layout;
mod sizes;
mod walk;

pub use found::{moving, problems, Block, Denied, ListRead, Problem, Walk, WalkOptions};
pub use layout::{counters, locate, locate_by_magic, Counters, Layout, LocateError, FLAG_RECORDING};
pub use walk::walk;

#[cfg(test)]
pub mod tests {
    use super::layout::LayoutError;
    use super::*;
    use crate::analysis::descriptor::{self, field, Sealed};
    use crate::source::memory::{Memory, ReadError};
    use std::cell::RefCell;
    use std::collections::HashMap;

    type OnRead = Box<dyn FnMut(&FakeMemory)>;

    /// A fake address space: little-endian words at addresses, anything else unmapped.
    #[derive(Default)]
    pub struct FakeMemory {
        pub bytes: RefCell<HashMap<u64, u8>>,
        /// Called before each read: lets a test change memory under the walker.
        pub on_read: RefCell<Option<OnRead>>,
    }

    impl FakeMemory {
        pub fn put(&self, addr: u64, data: &[u8]) {
            let mut b = self.bytes.borrow_mut();
            for (i, v) in data.iter().enumerate() {
                b.insert(addr + i as u64, *v);
            }
        }
        pub fn put_u64(&self, addr: u64, v: u64) {
            self.put(addr, &v.to_le_bytes());
        }
    }

    impl Memory for FakeMemory {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
            if let Some(f) = self.on_read.borrow_mut().as_mut() {
                f(self);
            }
            let b = self.bytes.borrow();
            for (i, v) in buf.iter_mut().enumerate() {
                *v = *b.get(&(addr + i as u64)).ok_or(ReadError::Unmapped)?;
            }
            Ok(())
        }
    }

    pub const DESC: u64 = 0x1000;
    pub const LISTS: u64 = 0x2000;
    pub const FLAGS: u64 = 0x3000;
    pub const CHECKS: u64 = 0x4000;
    const STRIDE: u64 = 128;
    const NLISTS: u64 = 2;
    /// The word that holds the offset from a thread's pointer to its area (0: none found yet).
    const TLS_OFFSET: u64 = 0x4f00;
    /// The word holding the process's secret, and the secret: headers' magics are sealed.
    const KEY_AT: u64 = 0x4f08;
    const KEY: u64 = 0x8000_5eed_1234_abcd;

    /// The magic the library stores for `state` in the header at `h`.
    pub fn sealed(h: u64, state: u32) -> [u8; 4] {
        (state ^ descriptor::header_tag(h, KEY)).to_le_bytes()
    }

    /// The fields of a descriptor of this crate's own layout, two lists.
    const FAKE_FIELDS: [(&str, u64); 37] = [
        (field::HEADER_SIZE, 112),
        (field::NFRAMES, 10),
        (field::OFF_NEXT, 0),
        (field::OFF_PREV, 8),
        (field::OFF_FRAMES, 16),
        (field::OFF_SIZE, 96),
        (field::SIZE_BITS, 48),
        (field::OFF_TID, 104),
        (field::OFF_MAGIC, 108),
        (field::MAGIC_LIVE, 0xd3e3_a11c),
        (field::MAGIC_FREED, 0xd3e3_f4ee),
        (field::LISTS, LISTS),
        (field::NLISTS, NLISTS),
        (field::LIST_STRIDE, STRIDE),
        (field::LIST_OFF_HEAD, 0),
        (field::LIST_OFF_LIVE_BLOCKS, 8),
        (field::LIST_OFF_LIVE_BYTES, 16),
        (field::LIST_OFF_ALLOCS, 24),
        (field::LIST_OFF_FREES, 32),
        (field::LIST_OFF_CHANGES, 40),
        (field::ARENA_START, 0),
        (field::ARENA_END, 0),
        (field::FLAGS, FLAGS),
        (field::SIZE_LIST_SHIFT, 48),
        (field::SIZE_LIST_BITS, 8),
        (field::SIZE_ALIGN_SHIFT, 56),
        (field::SIZE_ALIGN_BITS, 8),
        (field::MAGIC_HANDED, 0xd3e3_f4ed),
        (field::LIST_OFF_OWNER, 56),
        (field::LIST_OFF_HANDED_BLOCKS, 72),
        (field::LIST_OFF_HANDED_BYTES, 80),
        (field::LIST_OFF_DRAINED_BLOCKS, 88),
        (field::LIST_OFF_DRAINED_BYTES, 96),
        (field::CHECKS, CHECKS),
        (field::TLS_OFFSET, TLS_OFFSET),
        (field::INFLIGHT_OFF, 64),
        (field::MAGIC_KEY, KEY_AT),
    ];

    /// A process with the descriptor at `DESC` and two empty lists.
    pub fn fake_process() -> FakeMemory {
        let m = FakeMemory::default();
        let (desc, checks) = descriptor::encode(&FAKE_FIELDS);
        m.put(DESC, &desc);
        m.put(CHECKS, &checks);
        m.put_u64(FLAGS, FLAG_RECORDING);
        m.put_u64(TLS_OFFSET, 0);
        m.put_u64(KEY_AT, KEY);
        for i in 0..NLISTS {
            m.put(LISTS + i * STRIDE, &[0u8; STRIDE as usize]);
        }
        m
    }

    /// Puts a header at `h` on list `list` (at its head), as the library's `link` does.
    pub fn link(m: &FakeMemory, list: u64, h: u64, size: u64, tid: u32, frames: &[u64]) {
        let base = LISTS + list * STRIDE;
        let head = m.u64_at(base).unwrap();
        let mut hdr = [0u8; 112];
        hdr[0..8].copy_from_slice(&head.to_le_bytes());
        for (k, f) in frames.iter().enumerate() {
            hdr[16 + 8 * k..24 + 8 * k].copy_from_slice(&f.to_le_bytes());
        }
        hdr[96..104].copy_from_slice(&(size | (list << 48)).to_le_bytes());
        hdr[104..108].copy_from_slice(&tid.to_le_bytes());
        hdr[108..112].copy_from_slice(&sealed(h, 0xd3e3_a11c));
        m.put(h, &hdr);
        if head != 0 {
            m.put_u64(head + 8, h);
        }
        m.put_u64(base, h);
        let w = |off: u64| m.u64_at(base + off).unwrap();
        m.put_u64(base + 8, w(8) + 1);
        m.put_u64(base + 16, w(16) + size);
        m.put_u64(base + 24, w(24) + 1);
        m.put_u64(base + 40, w(40) + 2);
    }

    #[test]
    fn walks_every_list_and_groups_stacks() {
        let m = fake_process();
        link(&m, 0, 0x10000, 100, 7, &[0xa, 0xb]);
        link(&m, 0, 0x10400, 200, 7, &[0xa, 0xb]);
        link(&m, 1, 0x10800, 300, 8, &[0xc]);
        let l = Layout::read(&m, DESC).unwrap();
        assert_eq!(l.version, descriptor::VERSION);
        assert_eq!(l.flags(&m).unwrap(), FLAG_RECORDING);
        let w = walk(&m, &l, WalkOptions::default()).unwrap();
        assert_eq!(w.inconsistent(), 0);
        assert_eq!(w.blocks.len(), 3);
        assert_eq!(w.live_bytes(), 600);
        assert_eq!(w.counters.live_blocks, 3);
        assert_eq!(w.counters.live_bytes, 600);
        assert_eq!(w.stacks.len(), 2, "two distinct stacks: {:?}", w.stacks);
        let b = w.blocks.iter().find(|b| b.addr == 0x10800 + 112).unwrap();
        assert_eq!(
            (b.size, b.tid, &w.stacks[b.stack as usize][..]),
            (300, 8, &[0xc][..])
        );
    }

    #[test]
    fn a_block_handed_to_its_owner_is_walked_past_and_counted_as_freed() {
        let m = fake_process();
        link(&m, 0, 0x10000, 100, 7, &[0xa]);
        link(&m, 0, 0x10400, 200, 8, &[0xb]);
        link(&m, 0, 0x10800, 300, 7, &[0xa]);
        // Another thread freed the middle block: handed, still linked, counted as live by the
        // owner's counters, and once in the handed ones.
        m.put(0x10400 + 108, &sealed(0x10400, 0xd3e3_f4ed));
        let base = LISTS;
        m.put_u64(base + 72, 1);
        m.put_u64(base + 80, 200);
        let l = Layout::read(&m, DESC).unwrap();
        for opts in [WalkOptions::default(), WalkOptions::still()] {
            let w = walk(&m, &l, opts).unwrap();
            assert_eq!(w.inconsistent(), 0, "{:?}", w.lists[0]);
            let mut addrs: Vec<_> = w.blocks.iter().map(|b| b.addr - 112).collect();
            addrs.sort_unstable();
            assert_eq!(addrs, [0x10000, 0x10800]);
            assert_eq!((w.counters.live_blocks, w.counters.live_bytes), (2, 400));
            assert_eq!(w.counters.allocs - w.counters.frees, 2);
        }
        // Once unlinked by the owner it is drained: the counters agree with the walk again.
        m.put_u64(base + 88, 1);
        m.put_u64(base + 96, 200);
        let c = counters(&m, &l).unwrap();
        assert_eq!((c.live_blocks, c.live_bytes), (3, 600));
    }

    #[test]
    fn a_loop_or_a_bad_header_ends_the_attempt_and_is_reported() {
        let m = fake_process();
        link(&m, 0, 0x10000, 100, 7, &[0xa]);
        link(&m, 0, 0x10400, 200, 7, &[0xa]);
        // Make the tail point back at the head: a torn read could show this.
        m.put_u64(0x10000, 0x10400);
        let l = Layout::read(&m, DESC).unwrap();
        let w = walk(
            &m,
            &l,
            WalkOptions {
                attempts: 3,
                strict: false,
            },
        )
        .unwrap();
        assert_eq!(w.inconsistent(), 1);
        assert_eq!(w.lists[0].attempts, 3);
        assert!(
            w.lists[0].problem.as_ref().unwrap().text.contains("comes back"),
            "{:?}",
            w.lists[0]
        );
        assert_eq!(
            w.blocks.len(),
            2,
            "the blocks before the bad link are kept, once each"
        );
        // A back link that names another header (the one before was unlinked while the walk
        // was past it) does not stop the walk, but the list is not whole.
        m.put_u64(0x10000, 0);
        m.put_u64(0x10000 + 8, 0x20000);
        let w = walk(
            &m,
            &l,
            WalkOptions {
                attempts: 2,
                strict: false,
            },
        )
        .unwrap();
        assert_eq!(
            (w.blocks.len(), w.inconsistent(), w.lists[0].problem.as_ref()),
            (2, 1, None)
        );
        // A header whose magic is gone (freed under us) ends the walk there.
        m.put_u64(0x10000, 0);
        m.put(0x10000 + 108, &sealed(0x10000, 0xd3e3_f4ee));
        let w = walk(&m, &l, WalkOptions::default()).unwrap();
        let why = &w.lists[0].problem.as_ref().unwrap().text;
        assert!(
            why.contains("freed block (magic 0xd3e3f4ee) still on the list"),
            "{why}"
        );
        assert_eq!(w.blocks.len(), 1);
    }

    /// A block freed between the read of the link to it and the read of it: the walk goes on
    /// from the header before it, whose link now skips it.
    #[test]
    fn a_block_freed_under_the_walk_is_stepped_over() {
        let m = fake_process();
        let (a, b, c) = (0x10000, 0x10400, 0x10800);
        link(&m, 0, c, 300, 7, &[0xc]);
        link(&m, 0, b, 200, 7, &[0xb]);
        link(&m, 0, a, 100, 7, &[0xa]);
        let l = Layout::read(&m, DESC).unwrap();
        // Reads: the sequence counter, the list, header a, then header b: free b just before.
        let reads = RefCell::new(0);
        *m.on_read.borrow_mut() = Some(Box::new(move |m: &FakeMemory| {
            *reads.borrow_mut() += 1;
            if *reads.borrow() == 4 {
                m.put_u64(a, c);
                m.put_u64(c + 8, a);
                m.put(b + 108, &sealed(b, 0xd3e3_f4ee));
                let seq = m.bytes.borrow()[&(LISTS + 40)];
                m.put_u64(LISTS + 40, seq as u64 + 2);
            }
        }));
        let w = walk(
            &m,
            &l,
            WalkOptions {
                attempts: 1,
                strict: false,
            },
        )
        .unwrap();
        let sizes: Vec<u64> = w.blocks.iter().map(|b| b.size).collect();
        assert_eq!(sizes, [100, 300], "{:?}", w.lists[0]);
        assert!(!w.lists[0].consistent, "the list moved");
        assert_eq!(w.lists[0].problem, None);
    }

    #[test]
    fn a_moving_counter_is_read_again_and_an_odd_one_never_counts() {
        let m = fake_process();
        link(&m, 0, 0x10000, 100, 7, &[0xa]);
        let l = Layout::read(&m, DESC).unwrap();
        // The counter moves on every read: no attempt can see the list whole.
        let n = RefCell::new(0u64);
        *m.on_read.borrow_mut() = Some(Box::new(move |m: &FakeMemory| {
            let mut n = n.borrow_mut();
            *n += 2;
            m.bytes.borrow_mut().insert(LISTS + 40, *n as u8);
        }));
        let w = walk(
            &m,
            &l,
            WalkOptions {
                attempts: 4,
                strict: false,
            },
        )
        .unwrap();
        assert_eq!((w.lists[0].consistent, w.lists[0].attempts), (false, 4));
        assert!(w.lists[1].consistent, "the other list did not change");
        *m.on_read.borrow_mut() = None;
        // Stuck odd: a writer that never finished. Counted, never trusted.
        m.put_u64(LISTS + 40, 5);
        let w = walk(
            &m,
            &l,
            WalkOptions {
                attempts: 2,
                strict: false,
            },
        )
        .unwrap();
        assert_eq!(w.inconsistent(), 1);
        m.put_u64(LISTS + 40, 6);
        let w = walk(
            &m,
            &l,
            WalkOptions {
                attempts: 2,
                strict: false,
            },
        )
        .unwrap();
        assert_eq!((w.inconsistent(), w.lists[0].attempts), (0, 1));
    }

    #[test]
    fn a_version_2_descriptor_reads_as_its_fields_in_order() {
        let m = fake_process();
        let now = Layout::read(&m, DESC).unwrap();
        let words = descriptor::OLD_ORDER.map(|name| FAKE_FIELDS.iter().find(|(n, _)| *n == name).unwrap().1);
        let old = 0x8000;
        m.put_u64(old, descriptor::MAGIC);
        m.put_u64(old + 8, 2);
        for (i, w) in words.iter().enumerate() {
            m.put_u64(old + 16 + 8 * i as u64, *w);
        }
        let v2 = Layout::read(&m, old).unwrap();
        assert_eq!(v2.version, 2);
        assert_eq!(
            format!(
                "{:?}",
                Layout {
                    addr: 0,
                    version: 0,
                    ..v2
                }
            ),
            format!(
                "{:?}",
                // Version 2 had no handed blocks.
                Layout {
                    addr: 0,
                    version: 0,
                    magic_handed: None,
                    list_off_hand: None,
                    history: None,
                    sealed: Sealed::Older,
                    inflight: None,
                    magic_key: None,
                    ..now
                }
            )
        );
    }

    #[test]
    fn a_corrupt_descriptor_is_refused() {
        let m = fake_process();
        // The value of the thirteenth entry, `nlists`.
        let nlists = DESC + (descriptor::HEAD_LEN + 12 * descriptor::ENTRY_LEN + descriptor::NAME_LEN) as u64;
        let refused = |m: &FakeMemory| match Layout::read(m, DESC) {
            Err(LayoutError::Invalid(why)) => why,
            other => panic!("a changed descriptor was not refused: {other:?}"),
        };
        // Its checks name the field that changed, even to a number that would pass for true.
        for value in [1 << 40, 3] {
            m.put_u64(nlists, value);
            let why = refused(&m);
            assert!(why.contains("field nlists (field 13, holding"), "{why}");
        }
        m.put_u64(nlists, NLISTS);
        m.put(nlists - descriptor::NAME_LEN as u64, b"nlistz");
        assert!(refused(&m).contains("field nlistz"), "{}", refused(&m));
        // Checks never written (a process read as it starts) are said to be missing, and the
        // fields are still checked one by one: a field renamed is a field missing.
        m.put(CHECKS, &[0u8; 8 * (FAKE_FIELDS.len() + 1)]);
        assert_eq!(refused(&m), "the descriptor has no field nlists");
        m.put(nlists - descriptor::NAME_LEN as u64, b"nlists");
        assert_eq!(Layout::read(&m, DESC).unwrap().sealed, Sealed::Unwritten);
        m.put_u64(DESC + 8, 9);
        let Err(LayoutError::Invalid(why)) = Layout::read(&m, DESC) else {
            panic!("version 9 accepted")
        };
        assert!(why.contains("version 9"), "{why}");
    }

    /// A size that cannot be true (it runs past the next block's header) leaves its block out,
    /// named by its header; one that could be true but does not add up to its list's counters
    /// is said of the list. In a core and in a running process alike.
    #[test]
    fn a_size_not_believed_is_left_out_and_one_that_does_not_add_up_is_said() {
        let m = fake_process();
        link(&m, 0, 0x10000, 100, 7, &[0xa]);
        link(&m, 0, 0x10400, 200, 7, &[0xa]);
        link(&m, 1, 0x10800, 300, 8, &[0xc]);
        let l = Layout::read(&m, DESC).unwrap();
        m.put_u64(0x10000 + 96, 100_000);
        for opts in [WalkOptions::still(), WalkOptions::default()] {
            let w = walk(&m, &l, opts).unwrap();
            let addrs: Vec<u64> = w.blocks.iter().map(|b| b.addr - 112).collect();
            assert_eq!(addrs, [0x10400, 0x10800], "sorted, the broken one left out");
            let p: Vec<&Problem> = w.problems();
            assert_eq!(p.len(), 1, "{p:?}");
            assert_eq!((p[0].list, p[0].header), (Some(0), Some(0x10000)));
            assert!(
                p[0].text
                    .contains("its size, 100000 bytes, runs past the next block's header at 0x10400"),
                "{}",
                p[0].text
            );
            assert_eq!(w.moving(), 0, "corruption is no list moving");
        }
        m.put_u64(0x10000 + 96, 100);
        m.put_u64(0x10800 + 96, 250 | 1 << 48);
        let w = walk(&m, &l, WalkOptions::still()).unwrap();
        assert_eq!(w.blocks.len(), 3);
        let p = w.problems();
        assert_eq!((p.len(), p[0].list, p[0].header), (1, Some(1), None));
        assert!(
            p[0].text
                .contains("its blocks add up to 250 bytes in 1, but its counters say 300 bytes in 1"),
            "{}",
            p[0].text
        );
    }

    /// Any one byte of the descriptor or of its checks changed, to any of a few values, and
    /// the descriptor is refused: never read as if nothing happened.
    #[test]
    fn no_changed_byte_of_a_descriptor_goes_unnoticed() {
        let (desc, checks) = descriptor::encode(&FAKE_FIELDS);
        let whole = fake_process();
        assert_eq!(Layout::read(&whole, DESC).unwrap().sealed, Sealed::Verified);
        for (base, bytes) in [(DESC, &desc), (CHECKS, &checks)] {
            for i in 0..bytes.len() as u64 {
                for flip in [0x01u8, 0x80, 0xff] {
                    let m = fake_process();
                    m.put(base + i, &[bytes[i as usize] ^ flip]);
                    assert!(
                        Layout::read(&m, DESC).is_err(),
                        "byte {i} of the {} xor {flip:#x} went unnoticed",
                        if base == DESC { "descriptor" } else { "checks" }
                    );
                }
            }
        }
    }
}
