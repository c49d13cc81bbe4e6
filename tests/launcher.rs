//! The `dmem` launcher end to end: real programs run under it, real cores, real gdb.

mod common;
#[path = "common/gdb.rs"]
mod gdbrun;

use common::{dmem, fixture, have_tool, lib_path, make_core, reported_core, scratch_dir, text};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn run(cmd: &mut Command) -> Output {
    common::output(cmd)
}

/// The last line of the driver's summary as text: the one block it leaked.
const DRIVER_TOTAL: &str = "total: 2048 bytes in 1 block from 1 stack";

/// Parses what a `--json` command printed.
fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"))
}

/// Whether a stack (a `--json` frame list) has a frame in `function`.
fn has_frame(stack: &Value, function: &str) -> bool {
    stack
        .as_array()
        .is_some_and(|frames| frames.iter().any(|f| f["function"] == function))
}

/// Checks `dmem summary --json` of a core of the driver: its one live block is the 2048 bytes
/// it leaked from main (the 512 it freed are gone).
fn check_driver_summary(out: &str) {
    let v = json(out);
    assert_eq!(v["command"], "summary", "{out}");
    assert_eq!(
        (&v["total"]["stacks"], &v["total"]["blocks"], &v["total"]["bytes"]),
        (&Value::from(1), &Value::from(1), &Value::from(2048)),
        "{out}"
    );
    let stack = &v["stacks"][0];
    assert_eq!(
        (&stack["blocks"], &stack["bytes"]),
        (&Value::from(1), &Value::from(2048)),
        "{out}"
    );
    assert!(has_frame(&stack["stack"], "main"), "{out}");
}

fn is_core(path: &Path) -> bool {
    let data = std::fs::read(path).unwrap();
    data.len() > 64 && data[..4] == *b"\x7fELF" && u16::from_le_bytes([data[16], data[17]]) == 4
}

#[test]
fn run_passes_the_exit_status_and_output_through() {
    let out = run(dmem()
        .args(["run", "--"])
        .arg(fixture("launch_status"))
        .args(["exit", "3"]));
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(text(&out.stdout), "launch_status exit 3\n");
    assert_eq!(text(&out.stderr), "", "a plain run adds nothing of its own");
}

#[test]
fn run_reports_death_by_signal_as_128_plus_n() {
    let out = run(dmem()
        .arg("run")
        .arg(fixture("launch_status"))
        .args(["signal", "15"]));
    assert_eq!(out.status.code(), Some(128 + 15));
    let err = text(&out.stderr);
    assert!(err.contains("killed by SIGTERM"), "{err}");
}

#[test]
fn run_with_abort_shutdown_says_the_abort_was_asked_for_and_where_the_core_is() {
    let dir = scratch_dir("launcher-run-core");
    let out = run(dmem()
        .args(["run", "-o", "abort-shutdown", "--"])
        .arg(fixture("driver"))
        .current_dir(&dir));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(134), "{err}");
    assert_eq!(
        err.matches("aborted at exit, as abort-shutdown asks").count(),
        1,
        "{err}"
    );
    let core = reported_core(&err).expect(&err);
    assert!(core.starts_with(&dir), "{}", core.display());
    assert!(is_core(&core), "{} is not a core file", core.display());
    assert!(err.contains("dmem report "), "the next step is named: {err}");
    // The program's own output is untouched.
    assert!(text(&out.stdout).starts_with("ABCDEFG"));
}

/// A `#!` script's core is its interpreter's: the next step names the program the core's notes
/// name, and that command works.
#[test]
fn run_names_the_cores_executable_for_a_script() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("launcher-run-script");
    let script = dir.join("hello.sh");
    std::fs::write(&script, "#!/bin/bash\nwords=(a b c)\necho \"${words[@]}\"\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(dmem()
        .args(["run", "-o", "abort-shutdown", "--"])
        .arg(&script)
        .current_dir(&dir));
    let err = text(&out.stderr);
    let hint = err
        .lines()
        .find_map(|l| l.strip_prefix("dmem: see what it holds: dmem report "))
        .unwrap_or_else(|| panic!("no next step:\n{err}"));
    let (prog, core) = hint.rsplit_once(' ').unwrap();
    assert_eq!(
        Path::new(prog),
        std::fs::canonicalize("/bin/bash").unwrap(),
        "{err}"
    );
    let out = run(dmem().args(["report", prog, core]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("total: "), "{}", text(&out.stdout));
}

