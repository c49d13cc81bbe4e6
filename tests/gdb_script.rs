//! The gdb companion, `gdb/dmem.py`, on real core files of real programs run with the real
//! library preloaded, and the unit tests of its pure-Python core.

mod common;
#[path = "common/gdb.rs"]
mod gdbrun;

use common::{fixture, lib_path, make_core, scratch_dir, which};
use std::path::{Path, PathBuf};

/// One block as `dmem stacks` prints it.
#[derive(Debug, Clone)]
struct Listed {
    addr: u64,
    size: u64,
    tid: u64,
    frames: Vec<String>,
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("not hex: {s:?}"))
}

/// Parses `ADDR: SIZE bytes allocated by thread TID at:` lines and the indented frames after
/// each.
fn parse_stacks(out: &str) -> Vec<Listed> {
    let mut blocks: Vec<Listed> = Vec::new();
    for line in out.lines() {
        if let Some(frame) = line.strip_prefix("    ") {
            if let Some(b) = blocks.last_mut() {
                b.frames.push(frame.to_owned());
            }
            continue;
        }
        let Some(rest) = line.strip_suffix(" at:") else {
            continue;
        };
        let Some((addr, rest)) = rest.split_once(": ") else {
            continue;
        };
        let Some((size, tid)) = rest.split_once(" bytes allocated by thread ") else {
            continue;
        };
        blocks.push(Listed {
            addr: hex(addr),
            size: size.parse().unwrap(),
            tid: tid.parse().unwrap(),
            frames: Vec::new(),
        });
    }
    blocks
}

/// The `total:` line of `dmem summary`.
fn total_line(out: &str) -> &str {
    out.lines()
        .find(|l| l.starts_with("total: "))
        .unwrap_or_else(|| panic!("no total line in:\n{out}"))
}

