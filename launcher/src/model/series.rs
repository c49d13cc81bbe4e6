//! Memory over time: the live bytes of every allocation stack across a series of snapshots (the
//! profiles `dmem record` writes, or any snapshots with their times), for `dmem timeline` and
//! `dmem record --timeline`, and the series as JSON.
//!
//! A stack is known from snapshot to snapshot by `Snapshot::stack_key` (each frame as an offset
//! in its object), so the profiles of one process line up, and so do those of several runs of
//! one program. A stack is kept sparsely, only where it held memory: a long recording of a
//! program with many short-lived stacks then costs what the stacks held, not stacks times
//! snapshots.

use crate::model::frames::JsonFrame;
use crate::model::snapjson;
use crate::model::snapshot::{self, Snapshot, Stack};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// What ends the name of a profile `dmem record --at-peak` wrote at a new peak (its kind
/// "peak.").
pub const PEAK_SUFFIX: &str = ".peak.pb.gz";

/// Whether `path` names a profile written at a new peak.
pub fn is_peak(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().ends_with(PEAK_SUFFIX))
}

/// One snapshot of the series.
pub struct Point {
    /// When it was taken, nanoseconds since the epoch.
    pub time_nanos: i64,
    /// Written by `dmem record --at-peak` at a new peak of live bytes.
    pub peak: bool,
    /// Where it came from (a file name), for people.
    pub name: String,
    pub live_bytes: i64,
    pub live_blocks: i64,
}

/// One allocation stack over the series.
pub struct Track {
    /// The frames of the program's own code, innermost first, as `function (file:line)`: the
    /// first is what the legend calls the stack, the next ones tell apart stacks whose first is
    /// the same (an allocation wrapper's).
    pub names: Vec<String>,
    /// Every frame, one line each, as `dmem top` prints them.
    pub lines: Vec<String>,
    pub frames: Vec<JsonFrame>,
    /// Point index, bytes and blocks, in point order, where the stack held any.
    values: Vec<(usize, i64, i64)>,
    /// Where the process counted its allocations (`count-allocs`): at the earliest and the
    /// latest point that counted them, the point, its time, and the blocks allocated and the
    /// temporary allocations ever; all a rate over the recording needs, whatever its length.
    allocated: Option<[Counted; 2]>,
    /// Its most bytes, and the first point where it held them.
    pub peak: (i64, usize),
}

impl Track {
    /// Bytes and blocks at every one of `n` points, zero where it held nothing.
    fn dense(&self, n: usize) -> (Vec<i64>, Vec<i64>) {
        let (mut bytes, mut blocks) = (vec![0; n], vec![0; n]);
        for &(i, b, k) in &self.values {
            bytes[i] = b;
            blocks[i] = k;
        }
        (bytes, blocks)
    }

    /// Allocations and temporary allocations between the first and the last point that
    /// counted them, and per second: exact, since the counts are the process's own.
    pub fn allocations(&self, seconds: &[f64]) -> Option<Rates> {
        let [first, last] = self.allocated?;
        let span = seconds[last.point] - seconds[first.point];
        let (allocs, temporary) = (last.blocks - first.blocks, last.temporary - first.temporary);
        (span > 0.0).then(|| Rates {
            allocs,
            temporary,
            allocs_per_s: allocs as f64 / span,
            temporary_per_s: temporary as f64 / span,
        })
    }

    /// Notes the counts at a point; a stack listed twice in one snapshot is summed.
    fn count(&mut self, now: Counted) {
        let Some(ends) = &mut self.allocated else {
            self.allocated = Some([now; 2]);
            return;
        };
        let mut summed = false;
        for end in ends.iter_mut().filter(|e| e.point == now.point) {
            end.blocks += now.blocks;
            end.temporary += now.temporary;
            summed = true;
        }
        if summed {
            return;
        }
        if now.time < ends[0].time {
            ends[0] = now;
        }
        if now.time > ends[1].time {
            ends[1] = now;
        }
    }
}

