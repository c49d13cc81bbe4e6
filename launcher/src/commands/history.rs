//! `dmem history`: the free history a process kept (`DMEM_OPTS=history=N`), newest first, and
//! what `whatis` says of an address inside a freed block.

use crate::cli;
use crate::model::answer::{self, render, Answer};
use crate::model::frames::JsonFrame;
use crate::model::text::hex;
use crate::source::history::{self, Absent, Event, History, Kind};
use crate::source::memory::ReadError;
use crate::steps::inspect::{Inspect, Need};
use crate::{failed, Result};
use serde::Serialize;

/// The history of the image, or the one line that says why there is none.
pub fn read(ins: &Inspect) -> Result<History> {
    history::read(
        &*ins.image.mem,
        ins.image.layout.history.as_ref(),
        ins.image.layout.nframes,
    )
    .map_err(|e| match e {
        Absent::Unsupported => failed(format!(
            "the libdmem.so of {} predates the free history",
            ins.image.name
        )),
        Absent::Off => failed(format!(
            "{} kept no free history: run it with DMEM_OPTS=history=N",
            ins.image.name
        )),
        Absent::Read(ReadError::Denied(e)) => {
            failed(format!("cannot read the history of {}: {e}", ins.image.name))
        }
        Absent::Read(ReadError::Unmapped) => failed(format!(
            "the history of {} lies in memory the image does not hold",
            ins.image.name
        )),
    })
}

#[derive(Serialize)]
pub struct EventJson {
    pub kind: &'static str,
    pub addr: String,
    pub size: u64,
    pub tid: u32,
    pub alloc_tid: u32,
    /// Nanoseconds before the newest event of the history.
    pub before_newest_ns: u64,
    pub free_stack: Vec<JsonFrame>,
    pub alloc_stack: Vec<JsonFrame>,
    /// The block's address as a number, for the text.
    #[serde(skip)]
    pub start: u64,
}

impl EventJson {
    /// The text of the event: a head line, then its stacks.
    pub fn lines(&self, indent: &str) -> Vec<String> {
        let mut out = Vec::new();
        let inner = format!("{indent}    ");
        let before = format!("{:.6} s", self.before_newest_ns as f64 / 1e9);
        if self.kind == "free" {
            out.push(format!(
                "{indent}freed by thread {}, {before} before the newest event, at:",
                self.tid
            ));
            out.extend(answer::stack_lines(&self.free_stack, &inner));
        } else {
            out.push(format!(
                "{indent}allocated by thread {}, {before} before the newest event",
                self.tid
            ));
        }
        out.push(format!("{indent}allocated by thread {} at:", self.alloc_tid));
        out.extend(answer::stack_lines(&self.alloc_stack, &inner));
        out
    }
}

pub fn event_json(ins: &mut Inspect, e: &Event, newest: u64) -> EventJson {
    EventJson {
        kind: match e.kind {
            Kind::Free => "free",
            Kind::Alloc => "alloc",
        },
        addr: hex(e.addr),
        size: e.size,
        tid: e.tid,
        alloc_tid: e.alloc_tid,
        before_newest_ns: newest.saturating_sub(e.time_ns),
        free_stack: ins.namer.json(&e.free_stack),
        alloc_stack: ins.namer.json(&e.alloc_stack),
        start: e.addr,
    }
}

/// The newest free of a block that held `addr`, with the newest event's time.
pub fn freed_block(h: &History, addr: u64) -> Option<(&Event, u64)> {
    let newest = h.events.first()?.time_ns;
    h.events
        .iter()
        .find(|e| e.kind == Kind::Free && e.holds(addr))
        .map(|e| (e, newest))
}

/// `history`: the events kept, newest first, those of one address when asked.
#[derive(Serialize)]
pub struct HistoryAnswer {
    rings: usize,
    capacity: u64,
    recorded: u64,
    kept: usize,
    matched: usize,
    events: Vec<EventJson>,
    /// The address asked about (`--addr`).
    #[serde(skip)]
    addr: Option<u64>,
}

impl Answer for HistoryAnswer {
    const COMMAND: &'static str = "history";

    fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "history: {} events kept of {} recorded, in {} rings of {}; newest first",
            self.kept, self.recorded, self.rings, self.capacity
        )];
        if let Some(a) = self.addr {
            out.push(format!(
                "{} of them in a block that held {}",
                self.matched,
                hex(a)
            ));
        }
        for e in &self.events {
            out.push(format!("{} {} ({} bytes)", e.kind, e.addr, e.size));
            out.extend(e.lines("    "));
        }
        if self.events.len() < self.matched {
            out.push(format!(
                "... {} more not shown (--limit 0 shows all)",
                self.matched - self.events.len()
            ));
        }
        out
    }
}

pub fn history(args: cli::HistoryArgs) -> Result<String> {
    let mut ins = Inspect::open(&args.image, Need::Snapshot)?;
    ins.needs_stacks("'dmem history' (and the free history it reads)")?;
    let h = read(&ins)?;
    let newest = h.events.first().map_or(0, |e| e.time_ns);
    let picked: Vec<&Event> = h
        .events
        .iter()
        .filter(|e| args.addr.is_none_or(|a| e.holds(a)))
        .collect();
    let shown = match args.limit.unwrap_or(20) as usize {
        0 => picked.len(),
        n => n.min(picked.len()),
    };
    let answer = HistoryAnswer {
        rings: h.rings,
        capacity: h.capacity,
        recorded: h.recorded,
        kept: h.events.len(),
        matched: picked.len(),
        events: picked[..shown]
            .iter()
            .map(|e| event_json(&mut ins, e, newest))
            .collect(),
        addr: args.addr,
    };
    Ok(render(&answer, args.json, || ins.warnings()))
}
