//! The command line, declared with clap's derive: every subcommand gets the same help layout,
//! the same errors and shell completions from one declaration per option. Clap's multi-line
//! errors are folded into the launcher's one-line form (`dmem SUB: what is wrong; see ...`).

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Args, Parser, Subcommand};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// The same layout for every help text: usage first, so the first line says how to call it.
const TEMPLATE: &str = "{usage-heading} {usage}\n\n{about-with-newline}\n{all-args}{after-help}";

const MAIN_AFTER: &str = "\
'dmem SUBCOMMAND --help' describes each one. A first try:
  dmem run -o abort-shutdown -- PROG ARGS...   # a core at exit holding every unfreed block
  dmem report PROG core                        # which stacks hold the memory
  dmem top $(pidof PROG)                       # a running (preloaded) process's heap, live
  dmem snapshot $(pidof PROG) -o heap.pb.gz    # the heap as a pprof profile, for pprof -http

Environment:
  DMEM_LIB         the libdmem.so to preload instead of the one that came with dmem
  DMEM_GDB_SCRIPT  the gdb script (dmem.py) to use instead of the one that came with dmem
  DMEM_OPTS        the library's options when -o is not given; DMEM_OPTS=help lists them
  DEBUGINFOD_URLS  debuginfod servers to fetch a core's files from by build id (and
                   DEBUGINFOD_CACHE_PATH, _TIMEOUT, _MAXTIME, _MAXSIZE, as elfutils reads them)";

/// dmem: see what a program's heap holds, and where every block came from, in a core file or
/// in the running process
#[derive(Parser, Debug)]
#[command(
    name = "dmem",
    version,
    help_template = TEMPLATE,
    after_help = MAIN_AFTER,
    arg_required_else_help = true,
    subcommand_help_heading = "Subcommands",
    disable_help_subcommand = false
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Where the files a core mapped are looked for first, under the paths the core gives
    /// them (a customer's tree, as gdb's 'set sysroot'); each file is used only when its build
    /// id is the core's, else looked up in /usr/lib/debug/.build-id and on the debuginfod
    /// servers of $DEBUGINFOD_URLS
    #[arg(long, global = true, value_name = "DIR")]
    pub sysroot: Option<PathBuf>,
    /// The subcommand's name, for messages.
    #[arg(skip)]
    pub name: String,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    Run(RunArgs),
    /// Live blocks grouped by identical allocation stack, the most bytes first
    ///
    /// Each stack with its bytes, blocks and an example block, its frames symbolised from the
    /// program's and libraries' symbols and DWARF; then a total line.
    Summary(ListArgs),
    /// Every live block with its size, allocating thread and stack, by address
    ///
    /// Each block with its address, size and allocating thread, then its stack, its frames
    /// symbolised from the program's and libraries' symbols and DWARF; then a total line.
    Stacks(ListArgs),
    Walk(WalkArgs),
    /// The block that holds an address (interior ones too), and who allocated it
    ///
    /// The block, the offset of ADDR in it, and the thread and stack that allocated it; where
    /// the process kept a free history (DMEM_OPTS=history=N), also a block freed since that held
    /// ADDR: who freed it, when, and at which stack. ADDR is a number, 0x-prefixed for hex.
    Whatis(AddrArgs),
    /// The lists checked: links, magic, sizes and counters; every problem with its address
    ///
    /// A thread caught inside malloc, free, realloc or memalign (a core of a busy program) has
    /// its list half changed: verify names the operation in flight (thread, block, entry
    /// point) on one line each, and that is not a problem. The exit status is 0 when no
    /// problem was found, 1 when one was (a header or link that no operation in flight explains).
    Verify(PlainArgs),
    /// The descriptor's counters, and the live blocks and bytes per allocating thread
    Stats(PlainArgs),
    Folded(FoldedArgs),
    Leaks(LeaksArgs),
    /// Why a block is held, or lost: its leak class and one chain of references to it
    ///
    /// The leak class of the block that holds ADDR (see 'dmem leaks') and one chain of
    /// references to it, from a root or from the lost block that holds it, with each block's
    /// allocating stack. ADDR is a number, 0x-prefixed for hex.
    Why(AddrArgs),
    Types(TypesArgs),
    Words(WordsArgs),
    History(HistoryArgs),
    Report(ReportArgs),
    Flamegraph(FlamegraphArgs),
    Top(TopArgs),
    Snapshot(SnapshotArgs),
    Diff(DiffArgs),
    Serve(ServeArgs),
    Record(RecordArgs),
    Timeline(TimelineArgs),
    Demo(DemoArgs),
    Install(InstallArgs),
    Completions(CompletionsArgs),
    /// The commands, their help and aliases, for the gdb commands (JSON)
    #[command(hide = true)]
    Commands(CommandsArgs),
}

/// The original libdmem's gdb command names, kept as aliases: each stands for the words after
/// it. The launcher, `dmem report` and the gdb commands all take them.
pub const ALIASES: [(&str, &[&str]); 3] = [
    ("show_alloc_stacks", &["stacks"]),
    ("walk_alloc_bufs", &["walk"]),
    ("walk_alloc_entries", &["walk", "--headers"]),
];