#[test]
fn run_core_dir_moves_the_core_there() {
    let dir = scratch_dir("launcher-core-dir");
    let out = run(dmem()
        .args(["run", "-o", "abort-shutdown", "--core-dir", "cores", "--"])
        .arg(fixture("driver"))
        .current_dir(&dir));
    let err = text(&out.stderr);
    let core = reported_core(&err).expect(&err);
    assert_eq!(core.parent(), Some(dir.join("cores").as_path()), "{err}");
    assert!(
        core.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("core.driver."),
        "{err}"
    );
    assert!(is_core(&core));
}

#[test]
fn run_gcore_writes_the_core_through_gdb_and_keeps_the_status() {
    if !gdbrun::have_gdb() {
        return;
    }
    let dir = scratch_dir("launcher-gcore");
    let out = run(dmem()
        .args(["run", "--gcore", "-o", "abort-shutdown", "--core-dir", "."])
        .arg(fixture("driver"))
        .current_dir(&dir));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(134), "{err}");
    assert!(
        text(&out.stdout).starts_with("ABCDEFG"),
        "the program's output still comes through"
    );
    let core = reported_core(&err).expect(&err);
    assert!(is_core(&core), "{err}");
    let report = run(dmem()
        .arg("report")
        .arg(fixture("driver"))
        .arg(&core)
        .args(["summary", "--json"]));
    assert!(report.status.success(), "{}", text(&report.stderr));
    check_driver_summary(&text(&report.stdout));

    let out = run(dmem()
        .args(["run", "--gcore", "--"])
        .arg(fixture("launch_status"))
        .args(["exit", "5"]));
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "launch_status exit 5\n");
}

#[test]
fn report_prints_the_summary_alone() {
    let dir = scratch_dir("launcher-report");
    let core = make_core(&dir, &fixture("driver"), &[], "abort-shutdown", &lib_path());
    let out = run(dmem().arg("report").arg(fixture("driver")).arg(&core));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    // The report is the summary's text alone: the leaked block's stack, down to main, and the
    // total (the freed block is not live).
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with("stack 1: 2048 bytes in 1 block ")),
        "{stdout}"
    );
    assert!(
        lines.iter().any(|l| l.trim_start().starts_with("main")),
        "{stdout}"
    );
    assert_eq!(lines.last(), Some(&DRIVER_TOTAL), "{stdout}");
    for noise in [
        "Core was generated",
        "Program terminated",
        "[New LWP",
        "#0 ",
        "libthread_db",
        "warning:",
    ] {
        assert!(
            !stdout.contains(noise) && !stderr.contains(noise),
            "gdb's '{noise}' leaked:\n{stdout}{stderr}"
        );
    }
}

