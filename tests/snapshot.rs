//! `dmem snapshot` and `dmem diff` end to end, on real processes under the preloaded library and
//! real cores, with the profiles they write decoded by an independent decoder: Google's protobuf
//! package for Python (tests/python/pprof_decode.py), not dmem's own encoder run backwards.

mod common;
#[path = "common/elfcore.rs"]
mod elfcore;
#[path = "common/gdb.rs"]
mod gdbrun;
#[path = "common/pprof.rs"]
mod pprof;

use common::run::{run_limited, run_ok};
use common::{dmem, fixture, lib_path, make_core, scratch_dir, text, which};
use pprof::{decode, protobuf_python, string};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Long enough for anything here on a loaded machine; only a hang comes near it.
const LIMIT: Duration = Duration::from_secs(120);

fn run(cmd: &mut Command) -> Output {
    run_limited(cmd, LIMIT)
}

/// The functions of a decoded stack, leaf first, inlined functions included.
fn functions(stack: &Value) -> Vec<String> {
    stack["frames"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["lines"].as_array().unwrap().iter())
        .map(|l| l["function"].as_str().unwrap().to_owned())
        .collect()
}

/// The GNU build id of `path` as `readelf -n` prints it, if binutils is installed.
fn readelf_build_id(path: &Path) -> Option<String> {
    let readelf = which("readelf")?;
    let out = run(Command::new(readelf).arg("-n").arg(path));
    text(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_owned))
}

#[test]
fn the_driver_core_as_a_profile_decodes_with_protobuf() {
    let Some(py) = protobuf_python() else {
        return;
    };
    let dir = scratch_dir("snapshot-driver");
    let prog = fixture("driver");
    let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64;
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib_path());
    let file = dir.join("driver.pb.gz");
    run_ok(dmem().arg("snapshot").arg(&prog).arg(&core).arg("-o").arg(&file));
    let p = decode(&py, &file);

    assert_eq!(p["string_table"][0], "", "string_table[0] must be empty");
    let types: Vec<(&str, &str)> = p["sample_type"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (string(&p, &t["type"]), string(&p, &t["unit"])))
        .collect();
    assert_eq!(types, [("inuse_objects", "count"), ("inuse_space", "bytes")]);
    assert_eq!(string(&p, &p["default_sample_type"]), "inuse_space");
    let t = p["time_nanos"].as_i64().unwrap();
    let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64;
    assert!(
        before - 2_000_000_000 <= t && t <= after,
        "time_nanos {t} is not when the core was taken"
    );

    // Exactly the leaked block: the 512-byte one was freed, glibc's buffers dropped at exit.
    let stacks = p["stacks"].as_array().unwrap();
    assert_eq!(stacks.len(), 1, "{stacks:#?}");
    let s = &stacks[0];
    assert_eq!(s["values"], serde_json::json!([1, 2048]));
    let main = s["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["lines"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["function"] == "main")
        })
        .unwrap_or_else(|| panic!("no main in {s:#}"));
    let line = main["lines"].as_array().unwrap().last().unwrap();
    assert!(line["file"].as_str().unwrap().ends_with("driver.c"), "{line}");
    assert_eq!(
        line["line"],
        common::source_line("c-fixtures/driver.c", "malloc(2048)")
    );
    // main's mapping is the program's, named by path and build id.
    let prog_path = std::fs::canonicalize(&prog).unwrap();
    assert_eq!(main["object"], prog_path.to_str().unwrap());
    match readelf_build_id(&prog) {
        Some(id) => assert_eq!(main["build_id"], id),
        None => eprintln!("readelf is not installed: build id not compared"),
    }
    // The first mapping is the main program, as profile.proto asks; each location lies in its
    // mapping.
    let maps = p["mapping"].as_array().unwrap();
    assert_eq!(string(&p, &maps[0]["filename"]), prog_path.to_str().unwrap());
    for loc in p["location"].as_array().unwrap() {
        let m = maps
            .iter()
            .find(|m| m["id"] == loc["mapping_id"])
            .expect("a location's mapping");
        let a = loc["address"].as_u64().unwrap();
        assert!(m["memory_start"].as_u64().unwrap() <= a && a < m["memory_limit"].as_u64().unwrap());
    }
    // The thread that allocated it: the program's only thread, whose id the core records.
    let tid = elfcore::Core::open(&core).threads[0] as i64;
    let labels = s["labels"].as_array().unwrap();
    assert_eq!(labels.len(), 1, "{labels:?}");
    assert_eq!(
        (labels[0]["key"].as_str(), labels[0]["num"].as_i64()),
        (Some("thread_id"), Some(tid))
    );

    // `-o -` writes the same profile to standard output.
    let out = run_ok(dmem().arg("snapshot").arg(&prog).arg(&core).args(["-o", "-"]));
    assert_eq!(out.stdout, std::fs::read(&file).unwrap());

    // Another program with this core is a mistake, said in one line.
    let out = run(dmem()
        .arg("snapshot")
        .arg(fixture("grow_steps"))
        .arg(&core)
        .args(["-o", "-"]));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is not a core of") && err.lines().count() == 1,
        "{err}"
    );

    // The other formats hold the same snapshot.
    let out = run_ok(
        dmem()
            .arg("snapshot")
            .arg(&prog)
            .arg(&core)
            .args(["-o", "-", "--format", "json"]),
    );
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (j["live_bytes"].as_i64(), j["live_blocks"].as_i64()),
        (Some(2048), Some(1))
    );
    assert!(j["stacks"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["function"] == "main"));
    let out = run_ok(
        dmem()
            .arg("snapshot")
            .arg(&prog)
            .arg(&core)
            .args(["-o", "-", "--format", "folded"]),
    );
    let folded = text(&out.stdout);
    assert_eq!(folded.lines().count(), 1, "{folded}");
    assert!(folded.trim_end().ends_with(";main 2048"), "{folded}");
}

