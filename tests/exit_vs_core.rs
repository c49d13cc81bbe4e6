//! The exit report and `dmem leaks` on a core of the same run must tell the same leaks, record
//! for record: each program runs once under libdmem with `leak-report` (as valgrind's XML, every
//! class listed, with generated suppressions, which carry the mangled names) and
//! `abort-shutdown`, and the launcher reads the core that run left. The two documents are
//! compared loss record by loss record: class, blocks, bytes (indirect ones too), every frame of
//! the stack (address, object, function, directory, file, line), and the suppression's frames.
//! Only what belongs to the run and not to the leaks (preamble, process, record numbering) is
//! left out. The programs: a C one at -O2 with a C function named `f` and allocations through
//! inlined callers, a C++ one with templates, constructors and new[] at -O2, and two older
//! fixtures (one at -O0, one with template names in its frames). A running process too: a
//! program that has made its leaks and waits is read with `dmem leaks PID`, then let go to
//! exit under `leak-report`, and the two documents compared the same way.

mod common;

use common::{dmem, fixture, lib_path, make_core, output, scratch_dir, text, COMMAND_LIMIT};
use quick_xml::events::Event;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// One loss record: its leaf elements in document order, as (path under `<error>`, text).
type Record = Vec<(String, String)>;

/// The loss records of a valgrind XML document, in the order written, each without its
/// `<unique>` number and with its text's "in loss record N of M" cut off (both number the
/// records of one document).
fn records(xml: &str) -> Vec<Record> {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut out = Vec::new();
    let mut path: Vec<String> = Vec::new();
    let mut current: Option<Record> = None;
    // The text of the element being read, its pieces and references put together.
    let mut value = String::new();
    loop {
        let event = reader
            .read_event()
            .unwrap_or_else(|e| panic!("not well formed at {}: {e}\n{xml}", reader.buffer_position()));
        match event {
            Event::Start(e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                if name == "error" {
                    current = Some(Vec::new());
                    path.clear();
                } else if current.is_some() {
                    path.push(name);
                }
                value.clear();
            }
            Event::End(e) => {
                let Some(rec) = current.as_mut() else {
                    continue;
                };
                if e.name().as_ref() == b"error" {
                    out.extend(current.take());
                    continue;
                }
                let v = value.trim();
                let last = path.last().map(String::as_str);
                if !v.is_empty() && last != Some("unique") {
                    let v = match v.find(" in loss record ") {
                        Some(i) if last == Some("text") => &v[..i],
                        _ => v,
                    };
                    rec.push((path.join("/"), v.to_owned()));
                }
                value.clear();
                path.pop();
            }
            Event::Text(t) => value.push_str(&String::from_utf8_lossy(t.as_ref())),
            Event::CData(t) => value.push_str(&String::from_utf8_lossy(t.as_ref())),
            Event::GeneralRef(r) => {
                if let Ok(Some(c)) = r.resolve_char_ref() {
                    value.push(c);
                    continue;
                }
                let name = String::from_utf8_lossy(r.as_ref()).into_owned();
                value.push_str(match name.as_str() {
                    "lt" => "<",
                    "gt" => ">",
                    "amp" => "&",
                    "quot" => "\"",
                    "apos" => "'",
                    other => panic!("an entity XML does not define: &{other};"),
                });
            }
            Event::Eof => break,
            _ => {}
        }
    }
    out
}

/// A record as lines, for a readable difference.
fn show(r: &Record) -> String {
    r.iter().map(|(k, v)| format!("  {k}: {v}\n")).collect()
}

/// The values of `tag` (a path's last part) in a record.
fn values<'r>(r: &'r Record, tag: &'r str) -> impl Iterator<Item = &'r str> + 'r {
    r.iter()
        .filter(move |(k, _)| k.rsplit('/').next() == Some(tag))
        .map(|(_, v)| v.as_str())
}

