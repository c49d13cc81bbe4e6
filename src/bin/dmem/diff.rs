//! Two snapshots compared: which stacks grew, by how much, and which shrank.
//!
//! Stacks are matched by their frames, each taken as an offset in its object (see
//! `Snapshot::stack_key`), so two cores of different runs of a program compare as well as two
//! moments of one process.

use crate::snapshot::{Snapshot, Stack};
use std::collections::HashMap;

/// One stack's change from BASE to NEW.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The stack as NEW has it (its counts are NEW's), or as BASE had it when NEW has none of its
    /// blocks left (then its counts are zero).
    pub stack: Stack,
    pub delta_bytes: i64,
    pub delta_blocks: i64,
}

/// The comparison of two snapshots.
pub struct Diff {
    /// The objects of NEW, then those of BASE; the stacks' frames index into this list.
    pub objects: Vec<crate::snapshot::Object>,
    /// Stacks that changed: most grown in bytes first (then in blocks), shrunk ones at the end.
    pub changes: Vec<Change>,
    /// Stacks present in both with the same counts.
    pub unchanged: usize,
    pub base_time_nanos: i64,
    pub new_time_nanos: i64,
}

pub fn diff(base: &Snapshot, new: &Snapshot) -> Diff {
    let mut objects = new.objects.clone();
    let shift = objects.len();
    objects.extend(base.objects.iter().cloned());

    let mut base_by_key: HashMap<Vec<(String, u64)>, &Stack> = HashMap::new();
    for s in &base.stacks {
        base_by_key
            .entry(base.stack_key(s))
            .and_modify(|e| {
                // A file of another tool may hold one stack in several samples.
                if s.bytes > e.bytes {
                    *e = s;
                }
            })
            .or_insert(s);
    }
    let mut base_sums: HashMap<Vec<(String, u64)>, (i64, i64)> = HashMap::new();
    for s in &base.stacks {
        let e = base_sums.entry(base.stack_key(s)).or_default();
        e.0 += s.bytes;
        e.1 += s.blocks;
    }

    let mut new_sums: HashMap<Vec<(String, u64)>, Stack> = HashMap::new();
    for s in &new.stacks {
        new_sums
            .entry(new.stack_key(s))
            .and_modify(|e| {
                e.bytes += s.bytes;
                e.blocks += s.blocks;
                e.tids.extend(&s.tids);
                e.tids.sort_unstable();
                e.tids.dedup();
            })
            .or_insert_with(|| s.clone());
    }

    let mut changes = Vec::new();
    let mut unchanged = 0;
    for (key, s) in new_sums.iter() {
        let (bb, bn) = base_sums.get(key).copied().unwrap_or((0, 0));
        let (db, dn) = (s.bytes - bb, s.blocks - bn);
        if db == 0 && dn == 0 {
            unchanged += 1;
            continue;
        }
        changes.push(Change {
            stack: s.clone(),
            delta_bytes: db,
            delta_blocks: dn,
        });
    }
    for (key, &(bb, bn)) in base_sums.iter() {
        if new_sums.contains_key(key) || (bb == 0 && bn == 0) {
            continue;
        }
        let mut stack = base_by_key[key].clone();
        for f in &mut stack.frames {
            f.object = f.object.map(|i| i + shift);
        }
        stack.bytes = 0;
        stack.blocks = 0;
        changes.push(Change {
            stack,
            delta_bytes: -bb,
            delta_blocks: -bn,
        });
    }
    // Growth first; among equal growth the bigger stack, then a fixed order so that the output
    // does not depend on hashing.
    changes.sort_by(|a, b| {
        (b.delta_bytes, b.delta_blocks, b.stack.bytes)
            .cmp(&(a.delta_bytes, a.delta_blocks, a.stack.bytes))
            .then_with(|| frames_order(&a.stack).cmp(&frames_order(&b.stack)))
    });
    Diff {
        objects,
        changes,
        unchanged,
        base_time_nanos: base.time_nanos,
        new_time_nanos: new.time_nanos,
    }
}

fn frames_order(s: &Stack) -> Vec<u64> {
    s.frames.iter().map(|f| f.pc).collect()
}

impl Diff {
    /// NEW − BASE as a snapshot whose counts are the changes, for a pprof profile (as
    /// `pprof -diff_base` makes them, counts may be negative).
    pub fn as_snapshot(&self, source: String) -> Snapshot {
        Snapshot {
            time_nanos: self.new_time_nanos,
            source,
            objects: self.objects.clone(),
            stacks: self
                .changes
                .iter()
                .map(|c| Stack {
                    bytes: c.delta_bytes,
                    blocks: c.delta_blocks,
                    tids: c.stack.tids.clone(),
                    frames: c.stack.frames.clone(),
                })
                .collect(),
            ..Snapshot::default()
        }
    }

    /// Seconds from BASE to NEW, if both have a time and NEW is later.
    pub fn seconds(&self) -> Option<f64> {
        let d = self.new_time_nanos - self.base_time_nanos;
        (self.base_time_nanos > 0 && d > 0).then(|| d as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Frame, Object};

    fn snap(objects_at: u64, stacks: &[(u64, i64, i64)]) -> Snapshot {
        Snapshot {
            time_nanos: 0,
            source: String::new(),
            objects: vec![Object {
                path: "/bin/p".into(),
                start: objects_at,
                end: objects_at + 0x1000,
                ..Object::default()
            }],
            stacks: stacks
                .iter()
                .map(|&(off, bytes, blocks)| Stack {
                    bytes,
                    blocks,
                    tids: vec![1],
                    frames: vec![Frame {
                        pc: objects_at + off,
                        object: Some(0),
                        lines: vec![],
                    }],
                })
                .collect(),
            ..Snapshot::default()
        }
    }

    #[test]
    fn growth_first_shrinkage_last_and_the_unchanged_counted() {
        // The program is loaded elsewhere in NEW: stacks still match by offset.
        let base = snap(0x1000, &[(1, 100, 1), (2, 500, 5), (3, 70, 7), (4, 64, 1)]);
        let new = snap(0x9000, &[(1, 1100, 11), (2, 200, 2), (3, 70, 7), (5, 10, 1)]);
        let d = diff(&base, &new);
        let got: Vec<(u64, i64, i64)> = d
            .changes
            .iter()
            .map(|c| {
                let f = &c.stack.frames[0];
                (
                    f.pc - d.objects[f.object.unwrap()].start,
                    c.delta_bytes,
                    c.delta_blocks,
                )
            })
            .collect();
        assert_eq!(got, vec![(1, 1000, 10), (5, 10, 1), (4, -64, -1), (2, -300, -3)]);
        assert_eq!(d.unchanged, 1);
        // The gone stack keeps BASE's frame, pointing at BASE's copy of the object.
        let gone = &d.changes[2].stack;
        assert_eq!((gone.bytes, gone.blocks), (0, 0));
        assert_eq!(d.objects[gone.frames[0].object.unwrap()].start, 0x1000);
        let s = d.as_snapshot("x".into());
        assert_eq!(s.live_bytes(), 1000 + 10 - 64 - 300);
    }
}
