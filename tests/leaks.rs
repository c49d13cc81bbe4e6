//! Leak finding on real core files: `dmem leaks`, `types`, `words` and `why` on fixtures whose
//! answer is known, and the exit report (`leak-report`) of the very run that left the core,
//! which must agree with `dmem leaks` stack by stack. One run with
//! `leak-report,abort-shutdown` gives both.

mod common;
#[path = "common/gdb.rs"]
mod gdbrun;

use common::{fixture, lib_path, make_core, make_core_with, scratch_dir};
use gdbrun::{json_query, Session};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// XORed into the fixtures' hidden pointers, so a scan does not see them.
const HIDE: &str = "0x5a5a5a5a5a5a5a5a";

/// `dmem leaks`' option for every lost class, which the exit reports here list.
const LOST: &str = "--show-leak-kinds=definite,indirect,possible";

/// Runs fixture `name` preloaded with the exit report and abort-shutdown; returns the scratch
/// directory, the core and the report.
fn core_and_report(test: &str, name: &str) -> (PathBuf, PathBuf, String) {
    let dir = scratch_dir(test);
    let report = dir.join("report.txt");
    // Every lost class listed, as `dmem leaks` lists them with `LOST` (by default it lists
    // valgrind's default, definitely and possibly lost).
    let opts = format!(
        "leak-report,abort-shutdown,show-leak-kinds=definite,indirect,possible,report-file={}",
        report.display()
    );
    let core = make_core(&dir, &fixture(name), &[], &opts, &lib_path());
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no exit report at {}: {e}", report.display()));
    (dir, core, text)
}

fn gdb(dir: &Path, name: &str, core: &Path, cmds: &[&str], env: &[(&str, &str)]) -> Session {
    let s = gdbrun::run(dir, &fixture(name), Some(core), &[], cmds, env);
    s.assert_no_traceback();
    s
}

/// Every decimal number in `line`, in order (hexadecimal ones are skipped).
fn numbers(line: &str) -> Vec<u64> {
    line.split(|c: char| !c.is_ascii_alphanumeric())
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// Leak totals: blocks, definitely lost, indirectly lost, bytes (of those), blocks not lost
/// (still reachable or possibly lost), bytes not lost. Possibly lost blocks count with the
/// reachable ones so that a gdb side without that class compares too; tests/leak_classes_exit.rs
/// checks the four classes apart against valgrind.
type Totals = [u64; 6];

/// One stack's leaks: blocks, definitely lost, indirectly lost, bytes, example address (the
/// lowest of them).
type Group = (u64, u64, u64, u64, String);

const CLASSES: [&str; 4] = [
    "definitely lost",
    "indirectly lost",
    "possibly lost",
    "still reachable",
];

/// The exit report: its totals and its definitely and indirectly lost blocks grouped by the
/// stack's return addresses. The report lists each class of a stack as a record of its own;
/// they are added up here per stack, as `dmem leaks` gives them.
fn parse_report(text: &str) -> (Totals, BTreeMap<String, Group>) {
    let mut lines = text.lines();
    let head = lines.next().expect("report header");
    let class = |name: &str| {
        let part = head
            .split(&format!("{name}: "))
            .nth(1)
            .unwrap_or_else(|| panic!("unexpected report header: {text}"));
        let n = numbers(part.split(';').next().unwrap());
        (n[1], n[0])
    };
    let [def, ind, pos, reach] = CLASSES.map(class);
    let totals = [
        def.0 + ind.0,
        def.0,
        ind.0,
        def.1 + ind.1,
        pos.0 + reach.0,
        pos.1 + reach.1,
    ];
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    // The record being read: class index, blocks, bytes, example; and its frames.
    type Record = ((usize, u64, u64, String), Vec<String>);
    let mut add = |record: Option<Record>| {
        let Some(((class, blocks, bytes, example), pcs)) = record else {
            return;
        };
        if class > 1 {
            return;
        }
        let g = groups
            .entry(pcs.join(","))
            .or_insert_with(|| (0, 0, 0, 0, example.clone()));
        g.0 += blocks;
        if class == 0 {
            g.1 += blocks;
        } else {
            g.2 += blocks;
        }
        g.3 += bytes;
        let addr = |a: &str| u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap();
        if addr(&example) < addr(&g.4) {
            g.4 = example;
        }
    };
    let mut current: Option<Record> = None;
    for line in lines {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix('#') {
            let pc = rest.split_whitespace().nth(1).expect("frame address");
            current
                .as_mut()
                .expect("frame before a record")
                .1
                .push(pc.to_owned());
        } else if let Some(class) = CLASSES.iter().position(|c| t.contains(&format!(" {c}, e.g. "))) {
            add(current.take());
            let n = numbers(t.split(" e.g.").next().unwrap());
            let example = t
                .split("e.g. ")
                .nth(1)
                .expect("example")
                .split(',')
                .next()
                .unwrap();
            current = Some(((class, n[1], n[0], example.to_owned()), Vec::new()));
        }
    }
    add(current);
    (totals, groups)
}

/// The same from `dmem leaks --json --limit 0`, from its classes' keys (`definitely_lost`:
/// {blocks, bytes}, ...).
fn parse_leaks_json(json: &str) -> (Totals, BTreeMap<String, Group>) {
    let t = json_query(
        json,
        "' '.join(str(x) for x in (lambda c: (c('definitely_lost', 'blocks') + \
         c('indirectly_lost', 'blocks'), c('definitely_lost', 'blocks'), \
         c('indirectly_lost', 'blocks'), c('definitely_lost', 'bytes') + \
         c('indirectly_lost', 'bytes'), c('possibly_lost', 'blocks') + \
         c('still_reachable', 'blocks'), c('possibly_lost', 'bytes') + \
         c('still_reachable', 'bytes')))(lambda k, f: d[k][f]))",
    );
    let t = numbers(&t);
    let groups = json_query(
        json,
        "'\\n'.join('%s %d %d %d %d %s' % (','.join(f['pc'] for f in s['stack']), s['blocks'], \
         s['definitely_lost']['blocks'], s['indirectly_lost']['blocks'], s['bytes'], \
         s['example']) for s in d['stacks'])",
    );
    let mut out = BTreeMap::new();
    for line in groups.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split(' ').collect();
        let n: Vec<u64> = f[1..5].iter().map(|x| x.parse().unwrap()).collect();
        out.insert(f[0].to_owned(), (n[0], n[1], n[2], n[3], f[5].to_owned()));
    }
    (t.try_into().expect("six totals"), out)
}

