//! What a scan counts for the leak commands: blocks and bytes by class and by the heuristic
//! that reached them, the indirectly lost bytes each stack's definitely lost blocks hold, and the
//! roots scanned, with the JSON shapes `dmem leaks` writes them in.

use crate::analysis::reach::{Class, Heuristic};
use crate::analysis::records;
use crate::model::roots::Kind;
use crate::model::text::hex;
use crate::steps::scan::Scan;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// `definitely_lost` and the like: a class's JSON key.
pub fn key(c: Class) -> String {
    c.name().replace(' ', "_")
}

/// (blocks, bytes) of a selection by class, in `Class::ALL` order.
pub fn by_class(scan: &Scan, sel: &[usize]) -> [(u64, u64); 4] {
    let mut out = [(0u64, 0u64); 4];
    for &i in sel {
        let k = Class::ALL.iter().position(|&c| c == scan.c.class[i]).unwrap();
        out[k].0 += 1;
        out[k].1 += scan.ins.heap.blocks[i].size;
    }
    out
}

#[derive(Serialize)]
pub struct Count {
    pub blocks: u64,
    pub bytes: u64,
}

pub fn counts(v: [(u64, u64); 4]) -> BTreeMap<String, Count> {
    Class::ALL
        .iter()
        .zip(v)
        .map(|(&c, (blocks, bytes))| (key(c), Count { blocks, bytes }))
        .collect()
}

/// The roots scanned.
#[derive(Serialize)]
pub struct RootsJson {
    ranges: usize,
    bytes: u64,
    registers: usize,
    unreadable: Vec<String>,
    excluded: Vec<Excluded>,
}

#[derive(Serialize)]
pub struct Excluded {
    start: String,
    end: String,
    what: String,
}

/// memcheck counts indirectly lost bytes in the record of the definitely lost block that holds
/// them: the bytes by that block's stack.
pub fn indirect_by_stack(scan: &Scan) -> HashMap<u32, u64> {
    let blocks = &scan.ins.heap.blocks;
    records::indirect_by(&scan.c.head, |i| blocks[i].size, |h| blocks[h].stack)
}

/// The roots scanned, as the JSON of `dmem leaks` lists them.
pub fn roots_json(scan: &Scan) -> RootsJson {
    let roots = &scan.roots;
    let ranges: Vec<_> = roots
        .roots
        .iter()
        .filter(|r| !matches!(r.kind, Kind::Register(_)))
        .collect();
    RootsJson {
        ranges: ranges.len(),
        bytes: ranges.iter().map(|r| r.end - r.start).sum(),
        registers: roots.roots.len() - ranges.len(),
        unreadable: scan
            .c
            .unread_roots
            .iter()
            .map(|&i| roots.roots[i].what.clone())
            .collect(),
        excluded: roots
            .excluded
            .iter()
            .map(|x| Excluded {
                start: hex(x.start),
                end: hex(x.end),
                what: x.what.clone(),
            })
            .collect(),
    }
}

/// The still-reachable blocks of `sel` that a heuristic reached, by heuristic, for each
/// heuristic that reached any, in valgrind's order.
pub fn via_heuristic(scan: &Scan, sel: &[usize]) -> Vec<(Heuristic, Count)> {
    Heuristic::ALL
        .iter()
        .map(|&h| {
            let mine = sel.iter().filter(|&&i| scan.c.heuristic[i] == Some(h));
            let bytes = mine.clone().map(|&i| scan.ins.heap.blocks[i].size).sum();
            let blocks = mine.count() as u64;
            (h, Count { blocks, bytes })
        })
        .filter(|(_, n)| n.blocks > 0)
        .collect()
}