/// The analysis commands: they read an image and print an answer, and `dmem report` and the gdb
/// commands pass their words to them.
pub const ANALYSES: [&str; 12] = [
    "summary", "stacks", "walk", "whatis", "verify", "stats", "folded", "leaks", "why", "types", "words",
    "history",
];

/// Run PROG with libdmem.so preloaded, pass its exit status through, say where its core is
///
/// Runs PROG with libdmem.so preloaded (LD_PRELOAD) and the library's options set (DMEM_OPTS),
/// and exits with PROG's exit status (128+N when a signal N ended it). Everything after PROG is
/// PROG's, options included.
///
/// The library is the one next to dmem (or in ../lib when installed), or $DMEM_LIB.
/// Then: dmem report PROG CORE
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct RunArgs {
    /// DMEM_OPTS for the library, comma-separated, e.g. -o abort-shutdown or -o trace-stderr;
    /// repeat -o to add more. Without -o, DMEM_OPTS is inherited. 'abort-shutdown' aborts the
    /// program (not the processes it starts; 'abort-shutdown=all' for those too) at exit so a
    /// core holds exactly the unfreed blocks: dmem then raises the core-size limit and says where
    /// the core went. '-o help' lists every option.
    #[arg(short = 'o', long = "opts", value_name = "OPTS")]
    pub opts: Vec<String>,
    /// Move the core into DIR (created if missing) as core.PROG.PID
    #[arg(long, value_name = "DIR")]
    pub core_dir: Option<PathBuf>,
    /// Run PROG under gdb and write the core with gdb's gcore when it aborts or crashes, instead
    /// of relying on the kernel. dmem does this by itself when the kernel's core_pattern pipes
    /// cores to a crash handler or the hard core-size limit is 0.
    #[arg(long)]
    pub gcore: bool,
    /// The program and its arguments
    #[arg(value_name = "PROG", trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

/// The process image every analysis command reads.
#[derive(Args, Debug, Clone)]
pub struct ImageArgs {
    /// A program and its core, a core alone (its program is the one its notes name), or the id
    /// of a running process (which must run with libdmem.so preloaded)
    #[arg(value_name = "PROG CORE | CORE | PID", required = true, num_args = 1..=2)]
    pub image: Vec<OsString>,
    /// For a process a debugger already holds stopped (the gdb commands pass this): the JSON
    /// list of its threads and their registers, [{"tid": N, "regs": {"rsp": N, ...}}]; its
    /// memory is then read as it is, without stopping it again
    #[arg(long, value_name = "FILE")]
    pub registers: Option<PathBuf>,
    /// For the commands that classify blocks (leaks, why, and --leaks): memcheck's heuristics
    /// that accept an interior pointer as reaching a block, comma-separated: stdstring,
    /// length64, newarray, multipleinheritance, or all (the default, as valgrind's) or none
    #[arg(long, value_name = "LIST", value_parser = parse_heuristics)]
    pub heuristics: Option<u8>,
}

/// The filters of the listing commands, and --json.
#[derive(Args, Debug, Clone, Default)]
pub struct Filters {
    /// Print one JSON document instead of text
    #[arg(long)]
    pub json: bool,
    /// Only blocks of at least N bytes
    #[arg(long, value_name = "N", value_parser = parse_number)]
    pub min_size: Option<u64>,
    /// Only blocks allocated by the thread with kernel id TID (the LWP gdb shows)
    #[arg(long, value_name = "TID", value_parser = parse_number)]
    pub thread: Option<u64>,
    /// Only blocks with a frame whose text matches REGEX
    #[arg(long = "match", value_name = "REGEX")]
    pub pattern: Option<String>,
    /// Show at most N entries (stacks of summary, leaks and types, default 20; blocks of stacks
    /// and walk, default all); 0 shows all
    #[arg(long, value_name = "N", value_parser = parse_number)]
    pub limit: Option<u64>,
}

/// The image and filters of `summary` and `stacks`, whose help is their own.
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct ListArgs {
    #[command(flatten)]
    pub image: ImageArgs,
    #[command(flatten)]
    pub filters: Filters,
}

/// Every live block's address, one per line (--headers: libdmem's header in front of each)
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct WalkArgs {
    #[command(flatten)]
    pub image: ImageArgs,
    /// The addresses of the headers instead of the blocks
    #[arg(long)]
    pub headers: bool,
    #[command(flatten)]
    pub filters: Filters,
}

/// The image and address of `whatis` and `why`, whose help is their own.
#[derive(Args, Debug)]
#[command(
    help_template = TEMPLATE,
    override_usage = "dmem whatis|why PROG CORE | CORE | PID  ADDR [--json]"
)]
pub struct AddrArgs {
    /// The image (PROG CORE, CORE or PID), then the address
    #[arg(value_name = "IMAGE ADDR", required = true, num_args = 1..)]
    pub words: Vec<OsString>,
    /// For a process a debugger already holds stopped: its threads' registers (see 'dmem
    /// summary --help')
    #[arg(long, value_name = "FILE")]
    pub registers: Option<PathBuf>,
    /// For the commands that classify blocks (leaks, why, and --leaks): memcheck's heuristics
    /// that accept an interior pointer as reaching a block, comma-separated: stdstring,
    /// length64, newarray, multipleinheritance, or all (the default, as valgrind's) or none
    #[arg(long, value_name = "LIST", value_parser = parse_heuristics)]
    pub heuristics: Option<u8>,
    /// Print one JSON document instead of text
    #[arg(long)]
    pub json: bool,
}

