//! The edge cases leak checkers' own regression suites probe, each against valgrind on the same
//! binary: at exit (`leak-report`), from an abort-shutdown core (`dmem leaks PROG CORE`) and,
//! where the program can wait, from the running process (`dmem leaks PID`). Where a case is about
//! the program itself (memory it made unreadable), it must also run exactly as bare.

mod common;
#[path = "common/live.rs"]
mod live;
use common::run;
#[path = "common/valgrind.rs"]
mod valgrind;

use common::{dmem, fixture, have_tool, lib_path, make_core, scratch_dir};
use run::{bare, run_limited, status_text, with_dmem, LIMIT};
use serde_json::Value;
use valgrind::{report_summary, Summary, CLASSES};

/// The exit report's summary of `name args`, after checking that the preloaded run printed
/// what the bare one did and ended the same way.
fn at_exit(name: &str, args: &[&str], test: &str) -> Summary {
    let dir = scratch_dir(test);
    let file = dir.join("report.txt");
    let prog = fixture(name);
    let plain = run_limited(&mut bare(&prog, args), LIMIT);
    let opts = format!("leak-report,report-file={}", file.display());
    let out = run_limited(&mut with_dmem(&prog, args, &opts, None), LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        status_text(&out.status),
        status_text(&plain.status),
        "{name} {args:?} preloaded with leak-report ends otherwise than bare:\n{stderr}"
    );
    assert_eq!(out.stdout, plain.stdout, "{name} {args:?}: its output changed");
    let report = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{name}: no report at {}: {e}\n{stderr}", file.display()));
    report_summary(&report)
}

/// (blocks, bytes) per class from `dmem leaks ... --json`.
fn json_summary(json: &[u8], what: &str) -> Summary {
    let v: Value = serde_json::from_slice(json)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {}", String::from_utf8_lossy(json)));
    CLASSES.map(|c| {
        let k = &v[c.replace(' ', "_")];
        (k["blocks"].as_u64().unwrap(), k["bytes"].as_u64().unwrap())
    })
}

