//! A team's valgrind suppression files carry over to dmem, and dmem's to valgrind, on programs
//! from the machine: troff formatting bash's manual page (C++, `operator new[]` from static
//! constructors, a stripped program: `obj:` lines, and frames valgrind unwinds past the entry
//! point as `obj:*`), iconv transliterating accented text (glibc's `__gconv_open`, which a
//! symboliser may call `__GI___gconv_open`, and `(below main)`), and
//! `c-fixtures/vgsupp_aliases.c` (strdup and fopen, each with several names at one address, and
//! a constructor's leak under `call_init`). valgrind is the oracle both ways: the blocks it
//! suppresses with a file are the blocks dmem suppresses with it.

mod common;
#[path = "common/valgrind.rs"]
mod valgrind;

use common::{fixture, have_tool, output, preloaded, scratch_dir, text};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A program and its arguments.
struct Case {
    name: &'static str,
    prog: PathBuf,
    args: Vec<String>,
}

/// The programs, with their input files written into `dir`; None (after saying so, which fails
/// under CI=true) when a tool is missing.
fn cases(dir: &Path) -> Option<Vec<Case>> {
    if !have_tool("valgrind") || !have_tool("troff") || !have_tool("iconv") {
        return None;
    }
    let man = Path::new("/usr/share/man/man1/bash.1.gz");
    if !man.is_file() {
        common::missing("bash's manual page (/usr/share/man/man1/bash.1.gz)");
        return None;
    }
    let page = output(Command::new("zcat").arg(man)).stdout;
    assert!(page.len() > 10_000, "bash.1 unpacked to {} bytes", page.len());
    let page_path = dir.join("bash.1");
    std::fs::write(&page_path, page).unwrap();
    let accents = dir.join("accents.txt");
    std::fs::write(
        &accents,
        "Ça été très élégant: naïve façade, Ærøskøbing, Straße, Œuvre, Ångström.\n".repeat(20),
    )
    .unwrap();
    let path = |p: &Path| p.to_string_lossy().into_owned();
    Some(vec![
        Case {
            name: "troff",
            prog: common::which("troff").unwrap(),
            args: vec!["-mandoc".into(), "-Tutf8".into(), path(&page_path)],
        },
        Case {
            name: "iconv",
            prog: common::which("iconv").unwrap(),
            args: vec![
                "-f".into(),
                "UTF-8".into(),
                "-t".into(),
                "ASCII//TRANSLIT".into(),
                path(&accents),
            ],
        },
        Case {
            name: "vgsupp_aliases",
            prog: fixture("vgsupp_aliases"),
            args: Vec::new(),
        },
    ])
}

/// valgrind's log of `case` with its default leak kinds (as a team runs it) and `extra`.
fn valgrind(case: &Case, extra: &[&str]) -> String {
    let mut cmd = Command::new("valgrind");
    cmd.arg("--leak-check=full")
        .args(extra)
        .arg(&case.prog)
        .args(&case.args)
        .stdout(Stdio::null());
    text(&output(&mut cmd).stderr)
}

/// dmem's exit report of `case` with `opts`.
fn dmem(case: &Case, opts: &str) -> String {
    let mut cmd = preloaded(&case.prog, &format!("leak-report,{opts}"), None);
    cmd.args(&case.args).stdout(Stdio::null());
    text(&output(&mut cmd).stderr)
}

/// What a suppressions file changes: the lost classes and what was suppressed.
const COUNTED: [&str; 4] = [
    "definitely lost",
    "indirectly lost",
    "possibly lost",
    "suppressed",
];

/// The `{ ... }` blocks of a report or log, without valgrind's `==PID==` lines.
fn blocks_of(log: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for l in log.lines() {
        inside |= l.starts_with('{');
        if inside {
            out.push_str(l);
            out.push('\n');
        }
        inside &= !l.starts_with('}');
    }
    out
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// dmem's report of `case` with `opts`, its lost and suppressed counts asserted to be those of
/// valgrind's log `theirs` (`file` names the suppressions both were given). The dmem side runs
/// again in a new layout while it differs: see `valgrind::ATTEMPTS`.
fn dmem_as_valgrind(case: &Case, opts: &str, theirs: &str, file: &str) -> String {
    let differs = |ours: &str| -> Vec<&str> {
        let count = |log: &str, what: &str| valgrind::counted(log, what);
        let apart = |what: &&str| count(ours, what) != count(theirs, what);
        COUNTED.iter().copied().filter(apart).collect()
    };
    let how = |ours: &String| {
        let d = differs(ours);
        (!d.is_empty()).then(|| format!("{d:?}"))
    };
    let ours = valgrind::again_while_it_differs(case.name, || dmem(case, opts), how);
    assert!(
        differs(&ours).is_empty(),
        "{}: {:?} differ in every run, dmem against valgrind with {file}\n{ours}\n{theirs}",
        case.name,
        differs(&ours)
    );
    ours
}

#[test]
fn valgrinds_generated_suppressions_suppress_the_same_blocks_under_dmem() {
    let dir = scratch_dir("vgsupp_from_valgrind");
    let Some(cases) = cases(&dir) else {
        return;
    };
    for case in &cases {
        let log = valgrind(case, &["--gen-suppressions=all"]);
        let blocks = blocks_of(&log);
        assert!(
            blocks.contains("Memcheck:Leak"),
            "{}: valgrind generated no leak suppression:\n{log}",
            case.name
        );
        let supp = write(&dir, &format!("{}.supp", case.name), &blocks);
        let theirs = valgrind(case, &[&format!("--suppressions={}", supp.display())]);
        assert!(
            valgrind::counted(&theirs, "suppressed").1 > 0,
            "{}: {theirs}",
            case.name
        );
        let opts = format!("suppressions={},leak-show=all", supp.display());
        dmem_as_valgrind(case, &opts, &theirs, &format!("valgrind's file\n{blocks}"));
    }
}

#[test]
fn dmems_generated_suppressions_suppress_the_same_blocks_under_valgrind() {
    let dir = scratch_dir("vgsupp_from_dmem");
    let Some(cases) = cases(&dir) else {
        return;
    };
    for case in &cases {
        let report = dmem(case, "gen-suppressions,leak-show=definite+indirect+possible");
        let blocks = blocks_of(&report);
        assert!(
            blocks.contains("Memcheck:Leak"),
            "{}: dmem generated nothing:\n{report}",
            case.name
        );
        let supp = write(&dir, &format!("{}.dmem.supp", case.name), &blocks);
        let theirs = valgrind(case, &[&format!("--suppressions={}", supp.display())]);
        let opts = format!("suppressions={}", supp.display());
        let ours = dmem_as_valgrind(case, &opts, &theirs, &format!("dmem's file\n{blocks}"));
        assert!(
            valgrind::counted(&ours, "suppressed").1 > 0,
            "{}: {ours}",
            case.name
        );
        // Every lost block of dmem's report was suppressed, under valgrind as under dmem.
        for what in &COUNTED[..3] {
            assert_eq!(
                valgrind::counted(&theirs, what),
                (0, 0),
                "{}: {what}\n{blocks}\n{theirs}",
                case.name
            );
        }
    }
}
