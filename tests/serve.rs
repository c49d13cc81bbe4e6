//! `dmem serve` and `dmem record` against real clients: Go's own `go tool pprof` reading the
//! heap profile of a growing process straight from the HTTP endpoint, Prometheus scraping
//! `/metrics` and answering a query for the process's live bytes, curl for the index, errors
//! and concurrent requests; and `dmem record`'s periodic and peak profiles, read back with
//! `dmem diff`.

mod common;
#[path = "common/live.rs"]
mod live;
use common::run::run_limited;

use common::dmem;
use live::{start, Target, LIMIT};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `dmem serve`, interrupted and reaped when dropped.
struct Serve {
    child: Child,
    /// `127.0.0.1:PORT`, as it said it listens.
    addr: String,
    /// Everything it wrote to standard error after that line.
    log: Arc<Mutex<String>>,
}

impl Serve {
    fn start(mut cmd: Command, pids: &[i32]) -> Serve {
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .args(pids.iter().map(i32::to_string))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start dmem serve");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        err.read_line(&mut first).expect("dmem serve's first line");
        let addr = first
            .split("http://")
            .nth(1)
            .and_then(|s| s.split('/').next())
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_owned();
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in err.lines().map_while(|l| l.ok()) {
                sink.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        Serve { child, addr, log }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // SAFETY: kill sends a signal to our own child, whose pid we hold until we reap it.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let t = Instant::now();
        while self.child.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET with curl: the status and the body.
fn get(url: &str) -> (u16, Vec<u8>) {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let body = dir.join(format!(
        "serve-body-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let out = run_limited(
        Command::new("curl")
            .args(["-s", "-S", "--max-time", "60", "-o"])
            .arg(&body)
            .args(["-w", "%{http_code}", url]),
        LIMIT,
    );
    assert!(out.status.success(), "curl {url}: {}", common::text(&out.stderr));
    let code = common::text(&out.stdout).trim().parse().expect("an HTTP status");
    let data = std::fs::read(&body).unwrap_or_default();
    let _ = std::fs::remove_file(&body);
    (code, data)
}

fn have(tools: &[&str]) -> bool {
    tools.iter().all(|t| common::have_tool(t))
}

/// A process growing for a while from `grow_step`, then holding its peak.
fn growing() -> Target {
    start("heap_phases", &["40", "200", "1000", "150", "60000"])
}

#[test]
fn go_pprof_reads_the_heap_of_a_growing_process_over_http() {
    if !have(&["go", "curl"]) {
        return;
    }
    let target = growing();
    let serve = Serve::start(dmem(), &[target.pid]);
    let home = common::scratch_dir("serve-go-home");
    std::thread::sleep(Duration::from_millis(600));
    // One process served: the profile needs no ?pid=.
    let out = run_limited(
        Command::new("go")
            .args(["tool", "pprof", "-top", "-sample_index=inuse_space"])
            .arg(serve.url("/debug/pprof/heap"))
            .env("HOME", &home)
            .env("PPROF_TMPDIR", &home)
            .env("GOCACHE", home.join("cache")),
        LIMIT,
    );
    let text = common::text(&out.stdout);
    assert!(
        out.status.success(),
        "go tool pprof: {}{}",
        text,
        common::text(&out.stderr)
    );
    let first = text.lines().find(|l| l.contains("grow_step"));
    assert!(first.is_some(), "pprof -top names the growing function:\n{text}");
    assert!(text.contains("inuse_space"), "{text}");
    assert_eq!(serve.log(), "", "no request failed");
}

#[test]
fn prometheus_scrapes_live_bytes_from_dmem_serve() {
    if !have(&["prometheus", "curl"]) {
        return;
    }
    let target = growing();
    let serve = Serve::start(dmem(), &[]);
    let dir = common::scratch_dir("serve-prometheus");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: dmem\n    static_configs:\n      - targets: ['{}']\n",
            serve.addr
        ),
    )
    .unwrap();
    let mut prom = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .spawn()
        .expect("start prometheus");
    let query = format!("http://127.0.0.1:{port}/api/v1/query?query=dmem_live_bytes");
    let t = Instant::now();
    let mut found = None;
    let pid = target.pid.to_string();
    while t.elapsed() < Duration::from_secs(90) && found.is_none() {
        std::thread::sleep(Duration::from_millis(500));
        let out = Command::new("curl")
            .args(["-s", "--max-time", "5", &query])
            .output()
            .unwrap();
        let Ok(v) = serde_json::from_slice::<Value>(&out.stdout) else {
            continue;
        };
        found = v["data"]["result"].as_array().and_then(|r| {
            r.iter().find(|s| s["metric"]["pid"] == pid.as_str()).map(|s| {
                (
                    s["metric"]["comm"].clone(),
                    s["value"][1].as_str().unwrap_or("").to_owned(),
                )
            })
        });
    }
    let _ = prom.kill();
    let _ = prom.wait();
    let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
    let (comm, value) =
        found.unwrap_or_else(|| panic!("Prometheus never had dmem_live_bytes for {}:\n{log}", target.pid));
    assert_eq!(comm, "heap_phases");
    let bytes: f64 = value.parse().expect("a number");
    assert!(bytes >= 200_000.0, "at least the first step's blocks: {bytes}");
}

#[test]
fn serve_lists_counts_and_answers_at_once_and_says_what_failed() {
    if !have(&["curl"]) {
        return;
    }
    let a = growing();
    let serve = Serve::start(dmem(), &[]);

    let (code, index) = get(&serve.url("/debug/pprof/"));
    let index = common::text(&index);
    assert_eq!(code, 200, "{index}");
    assert!(index.contains(&format!("heap?pid={}", a.pid)), "{index}");

    let (code, metrics) = get(&serve.url("/metrics"));
    let metrics = common::text(&metrics);
    assert_eq!(code, 200);
    let row = format!("dmem_live_bytes{{pid=\"{}\",comm=\"heap_phases\"}} ", a.pid);
    let bytes: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&row))
        .unwrap_or_else(|| panic!("no {row} in\n{metrics}"))
        .parse()
        .unwrap();
    assert!(bytes >= 200_000, "{metrics}");
    assert!(
        metrics.contains("# TYPE dmem_allocations_total counter"),
        "{metrics}"
    );
    assert!(metrics.contains("dmem_scrape_seconds "), "{metrics}");

