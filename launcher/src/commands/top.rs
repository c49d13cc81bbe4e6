//! `dmem top PID`: every few seconds, the stacks holding the most live bytes in a running
//! process, how much each grew since the first sample and how (see `growth`), with a sparkline
//! of its live bytes over the samples, read from the process's lists without stopping it.
//!
//! A stack is known by its return addresses, which stay put in one running process, so it keeps
//! its identity (and its series of samples) from one sample to the next.

use crate::cli::TopArgs;
use crate::model::frames::{self, JsonFrame, Namer};
use crate::model::growth::{self, Class};
use crate::model::heap::{self, StackGroup};
use crate::model::snapjson::{self, Sample, SampleStack, TemporaryStack};
use crate::model::symbolize::{Frame, Symbolizer};
use crate::model::text::{bytes_text, clock, plural, signed, sparkline, thousands};
use crate::source::heapwalk::{self, Walk, WalkOptions};
use crate::source::history::{self, Kind};
use crate::source::live::{self, LiveProcess};
use crate::source::mappings::Mappings;
use crate::source::stack_counts::{self, StackCounts};
use crate::sys::{self, INTERRUPTED};
use crate::Result;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One stack's history: bytes and blocks at every sample since the first (zero where the stack
/// had no live block).
struct History {
    bytes: Vec<u64>,
    blocks: Vec<u64>,
}

/// All that is known between samples.
struct Watch {
    /// Seconds since the first sample, per sample.
    times: Vec<f64>,
    stacks: HashMap<Box<[u64]>, History>,
    sym: Symbolizer,
    /// The time of the newest history event at the last sample (the target's clock), and the
    /// events recorded by then.
    events_seen: Option<(u64, u64)>,
    /// The library's per-stack counts at the last sample (`count-allocs`), and when.
    counted: Option<(f64, StackCounts)>,
    /// When the first sample was begun.
    started: Instant,
    /// The problems of the lists said so far.
    said: HashSet<String>,
}

/// Allocations between two samples: counted exactly by the library (`count-allocs`), or else
/// from the history (`history-allocs`).
struct Temporary {
    seconds: f64,
    /// From the library's counts.
    exact: bool,
    /// For the history: the events of the interval the rings still held, and all the process
    /// recorded in it: fewer kept than recorded makes every count a lower bound.
    kept: usize,
    recorded: u64,
    /// Per allocation stack, most allocations first.
    stacks: Vec<Interval>,
}

/// One stack's allocations in an interval.
struct Interval {
    pcs: Vec<u64>,
    allocs: u64,
    /// Counted: the temporary allocations (blocks freed by their thread before it allocated
    /// again, heaptrack's definition). From the history: the blocks allocated in the interval
    /// and freed again within it.
    temporary: u64,
    /// Counted only: the stack's blocks freed in the interval, whenever allocated.
    frees: Option<u64>,
}

/// The allocations of the interval since the last sample, from the library's counts: None at
/// the first sample (it only sets the start), and for a process that does not count.
fn counted(
    target: &LiveProcess,
    at: f64,
    since: &mut Option<(f64, StackCounts)>,
    stacks: &HashMap<Box<[u64]>, History>,
    limit: usize,
) -> Option<Temporary> {
    let now = stack_counts::read(&target.mem, &target.layout).ok()??;
    let (then, before) = since.replace((at, now.clone()))?;
    let mut out: Vec<Interval> = Vec::new();
    for (pcs, c) in &now.stacks {
        let b = before.stacks.get(pcs).copied().unwrap_or_default();
        let allocs = c.allocs.saturating_sub(b.allocs);
        if allocs == 0 {
            continue;
        }
        // Frees are allocations less the change in live blocks, which the last two samples read.
        let live = stacks.get(pcs).map_or((0, 0), |h| {
            let n = h.blocks.len();
            (
                h.blocks.get(n.wrapping_sub(2)).copied().unwrap_or(0),
                h.blocks[n - 1],
            )
        });
        out.push(Interval {
            pcs: pcs.to_vec(),
            allocs,
            temporary: c.temporary.saturating_sub(b.temporary),
            frees: Some((allocs + live.0).saturating_sub(live.1)),
        });
    }
    out.sort_by(|a, b| b.allocs.cmp(&a.allocs).then_with(|| a.pcs.cmp(&b.pcs)));
    out.truncate(limit);
    Some(Temporary {
        seconds: at - then,
        exact: true,
        kept: 0,
        recorded: 0,
        stacks: out,
    })
}

