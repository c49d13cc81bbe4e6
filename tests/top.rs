//! `dmem top` on real running processes: the growth classes of a fixture whose heap grows in
//! known shapes, totals checked against the library's own counters (read here independently,
//! through the layout descriptor), the target never stopped (TracerPid, and a heartbeat it
//! writes every 2 ms), a storm of threads read while it runs, and the one-line refusal when
//! the reader may not read the process.

mod common;
#[path = "common/elfcore.rs"]
mod elfcore;
#[path = "common/live.rs"]
mod live;
use common::run;
/// The analysis's reader of `/proc/PID/maps` lines, the one the library and the launcher use.
use dmem_analysis::maps::MapsLine;

use common::dmem;
use elfcore::{Elf, SHT_DYNSYM};
use live::{heartbeats, longest_gap, monotonic_ns, rt_heartbeat, start, unix_now, LIMIT};
use run::run_limited;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The library's own per-list counters in a running process, read here without the launcher:
/// the descriptor found through `.dynsym` and /proc/PID/maps, the words by the layout's
/// offsets, the memory with process_vm_readv.
struct Counters {
    pid: i32,
    lists: u64,
    nlists: u64,
    stride: u64,
    /// Offsets in a list of live_blocks, live_bytes, allocs, frees, and of the blocks and bytes
    /// handed over and drained (the live counters include handed blocks until drained).
    offs: [u64; 8],
}

/// One reading of the counters, summed over the lists.
#[derive(Clone, Copy, Debug)]
struct Reading {
    /// Unix time just before and just after the copy: the counters are from between the two.
    started: f64,
    ended: f64,
    live_blocks: u64,
    live_bytes: u64,
    /// allocs + frees: every link and unlink so far.
    changes: u64,
}

