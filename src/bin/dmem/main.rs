//! `dmem`, the launcher: runs a program with libdmem.so preloaded, finds the core it leaves, turns
//! that core into a report or a flame graph through gdb, shows the whole thing on a built-in
//! example, and installs itself with the library and the gdb script.
//!
//! It is a separate binary of this package so that none of its dependencies end up in the
//! preloaded library. One job per module: `cli` parses arguments and holds the help texts,
//! `locate` finds the library, the script, the example and gdb, `run` starts the program, `corefile`
//! finds the core it left, `report` drives gdb, `flamegraph` renders folded stacks, `demo` and
//! `install` are the subcommands of those names, and `sys` holds the few calls into libc.

mod cli;
mod coredump;
mod corefile;
mod demo;
mod diff;
mod elf;
mod flamegraph;
mod heapwalk;
mod install;
mod locate;
mod mappings;
mod memory;
mod pprof;
mod report;
mod run;
mod snapjson;
mod snapshot;
mod stacks;
mod symbolize;
mod sys;

use std::ffi::OsString;
use std::fmt;

/// Why the launcher stops: a message for one line on stderr and the exit status.
#[derive(Debug)]
pub struct Fail {
    pub msg: String,
    pub status: i32,
}

/// A mistake in the command line: status 2, like most Unix tools.
pub fn usage(msg: impl fmt::Display) -> Fail {
    Fail {
        msg: msg.to_string(),
        status: 2,
    }
}

/// Something went wrong doing what was asked: status 1.
pub fn failed(msg: impl fmt::Display) -> Fail {
    Fail {
        msg: msg.to_string(),
        status: 1,
    }
}

pub type Result<T> = std::result::Result<T, Fail>;

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let status = match dispatch(args) {
        Ok(status) => status,
        Err((name, fail)) => {
            // One line, whatever the message held, so scripts and people can rely on it.
            let msg = fail.msg.replace('\n', " ");
            match name {
                Some(cmd) => eprintln!("dmem {cmd}: {msg}"),
                None => eprintln!("dmem: {msg}"),
            }
            fail.status
        }
    };
    std::process::exit(status);
}

type Outcome = std::result::Result<i32, (Option<&'static str>, Fail)>;

fn dispatch(mut args: Vec<OsString>) -> Outcome {
    if args.is_empty() {
        print!("{}", cli::MAIN_HELP);
        return Ok(2);
    }
    let first = args.remove(0);
    let first = first.to_string_lossy().into_owned();
    // Each subcommand parses its own arguments, `--help` included: `run` hands everything after
    // the program's name to the program, so only its parser knows where options end.
    type Handler = fn(Vec<OsString>) -> Result<i32>;
    let (name, handler): (&'static str, Handler) = match first.as_str() {
        "run" => ("run", run::main),
        "report" => ("report", report::main),
        "flamegraph" => ("flamegraph", flamegraph::main),
        "demo" => ("demo", demo::main),
        "install" => ("install", install::main),
        "snapshot" => ("snapshot", snapshot_main),
        "diff" => ("diff", diff_main),
        "-h" | "--help" | "help" => {
            return match args.first().map(|a| a.to_string_lossy().into_owned()) {
                None => {
                    print!("{}", cli::MAIN_HELP);
                    Ok(0)
                }
                Some(sub) => match cli::help_for(&sub) {
                    Some(text) => {
                        print!("{text}");
                        Ok(0)
                    }
                    None => Err((
                        None,
                        usage(format!(
                            "no help for '{sub}': it is not a subcommand; see 'dmem --help'"
                        )),
                    )),
                },
            };
        }
        "-V" | "--version" => {
            println!("dmem {}", env!("CARGO_PKG_VERSION"));
            return Ok(0);
        }
        other => {
            return Err((
                None,
                usage(format!(
                    "unknown subcommand '{other}'; the subcommands are run, report, flamegraph, demo and \
                     install (see 'dmem --help')"
                )),
            ))
        }
    };
    handler(args).map_err(|f| (Some(name), f))
}

fn snapshot_main(args: Vec<OsString>) -> Result<i32> {
    use cli::{Arg, Parser};
    let mut p = Parser::new(args, &['o']);
    let (mut words, mut output, mut format) = (Vec::new(), None, snapshot::Format::Pprof);
    while let Some(arg) = p.next_arg()? {
        match arg {
            Arg::Help => return Ok(0),
            Arg::Word(w) => words.push(w),
            Arg::End => words.extend(p.rest()),
            Arg::Opt(o) => match o.as_str() {
                "-o" | "--output" => output = Some(std::path::PathBuf::from(p.value(&o, "a file")?)),
                "--format" => {
                    let f = p.value(&o, "a format")?;
                    format =
                        snapshot::Format::parse(&f.to_string_lossy()).ok_or_else(|| usage("bad format"))?;
                }
                _ => return Err(cli::unknown_option(&o, "snapshot")),
            },
        }
    }
    let output = output.ok_or_else(|| usage("needs -o FILE"))?;
    snapshot::command(&words, &output, format)
}

fn diff_main(args: Vec<OsString>) -> Result<i32> {
    use cli::{Arg, Parser};
    let mut p = Parser::new(args, &[]);
    let (mut words, mut json, mut out, mut limit) = (Vec::new(), false, None, None);
    while let Some(arg) = p.next_arg()? {
        match arg {
            Arg::Help => return Ok(0),
            Arg::Word(w) => words.push(w),
            Arg::End => words.extend(p.rest()),
            Arg::Opt(o) => match o.as_str() {
                "--json" => json = true,
                "--pprof" => out = Some(std::path::PathBuf::from(p.value(&o, "a file")?)),
                "--limit" => limit = p.value(&o, "n")?.to_string_lossy().parse().ok(),
                _ => return Err(cli::unknown_option(&o, "diff")),
            },
        }
    }
    diff::command(&words, json, out.as_deref(), limit)
}
