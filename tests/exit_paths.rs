//! The exit report reaches the user however the program ends: programs that close standard error
//! at exit, every way out (`exit`, return from `main`, `_exit`, `_Exit`, `quick_exit`, the last
//! thread's `pthread_exit`, fatal signals), daemons that close every descriptor, forked and exec'd
//! children with `report-file` (`%p` or shared). Counts are checked against valgrind's on the same
//! command, and exit statuses against the bare run's.

mod common;
use common::run;
#[path = "common/valgrind.rs"]
mod valgrind;

use common::{fixture, have_tool, lib_path, scratch_dir, which};
use run::{bare, no_cores, run_limited, status_text, with_dmem, LIMIT};
use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use valgrind::{report_summary, Summary};

/// What `exit_ways` builds, in blocks per class (definitely, indirectly, possibly lost, still
/// reachable), when nothing of the list is left in a register (it is on `return`).
const BUILT: [u64; 4] = [1, 2, 0, 1];

/// The signal that ended a run, if one did.
fn signal_of(s: &ExitStatus) -> Option<i32> {
    s.signal()
}

fn same_ending(want: &ExitStatus, got: &ExitStatus) -> bool {
    want.code() == got.code() && signal_of(want) == signal_of(got)
}

fn blocks(s: &Summary) -> [u64; 4] {
    s.map(|c| c.0)
}

/// `exit_ways WAY` bare, under valgrind and preloaded with `leak-report` into a file: the same
/// ending as the bare run, one report, the same classes as valgrind's. Returns the report.
fn check_way(way: &str) -> String {
    let prog = fixture("exit_ways");
    let dir = scratch_dir(&format!("exit_way_{way}"));
    let want = run_limited(no_cores(bare(&prog, &[way]).current_dir(&dir)), LIMIT);
    let file = dir.join("report");
    let opts = format!("leak-report,leak-show=all,report-file={}", file.display());
    let got = run_limited(
        no_cores(with_dmem(&prog, &[way], &opts, None).current_dir(&dir)),
        LIMIT,
    );
    assert!(
        same_ending(&want.status, &got.status),
        "{way}: {} under libdmem, {} bare:\n{}",
        status_text(&got.status),
        status_text(&want.status),
        common::text(&got.stderr)
    );
    let report = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{way}: no report file: {e}"));
    assert_eq!(
        report.matches("dmem: leak summary:").count(),
        1,
        "{way}: one report expected:\n{report}"
    );
    let vg = valgrind::summary(&prog, &[way]);
    let mut got = report_summary(&report);
    if way == "pthread_exit" {
        // The worker's dtv, possibly lost in both, is 16 bytes larger under libdmem, whose own
        // thread-local storage adds a module to it.
        assert_eq!(got[2].1, vg[2].1 + 16, "{way}: the dtv's size:\n{report}");
        got[2].1 = vg[2].1;
    }
    assert_eq!(got, vg, "{way}: the report differs from valgrind:\n{report}");
    report
}

#[test]
fn every_way_out_reports_as_valgrind_does() {
    if !have_tool("valgrind") {
        return;
    }
    // A register or a stack slot may still hold part of the list on some ways out (valgrind
    // then agrees on more reachable blocks), so valgrind's classes are the reference, and the
    // four blocks in all.
    for way in [
        "return",
        "exit",
        "_exit",
        "_Exit",
        "quick_exit",
        "pthread_exit",
        "raise-term",
        "segv",
    ] {
        let report = check_way(way);
        // pthread_exit: the worker's dtv too.
        let built = if way == "pthread_exit" { 5 } else { 4 };
        assert_eq!(
            blocks(&report_summary(&report)).iter().sum::<u64>(),
            built,
            "{way}:\n{report}"
        );
        assert!(!report.contains("main_arena was not found"), "{way}:\n{report}");
    }
}

#[test]
fn abort_shutdown_aborts_on_every_way_out() {
    let prog = fixture("exit_ways");
    let dir = scratch_dir("exit_abort");
    for way in ["return", "exit", "_exit", "_Exit", "quick_exit", "pthread_exit"] {
        let got = run_limited(
            no_cores(with_dmem(&prog, &[way], "abort-shutdown", None).current_dir(&dir)),
            LIMIT,
        );
        assert_eq!(
            signal_of(&got.status),
            Some(libc::SIGABRT),
            "{way}: {} with abort-shutdown",
            status_text(&got.status)
        );
    }
}

