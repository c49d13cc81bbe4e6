//! `dmem leaks` shows by default what valgrind shows by default, and its exit status follows
//! `--errors-for-leak-kinds` as valgrind's `--error-exitcode` does; and the frames of the XML,
//! at exit and from a core, are named as valgrind names them (glibc's aliases, `(below main)`).
//! valgrind (3.19) is the oracle, on the bare program: its XML's loss records by kind and their
//! frames' `<fn>`, and its exit status with the same options. The launcher reads a core of the
//! same program, left by `abort-shutdown`.

mod common;
#[path = "common/valgrind.rs"]
mod valgrind;

use common::{dmem, fixture, have_tool, lib_path, make_core, output, scratch_dir, text};
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// valgrind's `<error>`s of a leak, as (kind, leaked blocks), sorted.
fn loss_records(xml: &str) -> Vec<(String, u64)> {
    let tag = |chunk: &str, t: &str| -> Option<String> {
        let open = format!("<{t}>");
        let start = chunk.find(&open)? + open.len();
        let end = chunk[start..].find(&format!("</{t}>"))? + start;
        Some(chunk[start..end].trim().to_owned())
    };
    let mut out: Vec<(String, u64)> = xml
        .split("<error>")
        .skip(1)
        .filter_map(|e| {
            let kind = tag(e, "kind")?;
            let blocks = tag(e, "leakedblocks")?.parse().ok()?;
            kind.starts_with("Leak_").then_some((kind, blocks))
        })
        .collect();
    out.sort();
    out
}

/// The loss records of a valgrind XML document: kind, leaked blocks, and each frame of the
/// stack as its `<fn>`, or `obj:OBJECT` without one; sorted.
fn named_records(xml: &str) -> Vec<(String, u64, Vec<String>)> {
    let tag = |chunk: &str, t: &str| -> Option<String> {
        let open = format!("<{t}>");
        let start = chunk.find(&open)? + open.len();
        let end = chunk[start..].find(&format!("</{t}>"))? + start;
        Some(chunk[start..end].trim().to_owned())
    };
    let mut out: Vec<(String, u64, Vec<String>)> = xml
        .split("<error>")
        .skip(1)
        .filter_map(|e| {
            let kind = tag(e, "kind").filter(|k| k.starts_with("Leak_"))?;
            let blocks = tag(e, "leakedblocks")?.parse().ok()?;
            let stack = tag(e, "stack")?;
            let frames = stack
                .split("<frame>")
                .skip(1)
                .map(|f| tag(f, "fn").unwrap_or_else(|| format!("obj:{}", tag(f, "obj").unwrap_or_default())))
                .collect();
            Some((kind, blocks, frames))
        })
        .collect();
    out.sort();
    out
}

/// `dmem GLOBAL leaks PROG CORE --format xml`, which must succeed: its XML.
fn leaks_xml(global: &[&OsStr], prog: &Path, core: &Path) -> String {
    let out = output(
        dmem()
            .args(global)
            .arg("leaks")
            .arg(prog)
            .arg(core)
            .args(["--format", "xml"]),
    );
    assert!(
        out.status.success(),
        "dmem leaks --format xml: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `valgrind --leak-check=full --xml=yes EXTRA prog` on the bare program: its XML and status.
fn valgrind_xml(dir: &Path, prog: &Path, extra: &[&str]) -> (String, Option<i32>) {
    valgrind_xml_of(dir, prog, &[], extra)
}

/// As `valgrind_xml`, with the program's arguments.
fn valgrind_xml_of(dir: &Path, prog: &Path, args: &[&str], extra: &[&str]) -> (String, Option<i32>) {
    let xml = dir.join(format!("vg{}.xml", extra.join("").replace(['-', '=', ','], "")));
    let out = output(
        Command::new("valgrind")
            .args(["--leak-check=full", "--xml=yes"])
            .arg(format!("--xml-file={}", xml.display()))
            .args(extra)
            .arg(prog)
            .args(args)
            .env_clear()
            .stdout(std::process::Stdio::null()),
    );
    let doc = std::fs::read_to_string(&xml)
        .unwrap_or_else(|e| panic!("valgrind's XML: {e}\n{}", text(&out.stderr)));
    (doc, out.status.code())
}

/// A fixture with definitely and indirectly lost and still reachable blocks, and none possibly
/// lost (so that one class's errors find nothing): its core, made once.
fn cycle_core(test: &str) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let dir = scratch_dir(test);
    let prog = fixture("leakclass_cycle");
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib_path());
    (dir, prog, core)
}

