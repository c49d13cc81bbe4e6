//! The free history (`DMEM_OPTS=history=N`) read out of a core or a running process: every
//! ring the library mapped, each event believed only when its sequence number says it is whole
//! and where it was found (read before and after the rest, for a process that keeps writing).

use super::memory::{Memory, ReadError};
use crate::analysis::descriptor::{field, Fields};

/// Where the history is and how its events are laid out, from the descriptor.
#[derive(Clone, Debug)]
pub struct HistoryLayout {
    rings: u64,
    nrings: u64,
    ring_off_count: u64,
    ring_off_capacity: u64,
    ring_off_events: u64,
    event_size: u64,
    off_seq: u64,
    off_addr: u64,
    off_size: u64,
    off_time: u64,
    off_tid: u64,
    off_alloc_tid: u64,
    off_kind: u64,
    off_alloc_frames: u64,
    off_free_frames: u64,
    kind_free: u64,
    kind_alloc: u64,
}

impl HistoryLayout {
    /// The history's fields, or None for a library that predates them; an error names a field
    /// that is missing from a descriptor that has the others.
    pub fn read(f: &Fields) -> Result<Option<HistoryLayout>, String> {
        if f.get(field::HISTORY_RINGS).is_none() {
            return Ok(None);
        }
        let w = |name: &str| f.need(name);
        let h = HistoryLayout {
            rings: w(field::HISTORY_RINGS)?,
            nrings: w(field::HISTORY_NRINGS)?,
            ring_off_count: w(field::RING_OFF_COUNT)?,
            ring_off_capacity: w(field::RING_OFF_CAPACITY)?,
            ring_off_events: w(field::RING_OFF_EVENTS)?,
            event_size: w(field::EVENT_SIZE)?,
            off_seq: w(field::EVENT_OFF_SEQ)?,
            off_addr: w(field::EVENT_OFF_ADDR)?,
            off_size: w(field::EVENT_OFF_SIZE)?,
            off_time: w(field::EVENT_OFF_TIME)?,
            off_tid: w(field::EVENT_OFF_TID)?,
            off_alloc_tid: w(field::EVENT_OFF_ALLOC_TID)?,
            off_kind: w(field::EVENT_OFF_KIND)?,
            off_alloc_frames: w(field::EVENT_OFF_ALLOC_FRAMES)?,
            off_free_frames: w(field::EVENT_OFF_FREE_FRAMES)?,
            kind_free: w(field::EVENT_KIND_FREE)?,
            kind_alloc: w(field::EVENT_KIND_ALLOC)?,
        };
        // Every field of an event must lie inside it: an offset past its end would send the
        // reads of every event out of the buffer.
        let nframes = w(field::NFRAMES)?.min(64);
        let words = [
            (h.off_seq, 8),
            (h.off_addr, 8),
            (h.off_size, 8),
            (h.off_time, 8),
            (h.off_tid, 4),
            (h.off_alloc_tid, 4),
            (h.off_kind, 4),
            (h.off_alloc_frames, 8 * nframes),
            (h.off_free_frames, 8 * nframes),
        ];
        if let Some((off, _)) = words
            .iter()
            .find(|&&(off, width)| off.saturating_add(width) > h.event_size)
        {
            return Err(format!(
                "an event field at offset {off} lies past the end of its {}-byte events",
                h.event_size
            ));
        }
        if h.nrings > 4096 || !(16..=1 << 16).contains(&h.event_size) {
            return Err(format!(
                "a history of {} rings of {}-byte events",
                h.nrings, h.event_size
            ));
        }
        Ok(Some(h))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Free,
    Alloc,
}

/// One event of the history.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: Kind,
    /// The address the program was given and the size it asked for.
    pub addr: u64,
    pub size: u64,
    /// CLOCK_MONOTONIC, in nanoseconds.
    pub time_ns: u64,
    /// The thread that freed (or allocated), and the one that allocated.
    pub tid: u32,
    pub alloc_tid: u32,
    /// Innermost first, without trailing zeros.
    pub alloc_stack: Vec<u64>,
    pub free_stack: Vec<u64>,
}

impl Event {
    /// Whether `addr` lies in the block (a zero-sized block still owns its first byte).
    pub fn holds(&self, addr: u64) -> bool {
        (self.addr..self.addr.saturating_add(self.size.max(1))).contains(&addr)
    }
}

/// What the history of an image holds.
pub struct History {
    /// Newest first.
    pub events: Vec<Event>,
    /// Rings mapped, their capacity (events each), and events ever recorded in them.
    pub rings: usize,
    pub capacity: u64,
    pub recorded: u64,
}

/// Why there is no history to read.
#[derive(Debug)]
pub enum Absent {
    /// The library predates the history.
    Unsupported,
    /// No ring was ever mapped: the process ran without `history=N` (or never freed).
    Off,
    Read(ReadError),
}

/// The `[start, end)` of every ring the library mapped: libdmem's own memory, which a leak scan
/// leaves out (its events hold block addresses).
pub fn ring_ranges(mem: &dyn Memory, history: Option<&HistoryLayout>) -> Vec<(u64, u64)> {
    let Some(h) = history else {
        return Vec::new();
    };
    let mut ptrs = vec![0u8; (h.nrings * 8) as usize];
    if mem.read(h.rings, &mut ptrs).is_err() {
        return Vec::new();
    }
    ptrs.chunks_exact(8)
        .map(|p| u64::from_le_bytes(p.try_into().unwrap()))
        .filter(|&ring| ring != 0)
        .filter_map(|ring| {
            let cap = mem.u64_at(ring + h.ring_off_capacity).ok()?;
            (cap <= 1 << 24).then(|| (ring, ring + h.ring_off_events + cap * h.event_size))
        })
        .collect()
}

