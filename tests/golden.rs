//! What a user sees for a known core, fixed: `dmem leaks PROG CORE` on the abort-shutdown core of
//! c-fixtures/exit_vs_core.c (a fixed set of leaks, its frames named from its -g build), as text
//! and as JSON, compared with the checked-in tests/golden/leaks.txt and tests/golden/leaks.json. Only what legitimately changes from run
//! to run or machine to machine is normalised first: addresses, the paths of the build and of
//! the core, the process id, a frame's offset into its function (the compiler's choice), and
//! the C library's own start-up frames (the machine's glibc), which stand as one line. A change to the output then shows as a diff of that file, which is
//! reviewed: `DMEM_BLESS=1` rewrites it from this run instead of comparing.

mod common;

use common::{dmem, fixture, hide_addresses, lib_path, make_core, output, scratch_dir, text, top};
use std::path::Path;

/// The text with what varies between runs put as placeholders: the core's path (`CORE`), the
/// fixtures' build folder (`FIXTURES`), the library's path (`LIBDMEM`), the repository's
/// folder (`TOP`), numbers of a process (`PID`), offsets into a function (`+OFF`), hexadecimal
/// addresses of five digits or more (`0xADDR`), and each run of frames in libc as one line.
fn normalise(s: &str, core: &Path) -> String {
    let mut lines: Vec<String> = Vec::new();
    for l in s.lines() {
        let l = if l.starts_with("    ") && l.ends_with(" in libc.so.6") {
            "    ... in libc.so.6".to_owned()
        } else {
            offsets(l)
        };
        if lines.last() != Some(&l) || !l.ends_with("... in libc.so.6") {
            lines.push(l);
        }
    }
    let s = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    fixed(&s, core)
}

/// `+0xNN` after a function's name as `+OFF`.
fn offsets(l: &str) -> String {
    let mut out = String::new();
    let mut rest = l;
    while let Some(at) = rest.find("+0x") {
        let digits = rest[at + 3..].bytes().take_while(u8::is_ascii_hexdigit).count();
        out.push_str(&rest[..at]);
        out.push_str("+OFF");
        rest = &rest[at + 3 + digits..];
    }
    out.push_str(rest);
    out
}

/// The paths, process ids and addresses of `s` as placeholders.
fn fixed(s: &str, core: &Path) -> String {
    let fixtures = fixture("exit_vs_core");
    let fixtures = fixtures.parent().unwrap();
    let mut s = s
        .replace(&core.display().to_string(), "CORE")
        .replace(&fixtures.display().to_string(), "FIXTURES")
        .replace(&lib_path().display().to_string(), "LIBDMEM")
        .replace(&top().display().to_string(), "TOP");
    for word in ["pid ", "process "] {
        let mut out = String::new();
        let mut rest = s.as_str();
        while let Some(at) = rest.find(word) {
            let end = at + word.len();
            let digits = rest[end..].bytes().take_while(u8::is_ascii_digit).count();
            out.push_str(&rest[..end]);
            out.push_str(if digits > 0 { "PID" } else { "" });
            rest = &rest[end + digits..];
        }
        out.push_str(rest);
        s = out;
    }
    hide_addresses(&s)
}

/// Compares `got` with the expected file `name` under tests/golden/, or writes it there when
/// `DMEM_BLESS=1`.
fn check_golden(name: &str, got: &str) {
    let path = top().join("tests/golden").join(name);
    if std::env::var_os("DMEM_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, got).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (DMEM_BLESS=1 writes it)", path.display()));
    if got != want {
        let first = got
            .lines()
            .zip(want.lines())
            .position(|(g, w)| g != w)
            .unwrap_or(got.lines().count().min(want.lines().count()));
        panic!(
            "the output differs from {} from line {} on (DMEM_BLESS=1 rewrites the file; review \
             the diff):\n--- expected\n{}\n--- got\n{}",
            path.display(),
            first + 1,
            want.lines().skip(first).take(8).collect::<Vec<_>>().join("\n"),
            got.lines().skip(first).take(8).collect::<Vec<_>>().join("\n"),
        );
    }
}

#[test]
fn leaks_text_of_a_known_core() {
    let dir = scratch_dir("golden_leaks");
    let prog = fixture("exit_vs_core");
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib_path());
    // Every class listed, whatever the default classes are.
    let out = output(dmem().arg("leaks").arg(&prog).arg(&core).args(["--show", "all"]));
    assert!(out.status.success(), "dmem leaks: {}", text(&out.stderr));
    check_golden("leaks.txt", &normalise(&text(&out.stdout), &core));
}

