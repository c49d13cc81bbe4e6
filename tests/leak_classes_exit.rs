//! The exit report's leak classes against valgrind's on the same binaries: each leakclass
//! fixture runs bare under `valgrind --leak-check=full --show-leak-kinds=all` and preloaded with
//! `DMEM_OPTS=leak-report,leak-show=all`, and the two LEAK SUMMARYs must agree class by class, in
//! blocks always and in bytes where the fixture makes no allocation inside libc (glibc's block
//! for a thread's dtv is 16 bytes larger under libdmem, whose own TLS adds a module). Also:
//! a thread that blocks the stop signal neither hangs the exit nor goes unnamed, a thread blocked
//! in read() is stopped and its stack scanned, `leak-show` picks the listed classes and
//! `leak-exitcode` counts possibly lost blocks as leaks.

mod common;
use common::run;
#[path = "common/valgrind.rs"]
mod valgrind;

use common::{backends, dmem, fixture, have_tool, lib_path, make_core, output, scratch_dir, text};
use run::{run_limited, status_text, with_dmem, LIMIT};
use std::path::Path;
use valgrind::{numbers, report_summary, Summary, CLASSES};

struct Case {
    name: &'static str,
    args: &'static [&'static str],
    /// Classes whose bytes include an allocation made inside libc (a thread's dtv), so only
    /// their block counts are compared.
    libc_bytes: &'static [&'static str],
    /// What valgrind must say, in blocks per class: checks that the fixture still builds the
    /// heap it describes, so a broken fixture cannot make the comparison vacuous.
    intended: [u64; 4],
}

const DTV: &[&str] = &["possibly lost"];

const fn case(
    name: &'static str,
    args: &'static [&'static str],
    libc_bytes: &'static [&'static str],
    intended: [u64; 4],
) -> Case {
    Case {
        name,
        args,
        libc_bytes,
        intended,
    }
}

const CASES: &[Case] = &[
    case("leakclass_lists", &[], &[], [501, 999, 0, 1000]),
    case("leakclass_cycle", &[], &[], [2, 4, 0, 4]),
    case("leakclass_interior", &[], &[], [0, 0, 20, 1]),
    case("leakclass_thread", &[], DTV, [0, 0, 1, 300]),
    case("leakclass_tls", &[], DTV, [5, 0, 1, 5]),
    case("leakclass_tls", &["worker-exits"], DTV, [5, 0, 1, 5]),
    case("leakclass_cxx", &[], &[], [1, 31, 0, 22]),
    // 18 blocks held only through pointers memcheck's four heuristics accept.
    case("leakclass_heuristics", &[], &[], [0, 0, 2, 22]),
    case("leakclass_blocked", &[], DTV, [0, 0, 1, 50]),
    // A worker blocked in read() holds a block on its stack; the main thread one in its TLS.
    case("leak_threads", &[], DTV, [0, 0, 1, 2]),
    // A lost list's head left in the dead frames that glibc's exit path is laid over.
    case("leakclass_exit", &[], &[], [1, 9, 0, 0]),
];

/// One preloaded run: its exit report and the run's stdout.
struct Run {
    report: String,
    stdout: String,
}

fn run_report(case: &Case, test: &str, opts: &str, backend: Option<&Path>) -> Run {
    let dir = scratch_dir(test);
    let file = dir.join("report.txt");
    let opts = format!("leak-report,report-file={},{opts}", file.display());
    let out = run_limited(
        &mut with_dmem(fixture(case.name), case.args, &opts, backend),
        LIMIT,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} {:?} under libdmem: {}\n{stderr}",
        case.name,
        case.args,
        status_text(&out.status)
    );
    let report = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: no report at {}: {e}\n{stderr}", case.name, file.display()));
    Run {
        report,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// One record of the report: class, blocks, bytes and its frames' text.
struct Record {
    class: String,
    blocks: u64,
    bytes: u64,
    frames: Vec<String>,
}

fn records(report: &str) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::new();
    for line in report.lines() {
        if line.starts_with("    #") {
            out.last_mut()
                .expect("a frame before any record")
                .frames
                .push(line.trim().to_owned());
        } else if let Some(class) = CLASSES.iter().find(|c| line.contains(&format!(" {c}, e.g. "))) {
            let n = numbers(line.split(" e.g.").next().unwrap());
            out.push(Record {
                class: class.to_string(),
                blocks: n[1],
                bytes: n[0],
                frames: Vec::new(),
            });
        }
    }
    out
}