#[test]
fn list_fixture_exact_counts_agreeing_with_the_exit_report() {
    if !gdbrun::have_gdb() {
        return;
    }
    let (dir, core, report) = core_and_report("leaks_list", "leak_list");
    let (want_totals, want_groups) = parse_report(&report);
    // Ground truth: a held 1000-node list, an orphaned one, 500 orphaned 24-byte blocks.
    assert_eq!(
        want_totals,
        [1500, 501, 999, 28000, 1000, 16000],
        "exit report:\n{report}"
    );

    let s = gdb(
        &dir,
        "leak_list",
        &core,
        &[
            &format!("dmem leaks --json --limit 0 {LOST}"),
            &format!("dmem leaks {LOST}"),
        ],
        &[],
    );
    let (totals, groups) = parse_leaks_json(s.out(0));
    assert_eq!(totals, want_totals, "dmem leaks:\n{}", s.out(1));
    assert_eq!(
        groups,
        want_groups,
        "dmem leaks and the exit report differ:\n{}\n{report}",
        s.out(1)
    );
    let text = s.out(1);
    assert!(
        text.contains(
            "total: definitely lost: 12016 bytes in 501 blocks; indirectly lost: 15984 bytes \
             in 999 blocks; possibly lost: 0 bytes in 0 blocks; still reachable: 16000 bytes in \
             1000 blocks"
        ),
        "{text}"
    );
    assert!(
        text.contains("stack 1: 16000 bytes in 1000 blocks (1 definitely lost, 999 indirectly lost)"),
        "{text}"
    );
    assert!(
        text.contains("stack 2: 12000 bytes in 500 blocks (500 definitely lost)"),
        "{text}"
    );
    assert!(text.contains("make_orphan_list"), "{text}");
    assert!(!text.contains("warning"), "{text}");

    // The launcher, without gdb: the same answer.
    let out = common::output(
        common::dmem()
            .arg("leaks")
            .arg(fixture("leak_list"))
            .arg(&core)
            .args(["--json", "--limit", "0", LOST]),
    );
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    assert_eq!(
        parse_leaks_json(&common::text(&out.stdout)),
        (totals, groups.clone())
    );
}