#[test]
fn report_passes_subcommands_and_their_flags_through() {
    let dir = scratch_dir("launcher-report-sub");
    let core = make_core(&dir, &fixture("driver"), &[], "abort-shutdown", &lib_path());
    let report = |words: &[&str]| {
        let out = run(dmem().arg("report").arg(fixture("driver")).arg(&core).args(words));
        assert!(out.status.success(), "{words:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let out = report(&["stacks", "--json"]);
    let stacks = json(&out);
    assert_eq!(stacks["command"], "stacks", "{out}");
    let blocks = stacks["blocks"].as_array().expect(&out);
    assert_eq!(blocks.len(), 1, "one live block: {out}");
    assert_eq!(blocks[0]["size"], 2048, "{out}");
    assert!(has_frame(&blocks[0]["stack"], "main"), "{out}");
    let out = report(&["walk", "--json"]);
    let walk = json(&out);
    // The one address walk lists is the block's, and whatis finds that block at it.
    assert_eq!(
        walk["addrs"],
        Value::from(vec![blocks[0]["addr"].clone()]),
        "{out}"
    );
    let addr = blocks[0]["addr"].as_str().expect(&out);
    let out = report(&["whatis", "--json", addr]);
    let whatis = json(&out);
    assert_eq!(
        (&whatis["block"]["size"], &whatis["block"]["offset"]),
        (&Value::from(2048), &Value::from(0)),
        "{out}"
    );
    // The gdb side's own help comes through `dmem report help`.
    let help = run(dmem().args(["report", "help", "summary"]));
    assert!(
        help.status.success() && text(&help.stdout).contains("summary"),
        "{}",
        text(&help.stderr)
    );
}

#[test]
fn report_errors_are_one_line() {
    let dir = scratch_dir("launcher-report-error");
    let core = make_core(&dir, &fixture("driver"), &[], "abort-shutdown", &lib_path());
    let out = run(dmem()
        .arg("report")
        .arg(fixture("driver"))
        .arg(&core)
        .arg("no-such-subcommand"));
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("dmem report: "), "{err}");
    assert_eq!(text(&out.stdout), "");
}

/// Every title of the SVG (one per frame box), after checking the whole document parses.
fn svg_titles(svg: &str) -> Vec<String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(svg);
    let (mut titles, mut in_title, mut root) = (Vec::new(), false, None);
    loop {
        match reader.read_event() {
            Err(e) => panic!("the SVG is not well-formed at {}: {e}", reader.buffer_position()),
            Ok(Event::Eof) => break,
            Ok(Event::Start(e)) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                root.get_or_insert(name.clone());
                in_title = name == "title";
            }
            Ok(Event::Text(t)) if in_title => titles.push(String::from_utf8_lossy(&t).into_owned()),
            Ok(Event::End(_)) => in_title = false,
            Ok(_) => {}
        }
    }
    assert_eq!(root.as_deref(), Some("svg"));
    titles
}

#[test]
fn flamegraph_draws_a_well_formed_svg_of_the_stacks() {
    let dir = scratch_dir("launcher-flamegraph");
    let core = make_core(&dir, &fixture("launch_tree"), &[], "abort-shutdown", &lib_path());
    let svg = dir.join("out.svg");
    let out = run(dmem()
        .arg("flamegraph")
        .arg(fixture("launch_tree"))
        .arg(&core)
        .arg("-o")
        .arg(&svg));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let titles = svg_titles(&std::fs::read_to_string(&svg).unwrap());
    let frame = |name: &str| {
        titles
            .iter()
            .find(|t| t.starts_with(&format!("{name} (")))
            .unwrap_or_else(|| panic!("no frame {name} in {titles:?}"))
            .clone()
    };
    // 64 blocks of 1000 bytes under build_tree, 100 under make_label, all under main.
    assert!(frame("main").starts_with("main (64,100 bytes"), "{titles:?}");
    assert!(
        frame("build_tree").starts_with("build_tree (64,000 bytes"),
        "{titles:?}"
    );
    assert!(
        frame("make_node").starts_with("make_node (64,000 bytes"),
        "{titles:?}"
    );
    assert!(
        frame("make_label").starts_with("make_label (100 bytes"),
        "{titles:?}"
    );
}

#[test]
fn flamegraph_of_leaks_draws_only_what_nothing_points_to() {
    let dir = scratch_dir("launcher-flamegraph-leaks");
    let core = make_core(&dir, &fixture("launch_tree"), &[], "abort-shutdown", &lib_path());
    let svg = dir.join("leaks.svg");
    let out = run(dmem()
        .arg("flamegraph")
        .arg(fixture("launch_tree"))
        .arg(&core)
        .args(["--leaks", "-o"])
        .arg(&svg));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let titles = svg_titles(&std::fs::read_to_string(&svg).unwrap());
    // The label is still held by a global; the nodes were dropped one by one as the global moved
    // on (a conservative scan may still find the newest in a dead stack slot, so no exact count).
    assert!(titles.iter().any(|t| t.starts_with("make_node (")), "{titles:?}");
    assert!(titles.iter().any(|t| t.starts_with("main (")), "{titles:?}");
    assert!(!titles.iter().any(|t| t.starts_with("make_label")), "{titles:?}");
}