/// `grow_steps` running under the library, its output read line by line.
struct Grower {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Grower {
    fn start(blocks: u32, size: u32) -> Grower {
        let mut child = Command::new(fixture("grow_steps"))
            .args([blocks.to_string(), size.to_string()])
            .env("LD_PRELOAD", lib_path())
            .env_remove("DMEM_OPTS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start grow_steps");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let stdin = child.stdin.take();
        Grower { child, stdin, lines }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// Waits for the fixture to say it reached `line`.
    fn expect(&self, line: &str) {
        let got = self
            .lines
            .recv_timeout(LIMIT)
            .unwrap_or_else(|_| panic!("grow_steps never said '{line}'"));
        assert_eq!(got, line);
    }

    fn step(&mut self) {
        writeln!(self.stdin.as_mut().unwrap(), "go").unwrap();
    }
}

impl Drop for Grower {
    fn drop(&mut self) {
        // Closing its input ends it; a kill is for a test that failed half way.
        drop(self.stdin.take());
        if self.child.wait_timeout_or_kill().is_none() {
            eprintln!("grow_steps had to be killed");
        }
    }
}

trait WaitTimeout {
    fn wait_timeout_or_kill(&mut self) -> Option<std::process::ExitStatus>;
}

impl WaitTimeout for Child {
    fn wait_timeout_or_kill(&mut self) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(s)) = self.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.kill();
        let _ = self.wait();
        None
    }
}

/// A core of the running process `pid`, written by gdb's gcore (which stops it only for that).
fn gcore(dir: &Path, pid: &str, name: &str) -> PathBuf {
    let core = dir.join(name);
    let out = run(gdbrun::gcore_command(dir, &[], &core).args(["-p", pid]));
    gdbrun::written_core(core, &out)
}

