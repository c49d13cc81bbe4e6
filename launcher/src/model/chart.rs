//! The timeline drawn: a stacked area chart of live bytes over time, one band per allocation
//! stack (the highest peak at the bottom, the rest of the stacks summed on top as "other"), as
//! heaptrack_gui's consumption chart and massif-visualizer draw it; with the profiles written
//! at new peaks marked, and a legend whose entries show the whole stack on hover (an SVG
//! `<title>`). As an SVG file, or inline in one HTML page with a table of the stacks and the
//! profiles: no script, nothing fetched, so the page works opened from disk.

use crate::analysis::escape::markup;
use crate::model::series::{Band, View};
use crate::model::text::{size_short, sparkline, thousands};
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

/// The drawing's width, and the plot's box inside it.
const WIDTH: f64 = 1000.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 975.0;
const TOP: f64 = 64.0;
const BOTTOM: f64 = 404.0;
/// Where the legend starts, and the height of one of its lines.
const LEGEND: f64 = 450.0;
const LINE: f64 = 20.0;

/// Tableau's ten colours, which stay apart for most eyes; "other" is grey.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
    "#bab0ac",
];
const OTHER: &str = "#d3d3d3";

/// The colour of the band at `rank` (0 for the highest peak), or of "other".
pub fn colour(band: &Band, rank: usize) -> &'static str {
    if band.track.is_none() {
        OTHER
    } else {
        PALETTE[rank % PALETTE.len()]
    }
}

/// A step of 1, 2 or 5 times a power of ten that cuts `range` into at most about `ticks` parts.
fn nice_step(range: f64, ticks: f64) -> f64 {
    let raw = (range / ticks).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

/// A tick's number with as many decimals as its step needs.
fn tick_text(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{v:.decimals$}")
}

/// The vertical axis: the unit it counts in, its step and its top, in that unit.
struct Scale {
    unit: f64,
    name: &'static str,
    step: f64,
    top: f64,
}

fn byte_scale(max: i64) -> Scale {
    let max = max.max(1) as f64;
    let (mut unit, mut k) = (1.0, 0);
    const NAMES: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    while max / unit >= 1024.0 && k < NAMES.len() - 1 {
        unit *= 1024.0;
        k += 1;
    }
    let step = nice_step(max / unit, 5.0);
    let step = if k == 0 { step.max(1.0) } else { step };
    Scale {
        unit,
        name: NAMES[k],
        step,
        top: (max / unit / step).ceil().max(1.0) * step,
    }
}

fn time_scale(span: f64) -> Scale {
    let (unit, name) = if span <= 180.0 {
        (1.0, "s")
    } else if span <= 3.0 * 3600.0 {
        (60.0, "min")
    } else {
        (3600.0, "h")
    };
    let span = span.max(1e-3);
    let step = nice_step(span / unit, 8.0);
    Scale {
        unit,
        name,
        step,
        top: span / unit,
    }
}

/// Where each point lies across the plot: by its time, or, for a single point, the whole width.
fn xs(view: &View) -> Vec<f64> {
    let span = view.seconds.last().copied().unwrap_or(0.0);
    if view.seconds.len() < 2 || span <= 0.0 {
        return vec![LEFT, RIGHT];
    }
    view.seconds
        .iter()
        .map(|t| LEFT + t / span * (RIGHT - LEFT))
        .collect()
}

/// A band's values at the points `xs` stands for.
fn at_points(values: &[i64], n: usize) -> Vec<i64> {
    if values.len() == 1 && n == 2 {
        vec![values[0]; 2]
    } else {
        values.to_vec()
    }
}

/// "4.8 MiB at 2.4 s": a size and when, for legends and titles.
fn when(view: &View, point: usize) -> String {
    let t = view.seconds.get(point).copied().unwrap_or(0.0);
    let scale = time_scale(view.seconds.last().copied().unwrap_or(0.0));
    format!("{} {}", tick_text(t / scale.unit, scale.step / 10.0), scale.name)
}

/// The wall-clock time of a point, `2026-11-25 15:44:39` in UTC.
fn wall(view: &View, point: usize) -> String {
    let nanos = view.series.points[point].time_nanos.max(0) as u64;
    let t = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_nanos(nanos)).to_string();
    t.trim_end_matches('Z').replacen('T', " ", 1)
}