#[test]
fn demo_prints_the_leak_report_of_the_example() {
    let dir = scratch_dir("launcher-demo");
    let out = run(dmem().args(["demo", "--dir"]).arg(&dir));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}{stdout}", text(&out.stderr));
    assert!(
        stdout.contains("$ dmem run -o abort-shutdown -- ./driver"),
        "{stdout}"
    );
    assert!(stdout.contains("$ dmem report ./driver core"), "{stdout}");
    assert!(stdout.lines().any(|l| l == DRIVER_TOTAL), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.trim_start().starts_with("main")),
        "{stdout}"
    );
    assert!(is_core(&dir.join("core")));
    assert!(
        stdout.contains("$ cc -g -O2 -o driver driver.c"),
        "the example is compiled in view: {stdout}"
    );

    // Without a C compiler there is no example to run: one line says so.
    let empty = dir.join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let out = run(dmem().args(["demo", "--dir"]).arg(&dir).env("PATH", &empty));
    let err = text(&out.stderr);
    assert_eq!((out.status.code(), err.lines().count()), (Some(1), 1), "{err}");
    assert!(err.contains("no C compiler 'cc'"), "{err}");
}

#[test]
fn install_lays_out_a_prefix_that_works_on_its_own() {
    if !gdbrun::have_gdb() {
        return;
    }
    let dir = scratch_dir("launcher-install");
    let prefix = dir.join("prefix");
    let out = run(dmem().args(["install", "--prefix"]).arg(&prefix));
    assert!(out.status.success(), "{}", text(&out.stderr));
    for f in [
        "bin/dmem",
        "lib/libdmem.so",
        "lib/libdmem.so-gdb.py",
        "share/dmem/dmem.py",
        "share/dmem/dmemlib/engine.py",
    ] {
        assert!(
            prefix.join(f).is_file(),
            "{f} is missing; install said:\n{}",
            text(&out.stdout)
        );
    }

    // A manual page per command, rendered from the same declarations as its --help: the
    // page of `leaks` carries the summary line of `dmem leaks --help` and every long option it
    // lists, and the main page names every command.
    let help = text(&run(dmem().args(["leaks", "--help"])).stdout);
    let page = man_page(&prefix, "dmem-leaks");
    let about = help
        .lines()
        .find(|l| !l.is_empty() && !l.starts_with("Usage:"))
        .unwrap_or_default();
    assert!(page.contains(about), "dmem-leaks.1 lacks {about:?}:\n{page}");
    let options: Vec<&str> = help
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()))
        .filter(|w| !w.is_empty() && w.split('=').count() == 1)
        .collect();
    assert!(options.len() > 5, "no options in dmem leaks --help:\n{help}");
    for o in options {
        assert!(
            page.contains(&format!("--{o}")),
            "dmem-leaks.1 lacks --{o}:\n{page}"
        );
    }
    let main_page = man_page(&prefix, "dmem");
    for sub in ["leaks", "summary", "serve", "install"] {
        assert!(man_page(&prefix, &format!("dmem-{sub}")).contains(sub));
        assert!(main_page.contains(&format!("dmem-{sub}(1)")), "{main_page}");
    }

    // The installed launcher uses the installed pieces, here with a home of its own.
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let installed = || {
        let mut cmd = Command::new(prefix.join("bin/dmem"));
        cmd.env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("LD_PRELOAD");
        cmd.env_remove("DMEM_LIB")
            .env_remove("DMEM_GDB_SCRIPT")
            .current_dir(&dir);
        cmd
    };
    let demo = run(installed().args(["demo", "--dir"]).arg(dir.join("demo")));
    assert!(demo.status.success(), "{}", text(&demo.stderr));
    assert!(
        text(&demo.stdout).lines().any(|l| l == DRIVER_TOTAL),
        "{}",
        text(&demo.stdout)
    );

    // A core of a program run by the installed launcher maps the installed library, so gdb
    // loads the dmem commands by itself once the directory is in its safe path.
    let driver = fixture("driver");
    let out = run(installed()
        .args(["run", "-o", "abort-shutdown", "--core-dir", "cores", "--"])
        .arg(&driver));
    let err = text(&out.stderr);
    let core = reported_core(&err).expect(&err);
    let lib_dir = prefix.join("lib");
    let gdb = run(Command::new("gdb")
        .args(["-batch", "-nx", "-q", "-iex"])
        .arg(format!("add-auto-load-safe-path {}", lib_dir.display()))
        .arg(&driver)
        .arg(&core)
        .args(["-ex", "dmem summary"]));
    // gdb's own messages share its standard output, so the summary's total line is looked for.
    assert!(
        text(&gdb.stdout).lines().any(|l| l == DRIVER_TOTAL),
        "{}{}",
        text(&gdb.stdout),
        text(&gdb.stderr)
    );

    // The launcher answers from the installed pieces alone.
    let report = run(installed()
        .arg("report")
        .arg(&driver)
        .arg(&core)
        .args(["summary", "--json"]));
    assert!(report.status.success(), "{}", text(&report.stderr));
    check_driver_summary(&text(&report.stdout));
}

