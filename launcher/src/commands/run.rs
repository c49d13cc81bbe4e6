//! `dmem run`: start a program with libdmem.so preloaded and account for how it ended.

use crate::analysis::escape::show;
use crate::cli;
use crate::source::coredump::CoreDump;
use crate::source::corefile;
use crate::{failed, last_line, locate, source::elf, sys, usage, Fail, Result};
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

/// What to run and how.
#[derive(Default)]
pub struct Spec {
    pub prog: OsString,
    pub args: Vec<OsString>,
    /// DMEM_OPTS for the program; `None` leaves the launcher's own environment as it is.
    pub opts: Option<String>,
    pub core_dir: Option<PathBuf>,
    /// Run under gdb and write the core with gcore, whatever the kernel would do.
    pub gcore: bool,
    /// The working directory; the launcher's own when `None`.
    pub cwd: Option<PathBuf>,
    /// Collect the program's standard output instead of letting it through.
    pub capture_stdout: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
}

impl Ended {
    /// The status a shell would report: the exit code, or 128 plus the signal.
    pub fn status(self) -> i32 {
        match self {
            Ended::Exited(code) => code,
            Ended::Signaled(sig) => 128 + sig,
        }
    }
}

pub struct Outcome {
    /// The program as it was found, absolute.
    pub prog: PathBuf,
    pub ended: Ended,
    pub core: Option<PathBuf>,
    /// Lines for the user about how the run went, in order.
    pub notes: Vec<String>,
    pub stdout: Vec<u8>,
}

pub fn main(args: cli::RunArgs) -> Result<i32> {
    let mut spec = Spec {
        core_dir: args.core_dir,
        gcore: args.gcore,
        ..Spec::default()
    };
    let opts = args.opts;
    let mut rest = args.command;
    if rest.is_empty() {
        return Err(usage(
            "no program to run; usage: dmem run [-o OPTS] -- PROG [ARGS...]",
        ));
    }
    spec.prog = rest.remove(0);
    spec.args = rest;
    if !opts.is_empty() {
        spec.opts = Some(opts.join(","));
    }
    let out = execute(&spec)?;
    for note in &out.notes {
        eprintln!("dmem: {note}");
    }
    if let Some(core) = &out.core {
        eprintln!("dmem: core file: {}", show(core));
        // The core's notes name the executable that ran, which is not the file started when
        // that was a `#!` script (its interpreter ran).
        let prog = CoreDump::open(core)
            .ok()
            .and_then(|dump| dump.program())
            .unwrap_or_else(|| out.prog.clone());
        eprintln!(
            "dmem: see what it holds: dmem report {} {}",
            show(&prog),
            show(core)
        );
    }
    Ok(out.ended.status())
}

/// Whether the library's options ask for a core at exit.
pub fn asks_for_core(opts: &str) -> bool {
    opts.split(',')
        .any(|w| matches!(w.trim(), "abort-shutdown" | "abort-shutdown=all"))
}

/// Runs the program and reports how it ended, with the core it left when it left one.
pub fn execute(spec: &Spec) -> Result<Outcome> {
    let lib = locate::library()?;
    let prog = program(spec)?;
    let mut notes = Vec::new();
    notes.extend(preload_warning(&prog));

    let opts = spec
        .opts
        .clone()
        .or_else(|| std::env::var("DMEM_OPTS").ok())
        .unwrap_or_default();
    let want_core = asks_for_core(&opts);
    let cwd = working_dir(spec)?;
    let core_dir = spec.core_dir.as_ref().map(|d| cwd.join(d));
    let pattern = corefile::pattern();
    let use_gcore = spec.gcore || (want_core && gdb_must_write_the_core(&pattern, &mut notes));
    let preload = preload_list(lib);

    let name = prog.file_name().map(show).unwrap_or_default();
    let run = Launch {
        spec,
        prog: &prog,
        preload: &preload,
        opts: &opts,
        cwd: &cwd,
        core_dir: core_dir.as_deref(),
    };
    let started = SystemTime::now();
    let (pid, ended, mut core, stdout) = if use_gcore {
        run.under_gdb()?
    } else {
        run.direct()?
    };

    notes.extend(how_it_ended(&name, ended, want_core));
    let dumped = matches!(ended, Ended::Signaled(sig) if sys::dumps_core(sig));
    if dumped && core.is_none() {
        core = find_the_core(&pattern, &cwd, pid, started, &mut notes);
        if let (Some(c), Some(dir)) = (&core, &core_dir) {
            if c.parent() != Some(dir.as_path()) {
                core = Some(corefile::move_into(c, dir, &prog, &pid.to_string())?);
            }
        }
    }
    Ok(Outcome {
        prog,
        ended,
        core,
        notes,
        stdout,
    })
}

