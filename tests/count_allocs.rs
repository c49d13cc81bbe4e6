//! The per-stack counts (`DMEM_OPTS=count-allocs`) end to end: `c-fixtures/count_allocs.c` makes
//! allocations of known numbers and shapes from known functions, and the counts read from its
//! core must be exactly those, in `dmem snapshot`'s JSON, in its pprof profile (decoded by
//! Google's protobuf for Python, and read by Go's own `go tool pprof`), and interval by interval
//! in `dmem top` of the running process. Without the option nothing is counted and the profile
//! is as before.

mod common;
#[path = "common/live.rs"]
mod live;
#[path = "common/pprof.rs"]
mod pprof;

use common::run::run_ok;
use common::{dmem, fixture, lib_path, make_core, scratch_dir, text};
use live::start;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The fixture's numbers (c-fixtures/count_allocs.c).
const TEMPS: i64 = 20000;
const KEPT: i64 = 3000;
const PAIRS: i64 = 5000;
const THREAD_TEMPS: i64 = 7000;

/// The innermost function of a stack as `dmem snapshot --format json` and `dmem top --json`
/// list it.
fn function(stack: &Value) -> &str {
    stack["frames"][0]["function"].as_str().unwrap_or("")
}

/// A core of the fixture run with `opts`, and its program.
fn core(name: &str, opts: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = scratch_dir(name);
    let prog = fixture("count_allocs");
    let core = make_core(&dir, &prog, &[], opts, &lib_path());
    (prog, core)
}

