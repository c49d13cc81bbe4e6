//! `abort-shutdown` leaves a core whatever the program's own SIGABRT handler does: one that
//! allocates and returns (a crash reporter), blocks, calls `_exit` or jumps back into the
//! program. The library's abort at exit is not the program's: its handler is for the program's
//! own `abort()`, which still runs it, as bare.

mod common;
use common::run;

use common::{dmem, fixture, lib_path, reported_core, scratch_dir, text};
use run::{bare, no_cores, run_limited, status_text, with_dmem, LIMIT};
use std::os::unix::process::ExitStatusExt;

const KINDS: [&str; 4] = ["alloc", "block", "exit", "longjmp"];

#[test]
fn abort_shutdown_leaves_a_core_whatever_the_programs_sigabrt_handler_does() {
    let prog = fixture("abort_handlers");
    for kind in KINDS {
        let dir = scratch_dir(&format!("abort_handlers_{kind}"));
        let mut cmd = dmem();
        cmd.env("DMEM_LIB", lib_path())
            .args(["run", "--opts=abort-shutdown", "--core-dir"])
            .arg(&dir)
            .arg("--")
            .arg(&prog)
            .args([kind, "return"])
            .current_dir(&dir);
        let out = run_limited(&mut cmd, LIMIT);
        let err = text(&out.stderr);
        assert!(!run::timed_out(&out), "{kind}: the abort at exit hung:\n{err}");
        let core = reported_core(&err).unwrap_or_else(|| panic!("{kind}: no core named:\n{err}"));
        assert!(core.is_file(), "{kind}: {} is not a file:\n{err}", core.display());
        // The handler did not run: it would have written its line, or ended with 7 or 9.
        assert!(
            !err.contains("handler: SIGABRT"),
            "{kind}: the program's handler ran:\n{err}"
        );

        let leaks = run_limited(dmem().arg("leaks").arg(&prog).arg(&core), LIMIT);
        let report = text(&leaks.stdout);
        assert!(
            report.contains("4321 bytes in 1 block") || report.contains("4,321 bytes in 1 block"),
            "{kind}: the leak is not in the core's report:\n{report}{}",
            text(&leaks.stderr)
        );
    }
}

#[test]
fn the_programs_own_abort_still_runs_its_handler_as_bare() {
    let prog = fixture("abort_handlers");
    // "block" would wait forever, bare too.
    for kind in ["alloc", "exit", "longjmp"] {
        let want = run_limited(no_cores(&mut bare(&prog, &[kind, "abort"])), LIMIT);
        // Under abort-shutdown the handler's way out (_exit, main's return after the jump) is
        // itself a way out that ends in the library's abort: SIGABRT, after the handler ran.
        for opts in ["", "leak-report", "abort-shutdown"] {
            let got = run_limited(
                no_cores(&mut with_dmem(&prog, &[kind, "abort"], opts, None)),
                LIMIT,
            );
            let ending = (got.status.code(), got.status.signal());
            let expected = if opts == "abort-shutdown" {
                (None, Some(libc::SIGABRT))
            } else {
                (want.status.code(), want.status.signal())
            };
            assert_eq!(
                ending,
                expected,
                "{kind} with {opts:?}: {} (bare: {})\n{}",
                status_text(&got.status),
                status_text(&want.status),
                text(&got.stderr)
            );
            assert_eq!(
                text(&got.stderr).contains("handler: SIGABRT"),
                kind == "alloc",
                "{kind} with {opts:?}: the handler's line\n{}",
                text(&got.stderr)
            );
        }
    }
}
