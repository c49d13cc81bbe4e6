//! Command-line parsing and the help texts.
//!
//! Hand-written rather than built on an argument-parsing crate: there are five subcommands with a
//! handful of options each, and this keeps the launcher quick to build.

use crate::{usage, Result};
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};

pub const MAIN_HELP: &str = "\
dmem: see what a program's heap holds, and where every block came from, in a core file

Usage:
  dmem run [-o OPTS] [--core-dir DIR] [--gcore] -- PROG [ARGS...]
        run PROG with libdmem.so preloaded, pass its exit status through, say where its core is
  dmem report PROG CORE [SUBCOMMAND [ARGS...]]
        print what the heap in CORE holds, through gdb (default subcommand: summary)
  dmem flamegraph PROG CORE -o OUT.svg [--leaks]
        draw the live bytes of CORE by allocation stack as an SVG flame graph
  dmem demo [--dir DIR]
        run the built-in example program and print its leak report
  dmem install [--prefix DIR]
        install dmem, libdmem.so and the gdb script under DIR (default ~/.local)

'dmem SUBCOMMAND --help' describes each one. A first try:
  dmem run -o abort-shutdown -- PROG ARGS...   # a core at exit holding every unfreed block
  dmem report PROG core                        # which stacks hold the memory

Environment:
  DMEM_LIB         the libdmem.so to preload instead of the one that came with dmem
  DMEM_GDB_SCRIPT  the gdb script (dmem.py) to use instead of the one that came with dmem
  DMEM_OPTS        the library's options when -o is not given; DMEM_OPTS=help lists them
";

pub const RUN_HELP: &str = "\
Usage: dmem run [-o OPTS] [--core-dir DIR] [--gcore] [--] PROG [ARGS...]

Runs PROG with libdmem.so preloaded (LD_PRELOAD) and the library's options set (DMEM_OPTS), and
exits with PROG's exit status (128+N when a signal N ended it). Everything after PROG is PROG's.

  -o, --opts OPTS   DMEM_OPTS for the library, comma-separated, e.g. -o abort-shutdown or
                    -o trace-stderr; repeat -o to add more. Without -o, DMEM_OPTS is inherited.
                    'abort-shutdown' aborts at exit so a core holds exactly the unfreed blocks:
                    dmem then raises the core-size limit and says where the core went.
                    'DMEM_OPTS=help' or '-o help' lists every option.
  --core-dir DIR    move the core into DIR (created if missing) as core.PROG.PID
  --gcore           run PROG under gdb and write the core with gdb's gcore when it aborts or
                    crashes, instead of relying on the kernel. dmem does this by itself when the
                    kernel's core_pattern pipes cores to a crash handler or the hard core-size
                    limit is 0.
  -h, --help        this text

The library is the one next to dmem (or in ../lib when installed), or $DMEM_LIB.
Then: dmem report PROG CORE
";

pub const REPORT_HELP: &str = "\
Usage: dmem report PROG CORE [SUBCOMMAND [ARGS...]]
       dmem report help [SUBCOMMAND]

Opens CORE (a core file of PROG, which ran with libdmem.so preloaded) in gdb with the dmem script
and prints only the report of 'dmem SUBCOMMAND ARGS...', without gdb's own messages. The default
subcommand is summary: live blocks grouped by allocation stack, biggest first. Other
subcommands include stacks, walk, whatis ADDR, verify, stats and folded FILE; most take --json.
'dmem report help' lists them all and 'dmem report help SUBCOMMAND' shows one's options.

gdb errors come out as one line with a non-zero exit status.

  -h, --help   this text

The script is the one installed with dmem (share/dmem/dmem.py), or $DMEM_GDB_SCRIPT.
";

pub const FLAMEGRAPH_HELP: &str = "\
Usage: dmem flamegraph PROG CORE -o OUT.svg [--leaks] [--title TEXT]

Draws the live bytes in CORE by allocation stack as an interactive SVG flame graph (open it in a
browser): each box is a function, as wide as the bytes allocated under it.

  -o, --output OUT.svg  where to write the SVG (required)
  --leaks               draw only leaked blocks (those nothing points to), if the gdb script
                        can tell them apart
  --title TEXT          the title at the top (default: what is drawn, and PROG)
  -h, --help            this text
";

pub const DEMO_HELP: &str = "\
Usage: dmem demo [--dir DIR]

Runs the built-in example, the driver program from the original libdmem post (it frees a 512-byte
block and leaks a 2048-byte one), with abort-shutdown, then prints the report of its core: what
'dmem run' and 'dmem report' do, on a program that is known to leak.

  --dir DIR   where to run it and keep its core (default: dmem-demo in the temporary directory)
  -h, --help  this text
";

pub const INSTALL_HELP: &str = "\
Usage: dmem install [--prefix DIR]

Copies dmem to DIR/bin, libdmem.so to DIR/lib, the gdb script to DIR/share/dmem, and the example
program to DIR/share/dmem/examples. Also installs DIR/lib/libdmem.so-gdb.py, which gdb runs by
itself when it opens a core of a program that had that library preloaded, so the dmem commands
are there in any gdb session once DIR/lib is in gdb's auto-load safe path.

  --prefix DIR  where to install (default: ~/.local)
  -h, --help    this text
";