/// The free history a process kept (DMEM_OPTS=history=N), newest first
///
/// Each free with its block's address and size, the thread that freed it and when (before the
/// newest event recorded), the stack of the free, and the thread and stack that allocated the
/// block; allocations too where the process ran with history-allocs.
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub image: ImageArgs,
    /// Only events of a block that held address A (a number, 0x-prefixed for hex)
    #[arg(long, value_name = "A", value_parser = parse_number)]
    pub addr: Option<u64>,
    /// Show at most N events (default 20; 0 shows all)
    #[arg(long, value_name = "N", value_parser = parse_number)]
    pub limit: Option<u64>,
    /// Print one JSON document instead of text
    #[arg(long)]
    pub json: bool,
}

/// The image of `verify` and `stats`, whose help is their own.
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct PlainArgs {
    #[command(flatten)]
    pub image: ImageArgs,
    /// Print one JSON document instead of text
    #[arg(long)]
    pub json: bool,
}

/// Folded stacks of the live (or lost) bytes: `outer;...;inner BYTES` per line, for flame graphs
///
/// The input of inferno-flamegraph and FlameGraph's flamegraph.pl: each line a stack of
/// function names (raw addresses where unknown), outermost first, and its bytes.
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct FoldedArgs {
    #[command(flatten)]
    pub image: ImageArgs,
    /// Only the lost blocks (see 'dmem leaks')
    #[arg(long)]
    pub leaks: bool,
    /// With --leaks, the classes to write instead (as 'dmem leaks --show')
    #[arg(long, value_name = "LIST", value_parser = parse_show)]
    pub show: Option<Classes>,
    /// Where to write them (default: standard output)
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub filters: Filters,
}

/// Lost blocks, in valgrind's leak classes, grouped by allocation stack
///
/// A conservative mark from the roots: every thread's registers and stack (from its stack
/// pointer, less the red zone, up), each thread's static TLS, and the writable data of the
/// program and its libraries, less libdmem's lists and the allocator's own state. Blocks are
/// still reachable, possibly lost (reached only through an interior pointer), definitely lost
/// or indirectly lost (held only by lost blocks), as valgrind's memcheck defines them. A running
/// process (PID) is stopped only while its registers and writable memory are copied, and the
/// pause is printed.
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct LeaksArgs {
    #[command(flatten)]
    pub image: ImageArgs,
    /// The classes to list, as valgrind's --show-leak-kinds: definite, indirect, possible,
    /// reachable, comma- or +-separated, or all or none (default definite,possible, as
    /// valgrind's; the total line counts all four). --show is the former name
    #[arg(long = "show-leak-kinds", alias = "show", value_name = "LIST", value_parser = parse_kinds)]
    pub show: Option<Classes>,
    /// The classes that make the exit status --error-exitcode's, as valgrind's
    /// --errors-for-leak-kinds: the words of --show-leak-kinds (default definite,possible)
    #[arg(long = "errors-for-leak-kinds", value_name = "LIST", value_parser = parse_kinds)]
    pub errors_for: Option<Classes>,
    /// Exit with status N (1-255) when blocks of the classes --errors-for-leak-kinds names are
    /// found that no suppression matches, as valgrind's --error-exitcode (default: exit 0)
    #[arg(long = "error-exitcode", alias = "leak-exitcode", value_name = "N", value_parser = clap::value_parser!(u8).range(1..))]
    pub error_exitcode: Option<u8>,
    /// Leave out the blocks a suppression in FILE matches: LeakSanitizer's leak:PATTERN lines
    /// or valgrind's Memcheck:Leak blocks; may be given more than once. The total counts them
    /// as suppressed
    #[arg(long = "suppressions", value_name = "FILE")]
    pub suppressions: Vec<String>,
    /// After each stack, print a valgrind suppression that matches it (with its class)
    #[arg(long)]
    pub gen_suppressions: bool,
    /// text, json (as --json) or xml: valgrind's XML (protocol 4), for CI viewers
    #[arg(long, value_name = "text|json|xml", value_parser = ["text", "json", "xml"])]
    pub format: Option<String>,
    #[command(flatten)]
    pub filters: Filters,
}

/// Live blocks counted by C++ type, from the vtable pointer in their first word
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct TypesArgs {
    #[command(flatten)]
    pub image: ImageArgs,
    /// Only the lost blocks (see 'dmem leaks')
    #[arg(long)]
    pub leaks: bool,
    /// Only the blocks of these classes (as 'dmem leaks --show')
    #[arg(long, value_name = "LIST", value_parser = parse_show)]
    pub show: Option<Classes>,
    #[command(flatten)]
    pub filters: Filters,
}

