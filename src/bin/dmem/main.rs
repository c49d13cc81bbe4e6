//! `dmem`, the launcher: runs a program with libdmem.so preloaded, finds the core it leaves, turns
//! that core into a report or a flame graph through gdb, watches a running process's heap
//! without stopping it, shows the whole thing on a built-in example, and installs itself with
//! the library and the gdb script.
//!
//! It is a separate binary of this package so that none of its dependencies end up in the
//! preloaded library. One job per module: `cli` declares the command line (clap) and folds its
//! errors into one line, `locate` finds the library, the script, the C compiler and gdb, `run`
//! starts the program, `corefile` finds the core it left, `gdb_driver` drives gdb (it is
//! `dmem report`), `flamegraph` renders folded stacks, `demo` and `install` are the subcommands of those names, and `sys`
//! holds the few calls into libc. Reading a heap without gdb: `memory` reads another process's
//! memory (the `Memory` trait, and `process_vm_readv` for a live one), `mappings` says which
//! file is mapped where, `elf` reads ELF files (through `object`), `heapwalk` finds the layout
//! descriptor and walks the lists through any `Memory`, `stacks` groups the blocks by stack,
//! `symbolize` names their frames (through `addr2line`), `live` opens a running process with
//! one-line errors, `growth` classifies a stack's series, and `top` is `dmem top`.

mod cli;
mod coredump;
mod corefile;
mod demo;
mod diff;
mod elf;
mod flamegraph;
mod gdb_driver;
mod growth;
mod heapwalk;
mod install;
mod live;
mod locate;
mod mappings;
mod memory;
mod pprof;
mod run;
mod snapjson;
mod snapshot;
mod stacks;
mod symbolize;
mod sys;
mod top;

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

/// The last non-blank line a failed tool wrote to its standard error, for a one-line message.
pub fn last_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message")
        .trim()
        .to_owned()
}

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let status = match cli::parse(args) {
        Ok(cli) => {
            let name = cli.command.name();
            match dispatch(cli.command) {
                Ok(status) => status,
                Err(fail) => {
                    // One line, whatever the message held, so scripts and people can rely on it.
                    eprintln!("dmem {name}: {}", fail.msg.replace('\n', " "));
                    fail.status
                }
            }
        }
        Err(cli::Early::Print(text, status)) => {
            print!("{text}");
            status
        }
        Err(cli::Early::Mistake(sub, msg)) => {
            match sub {
                Some(cmd) => eprintln!("dmem {cmd}: {msg}"),
                None => eprintln!("dmem: {msg}"),
            }
            2
        }
    };
    std::process::exit(status);
}

fn dispatch(command: cli::Command) -> Result<i32> {
    use cli::Command::*;
    match command {
        Run(a) => run::main(a),
        Report(a) => gdb_driver::main(a),
        Flamegraph(a) => flamegraph::main(a),
        Top(a) => top::main(a),
        Snapshot(a) => snapshot::command(&a.source, &a.output, a.format),
        Diff(a) => diff::command(&a.sources, a.json, a.pprof.as_deref(), a.limit),
        Demo(a) => demo::main(a),
        Install(a) => install::main(a),
        Completions(a) => {
            use std::io::Write;
            let _ = std::io::stdout().write_all(&cli::completions(a.shell));
            Ok(0)
        }
    }
}
