//! `dmem record PID --every SECS -o DIR [--keep N] [--at-peak [PCT]]`: heap profiles of a
//! running process written periodically, and at each new peak of live bytes, as jemalloc's and
//! tcmalloc's profilers and heapprofd do, because the question after an OOM kill is what held
//! memory at the peak, and an OOM kill leaves no core.
//!
//! The periodic profiles follow the clock. The peaks are watched through the library's own
//! counters (a few words per list, read ten times a second), and a full read of the lists is
//! made only when live bytes pass the last peak profile's by the given percentage: a process
//! that grows slowly gets a profile at each such step, and the last one was taken at most that
//! percentage below the true peak.
//!
//! With `--timeline FILE` every profile is also added to a series kept in memory, and the chart
//! of it (`dmem timeline`'s) is drawn again after each one: the whole recording, even the
//! profiles `--keep` has since removed.

use crate::analysis::escape::show;
use crate::cli::RecordArgs;
use crate::cli::SnapshotFormat;
use crate::commands::snapshot::{write_to, Source};
use crate::commands::timeline;
use crate::model::series::{self, Series};
use crate::model::text::thousands;
use crate::source::image::Target;
use crate::source::live::{self, LiveProcess};
use crate::sys::{self, INTERRUPTED};
use crate::{failed, Result};
use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

/// How often the counters are read for a new peak.
const POLL: Duration = Duration::from_millis(100);

/// The chart `--timeline` keeps drawn, and the series it draws.
struct Chart {
    path: PathBuf,
    series: Series,
}

impl Chart {
    /// Adds a profile just written and draws the chart again. A chart that cannot be written
    /// is said once per profile and does not end the recording, whose profiles matter more.
    fn add(&mut self, snap: &crate::model::snapshot::Snapshot, written: &Path) {
        let name = written.file_name().map(show).unwrap_or_default();
        self.series.add(snap, name, series::is_peak(written));
        let format = timeline::format_of(&self.path);
        if let Err(f) = timeline::write(&self.series, 10, format, &self.path) {
            eprintln!("dmem record: {}", f.msg);
        }
    }
}

/// The profiles written so far, and the oldest ones let go when `--keep` says so.
struct Kept {
    files: VecDeque<PathBuf>,
    keep: Option<u64>,
}

impl Kept {
    fn add(&mut self, path: PathBuf) {
        self.files.push_back(path);
        while self.keep.is_some_and(|k| self.files.len() as u64 > k) {
            if let Some(old) = self.files.pop_front() {
                if let Err(e) = std::fs::remove_file(&old) {
                    eprintln!("dmem record: cannot remove {}: {e}", show(&old));
                }
            }
        }
    }
}

/// A recording under way: where its profiles go, what it has written, the peaks it has seen.
struct Recording {
    pid: i32,
    dir: PathBuf,
    /// The profiles' names begin with it: the process's name and id.
    stem: String,
    periodic: Kept,
    peaks: Kept,
    /// The lines said about the lists, each once over the whole recording.
    said: HashSet<String>,
    chart: Option<Chart>,
    written: u64,
    at_peaks: u64,
    /// The highest live bytes seen, and when.
    highest: Option<(u64, SystemTime)>,
    /// The live bytes of the last peak profile, which the next one must pass by the percentage.
    peak_base: Option<u64>,
}

pub fn main(a: RecordArgs) -> Result<i32> {
    let target = live::open(a.pid)?;
    std::fs::create_dir_all(&a.output)
        .map_err(|e| failed(format!("cannot create {}: {e}", show(&a.output))))?;
    sys::catch_interrupt();
    let every = Duration::from_secs_f64(a.every);
    let mut rec = Recording::new(&a, &target.name);
    let mut next = Instant::now();
    let ended = loop {
        if INTERRUPTED.load(Ordering::SeqCst) {
            break "interrupted";
        }
        if !live::alive(a.pid) {
            break "the process ended";
        }
        if let Some(pct) = a.at_peak {
            if !rec.at_peak(&target, pct)? {
                break "the process ended";
            }
        }
        if Instant::now() >= next {
            if !rec.periodic()? {
                break "the process ended";
            }
            next += every;
            // A profile that took longer than the interval does not make a burst of catch-ups.
            next = next.max(Instant::now());
        }
        let wake = if a.at_peak.is_some() {
            next.min(Instant::now() + POLL)
        } else {
            next
        };
        while Instant::now() < wake && !INTERRUPTED.load(Ordering::SeqCst) {
            std::thread::sleep(wake.saturating_duration_since(Instant::now()).min(POLL));
        }
    };
    eprintln!("dmem record: {ended}: {}", rec.summary());
    Ok(0)
}

