//! Leak classes on real cores, against valgrind on the same binaries: for each leak fixture of
//! LEAKSPEC.md, `valgrind --leak-check=full --show-leak-kinds=all` runs the bare program, the
//! same program runs under libdmem with `abort-shutdown` to leave a core, and `dmem leaks
//! --json` on that core must give valgrind's count of blocks in every class (and its bytes,
//! where the fixture makes no allocation inside libc whose size could differ under libdmem).

mod common;
#[path = "common/gdb.rs"]
mod gdbrun;

use common::{fixture, lib_path, make_core, scratch_dir, text};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The classes as valgrind's LEAK SUMMARY names them, and as `dmem leaks --json` keys them.
const CLASSES: [(&str, &str); 4] = [
    ("definitely lost", "definitely_lost"),
    ("indirectly lost", "indirectly_lost"),
    ("possibly lost", "possibly_lost"),
    ("still reachable", "still_reachable"),
];

/// (blocks, bytes) of each class, in the order of CLASSES.
type Classes = [(u64, u64); 4];

/// valgrind on a fixture that runs for well under a second; a hang fails the test instead.
const VALGRIND_DEADLINE: Duration = Duration::from_secs(300);

/// Runs valgrind's leak check on `prog` (bare, no libdmem) and reads its LEAK SUMMARY.
fn valgrind(prog: &Path) -> Classes {
    let mut child = Command::new("valgrind")
        .args(["--leak-check=full", "--show-leak-kinds=all"])
        .arg(prog)
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn valgrind");
    // valgrind writes its report to stderr: read it on a thread, so a full pipe cannot stall it.
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut s).ok();
        s
    });
    let start = Instant::now();
    while child.try_wait().expect("wait for valgrind").is_none() {
        if start.elapsed() > VALGRIND_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "valgrind did not finish {} within {VALGRIND_DEADLINE:?}",
                prog.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let report = text(&reader.join().unwrap());
    parse_summary(&report).unwrap_or_else(|| panic!("no leak summary from valgrind:\n{report}"))
}

/// `definitely lost: 12,016 bytes in 501 blocks` and the like; all zero when valgrind says
/// every block was freed.
fn parse_summary(report: &str) -> Option<Classes> {
    if report.contains("All heap blocks were freed") {
        return Some([(0, 0); 4]);
    }
    let mut out = [None; 4];
    for line in report.lines() {
        for (k, (name, _)) in CLASSES.iter().enumerate() {
            let Some(rest) = line.split_once(&format!("{name}: ")).map(|(_, r)| r) else {
                continue;
            };
            let n: Vec<u64> = rest
                .replace(',', "")
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            if let [bytes, blocks] = n[..] {
                out[k] = Some((blocks, bytes));
            }
        }
    }
    let [a, b, c, d] = out;
    Some([a?, b?, c?, d?])
}

/// `dmem leaks --json` on the core, as (blocks, bytes) per class.
fn core_classes(s: &gdbrun::Session, i: usize) -> Classes {
    let keys: Vec<String> = CLASSES.iter().map(|(_, k)| format!("'{k}'")).collect();
    let got = gdbrun::json_query(
        s.out(i),
        &format!(
            "' '.join('%d %d' % (d[k]['blocks'], d[k]['bytes']) for k in ({}))",
            keys.join(", ")
        ),
    );
    let n: Vec<u64> = got.split_whitespace().map(|w| w.parse().unwrap()).collect();
    assert_eq!(n.len(), 8, "{got}");
    [(n[0], n[1]), (n[2], n[3]), (n[4], n[5]), (n[6], n[7])]
}