/// Children that share their parent's memory (vfork, posix_spawn) end with `_exit`: they must
/// not report, nor disturb the parent, which reports once.
#[test]
fn children_sharing_memory_do_not_report() {
    let prog = fixture("exit_ways");
    for way in ["vfork", "spawn"] {
        let got = run_limited(
            &mut with_dmem(&prog, &[way], "leak-report,leak-show=all", None),
            LIMIT,
        );
        let err = common::text(&got.stderr);
        assert_eq!(
            got.status.code(),
            Some(2),
            "{way}: {}\n{err}",
            status_text(&got.status)
        );
        assert_eq!(err.matches("dmem: leak summary:").count(), 1, "{way}:\n{err}");
        assert_eq!(blocks(&report_summary(&err)), BUILT, "{way}:\n{err}");
    }
}

/// Starts `exit_ways WAY` preloaded with `opts` and waits for its "ready" line.
fn start_ready(way: &str, opts: &str) -> Child {
    let mut cmd = Command::new(fixture("exit_ways"));
    cmd.arg(way)
        .env("LD_PRELOAD", lib_path())
        .env("DMEM_OPTS", opts)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    no_cores(&mut cmd);
    let mut child = cmd.spawn().expect("spawn exit_ways");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .expect("read ready");
    assert_eq!(line, "ready\n", "{way}: no ready line");
    child
}

/// Waits for `child` at most `LIMIT`, killing it on a hang; returns its status and stderr.
fn finish(mut child: Child) -> (ExitStatus, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("still running {LIMIT:?} after the signal: hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err);
    (status, err)
}

fn kill(child: &Child, sig: i32) {
    // SAFETY: kill with a child's pid and a signal number.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

#[test]
fn a_server_stopped_by_sigterm_or_sigint_reports_and_dies_of_it() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
        let child = start_ready("wait", "leak-report,leak-show=all");
        kill(&child, sig);
        let (status, err) = finish(child);
        assert_eq!(signal_of(&status), Some(sig), "{}:\n{err}", status_text(&status));
        assert_eq!(
            blocks(&report_summary(&err)).iter().sum::<u64>(),
            4,
            "signal {sig}:\n{err}"
        );
        assert!(
            err.contains("definitely lost, e.g."),
            "signal {sig}: no record of the lost list:\n{err}"
        );

        // Turned off: no report, the same death.
        let child = start_ready("wait", "leak-report,no-signal-report");
        kill(&child, sig);
        let (status, err) = finish(child);
        assert_eq!(signal_of(&status), Some(sig), "{}:\n{err}", status_text(&status));
        assert!(
            !err.contains("leak summary"),
            "no-signal-report still reported:\n{err}"
        );
    }
}

/// The program's own handler keeps its behaviour (it calls `_exit(7)`, which then reports).
#[test]
fn a_programs_own_handler_takes_precedence() {
    let child = start_ready("own-handler", "leak-report");
    kill(&child, libc::SIGTERM);
    let (status, err) = finish(child);
    assert_eq!(status.code(), Some(7), "{}:\n{err}", status_text(&status));
    assert_eq!(err.matches("dmem: leak summary:").count(), 1, "{err}");
}

/// SIGTERM lands while threads are inside malloc and free, maybe inside a list lock: the process
/// still reports and dies of SIGTERM, and never hangs.
#[test]
fn a_signal_amid_a_malloc_storm_neither_hangs_nor_changes_the_status() {
    for round in 0..10u64 {
        let child = start_ready("storm", "leak-report");
        std::thread::sleep(Duration::from_millis(5 + 17 * round));
        kill(&child, libc::SIGTERM);
        let (status, err) = finish(child);
        assert_eq!(
            signal_of(&status),
            Some(libc::SIGTERM),
            "round {round}: {}:\n{err}",
            status_text(&status)
        );
        assert_eq!(
            err.matches("dmem: leak summary:").count(),
            1,
            "round {round}:\n{err}"
        );
    }
}

/// ls, grep and xz close standard error at exit (gnulib's close_stdout); the report still comes
/// out, on standard error and in a file, with valgrind's counts.
#[test]
fn programs_that_close_stderr_still_get_their_report() {
    if !have_tool("valgrind") {
        return;
    }
    let dir = scratch_dir("exit_close_stderr");
    let input = dir.join("input.txt");
    std::fs::write(&input, "a line with dmem in it\nanother line\n").unwrap();
    let input = input.to_str().unwrap();
    let cases: [(&str, Vec<&str>); 3] = [
        ("ls", vec!["-l", "/"]),
        ("grep", vec!["-n", "dmem", input]),
        ("xz", vec!["-c", input]),
    ];
    for (tool, args) in cases {
        let Some(prog) = which(tool) else {
            common::missing(tool);
            continue;
        };
        let want = valgrind::summary(&prog, &args);
        let out = run_limited(&mut with_dmem(&prog, &args, "leak-report", None), LIMIT);
        assert!(out.status.success(), "{tool}: {}", status_text(&out.status));
        let err = common::text(&out.stderr);
        assert_eq!(report_summary(&err), want, "{tool} on stderr:\n{err}");

        let file = dir.join(format!("{tool}.report"));
        let opts = format!("leak-report,report-file={}", file.display());
        let out = run_limited(&mut with_dmem(&prog, &args, &opts, None), LIMIT);
        assert!(out.status.success(), "{tool}: {}", status_text(&out.status));
        let report = std::fs::read_to_string(&file).unwrap();
        assert_eq!(report_summary(&report), want, "{tool} in a file:\n{report}");
    }
}