/// A histogram of the 8-byte words in blocks, or of one field of every object of a type
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct WordsArgs {
    #[command(flatten)]
    pub image: ImageArgs,
    /// Only the lost blocks (see 'dmem leaks')
    #[arg(long)]
    pub leaks: bool,
    /// Only the blocks of these classes (as 'dmem leaks --show')
    #[arg(long, value_name = "LIST", value_parser = parse_show)]
    pub show: Option<Classes>,
    /// Only the blocks of this C++ type (its name as 'dmem types' prints it, or its mangled
    /// vtable symbol)
    #[arg(long, value_name = "TYPE")]
    pub vtable: Option<String>,
    /// The field at this offset of each block instead of every word
    #[arg(long, value_name = "N", value_parser = parse_number)]
    pub offset: Option<u64>,
    /// The field's type, with --offset
    #[arg(long = "type", value_name = "u8|u16|u32|u64", value_parser = ["u8", "u16", "u32", "u64"])]
    pub field_type: Option<String>,
    #[command(flatten)]
    pub filters: Filters,
}

/// A number, decimal or 0x-prefixed hexadecimal.
pub fn parse_number(s: &str) -> Result<u64, String> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    v.map_err(|_| format!("'{s}' is not a number (decimal, or hexadecimal with 0x)"))
}

/// Leak classes a command picks, in the order output lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classes(pub Vec<crate::analysis::reach::Class>);

/// A `--heuristics` list, as valgrind's `--leak-check-heuristics` spells it.
pub fn parse_heuristics(s: &str) -> Result<u8, String> {
    use crate::analysis::reach::Heuristic;
    Heuristic::parse_set(s).map_err(|w| format!("'{w}' is no heuristic: {}", Heuristic::WORDS))
}

/// A list of leak classes, separated by commas or `+` (`analysis::reach::Class::parse_set`), in
/// the order output lists them.
pub fn parse_show(s: &str) -> Result<Classes, String> {
    use crate::analysis::reach::Class;
    match Class::parse_set(s) {
        Ok(set) => Ok(Classes(Class::in_set(set).collect())),
        Err("") => Err(format!("needs at least one of {}", Class::WORDS)),
        Err(w) => Err(format!("'{w}' is not a leak class: {}", Class::WORDS)),
    }
}

/// A leak-kinds list as valgrind's --show-leak-kinds and --errors-for-leak-kinds take it: the
/// words of `parse_show`, or none.
pub fn parse_kinds(s: &str) -> Result<Classes, String> {
    if s == "none" {
        return Ok(Classes(Vec::new()));
    }
    parse_show(s).map_err(|e| e.replace(" or all", ", all or none"))
}

/// The analysis commands under one name: dmem report IMAGE [SUBCOMMAND ARGS...]
///
/// The same as 'dmem SUBCOMMAND IMAGE ARGS...' (summary when no subcommand is given). IMAGE is
/// PROG CORE, a core alone or a PID. 'dmem report help SUBCOMMAND' shows one's options.
#[derive(Args, Debug)]
#[command(
    help_template = TEMPLATE,
    override_usage = "dmem report PROG CORE | CORE | PID [SUBCOMMAND [ARGS...]]\n       dmem report help [SUBCOMMAND]"
)]
pub struct ReportArgs {
    /// The image (or 'help'), then the subcommand and its arguments
    #[arg(
        value_name = "IMAGE [SUBCOMMAND]",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub words: Vec<OsString>,
}

/// Draw the live bytes of a core or a process by allocation stack as an SVG flame graph
///
/// Draws the live bytes by allocation stack as an interactive SVG flame graph (open it in a
/// browser): each box is a function, as wide as the bytes allocated under it.
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct FlamegraphArgs {
    #[command(flatten)]
    pub image: ImageArgs,
    /// Where to write the SVG (required)
    #[arg(short = 'o', long = "output", value_name = "OUT.svg")]
    pub output: Option<PathBuf>,
    /// Draw only the lost blocks (see 'dmem leaks')
    #[arg(long)]
    pub leaks: bool,
    /// The title at the top (default: what is drawn, and PROG)
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
}

/// Watch a running process's heap by allocation stack, without stopping it
///
/// Every INTERVAL seconds, reads the live-block lists of process PID (which must run with
/// libdmem.so preloaded) straight from its memory, without stopping it (no ptrace attach:
/// process_vm_readv, the same permission gdb needs), and prints the stacks holding the most
/// bytes: their live bytes and blocks, the change since the first sample, the rate per minute
/// and a growth class decided from all samples so far: steady (no net growth), levelling (grows
/// ever slower, like a cache filling), linear, accelerating. Ctrl-C prints a summary.
///
/// The header line gives the totals, how long the read took and how many of the lists changed
/// too fast to be read whole (their blocks are counted as read). Each stack's last column is a
/// sparkline of its live bytes over the samples. For a process run with
/// DMEM_OPTS=count-allocs, each sample after the first also lists the stacks that allocated
/// most since the one before: allocations, temporary allocations (blocks freed by their thread
/// before it allocated again) and frees, and per second (with history-allocs instead, the same
/// from the free history, as lower bounds).
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct TopArgs {
    /// The process to watch
    #[arg(value_name = "PID", value_parser = parse_pid)]
    pub pid: i32,
    /// Seconds between samples; fractions allowed
    #[arg(short = 'i', long, value_name = "SECS", default_value = "5", value_parser = parse_interval)]
    pub interval: f64,
    /// How many stacks to show per sample
    #[arg(short = 'n', long, value_name = "N", default_value_t = 10)]
    pub limit: usize,
    /// Stop after N samples (default: until Ctrl-C or the process ends)
    #[arg(short = 'c', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// One JSON object per sample, one per line
    #[arg(long)]
    pub json: bool,
}

