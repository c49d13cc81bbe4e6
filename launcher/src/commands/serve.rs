//! `dmem serve`: heap profiles and metrics over HTTP, where continuous profilers (Parca,
//! Pyroscope, Go's pprof) and Prometheus scrape them. Go's convention names the paths:
//! `/debug/pprof/heap` answers the gzipped profile `dmem snapshot` writes, `/debug/pprof/` lists
//! the processes, and `/metrics` is Prometheus's text exposition of the library's counters.
//!
//! Each request reads its process afresh, as `dmem top` does, never stopping it, and gets only
//! what its sender may read (`access`). Profiles and the rest are answered by two fixed pools of
//! workers (`http`), so at most `HEAP_WORKERS` walks (and profiles) are in memory at once however
//! many scrapers call, and `/metrics`, which reads counters and walks nothing, never waits
//! behind them.

mod access;
mod http;

use crate::analysis::escape::markup;
use crate::cli::ServeArgs;
use crate::commands::snapshot::Source;
use crate::source::heapwalk;
use crate::source::image::Target;
use crate::source::live;
use crate::source::mappings::Mappings;
use crate::sys::{self, INTERRUPTED};
use crate::{failed, Result};
use access::{Gate, Reader};
use http::{Lane, Reply, Request};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Instant;

/// Profiles read at once.
const HEAP_WORKERS: usize = 4;
/// Profile requests that may wait for a worker; past that they are answered 503.
const HEAP_QUEUE: usize = 16;
/// Workers, and requests waiting for them, for everything else: the index, metrics, errors.
const LIGHT_WORKERS: usize = 2;
const LIGHT_QUEUE: usize = 64;

pub fn main(args: ServeArgs) -> Result<i32> {
    let (gate, warning) = Gate::new(&args.listen, args.token_file.as_deref(), args.no_token)?;
    let listener = std::net::TcpListener::bind(args.listen)
        .map_err(|e| failed(format!("cannot listen on {}: {e}", args.listen)))?;
    let bound = listener
        .local_addr()
        .map_err(|e| failed(format!("cannot listen on {}: {e}", args.listen)))?;
    let what = if args.pids.is_empty() {
        "every process with libdmem.so loaded that this user may read".to_owned()
    } else {
        let pids: Vec<String> = args.pids.iter().map(i32::to_string).collect();
        format!("process {}", pids.join(", "))
    };
    // The address actually bound (a port of 0 asks the system for one): scripts read it here.
    eprintln!("dmem serve: listening on http://{bound}/ for {what}; Ctrl-C ends");
    if let Some(w) = warning {
        eprintln!("dmem serve: warning: {w}");
    }
    sys::catch_interrupt();
    let server = Server {
        pids: args.pids,
        gate,
        told: Mutex::new(HashSet::new()),
    };
    let answer = |req: &Request| server.answer(req);
    let lanes = [
        Lane {
            what: "profiles",
            workers: HEAP_WORKERS,
            queue: HEAP_QUEUE,
            answer: &answer,
        },
        Lane {
            what: "pages and metrics",
            workers: LIGHT_WORKERS,
            queue: LIGHT_QUEUE,
            answer: &answer,
        },
    ];
    let pick = |req: &Request| usize::from(split_target(&req.target).0 != "/debug/pprof/heap");
    http::run(listener, &lanes, &pick, &access::peers, &INTERRUPTED)
        .map_err(|e| failed(format!("stopped serving: {e}")))?;
    Ok(0)
}

/// A request target's path and query.
fn split_target(target: &str) -> (&str, &str) {
    target.split_once('?').unwrap_or((target, ""))
}

struct Server {
    /// The processes named on the command line; empty for every one found.
    pids: Vec<i32>,
    gate: Gate,
    /// Processes whose counters were refused, so that the log says so once for each.
    told: Mutex<HashSet<i32>>,
}

