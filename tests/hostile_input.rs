//! Hostile input to the readers of outside files and names, each attack run as a user would meet
//! it: suppression files that are no regular file, too large, or made to cost minutes; a `...`
//! that reaches past the recorded frames to defeat `leak-exitcode`; and a program whose symbol
//! and path names hold terminal escapes and bytes XML cannot carry, in the exit report (text and
//! XML) and in the launcher's answer on its core. Each preloaded run is compared with the bare
//! program where it applies: the program runs on, as bare.
//!
//! `c-fixtures/hostile_names.c` loses one 48-byte block from a function named with escapes, 14
//! calls deep (its recorded stack is cut); `c-fixtures/leak_supp.c` is described in
//! tests/suppressions.rs.

mod common;
#[path = "common/valgrind.rs"]
mod valgrind;

use common::run::bare;
use common::{dmem, fixture, have_tool, lib_path, make_core, output, preloaded, scratch_dir, text};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// Runs `prog` preloaded with `opts`; a hang fails the test (`output`'s limit).
fn run(prog: &Path, opts: &str) -> Output {
    output(&mut preloaded(prog, opts, None))
}

/// The bytes a terminal acts on that the fixture's names hold: ESC and BEL.
fn raw_controls(b: &[u8]) -> Vec<u8> {
    b.iter().copied().filter(|&c| c == 0x1b || c == 0x07).collect()
}

#[test]
fn files_that_are_no_regular_file_or_too_large_are_refused_and_the_program_runs_on() {
    let dir = scratch_dir("hostile_supp_files");
    let prog = fixture("leak_supp");
    // A FIFO nobody writes: opening it to read would block before main, in every process.
    let fifo = dir.join("fifo.supp");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    // 63 MB (sparse: nothing is written), far past the cap; read whole it took gigabytes.
    let huge = dir.join("huge.supp");
    std::fs::File::create(&huge).unwrap().set_len(63 << 20).unwrap();
    let good = write(&dir, "good.supp", "leak:make_cache\n");
    let opts = format!(
        "leak-report,leak-exitcode=3,suppressions={},suppressions={},suppressions=/dev/zero,suppressions={}",
        fifo.display(),
        huge.display(),
        good.display()
    );
    let out = run(&prog, &opts);
    let err = text(&out.stderr);
    let plain = output(&mut bare(&prog, &[]));
    assert_eq!(out.stdout, plain.stdout, "the program ran as bare:\n{err}");
    assert_eq!(out.status.code(), Some(3), "the leaks still fail the run:\n{err}");
    for (path, why) in [
        (fifo.display().to_string(), "not a regular file".to_owned()),
        ("/dev/zero".to_owned(), "not a regular file".to_owned()),
        (
            huge.display().to_string(),
            format!(
                "{} bytes, more than the 4 MiB a suppressions file may have",
                63u64 << 20
            ),
        ),
    ] {
        let line = format!("dmem: suppressions file {path}: {why}; running without this file");
        assert_eq!(err.lines().filter(|l| *l == line).count(), 1, "{line}\n{err}");
    }
    assert_eq!(
        valgrind::counted(&err, "suppressed"),
        (200, 1),
        "the good file still applies:\n{err}"
    );
}