/// What differs between valgrind's summary and the report's, or None.
fn compare(case: &Case, want: &Summary, got: &Summary) -> Option<String> {
    let mut why = Vec::new();
    for (i, class) in CLASSES.iter().enumerate() {
        if want[i].0 != got[i].0 {
            why.push(format!("{class}: {} blocks, valgrind {}", got[i].0, want[i].0));
        } else if want[i].1 != got[i].1 && !case.libc_bytes.contains(class) {
            why.push(format!("{class}: {} bytes, valgrind {}", got[i].1, want[i].1));
        }
    }
    (!why.is_empty()).then(|| format!("{} {:?}: {}", case.name, case.args, why.join("; ")))
}

fn valgrind_summaries() -> Vec<Summary> {
    CASES
        .iter()
        .map(|case| {
            let sum = valgrind::summary(&fixture(case.name), case.args);
            let blocks = sum.map(|c| c.0);
            assert_eq!(
                blocks, case.intended,
                "valgrind's counts for {} {:?} are not what the fixture sets out to build",
                case.name, case.args
            );
            sum
        })
        .collect()
}

#[test]
fn every_fixture_matches_valgrind_class_by_class() {
    if !have_tool("valgrind") {
        return;
    }
    let mut failures = Vec::new();
    for (case, want) in CASES.iter().zip(valgrind_summaries()) {
        let run = run_report(case, "leak_classes_exit", "leak-show=all", None);
        let got = report_summary(&run.report);
        failures.extend(compare(case, &want, &got));
        // Every block is listed once under leak-show=all: the records add up to the summary.
        let recs = records(&run.report);
        for (i, class) in CLASSES.iter().enumerate() {
            let listed: (u64, u64) = recs
                .iter()
                .filter(|r| r.class == *class)
                .fold((0, 0), |a, r| (a.0 + r.blocks, a.1 + r.bytes));
            if listed != got[i] {
                failures.push(format!(
                    "{}: {class} records add up to {listed:?}, summary {:?}",
                    case.name, got[i]
                ));
            }
        }
        // Only the fixture whose worker blocks every signal has a thread that cannot stop.
        let unstopped = run.report.contains("could not be stopped");
        if unstopped != (case.name == "leakclass_blocked") {
            failures.push(format!("{}: unexpected stop notes:\n{}", case.name, run.report));
        }
    }
    assert!(
        failures.is_empty(),
        "the exit report disagrees with valgrind:\n  {}",
        failures.join("\n  ")
    );
}

#[test]
fn backends_give_the_same_classes() {
    if !have_tool("valgrind") {
        return;
    }
    let wants = valgrind_summaries();
    let mut failures = Vec::new();
    for (backend, path) in backends() {
        for (case, want) in CASES.iter().zip(&wants) {
            let run = run_report(
                case,
                &format!("leak_classes_{backend}"),
                "leak-show=all",
                Some(&path),
            );
            // tcmalloc allocates a few blocks for itself through malloc at start-up and keeps
            // them only in its own data, which is left out of the roots as the allocator's
            // state: they come out definitely lost. They are the backend's, not the fixture's,
            // so they are taken off before comparing.
            // Frames name objects by the file mapped, as the kernel does (libtcmalloc.so.4 is
            // a link to libtcmalloc.so.4.5.10).
            let real = std::fs::canonicalize(&path).unwrap_or(path.clone());
            let own = format!(" in {}", real.file_name().unwrap().to_string_lossy());
            let mut got = report_summary(&run.report);
            for r in records(&run.report) {
                if r.frames.first().is_some_and(|f| f.ends_with(&own)) {
                    let i = CLASSES.iter().position(|c| *c == r.class).unwrap();
                    got[i].0 -= r.blocks;
                    got[i].1 -= r.bytes;
                }
            }
            failures.extend(compare(case, want, &got).map(|f| format!("{backend}: {f}")));
        }
    }
    assert!(
        failures.is_empty(),
        "with a backend, the exit report disagrees with valgrind:\n  {}",
        failures.join("\n  ")
    );
}

