//! `dmem serve` and `dmem record` against real clients: Go's own `go tool pprof` reading the
//! heap profile of a growing process straight from the HTTP endpoint, Prometheus scraping
//! `/metrics` with a bearer token and answering a query for the process's live bytes, curl for
//! the index, errors and concurrent requests; who may read what (a second local user, a token,
//! listening beyond loopback); connections that are idle, slow or not HTTP/1; `/metrics` while
//! profiles are read; counters no process could hold; and `dmem record`'s periodic and peak
//! profiles, read back with `dmem diff`.

mod common;
#[path = "common/live.rs"]
mod live;
use common::run::run_limited;

use common::dmem;
use live::{start, Target, LIMIT};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `dmem serve`, interrupted and reaped when dropped.
struct Serve {
    child: Child,
    /// `127.0.0.1:PORT`, as it said it listens (loopback for a server listening everywhere).
    addr: String,
    /// Everything it wrote to standard error after that line.
    log: Arc<Mutex<String>>,
}

impl Serve {
    fn start(cmd: Command, pids: &[i32]) -> Serve {
        let pids: Vec<String> = pids.iter().map(i32::to_string).collect();
        let mut args = vec!["--listen", "127.0.0.1:0"];
        args.extend(pids.iter().map(String::as_str));
        Serve::with_args(cmd, &args)
    }

