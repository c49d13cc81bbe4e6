//! What a leak report says of its loss records as a whole, written once for the exit report and
//! for `dmem leaks` on a core or a running process: the summary in valgrind's words, what the
//! heuristics kept, and memcheck's count of indirectly lost bytes in the record of the definitely
//! lost block that holds them.

use crate::reach::{Class, Heuristic};
use crate::words::plural;
use std::collections::HashMap;
use std::hash::Hash;

/// Blocks and bytes of each class, in `Class::ALL` order.
pub type ByClass = [(u64, u64); 4];

/// valgrind's LEAK SUMMARY as one line, `definitely lost: 48 bytes in 1 block; indirectly lost:
/// ...; still reachable: ...`, and what suppressions took when any were given.
pub fn summary(totals: &ByClass, suppressed: Option<(u64, u64)>) -> String {
    let mut parts: Vec<String> = Class::ALL
        .iter()
        .zip(totals)
        .map(|(c, &(n, bytes))| format!("{}: {bytes} bytes in {}", c.name(), plural(n, "block")))
        .collect();
    if let Some((n, bytes)) = suppressed {
        parts.push(format!("suppressed: {bytes} bytes in {}", plural(n, "block")));
    }
    parts.join("; ")
}

/// Of the still reachable blocks, what each heuristic kept (blocks and bytes, in
/// `Heuristic::ALL` order) as one line, `stdstring: 32 bytes in 1 block; ...`, for the heuristics
/// that kept any; None when none did.
pub fn via_heuristics(via: &[(u64, u64); 4]) -> Option<String> {
    let parts: Vec<String> = Heuristic::ALL
        .iter()
        .zip(via)
        .filter(|(_, v)| v.0 > 0)
        .map(|(h, &(n, bytes))| format!("{}: {bytes} bytes in {}", h.name(), plural(n, "block")))
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// memcheck counts the bytes of an indirectly lost block in the loss record of the definitely
/// lost block that holds it (`head`, from the mark): those bytes by that block's record, which
/// `key` names (its stack), each block's size from `size`.
pub fn indirect_by<K: Hash + Eq>(
    head: &[Option<usize>],
    size: impl Fn(usize) -> u64,
    key: impl Fn(usize) -> K,
) -> HashMap<K, u64> {
    let mut out: HashMap<K, u64> = HashMap::new();
    for (i, h) in head.iter().enumerate() {
        if let Some(h) = *h {
            *out.entry(key(h)).or_default() += size(i);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_in_valgrinds_words() {
        let t = [(1, 48), (0, 0), (2, 10), (1, 1)];
        assert_eq!(
            summary(&t, None),
            "definitely lost: 48 bytes in 1 block; indirectly lost: 0 bytes in 0 blocks; possibly lost: 10 bytes in 2 blocks; still reachable: 1 bytes in 1 block"
        );
        assert!(summary(&t, Some((3, 9))).ends_with("; suppressed: 9 bytes in 3 blocks"));
        assert_eq!(via_heuristics(&[(0, 0); 4]), None);
        let via = via_heuristics(&[(0, 0), (2, 64), (0, 0), (0, 0)]).unwrap();
        assert_eq!(via, format!("{}: 64 bytes in 2 blocks", Heuristic::ALL[1].name()));
        let ind = indirect_by(&[None, Some(0), Some(0)], |i| 10 * i as u64, |h| h);
        assert_eq!(ind[&0], 30);
    }
}
