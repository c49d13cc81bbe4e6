//! What every analysis command does with the blocks and stacks it shows: selects them by the
//! filters, groups and limits them, and writes them as lines, JSON and folded stacks. The
//! commands (heap.rs, leaks.rs, history.rs) use it; it uses none of them.

use crate::cli::{self, Filters};
use crate::model::frames::{Folded, JsonFrame};
use crate::model::heap::{self, StackGroup};
use crate::model::text::{hex, plural};
use crate::source::heapwalk::{Block, Problem};
use crate::steps::inspect::Inspect;
use crate::{failed, usage, Result};
use serde::Serialize;
use std::collections::HashMap;

/// The blocks (by index, in address order) of `sel` (default: all) that pass the filters. A
/// regular expression is tried once per distinct stack.
pub fn select(ins: &mut Inspect, f: &Filters, sel: Option<Vec<usize>>) -> Result<Vec<usize>> {
    let re = match &f.pattern {
        Some(p) => {
            Some(regex_lite::Regex::new(p).map_err(|e| usage(format!("bad --match regex '{p}': {e}")))?)
        }
        None => None,
    };
    let mut sel = sel.unwrap_or_else(|| ins.heap.everything());
    let blocks = &ins.heap.blocks;
    if let Some(min) = f.min_size {
        sel.retain(|&i| blocks[i].size >= min);
    }
    if let Some(t) = f.thread {
        sel.retain(|&i| blocks[i].tid as u64 == t);
    }
    if let Some(re) = re {
        let mut seen: HashMap<u32, bool> = HashMap::new();
        let heap = &ins.heap;
        let namer = &mut ins.namer;
        sel.retain(|&i| {
            let b = &heap.blocks[i];
            *seen
                .entry(b.stack)
                .or_insert_with(|| namer.matches(&heap.stacks[b.stack as usize], &re))
        });
    }
    Ok(sel)
}

/// The groups of a selection.
/// The `total` of a JSON listing by stack (summary, leaks): the stacks and their blocks and
/// bytes.
#[derive(Serialize)]
pub struct StacksTotal {
    pub stacks: usize,
    pub blocks: u64,
    pub bytes: u64,
}

impl StacksTotal {
    pub fn of(groups: &[StackGroup]) -> StacksTotal {
        StacksTotal {
            stacks: groups.len(),
            blocks: groups.iter().map(|g| g.blocks).sum(),
            bytes: groups.iter().map(|g| g.bytes).sum(),
        }
    }
}

pub fn groups(ins: &Inspect, sel: &[usize]) -> Vec<StackGroup> {
    heap::group(sel.iter().map(|&i| &ins.heap.blocks[i]), &ins.heap.stacks)
}

/// The stacks `--limit` lets through: 20 unless given, all for 0.
pub fn limited<T>(rows: &[T], limit: Option<u64>) -> &[T] {
    let n = limit.unwrap_or(20) as usize;
    if n == 0 || n >= rows.len() {
        rows
    } else {
        &rows[..n]
    }
}

/// The `... N more stacks not shown` line, or None.
pub fn rest_line(groups: &[StackGroup], shown: usize, bare: bool) -> Option<String> {
    let rest = &groups[shown..];
    if rest.is_empty() {
        return None;
    }
    let word = crate::model::bare::group_word(bare);
    Some(format!(
        "... {} more {word}{} ({} bytes in {}) not shown; --limit 0 shows all",
        rest.len(),
        if rest.len() == 1 { "" } else { "s" },
        rest.iter().map(|g| g.bytes).sum::<u64>(),
        plural(rest.iter().map(|g| g.blocks).sum(), "block")
    ))
}

#[derive(Serialize)]
pub struct ProblemJson {
    list: Option<u64>,
    addr: Option<String>,
    problem: String,
}

pub fn problems_json(problems: &[&Problem]) -> Vec<ProblemJson> {
    problems
        .iter()
        .map(|p| ProblemJson {
            list: p.list,
            addr: p.addr.map(hex),
            problem: p.text.clone(),
        })
        .collect()
}