    // Two profiles asked for at once both arrive whole.
    let url = serve.url(&format!("/debug/pprof/heap?pid={}", a.pid));
    let both: Vec<_> = (0..2)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || get(&url))
        })
        .collect();
    for h in both {
        let (code, body) = h.join().unwrap();
        assert_eq!(code, 200);
        assert_eq!(&body[..2], &[0x1f, 0x8b], "a gzipped profile");
    }

    // A process that is gone: 404, and one line in the log naming it.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id() as i32;
    gone.wait().unwrap();
    let (code, body) = get(&serve.url(&format!("/debug/pprof/heap?pid={gone_pid}")));
    assert_eq!(code, 404, "{}", common::text(&body));
    assert_eq!(common::text(&body).lines().count(), 1);
    let (code, _) = get(&serve.url("/nothing"));
    assert_eq!(code, 404);

    // A process killed while it is asked for, again and again: each answer is a profile or an
    // error of one line, and the server goes on.
    let b = start("heap_phases", &["1", "100000", "64", "0", "60000"]);
    let b_url = serve.url(&format!("/debug/pprof/heap?pid={}", b.pid));
    let asker = std::thread::spawn(move || (0..6).map(|_| get(&b_url)).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_millis(150));
    drop(b);
    for (code, body) in asker.join().unwrap() {
        match code {
            200 => assert_eq!(&body[..2], &[0x1f, 0x8b]),
            404 => assert_eq!(common::text(&body).lines().count(), 1),
            other => panic!("status {other}: {}", common::text(&body)),
        }
    }
    let (code, _) = get(&url);
    assert_eq!(code, 200, "still serving after a target died");
    let log = serve.log();
    assert!(log.contains(&format!("pid={gone_pid}: 404 ")), "{log}");
    assert!(log.lines().all(|l| l.starts_with("dmem serve: ")), "{log}");
}