    /// `dmem serve ARGS`, waited for until it says where it listens.
    fn with_args(mut cmd: Command, args: &[&str]) -> Serve {
        cmd.arg("serve")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = cmd.spawn().expect("start dmem serve");
        let mut serve = Serve {
            child,
            addr: String::new(),
            log: Arc::new(Mutex::new(String::new())),
        };
        let mut err = BufReader::new(serve.child.stderr.take().unwrap());
        let mut first = String::new();
        err.read_line(&mut first).expect("dmem serve's first line");
        let addr = first
            .split("http://")
            .nth(1)
            .and_then(|s| s.split('/').next())
            .unwrap_or_else(|| panic!("no address in {first:?}"));
        serve.addr = addr.replace("0.0.0.0:", "127.0.0.1:").replace("[::]:", "[::1]:");
        let sink = serve.log.clone();
        std::thread::spawn(move || {
            for line in err.lines().map_while(|l| l.ok()) {
                sink.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        serve
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The log once it holds `want`, or as it is after ten seconds: the server's standard error
    /// is read by a thread of the test's own, which can lag behind the answer the client has.
    fn log_with(&self, want: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log();
            if log.contains(want) || Instant::now() > deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Threads of the server now.
    fn threads(&self) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("a Threads line")
    }

    /// A connection to it.
    fn connect(&self) -> TcpStream {
        TcpStream::connect(&self.addr).expect("connect to dmem serve")
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
    curl(Command::new("curl"), url, &[])
}

/// `curl ARGS URL` run by `cmd` (curl itself, or a program that execs it as another user), the
/// body written to standard output and the status after it: the status and the body.
fn curl(mut cmd: Command, url: &str, args: &[&str]) -> (u16, Vec<u8>) {
    let out = run_limited(
        cmd.args(["-s", "-S", "--max-time", "60", "-o", "-", "-w", "\n%{http_code}"])
            .args(args)
            .arg(url),
        LIMIT,
    );
    assert!(out.status.success(), "curl {url}: {}", common::text(&out.stderr));
    let at = out
        .stdout
        .iter()
        .rposition(|&b| b == b'\n')
        .expect("a status after the body");
    let code = common::text(&out.stdout[at + 1..])
        .trim()
        .parse()
        .expect("an HTTP status");
    (code, out.stdout[..at].to_vec())
}

/// Bytes sent on a fresh connection, and everything that comes back until the server closes it
/// (within `LIMIT`: a connection still open then fails the test).
fn exchange(serve: &Serve, send: &[u8]) -> String {
    let mut c = serve.connect();
    c.write_all(send).unwrap();
    until_closed(&mut c, "a connection that sent its bytes")
}

/// What a connection receives until the server closes it; it must within `LIMIT`.
fn until_closed(c: &mut TcpStream, what: &str) -> String {
    c.set_read_timeout(Some(LIMIT)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "{what} was still open after {LIMIT:?} ({e}), having received {:?}",
                common::text(&got)
            ),
        }
    }
    common::text(&got)
}

/// A body for a failure message: its text, or what a profile is.
fn shown(body: &[u8]) -> String {
    if body.starts_with(&[0x1f, 0x8b]) {
        format!("a gzipped profile of {} bytes", body.len())
    } else {
        common::text(body)
    }
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
    // Prometheus sends the token of its credentials_file, as it would to a server beyond
    // loopback.
    let dir = common::scratch_dir("serve-prometheus");
    let token = token_file(&dir, "prometheus-scrapes-dmem");
    let serve = Serve::with_args(
        dmem(),
        &["--listen", "127.0.0.1:0", "--token-file", token.to_str().unwrap()],
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: dmem\n    authorization:\n      credentials_file: {}\n    static_configs:\n      - targets: ['{}']\n",
            token.display(),
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
    assert_eq!(serve.log(), "", "no scrape was refused");
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
    let want = format!("pid={gone_pid}: 404 ");
    let log = serve.log_with(&want);
    assert!(log.contains(&want), "{log}");
    assert!(log.lines().all(|l| l.starts_with("dmem serve: ")), "{log}");
}

/// `program` run as user nobody (65534), without groups or capabilities.
fn as_nobody(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ])
    .arg(program);
    c
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
    let mut c = as_nobody(env!("CARGO_BIN_EXE_dmem"));
    for var in ["DMEM_LIB", "DMEM_GDB_SCRIPT", "DMEM_OPTS", "LD_PRELOAD"] {
        c.env_remove(var);
    }
    Some(c)
}

/// Whether the tests run as root, which the tests of a second local user need; when not, says so
/// through `missing` (which fails under CI).
fn root_with_setpriv() -> bool {
    // SAFETY: geteuid takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        common::missing("root (to run clients and fixtures as a second user)");
        return false;
    }
    have(&["setpriv", "curl"])
}

#[test]
fn a_local_client_gets_only_what_its_own_user_may_read() {
    if !root_with_setpriv() {
        return;
    }
    let hold = ["1", "100", "64", "0", "60000"];
    // A process of root's, one of nobody's, and one of nobody's that made itself non-dumpable.
    let roots = start("heap_phases", &hold);
    let nobodys_cmd = |extra: &[&str]| {
        let mut c = as_nobody(common::fixture("heap_phases"));
        c.args(hold).args(extra);
        c.env("LD_PRELOAD", common::lib_path()).env("DMEM_OPTS", "");
        live::start_command(c, "heap_phases")
    };
    let nobodys = nobodys_cmd(&[]);
    let nodump = nobodys_cmd(&["nodump"]);
    // Served by root, which may read all three.
    let serve = Serve::start(dmem(), &[]);
    let as_nobody_get = |path: &str| curl(as_nobody("curl"), &serve.url(path), &[]);
    let heap = |pid: i32| format!("/debug/pprof/heap?pid={pid}");

    let (code, body) = as_nobody_get(&heap(roots.pid));
    let body = shown(&body);
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(&format!(
            "user 65534 is not allowed to read process {}",
            roots.pid
        )),
        "{body}"
    );
    let (code, body) = as_nobody_get(&heap(nodump.pid));
    let body = shown(&body);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("not dumpable"), "{body}");
    let (code, body) = as_nobody_get(&heap(nobodys.pid));
    assert_eq!(code, 200, "{}", shown(&body));
    assert_eq!(&body[..2], &[0x1f, 0x8b], "a gzipped profile");

    // The index and the metrics name only nobody's readable process to nobody, all to root.
    let listed = |page: &[u8], pid: i32| common::text(page).contains(&format!("pid={pid}"));
    let labelled = |page: &[u8], pid: i32| common::text(page).contains(&format!("pid=\"{pid}\""));
    let (_, index) = as_nobody_get("/debug/pprof/");
    let (_, metrics) = as_nobody_get("/metrics");
    assert!(listed(&index, nobodys.pid), "{}", common::text(&index));
    assert!(labelled(&metrics, nobodys.pid), "{}", common::text(&metrics));
    for other in [roots.pid, nodump.pid] {
        assert!(!listed(&index, other), "{}", common::text(&index));
        assert!(!labelled(&metrics, other), "{}", common::text(&metrics));
    }
    let (_, index) = get(&serve.url("/debug/pprof/"));
    let (code, _) = get(&serve.url(&heap(roots.pid)));
    assert_eq!(code, 200, "root reads root's process");
    for p in [roots.pid, nobodys.pid, nodump.pid] {
        assert!(listed(&index, p), "{}", common::text(&index));
    }
    let want = format!("pid={}: 403 user 65534 ", roots.pid);
    let log = serve.log_with(&want);
    assert!(log.contains(&want), "{log}");
    assert!(log.lines().all(|l| l.starts_with("dmem serve: ")), "{log}");
}

