//! `dmem types`: live (or lost) blocks counted by C++ type, from the vtable pointer in their first
//! word, with the stacks most of each type came from.

use crate::cli;
use crate::model::answer::{self, render, Answer};
use crate::model::frames::JsonFrame;
use crate::model::names::Names;
use crate::model::text::{hex, plural};
use crate::steps::blocks::{groups, limited, problems_json, select, stack_json, ProblemJson};
use crate::steps::fields::typed;
use crate::steps::scan::{classes_of, describe, Pool};
use crate::Result;
use serde::Serialize;

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
