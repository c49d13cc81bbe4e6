//! A preloaded program sees what it sees bare: its descriptors, signal dispositions, threads,
//! environment and errno with default options; descriptors an option needs held high and let go
//! when the program lets go of its own (a daemon releases its caller's pipe); its own signal
//! handlers (CPython's KeyboardInterrupt); no EINTR from the exit report; one report however many
//! threads call exit at once; abort-shutdown for the process started with it, not its children.
//! Real programs where the issue showed on them: CPython's own tests, sh, make.

mod common;
use common::run;
#[path = "common/elfcore.rs"]
mod corefile;
#[path = "common/valgrind.rs"]
mod valgrind;

use common::{fixture, have_tool, lib_path, scratch_dir, text, which};
use run::{bare, no_cores, run_limited, status_text, with_dmem, LIMIT};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use valgrind::report_summary;

/// The run with at most 512 descriptors, as under `ulimit -n 512`.
fn few_descriptors(cmd: &mut Command) -> &mut Command {
    run::with_rlimit(cmd, libc::RLIMIT_NOFILE, 512)
}

/// The run as it is.
fn as_is(cmd: &mut Command) -> &mut Command {
    cmd
}

fn stdout(out: &Output) -> String {
    text(&out.stdout)
}

/// How a run is set up before it starts.
type Setup = fn(&mut Command) -> &mut Command;

/// `invisible_probe` bare and preloaded with `opts`, each set up by `setup`.
fn probes(opts: &str, setup: Setup) -> (String, String, String) {
    let prog = fixture("invisible_probe");
    let want = run_limited(setup(&mut bare(&prog, &[])), LIMIT);
    assert!(
        want.status.success(),
        "the probe fails bare: {}",
        status_text(&want.status)
    );
    let got = run_limited(setup(&mut with_dmem(&prog, &[], opts, None)), LIMIT);
    assert!(
        got.status.success(),
        "{opts}: {}\n{}",
        status_text(&got.status),
        text(&got.stderr)
    );
    (stdout(&want), stdout(&got), text(&got.stderr))
}

fn descriptors(probe: &str) -> Vec<i32> {
    let line = probe
        .lines()
        .find_map(|l| l.strip_prefix("descriptors:"))
        .expect("a descriptors line");
    line.split_whitespace().map(|n| n.parse().unwrap()).collect()
}

#[test]
fn default_options_leave_descriptors_signals_threads_environment_and_errno_as_bare() {
    for opts in ["", "no-log-allocs"] {
        for (limit, setup) in [("", as_is as Setup), (" under ulimit -n 512", few_descriptors)] {
            let (want, got, err) = probes(opts, setup);
            assert_eq!(
                got, want,
                "DMEM_OPTS={opts:?}{limit}: the program sees another process\n{err}"
            );
        }
    }
}

#[test]
fn the_leak_report_keeps_no_descriptor_while_the_program_runs() {
    for opts in ["leak-report", "leak-report,trace-stderr"] {
        for (limit, setup) in [("", as_is as Setup), (" under ulimit -n 512", few_descriptors)] {
            let (want, got, err) = probes(opts, setup);
            assert_eq!(
                got, want,
                "DMEM_OPTS={opts}{limit}: the program sees another process\n{err}"
            );
        }
    }
}

