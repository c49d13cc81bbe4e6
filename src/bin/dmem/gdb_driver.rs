//! The gdb driver behind `dmem report` (and `dmem flamegraph`, `dmem demo`): runs one `dmem`
//! command of the gdb script on a core, in gdb's batch mode, and passes on only what it printed.
//!
//! gdb prints plenty of its own on the way (which threads there were, the signal that ended the
//! process, the frame it stopped in, warnings about files it could not find), on both of its
//! output streams. Marker lines printed from Python just before the script is loaded and just
//! before the command runs split each stream into: gdb's noise, the script loading, and the
//! command, so only the last part reaches the user and errors can be told apart.

use crate::cli::{self, show};
use crate::{elf, failed, install, locate, usage, Fail, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub fn main(args: cli::ReportArgs) -> Result<i32> {
    let words = args.words;
    // Options belong to the gdb command, from the third word on (`stacks --json`); before it
    // there is none to give.
    if let Some(opt) = words
        .iter()
        .take(2)
        .find(|w| w.to_string_lossy().starts_with('-'))
    {
        return Err(usage(format!(
            "unknown option '{}'; see 'dmem report --help'",
            show(opt)
        )));
    }
    if words.first().is_some_and(|w| w == "help") {
        let mut command = vec!["help".to_owned(), "dmem".to_owned()];
        command.extend(words[1..].iter().map(|w| w.to_string_lossy().into_owned()));
        gdb_command(None, &gdb_line(&command)?, Sink::Stdout)?;
        return Ok(0);
    }
    if words.len() < 2 {
        return Err(usage(
            "needs a program and its core; usage: dmem report PROG CORE [SUBCOMMAND [ARGS...]]",
        ));
    }
    let (prog, core) = check_pair(Path::new(&words[0]), Path::new(&words[1]))?;
    let mut command = vec!["dmem".to_owned()];
    if words.len() == 2 {
        command.push("summary".to_owned());
    }
    command.extend(words[2..].iter().map(|w| w.to_string_lossy().into_owned()));
    gdb_command(Some((&prog, &core)), &gdb_line(&command)?, Sink::Stdout)?;
    if let Some(hint) = install::autoload_hint() {
        eprintln!("dmem: {hint}");
    }
    Ok(0)
}

/// Checks that PROG is a program and CORE a core file, catching the usual mix-ups.
pub fn check_pair(prog: &Path, core: &Path) -> Result<(PathBuf, PathBuf)> {
    // Like gdb, a bare name is a file here first, then a program on PATH.
    let found = Some(prog.to_path_buf())
        .filter(|p| p.is_file())
        .or_else(|| locate::program(prog))
        .ok_or_else(|| {
            usage(format!(
                "no program {}: give the path of the program the core came from",
                show(prog)
            ))
        })?;
    if !core.is_file() {
        return Err(usage(format!(
            "no core file {}: give the path of a core of {}",
            show(core),
            show(prog)
        )));
    }
    let kind = |p: &Path| elf::kind(p).map_err(|e| failed(format!("cannot read {}: {e}", show(p))));
    match (kind(&found)?, kind(core)?) {
        (elf::Kind::Core, elf::Kind::Program { .. }) => Err(usage(format!(
            "{} is a core and {} a program: give the program first, then the core",
            show(prog),
            show(core)
        ))),
        (elf::Kind::Core, _) => Err(usage(format!(
            "{} is a core file, not a program: give the program first, then the core",
            show(prog)
        ))),
        (_, elf::Kind::Core) => Ok((found, core.to_path_buf())),
        _ => Err(usage(format!(
            "{} is not a core file; make one with 'dmem run -o abort-shutdown -- PROG' or gdb's gcore",
            show(core)
        ))),
    }
}

/// Where the command's output goes.
pub enum Sink {
    /// Straight to the launcher's standard output, as it comes.
    Stdout,
    /// Kept and returned.
    Capture,
}

/// A gdb command line of words, each quoted as needed.
pub fn gdb_line(words: &[String]) -> Result<String> {
    Ok(words
        .iter()
        .map(|w| gdb_word(w))
        .collect::<Result<Vec<_>>>()?
        .join(" "))
}

/// Runs the gdb command `line` after loading the dmem script, in gdb with `PROG CORE` loaded
/// when given. Returns the output when captured.
pub fn gdb_command(target: Option<(&Path, &Path)>, line: &str, sink: Sink) -> Result<String> {
    let gdb = locate::gdb()?;
    let script = locate::script()?;
    let marker = format!("@@dmem-report-{}@@", std::process::id());
    let mark = format!(
        "python import sys; print('{marker}'); sys.stdout.flush(); sys.stderr.write('{marker}\\n'); sys.stderr.flush()"
    );
    let mut cmd = Command::new(gdb);
    cmd.args(["-batch", "-nx", "-q"])
        .args(["-iex", "set debuginfod enabled off"])
        // An installed libdmem.so-gdb.py would load the script a second time, or have gdb
        // explain at length why it declined to.
        .args(["-iex", "set auto-load python-scripts off"])
        .args([
            "-iex",
            "set width 0",
            "-iex",
            "set height 0",
            "-iex",
            "set pagination off",
        ]);
    if let Some((prog, core)) = target {
        cmd.arg(prog).arg(core);
    }
    cmd.arg("-ex").arg(&mark);
    cmd.arg("-ex").arg(format!("source {}", script.display()));
    cmd.arg("-ex").arg(&mark);
    cmd.arg("-ex").arg(line);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // gdb should not inherit a preloaded libdmem (when dmem itself runs under dmem run, say).
    cmd.env_remove("LD_PRELOAD");
    let mut child = cmd
        .spawn()
        .map_err(|e| failed(format!("cannot start gdb: {e}")))?;

    let mut err_pipe = child.stderr.take().expect("piped stderr");
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = err_pipe.read_to_end(&mut buf);
        buf
    });
    let mut captured = Vec::new();
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let stdout = std::io::stdout();
    let mut stdout = stdout.lock();
    let (mut seen, mut buf, mut closed) = (0, Vec::new(), false);
    loop {
        buf.clear();
        match out.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if seen < 2 {
            if buf.strip_suffix(b"\n").unwrap_or(&buf) == marker.as_bytes() {
                seen += 1;
            }
            continue;
        }
        match sink {
            Sink::Capture => captured.extend_from_slice(&buf),
            Sink::Stdout if !closed => {
                if stdout.write_all(&buf).is_err() {
                    // The reader went away (`| head`): stop gdb rather than let it run on.
                    closed = true;
                    let _ = child.kill();
                }
            }
            Sink::Stdout => {}
        }
    }
    let _ = stdout.flush();
    let status = child
        .wait()
        .map_err(|e| failed(format!("lost track of gdb: {e}")))?;
    let err = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
    if closed {
        return Ok(String::new());
    }
    let separator = format!("{marker}\n");
    let mut parts = err.split(&separator);
    let noise = parts.next().unwrap_or("");
    let loading = parts.next().unwrap_or("");
    let running = parts.next().unwrap_or("");
    if let Some((_, core)) = target {
        if noise.contains("core file may not match specified executable") {
            eprintln!(
                "dmem: warning: gdb says {} may not be a core of this program",
                show(core)
            );
        }
    }
    if !status.success() {
        return Err(gdb_failure(&script, status, noise, loading, running, seen));
    }
    // A command that succeeded may still have warned about something.
    eprint!("{running}");
    Ok(String::from_utf8_lossy(&captured).into_owned())
}

