//! The commands about live blocks: summary, stacks, walk, whatis, verify, stats and folded, as
//! text or JSON (the shapes the gdb commands print).

use crate::cli::{self, Filters};
use crate::commands::history::{self, EventJson};
use crate::model::answer::{self, render, Answer};
use crate::model::frames::JsonFrame;
use crate::model::heap::{self, Within};
use crate::model::text::{hex, plural};
use crate::source::heapwalk::Problem;
use crate::steps::blocks::{
    addr_words, block_json, groups, limited, problems_json, rest_line, select, stack_json, BlockJson,
    ProblemJson, StacksTotal,
};
use crate::steps::inspect::{Inspect, Need};
use crate::Result;
use serde::Serialize;
use std::collections::HashMap;

/// `summary`: the selected blocks grouped by stack, the most bytes first.
#[derive(Serialize)]
pub struct Summary {
    total: StacksTotal,
    stacks: Vec<StackRow>,
    problems: Vec<ProblemJson>,
    /// The groups left out by --limit: the line saying so.
    #[serde(skip)]
    rest: Option<String>,
    /// Read through glibc's heap: groups by type and size, not stacks.
    #[serde(skip)]
    bare: bool,
}

/// One stack of `summary`.
#[derive(Serialize)]
pub struct StackRow {
    rank: usize,
    blocks: u64,
    bytes: u64,
    example: String,
    stack: Vec<JsonFrame>,
}

impl Answer for Summary {
    const COMMAND: &'static str = "summary";

    fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let group = crate::model::bare::group_word(self.bare);
        for r in &self.stacks {
            out.push(format!(
                "{group} {}: {} bytes in {} (e.g. {})",
                r.rank,
                r.bytes,
                plural(r.blocks, "block"),
                r.example
            ));
            out.extend(answer::stack_lines(&r.stack, "    "));
        }
        out.extend(self.rest.clone());
        out.push(format!(
            "total: {} bytes in {} from {}",
            self.total.bytes,
            plural(self.total.blocks, "block"),
            plural(self.total.stacks as u64, group)
        ));
        out
    }
}

pub fn summary(args: cli::ListArgs) -> Result<String> {
    let mut ins = Inspect::open(&args.image, Need::Snapshot)?;
    let f = &args.filters;
    let sel = select(&mut ins, f, None)?;
    let groups = groups(&ins, &sel);
    let shown = limited(&groups, f.limit);
    let stacks = shown
        .iter()
        .enumerate()
        .map(|(k, g)| StackRow {
            rank: k + 1,
            blocks: g.blocks,
            bytes: g.bytes,
            example: hex(g.example),
            stack: stack_json(&mut ins, g.stack),
        })
        .collect();
    let answer = Summary {
        total: StacksTotal::of(&groups),
        stacks,
        problems: problems_json(&ins.heap.problems()),
        rest: rest_line(&groups, shown.len(), ins.is_bare()),
        bare: ins.is_bare(),
    };
    Ok(render(&answer, f.json, || ins.warnings()))
}

/// The selected blocks in address order, cut to --limit (all unless given), and how many there
/// were.
fn listed(ins: &mut Inspect, f: &Filters) -> Result<(Vec<usize>, usize)> {
    let mut sel = select(ins, f, None)?;
    let total = sel.len();
    if let Some(n) = f.limit.filter(|&n| n > 0) {
        sel.truncate(n as usize);
    }
    Ok((sel, total))
}

/// `stacks`: every selected block with its stack, by address.
#[derive(Serialize)]
pub struct Stacks {
    total: usize,
    blocks: Vec<BlockJson>,
    problems: Vec<ProblemJson>,
}

impl Answer for Stacks {
    const COMMAND: &'static str = "stacks";

    fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for b in &self.blocks {
            out.push(format!(
                "{}: {} bytes allocated by thread {} at:",
                b.addr, b.size, b.tid
            ));
            out.extend(answer::stack_lines(&b.stack, "    "));
        }
        if self.total > self.blocks.len() {
            out.push(format!("... {} more not shown", self.total - self.blocks.len()));
        }
        out.push(format!(
            "{} shown, {} bytes",
            plural(self.blocks.len() as u64, "block"),
            self.blocks.iter().map(|b| b.size).sum::<u64>()
        ));
        out
    }
}

pub fn stacks(args: cli::ListArgs) -> Result<String> {
    let mut ins = Inspect::open(&args.image, Need::Snapshot)?;
    ins.needs_stacks("'dmem stacks'")?;
    let f = &args.filters;
    let (sel, total) = listed(&mut ins, f)?;
    let blocks = sel
        .iter()
        .map(|&i| {
            let b = ins.heap.blocks[i];
            block_json(&mut ins, &b)
        })
        .collect();
    let answer = Stacks {
        total,
        blocks,
        problems: problems_json(&ins.heap.problems()),
    };
    Ok(render(&answer, f.json, || ins.warnings()))
}

/// `walk`: the addresses of the selected blocks, or of their headers.
#[derive(Serialize)]
pub struct Walk {
    kind: &'static str,
    total: usize,
    addrs: Vec<String>,
    problems: Vec<ProblemJson>,
}

impl Answer for Walk {
    const COMMAND: &'static str = "walk";

    fn lines(&self) -> Vec<String> {
        let mut out = self.addrs.clone();
        if self.total > self.addrs.len() {
            out.push(format!("... {} more not shown", self.total - self.addrs.len()));
        }
        out
    }
}

pub fn walk(args: cli::WalkArgs) -> Result<String> {
    let mut ins = Inspect::open(&args.image, Need::Snapshot)?;
    let f = &args.filters;
    let (sel, total) = listed(&mut ins, f)?;
    let delta = if args.headers { ins.heap.header_size } else { 0 };
    let answer = Walk {
        kind: if args.headers { "headers" } else { "blocks" },
        total,
        addrs: sel
            .iter()
            .map(|&i| hex(ins.heap.blocks[i].addr - delta))
            .collect(),
        problems: problems_json(&ins.heap.problems()),
    };
    Ok(render(&answer, f.json, || ins.warnings()))
}

/// `whatis`: the live block that holds an address, or what the address is instead; and the
/// freed block that held it, where the process kept a free history.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Whatis {
    Live(LiveBlock),
    NotLive(NotLive),
}

#[derive(Serialize)]
pub struct LiveBlock {
    addr: String,
    block: Found,
    freed: Option<EventJson>,
    #[serde(skip)]
    header_size: u64,
}

#[derive(Serialize)]
pub struct Found {
    #[serde(flatten)]
    block: BlockJson,
    offset: i64,
    in_header: bool,
}

#[derive(Serialize)]
pub struct NotLive {
    addr: String,
    block: Option<()>,
    bootstrap_arena: bool,
    overwritten_header: Option<String>,
    freed: Option<EventJson>,
    problems: Vec<ProblemJson>,
    #[serde(skip)]
    at: u64,
    #[serde(skip)]
    arena: (u64, u64),
    /// The overwritten header the address lies in or behind.
    #[serde(skip)]
    behind: Option<u64>,
    #[serde(skip)]
    header_size: u64,
}

/// The lines about the freed block that held `at`, the first starting with `intro`.
fn freed_lines(freed: &Option<EventJson>, at: u64, intro: &str) -> Vec<String> {
    let Some(e) = freed else {
        return Vec::new();
    };
    let mut out = vec![format!(
        "{intro}{} bytes into the freed {}-byte block {}",
        at - e.start,
        e.size,
        e.addr
    )];
    out.extend(e.lines(""));
    out
}

impl Answer for Whatis {
    const COMMAND: &'static str = "whatis";