#[test]
fn bad_arguments_get_one_line_naming_the_problem() {
    let driver = fixture("driver");
    let d = driver.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["rnu"], "unknown subcommand 'rnu'"),
        (&["run"], "no program to run"),
        (&["run", "-o"], "-o needs"),
        (&["run", "--frobnicate", "--", d], "unknown option '--frobnicate'"),
        (&["run", "--", "/no/such/program"], "cannot run"),
        (
            &["report"],
            "which process image? Name PROG CORE, a core file alone or a PID",
        ),
        (
            &["report", d],
            "is a program: a core file of it must follow (PROG CORE)",
        ),
        (&["report", d, "/no/such/core"], "/no/such/core: no such file"),
        (&["report", d, d], "not a core file"),
        (&["flamegraph", d, d], "-o OUT.svg"),
        (&["demo", "--frobnicate"], "unknown option"),
        (&["install", "somewhere"], "--prefix"),
        (&["help", "nothing"], "not a subcommand"),
        (&["top"], "PID"),
        (&["top", "1", "--limit", "many"], "many"),
        (&["completions", "tcsh"], "tcsh"),
    ];
    for (args, expect) in cases {
        let out = run(dmem().args(*args));
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(err.lines().count(), 1, "{args:?} gave:\n{err}");
        assert!(err.starts_with("dmem"), "{args:?}: {err}");
        assert!(err.contains(expect), "{args:?}: expected '{expect}' in: {err}");
        assert_eq!(text(&out.stdout), "", "{args:?}");
    }
    let out = run(dmem()
        .args(["run", "--"])
        .arg(&driver)
        .env("DMEM_LIB", "/no/such/libdmem.so"));
    let err = text(&out.stderr);
    assert_eq!((out.status.code(), err.lines().count()), (Some(1), 1), "{err}");
    assert!(err.contains("DMEM_LIB"), "{err}");
}

#[test]
fn every_subcommand_has_help() {
    for sub in [
        "run",
        "report",
        "flamegraph",
        "top",
        "demo",
        "install",
        "completions",
    ] {
        for args in [vec![sub, "--help"], vec![sub, "-h"], vec!["help", sub]] {
            let out = run(dmem().args(&args));
            assert!(out.status.success(), "{args:?}");
            assert!(
                text(&out.stdout).starts_with(&format!("Usage: dmem {sub}")),
                "{args:?}"
            );
            assert_eq!(text(&out.stderr), "", "{args:?}");
        }
    }
    let out = run(dmem().arg("--help"));
    assert!(out.status.success() && text(&out.stdout).contains("dmem run"));
    // After the program's name, --help is the program's.
    let out = run(dmem().arg("run").arg(fixture("launch_status")).arg("--help"));
    assert_eq!(text(&out.stdout), "launch_status --help \n");
}