#[test]
fn a_thread_blocking_the_stop_signal_is_named_and_its_stack_scanned() {
    let case = CASES.iter().find(|c| c.name == "leakclass_blocked").unwrap();
    // run_limited fails the run by a time limit should the exit hang waiting for the thread.
    let run = run_report(case, "leak_classes_blocked", "leak-show=all", None);
    let tid = run
        .stdout
        .strip_prefix("worker ")
        .map(str::trim)
        .unwrap_or_else(|| panic!("the fixture did not name its worker: {:?}", run.stdout));
    let note = format!("dmem: thread {tid} could not be stopped; its stack is scanned as it is");
    assert!(
        run.report.lines().any(|l| l == note),
        "want {note:?} in:\n{}",
        run.report
    );
    // Its 50 blocks are found on its stack, read as it is.
    let sum = report_summary(&run.report);
    assert_eq!(sum[3], (50, 2000), "{}", run.report);
    assert_eq!(sum[0].0 + sum[1].0, 0, "{}", run.report);
}

#[test]
fn a_thread_blocked_in_read_is_stopped_and_its_stack_scanned() {
    let case = CASES.iter().find(|c| c.name == "leak_threads").unwrap();
    let run = run_report(case, "leak_classes_read", "leak-show=all", None);
    assert!(!run.report.contains("could not be stopped"), "{}", run.report);
    let sum = report_summary(&run.report);
    // The worker's block (48 bytes) is held only on its stack, the main thread's (32) only in
    // its TLS: both still reachable, nothing lost but the dtv.
    assert_eq!(sum[3], (2, 80), "{}", run.report);
    assert_eq!(sum[0].0 + sum[1].0, 0, "{}", run.report);
}