    fn lines(&self) -> Vec<String> {
        match self {
            Whatis::Live(w) => {
                let (b, f) = (&w.block.block, &w.block);
                let head = if f.in_header {
                    format!(
                        "{}: inside libdmem's header of the {}-byte block {} (header {}, offset {})",
                        w.addr,
                        b.size,
                        b.addr,
                        b.header,
                        f.offset + w.header_size as i64
                    )
                } else {
                    format!(
                        "{}: {} bytes into the {}-byte block {} ({} {})",
                        w.addr,
                        f.offset,
                        b.size,
                        b.addr,
                        b.header_word(),
                        b.header
                    )
                };
                let mut out = vec![head, b.alloc_line()];
                out.extend(answer::stack_lines(&b.stack, "    "));
                let at = (f.offset + b.start as i64) as u64;
                out.extend(freed_lines(&w.freed, at, "before that it was "));
                out
            }
            Whatis::NotLive(w) if w.bootstrap_arena => vec![format!(
                "{}: inside libdmem's bootstrap arena ({}-{}), whose blocks carry no header or stack",
                w.addr,
                hex(w.arena.0),
                hex(w.arena.1)
            )],
            Whatis::NotLive(w) => {
                let not_live = match w.behind {
                    Some(h) if w.at < h + w.header_size => {
                        format!("{}: inside the header {} that was overwritten (see above)", w.addr, hex(h))
                    }
                    Some(h) => format!(
                        "{}: not inside any live block; perhaps {} bytes into the block behind the overwritten header {}, \
                         whose size is not believed (see above)",
                        w.addr,
                        w.at - h - w.header_size,
                        hex(h)
                    ),
                    None => format!("{}: not inside any live block", w.addr),
                };
                if w.freed.is_some() {
                    freed_lines(&w.freed, w.at, &format!("{not_live}; "))
                } else {
                    vec![not_live]
                }
            }
        }
    }
}

pub fn whatis(args: cli::AddrArgs) -> Result<String> {
    let (words, addr) = addr_words(&args)?;
    let mut ins = Inspect::open_words(&words, args.registers.as_deref(), args.heuristics, Need::Snapshot)?;
    // A block that held the address and was freed, when the process kept a free history.
    let history = history::read(&ins).ok();
    let freed = history.as_ref().and_then(|h| history::freed_block(h, addr));
    let freed = freed.map(|(e, newest)| history::event_json(&mut ins, e, newest));
    let header_size = ins.heap.header_size;
    let answer = match ins.heap.find(addr) {
        Some((i, within)) => {
            let b = ins.heap.blocks[i];
            Whatis::Live(LiveBlock {
                addr: hex(addr),
                block: Found {
                    block: block_json(&mut ins, &b),
                    offset: addr as i64 - b.addr as i64,
                    in_header: within == Within::Header,
                },
                freed,
                header_size,
            })
        }
        None => {
            let l = &ins.image.layout;
            let behind = behind_broken(&ins, addr);
            Whatis::NotLive(NotLive {
                addr: hex(addr),
                block: None,
                bootstrap_arena: (l.arena_start..l.arena_end).contains(&addr),
                overwritten_header: behind.map(hex),
                freed,
                problems: problems_json(&ins.heap.problems()),
                at: addr,
                arena: (l.arena_start, l.arena_end),
                behind,
                header_size,
            })
        }
    };
    Ok(render(&answer, args.json, || ins.warnings()))
}

/// The overwritten header (one whose size was not believed) that `addr` lies in or behind,
/// before the next block's header: what `whatis` names instead of a block.
fn behind_broken(ins: &Inspect, addr: u64) -> Option<u64> {
    let heap = &ins.heap;
    let hs = heap.header_size;
    let i = heap.blocks.partition_point(|b| b.addr - hs <= addr);
    let next = heap.blocks.get(i).map_or(u64::MAX, |b| b.addr - hs);
    let prev = i.checked_sub(1).map_or(0, |k| heap.blocks[k].addr);
    heap.size_problems
        .iter()
        .filter_map(|p| p.header)
        .filter(|&h| prev < h && h <= addr && addr < next)
        .max()
}