fn read_remote(pid: i32, addr: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` points into `buf`, which lives across the call and is `len` bytes; the
    // remote address is only checked and copied from by the kernel.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    assert_eq!(n, len as isize, "process_vm_readv of {len} bytes at {addr:#x}");
    buf
}

impl Counters {
    fn find(pid: i32) -> Counters {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
        let lib = common::lib_path().canonicalize().unwrap();
        let mut spans = Vec::new();
        for l in maps.lines().filter_map(MapsLine::parse) {
            if Path::new(l.path) == lib {
                spans.push((l.start as u64, l.offset));
            }
        }
        let elf = Elf::open(&lib);
        let (sym, _) = elf
            .symbol(SHT_DYNSYM, "dmem_layout")
            .expect("dmem_layout in .dynsym");
        let bias = elfcore::load_bias(&elf, &spans).expect("libdmem.so mapped in the fixture");
        let f = common::read_descriptor(bias + sym, |a, len| read_remote(pid, a, len));
        use common::descriptor::field::*;
        let w = |name: &str| f.get(name).unwrap_or_else(|| panic!("descriptor field {name}"));
        Counters {
            pid,
            lists: w(LISTS),
            nlists: w(NLISTS),
            stride: w(LIST_STRIDE),
            offs: [
                w(LIST_OFF_LIVE_BLOCKS),
                w(LIST_OFF_LIVE_BYTES),
                w(LIST_OFF_ALLOCS),
                w(LIST_OFF_FREES),
                w(LIST_OFF_HANDED_BLOCKS),
                w(LIST_OFF_HANDED_BYTES),
                w(LIST_OFF_DRAINED_BLOCKS),
                w(LIST_OFF_DRAINED_BYTES),
            ],
        }
    }

    fn read(&self) -> Reading {
        let started = unix_now();
        let raw = read_remote(self.pid, self.lists, (self.nlists * self.stride) as usize);
        let mut r = Reading {
            started,
            ended: unix_now(),
            live_blocks: 0,
            live_bytes: 0,
            changes: 0,
        };
        for i in 0..self.nlists {
            let w = |off: u64| {
                let at = (i * self.stride + off) as usize;
                u64::from_le_bytes(raw[at..at + 8].try_into().unwrap())
            };
            let handed = w(self.offs[4]).saturating_sub(w(self.offs[6]));
            let handed_bytes = w(self.offs[5]).saturating_sub(w(self.offs[7]));
            r.live_blocks += w(self.offs[0]).saturating_sub(handed);
            r.live_bytes += w(self.offs[1]).saturating_sub(handed_bytes);
            r.changes += w(self.offs[2]) + w(self.offs[3]);
        }
        r
    }
}

/// Reads the counters and the target's TracerPid every few milliseconds until stopped.
struct Watcher {
    stop: Arc<AtomicBool>,
    readings: Arc<Mutex<Vec<Reading>>>,
    tracers: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    fn start(pid: i32) -> Watcher {
        let counters = Counters::find(pid);
        let stop = Arc::new(AtomicBool::new(false));
        let readings = Arc::new(Mutex::new(Vec::new()));
        let tracers = Arc::new(Mutex::new(Vec::new()));
        let (s, r, t) = (stop.clone(), readings.clone(), tracers.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                r.lock().unwrap().push(counters.read());
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                if let Some(line) = status.lines().find(|l| l.starts_with("TracerPid:")) {
                    t.lock().unwrap().push(line.to_owned());
                }
                std::thread::sleep(Duration::from_millis(3));
            }
        });
        // A read that starts at once must find a reading before it: wait for the first.
        let t = Instant::now();
        while readings.lock().unwrap().is_empty() {
            assert!(t.elapsed() < LIMIT, "the counters could not be read");
            std::thread::sleep(Duration::from_millis(1));
        }
        Watcher {
            stop,
            readings,
            tracers,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> (Vec<Reading>, Vec<String>) {
        // And a read that ended just now must find a reading after it.
        std::thread::sleep(Duration::from_millis(30));
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap();
        let r = self.readings.lock().unwrap().clone();
        let t = self.tracers.lock().unwrap().clone();
        (r, t)
    }
}

/// The reading taken last wholly before `from` and the first wholly after `to`.
fn bracket(readings: &[Reading], from: f64, to: f64) -> Option<(Reading, Reading)> {
    let before = readings.iter().rev().find(|r| r.ended < from)?;
    let after = readings.iter().find(|r| r.started > to)?;
    Some((*before, *after))
}

/// Runs `dmem top PID --json ARGS` and returns its samples.
fn top_json(pid: i32, args: &[&str]) -> Vec<Value> {
    let out = run_limited(dmem().args(["top", &pid.to_string(), "--json"]).args(args), LIMIT);
    let err = common::text(&out.stderr);
    assert!(out.status.success(), "dmem top failed: {err}");
    assert_eq!(err, "", "dmem top --json writes nothing else");
    common::text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// The longest heartbeat gap a process that is never stopped may show. The heartbeat thread
/// sleeps 2 ms between beats and, run as root, has a real-time priority, so its gaps measure
/// whether the process was allowed to run, not how busy the machine is: a reader that stopped
/// the process (a ptrace attach, as gdb or gcore do) would open a gap as long as its walk of the
/// fixture's 100,000 steady blocks and more, and the control below shows a 150 ms stop is seen.
/// 50 ms is the bound; without the real-time priority (not root), a loaded machine
/// might delay a wake-up that long, so that case is reported and not asserted.
const MAX_GAP: Duration = Duration::from_millis(50);

#[test]
fn top_classifies_growth_and_never_stops_the_process() {
    let dir = common::scratch_dir("top-growth");
    let hb = dir.join("heartbeat");
    let target = start("top_growth", &[hb.to_str().unwrap(), "60"]);
    let watcher = Watcher::start(target.pid);
    let from = monotonic_ns();
    let samples = top_json(
        target.pid,
        &["--interval", "0.5", "--count", "8", "--limit", "10"],
    );
    let to = monotonic_ns();
    let (readings, tracers) = watcher.finish();

    // Never stopped: no tracer ever, and no gap in the heartbeat while it was read.
    assert!(
        !tracers.is_empty() && tracers.iter().all(|t| t == "TracerPid:\t0"),
        "{tracers:?}"
    );
    let gap = longest_gap(&heartbeats(&hb), from, to);
    if rt_heartbeat() {
        assert!(
            gap <= MAX_GAP,
            "the heartbeat stopped for {gap:?} while dmem top read the process"
        );
    } else {
        eprintln!("not root: the heartbeat is not real-time; longest gap {gap:?} (not asserted)");
    }
    // Control: the same measure sees a process that is stopped.
    let stop_from = monotonic_ns();
    // SAFETY: kill sends a signal to our own child.
    unsafe { libc::kill(target.pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(150));
    // SAFETY: as above: resumes our own child.
    unsafe { libc::kill(target.pid, libc::SIGCONT) };
    std::thread::sleep(Duration::from_millis(20));
    let stopped = longest_gap(&heartbeats(&hb), stop_from, monotonic_ns());
    assert!(
        stopped >= Duration::from_millis(120),
        "a 150 ms stop showed as {stopped:?}"
    );

    assert_eq!(samples.len(), 8, "--count 8");
    for s in &samples {
        assert_eq!(
            keys(s),
            [
                "inconsistent_lists",
                "live_blocks",
                "live_bytes",
                "read_ms",
                "stacks",
                "time"
            ],
            "{s}"
        );
        // The fixture only allocates, so the live totals only grow: what was read lies between
        // the library's counters just before the read and just after it.
        let start = s["time"].as_f64().unwrap();
        let end = start + s["read_ms"].as_f64().unwrap() / 1e3;
        // The sample's time has millisecond precision.
        let (before, after) =
            bracket(&readings, start - 0.001, end + 0.001).expect("counters around the read");
        for (key, lo, hi) in [
            ("live_blocks", before.live_blocks, after.live_blocks),
            ("live_bytes", before.live_bytes, after.live_bytes),
        ] {
            let v = u(s, key);
            assert!(
                lo <= v && v <= hi,
                "{key} {v} outside the counters {lo}..={hi} around the read"
            );
        }
    }

    let last = samples.last().unwrap();
    let stacks = last["stacks"].as_array().unwrap();
    let by_function = |name: &str| {
        stacks
            .iter()
            .find(|s| s["frames"][0]["function"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no stack from {name} in {last}"))
    };
    for s in stacks {
        assert_eq!(
            keys(s),
            [
                "blocks",
                "bytes",
                "class",
                "delta_bytes",
                "frames",
                "rate_bytes_per_min"
            ]
        );
        for f in s["frames"].as_array().unwrap() {
            // Every frame in the one shape of all commands, its line of text included.
            assert_eq!(
                keys(f),
                ["file", "function", "inlined", "line", "object", "offset", "pc", "text"]
            );
            assert!(f["inlined"].is_boolean(), "{f}");
            assert!(!f["text"].as_str().unwrap().is_empty(), "{f}");
            assert!(f["pc"].as_str().unwrap().starts_with("0x"));
        }
    }
    let steady = by_function("hold_steady");
    assert_eq!((u(steady, "blocks"), u(steady, "bytes")), (100_000, 6_400_000));
    assert_eq!(
        (steady["class"].as_str(), steady["delta_bytes"].as_i64()),
        (Some("steady"), Some(0))
    );
    let frame = &steady["frames"][0];
    assert!(
        frame["file"].as_str().unwrap().ends_with("top_growth.c"),
        "{frame}"
    );
    assert!(frame["line"].as_u64().unwrap() > 0, "{frame}");
    assert!(
        frame["object"].as_str().unwrap().ends_with("/top_growth"),
        "{frame}"
    );
    let has_main = steady["frames"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["function"].as_str() == Some("main"));
    assert!(has_main, "the stack goes on to main: {steady}");

    for (function, class) in [
        ("grow_linear", "linear"),
        ("fill_cache", "levelling"),
        ("grow_accelerating", "accelerating"),
    ] {
        let s = by_function(function);
        assert_eq!(s["class"].as_str(), Some(class), "{function}: {s}");
        assert!(s["delta_bytes"].as_i64().unwrap() > 0, "{function} grew: {s}");
    }
    // 100 blocks of 4096 bytes a second, by the fixture's clock: 24,576,000 bytes a minute.
    let rate = by_function("grow_linear")["rate_bytes_per_min"].as_i64().unwrap();
    assert!(
        (17_000_000..32_000_000).contains(&rate),
        "linear growth of 24.6 MB a minute measured as {rate}"
    );
    // Stacks come biggest first.
    let bytes: Vec<u64> = stacks.iter().map(|s| u(s, "bytes")).collect();
    assert!(bytes.windows(2).all(|w| w[0] >= w[1]), "{bytes:?}");
}

#[test]
fn top_reads_a_storm_within_the_changes_it_makes() {
    let target = start("top_storm", &["8", "3"]);
    let watcher = Watcher::start(target.pid);
    let samples = top_json(
        target.pid,
        &["--interval", "0.2", "--count", "10", "--limit", "3"],
    );
    let (readings, _) = watcher.finish();
    assert_eq!(samples.len(), 10);
    for s in &samples {
        let start = s["time"].as_f64().unwrap();
        let end = start + s["read_ms"].as_f64().unwrap() / 1e3;
        let (before, after) =
            bracket(&readings, start - 0.001, end + 0.001).expect("counters around the read");
        // Every block counted was live at some moment of the read, and every block live
        // throughout it was counted: the count is off from the counters by at most the links
        // and unlinks made meanwhile.
        let changed = after.changes - before.changes;
        let blocks = u(s, "live_blocks");
        assert!(
            blocks.abs_diff(before.live_blocks) <= changed,
            "{blocks} blocks read; the counters said {} before the read and {changed} changes were made during it",
            before.live_blocks
        );
        assert!(u(s, "inconsistent_lists") <= 64);
        // Never more than the storm can hold: its 16,384 slots, a block in flight per thread,
        // and a few of libc's own; so nothing was counted twice on a large scale.
        assert!(blocks <= 16_384 + 64, "{blocks} blocks");
        assert!(u(s, "live_bytes") <= blocks * 1024 + 65_536, "{s}");
    }
    // The storm was not disturbed: it ends by itself and reports its work.
    let (status, rest) = target.finish();
    assert!(status.success(), "the storm failed: {status:?}");
    assert!(rest.starts_with("ops "), "{rest}");
}

#[test]
fn top_never_takes_a_list_caught_mid_free_for_a_broken_one() {
    // A free marks its header freed and unlinks it; a reader that saw the list's counter
    // unchanged across its walk must never meet such a header still linked. Hundreds of fast
    // reads of a storm of frees (about one in two hundred met one when the magic changed before
    // the counter did).
    // The storm outlives the reads and is killed when `target` drops.
    let target = start("top_storm", &["120", "6"]);
    let samples = top_json(
        target.pid,
        &["--interval", "0.02", "--count", "300", "--limit", "1"],
    );
    assert_eq!(samples.len(), 300);
}

#[test]
fn top_says_in_one_line_why_it_may_not_read() {
    let dir = common::scratch_dir("top-denied");
    let hb = dir.join("heartbeat");
    // Non-dumpable: only CAP_SYS_PTRACE may read it.
    let target = start("top_growth", &[hb.to_str().unwrap(), "60", "nodump"]);
    let mut cmd = if rt_heartbeat() {
        // Root has CAP_SYS_PTRACE; drop it (an empty bounding set leaves no capability after
        // exec), as an unprivileged user would be.
        // Running as root, setpriv (util-linux) drops the capability.
        if !common::have_tool("setpriv") {
            return;
        }
        let setpriv = common::which("setpriv").expect("setpriv is on PATH");
        let mut c = Command::new(setpriv);
        c.args(["--inh-caps=-all", "--bounding-set=-all", "--"])
            .arg(env!("CARGO_BIN_EXE_dmem"));
        c
    } else {
        dmem()
    };
    let out = run_limited(cmd.args(["top", &target.pid.to_string(), "--count", "1"]), LIMIT);
    let err = common::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("dmem top: not allowed to read process {}", target.pid)),
        "{err}"
    );
    assert!(
        err.contains("sudo") && err.contains("CAP_SYS_PTRACE"),
        "says what to do: {err}"
    );
    assert_eq!(common::text(&out.stdout), "");
}

#[test]
fn top_of_a_process_without_the_library_or_of_none_is_one_line() {
    let mut sleeper = Command::new("sleep").arg("30").spawn().expect("sleep");
    let pid = sleeper.id().to_string();
    let cases: [(&[&str], &str); 4] = [
        (&["top", &pid], "has no libdmem.so loaded"),
        (&["top", "x"], "a process id"),
        (&["top", "2147483647", "--count", "1"], "there is no process"),
        (&["top", &pid, "--interval", "0"], "interval"),
    ];
    for (args, want) in cases {
        let out = run_limited(dmem().args(args), LIMIT);
        let err = common::text(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("dmem top: ") && err.contains(want),
            "{args:?}: {err}"
        );
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// Ctrl-C ends the watch with a summary of what grew.
#[test]
fn top_interrupted_prints_a_summary() {
    let dir = common::scratch_dir("top-interrupt");
    let hb = dir.join("heartbeat");
    let target = start("top_growth", &[hb.to_str().unwrap(), "60"]);
    let mut top = dmem()
        .args([
            "top",
            &target.pid.to_string(),
            "--interval",
            "0.3",
            "--limit",
            "3",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dmem top");
    let stdout = top.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let (mut r, mut text, mut line, mut headers) =
            (BufReader::new(stdout), String::new(), String::new(), 0);
        while r.read_line(&mut line).unwrap_or(0) > 0 {
            if line.contains("read in") {
                headers += 1;
                if headers == 3 {
                    let _ = tx.send(());
                }
            }
            text.push_str(&line);
            line.clear();
        }
        text
    });
    let three = rx.recv_timeout(Duration::from_secs(60));
    // SAFETY: kill sends a signal to our own child.
    unsafe { libc::kill(top.id() as i32, libc::SIGINT) };
    let t = Instant::now();
    let status = loop {
        if let Some(s) = top.try_wait().expect("wait") {
            break s;
        }
        if t.elapsed() > Duration::from_secs(30) {
            let _ = top.kill();
            panic!("dmem top did not end on SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = reader.join().unwrap();
    assert!(three.is_ok(), "three samples did not come: {text}");
    assert!(status.success(), "{status:?}: {text}");
    let summary = text
        .split("summary of pid")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary after Ctrl-C: {text}"));
    assert!(
        summary.contains("grow_linear") && summary.contains("fill_cache"),
        "{summary}"
    );
    assert!(
        !summary.contains("hold_steady"),
        "a stack that did not grow is not in it: {summary}"
    );
    drop(target);
}

/// A process that ends while it is watched: dmem top says so, prints its summary and succeeds.
#[test]
fn top_of_a_process_that_ends_says_so() {
    let dir = common::scratch_dir("top-ends");
    let hb = dir.join("heartbeat");
    let target = start("top_growth", &[hb.to_str().unwrap(), "1.5"]);
    let out = run_limited(
        dmem().args([
            "top",
            &target.pid.to_string(),
            "--interval",
            "0.3",
            "--limit",
            "2",
        ]),
        LIMIT,
    );
    let (err, text) = (common::text(&out.stderr), common::text(&out.stdout));
    assert!(out.status.success(), "{err}");
    assert_eq!(
        err.trim_end(),
        format!("dmem top: process {} (top_growth) ended", target.pid)
    );
    assert!(text.contains("summary of pid"), "{text}");
    let (status, _) = target.finish();
    assert!(status.success(), "the fixture itself ended well: {status:?}");
}

/// One stack of a text sample: its class, its sparkline and its innermost function.
struct TextRow {
    class: String,
    spark: String,
    function: String,
}

/// The samples `dmem top` printed as text, each as its rows.
fn text_samples(out: &str) -> Vec<Vec<TextRow>> {
    let mut samples: Vec<Vec<TextRow>> = Vec::new();
    let mut lines = out.lines().peekable();
    while let Some(l) = lines.next() {
        if l.contains(" read in ") {
            samples.push(Vec::new());
            continue;
        }
        let fields: Vec<&str> = l.split_whitespace().collect();
        let numeric = fields
            .first()
            .is_some_and(|f| f.chars().all(|c| c.is_ascii_digit() || c == ','));
        let (Some(sample), true) = (samples.last_mut(), numeric && fields.len() >= 5) else {
            continue;
        };
        // bytes, blocks, change and rate right-aligned in 14, 10, 14 and 14 columns, the class
        // in 12, then the sparkline.
        let spark: String = l
            .chars()
            .skip(14 + 1 + 10 + 1 + 14 + 1 + 14 + 2 + 12 + 2)
            .collect();
        let frame = lines.peek().map(|f| f.trim()).unwrap_or_default();
        let function = frame.split(['+', ' ']).next().unwrap_or_default().to_owned();
        sample.push(TextRow {
            class: fields[4].to_owned(),
            spark,
            function,
        });
    }
    samples
}

/// The height of a sparkline's character, 0 (nothing) to 8 (a full block).
fn level(c: char) -> usize {
    " ▁▂▃▄▅▆▇█"
        .chars()
        .position(|b| b == c)
        .unwrap_or_else(|| panic!("{c:?} is no sparkline block"))
}

/// The text view draws each stack's live bytes over the samples as a sparkline, and calls no
/// stack steady before it has a second sample.
#[test]
fn top_draws_a_sparkline_and_waits_for_a_second_sample_before_steady() {
    let dir = common::scratch_dir("top-sparkline");
    let hb = dir.join("heartbeat");
    let target = start("top_growth", &[hb.to_str().unwrap(), "60"]);
    let out = run_limited(
        dmem().args([
            "top",
            &target.pid.to_string(),
            "--interval",
            "0.4",
            "--count",
            "5",
            "--limit",
            "10",
        ]),
        LIMIT,
    );
    let text = common::text(&out.stdout);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let samples = text_samples(&text);
    assert_eq!(samples.len(), 5, "{text}");
    let row = |sample: usize, function: &str| {
        samples[sample]
            .iter()
            .find(|r| r.function == function)
            .unwrap_or_else(|| panic!("no {function} in sample {sample}:\n{text}"))
    };
    for r in &samples[0] {
        assert_eq!(r.class, "unknown", "one sample says nothing of growth:\n{text}");
        assert_eq!(r.spark.chars().count(), 1, "{text}");
    }
    let steady = row(4, "hold_steady");
    assert_eq!(
        (steady.class.as_str(), steady.spark.as_str()),
        ("steady", "█████"),
        "{text}"
    );
    let linear = row(4, "grow_linear");
    let levels: Vec<usize> = linear.spark.chars().map(level).collect();
    assert_eq!(levels.len(), 5, "{text}");
    assert!(
        levels.windows(2).all(|w| w[0] <= w[1]) && levels[0] < levels[4] && levels[4] == 8,
        "a growing stack's sparkline rises to a full block: {:?}\n{text}",
        linear.spark
    );
}
