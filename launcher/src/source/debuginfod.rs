//! A debuginfod client: an executable or its debug info fetched by build id from the servers
//! `DEBUGINFOD_URLS` names (space-separated, as elfutils and gdb read it), into the cache that
//! elfutils' client and gdb share (`DEBUGINFOD_CACHE_PATH`, else
//! `$XDG_CACHE_HOME/debuginfod_client`, else `~/.cache/debuginfod_client`; one directory per
//! build id holding `executable` and `debuginfo`).
//!
//! Bounded: a connection or a read that stalls for `DEBUGINFOD_TIMEOUT` seconds (90 by default,
//! as elfutils') gives up, a whole transfer stops after `DEBUGINFOD_MAXTIME` seconds (300 by
//! default) and at `DEBUGINFOD_MAXSIZE` bytes (1 GiB by default). A transfer of more than a
//! megabyte says so on stderr while it runs. A server is trusted with nothing: what it sends is
//! kept only when its own build id is the one asked for.

use crate::analysis::escape::show;
use crate::source::elf::ElfObject;
use std::collections::HashSet;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Executable,
    Debuginfo,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Executable => "executable",
            Kind::Debuginfo => "debuginfo",
        }
    }
}

/// The servers, in the order given.
pub fn urls() -> Vec<String> {
    std::env::var("DEBUGINFOD_URLS")
        .unwrap_or_default()
        .split_ascii_whitespace()
        .map(|u| u.trim_end_matches('/').to_owned())
        .collect()
}

fn cache_dir() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("DEBUGINFOD_CACHE_PATH")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("debuginfod_client")))
        .or_else(|| env("HOME").map(|d| d.join(".cache/debuginfod_client")))
}

