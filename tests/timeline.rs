//! `dmem timeline` and `dmem record --timeline` on a real recording: `c-fixtures/timeline_phases.c`
//! runs preloaded with one stack that grows, one that grows then shrinks and one that holds
//! steady, recorded every 0.2 s with profiles at each new peak. The SVG is parsed as XML and
//! its geometry checked against what the fixture did (its own clock says when the heap turned)
//! and against the profiles decoded by an independent decoder (Google's protobuf for Python);
//! the JSON series must add up to the profiles' totals; and the HTML page is opened in headless
//! Chromium, whose DOM and screenshot must show the legend.

mod common;
#[path = "common/live.rs"]
mod live;
#[path = "common/pprof.rs"]
mod pprof;

use common::run::run_ok;
use common::{dmem, scratch_dir, text};
use live::start;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// One recording of the fixture, shared by the tests of this file.
struct Recording {
    dir: PathBuf,
    /// The profiles `dmem record` wrote, by name (so in time order).
    profiles: Vec<PathBuf>,
    /// When the fixture turned from growing to shrinking (Unix seconds, its own clock).
    turn: f64,
    /// The chart `dmem record --timeline` kept drawn.
    live_chart: PathBuf,
}

fn recording() -> &'static Recording {
    static ONCE: OnceLock<Recording> = OnceLock::new();
    ONCE.get_or_init(|| {
        let dir = scratch_dir("timeline");
        let profiles_dir = dir.join("profiles");
        let live_chart = dir.join("live.html");
        let target = start("timeline_phases", &["1200"]);
        let out = run_ok(
            dmem()
                .args([
                    "record",
                    &target.pid.to_string(),
                    "--every",
                    "0.2",
                    "--at-peak",
                    "5",
                ])
                .arg("-o")
                .arg(&profiles_dir)
                .arg("--timeline")
                .arg(&live_chart),
        );
        let err = text(&out.stderr);
        assert!(err.starts_with("dmem record: the process ended: "), "{err}");
        let (status, said) = target.finish();
        assert!(status.success(), "{said}");
        let turn = said
            .lines()
            .find_map(|l| l.strip_prefix("turn "))
            .unwrap_or_else(|| panic!("the fixture never turned: {said}"))
            .parse()
            .unwrap();
        let mut profiles: Vec<PathBuf> = std::fs::read_dir(&profiles_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        profiles.sort();
        assert!(profiles.len() >= 8, "{profiles:?}");
        Recording {
            dir,
            profiles,
            turn,
            live_chart,
        }
    })
}

/// An XML element: its name, attributes, its own text (entities resolved) and its children.
#[derive(Debug, Default)]
struct Node {
    name: String,
    attrs: HashMap<String, String>,
    text: String,
    children: Vec<Node>,
}

impl Node {
    fn attr(&self, name: &str) -> &str {
        self.attrs.get(name).map_or("", String::as_str)
    }

    fn has_class(&self, class: &str) -> bool {
        self.attr("class").split(' ').any(|c| c == class)
    }

    /// Every element below this one (itself included) for which `pick` holds, in document order.
    fn all<'a>(&'a self, pick: &dyn Fn(&Node) -> bool, out: &mut Vec<&'a Node>) {
        if pick(self) {
            out.push(self);
        }
        for c in &self.children {
            c.all(pick, out);
        }
    }

    fn find_all(&self, pick: &dyn Fn(&Node) -> bool) -> Vec<&Node> {
        let mut out = Vec::new();
        self.all(pick, &mut out);
        out
    }

    /// The text of this element and all below it.
    fn deep_text(&self) -> String {
        let mut s = self.text.clone();
        for c in &self.children {
            s.push_str(&c.deep_text());
        }
        s
    }

    /// The text of a `<title>` child, the hover text.
    fn title(&self) -> String {
        self.children
            .iter()
            .find(|c| c.name == "title")
            .map(|c| c.deep_text())
            .unwrap_or_default()
    }
}