#[test]
fn idle_connections_hold_no_thread_and_are_closed_after_a_few_seconds() {
    if !have(&["curl"]) {
        return;
    }
    let serve = Serve::start(dmem(), &[]);
    // Everything is up once a request has been answered.
    assert_eq!(get(&serve.url("/metrics")).0, 200);
    let before = serve.threads();
    let mut idle: Vec<TcpStream> = (0..300).map(|_| serve.connect()).collect();
    // Answered while they are all open: the connections before it have been accepted.
    assert_eq!(get(&serve.url("/metrics")).0, 200);
    let during = serve.threads();
    assert!(
        during == before && during <= 16,
        "300 idle connections: {during} threads, {before} before them"
    );
    for c in &mut idle {
        let got = until_closed(c, "an idle connection");
        assert_eq!(got, "", "an idle connection is closed without an answer");
    }
    // A slow client, a byte at a time, is closed as well: the limit is on the whole head.
    let mut slow = serve.connect();
    let t = Instant::now();
    let mut open = true;
    for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ".iter().cycle() {
        if slow.write_all(&[*b]).is_err() {
            open = false;
            break;
        }
        if t.elapsed() > LIMIT {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !open,
        "a client sending a byte every 100 ms was still connected after {LIMIT:?}"
    );
    assert_eq!(get(&serve.url("/metrics")).0, 200, "still serving");
}

