//! Two snapshots compared: which stacks grew, by how much, and which shrank.
//!
//! Stacks are matched by their frames, each taken as an offset in its object (see
//! `Snapshot::stack_key`), so two cores of different runs of a program compare as well as two
//! moments of one process.

use crate::cli::SnapshotFormat as Format;
use crate::commands::snapshot::Source;
use crate::model::snapjson::{self, Sample, SampleStack};
use crate::model::snapshot::{describe_frames, Object, Snapshot, Stack};
use crate::model::text::{bytes_text, clock, signed, thousands};
use crate::{failed, usage, Result};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

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
    /// The objects of NEW, then those of BASE that NEW lacks; the stacks' frames index into this
    /// list.
    pub objects: Vec<crate::model::snapshot::Object>,
    /// Stacks that changed: most grown in bytes first (then in blocks), shrunk ones at the end.
    pub changes: Vec<Change>,
    /// Stacks present in both with the same counts.
    pub unchanged: usize,
    pub base_time_nanos: i64,
    pub new_time_nanos: i64,
}

/// A stack as `Snapshot::stack_key` names it.
type Key = Vec<(String, u64)>;

/// Bytes and blocks by stack.
type Sums = HashMap<Key, (i64, i64)>;

pub fn diff(base: &Snapshot, new: &Snapshot) -> Diff {
    let (objects, base_object) = merged_objects(base, new);
    let (base_by_key, base_sums) = base_stacks(base);
    let new_sums = new_stacks(new);
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
            f.object = f.object.and_then(|i| base_object.get(i).copied());
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

/// NEW's objects and BASE's added to them, once (two moments of one process map the same
/// ones); and where each of BASE's is in that list.
fn merged_objects(base: &Snapshot, new: &Snapshot) -> (Vec<Object>, Vec<usize>) {
    let mut objects = new.objects.clone();
    let base_object: Vec<usize> = base
        .objects
        .iter()
        .map(|o| match objects.iter().position(|n| n == o) {
            Some(i) => i,
            None => {
                objects.push(o.clone());
                objects.len() - 1
            }
        })
        .collect();
    (objects, base_object)
}

/// Stacks that hold no live block (listed with what they allocated) did not change the heap.
fn holds(s: &&Stack) -> bool {
    s.bytes != 0 || s.blocks != 0
}

/// BASE's stacks by key: the biggest sample of each (a file of another tool may hold one stack
/// in several samples), and the bytes and blocks of all of them.
fn base_stacks(base: &Snapshot) -> (HashMap<Key, &Stack>, Sums) {
    let mut by_key: HashMap<Key, &Stack> = HashMap::new();
    let mut sums: Sums = HashMap::new();
    for s in base.stacks.iter().filter(holds) {
        let key = base.stack_key(s);
        let e = sums.entry(key.clone()).or_default();
        e.0 += s.bytes;
        e.1 += s.blocks;
        by_key
            .entry(key)
            .and_modify(|e| {
                if s.bytes > e.bytes {
                    *e = s;
                }
            })
            .or_insert(s);
    }
    (by_key, sums)
}

/// NEW's stacks by key, the samples of one stack summed.
fn new_stacks(new: &Snapshot) -> HashMap<Key, Stack> {
    let mut sums: HashMap<Key, Stack> = HashMap::new();
    for s in new.stacks.iter().filter(holds) {
        sums.entry(new.stack_key(s))
            .and_modify(|e| {
                e.bytes += s.bytes;
                e.blocks += s.blocks;
                e.tids.extend(&s.tids);
                e.tids.sort_unstable();
                e.tids.dedup();
            })
            .or_insert_with(|| s.clone());
    }
    sums
}

fn frames_order(s: &Stack) -> Vec<(u64, Option<&str>)> {
    s.frames.iter().map(|f| (f.pc, f.function())).collect()
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
                    allocated: None,
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

/// How a stack changed, for people and for `class` in JSON.
fn class(c: &Change) -> &'static str {
    match (
        c.stack.blocks == c.delta_blocks && c.stack.bytes == c.delta_bytes,
        c.stack.blocks == 0,
    ) {
        (_, true) => "gone",
        (true, false) => "new",
        _ if c.delta_bytes > 0 || (c.delta_bytes == 0 && c.delta_blocks > 0) => "grew",
        _ => "shrank",
    }
}

/// `dmem diff BASE NEW`.
pub fn command(
    words: &[OsString],
    json: bool,
    pprof_out: Option<&Path>,
    limit: Option<usize>,
) -> Result<i32> {
    let sources = Source::parse_all(words)?;
    let [base_src, new_src] = sources.as_slice() else {
        return Err(usage(format!(
            "compares two snapshots, BASE and NEW (each a PID, PROG CORE or a snapshot file), but {} {} given",
            sources.len(),
            if sources.len() == 1 { "was" } else { "were" }
        )));
    };
    let base = base_src.take()?;
    let new = new_src.take()?;
    for snap in [&base, &new] {
        for line in snap.warnings.iter().chain(&snap.inconsistency()) {
            eprintln!("dmem diff: {}: {line}", snap.source);
        }
    }
    let d = diff(&base, &new);
    let shown = biggest(&d.changes, limit);
    let out = std::io::stdout();
    let mut o = out.lock();
    let written = if json {
        snapjson::print(&as_sample(&base, &new, &d, &shown), &mut o)
    } else {
        write_text(&mut o, &base, &new, &d, &shown)
    };
    if let Err(e) = written.and_then(|_| o.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(failed(format!("cannot write the diff: {e}")));
        }
    }
    drop(o);
    if let Some(path) = pprof_out {
        let source = format!("{} minus {}", new.source, base.source);
        crate::commands::snapshot::write_to(&d.as_snapshot(source), path, Format::Pprof)?;
    }
    Ok(0)
}