/// Every problem of the lists: what the walk met, then counters that disagree with what was
/// walked, headers on the wrong list or on two, headers in the bootstrap arena, blocks that run
/// into unreadable memory.
fn verify_problems(ins: &Inspect) -> Vec<Problem> {
    let heap = &ins.heap;
    // The walk's own: where lists broke, sizes not believed, lists whose blocks do not add up
    // to their counters.
    let mut out: Vec<Problem> = heap.problems().into_iter().cloned().collect();
    counter_problems(heap, &mut out);
    header_problems(heap, &mut out);
    block_problems(ins, &mut out);
    out
}

/// Lists whose allocations less frees are not their live blocks.
fn counter_problems(heap: &heap::Heap, out: &mut Vec<Problem>) {
    for (i, li) in heap.lists.iter().enumerate() {
        let c = &li.counters;
        if c.allocs.wrapping_sub(c.frees) != c.live_blocks {
            out.push(Problem {
                list: Some(i as u64),
                addr: Some(li.addr),
                text: format!(
                    "counters disagree: {} allocations - {} frees != {} live blocks",
                    c.allocs, c.frees, c.live_blocks
                ),
                header: None,
            });
        }
    }
}

/// Headers that name another list than the one they are on, and headers on more than one.
fn header_problems(heap: &heap::Heap, out: &mut Vec<Problem>) {
    let hs = heap.header_size;
    for b in &heap.blocks {
        if b.named_list != b.list {
            out.push(Problem {
                list: Some(b.list as u64),
                addr: Some(b.addr - hs),
                text: format!(
                    "header {} says it belongs on list {}",
                    hex(b.addr - hs),
                    b.named_list
                ),
                header: Some(b.addr - hs),
            });
        }
    }
    for w in heap.blocks.windows(2) {
        if w[0].addr == w[1].addr {
            out.push(Problem {
                list: Some(w[1].list as u64),
                addr: Some(w[1].addr - hs),
                text: format!("header {} is on more than one list", hex(w[1].addr - hs)),
                header: None,
            });
        }
    }
}

/// Headers in the bootstrap arena, and blocks that run into unreadable memory.
fn block_problems(ins: &Inspect, out: &mut Vec<Problem>) {
    let heap = &ins.heap;
    let l = &ins.image.layout;
    let hs = heap.header_size;
    for b in &heap.blocks {
        let h = b.addr - hs;
        if (l.arena_start..l.arena_end).contains(&h) {
            out.push(Problem {
                list: Some(b.list as u64),
                addr: Some(h),
                text: format!(
                    "header {} lies in the bootstrap arena, whose blocks have no header",
                    hex(h)
                ),
                header: None,
            });
        }
        if b.size > 0 && ins.image.mem.u64_at((b.addr + b.size - 1) & !7).is_err() {
            out.push(Problem {
                list: Some(b.list as u64),
                addr: Some(h),
                text: format!(
                    "block {} of {} bytes runs into unreadable memory",
                    hex(b.addr),
                    b.size
                ),
                header: None,
            });
        }
    }
}

/// An operation a thread had in flight in the image (see `analysis::carried`): what `verify`
/// names instead of the half-changed list it explains.
#[derive(Serialize)]
pub struct InFlightJson {
    tid: u32,
    /// The entry point: malloc, calloc, memalign, realloc or free.
    entry: &'static str,
    block: String,
    header: String,
    /// The list the header names, when it names one.
    list: Option<u64>,
    /// Whether that list was caught half changed (its sequence counter odd).
    mid_change: bool,
}