/// A daemon closes every descriptor and reuses the numbers: the report never goes into the
/// program's own file; with report-file it reaches that file, reopened.
#[test]
fn a_daemon_that_closes_every_descriptor_never_gets_our_output() {
    let prog = fixture("exit_ways");
    let dir = scratch_dir("exit_closefds");
    let own = dir.join("own.txt");
    let args = ["closefds", own.to_str().unwrap()];
    let out = run_limited(
        &mut with_dmem(&prog, &args, "leak-report,trace-stderr", None),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", status_text(&out.status));
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "the program's own line\n");

    let report = dir.join("report");
    let opts = format!("leak-report,report-file={}", report.display());
    let out = run_limited(&mut with_dmem(&prog, &args, &opts, None), LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", status_text(&out.status));
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "the program's own line\n");
    let text = std::fs::read_to_string(&report).unwrap();
    assert_eq!(blocks(&report_summary(&text)), BUILT, "{text}");
}

/// Standard error closed before the program started: fd 2 later becomes the program's file, and
/// nothing of ours goes there; the report file says once that stderr's messages were dropped.
#[test]
fn stderr_closed_at_start_is_never_written_later() {
    let prog = fixture("exit_ways");
    let dir = scratch_dir("exit_stderr_closed");
    let own = dir.join("own.txt");
    let report = dir.join("report");
    let opts = format!("leak-report,trace-stderr,report-file={}", report.display());
    let mut cmd = with_dmem(&prog, &["newfile", own.to_str().unwrap()], &opts, None);
    // SAFETY: close is async-signal-safe; descriptor 2 of the child only.
    unsafe {
        cmd.pre_exec(|| {
            libc::close(2);
            Ok(())
        });
    }
    let out = common::output(&mut cmd);
    assert_eq!(out.status.code(), Some(2), "{}", status_text(&out.status));
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "the program's own line\n");
    let text = std::fs::read_to_string(&report).unwrap();
    assert_eq!(
        text.matches("standard error was closed when the program started")
            .count(),
        1,
        "{text}"
    );
    assert_eq!(blocks(&report_summary(&text)), BUILT, "{text}");
}

/// The definitely lost bytes of every report in `text`, in order.
fn lost_bytes(text: &str) -> Vec<u64> {
    text.lines()
        .filter(|l| l.starts_with("dmem: leak summary:"))
        .map(|l| report_summary(l)[0].1)
        .collect()
}

/// `fork_report`'s tree: the parent (100 bytes lost), a forked child that exits (300), one that
/// calls _exit (400), one exec'd (500).
#[test]
fn report_files_per_process_and_shared_by_a_process_tree() {
    let prog = fixture("fork_report");
    let dir = scratch_dir("exit_report_files");
    let per = dir.join("per");
    std::fs::create_dir(&per).unwrap();
    let opts = format!("leak-report,report-file={}/r.%p", per.display());
    let out = run_limited(&mut with_dmem(&prog, &[], &opts, None), LIMIT);
    assert!(out.status.success(), "{}", status_text(&out.status));
    let mut got: Vec<u64> = std::fs::read_dir(&per)
        .unwrap()
        .map(|e| {
            let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
            let lost = lost_bytes(&text);
            assert_eq!(lost.len(), 1, "one report per file:\n{text}");
            lost[0]
        })
        .collect();
    got.sort();
    assert_eq!(got, [100, 300, 400, 500]);

    // One file for the tree: the first process truncates it, its descendants append, twice over.
    let shared = dir.join("shared");
    std::fs::write(&shared, "stale content of an earlier run\n").unwrap();
    let opts = format!("leak-report,report-file={}", shared.display());
    for _ in 0..2 {
        let out = run_limited(&mut with_dmem(&prog, &[], &opts, None), LIMIT);
        assert!(out.status.success(), "{}", status_text(&out.status));
        let text = std::fs::read_to_string(&shared).unwrap();
        let mut lost = lost_bytes(&text);
        lost.sort();
        assert_eq!(lost, [100, 300, 400, 500], "{text}");
        assert!(!text.contains("stale"), "{text}");
    }
}