#[test]
fn a_file_an_option_writes_is_held_on_a_high_descriptor() {
    let dir = scratch_dir("invisible_files");
    let opts = format!(
        "leak-report,report-file={},trace-file={}",
        dir.join("report").display(),
        dir.join("trace").display()
    );
    for (limit, setup, top) in [
        ("", as_is as Setup, 701),
        (" under ulimit -n 512", few_descriptors, 511),
    ] {
        let (want, got, err) = probes(&opts, setup);
        let bare_fds = descriptors(&want);
        let fds = descriptors(&got);
        let extra: Vec<i32> = fds.iter().copied().filter(|fd| !bare_fds.contains(fd)).collect();
        assert_eq!(
            extra.len(),
            2,
            "{limit}: the report and trace files beside {bare_fds:?}, got {fds:?}"
        );
        assert!(
            extra.iter().all(|&fd| (10..=top).contains(&fd)),
            "{limit}: the files took descriptors {extra:?}"
        );
        let rest = |p: &str| {
            p.lines()
                .filter(|l| !l.starts_with("descriptors:"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(
            rest(&got),
            rest(&want),
            "{limit}: the program sees another process\n{err}"
        );
    }
}

/// Runs `sh -c 'out=$(invisible_daemon MODE PIDFILE RELEASE 2>&1)'` preloaded with `opts` (bare
/// for None): the shell must come back while the daemon still runs (the daemon waits two minutes
/// for the release file; the shell is given one), as it does bare.
fn daemon_case(mode: &str, opts: Option<&str>) {
    let dir = scratch_dir(&format!(
        "invisible_daemon_{mode}_{}",
        opts.unwrap_or("bare").replace(',', "_")
    ));
    let (pidfile, release) = (dir.join("pid"), dir.join("release"));
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"out=$("$0" "$1" "$2" "$3" 2>&1); printf '%s\n' "$out""#)
        .arg(fixture("invisible_daemon"))
        .args([mode, pidfile.to_str().unwrap(), release.to_str().unwrap()]);
    match opts {
        Some(opts) => cmd.env("LD_PRELOAD", lib_path()).env("DMEM_OPTS", opts),
        None => cmd.env_remove("LD_PRELOAD").env_remove("DMEM_OPTS"),
    };
    let out = run_limited(&mut cmd, Duration::from_secs(60));
    // The daemon goes whatever happened, so no test leaves it behind.
    let finish = || std::fs::write(&release, "").unwrap();
    let what = format!("{mode} under DMEM_OPTS={opts:?}");
    if run::timed_out(&out) {
        finish();
        panic!(
            "{what}: the shell waited for the daemon, which holds its pipe:\n{}",
            text(&out.stderr)
        );
    }
    assert!(
        stdout(&out).contains("started"),
        "{what}: {}\n{}",
        stdout(&out),
        text(&out.stderr)
    );
    let start = Instant::now();
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        {
            break pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: the daemon never wrote its pid"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let alive = Path::new(&format!("/proc/{pid}")).exists();
    finish();
    assert!(
        alive,
        "{what}: the daemon had ended when the shell came back, so nothing was shown"
    );
}

#[test]
fn a_daemon_started_from_a_command_substitution_releases_its_callers_pipe() {
    for mode in [
        "daemon",
        "setsid",
        "close",
        "atexit",
        "fclose-daemon",
        "fclose-setsid",
    ] {
        for opts in [
            None,
            Some(""),
            Some("leak-report"),
            Some("leak-report,trace-stderr"),
        ] {
            daemon_case(mode, opts);
        }
    }
}

#[test]
fn cpythons_own_pass_fds_tests_pass_preloaded() {
    if !have_tool("python3") {
        return;
    }
    let probe = run_limited(
        Command::new("python3").args(["-c", "import test.test_subprocess"]),
        LIMIT,
    );
    if !probe.status.success() {
        common::missing("CPython's test suite (Debian's libpython3.11-testsuite)");
        return;
    }
    for opts in ["", "leak-report"] {
        let out = run_limited(
            &mut with_dmem(
                "python3",
                &["-m", "test", "test_subprocess", "-m", "test_pass_fds*"],
                opts,
                None,
            ),
            Duration::from_secs(600),
        );
        let all = format!("{}{}", stdout(&out), text(&out.stderr));
        assert!(
            out.status.success() && all.contains("Result: SUCCESS"),
            "DMEM_OPTS={opts:?}: {}\n{all}",
            status_text(&out.status)
        );
    }
}

#[test]
fn a_worker_that_exits_while_main_waits_ends_the_process_as_bare() {
    let prog = fixture("invisible_wait");
    for mode in ["poll", "epoll", "select", "sleep", "pause"] {
        let want = run_limited(&mut bare(&prog, &[mode]), LIMIT);
        assert_eq!(
            want.status.code(),
            Some(3),
            "{mode} bare: {}",
            status_text(&want.status)
        );
        let got = run_limited(&mut with_dmem(&prog, &[mode], "leak-report", None), LIMIT);
        let err = text(&got.stderr);
        assert_eq!(
            got.status.code(),
            Some(3),
            "{mode}: {}\n{}{err}",
            status_text(&got.status),
            stdout(&got)
        );
        assert_eq!(stdout(&got), "", "{mode}: main woke up");
        assert_eq!(err.matches("dmem: leak summary:").count(), 1, "{mode}:\n{err}");
        assert_eq!(
            report_summary(&err)[0],
            (1, 100),
            "{mode}: the leaked block\n{err}"
        );
    }
}

#[test]
fn cpython_keeps_its_sigint_handler_and_keyboardinterrupt_under_leak_report() {
    if !have_tool("python3") {
        return;
    }
    let handler = "import signal; print(signal.getsignal(signal.SIGINT))";
    let catch = "import os, signal, time\n\
                 try:\n    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(30)\n\
                 except KeyboardInterrupt:\n    print('caught')\n";
    for script in [handler, catch] {
        let want = run_limited(&mut bare("python3", &["-c", script]), LIMIT);
        assert!(want.status.success(), "bare: {}", text(&want.stderr));
        let got = run_limited(
            &mut with_dmem("python3", &["-c", script], "leak-report", None),
            LIMIT,
        );
        assert_eq!(
            (got.status.code(), stdout(&got)),
            (want.status.code(), stdout(&want)),
            "{script}:\n{}",
            text(&got.stderr)
        );
    }
}

#[test]
fn signal_dispositions_read_back_as_bare_through_every_call() {
    let prog = fixture("invisible_signals");
    let want = run_limited(&mut bare(&prog, &["api"]), LIMIT);
    for opts in ["", "leak-report"] {
        let got = run_limited(&mut with_dmem(&prog, &["api"], opts, None), LIMIT);
        assert!(got.status.success(), "{opts}: {}", status_text(&got.status));
        assert_eq!(stdout(&got), stdout(&want), "DMEM_OPTS={opts:?}");
    }
    // A signal the program ignores, or handles, is the program's; a handler that puts the
    // default back and raises it again ends the process as bare, and the report comes.
    for mode in ["ignored", "handled", "rethrow"] {
        let want = run_limited(&mut bare(&prog, &[mode]), LIMIT);
        let got = run_limited(&mut with_dmem(&prog, &[mode], "leak-report", None), LIMIT);
        let err = text(&got.stderr);
        assert_eq!(
            (got.status.code(), got.status.signal(), stdout(&got)),
            (want.status.code(), want.status.signal(), stdout(&want)),
            "{mode}:\n{err}"
        );
        assert_eq!(err.matches("dmem: leak summary:").count(), 1, "{mode}:\n{err}");
        assert_eq!(report_summary(&err)[0], (1, 100), "{mode}:\n{err}");
    }
}

#[test]
fn errno_is_the_programs_when_the_trace_cannot_be_written() {
    let prog = fixture("invisible_errno");
    let out = run_limited(&mut with_dmem(&prog, &[], "trace-file=/dev/full", None), LIMIT);
    let err = text(&out.stderr);
    assert!(
        out.status.success(),
        "{}{}",
        stdout(&out),
        err.lines().take(5).collect::<Vec<_>>().join("\n")
    );
    assert_eq!(stdout(&out), "calls that changed errno: 0\n");
    let said: Vec<&str> = err.lines().filter(|l| l.starts_with("dmem:")).collect();
    assert_eq!(
        said,
        ["dmem: cannot write to trace-file '/dev/full' (No space left on device); tracing to stderr"],
        "one line says why"
    );
    assert!(err.contains("malloc("), "the trace goes on on stderr");

    // The trace on stderr, and stderr on a full disk.
    let mut cmd = with_dmem(&prog, &[], "trace-stderr", None);
    cmd.stderr(std::fs::File::options().write(true).open("/dev/full").unwrap());
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", stdout(&out));

    // CPython starts and runs.
    if have_tool("python3") {
        let out = run_limited(
            &mut with_dmem("python3", &["-c", "print('ran')"], "trace-file=/dev/full", None),
            LIMIT,
        );
        assert_eq!((out.status.code(), stdout(&out)), (Some(0), "ran\n".into()));
    }
}

/// `invisible_exits N [main]` twenty times under `opts`: each run ends with `status` (a code, or
/// a signal for abort-shutdown) and `reports` reports.
fn exits_case(args: &[&str], opts: &str, status: (Option<i32>, Option<i32>), reports: usize) {
    let prog = fixture("invisible_exits");
    for round in 0..20 {
        let out = run_limited(no_cores(&mut with_dmem(&prog, args, opts, None)), LIMIT);
        let err = text(&out.stderr);
        assert_eq!(
            (out.status.code(), out.status.signal()),
            status,
            "{args:?} under {opts}, round {round}: {}\n{err}",
            status_text(&out.status)
        );
        assert_eq!(
            err.matches("dmem: leak summary:").count(),
            reports,
            "{args:?}, {opts}, round {round}:\n{err}"
        );
        if reports == 1 {
            assert_eq!(
                report_summary(&err)[0],
                (1, 100),
                "{args:?}, round {round}:\n{err}"
            );
        }
    }
}

#[test]
fn exit_from_several_threads_at_once_reports_once_every_time() {
    for n in ["2", "8"] {
        exits_case(&[n], "leak-report", (Some(4), None), 1);
        exits_case(&[n], "abort-shutdown", (None, Some(libc::SIGABRT)), 0);
        exits_case(&[n], "leak-report,abort-shutdown", (None, Some(libc::SIGABRT)), 1);
    }
    // main returns as a worker calls exit: either status, one report.
    let prog = fixture("invisible_exits");
    for round in 0..20 {
        let out = run_limited(&mut with_dmem(&prog, &["1", "main"], "leak-report", None), LIMIT);
        let err = text(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(3 | 4)),
            "round {round}: {}\n{err}",
            status_text(&out.status)
        );
        assert_eq!(
            err.matches("dmem: leak summary:").count(),
            1,
            "round {round}:\n{err}"
        );
    }
}

#[test]
fn abort_shutdown_aborts_the_process_started_with_it_not_its_children() {
    let script = "/bin/true; echo $?";
    let out = run_limited(
        no_cores(&mut with_dmem("sh", &["-c", script], "abort-shutdown", None)),
        LIMIT,
    );
    assert_eq!(stdout(&out), "0\n", "the child's status as sh saw it");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "sh itself aborts: {}",
        status_text(&out.status)
    );
    // exec keeps it the same process: still the one to abort.
    let out = run_limited(
        no_cores(&mut with_dmem(
            "sh",
            &["-c", "exec /bin/true"],
            "abort-shutdown",
            None,
        )),
        LIMIT,
    );
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "after exec: {}",
        status_text(&out.status)
    );
    // Asked for, every process aborts.
    let out = run_limited(
        no_cores(&mut with_dmem("sh", &["-c", script], "abort-shutdown=all", None)),
        LIMIT,
    );
    assert_eq!(stdout(&out), "134\n", "abort-shutdown=all");
}

#[test]
fn make_runs_its_children_under_dmem_run_with_abort_shutdown() {
    if !have_tool("make") {
        return;
    }
    let dir = scratch_dir("invisible_make");
    std::fs::write(
        dir.join("Makefile"),
        "all:\n\t@sh -c 'echo child ran'\n\t@/bin/true\n\t@echo made\n",
    )
    .unwrap();
    let reports = dir.join("reports");
    std::fs::create_dir(&reports).unwrap();
    let opts = format!(
        "abort-shutdown,leak-report,report-file={}/r.%p",
        reports.display()
    );
    let mut cmd = common::dmem();
    cmd.env("DMEM_LIB", lib_path())
        .args(["run", "-o", &opts, "--core-dir"])
        .arg(&dir)
        .arg("--")
        .arg(which("make").unwrap())
        .current_dir(&dir);
    let out = common::output(&mut cmd);
    let (got, err) = (stdout(&out), text(&out.stderr));
    assert_eq!(got, "child ran\nmade\n", "{err}");
    assert!(
        !err.contains("***") && !err.contains("Error"),
        "make saw a child fail:\n{err}"
    );
    assert_eq!(out.status.code(), Some(134), "make itself aborts: {err}");
    let core = common::reported_core(&err).unwrap_or_else(|| panic!("no core named:\n{err}"));
    let cores: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("core"))
        .collect();
    assert_eq!(cores.len(), 1, "one core, make's: {cores:?}");
    let elfcore = corefile::Core::open(&core);
    let program = elfcore.mappings.first().map(|m| m.path.clone()).unwrap();
    assert!(program.ends_with("make"), "the core is of {}", program.display());
    // Every process reported: make, the shell and /bin/true.
    let files = std::fs::read_dir(&reports).unwrap().count();
    assert!(files >= 3, "{files} report files in {}", reports.display());
}