/// What the history says of the interval since the last sample; None at the first sample (it
/// only sets the start), and for a process whose history holds no allocations.
fn temporary(target: &LiveProcess, since: &mut Option<(u64, u64)>, limit: usize) -> Option<Temporary> {
    target.layout.history.as_ref()?;
    let h = history::read(&target.mem, target.layout.history.as_ref(), target.layout.nframes).ok()?;
    let newest = h.events.first()?.time_ns;
    let (start, recorded_before) = since.replace((newest, h.recorded))?;
    let mut window: Vec<_> = h.events.iter().filter(|e| e.time_ns > start).collect();
    if !window.iter().any(|e| e.kind == Kind::Alloc) {
        return None;
    }
    window.sort_by_key(|e| e.time_ns);
    let mut live: HashMap<u64, usize> = HashMap::new();
    let mut stacks: Vec<Interval> = Vec::new();
    let mut index: HashMap<&[u64], usize> = HashMap::new();
    for e in &window {
        match e.kind {
            Kind::Alloc => {
                let i = *index.entry(&e.alloc_stack).or_insert_with(|| {
                    stacks.push(Interval {
                        pcs: e.alloc_stack.clone(),
                        allocs: 0,
                        temporary: 0,
                        frees: None,
                    });
                    stacks.len() - 1
                });
                stacks[i].allocs += 1;
                live.insert(e.addr, i);
            }
            Kind::Free => {
                if let Some(i) = live.remove(&e.addr) {
                    stacks[i].temporary += 1;
                }
            }
        }
    }
    stacks.sort_by(|a, b| b.allocs.cmp(&a.allocs).then_with(|| a.pcs.cmp(&b.pcs)));
    stacks.truncate(limit);
    Some(Temporary {
        seconds: (newest - start) as f64 / 1e9,
        exact: false,
        kept: window.len(),
        recorded: h.recorded.saturating_sub(recorded_before),
        stacks,
    })
}

/// Samples a sparkline shows at most: the newest.
const SPARK: usize = 24;

/// What one stack looks like in a sample.
struct Row {
    /// Its live bytes over the last `SPARK` samples, drawn.
    spark: String,
    pcs: Box<[u64]>,
    bytes: u64,
    blocks: u64,
    delta_bytes: i64,
    rate_per_min: i64,
    class: Class,
}

/// How one round of `top` ended.
enum Round {
    Shown,
    /// The reader of the output went away (`| head`).
    ReaderGone,
    ProcessGone,
}

pub fn main(args: TopArgs) -> Result<i32> {
    let target = live::open(args.pid)?;
    sys::catch_interrupt();
    let mut watch = Watch {
        times: Vec::new(),
        stacks: HashMap::new(),
        sym: Symbolizer::new(target.maps.clone()),
        events_seen: None,
        counted: None,
        started: Instant::now(),
        said: HashSet::new(),
    };
    let interval = Duration::from_secs_f64(args.interval);
    let ended = loop {
        let t0 = Instant::now();
        match watch.round(&target, &args, t0)? {
            Round::ReaderGone => return Ok(0),
            Round::ProcessGone => break true,
            Round::Shown => {}
        }
        if args.count.is_some_and(|c| watch.times.len() as u64 >= c) {
            break false;
        }
        let next = t0 + interval;
        while Instant::now() < next && !INTERRUPTED.load(Ordering::SeqCst) {
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(50)));
        }
        if INTERRUPTED.load(Ordering::SeqCst) {
            break false;
        }
        if !live::alive(target.pid) {
            break true;
        }
    };
    if ended {
        eprintln!("dmem top: process {} ({}) ended", target.pid, target.name);
    }
    if INTERRUPTED.load(Ordering::SeqCst) || ended {
        watch.summary(&target, args.limit, args.json);
    }
    Ok(0)
}

