//! The loss records of a leak report, written once for the exit report and for `dmem leaks` on
//! a core or a running process: the blocks grouped by class and allocating stack, with
//! memcheck's count of indirectly lost bytes in the record of the definitely lost block that
//! holds them, what suppressions took, the totals by class and the summary in valgrind's words,
//! what the heuristics kept; and each record's first line and XML.

use crate::reach::{Class, Heuristic};
use crate::suppressions::{Generated, Hit, Stack, Suppressions};
use crate::vgxml::Record;
use crate::words::plural;
use rustc_hash::FxHashMap;
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

/// What the mark found of each block, by index: both sides' marks, as the records read them.
pub struct Marks<'a> {
    pub class: &'a [Class],
    /// The heuristic that made a block still reachable, if one did.
    pub heuristic: &'a [Option<Heuristic>],
    /// Each indirectly lost block with the definitely lost block whose loss record counts it,
    /// as (block, head): a pair for each of them rather than a slot for every block.
    pub head: &'a [(usize, usize)],
}

/// One loss record: the blocks of one class allocated from one stack (`key`: the library's raw
/// return addresses, the launcher's stack in its walk).
pub struct LossRecord<K> {
    pub class: Class,
    pub key: K,
    pub blocks: u64,
    pub bytes: u64,
    /// Of a definitely lost record: the bytes of the indirectly lost blocks its blocks hold,
    /// which memcheck counts in it too.
    pub indirect: u64,
    /// The lowest address among its blocks.
    pub example: u64,
    /// The suppression that took it out of the report.
    pub hit: Option<Hit>,
    /// Of its blocks, what each heuristic kept (`Heuristic::ALL` order).
    via: [(u64, u64); 4],
}

impl<K> LossRecord<K> {
    /// valgrind's first line of the record in its text, `48 bytes in 1 block is definitely
    /// lost, e.g. 0x...`; the exit report writes `, allocated at:` and the stack after it.
    pub fn head_line(&self) -> String {
        format!(
            "{} bytes in {} {} {}, e.g. {:#x}",
            self.bytes,
            plural(self.blocks, "block"),
            if self.blocks == 1 { "is" } else { "are" },
            self.class.name(),
            self.example
        )
    }

    /// The record as valgrind's XML writes it, with its stack as suppressions see it.
    pub fn xml<'a>(
        &self,
        stack: &'a Stack<'a>,
        alloc_ip: u64,
        suppression: Option<&'a Generated>,
    ) -> Record<'a> {
        Record {
            class: self.class,
            bytes: self.bytes,
            blocks: self.blocks,
            indirect: self.indirect,
            stack,
            alloc_ip,
            suppression,
        }
    }
}

/// The loss records of a leak check and what it says of them as a whole: the one model the
/// exit report and `dmem leaks` (on a core or a running process) both print.
pub struct LossRecords<K> {
    /// In valgrind's order: by class, the most bytes first within one, then by key.
    pub records: Vec<LossRecord<K>>,
    /// Blocks and bytes of each class, less what suppressions took.
    pub totals: ByClass,
    /// What suppressions took, of every class.
    pub suppressed: (u64, u64),
    /// What each heuristic kept of the blocks no record holds (their class was not asked for).
    via_unrecorded: [(u64, u64); 4],
}

impl<K: Hash + Ord + Clone> LossRecords<K> {
    /// Groups the blocks `sel` (indices into `marks`) by class and `key`, each of `size` bytes
    /// from `start`, into loss records for the classes `kept` names (a set of `Class::bit`s:
    /// those listed and those a suppression may take); every class is counted in the totals.
    pub fn group(
        marks: &Marks,
        sel: impl IntoIterator<Item = usize>,
        start: impl Fn(usize) -> u64,
        size: impl Fn(usize) -> u64,
        key: impl Fn(usize) -> K,
        kept: u8,
    ) -> LossRecords<K> {
        let mut totals: ByClass = [(0, 0); 4];
        let mut via_unrecorded = [(0, 0); 4];
        let mut records: Vec<LossRecord<K>> = Vec::new();
        let mut at: FxHashMap<(Class, K), usize> = FxHashMap::default();
        for i in sel {
            let (class, bytes) = (marks.class[i], size(i));
            let t = &mut totals[class as usize];
            t.0 += 1;
            t.1 += bytes;
            let via = if kept & class.bit() == 0 {
                &mut via_unrecorded
            } else {
                let key = key(i);
                let k = *at.entry((class, key.clone())).or_insert_with(|| {
                    records.push(LossRecord {
                        class,
                        key,
                        blocks: 0,
                        bytes: 0,
                        indirect: 0,
                        example: u64::MAX,
                        hit: None,
                        via: [(0, 0); 4],
                    });
                    records.len() - 1
                });
                let r = &mut records[k];
                r.blocks += 1;
                r.bytes += bytes;
                r.example = r.example.min(start(i));
                &mut r.via
            };
            if let Some(h) = marks.heuristic[i] {
                via[h as usize].0 += 1;
                via[h as usize].1 += bytes;
            }
        }
        // memcheck counts the bytes of an indirectly lost block in the record of the definitely
        // lost block that holds it, whichever blocks were selected.
        for &(i, h) in marks.head {
            if let Some(&k) = at.get(&(Class::DefinitelyLost, key(h))) {
                records[k].indirect += size(i);
            }
        }
        records.sort_by(|a, b| (a.class, b.bytes, &a.key).cmp(&(b.class, a.bytes, &b.key)));
        LossRecords {
            records,
            totals,
            suppressed: (0, 0),
            via_unrecorded,
        }
    }