/// The JSON of `dmem leaks` with what varies put as placeholders, as `normalise` does for the
/// text: in each stack a run of frames in libc as one frame `{"text": "... in libc.so.6"}` and
/// each frame's offset into its function as `"OFF"`; the roots' counts (ranges, bytes and
/// registers, which depend on the machine's libraries and the registers at the abort) as `"N"`;
/// then the paths, process ids and addresses of the pretty-printed document.
fn normalise_json(s: &str, core: &Path) -> String {
    use serde_json::{json, Value};
    let mut doc: Value = serde_json::from_str(s).expect("dmem leaks --format json writes JSON");
    for row in doc["stacks"].as_array_mut().expect("a list of stacks") {
        let mut frames: Vec<Value> = Vec::new();
        for mut f in row["stack"].as_array().expect("a stack").iter().cloned() {
            let in_libc = f["object"].as_str().is_some_and(|o| o.ends_with("/libc.so.6"));
            if in_libc {
                if frames.last().is_none_or(|l| l["text"] != "... in libc.so.6") {
                    frames.push(json!({ "text": "... in libc.so.6" }));
                }
                continue;
            }
            if !f["offset"].is_null() {
                f["offset"] = json!("OFF");
            }
            frames.push(f);
        }
        row["stack"] = Value::Array(frames);
    }
    for key in ["ranges", "bytes", "registers"] {
        doc["roots"][key] = json!("N");
    }
    let pretty = serde_json::to_string_pretty(&doc).unwrap();
    let lines: String = pretty.lines().map(|l| format!("{}\n", offsets(l))).collect();
    fixed(&lines, core)
}

#[test]
fn leaks_json_of_a_known_core() {
    let dir = scratch_dir("golden_leaks_json");
    let prog = fixture("exit_vs_core");
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib_path());
    let out = output(
        dmem()
            .arg("leaks")
            .arg(&prog)
            .arg(&core)
            .args(["--show", "all", "--format", "json"]),
    );
    assert!(out.status.success(), "dmem leaks: {}", text(&out.stderr));
    check_golden("leaks.json", &normalise_json(&text(&out.stdout), &core));
}

#[test]
fn normalising_keeps_what_does_not_vary() {
    let core = Path::new("/tmp/x/core.123");
    let s = format!(
        "{} at 0x7f12345678 (pid 4242) in {}/c.c:17, 0x10 bytes, process 7\n    main+0x3a (c.c:9) in c\n    \
         __libc_start_call_main+0x7a (libc_start_call_main.h:58) in libc.so.6\n    \
         __libc_start_main_impl+0x85 (libc-start.c:360) in libc.so.6\n    _start+0x21 in c\n",
        core.display(),
        top().display()
    );
    assert_eq!(
        normalise(&s, core),
        "CORE at 0xADDR (pid PID) in TOP/c.c:17, 0x10 bytes, process PID\n    main+OFF (c.c:9) in c\n    \
         ... in libc.so.6\n    _start+OFF in c\n"
    );
}

#[test]
fn normalising_json_keeps_what_does_not_vary() {
    let core = Path::new("/tmp/x/core.123");
    let s = r#"{"stacks": [{"example": "0x55564f6e86c0", "stack": [
        {"pc": "0x555643f030ba", "offset": 58, "object": "/p/c", "text": "main+0x3a (c.c:86) in c"},
        {"pc": "0x7f625184524a", "offset": 122, "object": "/usr/lib/libc.so.6", "text": "a"},
        {"pc": "0x7f6251845305", "offset": 133, "object": "/usr/lib/libc.so.6", "text": "b"},
        {"pc": "0x555643f03181", "offset": null, "object": "/p/c", "text": "f (c.c:2) in c"}]}],
        "roots": {"ranges": 17, "bytes": 128672, "registers": 5, "excluded": []}}"#;
    let got = normalise_json(s, core);
    let want = r#"{
  "roots": {
    "bytes": "N",
    "excluded": [],
    "ranges": "N",
    "registers": "N"
  },
  "stacks": [
    {
      "example": "0xADDR",
      "stack": [
        {
          "object": "/p/c",
          "offset": "OFF",
          "pc": "0xADDR",
          "text": "main+OFF (c.c:86) in c"
        },
        {
          "text": "... in libc.so.6"
        },
        {
          "object": "/p/c",
          "offset": null,
          "pc": "0xADDR",
          "text": "f (c.c:2) in c"
        }
      ]
    }
  ]
}
"#;
    assert_eq!(got, want);
}