/// The operations in flight on the image's threads, from the record each keeps in its area.
fn in_flight(ins: &Inspect) -> Vec<InFlightJson> {
    let l = &ins.image.layout;
    let mem = &*ins.image.mem;
    let mask = 1u64
        .checked_shl(l.size_list_bits as u32)
        .map_or(u64::MAX, |m| m - 1);
    ins.image
        .threads
        .iter()
        .filter_map(|t| {
            let rec = l.inflight(mem, t.fs_base())?;
            let list = mem
                .u64_at(rec.header + l.off_size)
                .ok()
                .map(|w| (w >> l.size_list_shift) & mask)
                .filter(|&i| i < l.nlists);
            let mid_change =
                list.is_some_and(|i| ins.heap.lists.get(i as usize).is_some_and(|li| li.mid_change));
            Some(InFlightJson {
                tid: t.tid,
                entry: rec.entry(),
                block: hex(rec.header + l.header_size),
                header: hex(rec.header),
                list,
                mid_change,
            })
        })
        .collect()
}

/// The problems an operation in flight explains: those of a list caught half changed whose
/// change a thread's record names. Anything else stays a problem, however busy the program was.
fn explained(p: &Problem, ins: &Inspect, busy: &[InFlightJson]) -> bool {
    p.list.is_some_and(|i| {
        ins.heap.lists.get(i as usize).is_some_and(|li| li.mid_change)
            && busy.iter().any(|b| b.list == Some(i))
    })
}

/// `verify`: what the checks of the lists found.
#[derive(Serialize)]
pub struct Verify {
    ok: bool,
    lists: u64,
    /// Read through glibc's heap: its arenas, said in place of lists.
    #[serde(skip)]
    arenas: Option<usize>,
    blocks: u64,
    bytes: u64,
    problems: Vec<ProblemJson>,
    /// Operations the threads had in flight, which explain their lists' half-done changes.
    in_flight: Vec<InFlightJson>,
    /// Each problem as text, with the stack of the block it concerns.
    #[serde(skip)]
    problem_lines: Vec<String>,
}

impl Answer for Verify {
    const COMMAND: &'static str = "verify";

    fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .in_flight
            .iter()
            .map(|b| {
                let list = match (b.list, b.mid_change) {
                    (Some(i), true) => format!("; list {i} is half changed by it, as expected"),
                    (Some(i), false) => format!(" on list {i}"),
                    (None, _) => String::new(),
                };
                format!(
                    "thread {}: {} in flight on block {} (header {}){list}: not a problem",
                    b.tid, b.entry, b.block, b.header
                )
            })
            .collect();
        out.extend(self.problem_lines.iter().cloned());
        let lists = match self.arenas {
            Some(n) => format!("glibc's heap ({})", plural(n as u64, "arena")),
            None => plural(self.lists, "list"),
        };
        let blocks = plural(self.blocks, "block");
        out.push(if self.ok {
            format!(
                "dmem verify: {lists}, {blocks}, {} bytes: no problems found",
                self.bytes
            )
        } else {
            format!(
                "dmem verify: {} found ({lists}, {blocks}, {} bytes walked)",
                plural(self.problems.len() as u64, "problem"),
                self.bytes
            )
        });
        out
    }
}

/// `verify`'s answer, and whether the heap was found sound (the exit status says so).
pub fn verify(args: cli::PlainArgs) -> Result<(String, bool)> {
    let mut ins = Inspect::open(&args.image, Need::Snapshot)?;
    let busy = in_flight(&ins);
    let problems = verify_problems(&ins);
    let problems: Vec<&Problem> = problems.iter().filter(|p| !explained(p, &ins, &busy)).collect();
    let (blocks, bytes) = ins.heap.totals(&ins.heap.everything());
    let answer = Verify {
        ok: problems.is_empty(),
        lists: ins.heap.lists.len() as u64,
        arenas: ins.census.as_ref().map(|c| c.arenas),
        blocks,
        bytes,
        problems: problems_json(&problems),
        in_flight: busy,
        problem_lines: heap::problem_lines(&problems, &ins.heap.blocks, &ins.heap.stacks, &mut ins.namer, ""),
    };
    // The problems are the answer, not warnings in front of it.
    Ok((render(&answer, args.json, Vec::new), answer.ok))
}