#[test]
fn a_core_shows_valgrinds_default_records() {
    if !have_tool("valgrind") {
        return;
    }
    let (dir, prog, core) = cycle_core("leak_kinds_default");
    let (vg, _) = valgrind_xml(&dir, &prog, &[]);
    let want = loss_records(&vg);
    // The fixture's leaks as it describes them, so that the comparison cannot be vacuous:
    // valgrind lists its definitely lost records and not the indirectly lost or reachable ones.
    assert!(
        !want.is_empty() && want.iter().all(|(k, _)| k == "Leak_DefinitelyLost"),
        "valgrind's default records: {want:?}"
    );
    assert_eq!(want.iter().map(|r| r.1).sum::<u64>(), 2, "{want:?}");

    let xml = leaks_xml(&[], &prog, &core);
    assert_eq!(loss_records(&xml), want, "{xml}");

    // The JSON lists the same blocks, and its totals still count every class, as valgrind's
    // LEAK SUMMARY does.
    let json = output(dmem().arg("leaks").arg(&prog).arg(&core).arg("--json"));
    assert!(json.status.success(), "{}", text(&json.stderr));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let stacks = v["stacks"].as_array().unwrap();
    let listed = |class: &str| -> u64 { stacks.iter().map(|s| s[class]["blocks"].as_u64().unwrap()).sum() };
    assert_eq!(listed("definitely_lost"), 2, "{v}");
    assert_eq!(listed("indirectly_lost") + listed("still_reachable"), 0, "{v}");
    assert_eq!(v["show"], serde_json::json!(["definite", "possible"]), "{v}");
    let summary = valgrind::summary(&prog, &[]);
    for (k, key) in [
        "definitely_lost",
        "indirectly_lost",
        "possibly_lost",
        "still_reachable",
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(v[key]["blocks"].as_u64(), Some(summary[k].0), "{key}: {v}");
    }

    // The text says what it leaves out, and lists the rest with the option.
    let out = output(dmem().arg("leaks").arg(&prog).arg(&core));
    let t = text(&out.stdout);
    assert!(t.contains("not listed: indirectly lost, still reachable"), "{t}");
    assert!(
        !t.contains(" indirectly lost)") && !t.contains(" still reachable)"),
        "{t}"
    );
    let all = text(
        &output(
            dmem()
                .arg("leaks")
                .arg(&prog)
                .arg(&core)
                .arg("--show-leak-kinds=all"),
        )
        .stdout,
    );
    assert!(
        all.contains(" indirectly lost") && all.contains(" still reachable)"),
        "{all}"
    );
    assert!(!all.contains("not listed"), "{all}");
    // The former spelling still works.
    let old = text(&output(dmem().arg("leaks").arg(&prog).arg(&core).args(["--show", "all"])).stdout);
    assert_eq!(old, all);
}

#[test]
fn the_exit_status_follows_errors_for_leak_kinds_as_valgrinds() {
    if !have_tool("valgrind") {
        return;
    }
    let (dir, prog, core) = cycle_core("leak_kinds_status");
    let mut seen = Vec::new();
    for kinds in [
        None,
        Some("possible"),
        Some("indirect"),
        Some("none"),
        Some("reachable"),
    ] {
        let mut extra = vec!["--error-exitcode=7".to_owned()];
        extra.extend(kinds.map(|k| format!("--errors-for-leak-kinds={k}")));
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let (_, want) = valgrind_xml(&dir, &prog, &extra);
        let got = output(dmem().arg("leaks").arg(&prog).arg(&core).args(&extra));
        assert_eq!(got.status.code(), want, "{kinds:?}: {}", text(&got.stderr));
        seen.push(want);
    }
    // Both outcomes were met, so the comparison can fail either way.
    assert!(seen.contains(&Some(7)) && seen.contains(&Some(0)), "{seen:?}");
    // Without --error-exitcode, leaks are no failure.
    let plain = output(dmem().arg("leaks").arg(&prog).arg(&core));
    assert_eq!(plain.status.code(), Some(0), "{}", text(&plain.stderr));
}

/// The exit report's XML of `prog args` (valgrind's default kinds).
fn exit_xml(dir: &Path, prog: &Path, args: &[&str]) -> String {
    let xml = dir.join("exit.xml");
    let opts = format!("leak-report,report-format=xml,report-file={}", xml.display());
    let out = output(
        common::preloaded(prog, &opts, None)
            .args(args)
            .stdout(std::process::Stdio::null()),
    );
    std::fs::read_to_string(&xml).unwrap_or_else(|e| panic!("the exit report: {e}\n{}", text(&out.stderr)))
}