#[test]
fn what_is_not_http_1_is_answered_and_closed_at_once() {
    if !have(&["curl"]) {
        return;
    }
    let serve = Serve::start(dmem(), &[]);
    // HTTP/2 with prior knowledge opens with this preface.
    let got = exchange(&serve, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    assert!(got.starts_with("HTTP/1.1 505 "), "{got:?}");
    // The start of a TLS 1.2 ClientHello, as a client that took the port for HTTPS sends it.
    let mut hello = vec![0x16, 0x03, 0x01, 0x00, 0x2f, 0x01, 0x00, 0x00, 0x2b, 0x03, 0x03];
    hello.extend_from_slice(&[0x42; 32]);
    hello.extend_from_slice(&[0x00, 0x00, 0x02, 0x00, 0x2f, 0x01, 0x00]);
    let got = exchange(&serve, &hello);
    assert!(got.starts_with("HTTP/1.1 400 "), "{got:?}");
    // A connection that ends without a word is closed at once, unanswered.
    let mut empty = serve.connect();
    empty.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(until_closed(&mut empty, "an empty connection"), "");
    // A head too long to be a scraper's.
    let long = format!("GET / HTTP/1.1\r\nX-Long: {}\r\n\r\n", "a".repeat(10_000));
    let got = exchange(&serve, long.as_bytes());
    assert!(got.starts_with("HTTP/1.1 431 "), "{got:?}");
    // And a request as curl sends it still gets its answer.
    assert_eq!(get(&serve.url("/metrics")).0, 200);
    serve.log_with(": 505 ");
    let log = serve.log_with(": 400 ");
    assert!(
        log.contains(": 505 only HTTP/1.0 and HTTP/1.1 requests are answered here"),
        "{log}"
    );
    assert!(log.contains(": 400 this is not an HTTP/1.x request"), "{log}");
    assert!(log.lines().all(|l| l.starts_with("dmem serve: ")), "{log}");
}

#[test]
fn metrics_are_answered_while_profiles_are_being_read() {
    if !have(&["curl"]) {
        return;
    }
    // Enough blocks that each profile takes a while to read.
    let target = start("heap_phases", &["1", "300000", "32", "0", "60000"]);
    let serve = Serve::start(dmem(), &[target.pid]);
    const ASKED: usize = 16;
    let request = format!(
        "GET /debug/pprof/heap?pid={} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        target.pid
    );
    let done = Arc::new(AtomicUsize::new(0));
    let profiles: Vec<_> = (0..ASKED)
        .map(|_| {
            let mut c = serve.connect();
            c.write_all(request.as_bytes()).unwrap();
            let done = done.clone();
            std::thread::spawn(move || {
                let got = until_closed(&mut c, "a profile request");
                done.fetch_add(1, Ordering::SeqCst);
                got
            })
        })
        .collect();
    // Once one profile is back, every request is in the server, most of them waiting.
    let t = Instant::now();
    while done.load(Ordering::SeqCst) == 0 {
        assert!(t.elapsed() < LIMIT, "no profile in {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (code, metrics) = get(&serve.url("/metrics"));
    let outstanding = ASKED - done.load(Ordering::SeqCst);
    assert_eq!(code, 200, "{}", common::text(&metrics));
    assert!(
        common::text(&metrics).contains(&format!("dmem_live_blocks{{pid=\"{}\"", target.pid)),
        "{}",
        common::text(&metrics)
    );
    // Behind the profiles, /metrics would have waited until at most one fewer than the four
    // workers were still reading.
    assert!(
        outstanding > 4,
        "/metrics came back with only {outstanding} of {ASKED} profiles still being read"
    );
    for p in profiles {
        let got = p.join().unwrap();
        assert!(
            got.starts_with("HTTP/1.1 200 OK\r\n"),
            "{:?}",
            &got[..got.len().min(200)]
        );
    }
    assert_eq!(serve.log(), "", "no request failed");
}

/// A token file with `token` in it, as an operator writes one (with a newline).
fn token_file(dir: &Path, token: &str) -> PathBuf {
    let f = dir.join("token");
    std::fs::write(&f, format!("{token}\n")).unwrap();
    f
}

#[test]
fn listening_beyond_loopback_needs_a_token_or_a_flag_and_warns() {
    if !have(&["curl"]) {
        return;
    }
    // Neither: refused at once, in one line naming both ways.
    let out = run_limited(dmem().args(["serve", "--listen", "0.0.0.0:0"]), LIMIT);
    let err = common::text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("dmem serve: --listen 0.0.0.0:0 reaches beyond this host")
            && err.contains("--token-file FILE")
            && err.contains("--no-token"),
        "{err}"
    );

    // A token: answered only to requests carrying it, loopback's included.
    let dir = common::scratch_dir("serve-token");
    let token = "c2VjcmV0LXRva2Vu.x-y_z";
    let file = token_file(&dir, token);
    let serve = Serve::with_args(
        dmem(),
        &["--listen", "0.0.0.0:0", "--token-file", file.to_str().unwrap()],
    );
    let url = serve.url("/metrics");
    let (code, body) = get(&url);
    assert_eq!(code, 401, "{}", common::text(&body));
    let (code, _) = curl(Command::new("curl"), &url, &["--oauth2-bearer", "not-the-token"]);
    assert_eq!(code, 401);
    let (code, body) = curl(Command::new("curl"), &url, &["--oauth2-bearer", token]);
    assert_eq!(code, 200, "{}", common::text(&body));
    let header = format!("Authorization: bearer {token}");
    let (code, _) = curl(
        Command::new("curl"),
        &serve.url("/debug/pprof/"),
        &["-H", &header],
    );
    assert_eq!(code, 200);
    let got = exchange(
        &serve,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(
        got.starts_with("HTTP/1.1 401 ") && got.contains("\r\nWWW-Authenticate: Bearer"),
        "{got:?}"
    );
    let log = serve.log();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].starts_with("dmem serve: warning: listening beyond loopback"),
        "{log}"
    );
    assert!(!log.contains(token), "the log never shows the token: {log}");
    drop(serve);

    // The flag: answered without a token, after one warning.
    let serve = Serve::with_args(dmem(), &["--listen", "0.0.0.0:0", "--no-token"]);
    let (code, _) = get(&serve.url("/metrics"));
    assert_eq!(code, 200);
    let log = serve.log();
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(
        log.contains("warning: listening beyond loopback on 0.0.0.0:0 without a token"),
        "{log}"
    );
}

/// The layout descriptor of a running process, found by `dmem stats` and read from its memory.
fn descriptor_of(pid: i32) -> (std::fs::File, common::descriptor::Fields) {
    use std::os::unix::fs::FileExt;
    let out = run_limited(dmem().args(["stats", &pid.to_string(), "--json"]), LIMIT);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let at = u64::from_str_radix(v["layout"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .expect("open the process's memory");
    let fields = common::read_descriptor(at, |a, len| {
        let mut buf = vec![0u8; len];
        mem.read_exact_at(&mut buf, a).unwrap();
        buf
    });
    (mem, fields)
}

#[test]
fn counters_no_process_could_hold_are_not_exported() {
    if !have(&["curl"]) {
        return;
    }
    let target = start("heap_phases", &["1", "100", "64", "0", "60000"]);
    let honest = start("heap_phases", &["1", "100", "64", "0", "60000"]);
    // One of its lists says it holds 2^40 more blocks, as an overwrite or a tamperer could.
    {
        use common::descriptor::field::*;
        use std::os::unix::fs::FileExt;
        let (mem, f) = descriptor_of(target.pid);
        let at = f.need(LISTS).unwrap() + f.need(LIST_OFF_LIVE_BLOCKS).unwrap();
        let mut word = [0u8; 8];
        mem.read_exact_at(&mut word, at).unwrap();
        let tampered = u64::from_le_bytes(word) + (1 << 40);
        mem.write_all_at(&tampered.to_le_bytes(), at).unwrap();
    }
    let serve = Serve::start(dmem(), &[]);
    for _ in 0..2 {
        let (code, body) = get(&serve.url("/metrics"));
        let text = common::text(&body);
        assert_eq!(code, 200, "{text}");
        assert!(
            !text.contains(&format!("pid=\"{}\"", target.pid)),
            "the tampered process is left out:\n{text}"
        );
        assert!(
            text.contains(&format!("dmem_live_blocks{{pid=\"{}\"", honest.pid)),
            "{text}"
        );
        let why = format!(
            "# process {} (heap_phases) is left out: its counters say 10995116278",
            target.pid
        );
        assert!(text.contains(&why), "{text}");
    }
    let log = serve.log_with("is left out");
    let said: Vec<&str> = log.lines().filter(|l| l.contains("is left out")).collect();
    assert_eq!(
        said.len(),
        1,
        "said once in the log, however often scraped: {log}"
    );
    assert!(said[0].contains("more than the"), "{log}");
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
    let want = format!("pid={}: 403 ", target.pid);
    let log = serve.log_with(&want);
    assert!(log.contains(&want), "{log}");
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

#[test]
fn another_users_idle_connections_do_not_lock_roots_scrape_out() {
    if !root_with_setpriv() {
        return;
    }
    let serve = Serve::start(dmem(), &[]);
    let port = serve.addr.rsplit(':').next().unwrap().to_owned();
    // More idle connections than the server has slots, held by nobody: each one closed is
    // opened again.
    let mut flood = as_nobody(common::fixture("idle_flood"));
    flood.args([port.as_str(), "600"]);
    let _flood = live::start_command(flood, "idle_flood");
    // Root's scrapes are answered all the while, again and again.
    for _ in 0..5 {
        let (code, body) = get(&serve.url("/metrics"));
        assert_eq!(code, 200, "{}", shown(&body));
        assert!(common::text(&body).contains("dmem_processes"), "{}", shown(&body));
    }
    let want = "user 65534 holds ";
    let log = serve.log_with(want);
    assert!(log.contains(want), "nobody's connections were not limited: {log}");
    // And nobody's own requests get the one line saying why.
    let (code, body) = curl(as_nobody("curl"), &serve.url("/metrics"), &[]);
    let body = shown(&body);
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("connections from user 65534 are open already"),
        "{body}"
    );
}

#[test]
fn a_program_run_from_a_directory_whose_name_is_not_utf8_gets_its_profile() {
    if !have(&["curl"]) {
        return;
    }
    use std::os::unix::ffi::OsStrExt;
    let dir = common::scratch_dir("serve-not-utf8").join(std::ffi::OsStr::from_bytes(b"d\xe9j\xe0"));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join("heap_phases");
    // A link, not a copy: a copy's descriptor open for writing, inherited by a child another
    // test forks meanwhile, would make starting it fail with ETXTBSY.
    std::fs::hard_link(common::fixture("heap_phases"), &prog).unwrap();
    let mut cmd = common::preloaded(&prog, "", None);
    cmd.args(["1", "100", "64", "0", "60000"]);
    let target = live::start_command(cmd, "heap_phases");
    let serve = Serve::start(dmem(), &[target.pid]);
    let (code, body) = get(&serve.url(&format!("/debug/pprof/heap?pid={}", target.pid)));
    assert_eq!(code, 200, "{}", shown(&body));
    assert_eq!(&body[..2], &[0x1f, 0x8b], "a gzipped profile");
    let (code, body) = get(&serve.url("/metrics"));
    assert_eq!(code, 200, "{}", shown(&body));
    let want = format!("dmem_live_blocks{{pid=\"{}\"", target.pid);
    assert!(common::text(&body).contains(&want), "{}", shown(&body));
    assert!(!serve.log().contains("not allowed"), "{}", serve.log());
}

/// The named frames of a gzipped profile, as bytes to search: its string table holds every
/// function, file and mapping name.
fn unzipped(profile: &[u8]) -> String {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(profile)
        .read_to_end(&mut out)
        .expect("a gzipped profile");
    String::from_utf8_lossy(&out).into_owned()
}

/// `dmem serve`, run by root, is no confused deputy: a process of nobody's that has mapped a
/// file only root may read (opened through a symlink, before the process gave up root's ids,
/// as a privileged parent hands a service its files) gets nobody a profile whose frames in
/// that file are the file and an offset, with one warning in the log; root's request names
/// them. The file is root's alone in two ways: its own mode 0600, or a readable file in a
/// directory of mode 0700.
#[test]
fn a_user_learns_no_names_from_a_file_only_root_may_read() {
    use std::os::unix::fs::PermissionsExt;
    if !root_with_setpriv() {
        return;
    }
    let hidden = "treasure_keeper_b71e";
    let top = common::scratch_dir("serve-root-only");
    std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o755)).unwrap();
    let serve = Serve::start(dmem(), &[]);
    for (dir_mode, file_mode) in [(0o755, 0o600), (0o700, 0o644)] {
        let dir = top.join(format!("dir{dir_mode:o}"));
        std::fs::create_dir(&dir).unwrap();
        let lib = dir.join("libhidden_hoard.so");
        std::fs::copy(common::fixture("libhidden_hoard.so"), &lib).unwrap();
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(file_mode)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(dir_mode)).unwrap();
        let link = top.join(format!("link{dir_mode:o}.so"));
        std::os::unix::fs::symlink(&lib, &link).unwrap();
        let mut cmd = common::preloaded(common::fixture("dropped_dlopen"), "", None);
        cmd.arg(&link).args(["65534", "20", "4096"]);
        let target = live::start_command(cmd, "dropped_dlopen");
        let heap = serve.url(&format!("/debug/pprof/heap?pid={}", target.pid));
        let warned = |log: &str| {
            log.lines()
                .filter(|l| l.contains("user 65534 may not read") && l.contains(&*lib.to_string_lossy()))
                .count()
        };

        let (code, body) = curl(as_nobody("curl"), &heap, &[]);
        assert_eq!(code, 200, "{}", shown(&body));
        let profile = unzipped(&body);
        assert!(
            !profile.contains(hidden),
            "nobody learnt {hidden} from {} (directory {dir_mode:o}, file {file_mode:o})",
            lib.display()
        );
        assert!(profile.contains("libhidden_hoard.so"), "the object is shown");
        let log = serve.log_with("may not read");
        assert_eq!(warned(&log), 1, "one warning for the file: {log}");

        let (code, body) = get(&heap);
        assert_eq!(code, 200, "{}", shown(&body));
        assert!(
            unzipped(&body).contains(hidden),
            "root's profile names {hidden} from {}",
            lib.display()
        );
        assert_eq!(warned(&serve.log()), 1, "no warning for root: {}", serve.log());
    }
}