fn diff_json(args: &[&std::ffi::OsStr]) -> Value {
    let out = run_ok(dmem().arg("diff").args(args).arg("--json"));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

/// The changes the fixture makes between its two moments, and nothing else: the grown stack
/// first, the shrunk one last, with the exact counts.
fn assert_known_growth(d: &Value, blocks: i64, size: i64) {
    let stacks = d["stacks"].as_array().unwrap();
    let summary: Vec<(i64, i64, &str)> = stacks
        .iter()
        .map(|s| {
            (
                s["delta_blocks"].as_i64().unwrap(),
                s["delta_bytes"].as_i64().unwrap(),
                s["frames"][0]["function"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [(blocks, blocks * size, "grow"), (-10, -1000, "hold_shrinking")],
        "{d:#}"
    );
    assert_eq!(stacks[0]["bytes"], blocks * size);
    assert_eq!(stacks[1]["blocks"], 10, "ten of the twenty are left");
    assert_eq!(d["delta_bytes"], blocks * size - 1000);
    assert!(
        d["unchanged_stacks"].as_u64().unwrap() >= 2,
        "the steady stacks did not change: {d:#}"
    );
}

#[test]
fn a_diff_ranks_the_stack_that_grew_first_with_the_exact_growth() {
    let (blocks, size) = (1000, 48);
    let dir = scratch_dir("snapshot-diff");
    let prog = fixture("grow_steps");
    let mut g = Grower::start(blocks, size);
    g.expect("ready 1");
    let pid = g.pid();
    let base_pb = dir.join("base.pb.gz");
    let base_json = dir.join("base.json");
    run_ok(dmem().args(["snapshot", &pid, "-o"]).arg(&base_pb));
    run_ok(
        dmem()
            .args(["snapshot", &pid, "--format", "json", "-o"])
            .arg(&base_json),
    );
    let gdb = gdbrun::have_gdb();
    let core1 = gdb.then(|| gcore(&dir, &pid, "core.1"));
    g.step();
    g.expect("ready 2");
    // A few seconds apart, as someone watching a process would take them.
    std::thread::sleep(Duration::from_secs(2));
    let core2 = gdb.then(|| gcore(&dir, &pid, "core.2"));

    // A saved profile against the running process, and a saved JSON snapshot likewise.
    let d = diff_json(&[base_pb.as_os_str(), pid.as_ref()]);
    assert_known_growth(&d, blocks as i64, size as i64);
    let d = diff_json(&[base_json.as_os_str(), pid.as_ref()]);
    assert_known_growth(&d, blocks as i64, size as i64);
    assert!(
        d["time"].as_f64().unwrap() - d["base_time"].as_f64().unwrap() >= 2.0,
        "{d}"
    );

    // The text shape: the grown stack's row first, its leaf named under it.
    let out = run_ok(dmem().arg("diff").arg(&base_json).arg(&pid));
    let t = text(&out.stdout);
    let rows: Vec<&str> = t.lines().collect();
    assert!(rows[2].contains("+48,000") && rows[2].contains("+1,000"), "{t}");
    assert!(rows[3].trim_start().starts_with("grow "), "{t}");

    if let (Some(core1), Some(core2)) = (core1, core2) {
        let diff_pb = dir.join("diff.pb.gz");
        let d = diff_json(&[
            prog.as_os_str(),
            core1.as_os_str(),
            prog.as_os_str(),
            core2.as_os_str(),
            "--pprof".as_ref(),
            diff_pb.as_os_str(),
        ]);
        assert_known_growth(&d, blocks as i64, size as i64);
        // NEW − BASE as a profile, negative values and all, read by the independent decoder.
        if let Some(py) = protobuf_python() {
            let p = decode(&py, &diff_pb);
            let got: Vec<(Value, String)> = p["stacks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| (s["values"].clone(), functions(s)[0].clone()))
                .collect();
            assert_eq!(
                got,
                [
                    (serde_json::json!([blocks, blocks * size]), "grow".to_owned()),
                    (serde_json::json!([-10, -1000]), "hold_shrinking".to_owned())
                ]
            );
        }
    }
}

#[test]
fn a_live_profile_has_threads_and_inlined_frames() {
    let Some(py) = protobuf_python() else {
        return;
    };
    let dir = scratch_dir("snapshot-live");
    let g = Grower::start(10, 64);
    g.expect("ready 1");
    let file = dir.join("live.pb.gz");
    run_ok(dmem().args(["snapshot", &g.pid(), "-o"]).arg(&file));
    let p = decode(&py, &file);
    let stacks = p["stacks"].as_array().unwrap();
    let steady = stacks
        .iter()
        .find(|s| functions(s).contains(&"hold_steady".to_owned()))
        .unwrap_or_else(|| panic!("no hold_steady stack: {stacks:#?}"));
    assert_eq!(steady["values"], serde_json::json!([50, 50 * 32]));
    // steady_block is always inlined into hold_steady: one location, two lines, the inlined
    // function first and the line of each from the source.
    let lines = steady["frames"][0]["lines"].as_array().unwrap();
    let got: Vec<(&str, usize)> = lines
        .iter()
        .map(|l| {
            (
                l["function"].as_str().unwrap(),
                l["line"].as_u64().unwrap() as usize,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "steady_block",
                common::source_line("c-fixtures/grow_steps.c", "return memset(malloc(32)")
            ),
            (
                "hold_steady",
                common::source_line("c-fixtures/grow_steps.c", "steady[i] = steady_block()")
            ),
        ]
    );
    let labels = steady["labels"].as_array().unwrap();
    assert_eq!(labels.len(), 1);
    assert_eq!(
        labels[0]["num"].as_i64(),
        Some(g.child.id() as i64),
        "its only thread"
    );
    let m = p["mapping"].as_array().unwrap();
    assert!(m
        .iter()
        .all(|m| m["has_functions"] == true && m["has_inline_frames"] == true));
}

#[test]
fn bad_sources_get_one_clear_line() {
    let dir = scratch_dir("snapshot-bad");
    let junk = dir.join("junk.txt");
    std::fs::write(&junk, "not a profile\n").unwrap();
    let cases: Vec<(Vec<std::ffi::OsString>, i32, &str)> = vec![
        (
            vec![
                "snapshot".into(),
                fixture("driver").into(),
                "-o".into(),
                "-".into(),
            ],
            2,
            "core file of it must follow",
        ),
        (
            vec!["snapshot".into(), "2147483646".into(), "-o".into(), "-".into()],
            1,
            "no process 2147483646",
        ),
        (vec!["diff".into(), junk.clone().into()], 2, "two snapshots"),
        (
            vec!["diff".into(), junk.clone().into(), junk.clone().into()],
            1,
            "not a pprof profile",
        ),
    ];
    for (args, status, needle) in cases {
        let out = run(dmem().args(&args));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// A core of a program that ran without libdmem has no stacks: its snapshot is read through
/// glibc's heap, each group of blocks (by C++ type and size) a stack of one frame named for it
/// and with no address, and the note on glibc's heap says so.
#[test]
fn a_core_of_a_program_without_the_library_is_grouped_by_type_and_size() {
    if !gdbrun::have_gdb() {
        return;
    }
    let dir = scratch_dir("snapshot-plain");
    let prog = fixture("driver");
    let core = gdbrun::plain_core(&dir, &prog);
    let out = run(dmem()
        .arg("snapshot")
        .arg(&prog)
        .arg(&core)
        .args(["--format", "json", "-o", "-"]));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("read without libdmem through glibc"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stacks = v["stacks"].as_array().unwrap();
    assert!(!stacks.is_empty(), "{v}");
    for s in stacks {
        let frames = s["frames"].as_array().unwrap();
        assert_eq!(frames.len(), 1, "{s}");
        assert_eq!(frames[0]["pc"], "0x0", "{s}");
        let name = frames[0]["function"].as_str().unwrap_or_default();
        assert!(name.ends_with(" usable bytes"), "{s}");
    }
}
