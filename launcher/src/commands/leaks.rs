//! The commands that find leaks: leaks, why, types, words (and folded stacks of lost blocks),
//! as text or JSON (the shapes the gdb commands print). Classes are valgrind's: definitely,
//! indirectly and possibly lost, and still reachable.

use crate::analysis::allocfn::{Alloc, Callees};
use crate::analysis::reach::{Class, Heuristic};
use crate::analysis::records;
use crate::analysis::suppressions::{Generated, Problem, Recorded, Stack, Suppressions};
use crate::analysis::vgxml::{document, Record, Run};
use crate::cli;
use crate::model::answer::{self, render, Answer, Form};
use crate::model::frames::JsonFrame;
use crate::model::heap::StackGroup;
use crate::model::leaks::{Classified, Graph};
use crate::model::names::Names;
use crate::model::roots::{Kind, Loaded, Roots};
use crate::model::text::{hex, plural};
use crate::steps::blocks::{
    self, block_json, groups, limited, problems_json, rest_line, select, stack_json, BlockJson, ProblemJson,
    StacksTotal,
};
use crate::steps::inspect::{Inspect, Need};
use crate::{usage, Result};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// What `dmem leaks` lists, and what counts for --error-exitcode, unless --show-leak-kinds and
/// --errors-for-leak-kinds say otherwise: valgrind's default for both (3.19), which the exit
/// report's `show-leak-kinds` and `errors-for-leak-kinds` share, so that a CI reading either
/// counts the same records.
const DEFAULT_SHOW: [Class; 2] = [Class::DefinitelyLost, Class::PossiblyLost];

/// The lost blocks, which `--leaks` of folded, types and words picks.
const LOST: [Class; 3] = [Class::DefinitelyLost, Class::IndirectlyLost, Class::PossiblyLost];

/// `definitely_lost` and the like: a class's JSON key.
fn key(c: Class) -> String {
    c.name().replace(' ', "_")
}

/// An image opened and classified, the process (if dmem stopped one) running again.
struct Scan {
    ins: Inspect,
    objects: Vec<Loaded>,
    roots: Roots,
    c: Classified,
}

impl Scan {
    fn open(image: &cli::ImageArgs) -> Result<Scan> {
        Scan::open_words(&image.image, image.registers.as_deref(), image.heuristics)
    }

    fn open_words(
        words: &[std::ffi::OsString],
        registers: Option<&std::path::Path>,
        heuristics: Option<u8>,
    ) -> Result<Scan> {
        let mut ins = Inspect::open_words(words, registers, heuristics, Need::Still)?;
        let (objects, roots, c) = ins.classify();
        if let Some(line) = ins.pause_line() {
            eprintln!("{line}");
        }
        Ok(Scan {
            ins,
            objects,
            roots,
            c,
        })
    }

    /// The blocks of `classes`, in address order.
    fn of(&self, classes: &[Class]) -> Vec<usize> {
        (0..self.c.class.len())
            .filter(|&i| classes.contains(&self.c.class[i]))
            .collect()
    }

    fn warnings(&mut self, scanned: bool) -> Vec<String> {
        let mut out = self.ins.warnings();
        if scanned {
            out.extend(self.roots.notes.iter().map(|n| format!("note: {n}")));
            if !self.c.unread_roots.is_empty() {
                let n = self.c.unread_roots.len() as u64;
                let names: Vec<&str> = self
                    .c
                    .unread_roots
                    .iter()
                    .take(4)
                    .map(|&i| self.roots.roots[i].what.as_str())
                    .collect();
                out.push(format!(
                    "warning: {} could not be read and {} not scanned: {}",
                    plural(n, "root range"),
                    if n == 1 { "was" } else { "were" },
                    names.join(", ")
                ));
            }
        }
        if self.c.unread_blocks > 0 {
            out.push(format!(
                "warning: {} not in memory; their contents were not scanned",
                plural(self.c.unread_blocks as u64, "block")
            ));
        }
        out
    }
}

/// (blocks, bytes) of a selection by class, in `Class::ALL` order.
fn by_class(scan: &Scan, sel: &[usize]) -> [(u64, u64); 4] {
    let mut out = [(0u64, 0u64); 4];
    for &i in sel {
        let k = Class::ALL.iter().position(|&c| c == scan.c.class[i]).unwrap();
        out[k].0 += 1;
        out[k].1 += scan.ins.heap.blocks[i].size;
    }
    out
}

#[derive(Serialize)]
struct Count {
    blocks: u64,
    bytes: u64,
}

fn counts(v: [(u64, u64); 4]) -> BTreeMap<String, Count> {
    Class::ALL
        .iter()
        .zip(v)
        .map(|(&c, (blocks, bytes))| (key(c), Count { blocks, bytes }))
        .collect()
}

/// The suppressions of `--suppressions`, and each recorded stack made ready for them once.
struct Gate {
    sup: Suppressions,
    problems: Vec<Problem>,
    callees: Callees,
    stacks: HashMap<u32, Rc<Recorded>>,
}

impl Gate {
    fn new(paths: &[String]) -> Gate {
        let (sup, problems) = Suppressions::load(paths);
        Gate {
            sup,
            problems,
            callees: Callees::default(),
            stacks: HashMap::new(),
        }
    }

