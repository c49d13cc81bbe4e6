//! Lists owned by their threads (`src/lists.rs`): blocks freed by another thread are handed to
//! the list's owner, so the cases where the owner cannot take them back are the ones to prove:
//! it exited (100,000 times over), it sleeps, it still runs when the process exits. Each run is
//! checked by the exit report's summary and, from a core, by the launcher's strict walk.

mod common;

use common::{dmem, fixture, lib_path, make_core, output, preloaded, scratch_dir, text};
use std::process::Output;

fn run(mode: &str, opts: &str) -> Output {
    let out = output(preloaded(fixture("owner_handover"), opts, None).arg(mode));
    assert!(
        out.status.success(),
        "owner_handover {mode} with DMEM_OPTS={opts:?}: {:?}\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// The exit report's summary names exactly the one block the mode leaks as definitely lost.
fn leaked_only(out: &Output, bytes: u32) {
    let err = text(&out.stderr);
    let summary = err
        .lines()
        .find(|l| l.starts_with("dmem: leak summary:"))
        .unwrap_or_else(|| panic!("no leak summary:\n{err}"));
    assert!(
        summary.contains(&format!("definitely lost: {bytes} bytes in 1 block;")),
        "{summary}"
    );
}

#[test]
fn a_hundred_thousand_threads_exit_while_others_free_their_blocks() {
    let out = run("churn", "leak-report");
    assert!(
        text(&out.stdout).contains("churn: 100000 threads"),
        "{}",
        text(&out.stdout)
    );
    leaked_only(&out, 7001);
}

#[test]
fn blocks_of_a_thread_that_exited_are_freed_by_others_and_its_list_taken_again() {
    let out = run("orphan", "leak-report");
    assert!(
        text(&out.stdout).contains("orphan: 5000 blocks freed, 0 left"),
        "{}",
        text(&out.stdout)
    );
    leaked_only(&out, 7002);
}

#[test]
fn an_idle_owner_does_not_keep_memory_freed_by_another_thread() {
    // The check can pass: glibc alone gives the memory back at once.
    let bare = output(std::process::Command::new(fixture("owner_handover")).arg("idle"));
    let said = |o: &Output| text(&o.stdout);
    assert!(
        said(&bare).contains("memory returned while the owner slept"),
        "{}",
        said(&bare)
    );
    let out = run("idle", "leak-report");
    assert!(
        said(&out).contains("memory returned while the owner slept"),
        "{}",
        said(&out)
    );
    leaked_only(&out, 7003);
}

#[test]
fn the_exit_report_with_threads_still_running() {
    let out = run("running", "leak-report");
    let err = text(&out.stderr);
    assert!(err.contains("7004 bytes in 1 block is definitely lost"), "{err}");
}

/// Cores of the cases above, read by the launcher's strict walk: every list whole, every
/// handed block passed over and counted as freed, the counters equal to what was walked.
#[test]
fn cores_with_handed_and_orphaned_blocks_verify_clean() {
    for (mode, bytes) in [("orphan", 7002), ("running", 7004)] {
        let dir = scratch_dir(&format!("owned_lists_{mode}"));
        let prog = fixture("owner_handover");
        let core = make_core(&dir, &prog, &[mode], "abort-shutdown", &lib_path());
        let verify = output(dmem().arg("verify").arg(&prog).arg(&core));
        let said = text(&verify.stdout);
        assert!(
            verify.status.success() && said.contains("no problems found"),
            "{mode}: {:?}\n{said}{}",
            verify.status,
            text(&verify.stderr)
        );
        let leaks = output(
            dmem()
                .args(["leaks", "--json", "--limit", "0"])
                .arg(&prog)
                .arg(&core),
        );
        let v: serde_json::Value = serde_json::from_slice(&leaks.stdout)
            .unwrap_or_else(|e| panic!("{mode}: {e}: {}", text(&leaks.stderr)));
        let lost = &v["definitely_lost"];
        assert!(
            lost["blocks"].as_u64() >= Some(1) && lost["bytes"].as_u64() >= Some(bytes),
            "{mode}: {lost}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
