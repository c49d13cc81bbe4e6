//! The fast walker's rule for one return address, packed in one word, and the process-wide
//! cache of rules that every thread reads and fills without a lock (see `fast.rs`).

use core::sync::atomic::{AtomicU64, Ordering};

/// log2 of the number of cache slots. 16Ki slots of 16 bytes: 256 KiB of zeroed memory of which
/// only the pages that hold used slots ever become resident; a large program's hot allocation
/// paths touch a few thousand distinct return addresses.
pub(super) const CACHE_BITS: u32 = 14;
pub(super) const CACHE_SLOTS: usize = 1 << CACHE_BITS;

/// One cache slot: `check` is the key xor the rule. An empty slot has rule 0, which no valid rule
/// encodes to.
pub(super) struct Slot {
    check: AtomicU64,
    rule: AtomicU64,
}

pub(super) static CACHE: [Slot; CACHE_SLOTS] = [const {
    Slot {
        check: AtomicU64::new(0),
        rule: AtomicU64::new(0),
    }
}; CACHE_SLOTS];

/// Bumped after each dlclose; its low 16 bits go into every key.
pub(super) static GENERATION: AtomicU64 = AtomicU64::new(0);

/// How to get from one frame's registers to its caller's, packed in one nonzero word:
/// bits 0..2 say where the CFA comes from, bits 2..4 how to restore %rbp, bit 4 marks the end of
/// the stack, bits 8..16 hold the return address offset from the CFA in words, bits 16..32 the
/// %rbp offset and bits 32..64 the CFA offset.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Rule(pub(super) u64);

pub(super) const CFA_RSP: u64 = 1;
pub(super) const CFA_RBP: u64 = 2;
/// CFA = *(%rbp + offset): the frame of a function that realigns its stack (GCC's DRAP).
pub(super) const CFA_DEREF_RBP: u64 = 3;
pub(super) const BP_SAME: u64 = 0;
/// The caller's %rbp was saved at CFA + offset.
pub(super) const BP_AT_CFA: u64 = 1;
/// The caller's %rbp was saved at %rbp + offset (a realigning function's prologue).
pub(super) const BP_AT_RBP: u64 = 2;
/// The caller's %rbp is unknown; a later rule based on it fails the bounds check.
pub(super) const BP_LOST: u64 = 3;
pub(super) const END_BIT: u64 = 1 << 4;

impl Rule {
    pub(super) const END: Rule = Rule(END_BIT);

    pub(super) fn new(cfa_base: u64, cfa_off: i64, bp_kind: u64, bp_off: i64, ra_off: i64) -> Option<Rule> {
        let cfa_off = i32::try_from(cfa_off).ok()?;
        let bp_off = i16::try_from(bp_off).ok()?;
        if ra_off % 8 != 0 {
            return None;
        }
        let ra_words = i8::try_from(ra_off / 8).ok()?;
        Some(Rule(
            cfa_base
                | bp_kind << 2
                | u64::from(ra_words as u8) << 8
                | u64::from(bp_off as u16) << 16
                | u64::from(cfa_off as u32) << 32,
        ))
    }

    pub(super) fn is_end(self) -> bool {
        self.0 & END_BIT != 0
    }
    pub(super) fn cfa_base(self) -> u64 {
        self.0 & 3
    }
    pub(super) fn bp_kind(self) -> u64 {
        (self.0 >> 2) & 3
    }
    pub(super) fn ra_off(self) -> isize {
        (self.0 >> 8) as u8 as i8 as isize * 8
    }
    pub(super) fn bp_off(self) -> isize {
        (self.0 >> 16) as u16 as i16 as isize
    }
    pub(super) fn cfa_off(self) -> isize {
        (self.0 >> 32) as u32 as i32 as isize
    }
}

pub(super) fn slot(pc: usize) -> &'static Slot {
    let h = (pc as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - CACHE_BITS);
    &CACHE[h as usize]
}

/// User-space addresses on x86_64 fit in 47 bits, which leaves the top bits for the generation.
pub(super) fn key(pc: usize, generation: u64) -> u64 {
    pc as u64 ^ (generation << 48)
}

#[inline(always)]
pub(super) fn cached(pc: usize, generation: u64) -> Option<Rule> {
    let s = slot(pc);
    let rule = s.rule.load(Ordering::Relaxed);
    let check = s.check.load(Ordering::Relaxed);
    (rule != 0 && check ^ rule == key(pc, generation)).then_some(Rule(rule))
}

pub(super) fn remember(pc: usize, generation: u64, rule: Rule) {
    let s = slot(pc);
    s.check.store(key(pc, generation) ^ rule.0, Ordering::Relaxed);
    s.rule.store(rule.0, Ordering::Relaxed);
}

/// Forgets every cached rule: called after an object was unloaded, since another may be mapped
/// at its addresses. The slots themselves are cleared only when the 16-bit generation in the keys
/// wraps; until then the new generation alone makes old slots miss.
pub fn invalidate() {
    let g = GENERATION.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    if g & 0xffff == 0 {
        for s in CACHE.iter() {
            s.rule.store(0, Ordering::Relaxed);
        }
    }
}