/// The live blocks of the process, None when it is gone.
fn read(target: &LiveProcess) -> Result<Option<Walk>> {
    match heapwalk::walk(&target.mem, &target.layout, WalkOptions::default()) {
        Ok(w) => Ok(Some(w)),
        // ESRCH: the process is exiting and its memory is gone, though /proc may not show it
        // as a zombie yet.
        Err(heapwalk::Denied(e)) if e.raw_os_error() == Some(libc::ESRCH) || !live::alive(target.pid) => {
            Ok(None)
        }
        Err(heapwalk::Denied(e)) => Err(live::refused(target.pid, &e)),
    }
}

/// The first line of a sample in text.
fn header(when: SystemTime, target: &LiveProcess, walk: &Walk, nstacks: usize, read_ms: f64) -> String {
    format!(
        "{} pid {} ({}): {} in {} blocks on {} stacks; read in {read_ms:.1} ms; {}",
        clock(when),
        target.pid,
        target.name,
        bytes_text(walk.live_bytes()),
        thousands(walk.blocks.len() as u64),
        thousands(nstacks as u64),
        match (walk.moving(), walk.problems().len()) {
            (0, 0) => "every list read whole".to_owned(),
            (n, 0) => format!("{n} of {} lists changed too fast to read whole", walk.lists.len()),
            (0, k) => format!("{} in the lists", plural(k as u64, "problem")),
            (n, k) => format!(
                "{n} of {} lists changed too fast to read whole, {} in the lists",
                walk.lists.len(),
                plural(k as u64, "problem")
            ),
        }
    )
}

impl Watch {
    /// One sample: read, remember and show.
    fn round(&mut self, target: &LiveProcess, args: &TopArgs, t0: Instant) -> Result<Round> {
        let when = SystemTime::now();
        let Some(walk) = read(target)? else {
            return Ok(Round::ProcessGone);
        };
        let groups = heap::group(&walk.blocks, &walk.stacks);
        self.say_problems(target, &walk);
        let read = t0.elapsed();
        // The blocks were read over the whole read: date them at its middle.
        let at = t0.duration_since(self.started).as_secs_f64() + read.as_secs_f64() / 2.0;
        self.add(&walk, &groups, at);
        if let Ok(maps) = Mappings::of_process(target.pid) {
            self.sym.set_mappings(maps);
        }
        let rows = self.rows(args.limit, |h| *h.bytes.last().unwrap_or(&0));
        // The library's counts where the process keeps them; the history's lower bounds else.
        let temps = counted(target, at, &mut self.counted, &self.stacks, args.limit)
            .or_else(|| temporary(target, &mut self.events_seen, args.limit));
        let read_ms = (read.as_secs_f64() * 1e6).round() / 1e3;
        let out = std::io::stdout();
        let mut o = out.lock();
        let written = if args.json {
            let s = self.json_sample(when, &walk, read_ms, &rows, &temps);
            snapjson::print(&s, &mut o)
        } else {
            writeln!(o, "{}", header(when, target, &walk, groups.len(), read_ms))
                .and_then(|_| self.print_rows(&mut o, &rows))
                .and_then(|_| match &temps {
                    Some(t) => self.print_temporary(&mut o, t),
                    None => Ok(()),
                })
        };
        if written.and_then(|_| o.flush()).is_err() {
            return Ok(Round::ReaderGone);
        }
        Ok(Round::Shown)
    }

    /// Each problem of the lists said once, when first met, the way every command says it.
    fn say_problems(&mut self, target: &LiveProcess, walk: &Walk) {
        let problems: Vec<_> = walk
            .problems()
            .into_iter()
            .filter(|p| self.said.insert(p.text.clone()))
            .collect();
        if !problems.is_empty() {
            let mut namer = Namer::new(Symbolizer::new(target.maps.clone()));
            for line in heap::warnings(&problems, &walk.blocks, &walk.stacks, &mut namer) {
                eprintln!("dmem top: {line}");
            }
        }
    }

