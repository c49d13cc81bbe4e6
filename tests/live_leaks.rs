//! `dmem leaks PID` on a process that keeps running: its threads stopped only while their
//! registers and its writable memory are copied, the pause it prints checked against the
//! process's own heartbeat (a thread that writes the clock every 2 ms), and no thread left
//! stopped or traced when dmem is interrupted by Ctrl-C or SIGTERM in the middle of the copy.

mod common;
#[path = "common/live.rs"]
mod live;
use common::run;

use common::dmem;
use live::{heartbeats, longest_gap, monotonic_ns, start, Target, LIMIT};
use run::run_limited;
use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The field `name` of /proc/PID/task/TID/status for every thread of `pid`.
fn task_fields(pid: i32, name: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).expect("task dir") {
        let t = t.unwrap().file_name().into_string().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/status")).unwrap_or_default();
        if let Some(v) = status.lines().find_map(|l| l.strip_prefix(name)) {
            out.push((t, v.trim().to_owned()));
        }
    }
    out
}

/// Every thread of `pid` is untraced and not in a stop.
fn assert_running(pid: i32, after: &str) {
    for (tid, tracer) in task_fields(pid, "TracerPid:") {
        assert_eq!(tracer, "0", "thread {tid} is still traced {after}");
    }
    for (tid, state) in task_fields(pid, "State:") {
        assert!(
            !state.starts_with('t') && !state.starts_with('T'),
            "thread {tid} is left in state {state} {after}"
        );
    }
}

/// The heartbeat goes on: new beats within a few seconds.
fn assert_beats_on(hb: &std::path::Path, after: &str) {
    let before = heartbeats(hb).len();
    let t = Instant::now();
    while heartbeats(hb).len() < before + 10 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the heartbeat stopped {after}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The milliseconds in dmem's line "... was stopped for N ms ...".
fn printed_pause(stderr: &str) -> Duration {
    let line = stderr
        .lines()
        .find(|l| l.contains(" was stopped for "))
        .unwrap_or_else(|| panic!("no pause line in:\n{stderr}"));
    let ms: f64 = line
        .split(" was stopped for ")
        .nth(1)
        .and_then(|r| r.split(" ms").next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("cannot read the pause in {line}"));
    Duration::from_secs_f64(ms / 1e3)
}

fn running(steady: u32, hb: &std::path::Path) -> Target {
    start(
        "top_growth",
        &[hb.to_str().unwrap(), "120", &format!("steady={steady}")],
    )
}

#[test]
fn leaks_of_a_running_process_stop_it_only_for_the_copy() {
    let dir = common::scratch_dir("live-leaks");
    let hb = dir.join("heartbeat");
    let steady = 200_000;
    let target = running(steady, &hb);
    let from = monotonic_ns();
    let out = run_limited(dmem().args(["leaks", &target.pid.to_string(), "--json"]), LIMIT);
    let to = monotonic_ns();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");

    // The steady blocks are held through a table a global points to, so they and the table are
    // still reachable, and no stack of hold_steady is a leak.
    let reachable = v["still_reachable"]["blocks"].as_u64().unwrap();
    assert!(reachable > steady as u64, "{}", v["still_reachable"]);
    for s in v["stacks"].as_array().unwrap() {
        let names: Vec<&str> = s["stack"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["function"].as_str())
            .collect();
        assert!(!names.contains(&"hold_steady"), "a steady block called lost: {s}");
    }

    // The process's own account of its pause: its heartbeat's longest gap while dmem ran is no
    // longer than the pause dmem printed, beside a beat's period and a scheduler's delay. As in
    // the tests of `dmem top`, only a real-time heartbeat (as root) measures the stop alone.
    let pause = printed_pause(&stderr);
    let gap = longest_gap(&heartbeats(&hb), from, to);
    eprintln!("printed pause {pause:?}, longest heartbeat gap {gap:?}");
    if live::rt_heartbeat() {
        assert!(
            gap <= pause + Duration::from_millis(60),
            "the heartbeat stopped for {gap:?}, but dmem printed a pause of {pause:?}"
        );
    }
    assert_running(target.pid, "after dmem leaks");
    assert_beats_on(&hb, "after dmem leaks");
}

/// Ctrl-C or SIGTERM while the threads are stopped: they are let go first, then dmem ends as
/// that signal says.
fn interrupted_while_stopped(signal: i32, name: &str) {
    let dir = common::scratch_dir(&format!("live-leaks-{name}"));
    let hb = dir.join("heartbeat");
    // A heap large enough that its copy lasts long enough to be caught in the middle.
    let target = running(3_000_000, &hb);
    let mut child = dmem()
        .args(["leaks", &target.pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dmem");
    let me = child.id().to_string();
    let t = Instant::now();
    let mut caught = false;
    while t.elapsed() < Duration::from_secs(60) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if task_fields(target.pid, "TracerPid:")
            .iter()
            .any(|(_, p)| *p == me)
        {
            caught = true;
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert!(caught, "dmem was never seen holding the process");
    // SAFETY: kill sends a signal to our own child, which has not been waited for.
    unsafe { libc::kill(child.id() as i32, signal) };
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("dmem did not end after {name}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.signal(), Some(signal), "dmem ends by {name}: {status:?}");
    assert_running(target.pid, &format!("after dmem got {name}"));
    assert_beats_on(&hb, &format!("after dmem got {name}"));
}

#[test]
fn ctrl_c_leaves_no_thread_stopped() {
    interrupted_while_stopped(libc::SIGINT, "SIGINT");
}

#[test]
fn sigterm_leaves_no_thread_stopped() {
    interrupted_while_stopped(libc::SIGTERM, "SIGTERM");
}