/// `key VALUE...` lines a fixture wrote to its report file.
fn report(path: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn python_unit_tests_pass() {
    // Debian's python3 (the one gdb embeds) and whatever python3 is first on PATH, which may be
    // another build: the module must work on both.
    let mut pythons: Vec<PathBuf> = Vec::new();
    for p in [Some(PathBuf::from("/usr/bin/python3")), which("python3")]
        .into_iter()
        .flatten()
    {
        if !p.exists() {
            continue;
        }
        let real = std::fs::canonicalize(&p).unwrap_or(p.clone());
        if !pythons
            .iter()
            .any(|q| std::fs::canonicalize(q).unwrap_or(q.clone()) == real)
        {
            pythons.push(p);
        }
    }
    assert!(!pythons.is_empty(), "no python3 to run the unit tests with");
    for py in pythons {
        let (ok, report) = gdbrun::python_unit_tests(&py);
        assert!(ok, "unit tests failed under {}:\n{report}", py.display());
        let ran: usize = report
            .lines()
            .find_map(|l| l.strip_prefix("Ran ")?.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        assert!(
            ran >= 10,
            "only {ran} unit tests ran under {}:\n{report}",
            py.display()
        );
    }
}

#[test]
fn driver_core_holds_exactly_the_leaked_block() {
    if !gdbrun::have_gdb() {
        return;
    }
    let dir = scratch_dir("gdb_driver");
    let prog = fixture("driver");
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib_path());
    let folded = dir.join("stacks.folded");
    let s = gdbrun::on_core(
        &dir,
        &prog,
        &core,
        &[
            "dmem stacks",
            "show_alloc_stacks",
            "dmem walk",
            "walk_alloc_bufs",
            "walk_alloc_entries",
            "dmem walk --headers",
            "dmem verify",
            "dmem summary",
            "dmem stats",
            &format!("dmem folded {}", folded.display()),
        ],
    );
    s.assert_no_traceback();
    let blocks = parse_stacks(s.out(0));
    let big: Vec<&Listed> = blocks.iter().filter(|b| b.size == 2048).collect();
    assert_eq!(big.len(), 1, "want exactly one 2048-byte block:\n{}", s.out(0));
    assert!(
        big[0].frames.iter().any(|f| f.starts_with("main+")),
        "main not in its stack:\n{}",
        s.out(0)
    );
    assert!(
        big[0].frames[0].starts_with("main+"),
        "frame 0 should be main, the caller of malloc:\n{}",
        s.out(0)
    );
    assert!(
        !blocks.iter().any(|b| b.size == 512),
        "the freed 512-byte block is listed:\n{}",
        s.out(0)
    );
    assert_eq!(s.out(1), s.out(0), "show_alloc_stacks differs from dmem stacks");

    let mut addrs: Vec<u64> = blocks.iter().map(|b| b.addr).collect();
    addrs.sort_unstable();
    let walked: Vec<u64> = s.out(2).split_whitespace().map(hex).collect();
    assert_eq!(walked, addrs);
    assert_eq!(s.out(3), s.out(2), "walk_alloc_bufs differs from dmem walk");
    let headers: Vec<u64> = s.out(4).split_whitespace().map(hex).collect();
    assert_eq!(headers, addrs.iter().map(|a| a - 112).collect::<Vec<_>>());
    assert_eq!(s.out(5), s.out(4));

    assert!(s.out(6).contains("no problems found"), "{}", s.out(6));
    let total = total_line(s.out(7));
    let bytes: u64 = blocks.iter().map(|b| b.size).sum();
    assert!(
        total.starts_with(&format!("total: {bytes} bytes in {} block", blocks.len())),
        "{total}"
    );
    assert!(
        s.out(8).contains(&format!("live blocks: {}\n", blocks.len())),
        "{}",
        s.out(8)
    );
    assert!(s.out(8).contains("recording: on"), "{}", s.out(8));

    // Folded stacks, outermost frame first, ending in main for the leak.
    let text = std::fs::read_to_string(&folded).expect("folded file written");
    assert!(
        text.lines().any(|l| l
            .rsplit_once(' ')
            .is_some_and(|(st, n)| n == "2048" && st.ends_with(";main"))),
        "no `...;main 2048` line in the folded stacks:\n{text}"
    );
    for l in text.lines() {
        let (_, n) = l.rsplit_once(' ').expect("folded line");
        n.parse::<u64>()
            .unwrap_or_else(|_| panic!("bad folded line {l:?}"));
    }

    // An interior pointer, and the JSON of every command.
    let a = big[0].addr;
    let s = gdbrun::on_core(
        &dir,
        &prog,
        &core,
        &[
            &format!("dmem whatis 0x{:x}", a + 100),
            &format!("dmem whatis 0x{:x}", a + 2048 + 4096 * 64),
            "dmem stacks --json",
            "dmem summary --json",
            "dmem walk --json",
            "dmem stats --json",
            "dmem verify --json",
            &format!("dmem whatis --json 0x{:x}", a + 100),
        ],
    );
    s.assert_no_traceback();
    assert!(
        s.out(0)
            .contains(&format!("100 bytes into the 2048-byte block 0x{a:x}")),
        "whatis on an interior pointer:\n{}",
        s.out(0)
    );
    assert!(s.out(0).contains("\n    main+"), "{}", s.out(0));
    assert!(s.out(1).contains("not inside any live block"), "{}", s.out(1));
    let q = gdbrun::json_query;
    assert_eq!(q(s.out(2), "[b['size'] for b in d['blocks']].count(2048)"), "1");
    assert_eq!(
        q(
            s.out(2),
            "any(f['function'] == 'main' for b in d['blocks'] if b['size'] == 2048 for f in b['stack'])"
        ),
        "True"
    );
    assert_eq!(q(s.out(2), "512 in [b['size'] for b in d['blocks']]"), "False");
    assert_eq!(
        q(s.out(3), "(d['total']['blocks'], d['total']['bytes'])"),
        format!("({}, {bytes})", blocks.len())
    );
    assert_eq!(q(s.out(4), "len(d['addrs'])"), blocks.len().to_string());
    assert_eq!(
        q(s.out(5), "d['counters']['live_blocks']"),
        blocks.len().to_string()
    );
    assert_eq!(q(s.out(6), "d['ok']"), "True");
    assert_eq!(
        q(s.out(7), "(d['block']['offset'], d['block']['size'])"),
        "(100, 2048)"
    );
}

#[test]
fn threads_get_their_own_blocks() {
    if !gdbrun::have_gdb() {
        return;
    }
    let dir = scratch_dir("gdb_threads");
    let prog = fixture("gdb_threads");
    let rep_path = dir.join("report.txt");
    let core = make_core(
        &dir,
        &prog,
        &[rep_path.to_str().unwrap()],
        "abort-shutdown",
        &lib_path(),
    );
    let rep = report(&rep_path);
    let tid_of = |k: usize| -> u64 {
        rep.iter()
            .find(|l| l[0] == "thread" && l[1] == k.to_string())
            .expect("thread line")[3]
            .parse()
            .unwrap()
    };
    let main_tid: u64 = rep.iter().find(|l| l[0] == "main").expect("main line")[2]
        .parse()
        .unwrap();
    let big = hex(&rep.iter().find(|l| l[0] == "block").expect("block line")[1]);

    let mut cmds = vec![
        "dmem stacks".to_owned(),
        "dmem stats".to_owned(),
        format!("dmem whatis 0x{:x}", big + 1234),
    ];
    for k in 0..4 {
        cmds.push(format!(
            "dmem summary --thread {} --match threads_alloc_blocks",
            tid_of(k)
        ));
    }
    let cmd_refs: Vec<&str> = cmds.iter().map(String::as_str).collect();
    let s = gdbrun::on_core(&dir, &prog, &core, &cmd_refs);
    s.assert_no_traceback();

    let blocks = parse_stacks(s.out(0));
    for k in 0..4u64 {
        let tid = tid_of(k as usize);
        let mine: Vec<&Listed> = blocks.iter().filter(|b| b.size == 1000 + k).collect();
        assert_eq!(
            mine.len() as u64,
            k + 1,
            "thread {k} leaked {} blocks:\n{}",
            k + 1,
            s.out(0)
        );
        for b in &mine {
            assert_eq!(
                b.tid, tid,
                "block 0x{:x} of thread {k} attributed to {}",
                b.addr, b.tid
            );
            assert!(b.frames[0].starts_with("threads_alloc_blocks+"), "{:?}", b.frames);
            assert!(
                b.frames.iter().any(|f| f.starts_with("worker+")),
                "{:?}",
                b.frames
            );
        }
        let total = total_line(s.out(3 + k as usize));
        assert_eq!(
            total,
            format!(
                "total: {} bytes in {} block{} from 1 stack",
                (k + 1) * (1000 + k),
                k + 1,
                if k == 0 { "" } else { "s" }
            )
        );
        assert!(
            s.out(1).lines().any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    tid.to_string(),
                    (k + 1).to_string(),
                    ((k + 1) * (1000 + k)).to_string()
                ]),
            "stats has no row for thread {tid}:\n{}",
            s.out(1)
        );
    }
    let big_block = blocks
        .iter()
        .find(|b| b.addr == big)
        .expect("the 5000-byte block is listed");
    assert_eq!((big_block.size, big_block.tid), (5000, main_tid));
    assert!(
        s.out(2)
            .contains(&format!("1234 bytes into the 5000-byte block 0x{big:x}")),
        "{}",
        s.out(2)
    );
    assert!(
        s.out(2).contains(&format!("allocated by thread {main_tid} at:")),
        "{}",
        s.out(2)
    );
}

