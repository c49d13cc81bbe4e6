//! `dmem serve`: heap profiles and metrics over HTTP, where continuous profilers (Parca,
//! Pyroscope, Go's pprof) and Prometheus scrape them. Go's convention names the paths:
//! `/debug/pprof/heap` answers the gzipped profile `dmem snapshot` writes, `/debug/pprof/` lists
//! the processes, and `/metrics` is Prometheus's text exposition of the library's counters.
//!
//! Each request reads its process afresh, as `dmem top` does, never stopping it. A fixed number
//! of workers answer, so at most that many reads (and profiles) are in memory at once, however
//! many scrapers call.

use crate::cli::ServeArgs;
use crate::commands::snapshot::Source;
use crate::source::heapwalk;
use crate::source::image::Target;
use crate::source::live;
use crate::source::mappings::Mappings;
use crate::sys::{self, INTERRUPTED};
use crate::{failed, Result};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tiny_http::{Header, Request, Response, Server};

/// Requests answered at once.
const WORKERS: usize = 4;

/// What a request gets back.
struct Reply {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
}

impl Reply {
    fn ok(content_type: &'static str, body: Vec<u8>) -> Reply {
        Reply {
            status: 200,
            content_type,
            body,
        }
    }

    /// An error: its status and one line, which the log repeats.
    fn error(status: u16, line: String) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: (line + "\n").into_bytes(),
        }
    }
}

pub fn main(args: ServeArgs) -> Result<i32> {
    let server =
        Server::http(args.listen).map_err(|e| failed(format!("cannot listen on {}: {e}", args.listen)))?;
    let what = if args.pids.is_empty() {
        "every process with libdmem.so loaded that this user may read".to_owned()
    } else {
        let pids: Vec<String> = args.pids.iter().map(i32::to_string).collect();
        format!("process {}", pids.join(", "))
    };
    // The address actually bound (a port of 0 asks the system for one): scripts read it here.
    eprintln!(
        "dmem serve: listening on http://{}/ for {what}; Ctrl-C ends",
        server.server_addr()
    );
    sys::catch_interrupt();
    let pids = args.pids;
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                while !INTERRUPTED.load(Ordering::SeqCst) {
                    match server.recv_timeout(Duration::from_millis(200)) {
                        Ok(Some(req)) => answer(req, &pids),
                        Ok(None) => {}
                        Err(e) => eprintln!("dmem serve: {e}"),
                    }
                }
            });
        }
    });
    Ok(0)
}

fn answer(req: Request, pids: &[i32]) {
    let url = req.url().to_owned();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    let reply = match (req.method(), path) {
        (tiny_http::Method::Get | tiny_http::Method::Head, _) => match path {
            "/debug/pprof/heap" => heap(pids, query),
            "/debug/pprof/" | "/debug/pprof" | "/" => index(pids),
            "/metrics" => metrics(pids),
            _ => Reply::error(
                404,
                format!("no such page {path}: try /debug/pprof/heap, /debug/pprof/ or /metrics"),
            ),
        },
        (m, _) => Reply::error(405, format!("{m} is not answered here, only GET")),
    };
    if reply.status != 200 {
        let line = String::from_utf8_lossy(&reply.body);
        eprintln!(
            "dmem serve: {} {url}: {} {}",
            req.method(),
            reply.status,
            line.trim_end()
        );
    }
    let header = Header::from_bytes("Content-Type", reply.content_type).expect("a valid header");
    let response = Response::from_data(reply.body)
        .with_status_code(reply.status)
        .with_header(header);
    // The client may have gone away; nothing to do about it.
    let _ = req.respond(response);
}

/// The processes served now: those named, or every one found.
fn served(pids: &[i32]) -> Vec<(i32, String)> {
    if pids.is_empty() {
        live::preloaded()
    } else {
        pids.iter()
            .map(|&p| {
                let name = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                (p, name.trim_end().to_owned())
            })
            .collect()
    }
}

/// `pid=N` from a query string.
fn query_pid(query: &str) -> Option<std::result::Result<i32, String>> {
    let v = query.split('&').find_map(|kv| kv.strip_prefix("pid="))?;
    Some(
        v.parse::<i32>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("pid={v} is not a process id")),
    )
}

/// The status for a process that could not be read: gone, refused, or without the library.
fn status_of_failure(pid: i32) -> u16 {
    if !live::alive(pid) {
        return 404;
    }
    match Mappings::of_process(pid) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => 403,
        _ => 404,
    }
}

