//! Files fetched by build id from debuginfod servers: an executable or its debug info, through
//! elfutils' own client library (`libdebuginfod.so.1`, loaded when first needed, as gdb loads
//! it). So the servers (`DEBUGINFOD_URLS`), the cache that gdb shares
//! (`DEBUGINFOD_CACHE_PATH`, else `$XDG_CACHE_HOME/debuginfod_client`, else
//! `~/.cache/debuginfod_client`; one directory per build id holding `executable` and
//! `debuginfo`) and the bounds (`DEBUGINFOD_TIMEOUT`, `DEBUGINFOD_MAXTIME`, `DEBUGINFOD_MAXSIZE`)
//! are read as elfutils reads them, by elfutils. A transfer of more than a megabyte says so on
//! stderr while it runs. A server is trusted with nothing: what it sends is kept only when its
//! own build id is the one asked for.

use crate::analysis::escape::show;
use crate::source::elf::ElfObject;
use crate::sys;
use std::collections::HashSet;
use std::io::{IsTerminal, Write};
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
    if let Some(found) = download(&id, kind, name) {
        return Some(found);
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

/// Asks elfutils' client for the file, warning once of a failure; the file is kept only when it
/// is an ELF file of build `id`.
fn download(id: &str, kind: Kind, name: &Path) -> Option<PathBuf> {
    let mut progress = Progress::new(kind, name);
    let answer = sys::debuginfod_find(id, kind == Kind::Executable, |got, total| {
        progress.update(got, total);
        true
    });
    let why = match answer {
        sys::Debuginfod::Found(file) => {
            progress.done();
            if matches(&file, id) {
                return Some(file);
            }
            // Out of the cache too, where the next run (or gdb) would take it for that build.
            let _ = std::fs::remove_file(&file);
            "what the server sent is not an ELF file of that build id".to_owned()
        }
        sys::Debuginfod::Missing => return None,
        sys::Debuginfod::Failed(e) => e.to_string(),
        sys::Debuginfod::NoClient => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!(
                    "dmem: warning: DEBUGINFOD_URLS is set, but elfutils' client library \
                     libdebuginfod.so.1 is not installed (Debian's libdebuginfod1), so nothing is fetched"
                )
            });
            return None;
        }
    };
    eprintln!(
        "dmem: warning: cannot fetch the {} of {} (build id {id}) from {}: {why}",
        kind.word(),
        show(name),
        urls().join(" ")
    );
    None
}

/// The line a large transfer prints on stderr: redrawn in place on a terminal, else one line
/// when it starts and one when it ends. Written with errors ignored: it runs inside the client
/// library's callback, which must not unwind.
struct Progress {
    what: String,
    got: u64,
    shown: bool,
    tty: bool,
    last: Instant,
}

const LARGE: u64 = 1 << 20;

impl Progress {
    fn new(kind: Kind, name: &Path) -> Progress {
        Progress {
            what: format!(
                "fetching the {} of {} from {}",
                kind.word(),
                name.file_name().map(show).unwrap_or_else(|| show(name)),
                urls().join(" ")
            ),
            got: 0,
            shown: false,
            tty: std::io::stderr().is_terminal(),
            last: Instant::now(),
        }
    }

    fn update(&mut self, got: u64, total: Option<u64>) {
        self.got = got;
        if total.unwrap_or(got) <= LARGE {
            return;
        }
        let mut err = std::io::stderr().lock();
        if !self.shown {
            self.shown = true;
            let of = total.map(|t| format!(" ({})", mib(t))).unwrap_or_default();
            let end = if self.tty { "" } else { "\n" };
            let lead = if self.tty { "\r" } else { "" };
            let _ = write!(err, "{lead}dmem: {}{of} ...{end}", self.what);
        }
        if self.tty && self.last.elapsed() > Duration::from_millis(200) {
            self.last = Instant::now();
            let of = total.map(|t| format!(" of {}", mib(t))).unwrap_or_default();
            let _ = write!(err, "\rdmem: {}: {}{of}   ", self.what, mib(got));
        }
    }

    fn done(&self) {
        if self.shown {
            let lead = if self.tty { "\r" } else { "" };
            let _ = writeln!(
                std::io::stderr(),
                "{lead}dmem: {}: {} done   ",
                self.what,
                mib(self.got)
            );
        }
    }
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / (1 << 20) as f64)
}
