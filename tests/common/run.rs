//! Running programs bare and preloaded under a time limit, and comparing the runs.
#![allow(dead_code)]

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Long enough for any fixture on a loaded two-core machine; only a hang (a deadlock after fork,
/// say) comes near it. Not a performance bound. The fork and deadlock fixtures, which take a few
/// seconds when nothing deadlocks, get no shorter limit: pinned to one core beside other work,
/// the fork fixture under `trace-stderr` (four threads hammering the allocator, each call a line
/// on a pipe, 120 children scheduled on the same core) took 54 s and once more than 60 s, with
/// no thread stuck.
pub const LIMIT: Duration = Duration::from_secs(120);

/// Runs `cmd` under `LIMIT` (dmem, mostly) and insists that it succeeded.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = run_limited(cmd, LIMIT);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({:?}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// How run_limited's note on a killed run begins.
const KILLED: &str = "[killed: still running after";

/// Whether run_limited killed this run at its time limit.
pub fn timed_out(out: &Output) -> bool {
    String::from_utf8_lossy(&out.stderr).contains(KILLED)
}

/// Starts `cmd`, retrying while the kernel says its program is busy being written. A program this
/// test process has just copied can still be open for writing in a child that another test thread
/// forked at that moment and that has not yet reached its exec (the descriptor is close-on-exec,
/// but only from the exec on), and executing it then fails with ETXTBSY until that child execs.
pub fn spawn(cmd: &mut Command) -> std::process::Child {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Ok(child) => return child,
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                tries += 1;
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("spawn {cmd:?}: {e}"),
        }
    }
}

/// Runs `cmd` with no stdin, capturing output, and kills its whole process group if it is still
/// running after `limit` — a hang then fails the test instead of stalling the suite. A killed run
/// reports SIGKILL and says so at the end of its stderr.
pub fn run_limited(cmd: &mut Command, limit: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Its own process group, so children it forked are killed with it.
    cmd.process_group(0);
    let mut child = spawn(cmd);
    let drain = |mut r: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let start = Instant::now();
    let mut killed = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > limit {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-s", "KILL", "--", &group]).status();
            let _ = child.kill();
            killed = true;
            break child.wait().expect("wait");
        }
        thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = err.join().expect("stderr reader");
    if killed {
        stderr.extend_from_slice(format!("{KILLED} {limit:?}, hung?]\n").as_bytes());
    }
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr,
    }
}

/// Limits the address space of what `cmd` starts to `bytes` (RLIMIT_AS), so a run that would
/// grow without bound fails an allocation instead of taking the machine's memory.
pub fn memory_limit(cmd: &mut Command, bytes: u64) -> &mut Command {
    with_rlimit(cmd, libc::RLIMIT_AS, bytes)
}

/// `prog args` with no preloading at all (whatever the test's own environment has).
pub fn bare(prog: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
    let mut cmd = Command::new(prog);
    cmd.args(args).env_remove("LD_PRELOAD").env_remove("DMEM_OPTS");
    cmd
}

/// `prog args` preloaded with libdmem (and a backend after it), `DMEM_OPTS=opts`.
pub fn with_dmem(
    prog: impl AsRef<std::ffi::OsStr>,
    args: &[&str],
    opts: &str,
    backend: Option<&Path>,
) -> Command {
    let mut cmd = super::preloaded(prog, opts, backend);
    cmd.args(args);
    cmd
}

pub fn status_text(s: &ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(sig)) => format!("signal {sig}{}", if s.core_dumped() { " (core)" } else { "" }),
        _ => format!("{s:?}"),
    }
}

fn tail(bytes: &[u8], lines: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n    ")
}

/// None if `got` has the same exit status and stdout as `want`; else what differs.
pub fn mismatch(want: &Output, got: &Output) -> Option<String> {
    let mut why = Vec::new();
    if want.status.code() != got.status.code() || want.status.signal() != got.status.signal() {
        why.push(format!(
            "status {} (bare run: {})",
            status_text(&got.status),
            status_text(&want.status)
        ));
    }
    if want.stdout != got.stdout {
        let w = String::from_utf8_lossy(&want.stdout);
        let g = String::from_utf8_lossy(&got.stdout);
        let (wl, gl): (Vec<&str>, Vec<&str>) = (w.lines().collect(), g.lines().collect());
        let i = wl.iter().zip(&gl).take_while(|(a, b)| a == b).count();
        let clip = |s: Option<&&str>| s.map(|s| s.chars().take(200).collect::<String>());
        why.push(format!(
            "stdout differs at line {}: got {:?}, bare run {:?} ({} vs {} lines)",
            i + 1,
            clip(gl.get(i)),
            clip(wl.get(i)),
            gl.len(),
            wl.len()
        ));
    }
    if why.is_empty() {
        return None;
    }
    Some(format!(
        "{}\n    stderr: {}",
        why.join("; "),
        tail(&got.stderr, 6)
    ))
}

/// Panics with every entry of `failures`, one per line, if there are any.
pub fn assert_none(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{what}: {} failure(s):\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

/// Sets the run's limit `resource` (soft and hard) to `value` before it starts, as `ulimit` does.
pub fn with_rlimit(cmd: &mut Command, resource: libc::__rlimit_resource_t, value: u64) -> &mut Command {
    // SAFETY: setrlimit is async-signal-safe and changes only the child's own limits.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            if libc::setrlimit(resource, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// No core files from a run's crashes and aborts: the tests that use it look at statuses.
pub fn no_cores(cmd: &mut Command) -> &mut Command {
    with_rlimit(cmd, libc::RLIMIT_CORE, 0)
}