#[test]
fn completions_cover_every_subcommand() {
    let out = run(dmem().args(["completions", "bash"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let script = text(&out.stdout);
    for sub in ["run", "report", "flamegraph", "top", "demo", "install"] {
        assert!(script.contains(sub), "no {sub} in the bash completions");
    }
    assert!(script.contains("--interval"), "options are completed too");
}

/// Every analysis command answers from the `dmem` binary alone: with a PATH that holds no gdb
/// and no python3 (only a C compiler, for the demo's example), each one succeeds on a core of
/// the driver, from a program and its core, a core alone and a saved snapshot.
#[test]
fn every_command_answers_with_no_gdb_or_python_on_path() {
    let dir = scratch_dir("launcher-alone");
    let core = make_core(&dir, &fixture("driver"), &[], "abort-shutdown", &lib_path());
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // The compiler and the assembler and linker it runs.
    for tool in ["cc", "as", "ld"] {
        let path = common::which(tool).unwrap_or_else(|| panic!("{tool} on PATH"));
        std::os::unix::fs::symlink(path, bin.join(tool)).unwrap();
    }
    let prog = fixture("driver");
    let bare = |words: &[&std::ffi::OsStr]| {
        let out = run(dmem().args(words).env("PATH", &bin).current_dir(&dir));
        let stderr = text(&out.stderr);
        assert!(
            out.status.success(),
            "{words:?} with no gdb or python3 on PATH: {stderr}"
        );
        for tool in ["gdb", "python"] {
            assert!(!stderr.contains(tool), "{words:?} mentions {tool}: {stderr}");
        }
        text(&out.stdout)
    };
    let (p, c) = (prog.as_os_str(), core.as_os_str());
    let stacks = json(&bare(&["stacks".as_ref(), p, c, "--json".as_ref()]));
    let addr = stacks["blocks"][0]["addr"].as_str().expect("a block").to_owned();
    let addr: &std::ffi::OsStr = addr.as_ref();
    let svg = dir.join("flame.svg");
    let pb = dir.join("profile.pb.gz");
    for words in [
        vec!["report".as_ref(), p, c],
        vec!["summary".as_ref(), p, c],
        vec!["summary".as_ref(), c],
        vec!["leaks".as_ref(), p, c, "--json".as_ref()],
        vec!["whatis".as_ref(), p, c, addr],
        vec!["why".as_ref(), p, c, addr],
        vec!["types".as_ref(), p, c],
        vec!["words".as_ref(), p, c],
        vec!["verify".as_ref(), p, c],
        vec!["flamegraph".as_ref(), p, c, "-o".as_ref(), svg.as_os_str()],
        vec!["snapshot".as_ref(), p, c, "-o".as_ref(), pb.as_os_str()],
        vec!["diff".as_ref(), pb.as_os_str(), p, c],
        vec!["demo".as_ref(), "--dir".as_ref(), dir.join("demo").as_os_str()],
    ] {
        bare(&words);
    }
    check_driver_summary(&bare(&["summary".as_ref(), p, c, "--json".as_ref()]));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
}

/// The installed manual page `name`, as `man` shows it (rendered by nroff), hyphens plain.
fn man_page(prefix: &Path, name: &str) -> String {
    let file = prefix.join(format!("share/man/man1/{name}.1"));
    assert!(file.is_file(), "no manual page {}", file.display());
    if !have_tool("nroff") {
        return std::fs::read_to_string(&file).unwrap();
    }
    let out = run(Command::new("nroff")
        .args(["-man", "-Tutf8", "-rLL=200n", "-rHY=0"])
        .arg(&file)
        .env("GROFF_NO_SGR", "1"));
    assert!(
        out.status.success(),
        "nroff {}: {}",
        file.display(),
        text(&out.stderr)
    );
    // nroff overstrikes for bold and underline, and prints U+2010 for a hyphen.
    let plain: String = text(&out.stdout).replace(['\u{2010}', '\u{2212}'], "-");
    let mut clean = String::new();
    let mut chars = plain.chars().peekable();
    while let Some(c) = chars.next() {
        if chars.peek() == Some(&'\u{8}') {
            chars.next();
            continue;
        }
        clean.push(c);
    }
    clean
}