/// Write the live heap of a process or a core as a pprof profile (or JSON, or folded stacks)
///
/// Reads the live-block lists of process PID without stopping it (as 'dmem top' does), or of
/// CORE, a core file of PROG, straight from the core (no gdb), groups the blocks by allocation
/// stack, symbolises the frames and writes the snapshot. A pprof profile is gzipped
/// profile.proto with the sample types inuse_objects/count and inuse_space/bytes (the default),
/// one sample per stack labelled with the allocating threads' ids (thread_id), functions, files
/// and lines (inlined functions too), and the mapped objects with their build ids. A process
/// run with DMEM_OPTS=count-allocs adds Go's alloc_objects and alloc_space (and
/// temporary_objects), with a sample for every stack that ever allocated. Open it with
/// 'pprof -http=: FILE' or in speedscope.
#[derive(Args, Debug)]
#[command(
    help_template = TEMPLATE,
    override_usage = "dmem snapshot PID -o FILE [--format FORMAT]\n       dmem snapshot PROG CORE -o FILE [--format FORMAT]"
)]
pub struct SnapshotArgs {
    /// A process id, or a program and its core
    #[arg(value_name = "PID | PROG CORE", required = true)]
    pub source: Vec<OsString>,
    /// Where to write the snapshot; '-' for standard output
    #[arg(short = 'o', long = "output", value_name = "FILE", required = true)]
    pub output: PathBuf,
    /// pprof: a gzipped profile; json: the shape of a 'dmem top --json' sample, with threads and
    /// objects; folded: 'outer;...;inner bytes' lines for flame-graph tools
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "pprof")]
    pub format: SnapshotFormat,
}

/// Serve heap profiles and metrics over HTTP, for pprof, Parca, Pyroscope and Prometheus
///
/// Answers, for processes running with libdmem.so preloaded, read without stopping them (as
/// 'dmem top' reads):
///   GET /debug/pprof/heap?pid=PID  the gzipped pprof profile 'dmem snapshot' writes (pid may be
///                                  left out when one process is served)
///   GET /debug/pprof/              the processes served, with links to their profiles
///   GET /metrics                   Prometheus text: dmem_live_bytes, dmem_live_blocks,
///                                  dmem_allocations_total, dmem_frees_total per process
///                                  (labels pid and comm), and how long the reads took
///
/// Without PIDs it serves every process on the host that has libdmem.so loaded and that dmem may
/// read, found again at each request. A client on this host gets only the processes its own user
/// could read with 'dmem snapshot' (its user found in the kernel's socket table); with
/// --token-file every request must carry the token instead, and then reads what dmem may.
/// Listening beyond loopback needs --token-file or --no-token. A process that has ended or
/// refuses the read gets an HTTP error and one line on standard error. Runs until Ctrl-C.
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct ServeArgs {
    /// Where to listen; loopback unless told otherwise
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:6060")]
    pub listen: std::net::SocketAddr,
    /// Answer only requests carrying the token in FILE as 'Authorization: Bearer TOKEN' (what
    /// Prometheus' and Parca's authorization credentials_file and Alloy's bearer_token_file send)
    #[arg(long, value_name = "FILE", conflicts_with = "no_token")]
    pub token_file: Option<PathBuf>,
    /// Listen beyond loopback without a token: every host that reaches the port reads what dmem
    /// may read
    #[arg(long)]
    pub no_token: bool,
    /// Serve only these processes (default: every one with libdmem.so loaded that dmem may read)
    #[arg(value_name = "PID", value_parser = parse_pid)]
    pub pids: Vec<i32>,
}

/// Write heap profiles of a running process periodically, and at each new peak of live bytes
///
/// Every SECS seconds, reads process PID's live-block lists without stopping it and writes a
/// pprof profile (as 'dmem snapshot' does) to DIR, named PROG.PID.YYYYmmddTHHMMSSZ.pb.gz. With
/// --at-peak it also watches the library's counters ten times a second and writes a profile
/// named ...peak.pb.gz each time live bytes pass the highest seen so far by PCT percent, so the
/// last peak profile shows what held memory at the peak, even if an OOM kill ends the process
/// later. Ends on Ctrl-C or when the process ends, with a line saying what was written and the
/// peak.
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct RecordArgs {
    /// The process to record
    #[arg(value_name = "PID", value_parser = parse_pid)]
    pub pid: i32,
    /// Seconds between profiles; fractions allowed
    #[arg(long, value_name = "SECS", required = true, value_parser = parse_interval)]
    pub every: f64,
    /// The directory to write the profiles to (created if missing)
    #[arg(short = 'o', long = "output", value_name = "DIR", required = true)]
    pub output: PathBuf,
    /// Keep only the N newest periodic profiles, and the N newest peak profiles (default: all)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub keep: Option<u64>,
    /// Also write a profile each time live bytes pass the highest seen by PCT percent
    #[arg(long, value_name = "PCT", num_args = 0..=1, default_missing_value = "10", value_parser = parse_percent)]
    pub at_peak: Option<f64>,
    /// Also draw every profile so far as a timeline (see 'dmem timeline') after each one, so
    /// the chart can be kept open while the process runs: FILE.html for the page, FILE.json
    /// for the series, else SVG
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
}