/// The same rule for a detached debug file: a process of nobody's maps a stripped library
/// nobody may read, whose debug file (the one place its static function is named) lies in a
/// debuginfod cache only root may read. Root's profile names the function from it; nobody's
/// does not, and nothing is fetched on nobody's behalf.
#[test]
fn a_user_learns_no_names_from_a_debug_file_only_root_may_read() {
    use std::os::unix::fs::PermissionsExt;
    if !root_with_setpriv() || !have(&["strip"]) {
        return;
    }
    let hidden = "treasure_keeper_b71e";
    let top = common::scratch_dir("serve-root-only-debug");
    std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o755)).unwrap();
    let full = common::fixture("libhidden_hoard.so");
    let lib = top.join("libhidden_hoard.so");
    let out = run_limited(
        Command::new("strip")
            .arg("--strip-all")
            .arg(&full)
            .arg("-o")
            .arg(&lib),
        LIMIT,
    );
    assert!(out.status.success(), "strip: {}", common::text(&out.stderr));
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).unwrap();
    let id = {
        use object::Object;
        let bytes = std::fs::read(&lib).unwrap();
        let file = object::File::parse(&*bytes).unwrap();
        let id = file.build_id().unwrap().expect("the fixture has a build id");
        id.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    // elfutils' cache layout: CACHE/BUILDID/debuginfo, the cache root's alone.
    let cache = top.join("cache");
    std::fs::create_dir_all(cache.join(&id)).unwrap();
    std::fs::copy(&full, cache.join(&id).join("debuginfo")).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();

    let mut cmd = common::preloaded(common::fixture("dropped_dlopen"), "", None);
    cmd.arg(&lib).args(["65534", "20", "4096"]);
    let target = live::start_command(cmd, "dropped_dlopen");
    let mut server = dmem();
    // A server that is never reached: the cache answers root, and nobody is fetched nothing.
    server
        .env("DEBUGINFOD_URLS", "http://127.0.0.1:9")
        .env("DEBUGINFOD_CACHE_PATH", &cache);
    let serve = Serve::start(server, &[]);
    let heap = serve.url(&format!("/debug/pprof/heap?pid={}", target.pid));
    let (code, body) = get(&heap);
    assert_eq!(code, 200, "{}", shown(&body));
    assert!(
        unzipped(&body).contains(hidden),
        "root's profile names {hidden} from the debug file"
    );
    let (code, body) = curl(as_nobody("curl"), &heap, &[]);
    assert_eq!(code, 200, "{}", shown(&body));
    let profile = unzipped(&body);
    assert!(
        !profile.contains(hidden),
        "nobody learnt {hidden} from root's debuginfod cache"
    );
    assert!(profile.contains("libhidden_hoard.so"), "the object is shown");
    assert!(!serve.log().contains("cannot fetch"), "{}", serve.log());
}