    /// A stack symbolised, with the allocation function its first frame called (read from the
    /// image's code and GOT) and the object that function is in.
    fn stack(&mut self, ins: &mut Inspect, id: u32) -> Rc<Recorded> {
        if let Some(o) = self.stacks.get(&id) {
            return o.clone();
        }
        let pcs = ins.heap.stacks[id as usize].to_vec();
        let frames = ins.namer.frames(&pcs);
        let maps = &ins.image.maps;
        let base = pcs.first().and_then(|&pc| {
            let path = maps.find(pc)?.path.clone()?;
            let start = maps.of_file(&path).find(|m| m.offset == 0).map(|m| m.start);
            start
        });
        let mem = &ins.image.mem;
        let mut read = |addr: u64, buf: &mut [u8]| mem.read(addr, buf).is_ok();
        let (alloc, ip) = match (pcs.first(), base) {
            (Some(&first), Some(base)) => match self.callees.called(&mut read, first, base) {
                Some((name, ip)) => (Alloc::of(Some(name)), ip),
                None => (Alloc::of(None), 0),
            },
            _ => (Alloc::of(None), 0),
        };
        let object = maps
            .find(ip)
            .filter(|_| ip != 0)
            .and_then(|m| m.path.as_deref())
            .map(Rc::from);
        let owned = Rc::new(Recorded {
            frames,
            alloc,
            alloc_ip: ip,
            alloc_object: object,
            truncated: pcs.len() as u64 >= ins.image.layout.nframes,
        });
        self.stacks.insert(id, owned.clone());
        owned
    }

    /// The lines saying which files were left out and what was skipped.
    fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .problems
            .iter()
            .map(|p| format!("warning: this run had no suppressions from {p}"))
            .collect();
        out.extend(
            self.sup
                .files
                .iter()
                .filter_map(|f| f.skipped_note())
                .map(|n| format!("note: {n}")),
        );
        out
    }
}

/// `leaks`: the blocks of the classes `--show` lists, grouped by stack, with the totals of every
/// class over all the blocks the filters let through, as valgrind's leak check counts them.
#[derive(Serialize)]
pub struct Leaks {
    show: Vec<&'static str>,
    #[serde(flatten)]
    classes: BTreeMap<String, Count>,
    /// Of the still-reachable blocks, those a heuristic reached, by heuristic (valgrind's order
    /// here, the JSON's keys sorted).
    #[serde(serialize_with = "by_name")]
    reachable_via_heuristic: Vec<(Heuristic, Count)>,
    /// Blocks the suppressions took out of every class above, and each suppression used.
    suppressed: Count,
    suppressions_used: Vec<UsedJson>,
    total: StacksTotal,
    stacks: Vec<LeakRow>,
    roots: RootsJson,
    notes: Vec<String>,
    warnings: Vec<String>,
    problems: Vec<ProblemJson>,
    /// Whether suppressions were given (the text's total then says what they took).
    #[serde(skip)]
    gating: bool,
    /// The blocks of the classes --errors-for-leak-kinds names that no suppression took: what
    /// --error-exitcode looks at, as valgrind counts leak errors.
    errors: Count,
    /// The groups left out by --limit: the line saying so.
    #[serde(skip)]
    rest: Option<String>,
    /// The process, for the XML's preamble and arguments.
    #[serde(skip)]
    process: Process,
    /// Read through glibc's heap: groups by type and size, not stacks.
    #[serde(skip)]
    bare: bool,
}

/// One stack of `leaks`.
#[derive(Serialize)]
pub struct LeakRow {
    rank: usize,
    blocks: u64,
    bytes: u64,
    example: String,
    #[serde(flatten)]
    classes: BTreeMap<String, Count>,
    stack: Vec<JsonFrame>,
    /// With --gen-suppressions: valgrind's suppression of each class of the stack.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "texts")]
    suppressions: Vec<(Class, Generated)>,
    /// The stack as suppressions and valgrind's XML see it (only for those).
    #[serde(skip)]
    site: Option<Rc<Recorded>>,
    /// The bytes of the indirectly lost blocks its definitely lost blocks hold.
    #[serde(skip)]
    indirect: u64,
}

/// A suppression used.
#[derive(Serialize)]
pub struct UsedJson {
    name: String,
    file: String,
    line: usize,
    count: u64,
    blocks: u64,
    bytes: u64,
    /// The line valgrind -v writes for it.
    #[serde(skip)]
    text: String,
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

/// What the XML says of the image: its name, and the process's id and command line.
#[derive(Default)]
struct Process {
    image: String,
    pid: u32,
    argv: Vec<String>,
}

fn by_name<S: serde::Serializer>(v: &[(Heuristic, Count)], s: S) -> std::result::Result<S::Ok, S::Error> {
    let sorted: BTreeMap<&str, &Count> = v.iter().map(|(h, c)| (h.name(), c)).collect();
    s.collect_map(sorted)
}

fn texts<S: serde::Serializer>(v: &[(Class, Generated)], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|(_, g)| g.text()))
}

impl Leaks {
    /// The count of class `c`.
    fn class(&self, c: Class) -> &Count {
        &self.classes[&key(c)]
    }
}

impl Answer for Leaks {
    const COMMAND: &'static str = "leaks";

    fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for r in &self.stacks {
            let parts: Vec<String> = Class::ALL
                .iter()
                .map(|&c| (c, &r.classes[&key(c)]))
                .filter(|(_, n)| n.blocks > 0)
                .map(|(c, n)| format!("{} {}", n.blocks, c.name()))
                .collect();
            out.push(format!(
                "{} {}: {} bytes in {} ({}), e.g. {}{}:",
                crate::model::bare::group_word(self.bare),
                r.rank,
                r.bytes,
                plural(r.blocks, "block"),
                parts.join(", "),
                r.example,
                if self.bare { "" } else { ", allocated at" }
            ));
            out.extend(answer::stack_lines(&r.stack, "    "));
            for (_, g) in &r.suppressions {
                out.extend(g.shown().lines().map(str::to_owned));
            }
        }
        out.extend(self.rest.clone());
        out.push(self.total_line());
        let hidden: Vec<&str> = Class::ALL
            .iter()
            .filter(|&&c| !self.show.contains(&c.word()) && self.class(c).blocks > 0)
            .map(|c| c.name())
            .collect();
        if !hidden.is_empty() {
            out.push(format!(
                "not listed: {} (--show-leak-kinds=all lists every class)",
                hidden.join(", ")
            ));
        }
        let mut via = [(0, 0); 4];
        for (h, n) in &self.reachable_via_heuristic {
            if let Some(k) = Heuristic::ALL.iter().position(|x| x == h) {
                via[k] = (n.blocks, n.bytes);
            }
        }
        if let Some(line) = records::via_heuristics(&via) {
            out.push(format!("of which still reachable via heuristic: {line}"));
        }
        // valgrind -v's list of the suppressions used, when every class is listed.
        if self.show.len() == Class::ALL.len() {
            out.extend(self.suppressions_used.iter().map(|u| u.text.clone()));
        }
        out
    }
}

impl Leaks {
    /// valgrind's LEAK SUMMARY wording, written where the exit report's summary line is
    /// (`analysis::records`).
    fn total_line(&self) -> String {
        let totals: records::ByClass = Class::ALL.map(|c| {
            let n = self.class(c);
            (n.blocks, n.bytes)
        });
        let suppressed = self
            .gating
            .then_some((self.suppressed.blocks, self.suppressed.bytes));
        format!("total: {}", records::summary(&totals, suppressed))
    }
}

impl answer::Xml for Leaks {
    /// memcheck's XML: one loss record per class of each listed stack.
    fn xml(&self, warnings: Vec<String>) -> String {
        let stacks: Vec<Option<Stack>> = self
            .stacks
            .iter()
            .map(|r| r.site.as_ref().map(|s| s.stack()))
            .collect();
        let mut records = Vec::new();
        for (r, stack) in self.stacks.iter().zip(&stacks) {
            let (Some(site), Some(stack)) = (&r.site, stack) else {
                continue;
            };
            for &class in &Class::ALL {
                let n = &r.classes[&key(class)];
                if n.blocks == 0 {
                    continue;
                }
                records.push(Record {
                    class,
                    bytes: n.bytes,
                    blocks: n.blocks,
                    indirect: if class == Class::DefinitelyLost {
                        r.indirect
                    } else {
                        0
                    },
                    stack,
                    alloc_ip: site.alloc_ip,
                    suppression: r.suppressions.iter().find(|(c, _)| *c == class).map(|(_, g)| g),
                });
            }
        }
        let mut preamble = vec![format!(
            "dmem leaks of {}, in memcheck's format",
            self.process.image
        )];
        preamble.extend(warnings);
        let run = Run {
            pid: self.process.pid,
            ppid: 0,
            argv: &self.process.argv,
            preamble: &preamble,
        };
        let counts: Vec<(String, u64)> = self
            .suppressions_used
            .iter()
            .map(|u| (u.name.clone(), u.count))
            .collect();
        document(&run, &records, &counts)
    }
}

/// The answer, and the exit status: --error-exitcode's when blocks of the classes
/// --errors-for-leak-kinds names are left after the suppressions, else 0.
pub fn leaks(args: cli::LeaksArgs) -> Result<(String, i32)> {
    let mut scan = Scan::open(&args.image)?;
    let form = match args.format.as_deref() {
        Some("xml") => Form::Xml,
        Some("json") => Form::Json,
        _ if args.filters.json => Form::Json,
        _ => Form::Text,
    };
    let mut gate = Gate::new(&args.suppressions);
    let answer = Leaks::of(&mut scan, &mut gate, &args, form == Form::Xml)?;
    let status = match args.error_exitcode {
        Some(n) if answer.errors.blocks > 0 => i32::from(n),
        _ => 0,
    };
    let text = answer::render_in(&answer, form, || {
        let mut out = gate.warnings();
        out.extend(scan.warnings(true));
        out
    });
    Ok((text, status))
}