fn gdb_failure(
    script: &Path,
    status: std::process::ExitStatus,
    noise: &str,
    loading: &str,
    running: &str,
    seen: usize,
) -> Fail {
    let last = |s: &str| {
        s.lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_owned)
    };
    if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&status) {
        return failed(format!(
            "gdb died of {}; try the same with gdb directly",
            crate::sys::signal_name(sig)
        ));
    }
    if seen == 0 {
        // gdb stopped before running anything of ours: it could not load the program or core.
        return failed(format!(
            "gdb could not open them: {}",
            last(noise).unwrap_or_else(|| "no message".into())
        ));
    }
    let command_error = last(running);
    let undefined = command_error
        .as_deref()
        .is_some_and(|l| l.starts_with("Undefined command"));
    if let (true, Some(why)) = (command_error.is_none() || undefined, last(loading)) {
        return failed(format!(
            "the gdb script {} did not load: {why}; check that gdb has Python 3",
            show(script)
        ));
    }
    // The script's own errors start with "dmem: ", which the launcher's prefix already says.
    let message = command_error.map(|l| l.strip_prefix("dmem: ").map(str::to_owned).unwrap_or(l));
    failed(message.unwrap_or_else(|| format!("gdb exited with {status} and no message")))
}

/// A Python bytes literal for a path, exact whatever bytes it holds.
pub fn python_bytes(p: &Path) -> String {
    let mut s = String::from("b\"");
    for &b in p.as_os_str().as_bytes() {
        match b {
            b'"' | b'\\' => {
                s.push('\\');
                s.push(b as char);
            }
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s.push('"');
    s
}

/// One word of a gdb command line, quoted when it has blanks: the script splits its arguments
/// on blanks and groups quoted words.
fn gdb_word(w: &str) -> Result<String> {
    // The script splits words as gdb.string_to_argv does, where a backslash escapes the next
    // character even inside quotes: doubled, each reaches the command as it was given.
    let w = &w.replace('\\', "\\\\");
    if !w.is_empty() && !w.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
        return Ok(w.to_owned());
    }
    if !w.contains('\'') {
        Ok(format!("'{w}'"))
    } else if !w.contains('"') {
        Ok(format!("\"{w}\""))
    } else {
        Err(usage(format!(
            "cannot pass {w} to gdb: it holds both kinds of quote"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::gdb_word;

    #[test]
    fn words_with_blanks_are_quoted() {
        assert_eq!(gdb_word("--json").unwrap(), "--json");
        assert_eq!(gdb_word("a b").unwrap(), "'a b'");
        assert_eq!(gdb_word("it's").unwrap(), "\"it's\"");
        assert!(gdb_word("'\"").is_err());
        assert_eq!(gdb_word("a\\.b").unwrap(), "a\\\\.b");
    }
}