/// A stack's counts at one point.
#[derive(Clone, Copy, Debug)]
struct Counted {
    point: usize,
    time: i64,
    blocks: i64,
    temporary: i64,
}

/// What a stack allocated over a recording, from the process's counts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    pub allocs: i64,
    pub temporary: i64,
    pub allocs_per_s: f64,
    pub temporary_per_s: f64,
}

/// Snapshots in the order they were added, and every stack over them.
#[derive(Default)]
pub struct Series {
    pub points: Vec<Point>,
    /// What the first snapshot was taken from ("pid 4242 (server)").
    pub source: String,
    pub tracks: Vec<Track>,
    index: HashMap<Vec<(String, u64)>, usize>,
}

impl Series {
    /// Adds a snapshot as the next point; callers add them in time order.
    pub fn add(&mut self, snap: &Snapshot, name: String, peak: bool) {
        let at = self.points.len();
        if at == 0 {
            self.source = snap.source.clone();
        }
        self.points.push(Point {
            time_nanos: snap.time_nanos,
            peak,
            name,
            live_bytes: snap.live_bytes(),
            live_blocks: snap.live_blocks(),
        });
        for s in &snap.stacks {
            let key = snap.stack_key(s);
            let holds = s.bytes != 0 || s.blocks != 0;
            if !holds && s.allocated.is_none() {
                continue;
            }
            let k = match self.index.get(&key) {
                Some(&k) => k,
                None => {
                    self.tracks.push(Track {
                        names: names(snap, s),
                        lines: snapshot::describe_frames(&snap.objects, &s.frames),
                        frames: snapjson::frames(&snap.objects, &s.frames),
                        values: Vec::new(),
                        allocated: None,
                        peak: (0, at),
                    });
                    self.index.insert(key, self.tracks.len() - 1);
                    self.tracks.len() - 1
                }
            };
            let t = &mut self.tracks[k];
            // A profile may list one stack twice (two runs' addresses that fold into one key).
            if let Some(a) = s.allocated {
                t.count(Counted {
                    point: at,
                    time: snap.time_nanos,
                    blocks: a.blocks,
                    temporary: a.temporary,
                });
            }
            if !holds {
                continue;
            }
            match t.values.last_mut() {
                Some(last) if last.0 == at => {
                    last.1 += s.bytes;
                    last.2 += s.blocks;
                }
                _ => t.values.push((at, s.bytes, s.blocks)),
            }
            let held = t.values.last().map_or(0, |v| v.1);
            if held > t.peak.0 {
                t.peak = (held, at);
            }
        }
    }