/// A report file that cannot be written, or a FIFO nobody reads, loses nothing: the report goes
/// to stderr, and one line there says why, naming the file.
#[test]
fn a_report_file_that_fails_sends_the_report_to_stderr_saying_why_once() {
    let dir = scratch_dir("exit_report_fifo");
    let fifo = dir.join("fifo");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let cases = [
        (
            "/dev/full".to_string(),
            "dmem: cannot write to report-file '/dev/full' (No space left on device); writing the leak report to stderr".to_string(),
        ),
        (
            fifo.display().to_string(),
            format!("dmem: cannot open report-file '{}' (a FIFO that nothing reads); writing the leak report to stderr", fifo.display()),
        ),
    ];
    for (file, why) in cases {
        let opts = format!("leak-report,report-file={file}");
        let out = run_limited(
            &mut with_dmem(fixture("exit_ways"), &["return"], &opts, None),
            LIMIT,
        );
        let err = common::text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{file}: {}\n{err}",
            status_text(&out.status)
        );
        let said: Vec<&str> = err.lines().filter(|l| l.starts_with("dmem: cannot")).collect();
        assert_eq!(said, [why.as_str()], "{file}:\n{err}");
        assert_eq!(err.matches("dmem: leak summary:").count(), 1, "{file}:\n{err}");
        assert_eq!(blocks(&report_summary(&err)), BUILT, "{file}:\n{err}");
    }
}

/// A bad `%` sequence in a path is refused at start-up with the one warning line.
#[test]
fn a_bad_percent_sequence_is_refused() {
    let out = run_limited(
        &mut with_dmem(
            Path::new("/bin/true"),
            &[],
            "leak-report,report-file=/tmp/r.%q",
            None,
        ),
        LIMIT,
    );
    assert!(out.status.success());
    let err = common::text(&out.stderr);
    assert!(
        err.contains("ignoring unknown or malformed option 'report-file=/tmp/r.%q'"),
        "{err}"
    );
}

/// A heap overflow that broke libdmem's own list (a next pointer into unmapped memory, a list
/// rewired into a circle, a header's magic overwritten) ends the walk of that list: the report
/// still comes, says where the list broke, and counts the blocks walked before the break; the
/// program ends as it would have, by its `return` or by the crash that followed the overflow.
#[test]
fn a_list_broken_by_an_overflow_is_reported_where_it_broke() {
    let prog = fixture("gdb_corrupt");
    for crash in [false, true] {
        for mode in ["unmapped", "cycle", "magic"] {
            let dir = scratch_dir(&format!("exit_corrupt_{mode}_{crash}"));
            let args = if crash {
                vec![mode, "-", "crash"]
            } else {
                vec![mode]
            };
            let out = run_limited(
                no_cores(with_dmem(&prog, &args, "leak-report,leak-show=all", None).current_dir(&dir)),
                LIMIT,
            );
            let err = common::text(&out.stderr);
            let stdout = common::text(&out.stdout);
            let want_signal = if crash { Some(libc::SIGSEGV) } else { None };
            assert_eq!(
                signal_of(&out.status),
                want_signal,
                "{mode}: {}\n{err}",
                status_text(&out.status)
            );
            if !crash {
                assert_eq!(out.status.code(), Some(0), "{mode}:\n{err}");
            }
            let hdr = |k: usize| -> String {
                let line = stdout
                    .lines()
                    .find(|l| l.starts_with(&format!("hdr {k} ")))
                    .unwrap_or_else(|| panic!("no hdr {k}:\n{stdout}"));
                line.rsplit(' ').next().unwrap().to_string()
            };
            // The list runs b4, b3, b2, b1, b0 (newest first).
            let (from, to, why, walked) = match mode {
                "unmapped" => (hdr(2), "0x10000".to_string(), "which is not readable", 3),
                "cycle" => (hdr(1), hdr(3), "whose prev does not lead back", 4),
                _ => (hdr(4), hdr(3), "whose magic is 0x41414141", 1),
            };
            let broke = err
                .lines()
                .find(|l| l.starts_with("dmem: the heap was overwritten: "))
                .unwrap_or_else(|| panic!("{mode}: no line on the broken list:\n{err}"));
            assert!(
                broke.contains(&format!("header {from} on list "))
                    && broke.contains(&format!(
                        " leads to {to}, {why}; the blocks past it are not in this report"
                    )),
                "{mode}: {broke}"
            );
            // Groups of the fixture's 300-byte blocks: "N bytes in K block(s) ..." with N = 300 K.
            let ours: u64 = err
                .lines()
                .filter_map(|l| {
                    let w: Vec<&str> = l.split(' ').collect();
                    let (n, k) = (w.first()?.parse::<u64>().ok()?, w.get(3)?.parse::<u64>().ok()?);
                    (w.get(1) == Some(&"bytes") && n == 300 * k).then_some(k)
                })
                .sum();
            assert_eq!(
                ours, walked,
                "{mode}, crash {crash}: blocks before the break:\n{err}"
            );
        }
    }
}