/// The objects mapped in a program's memory, by path, from what it reads in /proc/self/maps.
fn mapped_objects(out: &Output) -> std::collections::BTreeSet<String> {
    stdout(out)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.starts_with('/'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_preloaded_link_map_is_the_bare_one_plus_libdmem() {
    // cat reads its own maps: what the loader mapped for it, with no dlopen of its own.
    for opts in ["", "leak-report", "unwinder=backtrace"] {
        let want = run_limited(&mut bare("cat", &["/proc/self/maps"]), LIMIT);
        let got = run_limited(&mut with_dmem("cat", &["/proc/self/maps"], opts, None), LIMIT);
        assert!(got.status.success(), "{opts:?}: {}", status_text(&got.status));
        let (want, got) = (mapped_objects(&want), mapped_objects(&got));
        let extra: Vec<&String> = got.difference(&want).collect();
        let lib = std::fs::canonicalize(lib_path()).unwrap();
        assert!(
            extra.iter().all(|p| Path::new(p) == lib),
            "{opts:?}: objects mapped only when preloaded, besides libdmem.so: {extra:?}"
        );
        assert!(
            want.is_subset(&got),
            "{opts:?}: the bare run maps what the preloaded one does not: {:?}",
            want.difference(&got).collect::<Vec<_>>()
        );
    }
}