    /// Puts the points in time order (of equal times, by name), for snapshots added as they
    /// were read rather than as they were taken.
    pub fn sort_by_time(&mut self) {
        let mut order: Vec<usize> = (0..self.points.len()).collect();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&self.points[a], &self.points[b]);
            (pa.time_nanos, &pa.name).cmp(&(pb.time_nanos, &pb.name))
        });
        let mut new_index = vec![0; order.len()];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new;
        }
        let mut points: Vec<Option<Point>> = std::mem::take(&mut self.points).into_iter().map(Some).collect();
        self.points = order.iter().filter_map(|&old| points[old].take()).collect();
        for t in &mut self.tracks {
            for v in &mut t.values {
                v.0 = new_index[v.0];
            }
            for c in t.allocated.iter_mut().flatten() {
                c.point = new_index[c.point];
            }
            t.values.sort_by_key(|v| v.0);
            let peak = t.values.iter().map(|v| v.1).max().unwrap_or(0);
            let at = t.values.iter().find(|v| v.1 == peak).map_or(0, |v| v.0);
            t.peak = (peak, at);
        }
    }

    /// Seconds since the first point, per point.
    pub fn seconds(&self) -> Vec<f64> {
        let t0 = self.points.first().map_or(0, |p| p.time_nanos);
        self.points
            .iter()
            .map(|p| (p.time_nanos - t0) as f64 / 1e9)
            .collect()
    }

    /// The point where live bytes were highest (the first such), if any.
    pub fn highest(&self) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, p) in self.points.iter().enumerate() {
            if best.is_none_or(|b| p.live_bytes > self.points[b].live_bytes) {
                best = Some(i);
            }
        }
        best
    }

    /// The `limit` stacks with the highest peaks, highest first, and the rest summed as "other".
    pub fn view(&self, limit: usize) -> View<'_> {
        let n = self.points.len();
        let mut order: Vec<usize> = (0..self.tracks.len())
            .filter(|&k| self.tracks[k].peak.0 > 0)
            .collect();
        // Highest peak first; of equal peaks, the one that got there first.
        order.sort_by(|&a, &b| {
            let (ta, tb) = (&self.tracks[a], &self.tracks[b]);
            tb.peak
                .0
                .cmp(&ta.peak.0)
                .then(ta.peak.1.cmp(&tb.peak.1))
                .then(a.cmp(&b))
        });
        let seconds = self.seconds();
        let mut other_bytes: Vec<i64> = self.points.iter().map(|p| p.live_bytes).collect();
        let mut other_blocks: Vec<i64> = self.points.iter().map(|p| p.live_blocks).collect();
        let top: Vec<usize> = order.iter().copied().take(limit).collect();
        let names: Vec<&[String]> = top.iter().map(|&k| self.tracks[k].names.as_slice()).collect();
        let mut labels = distinct(&names).into_iter();
        let mut bands = Vec::new();
        for &k in &top {
            let track = &self.tracks[k];
            let (bytes, blocks) = track.dense(n);
            for i in 0..n {
                other_bytes[i] -= bytes[i];
                other_blocks[i] -= blocks[i];
            }
            bands.push(Band {
                label: labels.next().unwrap_or_default(),
                track: Some(track),
                rates: track.allocations(&seconds),
                bytes,
                blocks,
            });
        }
        let others = self
            .tracks
            .iter()
            .filter(|t| !t.values.is_empty())
            .count()
            .saturating_sub(bands.len());
        let other = Band {
            label: "other".into(),
            track: None,
            rates: None,
            bytes: other_bytes,
            blocks: other_blocks,
        };
        let mut busy: Vec<(&Track, Rates)> = self
            .tracks
            .iter()
            .filter_map(|t| Some((t, t.allocations(&seconds).filter(|r| r.allocs > 0)?)))
            .collect();
        busy.sort_by(|a, b| {
            b.1.allocs
                .cmp(&a.1.allocs)
                .then_with(|| a.0.names.cmp(&b.0.names))
        });
        busy.truncate(limit);
        let names: Vec<&[String]> = busy.iter().map(|(t, _)| t.names.as_slice()).collect();
        let allocating = distinct(&names)
            .into_iter()
            .zip(busy)
            .map(|(label, (track, rates))| Allocating { label, track, rates })
            .collect();
        View {
            series: self,
            seconds,
            bands,
            other,
            others,
            allocating,
        }
    }
}

/// One band of the chart: a stack, or the rest of the stacks summed.
pub struct Band<'a> {
    /// What the legend calls it.
    pub label: String,
    /// None for "other".
    pub track: Option<&'a Track>,
    /// Per point.
    pub bytes: Vec<i64>,
    pub blocks: Vec<i64>,
    /// What it allocated over the recording, where the process counted it.
    pub rates: Option<Rates>,
}

/// A stack among those that allocated most over the recording, whether or not it held memory.
pub struct Allocating<'a> {
    pub label: String,
    pub track: &'a Track,
    pub rates: Rates,
}