impl Leaks {
    /// The answer; with `sites`, each listed stack as suppressions and valgrind's XML see it.
    fn of(scan: &mut Scan, gate: &mut Gate, args: &cli::LeaksArgs, sites: bool) -> Result<Leaks> {
        let f = &args.filters;
        let shown: Vec<Class> = args.show.clone().map_or(DEFAULT_SHOW.to_vec(), |c| c.0);
        let mut every = select(&mut scan.ins, f, None)?;
        let suppressed = suppress(scan, gate, &mut every);
        let sel: Vec<usize> = every
            .iter()
            .copied()
            .filter(|&i| shown.contains(&scan.c.class[i]))
            .collect();
        let groups = groups(&scan.ins, &sel);
        let listed = limited(&groups, f.limit);
        let indirect = indirect_by_stack(scan);
        let errors_for: Vec<Class> = args.errors_for.clone().map_or(DEFAULT_SHOW.to_vec(), |c| c.0);
        let errors = by_class(scan, &every)
            .iter()
            .zip(Class::ALL)
            .filter(|(_, c)| errors_for.contains(c))
            .fold(Count { blocks: 0, bytes: 0 }, |n, ((blocks, bytes), _)| Count {
                blocks: n.blocks + blocks,
                bytes: n.bytes + bytes,
            });
        let stacks = listed
            .iter()
            .enumerate()
            .map(|(k, g)| {
                let mut row = LeakRow::of(scan, &sel, k, g);
                row.indirect = indirect.get(&g.stack).copied().unwrap_or(0);
                if sites || args.gen_suppressions {
                    row.site = Some(gate.stack(&mut scan.ins, g.stack));
                }
                if args.gen_suppressions {
                    row.suppressions = row.generated();
                }
                row
            })
            .collect();
        Ok(Leaks {
            show: shown.iter().map(|&c| c.word()).collect(),
            classes: counts(by_class(scan, &every)),
            reachable_via_heuristic: via_heuristic(scan, &every),
            suppressed,
            suppressions_used: used(gate),
            total: StacksTotal::of(&groups),
            stacks,
            roots: roots_json(scan),
            notes: scan.roots.notes.clone(),
            warnings: gate.warnings(),
            problems: problems_json(&scan.ins.heap.problems()),
            gating: !args.suppressions.is_empty(),
            errors,
            rest: rest_line(&groups, listed.len(), scan.ins.is_bare()),
            process: Process::of(&scan.ins),
            bare: scan.ins.is_bare(),
        })
    }
}

impl LeakRow {
    /// The `k`th listed group, its blocks among `sel` counted by class.
    fn of(scan: &mut Scan, sel: &[usize], k: usize, g: &StackGroup) -> LeakRow {
        let mine: Vec<usize> = sel
            .iter()
            .copied()
            .filter(|&i| scan.ins.heap.blocks[i].stack == g.stack)
            .collect();
        LeakRow {
            rank: k + 1,
            blocks: g.blocks,
            bytes: g.bytes,
            example: hex(g.example),
            classes: counts(by_class(scan, &mine)),
            stack: stack_json(&mut scan.ins, g.stack),
            suppressions: Vec::new(),
            site: None,
            indirect: 0,
        }
    }

    /// valgrind's suppression of each class the stack has.
    fn generated(&self) -> Vec<(Class, Generated)> {
        let Some(site) = &self.site else {
            return Vec::new();
        };
        Class::ALL
            .iter()
            .filter(|&&c| self.classes[&key(c)].blocks > 0)
            .map(|&c| (c, Generated::new(&site.stack(), c)))
            .collect()
    }
}

impl Process {
    fn of(ins: &Inspect) -> Process {
        Process {
            image: ins.image.name.clone(),
            pid: ins.image.pid.unwrap_or(0) as u32,
            argv: ins
                .image
                .exe
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
        }
    }
}

/// Takes out of `every` the loss records (one class of one stack) a suppression matches, from
/// every class, listed or not, as valgrind's suppressions do; the blocks and bytes taken.
fn suppress(scan: &mut Scan, gate: &mut Gate, every: &mut Vec<usize>) -> Count {
    let mut suppressed = Count { blocks: 0, bytes: 0 };
    if gate.sup.is_empty() {
        return suppressed;
    }
    let mut records: BTreeMap<(u32, Class), (u64, u64)> = BTreeMap::new();
    for &i in every.iter() {
        let b = &scan.ins.heap.blocks[i];
        let r = records.entry((b.stack, scan.c.class[i])).or_default();
        r.0 += 1;
        r.1 += b.size;
    }
    let mut gone = std::collections::HashSet::new();
    for ((stack, class), (n, bytes)) in records {
        let owned = gate.stack(&mut scan.ins, stack);
        if let Some(hit) = gate.sup.find(&owned.stack(), class) {
            gate.sup.record(hit, n, bytes);
            gone.insert((stack, class));
            suppressed.blocks += n;
            suppressed.bytes += bytes;
        }
    }
    every.retain(|&i| !gone.contains(&(scan.ins.heap.blocks[i].stack, scan.c.class[i])));
    suppressed
}

/// memcheck counts indirectly lost bytes in the record of the definitely lost block that holds
/// them: the bytes by that block's stack.
fn indirect_by_stack(scan: &Scan) -> HashMap<u32, u64> {
    let blocks = &scan.ins.heap.blocks;
    records::indirect_by(&scan.c.head, |i| blocks[i].size, |h| blocks[h].stack)
}

/// The suppressions used, in the order valgrind lists them.
fn used(gate: &Gate) -> Vec<UsedJson> {
    gate.sup
        .used()
        .into_iter()
        .map(|(hit, u)| {
            let e = gate.sup.entry(hit);
            UsedJson {
                name: e.name.clone(),
                file: gate.sup.files[hit.file].path.clone(),
                line: e.line,
                count: u.count,
                blocks: u.blocks,
                bytes: u.bytes,
                text: gate.sup.used_line(hit, u),
            }
        })
        .collect()
}