/// The classes `dmem leaks` finds in an abort-shutdown core of `name args`.
fn from_core(name: &str, args: &[&str], test: &str) -> Summary {
    let dir = scratch_dir(test);
    let prog = fixture(name);
    let core = make_core(&dir, &prog, args, "abort-shutdown", &lib_path());
    let out = run_limited(dmem().arg("leaks").arg(&prog).arg(&core).arg("--json"), LIMIT);
    assert!(
        out.status.success(),
        "dmem leaks on the core of {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_summary(&out.stdout, name)
}

/// The classes `dmem leaks PID` finds in `name args`, running preloaded until it says "ready".
fn live(name: &str, args: &[&str]) -> Summary {
    let target = live::start(name, args);
    let out = run_limited(dmem().args(["leaks", &target.pid.to_string(), "--json"]), LIMIT);
    assert!(
        out.status.success(),
        "dmem leaks on the running {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_summary(&out.stdout, name)
}

/// valgrind's summary of the bare program, whose blocks per class must be `intended`, so that a
/// fixture that no longer builds its heap cannot make the comparison vacuous.
fn oracle(name: &str, args: &[&str], intended: [u64; 4]) -> Summary {
    let want = valgrind::summary(&fixture(name), args);
    assert_eq!(
        want.map(|c| c.0),
        intended,
        "{name} {args:?}: valgrind's blocks per class"
    );
    want
}

/// Compares per class: blocks always, bytes but in the classes of `libc_bytes`, which hold glibc's
/// block for a thread's dtv (16 bytes larger under libdmem, whose own TLS adds a module).
fn assert_same(what: &str, got: Summary, want: Summary, libc_bytes: &[&str]) {
    for (k, class) in CLASSES.iter().enumerate() {
        let same = got[k].0 == want[k].0 && (got[k].1 == want[k].1 || libc_bytes.contains(class));
        assert!(
            same,
            "{what}: {class}: dmem {:?}, valgrind {:?} (blocks, bytes); all classes {CLASSES:?}: dmem {got:?}, valgrind {want:?}",
            got[k], want[k]
        );
    }
}

/// Runs fixture `name` under valgrind (which must find the `intended` blocks per class), then
/// compares at exit, from an abort-shutdown core and, with the argument `ready`, running.
fn compare_everywhere(name: &str, intended: [u64; 4], libc_bytes: &[&str]) {
    let want = oracle(name, &[], intended);
    let test = format!("leak_edges_{name}");
    let exit = at_exit(name, &[], &test);
    assert_same(&format!("{name} at exit"), exit, want, libc_bytes);
    let core = from_core(name, &[], &format!("{test}_core"));
    assert_same(&format!("{name} from a core"), core, want, libc_bytes);
    let running = live(name, &["ready"]);
    assert_same(&format!("{name} running"), running, want, libc_bytes);
}

const DTV: &[&str] = &["possibly lost"];

/// Memory the program made unreadable: a private file mapping whose file it truncated (SIGBUS),
/// a page of its .bss and of a mapping made PROT_NONE, and a 10 MiB block with a PROT_NONE
/// page inside. The exit report reads around them without faulting, and the program ends as
/// bare; the block is still classified (not "overwritten"), and nothing unreadable is a root.
#[test]
fn memory_the_program_made_unreadable() {
    if !have_tool("valgrind") {
        return;
    }
    compare_everywhere("leakedge_unreadable", [4, 0, 0, 4], &[]);
}

/// A block whose only pointer lies below a waiting thread's stack pointer, in a frame that has
/// returned, is definitely lost: the window for the thread's TLS at the top of its stack must
/// not reach down into its dead frames.
#[test]
fn dead_frames_are_no_root() {
    if !have_tool("valgrind") {
        return;
    }
    compare_everywhere("leakedge_deadframe", [1, 0, 1, 1], DTV);
}

/// A thread that has ended unjoined: its dead frames are no root, its descriptor (which holds
/// its dtv) is.
#[test]
fn an_ended_threads_descriptor_is_a_root() {
    if !have_tool("valgrind") {
        return;
    }
    compare_everywhere("leakedge_ended", [8, 0, 1, 0], DTV);
}

/// A coroutine on a malloc'ed stack calls exit(): the heap above its stack pointer is no
/// stack, and the blocks it dropped are lost. At exit, and running, waiting on that stack.
#[test]
fn a_stack_in_the_heap_is_a_block() {
    if !have_tool("valgrind") {
        return;
    }
    // The core is the case that once lost the block: abort-shutdown clears the dead frames
    // below its exit path, and on a 64 KiB heap stack a blind 64 KiB clearing reached the
    // block's own header. It now stops at the block's first byte.
    let name = "leakedge_coroutine";
    let want = oracle(name, &[], [5, 0, 0, 3]);
    let exit = at_exit(name, &[], "leak_edges_coroutine");
    assert_same(&format!("{name} at exit"), exit, want, &[]);
    let core = from_core(name, &[], "leak_edges_coroutine_core");
    assert_same(&format!("{name} from the core"), core, want, &[]);
    let running = live(name, &["ready"]);
    assert_same(&format!("{name} running"), running, want, &[]);
}

/// A header whose page the program made inaccessible: free faults reading it, as glibc's free
/// faults bare reading its own chunk header there. The run ends by the same signal as bare, and
/// with the exit report's handler in place the fault is named in one line: where it was, inside
/// which entry point, and the header it worked on.
#[test]
fn a_header_the_program_made_unreadable_is_named_when_free_faults_on_it() {
    let prog = fixture("header_protnone");
    let mut plain_cmd = bare(&prog, &[]);
    let plain = run_limited(run::no_cores(&mut plain_cmd), LIMIT);
    let mut cmd = with_dmem(&prog, &[], "leak-report", None);
    let out = run_limited(run::no_cores(&mut cmd), LIMIT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status_text(&out.status), status_text(&plain.status), "{err}");
    let block = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            l.strip_prefix("block 0x")
                .map(|a| u64::from_str_radix(a.trim(), 16).unwrap())
        })
        .unwrap_or_else(|| panic!("no block line:\n{err}"));
    let header = format!("{:#x}", block - 112);
    let line = err
        .lines()
        .find(|l| l.starts_with("dmem: SIGSEGV at 0x"))
        .unwrap_or_else(|| panic!("the fault is not named:\n{err}"));
    assert!(
        line.contains(&format!("inside free, working on the header at {header}")),
        "{line}"
    );
}