/// What a chart draws: the top stacks as bands, highest peak first, and the rest as one.
pub struct View<'a> {
    pub series: &'a Series,
    /// Seconds since the first point, per point.
    pub seconds: Vec<f64>,
    pub bands: Vec<Band<'a>>,
    pub other: Band<'a>,
    /// How many stacks "other" holds.
    pub others: usize,
    /// Where the process counted its allocations: the stacks that allocated most, most first
    /// (temporary allocations, which hold memory only for a moment, are mostly here).
    pub allocating: Vec<Allocating<'a>>,
}

impl View<'_> {
    /// The bands to stack from the bottom up: the top stacks, then "other" when it held any.
    pub fn stacked(&self) -> impl Iterator<Item = &Band<'_>> {
        let other = (self.others > 0 && self.other.bytes.iter().any(|&b| b > 0)).then_some(&self.other);
        self.bands.iter().chain(other)
    }
}

/// The names a stack goes by: the frames of the program's own code, innermost first, each as
/// `function (file:line)`. Own code is any object that is not one of the system's libraries
/// (nor libdmem), since the allocator's callers there (`operator new`, `strdup`, stdio) say
/// less than the code that called them. A stack with no such frame goes by its innermost named
/// frame, else its innermost address.
pub fn names(snap: &Snapshot, stack: &Stack) -> Vec<String> {
    let object = |f: &snapshot::Frame| {
        f.object
            .and_then(|i| snap.objects.get(i))
            .map(|o| o.path.as_str())
    };
    let own: Vec<String> = stack
        .frames
        .iter()
        .filter(|f| !f.lines.is_empty() && object(f).is_some_and(|p| !system_library(p)))
        .map(name)
        .collect();
    if !own.is_empty() {
        return own;
    }
    if let Some(f) = stack.frames.iter().find(|f| f.function().is_some()) {
        return vec![name(f)];
    }
    vec![match stack.frames.first() {
        Some(f) => match object(f).and_then(|p| p.rsplit('/').next()) {
            Some(o) => format!("{:#x} in {o}", f.pc),
            None => format!("{:#x}", f.pc),
        },
        None => "[no stack]".to_owned(),
    }]
}

/// A symbolised frame as `function (file:line)`, by the innermost of the functions at its
/// address (the inlined one, where there is one).
fn name(f: &snapshot::Frame) -> String {
    let l = &f.lines[0];
    let function = if l.function.is_empty() {
        f.function().unwrap_or("?")
    } else {
        &l.function
    };
    match (l.file.rsplit('/').next().filter(|s| !s.is_empty()), l.line) {
        (Some(file), 0) => format!("{function} ({file})"),
        (Some(file), line) => format!("{function} ({file}:{line})"),
        (None, _) => function.to_owned(),
    }
}

/// Labels for stacks by their names: the first name of each, and where two stacks would read
/// the same (both allocate through one wrapper), as many of their callers as tell them apart,
/// joined by " ← " (called from).
fn distinct(names: &[&[String]]) -> Vec<String> {
    let mut depth = vec![1usize; names.len()];
    loop {
        let labels: Vec<String> = names
            .iter()
            .zip(&depth)
            .map(|(n, &d)| n[..d.min(n.len())].join(" ← "))
            .collect();
        let mut deeper = false;
        for i in 0..names.len() {
            let shared = labels.iter().enumerate().any(|(j, l)| j != i && *l == labels[i]);
            if shared && depth[i] < names[i].len() {
                depth[i] += 1;
                deeper = true;
            }
        }
        if !deeper {
            return labels;
        }
    }
}

/// Whether `path` is one of the system's shared libraries, or libdmem itself.
fn system_library(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    ["/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/local/lib/"]
        .iter()
        .any(|d| path.starts_with(d))
        || name.starts_with("libdmem")
        || name.starts_with("ld-linux")
}

/// The series as JSON (`dmem timeline --json`).
#[derive(Serialize)]
pub struct JsonSeries<'a> {
    pub source: &'a str,
    pub profiles: Vec<JsonPoint<'a>>,
    pub stacks: Vec<JsonTrack<'a>>,
    pub other: JsonOther<'a>,
    /// Where the process counted its allocations: the stacks that allocated most.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocating: Vec<JsonAllocating<'a>>,
}