/// The changes `--limit N` shows: the N biggest either way, still in order of growth.
fn biggest(changes: &[Change], limit: Option<usize>) -> Vec<&Change> {
    let all: Vec<&Change> = changes.iter().collect();
    let Some(n) = limit else { return all };
    let mut by_size: Vec<usize> = (0..all.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(all[i].delta_bytes.unsigned_abs()));
    let mut keep: Vec<usize> = by_size.into_iter().take(n).collect();
    keep.sort_unstable();
    keep.into_iter().map(|i| all[i]).collect()
}

/// A change's growth in bytes per minute over the time between the snapshots, 0 without one.
fn per_minute(d: &Diff, c: &Change) -> i64 {
    d.seconds()
        .map(|s| s / 60.0)
        .map_or(0, |m| (c.delta_bytes as f64 / m).round() as i64)
}

/// The diff as `--json` writes it: one sample in `dmem top --json`'s shape.
fn as_sample(base: &Snapshot, new: &Snapshot, d: &Diff, shown: &[&Change]) -> Sample {
    Sample {
        time: snapjson::seconds(new.time_nanos),
        base_time: Some(snapjson::seconds(base.time_nanos)),
        source: String::new(),
        live_bytes: new.live_bytes(),
        live_blocks: new.live_blocks(),
        delta_bytes: Some(new.live_bytes() - base.live_bytes()),
        delta_blocks: Some(new.live_blocks() - base.live_blocks()),
        read_ms: ((base.read_ms + new.read_ms) * 1e3).round() / 1e3,
        inconsistent_lists: base.inconsistent_lists + new.inconsistent_lists,
        unchanged_stacks: Some(d.unchanged),
        objects: Vec::new(),
        temporary: Vec::new(),
        stacks: shown
            .iter()
            .map(|c| SampleStack {
                delta_bytes: Some(c.delta_bytes),
                delta_blocks: Some(c.delta_blocks),
                rate_bytes_per_min: Some(per_minute(d, c)),
                class: Some(class(c).to_owned()),
                ..SampleStack::new(
                    c.stack.bytes,
                    c.stack.blocks,
                    snapjson::frames(&d.objects, &c.stack.frames),
                )
            })
            .collect(),
    }
}

/// The diff as text: a head line, then a table of the changed stacks with their frames.
fn write_text(
    o: &mut impl Write,
    base: &Snapshot,
    new: &Snapshot,
    d: &Diff,
    shown: &[&Change],
) -> std::io::Result<()> {
    let later = match d.seconds() {
        Some(s) => format!(", {s:.1} s later"),
        None => String::new(),
    };
    let at = |snap: &Snapshot| match snap.time_nanos {
        t if t > 0 => format!(" at {}", clock(UNIX_EPOCH + Duration::from_nanos(t as u64))),
        _ => String::new(),
    };
    writeln!(
        o,
        "{}{} -> {}{}{later}: {} in {} blocks ({} bytes, {} blocks); {} {} changed, {} unchanged",
        base.source,
        at(base),
        new.source,
        at(new),
        bytes_text(new.live_bytes().max(0) as u64),
        thousands(new.live_blocks().max(0) as u64),
        signed(new.live_bytes() - base.live_bytes()),
        signed(new.live_blocks() - base.live_blocks()),
        d.changes.len(),
        if d.changes.len() == 1 { "stack" } else { "stacks" },
        d.unchanged
    )?;
    if shown.is_empty() {
        return Ok(());
    }
    writeln!(
        o,
        "{:>14} {:>10} {:>14} {:>10} {:>14}  class",
        "bytes", "blocks", "change", "blocks", "per minute"
    )?;
    for c in shown {
        writeln!(
            o,
            "{:>14} {:>10} {:>14} {:>10} {:>14}  {}",
            thousands(c.stack.bytes.max(0) as u64),
            thousands(c.stack.blocks.max(0) as u64),
            signed(c.delta_bytes),
            signed(c.delta_blocks),
            signed(per_minute(d, c)),
            class(c)
        )?;
        for line in describe_frames(&d.objects, &c.stack.frames) {
            writeln!(o, "        {line}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::snapshot::{Frame, Object};

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
                    allocated: None,
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
        // Two moments of one process share their objects.
        let d = diff(&snap(0x1000, &[(4, 64, 1)]), &snap(0x1000, &[(1, 8, 1)]));
        assert_eq!(d.objects.len(), 1);
        assert!(d.changes.iter().all(|c| c.stack.frames[0].object == Some(0)));
    }
}
