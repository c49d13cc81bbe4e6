//! The arguments of the analysis commands, which read an image (PROG CORE, a core or a PID):
//! the image and filters they share, and each command's own options.

use super::values::{parse_heuristics, parse_kinds, parse_number, parse_show, Classes, TEMPLATE};
use clap::Args;
use std::ffi::OsString;
use std::path::PathBuf;

/// The process image every analysis command reads.
#[derive(Args, Debug, Clone)]
pub struct ImageArgs {
    /// A program and its core, a core alone (its program is the one its notes name), or the id
    /// of a running process; one that ran without libdmem.so is read from glibc's own heap,
    /// with no allocation stacks (docs/glibc-heap.md)
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