/// The line under the title: what was recorded, when, and its highest point.
pub fn subtitle(view: &View) -> String {
    let s = view.series;
    let n = s.points.len();
    if n == 0 {
        return "no profiles".into();
    }
    let (first, last) = (wall(view, 0), wall(view, n - 1));
    // The last profile's date only when it differs from the first's.
    let last = match (first.split_once(' '), last.split_once(' ')) {
        (Some((d0, _)), Some((d1, time))) if d0 == d1 => time.to_owned(),
        _ => last,
    };
    let mut out = format!(
        "{}: {} profile{} from {first} to {last} UTC",
        s.source,
        n,
        if n == 1 { "" } else { "s" },
    );
    if let Some(h) = s.highest() {
        let _ = write!(
            out,
            "; highest {} live at {}",
            size_short(s.points[h].live_bytes.max(0) as u64),
            when(view, h)
        );
    }
    out
}

/// The chart as a standalone SVG document.
pub fn svg(view: &View) -> String {
    let bands: Vec<&Band> = view.stacked().collect();
    let height = LEGEND + LINE * bands.len().max(1) as f64 + 16.0;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"##
    );
    o.push_str(
        "<style>.band:hover,.entry:hover rect{stroke:#000;stroke-width:1.5}.entry{cursor:default}</style>\n",
    );
    let title = format!("Live heap by allocation stack, {}", view.series.source);
    let _ = writeln!(o, "<title>{}</title>", markup(&title));
    let _ = writeln!(o, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    let _ = writeln!(
        o,
        r##"<text class="title" x="{LEFT}" y="24" font-size="16" font-weight="bold">Live heap by allocation stack</text>"##
    );
    let _ = writeln!(
        o,
        r##"<text class="subtitle" x="{LEFT}" y="44" fill="#555">{}</text>"##,
        markup(&subtitle(view))
    );

    // The vertical axis, from the highest total.
    let max_total = view.series.points.iter().map(|p| p.live_bytes).max().unwrap_or(0);
    let ys = byte_scale(max_total);
    let y = |bytes: f64| BOTTOM - bytes / (ys.top * ys.unit) * (BOTTOM - TOP);
    y_axis(&mut o, &ys, &y);

    // The horizontal axis: seconds (or minutes, hours) since the first profile.
    let span = view.seconds.last().copied().unwrap_or(0.0);
    let xsc = time_scale(span);
    let x = |secs: f64| {
        if span > 0.0 && view.seconds.len() > 1 {
            LEFT + secs / span * (RIGHT - LEFT)
        } else {
            LEFT
        }
    };
    x_axis(&mut o, view, &xsc, &x);

    bands_svg(&mut o, view, &bands, &y);
    peaks_svg(&mut o, view, &x);
    legend_svg(&mut o, view, &bands);
    o.push_str("</svg>\n");
    o
}

