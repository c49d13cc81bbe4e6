//! Leak classes on real cores, against valgrind on the same binaries: for each leak fixture
//! (`c-fixtures/leakclass_*`), `valgrind --leak-check=full --show-leak-kinds=all` runs the bare program, the
//! same program runs under libdmem with `abort-shutdown` to leave a core, and `dmem leaks
//! --json` on that core must give valgrind's count of blocks in every class (and its bytes,
//! where the fixture makes no allocation inside libc whose size could differ under libdmem).

mod common;
#[path = "common/gdb.rs"]
mod gdbrun;
#[path = "common/valgrind.rs"]
mod valgrind;

use common::{fixture, lib_path, make_core, scratch_dir};
use valgrind::{Summary as Classes, CLASSES};

/// The JSON key of each class of `valgrind::CLASSES` in `dmem leaks --json`.
fn key(class: &str) -> String {
    class.replace(' ', "_")
}

/// `dmem leaks --json` on the core, as (blocks, bytes) per class.
fn core_classes(s: &gdbrun::Session, i: usize) -> Classes {
    let keys: Vec<String> = CLASSES.iter().map(|c| format!("'{}'", key(c))).collect();
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

/// Runs fixture `name` under valgrind (whose blocks per class must be the `intended` ones) and,
/// preloaded with libdmem, to a core; runs `dmem leaks --json` and then `extra` commands on the
/// core; checks every class against valgrind's and returns the session for the caller's own
/// checks (None when a tool is missing).
fn compare(name: &str, bytes_too: bool, intended: [u64; 4], extra: &[&str]) -> Option<gdbrun::Session> {
    if !gdbrun::have_tool("valgrind") || !gdbrun::have_gdb() {
        return None;
    }
    let prog = fixture(name);
    let want = valgrind::summary(&prog, &[]);
    // The fixture still builds the heap it describes, so the comparison cannot be vacuous.
    assert_eq!(want.map(|c| c.0), intended, "{name}: valgrind's blocks per class");
    let dir = scratch_dir(&format!("leak_classes_{name}"));
    let core = make_core(&dir, &prog, &[], "abort-shutdown", &lib_path());
    let mut cmds = vec!["dmem leaks --json", "dmem leaks --show all --limit 0"];
    cmds.extend_from_slice(extra);
    let s = gdbrun::on_core(&dir, &prog, &core, &cmds);
    s.assert_no_traceback();
    let got = core_classes(&s, 0);
    eprintln!("{name}: valgrind {want:?}, core {got:?} (blocks, bytes per class)");
    for (k, class) in CLASSES.iter().enumerate() {
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
    for (k, class) in CLASSES.iter().enumerate() {
        let blocks = got[k].0;
        let want = format!(
            "{class}: {} bytes in {blocks} block{}",
            got[k].1,
            if blocks == 1 { "" } else { "s" }
        );
        assert!(total.contains(&want), "{total} lacks {want:?}");
    }
    Some(s)
}

#[test]
fn lists_held_orphaned_and_the_last_orphan_under_glibc_top() {
    let Some(s) = compare(
        "leakclass_lists",
        true,
        [501, 999, 0, 1000],
        &["dmem why held->next"],
    ) else {
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

/// The dead frames below the program's last one (glibc's exit path, libdmem's own) are no
/// roots in the core of abort-shutdown either: the descriptor says where the program entered
/// the exit path.
#[test]
fn the_exit_paths_dead_words_keep_nothing_reachable() {
    compare("leakclass_exit", true, [1, 9, 0, 0], &[]);
}

/// The aborting thread's registers are libdmem's, whatever they hold: here one is made to point
/// 40 bytes into the lost list's head, as the exit report's own code may leave one, before gdb
/// writes the core at the abort.
#[test]
fn the_aborting_threads_registers_are_no_roots() {
    if !gdbrun::have_tool("valgrind") || !gdbrun::have_gdb() {
        return;
    }
    let prog = fixture("leakclass_exit");
    let want = valgrind::summary(&prog, &["register"]);
    assert_eq!(want.map(|c| c.0), [1, 9, 0, 0], "valgrind's blocks per class");
    let dir = scratch_dir("leak_classes_registers");
    let core = dir.join("core.registers");
    let out = common::output(
        std::process::Command::new("gdb")
            .args(["-batch", "-nx", "-q"])
            .arg("-ex")
            .arg(format!("set environment LD_PRELOAD={}", lib_path().display()))
            .args(["-ex", "set environment DMEM_OPTS=abort-shutdown", "-ex", "run"])
            // Stopped by the SIGABRT of abort-shutdown, in the thread that aborts.
            .args([
                "-ex",
                "set $r9 = ((*(unsigned long *) &hidden) ^ 0x5a5a5a5a5a5a5a5a) + 40",
            ])
            .args(["-ex", "printf \"r9 %#lx\\n\", $r9"])
            .arg("-ex")
            .arg(format!("gcore {}", core.display()))
            .args(["-ex", "kill", "--args"])
            .arg(&prog)
            .arg("register")
            .current_dir(&dir)
            .env_remove("LD_PRELOAD"),
    );
    let said = format!("{}{}", common::text(&out.stdout), common::text(&out.stderr));
    assert!(
        core.is_file() && said.contains("r9 0x"),
        "gdb wrote no core:\n{said}"
    );
    let s = gdbrun::on_core(&dir, &prog, &core, &["dmem leaks --json"]);
    s.assert_no_traceback();
    let got = core_classes(&s, 0);
    assert_eq!(
        got.map(|c| c.0),
        want.map(|c| c.0),
        "core {got:?}, valgrind {want:?}"
    );
}

#[test]
fn cycles_have_one_definitely_lost_block_each() {
    compare("leakclass_cycle", true, [2, 4, 0, 4], &[]);
}

#[test]
fn interior_pointers_make_blocks_possibly_lost() {
    let Some(s) = compare(
        "leakclass_interior",
        true,
        [0, 0, 20, 1],
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
    compare("leakclass_thread", false, [0, 0, 1, 300], &[]);
}

#[test]
fn thread_local_storage_keeps_its_blocks() {
    compare("leakclass_tls", false, [5, 0, 1, 5], &[]);
}

#[test]
fn cxx_vector_of_polymorphic_objects() {
    let Some(s) = compare(
        "leakclass_cxx",
        true,
        [1, 31, 0, 22],
        &["dmem types --leaks --json"],
    ) else {
        return;
    };
    // The 30 lost objects are Base and Derived, 15 of each; the vector and its buffer have no
    // vtable.
    assert_eq!(
        gdbrun::json_query(s.out(2), "sorted((t['type'], t['blocks']) for t in d['types'])"),
        "[('Base', 15), ('Derived', 15)]"
    );
}

#[test]
fn a_thread_that_blocks_every_signal_is_in_the_core_too() {
    compare("leakclass_blocked", false, [0, 0, 1, 50], &[]);
}

#[test]
fn heuristics_reach_the_same_blocks_from_the_core() {
    let Some(s) = compare(
        "leakclass_heuristics",
        true,
        [0, 0, 2, 22],
        &[
            "dmem leaks --json --heuristics none",
            "dmem leaks --json --heuristics stdstring,length64",
        ],
    ) else {
        return;
    };
    // Blocks reached through each heuristic, as valgrind counts them on the same program.
    assert_eq!(
        gdbrun::json_query(
            s.out(0),
            "sorted((k, v['blocks']) for k, v in d['reachable_via_heuristic'].items())"
        ),
        "[('length64', 6), ('multipleinheritance', 5), ('newarray', 3), ('stdstring', 4)]"
    );
    // Without heuristics the 18 blocks are possibly lost; with two of them, only those reach.
    assert_eq!(core_classes(&s, 2).map(|c| c.0), [0, 0, 20, 4]);
    assert_eq!(core_classes(&s, 3).map(|c| c.0), [0, 0, 10, 14]);
}

/// The free history's rings, libdmem's own memory mapped away from its data, are no roots in a
/// core either.
#[test]
fn the_free_history_keeps_nothing_reachable_in_a_core() {
    if !gdbrun::have_tool("valgrind") || !gdbrun::have_gdb() {
        return;
    }
    let prog = fixture("leakclass_lists");
    let want = valgrind::summary(&prog, &[]);
    let dir = scratch_dir("leak_classes_history_core");
    let core = make_core(
        &dir,
        &prog,
        &[],
        "abort-shutdown,history=4096,history-allocs",
        &lib_path(),
    );
    let s = gdbrun::on_core(&dir, &prog, &core, &["dmem leaks --json"]);
    s.assert_no_traceback();
    assert_eq!(core_classes(&s, 0), want);
}
