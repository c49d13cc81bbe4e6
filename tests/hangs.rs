//! One fixture for each way an allocator that walks stacks can deadlock inside the program it is
//! preloaded into, and a stress fixture of stacks the walker cannot know. Each runs bare and
//! preloaded (over glibc's allocator with each unwinder, with the exit report and with the
//! per-stack counts, and over every installed backend), under a time limit so that a deadlock fails the test instead of stalling
//! it; exit status and output must equal the bare run's. The stress fixture's core must also
//! hold every block it kept, each with a stack through the function that allocated it.

mod common;
#[path = "common/gdb.rs"]
mod gdbrun;
use common::run;

use common::{fixture, lib_path, make_core, scratch_dir};
use run::{assert_none, bare, mismatch, run_limited, status_text, timed_out, with_dmem, LIMIT};
use std::path::PathBuf;

/// The library's options each fixture runs with over glibc's allocator: the defaults (recording
/// with the cached CFI unwinder), the platform unwinder, the exit report, whose stop of the
/// world looks at every thread's stack, and the per-stack counts, whose tables are mapped from
/// inside malloc.
const GLIBC_OPTS: &[&str] = &[
    "",
    "unwinder=backtrace",
    "leak-report,report-file=/dev/null",
    "count-allocs",
];

/// Runs `name args` bare, then preloaded in every configuration; returns what differed. After a
/// configuration times out the rest are skipped: one deadlock is enough to fail, and each would
/// cost the full time limit.
fn compare(name: &str, args: &[&str]) -> Vec<String> {
    let prog = fixture(name);
    let want = run_limited(&mut bare(&prog, args), LIMIT);
    let what = [name].iter().chain(args).copied().collect::<Vec<_>>().join(" ");
    if !want.status.success() {
        return vec![format!(
            "{what}: fails without libdmem ({}):\n{}{}",
            status_text(&want.status),
            common::text(&want.stdout),
            common::text(&want.stderr)
        )];
    }
    let mut configs: Vec<(String, &str, Option<PathBuf>)> = GLIBC_OPTS
        .iter()
        .map(|o| ("glibc".to_owned(), *o, None))
        .collect();
    configs.extend(
        common::backends()
            .into_iter()
            .map(|(n, lib)| (n.to_owned(), "", Some(lib))),
    );
    let mut failures = Vec::new();
    for (i, (backend, opts, lib)) in configs.iter().enumerate() {
        let got = run_limited(&mut with_dmem(&prog, args, opts, lib.as_deref()), LIMIT);
        if let Some(why) = mismatch(&want, &got) {
            failures.push(format!("{what} (over {backend}, DMEM_OPTS={opts:?}): {why}"));
        }
        if timed_out(&got) && i + 1 < configs.len() {
            failures.push(format!(
                "{what}: {} more configuration(s) not run after the time-out",
                configs.len() - i - 1
            ));
            break;
        }
    }
    failures
}

fn check(cases: &[(&str, &[&str])]) {
    let failures: Vec<String> = cases.iter().flat_map(|(n, a)| compare(n, a)).collect();
    assert_none("deadlock fixtures", &failures);
}

#[test]
fn getattr_as_a_threads_first_act() {
    // glibc holds the thread's lock while it reallocs in pthread_getattr_np; for the main thread
    // it also reads /proc/self/maps with getline under that lock.
    check(&[
        ("hang_getattr", &["main"]),
        ("hang_getattr", &["threads"]),
        ("hang_getattr", &["cross"]),
    ]);
}

#[test]
fn malloc_in_a_dl_iterate_phdr_callback() {
    check(&[("hang_dlcallback", &["main"]), ("hang_dlcallback", &["threads"])]);
}

#[test]
fn malloc_in_a_dlopened_constructor() {
    check(&[("hang_dlopen_ctor", &[])]);
}

#[test]
fn threads_started_and_joined_in_constructors() {
    check(&[("hang_ctor_thread", &[])]);
}

#[test]
fn fork_while_another_thread_is_in_getattr() {
    check(&[("hang_fork_getattr", &[])]);
}

#[test]
fn unknown_stacks_run_as_bare() {
    check(&[("stack_contexts", &[])]);
}

/// The `kept SIZE COUNT FUNCTION` lines of stack_contexts: what it kept, counted as it ran.
fn kept_kinds(stdout: &str) -> Vec<(u64, u64, String)> {
    stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.strip_prefix("kept ")?.split_whitespace().collect();
            Some((f[0].parse().ok()?, f[1].parse().ok()?, f[2].to_owned()))
        })
        .collect()
}

#[test]
fn unknown_stacks_allocations_are_recorded() {
    // The stress fixture's core is read with gdb.
    if !common::have_tool("gdb") {
        return;
    }
    let prog = fixture("stack_contexts");
    let want = run_limited(&mut bare(&prog, &[]), LIMIT);
    assert!(want.status.success(), "stack_contexts fails bare");
    let kinds = kept_kinds(&common::text(&want.stdout));
    assert_eq!(
        kinds.len(),
        7,
        "want 7 kinds of kept blocks:\n{}",
        common::text(&want.stdout)
    );

    // With each unwinder: the default one falls back to the platform's off the thread's stack.
    for (tag, opts) in [
        ("fast", "abort-shutdown"),
        ("backtrace", "abort-shutdown,unwinder=backtrace"),
    ] {
        let dir = scratch_dir(&format!("hangs_stack_contexts_{tag}"));
        let core = make_core(&dir, &prog, &[], opts, &lib_path());
        let s = gdbrun::on_core(&dir, &prog, &core, &["dmem stacks --json --min-size 1000"]);
        s.assert_no_traceback();
        check_kept(&kinds, s.out(0), opts);
    }
}

/// Every kind of kept block is in the core's listing as often as it was made, each with a
/// stack naming the function that allocated it.
fn check_kept(kinds: &[(u64, u64, String)], json: &str, opts: &str) {
    for (size, count, function) in kinds {
        assert!(*count > 0, "stack_contexts kept no blocks of {size} bytes");
        // Per block of this size: whether its recorded stack names the function that made it.
        let found = gdbrun::json_query(
            json,
            &format!(
                "' '.join(str(any(f['function'] == '{function}' for f in b['stack'])) \
                 for b in d['blocks'] if b['size'] == {size})"
            ),
        );
        let with: Vec<&str> = found.split_whitespace().collect();
        assert_eq!(
            with.len() as u64,
            *count,
            "{opts}: {count} blocks of {size} bytes were kept, the core lists {}:\n{json}",
            with.len()
        );
        assert!(
            with.iter().all(|w| *w == "True"),
            "{opts}: blocks of {size} bytes without {function} in their stacks ({found}):\n{json}"
        );
    }
}