/// The program to start, found as a shell would find it, its path made absolute.
fn program(spec: &Spec) -> Result<PathBuf> {
    let prog = locate::program(Path::new(&spec.prog)).ok_or_else(|| Fail {
        msg: format!(
            "cannot run '{}': it is not a file, nor a program on PATH; give its path",
            show(&spec.prog)
        ),
        status: 127,
    })?;
    Ok(prog.canonicalize().unwrap_or(prog))
}

/// The directory the program runs in, made absolute.
fn working_dir(spec: &Spec) -> Result<PathBuf> {
    let cwd = match &spec.cwd {
        Some(d) => d.clone(),
        None => {
            std::env::current_dir().map_err(|e| failed(format!("cannot tell the current directory: {e}")))?
        }
    };
    Ok(cwd.canonicalize().unwrap_or(cwd))
}

/// LD_PRELOAD for the program: the library, then whatever the launcher's own LD_PRELOAD had.
fn preload_list(lib: PathBuf) -> OsString {
    let mut preload = lib.into_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        // libdmem first, so it sees every call; whatever else was preloaded (another allocator,
        // say) comes after and serves as the real allocator.
        preload.push(" ");
        preload.push(existing);
    }
    preload
}

/// Whether gdb must write the core because the kernel would not leave a file (a hard core-size
/// limit of 0, or a core_pattern that pipes cores to a handler); raises the soft limit.
fn gdb_must_write_the_core(pattern: &corefile::Pattern, notes: &mut Vec<String>) -> bool {
    let mut use_gcore = false;
    match sys::raise_core_limit() {
        Ok((_, Some(0))) => {
            notes.push(
                "the hard core-size limit is 0, so the kernel writes no core; running the program under gdb \
                 to write it"
                    .into(),
            );
            use_gcore = true;
        }
        Ok(_) => {}
        Err(e) => notes.push(format!(
            "could not raise the core-size limit ({e}); the core may be missing"
        )),
    }
    if let corefile::Pattern::Pipe(handler) = pattern {
        if locate::gdb().is_ok() {
            let program = handler.split_whitespace().next().unwrap_or(handler);
            notes.push(format!(
                "core_pattern hands cores to {program} instead of writing a file; running the program \
                 under gdb to write the core"
            ));
            use_gcore = true;
        }
    }
    use_gcore
}

/// The note on how the program ended, when there is one to make.
fn how_it_ended(name: &str, ended: Ended, want_core: bool) -> Option<String> {
    match ended {
        Ended::Signaled(sig) if want_core && sig == libc::SIGABRT => Some(format!(
            "{name} aborted at exit, as abort-shutdown asks, so its exit status is {} (128+{sig})",
            ended.status()
        )),
        Ended::Signaled(sig) => Some(format!(
            "{name} was killed by {} (exit status {})",
            sys::signal_name(sig),
            ended.status()
        )),
        Ended::Exited(code) if want_core => Some(format!(
            "{name} exited with status {code} without the abort at exit (it left through _exit or exec, or \
             never loaded the library), so there is no core"
        )),
        Ended::Exited(_) => None,
    }
}

/// The core the kernel wrote for `pid` as the core_pattern says, or a note on why none is found.
fn find_the_core(
    pattern: &corefile::Pattern,
    cwd: &Path,
    pid: u32,
    started: SystemTime,
    notes: &mut Vec<String>,
) -> Option<PathBuf> {
    match pattern {
        corefile::Pattern::File(pat) => {
            let core = corefile::find(pat, cwd, pid, started);
            if core.is_none() {
                notes.push(format!(
                    "no core file appeared (core_pattern '{pat}', working directory {}); check that the \
                     directory is writable and 'ulimit -c' is not 0, or use 'dmem run --gcore'",
                    show(cwd)
                ));
            }
            core
        }
        corefile::Pattern::Pipe(handler) => {
            notes.push(corefile::pipe_advice(handler, pid));
            None
        }
    }
}

