//! A fixture running under the library, as the tests of running processes need it: started
//! preloaded and waited for until it says "ready", killed when dropped, and the heartbeat file
//! some fixtures write, read back to measure when the process did not run.
#![allow(dead_code)]

use super::common;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Generous for a few samples on a loaded two-core machine; only a hang comes near it.
pub const LIMIT: Duration = Duration::from_secs(120);

/// A fixture running with the library preloaded, killed when dropped.
pub struct Target {
    pub child: Child,
    pub pid: i32,
    /// The rest of its standard output, read to the end (so it never writes into a closed pipe).
    rest: Option<std::thread::JoinHandle<String>>,
}

impl Target {
    /// Waits (at most `LIMIT`) for the fixture to end by itself: its status and what it printed
    /// after "ready".
    pub fn finish(mut self) -> (std::process::ExitStatus, String) {
        let t = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            assert!(t.elapsed() < LIMIT, "the fixture did not end");
            std::thread::sleep(Duration::from_millis(20));
        };
        (status, self.rest.take().unwrap().join().unwrap())
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `fixture args` preloaded and waits (at most a minute) for its "ready" line.
pub fn start(fixture: &str, args: &[&str]) -> Target {
    start_with_opts(fixture, "", args)
}

/// `start`, with `DMEM_OPTS=opts`.
pub fn start_with_opts(fixture: &str, opts: &str, args: &[&str]) -> Target {
    let mut cmd = common::preloaded(common::fixture(fixture), opts, None);
    cmd.args(args);
    start_command(cmd, fixture)
}

/// Starts `cmd`, a fixture perhaps behind a program that execs it (`setpriv`), and waits (at
/// most a minute) for its "ready" line.
pub fn start_command(cmd: std::process::Command, fixture: &str) -> Target {
    let (target, before) = until_ready(cmd);
    assert!(before.is_empty(), "{fixture} did not start: {before}");
    target
}

/// As `start`, for a fixture that prints lines of its own before "ready": those lines.
pub fn start_telling(fixture: &str, args: &[&str]) -> (Target, String) {
    let mut cmd = common::preloaded(common::fixture(fixture), "", None);
    cmd.args(args);
    until_ready(cmd)
}

/// Starts `cmd` and waits (at most a minute) for its "ready" line: what it printed before.
fn until_ready(mut cmd: std::process::Command) -> (Target, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn fixture");
    let pid = child.id() as i32;
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let rest = std::thread::spawn(move || {
        let mut r = BufReader::new(out);
        let mut before = String::new();
        let mut line = String::new();
        while r.read_line(&mut line).is_ok_and(|n| n > 0) && line.trim() != "ready" {
            before.push_str(&line);
            line.clear();
        }
        let _ = tx.send(before);
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut r, &mut rest);
        rest
    });
    let target = Target {
        child,
        pid,
        rest: Some(rest),
    };
    let before = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the fixture said nothing for a minute");
    (target, before)
}

pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[path = "../../src/clock.rs"]
mod clock;

/// The library's clock (CLOCK_MONOTONIC in nanoseconds), which the fixtures' heartbeats and
/// the library's own times are read on.
pub fn monotonic_ns() -> u64 {
    clock::now_ns()
}

/// Heartbeats (monotonic nanoseconds) written by the fixture.
pub fn heartbeats(path: &Path) -> Vec<u64> {
    std::fs::read(path)
        .expect("heartbeat file")
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The longest time without a heartbeat inside `[from, to]` (monotonic nanoseconds), counting
/// the stretches from `from` to the first beat and from the last beat to `to`.
pub fn longest_gap(beats: &[u64], from: u64, to: u64) -> Duration {
    let mut points: Vec<u64> = beats.iter().copied().filter(|&b| b > from && b < to).collect();
    points.insert(0, from);
    points.push(to);
    let gap = points.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    Duration::from_nanos(gap)
}

/// Whether the fixtures' heartbeat thread runs under a real-time priority (it asks for it, and
/// only root gets it), so that its gaps measure stops rather than a busy machine.
pub fn rt_heartbeat() -> bool {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