/// Every frame's `<fn>` (glibc's functions by the name valgrind prefers among their symbols,
/// `(below main)` for those that run main) agrees with valgrind's on the same stacks: a fixture
/// through strdup (`__GI___strdup`, `__strdup`, `strdup` at one address) and a constructor run
/// by `__libc_start_main`, at exit and from its core; and iconv (`__GI___gconv_open`), a
/// program from the machine, at exit.
#[test]
fn frames_are_named_as_valgrind_names_them() {
    if !have_tool("valgrind") || !have_tool("iconv") {
        return;
    }
    let dir = scratch_dir("leak_kinds_names");
    let prog = fixture("vgsupp_aliases");
    let (vg, _) = valgrind_xml(&dir, &prog, &[]);
    let want = named_records(&vg);
    let names: Vec<&str> = want.iter().flat_map(|r| r.2.iter().map(String::as_str)).collect();
    for n in ["strdup", "(below main)", "__libc_start_main@@GLIBC_2.34"] {
        assert!(names.contains(&n), "valgrind names no {n}: {want:?}");
    }
    let at_exit = named_records(&exit_xml(&dir, &prog, &[]));
    assert_eq!(at_exit, want, "at exit");
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib_path());
    assert_eq!(
        named_records(&leaks_xml(&[], &prog, &core)),
        want,
        "from the core"
    );

    let iconv = common::which("iconv").expect("iconv");
    let input = dir.join("accents.txt");
    std::fs::write(&input, "Ça été très élégant: naïve façade, Straße, Œuvre.\n").unwrap();
    let args = ["-f", "UTF-8", "-t", "ASCII//TRANSLIT", input.to_str().unwrap()];
    let (vg, _) = valgrind_xml_of(&dir, &iconv, &args, &[]);
    let want = named_records(&vg);
    assert!(
        want.iter().any(|r| r.2.iter().any(|f| f == "__gconv_open")),
        "valgrind names no __gconv_open: {want:?}"
    );
    assert_eq!(
        named_records(&exit_xml(&dir, &iconv, &args)),
        want,
        "iconv at exit"
    );
}

/// Build A of `a_sysroot_copy_gives_valgrinds_names`: a function with three names at one
/// address, as glibc's are; valgrind shows the shortest, `mk`.
const ALIASED_A: &str = r#"
#include <stdlib.h>
void *volatile keep;
__attribute__((noinline)) void *internal_make_block(int n) {
    char *p = malloc(n);
    p[0] = 1;
    return p;
}
extern void *mk(int n) __attribute__((alias("internal_make_block")));
extern void *make_block(int n) __attribute__((alias("internal_make_block")));
int main(void) {
    keep = make_block(40);
    keep = 0;
    return 0;
}
"#;

/// Build B, at the same path since the core: none of A's names.
const ALIASED_B: &str = "int main(void) { return 0; }\n";

fn gcc(src: &str, dir: &Path, out: &Path) {
    let c = dir.join("src.c");
    std::fs::write(&c, src).unwrap();
    let _ = std::fs::remove_file(out);
    let o = output(
        Command::new("gcc")
            .args(["-O0", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id", "-o"])
            .arg(out)
            .arg(&c),
    );
    assert!(o.status.success(), "gcc: {}", text(&o.stderr));
}

/// A core read with `--sysroot`, the file at the mapped path rebuilt since: the names a
/// function's address has, and the one valgrind shows, come from the sysroot's copy of the
/// build that ran, the file the frames are named from, not from the file now at the path.
#[test]
fn a_sysroot_copy_gives_valgrinds_names() {
    if !have_tool("valgrind") || !have_tool("gcc") {
        return;
    }
    let dir = scratch_dir("leak_kinds_sysroot");
    let prog = dir.join("prog");
    gcc(ALIASED_A, &dir, &prog);
    let root = dir.join("customer");
    let place = root.join(dir.strip_prefix("/").unwrap());
    std::fs::create_dir_all(&place).unwrap();
    std::fs::copy(&prog, place.join("prog")).unwrap();
    let (vg, _) = valgrind_xml(&dir, &prog, &[]);
    let want = named_records(&vg);
    assert!(
        want.iter().any(|r| r.2.iter().any(|f| f == "mk")),
        "valgrind's name for the function: {want:?}"
    );
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib_path());
    gcc(ALIASED_B, &dir, &prog);
    let sysroot = [OsStr::new("--sysroot"), root.as_os_str()];
    let xml = leaks_xml(&sysroot, &prog, &core);
    assert_eq!(named_records(&xml), want, "{xml}");
    // The text shows the same name.
    let out = output(
        dmem()
            .arg("--sysroot")
            .arg(&root)
            .arg("leaks")
            .arg(&prog)
            .arg(&core),
    );
    assert!(text(&out.stdout).contains(" mk+0x"), "{}", text(&out.stdout));
}