/// The exit report's option and the launcher's arguments for `show-leak-kinds=kinds`, or
/// nothing for each side's default.
fn kinds_args(kinds: Option<&str>) -> (String, Vec<String>) {
    match kinds {
        Some(k) => (
            format!("show-leak-kinds={k},"),
            vec![format!("--show-leak-kinds={k}")],
        ),
        None => (String::new(), Vec::new()),
    }
}

/// Runs `name` once, and returns its exit report's records and the launcher's records from the
/// core of that run, both listing `kinds` (None: each one's default).
fn both(name: &str, kinds: Option<&str>) -> (Vec<Record>, Vec<Record>) {
    let dir = scratch_dir(&format!("exit_vs_core_{name}_{}", kinds.unwrap_or("default")));
    let prog = fixture(name);
    let exit_xml = dir.join("exit.xml");
    let (opt, args) = kinds_args(kinds);
    let opts = format!(
        "leak-report,{opt}gen-suppressions,report-format=xml,report-file={},abort-shutdown",
        exit_xml.display()
    );
    let core = make_core(&dir, &prog, &[], &opts, &lib_path());
    let at_exit = std::fs::read_to_string(&exit_xml).expect("the exit report's file");
    let from_core = leaks_xml(&[prog.as_os_str(), core.as_os_str()], &args);
    std::fs::write(dir.join("core.xml"), &from_core).unwrap();
    (records(&at_exit), records(&from_core))
}