impl Server {
    fn answer(&self, req: &Request) -> Reply {
        let (path, query) = split_target(&req.target);
        if req.method != "GET" && req.method != "HEAD" {
            return Reply::error(405, format!("{} is not answered here, only GET", req.method))
                .with_header("Allow", "GET, HEAD".into());
        }
        let reader = match self.gate.reader(req) {
            Ok(r) => r,
            Err(reply) => return reply,
        };
        match path {
            "/debug/pprof/heap" => heap(&self.pids, reader, query),
            "/debug/pprof/" | "/debug/pprof" | "/" => index(&self.pids, reader),
            "/metrics" => self.metrics(reader),
            _ => Reply::error(
                404,
                format!("no such page {path}: try /debug/pprof/heap, /debug/pprof/ or /metrics"),
            ),
        }
    }
}

/// The processes served now that `reader` may read: those named, or every one found.
fn served(pids: &[i32], reader: Reader) -> Vec<(i32, String)> {
    let all = if pids.is_empty() {
        live::preloaded()
    } else {
        pids.iter()
            .map(|&p| {
                let name = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                (p, name.trim_end().to_owned())
            })
            .collect()
    };
    all.into_iter().filter(|(p, _)| reader.may_read_now(*p)).collect()
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

/// `read` of process `pid` for `reader`: refused unless the reader may read the process, and
/// thrown away if the process changed its user ids, or ended and left its id to another,
/// while it was read.
///
/// For a local user other than the server's own, `read` runs with that user's file rights
/// (`sys::with_file_rights_of`): the process's memory is read as before, but every file opened
/// to name its frames (a mapped object, its debug file, a file its DWARF names) is opened only
/// if that user may open it. Else `dmem serve`, often root, would be a confused deputy: a
/// process of the user's may have a file mapped that the user cannot read (handed over by a
/// privileged parent, or opened before it dropped privileges), and its symbols are not the
/// user's to learn. A file refused is shown as `file+offset`, with one warning in the log.
fn read_for<T: Send>(
    reader: Reader,
    pid: i32,
    read: impl FnOnce() -> Result<T> + Send,
) -> std::result::Result<T, Reply> {
    let failed_read = |f: crate::Fail| Reply::error(status_of_failure(pid), f.msg);
    if !reader.restricted() {
        return read().map_err(failed_read);
    }
    let before = access::owner(pid).map_err(|_| Reply::error(404, format!("there is no process {pid}")))?;
    reader
        .may_read(pid, &before)
        .map_err(|why| Reply::error(403, why))?;
    let got = match reader {
        Reader::User(uid) if uid != sys::euid() => {
            sys::with_file_rights_of(uid, read).map_err(|why| Reply::error(500, why))?
        }
        _ => read(),
    }
    .map_err(failed_read)?;
    match access::owner(pid) {
        Ok(after) if after == before => Ok(got),
        Ok(_) => Err(Reply::error(
            403,
            format!("process {pid} changed its user ids while it was read"),
        )),
        Err(_) => Err(Reply::error(
            404,
            format!("process {pid} ended while it was read"),
        )),
    }
}

fn heap(pids: &[i32], reader: Reader, query: &str) -> Reply {
    let pid = match query_pid(query) {
        Some(Ok(p)) => p,
        Some(Err(why)) => return Reply::error(400, why),
        None => match served(pids, reader).as_slice() {
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
    // The profile is written where it is read: a snapshot's frames are shared within the
    // thread that named them.
    let profile = read_for(reader, pid, || {
        let snap = Source::Image(Target::Pid(pid)).take()?;
        let mut body = Vec::new();
        crate::model::pprof::write(&snap, &mut body)
            .map(|()| body)
            .map_err(|e| failed(format!("cannot write the profile: {e}")))
    });
    match profile {
        Ok(body) => Reply::ok("application/octet-stream", body),
        Err(reply) => reply,
    }
}

fn index(pids: &[i32], reader: Reader) -> Reply {
    let mut html =
        String::from("<html><head><title>dmem serve</title></head><body>\n<h1>Heap profiles</h1>\n<ul>\n");
    let procs = served(pids, reader);
    for (pid, name) in &procs {
        let _ = writeln!(
            html,
            "<li><a href=\"heap?pid={pid}\">heap</a> of process {pid} ({})</li>",
            markup(name)
        );
    }
    if procs.is_empty() {
        html.push_str("<li>no process with libdmem.so loaded is readable</li>\n");
    }
    html.push_str("</ul>\n<p><a href=\"/metrics\">metrics</a></p>\n</body></html>\n");
    Reply::ok("text/html; charset=utf-8", html.into_bytes())
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

/// Counters no process could hold: more live blocks, each with its header, and bytes than all
/// its mappings together, which a tampered or overwritten counter can say. The line says why.
fn impossible(c: &heapwalk::Counters, header_size: u64, mapped: u64) -> Option<String> {
    let held = u128::from(c.live_blocks) * u128::from(header_size) + u128::from(c.live_bytes);
    (held > u128::from(mapped)).then(|| {
        format!(
            "its counters say {} live blocks holding {} bytes, which with a {header_size}-byte header each is more \
             than the {mapped} bytes it has mapped",
            c.live_blocks, c.live_bytes
        )
    })
}

/// Bytes mapped by a process, all mappings together.
fn mapped(maps: &Mappings) -> u64 {
    maps.list.iter().map(|m| m.end.saturating_sub(m.start)).sum()
}

impl Server {
    fn metrics(&self, reader: Reader) -> Reply {
        let started = Instant::now();
        let (rows, left_out) = self.counters(reader);
        let text = exposition(&rows, &left_out, started);
        Reply::ok("text/plain; version=0.0.4; charset=utf-8", text.into_bytes())
    }

    /// The counters of every process the reader may read, with how long each read took; and
    /// the processes left out because their counters cannot be true, each with the reason.
    fn counters(&self, reader: Reader) -> (Vec<Row>, Vec<String>) {
        let mut rows = Vec::new();
        let mut left_out = Vec::new();
        for (pid, name) in served(&self.pids, reader) {
            let t = Instant::now();
            let read = read_for(reader, pid, || {
                let p = live::open(pid)?;
                let c = p.counters()?;
                // The mappings are read again after the counters, so a block mapped in between
                // is not taken for an impossible one.
                let now = Mappings::of_process(pid).map_or(0, |m| mapped(&m));
                Ok((c, p.layout.header_size, mapped(&p.maps).max(now)))
            });
            match read {
                Ok((c, header_size, bytes)) => match impossible(&c, header_size, bytes) {
                    None => rows.push((pid, name, c, t.elapsed())),
                    Some(why) => {
                        let line = format!("process {pid} ({name}) is left out: {why}");
                        if self.told.lock().unwrap_or_else(|e| e.into_inner()).insert(pid) {
                            eprintln!("dmem serve: /metrics: {line}");
                        }
                        left_out.push(line);
                    }
                },
                // A process named on the command line that cannot be read is said in the log;
                // one found by the search that ended since is simply left out.
                Err(reply) if !self.pids.is_empty() => {
                    let line = String::from_utf8_lossy(&reply.body);
                    eprintln!("dmem serve: /metrics: {}", line.trim_end());
                }
                Err(_) => {}
            }
        }
        (rows, left_out)
    }
}

/// One process's counters as `/metrics` lists them: its id, name, counters and read time.
type Row = (i32, String, heapwalk::Counters, std::time::Duration);

/// The Prometheus text exposition of the rows.
fn exposition(rows: &[Row], left_out: &[String], started: Instant) -> String {
    let mut out = String::new();
    for line in left_out {
        let _ = writeln!(out, "# {line}");
    }
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
        for (pid, name, c, _) in rows {
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
    for (pid, name, _, took) in rows {
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
    out
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
    fn counters_more_than_the_mappings_hold_are_impossible() {
        let c = |blocks, bytes| heapwalk::Counters {
            live_blocks: blocks,
            live_bytes: bytes,
            allocs: blocks,
            frees: 0,
        };
        assert_eq!(impossible(&c(100, 6400), 112, 1 << 20), None);
        assert_eq!(impossible(&c(100, 6400), 112, 100 * 112 + 6400), None);
        let why = impossible(&c(1 << 40, 6400), 112, 1 << 30).unwrap();
        assert!(
            why.starts_with("its counters say 1099511627776 live blocks holding 6400 bytes"),
            "{why}"
        );
        assert!(impossible(&c(100, 6400), 112, 100 * 112 + 6399).is_some());
        // No sum wraps around to a small, believable number.
        assert!(impossible(&c(u64::MAX, u64::MAX), u64::MAX, u64::MAX).is_some());
    }

    #[test]
    fn label_values_are_escaped_as_prometheus_reads_them() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