/// Draw live bytes over time by allocation stack, from recorded profiles (SVG, HTML or JSON)
///
/// Reads the profiles 'dmem record' wrote to DIR (or snapshot files that 'dmem snapshot'
/// wrote, each with its time) and draws a stacked area chart of live bytes over time: a band
/// for each of the N stacks that held the most at their peak, labelled by the innermost frame
/// of the program's own code, and the rest of the stacks summed as "other". The legend lists
/// them by peak size; hovering over an entry or a band shows the whole stack. The profiles
/// 'dmem record --at-peak' wrote at new peaks are marked, the highest of them in red.
/// --format html writes one self-contained page (the chart, a table of the stacks with all
/// their frames, and the profiles), which needs no network and no script. --json writes the
/// series: every profile's time and totals, and each stack's bytes and blocks per profile.
#[derive(Args, Debug)]
#[command(
    help_template = TEMPLATE,
    override_usage = "dmem timeline DIR | FILE... -o OUT.svg [--format svg|html|json] [-n N]\n       dmem timeline DIR | FILE... --json"
)]
pub struct TimelineArgs {
    /// A directory of profiles 'dmem record' wrote (its .pb.gz files), or profile files
    #[arg(value_name = "DIR | FILE", required = true)]
    pub inputs: Vec<PathBuf>,
    /// Where to write the chart; '-' for standard output (the default with --json)
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// svg: the chart; html: a page with the chart and tables of the stacks and profiles;
    /// json: the series. Default: from OUT's extension (.html, .json), else svg
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<TimelineFormat>,
    /// The series as JSON (the same as --format json)
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// How many stacks get a band of their own; the rest are summed as "other"
    #[arg(short = 'n', long, value_name = "N", default_value_t = 10, value_parser = parse_limit)]
    pub limit: usize,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimelineFormat {
    Svg,
    Html,
    Json,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotFormat {
    Pprof,
    Json,
    Folded,
}

/// Compare two snapshots: which allocation stacks grew, by how much, and which shrank
///
/// BASE and NEW are each a process id (read now), a program and its core (PROG CORE), or a
/// snapshot file written earlier by 'dmem snapshot' (pprof or json). Prints the totals, then
/// every stack that changed, the most grown first and the shrunk ones last: its bytes and
/// blocks in NEW, the change in bytes and in blocks, the rate per minute between the two
/// snapshots' times, and new, grew, shrank or gone. Stacks are matched by their frames as
/// offsets in their objects, so cores of two runs of a program compare too.
#[derive(Args, Debug)]
#[command(
    help_template = TEMPLATE,
    override_usage = "dmem diff BASE NEW [--json] [--pprof OUT] [--limit N]\n       (BASE and NEW: PID, PROG CORE or FILE)"
)]
pub struct DiffArgs {
    /// BASE, then NEW
    #[arg(value_name = "BASE NEW", required = true)]
    pub sources: Vec<OsString>,
    /// Print one JSON object, in the shape of a 'dmem top --json' sample
    #[arg(long)]
    pub json: bool,
    /// Also write NEW - BASE as a pprof profile (values may be negative, as with
    /// 'pprof -diff_base')
    #[arg(long, value_name = "OUT")]
    pub pprof: Option<PathBuf>,
    /// Show only the N biggest changes, growth or shrinkage
    #[arg(short = 'n', long, value_name = "N")]
    pub limit: Option<usize>,
}

/// Run the built-in example program and print its leak report
///
/// Compiles the built-in example with cc, the driver program from the original libdmem post (it
/// frees a 512-byte block and leaks a 2048-byte one), runs it with abort-shutdown, then prints
/// the report of its core: what 'dmem run' and 'dmem report' do, on a program known to leak.
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct DemoArgs {
    /// Where to run it and keep its core (default: dmem-demo in the temporary directory)
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    #[arg(hide = true)]
    pub unexpected: Option<OsString>,
}

/// Install dmem, libdmem.so and the gdb script under a prefix (default ~/.local)
///
/// Copies dmem to DIR/bin, libdmem.so to DIR/lib, and the gdb script to DIR/share/dmem. Also
/// installs DIR/lib/libdmem.so-gdb.py, which gdb runs by itself when it opens a core of a
/// program that had that library preloaded, so the dmem commands are there in any gdb session once DIR/lib is in gdb's auto-load safe path.
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct InstallArgs {
    /// Where to install (default: ~/.local)
    #[arg(long, value_name = "DIR")]
    pub prefix: Option<PathBuf>,
    #[arg(hide = true)]
    pub unexpected: Option<OsString>,
}

/// Print a shell completion script for dmem
///
/// For bash: dmem completions bash > ~/.local/share/bash-completion/completions/dmem
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// The analysis commands, their help and aliases, as the gdb side registers them
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct CommandsArgs {
    /// Print one JSON document (the only form)
    #[arg(long)]
    pub json: bool,
}