/// Parses an XML document with quick-xml, failing the test on anything not well-formed.
fn parse_xml(xml: &str) -> Node {
    use quick_xml::events::{BytesStart, Event};
    let element = |e: &BytesStart| Node {
        name: String::from_utf8_lossy(e.name().as_ref()).into_owned(),
        attrs: e
            .attributes()
            .map(|a| {
                let a = a.expect("a well-formed attribute");
                let value = a
                    .normalized_value(quick_xml::XmlVersion::Implicit1_0)
                    .expect("an attribute value")
                    .into_owned();
                (String::from_utf8_lossy(a.key.as_ref()).into_owned(), value)
            })
            .collect(),
        ..Node::default()
    };
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut stack = vec![Node::default()];
    loop {
        match reader.read_event() {
            Err(e) => panic!("not well-formed XML at {}: {e}", reader.buffer_position()),
            Ok(Event::Eof) => break,
            Ok(Event::Start(e)) => stack.push(element(&e)),
            Ok(Event::Empty(e)) => {
                let node = element(&e);
                stack.last_mut().unwrap().children.push(node);
            }
            Ok(Event::End(_)) => {
                let node = stack.pop().unwrap();
                stack.last_mut().expect("balanced tags").children.push(node);
            }
            Ok(Event::Text(t)) => {
                let s = t.decode().expect("text");
                stack.last_mut().unwrap().text.push_str(&s);
            }
            Ok(Event::GeneralRef(r)) => {
                let name = r.decode().expect("an entity");
                let c = match &*name {
                    "amp" => "&",
                    "lt" => "<",
                    "gt" => ">",
                    "quot" => "\"",
                    "apos" | "#39" => "'",
                    other => panic!("an entity XML does not define: &{other};"),
                };
                stack.last_mut().unwrap().text.push_str(c);
            }
            Ok(_) => {}
        }
    }
    assert_eq!(stack.len(), 1, "unclosed elements");
    stack.pop().unwrap()
}