#[test]
fn a_one_mebibyte_pattern_costs_the_report_little_and_the_constructor_nothing() {
    let dir = scratch_dir("hostile_supp_long");
    let prog = fixture("leak_supp");
    // One 1 MiB `leak:` pattern (it once took minutes to compile, in every process's
    // constructor), and the one line that matches.
    let body = format!("leak:{}\nleak:make_cache\n", "vendor_*x".repeat((1 << 20) / 9));
    let supp = write(&dir, "long.supp", &body);
    let out = run(
        &prog,
        &format!("leak-report,leak-exitcode=3,suppressions={}", supp.display()),
    );
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout), "vendor 3\n", "{err}");
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(valgrind::counted(&err, "suppressed"), (200, 1), "{err}");
    // Without the report nothing is read, so not even a missing file is named.
    let out = run(
        &prog,
        &format!("suppressions={}", dir.join("missing.supp").display()),
    );
    assert_eq!(text(&out.stdout), "vendor 3\n");
    assert!(
        !text(&out.stderr).contains("suppressions file"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn dots_past_the_recorded_frames_do_not_defeat_leak_exitcode() {
    let dir = scratch_dir("hostile_supp_dots");
    let prog = fixture("hostile_names");
    // An entry for some other library's leak: its `...` reaches past the 10 recorded frames of
    // the fixture's cut stack, where a name the stack never showed was taken as matched.
    let unrelated = write(
        &dir,
        "unrelated.supp",
        "{\n   vendor\n   Memcheck:Leak\n   fun:malloc\n   ...\n   fun:some_vendor_function\n}\n",
    );
    let out = run(
        &prog,
        &format!("leak-report,leak-exitcode=3,suppressions={}", unrelated.display()),
    );
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout), "done\n");
    assert_eq!(
        out.status.code(),
        Some(3),
        "the unrelated entry suppressed the leak:\n{err}"
    );
    assert_eq!(valgrind::counted(&err, "definitely lost"), (48, 1), "{err}");
    // The same file does suppress it when the name is on the recorded stack: the gate works.
    let related = write(
        &dir,
        "related.supp",
        "{\n   mine\n   Memcheck:Leak\n   fun:malloc\n   ...\n   fun:level5\n}\n",
    );
    let out = run(
        &prog,
        &format!("leak-report,leak-exitcode=3,suppressions={}", related.display()),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // valgrind, the oracle, keeps the leak with the unrelated entry too.
    if have_tool("valgrind") {
        let vg = output(
            Command::new("valgrind")
                .args(["--leak-check=full", "--num-callers=10"])
                .arg(format!("--suppressions={}", unrelated.display()))
                .arg(&prog),
        );
        let log = text(&vg.stderr);
        assert_eq!(valgrind::counted(&log, "definitely lost"), (48, 1), "{log}");
    }
}

/// The fixture copied to a path whose file name holds a terminal escape too.
fn hostile_copy(dir: &Path) -> PathBuf {
    let p = dir.join("prog\u{1b}[31mred\u{7}");
    std::fs::copy(fixture("hostile_names"), &p).unwrap();
    p
}

/// Checks `xml` is well formed (quick-xml reads it to the end) and holds no character XML 1.0
/// forbids; returns it.
fn well_formed(xml: &str) -> &str {
    let forbidden = |c: char| !matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..);
    assert!(!xml.contains(forbidden), "a character XML forbids:\n{xml}");
    let mut reader = quick_xml::Reader::from_str(xml);
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("not well formed at {}: {e}\n{xml}", reader.buffer_position()),
        }
    }
    xml
}

#[test]
fn names_with_terminal_escapes_are_shown_escaped_in_the_exit_report() {
    let dir = scratch_dir("hostile_names_report");
    let prog = hostile_copy(&dir);
    let plain = output(&mut bare(&prog, &[]));
    let out = run(&prog, "leak-report,gen-suppressions");
    assert_eq!(out.stdout, plain.stdout);
    assert_eq!(out.status.code(), plain.status.code());
    let err = text(&out.stderr);
    assert_eq!(raw_controls(&out.stderr), b"", "raw control bytes in:\n{err:?}");
    assert!(err.contains("evil\\x1b]0;pwned\\x07\\x1b[2Jname"), "{err}");
    assert!(
        err.contains("   fun:evil\\x1b]0;pwned"),
        "the suppression too:\n{err}"
    );
    assert!(
        err.contains("prog\\x1b[31mred\\x07"),
        "the program's path:\n{err}"
    );

    let xml = dir.join("report.xml");
    let out = run(
        &prog,
        &format!(
            "leak-report,report-format=xml,gen-suppressions,report-file={}",
            xml.display()
        ),
    );
    assert_eq!(out.stdout, plain.stdout);
    let doc = std::fs::read_to_string(&xml).unwrap();
    let doc = well_formed(&doc);
    assert!(
        doc.contains("<rawtext>") && doc.contains("fun:evil\\x1b]0;pwned"),
        "{doc}"
    );
}