/// Under count-allocs libdmem keeps each thread's newest block in its own area of the thread's
/// static TLS, which is libdmem's memory, no root (see `analysis::roots`): a worker's block
/// whose only pointer it dropped is definitely lost, as valgrind says, not held by that area.
#[test]
fn a_threads_newest_block_is_not_held_by_libdmems_area() {
    let case = case("leakclass_newest", &[], DTV, [1, 0, 1, 0]);
    if have_tool("valgrind") {
        let want = valgrind::summary(&fixture(case.name), case.args).map(|c| c.0);
        assert_eq!(want, case.intended, "valgrind's counts for leakclass_newest");
    }
    let run = run_report(&case, "leak_classes_newest", "count-allocs", None);
    let sum = report_summary(&run.report);
    assert_eq!(sum[0], (1, 64), "{}", run.report);
    assert_eq!(sum[3].0, 0, "{}", run.report);
    // A core of the same run reads the same: the launcher leaves the area out by the offset the
    // descriptor gives.
    let dir = scratch_dir("leak_classes_newest_core");
    let prog = fixture(case.name);
    let core = make_core(&dir, &prog, &[], "abort-shutdown,count-allocs", &lib_path());
    let out = output(dmem().arg("leaks").arg(&prog).arg(&core));
    let total = text(&out.stdout);
    let total = total
        .lines()
        .find(|l| l.starts_with("total: "))
        .unwrap_or_default();
    assert!(
        total.contains("definitely lost: 64 bytes in 1 block;") && total.contains("still reachable: 0 bytes"),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn threads_busy_allocating_at_exit_are_stopped_and_nothing_is_lost() {
    let case = case("leakclass_busy", &[], DTV, [0; 4]);
    for round in 0..5 {
        let run = run_report(&case, "leak_classes_busy", "", None);
        let sum = report_summary(&run.report);
        let lost = (sum[0].0, sum[1].0);
        assert_eq!(lost, (0, 0), "round {round}: blocks lost:\n{}", run.report);
        // The eight workers' blocks are found (most of their 64 slots are full by now).
        assert!(
            sum[3].0 >= 8 * 32,
            "round {round}: too few reachable:\n{}",
            run.report
        );
        assert!(!run.report.contains("could not be stopped"), "{}", run.report);
    }
}

#[test]
fn leak_show_lists_only_the_classes_asked_for() {
    let case = CASES.iter().find(|c| c.name == "leakclass_cycle").unwrap();
    let listed = |opts: &str| {
        let run = run_report(case, "leak_classes_show", opts, None);
        let mut classes: Vec<String> = records(&run.report).into_iter().map(|r| r.class).collect();
        classes.dedup();
        (classes, report_summary(&run.report), run.report)
    };
    // valgrind 3.19's default, --show-leak-kinds=definite,possible: the cycle's indirectly lost
    // blocks are counted, not listed.
    let (default, sum, report) = listed("");
    assert_eq!(default, ["definitely lost"], "{report}");
    assert!(
        report.contains(
            "dmem: not listed: indirectly lost, still reachable (show-leak-kinds=all lists every class)"
        ),
        "{report}"
    );
    // valgrind's spelling, commas and all, inside DMEM_OPTS's own commas.
    let (commas, _, report) = listed("show-leak-kinds=definite,indirect,no-signal-report");
    assert_eq!(commas, ["definitely lost", "indirectly lost"], "{report}");
    assert!(!report.contains("ignoring"), "{report}");
    let (none, _, report) = listed("show-leak-kinds=none");
    assert!(none.is_empty(), "{report}");
    // The summary gives all four counts whatever is listed.
    let (only, sum2, report) = listed("leak-show=reachable+definite");
    assert_eq!(only, ["definitely lost", "still reachable"], "{report}");
    assert_eq!(sum, sum2);
    let (only, _, report) = listed("leak-show=indirect");
    assert_eq!(only, ["indirectly lost"], "{report}");
}

#[test]
fn bad_leak_show_is_one_warning_and_the_default_stays() {
    let case = CASES.iter().find(|c| c.name == "leakclass_cycle").unwrap();
    let mut cmd = with_dmem(fixture(case.name), &[], "leak-show=definite+lots", None);
    let out = run_limited(&mut cmd, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("leak-show=definite+lots"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("ignoring unknown or malformed option"),
        "{stderr}"
    );
    assert!(out.status.success(), "{}", status_text(&out.status));
}

#[test]
fn leak_exitcode_counts_possibly_lost_blocks() {
    // leakclass_interior loses nothing for certain: its 20 blocks are possibly lost.
    let case = CASES.iter().find(|c| c.name == "leakclass_interior").unwrap();
    let dir = scratch_dir("leak_classes_exitcode");
    let opts = format!(
        "leak-report,leak-exitcode=23,report-file={}",
        dir.join("r.txt").display()
    );
    let out = run_limited(&mut with_dmem(fixture(case.name), &[], &opts, None), LIMIT);
    assert_eq!(out.status.code(), Some(23), "{}", status_text(&out.status));
}

#[test]
fn leak_exitcode_counts_the_classes_errors_for_leak_kinds_names() {
    // leakclass_cycle loses blocks definitely and indirectly, and holds reachable ones; as
    // valgrind's --error-exitcode, only the classes --errors-for-leak-kinds names fail the run.
    let case = CASES.iter().find(|c| c.name == "leakclass_cycle").unwrap();
    let dir = scratch_dir("leak_classes_errors_for");
    let status = |kinds: &str| {
        let opts = format!(
            "leak-report,leak-exitcode=23,{kinds}report-file={}",
            dir.join("r.txt").display()
        );
        let out = run_limited(&mut with_dmem(fixture(case.name), &[], &opts, None), LIMIT);
        out.status.code()
    };
    assert_eq!(status(""), Some(23), "definite by default");
    assert_eq!(status("errors-for-leak-kinds=possible,"), Some(0));
    assert_eq!(status("errors-for-leak-kinds=none,"), Some(0));
    assert_eq!(status("errors-for-leak-kinds=possible,indirect,"), Some(23));
    assert_eq!(status("errors-for-leak-kinds=reachable,"), Some(23));
}

/// Blocks and bytes per heuristic, by name, from valgrind's "of which reachable via heuristic"
/// lines or the report's one line, each `NAME: B bytes in N blocks`.
fn per_heuristic(lines: impl Iterator<Item = String>) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for part in lines {
        let Some((name, counts)) = part.split_once(':') else {
            continue;
        };
        let name = name.trim().to_owned();
        let n = numbers(counts);
        if ["stdstring", "length64", "newarray", "multipleinheritance"].contains(&name.as_str())
            && n.len() == 2
        {
            out.push((name, n[1], n[0]));
        }
    }
    out.sort();
    out
}

/// valgrind with `--leak-check-heuristics=SET` on the fixture: its summary and counts per
/// heuristic.
fn valgrind_with_heuristics(prog: &Path, set: &str) -> (Summary, Vec<(String, u64, u64)>) {
    let mut cmd = std::process::Command::new("valgrind");
    cmd.args(["--leak-check=full", "--show-leak-kinds=all"])
        .arg(format!("--leak-check-heuristics={set}"))
        .arg(prog)
        .env_remove("LD_PRELOAD")
        .env_remove("DMEM_OPTS");
    let out = run_limited(&mut cmd, LIMIT);
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    let sum = valgrind::parse_summary(&text).unwrap_or_else(|| panic!("no leak summary:\n{text}"));
    let lines = text
        .lines()
        .map(|l| l.split_once("== ").map_or(l, |(_, r)| r).to_owned());
    (sum, per_heuristic(lines))
}

#[test]
fn each_heuristic_counts_as_valgrinds_and_can_be_switched_off() {
    if !have_tool("valgrind") {
        return;
    }
    let case = CASES.iter().find(|c| c.name == "leakclass_heuristics").unwrap();
    let prog = fixture(case.name);
    let mut failures = Vec::new();
    for set in [
        "all",
        "none",
        "stdstring,newarray",
        "length64,multipleinheritance",
    ] {
        let (want, want_each) = valgrind_with_heuristics(&prog, set);
        // DMEM_OPTS separates options with commas, and the heuristics with '+'.
        let opts = format!("leak-show=all,leak-heuristics={}", set.replace(',', "+"));
        let run = run_report(case, "leak_classes_heuristics", &opts, None);
        let got = report_summary(&run.report);
        failures.extend(compare(case, &want, &got).map(|w| format!("{set}: {w}")));
        let got_each = per_heuristic(
            run.report
                .lines()
                .filter_map(|l| l.strip_prefix("dmem: of which still reachable via heuristic: "))
                .flat_map(|l| l.split("; ").map(str::to_owned).collect::<Vec<_>>()),
        );
        if got_each != want_each {
            failures.push(format!(
                "{set}: per heuristic {got_each:?}, valgrind {want_each:?}"
            ));
        }
    }
    // The fixture reaches blocks through every heuristic, so the comparison says something.
    let (_, all) = valgrind_with_heuristics(&prog, "all");
    assert_eq!(all.len(), 4, "valgrind's heuristics on the fixture: {all:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The free history's rings are libdmem's own memory, mapped away from its data: their events
/// hold the addresses of blocks allocated and freed, which must not keep a block reachable.
#[test]
fn the_free_history_keeps_nothing_reachable() {
    if !have_tool("valgrind") {
        return;
    }
    let case = &CASES[0];
    let want = valgrind::summary(&fixture(case.name), case.args);
    let run = run_report(case, "leak_classes_history", "history=4096,history-allocs", None);
    let got = report_summary(&run.report);
    assert_eq!(compare(case, &want, &got), None, "{}", run.report);
}
