//! `DMEM_OPTS`: one table drives the parser, the `help` text and docs/options.md's table.
//!
//! Parsing happens once at start-up, before the real allocator is known, so it allocates nothing:
//! it walks the environment string in place and copies the one string-valued option into a
//! fixed buffer.

use crate::analysis::reach::{Class, Heuristic};
use crate::sink;
use core::cell::UnsafeCell;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Unwinder {
    /// The cached CFI unwinder.
    Fast,
    /// The `backtrace` crate (the platform's `_Unwind_Backtrace`).
    Backtrace,
}

pub const PATH_MAX: usize = 4096;

/// Which processes `abort-shutdown` aborts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum AbortIn {
    Never,
    /// The process started with the option (by `dmem run`, or by whoever set DMEM_OPTS), also
    /// after it execs another program; not the processes it starts. Its descendants learn its
    /// id from `abort-pid`.
    Started,
    /// Every process started under it too, forked or exec'd.
    All,
}

/// The parsed options. Written once by `parse` before any other thread can exist (from the
/// library constructor or the first allocation), read-only afterwards.
pub struct Options {
    pub trace_stderr: bool,
    pub trace_file: [u8; PATH_MAX],
    pub record: bool,
    pub abort_shutdown: AbortIn,
    /// The id of the process `abort-shutdown` aborts, as its descendants are told; 0 when this
    /// process is that one.
    pub abort_pid: u32,
    pub ignore_bad_free: bool,
    pub unwinder: Unwinder,
    pub leak_report: bool,
    /// Which leak classes the report lists, as a set of `reach::Class::bit`s.
    pub leak_show: u8,
    /// Which leak classes `leak_exitcode` counts, as a set of `reach::Class::bit`s.
    pub leak_errors: u8,
    /// memcheck's heuristics the report applies, as a set of `reach::Heuristic::bit`s.
    pub leak_heuristics: u8,
    pub report_file: [u8; PATH_MAX],
    /// Exit status to use when the leak report finds leaks; None keeps the program's.
    pub leak_exitcode: Option<i32>,
    pub freeres: bool,
    /// With `leak_report`, report when a fatal signal with its default action ends the process.
    pub signal_report: bool,
    /// Append to the trace and report files rather than truncate them.
    pub append_files: bool,
    /// Events each list's free history keeps (`history.rs`); 0 keeps none.
    pub history: usize,
    /// Record allocations in the history too.
    pub history_allocs: bool,
    /// The `suppressions=FILE` paths, each NUL-terminated, one after the other; `suppressions_len`
    /// bytes of it are used.
    pub suppressions: [u8; PATH_MAX],
    pub suppressions_len: usize,
    /// After each stack of the report, a valgrind suppression matching it.
    pub gen_suppressions: bool,
    /// The report as valgrind's XML instead of text.
    pub report_xml: bool,
    /// Count allocations per allocation stack (`stack_counts.rs`).
    pub count_allocs: bool,
}

impl Options {
    /// The suppression files given, in order.
    pub fn suppression_files(&self) -> impl Iterator<Item = &[u8]> {
        self.suppressions[..self.suppressions_len]
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
    }
}

/// Sets an option from its value; false if the value is not one it takes.
type Setter = fn(&mut Options, &[u8]) -> bool;