/// A thread stopped inside malloc after its new block is linked holds that block by libdmem's
/// header alone: the backend (`libslow_free.so`) waits for good in the free of blocks another
/// thread handed back, which libdmem makes right after linking. The allocation in progress is
/// the thread's, as memcheck (which has no header) counts it: the block is still reachable at
/// exit and from the core. Before, both called it definitely lost.
#[test]
fn a_block_linked_by_an_allocation_still_in_progress_is_reachable() {
    let dir = scratch_dir("leaks_inflight");
    let report = dir.join("report.txt");
    let opts = format!(
        "leak-report,abort-shutdown,leak-show=all,report-file={}",
        report.display()
    );
    let backend = fixture("libslow_free.so");
    let prog = fixture("leakclass_inflight");
    let core = make_core_with(&dir, &prog, &[], &opts, &lib_path(), &[("LD_PRELOAD", &backend)]);
    let text = std::fs::read_to_string(&report).expect("the exit report");
    let (totals, _) = parse_report(&text);
    assert_eq!(totals[0], 0, "nothing lost at exit:\n{text}");
    assert!(
        text.contains("77 bytes in 1 block is still reachable"),
        "the block in progress is reachable at exit:\n{text}"
    );

    let out = common::output(
        common::dmem()
            .arg("leaks")
            .arg(&prog)
            .arg(&core)
            .args(["--show", "all"]),
    );
    let got = common::text(&out.stdout);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    assert!(
        got.contains("77 bytes in 1 block (1 still reachable)"),
        "the block in progress is reachable in the core:\n{got}"
    );
    assert!(got.contains("definitely lost: 0 bytes in 0 blocks"), "{got}");
    let addr = got
        .lines()
        .find(|l| l.contains("77 bytes in 1 block"))
        .and_then(|l| l.split("e.g. ").nth(1))
        .and_then(|r| r.split(',').next())
        .expect("the block's address")
        .to_owned();
    let why = common::output(common::dmem().arg("why").arg(&prog).arg(&core).arg(&addr));
    let why = common::text(&why.stdout);
    assert!(
        why.contains("malloc in progress, which holds the block by its header"),
        "{why}"
    );
}

#[test]
fn why_names_the_root_and_the_chain() {
    if !gdbrun::have_gdb() {
        return;
    }
    let (dir, core, _) = core_and_report("leaks_why", "leak_list");
    let third = "held->next->next";
    let cmds = [
        format!("dmem why {third}"),
        format!("dmem why --json {third}"),
        format!("dmem why orphan_head_x ^ {HIDE}"),
        format!("dmem why orphan_middle_x ^ {HIDE}"),
        format!("dmem why --json orphan_middle_x ^ {HIDE}"),
        format!("dmem why orphan_single_x ^ {HIDE}"),
        "dmem why &held".to_owned(),
        "dmem why".to_owned(),
    ];
    let cmds: Vec<&str> = cmds.iter().map(String::as_str).collect();
    let s = gdb(&dir, "leak_list", &core, &cmds, &[]);

    let out = s.out(0);
    assert!(
        out.contains("is still reachable: start pointers lead to it from a root through 3 blocks:"),
        "{out}"
    );
    assert!(
        out.contains("(held in .bss of leak_list), in the writable data of leak_list"),
        "{out}"
    );
    assert_eq!(out.matches("  -> 0x").count(), 3, "{out}");
    assert_eq!(out.matches("at offset 0 of the block above").count(), 2, "{out}");
    assert!(out.contains("make_list"), "{out}");
    let j = s.out(1);
    assert_eq!(
        json_query(j, "(d['class'], d['root']['kind'], len(d['chain']))"),
        "('still_reachable', 'data', 3)"
    );

    assert!(s.out(2).contains("is definitely lost"), "{}", s.out(2));
    let out = s.out(3);
    assert!(
        out.contains("is indirectly lost: only lost blocks point to it"),
        "{out}"
    );
    // The middle of the orphaned list hangs 500 nodes below its head, the direct leak.
    let j = s.out(4);
    assert_eq!(
        json_query(j, "(d['class'], len(d['chain']))"),
        "('indirectly_lost', 501)"
    );
    assert!(s.out(5).contains("is definitely lost"), "{}", s.out(5));
    assert!(s.out(6).contains("not inside any live block"), "{}", s.out(6));
    assert!(s.stderr.contains("an address is needed"), "{}", s.stderr);
}