/// The vertical axis's lines and ticks, from `ys`; `y` places a number of bytes.
fn y_axis(o: &mut String, ys: &Scale, y: &dyn Fn(f64) -> f64) {
    o.push_str(r##"<g class="axis y" stroke="#e0e0e0">"##);
    o.push('\n');
    let mut v = 0.0;
    while v <= ys.top * (1.0 + 1e-9) {
        let at = y(v * ys.unit);
        let _ = writeln!(
            o,
            r##"<line x1="{LEFT}" x2="{RIGHT}" y1="{at:.2}" y2="{at:.2}"/><text class="ytick" x="{:.2}" y="{:.2}" text-anchor="end" stroke="none" fill="#333">{} {}</text>"##,
            LEFT - 6.0,
            at + 4.0,
            tick_text(v, ys.step),
            ys.name
        );
        v += ys.step;
    }
    o.push_str("</g>\n");
}

/// The horizontal axis's ticks, from `xsc`, and its title; `x` places a time in seconds.
fn x_axis(o: &mut String, view: &View, xsc: &Scale, x: &dyn Fn(f64) -> f64) {
    o.push_str(r##"<g class="axis x" fill="#333">"##);
    o.push('\n');
    let mut t = 0.0;
    while t <= xsc.top * (1.0 + 1e-9) && view.seconds.len() > 1 {
        let at = x(t * xsc.unit);
        let _ = writeln!(
            o,
            r##"<line x1="{at:.2}" x2="{at:.2}" y1="{BOTTOM}" y2="{:.2}" stroke="#333"/><text class="xtick" x="{at:.2}" y="{:.2}" text-anchor="middle">{} {}</text>"##,
            BOTTOM + 5.0,
            BOTTOM + 18.0,
            tick_text(t, xsc.step),
            xsc.name
        );
        t += xsc.step;
    }
    let _ = writeln!(
        o,
        r##"<line x1="{LEFT}" x2="{RIGHT}" y1="{BOTTOM}" y2="{BOTTOM}" stroke="#333"/><text x="{:.2}" y="{:.2}" text-anchor="middle">time since the first profile</text>"##,
        (LEFT + RIGHT) / 2.0,
        BOTTOM + 34.0
    );
    o.push_str("</g>\n");
}

/// The bands, each stacked on the ones before it; `y` places a number of bytes.
fn bands_svg(o: &mut String, view: &View, bands: &[&Band], y: &dyn Fn(f64) -> f64) {
    let px = xs(view);
    let n = px.len();
    let mut base = vec![0i64; n];
    o.push_str("<g class=\"bands\">\n");
    for (rank, band) in bands.iter().enumerate() {
        let values = at_points(&band.bytes, n);
        let mut points = String::new();
        for i in 0..n {
            let _ = write!(points, "{:.2},{:.2} ", px[i], y((base[i] + values[i]) as f64));
        }
        for i in (0..n).rev() {
            let _ = write!(points, "{:.2},{:.2} ", px[i], y(base[i] as f64));
        }
        for i in 0..n {
            base[i] += values[i];
        }
        let _ = writeln!(
            o,
            r##"<polygon class="band" data-rank="{}" fill="{}" stroke="#ffffff" stroke-width="0.5" points="{}"><title>{}</title></polygon>"##,
            rank + 1,
            colour(band, rank),
            points.trim_end(),
            markup(&hover(view, band))
        );
    }
    o.push_str("</g>\n");
}

/// The profiles written at new peaks; the highest of them stands out and says so. `x` places a
/// time in seconds.
fn peaks_svg(o: &mut String, view: &View, x: &dyn Fn(f64) -> f64) {
    let pts = &view.series.points;
    let highest = (0..pts.len())
        .filter(|&i| pts[i].peak)
        .max_by_key(|&i| (pts[i].live_bytes, std::cmp::Reverse(i)));
    o.push_str("<g class=\"peaks\">\n");
    for (i, p) in pts.iter().enumerate().filter(|(_, p)| p.peak) {
        let at = x(view.seconds[i]);
        let top = Some(i) == highest;
        let title = format!(
            "profile at a new peak, {}: {} live ({} bytes) at {} ({})",
            p.name,
            size_short(p.live_bytes.max(0) as u64),
            thousands(p.live_bytes.max(0) as u64),
            when(view, i),
            wall(view, i)
        );
        let _ = writeln!(
            o,
            r##"<line class="{}" x1="{at:.2}" x2="{at:.2}" y1="{TOP}" y2="{BOTTOM}" stroke="{}" stroke-width="{}" stroke-dasharray="{}"><title>{}</title></line>"##,
            if top { "peak highest" } else { "peak" },
            if top { "#b00020" } else { "#555555" },
            if top { 1.5 } else { 1.0 },
            if top { "6 3" } else { "2 3" },
            markup(&title)
        );
        if top {
            let _ = writeln!(
                o,
                r##"<text class="peak-label" x="{:.2}" y="{:.2}" fill="#b00020">peak {}</text>"##,
                at + 4.0,
                TOP + 12.0,
                size_short(p.live_bytes.max(0) as u64)
            );
        }
    }
    o.push_str("</g>\n");
}

/// The legend, highest peak first, each entry with its whole stack on hover.
fn legend_svg(o: &mut String, view: &View, bands: &[&Band]) {
    o.push_str("<g class=\"legend\">\n");
    for (rank, band) in bands.iter().enumerate() {
        let top = LEGEND + LINE * rank as f64;
        let _ = writeln!(
            o,
            r##"<g class="entry" data-rank="{}"><title>{}</title><rect x="{LEFT}" y="{:.2}" width="14" height="14" fill="{}"/><text class="label" x="{:.2}" y="{:.2}">{}</text><text class="value" x="{RIGHT}" y="{:.2}" text-anchor="end" fill="#333">{}</text></g>"##,
            rank + 1,
            markup(&hover(view, band)),
            top,
            colour(band, rank),
            LEFT + 20.0,
            top + 11.5,
            markup(&legend_name(view, band, rank)),
            top + 11.5,
            markup(&peak_text(view, band))
        );
    }
    if bands.is_empty() {
        let _ = writeln!(
            o,
            r##"<text class="empty" x="{LEFT}" y="{:.2}">no live blocks in any profile</text>"##,
            LEGEND + 11.5
        );
    }
    o.push_str("</g>\n");
}

/// A legend entry's name: its rank and label, or how many stacks "other" sums.
fn legend_name(view: &View, band: &Band, rank: usize) -> String {
    match band.track {
        Some(_) => format!("{}. {}", rank + 1, band.label),
        None => format!("other ({} stacks)", view.others),
    }
}

/// "peak 4.8 MiB at 2.4 s, last 3.1 MiB".
fn peak_text(view: &View, band: &Band) -> String {
    let (peak, at) =
        band.bytes.iter().enumerate().fold(
            (0i64, 0usize),
            |best, (i, &b)| if b > best.0 { (b, i) } else { best },
        );
    format!(
        "peak {} at {}, last {}",
        size_short(peak.max(0) as u64),
        when(view, at),
        size_short(band.bytes.last().copied().unwrap_or(0).max(0) as u64)
    )
}

/// What hovering over a band or its legend entry shows: the label, the peak, every frame.
fn hover(view: &View, band: &Band) -> String {
    let mut s = format!("{}: {}", band.label, peak_text(view, band));
    match band.track {
        Some(t) => {
            for l in &t.lines {
                s.push('\n');
                s.push_str(l);
            }
        }
        None => {
            let _ = write!(s, "\nthe other {} stacks, summed", view.others);
        }
    }
    s
}

/// A rate as the tables give it: a whole number, in thousands.
fn per_s(v: f64) -> String {
    thousands(v.round().max(0.0) as u64)
}

/// One self-contained page: the chart, a table of its stacks with their whole stacks, and the
/// profiles it was drawn from.
pub fn html(view: &View) -> String {
    let mut o = String::new();
    let title = format!("dmem timeline: {}", view.series.source);
    let _ = writeln!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>",
        markup(&title)
    );
    o.push_str(
        "<style>\nbody{font-family:sans-serif;margin:16px 24px;color:#222}\n\
         h1{font-size:20px}h2{font-size:16px;margin-top:24px}\n\
         table{border-collapse:collapse;font-size:13px}\n\
         th,td{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right;vertical-align:top}\n\
         th{background:#f3f3f3}td.stack,th.stack,td.file{text-align:left}\n\
         .swatch{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:-1px}\n\
         td.spark{font-family:monospace;text-align:left;white-space:pre}\n\
         details pre{margin:4px 0 0 18px;font-size:12px}\nsummary{cursor:pointer}\n\
         </style>\n</head>\n<body>\n",
    );
    let _ = writeln!(
        o,
        "<h1>Live heap by allocation stack</h1>\n<p class=\"subtitle\">{}</p>",
        markup(&subtitle(view))
    );
    o.push_str(&svg(view));

    stacks_table(&mut o, view);
    allocating_table(&mut o, view);

    o.push_str(
        "<h2>Profiles</h2>\n<table class=\"profiles\">\n<thead><tr><th>time (UTC)</th><th>since the first</th>\
         <th>live bytes</th><th>live blocks</th><th>at a new peak</th><th class=\"stack\">file</th></tr></thead>\n<tbody>\n",
    );
    for (i, p) in view.series.points.iter().enumerate() {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"file\">{}</td></tr>",
            wall(view, i),
            when(view, i),
            thousands(p.live_bytes.max(0) as u64),
            thousands(p.live_blocks.max(0) as u64),
            if p.peak { "peak" } else { "" },
            markup(&p.name)
        );
    }
    o.push_str("</tbody>\n</table>\n</body>\n</html>\n");
    o
}