impl Recording {
    fn new(a: &RecordArgs, name: &str) -> Recording {
        let kept = || Kept {
            files: VecDeque::new(),
            keep: a.keep,
        };
        Recording {
            pid: a.pid,
            dir: a.output.clone(),
            stem: format!("{}.{}", file_safe(name), a.pid),
            periodic: kept(),
            peaks: kept(),
            said: HashSet::new(),
            chart: a.timeline.clone().map(|path| Chart {
                path,
                series: Series::default(),
            }),
            written: 0,
            at_peaks: 0,
            highest: None,
            peak_base: None,
        }
    }

    /// Reads the counters and writes a peak profile when live bytes passed the last one's by
    /// `pct` percent; false when the process has ended.
    fn at_peak(&mut self, target: &LiveProcess, pct: f64) -> Result<bool> {
        let c = match target.counters() {
            Ok(c) => c,
            Err(_) if ending(self.pid) => return Ok(false),
            Err(f) => return Err(f),
        };
        self.note_high(c.live_bytes);
        let base = *self.peak_base.get_or_insert(c.live_bytes);
        if c.live_bytes as f64 <= base as f64 * (1.0 + pct / 100.0) {
            return Ok(true);
        }
        let Some((path, bytes)) = self.take("peak.")? else {
            return Ok(false);
        };
        self.note_high(bytes);
        self.peak_base = Some(bytes.max(c.live_bytes));
        self.peaks.add(path);
        self.written += 1;
        self.at_peaks += 1;
        Ok(true)
    }

    /// Writes the periodic profile; false when the process has ended.
    fn periodic(&mut self) -> Result<bool> {
        let Some((path, bytes)) = self.take("")? else {
            return Ok(false);
        };
        self.note_high(bytes);
        self.periodic.add(path);
        self.written += 1;
        Ok(true)
    }

    fn note_high(&mut self, bytes: u64) {
        if self.highest.is_none_or(|(h, _)| bytes > h) {
            self.highest = Some((bytes, SystemTime::now()));
        }
    }

    fn take(&mut self, kind: &str) -> Result<Option<(PathBuf, u64)>> {
        take(
            self.pid,
            &self.dir,
            &self.stem,
            kind,
            &mut self.said,
            self.chart.as_mut(),
        )
    }

    /// What was written, and the peak.
    fn summary(&self) -> String {
        let peak = match self.highest {
            Some((bytes, when)) => format!(
                "; peak {} live bytes at {}",
                thousands(bytes),
                humantime::format_rfc3339_seconds(when)
            ),
            None => String::new(),
        };
        format!(
            "{} profile{} written to {} ({} at peaks){peak}",
            self.written,
            if self.written == 1 { "" } else { "s" },
            show(&self.dir),
            self.at_peaks
        )
    }
}

/// Whether process `pid`, whose read just failed, is ending: gone now, or within a second. A
/// process on its way out loses its memory (a read then fails) a moment before it becomes a
/// zombie, so one that still shows as alive is given that moment.
fn ending(pid: i32) -> bool {
    let until = Instant::now() + Duration::from_secs(1);
    while live::alive(pid) {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// A profile of the process now, written to DIR/STEM.STAMP.KINDpb.gz and added to the chart: its
/// path and live bytes; `None` when the process has ended.
fn take(
    pid: i32,
    dir: &Path,
    stem: &str,
    kind: &str,
    said: &mut HashSet<String>,
    chart: Option<&mut Chart>,
) -> Result<Option<(PathBuf, u64)>> {
    let snap = match Source::Image(Target::Pid(pid)).take() {
        Ok(s) => s,
        Err(_) if ending(pid) => return Ok(None),
        Err(f) => return Err(f),
    };
    // What is wrong with the lists, each line once over the whole recording, as `top` says it.
    for line in &snap.warnings {
        if said.insert(line.clone()) {
            eprintln!("dmem record: {line}");
        }
    }
    let stamp: String = humantime::format_rfc3339_millis(SystemTime::now())
        .to_string()
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    let path = dir.join(format!("{stem}.{stamp}.{kind}pb.gz"));
    write_to(&snap, &path, SnapshotFormat::Pprof)?;
    if let Some(chart) = chart {
        chart.add(&snap, &path);
    }
    Ok(Some((path, snap.live_bytes().max(0) as u64)))
}

/// A process name as a file name: no slashes, no leading dot.
fn file_safe(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || "-_+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "process".into()
    } else {
        s
    }
}