/// Events copied at once from a running process's ring: small enough that a busy process does
/// not lap the ring while one piece is copied.
const PIECE: u64 = 4096;

/// Reads every ring of the history the descriptor names (`Layout::history`), whose events hold
/// stacks of `nframes` frames.
pub fn read(mem: &dyn Memory, history: Option<&HistoryLayout>, nframes: u64) -> Result<History, Absent> {
    let Some(h) = history else {
        return Err(Absent::Unsupported);
    };
    let mut ptrs = vec![0u8; (h.nrings * 8) as usize];
    mem.read_fresh(h.rings, &mut ptrs).map_err(Absent::Read)?;
    let nframes = nframes as usize;
    let mut out = History {
        events: Vec::new(),
        rings: 0,
        capacity: 0,
        recorded: 0,
    };
    for p in ptrs.chunks_exact(8) {
        let ring = u64::from_le_bytes(p.try_into().unwrap());
        if ring == 0 {
            continue;
        }
        let count = mem.u64_fresh(ring + h.ring_off_count).map_err(Absent::Read)?;
        let cap = mem.u64_at(ring + h.ring_off_capacity).map_err(Absent::Read)?;
        // The buffer for the ring is sized from the ring's own word: only a ring that lies
        // whole in the readable memory around it is believed, so a wild capacity can never
        // ask for more memory than the image has.
        let bytes = cap.saturating_mul(h.event_size);
        let start = ring.saturating_add(h.ring_off_events);
        let fits = mem
            .extent(ring)
            .is_some_and(|(s, e)| s <= start && start.saturating_add(bytes) <= e);
        if cap == 0 || cap > 1 << 24 || !fits {
            continue;
        }
        out.rings += 1;
        out.capacity = out.capacity.max(cap);
        out.recorded += count;
        // Slots are copied newest first, a piece at a time, and the count read again after
        // each piece: a slot the events claimed since then can have reached is not believed. A
        // busy process laps a large ring during one long copy, which would leave no event
        // believable; the newest piece, copied first and quickly, stays so.
        let es = h.event_size as usize;
        let piece_bytes = (PIECE.min(cap) * h.event_size) as usize;
        let lo = count.saturating_sub(cap);
        let mut hi = count;
        let mut pieces = Vec::new();
        while hi > lo {
            let mut raw = vec![0u8; piece_bytes];
            let from = hi.saturating_sub(PIECE).max(lo);
            let n = (hi - from) as usize;
            // The piece's slots in ring order, in at most two runs (it may wrap).
            let (a, b) = (from % cap, (hi - 1) % cap);
            let runs = if a <= b {
                [(a, n), (0, 0)]
            } else {
                [(a, (cap - a) as usize), (0, (b + 1) as usize)]
            };
            let mut at = 0;
            for (slot, len) in runs.into_iter().filter(|r| r.1 > 0) {
                let addr = ring + h.ring_off_events + slot * h.event_size;
                mem.read_fresh(addr, &mut raw[at * es..(at + len) * es])
                    .map_err(Absent::Read)?;
                at += len;
            }
            let after = mem.u64_fresh(ring + h.ring_off_count).map_err(Absent::Read)?;
            let sound = after.saturating_sub(cap).max(from);
            pieces.push((from, sound..hi, raw));
            if sound > from {
                break;
            }
            hi = from;
        }
        let slots = pieces.iter().flat_map(|(from, ks, raw)| {
            ks.clone()
                .map(move |k| (k, &raw[((k - from) as usize) * es..][..es]))
        });
        out.events
            .extend(slots.filter_map(|(k, slot)| event(h, slot, k, nframes)));
    }
    if out.rings == 0 {
        return Err(Absent::Off);
    }
    out.events.sort_by_key(|e| std::cmp::Reverse(e.time_ns));
    Ok(out)
}

/// The event in the ring slot `ev` that the ring's `k`th event was written to, if the slot still
/// holds that one (its sequence word is `k + 1`) and it is an event of a kind this reader knows.
fn event(h: &HistoryLayout, ev: &[u8], k: u64, nframes: usize) -> Option<Event> {
    let u64_at = |off: u64| u64::from_le_bytes(ev[off as usize..off as usize + 8].try_into().unwrap());
    let u32_at = |off: u64| u32::from_le_bytes(ev[off as usize..off as usize + 4].try_into().unwrap());
    if u64_at(h.off_seq) != k + 1 {
        return None;
    }
    let kind = match u32_at(h.off_kind) as u64 {
        k if k == h.kind_free => Kind::Free,
        k if k == h.kind_alloc => Kind::Alloc,
        _ => return None,
    };
    let stack = |off: u64| {
        let mut s: Vec<u64> = (0..nframes as u64).map(|i| u64_at(off + 8 * i)).collect();
        while s.last() == Some(&0) {
            s.pop();
        }
        s
    };
    Some(Event {
        kind,
        addr: u64_at(h.off_addr),
        size: u64_at(h.off_size),
        time_ns: u64_at(h.off_time),
        tid: u32_at(h.off_tid),
        alloc_tid: u32_at(h.off_alloc_tid),
        alloc_stack: stack(h.off_alloc_frames),
        free_stack: stack(h.off_free_frames),
    })
}