/// The help text of a subcommand, for `dmem help SUBCOMMAND`.
pub fn help_for(name: &str) -> Option<&'static str> {
    Some(match name {
        "run" => RUN_HELP,
        "report" => REPORT_HELP,
        "flamegraph" => FLAMEGRAPH_HELP,
        "demo" => DEMO_HELP,
        "install" => INSTALL_HELP,
        _ => return None,
    })
}

/// One item of a subcommand's command line.
#[derive(Debug, PartialEq)]
pub enum Arg {
    /// `-x`, `--name` (an attached `--name=value` waits in the parser for `value`).
    Opt(String),
    /// A word that is not an option.
    Word(OsString),
    /// `-h` or `--help`.
    Help,
    /// `--`: what follows are words even if they start with a dash.
    End,
}

/// Walks a subcommand's arguments. Options may come as `--name value`, `--name=value`,
/// `-o value` or `-ovalue`.
pub struct Parser {
    args: VecDeque<OsString>,
    /// The value attached to the last option with `=` (or after a short option's letter).
    attached: Option<OsString>,
    /// Which options take a value: for `-oVALUE`.
    short_with_value: &'static [char],
}

impl Parser {
    pub fn new(args: Vec<OsString>, short_with_value: &'static [char]) -> Parser {
        Parser {
            args: args.into(),
            attached: None,
            short_with_value,
        }
    }

    pub fn next_arg(&mut self) -> Result<Option<Arg>> {
        if let Some(v) = self.attached.take() {
            return Err(usage(format!("unexpected value '{}'", v.to_string_lossy())));
        }
        let Some(arg) = self.args.pop_front() else {
            return Ok(None);
        };
        let Some(s) = arg.to_str() else {
            return Ok(Some(Arg::Word(arg)));
        };
        if s == "--" {
            return Ok(Some(Arg::End));
        }
        if s == "-h" || s == "--help" {
            return Ok(Some(Arg::Help));
        }
        if let Some(long) = s.strip_prefix("--") {
            return Ok(Some(match long.split_once('=') {
                Some((name, value)) => {
                    self.attached = Some(value.into());
                    Arg::Opt(format!("--{name}"))
                }
                None => Arg::Opt(s.to_owned()),
            }));
        }
        if s.len() > 1 && s.starts_with('-') {
            let mut chars = s[1..].chars();
            let letter = chars.next().unwrap_or('-');
            let rest = chars.as_str();
            if !rest.is_empty() && self.short_with_value.contains(&letter) {
                self.attached = Some(rest.into());
                return Ok(Some(Arg::Opt(format!("-{letter}"))));
            }
            return Ok(Some(Arg::Opt(s.to_owned())));
        }
        Ok(Some(Arg::Word(arg)))
    }

    /// The value of option `opt` just returned by `next_arg`.
    pub fn value(&mut self, opt: &str, what: &str) -> Result<OsString> {
        if let Some(v) = self.attached.take() {
            return Ok(v);
        }
        match self.args.pop_front() {
            Some(v) => Ok(v),
            None => Err(usage(format!("{opt} needs {what} after it"))),
        }
    }

    /// Says the option just returned takes no value, if it was given one with `=`.
    pub fn no_value(&mut self, opt: &str) -> Result<()> {
        match self.attached.take() {
            Some(v) => Err(usage(format!(
                "{opt} takes no value, but was given '{}'",
                v.to_string_lossy()
            ))),
            None => Ok(()),
        }
    }

    /// Everything not yet parsed (after `--`, or after the program's name).
    pub fn rest(&mut self) -> Vec<OsString> {
        self.args.drain(..).collect()
    }
}

/// The error for an option a subcommand does not have.
pub fn unknown_option(opt: &str, cmd: &str) -> crate::Fail {
    usage(format!("unknown option '{opt}'; see 'dmem {cmd} --help'"))
}

/// Prints a help text; the exit status of `--help`.
pub fn print_help(text: &str) -> i32 {
    print!("{text}");
    0
}

/// A path for messages: lossy, but readable.
pub fn show(p: impl AsRef<OsStr>) -> String {
    p.as_ref().to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Vec<Arg> {
        let mut p = Parser::new(words.iter().map(OsString::from).collect(), &['o']);
        let mut out = Vec::new();
        while let Some(a) = p.next_arg().unwrap() {
            let is_o = a == Arg::Opt("-o".into()) || a == Arg::Opt("--opts".into());
            out.push(a);
            if is_o {
                out.push(Arg::Word(p.value("-o", "options").unwrap()));
            }
        }
        out
    }

    #[test]
    fn options_in_every_spelling() {
        let w = |s: &str| Arg::Word(s.into());
        let o = |s: &str| Arg::Opt(s.into());
        assert_eq!(parse(&["-o", "a,b"]), vec![o("-o"), w("a,b")]);
        assert_eq!(parse(&["-oa,b"]), vec![o("-o"), w("a,b")]);
        assert_eq!(parse(&["--opts=a"]), vec![o("--opts"), w("a")]);
        assert_eq!(
            parse(&["--help", "-", "--", "-x"]),
            vec![Arg::Help, w("-"), Arg::End, o("-x")]
        );
    }

    #[test]
    fn a_value_where_none_is_taken_is_an_error() {
        let mut p = Parser::new(vec!["--leaks=yes".into()], &[]);
        assert_eq!(p.next_arg().unwrap(), Some(Arg::Opt("--leaks".into())));
        assert!(p.no_value("--leaks").is_err());
    }
}