/// A warning when the loader will not honour LD_PRELOAD for this program.
fn preload_warning(prog: &Path) -> Option<String> {
    let name = show(prog);
    if prog
        .metadata()
        .is_ok_and(|m| m.permissions().mode() & 0o6000 != 0)
    {
        return Some(format!(
            "{name} is setuid or setgid: the loader ignores LD_PRELOAD for it, so nothing will be recorded"
        ));
    }
    match elf::kind(prog) {
        Ok(elf::Kind::Program { dynamic: false }) => Some(format!(
            "{name} is statically linked: LD_PRELOAD cannot reach its malloc, so nothing will be recorded"
        )),
        _ => None,
    }
}

struct Launch<'a> {
    spec: &'a Spec,
    prog: &'a Path,
    preload: &'a std::ffi::OsStr,
    opts: &'a str,
    cwd: &'a Path,
    core_dir: Option<&'a Path>,
}

type Ran = (u32, Ended, Option<PathBuf>, Vec<u8>);

impl Launch<'_> {
    fn stdout(&self) -> Stdio {
        if self.spec.capture_stdout {
            Stdio::piped()
        } else {
            Stdio::inherit()
        }
    }

    /// The program itself, preloaded; the kernel writes any core.
    fn direct(&self) -> Result<Ran> {
        let mut cmd = Command::new(self.prog);
        // argv[0] as the user typed it, as a shell would pass it.
        std::os::unix::process::CommandExt::arg0(&mut cmd, &self.spec.prog);
        cmd.args(&self.spec.args)
            .current_dir(self.cwd)
            .env("LD_PRELOAD", self.preload)
            .env("DMEM_OPTS", self.opts)
            .stdout(self.stdout());
        let child = cmd.spawn().map_err(|e| spawn_error(self.prog, e))?;
        sys::ignore_terminal_signals();
        let pid = child.id();
        let out = child
            .wait_with_output()
            .map_err(|e| failed(format!("lost track of {}: {e}", show(self.prog))))?;
        Ok((pid, ended(out.status), None, out.stdout))
    }

    /// The program under gdb, which stops it at a fatal signal (the abort at exit included) and
    /// writes the core with gcore. The program's own output still goes where the launcher's
    /// does; gdb's messages are captured and dropped.
    fn under_gdb(&self) -> Result<Ran> {
        let gdb = locate::gdb()?;
        let scratch = std::env::temp_dir().join(format!("dmem-gcore-{}", std::process::id()));
        std::fs::create_dir_all(&scratch)
            .map_err(|e| failed(format!("cannot create {}: {e}", show(&scratch))))?;
        let script = scratch.join("gcore.py");
        let result = scratch.join("result");
        let cleanup = || {
            let _ = std::fs::remove_dir_all(&scratch);
        };
        std::fs::write(&script, GCORE_SCRIPT)
            .map_err(|e| failed(format!("cannot write {}: {e}", show(&script))))?;
        let core_template = self.core_template()?;
        let mut cmd = self.gdb_command(&gdb, &script, &core_template, &result);
        let child = cmd.spawn().map_err(|e| {
            cleanup();
            failed(format!("cannot start gdb: {e}"))
        })?;
        sys::ignore_terminal_signals();
        let out = child
            .wait_with_output()
            .map_err(|e| failed(format!("lost track of gdb: {e}")))?;
        let text = std::fs::read_to_string(&result).unwrap_or_default();
        cleanup();
        self.gdb_result(&text, out)
    }

    /// Where gcore writes the core, `{pid}` standing for the program's process id; creates
    /// the core directory when one was asked for.
    fn core_template(&self) -> Result<PathBuf> {
        Ok(match self.core_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| failed(format!("cannot create the core directory {}: {e}", show(dir))))?;
                dir.join(corefile::core_name(self.prog, "{pid}"))
            }
            None => self.cwd.join("core.{pid}"),
        })
    }

    /// gdb running the program under `script`, which writes how it ended to `result`.
    fn gdb_command(&self, gdb: &Path, script: &Path, core_template: &Path, result: &Path) -> Command {
        let mut cmd = Command::new(gdb);
        cmd.args(["-batch", "-nx", "-q"])
            .args(["-iex", "set debuginfod enabled off"])
            // gdb announces how the program ended on its standard output, which the program
            // shares: send gdb's own output to /dev/null (the program writes to the descriptor,
            // not through gdb). This only takes hold from the command line, not from the script.
            .args([
                "-ex",
                "set logging file /dev/null",
                "-ex",
                "set logging redirect on",
            ])
            .args(["-ex", "set logging enabled on"])
            .arg("-x")
            .arg(script)
            .arg("--args")
            .arg(self.prog)
            .args(&self.spec.args)
            .current_dir(self.cwd)
            // gdb must not have the library preloaded itself: the script sets it for the program.
            .env_remove("LD_PRELOAD")
            .env("DMEM_GCORE_PRELOAD", self.preload)
            .env("DMEM_GCORE_FILE", core_template)
            .env("DMEM_GCORE_RESULT", result)
            .env("DMEM_OPTS", self.opts)
            .stdout(self.stdout())
            .stderr(Stdio::piped());
        cmd
    }

    /// How the program ended, from the line the script wrote (`text`) and gdb's output.
    fn gdb_result(&self, text: &str, out: std::process::Output) -> Result<Ran> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let num = |i: usize| words.get(i).and_then(|w| w.parse::<i64>().ok());
        match words.first().copied() {
            Some("exit") => Ok((
                num(1).unwrap_or(0) as u32,
                Ended::Exited(num(2).unwrap_or(0) as i32),
                None,
                out.stdout,
            )),
            Some("signal") => {
                let core = text
                    .split_once(" core ")
                    .map(|(_, p)| PathBuf::from(p.trim_end()));
                Ok((
                    num(1).unwrap_or(0) as u32,
                    Ended::Signaled(num(2).unwrap_or(0) as i32),
                    core,
                    out.stdout,
                ))
            }
            Some("error") => Err(failed(format!(
                "gdb could not run {}: {}",
                show(self.prog),
                text[5..].trim()
            ))),
            _ => Err(failed(format!(
                "running {} under gdb failed: {}",
                show(self.prog),
                last_line(&out.stderr)
            ))),
        }
    }
}