/// A polygon's points.
fn points(polygon: &Node) -> Vec<(f64, f64)> {
    polygon
        .attr("points")
        .split_whitespace()
        .map(|p| {
            let (x, y) = p.split_once(',').expect("x,y");
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

/// A band's x positions and its thickness at each (the top edge runs left to right, the bottom
/// edge back), in pixels.
fn thickness(polygon: &Node) -> Vec<(f64, f64)> {
    let p = points(polygon);
    let n = p.len() / 2;
    assert_eq!(p.len(), 2 * n, "a band has a top and a bottom edge");
    (0..n)
        .map(|i| {
            let (top, bottom) = (p[i], p[2 * n - 1 - i]);
            assert!((top.0 - bottom.0).abs() < 1e-6, "edges at the same x");
            (top.0, bottom.1 - top.1)
        })
        .collect()
}

/// The legend's entries as (label, hover text), in order.
fn legend(svg: &Node) -> Vec<(String, String)> {
    svg.find_all(&|n| n.name == "g" && n.has_class("entry"))
        .iter()
        .map(|e| {
            let label = e
                .find_all(&|n| n.name == "text" && n.has_class("label"))
                .first()
                .map(|t| t.deep_text())
                .unwrap_or_default();
            (label, e.title())
        })
        .collect()
}

#[test]
fn the_svg_shows_the_three_shapes_in_order_of_peak_and_the_peak_when_it_was() {
    let Some(py) = pprof::protobuf_python() else {
        return;
    };
    let rec = recording();
    let out_svg = rec.dir.join("chart.svg");
    run_ok(
        dmem()
            .arg("timeline")
            .arg(rec.dir.join("profiles"))
            .arg("-o")
            .arg(&out_svg),
    );
    let svg = parse_xml(&std::fs::read_to_string(&out_svg).unwrap());
    let root = &svg.children[0];
    assert_eq!(root.name, "svg");

    // The legend: the three stacks, biggest peak first, each named by its own function and the
    // line that allocates, with its whole stack (down to main) on hover.
    let entries = legend(root);
    let want = [
        (
            "grow_forever",
            common::source_line("c-fixtures/timeline_phases.c", "ALLOC(forever[*n])"),
        ),
        (
            "grow_then_shrink",
            common::source_line("c-fixtures/timeline_phases.c", "ALLOC(bump[*n])"),
        ),
        (
            "hold_steady",
            common::source_line("c-fixtures/timeline_phases.c", "ALLOC(steady[i])"),
        ),
    ];
    for (rank, (function, line)) in want.iter().enumerate() {
        let (label, hover) = &entries[rank];
        assert_eq!(
            label,
            &format!("{}. {function} (timeline_phases.c:{line})", rank + 1),
            "{entries:#?}"
        );
        assert!(
            hover.contains("main ") && hover.contains("in timeline_phases"),
            "{hover}"
        );
    }

    // The profiles decoded independently: their times, in order, and which were at peaks.
    let decoded: Vec<(f64, i64, bool)> = rec
        .profiles
        .iter()
        .map(|p| {
            let d = pprof::decode(&py, p);
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (
                d["time_nanos"].as_i64().unwrap() as f64 / 1e9,
                pprof::total(&d, "inuse_space"),
                name.ends_with(".peak.pb.gz"),
            )
        })
        .collect();
    let mut times: Vec<f64> = decoded.iter().map(|d| d.0).collect();
    times.sort_by(f64::total_cmp);

    let bands = root.find_all(&|n| n.name == "polygon" && n.has_class("band"));
    let band = |rank: usize| {
        bands
            .iter()
            .find(|b| b.attr("data-rank") == rank.to_string())
            .unwrap_or_else(|| panic!("no band of rank {rank}"))
    };
    let grow = thickness(band(1));
    // One vertex per profile, placed by its time: x is affine in the profile's time.
    assert_eq!(grow.len(), times.len());
    let (x0, xn) = (grow[0].0, grow[grow.len() - 1].0);
    let (t0, tn) = (times[0], times[times.len() - 1]);
    let time_at = |x: f64| t0 + (x - x0) / (xn - x0) * (tn - t0);
    for (i, &(x, _)) in grow.iter().enumerate() {
        assert!(
            (time_at(x) - times[i]).abs() < 0.01,
            "profile {i} drawn at {:.3}, taken at {:.3}",
            time_at(x),
            times[i]
        );
    }
    // The growing stack's band only ever thickens (to the 0.01 px the coordinates carry), and
    // by the end it is many times what it was.
    for w in grow.windows(2) {
        assert!(w[1].1 >= w[0].1 - 0.011, "grow_forever's band thins: {grow:?}");
    }
    assert!(grow[grow.len() - 1].1 > 4.0 * grow[0].1.max(1.0), "{grow:?}");
    // The one that grows and shrinks is thickest at the turn, and ends thinner than that.
    let bump = thickness(band(2));
    let thickest = bump
        .iter()
        .copied()
        .fold((0.0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
    assert!((time_at(thickest.0) - rec.turn).abs() < 0.5, "{bump:?}");
    assert!(bump[bump.len() - 1].1 < thickest.1 / 2.0, "{bump:?}");
    // The steady one holds its thickness from its first profile to its last.
    let steady = thickness(band(3));
    assert!(
        steady.iter().all(|s| (s.1 - steady[0].1).abs() < 0.05),
        "{steady:?}"
    );

    // The peak profiles are marked; the highest at the turn, where the heap held the most.
    let peaks = root.find_all(&|n| n.name == "line" && n.has_class("peak"));
    let at_peaks = decoded.iter().filter(|d| d.2).count();
    assert!(at_peaks >= 2, "{decoded:?}");
    assert_eq!(peaks.len(), at_peaks);
    let highest: Vec<_> = peaks.iter().filter(|p| p.has_class("highest")).collect();
    assert_eq!(highest.len(), 1);
    let x: f64 = highest[0].attr("x1").parse().unwrap();
    let t = time_at(x);
    assert!(
        (t - rec.turn).abs() < 0.35,
        "the highest peak is marked at {t:.3}, the fixture turned at {:.3}",
        rec.turn
    );
    let most = decoded.iter().filter(|d| d.2).map(|d| d.1).max().unwrap();
    let marked = decoded
        .iter()
        .find(|d| (d.0 - t).abs() < 0.001)
        .expect("a profile at the mark");
    assert!(
        marked.2 && marked.1 == most,
        "{marked:?}, the highest peak profile held {most}"
    );
    assert!(
        highest[0].title().contains(".peak.pb.gz"),
        "{}",
        highest[0].title()
    );
}

#[test]
fn the_json_series_equals_the_profiles_totals() {
    let Some(py) = pprof::protobuf_python() else {
        return;
    };
    let rec = recording();
    let out = run_ok(dmem().arg("timeline").arg(rec.dir.join("profiles")).arg("--json"));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let profiles = doc["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), rec.profiles.len());
    let stacks = doc["stacks"].as_array().unwrap();
    let functions: Vec<&str> = stacks
        .iter()
        .take(3)
        .map(|s| s["frames"][0]["function"].as_str().unwrap())
        .collect();
    assert_eq!(functions, ["grow_forever", "grow_then_shrink", "hold_steady"]);
    for (i, p) in rec.profiles.iter().enumerate() {
        let d = pprof::decode(&py, p);
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let j = &profiles[i];
        assert_eq!(j["file"], name.as_str(), "the profiles in time order");
        assert_eq!(j["peak"], name.ends_with(".peak.pb.gz"));
        let t = d["time_nanos"].as_i64().unwrap() as f64 / 1e9;
        assert!((j["time"].as_f64().unwrap() - t).abs() < 0.001, "{j}");
        let bytes = pprof::total(&d, "inuse_space");
        let blocks = pprof::total(&d, "inuse_objects");
        assert_eq!(j["live_bytes"].as_i64().unwrap(), bytes, "{name}");
        assert_eq!(j["live_blocks"].as_i64().unwrap(), blocks, "{name}");
        let sum = |key: &str| -> i64 {
            stacks.iter().map(|s| s[key][i].as_i64().unwrap()).sum::<i64>()
                + doc["other"][key][i].as_i64().unwrap()
        };
        assert_eq!((sum("bytes"), sum("blocks")), (bytes, blocks), "{name}");
    }
}

/// Headless Chromium, as the tests run it: no sandbox (root in a container), no network of its
/// own, a profile directory of its own.
fn chromium(dir: &Path, args: &[&str], page: &Path) -> Option<Output> {
    let exe = ["chromium", "chromium-browser"]
        .iter()
        .find_map(|c| common::which(c));
    let Some(exe) = exe else {
        common::missing("chromium (Debian's chromium package)");
        return None;
    };
    let profile = dir.join(format!("chromium-profile-{}", args.len()));
    let _ = std::fs::remove_dir_all(&profile);
    let mut cmd = Command::new(exe);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(args)
    .arg(format!("file://{}", page.display()));
    Some(run_ok(&mut cmd))
}

#[test]
fn the_html_page_opens_in_chromium_and_shows_the_legend() {
    let rec = recording();
    let page = rec.dir.join("page.html");
    run_ok(
        dmem()
            .arg("timeline")
            .arg(rec.dir.join("profiles"))
            .args(["--format", "html", "-o"])
            .arg(&page),
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("href="));
    // The chart `dmem record --timeline` drew after its last profile holds every profile.
    let live = std::fs::read_to_string(&rec.live_chart).unwrap();
    let rows = |h: &str| {
        h.split("<table class=\"profiles\">")
            .nth(1)
            .unwrap()
            .matches("<tr><td>")
            .count()
    };
    assert_eq!(rows(&live), rec.profiles.len());
    assert_eq!(rows(&html), rec.profiles.len());

    let Some(dom) = chromium(&rec.dir, &["--dump-dom"], &page) else {
        return;
    };
    let dom = text(&dom.stdout);
    for function in ["1. grow_forever", "2. grow_then_shrink", "3. hold_steady"] {
        assert!(
            dom.contains(function),
            "{function} is not in the page Chromium loaded"
        );
    }
    // The screenshot shows the chart: each of the three bands' colours covers a good area.
    let shot = rec.dir.join("page.png");
    let _ = std::fs::remove_file(&shot);
    chromium(
        &rec.dir,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1100,1000",
        ],
        &page,
    );
    // The page is HTML, not XML; the chart inside it is XML.
    let (from, to) = (
        html.find("<svg").unwrap(),
        html.find("</svg>").unwrap() + "</svg>".len(),
    );
    let colours = legend_colours(&parse_xml(&html[from..to]));
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&shot).expect("a screenshot"),
    ));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a size")];
    let info = reader.next_frame(&mut buf).expect("its pixels");
    assert_eq!((info.width, info.height), (1100, 1000));
    let step = info.color_type.samples();
    let mut counts = vec![0usize; colours.len()];
    for px in buf[..info.buffer_size()].chunks(step) {
        for (k, c) in colours.iter().enumerate() {
            if (px[0], px[1], px[2]) == *c {
                counts[k] += 1;
            }
        }
    }
    for (k, &n) in counts.iter().take(3).enumerate() {
        assert!(
            n > 2000,
            "the colour of stack {} covers {n} pixels: {counts:?}",
            k + 1
        );
    }
}

/// The fill colours of the legend's swatches, in order.
fn legend_colours(svg: &Node) -> Vec<(u8, u8, u8)> {
    svg.find_all(&|n| n.name == "g" && n.has_class("entry"))
        .iter()
        .map(|e| {
            let rect = e.find_all(&|n| n.name == "rect")[0];
            let hex = rect.attr("fill").trim_start_matches('#');
            let v = u32::from_str_radix(hex, 16).expect("a #rrggbb colour");
            ((v >> 16) as u8, (v >> 8) as u8, v as u8)
        })
        .collect()
}