#[test]
fn stripped_library_works() {
    if !gdbrun::have_gdb() {
        return;
    }
    let dir = scratch_dir("gdb_stripped");
    let lib = dir.join("libdmem.so");
    std::fs::copy(lib_path(), &lib).expect("copy libdmem.so");
    let status = std::process::Command::new("strip")
        .arg(&lib)
        .status()
        .expect("run strip");
    assert!(status.success());
    if which("readelf").is_some() {
        let out = common::output(std::process::Command::new("readelf").arg("-SW").arg(&lib));
        let sections = common::text(&out.stdout);
        assert!(
            !sections.contains(".symtab") && !sections.contains(".debug_info"),
            "not stripped:\n{sections}"
        );
    }
    let prog = fixture("driver");
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib);
    let s = gdbrun::on_core(
        &dir,
        &prog,
        &core,
        &["info sharedlibrary", "dmem summary", "dmem verify"],
    );
    s.assert_no_traceback();
    assert!(
        s.out(0).contains(lib.to_str().unwrap()),
        "gdb did not load the stripped copy:\n{}",
        s.out(0)
    );
    let summary = s.out(1);
    let idx = summary
        .find(" 2048 bytes in 1 block")
        .unwrap_or_else(|| panic!("no 2048-byte stack:\n{summary}"));
    assert!(
        summary[idx..]
            .lines()
            .nth(1)
            .unwrap_or("")
            .starts_with("    main+"),
        "{summary}"
    );
    assert!(s.out(2).contains("no problems found"), "{}", s.out(2));
}