fn ended(status: std::process::ExitStatus) -> Ended {
    match (status.code(), status.signal()) {
        (Some(code), _) => Ended::Exited(code),
        (None, Some(sig)) => Ended::Signaled(sig),
        (None, None) => Ended::Exited(1),
    }
}

fn spawn_error(prog: &Path, e: std::io::Error) -> Fail {
    let status = if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    Fail {
        msg: format!("cannot run {}: {e}", show(prog)),
        status,
    }
}

/// Runs the program under gdb until it exits or a signal that would dump core stops it, then
/// writes one line to $DMEM_GCORE_RESULT: `exit PID CODE`, `signal PID SIG core PATH` or
/// `error MESSAGE`.
const GCORE_SCRIPT: &str = r#"
import os
import gdb

env = os.environ
result_path = env["DMEM_GCORE_RESULT"]
core_template = env["DMEM_GCORE_FILE"]
preload = env["DMEM_GCORE_PRELOAD"]


def quiet(cmd):
    return gdb.execute(cmd, to_string=True)


def finish(line):
    with open(result_path, "w") as f:
        f.write(line + "\n")


for setting in ("confirm off", "pagination off", "startup-with-shell off", "disable-randomization off",
                "print thread-events off", "print inferior-events off"):
    quiet("set " + setting)
for var in ("DMEM_GCORE_RESULT", "DMEM_GCORE_FILE", "DMEM_GCORE_PRELOAD"):
    quiet("unset environment " + var)
quiet("set environment LD_PRELOAD " + preload)
# Signals go to the program as usual, Ctrl-C included; only those that would dump core stop it.
quiet("handle all nostop noprint pass")
quiet("handle SIGINT nostop noprint pass")
quiet("handle SIGQUIT SIGILL SIGABRT SIGBUS SIGFPE SIGSEGV SIGSYS SIGXCPU SIGXFSZ stop print nopass")
try:
    quiet("run")
    inf = gdb.selected_inferior()
    if inf.pid == 0 or not inf.threads():
        code = gdb.convenience_variable("_exitcode")
        sig = gdb.convenience_variable("_exitsignal")
        if sig is not None:
            finish("signal 0 %d" % int(sig))
        else:
            finish("exit 0 %d" % int(code if code is not None else 0))
    else:
        pid = inf.pid
        sig = int(gdb.parse_and_eval("$_siginfo.si_signo"))
        path = core_template.replace("{pid}", str(pid))
        quiet("gcore " + path)
        quiet("kill")
        finish("signal %d %d core %s" % (pid, sig, path))
except gdb.error as e:
    finish("error " + str(e).replace("\n", " "))
"#;