fn parse_pid(s: &str) -> Result<i32, String> {
    match s.parse::<i32>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err("a process id is a positive number, e.g. $(pidof PROG)".into()),
    }
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.01..=86400.0).contains(&v) => Ok(v),
        _ => Err("the interval is seconds between 0.01 and 86400, e.g. 5 or 0.5".into()),
    }
}

fn parse_limit(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("N is a count of stacks, at least 1".into()),
    }
}

fn parse_percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.1..=10000.0).contains(&v) => Ok(v),
        _ => Err("the percentage is a number between 0.1 and 10000, e.g. 10".into()),
    }
}

/// The command line as declared here.
pub fn declared() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// The command line as clap parses it and shows its help: the aliases beside what they stand
/// for.
pub fn command() -> clap::Command {
    let mut cmd = declared();
    for (alias, words) in ALIASES {
        let stands_for = match words {
            [_] => alias.to_string(),
            _ => format!("{alias} = dmem {}", words.join(" ")),
        };
        cmd = cmd.mut_subcommand(words[0], |s| {
            let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
            let about = match about.strip_suffix(']') {
                Some(listed) => format!("{listed}, {stands_for}]"),
                None => format!("{about} [aliases: {stands_for}]"),
            };
            s.about(about)
        });
    }
    let aliases: Vec<String> = ALIASES
        .iter()
        .map(|(alias, words)| format!("{alias} ({})", words.join(" ")))
        .collect();
    cmd.mut_subcommand("report", |s| {
        s.after_long_help(format!(
            "The subcommands: {}. The original libdmem's names are kept: {}.",
            ANALYSES.join(", "),
            aliases.join(", ")
        ))
    })
}

/// The subcommands users call, for messages: `a, b and c`.
fn subcommands() -> String {
    // In the order of the declaration, which `dmem --help` lists them in too.
    let mut subs: Vec<(usize, String)> = declared()
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| (s.get_display_order(), s.get_name().to_owned()))
        .collect();
    subs.sort();
    let names: Vec<String> = subs.into_iter().map(|(_, n)| n).collect();
    match names.split_last() {
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The words of an alias replaced by those it stands for.
fn expand_alias(mut args: Vec<OsString>) -> Vec<OsString> {
    if let Some((_, words)) = ALIASES.iter().find(|(a, _)| args.first().is_some_and(|w| w == a)) {
        args.splice(..1, words.iter().map(OsString::from));
    }
    args
}

/// Parses the command line. On a mistake, or when help or the version was asked for, gives what
/// to print, where, and the exit status instead.
pub fn parse(args: Vec<OsString>) -> Result<Cli, Early> {
    use clap::FromArgMatches;
    let args = expand_alias(args);
    let words: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let mut full = vec![OsString::from("dmem")];
    full.extend(args);
    let matches = command()
        .try_get_matches_from(full)
        .map_err(|e| early(e, &words))?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(|e| early(e, &words))?;
    cli.name = matches.subcommand_name().unwrap_or_default().to_owned();
    Ok(cli)
}

/// What happens instead of a subcommand.
pub enum Early {
    /// Help or version text for stdout, and the exit status.
    Print(String, i32),
    /// A one-line mistake, the subcommand it concerns, for stderr with status 2.
    Mistake(Option<String>, String),
}

fn early(e: clap::Error, words: &[String]) -> Early {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => return Early::Print(e.render().to_string(), 0),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            return Early::Print(e.render().to_string(), 2)
        }
        _ => {}
    }
    let sub = words
        .iter()
        .find(|w| !w.starts_with('-'))
        .filter(|w| command().find_subcommand(w.as_str()).is_some())
        .cloned();
    let context = |k: ContextKind| match e.get(k) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    };
    let see = match &sub {
        Some(s) if s != "help" => format!("see 'dmem {s} --help'"),
        _ => "see 'dmem --help'".to_owned(),
    };
    let msg = match e.kind() {
        ErrorKind::InvalidSubcommand if words.first().is_some_and(|w| w == "help") => {
            let what = context(ContextKind::InvalidSubcommand).unwrap_or_default();
            format!("no help for '{what}': it is not a subcommand; see 'dmem --help'")
        }
        ErrorKind::InvalidSubcommand => {
            let what = context(ContextKind::InvalidSubcommand).unwrap_or_default();
            format!(
                "unknown subcommand '{what}'; the subcommands are {} ({see})",
                subcommands()
            )
        }
        ErrorKind::MissingRequiredArgument => {
            let what = match e.get(ContextKind::InvalidArg) {
                Some(ContextValue::Strings(v)) => v.join(" "),
                _ => "an argument".to_owned(),
            };
            format!("needs {what}; {see}")
        }
        ErrorKind::InvalidValue if matches!(e.get(ContextKind::InvalidValue), Some(ContextValue::String(v)) if v.is_empty()) =>
        {
            // A value-taking option at the end of the line: name it as the user spelled it.
            let typed = words.iter().rev().find(|w| w.starts_with('-')).cloned();
            let what = typed
                .or_else(|| context(ContextKind::InvalidArg))
                .unwrap_or_default();
            format!("{what} needs a value after it; {see}")
        }
        ErrorKind::UnknownArgument => {
            let what = context(ContextKind::InvalidArg).unwrap_or_default();
            format!("unknown option '{what}'; {see}")
        }
        _ => {
            // Clap's own first line, without its "error: " and its styling.
            let text = e.render().to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ")
                .to_owned();
            format!("{first}; {see}")
        }
    };
    Early::Mistake(sub, msg)
}

