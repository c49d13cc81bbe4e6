//! The exit report's text: the summary in valgrind's words, the notes on threads and broken
//! lists, and one record per class and allocating stack, less what suppressions match, with
//! valgrind's suppression for each when asked; or all of it as valgrind's XML.

use super::live::{Breaks, Live};
use super::roots::ThreadNotes;
use super::suppress;
use crate::analysis::reach::{Class, Heuristic};
use crate::analysis::records;
use crate::analysis::suppressions::{Generated, Hit, Recorded, Stack, Suppressions};
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

type Key = (Class, [usize; NFRAMES]);

/// Blocks and bytes of each class.
type Totals = HashMap<Class, (usize, usize)>;

/// What the mark found of each block, by index into the live blocks.
pub(super) struct Marks {
    pub class: Vec<Class>,
    /// The heuristic that made a block still reachable, if one did.
    pub heuristic: Vec<Option<Heuristic>>,
    /// For an indirectly lost block, the definitely lost block whose loss record counts it.
    pub head: Vec<Option<usize>>,
}

/// Groups the blocks by class and stack, leaves out what the suppressions match, prints the
/// report (text or valgrind's XML) and returns the count of leaked blocks no suppression
/// matched.
pub(super) fn write_report(
    live: &[Live],
    marks: &Marks,
    show: u8,
    notes: &ThreadNotes,
    breaks: &Breaks,
    no_arena: bool,
) -> usize {
    let opts = options::get();
    let mut loaded = suppress::take();
    let sup = loaded.as_mut().map(|l| &mut l.sup).filter(|s| !s.is_empty());
    let (mut totals, mut groups) = group(live, &marks.class, show, sup.as_deref());
    let mut syms = Symbols::new();
    let suppressed = match sup {
        Some(sup) => suppress(&mut groups, &mut totals, sup, &mut syms),
        None => (0, 0),
    };
    groups.retain(|((c, _), g)| show & c.bit() != 0 && g.hit.is_none());
    // What leak-exitcode counts: the classes errors-for-leak-kinds names, as valgrind's
    // --error-exitcode counts leak errors.
    let leaked = totals
        .iter()
        .filter(|(c, _)| opts.leak_errors & c.bit() != 0)
        .map(|(_, t)| t.0)
        .sum();
    if opts.report_xml {
        let indirect = records::indirect_by(&marks.head, |i| live[i].size as u64, |h| live[h].frames);
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
    write_summary(&mut out, &totals, loaded.is_some().then_some(suppressed));
    write_heuristics(&mut out, live, &marks.heuristic);
    write_notes(&mut out, notes, breaks, no_arena);
    write_hidden(&mut out, &totals, show);
    if let Some(l) = &loaded {
        for p in &l.problems {
            let _ = writeln!(out, "dmem: this run had no suppressions from {p}");
        }
    }
    write_records(&mut out, &groups, &mut syms, opts.gen_suppressions);
    // valgrind -v's list of the suppressions used, when every class is listed.
    if let Some(l) = loaded.as_ref().filter(|_| show == Class::ALL_BITS) {
        write_used(&mut out, &l.sup);
    }
    out.flush();
    leaked
}

/// Each class's totals, and the loss records of the classes listed or that a suppression may
/// match (valgrind's summary counts suppressed blocks of every class), largest first within a
/// class.
fn group(
    live: &[Live],
    classes: &[Class],
    show: u8,
    sup: Option<&Suppressions>,
) -> (Totals, Vec<(Key, Group)>) {
    let mut totals = Totals::new();
    let mut groups: HashMap<Key, Group> = HashMap::new();
    for (b, &c) in live.iter().zip(classes) {
        let t = totals.entry(c).or_default();
        t.0 += 1;
        t.1 += b.size;
        if show & c.bit() == 0 && !sup.is_some_and(|s| s.applies_to(c)) {
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
    (totals, groups)
}

/// Marks the loss records a suppression matches, takes them out of their class's totals and
/// returns the blocks and bytes taken. A stack's frames are named only as far as matching
/// needs: naming reads an object's debug info whole the first time.
fn suppress(
    groups: &mut [(Key, Group)],
    totals: &mut Totals,
    sup: &mut Suppressions,
    syms: &mut Symbols,
) -> (usize, usize) {
    let mut suppressed = (0, 0);
    for ((class, frames), g) in groups.iter_mut() {
        let (head, mut lazy) = syms.unnamed(frames);
        g.hit = sup.find_lazily(head.head(), &mut lazy, *class);
        if let Some(hit) = g.hit {
            sup.record(hit, g.blocks as u64, g.bytes as u64);
            let t = totals.entry(*class).or_default();
            t.0 -= g.blocks;
            t.1 -= g.bytes;
            suppressed.0 += g.blocks;
            suppressed.1 += g.bytes;
        }
    }
    suppressed
}

/// The summary line, in valgrind's words (`analysis::records`, as `dmem leaks` writes its
/// total); with suppressions, what they took.
fn write_summary(out: &mut Out, totals: &Totals, suppressed: Option<(usize, usize)>) {
    let by: records::ByClass = Class::ALL.map(|c| {
        let (n, bytes) = totals.get(&c).copied().unwrap_or_default();
        (n as u64, bytes as u64)
    });
    let suppressed = suppressed.map(|(n, bytes)| (n as u64, bytes as u64));
    let _ = writeln!(out, "dmem: leak summary: {}", records::summary(&by, suppressed));
}

/// How much of what is still reachable each heuristic kept, when any did.
fn write_heuristics(out: &mut Out, live: &[Live], heuristic: &[Option<Heuristic>]) {
    let mut via = [(0u64, 0u64); 4];
    for (b, h) in live.iter().zip(heuristic) {
        if let Some(h) = h {
            via[*h as usize].0 += 1;
            via[*h as usize].1 += b.size as u64;
        }
    }
    if let Some(line) = records::via_heuristics(&via) {
        let _ = writeln!(out, "dmem: of which still reachable via heuristic: {line}");
    }
}

/// What the mark could not do: threads not stopped, broken lists, glibc's arena not found.
fn write_notes(out: &mut Out, notes: &ThreadNotes, breaks: &Breaks, no_arena: bool) {
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
    breaks.write(out);
    if no_arena {
        let _ = writeln!(
            out,
            "dmem: glibc's main_arena was not found in libc's data, so it was scanned as a root: a block only \
             glibc's bookkeeping points to counts as in use"
        );
    }
}

/// The classes that have blocks but are not listed.
fn write_hidden(out: &mut Out, totals: &Totals, show: u8) {
    let hidden: Vec<&str> = Class::ALL
        .iter()
        .filter(|c| show & c.bit() == 0 && totals.contains_key(c))
        .map(|c| c.name())
        .collect();
    if !hidden.is_empty() {
        let _ = writeln!(
            out,
            "dmem: not listed: {} (show-leak-kinds=all lists every class)",
            hidden.join(", ")
        );
    }
}

/// Each listed loss record with its stack, and valgrind's suppression for it when asked for.
fn write_records(out: &mut Out, groups: &[(Key, Group)], syms: &mut Symbols, gen: bool) {
    for ((class, frames), g) in groups {
        let _ = writeln!(
            out,
            "\n{} bytes in {} {} {}, e.g. {:#x}, allocated at:",
            g.bytes,
            blocks(g.blocks),
            if g.blocks == 1 { "is" } else { "are" },
            class.name(),
            g.example
        );
        // Every frame of each return address, the inlined ones first, each on a line of its
        // own with the address, as valgrind numbers them.
        let named = frames
            .iter()
            .take_while(|&&pc| pc != 0)
            .flat_map(|&pc| syms.of(pc).to_vec());
        for (i, f) in named.enumerate() {
            let _ = write!(out, "    #{i} {:#x} ", f.pc);
            diag::describe_frame(out, &f);
            let _ = writeln!(out);
        }
        if gen {
            out.str(&Generated::new(&syms.stack(frames).stack(), *class).shown());
        }
    }
}

/// valgrind -v's lines for the suppressions used, most used first.
fn write_used(out: &mut Out, sup: &Suppressions) {
    let used = sup.used();
    if !used.is_empty() {
        let _ = writeln!(out);
    }
    for (hit, u) in used {
        let _ = writeln!(out, "dmem: {}", sup.used_line(hit, u));
    }
}

/// The report as valgrind's XML: the listed loss records, their suppressions when asked for,
/// and the suppressions' counts.
fn write_xml(
    groups: &[(Key, Group)],
    indirect: &HashMap<[usize; NFRAMES], u64>,
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
                Class::DefinitelyLost => indirect.get(frames).copied().unwrap_or(0),
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