#[derive(Serialize)]
pub struct BlockJson {
    pub addr: String,
    pub header: String,
    pub size: u64,
    pub tid: u32,
    pub list: u16,
    pub align: Option<u64>,
    pub stack: Vec<JsonFrame>,
    /// The block's address as a number, for the text.
    #[serde(skip)]
    pub start: u64,
    /// Read through glibc's heap: no thread or stack, its group (type and size) instead.
    #[serde(skip)]
    pub bare: bool,
}

impl BlockJson {
    /// Where the text says what allocated the block: its stack, or its group.
    pub fn alloc_at(&self) -> &'static str {
        if self.bare {
            "in the group"
        } else {
            "allocated at"
        }
    }

    /// The line before the block's stack (or group).
    pub fn alloc_line(&self) -> String {
        if self.bare {
            "in the group (who allocated it is not known: the program ran without libdmem):".into()
        } else {
            format!("allocated by thread {} at:", self.tid)
        }
    }

    /// What the text calls the bytes in front of the block: libdmem's header or glibc's chunk.
    pub fn header_word(&self) -> &'static str {
        if self.bare {
            "chunk"
        } else {
            "header"
        }
    }
}

pub fn block_json(ins: &mut Inspect, b: &Block) -> BlockJson {
    let bare = ins.is_bare();
    let stack = if bare {
        stack_json(ins, b.stack)
    } else {
        let pcs = ins.heap.stacks[b.stack as usize].to_vec();
        ins.namer.json(&pcs)
    };
    BlockJson {
        addr: hex(b.addr),
        header: hex(b.addr - ins.heap.header_size),
        size: b.size,
        tid: b.tid,
        list: b.list,
        align: (b.align_log2 > 0).then(|| 1u64 << b.align_log2),
        stack,
        start: b.addr,
        bare,
    }
}

pub fn stack_json(ins: &mut Inspect, stack: u32) -> Vec<JsonFrame> {
    if let Some(label) = ins.heap.labels.get(stack as usize) {
        return vec![JsonFrame {
            pc: "0x0".into(),
            function: None,
            offset: None,
            file: None,
            line: None,
            object: None,
            inlined: false,
            text: label.clone(),
        }];
    }
    let pcs = ins.heap.stacks[stack as usize].to_vec();
    ins.namer.json(&pcs)
}

/// The image's words and the address after them, of `whatis` and `why`.
pub fn addr_words(args: &cli::AddrArgs) -> Result<(Vec<std::ffi::OsString>, u64)> {
    let (last, image) = match args.words.split_last() {
        Some((last, image)) if !image.is_empty() => (last, image),
        _ => {
            return Err(usage(
                "needs an image and an address: PROG CORE ADDR, CORE ADDR or PID ADDR",
            ))
        }
    };
    let text = last.to_string_lossy();
    let addr = cli::parse_number(&text).map_err(|e| usage(format!("the address: {e}")))?;
    Ok((image.to_vec(), addr))
}

/// `outer;...;inner BYTES` lines of stack groups, sorted by stack; and how many stacks and
/// bytes they hold.
pub fn fold(ins: &mut Inspect, groups: &[StackGroup]) -> (String, usize, u64) {
    let mut folded = Folded::default();
    for g in groups {
        let pcs = ins.heap.stacks[g.stack as usize].to_vec();
        folded.add(ins.namer.folded(&pcs), g.bytes as i64);
    }
    let (stacks, bytes) = folded.counts();
    (folded.text(), stacks, bytes as u64)
}

/// Writes folded stacks where asked: to standard output, or to a file with a line saying so.
pub fn write_folded(
    output: Option<&std::path::Path>,
    text: String,
    nstacks: usize,
    nbytes: u64,
) -> Result<String> {
    match output {
        None => Ok(text),
        Some(path) => {
            std::fs::write(path, text).map_err(|e| {
                failed(format!(
                    "cannot write {}: {e}",
                    crate::analysis::escape::show(path)
                ))
            })?;
            eprintln!(
                "dmem: wrote {} ({nbytes} bytes) to {}",
                plural(nstacks as u64, "stack"),
                crate::analysis::escape::show(path)
            );
            Ok(String::new())
        }
    }
}
