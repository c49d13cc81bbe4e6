//! The JSON shapes `dmem leaks` writes what a scan counts in (blocks and bytes by class, as
//! `analysis::records` counts them), and the roots scanned.

use crate::analysis::reach::Class;
use crate::model::roots::Kind;
use crate::model::text::hex;
use crate::steps::scan::Scan;
use serde::Serialize;
use std::collections::BTreeMap;

/// `definitely_lost` and the like: a class's JSON key.
pub fn key(c: Class) -> String {
    c.name().replace(' ', "_")
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
