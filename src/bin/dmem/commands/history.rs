//! `dmem history`: the free history a process kept (`DMEM_OPTS=history=N`), newest first, and
//! what `whatis` says of an address inside a freed block.

use crate::cli;
use crate::commands::blocks::{lines, JSON_FORMAT};
use crate::commands::inspect::{Inspect, Need};
use crate::model::frames::JsonFrame;
use crate::model::text::{dump, hex};
use crate::source::history::{self, Absent, Event, History, Kind};
use crate::source::memory::ReadError;
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

/// Seconds from an event to the newest one, as the text shows it.
fn before(newest: u64, e: &Event) -> String {
    format!("{:.6} s", newest.saturating_sub(e.time_ns) as f64 / 1e9)
}

/// The text of one event: a head line, then its stacks.
pub fn event_lines(ins: &mut Inspect, e: &Event, newest: u64, indent: &str) -> Vec<String> {
    let mut out = Vec::new();
    let inner = format!("{indent}    ");
    match e.kind {
        Kind::Free => {
            out.push(format!(
                "{indent}freed by thread {}, {} before the newest event, at:",
                e.tid,
                before(newest, e)
            ));
            out.extend(ins.namer.lines(&e.free_stack, &inner));
        }
        Kind::Alloc => out.push(format!(
            "{indent}allocated by thread {}, {} before the newest event",
            e.tid,
            before(newest, e)
        )),
    }
    out.push(format!("{indent}allocated by thread {} at:", e.alloc_tid));
    out.extend(ins.namer.lines(&e.alloc_stack, &inner));
    out
}

#[derive(Serialize)]
pub struct EventJson {
    kind: &'static str,
    addr: String,
    size: u64,
    tid: u32,
    alloc_tid: u32,
    /// Nanoseconds before the newest event of the history.
    before_newest_ns: u64,
    free_stack: Vec<JsonFrame>,
    alloc_stack: Vec<JsonFrame>,
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

pub fn history(args: cli::HistoryArgs) -> Result<String> {
    let mut ins = Inspect::open(&args.image, Need::Snapshot)?;
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
    if args.json {
        #[derive(Serialize)]
        struct Doc {
            format: u32,
            command: &'static str,
            rings: usize,
            capacity: u64,
            recorded: u64,
            kept: usize,
            matched: usize,
            events: Vec<EventJson>,
        }
        let events = picked[..shown]
            .iter()
            .map(|e| event_json(&mut ins, e, newest))
            .collect();
        return Ok(dump(&Doc {
            format: JSON_FORMAT,
            command: "history",
            rings: h.rings,
            capacity: h.capacity,
            recorded: h.recorded,
            kept: h.events.len(),
            matched: picked.len(),
            events,
        }));
    }
    let mut out = ins.warnings();
    out.push(format!(
        "history: {} events kept of {} recorded, in {} rings of {}; newest first",
        h.events.len(),
        h.recorded,
        h.rings,
        h.capacity
    ));
    if let Some(a) = args.addr {
        out.push(format!(
            "{} of them in a block that held {}",
            picked.len(),
            hex(a)
        ));
    }
    for e in &picked[..shown] {
        let what = match e.kind {
            Kind::Free => "free",
            Kind::Alloc => "alloc",
        };
        out.push(format!("{what} {} ({} bytes)", hex(e.addr), e.size));
        out.extend(event_lines(&mut ins, e, newest, "    "));
    }
    if shown < picked.len() {
        out.push(format!(
            "... {} more not shown (--limit 0 shows all)",
            picked.len() - shown
        ));
    }
    Ok(lines(out))
}
