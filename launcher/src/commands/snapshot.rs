//! `dmem snapshot IMAGE -o FILE`: the live heap of a running process (read without stopping
//! it) or of a core, as a pprof profile, JSON or folded stacks; and where `dmem diff` gets its
//! snapshots: an image now, or a file written earlier.

use crate::analysis::escape::show;
use crate::cli::SnapshotFormat as Format;
use crate::model::snapshot::{self, Snapshot};
use crate::model::text::thousands;
use crate::source::elf::{self, Kind};
use crate::source::image::{Image, Target};
use crate::source::stack_counts;
use crate::steps::inspect::{Inspect, Need};
use crate::{failed, usage, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where a snapshot comes from, as named on the command line.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// A process or a core, read now.
    Image(Target),
    /// A snapshot written earlier: a pprof profile (gzipped or not) or dmem's JSON.
    File(PathBuf),
}

impl Source {
    /// Splits command-line words into sources: a process or core as every command names one
    /// (PID, CORE or PROG CORE), or a file that is neither: a snapshot written earlier.
    pub fn parse_all(words: &[OsString]) -> Result<Vec<Source>> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < words.len() {
            let w = &words[i];
            let digits = w
                .to_str()
                .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
            if !digits {
                let path = PathBuf::from(w);
                if matches!(elf::kind(&path), Ok(Kind::NotElf | Kind::Other)) {
                    out.push(Source::File(path));
                    i += 1;
                    continue;
                }
            }
            let (t, used) = Target::take(&words[i..])?;
            out.push(Source::Image(t));
            i += used;
        }
        Ok(out)
    }

    /// The snapshot this source holds or gives now.
    pub fn take(&self) -> Result<Snapshot> {
        match self {
            Source::Image(t) => {
                let started = Instant::now();
                let image = Image::open(t)?;
                if image.glibc.is_some() {
                    // No stacks: the blocks by C++ type and size, each group a one-frame stack
                    // named for it, so that a diff of two moments names the type that grew.
                    let when = image.when;
                    let mut ins = Inspect::of_image(image, None, None, Need::Snapshot)?;
                    let read_ms = (started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
                    let warnings = ins.warnings();
                    return Ok(snapshot::from_groups(
                        &ins.heap,
                        ins.image.name.clone(),
                        when,
                        read_ms,
                        warnings,
                    ));
                }
                let walk = image.walk()?;
                let read_ms = (started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
                // Read after the walk, so that a stack's frees (its allocations less its live
                // blocks) are never below zero in a running process.
                let counts = stack_counts::read(&*image.mem, &image.layout)
                    .map_err(|e| failed(format!("{}: the per-stack counts: {e}", image.name)))?;
                Ok(snapshot::from_walk(
                    &walk,
                    counts.as_ref(),
                    image.maps,
                    image.exe.as_deref(),
                    image.name,
                    image.when,
                    read_ms,
                ))
            }
            Source::File(path) => {
                // Read to one byte past the most a snapshot may be, which its reader then
                // refuses: a huge file costs no more than that.
                let cap = crate::model::snapjson::MAX_BYTES as u64 + 1;
                let mut data = Vec::new();
                crate::sys::open_regular(path)
                    .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, cap), &mut data))
                    .map_err(|e| failed(format!("cannot read {}: {e}", show(path))))?;
                let what = |e: String| failed(format!("{}: {e}", show(path)));
                if crate::model::pprof::is_gzip(&data) || !data.trim_ascii_start().starts_with(b"{") {
                    crate::model::pprof::read(&data).map_err(what)
                } else {
                    crate::model::snapjson::read(&data).map_err(what)
                }
            }
        }
    }
}

/// Writes `snap` to `output` (`-` for standard output) in `format`.
pub fn write_to(snap: &Snapshot, output: &Path, format: Format) -> Result<()> {
    let write = |w: &mut dyn std::io::Write| -> std::io::Result<()> {
        match format {
            Format::Pprof => crate::model::pprof::write(snap, &mut *w),
            Format::Json => crate::model::snapjson::write(snap, &mut *w),
            Format::Folded => w.write_all(snap.folded().as_bytes()),
        }?;
        w.flush()
    };
    let done = if output == Path::new("-") {
        write(&mut std::io::stdout().lock())
    } else {
        let file = std::fs::File::create(output)
            .map_err(|e| failed(format!("cannot create {}: {e}", show(output))))?;
        write(&mut std::io::BufWriter::new(file))
    };
    match done {
        Ok(()) => Ok(()),
        // The reader of standard output went away (`| head`): nothing more to say.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(failed(format!("cannot write {}: {e}", show(output)))),
    }
}

/// `dmem snapshot SOURCE -o FILE`.
pub fn command(words: &[OsString], output: &Path, format: Format) -> Result<i32> {
    let sources = Source::parse_all(words)?;
    let [source] = sources.as_slice() else {
        return Err(usage(
            "takes one source: a PID, a core, or a program and its core (PROG CORE)",
        ));
    };
    if let Source::File(p) = source {
        return Err(usage(format!(
            "{} is neither a program, a core file nor a process id",
            show(p)
        )));
    }
    let snap = source.take()?;
    write_to(&snap, output, format)?;
    for line in snap.warnings.iter().chain(&snap.inconsistency()) {
        eprintln!("dmem snapshot: {line}");
    }
    if output != Path::new("-") {
        let plural = |n: i64, one: &str, many: &str| {
            format!(
                "{} {}",
                thousands(n.max(0) as u64),
                if n == 1 { one } else { many }
            )
        };
        let holding = snap.stacks.iter().filter(|s| s.blocks != 0).count();
        let counted = if snap.counted() {
            let all: i64 = snap
                .stacks
                .iter()
                .filter_map(|s| s.allocated)
                .map(|a| a.blocks)
                .sum();
            format!(
                "; {} counted since it started, from {}",
                plural(all + snap.unattributed.blocks, "allocation", "allocations"),
                plural(snap.stacks.len() as i64, "stack", "stacks")
            )
        } else {
            String::new()
        };
        eprintln!(
            "dmem snapshot: {} in {} from {} of {} written to {}{counted}",
            plural(snap.live_bytes(), "byte", "bytes"),
            plural(snap.live_blocks(), "block", "blocks"),
            plural(holding as i64, "stack", "stacks"),
            snap.source,
            show(output)
        );
    }
    Ok(0)
}