/// `stats`: the descriptor's counters and the live blocks per allocating thread.
#[derive(Serialize)]
pub struct Stats {
    layout: String,
    version: u64,
    recording: Option<bool>,
    counters: Counters,
    walked: Walked,
    lists_used: usize,
    memory: String,
    threads: Vec<ThreadRow>,
    problems: Vec<ProblemJson>,
    #[serde(skip)]
    header_size: u64,
    #[serde(skip)]
    nframes: u64,
    #[serde(skip)]
    nlists: u64,
}

#[derive(Serialize)]
pub struct Counters {
    live_blocks: u64,
    live_bytes: u64,
    allocs: u64,
    frees: u64,
}

#[derive(Serialize)]
pub struct Walked {
    blocks: u64,
    bytes: u64,
}

#[derive(Serialize)]
pub struct ThreadRow {
    tid: u32,
    blocks: u64,
    bytes: u64,
}

impl Answer for Stats {
    const COMMAND: &'static str = "stats";

    fn lines(&self) -> Vec<String> {
        let c = &self.counters;
        let mut out = vec![
            format!(
                "libdmem layout v{} at {}: {}-byte headers, {} frames, {} lists",
                self.version, self.layout, self.header_size, self.nframes, self.nlists
            ),
            format!(
                "recording: {}",
                match self.recording {
                    None => "unknown (flags unreadable)",
                    Some(true) => "on",
                    Some(false) => "off",
                }
            ),
            format!("live blocks: {}", c.live_blocks),
            format!("live bytes: {}", c.live_bytes),
            format!("allocations: {}", c.allocs),
            format!("frees: {}", c.frees),
            format!("lists in use: {} of {}", self.lists_used, self.nlists),
            format!(
                "walked: {}, {} bytes",
                plural(self.walked.blocks, "block"),
                self.walked.bytes
            ),
            format!("memory: {}", self.memory),
            "per thread (live blocks by allocating thread):".to_owned(),
            format!("  {:>10} {:>12} {:>16}", "tid", "blocks", "bytes"),
        ];
        out.extend(
            self.threads
                .iter()
                .map(|t| format!("  {:>10} {:>12} {:>16}", t.tid, t.blocks, t.bytes)),
        );
        out
    }
}

pub fn stats(args: cli::PlainArgs) -> Result<String> {
    let mut ins = Inspect::open(&args.image, Need::Snapshot)?;
    let heap = &ins.heap;
    let l = &ins.image.layout;
    let c = heap.counters;
    let mut threads: HashMap<u32, (u64, u64)> = HashMap::new();
    for b in &heap.blocks {
        let e = threads.entry(b.tid).or_default();
        e.0 += 1;
        e.1 += b.size;
    }
    let mut threads: Vec<ThreadRow> = threads
        .into_iter()
        .map(|(tid, (blocks, bytes))| ThreadRow { tid, blocks, bytes })
        .collect();
    threads.sort_by(|a, b| (b.bytes, a.tid).cmp(&(a.bytes, b.tid)));
    let walked = heap.totals(&heap.everything());
    let answer = Stats {
        layout: hex(l.addr),
        version: l.version,
        recording: l
            .flags(&*ins.image.mem)
            .ok()
            .map(|f| f & crate::source::heapwalk::FLAG_RECORDING != 0),
        counters: Counters {
            live_blocks: c.live_blocks,
            live_bytes: c.live_bytes,
            allocs: c.allocs,
            frees: c.frees,
        },
        walked: Walked {
            blocks: walked.0,
            bytes: walked.1,
        },
        lists_used: heap.lists.iter().filter(|li| li.counters.allocs > 0).count(),
        memory: match ins.image.pid {
            Some(pid) => format!("process {pid}, read with process_vm_readv"),
            None => format!("the core file of {}", ins.image.name),
        },
        threads,
        problems: problems_json(&heap.problems()),
        header_size: l.header_size,
        nframes: l.nframes,
        nlists: l.nlists,
    };
    Ok(render(&answer, args.json, || ins.warnings()))
}
