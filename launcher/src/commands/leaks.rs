//! `dmem leaks`: lost blocks in valgrind's leak classes (definitely, indirectly and possibly lost,
//! and still reachable), grouped by allocation stack, as text, JSON or valgrind's XML.

use crate::analysis::reach::{Class, Heuristic};
use crate::analysis::records::{self, LossRecords};
use crate::analysis::suppressions::{Generated, Recorded, Stack};
use crate::analysis::vgxml::{document, Run};
use crate::cli;
use crate::model::answer::{self, Answer, Form};
use crate::model::frames::JsonFrame;
use crate::model::text::{hex, plural};
use crate::steps::blocks::{
    groups, limited, problems_json, rest_line, select, stack_json, ProblemJson, StacksTotal,
};
use crate::steps::counts::{counts, key, roots_json, Count, RootsJson};
use crate::steps::inspect::Inspect;
use crate::steps::scan::Scan;
use crate::steps::suppress::{used, Gate, UsedJson};
use crate::Result;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// The loss records of a scan (`analysis::records`), each of one class of one stack: the
/// stack's rank among the stacks ordered by their return addresses (valgrind's order between
/// records of equal size), and its index in the walk.
type Records = LossRecords<(u32, u32)>;

/// What `dmem leaks` lists, and what counts for --error-exitcode, unless --show-leak-kinds and
/// --errors-for-leak-kinds say otherwise: valgrind's default for both (3.19), which the exit
/// report's `show-leak-kinds` and `errors-for-leak-kinds` share, so that a CI reading either
/// counts the same records.
const DEFAULT_SHOW: [Class; 2] = [Class::DefinitelyLost, Class::PossiblyLost];

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
    /// The loss records, which the XML lists.
    #[serde(skip)]
    records: Records,
    /// The classes listed, as `Class::bit`s.
    #[serde(skip)]
    show_bits: u8,
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
    /// The stack's index in the walk.
    #[serde(skip)]
    id: u32,
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
    /// memcheck's XML: the loss records of the listed stacks, in valgrind's order, as the exit
    /// report writes them.
    fn xml(&self, warnings: Vec<String>) -> String {
        let rows: HashMap<u32, &LeakRow> = self.stacks.iter().map(|r| (r.id, r)).collect();
        let listed: Vec<_> = self
            .records
            .listed(self.show_bits)
            .filter_map(|r| {
                let row = rows.get(&r.key.1)?;
                Some((r, row.site.as_ref()?, *row))
            })
            .collect();
        let stacks: Vec<Stack> = listed.iter().map(|(_, site, _)| site.stack()).collect();
        let records: Vec<_> = listed
            .iter()
            .zip(&stacks)
            .map(|((r, site, row), stack)| {
                let gen = row
                    .suppressions
                    .iter()
                    .find(|(c, _)| *c == r.class)
                    .map(|(_, g)| g);
                r.xml(stack, site.alloc_ip, gen)
            })
            .collect();
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
        let show_bits = bits(&shown);
        let every = select(&mut scan.ins, f, None)?;
        let recs = records_of(scan, gate, &every);
        // The blocks listed: of the classes shown, in records no suppression took. Looked up
        // once per block, so hashed with rustc-hash rather than SipHash, as the records are.
        let kept: FxHashMap<(u32, Class), &records::LossRecord<(u32, u32)>> =
            recs.listed(show_bits).map(|r| ((r.key.1, r.class), r)).collect();
        let blocks = &scan.ins.heap.blocks;
        let sel: Vec<usize> = every
            .iter()
            .copied()
            .filter(|&i| kept.contains_key(&(blocks[i].stack, scan.c.class[i])))
            .collect();
        let groups = groups(&scan.ins, &sel);
        let listed = limited(&groups, f.limit);
        let errors_for: Vec<Class> = args.errors_for.clone().map_or(DEFAULT_SHOW.to_vec(), |c| c.0);
        let (blocks, bytes) = recs.errors(bits(&errors_for));
        let stacks = listed
            .iter()
            .enumerate()
            .map(|(k, g)| {
                let of = |c: Class| kept.get(&(g.stack, c)).map_or((0, 0), |r| (r.blocks, r.bytes));
                let mut row = LeakRow {
                    rank: k + 1,
                    blocks: g.blocks,
                    bytes: g.bytes,
                    example: hex(g.example),
                    classes: counts(Class::ALL.map(of)),
                    stack: stack_json(&mut scan.ins, g.stack),
                    suppressions: Vec::new(),
                    site: None,
                    id: g.stack,
                };
                if sites || args.gen_suppressions {
                    row.site = Some(gate.sites.stack(&mut scan.ins, g.stack));
                }
                if args.gen_suppressions {
                    row.suppressions = row.generated();
                }
                row
            })
            .collect();
        let via = recs.via();
        let (n, b) = recs.suppressed;
        Ok(Leaks {
            show: shown.iter().map(|&c| c.word()).collect(),
            classes: counts(recs.totals),
            reachable_via_heuristic: Heuristic::ALL
                .into_iter()
                .zip(via)
                .filter(|(_, v)| v.0 > 0)
                .map(|(h, (blocks, bytes))| (h, Count { blocks, bytes }))
                .collect(),
            suppressed: Count { blocks: n, bytes: b },
            suppressions_used: used(gate),
            total: StacksTotal::of(&groups),
            stacks,
            roots: roots_json(scan),
            notes: scan.roots.notes.clone(),
            warnings: gate.warnings(),
            problems: problems_json(&scan.ins.heap.problems()),
            gating: !args.suppressions.is_empty(),
            errors: Count { blocks, bytes },
            rest: rest_line(&groups, listed.len(), scan.ins.is_bare()),
            process: Process::of(&scan.ins),
            bare: scan.ins.is_bare(),
            records: recs,
            show_bits,
        })
    }
}

/// A set of classes as `Class::bit`s.
fn bits(classes: &[Class]) -> u8 {
    classes.iter().fold(0, |set, c| set | c.bit())
}

/// The loss records of the blocks `every` (`analysis::records`, as the exit report groups
/// them), of every class, less what `--suppressions` match.
fn records_of(scan: &mut Scan, gate: &mut Gate, every: &[usize]) -> Records {
    let stacks = &scan.ins.heap.stacks;
    let mut by_frames: Vec<u32> = (0..stacks.len() as u32).collect();
    by_frames.sort_by(|&a, &b| stacks[a as usize].cmp(&stacks[b as usize]));
    let mut rank = vec![0u32; stacks.len()];
    for (k, &id) in by_frames.iter().enumerate() {
        rank[id as usize] = k as u32;
    }
    let blocks = &scan.ins.heap.blocks;
    let marks = records::Marks {
        class: &scan.c.class,
        heuristic: &scan.c.heuristic,
        head: &scan.c.head,
    };
    let mut recs = Records::group(
        &marks,
        every.iter().copied(),
        |i| blocks[i].addr,
        |i| blocks[i].size,
        |i| (rank[blocks[i].stack as usize], blocks[i].stack),
        Class::ALL_BITS,
    );
    if !gate.sup.is_empty() {
        let (sites, ins) = (&mut gate.sites, &mut scan.ins);
        recs.suppress(&mut gate.sup, |sup, &(_, id), class| {
            sup.find(&sites.stack(ins, id).stack(), class)
        });
    }
    recs
}

impl LeakRow {
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
