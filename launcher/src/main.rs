//! `dmem`, the launcher: runs a program with libdmem.so preloaded and finds the core it leaves;
//! answers every question about the heap of a core or a running process (summary, stacks,
//! leaks, why...) with one engine, which the gdb commands call too; watches a running process's
//! heap without stopping it; writes heap profiles and compares them; shows the whole thing on a
//! built-in example, and installs itself with the library and the gdb script.
//!
//! It is a package of its own so that none of its dependencies end up in the preloaded
//! library. Its folders: `source` reads a process or a core (memory, mappings, ELF,
//! threads, the list walk), `model` holds what is made of it and its formats (the heap, roots
//! and leak classes, frames, snapshots), `commands` the subcommands, `steps` what the analysis
//! commands share between the command line and the model, and `locate` where the library and
//! the gdb script are.

// The leak classes, roots and the descriptor's format, shared with the library's exit report
// (analysis/), under the name the modules use.
use dmem_analysis as analysis;
#[forbid(unsafe_code)]
mod cli;
#[forbid(unsafe_code)]
mod commands;
#[forbid(unsafe_code)]
mod locate;
#[forbid(unsafe_code)]
mod model;
// Reading a process or a core needs unsafe in three files, which `source/mod.rs` names.
mod source;
#[forbid(unsafe_code)]
mod steps;
mod sys;

#[global_allocator]
static ALLOCATOR: sys::Allocator = sys::Allocator;

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
            let name = cli.name;
            if let Some(dir) = cli.sysroot {
                if !dir.is_dir() {
                    eprintln!(
                        "dmem {name}: --sysroot {}: no such directory",
                        analysis::escape::show(&dir)
                    );
                    std::process::exit(2);
                }
                source::files::set_sysroot(dir);
            }
            match dispatch(cli.command) {
                Ok(status) => status,
                Err(fail) => {
                    // One line, whatever the message held, so scripts and people can rely on it,
                    // and whatever input it echoes cannot act on the terminal.
                    let msg = analysis::escape::escaped(fail.msg.replace('\n', " ").as_bytes());
                    eprintln!("dmem {name}: {msg}");
                    fail.status
                }
            }
        }
        Err(cli::Early::Print(text, status)) => {
            print!("{text}");
            status
        }
        Err(cli::Early::Mistake(sub, msg)) => {
            let msg = analysis::escape::escaped(msg.as_bytes());
            match sub {
                Some(cmd) => eprintln!("dmem {cmd}: {msg}"),
                None => eprintln!("dmem: {msg}"),
            }
            2
        }
    };
    std::process::exit(status);
}

/// Prints an analysis command's answer.
fn print(answer: Result<String>) -> Result<i32> {
    use std::io::Write;
    let text = answer?;
    let mut out = std::io::stdout().lock();
    // A reader that goes away (`| head`) is not an error of ours.
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    Ok(0)
}

fn dispatch(command: cli::Command) -> Result<i32> {
    use cli::Command::*;
    match command {
        Run(a) => commands::run::main(a),
        Summary(a) => print(commands::heap::summary(a)),
        Stacks(a) => print(commands::heap::stacks(a)),
        Walk(a) => print(commands::heap::walk(a)),
        Whatis(a) => print(commands::heap::whatis(a)),
        // Problems found: status 1, after the answer that names them.
        Verify(a) => {
            commands::heap::verify(a).and_then(|(text, ok)| Ok(print(Ok(text))?.max(u8::from(!ok) as i32)))
        }
        Stats(a) => print(commands::heap::stats(a)),
        Folded(a) => print(commands::folded::folded(a)),
        Leaks(a) => commands::leaks::leaks(a).and_then(|(text, status)| print(Ok(text)).map(|_| status)),
        Why(a) => print(commands::why::why(a)),
        Types(a) => print(commands::types::types(a)),
        Words(a) => print(commands::words::words(a)),
        History(a) => print(commands::history::history(a)),
        Report(a) => {
            let words = commands::report::rewrite(&a.words)?;
            match cli::parse(words) {
                Ok(cli) => {
                    if let Some(dir) = cli.sysroot {
                        source::files::set_sysroot(dir);
                    }
                    dispatch(cli.command)
                }
                Err(cli::Early::Print(text, status)) => {
                    print!("{text}");
                    Ok(status)
                }
                Err(cli::Early::Mistake(_, msg)) => Err(usage(msg)),
            }
        }
        Flamegraph(a) => commands::flamegraph::main(a),
        Top(a) => commands::top::main(a),
        Snapshot(a) => commands::snapshot::command(&a.source, &a.output, a.format),
        Diff(a) => commands::diff::command(&a.sources, a.json, a.pprof.as_deref(), a.limit),
        Serve(a) => commands::serve::main(a),
        Record(a) => commands::record::main(a),
        Timeline(a) => commands::timeline::main(a),
        Demo(a) => commands::demo::main(a),
        Install(a) => commands::install::main(a),
        Commands(a) => commands::catalog::main(a),
        Completions(a) => {
            use std::io::Write;
            let _ = std::io::stdout().write_all(&cli::completions(a.shell));
            Ok(0)
        }
    }
}
