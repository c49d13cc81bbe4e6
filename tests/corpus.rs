//! Leak classes on real programs from Debian's packages, with valgrind's memcheck run by the test
//! as the oracle: the block count of every class must be equal at exit (the exit report). These
//! programs keep
//! malloc'd blocks reachable only from memory of their own (CPython's pymalloc arenas), keep
//! interior pointers that memcheck's heuristics accept, or close stderr at exit.

mod common;
#[path = "common/run.rs"]
mod run;
#[path = "common/valgrind.rs"]
mod valgrind;

use common::{have_tool, scratch_dir, which};
use run::{run_limited, with_dmem, LIMIT};
use std::path::PathBuf;
use valgrind::{report_summary, Summary};

/// The corpus: a program on PATH (or an absolute path) and its arguments.
const CORPUS: &[(&str, &[&str])] = &[
    // Debian's CPython, pymalloc on: its objects live in arenas it maps itself.
    (
        "/usr/bin/python3",
        &["-c", "import json; print(json.dumps({'a': 1}))"],
    ),
    (
        "sqlite3",
        &[
            ":memory:",
            "create table t(a, b); insert into t values (1, 'x'); select * from t;",
        ],
    ),
    ("git", &["--version"]),
    ("jq", &["-n", "[1, 2] | add"]),
    ("openssl", &["version"]),
    // gnulib programs: they close stdout and stderr at exit.
    ("ls", &["/"]),
    ("grep", &["-c", "root", "/etc/passwd"]),
    ("xz", &["--version"]),
    ("sort", &["/etc/passwd"]),
    ("cat", &["/etc/hostname"]),
];

fn block_counts(s: &Summary) -> [u64; 4] {
    s.map(|(blocks, _)| blocks)
}

fn program(name: &str) -> Option<PathBuf> {
    if name.starts_with('/') {
        Some(PathBuf::from(name)).filter(|p| p.exists())
    } else {
        which(name)
    }
}

#[test]
fn real_programs_have_valgrinds_classes_at_exit() {
    if !have_tool("valgrind") {
        return;
    }
    let dir = scratch_dir("corpus");
    let mut failures = Vec::new();
    let mut ran = 0;
    for &(name, args) in CORPUS {
        let Some(prog) = program(name) else {
            common::missing(name);
            continue;
        };
        ran += 1;
        let want = block_counts(&valgrind::summary(&prog, args));

        let file = dir.join(format!(
            "{}.report",
            name.trim_start_matches('/').replace('/', "_")
        ));
        let opts = format!("leak-report,leak-show=all,report-file={}", file.display());
        run_limited(with_dmem(&prog, args, &opts, None).current_dir(&dir), LIMIT);
        let report = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{name}: no report: {e}"));
        let at_exit = block_counts(&report_summary(&report));
        if at_exit != want {
            failures.push(format!("{name} at exit: dmem {at_exit:?}, valgrind {want:?}"));
        }
    }
    assert!(ran >= 8, "only {ran} programs of the corpus are installed");
    assert!(
        failures.is_empty(),
        "classes (definite, indirect, possible, reachable) differ:\n{}",
        failures.join("\n")
    );
}