fn roots_json(scan: &Scan) -> RootsJson {
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
fn via_heuristic(scan: &Scan, sel: &[usize]) -> Vec<(Heuristic, Count)> {
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

/// The classes a command looks at: --show's, else the lost ones with --leaks, else None (every
/// live block).
fn classes_of(leaks: bool, show: &Option<cli::Classes>) -> Option<Vec<Class>> {
    show.clone().map(|c| c.0).or_else(|| leaks.then(|| LOST.to_vec()))
}

/// How output names the blocks of `classes`: "live", "lost", or the classes themselves.
fn describe(classes: &Option<Vec<Class>>) -> String {
    match classes {
        None => "live".to_owned(),
        Some(c) if c[..] == LOST => "lost".to_owned(),
        Some(c) => c.iter().map(|c| c.name()).collect::<Vec<_>>().join(" or "),
    }
}

/// The blocks a command looks at, before its filters: the live ones, or those of `classes`
/// (which needs the scan).
enum Pool {
    Live(Box<Inspect>),
    Classed(Box<Scan>),
}

impl Pool {
    fn open(image: &cli::ImageArgs, classes: &Option<Vec<Class>>) -> Result<Pool> {
        Ok(match classes {
            None => Pool::Live(Box::new(Inspect::open(image, Need::Snapshot)?)),
            Some(_) => Pool::Classed(Box::new(Scan::open(image)?)),
        })
    }

    fn ins(&mut self) -> &mut Inspect {
        match self {
            Pool::Live(i) => i,
            Pool::Classed(s) => &mut s.ins,
        }
    }

    fn blocks(&self, classes: &Option<Vec<Class>>) -> Vec<usize> {
        match (self, classes) {
            (Pool::Classed(s), Some(c)) => s.of(c),
            (Pool::Live(i), _) => i.heap.everything(),
            (Pool::Classed(s), None) => s.ins.heap.everything(),
        }
    }

    fn warnings(&mut self) -> Vec<String> {
        match self {
            Pool::Live(i) => i.warnings(),
            Pool::Classed(s) => s.warnings(true),
        }
    }

    fn objects(&mut self) -> Vec<Loaded> {
        match self {
            Pool::Live(i) => crate::model::roots::loaded(&i.image.maps),
            Pool::Classed(s) => std::mem::take(&mut s.objects),
        }
    }
}

/// The `width`-byte little-endian field at `offset` of a block, if the block holds it.
fn field(ins: &Inspect, i: usize, offset: u64, width: u64) -> Option<u64> {
    let b = &ins.heap.blocks[i];
    if b.size < offset + width {
        return None;
    }
    let mut buf = [0u8; 8];
    ins.image
        .mem
        .read(b.addr + offset, &mut buf[..width as usize])
        .ok()?;
    Some(u64::from_le_bytes(buf))
}

/// {type name: blocks} of the blocks in `pool` whose first word points into a vtable.
fn typed(ins: &Inspect, names: &Names, pool: &[usize]) -> (BTreeMap<String, Vec<usize>>, usize) {
    let vt = names.vtables();
    let mut by: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut type_of: std::collections::HashMap<usize, String> = Default::default();
    for &i in pool {
        let Some(first) = field(ins, i, 0, 8) else {
            continue;
        };
        let Some(k) = vt.lookup(first) else {
            continue;
        };
        let name = type_of.entry(k).or_insert_with(|| vt.type_name(k)).clone();
        by.entry(name).or_default().push(i);
    }
    (by, vt.len())
}

/// `types`: the blocks counted by C++ type, with the stacks most of each type came from.
#[derive(Serialize)]
pub struct Types {
    /// Which blocks were looked at (`describe`).
    blocks: String,
    total: TypesTotal,
    types: Vec<TypeRow>,
    problems: Vec<ProblemJson>,
    /// How many vtable symbols the loaded objects have.
    #[serde(skip)]
    nvtables: usize,
    /// Read through glibc's heap: groups by type and size, not stacks.
    #[serde(skip)]
    bare: bool,
}

#[derive(Serialize)]
pub struct TypesTotal {
    types: usize,
    blocks: u64,
    bytes: u64,
    of_blocks: usize,
}

/// One type of `types`: its blocks and bytes, and its three biggest stacks.
#[derive(Serialize)]
pub struct TypeRow {
    #[serde(rename = "type")]
    name: String,
    blocks: u64,
    bytes: u64,
    stacks: Vec<TypeStack>,
    /// How many stacks its blocks came from.
    #[serde(skip)]
    nstacks: usize,
}

#[derive(Serialize)]
pub struct TypeStack {
    blocks: u64,
    bytes: u64,
    example: String,
    stack: Vec<JsonFrame>,
}

impl Answer for Types {
    const COMMAND: &'static str = "types";

    fn lines(&self) -> Vec<String> {
        let what = &self.blocks;
        if self.types.is_empty() {
            return vec![format!(
                "no {what} block starts with a pointer into a vtable (of {})",
                plural(self.nvtables as u64, "vtable symbol")
            )];
        }
        let mut out = vec![format!("{:>12} {:>14}  type", "blocks", "bytes")];
        out.extend(
            self.types
                .iter()
                .map(|t| format!("{:>12} {:>14}  {}", t.blocks, t.bytes, t.name)),
        );
        if self.total.types > self.types.len() {
            out.push(format!(
                "... {} more types not shown; --limit 0 shows all",
                self.total.types - self.types.len()
            ));
        }
        for t in &self.types {
            let first = &t.stacks[0];
            out.push(format!(
                "{}: {}, most {} ({}, {} bytes, e.g. {}):",
                t.name,
                plural(t.blocks, "block"),
                if self.bare { "in the group" } else { "from" },
                plural(first.blocks, "block"),
                first.bytes,
                first.example
            ));
            out.extend(answer::stack_lines(&first.stack, "    "));
            if t.nstacks > 1 {
                out.push(format!(
                    "    ... and {} more",
                    plural(t.nstacks as u64 - 1, crate::model::bare::group_word(self.bare))
                ));
            }
        }
        out.push(format!(
            "total: {} of {} {what} blocks ({} bytes) are of {}",
            self.total.blocks,
            self.total.of_blocks,
            self.total.bytes,
            plural(self.total.types as u64, "C++ type")
        ));
        out
    }
}

pub fn types(args: cli::TypesArgs) -> Result<String> {
    let classes = classes_of(args.leaks, &args.show);
    let mut pool = Pool::open(&args.image, &classes)?;
    let names = Names::new(&pool.objects());
    let blocks = pool.blocks(&classes);
    let f = &args.filters;
    let (by, nvtables) = typed(pool.ins(), &names, &blocks);
    let mut rows = Vec::new();
    for (name, pos) in by {
        let sel = select(pool.ins(), f, Some(pos))?;
        let (count, nbytes) = pool.ins().heap.totals(&sel);
        if count > 0 {
            let g = groups(pool.ins(), &sel);
            rows.push((name, count, nbytes, g));
        }
    }
    rows.sort_by(|a, b| (b.1, b.2, &a.0).cmp(&(a.1, a.2, &b.0)));
    let shown = limited(&rows, f.limit);
    let types = shown
        .iter()
        .map(|(n, c, z, g)| TypeRow {
            name: n.clone(),
            blocks: *c,
            bytes: *z,
            stacks: g
                .iter()
                .take(3)
                .map(|g| TypeStack {
                    blocks: g.blocks,
                    bytes: g.bytes,
                    example: hex(g.example),
                    stack: stack_json(pool.ins(), g.stack),
                })
                .collect(),
            nstacks: g.len(),
        })
        .collect();
    let answer = Types {
        blocks: describe(&classes),
        total: TypesTotal {
            types: rows.len(),
            blocks: rows.iter().map(|r| r.1).sum(),
            bytes: rows.iter().map(|r| r.2).sum(),
            of_blocks: blocks.len(),
        },
        types,
        problems: problems_json(&pool.ins().heap.problems()),
        nvtables,
        bare: pool.ins().is_bare(),
    };
    Ok(render(&answer, f.json, || pool.warnings()))
}

/// (values, their counts, number of values, distinct values): the `limit` most frequent
/// values (all for 0), most frequent first, ties by value.
fn histogram(mut values: Vec<u64>, limit: usize) -> (Vec<(u64, u64)>, u64, usize) {
    let total = values.len() as u64;
    values.sort_unstable();
    let mut counts: Vec<(u64, u64)> = Vec::new();
    for v in values {
        match counts.last_mut() {
            Some((last, n)) if *last == v => *n += 1,
            _ => counts.push((v, 1)),
        }
    }
    let distinct = counts.len();
    counts.sort_by(|a, b| (b.1, a.0).cmp(&(a.1, b.0)));
    if limit > 0 {
        counts.truncate(limit);
    }
    (counts, total, distinct)
}

/// `words`: a histogram of the words (or of one field) of the blocks asked for, the values a
/// pointer into a loaded object names by its symbol.
#[derive(Serialize)]
pub struct Words {
    blocks: usize,
    vtable: Option<String>,
    offset: Option<u64>,
    #[serde(rename = "type")]
    field_type: String,
    leaks: bool,
    words: u64,
    distinct: usize,
    values: Vec<Value>,
    /// What was counted, in words.
    #[serde(skip)]
    title: String,
    /// The field's width in bytes.
    #[serde(skip)]
    width: u64,
}

/// One value of `words` and how often it was seen.
#[derive(Serialize)]
pub struct Value {
    value: String,
    count: u64,
    symbol: Option<String>,
    #[serde(skip)]
    number: u64,
}

impl Answer for Words {
    const COMMAND: &'static str = "words";

    fn lines(&self) -> Vec<String> {
        let mut out = vec![
            format!(
                "histogram of {}: {} values, {} distinct",
                self.title, self.words, self.distinct
            ),
            format!("{:>12}  value", "count"),
        ];
        let digits = 2 * self.width as usize;
        for v in &self.values {
            let (n, c) = (v.number, v.count);
            let mut line = format!("{c:>12}  0x{n:0digits$x}");
            match &v.symbol {
                Some(s) => line.push_str(&format!("  {s}")),
                None if n < 1 << 20 => line.push_str(&format!("  ({n})")),
                None => {}
            }
            out.push(line);
        }
        if self.distinct > self.values.len() {
            out.push(format!(
                "... {} more distinct values; --limit 0 shows all",
                self.distinct - self.values.len()
            ));
        }
        out
    }
}

pub fn words(args: cli::WordsArgs) -> Result<String> {
    if args.field_type.is_some() && args.offset.is_none() {
        return Err(usage("--type goes with --offset"));
    }
    let classes = classes_of(args.leaks, &args.show);
    let mut pool = Pool::open(&args.image, &classes)?;
    let names = Names::new(&pool.objects());
    let (pos, about) = of_vtable(&mut pool, &names, &classes, args.vtable.as_deref())?;
    let f = &args.filters;
    let sel = select(pool.ins(), f, Some(pos))?;
    let field_type = args.field_type.clone().unwrap_or_else(|| "u64".to_owned());
    let width: u64 = match field_type.as_str() {
        "u8" => 1,
        "u16" => 2,
        "u32" => 4,
        _ => 8,
    };
    let (values, title) = match args.offset {
        Some(off) => {
            let vals: Vec<u64> = sel
                .iter()
                .filter_map(|&i| field(pool.ins(), i, off, width))
                .collect();
            let n = vals.len();
            let title = format!(
                "the {field_type} at offset {off} of {about} ({n} of {} big enough)",
                sel.len()
            );
            (vals, title)
        }
        None => {
            let title = format!(
                "the 8-byte words of {about} ({})",
                plural(sel.len() as u64, "block")
            );
            (all_words(pool.ins(), &sel), title)
        }
    };
    let (shown, words, distinct) = histogram(values, f.limit.unwrap_or(20) as usize);
    let answer = Words {
        blocks: sel.len(),
        vtable: args.vtable.clone(),
        offset: args.offset,
        field_type,
        leaks: classes.is_some(),
        words,
        distinct,
        values: shown
            .into_iter()
            .map(|(v, count)| Value {
                value: hex(v),
                count,
                symbol: if width == 8 && v != 0 { names.name(v) } else { None },
                number: v,
            })
            .collect(),
        title,
        width,
    };
    Ok(render(&answer, f.json, || pool.warnings()))
}

/// The blocks of `classes` (all live ones for None), or only those of the type whose vtable is
/// `vtable` (by type or symbol name); and how the title names them.
fn of_vtable(
    pool: &mut Pool,
    names: &Names,
    classes: &Option<Vec<Class>>,
    vtable: Option<&str>,
) -> Result<(Vec<usize>, String)> {
    let what = describe(classes);
    let Some(v) = vtable else {
        return Ok((pool.blocks(classes), format!("{what} blocks")));
    };
    let blocks = pool.blocks(classes);
    let (by, _) = typed(pool.ins(), names, &blocks);
    let found = by
        .get(v)
        .or_else(|| names.vtables().type_of_symbol(v).and_then(|t| by.get(&t)));
    let Some(found) = found else {
        let seen: Vec<&str> = by.keys().take(8).map(String::as_str).collect();
        return Err(usage(format!(
            "no {what} block has the vtable of '{v}'; types seen: {}",
            if seen.is_empty() {
                "none".to_owned()
            } else {
                seen.join(", ")
            }
        )));
    };
    Ok((found.clone(), format!("{what} blocks of type {v}")))
}

/// Every 8-byte word of the blocks `sel`.
fn all_words(ins: &Inspect, sel: &[usize]) -> Vec<u64> {
    let mut vals = Vec::new();
    for &i in sel {
        let b = ins.heap.blocks[i];
        crate::model::leaks::scan_words(&*ins.image.mem, b.addr, b.addr + b.size, &mut |_, ws| {
            vals.extend(ws.iter().map(|&w| w as u64))
        });
    }
    vals
}

/// `dmem why` shows this many blocks at each end of a longer chain.
const WHY_ENDS: usize = 4;

/// `why`: the class of the block an address is in, and the chain of blocks that decides it.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Why {
    Found(Chain),
    NotLive(NoBlock),
}

/// An address inside no live block.
#[derive(Serialize)]
pub struct NoBlock {
    addr: String,
    block: Option<()>,
}

/// The block's class and its chain: from a root for a still reachable or possibly lost block
/// (the block alone when none was found), from the definitely lost block that holds it for an
/// indirectly lost one, the block itself for a definitely lost one.
#[derive(Serialize)]
pub struct Chain {
    addr: String,
    class: String,
    root: Option<RootJson>,
    chain: Vec<Link>,
    #[serde(skip)]
    of: Class,
    /// The block's address.
    #[serde(skip)]
    block: u64,
}

#[derive(Serialize)]
pub struct RootJson {
    kind: &'static str,
    #[serde(rename = "where")]
    place: String,
    addr: Option<String>,
    value: String,
    start_pointer: bool,
    into: Option<u64>,
    /// The symbol of the word's address, if any.
    #[serde(skip)]
    symbol: Option<String>,
}

/// A block of the chain, and where the block before it points to it.
#[derive(Serialize)]
pub struct Link {
    #[serde(flatten)]
    block: BlockJson,
    via_offset: Option<u64>,
    into: Option<u64>,
    #[serde(skip)]
    stack: u32,
}

impl Answer for Why {
    const COMMAND: &'static str = "why";

    fn lines(&self) -> Vec<String> {
        match self {
            Why::NotLive(w) => vec![format!("{}: not inside any live block", w.addr)],
            Why::Found(c) => {
                let mut out = vec![c.head()];
                out.extend(c.root.as_ref().map(RootJson::line));
                if c.of == Class::DefinitelyLost {
                    // Its chain is the block alone.
                    let b = &c.chain[0].block;
                    out.push(format!("  {}, {}:", block_line(b), b.alloc_at()));
                    out.extend(answer::stack_lines(&b.stack, "       "));
                } else {
                    out.extend(c.chain_lines());
                }
                out
            }
        }
    }
}

/// `0x... (N bytes, thread T)`; without the thread where none is known.
fn block_line(b: &BlockJson) -> String {
    if b.bare {
        format!("{} ({} bytes)", b.addr, b.size)
    } else {
        format!("{} ({} bytes, thread {})", b.addr, b.size, b.tid)
    }
}

impl Chain {
    /// The line saying what the class means for this block.
    fn head(&self) -> String {
        let user = hex(self.block);
        let n = plural(self.chain.len() as u64, "block");
        match self.of {
            Class::StillReachable => {
                format!("{user} is still reachable: start pointers lead to it from a root through {n}:")
            }
            Class::PossiblyLost => format!(
                "{user} is possibly lost: only a chain through an interior pointer leads to it from a root, through {n}:"
            ),
            Class::DefinitelyLost => format!(
                "{user} is definitely lost: no pointer from a root or from a block in use leads to it, and no other lost block holds it"
            ),
            Class::IndirectlyLost => format!(
                "{user} is indirectly lost: only lost blocks point to it; a chain from the definitely lost block {}:",
                self.chain[0].block.addr
            ),
        }
    }

    /// The blocks of the chain, a long one (a linked list) by its ends; --json gives all of it.
    fn chain_lines(&self) -> Vec<String> {
        let len = self.chain.len();
        let keep = if len > 2 * WHY_ENDS + 1 { WHY_ENDS } else { len };
        let mut out = Vec::new();
        let mut last: Option<u32> = None;
        for (n, link) in self.chain.iter().enumerate() {
            if keep <= n && n < len - keep {
                if n == keep {
                    out.push(format!("  ... {} more blocks on the way ...", len - 2 * keep));
                }
                continue;
            }
            let mut via = String::new();
            if let (Some(off), Some(inside)) = (link.via_offset, link.into) {
                via = format!(" at offset {off} of the block above");
                if inside > 0 {
                    via.push_str(&format!(", {inside} bytes into this one"));
                }
            }
            let line = block_line(&link.block);
            if last == Some(link.stack) {
                let same = if link.block.bare {
                    "in the same group"
                } else {
                    "allocated at the same stack"
                };
                out.push(format!("  -> {line}{via}, {same}"));
                continue;
            }
            out.push(format!("  -> {line}{via}, {}:", link.block.alloc_at()));
            out.extend(answer::stack_lines(&link.block.stack, "       "));
            last = Some(link.stack);
        }
        out
    }
}

impl RootJson {
    fn line(&self) -> String {
        let hit = self
            .into
            .map(|d| format!(", {d} bytes into the first block"))
            .unwrap_or_default();
        match &self.addr {
            None => format!("  root: {} = {}{hit}", self.place, self.value),
            Some(w) => {
                let name = self
                    .symbol
                    .as_ref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default();
                format!("  root: the word at {w}{name}, in the {}{hit}", self.place)
            }
        }
    }
}

pub fn why(args: cli::AddrArgs) -> Result<String> {
    let (words, addr) = blocks::addr_words(&args)?;
    let mut scan = Scan::open_words(&words, args.registers.as_deref(), args.heuristics)?;
    let answer = match scan.ins.heap.find(addr) {
        None => Why::NotLive(NoBlock {
            addr: hex(addr),
            block: None,
        }),
        Some((k, _)) => Why::Found(Chain::of(&mut scan, addr, k)),
    };
    Ok(render(&answer, args.json, || scan.warnings(true)))
}

impl Chain {
    /// The chain that decides the class of block `k`, which `addr` is in.
    fn of(scan: &mut Scan, addr: u64, k: usize) -> Chain {
        let class = scan.c.class[k];
        let graph = Graph::build(&*scan.ins.image.mem, &scan.ins.heap, &scan.roots);
        let (root, chain) = match class {
            Class::StillReachable | Class::PossiblyLost => {
                match graph.chain_from_root(k, &scan.c.class, class == Class::StillReachable) {
                    Some((r, rf, chain)) => (Some((r, rf)), chain),
                    None => (None, vec![k]),
                }
            }
            _ => (None, graph.chain_from_leak(k, &scan.c.class)),
        };
        let mut links = Vec::new();
        for (n, &p) in chain.iter().enumerate() {
            let b = scan.ins.heap.blocks[p];
            let hop = if n == 0 {
                None
            } else {
                graph.link(&scan.ins.heap, chain[n - 1], p)
            };
            links.push(Link {
                block: block_json(&mut scan.ins, &b),
                via_offset: hop.map(|h| h.0),
                into: hop.map(|h| h.1),
                stack: b.stack,
            });
        }
        let first = scan.ins.heap.blocks[chain[0]].addr;
        let names = Names::new(&scan.objects);
        let root = root.map(|(r, rf)| RootJson {
            kind: scan.roots.roots[r].kind_name(),
            place: scan.roots.roots[r].what.clone(),
            addr: rf.word.map(hex),
            value: hex(rf.value),
            start_pointer: rf.start,
            into: Some(rf.value - first).filter(|&d| d != 0),
            symbol: rf.word.and_then(|w| names.name(w)),
        });
        Chain {
            addr: hex(addr),
            class: key(class),
            root,
            chain: links,
            of: class,
            block: scan.ins.heap.blocks[k].addr,
        }
    }
}

pub fn folded(args: cli::FoldedArgs) -> Result<String> {
    let classes = classes_of(args.leaks, &args.show);
    let mut pool = Pool::open(&args.image, &classes)?;
    pool.ins().needs_stacks("'dmem folded'")?;
    let blocks = pool.blocks(&classes);
    let sel = select(pool.ins(), &args.filters, Some(blocks))?;
    // The folded lines are data for other tools: what is wrong with the lists goes to stderr.
    for line in pool.warnings() {
        eprintln!("dmem folded: {line}");
    }
    let g = groups(pool.ins(), &sel);
    let (text, nstacks, nbytes) = blocks::fold(pool.ins(), &g);
    blocks::write_folded(args.output.as_deref(), text, nstacks, nbytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_keeps_the_most_frequent_and_breaks_ties_by_value() {
        let (top, total, distinct) = histogram(vec![5, 3, 5, 7, 3, 9, 5], 2);
        assert_eq!((top, total, distinct), (vec![(5, 3), (3, 2)], 7, 4));
        let (all, _, _) = histogram(vec![2, 1], 0);
        assert_eq!(all, vec![(1, 1), (2, 1)]);
    }
}