    /// Takes out of the report the records a suppression matches (`find` names the first one,
    /// given a record's key and class), counts each use, and takes them out of their class's
    /// totals, as valgrind does in every class, listed or not.
    pub fn suppress(
        &mut self,
        sup: &mut Suppressions,
        mut find: impl FnMut(&mut Suppressions, &K, Class) -> Option<Hit>,
    ) {
        for r in &mut self.records {
            if !sup.applies_to(r.class) {
                continue;
            }
            r.hit = find(sup, &r.key, r.class);
            if let Some(hit) = r.hit {
                sup.record(hit, r.blocks, r.bytes);
                let t = &mut self.totals[r.class as usize];
                t.0 -= r.blocks;
                t.1 -= r.bytes;
                self.suppressed.0 += r.blocks;
                self.suppressed.1 += r.bytes;
            }
        }
    }

    /// The records of the classes `show` names that no suppression took, in valgrind's order.
    pub fn listed(&self, show: u8) -> impl Iterator<Item = &LossRecord<K>> {
        self.records
            .iter()
            .filter(move |r| show & r.class.bit() != 0 && r.hit.is_none())
    }

    /// Blocks and bytes of the classes `classes` names (a set of bits) that no suppression
    /// took: what an exit status counts, as valgrind's `--errors-for-leak-kinds`.
    pub fn errors(&self, classes: u8) -> (u64, u64) {
        Class::ALL
            .iter()
            .zip(&self.totals)
            .filter(|(c, _)| classes & c.bit() != 0)
            .fold((0, 0), |a, (_, t)| (a.0 + t.0, a.1 + t.1))
    }

    /// Of the still reachable blocks no suppression took, what each heuristic kept
    /// (`Heuristic::ALL` order), which `via_heuristics` writes.
    pub fn via(&self) -> [(u64, u64); 4] {
        let mut via = self.via_unrecorded;
        for r in self.records.iter().filter(|r| r.hit.is_none()) {
            for (v, w) in via.iter_mut().zip(&r.via) {
                v.0 += w.0;
                v.1 += w.1;
            }
        }
        via
    }

    /// The summary line in valgrind's words (see `summary`); with suppressions given, what
    /// they took.
    pub fn summary(&self, gating: bool) -> String {
        summary(&self.totals, gating.then_some(self.suppressed))
    }
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
    }

    #[test]
    fn blocks_grouped_into_records_in_valgrinds_order() {
        use Class::*;
        // Blocks 0..6: (start, size, class, key); block 4 is indirectly lost under block 0,
        // block 5 kept by a heuristic.
        let blocks = [
            (0x100, 10, DefinitelyLost, 'a'),
            (0x200, 30, DefinitelyLost, 'b'),
            (0x050, 5, DefinitelyLost, 'a'),
            (0x300, 7, PossiblyLost, 'a'),
            (0x400, 4, IndirectlyLost, 'c'),
            (0x500, 8, StillReachable, 'a'),
        ];
        let class: Vec<Class> = blocks.iter().map(|b| b.2).collect();
        let heuristic = [None, None, None, None, None, Some(Heuristic::Length64)];
        let head = [(4, 0)];
        let marks = Marks {
            class: &class,
            heuristic: &heuristic,
            head: &head,
        };
        let kept = DefinitelyLost.bit() | PossiblyLost.bit() | StillReachable.bit();
        let mut r = LossRecords::group(
            &marks,
            0..blocks.len(),
            |i| blocks[i].0,
            |i| blocks[i].1,
            |i| blocks[i].3,
            kept,
        );
        let got: Vec<(Class, char, u64, u64, u64, u64)> = r
            .records
            .iter()
            .map(|r| (r.class, r.key, r.blocks, r.bytes, r.indirect, r.example))
            .collect();
        assert_eq!(
            got,
            [
                (DefinitelyLost, 'b', 1, 30, 0, 0x200),
                (DefinitelyLost, 'a', 2, 15, 4, 0x50),
                (PossiblyLost, 'a', 1, 7, 0, 0x300),
                (StillReachable, 'a', 1, 8, 0, 0x500),
            ]
        );
        assert_eq!(r.totals, [(3, 45), (1, 4), (1, 7), (1, 8)]);
        assert_eq!(r.errors(DefinitelyLost.bit() | PossiblyLost.bit()), (4, 52));
        assert_eq!(r.via()[1], (1, 8));
        assert_eq!(
            r.records[1].head_line(),
            "15 bytes in 2 blocks are definitely lost, e.g. 0x50"
        );
        // A suppression taking every still reachable record: out of the totals, the listing and
        // the heuristics' count; counted as used.
        let file = crate::suppressions::parse(
            "s",
            "{\n   s\n   Memcheck:Leak\n   match-leak-kinds: reachable\n   fun:main\n}\n",
        )
        .unwrap();
        let mut sup = Suppressions::new(vec![file]);
        r.suppress(&mut sup, |_, _, c| {
            (c == StillReachable).then_some(Hit { file: 0, entry: 0 })
        });
        assert_eq!(r.totals[3], (0, 0));
        assert_eq!(r.suppressed, (1, 8));
        assert_eq!(r.via(), [(0, 0); 4]);
        assert_eq!(r.listed(Class::ALL_BITS).count(), 3);
        assert_eq!(r.listed(PossiblyLost.bit()).count(), 1);
        assert_eq!(sup.used().len(), 1);
        assert!(r.summary(true).ends_with("; suppressed: 8 bytes in 1 block"));
    }
}