/// `dmem leaks SOURCE... ARGS` as valgrind's XML with generated suppressions and every record,
/// which must succeed: the document it prints.
fn leaks_xml(source: &[&std::ffi::OsStr], args: &[String]) -> String {
    let out = output(dmem().arg("leaks").args(source).args(args).args([
        "--gen-suppressions",
        "--limit",
        "0",
        "--format",
        "xml",
    ]));
    assert!(out.status.success(), "dmem leaks: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Asserts the two reports hold the same records, the first difference shown whole.
fn assert_same(name: &str, at_exit: &[Record], from_core: &[Record]) {
    let mut a = at_exit.to_vec();
    let mut b = from_core.to_vec();
    a.sort();
    b.sort();
    for (x, y) in a.iter().zip(&b) {
        assert!(
            x == y,
            "{name}: a loss record differs\nat exit:\n{}from the core:\n{}",
            show(x),
            show(y)
        );
    }
    assert_eq!(
        a.len(),
        b.len(),
        "{name}: {} records at exit, {} from the core\nat exit:\n{}\nfrom the core:\n{}",
        a.len(),
        b.len(),
        a.iter().map(show).collect::<Vec<_>>().join("--\n"),
        b.iter().map(show).collect::<Vec<_>>().join("--\n")
    );
}

/// A stack as its frames' lines, without the exit report's `#N 0xPC` before each.
type Lines = Vec<String>;

/// The exit report's loss records of one stack: (class, blocks, bytes).
type ExitRecords = Vec<(String, u64, u64)>;

/// `dmem leaks`' row of one stack: bytes, blocks, and the blocks of each class.
type Row = (u64, u64, Vec<(String, u64)>);

/// The exit report's text: its summary (after `leak summary: `) and, for each stack, its loss
/// records as (class, blocks, bytes).
fn exit_text(report: &str) -> (String, BTreeMap<Lines, ExitRecords>) {
    let summary = report
        .lines()
        .find_map(|l| l.strip_prefix("dmem: leak summary: "))
        .unwrap_or_else(|| panic!("no summary in:\n{report}"))
        .to_owned();
    let mut out: BTreeMap<Lines, ExitRecords> = BTreeMap::new();
    for rec in report.split("\n\n").skip(1) {
        let mut lines = rec.lines();
        let head = lines.next().unwrap();
        // `N bytes in M blocks are CLASS, e.g. 0x..., allocated at:`
        let words: Vec<&str> = head.split(' ').collect();
        let class = head
            .split_once(if words[5] == "is" { " is " } else { " are " })
            .and_then(|(_, rest)| rest.split_once(", e.g."))
            .map(|(c, _)| c.to_owned())
            .unwrap_or_else(|| panic!("a record's first line: {head}"));
        let stack: Lines = lines
            .map(|l| {
                let l = l.trim_start();
                assert!(l.starts_with('#'), "a frame line: {l}");
                l.splitn(3, ' ').nth(2).unwrap().to_owned()
            })
            .collect();
        out.entry(stack)
            .or_default()
            .push((class, words[3].parse().unwrap(), words[0].parse().unwrap()));
    }
    for v in out.values_mut() {
        v.sort();
    }
    (summary, out)
}

/// `dmem leaks`' text: its total (after `total: `) and, for each stack, its blocks and bytes and
/// the blocks of each class.
fn launcher_text(report: &str) -> (String, BTreeMap<Lines, Row>) {
    let mut out = BTreeMap::new();
    let mut summary = None;
    let mut current: Option<(Row, Lines)> = None;
    let finish = |cur: &mut Option<_>, out: &mut BTreeMap<_, _>| {
        if let Some((counts, stack)) = cur.take() {
            out.insert(stack, counts);
        }
    };
    for l in report.lines() {
        if let Some(t) = l.strip_prefix("total: ") {
            summary = Some(t.to_owned());
        } else if let Some(frame) = l.strip_prefix("    ") {
            current
                .as_mut()
                .expect("a frame after a stack's line")
                .1
                .push(frame.to_owned());
        } else if l.starts_with("stack ") {
            finish(&mut current, &mut out);
            // `stack K: B bytes in N blocks (n1 CLASS, n2 CLASS), e.g. ...`
            let words: Vec<&str> = l.split(' ').collect();
            let parts = l.split_once(" (").unwrap().1.split_once("), e.g.").unwrap().0;
            let mut classes: Vec<(String, u64)> = parts
                .split(", ")
                .map(|p| {
                    let (n, c) = p.split_once(' ').unwrap();
                    (c.to_owned(), n.parse().unwrap())
                })
                .collect();
            classes.sort();
            current = Some((
                (words[2].parse().unwrap(), words[5].parse().unwrap(), classes),
                Vec::new(),
            ));
        }
    }
    finish(&mut current, &mut out);
    (summary.unwrap_or_else(|| panic!("no total in:\n{report}")), out)
}

/// Runs `name` once more, with the text report, and compares it with `dmem leaks`' text on the
/// core of that run: the summary, and every stack's lines, classes, blocks and bytes, both
/// listing `kinds` (None: each one's default).
fn same_text(name: &str, kinds: Option<&str>) {
    let dir = scratch_dir(&format!(
        "exit_vs_core_text_{name}_{}",
        kinds.unwrap_or("default")
    ));
    let prog = fixture(name);
    let exit_txt = dir.join("exit.txt");
    let (opt, args) = kinds_args(kinds);
    let opts = format!(
        "leak-report,{opt}report-file={},abort-shutdown",
        exit_txt.display()
    );
    let core = make_core(&dir, &prog, &[], &opts, &lib_path());
    let at_exit = std::fs::read_to_string(&exit_txt).expect("the exit report's file");
    let out = output(
        dmem()
            .arg("leaks")
            .arg(&prog)
            .arg(&core)
            .args(&args)
            .args(["--limit", "0"]),
    );
    assert!(out.status.success(), "dmem leaks: {}", text(&out.stderr));
    let from_core = text(&out.stdout);
    let (sum_a, a) = exit_text(&at_exit);
    let (sum_b, b) = launcher_text(&from_core);
    assert_eq!(sum_a, sum_b, "{name}: the summaries\n{at_exit}\n{from_core}");
    let stacks_a: Vec<&Lines> = a.keys().collect();
    let stacks_b: Vec<&Lines> = b.keys().collect();
    assert_eq!(stacks_a, stacks_b, "{name}: the stacks\n{at_exit}\n{from_core}");
    for (stack, records) in &a {
        let (bytes, blocks, classes) = &b[stack];
        let got: Vec<(String, u64)> = records.iter().map(|(c, n, _)| (c.clone(), *n)).collect();
        assert_eq!(&got, classes, "{name}: {stack:?}");
        assert_eq!(
            records.iter().map(|r| r.1).sum::<u64>(),
            *blocks,
            "{name}: {stack:?}"
        );
        assert_eq!(
            records.iter().map(|r| r.2).sum::<u64>(),
            *bytes,
            "{name}: {stack:?}"
        );
    }
}

/// The record of `kind` whose stack names `function`.
fn record_with<'r>(rs: &'r [Record], kind: &str, function: &str) -> &'r Record {
    rs.iter()
        .find(|r| values(r, "kind").any(|k| k == kind) && values(r, "fn").any(|f| f == function))
        .unwrap_or_else(|| {
            panic!(
                "no {kind} record through {function} in:\n{}",
                rs.iter().map(show).collect::<Vec<_>>().join("--\n")
            )
        })
}