enum Kind {
    Flag(fn(&mut Options)),
    Value(&'static str, Setter),
    /// A value that is a list, which may go on past the commas that separate options, as
    /// valgrind writes its lists: `show-leak-kinds=definite,possible` (a word that is no
    /// option continues the list before it).
    List(&'static str, Setter),
}

struct Spec {
    name: &'static str,
    kind: Kind,
    help: &'static str,
}

/// The options, in the order `help` and docs/options.md list them.
static TABLE: &[Spec] = &[
    Spec {
        name: "trace-stderr",
        kind: Kind::Flag(|o| o.trace_stderr = true),
        help: "print one line per call to stderr: malloc(512) = 0x..., free(0x...)",
    },
    Spec {
        name: "trace-file",
        kind: Kind::Value("PATH", |o, v| set_path(&mut o.trace_file, v)),
        help: "write the call trace to PATH instead of stderr; %p in PATH is the process id, as for report-file",
    },
    Spec {
        name: "log-allocs",
        kind: Kind::Flag(|o| o.record = true),
        help: "record the thread and stack of every live block on the lists (the default)",
    },
    Spec {
        name: "no-log-allocs",
        kind: Kind::Flag(|o| o.record = false),
        help: "keep headers but record no stacks and keep no lists (lowest overhead)",
    },
    Spec {
        name: "abort-shutdown",
        kind: Kind::Flag(|o| o.abort_shutdown = AbortIn::Started),
        help:
            "abort() at exit (exit, return from main, _exit, quick_exit) after all other destructors, so the core holds exactly the unfreed blocks; in the process started with it only (after it execs too), not in the processes it starts",
    },
    Spec {
        name: "abort-shutdown",
        kind: Kind::Value("all", |o, v| {
            if v == b"all" {
                o.abort_shutdown = AbortIn::All;
            }
            v == b"all"
        }),
        help: "abort-shutdown in every process started under it too, forked or exec'd: each writes a core",
    },
    Spec {
        name: "abort-pid",
        kind: Kind::Value("PID", |o, v| {
            let parsed = core::str::from_utf8(v).ok().and_then(|s| s.parse::<u32>().ok());
            o.abort_pid = parsed.unwrap_or(0);
            o.abort_pid != 0
        }),
        help: "the process abort-shutdown aborts (set for its descendants by the process started with abort-shutdown)",
    },
    Spec {
        name: "leak-report",
        kind: Kind::Flag(|o| o.leak_report = true),
        help: "at exit, however the program ends (exit, _exit, quick_exit, a fatal signal), report the blocks no pointer reaches, by stack, as valgrind classes them (definitely, indirectly, possibly lost; still reachable)",
    },
    Spec {
        name: "show-leak-kinds",
        kind: Kind::List("LIST", set_leak_show),
        help: "leak classes the report lists, as valgrind's --show-leak-kinds: definite, indirect, possible, reachable, separated by commas or +, or all or none (default definite,possible, as valgrind's)",
    },
    Spec {
        name: "errors-for-leak-kinds",
        kind: Kind::List("LIST", set_leak_errors),
        help: "leak classes that count for leak-exitcode, as valgrind's --errors-for-leak-kinds: the words of show-leak-kinds (default definite,possible, as valgrind's)",
    },
    Spec {
        name: "leak-show",
        kind: Kind::List("LIST", set_leak_show),
        help: "the former name of show-leak-kinds",
    },
    Spec {
        name: "leak-heuristics",
        kind: Kind::List("LIST", set_leak_heuristics),
        help: "interior pointers that count as reaching a block's start, as valgrind's --leak-check-heuristics: stdstring, length64, newarray, multipleinheritance, +-separated, or all (the default) or none",
    },
    Spec {
        name: "report-file",
        kind: Kind::Value("PATH", |o, v| set_path(&mut o.report_file, v)),
        help: "write the leak report to PATH instead of stderr; %p in PATH is the process id (a file per process), else descendants append to the file the first process created",
    },
    Spec {
        name: "append-files",
        kind: Kind::Flag(|o| o.append_files = true),
        help: "append to trace-file and report-file instead of truncating them (set for its descendants by the process that created them)",
    },
    Spec {
        name: "leak-exitcode",
        kind: Kind::Value("N", set_exitcode),
        help: "exit with status N (0-255) when the leak report finds blocks of the classes errors-for-leak-kinds names (definitely or possibly lost by default) that no suppression matches",
    },
    Spec {
        name: "suppressions",
        kind: Kind::Value("FILE", add_suppressions),
        help: "leave out of the leak report, and of leak-exitcode's count, the blocks a suppression in FILE matches: LeakSanitizer's leak:PATTERN lines or valgrind's Memcheck:Leak blocks (as --gen-suppressions writes them); may be given more than once",
    },
    Spec {
        name: "gen-suppressions",
        kind: Kind::Flag(|o| o.gen_suppressions = true),
        help: "after each stack of the leak report, print a valgrind suppression that matches it, for a suppressions file",
    },
    Spec {
        name: "report-format",
        kind: Kind::Value("text|xml", set_report_format),
        help: "the leak report as text (the default) or as valgrind's XML (protocol 4), for CI viewers that read valgrind's",
    },
    Spec {
        name: "no-signal-report",
        kind: Kind::Flag(|o| o.signal_report = false),
        help: "with leak-report, do not report when a fatal signal with its default action (SIGTERM, SIGINT, a crash) ends the program",
    },
    Spec {
        name: "no-freeres",
        kind: Kind::Flag(|o| o.freeres = false),
        help: "at exit, do not call __libc_freeres and __gnu_cxx::__freeres to drop the runtimes' own buffers before the report or abort",
    },
    Spec {
        name: "ignore-bad-free",
        kind: Kind::Flag(|o| o.ignore_bad_free = true),
        help: "report a free of a foreign pointer or a double free, then carry on instead of aborting",
    },
    Spec {
        name: "history",
        kind: Kind::Value("N", set_history),
        help: "keep the last N frees (1 to 1048576; N rounded up to a power of two) per thread's list in memory, each with its address, size, thread, time, the stack of the free and the block's allocation stack, for dmem history, dmem whatis and double-free messages; 208 bytes per event",
    },
    Spec {
        name: "history-allocs",
        kind: Kind::Flag(|o| o.history_allocs = true),
        help: "with history=N, record allocations in the history too",
    },
    Spec {
        name: "count-allocs",
        kind: Kind::Flag(|o| o.count_allocs = true),
        help: "count the blocks and bytes each allocation stack allocates, and how many of those blocks their thread frees before it allocates again, for exact allocation rates and temporary allocations per stack in dmem top, snapshot, serve and timeline; about 30 to 40 instructions more per malloc or free",
    },
    Spec {
        name: "unwinder",
        kind: Kind::Value("fast|backtrace", set_unwinder),
        help: "how stacks are captured: cached CFI unwinder, or the platform unwinder",
    },
    Spec {
        name: "help",
        kind: Kind::Flag(|_| print_help()),
        help: "print this table to stderr; the program then runs as usual",
    },
];

/// Stores a path NUL-terminated, for open(2).
fn set_path(dst: &mut [u8; PATH_MAX], v: &[u8]) -> bool {
    if v.is_empty() || v.len() >= PATH_MAX || v.contains(&0) {
        return false;
    }
    // Only `%p` and `%%` may follow a `%`, and the longest process id must still fit.
    if !crate::sink::expand(v, u32::MAX, &mut [0; PATH_MAX]) {
        return false;
    }
    *dst = [0; PATH_MAX];
    dst[..v.len()].copy_from_slice(v);
    true
}

/// Adds a suppressions file to the NUL-separated list (paths are read at start-up, when the
/// library can allocate; parsing cannot).
fn add_suppressions(o: &mut Options, v: &[u8]) -> bool {
    let at = o.suppressions_len;
    if v.is_empty() || v.contains(&0) || at + v.len() + 1 > PATH_MAX {
        return false;
    }
    o.suppressions[at..at + v.len()].copy_from_slice(v);
    o.suppressions[at + v.len()] = 0;
    o.suppressions_len = at + v.len() + 1;
    true
}

fn set_report_format(o: &mut Options, v: &[u8]) -> bool {
    o.report_xml = match v {
        b"text" => false,
        b"xml" => true,
        _ => return false,
    };
    true
}

fn set_history(o: &mut Options, v: &[u8]) -> bool {
    let parsed = core::str::from_utf8(v).ok().and_then(|s| s.parse::<usize>().ok());
    match parsed {
        Some(n @ 1..=1_048_576) => {
            o.history = n;
            true
        }
        _ => false,
    }
}

fn set_exitcode(o: &mut Options, v: &[u8]) -> bool {
    let parsed = core::str::from_utf8(v).ok().and_then(|s| s.parse::<u8>().ok());
    o.leak_exitcode = parsed.map(i32::from);
    parsed.is_some()
}

/// The classes a list of valgrind's leak kinds names: `all`, `none`, or the words
/// separated by commas or `+`.
fn leak_kinds(v: &[u8]) -> Option<u8> {
    match core::str::from_utf8(v).ok()? {
        "none" => Some(0),
        text => Class::parse_set(text).ok(),
    }
}

fn set_leak_show(o: &mut Options, v: &[u8]) -> bool {
    leak_kinds(v).map(|set| o.leak_show = set).is_some()
}

fn set_leak_errors(o: &mut Options, v: &[u8]) -> bool {
    leak_kinds(v).map(|set| o.leak_errors = set).is_some()
}

/// The heuristics a `leak-heuristics` word names, `+`-separated as for `leak-show`.
fn set_leak_heuristics(o: &mut Options, v: &[u8]) -> bool {
    match core::str::from_utf8(v).ok().map(Heuristic::parse_set) {
        Some(Ok(set)) => {
            o.leak_heuristics = set;
            true
        }
        _ => false,
    }
}

/// valgrind's default for --show-leak-kinds and --errors-for-leak-kinds (3.19): definitely
/// and possibly lost.
const KINDS_DEFAULT: u8 = Class::DefinitelyLost.bit() | Class::PossiblyLost.bit();

fn set_unwinder(o: &mut Options, v: &[u8]) -> bool {
    o.unwinder = match v {
        b"fast" => Unwinder::Fast,
        b"backtrace" => Unwinder::Backtrace,
        _ => return false,
    };
    true
}

struct Cell(UnsafeCell<Options>);
// SAFETY: the options are written only by `parse`, which runs once before the library hands out
// its first tracked block (and so before any thread reads them); afterwards they are read-only.
unsafe impl Sync for Cell {}

static OPTIONS: Cell = Cell(UnsafeCell::new(Options {
    trace_stderr: false,
    trace_file: [0; PATH_MAX],
    record: true,
    abort_shutdown: AbortIn::Never,
    abort_pid: 0,
    ignore_bad_free: false,
    unwinder: Unwinder::Fast,
    leak_report: false,
    leak_show: KINDS_DEFAULT,
    leak_errors: KINDS_DEFAULT,
    leak_heuristics: Heuristic::DEFAULT,
    report_file: [0; PATH_MAX],
    leak_exitcode: None,
    freeres: true,
    signal_report: true,
    append_files: false,
    history: 0,
    history_allocs: false,
    suppressions: [0; PATH_MAX],
    suppressions_len: 0,
    gen_suppressions: false,
    report_xml: false,
    count_allocs: false,
}));

/// The process id `abort-shutdown` aborts when this process is the one started with it.
static STARTED_PID: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

/// Remembers this process as the one `abort-shutdown` aborts, unless an ancestor said which
/// one that is (`abort-pid`): the constructor's call.
pub fn note_started_process() {
    let o = get();
    let pid = if o.abort_pid != 0 {
        o.abort_pid
    } else {
        sink::getpid()
    };
    STARTED_PID.store(pid, core::sync::atomic::Ordering::Relaxed);
}

/// Whether `abort-shutdown` aborts this process at exit: every process with `=all`, else only
/// the one started with it (a forked child has another id).
pub fn aborts_here() -> bool {
    match get().abort_shutdown {
        AbortIn::Never => false,
        AbortIn::All => true,
        AbortIn::Started => sink::getpid() == STARTED_PID.load(core::sync::atomic::Ordering::Relaxed),
    }
}

impl Options {
    /// What `sink.rs` needs of the options: the output files and where the trace and report go.
    pub fn files(&'static self) -> sink::Files {
        sink::Files {
            report_file: &self.report_file,
            trace_file: &self.trace_file,
            append_files: self.append_files,
            leak_report: self.leak_report,
            trace_stderr: self.trace_stderr,
        }
    }
}

pub fn get() -> &'static Options {
    // SAFETY: see `Cell`: no writer exists once readers can run.
    unsafe { &*OPTIONS.0.get() }
}

/// Parses `DMEM_OPTS`. Must run once, single-threaded, before `get` is used.
pub fn parse() {
    // glibc's getenv reads `environ` without a lock, so it is safe from the first allocation.
    // SAFETY: getenv returns a NUL-terminated string owned by the environment, or null; nothing
    // here modifies the environment while we read it.
    let raw = unsafe { libc::getenv(c"DMEM_OPTS".as_ptr()) };
    if raw.is_null() {
        return;
    }
    // SAFETY: `raw` is a valid C string (above).
    let bytes = unsafe { core::ffi::CStr::from_ptr(raw) }.to_bytes();
    // SAFETY: single-threaded start-up (see `parse`'s contract): no reader exists yet.
    let opts = unsafe { &mut *OPTIONS.0.get() };
    // The list option the last word set, if any: where its value starts, and its setter.
    let mut list: Option<(usize, Setter)> = None;
    let mut start = 0;
    for word in bytes.split(|&b| b == b',') {
        let end = start + word.len();
        let word_start = start;
        start = end + 1;
        if word.is_empty() {
            continue;
        }
        let (key, value) = match word.iter().position(|&b| b == b'=') {
            Some(i) => (&word[..i], Some(&word[i + 1..])),
            None => (word, None),
        };
        // A name may be both a flag and a value (`abort-shutdown`, `abort-shutdown=all`).
        let spec = TABLE.iter().find(|s| {
            s.name.as_bytes() == key
                && matches!(
                    (&s.kind, value),
                    (Kind::Flag(_), None) | (Kind::Value(..) | Kind::List(..), Some(_))
                )
        });
        if let (None, None, Some((from, set))) = (spec, value, list) {
            // A word that is no option goes on with the list before it: the list is read again
            // from its start through this word.
            if !set(opts, &bytes[from..end]) {
                warn_bad(word);
            }
            continue;
        }
        list = None;
        let ok = match (spec.map(|s| &s.kind), value) {
            (Some(Kind::Flag(set)), None) => {
                set(opts);
                true
            }
            (Some(Kind::Value(_, set)), Some(v)) => set(opts, v),
            (Some(Kind::List(_, set)), Some(v)) => {
                let ok = set(opts, v);
                if ok {
                    list = Some((word_start + key.len() + 1, *set));
                }
                ok
            }
            _ => false,
        };
        if !ok {
            warn_bad(word);
        }
    }
}

fn warn_bad(word: &[u8]) {
    let mut out = sink::stderr();
    out.str("dmem: ignoring unknown or malformed option '")
        .escaped(word)
        .str("' in DMEM_OPTS; valid options: ");
    for (i, s) in TABLE.iter().enumerate() {
        if i > 0 {
            out.str(", ");
        }
        out.str(s.name);
        if let Kind::Value(arg, _) | Kind::List(arg, _) = s.kind {
            out.str("=").str(arg);
        }
    }
    out.str("\n").flush();
}

fn print_help() {
    let mut out = sink::stderr();
    out.str("dmem options (DMEM_OPTS=opt,opt,...):\n").flush();
    for s in TABLE {
        out.str("  ").str(s.name);
        let mut width = s.name.len();
        if let Kind::Value(arg, _) | Kind::List(arg, _) = s.kind {
            out.str("=").str(arg);
            width += 1 + arg.len();
        }
        for _ in width..24 {
            out.str(" ");
        }
        out.str(" ").str(s.help).str("\n").flush();
    }
}
