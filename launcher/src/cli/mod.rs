//! The command line, declared with clap's derive: every subcommand gets the same help layout,
//! the same errors and shell completions from one declaration per option. Clap's multi-line
//! errors are folded into the launcher's one-line form (`dmem SUB: what is wrong; see ...`).
//!
//! Each group of commands declares its arguments in a file of its own: `analysis.rs` (the
//! commands that read an image), `profiles.rs` (watching a process, writing and comparing
//! profiles), `setup.rs` (run, demo, install, completions) and `values.rs` (how option values
//! are read, and the help layout they share).

mod analysis;
mod profiles;
mod setup;
mod values;

pub use analysis::*;
pub use profiles::*;
pub use setup::*;
pub use values::{parse_number, Classes};

use crate::analysis::escape::show;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use values::TEMPLATE;

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