#[test]
fn library_gone_from_its_path_is_found_in_the_core() {
    if !gdbrun::have_gdb() {
        return;
    }
    // The usual situation with a core from elsewhere: gdb cannot open libdmem.so where the
    // process had it, so there is no symbol; the descriptor is still in the core.
    let dir = scratch_dir("gdb_lib_gone");
    let lib = dir.join("libdmem.so");
    std::fs::copy(lib_path(), &lib).expect("copy libdmem.so");
    let prog = fixture("driver");
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib);
    std::fs::remove_file(&lib).unwrap();
    let s = gdbrun::on_core(&dir, &prog, &core, &["dmem summary"]);
    s.assert_no_traceback();
    assert!(
        s.out(0)
            .contains("is not there any more; its layout descriptor was found in the core by its magic"),
        "{}",
        s.out(0)
    );
    let summary = s.out(0);
    let idx = summary
        .find(" 2048 bytes in 1 block")
        .unwrap_or_else(|| panic!("no 2048-byte stack:\n{summary}"));
    assert!(
        summary[idx..]
            .lines()
            .nth(1)
            .unwrap_or("")
            .starts_with("    main+"),
        "{summary}"
    );
}

#[test]
fn corrupt_lists_are_reported_not_crashed_on() {
    if !gdbrun::have_gdb() {
        return;
    }
    let prog = fixture("gdb_corrupt");
    for mode in ["unmapped", "cycle", "magic"] {
        let dir = scratch_dir(&format!("gdb_corrupt_{mode}"));
        let rep_path = dir.join("report.txt");
        let core = make_core(
            &dir,
            &prog,
            &[mode, rep_path.to_str().unwrap()],
            "abort-shutdown",
            &lib_path(),
        );
        let rep = report(&rep_path);
        let hdr = |k: usize| -> u64 {
            hex(&rep
                .iter()
                .find(|l| l[0] == "hdr" && l[1] == k.to_string())
                .expect("hdr line")[2])
        };
        let s = gdbrun::on_core(
            &dir,
            &prog,
            &core,
            &["dmem verify", "dmem summary", "dmem stacks", "dmem verify --json"],
        );
        s.assert_no_traceback();
        let verify = s.out(0);
        let (want, walked) = match mode {
            // b4, b3, b2 are walked, then b2's next leads nowhere.
            "unmapped" => (format!("next of 0x{:x} points to 0x10000, which is unreadable", hdr(2)), 3),
            // b4, b3, b2, b1, then back to b3, whose prev is b4.
            "cycle" => (
                format!("header 0x{:x}, reached from 0x{:x}: its prev is 0x{:x}, not 0x{:x} (it was walked already", hdr(3), hdr(1), hdr(4), hdr(1)),
                4,
            ),
            // b4, then b3's magic is wrong.
            _ => (format!("header 0x{:x}, reached from 0x{:x}: bad magic 0x41414141", hdr(3), hdr(4)), 1),
        };
        assert!(
            verify.contains(&want),
            "{mode}: verify should say {want:?}:\n{verify}"
        );
        assert!(verify.contains("problem"), "{verify}");
        assert!(!verify.contains("no problems found"), "{verify}");
        assert!(
            s.out(1).contains("warning: 1 problem in the lists"),
            "{mode}:\n{}",
            s.out(1)
        );
        let ours = parse_stacks(s.out(2)).iter().filter(|b| b.size == 300).count();
        assert_eq!(ours, walked, "{mode}: blocks before the break:\n{}", s.out(2));
        assert_eq!(gdbrun::json_query(s.out(3), "d['ok']"), "False");
    }
}