fn heap(pids: &[i32], query: &str) -> Reply {
    let pid = match query_pid(query) {
        Some(Ok(p)) => p,
        Some(Err(why)) => return Reply::error(400, why),
        None => match served(pids).as_slice() {
            [(one, _)] => *one,
            [] => return Reply::error(404, "no process with libdmem.so loaded is readable".into()),
            _ => {
                return Reply::error(
                    400,
                    "several processes are served: name one with ?pid=PID (see /debug/pprof/)".into(),
                )
            }
        },
    };
    if !pids.is_empty() && !pids.contains(&pid) {
        return Reply::error(404, format!("process {pid} is not among those served"));
    }
    let snap = match Source::Image(Target::Pid(pid)).take() {
        Ok(s) => s,
        Err(f) => return Reply::error(status_of_failure(pid), f.msg),
    };
    let mut body = Vec::new();
    match crate::model::pprof::write(&snap, &mut body) {
        Ok(()) => Reply::ok("application/octet-stream", body),
        Err(e) => Reply::error(500, format!("cannot write the profile: {e}")),
    }
}

fn index(pids: &[i32]) -> Reply {
    let mut html =
        String::from("<html><head><title>dmem serve</title></head><body>\n<h1>Heap profiles</h1>\n<ul>\n");
    let procs = served(pids);
    for (pid, name) in &procs {
        let _ = writeln!(
            html,
            "<li><a href=\"heap?pid={pid}\">heap</a> of process {pid} ({})</li>",
            escape_html(name)
        );
    }
    if procs.is_empty() {
        html.push_str("<li>no process with libdmem.so loaded is readable</li>\n");
    }
    html.push_str("</ul>\n<p><a href=\"/metrics\">metrics</a></p>\n</body></html>\n");
    Reply::ok("text/html; charset=utf-8", html.into_bytes())
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A metric family from the counters: name, type, help, and its value.
type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&heapwalk::Counters) -> u64,
);

fn metrics(pids: &[i32]) -> Reply {
    let started = Instant::now();
    let mut rows = Vec::new();
    for (pid, name) in served(pids) {
        let t = Instant::now();
        let read = live::open(pid).and_then(|p| p.counters());
        match read {
            Ok(c) => rows.push((pid, name, c, t.elapsed())),
            // A process named on the command line that cannot be read is said in the log; one
            // found by the search that ended since is simply left out.
            Err(f) if !pids.is_empty() => eprintln!("dmem serve: /metrics: {}", f.msg),
            Err(_) => {}
        }
    }
    let mut out = String::new();
    let families: [Family; 4] = [
        (
            "dmem_live_bytes",
            "gauge",
            "Bytes in live blocks, from libdmem's counters.",
            |c| c.live_bytes,
        ),
        (
            "dmem_live_blocks",
            "gauge",
            "Live blocks, from libdmem's counters.",
            |c| c.live_blocks,
        ),
        (
            "dmem_allocations_total",
            "counter",
            "Blocks allocated since the process started.",
            |c| c.allocs,
        ),
        (
            "dmem_frees_total",
            "counter",
            "Blocks freed since the process started.",
            |c| c.frees,
        ),
    ];
    for (metric, kind, help, value) in families {
        let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} {kind}");
        for (pid, name, c, _) in &rows {
            let _ = writeln!(
                out,
                "{metric}{{pid=\"{pid}\",comm=\"{}\"}} {}",
                label(name),
                value(c)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP dmem_read_seconds How long reading the process's counters took.\n# TYPE dmem_read_seconds gauge"
    );
    for (pid, name, _, took) in &rows {
        let _ = writeln!(
            out,
            "dmem_read_seconds{{pid=\"{pid}\",comm=\"{}\"}} {:.6}",
            label(name),
            took.as_secs_f64()
        );
    }
    let _ = writeln!(
        out,
        "# HELP dmem_processes Processes served that could be read.\n# TYPE dmem_processes gauge\ndmem_processes {}",
        rows.len()
    );
    let _ = writeln!(
        out,
        "# HELP dmem_scrape_seconds How long this answer took, finding the processes included.\n# TYPE dmem_scrape_seconds gauge\ndmem_scrape_seconds {:.6}",
        started.elapsed().as_secs_f64()
    );
    Reply::ok("text/plain; version=0.0.4; charset=utf-8", out.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_names_its_process_or_says_why_not() {
        assert_eq!(query_pid("pid=42"), Some(Ok(42)));
        assert_eq!(query_pid("gc=1&pid=7"), Some(Ok(7)));
        assert_eq!(query_pid("seconds=30"), None);
        assert!(query_pid("pid=-3").unwrap().is_err());
        assert!(query_pid("pid=x").unwrap().is_err());
    }

    #[test]
    fn label_values_are_escaped_as_prometheus_reads_them() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