#[derive(Serialize)]
pub struct JsonPoint<'a> {
    /// Unix seconds, to the millisecond.
    pub time: f64,
    pub file: &'a str,
    pub peak: bool,
    pub live_bytes: i64,
    pub live_blocks: i64,
}

#[derive(Serialize)]
pub struct JsonTrack<'a> {
    pub label: &'a str,
    pub peak_bytes: i64,
    /// When it first held its peak, Unix seconds.
    pub peak_time: f64,
    /// Per profile, in the order of `profiles`.
    pub bytes: &'a [i64],
    pub blocks: &'a [i64],
    /// Where the process counted its allocations (`count-allocs`): what it allocated between
    /// the first and the last profile that counted, and per second.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub allocated: Option<JsonRates>,
    pub frames: &'a [JsonFrame],
}

#[derive(Serialize)]
pub struct JsonRates {
    pub allocs: i64,
    pub temporary: i64,
    pub allocs_per_s: f64,
    pub temporary_per_s: f64,
}

impl From<Rates> for JsonRates {
    fn from(r: Rates) -> JsonRates {
        let round = |v: f64| (v * 10.0).round() / 10.0;
        JsonRates {
            allocs: r.allocs,
            temporary: r.temporary,
            allocs_per_s: round(r.allocs_per_s),
            temporary_per_s: round(r.temporary_per_s),
        }
    }
}

/// A stack among those that allocated most.
#[derive(Serialize)]
pub struct JsonAllocating<'a> {
    pub label: &'a str,
    #[serde(flatten)]
    pub allocated: JsonRates,
    pub frames: &'a [JsonFrame],
}

#[derive(Serialize)]
pub struct JsonOther<'a> {
    /// How many stacks it sums.
    pub stacks: usize,
    pub bytes: &'a [i64],
    pub blocks: &'a [i64],
}