#[test]
fn a_bare_core_answers_through_glibc_and_a_damaged_descriptor_gets_one_line() {
    if !gdbrun::have_gdb() {
        return;
    }
    let dir = scratch_dir("gdb_no_libdmem");
    let prog = fixture("driver");
    let plain = gdbrun::plain_core(&dir, &prog);
    // A program that ran without libdmem is read through glibc's heap: what needs no stack
    // answers, what needs stacks says so in one line.
    let cmds = ["dmem summary", "dmem verify", "dmem whatis 0x1000", "dmem stacks"];
    let s = gdbrun::on_core(&dir, &prog, &plain, &cmds);
    s.assert_no_traceback();
    let errors: Vec<&str> = s.stderr.lines().filter(|l| l.starts_with("dmem:")).collect();
    assert_eq!(errors.len(), 1, "one error line, for stacks alone:\n{}", s.stderr);
    assert!(
        errors[0].contains("ran without libdmem, so it has no allocation stacks"),
        "{}",
        errors[0]
    );
    assert!(
        s.out(0).contains("total:"),
        "summary answers from glibc's heap:\n{}\n{}",
        s.out(0),
        s.stderr
    );

    // A real core whose descriptor was overwritten, as a wild write might: bad magic, then a
    // version this script does not know.
    let dir = scratch_dir("gdb_bad_descriptor");
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib_path());
    let bytes = std::fs::read(&core).unwrap();
    let mut want = b"DMEMLAYT".to_vec();
    want.extend_from_slice(&common::descriptor::VERSION.to_le_bytes());
    let at: Vec<usize> = bytes
        .windows(16)
        .enumerate()
        .filter(|(_, w)| *w == want.as_slice())
        .map(|(i, _)| i)
        .collect();
    assert!(!at.is_empty(), "the core holds no dmem_layout descriptor");
    let too_new = format!(
        "is version 9; this dmem reads versions 1 to {}",
        common::descriptor::VERSION
    );
    for (name, patch_off, patch, msg) in [
        ("magic", 7, b'X', "no descriptor magic at"),
        ("version", 8, 9u8, too_new.as_str()),
    ] {
        let mut damaged = bytes.clone();
        for &i in &at {
            damaged[i + patch_off] = patch;
        }
        let path = dir.join(format!("core.bad-{name}"));
        std::fs::write(&path, damaged).unwrap();
        let s = gdbrun::on_core(&dir, &prog, &path, &["dmem summary"]);
        s.assert_no_traceback();
        let errors: Vec<&str> = s.stderr.lines().filter(|l| l.starts_with("dmem:")).collect();
        assert_eq!(errors.len(), 1, "{}", s.stderr);
        assert!(errors[0].contains(msg), "{name}: {}", errors[0]);
    }
}

/// The gdb commands are the launcher's engine: on the same core, every command prints the same
/// in gdb as from the launcher, text and JSON.
#[test]
fn many_blocks_gdb_and_the_launcher_agree() {
    if !gdbrun::have_gdb() {
        return;
    }
    let dir = scratch_dir("gdb_many");
    let prog = fixture("gdb_many");
    let core = make_core(&dir, &prog, &["4000", "700"], "abort-shutdown", &lib_path());
    let cmds = [
        "summary --match ^many_ --limit 0",
        "summary",
        "stacks --limit 5",
        "walk",
        "verify",
        "stats --json",
        "leaks --json",
        "leaks --show all",
        "types",
        "words --limit 5",
    ];
    let in_gdb: Vec<String> = cmds.iter().map(|c| format!("dmem {c}")).collect();
    let in_gdb: Vec<&str> = in_gdb.iter().map(String::as_str).collect();
    let s = gdbrun::on_core(&dir, &prog, &core, &in_gdb);
    s.assert_no_traceback();
    let summary = s.out(0);
    // Four call paths, a thousand 700-byte blocks each.
    assert_eq!(
        total_line(summary),
        "total: 2800000 bytes in 4000 blocks from 4 stacks",
        "{summary}"
    );
    assert_eq!(
        summary.matches(": 700000 bytes in 1000 blocks").count(),
        4,
        "{summary}"
    );
    for f in ["many_one+", "many_two+", "many_other+"] {
        assert!(summary.contains(&format!("\n    {f}")), "{f} missing:\n{summary}");
    }
    for (i, c) in cmds.iter().enumerate() {
        let mut words = c.split(' ');
        let mut cmd = common::dmem();
        cmd.arg(words.next().unwrap()).arg(&prog).arg(&core).args(words);
        let out = common::output(&mut cmd);
        assert!(out.status.success(), "dmem {c}: {}", common::text(&out.stderr));
        assert_eq!(
            common::text(&out.stdout),
            s.out(i),
            "gdb and the launcher differ on {c:?}"
        );
    }
}

