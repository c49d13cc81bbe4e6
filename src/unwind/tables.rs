//! An object's `.eh_frame` interpreted with gimli for one address, and the result put as a
//! `Rule`, or None where a rule cannot express it.

use super::objects::Object;
use super::rules::*;
use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, Pointer, ReaderOffset, Register, RegisterRule,
    UnwindContext, UnwindContextStorage, UnwindSection, UnwindTableRow,
};

/// Stack storage for gimli's CFI interpreter, sized for x86_64: the callee-saved registers plus
/// the return address, and `DW_CFA_remember_state` nested twice. Anything larger fails to parse
/// and ends the stack.
pub(super) struct OnStack;

impl<T: ReaderOffset> UnwindContextStorage<T> for OnStack {
    type Rules = [(Register, RegisterRule<T>); 24];
    type Stack = [UnwindTableRow<T, Self>; 3];
}

pub(super) const RBP: Register = Register(6);
pub(super) const RSP: Register = Register(7);
pub(super) const RA: Register = Register(16);

/// Interprets the unwind tables of `obj` for `pc`. None when the object has no entry for `pc`
/// or the entry cannot be put as a `Rule`.
pub(super) fn rule_from_tables(pc: usize, obj: &Object) -> Option<Rule> {
    let hdr = obj.eh_frame_hdr()?;
    let hdr_end = obj.segment_end(hdr)?;
    // SAFETY: [hdr, hdr_end) is the rest of a loaded, readable segment of an object that stays
    // mapped for this call (see `with_object`).
    let hdr_bytes = unsafe { core::slice::from_raw_parts(hdr as *const u8, hdr_end - hdr) };
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr as u64);
    let parsed = EhFrameHdr::new(hdr_bytes, LittleEndian).parse(&bases, 8).ok()?;
    let Pointer::Direct(eh) = parsed.eh_frame_ptr() else {
        return None;
    };
    let eh = eh as usize;
    let eh_end = obj.segment_end(eh)?;
    // SAFETY: as for `hdr_bytes`.
    let eh_bytes = unsafe { core::slice::from_raw_parts(eh as *const u8, eh_end - eh) };
    let bases = bases.set_eh_frame(eh as u64);
    let eh_frame = EhFrame::new(eh_bytes, LittleEndian);
    let table = parsed.table()?;
    let mut ctx = UnwindContext::<usize, OnStack>::new_in();
    let row = table
        .unwind_info_for_address(&eh_frame, &bases, &mut ctx, pc as u64, EhFrame::cie_from_offset)
        .ok()?;

    let (cfa_base, cfa_off) = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } if *register == RSP => (CFA_RSP, *offset),
        CfaRule::RegisterAndOffset { register, offset } if *register == RBP => (CFA_RBP, *offset),
        CfaRule::Expression(e) => match rbp_expression(e.get(&eh_frame).ok()?.0.slice())? {
            (off, true) => (CFA_DEREF_RBP, off),
            (_, false) => return None,
        },
        CfaRule::RegisterAndOffset { .. } => return None,
    };
    let ra_off = match row.register(RA) {
        Some(RegisterRule::Offset(off)) => off,
        // Undefined marks the outermost frame (_start, a new thread's first frame).
        _ => return Some(Rule::END),
    };
    let (bp_kind, bp_off) = match row.register(RBP) {
        None | Some(RegisterRule::SameValue) => (BP_SAME, 0),
        Some(RegisterRule::Offset(off)) => (BP_AT_CFA, off),
        Some(RegisterRule::Expression(e)) => match rbp_expression(e.get(&eh_frame).ok()?.0.slice()) {
            Some((off, false)) => (BP_AT_RBP, off),
            _ => (BP_LOST, 0),
        },
        Some(_) => (BP_LOST, 0),
    };
    Rule::new(cfa_base, cfa_off, bp_kind, bp_off, ra_off)
}

/// Recognises the two DWARF expressions GCC emits for functions that realign their stack:
/// `DW_OP_breg6 k` (an address, %rbp + k) and `DW_OP_breg6 k; DW_OP_deref` (the word there).
/// Returns k and whether the word is dereferenced.
pub(super) fn rbp_expression(bytes: &[u8]) -> Option<(i64, bool)> {
    pub(super) const DW_OP_BREG6: u8 = 0x76;
    pub(super) const DW_OP_DEREF: u8 = 0x06;
    let (&op, mut rest) = bytes.split_first()?;
    if op != DW_OP_BREG6 {
        return None;
    }
    let mut value: i64 = 0;
    let mut shift = 0;
    loop {
        let (&b, tail) = rest.split_first()?;
        rest = tail;
        if shift >= 64 {
            return None;
        }
        value |= i64::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            if shift < 64 && b & 0x40 != 0 {
                value |= -1i64 << shift;
            }
            break;
        }
    }
    match rest {
        [] => Some((value, false)),
        [DW_OP_DEREF] => Some((value, true)),
        _ => None,
    }
}
