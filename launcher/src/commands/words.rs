//! `dmem words`: a histogram of the 8-byte words of blocks, or of one field of every object of a
//! type, a value that points into a loaded object named by its symbol.

use crate::analysis::reach::Class;
use crate::cli;
use crate::model::answer::{render, Answer};
use crate::model::histogram::histogram;
use crate::model::names::Names;
use crate::model::text::{hex, plural};
use crate::steps::blocks::select;
use crate::steps::fields::{all_words, field, typed};
use crate::steps::scan::{classes_of, describe, Pool};
use crate::{usage, Result};
use serde::Serialize;

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
