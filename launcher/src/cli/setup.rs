//! The arguments of the commands that run a program or set dmem up: run, demo, install,
//! completions, and the hidden list of commands the gdb side reads.

use super::values::TEMPLATE;
use clap::Args;
use std::ffi::OsString;
use std::path::PathBuf;

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