/// The page's table of stacks, each with its whole stack, its peak and its line over time.
fn stacks_table(o: &mut String, view: &View) {
    // Rates where the process counted its allocations (`count-allocs`).
    let counted = view.bands.iter().any(|b| b.rates.is_some());
    let _ = write!(
        o,
        "<h2>Stacks</h2>\n<table class=\"stacks\">\n<thead><tr><th>#</th><th class=\"stack\">stack (innermost frame of the program; open for every frame)</th>\
         <th>peak</th><th>at</th><th>first</th><th>last</th>{}<th class=\"stack\">over time</th></tr></thead>\n<tbody>\n",
        if counted {
            "<th>allocations per second</th><th>temporary per second</th>"
        } else {
            ""
        }
    );
    for (rank, band) in view.stacked().enumerate() {
        let (peak, at) =
            band.bytes.iter().enumerate().fold(
                (0i64, 0usize),
                |best, (i, &b)| if b > best.0 { (b, i) } else { best },
            );
        let frames = match band.track {
            Some(t) => t.lines.join("\n"),
            None => format!("the other {} stacks, summed", view.others),
        };
        let line: Vec<u64> = band.bytes.iter().map(|&b| b.max(0) as u64).collect();
        let rates = match (counted, band.rates) {
            (false, _) => String::new(),
            (true, Some(r)) => format!(
                "<td>{}</td><td>{}</td>",
                per_s(r.allocs_per_s),
                per_s(r.temporary_per_s)
            ),
            (true, None) => "<td></td><td></td>".to_owned(),
        };
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td class=\"stack\"><details><summary><span class=\"swatch\" style=\"background:{}\"></span>{}</summary><pre>{}</pre></details></td>\
             <td title=\"{} bytes\">{}</td><td>{}</td><td>{}</td><td>{}</td>{rates}<td class=\"spark\">{}</td></tr>",
            if band.track.is_some() { (rank + 1).to_string() } else { String::new() },
            colour(band, rank),
            markup(&band.label),
            markup(&frames),
            thousands(peak.max(0) as u64),
            size_short(peak.max(0) as u64),
            when(view, at),
            size_short(band.bytes.first().copied().unwrap_or(0).max(0) as u64),
            size_short(band.bytes.last().copied().unwrap_or(0).max(0) as u64),
            sparkline(&line)
        );
    }
    o.push_str("</tbody>\n</table>\n");
}

