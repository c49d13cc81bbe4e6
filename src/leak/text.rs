//! The exit report's text: the summary in valgrind's words, the notes on threads and broken
//! lists, and one record per class and allocating stack, less what suppressions match, with
//! valgrind's suppression for each when asked; or all of it as valgrind's XML.

use super::live::{Breaks, Live};
use super::roots::ThreadNotes;
use super::suppress;
use crate::analysis::reach::{Class, Heuristic};
use crate::analysis::records::{self, LossRecords};
use crate::analysis::suppressions::{Generated, Recorded, Stack, Suppressions};
use crate::analysis::vgxml::{document, Record, Run};
use crate::diag;
use crate::frames::Symbols;
use crate::header::NFRAMES;
use crate::out::Out;
use crate::{options, sink};
use core::fmt::Write;

/// The loss records, each of one class and one allocating stack (its raw return addresses).
type Records = LossRecords<[usize; NFRAMES]>;

/// What the mark found of each block, by index into the live blocks.
pub(super) struct Marks {
    pub class: Vec<Class>,
    /// The heuristic that made a block still reachable, if one did.
    pub heuristic: Vec<Option<Heuristic>>,
    /// Each indirectly lost block with the definitely lost block whose loss record counts it.
    pub head: Vec<(usize, usize)>,
}

/// Groups the blocks by class and stack (`analysis::records`, as `dmem leaks` does), leaves out
/// what the suppressions match, prints the report (text or valgrind's XML) and returns the count
/// of leaked blocks no suppression matched.
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
    // Records of the classes listed or that a suppression may match (valgrind's summary counts
    // suppressed blocks of every class); the others are only counted.
    let kept = Class::ALL
        .iter()
        .filter(|c| sup.as_ref().is_some_and(|s| s.applies_to(**c)))
        .fold(show, |set, c| set | c.bit());
    let view = records::Marks {
        class: &marks.class,
        heuristic: &marks.heuristic,
        head: &marks.head,
    };
    let mut recs = Records::group(
        &view,
        0..live.len(),
        |i| live[i].start as u64,
        |i| live[i].size as u64,
        |i| live[i].frames,
        kept,
    );
    let mut syms = Symbols::new();
    if let Some(sup) = sup {
        suppress(&mut recs, sup, &mut syms);
    }
    // What leak-exitcode counts: the classes errors-for-leak-kinds names, as valgrind's
    // --error-exitcode counts leak errors.
    let leaked = recs.errors(opts.leak_errors).0 as usize;
    if opts.report_xml {
        write_xml(&recs, show, &mut syms, loaded.as_ref(), opts.gen_suppressions);
        return leaked;
    }
    let mut out = open_output();
    let _ = writeln!(out, "dmem: leak summary: {}", recs.summary(loaded.is_some()));
    if let Some(line) = records::via_heuristics(&recs.via()) {
        let _ = writeln!(out, "dmem: of which still reachable via heuristic: {line}");
    }
    write_notes(&mut out, notes, breaks, no_arena);
    write_hidden(&mut out, &recs, show);
    if let Some(l) = &loaded {
        for p in &l.problems {
            let _ = writeln!(out, "dmem: this run had no suppressions from {p}");
        }
    }
    write_records(&mut out, &recs, show, &mut syms, opts.gen_suppressions);
    // valgrind -v's list of the suppressions used, when every class is listed.
    if let Some(l) = loaded.as_ref().filter(|_| show == Class::ALL_BITS) {
        write_used(&mut out, &l.sup);
    }
    out.flush();
    leaked
}

/// Marks the loss records a suppression matches (see `LossRecords::suppress`). A stack's
/// frames are named only as far as matching needs: naming reads an object's debug info whole
/// the first time.
fn suppress(recs: &mut Records, sup: &mut Suppressions, syms: &mut Symbols) {
    recs.suppress(sup, |sup, frames, class| {
        let (head, mut lazy) = syms.unnamed(frames);
        sup.find_lazily(head.head(), &mut lazy, class)
    });
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
            crate::analysis::words::plural(notes.missed as u64, "thread")
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
fn write_hidden(out: &mut Out, recs: &Records, show: u8) {
    let hidden: Vec<&str> = Class::ALL
        .iter()
        .filter(|c| show & c.bit() == 0 && recs.totals[**c as usize].0 > 0)
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
fn write_records(out: &mut Out, recs: &Records, show: u8, syms: &mut Symbols, gen: bool) {
    for r in recs.listed(show) {
        let _ = writeln!(out, "\n{}, allocated at:", r.head_line());
        // Every frame of each return address, the inlined ones first, each on a line of its
        // own with the address, as valgrind numbers them.
        let named = r
            .key
            .iter()
            .take_while(|&&pc| pc != 0)
            .flat_map(|&pc| syms.of(pc).to_vec());
        for (i, f) in named.enumerate() {
            let _ = write!(out, "    #{i} {:#x} ", f.pc);
            diag::describe_frame(out, &f);
            let _ = writeln!(out);
        }
        if gen {
            out.str(&Generated::new(&syms.stack(&r.key).stack(), r.class).shown());
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
fn write_xml(recs: &Records, show: u8, syms: &mut Symbols, loaded: Option<&suppress::Loaded>, gen: bool) {
    let listed: Vec<_> = recs.listed(show).collect();
    let raw: Vec<Recorded> = listed.iter().map(|r| syms.stack(&r.key)).collect();
    let stacks: Vec<Stack> = raw.iter().map(Recorded::stack).collect();
    let generated: Vec<Option<Generated>> = listed
        .iter()
        .zip(&stacks)
        .map(|(r, s)| gen.then(|| Generated::new(s, r.class)))
        .collect();
    let records: Vec<Record> = listed
        .iter()
        .zip(&stacks)
        .zip(&raw)
        .zip(&generated)
        .map(|(((r, stack), raw), gen)| r.xml(stack, raw.alloc_ip, gen.as_ref()))
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

/// The report's destination: `report-file=PATH` when given, else standard error (see `sink.rs`).
pub(super) fn open_output() -> Out {
    Out::to_fd(sink::report_fd().unwrap_or(-1), &sink::ROUTE)
}
