//! The free history (`DMEM_OPTS=history=N`, `src/history.rs`): who freed a block, when and
//! where, asked of a double free's message, of a core by the launcher and by gdb, and of a
//! running process; a ring that wrapped; the freeing thread gone before the core. The fixture's
//! freeing thread frees 5,000 other blocks after the victim, so a history of 10,000 per ring
//! still holds the victim's free and one of 16 does not.

mod common;
#[path = "common/gdb.rs"]
mod gdbrun;

use common::{dmem, fixture, lib_path, make_core, output, preloaded, scratch_dir, text};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Output, Stdio};

/// The victim's address from the fixture's first line, `victim 0x...`.
fn victim(stdout: &str) -> u64 {
    let line = stdout.lines().next().unwrap_or_default();
    let hex = line
        .strip_prefix("victim 0x")
        .unwrap_or_else(|| panic!("no victim line: {stdout:?}"));
    u64::from_str_radix(hex.trim(), 16).unwrap()
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "{:?}: {}", out.status, text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

/// Every event of a core's history, as `dmem history --json` gives them.
fn all_events(prog: &Path, core: &Path) -> Value {
    json(&output(
        dmem()
            .args(["history", "--json", "--limit", "0"])
            .arg(prog)
            .arg(core),
    ))
}

/// The function names of a JSON stack.
fn functions(stack: &Value) -> Vec<String> {
    stack
        .as_array()
        .unwrap_or_else(|| panic!("not a stack: {stack}"))
        .iter()
        .map(|f| f["function"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Checks what `whatis --json` says of an address 16 bytes into the victim: no live block, and
/// the freed block with the free's stack in `first_free` and the allocation in `make_victim`.
fn freed_victim(doc: &Value, addr: u64) {
    assert!(doc["block"].is_null(), "{doc}");
    let freed = &doc["freed"];
    assert_eq!(freed["kind"], "free", "{doc}");
    assert_eq!(freed["addr"], format!("{addr:#x}"), "{doc}");
    assert_eq!(freed["size"], 333, "{doc}");
    assert!(
        functions(&freed["free_stack"])
            .iter()
            .any(|f| f.contains("first_free")),
        "{doc}"
    );
    assert!(
        functions(&freed["alloc_stack"])
            .iter()
            .any(|f| f.contains("make_victim")),
        "{doc}"
    );
    assert_ne!(freed["tid"], freed["alloc_tid"], "freed on another thread: {doc}");
}

#[test]
fn a_double_free_names_the_first_free() {
    let out = output(preloaded(fixture("history_double"), "history=10000", None).arg("double"));
    let err = text(&out.stderr);
    assert!(!out.status.success(), "the double free was not caught:\n{err}");
    let line = err
        .lines()
        .find(|l| l.contains("double free of a 333-byte block"))
        .unwrap_or_else(|| panic!("no double-free line:\n{err}"));
    let (allocated, freed) = line
        .split_once("; first freed by thread ")
        .unwrap_or_else(|| panic!("the first free is not named: {line}"));
    assert!(allocated.contains("allocated at make_victim"), "{line}");
    assert!(freed.contains("first_free"), "{line}");
    assert!(freed.contains("freeing_thread"), "{line}");
    // Without a history the message says what it always said, and no more.
    let out = output(preloaded(fixture("history_double"), "", None).arg("double"));
    let err = text(&out.stderr);
    assert!(err.contains("double free of a 333-byte block"), "{err}");
    assert!(!err.contains("first freed"), "{err}");
}

#[test]
fn a_core_answers_who_freed_it_from_the_launcher_and_from_gdb() {
    let dir = scratch_dir("history_core");
    let prog = fixture("history_double");
    let core = make_core(
        &dir,
        &prog,
        &["exit"],
        "history=10000,abort-shutdown",
        &lib_path(),
    );
    // The victim is the one 333-byte block freed.
    let h = all_events(&prog, &core);
    let events = h["events"].as_array().unwrap();
    let first = events
        .iter()
        .find(|e| e["size"] == 333 && e["kind"] == "free")
        .unwrap_or_else(|| panic!("no free of the victim among {} events", events.len()));
    let addr = u64::from_str_radix(first["addr"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    // Newest first, and 5,000 other frees after it on the freeing thread.
    assert!(h["kept"].as_u64() > Some(5000), "{}", h["kept"]);
    let times: Vec<u64> = events
        .iter()
        .map(|e| e["before_newest_ns"].as_u64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "not newest first");

    let inside = format!("{:#x}", addr + 16);
    let w = json(&output(
        dmem()
            .args(["whatis", "--json"])
            .arg(&prog)
            .arg(&core)
            .arg(&inside),
    ));
    freed_victim(&w, addr);
    let t = output(dmem().arg("whatis").arg(&prog).arg(&core).arg(&inside));
    let said = text(&t.stdout);
    assert!(said.contains("16 bytes into the freed 333-byte block"), "{said}");
    assert!(said.contains("before the newest event, at:"), "{said}");

    let only = json(&output(
        dmem()
            .args(["history", "--json", "--addr", &inside])
            .arg(&prog)
            .arg(&core),
    ));
    assert_eq!(only["matched"], 1, "{only}");

    if !gdbrun::have_gdb() {
        common::missing("gdb");
        return;
    }
    let s = gdbrun::on_core(&dir, &prog, &core, &[&format!("dmem whatis --json {inside}")]);
    s.assert_no_traceback();
    let doc: Value =
        serde_json::from_str(s.out(0)).unwrap_or_else(|e| panic!("{e}: {}\n{}", s.stdout, s.stderr));
    freed_victim(&doc, addr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_running_process_answers_who_freed_it() {
    let mut child = preloaded(fixture("history_double"), "history=10000", None)
        .arg("wait")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut r = BufReader::new(child.stdout.take().unwrap());
    let (mut first, mut second) = (String::new(), String::new());
    r.read_line(&mut first).unwrap();
    r.read_line(&mut second).unwrap();
    assert_eq!(second.trim(), "waiting");
    let addr = victim(&first);
    let pid = child.id().to_string();
    let w = output(dmem().args(["whatis", "--json", &pid, &format!("{:#x}", addr + 16)]));
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    freed_victim(&json(&w), addr);
}

#[test]
fn a_ring_that_wrapped_keeps_the_newest_and_forgets_the_first_free() {
    let dir = scratch_dir("history_wrap");
    let prog = fixture("history_double");
    let core = make_core(
        &dir,
        &prog,
        &["exit", "100000"],
        "history=16,abort-shutdown",
        &lib_path(),
    );
    let h = all_events(&prog, &core);
    let (kept, recorded) = (h["kept"].as_u64().unwrap(), h["recorded"].as_u64().unwrap());
    assert_eq!(h["capacity"], 16, "{h}");
    assert!(
        recorded > 100_000 && kept <= 16 * h["rings"].as_u64().unwrap(),
        "{h}"
    );
    let events = h["events"].as_array().unwrap();
    assert!(
        !events.iter().any(|e| e["size"] == 333 && e["kind"] == "free"),
        "the victim's free should have been written over"
    );
    // The freeing thread's last frees are there, the newest first.
    assert!(
        events
            .iter()
            .take(16)
            .any(|e| functions(&e["free_stack"]).iter().any(|f| f.contains("churn"))),
        "{h}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_a_history_the_commands_say_how_to_get_one() {
    let dir = scratch_dir("history_off");
    let prog = fixture("history_double");
    let core = make_core(&dir, &prog, &["exit"], "abort-shutdown", &lib_path());
    let out = output(dmem().arg("history").arg(&prog).arg(&core));
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("kept no free history: run it with DMEM_OPTS=history=N"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn top_shows_the_temporary_allocations_of_each_interval() {
    let mut child = preloaded(fixture("top_storm"), "history=65536,history-allocs", None)
        .args(["20", "2"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut r = BufReader::new(child.stdout.take().unwrap());
    let mut ready = String::new();
    r.read_line(&mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");
    let pid = child.id().to_string();
    let out = output(dmem().args([
        "top",
        &pid,
        "--count",
        "2",
        "--interval",
        "1",
        "--limit",
        "3",
        "--json",
    ]));
    let _ = child.kill();
    let _ = child.wait();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let samples: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(samples.len(), 2);
    // The first sample only marks where the interval starts.
    assert!(samples[0].get("temporary").is_none());
    let temps = samples[1]["temporary"]
        .as_array()
        .expect("temporary allocations in the second sample");
    let storm = temps
        .iter()
        .find(|t| functions(&t["frames"]).iter().any(|f| f.contains("storm_alloc")))
        .unwrap_or_else(|| panic!("no stack of storm_alloc among {} stacks", temps.len()));
    let (allocs, freed) = (
        storm["allocs"].as_u64().unwrap(),
        storm["freed_in_interval"].as_u64().unwrap(),
    );
    assert!(
        allocs > 0 && freed <= allocs,
        "{allocs} allocations, {freed} freed"
    );
    // Blocks of the storm live for a fraction of a second: many die within the interval.
    assert!(freed > 0, "none of {allocs} freed within the interval");
}