#[test]
fn a_c_program_at_o2_with_a_function_named_f_and_inlined_callers() {
    let (at_exit, from_core) = both("exit_vs_core", Some("all"));
    assert_same("exit_vs_core", &at_exit, &from_core);
    // What the fixture leaves, so that the two cannot agree on nothing or on the same mistake.
    let src = "exit_vs_core.c";
    let f = record_with(&at_exit, "Leak_DefinitelyLost", "f");
    assert_eq!(values(f, "leakedblocks").collect::<Vec<_>>(), ["3"]);
    assert!(values(f, "fun").any(|s| s == "f"), "the symbol `f`:\n{}", show(f));
    // The inlined callers, innermost first, then the function they were inlined into.
    let inl = record_with(&at_exit, "Leak_DefinitelyLost", "inner_make");
    let names: Vec<&str> = values(inl, "fn").collect();
    let at = |n: &str| names.iter().position(|&x| x == n);
    assert!(
        at("inner_make") < at("outer_make") && at("outer_make") < at("main") && at("inner_make").is_some(),
        "{names:?}"
    );
    let lines: Vec<&str> = values(inl, "line").collect();
    let line = |needle: &str| common::source_line(&format!("c-fixtures/{src}"), needle).to_string();
    assert!(
        lines.contains(&line("return inner_make(n + 4);").as_str()),
        "{}",
        show(inl)
    );
    assert!(lines.contains(&line("outer_make(96)").as_str()), "{}", show(inl));
    assert_eq!(values(inl, "leakedblocks").collect::<Vec<_>>(), ["5"]);
    let list = record_with(&at_exit, "Leak_DefinitelyLost", "orphan_list");
    assert!(
        values(list, "text").any(|t| t.contains("indirect")),
        "{}",
        show(list)
    );
    record_with(&at_exit, "Leak_PossiblyLost", "inner_make");
    record_with(&at_exit, "Leak_StillReachable", "f");
    same_text("exit_vs_core", Some("all"));
}

#[test]
fn a_cpp_program_at_o2_with_templates_constructors_and_arrays() {
    let (at_exit, from_core) = both("exit_vs_core_cxx", Some("all"));
    assert_same("exit_vs_core_cxx", &at_exit, &from_core);
    let pool = record_with(
        &at_exit,
        "Leak_DefinitelyLost",
        "shop::Pool<shop::Item>::make(long)",
    );
    assert!(
        values(pool, "fn").any(|f| f == "shop::stock(int)"),
        "{}",
        show(pool)
    );
    assert!(
        values(pool, "fn").any(|f| f == "operator new(unsigned long)"),
        "{}",
        show(pool)
    );
    let array = record_with(&at_exit, "Leak_DefinitelyLost", "numbers");
    assert!(
        values(array, "fn").any(|f| f == "operator new[](unsigned long)"),
        "{}",
        show(array)
    );
    record_with(&at_exit, "Leak_IndirectlyLost", "shop::Widget::Widget(long)");
    record_with(&at_exit, "Leak_StillReachable", "shop::Widget::Widget(long)");
    same_text("exit_vs_core_cxx", Some("all"));
}