/// The page's table of the stacks that allocated most, where the process counted them.
fn allocating_table(o: &mut String, view: &View) {
    if !view.allocating.is_empty() {
        o.push_str(
            "<h2>Stacks that allocated most</h2>\n<p>Counted by the library (<code>DMEM_OPTS=count-allocs</code>) between the first and the last profile. A temporary allocation is a block its thread freed before it allocated again.</p>\n\
             <table class=\"allocating\">\n<thead><tr><th class=\"stack\">stack</th><th>allocations</th><th>per second</th><th>temporary</th><th>per second</th></tr></thead>\n<tbody>\n",
        );
        for a in &view.allocating {
            let _ = writeln!(
                o,
                "<tr><td class=\"stack\"><details><summary>{}</summary><pre>{}</pre></details></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                markup(&a.label),
                markup(&a.track.lines.join("\n")),
                thousands(a.rates.allocs.max(0) as u64),
                per_s(a.rates.allocs_per_s),
                thousands(a.rates.temporary.max(0) as u64),
                per_s(a.rates.temporary_per_s)
            );
        }
        o.push_str("</tbody>\n</table>\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::series::tests::three_phases;

    #[test]
    fn steps_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_step(10.0, 5.0), 2.0);
        assert_eq!(nice_step(7.0, 5.0), 2.0);
        assert_eq!(nice_step(0.9, 8.0), 0.2);
        assert_eq!(nice_step(400.0, 8.0), 50.0);
        assert_eq!(tick_text(1.5, 0.5), "1.5");
        assert_eq!(tick_text(4.0, 2.0), "4");
        let s = byte_scale(6_700_000);
        assert_eq!((s.name, s.step, s.top), ("MiB", 2.0, 8.0));
        assert_eq!(time_scale(600.0).name, "min");
    }

    #[test]
    fn the_chart_is_one_band_per_stack_in_the_legend_order() {
        let series = three_phases();
        let view = series.view(2);
        let svg = svg(&view);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert_eq!(
            svg.matches("<polygon class=\"band\"").count(),
            3,
            "two stacks and other"
        );
        assert_eq!(svg.matches("<g class=\"entry\"").count(), 3);
        let first = svg.find("1. grow (prog.c:12)").unwrap();
        let second = svg.find("2. bump (prog.c:12)").unwrap();
        assert!(first < second && svg[second..].contains("other (2 stacks)"));
        assert_eq!(svg.matches("class=\"peak highest\"").count(), 1);
        // The hover of a legend entry holds every frame.
        assert!(svg.contains("strdup (strdup.c:40) in libc.so.6"), "{svg}");
    }

    #[test]
    fn the_page_holds_the_chart_and_escapes_what_it_quotes() {
        let mut series = three_phases();
        series.source = "pid 1 (<a&b>)".into();
        let page = html(&series.view(10));
        assert!(page.contains("<svg xmlns"));
        assert!(page.contains("pid 1 (&lt;a&amp;b&gt;)"));
        assert!(!page.contains("<script"), "no script");
        assert!(
            !page.contains("http://") || page.matches("http://").count() == 1,
            "only the SVG namespace"
        );
        assert_eq!(
            page.matches("<tr><td>").count(),
            4 + 5,
            "four stacks and five profiles"
        );
        assert_eq!(markup("a\u{1}b"), "a\\x01b");
    }
}