impl<'a> View<'a> {
    pub fn json(&'a self) -> JsonSeries<'a> {
        let s = self.series;
        JsonSeries {
            source: &s.source,
            profiles: s
                .points
                .iter()
                .map(|p| JsonPoint {
                    time: snapjson::seconds(p.time_nanos),
                    file: &p.name,
                    peak: p.peak,
                    live_bytes: p.live_bytes,
                    live_blocks: p.live_blocks,
                })
                .collect(),
            stacks: self
                .bands
                .iter()
                .filter_map(|b| {
                    let t = b.track?;
                    Some(JsonTrack {
                        label: &b.label,
                        peak_bytes: t.peak.0,
                        peak_time: snapjson::seconds(s.points[t.peak.1].time_nanos),
                        bytes: &b.bytes,
                        blocks: &b.blocks,
                        allocated: b.rates.map(JsonRates::from),
                        frames: &t.frames,
                    })
                })
                .collect(),
            other: JsonOther {
                stacks: self.others,
                bytes: &self.other.bytes,
                blocks: &self.other.blocks,
            },
            allocating: self
                .allocating
                .iter()
                .map(|a| JsonAllocating {
                    label: &a.label,
                    allocated: a.rates.into(),
                    frames: &a.track.frames,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::model::snapshot::{Frame, Line, Object};

    /// A stack whose innermost frame is in libc, called from `function` in the program.
    fn stack(function: &str, pc: u64, bytes: i64) -> Stack {
        let line = |function: &str, file: &str, line: u32| Line {
            function: function.into(),
            file: file.into(),
            line,
        };
        Stack {
            bytes,
            blocks: bytes / 100,
            tids: vec![1],
            frames: vec![
                Frame {
                    pc: 0x7010,
                    object: Some(1),
                    lines: vec![line("strdup", "strdup.c", 40)],
                },
                Frame {
                    pc,
                    object: Some(0),
                    lines: vec![line(function, "/src/prog.c", 12)],
                },
            ],
            allocated: None,
        }
    }

    /// A snapshot at `secs` seconds of the stacks `(function, pc, bytes)`.
    pub fn snap(secs: i64, stacks: &[(&str, u64, i64)]) -> Snapshot {
        let mut s = Snapshot {
            time_nanos: 1_700_000_000_000_000_000 + secs * 1_000_000_000,
            source: "pid 42 (prog)".into(),
            objects: vec![
                Object {
                    path: "/opt/prog".into(),
                    start: 0x1000,
                    end: 0x2000,
                    file_offset: 0x1000,
                    ..Object::default()
                },
                Object {
                    path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
                    start: 0x7000,
                    end: 0x8000,
                    ..Object::default()
                },
            ],
            stacks: stacks.iter().map(|&(f, pc, b)| stack(f, pc, b)).collect(),
            ..Snapshot::default()
        };
        s.sort();
        s
    }

    pub fn three_phases() -> Series {
        let mut series = Series::default();
        let phases = [
            (0, [100, 100, 500]),
            (1, [200, 300, 500]),
            (2, [300, 600, 500]),
            (3, [400, 300, 500]),
            (4, [800, 100, 500]),
        ];
        for (t, [grow, bump, steady]) in phases {
            let s = snap(
                t,
                &[
                    ("grow", 0x1100, grow),
                    ("bump", 0x1200, bump),
                    ("steady", 0x1300, steady),
                    ("tiny", 0x1400, 10),
                ],
            );
            series.add(&s, format!("p{t}"), t == 2);
        }
        series
    }

    #[test]
    fn stacks_are_ranked_by_peak_and_the_rest_is_other() {
        let series = three_phases();
        let v = series.view(3);
        let labels: Vec<&str> = v.bands.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(
            labels,
            ["grow (prog.c:12)", "bump (prog.c:12)", "steady (prog.c:12)"]
        );
        assert_eq!(v.bands[0].bytes, [100, 200, 300, 400, 800]);
        assert_eq!(v.bands[1].bytes, [100, 300, 600, 300, 100]);
        assert_eq!((v.others, &v.other.bytes[..]), (1, &[10, 10, 10, 10, 10][..]));
        // Every point's bands add up to its total.
        for (i, p) in series.points.iter().enumerate() {
            let sum: i64 = v.stacked().map(|b| b.bytes[i]).sum();
            assert_eq!(sum, p.live_bytes);
        }
        assert_eq!(series.highest(), Some(2), "the first of two equal highs");
        assert_eq!(v.seconds, [0.0, 1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn a_stack_absent_from_a_snapshot_holds_nothing_there() {
        let mut series = Series::default();
        series.add(&snap(0, &[("a", 0x1100, 100)]), "0".into(), false);
        series.add(&snap(1, &[("b", 0x1200, 50)]), "1".into(), false);
        series.add(
            &snap(2, &[("a", 0x1100, 70), ("b", 0x1200, 50)]),
            "2".into(),
            false,
        );
        let v = series.view(10);
        assert_eq!(v.bands[0].bytes, [100, 0, 70]);
        assert_eq!(v.bands[1].bytes, [0, 50, 50]);
        assert!(v.stacked().count() == 2, "no other when nothing is left over");
        assert_eq!(series.tracks[0].peak, (100, 0));
    }

    #[test]
    fn snapshots_read_out_of_order_are_put_in_time_order() {
        let mut series = Series::default();
        series.add(&snap(2, &[("a", 0x1100, 300)]), "2".into(), true);
        series.add(
            &snap(0, &[("a", 0x1100, 100), ("b", 0x1200, 5)]),
            "0".into(),
            false,
        );
        series.add(&snap(1, &[("a", 0x1100, 300)]), "1".into(), false);
        series.sort_by_time();
        let names: Vec<&str> = series.points.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["0", "1", "2"]);
        assert!(series.points[2].peak);
        let v = series.view(10);
        assert_eq!(v.bands[0].bytes, [100, 300, 300]);
        assert_eq!(series.tracks[0].peak, (300, 1), "first held at the second point");
        assert_eq!(v.bands[1].bytes, [5, 0, 0]);
    }

    #[test]
    fn counted_allocations_give_exact_rates_even_of_stacks_that_hold_nothing() {
        use crate::model::snapshot::Allocated;
        let mut series = Series::default();
        // Added out of order, as files are read.
        for t in [2i64, 0, 1] {
            let mut s = snap(t, &[("grow", 0x1100, 100 * (t + 1)), ("temp", 0x1200, 0)]);
            for st in &mut s.stacks {
                let grow = st.bytes > 0;
                st.allocated = Some(Allocated {
                    blocks: if grow { 10 + 20 * t } else { 1000 * t },
                    bytes: 0,
                    temporary: if grow { 0 } else { 999 * t },
                });
            }
            series.add(&s, format!("{t}"), false);
        }
        series.sort_by_time();
        let v = series.view(10);
        // The stack that never holds memory is not drawn, but is among those that allocate.
        assert_eq!(v.bands.len(), 1);
        let r = v.bands[0].rates.unwrap();
        assert_eq!((r.allocs, r.allocs_per_s, r.temporary), (40, 20.0, 0));
        assert_eq!(v.allocating.len(), 2);
        assert_eq!(v.allocating[0].label, "temp (prog.c:12)");
        let r = v.allocating[0].rates;
        assert_eq!(
            (r.allocs, r.allocs_per_s, r.temporary, r.temporary_per_s),
            (2000, 1000.0, 1998, 999.0)
        );
        let doc = serde_json::to_value(v.json()).unwrap();
        assert_eq!(doc["stacks"][0]["allocs_per_s"], 20.0);
        assert_eq!(doc["allocating"][0]["temporary"], 1998);
    }

    #[test]
    fn the_label_is_the_innermost_frame_of_the_program() {
        let s = snap(0, &[("make_node", 0x1100, 100)]);
        assert_eq!(names(&s, &s.stacks[0]), ["make_node (prog.c:12)"]);
        // A stack wholly in the system's libraries: its innermost named frame.
        let mut lib_only = s.stacks[0].clone();
        lib_only.frames.truncate(1);
        assert_eq!(names(&s, &lib_only), ["strdup (strdup.c:40)"]);
        lib_only.frames[0].lines.clear();
        assert_eq!(names(&s, &lib_only), ["0x7010 in libc.so.6"]);
    }

    #[test]
    fn stacks_through_one_wrapper_are_told_apart_by_their_callers() {
        let n = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (a, b, c) = (
            n(&["xmalloc", "parse", "main"]),
            n(&["xmalloc", "load", "main"]),
            n(&["grow"]),
        );
        let d = n(&["xmalloc"]);
        assert_eq!(
            distinct(&[&a, &b, &c, &d]),
            ["xmalloc ← parse", "xmalloc ← load", "grow", "xmalloc"]
        );
        assert_eq!(
            distinct(&[&a, &c]),
            ["xmalloc", "grow"],
            "one name when it is enough"
        );
    }

    #[test]
    fn the_json_series_adds_up() {
        let series = three_phases();
        let v = series.view(2);
        let doc = serde_json::to_value(v.json()).unwrap();
        assert_eq!(doc["profiles"].as_array().unwrap().len(), 5);
        assert_eq!(doc["profiles"][2]["peak"], true);
        assert_eq!(doc["stacks"][0]["label"], "grow (prog.c:12)");
        assert_eq!(doc["stacks"][0]["peak_bytes"], 800);
        assert_eq!(doc["other"]["stacks"], 2);
        assert_eq!(
            doc["other"]["bytes"],
            serde_json::json!([510, 510, 510, 510, 510])
        );
    }
}