/// Runs fixture `name` under valgrind and, preloaded with libdmem, to a core; runs `dmem leaks
/// --json` and then `extra` commands on the core; checks every class against valgrind's and
/// returns the session for the caller's own checks (None when a tool is missing).
fn compare(name: &str, bytes_too: bool, extra: &[&str]) -> Option<gdbrun::Session> {
    if !gdbrun::have_tool("valgrind") || !gdbrun::have_gdb() {
        return None;
    }
    let prog = fixture(name);
    let want = valgrind(&prog);
    let dir = scratch_dir(&format!("leak_classes_{name}"));
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib_path());
    let mut cmds = vec!["dmem leaks --json", "dmem leaks --show all --limit 0"];
    cmds.extend_from_slice(extra);
    let s = gdbrun::on_core(&dir, &prog, &core, &cmds);
    s.assert_no_traceback();
    let got = core_classes(&s, 0);
    eprintln!("{name}: valgrind {want:?}, core {got:?} (blocks, bytes per class)");
    for (k, (class, _)) in CLASSES.iter().enumerate() {
        assert_eq!(
            got[k].0,
            want[k].0,
            "{name}: blocks {class}: core {got:?}, valgrind {want:?}\n{}",
            s.out(1)
        );
        if bytes_too {
            assert_eq!(
                got[k].1,
                want[k].1,
                "{name}: bytes {class}: core {got:?}, valgrind {want:?}\n{}",
                s.out(1)
            );
        }
    }
    // The text gives the same four counts on its total line.
    let total = s
        .out(1)
        .lines()
        .find(|l| l.starts_with("total: "))
        .unwrap_or_else(|| panic!("no total line:\n{}", s.out(1)))
        .to_owned();
    for (k, (class, _)) in CLASSES.iter().enumerate() {
        let blocks = got[k].0;
        let want = format!(
            "{class} {} bytes in {blocks} block{}",
            got[k].1,
            if blocks == 1 { "" } else { "s" }
        );
        assert!(total.contains(&want), "{total} lacks {want:?}");
    }
    Some(s)
}

#[test]
fn lists_held_orphaned_and_the_last_orphan_under_glibc_top() {
    let Some(s) = compare("leakclass_lists", true, &["dmem why held->next"]) else {
        return;
    };
    assert!(
        s.out(2)
            .contains("is still reachable: start pointers lead to it from a root through 2 blocks"),
        "{}",
        s.out(2)
    );
    // glibc's main_arena was found and left out of the roots (its top points into the last
    // orphan), not scanned with a note.
    assert_eq!(
        gdbrun::json_query(
            s.out(0),
            "[x['what'].split(' (')[0] for x in d['roots']['excluded'] if 'arena' in x['what']]"
        ),
        "['main_arena of libc.so.6']"
    );
    assert_eq!(gdbrun::json_query(s.out(0), "d['notes']"), "[]");
}

#[test]
fn cycles_have_one_definitely_lost_block_each() {
    compare("leakclass_cycle", true, &[]);
}

#[test]
fn interior_pointers_make_blocks_possibly_lost() {
    let Some(s) = compare(
        "leakclass_interior",
        true,
        &["dmem why inside[3]", "dmem why --json *(void **)(inside[3] - 40)"],
    ) else {
        return;
    };
    let why = s.out(2);
    assert!(
        why.contains("is possibly lost: only a chain through an interior pointer leads to it"),
        "{why}"
    );
    assert!(why.contains(", 40 bytes into the first block"), "{why}");
    assert!(
        why.contains("(inside + 24 in .bss of leakclass_interior)"),
        "{why}"
    );
    assert_eq!(
        gdbrun::json_query(
            s.out(3),
            "(d['class'], len(d['chain']), d['root']['into'], d['chain'][1]['via_offset'])"
        ),
        "('possibly_lost', 2, 40, 0)"
    );
}

#[test]
fn another_threads_stack_keeps_its_blocks() {
    compare("leakclass_thread", false, &[]);
}

#[test]
fn thread_local_storage_keeps_its_blocks() {
    compare("leakclass_tls", false, &[]);
}

#[test]
fn cxx_vector_of_polymorphic_objects() {
    let Some(s) = compare("leakclass_cxx", true, &["dmem types --leaks --json"]) else {
        return;
    };
    // The 30 lost objects are Base and Derived, 15 of each; the vector and its buffer have no
    // vtable.
    assert_eq!(
        gdbrun::json_query(s.out(2), "sorted((t['type'], t['blocks']) for t in d['types'])"),
        "[('Base', 15), ('Derived', 15)]"
    );
}