/// `dmem` run as user nobody, without capabilities, when the tests run as root; else `dmem`.
fn as_other_user() -> Option<Command> {
    // SAFETY: geteuid takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some(dmem());
    }
    if !common::have_tool("setpriv") {
        return None;
    }
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ])
    .arg(env!("CARGO_BIN_EXE_dmem"));
    for var in ["DMEM_LIB", "DMEM_GDB_SCRIPT", "DMEM_OPTS", "LD_PRELOAD"] {
        c.env_remove(var);
    }
    Some(c)
}

#[test]
fn another_users_process_is_neither_listed_nor_read() {
    if !have(&["curl"]) {
        return;
    }
    // Run as root, the server is nobody and the target root's; run as a user, the target is
    // non-dumpable, which only CAP_SYS_PTRACE may read.
    let Some(cmd) = as_other_user() else {
        return;
    };
    let target = start("heap_phases", &["1", "100", "64", "0", "60000", "nodump"]);
    let serve = Serve::start(cmd, &[]);
    let (code, index) = get(&serve.url("/debug/pprof/"));
    assert_eq!(code, 200);
    assert!(!common::text(&index).contains(&format!("pid={}", target.pid)));
    let (code, body) = get(&serve.url(&format!("/debug/pprof/heap?pid={}", target.pid)));
    let body = common::text(&body);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("not allowed to read process"), "{body}");
    assert!(
        serve.log().contains(&format!("pid={}: 403 ", target.pid)),
        "{}",
        serve.log()
    );
}

/// Live bytes of a profile, as `dmem diff` reads it.
fn profile_bytes(p: &Path) -> u64 {
    let out = run_limited(dmem().arg("diff").arg(p).arg(p).arg("--json"), LIMIT);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["live_bytes"].as_u64().unwrap()
}

#[test]
fn record_writes_growing_profiles_and_one_at_the_peak() {
    let dir = common::scratch_dir("record");
    // 8 steps of 1 MB every 400 ms, the peak held 2.5 s, then shrunk to the first step.
    let target = start("heap_phases", &["8", "1000", "1000", "400", "2500"]);
    let out = run_limited(
        dmem()
            .args([
                "record",
                &target.pid.to_string(),
                "--every",
                "1",
                "--at-peak",
                "-o",
            ])
            .arg(&dir),
        LIMIT,
    );
    let err = common::text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.starts_with("dmem record: the process ended: "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let (status, said) = target.finish();
    assert!(status.success(), "{said}");

    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let name = |p: &PathBuf| p.file_name().unwrap().to_string_lossy().into_owned();
    let (peaks, periodic): (Vec<_>, Vec<_>) = files.iter().partition(|p| name(p).ends_with(".peak.pb.gz"));
    assert!(periodic.len() >= 4, "{files:?}");
    let sizes: Vec<u64> = periodic.iter().map(|p| profile_bytes(p)).collect();
    let top = *sizes.iter().max().unwrap();
    assert!(
        top > sizes[0] && *sizes.last().unwrap() < top,
        "rises, then falls: {sizes:?}"
    );

    // The last peak profile holds every block of the peak: 8 steps of 1,000 blocks of 1,000 bytes.
    let last_peak = peaks.last().expect("a peak profile");
    assert!(profile_bytes(last_peak) >= 8_000_000, "{last_peak:?}");
    let summary = format!("{} profiles written", files.len());
    assert!(
        err.contains(&summary) && err.contains(&format!("({} at peaks)", peaks.len())),
        "{err}"
    );
}

#[test]
fn record_keeps_only_the_newest_and_stops_on_ctrl_c() {
    let dir = common::scratch_dir("record-keep");
    let target = start("heap_phases", &["1", "100", "64", "0", "60000"]);
    let mut rec = dmem()
        .args([
            "record",
            &target.pid.to_string(),
            "--every",
            "0.2",
            "--keep",
            "2",
            "-o",
        ])
        .arg(&dir)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: kill sends SIGINT to our own child, not yet reaped.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let t = Instant::now();
    while rec.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "dmem record ignored Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = rec.wait_with_output().unwrap();
    let err = common::text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.starts_with("dmem record: interrupted: "), "{err}");
    let n: usize = err
        .split(": ")
        .nth(2)
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(n >= 3, "{err}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "{err}");
}