#[test]
fn older_fixtures_at_o0_and_with_template_names() {
    for name in ["leakclass_cycle", "leak_supp_tpl"] {
        let (at_exit, from_core) = both(name, Some("all"));
        assert!(!at_exit.is_empty(), "{name}: no records at exit");
        assert_same(name, &at_exit, &from_core);
        same_text(name, Some("all"));
    }
}

/// With no option on either side, both list what valgrind lists by default (definitely and
/// possibly lost) and agree record for record; the summaries still count every class. The
/// fixture leaves blocks of all four classes.
#[test]
fn by_default_both_list_what_valgrind_lists() {
    let (at_exit, from_core) = both("exit_vs_core", None);
    assert_same("exit_vs_core", &at_exit, &from_core);
    let kinds: std::collections::BTreeSet<&str> = at_exit.iter().flat_map(|r| values(r, "kind")).collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["Leak_DefinitelyLost", "Leak_PossiblyLost"],
        "the classes listed by default"
    );
    record_with(&at_exit, "Leak_DefinitelyLost", "orphan_list");
    same_text("exit_vs_core", None);
}

/// A child process killed when dropped, so that a failed test leaves nothing waiting.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A program read live, then at its exit: it makes its leaks, says "ready" and waits for its
/// standard input to end. `dmem leaks PID` reads it while it waits; then its input is
/// closed, it exits, and its exit report (every class, as valgrind's XML) must hold the same
/// records as the live one.
#[test]
fn a_running_process_and_its_exit_report() {
    let dir = scratch_dir("exit_vs_live");
    let prog = fixture("exit_vs_core");
    let exit_xml = dir.join("exit.xml");
    let opts = format!(
        "leak-report,show-leak-kinds=all,gen-suppressions,report-format=xml,report-file={}",
        exit_xml.display()
    );
    let mut child = Running(
        common::preloaded(&prog, &opts, None)
            .arg("wait")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the fixture"),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let ready = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the fixture said nothing for a minute");
    assert_eq!(ready.trim(), "ready");

    let pid = child.0.id().to_string();
    let live = leaks_xml(&[pid.as_ref()], &["--show-leak-kinds=all".to_owned()]);
    std::fs::write(dir.join("live.xml"), &live).unwrap();

    // Its input ends: it exits, writing its report.
    drop(child.0.stdin.take());
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().expect("wait") {
            break s;
        }
        assert!(t.elapsed() < COMMAND_LIMIT, "the fixture did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "the fixture: {status:?}");
    let at_exit = records(&std::fs::read_to_string(&exit_xml).expect("the exit report's file"));
    let from_live = records(&live);
    assert_same("exit_vs_core wait", &at_exit, &from_live);
    // What the fixture leaves, so that the two cannot agree on nothing or on the same mistake.
    let f = record_with(&at_exit, "Leak_DefinitelyLost", "f");
    assert_eq!(values(f, "leakedblocks").collect::<Vec<_>>(), ["3"]);
    let inl = record_with(&at_exit, "Leak_DefinitelyLost", "inner_make");
    assert_eq!(values(inl, "leakedblocks").collect::<Vec<_>>(), ["5"]);
    let list = record_with(&at_exit, "Leak_DefinitelyLost", "orphan_list");
    assert!(
        values(list, "text").any(|t| t.contains("indirect")),
        "{}",
        show(list)
    );
    record_with(&at_exit, "Leak_PossiblyLost", "inner_make");
    record_with(&at_exit, "Leak_StillReachable", "f");
}
