//! Running gdb with `gdb/dmem.py` on a core or a live process, for the gdb script's tests.
#![allow(dead_code)]

pub use crate::common::have_tool;
use crate::common::{output, text};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Whether gdb is there, for the tests that drive it.
pub fn have_gdb() -> bool {
    have_tool("gdb")
}

/// The script, as a user would source it.
pub fn script() -> PathBuf {
    crate::common::top().join("gdb").join("dmem.py")
}

/// What one gdb run printed: stdout cut into one section per command, and all of stderr.
pub struct Session {
    pub sections: Vec<String>,
    pub stdout: String,
    pub stderr: String,
}

impl Session {
    /// The standard output of the `i`th command.
    pub fn out(&self, i: usize) -> &str {
        &self.sections[i]
    }

    /// Fails if gdb printed a Python traceback anywhere: every failure of the script must be a
    /// one-line gdb error.
    pub fn assert_no_traceback(&self) {
        for needle in ["Traceback", "Python Exception", "Error occurred in Python"] {
            assert!(
                !self.stdout.contains(needle) && !self.stderr.contains(needle),
                "gdb printed a Python traceback:\n{}\n{}",
                self.stdout,
                self.stderr
            );
        }
    }
}

const MARK: &str = "@@dmem-test-command@@";

/// Runs `gdb -batch -nx` on `prog` with `target` (a core file, or None for gdb's own `run`),
/// sources the script, then runs `setup` commands (whose output is not kept) and `cmds`, each
/// command's output going to its own section. gdb runs in `cwd`, away from the repository, so
/// the script must find its own module wherever it is sourced from.
pub fn run(
    cwd: &Path,
    prog: &Path,
    target: Option<&Path>,
    setup: &[String],
    cmds: &[&str],
    env: &[(&str, &str)],
) -> Session {
    let mut cmd = Command::new("gdb");
    cmd.args(["-batch", "-nx", "-q"]).arg(prog);
    if let Some(core) = target {
        cmd.arg(core);
    }
    // The commands' answers come from this build's dmem binary.
    cmd.current_dir(cwd)
        .env_remove("LD_PRELOAD")
        .env("DMEM_BIN", env!("CARGO_BIN_EXE_dmem"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    for s in setup {
        cmd.arg("-ex").arg(s);
    }
    cmd.arg("-ex").arg(format!("source {}", script().display()));
    for c in cmds {
        cmd.arg("-ex").arg(format!("echo \\n{MARK}\\n"));
        cmd.arg("-ex").arg(c);
    }
    let out = output(&mut cmd);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    let sections: Vec<String> = stdout
        .split(&format!("\n{MARK}\n"))
        .skip(1)
        .map(str::to_owned)
        .collect();
    assert_eq!(
        sections.len(),
        cmds.len(),
        "gdb output is not one section per command:\n{stdout}\n{stderr}"
    );
    Session {
        sections,
        stdout,
        stderr,
    }
}

/// Runs `cmds` on a core file.
pub fn on_core(cwd: &Path, prog: &Path, core: &Path, cmds: &[&str]) -> Session {
    run(cwd, prog, Some(core), &[], cmds, &[])
}

/// Commands that start `prog` under gdb (with `preload` in LD_PRELOAD, if any) and stop it at
/// `exit`, leaving a live process to look at.
pub fn stop_at_exit(preload: Option<&Path>, opts: &str) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(lib) = preload {
        v.push(format!("set environment LD_PRELOAD={}", lib.display()));
    }
    v.push(format!("set environment DMEM_OPTS={opts}"));
    v.push("set breakpoint pending on".to_owned());
    v.push("break exit".to_owned());
    v.push("run".to_owned());
    v
}

/// A core of `prog` run WITHOUT libdmem: gdb stops it at exit and writes the core with gcore.
/// The launcher cannot make this one: it always preloads the library, and writes a core only
/// when the program aborts or crashes.
pub fn plain_core(dir: &Path, prog: &Path) -> PathBuf {
    let core = dir.join("core.plain");
    let mut cmd = gcore_command(dir, &stop_at_exit(None, ""), &core);
    cmd.args(["-ex", "kill", "--args"]).arg(prog);
    written_core(core, &output(&mut cmd))
}

/// gdb in batch mode in `dir` that runs `setup`, then writes a core of its process to `core`
/// with gcore. The caller adds what gives gdb a process (`-p PID`, or `--args PROG` with a setup
/// that runs it to where it stops), runs it, and checks with `written_core`.
pub fn gcore_command(dir: &Path, setup: &[String], core: &Path) -> Command {
    let mut cmd = Command::new("gdb");
    cmd.args(["-batch", "-nx", "-q"])
        .current_dir(dir)
        .env_remove("LD_PRELOAD");
    for c in setup {
        cmd.arg("-ex").arg(c);
    }
    cmd.arg("-ex").arg(format!("gcore {}", core.display()));
    cmd
}

/// `core`, after checking that the gdb run that ended with `out` wrote it.
pub fn written_core(core: PathBuf, out: &Output) -> PathBuf {
    assert!(
        core.is_file(),
        "gcore wrote no core: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    core
}

/// Runs a Python interpreter on the unit tests of the pure module; returns (success, report).
pub fn python_unit_tests(python: &Path) -> (bool, String) {
    let dir = crate::common::top().join("tests").join("python");
    let mut cmd = Command::new(python);
    cmd.args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(&dir)
        .arg("-t")
        .arg(&dir);
    let out = output(&mut cmd);
    (
        out.status.success(),
        format!("{}{}", text(&out.stdout), text(&out.stderr)),
    )
}

/// Checks that `json` parses, with Python's json module, and returns what `expr` (a Python
/// expression over the parsed document `d`) evaluates to, printed by Python.
pub fn json_query(json: &str, expr: &str) -> String {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new("python3")
        .args([
            "-c",
            &format!("import json, sys\nd = json.load(sys.stdin)\nprint({expr})"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn python3");
    child.stdin.take().unwrap().write_all(json.as_bytes()).unwrap();
    let out = child.wait_with_output().expect("python3");
    assert!(
        out.status.success(),
        "not valid JSON ({}):\n{json}",
        text(&out.stderr)
    );
    text(&out.stdout).trim().to_owned()
}