fn env_number(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// What one run already asked for and did not get: each is asked for once.
static MISSED: Mutex<Option<HashSet<(String, Kind)>>> = Mutex::new(None);

/// The file of build `id` and `kind`, from the cache or a server; `name` names the object in
/// messages. None without servers, or when none has it.
pub fn fetch(id: &str, kind: Kind, name: &Path) -> Option<PathBuf> {
    let urls = urls();
    // The id comes from the target and becomes a path and a URL: hex only.
    if urls.is_empty() || id.len() < 2 || id.len() > 128 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let id = id.to_ascii_lowercase();
    let dir = cache_dir()?.join(&id);
    let file = dir.join(kind.word());
    if std::fs::metadata(&file).is_ok_and(|m| m.is_file() && m.len() > 0) && matches(&file, &id) {
        return Some(file);
    }
    // On a user's behalf only what that user may read of the cache is used (this thread opens
    // files with the user's rights); nothing is fetched, which would write, with the server's
    // rights, into the server's cache whatever build id a user's process names.
    if crate::sys::acting_for().is_some() {
        return None;
    }
    let key = (id.clone(), kind);
    if MISSED
        .lock()
        .ok()?
        .get_or_insert_with(HashSet::new)
        .contains(&key)
    {
        return None;
    }
    for url in &urls {
        match download(url, &id, kind, name, &dir, &file) {
            Ok(true) => return Some(file),
            Ok(false) => {}
            Err(why) => eprintln!(
                "dmem: warning: cannot fetch the {} of {} (build id {id}) from {url}: {why}",
                kind.word(),
                show(name)
            ),
        }
    }
    if let Ok(mut m) = MISSED.lock() {
        m.get_or_insert_with(HashSet::new).insert(key);
    }
    None
}

/// Whether the ELF file at `path` has build id `id`.
fn matches(path: &Path, id: &str) -> bool {
    ElfObject::open(path)
        .ok()
        .and_then(|o| o.build_id_hex())
        .is_some_and(|b| b == id)
}

/// Fetches `url/buildid/ID/KIND` into `file`: Ok(false) when the server has no such file.
fn download(url: &str, id: &str, kind: Kind, name: &Path, dir: &Path, file: &Path) -> Result<bool, String> {
    let stall = Duration::from_secs(env_number("DEBUGINFOD_TIMEOUT", 90));
    let max_time = Duration::from_secs(env_number("DEBUGINFOD_MAXTIME", 300));
    let max_size = env_number("DEBUGINFOD_MAXSIZE", 1 << 30);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(stall))
        .timeout_recv_response(Some(stall))
        .timeout_per_call(Some(max_time))
        .http_status_as_error(false)
        .max_redirects(4)
        .build()
        .into();
    let target = format!("{url}/buildid/{id}/{}", kind.word());
    let mut reply = agent.get(&target).call().map_err(|e| e.to_string())?;
    match reply.status().as_u16() {
        200 => {}
        404 => return Ok(false),
        code => return Err(format!("the server answered {code}")),
    }
    let length = reply.body().content_length();
    if length.is_some_and(|n| n > max_size) {
        return Err(format!(
            "it is {} bytes, more than DEBUGINFOD_MAXSIZE ({max_size})",
            length.unwrap_or(0)
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", show(dir)))?;
    let part = dir.join(format!(".{}.{}.part", kind.word(), std::process::id()));
    let body = reply.body_mut().with_config().limit(max_size).reader();
    let result = receive(
        body,
        &part,
        file,
        id,
        Progress::new(kind, name, url, length),
        max_time,
    );
    if result.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    result.map(|()| true)
}

/// Writes the reply's body to `part`, bounded by `max_time`, and moves it to `file` once it
/// proves to be of build `id`.
fn receive(
    mut body: impl Read,
    part: &Path,
    file: &Path,
    id: &str,
    mut progress: Progress,
    max_time: Duration,
) -> Result<(), String> {
    let mut out = std::fs::File::create(part).map_err(|e| format!("cannot write {}: {e}", show(part)))?;
    let start = Instant::now();
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0u64;
    loop {
        let n = body.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])
            .map_err(|e| format!("cannot write {}: {e}", show(part)))?;
        got += n as u64;
        progress.update(got);
        if start.elapsed() > max_time {
            return Err(format!(
                "it took longer than DEBUGINFOD_MAXTIME ({} s)",
                max_time.as_secs()
            ));
        }
    }
    progress.done(got);
    if !matches(part, id) {
        return Err("what it sent is not an ELF file of that build id".into());
    }
    std::fs::rename(part, file).map_err(|e| format!("cannot write {}: {e}", show(file)))
}

/// The line a large transfer prints on stderr: redrawn in place on a terminal, else one line
/// when it starts and one when it ends.
struct Progress {
    what: String,
    total: Option<u64>,
    shown: bool,
    tty: bool,
    last: Instant,
}

const LARGE: u64 = 1 << 20;

impl Progress {
    fn new(kind: Kind, name: &Path, url: &str, total: Option<u64>) -> Progress {
        Progress {
            what: format!(
                "fetching the {} of {} from {url}",
                kind.word(),
                name.file_name().map(show).unwrap_or_else(|| show(name))
            ),
            total,
            shown: false,
            tty: std::io::stderr().is_terminal(),
            last: Instant::now(),
        }
    }

    fn update(&mut self, got: u64) {
        let large = self.total.unwrap_or(got) > LARGE;
        if !large {
            return;
        }
        if !self.shown {
            self.shown = true;
            let of = self.total.map(|t| format!(" ({})", mib(t))).unwrap_or_default();
            if self.tty {
                eprint!("\rdmem: {}{of} ...", self.what);
            } else {
                eprintln!("dmem: {}{of} ...", self.what);
            }
        }
        if self.tty && self.last.elapsed() > Duration::from_millis(200) {
            self.last = Instant::now();
            let of = self.total.map(|t| format!(" of {}", mib(t))).unwrap_or_default();
            eprint!("\rdmem: {}: {}{of}   ", self.what, mib(got));
        }
    }

    fn done(&self, got: u64) {
        if self.shown {
            let lead = if self.tty { "\r" } else { "" };
            eprintln!("{lead}dmem: {}: {} done   ", self.what, mib(got));
        }
    }
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / (1 << 20) as f64)
}