#[test]
fn names_with_terminal_escapes_are_shown_escaped_by_the_launcher() {
    let dir = scratch_dir("hostile_names_core");
    let prog = hostile_copy(&dir);
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib_path());
    let out = output(dmem().arg("leaks").args([&prog, &core]).arg("--gen-suppressions"));
    let t = text(&out.stdout);
    assert!(out.status.success(), "{t}{}", text(&out.stderr));
    assert_eq!(raw_controls(&out.stdout), b"", "raw control bytes in:\n{t:?}");
    assert_eq!(raw_controls(&out.stderr), b"", "{:?}", text(&out.stderr));
    assert!(
        t.contains("evil\\x1b]0;pwned") && t.contains("   fun:evil\\x1b]0;pwned"),
        "{t}"
    );
    let out =
        output(
            dmem()
                .arg("leaks")
                .args([&prog, &core])
                .args(["--gen-suppressions", "--format", "xml"]),
        );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc = text(&out.stdout);
    assert!(well_formed(&doc).contains("evil\\x1b]0;pwned"), "{doc}");
}

/// A heap profile of 1 MB gzipped whose samples name one location with a 64 KiB function name
/// 100 times each, 100000 samples: decoded and copied as stacks it took gigabytes. Written by
/// hand in profile.proto's encoding (field numbers from Go's profile.proto).
fn amplifying_profile() -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn field(out: &mut Vec<u8>, key: u8, body: &[u8]) {
        out.push(key);
        varint(out, body.len() as u64);
        out.extend_from_slice(body);
    }
    let mut p = Vec::new();
    // sample_type (1): inuse_objects and inuse_space, in "count".
    field(&mut p, 0x0a, &[0x08, 0x01, 0x10, 0x03]);
    field(&mut p, 0x0a, &[0x08, 0x02, 0x10, 0x03]);
    // string_table (6).
    for s in ["", "inuse_objects", "inuse_space", "count"] {
        field(&mut p, 0x32, s.as_bytes());
    }
    field(&mut p, 0x32, &[b'f'; 64 << 10]);
    // function (5) 1 named string 4; location (4) 1 with one line of function 1.
    field(&mut p, 0x2a, &[0x08, 0x01, 0x10, 0x04]);
    field(&mut p, 0x22, &[0x08, 0x01, 0x22, 0x04, 0x08, 0x01, 0x10, 0x01]);
    // sample (2): location 1, 100 times (packed), values 1 and 1.
    let mut sample = Vec::new();
    field(&mut sample, 0x0a, &[1; 100]);
    field(&mut sample, 0x12, &[1, 1]);
    for _ in 0..100_000 {
        field(&mut p, 0x12, &sample);
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, &p).unwrap();
    gz.finish().unwrap()
}

#[test]
fn diff_refuses_a_profile_that_expands_without_bound() {
    let dir = scratch_dir("hostile_pprof");
    let bomb = dir.join("bomb.pb.gz");
    std::fs::write(&bomb, amplifying_profile()).unwrap();
    let mut cmd = dmem();
    cmd.arg("diff").args([&bomb, &bomb]);
    // 2 GiB of address space: the launcher's own needs fit many times, the expansion does not.
    common::run::memory_limit(&mut cmd, 2 << 30);
    let out = output(&mut cmd);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("dmem diff: ")
            && err.contains("would take more than 512 MiB")
            && err.lines().count() == 1,
        "{err}"
    );
}
