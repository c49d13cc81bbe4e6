//! `dmem timeline DIR|FILES... -o OUT`: memory over time as a picture. The profiles `dmem
//! record` wrote (or any snapshots with their times) become a stacked area chart of live bytes
//! by allocation stack, as SVG, as one self-contained HTML page, or as the series in JSON; and
//! `dmem record --timeline` redraws the same chart after each profile it writes.

use crate::analysis::escape::show;
use crate::cli::{TimelineArgs, TimelineFormat as Format};
use crate::commands::snapshot::Source;
use crate::model::chart;
use crate::model::series::{self, Series};
use crate::{failed, usage, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

pub fn main(a: TimelineArgs) -> Result<i32> {
    let format = if a.json {
        Format::Json
    } else {
        a.format
            .unwrap_or_else(|| a.output.as_deref().map_or(Format::Svg, format_of))
    };
    let output = match (a.output, format) {
        (Some(o), _) => o,
        (None, Format::Json) => PathBuf::from("-"),
        (None, _) => return Err(usage("where should the chart go? add -o OUT.svg (or OUT.html)")),
    };
    let mut series = Series::default();
    for path in inputs(&a.inputs)? {
        let snap = Source::File(path.clone()).take()?;
        if snap.time_nanos <= 0 {
            return Err(failed(format!(
                "{} says nothing of when it was taken, so it has no place on a timeline",
                show(&path)
            )));
        }
        let name = path.file_name().map(show).unwrap_or_else(|| show(&path));
        series.add(&snap, name, series::is_peak(&path));
    }
    series.sort_by_time();
    write(&series, a.limit, format, &output)?;
    if output != Path::new("-") {
        let n = series.points.len();
        eprintln!(
            "dmem timeline: {n} profile{} drawn to {}",
            if n == 1 { "" } else { "s" },
            show(&output)
        );
    }
    Ok(0)
}

/// The format a file's name asks for: `.html` (or `.htm`) the page, `.json` the series, else SVG.
pub fn format_of(path: &Path) -> Format {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html" | "htm") => Format::Html,
        Some("json") => Format::Json,
        _ => Format::Svg,
    }
}

/// The profiles named on the command line: a directory stands for the profiles in it (what
/// `dmem record` writes: `.pb.gz` and `.pb` files), a file for itself.
fn inputs(words: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for w in words {
        if !w.is_dir() {
            if !w.exists() {
                return Err(failed(format!("{} does not exist", show(w))));
            }
            out.push(w.clone());
            continue;
        }
        let entries = std::fs::read_dir(w)
            .map_err(|e| failed(format!("cannot read the directory {}: {e}", show(w))))?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().map(show).unwrap_or_default();
                p.is_file() && (name.ends_with(".pb.gz") || name.ends_with(".pb"))
            })
            .collect();
        if found.is_empty() {
            return Err(failed(format!(
                "{} holds no profiles (.pb.gz files, as 'dmem record -o {}' writes)",
                show(w),
                show(w)
            )));
        }
        found.sort();
        out.extend(found);
    }
    Ok(out)
}

/// Writes the series' chart (or JSON) to `output`, `-` for standard output. A file is written
/// beside its final name and renamed into place, so that a browser or a viewer that reloads it
/// while `dmem record` redraws it never reads half a chart.
pub fn write(series: &Series, limit: usize, format: Format, output: &Path) -> Result<()> {
    let view = series.view(limit);
    let body = match format {
        Format::Svg => chart::svg(&view),
        Format::Html => chart::html(&view),
        Format::Json => {
            let mut s = serde_json::to_string(&view.json()).expect("JSON of plain data");
            s.push('\n');
            s
        }
    };
    if output == Path::new("-") {
        let mut out = std::io::stdout().lock();
        return match out.write_all(body.as_bytes()).and_then(|_| out.flush()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(failed(format!("cannot write to standard output: {e}")))
            }
            _ => Ok(()),
        };
    }
    let name = output.file_name().map(show).unwrap_or_default();
    let temporary = output.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written =
        std::fs::write(&temporary, body.as_bytes()).and_then(|_| std::fs::rename(&temporary, output));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(failed(format!("cannot write {}: {e}", show(output))));
    }
    Ok(())
}