/// The completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut cmd = command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "dmem", &mut out);
    out
}

/// The error for a word given to a subcommand that takes none, with a hint of what to do.
pub fn no_words(word: Option<OsString>, hint: &str) -> crate::Result<()> {
    match word {
        Some(w) => Err(crate::usage(format!("unexpected '{}'; {hint}", show(&w)))),
        None => Ok(()),
    }
}

/// A path (or any word of input) for messages: its control characters and bytes that are not
/// UTF-8 shown as escapes, so a name can never act on the terminal that prints it.
pub fn show(p: impl AsRef<OsStr>) -> String {
    use std::os::unix::ffi::OsStrExt;
    escaped(p.as_ref().as_bytes())
}

/// Text that echoes input, as `show` writes it.
pub fn escaped(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len());
    crate::analysis::escape::escape(bytes, &mut |piece| out.extend_from_slice(piece));
    // Only valid UTF-8 and ASCII escapes come out.
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(words: &[&str]) -> Result<Cli, Early> {
        parse(words.iter().map(OsString::from).collect())
    }

    #[test]
    fn the_declaration_is_consistent() {
        command().debug_assert();
        for name in ANALYSES.iter().chain(ALIASES.iter().map(|(_, w)| &w[0])) {
            assert!(
                command().find_subcommand(name).is_some(),
                "{name} is no subcommand"
            );
        }
    }

    #[test]
    fn help_shows_aliases_beside_what_they_stand_for() {
        let Err(Early::Print(help, 0)) = parse_words(&["--help"]) else {
            panic!("no help");
        };
        let line = |name: &str| {
            help.lines()
                .find(|l| l.trim_start().starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no line for {name}:\n{help}"))
                .to_owned()
        };
        assert!(line("stacks").ends_with("[aliases: show_alloc_stacks]"), "{help}");
        assert!(
            line("walk").ends_with("[aliases: walk_alloc_bufs, walk_alloc_entries = dmem walk --headers]"),
            "{help}"
        );
        assert!(
            !help
                .lines()
                .any(|l| l.trim_start().starts_with("show_alloc_stacks")),
            "{help}"
        );
        // No two commands share one line of help.
        let abouts: Vec<&str> = help
            .lines()
            .filter(|l| l.starts_with("  ") && !l.trim_start().starts_with('-'))
            .filter_map(|l| {
                l.trim_start()
                    .split_once(char::is_whitespace)
                    .map(|(_, a)| a.trim())
            })
            .collect();
        let mut unique = abouts.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), abouts.len(), "{help}");
        assert!(
            !help.contains("\n  commands "),
            "the gdb side's command is hidden: {help}"
        );
    }

    #[test]
    fn mistakes_list_the_subcommands_in_their_order() {
        let Err(Early::Mistake(None, msg)) = parse_words(&["frobnicate"]) else {
            panic!("frobnicate was taken");
        };
        assert!(
            msg.contains("the subcommands are run, summary, stacks, walk, whatis, "),
            "{msg}"
        );
        assert!(msg.contains(" install and completions ("), "{msg}");
    }

    #[test]
    fn an_alias_runs_what_it_stands_for() {
        let Ok(Cli {
            command: Command::Walk(w),
            name,
            ..
        }) = parse_words(&["walk_alloc_entries", "42"])
        else {
            panic!("walk_alloc_entries did not parse");
        };
        assert!(w.headers);
        assert_eq!(name, "walk");
    }

    #[test]
    fn run_takes_everything_after_the_program() {
        let Ok(Cli {
            command: Command::Run(r),
            ..
        }) = parse_words(&["run", "-oa,b", "--opts=c", "prog", "--help", "-o", "x"])
        else {
            panic!("run did not parse");
        };
        assert_eq!(r.opts, ["a,b", "c"]);
        assert_eq!(r.command, ["prog", "--help", "-o", "x"]);
    }

    #[test]
    fn top_options_and_their_mistakes() {
        let Ok(Cli {
            command: Command::Top(t),
            ..
        }) = parse_words(&["top", "42", "--interval", "0.5", "--count", "3", "--json"])
        else {
            panic!("top did not parse");
        };
        assert_eq!(
            (t.pid, t.interval, t.limit, t.count, t.json),
            (42, 0.5, 10, Some(3), true)
        );
        for bad in [
            &["top", "x"][..],
            &["top", "1", "--interval", "0"],
            &["top", "1", "--count", "0"],
        ] {
            match parse_words(bad) {
                Err(Early::Mistake(Some(sub), msg)) if sub == "top" => {
                    assert!(!msg.contains('\n'), "{msg}")
                }
                _ => panic!("{bad:?} was accepted"),
            }
        }
    }
}
