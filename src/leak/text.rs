//! The exit report's text: the summary in valgrind's words, the notes on threads and broken
//! lists, and one record per class and allocating stack, less what suppressions match, with
//! valgrind's suppression for each when asked; or all of it as valgrind's XML.

use super::live::{Breaks, Live};
use super::roots::ThreadNotes;
use super::suppress;
use crate::analysis::reach::{Class, Heuristic};
use crate::analysis::suppressions::{Generated, Hit, Recorded, Stack};
use crate::analysis::vgxml::{document, Record, Run};
use crate::diag;
use crate::frames::Symbols;
use crate::header::NFRAMES;
use crate::out::Out;
use crate::{options, sink};
use core::fmt::Write;
use std::collections::HashMap;

/// One class of one allocating stack: valgrind's loss record.
#[derive(Default)]
struct Group {
    blocks: usize,
    bytes: usize,
    example: usize,
    /// The suppression that took it out of the report.
    hit: Option<Hit>,
}

/// Groups the blocks by class and stack, leaves out what the suppressions match, prints the
/// report (text or valgrind's XML) and returns the count of leaked blocks no suppression
/// matched.
/// What the mark found of each block, by index into the live blocks.
pub(super) struct Marks {
    pub class: Vec<Class>,
    /// The heuristic that made a block still reachable, if one did.
    pub heuristic: Vec<Option<Heuristic>>,
    /// For an indirectly lost block, the definitely lost block whose loss record counts it.
    pub head: Vec<Option<usize>>,
}

pub(super) fn write_report(
    live: &[Live],
    marks: &Marks,
    show: u8,
    notes: &ThreadNotes,
    breaks: &Breaks,
    no_arena: bool,
) -> usize {
    let (classes, heuristic, heads) = (&marks.class, &marks.heuristic, &marks.head);
    let opts = options::get();
    let mut loaded = suppress::take();
    // Suppressions apply to every class, listed or not, as valgrind's summary counts them.
    let matching = loaded.as_ref().is_some_and(|l| !l.sup.is_empty());
    let mut totals: HashMap<Class, (usize, usize)> = HashMap::new();
    let mut groups: HashMap<(Class, [usize; NFRAMES]), Group> = HashMap::new();
    for (b, &c) in live.iter().zip(classes) {
        let t = totals.entry(c).or_default();
        t.0 += 1;
        t.1 += b.size;
        if show & c.bit() == 0 && !matching {
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

    let mut syms = Symbols::new();
    let mut suppressed = (0usize, 0usize);
    if let Some(l) = loaded.as_mut().filter(|_| matching) {
        for ((class, frames), g) in groups.iter_mut() {
            g.hit = l.sup.find(&syms.stack(frames).stack(), *class);
            if let Some(hit) = g.hit {
                l.sup.record(hit, g.blocks as u64, g.bytes as u64);
                let t = totals.entry(*class).or_default();
                t.0 -= g.blocks;
                t.1 -= g.bytes;
                suppressed.0 += g.blocks;
                suppressed.1 += g.bytes;
            }
        }
    }
    groups.retain(|((c, _), g)| show & c.bit() != 0 && g.hit.is_none());
    let leaked = totals.iter().filter(|(c, _)| c.is_leak()).map(|(_, t)| t.0).sum();
    if opts.report_xml {
        // memcheck counts indirectly lost bytes in the record of the definitely lost block
        // that holds them.
        let mut indirect: HashMap<[usize; NFRAMES], usize> = HashMap::new();
        for (b, h) in live.iter().zip(heads) {
            if let Some(h) = *h {
                *indirect.entry(live[h].frames).or_default() += b.size;
            }
        }
        write_xml(
            &groups,
            &indirect,
            &mut syms,
            loaded.as_ref(),
            opts.gen_suppressions,
        );
        return leaked;
    }

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
    if loaded.is_some() {
        let _ = write!(
            out,
            "; suppressed: {} bytes in {}",
            suppressed.1,
            blocks(suppressed.0)
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
    if let Some(l) = &loaded {
        for p in &l.problems {
            let _ = writeln!(out, "dmem: this run had no suppressions from {p}");
        }
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
            diag::describe_frame(&mut out, &syms.of(pc)[0]);
            let _ = writeln!(out);
        }
        if opts.gen_suppressions {
            out.str(&Generated::new(&syms.stack(frames).stack(), *class).text());
        }
    }
    // valgrind -v's list of the suppressions used, when every class is listed.
    if let Some(l) = loaded.as_ref().filter(|_| show == Class::ALL_BITS) {
        let used = l.sup.used();
        if !used.is_empty() {
            let _ = writeln!(out);
        }
        for (hit, u) in used {
            let _ = writeln!(out, "dmem: {}", l.sup.used_line(hit, u));
        }
    }
    out.flush();
    leaked
}

/// The report as valgrind's XML: the listed loss records, their suppressions when asked for,
/// and the suppressions' counts.
fn write_xml(
    groups: &[((Class, [usize; NFRAMES]), Group)],
    indirect: &HashMap<[usize; NFRAMES], usize>,
    syms: &mut Symbols,
    loaded: Option<&suppress::Loaded>,
    gen: bool,
) {
    let raw: Vec<Recorded> = groups.iter().map(|((_, frames), _)| syms.stack(frames)).collect();
    let stacks: Vec<Stack> = raw.iter().map(Recorded::stack).collect();
    let generated: Vec<Option<Generated>> = groups
        .iter()
        .zip(&stacks)
        .map(|(((c, _), _), s)| gen.then(|| Generated::new(s, *c)))
        .collect();
    let records: Vec<Record> = groups
        .iter()
        .zip(&stacks)
        .zip(&generated)
        .enumerate()
        .map(|(i, ((((class, frames), g), stack), gen))| Record {
            class: *class,
            bytes: g.bytes as u64,
            blocks: g.blocks as u64,
            indirect: match class {
                Class::DefinitelyLost => indirect.get(frames).copied().unwrap_or(0) as u64,
                _ => 0,
            },
            stack,
            alloc_ip: raw[i].alloc_ip,
            suppression: gen.as_ref(),
        })
        .collect();
    let argv: Vec<String> = std::fs::read("/proc/self/cmdline")
        .map(|c| {
            c.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let mut preamble = vec!["dmem's leak report in memcheck's format".to_owned()];
    if let Some(l) = loaded {
        preamble.extend(
            l.problems
                .iter()
                .map(|p| format!("this run had no suppressions from {p}")),
        );
    }
    preamble.push(format!("Command: {}", argv.join(" ")));
    let suppcounts: Vec<(String, u64)> = loaded
        .map(|l| {
            l.sup
                .used()
                .into_iter()
                .map(|(h, u)| (l.sup.entry(h).name.clone(), u.count))
                .collect()
        })
        .unwrap_or_default();
    let run = Run {
        // SAFETY: getpid and getppid cannot fail and touch no memory.
        pid: unsafe { libc::getpid() } as u32,
        // SAFETY: as above.
        ppid: unsafe { libc::getppid() } as u32,
        argv: &argv,
        preamble: &preamble,
    };
    let mut out = open_output();
    out.str(&document(&run, &records, &suppcounts));
    out.flush();
}

pub(super) fn blocks(n: usize) -> String {
    plural(n, "block")
}

pub(super) fn plural(n: usize, what: &str) -> String {
    crate::analysis::words::plural(n as u64, what)
}

/// The report's destination: `report-file=PATH` when given, else standard error (see `sink.rs`).
pub(super) fn open_output() -> Out {
    Out::to_fd(sink::report_fd().unwrap_or(-1), &sink::ROUTE)
}
