//! valgrind as the oracle of the leak-class tests: the LEAK SUMMARY of a bare run of a fixture.
//! Its runs take `common::run`'s time limit.
#![allow(dead_code)]

use crate::common::run::{run_limited, LIMIT};
use std::path::Path;
use std::process::Command;

/// How many times the dmem side of a comparison runs before a difference from valgrind counts.
/// Both tools scan conservatively, so a word that merely looks like a pointer into a lost block
/// makes it possibly lost, and whether one does depends on where the kernel put the heap: in
/// perl's run, a 10-byte string buffer whose first word is two characters of text over the high
/// bytes of a stale heap pointer lands inside a lost 7,552-byte block in about one layout in
/// eight; in troff's, a word of a live 136-byte table points one byte into one of the 2,880
/// lost 8-byte blocks in about one layout in three hundred (`dmem why` on such a run's core
/// shows the chain). valgrind lays out its client the same way every run, so its answer is one
/// layout's; dmem's runs each get a layout of their own, and a comparison fails only when every
/// one of them differs, which a real difference does.
pub const ATTEMPTS: usize = 4;

/// `run()` again, up to `ATTEMPTS` runs in all, while `differs` says how its answer differs
/// (None: it does not), with a line on standard error each time naming `what`; the last answer.
pub fn again_while_it_differs<T>(
    what: &str,
    mut run: impl FnMut() -> T,
    differs: impl Fn(&T) -> Option<String>,
) -> T {
    let mut answer = run();
    for attempt in 1..ATTEMPTS {
        let Some(how) = differs(&answer) else { break };
        eprintln!("{what}: run {attempt} of {ATTEMPTS} differs, run again: {how}");
        answer = run();
    }
    answer
}

/// The classes as valgrind's LEAK SUMMARY names them, in its order.
pub const CLASSES: [&str; 4] = [
    "definitely lost",
    "indirectly lost",
    "possibly lost",
    "still reachable",
];

/// (blocks, bytes) per class, in `CLASSES` order.
pub type Summary = [(u64, u64); 4];

/// Runs `valgrind --leak-check=full --show-leak-kinds=all prog args` without libdmem, within
/// the tests' time limit, and reads its LEAK SUMMARY.
pub fn summary(prog: &Path, args: &[&str]) -> Summary {
    summary_with(prog, args, &[])
}

/// As `summary`, with exactly these variables as the environment.
pub fn summary_with(prog: &Path, args: &[&str], envs: &[(String, String)]) -> Summary {
    summary_in(Path::new("."), prog, args, envs)
}

/// As `summary_with`, run in `dir`.
pub fn summary_in(dir: &Path, prog: &Path, args: &[&str], envs: &[(String, String)]) -> Summary {
    let mut cmd = Command::new("valgrind");
    cmd.args(["--leak-check=full", "--show-leak-kinds=all"])
        .arg(prog)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .envs(envs.iter().map(|(k, v)| (k, v)));
    let out = run_limited(&mut cmd, LIMIT);
    let report = String::from_utf8_lossy(&out.stderr).into_owned();
    parse_summary(&report)
        .unwrap_or_else(|| panic!("valgrind on {}: no leak summary:\n{report}", prog.display()))
}

/// `definitely lost: 12,016 bytes in 501 blocks` and the like, for every class; all zero when
/// valgrind says no leaks are possible (every block was freed). valgrind follows a program's
/// forked children and prints a summary for each, every line marked `==PID==`: this is the
/// summary of the process whose line comes first, the program itself.
pub fn parse_summary(report: &str) -> Option<Summary> {
    let pid = report
        .lines()
        .find_map(|l| l.strip_prefix("==")?.split_once("==").map(|(p, _)| p));
    let mine = |l: &&str| {
        pid.is_none_or(|p| {
            l.strip_prefix("==")
                .is_some_and(|r| r.starts_with(&format!("{p}==")))
        })
    };
    let report: Vec<&str> = report.lines().filter(mine).collect();
    let mut sum = [(0, 0); 4];
    if report.iter().any(|l| l.contains("no leaks are possible")) {
        return Some(sum);
    }
    for (slot, class) in sum.iter_mut().zip(CLASSES) {
        let rest = report
            .iter()
            .find_map(|l| l.split_once(&format!("{class}: ")).map(|(_, r)| r))?;
        let [bytes, blocks, ..] = numbers(rest)[..] else {
            return None;
        };
        *slot = (blocks, bytes);
    }
    Some(sum)
}

/// Every decimal number in `s`, with thousands separators dropped.
pub fn numbers(s: &str) -> Vec<u64> {
    s.replace(',', "")
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// The numbers after the first `what: ` of a report or log: (bytes, blocks), as in
/// `definitely lost: 357 bytes in 4 blocks`.
pub fn counted(report: &str, what: &str) -> (u64, u64) {
    let key = format!("{what}: ");
    let rest = report
        .lines()
        .find_map(|l| l.split_once(&key).map(|x| x.1))
        .unwrap_or_else(|| panic!("no '{what}' in:\n{report}"));
    let n = numbers(rest);
    (n[0], n[1])
}

/// The exit report's summary line, `dmem: leak summary: definitely lost: B bytes in N blocks;
/// ...`, the first line of `report`, as a `Summary`.
pub fn report_summary(report: &str) -> Summary {
    summary_line(
        report.lines().find(|l| l.starts_with("dmem: leak summary: ")),
        report,
    )
}

/// The last exit report's summary in `report`: where a program's children append their reports
/// to its file, the program's own, written when it ends after them.
pub fn last_report_summary(report: &str) -> Summary {
    summary_line(
        report.lines().rfind(|l| l.starts_with("dmem: leak summary: ")),
        report,
    )
}

fn summary_line(line: Option<&str>, report: &str) -> Summary {
    let line = line.unwrap_or_else(|| panic!("no summary line:\n{report}"));
    let mut sum = [(0, 0); 4];
    for (slot, class) in sum.iter_mut().zip(CLASSES) {
        let part = line
            .split(&format!("{class}: "))
            .nth(1)
            .unwrap_or_else(|| panic!("no '{class}' in the summary: {line}"));
        let n = numbers(part.split(';').next().unwrap());
        *slot = (n[1], n[0]);
    }
    sum
}