    /// A sample's stacks added to their histories, taken `at` seconds after the first.
    fn add(&mut self, walk: &Walk, groups: &[StackGroup], at: f64) {
        let sample = self.times.len();
        self.times.push(at);
        for g in groups {
            let h = self
                .stacks
                .entry(walk.stacks[g.stack as usize].clone())
                .or_insert_with(|| History {
                    bytes: vec![0; sample],
                    blocks: vec![0; sample],
                });
            h.bytes.push(g.bytes);
            h.blocks.push(g.blocks);
        }
        for h in self.stacks.values_mut() {
            // Stacks with no live block in this sample.
            h.bytes.resize(sample + 1, 0);
            h.blocks.resize(sample + 1, 0);
        }
    }

    /// A sample as `top --json` writes it.
    fn json_sample(
        &mut self,
        when: SystemTime,
        walk: &Walk,
        read_ms: f64,
        rows: &[Row],
        temps: &Option<Temporary>,
    ) -> Sample {
        Sample {
            time: (when.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64() * 1e3).round() / 1e3,
            base_time: None,
            source: String::new(),
            live_bytes: walk.live_bytes() as i64,
            live_blocks: walk.blocks.len() as i64,
            delta_bytes: None,
            delta_blocks: None,
            read_ms,
            inconsistent_lists: walk.moving(),
            unchanged_stacks: None,
            objects: Vec::new(),
            stacks: rows.iter().map(|r| self.json_stack(r)).collect(),
            temporary: temps.iter().flat_map(|t| self.json_temporary(t)).collect(),
        }
    }
}

impl Watch {
    /// The `limit` stacks with the greatest `key`, as rows.
    fn rows(&self, limit: usize, key: impl Fn(&History) -> u64) -> Vec<Row> {
        let mut all: Vec<(&Box<[u64]>, &History)> = self.stacks.iter().collect();
        all.sort_by(|a, b| key(b.1).cmp(&key(a.1)).then_with(|| a.0.cmp(b.0)));
        let elapsed_min = match (self.times.first(), self.times.last()) {
            (Some(first), Some(last)) => (last - first) / 60.0,
            _ => 0.0,
        };
        all.into_iter()
            .filter(|(_, h)| key(h) > 0)
            .take(limit)
            .map(|(pcs, h)| {
                let (first, last) = (h.bytes[0], *h.bytes.last().unwrap_or(&0));
                let delta = last as i64 - first as i64;
                let series: Vec<(f64, u64)> =
                    self.times.iter().copied().zip(h.bytes.iter().copied()).collect();
                Row {
                    spark: sparkline(&h.bytes[h.bytes.len().saturating_sub(SPARK)..]),
                    pcs: pcs.clone(),
                    bytes: last,
                    blocks: *h.blocks.last().unwrap_or(&0),
                    delta_bytes: delta,
                    rate_per_min: if elapsed_min > 0.0 {
                        (delta as f64 / elapsed_min).round() as i64
                    } else {
                        0
                    },
                    class: growth::classify(&series),
                }
            })
            .collect()
    }

    fn frames(&mut self, pcs: &[u64]) -> Vec<Frame> {
        pcs.iter()
            .flat_map(|&pc| self.sym.frames(pc).iter().cloned().collect::<Vec<_>>())
            .collect()
    }

    fn json_frames(&mut self, pcs: &[u64]) -> Vec<JsonFrame> {
        self.frames(pcs).iter().map(frames::json).collect()
    }

    fn json_temporary(&mut self, t: &Temporary) -> Vec<TemporaryStack> {
        let per_s = |n: u64| (n as f64 / t.seconds.max(1e-9) * 10.0).round() / 10.0;
        t.stacks
            .iter()
            .map(|s| TemporaryStack {
                allocs: s.allocs,
                allocs_per_s: per_s(s.allocs),
                freed_in_interval: (!t.exact).then_some(s.temporary),
                temporary: t.exact.then_some(s.temporary),
                temporary_per_s: t.exact.then(|| per_s(s.temporary)),
                frees: s.frees,
                frames: self.json_frames(&s.pcs),
            })
            .collect()
    }