fn snapshot_json(prog: &Path, core: &Path) -> Value {
    let out = run_ok(
        dmem()
            .arg("snapshot")
            .arg(prog)
            .arg(core)
            .args(["-o", "-", "--format", "json"]),
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn a_core_holds_the_exact_counts_of_every_stack() {
    let (prog, core) = core("count-allocs-core", "abort-shutdown,count-allocs");
    let snap = snapshot_json(&prog, &core);
    let stacks = snap["stacks"].as_array().unwrap();
    let by = |name: &str| {
        let found: Vec<&Value> = stacks.iter().filter(|s| function(s) == name).collect();
        assert_eq!(found.len(), 1, "one stack of {name}: {found:#?}");
        found[0]
    };
    let i = |s: &Value, k: &str| s[k].as_i64().unwrap_or_else(|| panic!("{k} in {s}"));
    // (function, allocations, bytes each, temporary, live blocks at exit)
    let want = [
        ("temp_alloc", TEMPS, 64, TEMPS, 0),
        ("keep_alloc", KEPT, 128, 0, KEPT),
        ("pair_alloc", 2 * PAIRS, 32, PAIRS, 0),
        ("thread_alloc", THREAD_TEMPS, 48, THREAD_TEMPS, 0),
    ];
    for (name, allocs, size, temporary, live) in want {
        let s = by(name);
        assert_eq!(
            (
                i(s, "allocs"),
                i(s, "alloc_bytes"),
                i(s, "temporary_allocs"),
                i(s, "blocks")
            ),
            (allocs, allocs * size, temporary, live),
            "{name}: {s}"
        );
    }

    // The same counts in the pprof profile, as Go's heap profiles carry them, decoded by an
    // independent reader.
    let file = core.with_extension("pb.gz");
    run_ok(dmem().arg("snapshot").arg(&prog).arg(&core).arg("-o").arg(&file));
    if let Some(py) = pprof::protobuf_python() {
        let p = pprof::decode(&py, &file);
        let types: Vec<&str> = p["sample_type"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| pprof::string(&p, &t["type"]))
            .collect();
        assert_eq!(
            types,
            [
                "alloc_objects",
                "alloc_space",
                "inuse_objects",
                "inuse_space",
                "temporary_objects"
            ]
        );
        assert_eq!(pprof::string(&p, &p["default_sample_type"]), "inuse_space");
        for (name, allocs, size, temporary, live) in want {
            let s = p["stacks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["frames"][0]["lines"][0]["function"] == name)
                .unwrap_or_else(|| panic!("no sample of {name}"));
            let v: Vec<i64> = s["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            assert_eq!(v, [allocs, allocs * size, live, live * size, temporary], "{name}");
        }
    }
    // Go's own pprof reads the allocation sample types.
    if common::have_tool("go") {
        let home = scratch_dir("count-allocs-go-home");
        let out = run_ok(
            Command::new("go")
                .args(["tool", "pprof", "-top", "-sample_index=alloc_objects"])
                .arg(&file)
                .env("HOME", &home)
                .env("PPROF_TMPDIR", &home)
                .env("GOCACHE", home.join("cache")),
        );
        let top = text(&out.stdout);
        let flat = |name: &str| -> i64 {
            let line = top
                .lines()
                .find(|l| l.split_whitespace().last() == Some(name))
                .unwrap_or_else(|| panic!("{name} not in go tool pprof's top:\n{top}"));
            line.split_whitespace().next().unwrap().parse().unwrap()
        };
        assert_eq!(flat("temp_alloc"), TEMPS, "{top}");
        assert_eq!(flat("pair_alloc"), 2 * PAIRS, "{top}");
    }
}

#[test]
fn without_the_option_nothing_is_counted() {
    let (prog, core) = core("count-allocs-off", "abort-shutdown");
    let snap = snapshot_json(&prog, &core);
    let stacks = snap["stacks"].as_array().unwrap();
    assert!(stacks.iter().all(|s| s.get("allocs").is_none()), "{snap}");
    // Only stacks that hold live blocks: the temporary ones are gone.
    assert!(stacks.iter().all(|s| s["blocks"].as_i64().unwrap() > 0), "{snap}");
    assert!(stacks.iter().any(|s| function(s) == "keep_alloc"));
    assert!(!stacks.iter().any(|s| function(s) == "temp_alloc"));
}

/// Three samples of `dmem top PID --json`, half a second apart.
fn top_samples(pid: i32) -> Vec<Value> {
    let out = run_ok(dmem().args([
        "top",
        &pid.to_string(),
        "--interval",
        "0.5",
        "--count",
        "3",
        "--json",
    ]));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn top_shows_each_interval_s_allocations_counted_exactly() {
    let target = start("count_allocs", &["live", "60"]);
    let samples = top_samples(target.pid);
    assert_eq!(samples.len(), 3);
    // The process runs without count-allocs (nor a history): no interval's allocations.
    assert!(
        samples.iter().all(|s| s.get("temporary").is_none()),
        "{samples:?}"
    );
    drop(target);
    let target = live::start_with_opts("count_allocs", "count-allocs", &["live", "60"]);
    let samples = top_samples(target.pid);
    assert!(
        samples[0].get("temporary").is_none(),
        "the first sample only starts the interval"
    );
    for s in &samples[1..] {
        let t = s["temporary"].as_array().expect("the interval's allocations");
        let by = |name: &str| {
            t.iter()
                .find(|x| function(x) == name)
                .unwrap_or_else(|| panic!("no {name} in {s}"))
        };
        let u = |x: &Value, k: &str| x[k].as_u64().unwrap_or_else(|| panic!("{k} in {x}"));
        let temp = by("temp_alloc");
        let (allocs, temporary, frees) = (u(temp, "allocs"), u(temp, "temporary"), u(temp, "frees"));
        // Every block of temp_alloc is freed before the next allocation, so it never holds more
        // than one: its frees are its allocations, and so are its temporary ones, give or take
        // the one in flight at either end of the interval, however long the reads took.
        assert!(allocs > 0, "{temp}");
        assert!(allocs.abs_diff(temporary) <= 1, "{temp}");
        assert!(allocs.abs_diff(frees) <= 1, "{temp}");
        assert!(
            temp.get("freed_in_interval").is_none(),
            "counted, not from the history"
        );
        // The kept blocks were all allocated before the first sample.
        assert!(!t.iter().any(|x| function(x) == "keep_alloc"), "{s}");
    }
    // The steady stack is there all along, with its live blocks.
    let last = &samples[2]["stacks"];
    let keep = last
        .as_array()
        .unwrap()
        .iter()
        .find(|x| function(x) == "keep_alloc")
        .expect("keep_alloc");
    assert_eq!(keep["blocks"].as_u64(), Some(KEPT as u64));
}

/// `dmem record` of a counting process writes the allocation sample types, and `dmem timeline`
/// turns them into each stack's allocations over the recording: exactly the difference of the
/// last and first profiles' counts, read here with protobuf.
#[test]
fn the_timeline_gives_each_stack_s_allocations_from_the_profiles() {
    let target = live::start_with_opts("count_allocs", "count-allocs", &["live", "2"]);
    let dir = scratch_dir("count-allocs-record");
    run_ok(
        dmem()
            .args(["record", &target.pid.to_string(), "--every", "0.3", "-o"])
            .arg(&dir),
    );
    let out = run_ok(dmem().arg("timeline").arg(&dir).arg("--json"));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let busiest = &doc["allocating"][0];
    assert_eq!(function(busiest), "temp_alloc", "{doc}");
    let u = |k: &str| busiest[k].as_i64().unwrap_or_else(|| panic!("{k} in {busiest}"));
    assert!(
        u("allocs") > 0 && u("allocs").abs_diff(u("temporary")) <= 1,
        "{busiest}"
    );
    let Some(py) = pprof::protobuf_python() else {
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    let allocs = |file: &Path| -> i64 {
        let p = pprof::decode(&py, file);
        let c = pprof::column(&p, "alloc_objects").expect("alloc_objects");
        p["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["frames"][0]["lines"][0]["function"] == "temp_alloc")
            .map(|s| s["values"][c].as_i64().unwrap())
            .sum()
    };
    let (first, last) = (allocs(&files[0]), allocs(&files[files.len() - 1]));
    assert_eq!(u("allocs"), last - first, "{busiest}");
}