#[test]
fn live_process_stopped_at_exit() {
    if !gdbrun::have_gdb() {
        return;
    }
    let dir = scratch_dir("gdb_live");
    let prog = fixture("driver");
    let setup = gdbrun::stop_at_exit(Some(&lib_path()), "");
    let s = gdbrun::run(
        &dir,
        &prog,
        None,
        &setup,
        &["dmem stacks", "dmem verify", "continue", "dmem summary"],
        &[],
    );
    s.assert_no_traceback();
    let blocks = parse_stacks(s.out(0));
    let big: Vec<&Listed> = blocks.iter().filter(|b| b.size == 2048).collect();
    assert_eq!(big.len(), 1, "{}", s.out(0));
    assert!(big[0].frames[0].starts_with("main+"), "{:?}", big[0].frames);
    assert!(!blocks.iter().any(|b| b.size == 512));
    assert!(s.out(1).contains("no problems found"), "{}", s.out(1));
    // Once the process has exited there is nothing to read: one line, not a traceback.
    assert!(s.stderr.lines().any(|l| l.starts_with("dmem: ")), "{}", s.stderr);
}

#[test]
fn help_lists_every_subcommand() {
    if !gdbrun::have_gdb() {
        return;
    }
    let dir = scratch_dir("gdb_help");
    let s = gdbrun::run(
        &dir,
        &fixture("driver"),
        None,
        &[],
        &[
            "help dmem",
            "help show_alloc_stacks",
            "help walk_alloc_entries",
            "help dmem summary",
        ],
        &[],
    );
    s.assert_no_traceback();
    for sub in ["stacks", "summary", "walk", "whatis", "verify", "stats", "folded"] {
        let line = s
            .out(0)
            .lines()
            .find(|l| l.starts_with(&format!("dmem {sub} -- ")));
        assert!(
            line.is_some_and(|l| l.len() > 20),
            "no help line for dmem {sub}:\n{}",
            s.out(0)
        );
    }
    assert!(s.out(1).contains("'dmem stacks'"), "{}", s.out(1));
    assert!(s.out(2).contains("'dmem walk --headers'"), "{}", s.out(2));
    assert!(s.out(3).contains("--min-size"), "{}", s.out(3));
}

#[test]
fn folded_leaks_and_addresses_read_alike() {
    if !gdbrun::have_gdb() {
        return;
    }
    // leak_list keeps the address of one orphan XORed with this, out of a scan's sight.
    let hidden = "orphan_single_x ^ 0x5a5a5a5a5a5a5a5a";
    let dir = scratch_dir("gdb_folded_leaks");
    let prog = fixture("leak_list");
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib_path());
    let folded = dir.join("leaks.folded");
    let cmds = [
        // The lost classes, which `folded --leaks` writes.
        "dmem leaks --json --limit 0 --show-leak-kinds=definite,indirect,possible".to_owned(),
        format!("dmem folded --leaks {}", folded.display()),
        format!("dmem whatis --json {hidden}"),
        format!("dmem why --json {hidden}"),
        "dmem whatis --json 'held->next'".to_owned(),
        "dmem why --json held->next".to_owned(),
    ];
    let cmds: Vec<&str> = cmds.iter().map(String::as_str).collect();
    let s = gdbrun::on_core(&dir, &prog, &core, &cmds);
    s.assert_no_traceback();
    let q = gdbrun::json_query;

    // One folded line per leaked stack, outermost frame first, with that stack's bytes.
    let want = q(
        s.out(0),
        "'\\n'.join(sorted(';'.join(reversed([f['function'] or f['pc'] for f in st['stack']])) \
         + ' %d' % st['bytes'] for st in d['stacks']))",
    );
    let text = std::fs::read_to_string(&folded).expect("folded file written");
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines.join("\n"), want, "{text}");
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with(";make_orphan_list;make_list 16000")),
        "{text}"
    );
    assert!(
        s.out(1).starts_with("dmem: wrote 2 stacks (28000 bytes) to "),
        "{}",
        s.out(1)
    );

    // whatis and why take ADDR alike: an expression with blanks, or a quoted one.
    let whatis = q(s.out(2), "d['block']['addr']");
    assert_eq!(q(s.out(3), "d['chain'][-1]['addr']"), whatis);
    let whatis = q(s.out(4), "d['block']['addr']");
    assert_eq!(q(s.out(5), "d['chain'][-1]['addr']"), whatis);
}
