//! The exit report's text: the summary in valgrind's words, the notes on threads and broken
//! lists, and one record per class and allocating stack.

use super::live::{Breaks, Live};
use super::roots::ThreadNotes;
use crate::analysis::reach::{Class, Heuristic};
use crate::diag;
use crate::header::NFRAMES;
use crate::out::Out;
use crate::sink;
use core::fmt::Write;
use std::collections::HashMap;

/// Groups the blocks by class and stack, prints the report and returns the count of leaked
/// blocks.
pub(super) fn write_report(
    live: &[Live],
    classes: &[Class],
    heuristic: &[Option<Heuristic>],
    show: u8,
    notes: &ThreadNotes,
    breaks: &Breaks,
    no_arena: bool,
) -> usize {
    #[derive(Default)]
    struct Group {
        blocks: usize,
        bytes: usize,
        example: usize,
    }
    let mut totals: HashMap<Class, (usize, usize)> = HashMap::new();
    let mut groups: HashMap<(Class, [usize; NFRAMES]), Group> = HashMap::new();
    for (b, &c) in live.iter().zip(classes) {
        let t = totals.entry(c).or_default();
        t.0 += 1;
        t.1 += b.size;
        if show & c.bit() == 0 {
            continue;
        }
        let g = groups.entry((c, b.frames)).or_default();
        g.blocks += 1;
        g.bytes += b.size;
        if g.example == 0 {
            g.example = b.start;
        }
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_by(|a, b| (a.0 .0, b.1.bytes, a.0 .1).cmp(&(b.0 .0, a.1.bytes, b.0 .1)));

    let mut out = open_output();
    let _ = write!(out, "dmem: leak summary:");
    for (i, c) in Class::ALL.iter().enumerate() {
        let (n, bytes) = totals.get(c).copied().unwrap_or_default();
        let _ = write!(
            out,
            "{} {}: {bytes} bytes in {}",
            if i > 0 { ";" } else { "" },
            c.name(),
            blocks(n)
        );
    }
    let _ = writeln!(out);
    let mut via = [(0usize, 0usize); 4];
    for (b, h) in live.iter().zip(heuristic) {
        if let Some(h) = h {
            via[*h as usize].0 += 1;
            via[*h as usize].1 += b.size;
        }
    }
    if via.iter().any(|v| v.0 > 0) {
        let _ = write!(out, "dmem: of which still reachable via heuristic:");
        let mut first = true;
        for (h, &(n, bytes)) in Heuristic::ALL.iter().zip(&via).filter(|(_, v)| v.0 > 0) {
            let sep = if first { "" } else { ";" };
            first = false;
            let _ = write!(out, "{sep} {}: {bytes} bytes in {}", h.name(), blocks(n));
        }
        let _ = writeln!(out);
    }
    for &(tid, scanned) in &notes.not_stopped {
        if scanned {
            let _ = writeln!(
                out,
                "dmem: thread {tid} could not be stopped; its stack is scanned as it is"
            );
        } else {
            let _ = writeln!(
                out,
                "dmem: thread {tid} could not be stopped and shows no stack pointer; its stack is not scanned"
            );
        }
    }
    if notes.missed > 0 {
        let _ = writeln!(
            out,
            "dmem: {} started during the mark and were neither stopped nor scanned",
            plural(notes.missed, "thread")
        );
    }
    breaks.write(&mut out);
    if no_arena {
        let _ = writeln!(
            out,
            "dmem: glibc's main_arena was not found in libc's data, so it was scanned as a root: a block only \
             glibc's bookkeeping points to counts as in use"
        );
    }
    let hidden: Vec<&str> = Class::ALL
        .iter()
        .filter(|c| show & c.bit() == 0 && totals.contains_key(c))
        .map(|c| c.name())
        .collect();
    if !hidden.is_empty() {
        let _ = writeln!(
            out,
            "dmem: not listed: {} (leak-show=all lists every class)",
            hidden.join(", ")
        );
    }
    for ((class, frames), g) in &groups {
        let _ = writeln!(
            out,
            "\n{} bytes in {} {} {}, e.g. {:#x}, allocated at:",
            g.bytes,
            blocks(g.blocks),
            if g.blocks == 1 { "is" } else { "are" },
            class.name(),
            g.example
        );
        for (i, &pc) in frames.iter().take_while(|&&pc| pc != 0).enumerate() {
            let _ = write!(out, "    #{i} {pc:#x} ");
            diag::describe_pc(&mut out, pc);
            let _ = writeln!(out);
        }
    }
    out.flush();
    live.iter().zip(classes).filter(|(_, c)| c.is_leak()).count()
}

pub(super) fn blocks(n: usize) -> String {
    plural(n, "block")
}

pub(super) fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The report's destination: `report-file=PATH` when given, else standard error (see `sink.rs`).
pub(super) fn open_output() -> Out {
    Out::to_fd(sink::report_fd().unwrap_or(-1))
}