    fn print_temporary(&mut self, o: &mut impl Write, t: &Temporary) -> std::io::Result<()> {
        let per_s = |n: u64| thousands((n as f64 / t.seconds.max(1e-9)).round() as u64);
        let share = |part: u64, of: u64| format!("({:>3}%)", part * 100 / of.max(1));
        if t.exact {
            writeln!(
                o,
                "allocations in the last {:.1} s, counted by the library (count-allocs):",
                t.seconds
            )?;
            writeln!(
                o,
                "{:>14} {:>14} {:>21} {:>14} {:>14}",
                "allocs", "per second", "temporary", "per second", "frees"
            )?;
        } else {
            writeln!(
                o,
                "allocations in the last {:.1} s, from the history (history-allocs){}:",
                t.seconds,
                if (t.kept as u64) < t.recorded {
                    format!(
                        "; the rings kept {} of the {} events, so these are lower bounds",
                        thousands(t.kept as u64),
                        thousands(t.recorded)
                    )
                } else {
                    String::new()
                }
            )?;
            writeln!(
                o,
                "{:>14} {:>14} {:>22}",
                "allocs", "per second", "freed within it"
            )?;
        }
        for s in &t.stacks {
            if t.exact {
                writeln!(
                    o,
                    "{:>14} {:>14} {:>14} {} {:>14} {:>14}",
                    thousands(s.allocs),
                    per_s(s.allocs),
                    thousands(s.temporary),
                    share(s.temporary, s.allocs),
                    per_s(s.temporary),
                    thousands(s.frees.unwrap_or(0))
                )?;
            } else {
                writeln!(
                    o,
                    "{:>14} {:>14} {:>14} {}",
                    thousands(s.allocs),
                    per_s(s.allocs),
                    thousands(s.temporary),
                    share(s.temporary, s.allocs)
                )?;
            }
            for f in self.frames(&s.pcs) {
                writeln!(o, "        {}", frames::text(&f))?;
            }
        }
        writeln!(o)
    }

    fn json_stack(&mut self, r: &Row) -> SampleStack {
        let frames = self.json_frames(&r.pcs);
        SampleStack {
            delta_bytes: Some(r.delta_bytes),
            rate_bytes_per_min: Some(r.rate_per_min),
            class: Some(r.class.name().to_owned()),
            ..SampleStack::new(r.bytes as i64, r.blocks as i64, frames)
        }
    }

    fn print_rows(&mut self, o: &mut impl Write, rows: &[Row]) -> std::io::Result<()> {
        if rows.is_empty() {
            return writeln!(o);
        }
        writeln!(
            o,
            "{:>14} {:>10} {:>14} {:>14}  {:<12}  live bytes per sample",
            "bytes", "blocks", "change", "per minute", "class"
        )?;
        for r in rows {
            let line = format!(
                "{:>14} {:>10} {:>14} {:>14}  {:<12}  {}",
                thousands(r.bytes),
                thousands(r.blocks),
                signed(r.delta_bytes),
                signed(r.rate_per_min),
                r.class.name(),
                r.spark
            );
            writeln!(o, "{}", line.trim_end())?;
            for f in self.frames(&r.pcs) {
                writeln!(o, "        {}", frames::text(&f))?;
            }
        }
        writeln!(o)
    }

    /// After Ctrl-C or the end of the process: what grew most over the whole watch.
    fn summary(&mut self, target: &LiveProcess, limit: usize, json: bool) {
        let n = self.times.len();
        let span = self.times.last().copied().unwrap_or(0.0);
        let growth = |h: &History| {
            let d = *h.bytes.last().unwrap_or(&0) as i64 - h.bytes[0] as i64;
            d.max(0) as u64
        };
        let rows = self.rows(limit, growth);
        // In JSON mode stdout holds only samples; the summary goes to stderr for the person.
        let mut o: Box<dyn Write> = if json {
            Box::new(std::io::stderr())
        } else {
            Box::new(std::io::stdout())
        };
        let _ = writeln!(
            o,
            "summary of pid {} ({}): {n} samples over {span:.1} s; {}",
            target.pid,
            target.name,
            if rows.is_empty() {
                "no stack grew".to_owned()
            } else {
                format!("the stacks that grew most ({})", rows.len())
            }
        );
        let _ = self.print_rows(&mut o, &rows);
    }
}