#[test]
fn cxx_types_and_member_histogram() {
    if !gdbrun::have_gdb() {
        return;
    }
    let (dir, core, report) = core_and_report("leaks_cxx", "leak_cxx");
    let leaks = format!("dmem leaks --json --limit 0 {LOST}");
    let cmds = [
        leaks.as_str(),
        "dmem types --leaks --json",
        "dmem types --json",
        "dmem words --vtable A --offset 8 --type u64 --json",
        "dmem words --leaks --limit 3",
        "dmem types --leaks",
        "dmem words --vtable A --offset 8 --type u64",
        "dmem words --vtable Z --offset 8",
    ];
    let s = gdb(&dir, "leak_cxx", &core, &cmds, &[]);

    let (totals, groups) = parse_leaks_json(s.out(0));
    let (want_totals, want_groups) = parse_report(&report);
    assert_eq!(totals, want_totals, "exit report:\n{report}");
    assert_eq!(
        groups, want_groups,
        "dmem leaks and the exit report differ:\n{report}"
    );
    assert_eq!(&totals[..4], &[100000, 100000, 0, 1600000]);

    let types = |i: usize| json_query(s.out(i), "[(t['type'], t['blocks']) for t in d['types']]");
    assert_eq!(types(1), "[('A', 100000)]");
    assert_eq!(types(2), "[('A', 100000), ('B', 10), ('shop::Basket', 5)]");
    assert_eq!(
        json_query(s.out(3), "[(v['value'], v['count']) for v in d['values']]"),
        "[('0x1', 60000), ('0x2', 30000), ('0x3', 10000)]"
    );
    let words = s.out(4);
    let top = words.lines().nth(2).unwrap_or_default();
    assert!(
        top.starts_with("      100000  0x") && top.contains("vtable for A + 16"),
        "{words}"
    );
    assert!(
        s.out(5).contains("      100000        1600000  A\n"),
        "{}",
        s.out(5)
    );
    assert!(s.out(5).contains("    make_a+0x"), "{}", s.out(5));
    assert!(
        s.out(6).contains("       60000  0x0000000000000001  (1)"),
        "{}",
        s.out(6)
    );
    assert!(
        s.stderr.contains("no live block has the vtable of 'Z'"),
        "{}",
        s.stderr
    );
}

#[test]
fn other_threads_stacks_and_tls_are_roots() {
    if !gdbrun::have_gdb() {
        return;
    }
    let (dir, core, _) = core_and_report("leaks_threads", "leak_threads");
    let cmds = [
        format!("dmem why on_worker_stack_x ^ {HIDE}"),
        format!("dmem why in_tls_x ^ {HIDE}"),
    ];
    let cmds: Vec<&str> = cmds.iter().map(String::as_str).collect();
    let s = gdb(&dir, "leak_threads", &core, &cmds, &[]);
    let (worker, tls) = (s.out(0), s.out(1));
    assert!(
        worker.contains("is still reachable") && worker.contains("in the stack of thread"),
        "{worker}"
    );
    assert!(
        tls.contains("is still reachable") && tls.contains("in the TLS of thread"),
        "{tls}"
    );
}

#[test]
fn live_process_at_exit() {
    if !gdbrun::have_gdb() {
        return;
    }
    let dir = scratch_dir("leaks_live");
    let setup = gdbrun::stop_at_exit(Some(&lib_path()), "");
    let s = gdbrun::run(
        &dir,
        &fixture("leak_list"),
        None,
        &setup,
        &["dmem leaks --json"],
        &[],
    );
    s.assert_no_traceback();
    let (totals, _) = parse_leaks_json(s.out(0));
    assert_eq!(totals, [1500, 501, 999, 28000, 1000, 16000], "{}", s.stdout);
}
