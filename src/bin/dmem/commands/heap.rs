//! The commands about live blocks: summary, stacks, walk, whatis, verify, stats and folded, as
//! text or JSON (the shapes the gdb commands print).

use crate::cli::{self, Filters};
use crate::commands::blocks::{
    addr_words, block_json, groups, limited, lines, problems_json, rest_line, select, stack_json,
    stack_lines, BlockJson, ProblemJson, StacksTotal, JSON_FORMAT,
};
use crate::commands::history;
use crate::commands::inspect::{Inspect, Need};
use crate::model::frames::JsonFrame;
use crate::model::heap::{self, Within};
use crate::model::text::{dump, hex, plural};
use crate::source::heapwalk::Problem;
use crate::Result;
use serde::Serialize;
use std::collections::HashMap;

pub fn summary(args: cli::ListArgs) -> Result<String> {
    let mut ins = Inspect::open(&args.image, Need::Snapshot)?;
    let f = &args.filters;
    let sel = select(&mut ins, f, None)?;
    let (count, nbytes) = ins.heap.totals(&sel);
    let groups = groups(&ins, &sel);
    let shown = limited(&groups, f.limit);
    if f.json {
        #[derive(Serialize)]
        struct Row {
            rank: usize,
            blocks: u64,
            bytes: u64,
            example: String,
            stack: Vec<JsonFrame>,
        }
        #[derive(Serialize)]
        struct Doc {
            format: u32,
            command: &'static str,
            total: StacksTotal,
            stacks: Vec<Row>,
            problems: Vec<ProblemJson>,
        }
        let stacks = shown
            .iter()
            .enumerate()
            .map(|(k, g)| Row {
                rank: k + 1,
                blocks: g.blocks,
                bytes: g.bytes,
                example: hex(g.example),
                stack: stack_json(&mut ins, g.stack),
            })
            .collect();
        return Ok(dump(&Doc {
            format: JSON_FORMAT,
            command: "summary",
            total: StacksTotal::of(&groups),
            stacks,
            problems: problems_json(&ins.heap.problems()),
        }));
    }
    let mut out = ins.warnings();
    for (k, g) in shown.iter().enumerate() {
        out.push(format!(
            "stack {}: {} bytes in {} (e.g. {})",
            k + 1,
            g.bytes,
            plural(g.blocks, "block"),
            hex(g.example)
        ));
        out.extend(stack_lines(&mut ins, g.stack, "    "));
    }
    out.extend(rest_line(&groups, shown.len()));
    out.push(format!(
        "total: {nbytes} bytes in {} from {}",
        plural(count, "block"),
        plural(groups.len() as u64, "stack")
    ));
    Ok(lines(out))
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

pub fn stacks(args: cli::ListArgs) -> Result<String> {
    let mut ins = Inspect::open(&args.image, Need::Snapshot)?;
    let f = &args.filters;
    let (sel, total) = listed(&mut ins, f)?;
    if f.json {
        #[derive(Serialize)]
        struct Doc {
            format: u32,
            command: &'static str,
            total: usize,
            blocks: Vec<BlockJson>,
            problems: Vec<ProblemJson>,
        }
        let blocks = sel
            .iter()
            .map(|&i| {
                let b = ins.heap.blocks[i];
                block_json(&mut ins, &b)
            })
            .collect();
        return Ok(dump(&Doc {
            format: JSON_FORMAT,
            command: "stacks",
            total,
            blocks,
            problems: problems_json(&ins.heap.problems()),
        }));
    }
    let mut out = ins.warnings();
    let mut nbytes = 0;
    for &i in &sel {
        let b = ins.heap.blocks[i];
        nbytes += b.size;
        out.push(format!(
            "{}: {} bytes allocated by thread {} at:",
            hex(b.addr),
            b.size,
            b.tid
        ));
        out.extend(stack_lines(&mut ins, b.stack, "    "));
    }
    if total > sel.len() {
        out.push(format!("... {} more not shown", total - sel.len()));
    }
    out.push(format!(
        "{} shown, {nbytes} bytes",
        plural(sel.len() as u64, "block")
    ));
    Ok(lines(out))
}

pub fn walk(args: cli::WalkArgs) -> Result<String> {
    let mut ins = Inspect::open(&args.image, Need::Snapshot)?;
    let f = &args.filters;
    let (sel, total) = listed(&mut ins, f)?;
    let delta = if args.headers { ins.heap.header_size } else { 0 };
    let addrs: Vec<u64> = sel.iter().map(|&i| ins.heap.blocks[i].addr - delta).collect();
    if f.json {
        #[derive(Serialize)]
        struct Doc {
            format: u32,
            command: &'static str,
            kind: &'static str,
            total: usize,
            addrs: Vec<String>,
            problems: Vec<ProblemJson>,
        }
        return Ok(dump(&Doc {
            format: JSON_FORMAT,
            command: "walk",
            kind: if args.headers { "headers" } else { "blocks" },
            total,
            addrs: addrs.iter().map(|&a| hex(a)).collect(),
            problems: problems_json(&ins.heap.problems()),
        }));
    }
    let mut out = ins.warnings();
    out.extend(addrs.iter().map(|&a| hex(a)));
    if total > sel.len() {
        out.push(format!("... {} more not shown", total - sel.len()));
    }
    Ok(lines(out))
}

pub fn whatis(args: cli::AddrArgs) -> Result<String> {
    let (words, addr) = addr_words(&args)?;
    let mut ins = Inspect::open_words(&words, args.registers.as_deref(), args.heuristics, Need::Snapshot)?;
    let mut out = ins.warnings();
    let found = ins.heap.find(addr);
    // A block that held the address and was freed, when the process kept a free history.
    let history = history::read(&ins).ok();
    let freed = history.as_ref().and_then(|h| history::freed_block(h, addr));
    let freed_json = freed.map(|(e, newest)| history::event_json(&mut ins, e, newest));
    let freed_lines = |ins: &mut Inspect, intro: &str| -> Vec<String> {
        let Some((e, newest)) = freed else {
            return Vec::new();
        };
        let mut out = vec![format!(
            "{intro}{} bytes into the freed {}-byte block {}",
            addr - e.addr,
            e.size,
            hex(e.addr)
        )];
        out.extend(history::event_lines(ins, e, newest, ""));
        out
    };
    let Some((i, within)) = found else {
        let l = &ins.image.layout;
        let in_arena = (l.arena_start..l.arena_end).contains(&addr);
        if args.json {
            #[derive(Serialize)]
            struct Doc {
                format: u32,
                command: &'static str,
                addr: String,
                block: Option<()>,
                bootstrap_arena: bool,
                overwritten_header: Option<String>,
                freed: Option<history::EventJson>,
                problems: Vec<ProblemJson>,
            }
            return Ok(dump(&Doc {
                format: JSON_FORMAT,
                command: "whatis",
                addr: hex(addr),
                block: None,
                bootstrap_arena: in_arena,
                overwritten_header: behind_broken(&ins, addr).map(hex),
                freed: freed_json,
                problems: problems_json(&ins.heap.problems()),
            }));
        }
        if in_arena {
            out.push(format!(
                "{}: inside libdmem's bootstrap arena ({}-{}), whose blocks carry no header or stack",
                hex(addr),
                hex(l.arena_start),
                hex(l.arena_end)
            ));
            return Ok(lines(out));
        }
        let not_live = match behind_broken(&ins, addr) {
            Some(h) if addr < h + ins.heap.header_size => {
                format!("{}: inside the header {} that was overwritten (see above)", hex(addr), hex(h))
            }
            Some(h) => format!(
                "{}: not inside any live block; perhaps {} bytes into the block behind the overwritten header {}, \
                 whose size is not believed (see above)",
                hex(addr),
                addr - h - ins.heap.header_size,
                hex(h)
            ),
            None => format!("{}: not inside any live block", hex(addr)),
        };
        if freed.is_some() {
            out.extend(freed_lines(&mut ins, &format!("{not_live}; ")));
        } else {
            out.push(not_live);
        }
        return Ok(lines(out));
    };
    let b = ins.heap.blocks[i];
    let header = b.addr - ins.heap.header_size;
    if args.json {
        #[derive(Serialize)]
        struct Found {
            #[serde(flatten)]
            block: BlockJson,
            offset: i64,
            in_header: bool,
        }
        #[derive(Serialize)]
        struct Doc {
            format: u32,
            command: &'static str,
            addr: String,
            block: Found,
            freed: Option<history::EventJson>,
        }
        let block = block_json(&mut ins, &b);
        return Ok(dump(&Doc {
            format: JSON_FORMAT,
            command: "whatis",
            addr: hex(addr),
            block: Found {
                block,
                offset: addr as i64 - b.addr as i64,
                in_header: within == Within::Header,
            },
            freed: freed_json,
        }));
    }
    let head = match within {
        Within::Header => format!(
            "{}: inside libdmem's header of the {}-byte block {} (header {}, offset {})",
            hex(addr),
            b.size,
            hex(b.addr),
            hex(header),
            addr - header
        ),
        Within::Block => format!(
            "{}: {} bytes into the {}-byte block {} (header {})",
            hex(addr),
            addr - b.addr,
            b.size,
            hex(b.addr),
            hex(header)
        ),
    };
    out.extend([head, format!("allocated by thread {} at:", b.tid)]);
    out.extend(stack_lines(&mut ins, b.stack, "    "));
    out.extend(freed_lines(&mut ins, "before that it was "));
    Ok(lines(out))
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
    let l = &ins.image.layout;
    // The walk's own: where lists broke, sizes not believed, lists whose blocks do not add up
    // to their counters.
    let mut out: Vec<Problem> = heap.problems().into_iter().cloned().collect();
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
    out
}

pub fn verify(args: cli::PlainArgs) -> Result<String> {
    let mut ins = Inspect::open(&args.image, Need::Snapshot)?;
    let problems = verify_problems(&ins);
    let (nblocks, nbytes) = ins.heap.totals(&ins.heap.everything());
    let nlists = ins.heap.lists.len() as u64;
    if args.json {
        #[derive(Serialize)]
        struct Doc {
            format: u32,
            command: &'static str,
            ok: bool,
            lists: u64,
            blocks: u64,
            bytes: u64,
            problems: Vec<ProblemJson>,
        }
        return Ok(dump(&Doc {
            format: JSON_FORMAT,
            command: "verify",
            ok: problems.is_empty(),
            lists: nlists,
            blocks: nblocks,
            bytes: nbytes,
            problems: problems_json(&problems.iter().collect::<Vec<_>>()),
        }));
    }
    let mut out = heap::problem_lines(
        &problems.iter().collect::<Vec<_>>(),
        &ins.heap.blocks,
        &ins.heap.stacks,
        &mut ins.namer,
        "",
    );
    if problems.is_empty() {
        out.push(format!(
            "dmem verify: {}, {}, {nbytes} bytes: no problems found",
            plural(nlists, "list"),
            plural(nblocks, "block")
        ));
    } else {
        out.push(format!(
            "dmem verify: {} found ({}, {}, {nbytes} bytes walked)",
            plural(problems.len() as u64, "problem"),
            plural(nlists, "list"),
            plural(nblocks, "block")
        ));
    }
    Ok(lines(out))
}

pub fn stats(args: cli::PlainArgs) -> Result<String> {
    let mut ins = Inspect::open(&args.image, Need::Snapshot)?;
    let warnings = ins.warnings();
    let heap = &ins.heap;
    let l = &ins.image.layout;
    let c = heap.counters;
    let recording = l
        .flags(&*ins.image.mem)
        .ok()
        .map(|f| f & crate::source::heapwalk::FLAG_RECORDING != 0);
    let mut threads: HashMap<u32, (u64, u64)> = HashMap::new();
    for b in &heap.blocks {
        let e = threads.entry(b.tid).or_default();
        e.0 += 1;
        e.1 += b.size;
    }
    let mut threads: Vec<(u32, u64, u64)> = threads.into_iter().map(|(t, (n, z))| (t, n, z)).collect();
    threads.sort_by(|a, b| (b.2, a.0).cmp(&(a.2, b.0)));
    let walked = heap.totals(&heap.everything());
    let lists_used = heap.lists.iter().filter(|li| li.counters.allocs > 0).count();
    let memory = match ins.image.pid {
        Some(pid) => format!("process {pid}, read with process_vm_readv"),
        None => format!("the core file of {}", ins.image.name),
    };
    if args.json {
        #[derive(Serialize)]
        struct Counters {
            live_blocks: u64,
            live_bytes: u64,
            allocs: u64,
            frees: u64,
        }
        #[derive(Serialize)]
        struct Walked {
            blocks: u64,
            bytes: u64,
        }
        #[derive(Serialize)]
        struct Thread {
            tid: u32,
            blocks: u64,
            bytes: u64,
        }
        #[derive(Serialize)]
        struct Doc {
            format: u32,
            command: &'static str,
            layout: String,
            version: u64,
            recording: Option<bool>,
            counters: Counters,
            walked: Walked,
            lists_used: usize,
            memory: String,
            threads: Vec<Thread>,
            problems: Vec<ProblemJson>,
        }
        return Ok(dump(&Doc {
            format: JSON_FORMAT,
            command: "stats",
            layout: hex(l.addr),
            version: l.version,
            recording,
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
            lists_used,
            memory,
            threads: threads
                .iter()
                .map(|&(tid, blocks, bytes)| Thread { tid, blocks, bytes })
                .collect(),
            problems: problems_json(&heap.problems()),
        }));
    }
    let mut out = warnings;
    out.push(format!(
        "libdmem layout v{} at {}: {}-byte headers, {} frames, {} lists",
        l.version,
        hex(l.addr),
        l.header_size,
        l.nframes,
        l.nlists
    ));
    out.push(format!(
        "recording: {}",
        match recording {
            None => "unknown (flags unreadable)",
            Some(true) => "on",
            Some(false) => "off",
        }
    ));
    out.push(format!("live blocks: {}", c.live_blocks));
    out.push(format!("live bytes: {}", c.live_bytes));
    out.push(format!("allocations: {}", c.allocs));
    out.push(format!("frees: {}", c.frees));
    out.push(format!("lists in use: {lists_used} of {}", l.nlists));
    out.push(format!(
        "walked: {}, {} bytes",
        plural(walked.0, "block"),
        walked.1
    ));
    out.push(format!("memory: {memory}"));
    out.push("per thread (live blocks by allocating thread):".to_owned());
    out.push(format!("  {:>10} {:>12} {:>16}", "tid", "blocks", "bytes"));
    out.extend(
        threads
            .iter()
            .map(|(t, n, z)| format!("  {t:>10} {n:>12} {z:>16}")),
    );
    Ok(lines(out))
}
